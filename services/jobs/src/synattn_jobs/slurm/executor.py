"""Jobs handed to Slurm: checked and submitted at once, cancelled with ``scancel``, and their
store records kept true to Slurm's view (``reconcile_once``)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.settings import JobSettings
from synattn_jobs.slurm import commands, ledger
from synattn_jobs.slurm.commands import SlurmError, SlurmJob
from synattn_jobs.slurm.script import batch_script, gpu_problem, probe_script, sbatch_options
from synattn_jobs.slurm.states import decide
from synattn_jobs.specs import Resources
from synattn_jobs.store import Job, JobStore

log = logging.getLogger("synattn.slurm")


def resources_of(job: Job) -> Resources:
    """A stored job's resources (a parse job has none: one process)."""
    raw = (job.spec or {}).get("resources") if job.kind == "train" else None
    return Resources.model_validate(raw or {})


def _cpus(job_spec: dict[str, Any], kind: str) -> int:
    return int(job_spec.get("workers", 1)) if kind == "parse" else 1


def log_dir(settings: JobSettings, job: Job) -> Path:
    """Where Slurm writes the job's output: ``<run>/slurm/`` (a parse job: under the runs
    folder, beside no dataset)."""
    if job.kind == "train":
        return Path(job.out_dir) / "slurm"
    assert settings.runs_dir is not None
    return settings.runs_dir / "slurm" / job.id


def check_submittable(
    settings: JobSettings, kind: str, resources: Resources, cpus: int = 1
) -> None:
    """Ask Slurm whether it would take such a job (``sbatch --test-only``); ``BadJobSpec``
    with Slurm's own message when not (unknown partition or account, above a limit)."""
    problem = gpu_problem(settings, resources) if kind == "train" else None
    if problem:
        raise BadJobSpec(problem)
    opts = sbatch_options(settings, kind, resources, "synattn-check", Path("/dev/null").parent,
                          cpus)  # fmt: skip
    opts = [o for o in opts if not o.startswith(("--output=", "--chdir="))]
    try:
        commands.sbatch(probe_script(), opts, test_only=True)
    except SlurmError as exc:
        raise BadJobSpec(f"Slurm refused the job: {exc}") from None


def submit(
    store: JobStore, settings: JobSettings, job: Job, again: str | None = None,
    avoid: str = "",
) -> str:  # fmt: skip
    """``sbatch`` the job; its Slurm job id, recorded in the store. A refusal (checked before
    the job was stored, so rare: a partition closed meanwhile) fails the job with Slurm's
    message. ``avoid``: nodes the job was just lost on (``--exclude``), where another node
    may take it."""
    folder = log_dir(settings, job)
    folder.mkdir(parents=True, exist_ok=True)
    opts = sbatch_options(settings, job.kind, resources_of(job), f"synattn-{job.id[:12]}", folder,
                          _cpus(job.spec or {}, job.kind))  # fmt: skip
    if avoid:
        opts.append(f"--exclude={avoid}")
    try:
        slurm_job = commands.sbatch(batch_script(settings, job.id), opts)
    except SlurmError as exc:
        ledger.end(store, job.id, "queued" if again is None else job.state, "failed",
                   f"Slurm refused the job: {exc}")  # fmt: skip
        raise BadJobSpec(f"Slurm refused the job: {exc}") from None
    ledger.submitted(store, job.id, slurm_job, again)
    log.info("job %s is Slurm job %s", job.id, slurm_job)
    return slurm_job


def submit_all(store: JobStore, settings: JobSettings, jobs: list[Job]) -> None:
    """Submit new jobs at once: Slurm, not synattn, decides when they run."""
    for job in jobs:
        submit(store, settings, job)


def cancel(job: Job) -> None:
    """The Slurm side of ``synattn cancel`` (the store's flag is already set): a job not yet
    claimed leaves Slurm's queue; a running one gets SIGTERM in its batch step only, so it
    stops at its next update, saves and records itself cancelled (a plain ``scancel`` would
    SIGKILL it ``KillWait`` seconds later, saved or not)."""
    if not job.slurm_job:
        return
    try:
        if job.state == "running":
            commands.scancel(job.slurm_job, signal="TERM", batch_only=True)
        else:
            commands.scancel(job.slurm_job)
    except SlurmError as exc:  # already gone: the reconciler settles the rest
        log.warning("scancel %s: %s", job.slurm_job, exc)


def _avoidable(nodes: str, job: Job) -> str:
    """Nodes a resubmitted job may avoid: those it was lost on, unless it needs every node
    of the partition anyway (a multi-node job: it may not, so nothing is excluded)."""
    return nodes if nodes and resources_of(job).nodes == 1 else ""


def _log_tail(settings: JobSettings, job: Job, slurm_job: str, lines: int = 8) -> str:
    path = log_dir(settings, job) / f"slurm-{slurm_job}.out"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no output at {path})"
    tail = [x for x in text.splitlines() if x.strip()][-lines:]
    return f"its output ({path}), last lines:\n" + "\n".join(tail)


