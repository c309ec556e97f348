"""The job API over real HTTP against a real uvicorn process: auth, path checks, submit, cancel,
progress events, experiments. Tests that change no state share one server (``shared_api``)."""

from __future__ import annotations

import httpx
import pytest

from tests.jobs.conftest import Env
from tests.jobs.conftest import h as _h


def test_requests_without_or_with_a_wrong_token_are_refused(api: tuple[str, str, Env]) -> None:
    base, token, env = api
    assert httpx.get(f"{base}/v1/jobs").status_code == 401
    assert httpx.get(f"{base}/v1/jobs", headers=_h("sya_wrong")).status_code == 403
    r = httpx.post(f"{base}/v1/jobs/train", json={"spec": {"config": "configs/tiny.yaml"}})
    assert r.status_code == 401
    assert httpx.get(f"{base}/v1/jobs", headers=_h(token)).status_code == 200
    # only the digest is stored
    with env.store().session() as s:
        from synattn_jobs.store import ApiToken

        rows = s.query(ApiToken).all()
        assert rows and all(token not in (r.digest, r.name) for r in rows)
    env.cli("token", "revoke", "tester")
    assert httpx.get(f"{base}/v1/jobs", headers=_h(token)).status_code == 403


@pytest.mark.parametrize(
    "config",
    ["../configs/tiny.yaml", "configs/../../etc/passwd", "/etc/passwd", "/tmp/../etc/hosts"],
)
def test_paths_escaping_the_data_root_are_refused(
    shared_api: tuple[str, str, Env], config: str
) -> None:
    base, token, _ = shared_api
    r = httpx.post(f"{base}/v1/jobs/train", json={"spec": {"config": config}}, headers=_h(token))
    assert r.status_code == 422
    assert "data root" in r.text or "'..'" in r.text


def test_data_paths_inside_the_config_are_checked(shared_api: tuple[str, str, Env]) -> None:
    base, token, env = shared_api
    # a name of its own, written afresh: never through test_hostile's symlink to /etc/hostname
    bad = env.root / "configs" / "data-escape.yaml"
    bad.unlink(missing_ok=True)
    text = (env.root / "configs" / "tiny.yaml").read_text()
    bad.write_text(text.replace(str(env.root), "/usr/share"), encoding="utf-8")
    r = httpx.post(f"{base}/v1/jobs/train", json={"spec": {"config": "configs/data-escape.yaml"}},
                   headers=_h(token))  # fmt: skip
    assert r.status_code == 422 and "data." in r.json()["detail"]
    r = httpx.post(f"{base}/v1/jobs/parse", headers=_h(token),
                   json={"spec": {"src": "../x.en", "out": "parsed/x"}})  # fmt: skip
    assert r.status_code == 422


def test_submit_get_cancel_and_follow_a_job(api: tuple[str, str, Env]) -> None:
    base, token, _ = api
    spec = {"config": "configs/tiny.yaml", "overrides": {"train.max_updates": 3}}
    r = httpx.post(f"{base}/v1/jobs/train", headers=_h(token), json={"name": "t1", "spec": spec})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "queued" and job["spec"]["overrides"] == {"train.max_updates": 3}
    assert httpx.get(f"{base}/v1/jobs/{job['id']}", headers=_h(token)).json()["name"] == "t1"
    assert httpx.get(f"{base}/v1/jobs/nope", headers=_h(token)).status_code == 404
    r = httpx.post(f"{base}/v1/jobs/{job['id']}/cancel", headers=_h(token))
    assert r.json()["state"] == "cancelled"
    with httpx.stream("GET", f"{base}/v1/jobs/{job['id']}/events?interval=0.2",
                      headers=_h(token), timeout=10) as s:  # fmt: skip
        body = "".join(s.iter_text())
    assert "event: progress" in body and 'event: end\ndata: {"state": "cancelled"}' in body
    assert httpx.get(f"{base}/v1/jobs/{job['id']}/artifacts", headers=_h(token)).json() == []
    listed = httpx.get(f"{base}/v1/jobs?state=cancelled", headers=_h(token)).json()
    assert [j["id"] for j in listed] == [job["id"]]


def test_oversized_bodies_are_refused(shared_api: tuple[str, str, Env]) -> None:
    base, token, _ = shared_api
    big = {"spec": {"config": "configs/tiny.yaml", "overrides": {"x": "y" * 1_100_000}}}
    r = httpx.post(f"{base}/v1/jobs/train", json=big, headers=_h(token))
    assert r.status_code == 413 and "larger than" in r.json()["detail"]


def test_experiments_through_the_api(api: tuple[str, str, Env]) -> None:
    base, token, _ = api
    grid = {"name": "g", "config": "configs/tiny.yaml", "variants": ["vanilla", "dea", "lpea"],
            "seeds": [1, 2], "params": {"optim.lr": [0.001, 0.003]}}  # fmt: skip
    r = httpx.post(f"{base}/v1/experiments", json=grid, headers=_h(token))
    assert r.status_code == 201, r.text
    jobs = r.json()["jobs"]
    assert len(jobs) == 3 * 2 * 2
    assert {(j["variant"], j["seed"], j["params"]["optim.lr"]) for j in jobs} == {
        (v, s, lr) for v in ("vanilla", "dea", "lpea") for s in (1, 2) for lr in (0.001, 0.003)
    }
    dea = next(j for j in jobs if j["variant"] == "dea")
    assert dea["spec"]["overrides"]["attention"]["enc_self"][0]["name"] == "dea"
    exp = httpx.get(f"{base}/v1/experiments/g", headers=_h(token)).json()
    assert len(exp["jobs"]) == 12
    report = httpx.get(f"{base}/v1/experiments/g/report", headers=_h(token)).json()
    assert {r["variant"] for r in report["rows"]} >= {"vanilla [optim.lr=0.001]"}
    r = httpx.post(f"{base}/v1/experiments", headers=_h(token),
                   json={**grid, "variants": ["vanilla", "nope"]})  # fmt: skip
    assert r.status_code == 422 and "unknown variants" in r.text
    r = httpx.post(f"{base}/v1/experiments", headers=_h(token), json={**grid, "baseline": "x"})
    assert r.status_code == 422
