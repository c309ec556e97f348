"""A failed job says why in one line (issue 71): ``synattn watch``, ``synattn jobs`` and the
dashboard show the cause (for a multi-process job: which rank, and its error); the record keeps
the traceback; "its checkpoints are kept" only when there are checkpoints. A job whose files
went bad after it was queued fails at the worker's own check, before it trains, in one line.

In this process, without a worker or torchrun: records are written as they would be."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer import Typer
from typer.testing import CliRunner

from synattn_jobs import cli as jobs_cli
from synattn_jobs import settings as settings_mod
from synattn_jobs.ddp import _describe_failure
from synattn_jobs.failure import cause, failure_text
from synattn_jobs.store import JobStore
from synattn_shared.errors import BadFile, MissingFile

TORCHRUN_LOG = """\
[W] some warning
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
synattn_jobs/ddp_rank.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-01-01_00:00:00
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 101)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-01-01_00:00:00
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 102)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 102
============================================================
"""


def raised(exc: BaseException) -> BaseException:
    """``exc`` with a traceback, as a worker catches it."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_the_cause_is_the_first_line_and_the_traceback_stays_in_the_record() -> None:
    bad = raised(MissingFile("/d/tok.json", "does not exist", key="data.tokenizer"))
    assert failure_text(bad) == "data.tokenizer: /d/tok.json: does not exist"  # no traceback
    text = failure_text(raised(KeyError("update")))
    first, blank, *rest = text.splitlines()
    assert first == "KeyError: 'update'" and blank == "" and rest[0].startswith("Traceback")
    assert cause(text) == first
    long = failure_text(raised(RuntimeError("x" * 9000)))
    assert len(long) <= 4000 and cause(long) is not None and len(cause(long) or "") <= 600


@pytest.mark.parametrize(
    ("error", "want"),
    [
        ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
         "Exception: No such file or directory (os error 2)\n",
         "Exception: No such file or directory (os error 2)"),
        ('e "x.py", line 1, in f\n    g()\nValueError: diverged', "ValueError: diverged"),
        ("the 2-process job failed: rank 1: killed\nrank 0: x\nits checkpoints are kept: ...",
         "the 2-process job failed: rank 1: killed"),
        ("", None),
    ],
)  # fmt: skip
def test_cause_reads_new_records_by_their_first_line_and_old_tracebacks_by_their_last(
    error: str, want: str | None
) -> None:
    assert cause(error) == want


