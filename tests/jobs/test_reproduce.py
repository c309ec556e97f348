"""synattn study run --publish-only: what lands in results/<experiment>/ for finished runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml

from synattn_jobs.store import JobStore

REPO = Path(__file__).resolve().parents[2]
RESOLVED = {
    "model": {"enc_layers": 3, "dec_layers": 3, "d_model": 128, "d_ff": 512, "heads": 8},
    "train": {"max_updates": 600, "max_epochs": 100},
    "data": {"max_tokens": 2048},
    "optim": {"lr": 0.002, "warmup": 200},
}


def _publish_only(grid: Path, home: Path, results: Path) -> subprocess.CompletedProcess[str]:
    """``synattn study publish GRID`` on a queue under ``home``, from the project folder."""
    synattn = str(Path(sys.executable).with_name("synattn"))
    return subprocess.run(
        [synattn, "study", "publish", str(grid), "--home", str(home), "--results", str(results)],
        capture_output=True, text=True, timeout=300, env={**os.environ}, cwd=REPO,
    )  # fmt: skip


def test_publish_writes_reports_translations_and_provenance(tmp_path: Path) -> None:
    home, results = tmp_path / "home", tmp_path / "results"
    (home / "jobs").mkdir(parents=True)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "pub", "config": "c.yaml", "variants":
                                    ["vanilla", "dea"], "seeds": [1, 2, 3]}))  # fmt: skip
    store = JobStore(f"sqlite:///{home / 'jobs' / 'jobs.sqlite'}")
    exp = store.create_experiment("pub", "vanilla", {"seeds": [1, 2, 3]})
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(f"ein hund läuft über die wiese {i}\n" for i in range(30)))
    for variant, shift in (("vanilla", 0.0), ("dea", 0.5)):
        for seed in (1, 2, 3):
            hyp = tmp_path / f"hyp-{variant}-{seed}.test.txt"
            # dea translates every sentence right, vanilla only the first of every three
            right = [variant == "dea" or i % 3 == 0 for i in range(30)]
            hyp.write_text("".join(f"ein hund läuft über die wiese {i}\n" if ok else
                                   "eine katze\n" for i, ok in enumerate(right)))  # fmt: skip
            job = store.create_job("train", f"{variant}-s{seed}", {"resolved": RESOLVED},
                                   str(tmp_path), experiment_id=exp.id, variant=variant,
                                   seed=seed)  # fmt: skip
            store.claim(job.id, "w", 60)
            store.finish(job.id, "succeeded", {"bleu": 20.0 + shift + seed / 10, "chrf": 50.0,
                                               "hyp": str(hyp), "ref": str(ref), "split": "test",
                                               "update": 600})  # fmt: skip
    proc = _publish_only(grid, home, results)
    assert proc.returncode == 0, proc.stderr
    out = results / "pub"
    assert "6/6 runs published" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    dea = next(r for r in report["rows"] if r["variant"] == "dea")
    # +0.5 on every seed (the seed test's p is 0), and better outputs: the joint bootstrap on
    # the translations agrees, so the verdict is "better"
    assert dea["delta"] == 0.5 and dea["verdict"] == "better"
    assert dea["bootstrap"]["seeds"] == 3 and dea["bootstrap"]["ci95"][0] > 0
    run = json.loads((out / "run.json").read_text())
    assert run["command"].startswith("synattn study run") and len(run["runs"]) == 6
    assert run["budget"]["max_updates"] == 600 and "3+3 layers, d=128" in run["budget"]["model"]
    assert run["hardware"]["cpu_count"] and run["git_commit"][:7].isalnum()
    assert (out / "report.html").is_file()
    # publishing alone does not know which driver trained a run's last stretch
    assert run["provenance"]["commits"] == [] and run["provenance"]["not_recorded"] == {
        "runs": sorted(r["name"] for r in run["runs"]), "updates": 6 * 600}  # fmt: skip
    names = sorted(p.name for p in (out / "translations").iterdir())
    assert names == sorted([f"{v}-s{s}.test.txt" for v in ("vanilla", "dea") for s in (1, 2, 3)]
                           + ["ref.test.txt"])  # fmt: skip
    # publishing again keeps the provenance of the driver that trained the runs, and says who
    # republished; a run published without a driver has no concurrency on record
    trained = {**run, "command": "synattn study run grid.yaml --workers 2 --threads 1",
               "hardware": {**run["hardware"], "workers": 2}}  # fmt: skip
    (out / "run.json").write_text(json.dumps(trained))
    again = _publish_only(grid, home, results)
    assert again.returncode == 0, again.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["command"] == trained["command"] and run["hardware"]["workers"] == 2
    assert "--publish-only" in run["republished"]["command"]
    assert {r["trained_with"] for r in run["runs"]} == {None}

    # a claims file of one's own: the same table, verdict and detectable effect for "dea"
    mine = tmp_path / "my-claims.yaml"
    mine.write_text(yaml.safe_dump({"version": 1, "study": "pub", "claims": [
        {"paper": "My idea", "system": "dea", "claim": "+0.5 BLEU over vanilla, expected",
         "gains": [0.5], "tests": "DEA on layer 0"}]}), encoding="utf-8")  # fmt: skip
    synattn = str(Path(sys.executable).with_name("synattn"))
    ask = [synattn, "study", "claims", "--claims", str(mine), "--results", str(results)]
    table = subprocess.run(ask, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    row = next(x for x in table.stdout.splitlines() if x.startswith("| My idea |"))
    assert "+0.50 ± 0.00 vs vanilla | [+0.50, +0.50] | above zero" in row, row
    assert "**better**" in row and "| 3 |" in row, row
    mine.write_text("version: 1\nstudy: pub\nclaims: []\n", encoding="utf-8")
    bad = subprocess.run([synattn, "study", "claims", "--claims", str(mine)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode != 0 and "my-claims.yaml" in bad.stderr and "claims" in bad.stderr


def _load_reproduce() -> object:
    return import_module("synattn_jobs.study.driver")


def test_a_fresh_checkout_takes_published_runs_as_done_and_trains_only_the_rest(
    tmp_path: Path, monkeypatch: object
) -> None:
    """The study spans sessions: what one published (runs/<run>.json and the translations of
    every final-model selection) a fresh queue takes as succeeded, unless its spec changed:
    then the driver stops with the run named, and trains it again only when asked to."""
    import pytest

    mp: pytest.MonkeyPatch = monkeypatch  # type: ignore[assignment]
    mp.delenv("SYNATTN_DATABASE_URL", raising=False)
    repro: object = _load_reproduce()
    results = tmp_path / "results"
    run_dir = tmp_path / "old-run"
    run_dir.mkdir()
    ref = run_dir / "ref.test.txt"
    ref.write_text("ein hund\n")
    (run_dir / "hyp.test.txt").write_text("ein hund\n")
    (run_dir / "hyp.test.last.txt").write_text("eine katze\n")
    (run_dir / "metrics.jsonl").write_text('{"event": "end", "update": 600}\n')
    spec = {"resolved": {**RESOLVED, "data": {"max_tokens": 2048, "train": str(REPO / "x")}}}

    def queue(home: Path, changed: bool) -> tuple[JobStore, str, dict[str, str]]:
        (home / "jobs").mkdir(parents=True)
        mp.setenv("SYNATTN_HOME", str(home / "jobs"))
        store = JobStore(f"sqlite:///{home / 'jobs' / 'jobs.sqlite'}")
        exp = store.create_experiment("ledger", "vanilla", {"seeds": [1]})
        ids = {}
        for name, variant in (("vanilla-s1", "vanilla"), ("dea-s1", "dea"), ("rp-s1", "rp")):
            job_spec = (
                {"resolved": {**RESOLVED, "changed": 1}} if changed and name == "rp-s1" else spec
            )
            ids[name] = store.create_job("train", name, job_spec, str(run_dir),
                                         experiment_id=exp.id, variant=variant,
                                         seed=1).id  # fmt: skip
        return store, exp.id, ids

    store, exp_id, ids = queue(tmp_path / "session1", changed=False)
    result = {"bleu": 20.0, "chrf": 50.0, "split": "test", "update": 600,
              "hyp": str(run_dir / "hyp.test.txt"), "ref": str(ref),
              "metrics": str(run_dir / "metrics.jsonl"), "selection": "average",
              "by_selection": {"average": {"bleu": 20.0, "hyp": str(run_dir / "hyp.test.txt")},
                               "last": {"bleu": 19.0,
                                        "hyp": str(run_dir / "hyp.test.last.txt")}}}  # fmt: skip
    for name in ("vanilla-s1", "rp-s1"):  # dea-s1 never finished in session 1
        store.claim(ids[name], "w", 60)
        store.finish(ids[name], "succeeded", result)
    side_by_side = {"workers": 2, "threads": 1}
    driver = {"command": "x", "git_commit": "c0ffee+dirty"}
    repro.publish(exp_id, results, driver, side_by_side)  # type: ignore[attr-defined]
    out = results / "ledger"
    record = json.loads((out / "runs" / "vanilla-s1.json").read_text())
    assert record["trained_with"] == side_by_side and record["finished_under"] == driver
    assert json.loads((out / "run.json").read_text())["provenance"]["commits"] == [
        {"commit": "c0ffee", "dirty": True, "runs": ["rp-s1", "vanilla-s1"], "updates": 1200}
    ]
    listed = json.loads((out / "run.json").read_text())["runs"]
    assert {r["name"]: r["trained_with"] for r in listed} == {
        "dea-s1": None, "rp-s1": side_by_side, "vanilla-s1": side_by_side}  # fmt: skip
    assert (
        record["result"]["by_selection"]["last"]["hyp"] == "translations/vanilla-s1.test.last.txt"
    )
    assert (out / "translations" / "vanilla-s1.test.last.txt").read_text() == "eine katze\n"
    assert (out / "runs" / "vanilla-s1.metrics.jsonl").is_file()

    # session 2: a new queue (the old home is gone); rp-s1's configuration changed meanwhile
    store2, exp2, _ = queue(tmp_path / "session2", changed=True)
    with pytest.raises(SystemExit, match=r"1 published run\(s\) of ledger .*\(rp-s1\).*"
                       "--retrain-changed"):  # fmt: skip
        repro.adopt_published(exp2, results)  # type: ignore[attr-defined]
    assert {j.state for j in store2.jobs(experiment_id=exp2)} == {"queued"}  # nothing taken
    taken = repro.adopt_published(exp2, results, retrain_changed=True)  # type: ignore[attr-defined]
    assert taken == ["vanilla-s1"]
    states = {j.name: j for j in store2.jobs(experiment_id=exp2)}
    assert states["vanilla-s1"].state == "succeeded" and states["dea-s1"].state == "queued"
    assert states["rp-s1"].state == "queued"  # trained again: not the published configuration
    adopted = states["vanilla-s1"].result
    assert Path(adopted["by_selection"]["last"]["hyp"]).read_text() == "eine katze\n"
    assert Path(adopted["ref"]).read_text() == "ein hund\n"
    # taking it twice changes nothing
    assert repro.adopt_published(exp2, results, retrain_changed=True) == []  # type: ignore[attr-defined]
    # publishing again leaves the adopted run's ledger as it was: it is not written again
    ledger = out / "runs" / "vanilla-s1.json"
    written = (ledger.stat().st_mtime_ns, ledger.read_text())
    repro.publish(exp2, results, {"command": "x"}, {"workers": 1, "threads": 1})  # type: ignore[attr-defined]
    assert (ledger.stat().st_mtime_ns, ledger.read_text()) == written


def _segment(start: int, end: int, commit: str, ended_at: float) -> dict[str, Any]:
    """A stretch a hand-off recorded (synattn_jobs.study.handoff), with what provenance reads."""
    return {"from_update": start, "to_update": end, "wall_s": 1.0, "ended_at": ended_at,
            "command": "synattn study run s.yaml", "git_commit": commit}  # fmt: skip


def test_provenance_lists_every_commit_the_runs_trained_under() -> None:
    """``run.json``'s provenance from the runs' records: each commit, clean and dirty apart
    ("+dirty" parsed off), with its runs and the updates trained under it, in the order the
    commits were first used; each run's stretches, the last one under ``finished_under``, or
    not recorded in a record that predates it."""
    repro: Any = _load_reproduce()
    records = [
        {"name": "b-s1", "finished_at": 50.0, "result": {"update": 900}},  # an older record
        {"name": "a-s1", "finished_at": 40.0, "result": {"update": 1000},
         "segments": [_segment(0, 300, "aaa", 10.0), _segment(300, 700, "bbb+dirty", 20.0)],
         "finished_under": {"command": "c", "git_commit": "ccc"}},
        {"name": "c-s1", "finished_at": 30.0, "result": {"update": 1000},
         "segments": [_segment(0, 600, "bbb+dirty", 25.0)],
         "finished_under": {"command": "c", "git_commit": "bbb"}},
    ]  # fmt: skip
    prov = repro.provenance(records)
    assert prov["commits"] == [
        {"commit": "aaa", "dirty": False, "runs": ["a-s1"], "updates": 300},
        {"commit": "bbb", "dirty": True, "runs": ["a-s1", "c-s1"], "updates": 400 + 600},
        {"commit": "bbb", "dirty": False, "runs": ["c-s1"], "updates": 400},
        {"commit": "ccc", "dirty": False, "runs": ["a-s1"], "updates": 300},
    ]
    assert prov["not_recorded"] == {"runs": ["b-s1"], "updates": 900}
    assert prov["runs"]["a-s1"] == [
        {"from_update": 0, "to_update": 300, "commit": "aaa", "dirty": False},
        {"from_update": 300, "to_update": 700, "commit": "bbb", "dirty": True},
        {"from_update": 700, "to_update": 1000, "commit": "ccc", "dirty": False},
    ]
    assert prov["runs"]["b-s1"] == [
        {"from_update": 0, "to_update": 900, "commit": None, "dirty": None}
    ]
    assert list(prov["runs"]) == ["a-s1", "b-s1", "c-s1"] and "last driver" in prov["note"]
    assert sum(c["updates"] for c in prov["commits"]) + 900 == 2900  # every update, once


def test_an_execution_only_setting_at_its_old_value_keeps_published_runs_current() -> None:
    """A setting added later that changes only how a run executes (``train.cudnn_attention``)
    leaves the digest of a spec that holds it at the value older runs had in effect as it was,
    so published runs stay adopted; any other value, or any other change, is another run."""
    repro: Any = _load_reproduce()
    before = {"resolved": {**RESOLVED, "train": dict(RESOLVED["train"])}}
    after = {"resolved": {**RESOLVED, "train": {**RESOLVED["train"], "cudnn_attention": False}}}
    assert repro.spec_digest(after) == repro.spec_digest(before)
    assert "cudnn_attention" in after["resolved"]["train"]  # the spec itself is left alone
    on = {"resolved": {**RESOLVED, "train": {**RESOLVED["train"], "cudnn_attention": True}}}
    assert repro.spec_digest(on) != repro.spec_digest(before)
    longer = {"resolved": {**RESOLVED, "train": {**RESOLVED["train"], "max_updates": 601}}}
    assert repro.spec_digest(longer) != repro.spec_digest(before)


def test_the_config_model_says_which_settings_are_execution_only() -> None:
    """The digest's execution-only settings are read from the config model's marks: a new
    setting that leaves the numbers alone needs only its mark there, and an unmarked one makes
    published runs another configuration; the settings that do change the numbers (dropout's
    kernel, compilation, precision) are not marked."""
    from synattn_trainer.config import TrainConfig, execution_only_defaults

    marked = execution_only_defaults()
    assert marked[("train", "cudnn_attention")] is False
    # added beside the paper's reading of Impt-N after seeds 1-3 were published: at their
    # defaults they are what those runs computed, so the study's hand-off keeps adopting them
    assert marked[("headmask", "importance")] == "absolute"
    assert marked[("headmask", "ranking")] == "global"
    for changes_numbers in ("fast_dropout", "compile", "precision", "seed", "max_updates"):
        assert ("train", changes_numbers) not in marked
    schema = TrainConfig.model_json_schema()["$defs"]["TrainLoopConfig"]["properties"]
    assert schema["cudnn_attention"].get("execution_only") is True


def test_the_driver_records_the_cpu_isa_its_runs_trained_with() -> None:
    import torch

    repro: Any = _load_reproduce()
    isa = repro.cpu_isa()
    assert isa == torch.backends.cpu.get_cpu_capability() and isa.isupper()
    assert repro.hardware(1, 2)["cpu_isa"] == isa


def test_published_run_ledgers_are_not_git_ignored() -> None:
    """``results/<study>/runs/`` must reach a commit: a fresh checkout resumes the study from it
    (the repository-wide ``runs/`` ignore once hid it, and two runs had to be rebuilt)."""
    repo = Path(__file__).resolve().parents[2]
    for path in ("results/study-conv/runs/vanilla-s1.json", "results/any-study/runs/x.json"):
        out = subprocess.run(["git", "check-ignore", "-q", path], cwd=repo)
        assert out.returncode == 1, f"{path} is git-ignored"


def test_a_terminated_driver_leaves_through_its_cleanup() -> None:
    """``kill`` (SIGTERM) or a closed terminal (SIGHUP) must reach the driver's ``finally``,
    which stops its workers: by default the signal ended the driver alone, and its workers
    trained on, orphaned (seen in a session)."""
    import signal
    import time

    import pytest

    repro: object = _load_reproduce()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        repro.exit_on_termination()  # type: ignore[attr-defined]
        for sig in saved:
            cleaned = False
            with pytest.raises(SystemExit) as stop:
                try:
                    os.kill(os.getpid(), sig)
                    time.sleep(5)  # the handler ends the sleep at once
                finally:
                    cleaned = True
            assert cleaned and stop.value.code == 128 + sig
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.fixture
def study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, JobStore, int]:
    """synattn study run loaded over a fresh queue, and an empty study experiment on it."""
    db = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    monkeypatch.setenv("SYNATTN_DATABASE_URL", db)
    repro = _load_reproduce()
    store = JobStore(db)
    return repro, store, store.create_experiment("study", "vanilla", {"seeds": [1, 2]}).id


def test_runs_put_first_are_released_first_in_the_order_given(
    tmp_path: Path, study: tuple[Any, JobStore, int]
) -> None:
    """``--first``: the named waiting runs go to free workers before the rest, in the order
    given, the rest in theirs; a run that is not waiting, or not in the study, is refused."""
    repro, store, exp_id = study
    names = ["vanilla-s1", "dea-s1", "vanilla-s2", "dea-s2", "lpea-s2"]
    ids = {n: store.create_job("train", n, {}, str(tmp_path), experiment_id=exp_id,
                               variant=n.split("-s")[0], seed=int(n[-1])).id
           for n in names}  # fmt: skip
    store.claim(ids["vanilla-s1"], "w", 60)  # running: cannot go first
    repro.put_first(exp_id, ["lpea-s2", "vanilla-s2"])
    store.register_worker("w1", "train", 3)
    released = store.release_next("train", 0, 60, None)
    assert [store.get(j).name for j in released] == ["lpea-s2", "vanilla-s2"]  # type: ignore[union-attr]
    store.register_worker("w2", "train", 1)
    assert [store.get(j).name for j in store.release_next("train", 0, 60, None)] == ["dea-s1"]  # type: ignore[union-attr]
    with pytest.raises(SystemExit, match=r"--first: vanilla-s1 \(running\) not waiting"):
        repro.put_first(exp_id, ["vanilla-s1"])
    with pytest.raises(SystemExit, match="--first: no run fixed-s1 in this experiment"):
        repro.put_first(exp_id, ["fixed-s1", "dea-s2"])


def test_a_run_reclaimed_after_a_lost_worker_counts_every_claim_in_its_wall(
    tmp_path: Path, monkeypatch: object
) -> None:
    """``run.json``'s wall time of a run whose first worker died is both claims' time, not
    the last claim's alone (nor the pause between them, when no worker held it)."""
    import time

    import pytest

    mp: pytest.MonkeyPatch = monkeypatch  # type: ignore[assignment]
    mp.delenv("SYNATTN_DATABASE_URL", raising=False)
    home = tmp_path / "home" / "jobs"
    home.mkdir(parents=True)
    mp.setenv("SYNATTN_HOME", str(home))
    repro: Any = _load_reproduce()
    store = JobStore(f"sqlite:///{home / 'jobs.sqlite'}")
    exp = store.create_experiment("walls", "vanilla", {"seeds": [1]})
    ref, hyp = tmp_path / "ref.test.txt", tmp_path / "hyp.test.txt"
    ref.write_text("ein hund\n")
    hyp.write_text("ein hund\n")
    job = store.create_job("train", "vanilla-s1", {"resolved": RESOLVED}, str(tmp_path),
                           experiment_id=exp.id, variant="vanilla", seed=1)  # fmt: skip
    assert store.claim(job.id, "lost", 60)
    time.sleep(0.3)
    assert store.heartbeat(job.id, "lost")
    time.sleep(0.3)  # the worker is gone: no one holds the run
    assert store.requeue_stale(stale_after_s=0.01) == [job.id]
    assert store.claim(job.id, "next", 60)
    time.sleep(0.2)
    assert store.finish(job.id, "succeeded", {"bleu": 20.0, "chrf": 50.0, "hyp": str(hyp),
                                              "ref": str(ref), "split": "test",
                                              "update": 600}, worker="next")  # fmt: skip
    done = store.get(job.id)
    last = done.finished_at - done.started_at
    assert done.earlier_claims_s >= 0.3 and last >= 0.2
    assert repro.claimed_s(done, done.finished_at) == pytest.approx(last + done.earlier_claims_s)
    info = repro.publish(exp.id, tmp_path / "results", {"command": "x"})
    assert info["runs"][0]["wall_s"] == round(last + done.earlier_claims_s, 1)
    assert info["runs"][0]["attempts"] == 2
    # the next checkout's queue adopts the published run: its wall still counts both claims
    home2 = tmp_path / "home2" / "jobs"
    home2.mkdir(parents=True)
    mp.setenv("SYNATTN_HOME", str(home2))
    store2 = JobStore(f"sqlite:///{home2 / 'jobs.sqlite'}")
    exp2 = store2.create_experiment("walls", "vanilla", {"seeds": [1]})
    store2.create_job("train", "vanilla-s1", {"resolved": RESOLVED}, str(tmp_path),
                      experiment_id=exp2.id, variant="vanilla", seed=1)  # fmt: skip
    assert repro.adopt_published(exp2.id, tmp_path / "results") == ["vanilla-s1"]
    again = repro.publish(exp2.id, tmp_path / "results", {"command": "x"})
    assert again["runs"][0]["wall_s"] == info["runs"][0]["wall_s"]
    assert repro.claimed_s(store.create_job("train", "never", {}, str(tmp_path)), None) is None


