"""The experiment report as a page: ``GET /v1/experiments/{ref}/report`` answers the full HTML
report (table and embedded figures) for ``?format=html`` or ``Accept: text/html``, with the
JSON route's auth; JSON stays the default, and it is bounded (no finished run: 409; over the
size cap: 413). Runs are recorded in the store, not trained, so this takes seconds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from synattn_jobs.store import Experiment, JobStore

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def _h(token: str, accept: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if accept is not None:
        headers["Accept"] = accept
    return headers


def finished_experiment(store: JobStore, runs: Path, name: str, owner: str) -> Experiment:
    """Two succeeded runs (vanilla the baseline, dea) with a logged loss, as the worker leaves
    them, under the runs folder where the job API puts an experiment's runs."""
    exp = store.create_experiment(
        name, "vanilla", {"seeds": [1], "evaluate": {"split": "valid"}}, owner=owner
    )
    for variant, bleu in (("vanilla", 20.0), ("dea", 21.0)):
        run = runs / f"{name}-{exp.id[:6]}" / f"{variant}-s1"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({"event": "update", "update": u, "loss": 9 - u / 10}) + "\n"
            for u in range(1, 40)
        ))  # fmt: skip
        job = store.create_job("train", f"{variant}-s1", {}, str(run), experiment_id=exp.id,
                               variant=variant, seed=1, owner=owner)  # fmt: skip
        store.claim(job.id, "w", 60)
        result = {"bleu": bleu, "chrf": 50.0, "parameters": 10, "tokens_per_s": 100.0,
                  "selection": "average"}  # fmt: skip
        store.finish(job.id, "succeeded", result)
    return exp


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, JobStore, Path]]:
    from synattn_jobs.api import create_app
    from synattn_jobs.settings import JobSettings

    settings = JobSettings(data_root=tmp_path, home=tmp_path / "home")
    settings.prepare()
    app = create_app(settings)
    assert settings.runs_dir is not None
    with TestClient(app) as c:
        yield c, app.state.store, settings.runs_dir


def test_the_report_page_with_its_table_and_figures(
    client: tuple[TestClient, JobStore, Path],
) -> None:
    c, store, runs = client
    token = store.create_token("alice")
    exp = finished_experiment(store, runs, "cmp", owner="alice")
    url = f"/v1/experiments/{exp.name}/report"
    for headers, query in (
        (_h(token, "text/html"), ""),
        (_h(token, BROWSER_ACCEPT), ""),  # what a browser asks for
        (_h(token), "?format=html"),
        (_h(token, "application/json"), "?format=html"),  # the query wins
    ):
        r = c.get(url + query, headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/html"), headers
        assert "accept" in r.headers["vary"].lower()
    page = r.text
    assert '<table id="comparison">' in page and "vanilla (baseline)" in page
    assert "<img" in page and page.count("data:image/png;base64,") >= 1  # the loss curves
    for human in ("Δ BLEU", "95% CI of Δ", "detectable Δ", "p bootstrap", "verdict"):
        assert f"<th>{human}</th>" in page
    for raw in ("bleu_mean", "seed_p", "p_value"):
        assert raw not in page
    # the same page as ``synattn report`` writes, beside the experiment's runs
    written = runs / f"cmp-{exp.id[:6]}" / "report"
    assert (written / "report.html").read_text(encoding="utf-8") == page
    assert (written / "loss.png").is_file() and (written / "report.json").is_file()
    # by id as by name
    assert c.get(f"/v1/experiments/{exp.id}/report?format=html", headers=_h(token)).text == page


def test_json_stays_the_default(client: tuple[TestClient, JobStore, Path]) -> None:
    c, store, runs = client
    token = store.create_token("alice")
    exp = finished_experiment(store, runs, "cmp", owner="alice")
    url = f"/v1/experiments/{exp.name}/report"
    for headers, query in (
        (_h(token), ""),  # no Accept at all
        (_h(token, "*/*"), ""),
        (_h(token, "application/json"), ""),
        (_h(token, "application/json, text/html"), ""),  # a tie: JSON
        (_h(token, "text/html;q=0.5, application/json"), ""),
        (_h(token, "text/html;q=0, */*"), ""),  # the specific range's q counts
        (_h(token, "text/html"), "?format=json"),
    ):
        r = c.get(url + query, headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json", headers
        assert {row["variant"] for row in r.json()["rows"]} == {"vanilla", "dea"}


def test_the_page_has_the_json_routes_auth_and_bounds(
    client: tuple[TestClient, JobStore, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, store, runs = client
    token, mallory = store.create_token("alice"), store.create_token("mallory")
    exp = finished_experiment(store, runs, "cmp", owner="alice")
    url = f"/v1/experiments/{exp.name}/report?format=html"
    r = c.get(url, headers={"Accept": "text/html"})
    assert r.status_code == 401 and r.json()["detail"] == "missing bearer token"
    assert c.get(url, headers=_h("sya_not-a-token")).status_code == 403
    # another user's experiment is not told apart from a missing one
    for ref in (exp.name, exp.id, "nope"):
        r = c.get(f"/v1/experiments/{ref}/report?format=html", headers=_h(mallory))
        assert r.status_code == 404 and r.json()["detail"].startswith("no experiment"), ref
    assert c.get(url.replace("html", "pdf"), headers=_h(token)).status_code == 422
    # no run has finished: nothing to draw, and the message says so
    waiting = store.create_experiment("later", "vanilla", {"seeds": [1]}, owner="alice")
    store.create_job("train", "vanilla-s1", {}, str(runs / "later" / "vanilla-s1"),
                     experiment_id=waiting.id, variant="vanilla", seed=1,
                     owner="alice")  # fmt: skip
    r = c.get("/v1/experiments/later/report", headers=_h(token, "text/html"))
    assert r.status_code == 409
    assert "no finished runs yet (1 queued)" in r.json()["detail"]
    assert c.get("/v1/experiments/later/report", headers=_h(token)).status_code == 200  # JSON
    # a page over the cap is refused with the cap and where to get it instead
    import synattn_jobs.routes.experiments as route

    monkeypatch.setattr(route, "MAX_REPORT_BYTES", 1000)
    r = c.get(url, headers=_h(token))
    assert r.status_code == 413, r.text
    assert "bytes, over the 1,000 this API serves" in r.json()["detail"]
    assert "`synattn report cmp`" in r.json()["detail"]
