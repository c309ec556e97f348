"""The final model of a run (docs/papers/index.md, "Checkpoint averaging"): averaged checkpoints
only from the run's final window, refused configurations with a one-line reason, the last
checkpoint, the best on validation loss; and which updates went in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from synattn_trainer.checkpoint import RESUME_NAME, checkpoints, tie_like, update_of
from synattn_trainer.loading import load_model
from synattn_trainer.selection import averaging_error, last_in_window, schedule
from synattn_trainer.train import Trainer
from tests.trainer.conftest import tiny_config


def assert_tied_once(weights: dict[str, torch.Tensor], path: Path) -> None:
    """The tied source, target and output embedding is one tensor in a model-only file, and
    the file holds each parameter once (it carried the embedding twice)."""
    embed, tgt = weights["embed.weight"], weights["tgt_embed.weight"]
    assert embed.untyped_storage().data_ptr() == tgt.untyped_storage().data_ptr()
    unique = {v.untyped_storage().data_ptr(): v.untyped_storage().nbytes()
              for v in weights.values()}  # fmt: skip
    assert sum(unique.values()) < sum(v.numel() * v.element_size() for v in weights.values())
    assert path.stat().st_size < sum(unique.values()) + embed.numel() * embed.element_size() // 2


def test_schedule_and_window() -> None:
    assert schedule(14, 3) == [3, 6, 9, 12, 14]
    assert schedule(12, 3) == [3, 6, 9, 12]
    assert schedule(10, 41) == [10]  # an epoch longer than the run: the end alone
    assert last_in_window([3, 6, 9, 12, 14], 3, 14, 0.25) == [12, 14]  # 9 < 10.5
    assert last_in_window([500 * k for k in range(1, 17)], 5, 8000, 0.25) == [
        6000,
        6500,
        7000,
        7500,
        8000,
    ]


def test_averaging_that_reaches_back_is_refused_in_one_line() -> None:
    # the old m30k-tiny8: 600 updates, ~190 per epoch, last 5 epochs -> from update 190
    why = averaging_error(600, 190, 5, 0.25, unit="updates (once per epoch)")
    assert why is not None and "\n" not in why
    assert "starts at update 190" in why and "final 25% (update 450)" in why
    assert "save every 37 updates or less" in why
    assert averaging_error(600, 30, 5, 0.25) is None  # 480..600
    assert averaging_error(600, 190, 1, 0.25) is None  # one checkpoint: nothing averaged
    assert averaging_error(8000, 500, 5, 0.25) is None
    assert "save every" not in (averaging_error(10, 5, 3, 0.1) or "save every")


def test_the_config_refuses_a_window_it_cannot_meet(m30k: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match=r"starts at update 3, before its final 25%"):
        tiny_config(m30k, train={"max_updates": 14, "checkpoint_every_updates": 3,
                                 "average_last": 5})  # fmt: skip
    # the same with a single final model, or a wider stated window, is fine
    tiny_config(m30k, train={"max_updates": 14, "checkpoint_every_updates": 3,
                             "average_last": 5, "checkpoint_select": "last"})  # fmt: skip
    tiny_config(m30k, train={"max_updates": 14, "checkpoint_every_updates": 3,
                             "average_last": 5, "average_window": 0.8})  # fmt: skip


def test_the_trainer_refuses_per_epoch_averaging_into_warm_up(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    cfg = tiny_config(m30k, train={"max_updates": 400, "average_last": 10},
                      data={"max_tokens": 300})  # fmt: skip
    with pytest.raises(ValueError, match=r"once per epoch\) of a \d+-update run starts"):
        Trainer(cfg, tmp_path / "run", progress=False)


def test_averaged_updates_come_from_the_end_and_skip_resume_points(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    cfg = tiny_config(
        m30k,
        train={"max_updates": 14, "checkpoint_every_updates": 3, "average_last": 2, "seed": 3,
               "keep_checkpoints": 10},
        data={"max_tokens": 300},
    )  # fmt: skip
    first = Trainer(cfg, tmp_path / "run", progress=False)
    assert first.train(stop_after_updates=13).stopped == "interrupted"
    assert (tmp_path / "run" / "checkpoints" / RESUME_NAME).is_file()  # update 13: unscheduled
    result = Trainer(cfg, tmp_path / "run", progress=False).train()
    saved = [update_of(p) for p in checkpoints(tmp_path / "run" / "checkpoints")]
    assert 13 not in saved and saved[-3:] == [9, 12, 14]
    # the stop at update 13 wrote a resume point, not a checkpoint that could be averaged
    assert result.selection == "average" and result.averaged_updates == [12, 14]
    assert result.averaged is not None
    state = torch.load(result.averaged, weights_only=False)
    assert state["updates"] == [12, 14] and state["selection"] == "average"
    a, b = (torch.load(tmp_path / "run" / "checkpoints" / f"ckpt-{u:08d}.pt",
                       weights_only=False)["model"] for u in (12, 14))  # fmt: skip
    for key in (k for k, v in a.items() if v.is_floating_point()):
        assert torch.equal(state["model"][key], ((a[key].double() + b[key].double()) / 2).float())
    assert_tied_once(state["model"], result.averaged)
    end = [line for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
           if '"event": "end"' in line]  # fmt: skip
    assert '"averaged_updates": [12, 14]' in end[-1]


def test_last_and_best_validation_selection(m30k: dict[str, Path], tmp_path: Path) -> None:
    base = {"max_updates": 12, "checkpoint_every_updates": 4, "seed": 5}
    last = tiny_config(m30k, train={**base, "checkpoint_select": "last"})
    res = Trainer(last, tmp_path / "last", progress=False).train()
    assert res.averaged is None and res.averaged_updates == [] and res.selection == "last"
    assert res.checkpoint is not None and update_of(res.checkpoint) == 12
    assert res.checkpoint_updates == {"last": 12}
    assert (res.best_checkpoint_valid_loss, res.best_checkpoint_update) == (None, None)
    best = tiny_config(m30k, train={**base, "checkpoint_select": "best_valid"})
    trainer = Trainer(best, tmp_path / "best", progress=False)
    res = trainer.train()
    assert res.averaged == tmp_path / "best" / "best.pt" and res.averaged_updates == []
    state = torch.load(res.averaged, weights_only=False)
    (chosen,) = state["updates"]
    losses = {}
    for path in checkpoints(tmp_path / "best" / "checkpoints"):
        model, _ = load_model(path)
        trainer.model.load_state_dict(model.state_dict())
        losses[update_of(path)] = trainer.validate()["valid_loss"]
    assert chosen == min(losses, key=lambda u: losses[u])
    assert res.checkpoint_updates == {"best_valid": chosen}
    logged = [json.loads(line) for line in (tmp_path / "best" / "metrics.jsonl").open()]
    saves = [r for r in logged if r["event"] == "checkpoint"]
    assert [r["update"] for r in saves] == sorted(losses)  # each checkpoint validated once
    assert [r["update"] for r in saves if r["best_valid"]][-1] == chosen
    assert min(saves, key=lambda r: r["valid_loss"])["update"] == chosen
    assert res.best_checkpoint_update == chosen
    assert_tied_once(state["model"], res.averaged)
    model, _ = load_model(res.averaged)
    ref, _ = load_model(tmp_path / "best" / "checkpoints" / f"ckpt-{chosen:08d}.pt")
    for k, v in model.state_dict().items():
        assert torch.equal(v, ref.state_dict()[k]), k


def test_the_result_names_best_pts_checkpoint_beside_the_best_epoch_end(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """``best_valid_loss`` is the lowest validation loss at an epoch's end (what patience
    compares); ``best.pt`` is chosen among the checkpoints, validated every K updates. The
    result names both: the best checkpoint's loss and update are the ``checkpoint`` event
    with the lowest loss, and ``best.pt``'s update, also when best_valid is an extra
    selection beside an average."""
    cfg = tiny_config(
        m30k,
        train={"max_updates": 12, "checkpoint_every_updates": 3, "average_last": 2, "seed": 7,
               "keep_checkpoints": 10, "extra_selections": ["best_valid"]},
        data={"max_tokens": 6000},  # 5 updates an epoch: epochs end at 5 and 10, and 12
    )  # fmt: skip
    res = Trainer(cfg, tmp_path / "run", progress=False).train()
    assert res.selection == "average"
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    saves = [r for r in logged if r["event"] == "checkpoint"]
    best = min((r for r in saves if r["best_valid"]), key=lambda r: r["valid_loss"])
    assert best == min(saves, key=lambda r: r["valid_loss"])
    assert res.best_checkpoint_valid_loss == best["valid_loss"]
    assert res.best_checkpoint_update == best["update"] == res.checkpoint_updates["best_valid"]
    (at,) = torch.load(tmp_path / "run" / "best.pt", weights_only=False)["updates"]
    assert at == res.best_checkpoint_update
    epochs = [r for r in logged if r["event"] == "epoch"]
    assert len(epochs) > 1 and any(r["update"] % 3 for r in epochs)  # ends between checkpoints
    # patience counts an epoch better only by more than 1e-6
    assert res.best_valid_loss == pytest.approx(min(r["valid_loss"] for r in epochs), abs=1e-6)


def test_tie_like_shares_only_what_the_template_shares() -> None:
    shared = torch.arange(6.0).reshape(2, 3)
    template = {"a": shared, "b": shared, "c": shared.clone(), "d": shared.t()}
    copies = {k: v.clone() for k, v in template.items()}
    tied = tie_like(copies, template)
    assert tied["b"] is tied["a"]  # one tensor in the template: one in the copy
    assert tied["c"] is copies["c"] and tied["d"] is copies["d"]  # equal values, own storage
    copies["b"] = copies["b"] + 1  # values that differ are never tied
    assert tie_like(copies, template)["b"] is copies["b"]