def test_a_held_study_starts_no_new_run_until_the_hold_is_lifted(
    tmp_path: Path, study: tuple[Any, JobStore, int]
) -> None:
    """``--no-new-runs-after``: while held, free workers get none of the study's waiting runs
    (a running one goes on); lifting the hold (a new driver does) lets them through again, and
    an admin's queued-jobs limit for the owner outlives both."""
    repro, store, exp_id = study
    ids = [store.create_job("train", f"vanilla-s{k}", {}, str(tmp_path), experiment_id=exp_id,
                            variant="vanilla", seed=k, owner="admin").id
           for k in (1, 2, 3)]  # fmt: skip
    store.set_quota("admin", 50, None)
    assert store.claim(ids[0], "w", 60)
    store.register_worker("w1", "train", 3)
    repro.hold_new_runs(exp_id, True)
    assert store.release_next("train", 0, 60, None) == []
    assert store.heartbeat(ids[0], "w")  # the running run is untouched
    assert store.get(ids[0]).state == "running"  # type: ignore[union-attr]
    repro.hold_new_runs(exp_id, False)
    assert store.release_next("train", 0, 60, None) == ids[1:]
    assert [(q.user, q.max_queued, q.max_running) for q in store.quotas()] == [("admin", 50, None)]


def test_late_runs_start_one_at_a_time_on_the_workers_a_hold_leaves_free(
    tmp_path: Path, study: tuple[Any, JobStore, int]
) -> None:
    """``--late``: under the hold, the next late run goes to a worker that frees, alone (the
    dispatcher's releases are gated to it, whatever slots are free), and the hold is whole
    again once it runs; with every worker busy the next one waits for a run to end."""
    import time

    repro, store, exp_id = study
    ids = {n: store.create_job("train", n, {}, str(tmp_path), experiment_id=exp_id,
                               variant=n.split("-s")[0], seed=int(n[-1]), owner="admin").id
           for n in ("vanilla-s1", "dea-s1", "vanilla-s2", "dea-s2")}  # fmt: skip
    store.set_quota("admin", 50, None)
    assert store.claim(ids["vanilla-s1"], "w", 60)  # one run runs; the other worker is free
    store.register_worker("w1", "train", 3)
    repro.hold_new_runs(exp_id, True)
    assert store.release_next("train", 0, 60, None) == []

    def step(letting: str | None, late: list[str]) -> tuple[str | None, list[str]]:
        jobs = store.jobs(experiment_id=exp_id)
        out: tuple[str | None, list[str]] = repro.late_runs(exp_id, jobs, letting, late, 2,
                                                            time.time())  # fmt: skip
        return out

    assert step(None, ["dea-s2", "vanilla-s2"]) == ("dea-s2", ["vanilla-s2"])
    assert store.release_next("train", 0, 60, None) == [ids["dea-s2"]]  # alone, of 3 slots
    assert step("dea-s2", ["vanilla-s2"]) == ("dea-s2", ["vanilla-s2"])  # released, not taken
    assert store.claim(ids["dea-s2"], "w1", 60)
    assert step("dea-s2", ["vanilla-s2"]) == (None, ["vanilla-s2"])  # it runs: held again
    assert [(q.user, q.max_running) for q in store.quotas()] == [("admin", 0)]
    assert store.release_next("train", 0, 60, None) == []
    assert step(None, ["vanilla-s2"]) == (None, ["vanilla-s2"])  # both workers busy
    assert store.finish(ids["vanilla-s1"], "succeeded", {"bleu": 1.0})
    assert step(None, ["vanilla-s2"]) == ("vanilla-s2", [])
    assert store.release_next("train", 0, 60, None) == [ids["vanilla-s2"]]
    with pytest.raises(SystemExit, match=r"--late: dea-s2 \(running\) not waiting"):
        repro.let_one_start(exp_id, "dea-s2")
    with pytest.raises(SystemExit, match="--late: only with --no-new-runs-after"):
        repro.main(["study.yaml", "--late", "vanilla-s2"])


