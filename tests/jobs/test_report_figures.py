"""The study report's figures draw every run, including the runs an earlier session published
and this queue adopted from ``results/`` (their run folders were on another checkout); the loss
figure sets each system's runs against its baseline's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synattn_jobs.report import comparison, loss_curves, loss_panels, loss_points, run_metrics
from synattn_jobs.store import JobStore


def _events(path: Path, *events: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _log(path: Path) -> Path:
    return _events(
        path, *({"event": "update", "update": u, "loss": 9 - u / 10} for u in range(1, 9))
    )


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
        store.finish(job.id, "succeeded", {"bleu": 30.0, "chrf": 50.0, **result})
    jobs = {j.name: j for j in store.jobs(experiment_id=exp.id)}
    assert run_metrics(jobs["vanilla-s1"]) == local
    assert run_metrics(jobs["vanilla-s2"]) == published
    # a relative name is not resolved against wherever the report happens to run
    assert run_metrics(jobs["vanilla-s3"]) is None
    monkeypatch.chdir(tmp_path)
    assert run_metrics(jobs["vanilla-s4"]) == Path("runs") / "vanilla-s1" / "metrics.jsonl"
    report = comparison(exp, list(jobs.values()), bootstrap=10)
    assert (
        loss_curves(report, [jobs["vanilla-s2"]], tmp_path / "loss.png") == tmp_path / "loss.png"
    )
    assert (tmp_path / "loss.png").read_bytes().startswith(b"\x89PNG")
    assert loss_curves(report, [jobs["vanilla-s3"]], tmp_path / "none.png") is None


def test_a_resumed_run_keeps_the_losses_it_went_on_with(tmp_path: Path) -> None:
    log = _events(
        tmp_path / "metrics.jsonl",
        {"event": "start", "update": 0},
        {"event": "update", "update": 100, "loss": 5.0},
        {"event": "epoch", "update": 120, "valid_loss": 4.5},
        {"event": "update", "update": 200, "loss": 4.0},
        {"event": "end", "update": 210, "stopped": "cancelled"},
        {"event": "start", "update": 150, "resumed": True},  # from its checkpoint at 150
        {"event": "update", "update": 200, "loss": 3.9},
        {"event": "epoch", "update": 240, "valid_loss": 3.8},
        {"event": "checkpoint", "update": 250, "valid_loss": 3.7},  # not an epoch's end
    )
    assert loss_points(log) == {
        "validation": [(120, 4.5), (240, 3.8)],
        "training": [(100, 5.0), (200, 3.9)],
    }


def test_each_systems_panel_holds_its_seeds_and_its_own_baselines(tmp_path: Path) -> None:
    """fixed-word is drawn against 8L (its paper's baseline), headmask against vanilla; a
    baseline's panel has no baseline behind it; a run still in its first epoch is left out
    until it logs a validation loss; training loss only when no run logged one."""
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    exp = store.create_experiment(
        "figs", "vanilla", {"seeds": [1, 2], "baselines": {"fixed-word": "8L"}}
    )
    for variant in ("vanilla", "8L", "fixed-word", "headmask-impt"):
        for seed in (1, 2):
            name = f"{variant}-s{seed}"
            log = _events(
                tmp_path / name / "metrics.jsonl",
                {"event": "update", "update": 10, "loss": 6.0 + seed},
                {"event": "epoch", "update": 20, "valid_loss": 5.0 + seed},
            )
            job = store.create_job("train", name, {}, str(log.parent), experiment_id=exp.id,
                                   variant=variant, seed=seed)  # fmt: skip
            store.claim(job.id, "w", 60)
            store.finish(job.id, "succeeded", {"bleu": 30.0 + seed, "chrf": 50.0})
    jobs = list(store.jobs(experiment_id=exp.id))
    report = comparison(exp, jobs, bootstrap=10)
    kind, panels = loss_panels(report, jobs)
    assert kind == "validation"
    by = {p["variant"]: p for p in panels}
    assert set(by) == {"vanilla", "8L", "fixed-word", "headmask-impt"}
    assert by["fixed-word"]["vs"] == "8L" and by["headmask-impt"]["vs"] == "vanilla"
    assert by["vanilla"]["vs"] is None and by["vanilla"]["baseline"] == {}
    assert by["fixed-word"]["runs"] == {"seed 1": [(20, 6.0)], "seed 2": [(20, 7.0)]}
    assert by["fixed-word"]["baseline"] == by["8L"]["runs"]
    assert loss_curves(report, jobs, tmp_path / "loss.png") == tmp_path / "loss.png"
    # a run still in its first epoch (no validation yet) waits; the others keep their panels
    for name in ("headmask-impt-s2", "headmask-impt-s1"):
        short = next(j for j in jobs if j.name == name)
        log = Path(short.out_dir) / "metrics.jsonl"
        _events(log, {"event": "update", "update": 5, "loss": 9.0})
        kind, panels = loss_panels(report, jobs)
        assert kind == "validation" and by["fixed-word"] in panels
        impt = {p["variant"]: p for p in panels}.get("headmask-impt")
        assert impt == ({"variant": "headmask-impt", "vs": "vanilla", "baseline": by["vanilla"]
                         ["runs"], "runs": {"seed 1": [(20, 6.0)]}} if name.endswith("2")
                        else None)  # fmt: skip
    # no run logged a validation loss: training loss for all
    for job in jobs:
        _events(Path(job.out_dir) / "metrics.jsonl", {"event": "update", "update": 5, "loss": 8.0})
    kind, panels = loss_panels(report, jobs)
    assert kind == "training" and len(panels) == 4
    assert {p["variant"]: p for p in panels}["headmask-impt"]["runs"]["seed 2"] == [(5, 8.0)]


def test_headmask_rows_show_their_masks_and_importance_statistics(tmp_path: Path) -> None:
    """A HeadMask run's report row holds how its training masks spread over the heads (from its
    ``headmask`` records) and the importance statistics of its analysis; the HTML report draws
    the mask heat map and the heads table. A vanilla row has neither mask figure nor masks."""
    from synattn_jobs.report import write_html

    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    exp = store.create_experiment("masks", "vanilla", {"seeds": [1]})
    heads = [f"{k}.{layer}.masked.h{h}" for k in ("enc_self", "dec_self", "enc_dec")
             for layer in range(2) for h in range(2)]  # fmt: skip
    shares = {k: (1.0 if k.startswith("enc_dec.1") else 0.0) for k in heads}
    records = [{"event": "headmask", "update": u, "batches": 10, **shares,
                "harmful_share": 0.9} for u in (250, 500)]  # fmt: skip
    _events(tmp_path / "impt" / "metrics.jsonl", *records)
    _log(tmp_path / "van" / "metrics.jsonl")
    for name, variant, out in (("vanilla-s1", "vanilla", "van"),
                               ("headmask-impt-s1", "headmask-impt", "impt")):  # fmt: skip
        job = store.create_job("train", name, {}, str(tmp_path / out), experiment_id=exp.id,
                               variant=variant, seed=1)  # fmt: skip
        store.claim(job.id, "w", 60)
        store.finish(job.id, "succeeded", {"bleu": 30.0, "chrf": 50.0, "importance_mean": 2.0,
                                           "importance_variance": 0.5})  # fmt: skip
    jobs = store.jobs(experiment_id=exp.id)
    report = comparison(exp, jobs, bootstrap=10)
    rows = {r["variant"]: r for r in report["rows"]}
    masks = rows["headmask-impt"]["heads"]["training_masks"]["1"]
    assert masks["often_masked_last_window"] == ["enc_dec.1.h0", "enc_dec.1.h1"]
    assert masks["entropy_bits"] == 1.0 and masks["harmful_share_last_window"] == 0.9
    assert rows["vanilla"]["heads"] == {"importance_mean": 2.0, "importance_variance": 0.5}
    page = write_html(report, jobs, tmp_path / "report").read_text()
    assert "Heads masked in training (HeadMask): headmask-impt-s1" in page
    assert 'id="heads"' in page and "enc_dec.1.h0, enc_dec.1.h1" in page
    assert (tmp_path / "report" / "masks-headmask-impt-s1.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "report" / "masks-vanilla-s1.png").exists()
