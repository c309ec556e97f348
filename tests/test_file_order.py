"""The test files' order: the slowest first, by the seconds an earlier run measured, whole
files kept together, unknown files weighed as the median one."""

from __future__ import annotations

import json
from pathlib import Path

from tests.file_order import known_durations, slowest_first


def test_files_run_longest_first_whole_and_unknown_ones_weigh_the_median() -> None:
    ids = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "d.py::t1", "e.py::t1"]
    seconds = {"a.py": 1.0, "b.py": 90.0, "c.py": 30.0, "e.py": 5.0}  # d.py: new, median 17.5
    order = [ids[i] for i in slowest_first(ids, seconds)]
    assert order == ["b.py::t1", "c.py::t1", "c.py::t2", "d.py::t1", "e.py::t1", "a.py::t1",
                     "a.py::t2"]  # fmt: skip
    assert slowest_first(ids, {}) == list(range(len(ids)))  # nothing measured: as collected


def test_recorded_durations_read_back_and_the_suite_has_them(tmp_path: Path) -> None:
    assert known_durations(tmp_path / "none.json") == {}  # none: collected order
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"tests/x.py": 3}), encoding="utf-8")
    assert known_durations(path) == {"tests/x.py": 3.0}
    assert known_durations(), "tests/file_durations.json: make test-durations writes it"
