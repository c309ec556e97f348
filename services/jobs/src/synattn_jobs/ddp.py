"""Data-parallel training jobs: a worker runs a job of N processes under ``torchrun``.

A worker owns ``SYNATTN_WORKER_DEVICES`` devices (default: the CUDA GPUs it sees, else 1) and
runs one job at a time. A job of N > 1 processes (``resources.processes``) is launched as
``python -m torch.distributed.run --standalone --nproc_per_node N -m synattn_jobs.ddp_rank
JOB`` in a session of its own, ``CUDA_VISIBLE_DEVICES`` naming the worker's first N GPUs on
a GPU node (gloo processes on a CPU one). The worker stays the job's owner throughout:

- progress: rank 0 appends the run's ``metrics.jsonl``; the worker reads what it adds and
  reports each update, as the one-process runner's ``on_update`` does;
- cancellation (the job's cancel flag, the worker shutting down, the job lost): the worker
  writes ``ddp/stop``; the ranks agree to stop at their next update and rank 0 saves a resume
  point (``ddp_rank``). Processes still running ``ddp_stop_grace_s`` later get SIGTERM (their
  process group; ``torchrun`` passes it to the ranks), and SIGKILL 45 s after that. A job
  stopped for a shutdown resumes from that point on the next worker;
- the worker killed (-9): ``torchrun`` gets SIGTERM from the kernel and ends its ranks, which
  die with it in any case (``synattn_jobs.tether``); the reaper requeues the job and the next
  worker resumes it from the run's newest checkpoint, as for a one-process job;
- a rank dying: ``torchrun`` (``--max-restarts 0``) ends the others and exits non-zero; a
  rank stuck in a collective fails after ``ddp_timeout_s`` at the latest. The job fails with
  each rank's end and the tail of ``ddp/torchrun.log``, and keeps its checkpoints:
  resubmitting it with the same ``--out`` resumes from them;
- the result: rank 0's ``TrainResult``, which the worker evaluates (translate, score) itself,
  so the job's result is the one a one-process job has.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synattn_jobs.ddp_rank import RESULT_NAME, STOP_NAME, result_from_json
from synattn_jobs.errors import Cancelled
from synattn_jobs.failure import Described
from synattn_jobs.settings import JobSettings

if TYPE_CHECKING:  # torch is imported by the processes that train, not with this module
    from synattn_trainer.config import TrainConfig
    from synattn_trainer.train import TrainResult

FOLDER = "ddp"  # inside the run folder: the job file, stop request, result, log, rank files
POLL_S = 0.5  # how often the worker reads metrics.jsonl and the cancel flag
KILL_AFTER_S = 45.0  # SIGTERM to SIGKILL: torchrun gives its ranks 30 s


class RankFailed(Described):
    """A rank of a multi-process job died or raised, and ``torchrun`` ended the job; the
    message is the job's error (``_describe_failure``), its first line the cause."""


