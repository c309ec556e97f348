"""bench/learning_curve.py on a fresh checkout: points written, checkpoints gone (build/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import bench_script
from tests.trainer.conftest import tiny_config


def _point(update: int) -> dict[str, float]:
    return {"update": update, "valid_bleu": 1.0 + update / 1000, "test_bleu": 1.0}


def test_points_without_a_checkpoint_stop_the_run_unless_it_restarts(
    m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A curve whose checkpoints are gone (a fresh checkout) would train from update 0 again
    and append a second copy of every point: the command stops with a one-line reason that
    names ``--restart``; with it the old records move to ``previous/``, no longer drawn, and
    the curve starts again from one trajectory."""
    lc = bench_script("learning_curve")
    monkeypatch.setattr(lc, "REPO", tmp_path)
    raw = tiny_config(m30k).model_dump(mode="json")
    raw["data"]["test"] = str(m30k["valid"])
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    results = tmp_path / "curve"
    results.mkdir()
    old = {"points": [_point(500), _point(1000)], "system": "vanilla", "seed": 7}
    (results / "vanilla-s7.json").write_text(json.dumps(old), encoding="utf-8")
    (results / "vanilla-s7-avg.json").write_text(json.dumps({"points": []}), encoding="utf-8")
    args = ["learning_curve.py", "--config", str(config), "--seed", "7", "--home",
            str(tmp_path / "home"), "--results", str(results), "--every", "2",
            "--max-updates", "2", "--patience", "1"]  # fmt: skip

    import synattn_trainer.train as train_module

    def no_trainer(*_: object, **__: object) -> None:
        raise AssertionError("the stop comes before the Trainer loads the corpora")

    monkeypatch.setattr(sys, "argv", args)
    with monkeypatch.context() as m:
        m.setattr(train_module, "Trainer", no_trainer)
        with pytest.raises(SystemExit) as stop:
            lc.main()
    assert "points up to update 1000" in str(stop.value)
    assert "--restart" in str(stop.value)
    assert json.loads((results / "vanilla-s7.json").read_text()) == old  # nothing written

    monkeypatch.setattr(sys, "argv", [*args, "--restart"])
    lc.main()
    kept = results / "previous"
    assert json.loads((kept / "vanilla-s7.1.json").read_text()) == old
    assert (kept / "vanilla-s7.1-avg.json").is_file()
    fresh = json.loads((results / "vanilla-s7.json").read_text())
    assert [p["update"] for p in fresh["points"]] == [2]
    assert fresh["stopped"] == "max_updates"
    # the restarted curve now has its checkpoints: a re-run resumes instead of stopping
    monkeypatch.setattr(sys, "argv", args)
    lc.main()
    again = json.loads((results / "vanilla-s7.json").read_text())
    assert [p["update"] for p in again["points"]] == [2]


def test_set_aside_keeps_every_earlier_curve(tmp_path: Path) -> None:
    """A second restart keeps the first set-aside curve: each gets the next free number, and
    another system's curve stays where it is."""
    lc = bench_script("learning_curve")
    assert lc.resume_gap(tmp_path / "x-s1.json", [], resumed=False) is None
    assert lc.resume_gap(tmp_path / "x-s1.json", [_point(500)], resumed=True) is None
    other = tmp_path / "y-s1.json"
    other.write_text("{}", encoding="utf-8")
    for n in (1, 2):
        (tmp_path / "x-s1.json").write_text(json.dumps({"n": n}), encoding="utf-8")
        moved = lc.set_aside(tmp_path, "x-s1")
        assert moved == [tmp_path / "previous" / f"x-s1.{n}.json"]
        assert json.loads(moved[0].read_text()) == {"n": n}
    assert not (tmp_path / "x-s1.json").exists() and other.is_file()
