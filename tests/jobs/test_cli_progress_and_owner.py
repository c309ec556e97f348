"""What the job commands show a reader, in this process (no worker, no training: seconds).

- Off a terminal, ``synattn watch`` and ``synattn experiment run --wait`` print a plain line per
  job as it moves on (state, phase, update of the budget, loss, speed, time left, BLEU) and one
  when all are done; a live table is left for terminals. A scripted "worker" moves the jobs on
  between two polls. ``synattn study status`` words a running run the same way.
- What the CLI submits with ``SYNATTN_TOKEN`` set belongs to that token's user and shows in
  that user's listing (the dashboard's routes); without it, to the local admin ``local``, which
  an admin token sees with every job's owner.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from typer import Typer
from typer.testing import CliRunner

from synattn_jobs import cli as jobs_cli
from synattn_jobs import follow
from synattn_jobs import settings as settings_mod
from synattn_jobs.runners import Pace
from synattn_jobs.store import Job, JobStore
from tests.jobs.conftest import h, tiny_yaml
from tests.stand_in import stand_in_data


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An embedded store under ``tmp_path/home`` and a data root holding ``configs/tiny.yaml``
    (over stand-in data, ``tests.stand_in``: nothing trains)."""
    root = tmp_path / "root"
    fake = stand_in_data(root / "data")  # real enough for the checks at the door
    tiny_yaml(fake, root / "configs" / "tiny.yaml")
    monkeypatch.setenv("SYNATTN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SYNATTN_DATA_ROOT", str(root))
    monkeypatch.delenv("SYNATTN_TOKEN", raising=False)
    settings_mod.get_settings.cache_clear()
    yield root
    settings_mod.get_settings.cache_clear()


def synattn(*args: str, status: int = 0) -> Any:
    app = Typer()
    jobs_cli.register(app)
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == status, (res.output, res.exception)
    return res


def store() -> JobStore:
    return JobStore(settings_mod.get_settings().database_url)