def gpu_count() -> int:
    """CUDA GPUs this process sees (0 without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def worker_devices(settings: JobSettings) -> int:
    """The devices this worker owns: ``SYNATTN_WORKER_DEVICES``, else its GPUs, else 1."""
    return settings.worker_devices or gpu_count() or 1


def device_env(processes: int, environ: Mapping[str, str], gpus: int) -> dict[str, str]:
    """What a job's ranks add to the worker's environment: ``CUDA_VISIBLE_DEVICES`` naming the
    worker's first ``processes`` GPUs (of its own ``CUDA_VISIBLE_DEVICES`` where it has one:
    Kubernetes and Compose hand a container its GPUs that way); nothing on a CPU worker."""
    if gpus <= 0:
        return {}
    own = environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in own.split(",") if d.strip()] if own else []
    ids = ids or [str(i) for i in range(gpus)]
    if len(ids) < processes:
        raise ValueError(f"the job needs {processes} GPUs; this worker sees {len(ids)}")
    return {"CUDA_VISIBLE_DEVICES": ",".join(ids[:processes])}


def torchrun_command(processes: int, job_file: Path) -> list[str]:
    """``torchrun`` on one node for ``job_file``, tied to this process (``tether``)."""
    return [
        sys.executable, "-m", "synattn_jobs.tether", str(os.getpid()), "TERM",
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(processes), "--max-restarts", "0",
        "-m", "synattn_jobs.ddp_rank", str(job_file),
    ]  # fmt: skip


class MetricsTail:
    """The records appended to a ``metrics.jsonl`` since ``offset`` (complete lines only)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset = path, offset

    def new(self) -> Iterator[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if isinstance(rec, dict):
                    yield rec


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _root_cause(log: str) -> tuple[int | None, str | None]:
    """The rank ``torchrun`` observed failing first, and what it says of it (``Signal 9
    (SIGKILL) received by PID 123`` for a killed rank), from its log's failure summary."""
    at = log.rfind("Root Cause")
    if at < 0:
        return None, None
    summary = log[at:]
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", summary, re.MULTILINE)
    said = re.search(r"^\s*traceback\s*:\s*(.+)$", summary, re.MULTILINE)
    how = None
    if said is not None and not said.group(1).strip().startswith(("<N/A>", "To enable")):
        how = said.group(1).strip()
    return (int(rank.group(1)) if rank else None), how


def _describe_failure(folder: Path, processes: int, code: int) -> str:
    """Why the ranks ended, its first line the cause (``synattn_jobs.failure.cause``): the
    rank that failed first (``torchrun``'s root cause, else the first rank with a Python
    error) and its error; then each rank's error line (or none: it was killed, or ``torchrun``
    ended it), the tail of ``torchrun``'s log, which names the signal of a killed rank, and,
    when the run has checkpoints, that they are kept. At most about 3,000 characters, so that
    the job's error (4,000) keeps all of it."""
    from synattn_jobs.failure import cause

    log = folder / "torchrun.log"
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    root, how = _root_cause(text)
    said: dict[int, str] = {}
    for rank in range(processes):
        error = folder / f"rank-{rank}.error"
        if error.is_file():
            line = cause(error.read_text(encoding="utf-8", errors="replace"))
            if line:
                said[rank] = line[:300]
    if root is None or not 0 <= root < processes:
        root = min(said, key=lambda r: (folder / f"rank-{r}.error").stat().st_mtime, default=0)
    killed = "no Python error (killed, or ended by torchrun)"
    first = said.get(root) or (f"killed: {how}" if how else killed)
    lines = [
        f"the {processes}-process job failed: rank {root}: {first} (torchrun exited with "
        f"status {code})"
    ]
    lines += [f"rank {rank}: {said.get(rank, killed)}" for rank in range(processes)]
    if text:
        tail = text[-1500:].splitlines()[1:]
        lines += ["--- ddp/torchrun.log (last lines) ---", *tail, "---"]
    ckpts = folder.parent / "checkpoints"
    if any(ckpts.glob("ckpt-*.pt")) or (ckpts / "resume.pt").is_file():
        lines.append(
            "its checkpoints are kept: the same job submitted with --out resumes from them"
        )
    return "\n".join(lines)


def _prepare(folder: Path, cfg: TrainConfig, out_dir: Path, settings: JobSettings) -> Path:
    """A clean ``ddp/`` folder (an earlier attempt's stop request and result removed) and the
    job file the ranks read."""
    from synattn_shared.atomic import atomic_write_text

    folder.mkdir(parents=True, exist_ok=True)
    for old in [folder / STOP_NAME, folder / RESULT_NAME, *folder.glob("rank-*")]:
        old.unlink(missing_ok=True)
    job = {
        "config": cfg.model_dump(mode="json"), "out": str(out_dir),
        "loader_workers": settings.loader_workers, "timeout_s": settings.ddp_timeout_s,
        "poll_s": settings.cancel_poll_s,
    }  # fmt: skip
    job_file = folder / "job.json"
    atomic_write_text(job_file, json.dumps(job))
    return job_file


def train_ddp(
    cfg: TrainConfig,
    out_dir: Path,
    processes: int,
    on_update: Callable[[dict[str, Any]], None],
    should_stop: Callable[[], bool],
    settings: JobSettings,
    nodes: int = 1,
) -> tuple[TrainResult, int]:
    """Train ``cfg`` in ``out_dir`` on ``processes`` ranks (over ``nodes`` machines of a Slurm
    allocation: ``synattn_jobs.slurm.launch``); (rank 0's ``TrainResult``, the parameter
    count). ``Cancelled`` when a stop was asked for and the ranks did not finish,
    ``RankFailed`` when a rank died or raised."""
    folder = out_dir / FOLDER
    job_file = _prepare(folder, cfg, out_dir, settings)
    metrics = out_dir / "metrics.jsonl"
    tail = MetricsTail(metrics, metrics.stat().st_size if metrics.is_file() else 0)
    if nodes > 1:
        from synattn_jobs.slurm.launch import multi_node_command

        command = multi_node_command(nodes, processes // nodes, job_file)
        env = dict(os.environ)  # each node's torchrun sees the GPUs Slurm gave that node
    else:
        command = torchrun_command(processes, job_file)
        env = {**os.environ, **device_env(processes, os.environ, gpu_count())}
    with open(folder / "torchrun.log", "ab") as log:
        proc = subprocess.Popen(
            command, env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    stopping: float | None = None  # when the stop was asked for
    escalated: list[int] = []
    try:
        while True:
            try:
                code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            for rec in tail.new():
                if rec.get("event") == "update":
                    on_update(rec)
            if stopping is None and should_stop():
                (folder / STOP_NAME).touch()
                stopping = time.monotonic()
            elif stopping is not None:
                late = time.monotonic() - stopping - settings.ddp_stop_grace_s
                for sig, after in ((signal.SIGTERM, 0.0), (signal.SIGKILL, KILL_AFTER_S)):
                    if late >= after and sig not in escalated:
                        escalated.append(sig)
                        _signal_group(proc, sig)
    finally:
        if proc.poll() is None:  # this thread is leaving (an error): the ranks go too
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
    for rec in tail.new():
        if rec.get("event") == "update":
            on_update(rec)
    result_file = folder / RESULT_NAME
    if code == 0 and result_file.is_file():
        return result_from_json(json.loads(result_file.read_text(encoding="utf-8")))
    if stopping is not None:
        raise Cancelled(f"stopped before the ranks finished (torchrun exited with {code})")
    raise RankFailed(_describe_failure(folder, processes, code))
