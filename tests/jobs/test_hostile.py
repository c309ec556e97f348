"""The job API as an attacker with a valid token would use it. Every case gets its exact status
(never a 5xx), and the server still answers a valid request afterwards."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.hostile import closed_within, status_of
from tests.jobs.conftest import Env, h, serving

API = tuple[str, str, Env]
TINY = "configs/tiny.yaml"


def still_serves(base: str, token: str) -> None:
    r = httpx.post(f"{base}/v1/jobs/train", headers=h(token),
                   json={"name": "ok", "spec": {"config": TINY}})  # fmt: skip
    assert r.status_code == 201, r.text
    assert httpx.get(f"{base}/v1/jobs/{r.json()['id']}", headers=h(token)).status_code == 200


def train(base: str, token: str, body: Any) -> httpx.Response:
    return httpx.post(f"{base}/v1/jobs/train", headers=h(token), json=body, timeout=30)


def raw(base: str, token: str, path: str, body: bytes) -> httpx.Response:
    headers = {**h(token), "content-type": "application/json"}
    return httpx.post(f"{base}{path}", headers=headers, content=body, timeout=30)


def grid(**kw: Any) -> dict[str, Any]:
    return {"name": "g", "config": TINY, "variants": ["vanilla"], **kw}


def write_config(env: Env, name: str, text: str) -> str:
    path = env.root / "configs" / name
    path.write_text(text, encoding="utf-8")
    return f"configs/{name}"


# ------------------------------------------------------------------ paths from users
@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"name": "../../../../etc", "spec": {"config": TINY}}, "name"),
        ({"name": ".hidden", "spec": {"config": TINY}}, "name"),
        ({"name": "a/b", "spec": {"config": TINY}}, "name"),
        ({"name": "x" * 101, "spec": {"config": TINY}}, "name"),
        ({"out": "/etc", "spec": {"config": TINY}}, "outside the runs folder"),
        ({"out": "../x", "spec": {"config": TINY}}, "'..'"),
        ({"out": ".", "spec": {"config": TINY}}, "not the folder itself"),
        ({"spec": {"config": "/etc/passwd"}}, "outside the data root"),
        ({"spec": {"config": "configs/../../../etc/passwd"}}, "'..'"),
        ({"spec": {"config": "configs/tiny\u0000.yaml"}}, "NUL"),
        ({"spec": {"config": "a/" * 2100}}, "config"),
        ({"spec": {"config": "c" * 300 + ".yaml"}}, "longer than 255"),
        ({"spec": {"config": "configs/nope.yaml"}}, "no such file"),
        ({"spec": {"config": ""}}, "config"),
        ({"spec": {"config": TINY, "overrides": {"data.train": "/etc"}}}, "data.train"),
    ],
)
def test_paths_and_names_from_users_are_confined(shared_api: API, body: Any, needle: str) -> None:
    base, token, _ = shared_api
    r = train(base, token, body)
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"], r.text
    still_serves(base, token)


def test_a_symlink_out_of_the_data_root_is_refused(shared_api: API) -> None:
    base, token, env = shared_api
    link = env.root / "configs" / "symlink-escape.yaml"  # no other test writes to this name
    link.unlink(missing_ok=True)
    link.symlink_to("/etc/hostname")
    r = train(base, token, {"spec": {"config": "configs/symlink-escape.yaml"}})
    assert r.status_code == 422 and "outside the data root" in r.json()["detail"]
    still_serves(base, token)


def test_the_service_home_is_never_reachable(shared_api: API) -> None:
    """The tests' SYNATTN_HOME lies inside the data root: its job store must stay private."""
    base, token, env = shared_api
    inside = env.home.relative_to(env.root)
    for body in ({"spec": {"config": str(inside / "jobs.sqlite")}},
                 {"out": str(env.home / "runs-here"), "spec": {"config": TINY}}):  # fmt: skip
        r = train(base, token, body)
        assert r.status_code == 422, r.text
    r = httpx.post(f"{base}/v1/jobs/parse", headers=h(token),
                   json={"spec": {"src": str(inside / "jobs.sqlite"), "out": "p/x"}})  # fmt: skip
    assert r.status_code == 422 and "private" in r.json()["detail"]
    still_serves(base, token)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (grid(params={"optim.warmup": ["x/../../../../etc"]}), "bad run name"),
        (grid(params={"optim.warmup": [".."]}), "optim.warmup"),  # "warmup.." is a safe name
        (grid(variants={"../evil": {}}, baseline="../evil"), "variants"),
        (grid(variants={"a/b": {}}), "variants"),
        (grid(name="../runs"), "name"),
        (grid(name=".x"), "name"),
        (grid(baseline="../x"), "baseline"),
        (grid(params={"optim.lr": [{"nested": 1}]}), "params"),
        (grid(params={"../x": [1]}), "params"),
        (grid(config="/etc/passwd"), "outside the data root"),
    ],
)
def test_grid_names_and_values_that_would_become_paths(
    shared_api: API, spec: Any, needle: str
) -> None:
    base, token, _ = shared_api
    r = httpx.post(f"{base}/v1/experiments", headers=h(token), json=spec, timeout=30)
    assert r.status_code == 422, r.text
    assert needle in r.text
    still_serves(base, token)


