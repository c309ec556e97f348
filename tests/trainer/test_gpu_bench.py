"""bench/gpu/gpu.py, the GPU speed and MFU benchmark: its arithmetic, and a real (CPU, tiny) run of
its measuring code, so the script is known to work before a GPU is lent to run it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import bench_script


@pytest.fixture(scope="module")
def gpu() -> ModuleType:
    return bench_script("gpu")


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.4),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L4", 121.0),
        ("Tesla T4", None),
    ],
)
def test_the_bf16_peak_of_known_devices(gpu: ModuleType, name: str, peak: float | None) -> None:
    assert gpu.peak_tflops(name) == peak


def test_mfu_is_achieved_flops_over_the_peak(gpu: ModuleType) -> None:
    # 100k tokens/s at 3.6 GFLOP per token is 360 TFLOP/s: 36.4% of an H100's 989.4
    assert gpu.mfu(100_000, 3.6e9, 989.4) == pytest.approx(0.3639, abs=1e-4)
    assert gpu.mfu(100_000, 3.6e9, None) is None
    assert gpu.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_a_run_times_every_preset_and_counts_vanillas_flops(
    gpu: ModuleType,
    m30k: dict[str, Path],
) -> None:
    import torch

    d, vocab = 32, 600
    base = {
        "data": {"train": str(m30k["train"]), "valid": str(m30k["valid"]),
                 "tokenizer": str(m30k["tokenizer"])},
        "model": {"enc_layers": 2, "dec_layers": 2, "d_model": d, "d_ff": 64, "heads": 8},
        "optim": {"lr": 1e-4, "warmup": 100},
        "train": {"precision": "auto", "compile": False},
    }  # fmt: skip
    report = gpu.run(base, ["lpea", "vanilla"], torch.device("cpu"), warmup=1, updates=2,
                     repeats=1, max_tokens=512, peak=1.0, loader_workers=[0, 1],
                     warm_rounds=1)  # fmt: skip
    ahead = {r["variant"]: r for r in report["variants"] if r["loader_workers"] == 1}
    rows = {r["variant"]: r for r in report["variants"] if r["loader_workers"] == 0}
    assert list(rows) == list(ahead) == ["vanilla", "lpea"]
    assert report["loader_workers"] == [0, 1]
    # the warm round is run and reported, and counts in no median
    assert report["warm_rounds"] == 1
    assert all(len(r["warm_repeats"]) == 1 and len(r["repeats"]) == 1 for r in rows.values())
    assert ahead["lpea"]["x_inline"] > 0 and "x_inline" not in rows["lpea"]
    assert set(report["vanilla_by_loader_workers"]) == {"0", "1"}
    best = report["vanilla_loader_workers"]
    assert report["vanilla_tokens_per_s"] == max(
        v["tokens_per_s"] for v in report["vanilla_by_loader_workers"].values()
    )
    rows = {r["variant"]: r for r in report["variants"] if r["loader_workers"] == best}
    assert rows["vanilla"]["x_vanilla"] == 1.0 and rows["vanilla"]["tokens_per_s"] > 0
    assert rows["lpea"]["kind"] == "bias" and isinstance(rows["lpea"]["meets_goal"], bool)
    # the counter sees the model's matmuls: at least the tied output projection's forward and
    # backward (6 d V) for every target token
    assert report["flops_per_target_token"] > 6 * d * vocab
    expected = report["vanilla_tokens_per_s"] * report["flops_per_target_token"] / 1e12
    assert report["vanilla_mfu"] == pytest.approx(expected)
    text = gpu.render(report)
    assert "lpea" in text and "MFU" in text


def test_a_compiled_run_compiles_each_preset_once(
    gpu: ModuleType, m30k: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``compile`` on, a preset keeps one trainer (one compiled forward) through every
    round, and its first measurement's wall time, compiling included, is reported. Traced with
    dynamo's ``eager`` backend here: inductor's code generation takes minutes on this CPU."""
    import torch

    from synattn_trainer import train

    compiled: list[object] = []
    original = train.compile_forward

    def eager_compile(net: torch.nn.Module) -> torch.nn.Module:
        compiled.append(net)
        return original(net, backend="eager")

    base = {
        "data": {"train": str(m30k["train"]), "valid": str(m30k["valid"]),
                 "tokenizer": str(m30k["tokenizer"])},
        "model": {"enc_layers": 1, "dec_layers": 1, "d_model": 32, "d_ff": 64, "heads": 8},
        "optim": {"lr": 1e-4, "warmup": 100},
        "train": {"precision": "auto", "compile": True},
    }  # fmt: skip
    monkeypatch.setattr(train, "compile_forward", eager_compile)
    report = gpu.run(base, ["dea", "vanilla"], torch.device("cpu"), warmup=1, updates=1,
                     repeats=2, max_tokens=256, peak=None, warm_rounds=1)  # fmt: skip
    rows = {r["variant"]: r for r in report["variants"]}
    assert all(len(r["warm_repeats"]) == 1 and len(r["repeats"]) == 2 for r in rows.values())
    # one trainer per preset for the three rounds, and the one that counts the parameters
    assert len(compiled) == 3
    assert all(r["first_measurement_s"] > 0 for r in rows.values())
    assert report["compile"] is True


