"""Run the slowest test files first (a pytest plugin; ``tests/conftest.py`` loads it).

``make test`` spreads whole files over two pytest-xdist workers (``--dist loadfile``, so a
file's module fixtures, a trained run or a started server, are made once). A worker takes the
next file when it runs low, so a long file taken last keeps one core busy while the other has
nothing left: longest first shortens that tail. The files' seconds come from an earlier run
(``tests/file_durations.json``, written by ``pytest --store-durations``); a file it does not
know yet counts as the median one. Files of equal weight keep their collected order.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("file_durations.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write each test file's seconds (setup, call and teardown of its tests) to "
        "tests/file_durations.json, the order later runs take the files in",
    )


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def known_durations(path: Path = DURATIONS) -> dict[str, float]:
    if not path.is_file():
        return {}
    return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def slowest_first(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """The order (indices into ``nodeids``) that runs whole files, longest first; a file
    missing from ``seconds`` weighs the median of those known; ties keep collected order."""
    default = statistics.median(seconds.values()) if seconds else 0.0
    first: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first.setdefault(file_of(nodeid), i)

    def key(i: int) -> tuple[float, int, int]:
        f = file_of(nodeids[i])
        return (-seconds.get(f, default), first[f], i)

    return sorted(range(len(nodeids)), key=key)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = known_durations()
    if not seconds:
        return
    order = slowest_first([item.nodeid for item in items], seconds)
    items[:] = [items[i] for i in order]


class Recorder:
    """Sums each file's reported durations (on the xdist controller, which sees every
    worker's reports) and writes them when the session ends."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        rounded = {f: round(s, 1) for f, s in sorted(self.seconds.items())}
        DURATIONS.write_text(json.dumps(rounded, indent=1) + "\n", encoding="utf-8")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--store-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(), "synattn-file-durations")