def test_artifacts_are_served_only_from_inside_the_job_folder(shared_api: API) -> None:
    base, token, _ = shared_api
    job = train(base, token, {"name": "art", "spec": {"config": TINY}}).json()
    folder = Path(job["out_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hyp.valid.txt").write_text("ein Test\n", encoding="utf-8")
    (folder / "passwd").symlink_to("/etc/passwd")
    (folder / "up").symlink_to(folder.parent)
    other = folder.parent / "someone-else"
    other.mkdir(exist_ok=True)
    (other / "secret.txt").write_text("not yours\n", encoding="utf-8")
    url = f"{base}/v1/jobs/{job['id']}/artifacts"
    assert httpx.get(f"{url}/hyp.valid.txt", headers=h(token)).text == "ein Test\n"
    listed = {a["name"] for a in httpx.get(url, headers=h(token)).json()}
    assert listed == {"hyp.valid.txt"}
    # through the link, a file of the folder itself is still inside it; a sibling's is not
    assert httpx.get(f"{url}/up/{folder.name}/hyp.valid.txt", headers=h(token)).status_code == 200
    for name in ("passwd", "up/someone-else/secret.txt", "..%2F..%2F..%2Fetc%2Fpasswd",
                 "%2Fetc%2Fpasswd", "x%00y", "a" * 300, "%ED%A0%80"):  # fmt: skip
        r = httpx.get(f"{url}/{name}", headers=h(token))
        assert r.status_code == 404, (name, r.status_code, r.text[:200])
    still_serves(base, token)


def test_a_job_recorded_outside_the_root_serves_nothing(shared_api: API) -> None:
    """Defence in depth: even a job row whose folder lies outside the data root (written by an
    older release, or by hand) serves no file."""
    base, token, env = shared_api
    store = env.store()
    job = store.create_job("train", "legacy", {"config": TINY}, "/etc", owner="tester")
    url = f"{base}/v1/jobs/{job.id}/artifacts"
    assert httpx.get(url, headers=h(token)).json() == []
    assert httpx.get(f"{url}/passwd", headers=h(token)).status_code == 404
    assert httpx.get(f"{base}/v1/jobs/{job.id}/metrics", headers=h(token)).json() == []


# ------------------------------------------------------------------ numbers and text
@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b'{"spec": {"config": "configs/tiny.yaml", "overrides": {"optim.lr": NaN}}}', "NaN"),
        (b'{"spec": {"config": "configs/tiny.yaml", "overrides": {"optim.lr": Infinity}}}',
         "Infinity"),
        (b'{"spec": {"config": "configs/tiny.yaml", "overrides": {"optim.lr": 1e999}}}',
         "out of range"),
        (b'{"spec": {"config": "configs/tiny.yaml", "overrides": {"train.seed": 1' + b"0" * 40
         + b"}}}", "integer out of range"),
        (b'{"name": "\\ud800", "spec": {"config": "configs/tiny.yaml"}}', "lone surrogate"),
        (b'{"spec": {"config": "configs/\\udfff.yaml"}}', "lone surrogate"),
        (b'{"spec": {"config": "configs/tiny.yaml", "overrides": {"\\ud800": 1}}}',
         "lone surrogate"),
        (b'{"spec": {"config": "configs/tiny.yaml"}', "invalid JSON"),
        (b'{"spec": ' + b"[" * 3000 + b"]" * 3000 + b"}", "nested deeper"),
        (b'{"spec": {"config": "\xff"}}', "UTF-8"),
        (b"[]", "body"),
    ],
)  # fmt: skip
def test_bad_json_is_a_422(shared_api: API, body: bytes, needle: str) -> None:
    base, token, _ = shared_api
    r = raw(base, token, "/v1/jobs/train", body)
    assert r.status_code == 422, r.text
    assert needle in r.text and isinstance(r.json()["detail"], str)
    still_serves(base, token)


