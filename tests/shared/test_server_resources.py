"""Sizing and heap habits of the long-running servers: usable cores, a frozen start-up heap."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from synattn_shared.cpus import quota_cpus, usable_cpus
from synattn_shared.heap import freeze_heap


@pytest.mark.parametrize(
    ("line", "cores"),
    [
        ("max 100000", None),  # no limit
        ("200000 100000", 2),
        ("150000 100000", 2),  # 1.5 cores: two workers can still use them
        ("50000 100000", 1),
        ("1 100000", 1),
        ("0 100000", None),
        ("-1 100000", None),
        ("abc 100000", None),
        ("", None),
        ("200000", None),
    ],
)
def test_cgroup_quota_in_cores(line: str, cores: int | None) -> None:
    assert quota_cpus(line) == cores


def test_usable_cpus_is_affinity_capped_by_the_quota(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    limited = tmp_path / "cpu.max"
    limited.write_text("100000 100000\n")
    assert usable_cpus(limited) == 1
    limited.write_text(f"{(affinity + 8) * 100000} 100000\n")  # a quota above the affinity
    assert usable_cpus(limited) == affinity
    limited.write_text("max 100000\n")
    assert usable_cpus(limited) == affinity
    assert usable_cpus(tmp_path / "missing") == affinity  # no cgroup v2 file: affinity


def test_parser_model_workers_default_to_usable_cores_but_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from synattn_parser.settings import (
        DEFAULT_MAX_MODEL_WORKERS,
        ParserSettings,
        default_model_workers,
    )

    monkeypatch.delenv("PARSER_MODEL_WORKERS", raising=False)
    monkeypatch.delenv("PARSER_MODEL_PROCESS", raising=False)
    assert ParserSettings().model_workers == default_model_workers(usable_cpus())
    assert [default_model_workers(n) for n in (1, 2, 3, 4, 5, 64)] == [1, 1, 2, 3, 4, 4]
    assert default_model_workers(64) == DEFAULT_MAX_MODEL_WORKERS
    assert ParserSettings(model_process=False).model_workers == 1  # a thread: one
    assert ParserSettings(model_process=False, model_workers=3).model_workers == 3  # as asked
    monkeypatch.setenv("PARSER_MODEL_WORKERS", "1")
    assert ParserSettings().model_workers == 1
    sent = ParserSettings(model_workers=3).model_dump_json()  # what a model process receives
    assert ParserSettings.model_validate_json(sent).model_workers == 3


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_freeze_heap_exempts_start_up_objects_and_still_collects_later_cycles() -> None:
    try:
        before = _Cycle()
        frozen = freeze_heap()
        assert frozen == gc.get_freeze_count() > 0
        # frozen: in no generation a collection scans
        assert gc.is_tracked(before) and not any(o is before for o in gc.get_objects())
        later = _Cycle()
        assert any(o is later for o in gc.get_objects())
        del later
        assert gc.collect() >= 1  # a cycle made after the freeze is collected as usual
    finally:
        gc.unfreeze()


def test_parser_api_and_model_process_freeze_their_start_up_heaps() -> None:
    """The parser's HTTP process freezes its heap when the app starts, the model process after
    loading a model (bench/parsing/parse.py: without it, 100 ms collections were the 64-client
    p99)."""
    import asyncio

    from synattn_parser.api import create_app
    from synattn_parser.pool import _load_in_model_process
    from synattn_parser.settings import ParserSettings

    settings = ParserSettings(preload=False, model_process=False)
    app = create_app(settings)

    async def start_and_stop() -> int:
        async with app.router.lifespan_context(app):
            return gc.get_freeze_count()

    try:
        gc.unfreeze()
        assert asyncio.run(start_and_stop()) > 0
        gc.unfreeze()
        info = _load_in_model_process("spacy", settings.model_dump_json())
        assert info.backend == "spacy" and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