def test_watch_off_a_terminal_prints_a_line_as_each_job_moves_on(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = store()
    exp = s.create_experiment("demo", "vanilla", {})
    a, b = (s.create_job("train", name, {}, str(home / name), experiment_id=exp.id)
            for name in ("vanilla-s1", "dea-s1"))  # fmt: skip
    clock = [0.0]  # the follower's clock: a minute per poll, so each new update may print
    monkeypatch.setattr(follow, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def train(job: Job, update: int, loss: float) -> None:
        s.set_progress(job.id, {"phase": "train", "max_updates": 400, "update": update,
                                "loss": loss, "tokens_per_s": 2104.4, "eta_s": 90.0})  # fmt: skip

    script: list[Callable[[], object]] = [
        lambda: s.claim(a.id, "w", 60),
        lambda: s.set_progress(a.id, {"phase": "train", "max_updates": 400}),
        lambda: train(a, 50, 7.1234),
        lambda: train(a, 100, 6.5),
        lambda: s.set_progress(a.id, {"phase": "translate valid (average)"}),
        lambda: s.finish(a.id, "succeeded", {"bleu": 3.21}),
        lambda: s.claim(b.id, "w", 60),
        lambda: s.finish(b.id, "failed", error="ValueError: diverged\n\nTraceback ..."),
    ]

    def sleep(_: float) -> None:  # a poll's wait: the worker's next step happens meanwhile
        clock[0] += 60
        script.pop(0)()

    monkeypatch.setattr(jobs_cli, "time", SimpleNamespace(sleep=sleep, monotonic=lambda: 0.0))
    res = synattn("watch", "demo", "--interval", "0", status=1)
    assert not script
    lines = res.stdout.splitlines()
    assert lines == [
        f"{a.id} vanilla-s1: queued | position 1 in the train queue",
        f"{b.id} dea-s1: queued | position 2 in the train queue",
        f"{a.id} vanilla-s1: running",
        f"{a.id} vanilla-s1: running (train)",
        f"{a.id} vanilla-s1: running (train) | update 50/400 (12.5%) | loss 7.123 | "
        "2,104 tok/s | ETA 0:01:30",
        f"{a.id} vanilla-s1: running (train) | update 100/400 (25.0%) | loss 6.500 | "
        "2,104 tok/s | ETA 0:01:30",
        f"{a.id} vanilla-s1: running (translate valid (average)) | update 100/400 (25.0%) | "
        "loss 6.500",
        f"{a.id} vanilla-s1: succeeded | update 100/400 (25.0%) | loss 6.500 | BLEU 3.21",
        f"{b.id} dea-s1: running",
        f"{b.id} dea-s1: failed | ValueError: diverged",
        "experiment demo: 2/2 jobs done (1 succeeded, 1 failed)",
    ]
    assert "\r" not in res.stdout and "\x1b" not in res.stdout
    assert b.id in res.stderr and a.id not in res.stderr  # watch names the failed job


def test_lines_of_a_running_job_come_at_most_every_few_seconds() -> None:
    said: list[str] = []
    lines = follow.JobLines(said.append, every=15)
    job = Job(id="a" * 12, name="vanilla-s1", kind="train", state="running",
              progress={"phase": "train", "update": 1, "max_updates": 10}, result={})  # fmt: skip
    for t, update in ((0, 1), (5, 2), (10, 3), (16, 4), (17, 4)):
        job.progress = {**job.progress, "update": update}
        lines.update([job], {}, now=t)
    assert [line.split(" | ")[1] for line in said] == [
        "update 1/10 (10.0%)",
        "update 4/10 (40.0%)",
    ]
    job.state = "succeeded"  # a new state prints at once
    lines.update([job], {}, now=18)
    assert said[-1].startswith("aaaaaaaaaaaa vanilla-s1: succeeded")


def test_study_status_says_when_each_running_run_should_land(home: Path) -> None:
    """``synattn study status`` words a running run as ``synattn watch`` does (a study's runs
    take hours: the update alone does not say when the next lands); a finished run gives its
    BLEU, a queued one nothing."""
    from synattn_jobs.study.driver import study_summary

    s = store()
    exp = s.create_experiment("study-x", "vanilla", {})
    done, running, _queued = (
        s.create_job("train", name, {}, str(home / name), experiment_id=exp.id,
                     variant=name.split("-")[0], seed=int(name[-1]))
        for name in ("vanilla-s1", "vanilla-s2", "vanilla-s3")
    )  # fmt: skip
    for job in (done, running):
        assert s.claim(job.id, "w", 60)
    assert s.finish(done.id, "succeeded", result={"bleu": 37.28})
    s.set_progress(running.id, {"phase": "train", "max_updates": 5000, "update": 1200,
                                "loss": 3.4567, "tokens_per_s": 2998.4,
                                "eta_s": 4321.0})  # fmt: skip
    assert study_summary(s, "study-x") == [
        "vanilla-s1                       succeeded  BLEU 37.28",
        "vanilla-s2                       running    update 1,200/5,000 (24.0%), loss 3.457, "
        "2,998 tok/s, ETA 1:12:01",
        "vanilla-s3                       queued",
        "study-x: 1/3 runs done (1 queued, 1 running, 1 succeeded)",
    ]
    assert study_summary(s, "nope") == ["nope: no such experiment in this queue"]


def test_the_runner_records_the_training_time_left() -> None:
    pace = Pace(400)
    assert pace.eta_s(50, now=100.0) is None  # the first logged update only starts the clock
    assert pace.eta_s(100, now=110.0) == 60.0  # 50 updates in 10 s, 300 left
    assert pace.eta_s(400, now=160.0) == 0.0


def test_cli_submissions_belong_to_the_user_of_the_configured_token(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grid = home / "configs" / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "tour", "config": "tiny.yaml",
                                    "baseline": "vanilla", "variants": ["vanilla", "dea"],
                                    "seeds": [1]}), encoding="utf-8")  # fmt: skip
    made = synattn("token", "create", "alice")
    alice = made.stdout.strip()
    assert alice.startswith("sya_") and "SYNATTN_TOKEN" in made.stderr
    boss = synattn("token", "create", "boss", "--admin").stdout.strip()
    # no token: the local admin's, as before
    res = synattn("experiment", "run", str(grid))
    assert "2 jobs queued, owned by local" in res.stdout
    # alice's token: hers, the experiment, its jobs, and a job submitted alone
    monkeypatch.setenv("SYNATTN_TOKEN", alice)
    settings_mod.get_settings.cache_clear()
    res = synattn("experiment", "run", str(grid))
    assert "2 jobs queued, owned by alice" in res.stdout
    exp_id = res.stdout.strip().splitlines()[-1]
    job_id = synattn("submit", "train", str(home / "configs" / "tiny.yaml")).stdout.strip()
    assert store().get(job_id).owner == "alice"
    assert {j.owner for j in store().jobs(experiment_id=exp_id)} == {"alice"}
    # what her dashboard lists: her experiment and jobs, not the local admin's
    app = jobs_cli_app()
    with TestClient(app) as client:
        exps = client.get("/v1/experiments", headers=h(alice)).json()
        assert [(e["id"], e["owner"]) for e in exps] == [(exp_id, "alice")]
        mine = client.get("/v1/jobs", headers=h(alice)).json()
        assert len(mine) == 3 and {j["owner"] for j in mine} == {"alice"}
        # an admin sees everyone's, with the owner the dashboard's owner column shows
        every = client.get("/v1/jobs", headers=h(boss)).json()
        assert sorted(j["owner"] for j in every) == ["alice"] * 3 + ["local"] * 2
        assert client.get("/v1/tokens/self", headers=h(boss)).json()["admin"] is True
    # a revoked (or foreign) token is refused in one line, nothing submitted
    synattn("token", "revoke", "alice")
    before = len(store().jobs())
    res = synattn("experiment", "run", str(grid), status=2)
    assert "SYNATTN_TOKEN is not a valid token" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and len(store().jobs()) == before


