"""A training worker starts with an allocator that keeps the pages it frees
(synattn_jobs.allocator): jemalloc where it is installed, glibc's default elsewhere; never
over the user's own choice. Measured in fresh processes on the kernel's count of minor page
faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synattn_jobs import allocator
from synattn_jobs.local_worker import worker_env

CHILD = """
import json, resource, torch
keep = []
def big_and_small():  # a large block freed, a small one kept: what a training step leaves
    t = torch.ones(16 * 2**20); keep.append(torch.ones(10)); del t
big_and_small()
before = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(8):
    big_and_small()
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"faults": (after.ru_minflt - before.ru_minflt) / 8,
                  "grew_mb": (after.ru_maxrss - before.ru_maxrss) / 1024}))
"""
PAGES = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")  # one 64 MB tensor (over glibc's mmap limit)


def _plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in allocator.CHOSEN_BY_USER}


def _run(env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, check=True, timeout=120)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_training_worker_reuses_freed_pages_and_its_memory_stays_put() -> None:
    env = _plain_env()
    extra = allocator.training_env(env)
    if "LD_PRELOAD" not in extra:
        pytest.skip("jemalloc is not installed here (apt install libjemalloc2)")
    system = _run(env)
    kept = _run({**env, **extra})
    assert system["faults"] > 0.5 * PAGES  # glibc maps, faults in and unmaps it every time
    assert kept["faults"] < 0.1 * PAGES
    assert kept["grew_mb"] < 64  # freed blocks are reused, not left behind as the heap grows


def test_the_allocator_is_jemalloc_keeping_its_pages_else_glibcs_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert allocator.training_env({}, "/opt/lib/libjemalloc.so.2") == {
        "LD_PRELOAD": "/opt/lib/libjemalloc.so.2",
        "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1",
    }
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)
    assert allocator.training_env({}) == {}


@pytest.mark.parametrize(
    "environ",
    [
        {"SYNATTN_SYSTEM_MALLOC": "1"},
        {"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"},
        {"MALLOC_CONF": "background_thread:true"},
        {"THP_MEM_ALLOC_ENABLE": "0"},
    ],
)
def test_an_allocator_chosen_by_the_user_is_left_alone(environ: dict[str, str]) -> None:
    assert allocator.training_env(environ, "/opt/lib/libjemalloc.so.2") == {}


def test_only_a_worker_that_trains_gets_the_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: "/opt/lib/libjemalloc.so.2")
    base = {"PATH": "/usr/bin"}
    assert worker_env("parse", base) == base
    assert worker_env("parse, train", base)["LD_PRELOAD"] == "/opt/lib/libjemalloc.so.2"
    assert worker_env("train", {**base, "SYNATTN_SYSTEM_MALLOC": "1"}) == {
        **base, "SYNATTN_SYSTEM_MALLOC": "1"
    }  # fmt: skip


def test_find_jemalloc_names_a_file_or_nothing() -> None:
    found = allocator.find_jemalloc()
    assert found is None or (Path(found).is_file() and "jemalloc" in Path(found).name)