# ------------------------------------------------------------------ configurations
@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"attention": {"enc_self": [{"name": "nope"}]}}, "unknown attention variant 'nope'"),
        ({"attention": {"enc_self": [{"name": "slr", "options": {"colour": 1}}]}}, "colour"),
        ({"attention": {"enc_self": [{"name": "slr", "options": {"tau": -1}}]}}, "tau"),
        ({"attention": {"enc_self": [{"name": "dea", "layers": [7]}]}}, "layers [7]"),
        ({"attention": {"enc_dec": [{"name": "dea"}]}}, "encoder self-attention only"),
        ({"attention": {"enc_self": [{"name": "fixed"}]}}, "7 fixed heads but the model has 4"),
        ({"attention": {"enc_self": [{"name": "lisa", "options": {"head": 9}}]}}, "lisa head"),
        ({"attention": {"enc_self": [{"name": "routing", "options": {"capsule_dim": 5}}]}},
         "capsule_dim"),
        ({"model.max_positions": -5}, "max_positions"),
        ({"decode.batch_sentences": 0}, "batch_sentences"),
        ({"model.d_model": 1e9}, "model.d_model"),
        ({"model.d_model": 8192}, "SYNATTN_MAX_D_MODEL"),
        ({"model.enc_layers": 100}, "SYNATTN_MAX_LAYERS"),
        ({"data.max_tokens": 1e9}, "data.max_tokens"),
        ({"data.max_tokens": 100_000}, "SYNATTN_MAX_TOKENS_PER_BATCH"),
        ({"train.max_updates": 10**7}, "SYNATTN_MAX_UPDATES"),
        ({"optim.lr": 0}, "lr"),
        ({"optim.betas": [0.9, "x"]}, "betas"),
        ({"model.d_model.x": 1}, "not a mapping"),
        ({"model": 5}, "model"),
        ({"data": 5}, "data"),
        ({"headmask.n": 10_000, "headmask.mode": "random"}, "headmask.n"),
        ({"colour": "red"}, "colour"),
    ],
)  # fmt: skip
def test_configurations_that_would_fail_in_the_worker_fail_at_submit(
    shared_api: API, overrides: dict[str, Any], needle: str
) -> None:
    base, token, _ = shared_api
    r = train(base, token, {"spec": {"config": TINY, "overrides": overrides}})
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"], r.text
    still_serves(base, token)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("data: [unclosed\n  x: {", "not valid YAML"),
        ("- a\n- b\n", "mapping, not a list"),
        ("just a scalar\n", "mapping, not a str"),
        ("data: 5\n", "data"),
        ("\xff\xfe", "config"),
        ("a: &a [*a, *a]\n", "config"),
    ],
)
def test_config_files_that_are_not_configs(shared_api: API, text: str, needle: str) -> None:
    base, token, env = shared_api
    cfg = write_config(env, f"bad-{abs(hash(text))}.yaml", text)
    r = train(base, token, {"spec": {"config": cfg}})
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"]
    still_serves(base, token)


def test_evaluating_a_split_the_config_lacks_fails_at_submit(shared_api: API) -> None:
    base, token, _ = shared_api
    r = train(base, token, {"spec": {"config": TINY, "evaluate": {"split": "test"}}})
    assert r.status_code == 422 and "no data.test" in r.json()["detail"]


