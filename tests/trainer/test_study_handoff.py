"""synattn_jobs.study.handoff: a study's unfinished run carried from one checkout to the next,
through a directory the user names (``--hand-off-dir``), never through git."""

from __future__ import annotations

import json
import shutil
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import torch

from synattn_trainer.checkpoint import checkpoints, update_of
from synattn_trainer.train import Trainer
from tests.trainer.conftest import tiny_config

REPO = Path(__file__).resolve().parents[2]

STRETCH = {"wall_s": 12.5, "command": "synattn study run x.yaml", "git_commit": "abc",
           "hardware": {"cpu_isa": "AVX2", "device": "cpu", "threads_per_worker": 1,
                        "torch": torch.__version__},
           "kernel_env": {"ATEN_CPU_CAPABILITY": "avx2"}}  # fmt: skip


def _config(m30k: dict[str, Path]) -> Any:
    return tiny_config(
        m30k,
        train={"max_updates": 14, "checkpoint_every_updates": 3, "average_last": 2, "seed": 3,
               "keep_checkpoints": 10, "extra_selections": ["best_valid", "last"]},
        data={"max_tokens": 300},
    )  # fmt: skip


def _one_run_queue(
    cfg: Any, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Any, Any]:
    """A study queue (the store the driver reads, through ``SYNATTN_DATABASE_URL``) holding
    one run, ``name`` (``variant-sN``), of ``cfg``: the store, its experiment and the job."""
    from synattn_jobs.store import JobStore

    db = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    monkeypatch.setenv("SYNATTN_DATABASE_URL", db)
    store = JobStore(db)
    exp = store.create_experiment("hof", "vanilla", {"seeds": [1]})
    job = store.create_job("train", name, {"resolved": cfg.model_dump(mode="json")},
                           str(tmp_path / "runs" / name), experiment_id=exp.id,
                           variant=name.split("-")[0], seed=1)  # fmt: skip
    return store, exp, job


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return dict(torch.load(path, map_location="cpu", weights_only=False)["model"])


