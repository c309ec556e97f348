"""The Slurm executor's pure parts, without a cluster: the state mapping and the reconciler's
choices, the parsers of Slurm's output, the sbatch options and batch script, and what a
job's resources may ask for."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pydantic import ValidationError

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.settings import JobSettings
from synattn_jobs.slurm.commands import parse_sacct, parse_scontrol, parse_squeue
from synattn_jobs.slurm.script import batch_script, gpu_problem, request, sbatch_options
from synattn_jobs.slurm.states import decide, slurm_word
from synattn_jobs.specs import Resources, SlurmRequest
from synattn_jobs.submit import check_executor


@pytest.mark.parametrize(
    ("store", "silent", "slurm", "action"),
    [
        ("queued", False, "PENDING", "note"),
        ("queued", False, "RUNNING", "note"),  # started, not yet claimed
        ("running", False, "RUNNING", "note"),
        ("running", False, "COMPLETED", "none"),  # its process is recording its outcome
        ("running", True, "RUNNING", "resubmit"),  # silent on a node Slurm thinks alive
        ("running", True, "PENDING", "requeue"),  # Slurm requeued it (preemption, requeue)
        ("running", True, "OUT_OF_MEMORY", "fail"),
        ("running", True, "NODE_FAIL", "resubmit"),
        ("running", True, None, "resubmit"),  # vanished
        ("queued", False, "CANCELLED by 0", "cancel"),  # a plain scancel
        ("queued", False, "FAILED", "fail"),  # died before it claimed the job
        ("queued", False, "TIMEOUT", "resubmit"),
        ("queued", False, "PREEMPTED", "resubmit"),
        ("queued", False, "COMPLETED", "resubmit"),
        ("queued", False, None, "resubmit"),
        ("cancelled", False, "PENDING", "scancel"),
        ("succeeded", False, "RUNNING", "scancel"),  # still running after it ended: stop it
        ("succeeded", False, "COMPLETED", "none"),
        ("failed", False, None, "none"),
    ],
)
def test_the_reconciler_maps_each_pair_of_states_to_one_action(
    store: str, silent: bool, slurm: str | None, action: str
) -> None:
    assert decide(store, silent, slurm, 0, 5).action == action


def test_a_job_submitted_anew_too_often_fails_with_the_reason() -> None:
    d = decide("running", True, "NODE_FAIL", 5, 5)
    assert d.action == "fail" and "NODE_FAIL" in d.why and "5 time(s)" in d.why
    # a finished job's process may still be exiting: its Slurm job is left alone a moment
    assert decide("succeeded", False, "RUNNING", 0, 5, ended_a_while_ago=False).action == "none"
    assert slurm_word("CANCELLED by 0") == "CANCELLED" and slurm_word(None) == "gone"


def test_slurms_output_is_parsed() -> None:
    jobs = parse_squeue("12|PENDING|Priority|\n13|RUNNING|None|n1\n\n")
    assert jobs["12"].state == "PENDING" and jobs["12"].reason == "Priority"
    assert jobs["13"].reason == "" and jobs["13"].nodes == "n1"
    fields = parse_scontrol("JobId=7 JobName=x JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15")
    assert fields["JobState"] == "TIMEOUT" and fields["ExitCode"] == "0:15"
    sacct = parse_sacct("7|CANCELLED by 0|0:0|n2\n7.batch|CANCELLED|0:15|n2\n")
    assert sacct is not None and (sacct.state, sacct.nodes) == ("CANCELLED", "n2")
    assert parse_sacct("") is None


def _settings(tmp_path: Path, **kw: object) -> JobSettings:
    return JobSettings(home=tmp_path / "h", data_root=tmp_path, executor="slurm", **kw)


def test_sbatch_options_carry_the_settings_and_a_jobs_own_request(tmp_path: Path) -> None:
    s = _settings(tmp_path, slurm_partition="gpu", slurm_parse_partition="cpu",
                  slurm_account="lab", slurm_time="12:00:00", slurm_gpus_per_node=4,
                  slurm_extra=["--constraint=a100"])  # fmt: skip
    res = Resources(processes=4, nodes=2, slurm=SlurmRequest(time="1-00:00:00", qos="high"))
    opts = sbatch_options(s, "train", res, "synattn-x", tmp_path / "log")
    for o in ("--partition=gpu", "--account=lab", "--qos=high", "--time=1-00:00:00",
              "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=2", "--requeue",
              "--signal=B:USR1@120", "--constraint=a100", "--cpus-per-task=2"):  # fmt: skip
        assert o in opts, (o, opts)
    parse = sbatch_options(s, "parse", Resources(), "synattn-p", tmp_path, cpus=3)
    assert "--partition=cpu" in parse and "--cpus-per-task=3" in parse
    assert not any(o.startswith("--gpus") for o in parse)
    assert request(s, "train", None).partition == "gpu"
    assert gpu_problem(s, Resources(processes=8)) is not None  # 8 per node, 4 GPUs a node
    script = batch_script(s, "abc123")
    assert script.startswith("#!/bin/bash\n") and "exec " in script
    assert "-m synattn_jobs.slurm.batch abc123" in script
    assert f"export SYNATTN_DATA_ROOT={tmp_path}" in script


@pytest.mark.parametrize(
    "bad",
    [
        {"partition": "gpu --uid=0"},
        {"account": "a;b"},
        {"time": "soon"},
        {"qos": ""},
        {"mem": "lots"},
        {"partition": "-x"},
    ],
)
def test_a_jobs_slurm_request_is_only_slurms_own_syntax(bad: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        SlurmRequest.model_validate(bad)


def test_resources_split_evenly_over_nodes_and_need_slurm_for_several(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="multiple of nodes"):
        Resources(processes=3, nodes=2)
    with pytest.raises(ValidationError, match="per node"):
        Resources(processes=17)
    assert Resources(processes=4, nodes=2).per_node == 2
    assert Resources(processes=2).model_dump(mode="json") == {"processes": 2}  # stored as before
    celery = JobSettings(home=tmp_path / "h", data_root=tmp_path)
    with pytest.raises(BadJobSpec, match="SYNATTN_EXECUTOR=slurm"):
        check_executor(celery, "train", Resources(processes=2, nodes=2))
    with pytest.raises(BadJobSpec, match=r"resources\.slurm"):
        check_executor(celery, "train", Resources(slurm=SlurmRequest(partition="gpu")))


def test_the_reconcilers_of_many_jobs_ask_slurm_once_per_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every running Slurm job and the job API each run a reconciler; they take turns through
    the job store, so Slurm is asked about once per period, not once per process."""
    import threading
    import time

    from synattn_jobs.slurm import executor
    from synattn_jobs.store import JobStore

    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    assert store.take_turn("slurm-reconcile", 60.0)  # a fresh store: the first caller's turn
    assert not store.take_turn("slurm-reconcile", 60.0)  # and nobody else's within the period
    assert store.take_turn("slurm-reconcile", 0.0)

    asked = []
    lock = threading.Lock()

    def fake_reconcile(*_: object) -> None:
        with lock:
            asked.append(time.monotonic())

    monkeypatch.setattr(executor, "reconcile_quietly", fake_reconcile)
    settings = JobSettings(home=tmp_path)
    threads = [executor.Reconciler(store, settings) for _ in range(6)]
    for k, t in enumerate(threads):
        t.interval_s = 0.25 + 0.01 * k  # six timers out of phase, as separate processes are
        t.start()
    time.sleep(2.6)
    for t in threads:
        t.stop.set()
    for t in threads:
        t.join(5)
    # 2.6 s of 0.25 s periods: about 10 passes in all (at most one per 0.8 of a period), where
    # six untethered timers would make about 60 (a loaded machine's timers wake late: fewer)
    assert 4 <= len(asked) <= 13, len(asked)
    assert min(b - a for a, b in itertools.pairwise(asked)) >= 0.19