def _describe(view: SlurmJob | None, slurm_job: str) -> str:
    if view is None:
        return f"Slurm job {slurm_job}"
    extra = ", ".join(x for x in (view.reason, f"exit {view.exit_code}" if view.exit_code
                                  else "", view.nodes and f"on {view.nodes}") if x)  # fmt: skip
    return f"Slurm job {slurm_job} ({view.state}{': ' + extra if extra else ''})"


def reconcile_once(store: JobStore, settings: JobSettings) -> list[str]:
    """One pass over the jobs with a Slurm job: Slurm's state and reason noted on each, and
    every job whose Slurm job ended, vanished or went silent settled (``states.decide``);
    what changed, one line each. Safe beside the jobs' own processes and other passes."""
    jobs = ledger.watched(store)
    if not jobs:
        return []
    views = commands.look_up(sorted({j.slurm_job for j in jobs if j.slurm_job}))
    now = time.time()
    changed: list[str] = []
    for job in jobs:
        assert job.slurm_job is not None
        view = views.get(job.slurm_job)
        silent = job.state == "running" and (job.heartbeat_at or 0) < now - settings.stale_after_s
        long_ago = (job.finished_at or 0) < now - settings.stale_after_s
        d = decide(job.state, silent, view.state if view else None, job.release_count or 0,
                   settings.slurm_max_resubmits, long_ago)  # fmt: skip
        what = _describe(view, job.slurm_job)
        fresh = view is not None and (view.state, view.reason or None) != (
            job.slurm_state,
            job.slurm_reason,
        )
        if view is not None and fresh and d.action in ("note", "requeue", "none"):
            ledger.note(store, job.id, job.slurm_job, view.state, view.reason)
        if d.action == "requeue":
            if ledger.back_to_queued(store, job.id, f"{what}: {d.why}"):
                changed.append(f"{job.id}: queued again, {d.why}")
        elif d.action == "cancel":
            if ledger.end(store, job.id, job.state, "cancelled", f"{what}: {d.why}"):
                changed.append(f"{job.id}: cancelled, {d.why}")
            ledger.note(store, job.id, job.slurm_job, view.state if view else "GONE")
        elif d.action == "fail":
            error = f"{d.why}: {what}\n{_log_tail(settings, job, job.slurm_job)}"
            if ledger.end(store, job.id, job.state, "failed", error):
                changed.append(f"{job.id}: failed, {d.why}")
            ledger.note(store, job.id, job.slurm_job, view.state if view else "GONE")
        elif d.action == "resubmit":
            if view is not None and view.state in ("RUNNING", "COMPLETING", "PENDING"):
                with contextlib.suppress(SlurmError):  # silent, on a node Slurm thinks alive
                    commands.scancel(job.slurm_job)
            lost_on = view.nodes if view is not None and job.state == "running" else ""
            why = f"{what}: {d.why}; submitted anew" + (f", not on {lost_on}" if lost_on else "")
            try:
                new = submit(store, settings, job, again=why, avoid=_avoidable(lost_on, job))
            except BadJobSpec as exc:
                changed.append(f"{job.id}: failed, {exc}")
            else:
                changed.append(f"{job.id}: {d.why}; now Slurm job {new}")
        elif d.action == "scancel":
            with contextlib.suppress(SlurmError):
                commands.scancel(job.slurm_job)
            ledger.note(store, job.id, job.slurm_job, "CANCELLED", d.why)
            changed.append(f"{job.id}: Slurm job {job.slurm_job} cancelled, {d.why}")
    for line in changed:
        log.warning("%s", line)
    return changed


def reconcile_quietly(store: JobStore, settings: JobSettings) -> None:
    """``reconcile_once`` where a reader wants fresh states (the CLI's listings): a Slurm
    that does not answer leaves them as they were, with a log line."""
    try:
        reconcile_once(store, settings)
    except SlurmError as exc:
        log.warning("could not ask Slurm for its jobs' states: %s", exc)


class Reconciler(threading.Thread):
    """``reconcile_quietly`` every half ``stale_after_s`` (at least 2 s), from the job API and
    from every running Slurm job, so a lost job is noticed while any of them runs; they take
    turns through the job store, so Slurm is asked once per period however many run."""

    def __init__(self, store: JobStore, settings: JobSettings) -> None:
        super().__init__(daemon=True, name="synattn-slurm-reconciler")
        self.store, self.settings = store, settings
        self.interval_s = max(2.0, settings.stale_after_s / 2)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            try:
                # a little under the period: a timer that wakes late must not skip a turn
                if self.store.take_turn("slurm-reconcile", 0.8 * self.interval_s):
                    reconcile_quietly(self.store, self.settings)
            except Exception:  # a store hiccup: the next pass retries
                log.exception("reconcile pass failed")
