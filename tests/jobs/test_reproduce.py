"""bench/reproduce.py --publish-only: what lands in results/<experiment>/ for finished runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from synattn_jobs.store import JobStore

REPO = Path(__file__).resolve().parents[2]
RESOLVED = {
    "model": {"enc_layers": 3, "dec_layers": 3, "d_model": 128, "d_ff": 512, "heads": 8},
    "train": {"max_updates": 600, "max_epochs": 100},
    "data": {"max_tokens": 2048},
    "optim": {"lr": 0.002, "warmup": 200},
}


def test_publish_writes_reports_translations_and_provenance(tmp_path: Path) -> None:
    home, results = tmp_path / "home", tmp_path / "results"
    (home / "jobs").mkdir(parents=True)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "pub", "config": "c.yaml", "variants":
                                    ["vanilla", "dea"], "seeds": [1, 2, 3]}))  # fmt: skip
    store = JobStore(f"sqlite:///{home / 'jobs' / 'jobs.sqlite'}")
    exp = store.create_experiment("pub", "vanilla", {"seeds": [1, 2, 3]})
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(f"ein hund {i}\n" for i in range(30)))
    for variant, shift in (("vanilla", 0.0), ("dea", 0.5)):
        for seed in (1, 2, 3):
            hyp = tmp_path / f"hyp-{variant}-{seed}.test.txt"
            hyp.write_text("".join(f"ein hund {i}\n" for i in range(30)))
            job = store.create_job("train", f"{variant}-s{seed}", {"resolved": RESOLVED},
                                   str(tmp_path), experiment_id=exp.id, variant=variant,
                                   seed=seed)  # fmt: skip
            store.claim(job.id, "w", 60)
            store.finish(job.id, "succeeded", {"bleu": 20.0 + shift + seed / 10, "chrf": 50.0,
                                               "hyp": str(hyp), "ref": str(ref), "split": "test",
                                               "update": 600})  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "reproduce.py"), str(grid), "--publish-only",
         "--home", str(home), "--results", str(results)],
        capture_output=True, text=True, timeout=300, env={**os.environ},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = results / "pub"
    assert "6/6 runs published" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    dea = next(r for r in report["rows"] if r["variant"] == "dea")
    # +0.5 on every seed (the seed test's p is 0); sacreBLEU's bootstrap gives identical
    # outputs a small p by design, so the verdict rests on the seeds' agreement
    assert dea["delta"] == 0.5 and dea["verdict"] == "better"
    run = json.loads((out / "run.json").read_text())
    assert run["command"].startswith("python bench/reproduce.py") and len(run["runs"]) == 6
    assert run["budget"]["max_updates"] == 600 and "3+3 layers, d=128" in run["budget"]["model"]
    assert run["hardware"]["cpu_count"] and run["git_commit"][:7].isalnum()
    assert (out / "report.html").is_file()
    names = sorted(p.name for p in (out / "translations").iterdir())
    assert names == sorted([f"{v}-s{s}.test.txt" for v in ("vanilla", "dea") for s in (1, 2, 3)]
                           + ["ref.test.txt"])  # fmt: skip
