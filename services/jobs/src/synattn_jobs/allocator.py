"""The memory allocator a training worker starts with: one that keeps the pages it frees.

A CPU training update allocates and frees tensors of tens to hundreds of MB (the logits of a
4,096-token batch over 8,000 subwords are 131 MB, their log-softmax and gradients as much
again). glibc serves every block over 32 MB with a fresh ``mmap`` and returns it with
``munmap``, so each update the kernel faults in, and zeroes, those pages anew: on the study's
2-core EPYC 70,000 page faults and 15-25% of a worker's CPU time per update
(``bench/training/allocator.py``). jemalloc told never to purge freed pages reuses them instead, as
PyTorch's own CPU launcher (``torch.backends.xeon.run_cpu``) preloads it: 1.22x the target
tokens/s of glibc there, with the trained weights the same bit for bit. The cost: a worker's
resident memory stays at its peak. Where jemalloc is not installed the worker keeps glibc:
torch's ``THP_MEM_ALLOC_ENABLE`` (2 MB pages) cut the faults 20-fold but not the time (1.00x).

An allocator is chosen when the process starts, so this is the environment of the processes
``synattn worker`` starts. ``SYNATTN_SYSTEM_MALLOC=1``, or an ``LD_PRELOAD``/``MALLOC_CONF``/
``THP_MEM_ALLOC_ENABLE`` of one's own, leaves the environment as it is.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

JEMALLOC_NAMES = ("libjemalloc.so.2", "libjemalloc.so")
JEMALLOC_KEEP = "dirty_decay_ms:-1,muzzy_decay_ms:-1"  # freed pages stay for the next update
OPT_OUT = "SYNATTN_SYSTEM_MALLOC"
CHOSEN_BY_USER = ("LD_PRELOAD", "MALLOC_CONF", "THP_MEM_ALLOC_ENABLE")


def find_jemalloc() -> str | None:
    """The system's jemalloc (``ldconfig -p``), or None where it is not installed (Debian and
    Ubuntu: ``apt install libjemalloc2``)."""
    try:
        listing = subprocess.run(
            ["ldconfig", "-p"], capture_output=True, text=True, check=False, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in listing.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ")[0] in JEMALLOC_NAMES and Path(path).is_file():
            return path
    return None


def training_env(environ: Mapping[str, str], jemalloc: str | None = None) -> dict[str, str]:
    """What to add to a training process's environment ``environ``: jemalloc (``jemalloc``,
    else the system's) keeping its freed pages; nothing where it is not installed, or where
    the user opted out or chose an allocator."""
    if environ.get(OPT_OUT, "").strip() not in ("", "0"):
        return {}
    if any(environ.get(k) for k in CHOSEN_BY_USER):
        return {}
    path = jemalloc or find_jemalloc()
    return {"LD_PRELOAD": path, "MALLOC_CONF": JEMALLOC_KEEP} if path else {}
