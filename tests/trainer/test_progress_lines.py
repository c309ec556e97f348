"""Training whose output is not a terminal prints one plain line per log interval and per
epoch (a log file or CI stays readable); nothing when progress is off (queue workers)."""

from __future__ import annotations

import re

import pytest

from synattn_shared.progress import eta
from synattn_trainer.progress_lines import epoch_line, update_line
from synattn_trainer.train import Trainer
from tests.trainer.conftest import tiny_config


def test_lines_state_update_loss_lr_speed_and_time_left() -> None:
    rec = {"update": 200, "loss": 4.8123, "lr": 5e-4, "tokens_per_s": 2104.4}
    assert update_line(rec, 3500, 100, 50.0) == (
        "update 200/3,500 (5.7%) | loss 4.812 | lr 5.00e-04 | 2,104 tok/s | ETA 0:27:30"
    )
    assert eta(10, 0.0) == "?"  # no update done yet: no rate
    assert epoch_line({"epoch": 3, "update": 381, "valid_loss": 5.6291, "valid_ppl": 786.79,
                       "valid_loss_masked": 5.4}) == (
        "epoch 3 | update 381 | valid loss 5.629 | ppl 786.8 | masked 5.400"
    )  # fmt: skip


@pytest.mark.parametrize("progress", [True, False])
def test_training_off_a_terminal_prints_a_line_per_log_interval(
    progress: bool,
    m30k,
    tmp_path,
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    cfg = tiny_config(m30k, train={"max_updates": 4, "log_every": 2})
    Trainer(cfg, tmp_path, progress=progress).train()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(("update ", "epoch "))]
    if not progress:
        assert lines == []
        return
    updates = [line for line in lines if line.startswith("update ")]
    assert [line.split()[1] for line in updates] == ["1/4", "2/4", "4/4"]
    assert all(re.search(r"\| loss \d+\.\d{3} \| lr .+ tok/s \| ETA \d+:\d\d:\d\d$", line)
               for line in updates)  # fmt: skip
    assert any(line.startswith("epoch ") and "valid loss" in line for line in lines)
    assert "\r" not in err
