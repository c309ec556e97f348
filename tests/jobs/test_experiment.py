"""The main job's code path at CI size: an experiment grid through an embedded worker, the
comparison table, and the HTML report rendered by headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.jobs.conftest import Env


def test_experiment_runs_and_reports(embedded: Env, tmp_path: Path) -> None:
    grid = embedded.root / "configs" / f"grid-{tmp_path.name}.yaml"
    grid.write_text(yaml.safe_dump({
        "name": f"ci-{tmp_path.name}", "config": "tiny.yaml", "baseline": "vanilla",
        "variants": ["vanilla", "dea", "slr-gated"], "seeds": [1],
        "protocols": {"slr-gated": "best_valid"},
        "evaluate": {"split": "valid", "analyze": True},
    }), encoding="utf-8")  # fmt: skip
    report_dir = tmp_path / "report"
    proc = embedded.cli("experiment", "run", str(grid), "--wait", "--embedded-worker",
                        "--report-dir", str(report_dir), check=False, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # off a terminal, a line per job as it moves on while the others wait (not a silent table)
    for variant in ("vanilla", "dea", "slr-gated"):
        assert f" {variant}-s1: queued | position " in out, out
        assert f" {variant}-s1: succeeded | update 10/10 (100.0%) | loss " in out, out
    assert f"experiment ci-{tmp_path.name}: 3/3 jobs done (3 succeeded)" in out
    for name in (
        "vanilla (baseline)",
        "dea",
        "slr-gated",
        "p bootstrap",
        "95% CI of Δ",
        "verdict",
        "BLEU",
    ):
        assert name in out, out
    # one seed: every verdict is inconclusive, and the table says why in words
    assert "inconclusive" in out and "better" not in out and "worse" not in out
    assert "warning: Only 1 seed per variant" in " ".join(out.split())
    assert f"report: {report_dir / 'report.html'}" in out.replace("\n", "")
    html = (report_dir / "report.html").read_text()
    assert 'role="alert"' in html and "Only 1 seed per variant" in html
    # loss curves, the slr-gated gate heatmap, a head-importance heatmap per run
    assert html.count("data:image/png;base64") == 5
    assert "Gates per layer and head: slr-gated-s1" in html
    assert "Head importance: dea-s1" in html
    # every run also made the best-validation model; slr-gated's row is scored with it
    import json

    rows = {r["variant"]: r for r in json.loads((report_dir / "report.json").read_text())["rows"]}
    assert rows["slr-gated"]["protocol"] == "best_valid"
    assert rows["vanilla"]["protocol"] == "average"
    runs = [p.parent for p in (embedded.root / "runs").rglob("hyp.valid.best_valid.txt")
            if f"ci-{tmp_path.name}-" in str(p)]  # fmt: skip
    assert sorted(p.name for p in runs) == ["dea-s1", "slr-gated-s1", "vanilla-s1"]
    assert all((run / "best.pt").is_file() for run in runs)
    # the row names the checkpoint it scored: best.pt's own update, not the average's
    import torch

    slr = rows["slr-gated"]["averaged_updates"]["1"]
    best = torch.load(next(r for r in runs if r.name == "slr-gated-s1") / "best.pt",
                      weights_only=False)  # fmt: skip
    assert slr["selection"] == "best_valid" and slr["updates"] == []
    assert [slr["checkpoint_update"]] == best["updates"]
    # every run records its heads' importance on the validation set (the HeadMask paper's
    # Tables 5-6), the same numbers its final model gives when measured again
    from synattn_trainer.analysis import importance_statistics
    from synattn_trainer.loading import load_model

    vanilla = next(r for r in runs if r.name == "vanilla-s1")
    model_file = Path(rows["vanilla"]["averaged_updates"]["1"].get("checkpoint")
                      or vanilla / "averaged.pt")  # fmt: skip
    again_stats = importance_statistics(model_file, Path(load_model(model_file)[1].data.valid))
    assert rows["vanilla"]["heads"] == pytest.approx(again_stats, rel=1e-6)
    assert all(r["heads"]["importance_mean"] > 0 for r in rows.values())
    # the report command recomputes the same table from the store
    again = embedded.cli("report", f"ci-{tmp_path.name}", "--out", str(tmp_path / "r2"))
    assert "slr-gated" in again.stdout


def test_report_renders_in_headless_chromium(embedded: Env, tmp_path: Path) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is needed (.ci/services.sh installs Debian's package)")
    from synattn_jobs.report import comparison, write_html
    from synattn_jobs.store import JobStore

    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    exp = store.create_experiment(
        "shot", "vanilla", {"seeds": [1], "evaluate": {"split": "valid"}}
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(
            f'{{"event": "update", "update": {u}, "loss": {9 - u / 10}}}\n' for u in range(1, 40)
        )
    )
    for variant, bleu in (("vanilla", 20.0), ("dea", 21.0)):
        job = store.create_job("train", f"{variant}-s1", {}, str(run), experiment_id=exp.id,
                               variant=variant, seed=1)  # fmt: skip
        store.claim(job.id, "w", 60)
        store.finish(job.id, "succeeded", {"bleu": bleu, "chrf": 50.0, "parameters": 10,
                                           "tokens_per_s": 100.0})  # fmt: skip
    jobs = list(store.jobs(experiment_id=exp.id))
    page = write_html(comparison(exp, jobs), jobs, tmp_path / "report")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    import matplotlib.image

    img = matplotlib.image.imread(shot)
    assert img.shape[0] == 900 and img.shape[1] == 1200
    assert float(np.std(img[..., :3])) > 0.05  # text, table and plot, not a blank page