def jobs_cli_app() -> Any:
    from synattn_jobs.api import create_app

    return create_app(settings_mod.get_settings())


def test_the_dashboard_shows_an_admin_every_owner() -> None:
    """The page's owner column (shown to admin tokens) and its hint for CLI submissions."""
    static = Path(jobs_cli.__file__).parent / "static"
    html = (static / "dashboard.html").read_text(encoding="utf-8")
    js = (static / "dashboard.js").read_text(encoding="utf-8")
    assert len(re.findall(r'<th scope="col" class="owner" hidden>owner</th>', html)) == 2
    assert "export SYNATTN_TOKEN=" in html
    assert "admin = Boolean(who.admin)" in js
    assert "ownerCell(tr, job.owner)" in js and "ownerCell(tr, e.owner)" in js


def test_make_demo_ends_with_the_commands_that_open_its_report_and_dashboard() -> None:
    """The demo keeps its own job store: ``make demo`` ends by printing the commands, with its
    settings, that open its report and its dashboard (``make demo-help`` prints them again)."""
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    recipe = (repo / "Makefile").read_text(encoding="utf-8").split("\ndemo: venv\n")[1]
    recipe = recipe.split("\n\n")[0]
    assert "experiment run examples/experiments/demo.yaml" in recipe
    assert recipe.count("demo-help") == 2  # after a failed experiment too
    make = ["make", "-s", "--no-print-directory", "demo-help"]
    proc = subprocess.run(make, cwd=repo, capture_output=True, text=True, check=True, timeout=60)
    out = proc.stdout
    env = f"SYNATTN_HOME=build/demo/jobs SYNATTN_DATA_ROOT={repo} SYNATTN_RUNS_DIR=build/demo/runs"
    for command in ("synattn report demo", "synattn token create me --admin",
                    "synattn serve-jobs"):  # fmt: skip
        assert f"{env} .venv/bin/{command}\n" in out, out
    assert "http://127.0.0.1:8002/" in out
