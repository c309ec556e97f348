"""synattn study curve on a fresh checkout: points written, checkpoints gone (build/)."""

from __future__ import annotations

import json
import shutil
import sys
from importlib import import_module
from pathlib import Path

import pytest
import yaml

from synattn_shared.manifest import sha256_file
from tests.trainer.conftest import tiny_config

REPO = Path(__file__).resolve().parents[2]


def _point(update: int) -> dict[str, float]:
    return {"update": update, "valid_bleu": 1.0 + update / 1000, "test_bleu": 1.0}


def test_points_without_a_checkpoint_stop_the_run_unless_it_restarts(
    m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A curve whose checkpoints are gone (a fresh checkout) would train from update 0 again
    and append a second copy of every point: the command stops with a one-line reason that
    names ``--restart``; with it the old records move to ``previous/``, no longer drawn, and
    the curve starts again from one trajectory."""
    lc = import_module("synattn_jobs.study.curve")
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


def test_a_converged_curve_is_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once a curve has met its patience, the command says so and exits without loading a
    corpus or touching the record (its handed-off state may have been removed since)."""
    lc = import_module("synattn_jobs.study.curve")
    results = tmp_path / "curve"
    results.mkdir()
    points = [_point(500), _point(1000), {"update": 1500, "valid_bleu": 0.5, "test_bleu": 1.0}]
    record = {"points": points, "stopped": "converged",
              "hand_off": {"update": 1000, "file": "state/vanilla-s1.pt"}}  # fmt: skip
    (results / "vanilla-s1.json").write_text(json.dumps(record), encoding="utf-8")
    before = (results / "vanilla-s1.json").read_text()

    import synattn_trainer.train as train_module

    def no_trainer(*_: object, **__: object) -> None:
        raise AssertionError("nothing to train: no corpus is loaded")

    monkeypatch.setattr(train_module, "Trainer", no_trainer)
    args = ["--results", str(results), "--home", str(tmp_path / "home"), "--patience", "1"]
    monkeypatch.setattr(sys, "argv", ["learning_curve.py", *args])
    lc.main()
    assert "vanilla-s1: converged at update 1500 (best validation BLEU at update 1000)" in (
        capsys.readouterr().out
    )
    assert (results / "vanilla-s1.json").read_text() == before


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--hand-off"], r"^--hand-off needs --hand-off-dir DIR"),
        (["--hand-off", "--hand-off-dir", str(REPO / "results" / "x")], "would be committed"),
        (["--hand-off-dir", str(REPO)], "would be committed"),
    ],
)
def test_a_hand_off_needs_a_directory_outside_git(
    extra: list[str], match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--hand-off`` needs ``--hand-off-dir``, and the directory may not be one git would
    commit (a checkpoint in git history is paid by every clone forever): a one-line reason,
    before anything is loaded or written."""
    lc = import_module("synattn_jobs.study.curve")
    results = tmp_path / "curve"
    monkeypatch.setattr(sys, "argv", ["learning_curve.py", "--results", str(results), "--home",
                                      str(tmp_path / "home"), *extra])  # fmt: skip
    with pytest.raises(SystemExit, match=match) as stop:
        lc.main()
    assert "\n" not in str(stop.value) and not results.exists()
    assert not (REPO / "results" / "x").exists()


def test_a_converged_curve_from_before_the_hand_off_dir_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The published curves handed off into ``results/learning-curve/state/`` (deleted once
    converged) keep loading: with or without a ``--hand-off-dir`` the command says the curve
    converged, and the plot is drawn from the record."""
    lc = import_module("synattn_jobs.study.curve")
    results = tmp_path / "curve"
    results.mkdir()
    points = [_point(500), _point(1000), {"update": 1500, "valid_bleu": 0.5, "test_bleu": 1.0}]
    record = {"points": points, "stopped": "converged",
              "hand_off": {"update": 1000, "file": "state/vanilla-s1.pt", "sha256": "0" * 64,
                           "checkpoint": "resume.pt"}}  # fmt: skip
    (results / "vanilla-s1.json").write_text(json.dumps(record), encoding="utf-8")
    base = ["learning_curve.py", "--results", str(results), "--home", str(tmp_path / "home"),
            "--patience", "1"]  # fmt: skip
    for extra in ([], ["--hand-off-dir", str(tmp_path / "handoff")]):
        monkeypatch.setattr(sys, "argv", [*base, *extra])
        lc.main()
        assert "vanilla-s1: converged at update 1500" in capsys.readouterr().out
    assert lc.handed_off_state(record["hand_off"], tmp_path / "handoff") is None
    monkeypatch.setattr(sys, "argv", [*base, "--plot-only"])
    lc.main()
    assert (results / "curve.png").is_file()


def test_set_aside_keeps_every_earlier_curve(tmp_path: Path) -> None:
    """A second restart keeps the first set-aside curve: each gets the next free number, and
    another system's curve stays where it is."""
    lc = import_module("synattn_jobs.study.curve")
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


def test_a_handed_off_state_continues_the_curve_exactly_on_a_fresh_checkout(
    m30k: dict[str, Path],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A curve longer than a session: ``--hand-off`` copies the newest checkpoint into the
    ``--hand-off-dir`` (never the results, which are committed) and writes its name and
    digests into the record; on a checkout without ``--home`` the same command with the same
    directory continues from it, and the points it then scores are those of a run never
    interrupted. Without the directory it stops and names the option."""
    lc = import_module("synattn_jobs.study.curve")
    monkeypatch.setattr(lc, "REPO", tmp_path)
    raw = tiny_config(m30k).model_dump(mode="json")
    raw["data"]["test"] = str(m30k["valid"])
    raw["train"]["average_last"] = 1  # the curve's points score single checkpoints
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")

    def command(results: Path, home: Path, *extra: str) -> list[str]:
        return ["learning_curve.py", "--config", str(config), "--seed", "3", "--home", str(home),
                "--results", str(results), "--every", "2", "--max-updates", "4",
                "--patience", "5", *extra]  # fmt: skip

    straight = tmp_path / "straight"
    monkeypatch.setattr(sys, "argv", command(straight, tmp_path / "home-straight"))
    lc.main()
    whole = json.loads((straight / "vanilla-s3.json").read_text())["points"]
    assert [p["update"] for p in whole] == [2, 4]

    results, home = tmp_path / "curve", tmp_path / "home"
    with monkeypatch.context() as m:  # the session ends after the first point
        m.setattr(lc, "converged", lambda points, patience: len(points) >= 1)
        m.setattr(sys, "argv", command(results, home))
        lc.main()
    hand_offs = tmp_path_factory.mktemp("handoff")  # outside the (monkeypatched) repository
    monkeypatch.setattr(sys, "argv", command(results, home, "--hand-off", "--hand-off-dir",
                                             str(hand_offs)))  # fmt: skip
    lc.main()
    record = json.loads((results / "vanilla-s3.json").read_text())
    entry = record["hand_off"]
    assert entry["update"] == 2 and entry["checkpoint"] == "resume.pt"  # saved at the stop
    assert entry["file"] == "vanilla-s3.pt"
    state = hand_offs / entry["file"]
    assert entry["bytes"] == state.stat().st_size and entry["sha256"] == sha256_file(state)
    assert not (results / "state").exists() and not list(results.rglob("*.pt"))
    assert "--hand-off" not in record["command"]  # the training command stays the record's
    assert [(s["from_update"], s["to_update"]) for s in record["segments"]] == [(0, 2)]

    shutil.rmtree(home)  # the next checkout: results committed, build/ gone
    monkeypatch.setattr(sys, "argv", command(results, home))
    with pytest.raises(SystemExit, match=r"handed off at update 2 as vanilla-s3\.pt; pass "
                                         "--hand-off-dir DIR"):  # fmt: skip
        lc.main()
    monkeypatch.setattr(sys, "argv", command(results, home, "--hand-off-dir", str(hand_offs)))
    capsys.readouterr()
    lc.main()
    said = capsys.readouterr().out
    assert "continuing from the state handed off at update 2" in said
    assert "note:" not in said  # the same machine: no other rounding to warn of
    record = json.loads((results / "vanilla-s3.json").read_text())
    assert [p["update"] for p in record["points"]] == [2, 4]
    timeless = ("train_s", "s_per_update", "eval_s")
    for got, want in zip(record["points"], whole, strict=True):
        assert {k: v for k, v in got.items() if k not in timeless} == {
            k: v for k, v in want.items() if k not in timeless
        }
    assert [s["from_update"] for s in record["segments"]] == [0, 2]
    assert "to_update" not in record["segments"][-1]


def test_a_continuation_on_other_kernels_is_named() -> None:
    """A state handed off by an AVX2 machine and continued on an AVX-512 one (as the vanilla
    curve was at update 8,000) trains the same recipe with other rounding: the restore says
    which setting changed (thread count, device and torch count too, the CPU's name does not)
    and, where it can, how to keep the earlier kernels."""
    lc = import_module("synattn_jobs.study.curve")
    before = {"cpu": "AMD EPYC", "cpu_isa": "AVX2", "device": "cpu", "threads_per_worker": 2,
              "torch": "2.13.0+cpu", "python": "3.11.7"}  # fmt: skip
    segments = [{"from_update": 0, "to_update": 8000, "hardware": before}]
    assert lc.rounding_change(segments, dict(before, cpu="AMD EPYC 9004", python="3.11.9")) is None
    assert lc.rounding_change(segments, dict(before, cpu_isa="AVX512")) == "cpu_isa AVX2 -> AVX512"
    both = lc.rounding_change(segments, dict(before, threads_per_worker=1, device="NVIDIA H100"))
    assert both == "device cpu -> NVIDIA H100, threads_per_worker 2 -> 1"
    assert lc.rounding_change([], before) is None  # nothing handed off: nothing to compare
    # only a wider instruction set now: torch can be told to use the earlier kernels
    assert lc.kernel_hint(segments, dict(before, cpu_isa="AVX512")) == "ATEN_CPU_CAPABILITY=avx2"
    assert lc.kernel_hint(segments, before) is None
    narrower = [{"hardware": dict(before, cpu_isa="AVX512")}]
    assert lc.kernel_hint(narrower, before) is None  # AVX-512 kernels cannot run on AVX2
    assert lc.kernel_hint(segments, dict(before, cpu_isa="AVX512", threads_per_worker=1)) is None


def test_the_recorded_command_keeps_the_kernel_choice() -> None:
    """A curve continued with ``ATEN_CPU_CAPABILITY=avx2`` records it in its command, so the
    stretch can be run again on the same kernels; other variables stay out."""
    lc = import_module("synattn_jobs.study.curve")
    argv = ["--variant", "vanilla", "--seed", "1"]
    assert lc.launch_command(argv, {"HOME": "/root"}) == (
        "synattn study curve --variant vanilla --seed 1"
    )
    env = {"ATEN_CPU_CAPABILITY": "avx2", "PATH": "/bin", "MKL_CBWR": ""}
    assert lc.launch_command(argv, env) == (
        "ATEN_CPU_CAPABILITY=avx2 synattn study curve --variant vanilla --seed 1"
    )


def test_a_handed_off_state_that_does_not_match_is_refused(
    m30k: dict[str, Path],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The next checkout continues only from the very file handed off, with the recipe and the
    training ids it was trained on, and never from before the curve's last point: otherwise a
    one-line reason, and nothing is trained or written."""
    lc = import_module("synattn_jobs.study.curve")
    monkeypatch.setattr(lc, "REPO", tmp_path)
    raw = tiny_config(m30k).model_dump(mode="json")
    raw["data"]["test"] = str(m30k["valid"])
    raw["train"]["average_last"] = 1
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    results, home = tmp_path / "curve", tmp_path / "home"
    hand_offs = tmp_path_factory.mktemp("handoff")
    args = ["learning_curve.py", "--config", str(config), "--seed", "5", "--home", str(home),
            "--results", str(results), "--hand-off-dir", str(hand_offs), "--every", "2",
            "--max-updates", "2"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", args)
    lc.main()
    with pytest.raises(SystemExit, match="another configuration"):
        monkeypatch.setattr(sys, "argv", [*args[:-2], "--max-updates", "4", "--hand-off"])
        lc.main()
    monkeypatch.setattr(sys, "argv", [*args, "--hand-off"])
    lc.main()
    shutil.rmtree(home)
    record_path = results / "vanilla-s5.json"
    before = record_path.read_text()

    def refused(match: str, argv: list[str]) -> None:
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit, match=match):
            lc.main()
        assert record_path.read_text() == before and not home.joinpath("checkpoints").exists()

    refused("configuration differs", [*args[:-2], "--max-updates", "4"])
    with monkeypatch.context() as m:
        m.setattr(lc, "corpus_digest", lambda tok, corpus: "other ids")
        refused("training data or vocabulary differs", args)
    state = hand_offs / "vanilla-s5.pt"
    good = state.read_bytes()
    state.write_bytes(good + b"\0")
    refused("SHA-256", args)
    state.write_bytes(good)
    record = json.loads(before)
    record["points"].append({**record["points"][-1], "update": 4})
    record_path.write_text(json.dumps(record), encoding="utf-8")
    before = record_path.read_text()
    refused("before the curve's last point", args)
    state.unlink()
    refused("state is missing", args)
    outside = (("file", "../vanilla-s5.json", "lies in"),
               ("checkpoint", "../../escape.pt", "not a checkpoint name"))  # fmt: skip
    good_record = before
    for key, value, match in outside:
        record = json.loads(good_record)
        record["hand_off"][key] = value
        record_path.write_text(json.dumps(record), encoding="utf-8")
        before = record_path.read_text()
        refused(match, args)


def test_averages_come_from_the_final_quarter_and_skip_points_missing_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each point averages the last 5 checkpoints in its final quarter; after a hand-off the
    ones before it are not kept, and those points stay unaveraged instead of averaging fewer.
    The handed-off state itself (verified) stands in for the checkpoint at its update."""
    lc = import_module("synattn_jobs.study.curve")
    assert lc.average_window(1000, 500) == [1000]
    assert lc.average_window(2000, 500) == [1500, 2000]
    assert lc.average_window(10_000, 500) == [8000, 8500, 9000, 9500, 10_000]
    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    for update in (9500, 10_000):
        (ckpts / f"ckpt-{update:08d}.pt").write_bytes(b"")
    points = [{"update": 10_000}]
    lc.rescore_averages(None, None, points, tmp_path / "run", 500)  # no model is loaded
    assert points == [{"update": 10_000}]
    assert "checkpoints [8000, 8500, 9000] are not kept" in capsys.readouterr().out
    # a handed-off state holds the weights of the checkpoint at its update: it stands in
    state = tmp_path / "state.pt"
    assert lc.kept_checkpoints(tmp_path / "run", (8000, state)) == {
        8000: state,
        9500: ckpts / "ckpt-00009500.pt",
        10_000: ckpts / "ckpt-00010000.pt",
    }
    (ckpts / "ckpt-00008000.pt").write_bytes(b"")  # a checkpoint of its own wins
    assert lc.kept_checkpoints(tmp_path / "run", (8000, state))[8000] == ckpts / "ckpt-00008000.pt"
    # only the state handed off stands in: inside the --hand-off-dir, its digest as recorded
    hand_offs = tmp_path / "handoff"
    hand_offs.mkdir()
    good = hand_offs / "v.pt"
    good.write_bytes(b"w")
    entry = {"update": 8000, "file": "v.pt", "sha256": sha256_file(good)}
    assert lc.handed_off_state(entry, hand_offs) == (8000, good)
    assert lc.handed_off_state(None, hand_offs) is None
    assert lc.handed_off_state(entry, None) is None  # no --hand-off-dir given
    assert lc.handed_off_state({**entry, "sha256": "0" * 64}, hand_offs) is None
    (tmp_path / "v.pt").write_bytes(b"w")
    assert lc.handed_off_state({**entry, "file": "../v.pt"}, hand_offs) is None
    assert lc.handed_off_state({**entry, "file": str(tmp_path / "v.pt")}, hand_offs) is None
    # a record from before the --hand-off-dir (its state under results/, since deleted)
    old = {"update": 8000, "file": "state/v.pt", "sha256": entry["sha256"]}
    assert lc.handed_off_state(old, hand_offs) is None
    assert lc.kept_checkpoints(tmp_path / "run", (8000, state))[8000] == ckpts / "ckpt-00008000.pt"