def test_the_worker_trains_the_configuration_resolved_at_submit(shared_api: API) -> None:
    """Editing the YAML after submitting changes nothing: the job holds the resolved config."""
    base, token, env = shared_api
    cfg = write_config(env, "mutable.yaml", (env.root / TINY).read_text())
    job = train(base, token, {"spec": {"config": cfg, "overrides": {"optim.lr": 0.002}}}).json()
    resolved = job["spec"]["resolved"]
    assert resolved["optim"]["lr"] == 0.002 and resolved["model"]["d_model"] == 32
    (env.root / cfg).write_text("model: {d_model: 100000}\n", encoding="utf-8")
    from synattn_jobs.specs import StoredTrainSpec
    from synattn_trainer.config import TrainConfig

    stored = StoredTrainSpec.model_validate(env.store().get(job["id"]).spec)
    assert TrainConfig.model_validate(stored.resolved).model.d_model == 32
    r = train(base, token, {"spec": {"config": TINY, "resolved": {"model": {}}}})
    assert r.status_code == 422  # a client cannot hand in its own "resolved" config


def test_grids_are_bounded_before_they_are_planned(shared_api: API) -> None:
    base, token, _ = shared_api
    big = grid(seeds=list(range(100)), params={f"p{k}.x": list(range(100)) for k in range(10)})
    start = time.monotonic()
    r = httpx.post(f"{base}/v1/experiments", headers=h(token), json=big, timeout=30)
    assert r.status_code == 422 and "the limit is 200" in r.json()["detail"], r.text
    assert time.monotonic() - start < 5
    r = httpx.post(f"{base}/v1/experiments", headers=h(token), timeout=30,
                   json=grid(seeds=list(range(201))))  # fmt: skip
    assert r.status_code == 422
    r = httpx.post(f"{base}/v1/experiments", headers=h(token), timeout=30,
                   json=grid(params={"optim.warmup": []}))  # fmt: skip
    assert r.status_code == 422
    still_serves(base, token)


# ------------------------------------------------------------------ routes and queries
@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v1/jobs?state=bogus", 422),
        ("/v1/jobs?limit=1e999", 422),
        ("/v1/jobs?limit=0", 422),
        ("/v1/jobs?experiment=../x", 422),
        ("/v1/jobs?experiment=%ED%A0%80", 422),
        ("/v1/jobs/%ED%A0%80", 404),
        ("/v1/jobs/" + "a" * 5000, 404),
        ("/v1/jobs/000000000000", 404),
        ("/v1/experiments/%00", 404),
        ("/v1/experiments/..", 404),
        ("/v1/jobs/000000000000/events?interval=nan", 404),
    ],
)
def test_odd_ids_and_queries(shared_api: API, path: str, status: int) -> None:
    base, token, _ = shared_api
    r = httpx.get(f"{base}{path}", headers=h(token))
    assert r.status_code == status, r.text
    assert isinstance(r.json()["detail"], str)


@pytest.mark.parametrize("interval", ["nan", "inf", "-1", "0", "1e999", "61"])
def test_event_interval_is_finite_and_bounded(shared_api: API, interval: str) -> None:
    base, token, _ = shared_api
    job = train(base, token, {"spec": {"config": TINY}}).json()
    r = httpx.get(f"{base}/v1/jobs/{job['id']}/events?interval={interval}", headers=h(token))
    assert r.status_code == 422 and "interval" in r.text


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer \u00ff\u00fe", "Basic dXNlcjpwdw==", "Bearer " + "x" * 4000, "bearer  x"],
)
def test_odd_authorization_headers(shared_api: API, header: str) -> None:
    base, token, _ = shared_api
    r = httpx.get(f"{base}/v1/jobs", headers={"Authorization": header.encode("latin-1")})
    assert r.status_code in (401, 403), r.text
    still_serves(base, token)


