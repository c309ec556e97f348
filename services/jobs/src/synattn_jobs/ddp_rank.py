"""One rank of a multi-process training job: ``torchrun ... -m synattn_jobs.ddp_rank JOB``.

``JOB`` is the JSON the worker wrote into the run's ``ddp/`` folder (``synattn_jobs.ddp``):
the resolved configuration, the run folder, the loader processes, the process group's
timeout and how often to look for a stop request. Each rank:

- ties its life to ``torchrun``'s (``synattn_jobs.tether``) and writes ``rank-R.pid``;
- joins the process group itself, with ``ddp_timeout_s`` as its timeout, so that a collective
  waiting on a rank that hangs fails instead of holding the worker (``Trainer`` then finds the
  group made and keeps it);
- trains (or resumes from the run's newest checkpoint) with a ``should_stop`` all ranks agree
  on: rank 0 looks for ``ddp/stop``, and one all-reduce per update makes every rank stop at
  the same update (a rank stopping alone would leave the others waiting in the next one's
  gradient all-reduce). Rank 0 then saves a resume point, as a one-process job does;
- rank 0 writes ``result.json``: the ``TrainResult`` and the parameter count, what the worker
  needs to evaluate and to return the same result as a one-process job. A rank that raises
  writes ``rank-R.error`` (its cause on one line, then its traceback) for the job's error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synattn_jobs.tether import PID_VAR, tie_to_parent

if TYPE_CHECKING:  # torch is imported when a rank starts training, not with this module
    import torch

    from synattn_trainer.train import TrainResult

STOP_NAME = "stop"
RESULT_NAME = "result.json"


class AgreedStop:
    """``should_stop`` for every rank: true on all of them at the same update once the stop
    file exists. Rank 0 reads the file at most every ``poll_s``; every call is one all-reduce
    of a number (``Trainer`` calls it on every rank after every update)."""

    def __init__(self, stop_file: Path, poll_s: float, device: torch.device) -> None:
        self.stop_file, self.poll_s, self.device = stop_file, poll_s, device
        self.last = -float("inf")
        self.seen = False

    def __call__(self) -> bool:
        from synattn_trainer.train import global_sum, world

        rank, _ = world()
        if rank == 0:
            now = time.monotonic()
            if not self.seen and now - self.last >= self.poll_s:
                self.last = now
                self.seen = self.stop_file.exists()
        return global_sum(float(rank == 0 and self.seen), self.device) > 0


def result_json(result: TrainResult, parameters: int) -> dict[str, Any]:
    """A ``TrainResult`` (and the model's parameter count) as JSON."""
    text = {k: str(v) for k, v in result.finals.items()}
    return {
        "update": result.update, "epoch": result.epoch,
        "best_valid_loss": result.best_valid_loss,  # at epoch ends; best.pt's is the next
        "best_checkpoint_valid_loss": result.best_checkpoint_valid_loss,
        "best_checkpoint_update": result.best_checkpoint_update,
        "checkpoint": str(result.checkpoint) if result.checkpoint else None,
        "averaged": str(result.averaged) if result.averaged else None,
        "stopped": str(result.stopped), "selection": result.selection, "finals": text,
        "final_updates": result.final_updates, "checkpoint_updates": result.checkpoint_updates,
        "parameters": parameters,
    }  # fmt: skip


def result_from_json(data: dict[str, Any]) -> tuple[TrainResult, int]:
    """``result_json``'s inverse: the ``TrainResult`` and the parameter count."""
    from synattn_trainer.train import Stop, TrainResult

    def path(v: str | None) -> Path | None:
        return None if v is None else Path(v)

    best_loss = data["best_checkpoint_valid_loss"]  # None without a best_valid selection
    best_update = data["best_checkpoint_update"]
    result = TrainResult(
        update=int(data["update"]), epoch=int(data["epoch"]),
        best_valid_loss=float(data["best_valid_loss"]), checkpoint=path(data["checkpoint"]),
        averaged=path(data["averaged"]), stopped=Stop(data["stopped"]),
        selection=str(data["selection"]),
        finals={k: Path(v) for k, v in data["finals"].items()},
        final_updates={k: list(v) for k, v in data["final_updates"].items()},
        checkpoint_updates={k: int(v) for k, v in data["checkpoint_updates"].items()},
        best_checkpoint_valid_loss=None if best_loss is None else float(best_loss),
        best_checkpoint_update=None if best_update is None else int(best_update),
    )  # fmt: skip
    return result, int(data["parameters"])


def train(job: dict[str, Any], folder: Path) -> tuple[TrainResult, int]:
    """Join the group, train this rank's share; (the ``TrainResult``, the parameter count)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from synattn_trainer.config import TrainConfig
    from synattn_trainer.model import count_parameters
    from synattn_trainer.train import Trainer

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(
        "nccl" if cuda else "gloo", timeout=timedelta(seconds=float(job["timeout_s"]))
    )
    cfg = TrainConfig.model_validate(job["config"])
    trainer = Trainer(cfg, job["out"], progress=False, loader_workers=int(job["loader_workers"]))
    stop = AgreedStop(folder / STOP_NAME, float(job["poll_s"]), trainer.device)
    result = trainer.train(should_stop=stop)
    parameters = count_parameters(trainer.model)
    dist.destroy_process_group()  # after a clean end only: a broken group may not answer
    return result, parameters


def main(argv: list[str]) -> int:
    from synattn_shared.atomic import atomic_write_text

    job_file = Path(argv[0])
    folder = job_file.parent
    parent = os.environ.get(PID_VAR)
    tie_to_parent(signal.SIGKILL, int(parent) if parent else None)
    rank = int(os.environ.get("RANK", "0"))
    atomic_write_text(folder / f"rank-{rank}.pid", str(os.getpid()))
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    world = os.environ.get("WORLD_SIZE", "1")
    # in ddp/torchrun.log: where each rank ran (a multi-node job's nodes)
    print(f"synattn-node: rank {rank} of {world} on {node}", file=sys.stderr, flush=True)
    try:
        job = json.loads(job_file.read_text(encoding="utf-8"))
        result, parameters = train(job, folder)
    except BaseException as exc:
        from synattn_jobs.failure import failure_text

        # its cause on the first line, then the traceback (the job's error quotes the line)
        atomic_write_text(folder / f"rank-{rank}.error", failure_text(exc, with_traceback=True))
        raise
    if rank == 0:
        atomic_write_text(folder / RESULT_NAME, json.dumps(result_json(result, parameters)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