def test_a_handed_off_run_finishes_bit_for_bit_as_the_uninterrupted_one(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """Stopped at update 13 in one checkout, handed off, and restored into another checkout's
    empty run directory, the run ends with the very weights, averaged model and
    best-validation model of a run that was never stopped. The hand-off holds the resume
    state in full, but only the weights of the one checkpoint the final average can still
    take (update 12: the last quarter of 14 updates starts at 10.5), and the log."""
    hof = import_module("synattn_jobs.study.handoff")
    cfg = _config(m30k)
    whole = Trainer(cfg, tmp_path / "whole", progress=False).train()

    first = tmp_path / "checkout1" / "run"
    assert Trainer(cfg, first, progress=False).train(stop_after_updates=13).stopped == (
        "interrupted"
    )
    out = tmp_path / "handoff" / "study"  # <--hand-off-dir>/<study>
    resolved = cfg.model_dump(mode="json")
    record = hof.hand_off("vanilla-s1", first, out, "d1", resolved, STRETCH)
    assert record["update"] == 13
    moved = {f["to"]: f for f in record["files"]}
    assert set(moved) == {"checkpoints/resume.pt", "checkpoints/ckpt-00000012.pt", "best.pt",
                          "metrics.jsonl", "config.json"}  # fmt: skip
    twelve = torch.load(out / moved["checkpoints/ckpt-00000012.pt"]["file"], weights_only=False)
    assert set(twelve) == {"model", "update"}  # weights alone: no optimiser state
    assert record["segments"] == [{"from_update": 0, "to_update": 13, **STRETCH}]
    on_disk = json.loads((out / "vanilla-s1.json").read_text())
    assert on_disk == record
    assert {f["file"] for f in record["files"]} == {
        f"vanilla-s1/{target.replace('/', '__')}" for target in moved
    }

    second = tmp_path / "checkout2" / "run"  # the next checkout: build/ is gone
    shutil.rmtree(tmp_path / "checkout1")
    assert hof.problem(record, out, "d1") is None
    assert hof.restore(record, out, second)
    assert not hof.restore(record, out, second)  # already there: nothing copied again
    done = Trainer(cfg, second, progress=False).train()
    assert done.update == whole.update == 14
    assert done.averaged_updates == whole.averaged_updates == [12, 14]
    for a, b in ((whole.averaged, done.averaged), (whole.checkpoint, done.checkpoint),
                 (tmp_path / "whole" / "best.pt", second / "best.pt")):  # fmt: skip
        assert a is not None and b is not None
        wa, wb = _weights(a), _weights(b)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert [update_of(p) for p in checkpoints(second / "checkpoints")][-2:] == [12, 14]


def test_a_hand_off_that_does_not_check_out_is_refused_with_its_reason(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """The record is a file anyone can edit, and a hand-off of another configuration would
    silently train something else: each fault is named, and nothing is restored."""
    hof = import_module("synattn_jobs.study.handoff")
    cfg = _config(m30k)
    run = tmp_path / "run"
    Trainer(cfg, run, progress=False).train(stop_after_updates=4)
    out = tmp_path / "results"
    record = hof.hand_off("rp-s2", run, out, "d1", cfg.model_dump(mode="json"), STRETCH)
    assert record["update"] == 4 and len(record["files"]) == 4  # no checkpoint in the window
    assert "another configuration" in hof.problem(record, out, "d2")
    outside = json.loads(json.dumps(record))
    outside["files"][0]["file"] = "../../etc/passwd"
    assert "lies outside" in hof.problem(outside, out, "d1")
    bad_name = json.loads(json.dumps(record))
    bad_name["files"][0]["to"] = "../../escape.pt"
    assert "not a file the trainer writes" in hof.problem(bad_name, out, "d1")
    state = out / record["files"][0]["file"]
    state.write_bytes(state.read_bytes() + b"x")
    assert "SHA-256 differs" in hof.problem(record, out, "d1")
    state.unlink()
    assert "is missing" in hof.problem(record, out, "d1")
    no_state = {**record, "files": [f for f in record["files"] if f["to"] == "metrics.jsonl"]}
    assert "no state to resume from" in hof.problem(no_state, out, "d1")


def test_handing_off_again_adds_a_stretch_and_a_published_run_forgets_its_hand_off(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """A run handed off twice records both stretches (the second from where the first
    ended); one that was restored and not trained keeps its hand-off as it was; once the
    finished run is published, its files leave the hand-off directory."""
    hof = import_module("synattn_jobs.study.handoff")
    cfg = _config(m30k)
    resolved = cfg.model_dump(mode="json")
    out = tmp_path / "handoff" / "study"
    one = tmp_path / "one"
    Trainer(cfg, one, progress=False).train(stop_after_updates=5)
    first = hof.hand_off("x-s1", one, out, "d", resolved, STRETCH)
    two = tmp_path / "two"
    hof.restore(first, out, two)
    assert hof.hand_off("x-s1", two, out, "d", resolved, {**STRETCH, "wall_s": 1}) == first
    Trainer(cfg, two, progress=False).train(stop_after_updates=8)
    second = hof.hand_off("x-s1", two, out, "d", resolved, {**STRETCH, "wall_s": 3.0})
    assert [(g["from_update"], g["to_update"], g["wall_s"]) for g in second["segments"]] == [
        (0, 5, 12.5), (5, 8, 3.0)]  # fmt: skip
    assert hof.rounding_change(second, {**STRETCH["hardware"], "kernel_env": {}}) == (
        "kernel_env {'ATEN_CPU_CAPABILITY': 'avx2'} -> {}"
    )
    same = {**STRETCH["hardware"], "kernel_env": STRETCH["kernel_env"]}
    assert hof.rounding_change(second, same) is None
    hof.forget(out, "x-s1")
    assert not out.exists() and (tmp_path / "handoff").is_dir()  # the user's directory stays


def test_an_empty_run_has_nothing_to_hand_off(tmp_path: Path) -> None:
    hof = import_module("synattn_jobs.study.handoff")
    (tmp_path / "run").mkdir()
    assert hof.hand_off("x-s1", tmp_path / "run", tmp_path / "out", "d", {}, STRETCH) is None
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("env", [{"ATEN_CPU_CAPABILITY": "avx2", "PATH": "/bin"}, {}])
def test_only_the_kernel_settings_are_recorded(env: dict[str, str]) -> None:
    hof = import_module("synattn_jobs.study.handoff")
    assert hof.kernel_env(env) == {k: v for k, v in env.items() if k != "PATH"}


def test_the_driver_hands_off_stopped_runs_and_the_next_queue_resumes_and_publishes_them(
    m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """synattn study run across two checkouts: the first queue's stopped run is handed off
    into the --hand-off-dir, the second queue (a fresh --home) restores it into its own run
    directory and puts it first; once it finishes, its record states both stretches and its
    wall time counts both, and the hand-off leaves the --hand-off-dir. No checkpoint ever
    lands in results/."""
    from synattn_jobs.store import JobStore

    repro = import_module("synattn_jobs.study.driver")
    monkeypatch.delenv("SYNATTN_DATABASE_URL", raising=False)
    cfg = _config(m30k)
    spec = {"resolved": cfg.model_dump(mode="json")}
    results = tmp_path / "results"
    hand_offs = tmp_path / "handoff"

    def queue(home: Path) -> tuple[JobStore, str, dict[str, Any]]:
        (home / "jobs").mkdir(parents=True)
        monkeypatch.setenv("SYNATTN_HOME", str(home / "jobs"))
        store = JobStore(f"sqlite:///{home / 'jobs' / 'jobs.sqlite'}")
        exp = store.create_experiment("hof", "vanilla", {"seeds": [1]})
        jobs = {name: store.create_job("train", name, spec, str(home / "runs" / name),
                                       experiment_id=exp.id, variant=name.split("-")[0],
                                       seed=1)
                for name in ("vanilla-s1", "dea-s1")}  # fmt: skip
        return store, exp.id, jobs

    store, exp_id, jobs = queue(tmp_path / "home1")
    store.claim(jobs["vanilla-s1"].id, "w", 60)
    Trainer(cfg, jobs["vanilla-s1"].out_dir, progress=False).train(stop_after_updates=7)
    store.release(jobs["vanilla-s1"].id, "w", "worker shut down; requeued")
    meta = {"command": "synattn study run g.yaml", "git_commit": "abc",
            "hardware": STRETCH["hardware"]}  # fmt: skip
    handed = repro.hand_off_stopped(exp_id, hand_offs, meta)
    assert len(handed) == 1 and handed[0].startswith("vanilla-s1@7 (")  # dea-s1 never trained
    record = json.loads((hand_offs / "hof" / "vanilla-s1.json").read_text())
    assert (hand_offs / "hof" / "vanilla-s1" / "checkpoints__resume.pt").is_file()
    assert record["segments"][0]["wall_s"] >= 0 and record["segments"][0]["to_update"] == 7
    assert record["segments"][0]["queue"] == exp_id

    store2, exp2, jobs2 = queue(tmp_path / "home2")
    now = {**STRETCH["hardware"], "kernel_env": {}}
    assert repro.restore_handed_off(exp2, hand_offs, now) == ["vanilla-s1"]
    run2 = Path(jobs2["vanilla-s1"].out_dir)
    assert (run2 / "checkpoints" / "resume.pt").is_file()
    repro.put_first(exp2, ["vanilla-s1"])
    done = Trainer(cfg, run2, progress=False).train()
    assert done.update == 14
    hyp = run2 / "hyp.test.txt"
    hyp.write_text("ein hund\n")
    (run2 / "ref.test.txt").write_text("ein hund\n")
    store2.claim(jobs2["vanilla-s1"].id, "w", 60)
    store2.finish(jobs2["vanilla-s1"].id, "succeeded",
                  {"bleu": 20.0, "chrf": 50.0, "split": "test", "update": 14, "hyp": str(hyp),
                   "ref": str(run2 / "ref.test.txt")})  # fmt: skip
    repro.publish(exp2, results, meta, {"workers": 1, "threads": 1}, hand_offs)
    ledger = json.loads((results / "hof" / "runs" / "vanilla-s1.json").read_text())
    assert ledger["segments"] == record["segments"] and ledger["queue"] == exp2
    assert ledger["earlier_wall_s"] == record["segments"][0]["wall_s"]  # another queue's stretch
    listed = {r["name"]: r for r in json.loads((results / "hof" / "run.json").read_text())["runs"]}
    finished = store2.get(jobs2["vanilla-s1"].id)
    assert finished is not None and finished.finished_at and finished.started_at
    own = finished.finished_at - finished.started_at
    assert listed["vanilla-s1"]["wall_s"] == round(own + ledger["earlier_wall_s"], 1)
    assert not (hand_offs / "hof").exists() and hand_offs.is_dir()
    assert not [p for p in results.rglob("*") if p.suffix == ".pt"]
    # published again without a --hand-off-dir: the ledger's own stretches count
    again = repro.write_ledger(finished, results / "hof", {"workers": 1, "threads": 1}, None, None)
    assert again["segments"] == record["segments"]
    assert again["earlier_wall_s"] == ledger["earlier_wall_s"]


def test_a_hand_off_resumed_on_its_own_queue_counts_its_first_stretch_once(
    m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver started again on the same queue (the same machine, a session's second
    driver) resumes the handed-off run in the queue it was claimed in: that queue's earlier
    claim already holds the first stretch, so the published wall is the run's claims alone,
    not the first stretch twice (rhe+lpea-s4 was published at 8,315 s for about 4,668)."""
    repro = import_module("synattn_jobs.study.driver")
    cfg = _config(m30k)
    store, exp, job = _one_run_queue(cfg, "vanilla-s1", tmp_path, monkeypatch)
    assert store.claim(job.id, "w", 60)
    Trainer(cfg, job.out_dir, progress=False).train(stop_after_updates=7)
    store.release(job.id, "w", "worker shut down; requeued")
    meta = {"command": "synattn study run g.yaml", "git_commit": "abc",
            "hardware": STRETCH["hardware"]}  # fmt: skip
    hand_offs = tmp_path / "handoff"
    assert repro.hand_off_stopped(exp.id, hand_offs, meta)[0].startswith("vanilla-s1@7 (")
    first = json.loads((hand_offs / "hof" / "vanilla-s1.json").read_text())["segments"]
    assert [g["queue"] for g in first] == [exp.id]
    # the second driver, same queue: its run directory is newer than nothing, so no restore
    assert repro.restore_handed_off(exp.id, hand_offs, {**STRETCH["hardware"]}) == []
    assert store.claim(job.id, "w2", 60)
    run = Path(job.out_dir)
    assert Trainer(cfg, run, progress=False).train().update == 14
    (run / "hyp.test.txt").write_text("ein hund\n")
    (run / "ref.test.txt").write_text("ein hund\n")
    store.finish(job.id, "succeeded",
                 {"bleu": 20.0, "chrf": 50.0, "split": "test", "update": 14,
                  "hyp": str(run / "hyp.test.txt"), "ref": str(run / "ref.test.txt")})  # fmt: skip
    results = tmp_path / "results"
    repro.publish(exp.id, results, meta, {"workers": 1, "threads": 1}, hand_offs)
    ledger = json.loads((results / "hof" / "runs" / "vanilla-s1.json").read_text())
    assert ledger["segments"] == first and ledger["queue"] == exp.id
    assert ledger["earlier_wall_s"] == 0.0
    finished = store.get(job.id)
    assert finished is not None and finished.earlier_claims_s  # the first claim, once
    listed = json.loads((results / "hof" / "run.json").read_text())["runs"][0]
    assert listed["wall_s"] == round(repro.claimed_s(finished, finished.finished_at), 1)


def test_only_the_stretches_of_other_queues_add_to_a_finished_runs_claims() -> None:
    hof = import_module("synattn_jobs.study.handoff")
    segments = [{"wall_s": 100.0, "queue": "a"}, {"wall_s": 40.0, "queue": "b"},
                {"wall_s": 7.5}]  # fmt: skip
    assert hof.handed_off_wall_s(segments, "b") == 107.5  # a's, and one without its queue
    assert hof.handed_off_wall_s(segments, "c") == 147.5
    assert hof.handed_off_wall_s(segments, None) == 147.5  # finishing queue unknown: all
    assert hof.handed_off_wall_s([], "a") == 0.0


def test_a_run_cancelled_to_free_its_worker_is_handed_off_and_waits_again_for_the_next_driver(
    m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``synattn cancel`` on a study run (its worker goes to a shorter run): the run saved
    where it stopped, a hand-off carries it to the next checkout, and a driver started again
    on the same queue puts it back to wait, to resume, instead of leaving the plan short."""
    repro = import_module("synattn_jobs.study.driver")
    cfg = _config(m30k)
    store, exp, job = _one_run_queue(cfg, "dea-s1", tmp_path, monkeypatch)
    assert store.claim(job.id, "w", 60)
    store.request_cancel(job.id)
    stopped = Trainer(cfg, job.out_dir, progress=False).train(
        should_stop=lambda: store.cancel_requested(job.id), stop_after_updates=3
    )
    assert stopped.update == 1 and stopped.stopped == "cancelled"  # at its next step
    assert store.finish(job.id, "cancelled", {})
    meta = {"command": "synattn study run g.yaml", "git_commit": "abc",
            "hardware": STRETCH["hardware"]}  # fmt: skip
    handed = repro.hand_off_stopped(exp.id, tmp_path / "handoff", meta)
    assert len(handed) == 1 and handed[0].startswith("dea-s1@1 (")
    assert repro.resume_cancelled(exp.id) == ["dea-s1"]
    again = store.get(job.id)
    assert again is not None and again.state == "queued" and not again.cancel_requested
    store.register_worker("w1", "train", 1)
    assert store.release_next("train", 0, 60, None) == [job.id]
    assert repro.resume_cancelled(exp.id) == []


def test_a_tampered_hand_off_stops_the_driver_instead_of_training_from_the_start(
    m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from synattn_jobs.store import JobStore

    hof = import_module("synattn_jobs.study.handoff")
    repro = import_module("synattn_jobs.study.driver")
    monkeypatch.delenv("SYNATTN_DATABASE_URL", raising=False)
    cfg = _config(m30k)
    spec = {"resolved": cfg.model_dump(mode="json")}
    old = tmp_path / "old"
    Trainer(cfg, old, progress=False).train(stop_after_updates=2)
    hand_offs = tmp_path / "handoff"
    record = hof.hand_off("vanilla-s1", old, hand_offs / "hof", repro.spec_digest(spec),
                          spec["resolved"], STRETCH)  # fmt: skip
    (hand_offs / "hof" / record["files"][0]["file"]).write_bytes(b"not a checkpoint")
    home = tmp_path / "home"
    (home / "jobs").mkdir(parents=True)
    monkeypatch.setenv("SYNATTN_HOME", str(home / "jobs"))
    store = JobStore(f"sqlite:///{home / 'jobs' / 'jobs.sqlite'}")
    exp = store.create_experiment("hof", "vanilla", {"seeds": [1]})
    store.create_job("train", "vanilla-s1", spec, str(home / "run"), experiment_id=exp.id,
                     variant="vanilla", seed=1)  # fmt: skip
    with pytest.raises(SystemExit, match=r"hand-off: vanilla-s1: .*SHA-256 differs"):
        repro.restore_handed_off(exp.id, hand_offs, {})
    assert not (home / "run").exists()


def test_the_hand_off_dir_lies_outside_git(tmp_path: Path) -> None:
    """A hand-off holds model checkpoints: a directory outside the repository, or one git
    ignores (build/), is taken; one inside the repository that git does not ignore would be
    committed, and a checkpoint in git history is paid by every clone forever."""
    hof = import_module("synattn_jobs.study.handoff")
    assert hof.checked_dir(tmp_path / "h", REPO) == (tmp_path / "h").resolve()
    assert hof.checked_dir(REPO / "build" / "handoff", REPO) == REPO / "build" / "handoff"
    for inside in (REPO / "results" / "handoff", REPO, REPO / "build" / ".." / "results"):
        with pytest.raises(SystemExit, match=r"--hand-off-dir .*would be committed"):
            hof.checked_dir(inside, REPO)
    assert not (REPO / "results" / "handoff").exists()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--hand-off-after", "9000"], r"^--hand-off-after needs --hand-off-dir DIR"),
        (["--hand-off"], r"^--hand-off needs --hand-off-dir DIR"),
        (["--hand-off", "--hand-off-dir", str(REPO / "results" / "x")], "would be committed"),
        (["--hand-off-after", "1", "--hand-off-dir", "results/x"], "would be committed"),
    ],
)
def test_the_driver_refuses_a_hand_off_without_a_directory_outside_git(
    argv: list[str], match: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--hand-off-after`` and ``--hand-off`` need ``--hand-off-dir``, outside git's reach:
    the driver stops with a one-line reason before it touches a queue."""
    repro = import_module("synattn_jobs.study.driver")
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "argv", ["reproduce.py", "x.yaml", "--home", str(tmp_path), *argv])
    monkeypatch.setattr(repro, "settings_env", lambda home: pytest.fail("went on"))
    with pytest.raises(SystemExit, match=match) as stop:
        repro.main()
    assert "\n" not in str(stop.value)
    assert repro.checked_hand_off_dir(None, False, None) is None  # publishing alone needs none