def test_the_dashboard_reads_the_cause_by_the_same_rule() -> None:
    """``causeOf`` in dashboard.js, run by node on the cases ``cause`` answers."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    js = (Path(jobs_cli.__file__).parent / "static" / "dashboard.js").read_text(encoding="utf-8")
    start = js.index("function causeOf(")
    body = js[start : js.index("\n}\n", start) + 3]
    cases = [
        "Traceback (most recent call last):\n  File \"x\", line 1\nKeyError: 'u'\n",
        "data.tokenizer: /d/t.json: does not exist",
        "RuntimeError: boom\n\nTraceback (most recent call last):\n  File \"x\"\nRuntimeError: b",
        "the 2-process job failed: rank 1: killed (torchrun exited with status 1)\nrank 0: y",
        'e "x.py", line 1, in f\n    g()\nValueError: diverged',
        "",
    ]  # fmt: skip
    import json

    script = f"{body}\nfor (const e of {json.dumps(cases)}) console.log(causeOf(e));"
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[: len(cases)] == [cause(c) or "" for c in cases]


def test_a_failed_multi_process_job_names_the_rank_and_keeps_checkpoints_only_when_there(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "run" / "ddp"
    folder.mkdir(parents=True)
    (folder / "torchrun.log").write_text(TORCHRUN_LOG, encoding="utf-8")
    err = failure_text(raised(RuntimeError("gloo: connection closed by peer")), True)
    (folder / "rank-0.error").write_text(err, encoding="utf-8")
    text = _describe_failure(folder, 2, 1)
    first = text.splitlines()[0]
    assert first == (
        "the 2-process job failed: rank 1: killed: Signal 9 (SIGKILL) received by PID 102 "
        "(torchrun exited with status 1)"
    )
    assert "rank 0: RuntimeError: gloo: connection closed by peer" in text
    assert "its checkpoints are kept" not in text
    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir()
    (ckpts / "ckpt-5.pt").write_bytes(b"")
    assert _describe_failure(folder, 2, 1).endswith(
        "its checkpoints are kept: the same job submitted with --out resumes from them"
    )
    # no summary from torchrun: the rank that raised first
    (folder / "torchrun.log").write_text("", encoding="utf-8")
    assert _describe_failure(folder, 2, 1).startswith(
        "the 2-process job failed: rank 0: RuntimeError: gloo: connection closed by peer"
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("SYNATTN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SYNATTN_DATA_ROOT", str(tmp_path))
    monkeypatch.delenv("SYNATTN_TOKEN", raising=False)
    settings_mod.get_settings.cache_clear()
    yield tmp_path
    settings_mod.get_settings.cache_clear()


def synattn(*args: str, status: int = 0) -> Any:
    app = Typer()
    jobs_cli.register(app)
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == status, (res.output, res.exception)
    return res


def test_watch_and_jobs_show_a_failed_jobs_cause_in_one_line(home: Path) -> None:
    store = JobStore(settings_mod.get_settings().database_url)
    one = store.create_job("train", "one", {}, str(home / "one"))
    two = store.create_job("train", "two", {}, str(home / "two"))
    for job in (one, two):
        store.claim(job.id, "w", 60)
    bad = raised(MissingFile("/d/tok.json", "does not exist", key="data.tokenizer"))
    store.finish(one.id, "failed", error=failure_text(bad))
    folder = home / "two" / "ddp"
    folder.mkdir(parents=True)
    (folder / "torchrun.log").write_text(TORCHRUN_LOG, encoding="utf-8")
    store.finish(two.id, "failed", error=_describe_failure(folder, 2, 1))

    res = synattn("watch", one.id, status=1)
    assert f"{one.id} one: failed: data.tokenizer: /d/tok.json: does not exist" in res.output
    res = synattn("watch", two.id, status=1)
    line = [x for x in res.output.splitlines() if x.startswith(two.id)][-1]  # watch's last
    assert line.endswith("failed: the 2-process job failed: rank 1: killed: Signal 9 (SIGKILL) "
                         "received by PID 102 (torchrun exited with status 1)")  # fmt: skip
    assert "checkpoints are kept" not in res.output
    listing = synattn("jobs", "--state", "failed").output
    assert all(word in listing for word in ("data.tokenizer:", "/d/tok.json:", "rank 1:"))


def test_a_job_whose_files_went_bad_after_submit_fails_before_it_trains(tmp_path: Path) -> None:
    """The worker checks the stored configuration's files again: a tokenizer removed since
    the job was accepted fails it in one line naming the key and the file."""
    from synattn_jobs.runners import run_train
    from synattn_jobs.specs import StoredTrainSpec
    from synattn_trainer.config import TrainConfig
    from tests.stand_in import stand_in_data

    data = stand_in_data(tmp_path / "data")
    cfg = TrainConfig.model_validate({"data": {k: str(v) for k, v in data.items()}})
    spec = StoredTrainSpec(config=str(tmp_path / "c.yaml"), resolved=cfg.model_dump(mode="json"))
    data["tokenizer"].unlink()
    with pytest.raises(BadFile) as info:
        run_train(spec, tmp_path / "run", lambda _: None, lambda: False)
    assert failure_text(info.value) == f"data.tokenizer: {data['tokenizer']}: does not exist; " \
        "name the tokenizer.json that `synattn tokenizer train` wrote"  # fmt: skip
    assert not (tmp_path / "run").exists()
