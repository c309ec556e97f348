"""The study report's figures draw every run, including the runs an earlier session published
and this queue adopted from ``results/`` (their run folders were on another checkout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from synattn_jobs.report import loss_curves, run_metrics
from synattn_jobs.store import JobStore


def _log(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (f'{{"event": "update", "update": {u}, "loss": {9 - u / 10}}}\n' for u in range(1, 9))
    path.write_text("".join(lines))
    return path


def test_a_published_runs_metrics_are_found_when_its_run_folder_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    exp = store.create_experiment("figs", "vanilla", {"seeds": [1, 2, 3, 4]})
    local = _log(tmp_path / "runs" / "vanilla-s1" / "metrics.jsonl")
    published = _log(tmp_path / "results" / "runs" / "vanilla-s2.metrics.jsonl")
    cases = {
        "vanilla-s1": (local.parent, {}),  # trained by this session: its run folder
        "vanilla-s2": (tmp_path / "gone", {"metrics": str(published)}),  # adopted
        "vanilla-s3": (tmp_path / "gone", {"metrics": "runs/vanilla-s3.metrics.jsonl"}),
        "vanilla-s4": (Path("runs") / "vanilla-s1", {}),  # a run folder named relative to here
    }
    for name, (out_dir, result) in cases.items():
        job = store.create_job("train", name, {}, str(out_dir), experiment_id=exp.id,
                               variant="vanilla", seed=int(name[-1]))  # fmt: skip
        store.claim(job.id, "w", 60)
        store.finish(job.id, "succeeded", {"bleu": 30.0, **result})
    jobs = {j.name: j for j in store.jobs(experiment_id=exp.id)}
    assert run_metrics(jobs["vanilla-s1"]) == local
    assert run_metrics(jobs["vanilla-s2"]) == published
    # a relative name is not resolved against wherever the report happens to run
    assert run_metrics(jobs["vanilla-s3"]) is None
    monkeypatch.chdir(tmp_path)
    assert run_metrics(jobs["vanilla-s4"]) == Path("runs") / "vanilla-s1" / "metrics.jsonl"
    assert loss_curves([jobs["vanilla-s2"]], tmp_path / "loss.png") == tmp_path / "loss.png"
    assert loss_curves([jobs["vanilla-s3"]], tmp_path / "none.png") is None