def test_a_run_ending_while_a_late_run_is_let_through_frees_no_place_for_another(
    tmp_path: Path, study: tuple[Any, JobStore, int]
) -> None:
    """The let-through is a gate on the one run, not a count of places: a run that ends after
    the late run started and before the driver holds again (its next look) lets no waiting
    run start (once, impt-signed-s3 was released in that gap and had to be cancelled)."""
    import time

    repro, store, exp_id = study
    ids = {n: store.create_job("train", n, {}, str(tmp_path), experiment_id=exp_id,
                               variant=n.split("-s")[0], seed=int(n[-1]), owner="admin").id
           for n in ("vanilla-s1", "dea-s1", "vanilla-s2", "dea-s2")}  # fmt: skip
    assert store.claim(ids["vanilla-s1"], "w", 60)
    store.register_worker("w1", "train", 3)
    repro.hold_new_runs(exp_id, True)
    jobs = store.jobs(experiment_id=exp_id)
    assert repro.late_runs(exp_id, jobs, None, ["dea-s2"], 2, time.time()) == ("dea-s2", [])
    assert store.release_next("train", 0, 60, None) == [ids["dea-s2"]]
    assert store.claim(ids["dea-s2"], "w1", 60)
    assert store.finish(ids["vanilla-s1"], "succeeded", {"bleu": 1.0})  # before the next look
    assert store.release_next("train", 0, 60, None) == []  # two slots free: still none
    jobs = store.jobs(experiment_id=exp_id)
    assert repro.late_runs(exp_id, jobs, "dea-s2", [], 2, time.time()) == (None, [])
    held = [(q.user, q.max_running, q.release_only) for q in store.quotas()]
    assert held == [("admin", 0, None)]
    assert store.release_next("train", 0, 60, None) == []
    repro.hold_new_runs(exp_id, False)  # the next driver
    rest = sorted([ids["dea-s1"], ids["vanilla-s2"]])
    assert sorted(store.release_next("train", 0, 60, None)) == rest


