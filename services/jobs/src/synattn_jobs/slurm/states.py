"""Slurm's job states mapped onto synattn's, and what the reconciler does about each pair.

Pure functions: the job store's view of a job and Slurm's view in, one ``Decision`` out.

- PENDING, CONFIGURING, REQUEUED, SUSPENDED, ...: queued, with Slurm's reason (Priority,
  Resources, BeginTime);
- RUNNING: running once the job's process claims it (queued until then);
- COMPLETED: succeeded, failed or cancelled, as the job's process recorded it;
- CANCELLED: cancelled;
- FAILED, OUT_OF_MEMORY, DEADLINE: failed, with Slurm's state, reason and its log's path;
- TIMEOUT, PREEMPTED, NODE_FAIL, BOOT_FAIL, or gone (Slurm no longer knows the job): queued
  again and submitted anew; it resumes from its checkpoint.

A job submitted anew too often (``slurm_max_resubmits``) fails instead, with the last reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Slurm's job states in which the job may still run (squeue's long names)
ACTIVE = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
    "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "SPECIAL_EXIT",
})  # fmt: skip
WAITING = ACTIVE - {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"}
FAILED = frozenset({"FAILED", "OUT_OF_MEMORY", "DEADLINE"})

Action = Literal["none", "note", "resubmit", "requeue", "fail", "cancel", "scancel"]


@dataclass(frozen=True)
class Decision:
    """What to do: ``note`` Slurm's state on the job; ``requeue`` the job in the store (Slurm
    requeued it itself); ``resubmit`` it to Slurm (the old job cancelled where it runs on);
    ``fail`` or ``cancel`` it; ``scancel`` a Slurm job whose synattn job has ended."""

    action: Action
    why: str = ""


def slurm_word(state: str | None) -> str:
    """``CANCELLED by 0`` and ``CANCELLED+`` read ``CANCELLED``; None reads ``gone``."""
    if not state:
        return "gone"
    return state.split()[0].rstrip("+")


def decide(
    store_state: str,
    silent: bool,
    slurm_state: str | None,
    resubmits: int,
    max_resubmits: int,
    ended_a_while_ago: bool = True,
) -> Decision:
    """The reconciler's choice for one job.

    ``store_state``: the job store's (queued, running, or a final state); ``silent``: a
    running job's heartbeat is older than ``stale_after_s``; ``slurm_state``: Slurm's state,
    None when Slurm no longer knows the job; ``resubmits``: how often it was submitted anew;
    ``ended_a_while_ago``: a finished synattn job ended more than ``stale_after_s`` ago (its
    process may still be exiting before that).
    """
    word = slurm_word(slurm_state)
    active = word in ACTIVE
    if store_state not in ("queued", "running"):
        if active and (word in WAITING or ended_a_while_ago):
            return Decision("scancel", f"the synattn job is {store_state}")
        return Decision("none")
    if store_state == "running" and not silent:
        return Decision("note") if active else Decision("none")  # it is recording its outcome
    if active:
        if store_state == "queued":
            return Decision("note")
        if word in WAITING:  # Slurm requeued it (preemption, scontrol requeue, node failure)
            return Decision("requeue", f"Slurm requeued it ({word})")
        return _again(f"its process stopped beating while Slurm says {word}", resubmits,
                      max_resubmits)  # fmt: skip
    if word == "CANCELLED":
        return Decision("cancel", "cancelled in Slurm (scancel)")
    if word in FAILED:
        return Decision("fail", f"the Slurm job ended {word}")
    if word == "gone":
        return _again("Slurm no longer knows its job", resubmits, max_resubmits)
    return _again(f"the Slurm job ended {word} before the job finished", resubmits,
                  max_resubmits)  # fmt: skip


def _again(why: str, resubmits: int, max_resubmits: int) -> Decision:
    if resubmits >= max_resubmits:
        return Decision("fail", f"{why}; submitted {resubmits} time(s) anew already "
                                "(SYNATTN_SLURM_MAX_RESUBMITS)")  # fmt: skip
    return Decision("resubmit", why)