def test_a_diverged_loss_does_not_break_the_views(shared_api: API) -> None:
    """NaN in stored progress or metrics comes back as null, not as a 500."""
    base, token, env = shared_api
    job = train(base, token, {"spec": {"config": TINY}}).json()
    env.store().set_progress(job["id"], {"loss": float("nan"), "update": 3})
    folder = Path(job["out_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text('{"event": "update", "loss": NaN}\nnot json\n')
    r = httpx.get(f"{base}/v1/jobs/{job['id']}", headers=h(token))
    assert r.status_code == 200 and r.json()["progress"] == {"loss": None, "update": 3}
    r = httpx.get(f"{base}/v1/jobs/{job['id']}/metrics", headers=h(token))
    assert r.json() == [{"event": "update", "loss": None}]
    listed = httpx.get(f"{base}/v1/jobs", headers=h(token))
    assert listed.status_code == 200


# ------------------------------------------------------------------ users
def test_users_see_and_cancel_only_their_own_jobs(shared_api: API) -> None:
    base, alice, env = shared_api
    bob = env.cli("token", "create", "bob").stdout.strip()
    root = env.cli("token", "create", "root", "--admin").stdout.strip()
    job = train(base, alice, {"name": "private", "spec": {"config": TINY}}).json()
    exp = httpx.post(f"{base}/v1/experiments", headers=h(alice), json=grid(name="mine")).json()
    assert job["owner"] == "tester"
    for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/artifacts",
                 f"/v1/jobs/{job['id']}/metrics", f"/v1/jobs/{job['id']}/events",
                 f"/v1/jobs/{job['id']}/artifacts/x", "/v1/experiments/mine",
                 f"/v1/experiments/{exp['id']}", "/v1/experiments/mine/report"):  # fmt: skip
        assert httpx.get(f"{base}{path}", headers=h(bob)).status_code == 404, path
    assert httpx.post(f"{base}/v1/jobs/{job['id']}/cancel", headers=h(bob)).status_code == 404
    assert httpx.get(f"{base}/v1/jobs", headers=h(bob)).json() == []
    assert httpx.get(f"{base}/v1/jobs?experiment=mine", headers=h(bob)).json() == []
    assert httpx.get(f"{base}/v1/experiments", headers=h(bob)).json() == []
    assert env.store().get(job["id"]).state == "queued"
    # the owner and an admin can
    assert httpx.get(f"{base}/v1/jobs/{job['id']}", headers=h(alice)).status_code == 200
    admin_view = httpx.get(f"{base}/v1/jobs", headers=h(root)).json()
    assert job["id"] in {j["id"] for j in admin_view}
    assert httpx.get(f"{base}/v1/experiments/mine", headers=h(root)).status_code == 200
    r = httpx.post(f"{base}/v1/jobs/{job['id']}/cancel", headers=h(root))
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    # tokens: who am I; only an admin makes tokens
    assert httpx.get(f"{base}/v1/tokens/self", headers=h(bob)).json() == {
        "name": "bob", "admin": False}  # fmt: skip
    r = httpx.post(f"{base}/v1/tokens", headers=h(bob), json={"name": "eve", "admin": True})
    assert r.status_code == 403
    r = httpx.post(f"{base}/v1/tokens", headers=h(root), json={"name": "carol"})
    assert r.status_code == 201
    carol = r.json()["token"]
    assert httpx.get(f"{base}/v1/tokens/self", headers=h(carol)).json()["name"] == "carol"
    assert httpx.get(f"{base}/v1/jobs", headers=h(carol)).json() == []


# ------------------------------------------------------------------ connections and the loop
def test_stalled_requests_are_closed(shared_api: API) -> None:
    base, token, _ = shared_api
    head = (
        f"POST /v1/jobs/train HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        "content-type: application/json\r\ncontent-length: 500\r\n\r\n"
    ).encode()
    took, reply = closed_within(base, head + b'{"spec": ', limit=15)
    assert status_of(reply) == 408 and 2.5 < took < 10
    took, reply = closed_within(base, b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n", limit=15)
    assert status_of(reply) == 408 and 1.5 < took < 10
    still_serves(base, token)


def test_a_locked_store_does_not_stall_other_routes(shared_api: API) -> None:
    """While the jobs table is locked, an event stream waits for it in a thread; the event loop
    keeps answering (``/v1/health`` in milliseconds, not seconds)."""
    base, token, env = shared_api
    job = train(base, token, {"spec": {"config": TINY}}).json()
    db = sqlite3.connect(env.home / "jobs.sqlite", timeout=1, isolation_level=None)
    streams: list[int] = []

    def follow() -> None:
        try:
            with httpx.stream("GET", f"{base}/v1/jobs/{job['id']}/events?interval=0.1",
                              headers=h(token), timeout=20) as s:  # fmt: skip
                streams.append(s.status_code)
                for _ in s.iter_text():
                    break
        except httpx.HTTPError:
            streams.append(-1)

    try:
        db.execute("BEGIN EXCLUSIVE")
        worker = threading.Thread(target=follow)
        worker.start()
        time.sleep(1.0)  # the stream's first read is waiting on the lock
        slowest = 0.0
        for _ in range(5):
            start = time.monotonic()
            assert httpx.get(f"{base}/v1/health", timeout=5).status_code == 200
            slowest = max(slowest, time.monotonic() - start)
        assert slowest < 0.5, slowest
    finally:
        db.execute("ROLLBACK")
        db.close()
    worker.join(timeout=30)
    assert streams and streams[0] == 200


def test_a_stream_ends_after_its_time_limit(embedded: Env) -> None:
    """``SYNATTN_EVENTS_MAX_S``: an idle follower is let go."""
    with serving(embedded, SYNATTN_EVENTS_MAX_S="1") as (base, token, _):
        job = train(base, token, {"spec": {"config": TINY}}).json()
        start = time.monotonic()
        with httpx.stream("GET", f"{base}/v1/jobs/{job['id']}/events?interval=0.2",
                          headers=h(token), timeout=20) as s:  # fmt: skip
            body = "".join(s.iter_text())
        assert "event: timeout" in body and time.monotonic() - start < 10


def test_the_cli_refuses_the_same_bad_input_with_one_line(embedded: Env) -> None:
    bad = embedded.cli("submit", "train", str(embedded.root / TINY), "--set", "optim.lr=.inf",
                       check=False)  # fmt: skip
    assert bad.returncode == 2 and "lr" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    bad = embedded.cli("submit", "train", str(embedded.root / TINY), "--name", "../x",
                       check=False)  # fmt: skip
    assert bad.returncode == 2 and "name" in bad.stderr
    bad = embedded.cli("token", "create", "a/b", check=False)
    assert bad.returncode == 2
    g = embedded.root / "configs" / "huge-grid.yaml"
    g.write_text(yaml.safe_dump(grid(config=str(embedded.root / TINY),
                                     seeds=list(range(100)),
                                     params={"optim.warmup": list(range(1, 11))})))  # fmt: skip
    bad = embedded.cli("experiment", "run", str(g), check=False)
    assert bad.returncode == 2 and "limit is 200" in bad.stderr
    assert os.environ.get("SYNATTN_MAX_GRID_JOBS") is None


def test_a_grid_file_names_its_config_relative_to_itself(embedded: Env) -> None:
    """``examples/experiments/x.yaml`` naming ``../configs/tiny.yaml`` is how ``make demo``
    works: resolved against the grid's folder, then confined to the data root like any path."""
    folder = embedded.root / "experiments"
    folder.mkdir(exist_ok=True)
    good = folder / "relative.yaml"
    good.write_text(yaml.safe_dump(grid(name="rel", config="../configs/tiny.yaml")))
    ok = embedded.cli("experiment", "run", str(good), check=False)
    assert ok.returncode == 0, ok.stderr
    bad = folder / "escape.yaml"
    bad.write_text(yaml.safe_dump(grid(name="esc", config="../" * 12 + "etc/passwd")))
    refused = embedded.cli("experiment", "run", str(bad), check=False)
    assert refused.returncode == 2 and "outside the data root" in refused.stderr
    nul = folder / "nul.yaml"
    nul.write_text(yaml.safe_dump(grid(name="nul", config="configs/\x00.yaml")))
    refused = embedded.cli("experiment", "run", str(nul), check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
