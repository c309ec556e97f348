"""How many CPU cores this process may really use (its affinity and its cgroup's CPU quota).

``os.cpu_count()`` counts the machine's cores: in a container limited to two CPUs on a 64-core
node it says 64, and a server sizing its worker pool by it would start 64 model processes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"


def quota_cpus(cpu_max: str) -> int | None:
    """Cores a cgroup v2 ``cpu.max`` line allows (rounded up), or None when it sets no limit.

    >>> quota_cpus("150000 100000"), quota_cpus("max 100000")
    (2, None)
    """
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return max(1, math.ceil(quota / period))


def usable_cpus(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """Cores this process may run on: its CPU affinity, capped by its cgroup's quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    try:
        limit = quota_cpus(cpu_max.read_text())
    except OSError:
        limit = None
    return min(cores, limit) if limit is not None else cores
