"""Tie a process's life to its parent's, so that no training process outlives its worker.

A worker killed with -9 (a lost node, the OOM killer) cannot stop the ``torchrun`` it started,
and an orphaned run would train on beside the worker that the reaper's requeue gives the job
next, two writers in one run folder. Linux's ``PR_SET_PDEATHSIG`` has the kernel send a signal
to a process when its parent dies, and the setting survives ``exec``:
``python -m synattn_jobs.tether PID SIGNAL CMD...`` sets it, checks that its parent is still
``PID`` (it may have died before the setting took), and becomes ``CMD``. It is a program, not
a ``preexec_fn``, because the worker has threads, and forking with threads is only safe up to
``exec``. The ranks tie themselves to ``torchrun`` the same way (``tie_to_parent``); the PID
they check comes from ``SYNATTN_TETHER_PID``, which is ``torchrun``'s own (``exec`` keeps it).
Elsewhere than Linux nothing is tied.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <sys/prctl.h>
PID_VAR = "SYNATTN_TETHER_PID"


def tie_to_parent(sig: int, parent: int | None = None) -> bool:
    """Have ``sig`` sent to this process when its parent dies; when ``parent`` is given and
    is no longer the parent (it died first), send it now. False where the kernel cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return True


def main(argv: list[str]) -> None:
    """``PID SIGNAL CMD...``: tie to ``PID`` with ``SIGNAL`` (a name: TERM, KILL), then exec.
    ``PID`` may be ``parent``: whichever process started this one (``srun``'s task on
    another node, whose starter is Slurm's step daemon)."""
    if len(argv) < 3:
        raise SystemExit("usage: python -m synattn_jobs.tether PARENT_PID|parent SIGNAL CMD...")
    parent = None if argv[0] == "parent" else int(argv[0])
    sig, cmd = signal.Signals[f"SIG{argv[1]}"], argv[2:]
    tie_to_parent(sig, parent)
    os.environ[PID_VAR] = str(os.getpid())  # the ranks' parent, once this becomes CMD
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