def test_the_gpu_kit_carries_the_first_whole_shards_as_a_dataset(tmp_path: Path) -> None:
    """bench/gpu/gpu_kit.py's training subset is a shard directory the reader takes as it is: the
    first whole shards that hold the pairs asked for, listed by a manifest of their own."""
    from synattn_parser.batch import parse_corpus
    from synattn_shared.shards import ShardDataset

    kit = bench_script("gpu_kit")
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("".join(f"The {k}th dog chased a cat .\n" for k in range(25)))
    tgt.write_text("".join(f"Der {k}. Hund jagte eine Katze .\n" for k in range(25)))
    full = tmp_path / "train"
    parse_corpus(src, full, tgt=tgt, rows_per_shard=10)
    rows = list(ShardDataset(full).iter_rows(columns=["words", "tgt"]))
    for pairs, expected in ((12, 20), (1, 10), (10, 10), (1000, 25)):
        out = tmp_path / f"kit{pairs}"
        assert kit.trim_shards(full, out, pairs) == expected
        assert list(ShardDataset(out).iter_rows(columns=["words", "tgt"])) == rows[:expected]
        assert len(list(out.glob("*.parquet"))) == -(-expected // 10)
    with pytest.raises(SystemExit, match="not a complete parse"):
        kit.trim_shards(_incomplete(full, tmp_path / "partial"), tmp_path / "again", 5)


def _incomplete(full: Path, dest: Path) -> Path:
    import json
    import shutil

    shutil.copytree(full, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    (dest / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    return dest


def test_shards_that_are_not_a_parsed_folder_are_refused_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu" / "gpu.py"), "--device", "cpu", "--shards",
         str(tmp_path)], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        f"--shards {tmp_path}: no train/ and tokenizer.json (make data)"
    )


def test_the_profile_script_reports_an_updates_time_and_its_costliest_operators(
    m30k: dict[str, Path],
) -> None:
    """bench/gpu/gpu_profile.py on the CPU (no device time to report there), batches built
    ahead."""
    import torch

    from synattn_trainer.config import TrainConfig
    from synattn_trainer.presets import VARIANTS, merge

    prof = bench_script("gpu_profile")
    base = {
        "data": {"train": str(m30k["train"]), "valid": str(m30k["valid"]),
                 "tokenizer": str(m30k["tokenizer"])},
        "model": {"enc_layers": 1, "dec_layers": 1, "d_model": 32, "d_ff": 64, "heads": 4},
        "optim": {"lr": 1e-4, "warmup": 100},
    }  # fmt: skip
    cfg = TrainConfig.model_validate(merge(base, VARIANTS["dea"]))
    report = prof.profile_updates(cfg, torch.device("cpu"), warmup=1, updates=2,
                                  max_tokens=256, loader_workers=1, top=5)  # fmt: skip
    assert report["updates"] == 2 and report["target_tokens"] > 0
    assert report["wall_ms_per_update"] > 0 and report["device_busy_share"] is None
    assert len(report["by_host_time"]) == 5 and report["by_device_time"] == []
    assert report["by_host_time"][0]["self_host_ms"] >= report["by_host_time"][-1]["self_host_ms"]
    assert "dea (loader 1)" in prof.render("dea", report)


def test_the_devices_busy_time_counts_each_kernel_once() -> None:
    """A host operator's own device time repeats its kernels' time: only device-side events
    are summed (the first H100 profiles summed both and reported twice the busy share)."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    prof = bench_script("gpu_profile")
    events = [
        SimpleNamespace(device_type=DeviceType.CPU, self_device_time_total=700.0),  # aten::mm
        SimpleNamespace(device_type=DeviceType.CUDA, self_device_time_total=500.0),  # its kernel
        SimpleNamespace(device_type=DeviceType.CUDA, self_device_time_total=200.0),  # its kernel
        SimpleNamespace(device_type=DeviceType.CPU, self_device_time_total=0.0),  # a launch
    ]
    assert prof.device_busy_us(events) == 700.0