def test_run_json_scores_each_run_by_its_rows_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run.json`` lists each run's BLEU under its row's final-model protocol (gated SLR's
    best-validation checkpoint, the diversity paper's last one), as ``report.json`` scores it,
    and says which model that is; a run whose variant has no protocol keeps its primary model."""
    monkeypatch.delenv("SYNATTN_DATABASE_URL", raising=False)
    monkeypatch.setenv("SYNATTN_HOME", str(tmp_path / "jobs"))
    (tmp_path / "jobs").mkdir()
    repro: Any = _load_reproduce()
    store = JobStore(f"sqlite:///{tmp_path / 'jobs' / 'jobs.sqlite'}")
    spec = {"seeds": [1], "protocols": {"slr-gated": "best_valid"}}
    exp = store.create_experiment("proto", "vanilla", spec)
    ref = tmp_path / "ref.test.txt"
    ref.write_text("ein hund\n")
    for variant in ("vanilla", "slr-gated"):
        hyps = {sel: tmp_path / f"{variant}.{sel}.txt" for sel in ("average", "best_valid")}
        for path in hyps.values():
            path.write_text("ein hund\n")
        job = store.create_job("train", f"{variant}-s1", {"resolved": RESOLVED}, str(tmp_path),
                               experiment_id=exp.id, variant=variant, seed=1)  # fmt: skip
        store.claim(job.id, "w", 60)
        by = {
            "average": {"bleu": 37.5, "chrf": 60.0, "hyp": str(hyps["average"])},
            "best_valid": {"bleu": 36.0, "chrf": 59.0, "hyp": str(hyps["best_valid"])},
        }
        store.finish(job.id, "succeeded", {"bleu": 37.5, "chrf": 60.0, "split": "test",
                                           "hyp": str(hyps["average"]), "ref": str(ref),
                                           "update": 600, "selection": "average",
                                           "by_selection": by})  # fmt: skip
    repro.publish(exp.id, tmp_path / "results", {"command": "x"}, None)
    runs = json.loads((tmp_path / "results" / "proto" / "run.json").read_text())["runs"]
    assert {r["name"]: (r["bleu"], r["selection"]) for r in runs} == {
        "slr-gated-s1": (36.0, "best_valid"), "vanilla-s1": (37.5, "average")}  # fmt: skip


def test_a_late_run_that_would_still_train_at_the_hand_off_is_passed_over(
    tmp_path: Path, study: tuple[Any, JobStore, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--late`` with ``--hand-off-after``: a named run too long for the time left does not
    start (its hours would be lost with a hand-off that dies with the machine); the next named
    one that fits takes the free worker, and the one passed over stays queued for later."""
    import time

    repro, store, exp_id = study
    ids = {n: store.create_job("train", n, {}, str(tmp_path), experiment_id=exp_id,
                               variant=n.split("-s")[0], seed=int(n[-1]), owner="admin").id
           for n in ("vanilla-s1", "dea-s2", "vanilla-s2")}  # fmt: skip
    store.set_quota("admin", 50, None)
    store.register_worker("w1", "train", 2)
    repro.hold_new_runs(exp_id, True)
    why = {"dea-s2": "needs about 2:00:00 at this machine's pace (1.00x the published runs'), "
                     "the hand-off is in 1:00:00"}  # fmt: skip
    jobs = store.jobs(experiment_id=exp_id)
    step = repro.late_runs(exp_id, jobs, None, ["dea-s2", "vanilla-s2"], 2, time.time(),
                           why.get)  # fmt: skip
    assert step == ("vanilla-s2", [])
    assert store.release_next("train", 0, 60, None) == [ids["vanilla-s2"]]
    assert [j.state for j in store.jobs(experiment_id=exp_id) if j.name == "dea-s2"] == ["queued"]
    assert f"dea-s2 does not start (--late): {why['dea-s2']}; it waits" in capsys.readouterr().out
    # none fits: none starts, and none is left to wait for
    jobs = store.jobs(experiment_id=exp_id)
    assert repro.late_runs(exp_id, jobs, None, ["dea-s2"], 3, time.time(), why.get) == (None, [])


def test_the_late_check_reads_the_published_runs_and_this_machines_pace(
    tmp_path: Path, study: tuple[Any, JobStore, int]
) -> None:
    """``late_fit`` over the queue and ``run.json``: a run of a variant whose published length
    at the pace of the runs training here passes the hand-off is named; a short one is not."""
    import json
    import time

    from synattn_jobs.store_tables import Job as JobRow

    repro, store, exp_id = study
    name = store.experiment(exp_id).name
    out = tmp_path / "results" / name
    out.mkdir(parents=True)
    runs = [{"name": "vanilla-s1", "variant": "vanilla", "state": "succeeded", "wall_s": 4_000.0,
             "tokens_per_s": 4_000.0},
            {"name": "dea-s1", "variant": "dea", "state": "succeeded", "wall_s": 8_000.0,
             "tokens_per_s": 2_000.0},
            {"name": "dea-s3", "variant": "dea", "state": "failed"}]  # fmt: skip
    (out / "run.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
    ids = {n: store.create_job("train", n, {}, str(tmp_path), experiment_id=exp_id,
                               variant=n.split("-s")[0], seed=int(n[-1]), owner="admin").id
           for n in ("vanilla-s2", "dea-s2", "vanilla-s3")}  # fmt: skip
    assert store.claim(ids["vanilla-s2"], "w", 60)
    store.set_progress(ids["vanilla-s2"], {"tokens_per_s": 2_000.0})  # half the published pace
    now = time.time()
    with store.session() as s:  # claimed ten minutes ago: its pace has settled
        row = s.get(JobRow, ids["vanilla-s2"])
        assert row is not None
        row.started_at = now - 600
    why = repro.late_fit(store, exp_id, tmp_path / "results", now - 700, now + 10_000)
    assert why("vanilla-s3") is None  # 4,000 s at half speed: 8,000 s, fits in 10,000
    reason = why("dea-s2")  # 8,000 s at half speed: 16,000 s
    assert reason is not None and reason.startswith("needs about 4:26:") and "0.50x" in reason
    # the driver's own choice: the check under --hand-off-after, none where a late run may
    # overrun (its hand-off reaches the next session) or nothing is handed off
    import argparse

    def check(**kw: Any) -> Any:
        args = argparse.Namespace(**{"hand_off_after": 10_700.0, "late_may_overrun": False,
                                     "results": tmp_path / "results", **kw})  # fmt: skip
        return repro.late_check(args, store, exp_id, now - 700)

    assert (check()("dea-s2") or "").startswith("needs about 4:26:")
    assert check(late_may_overrun=True) is None and check(hand_off_after=None) is None
    with pytest.raises(SystemExit, match="--late-may-overrun: only with --late"):
        repro.main(["study.yaml", "--late-may-overrun"])
