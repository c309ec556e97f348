"""The allocator a training worker starts with (synattn_jobs.allocator) leaves the arithmetic
alone: a run trains to the same bits under glibc and under it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from synattn_jobs.allocator import CHOSEN_BY_USER, training_env
from tests.trainer.conftest import tiny_config

CHILD = """
import hashlib, sys, torch
from synattn_trainer.config import TrainConfig
from synattn_trainer.train import Trainer
cfg = TrainConfig.model_validate_json(open(sys.argv[1]).read())
trainer = Trainer(cfg, sys.argv[2], progress=False)
trainer.train()
h = hashlib.sha256()
for name, t in sorted(trainer.model.state_dict().items()):
    h.update(name.encode())
    h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
print(h.hexdigest())
"""


def test_a_run_trains_to_the_same_bits_under_the_workers_allocator(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    cfg = tiny_config(m30k, data={"max_tokens": 4096}, model={"d_model": 64, "d_ff": 128},
                      train={"max_updates": 3})  # fmt: skip
    spec = tmp_path / "config.json"
    spec.write_text(cfg.model_dump_json())
    plain = {k: v for k, v in os.environ.items() if k not in CHOSEN_BY_USER}
    plain.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    chosen = training_env(plain)
    if not chosen:
        pytest.skip("jemalloc is not installed here (apt install libjemalloc2)")
    digests = []
    for k, env in enumerate((plain, {**plain, **chosen})):
        out = subprocess.run([sys.executable, "-c", CHILD, str(spec), str(tmp_path / f"r{k}")],
                             env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        digests.append(out.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1]
