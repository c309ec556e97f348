"""Progress of long work: plain lines off a terminal (at most one every ``every`` seconds, and
always the last), a bar on one."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from synattn_shared import progress
from synattn_shared.progress import Progress, eta, hms


def test_plain_lines_are_throttled_and_the_last_one_always_prints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    out = io.StringIO()
    bar = Progress("translate valid", 300, "sentences", rate_unit="sent", every=5,
                   console=Console(file=out, width=40))  # fmt: skip
    assert bar.lines
    for t in (1, 2, 6):  # 100 a second; the line at 6 s is the first 5 s after the start
        clock[0] = t
        bar.advance(100 if t < 6 else 50)
    clock[0] = 7
    bar.advance(50)  # the last: printed at once
    bar.close()  # already said: nothing more
    assert out.getvalue().splitlines() == [
        "translate valid: 250/300 sentences (83.3%) | 42 sent/s | ETA 0:00:01",
        "translate valid: 300/300 sentences (100.0%) | 43 sent/s | took 0:00:07",
    ]  # one line each, however narrow the console
    assert hms(3725.4) == "1:02:05" and eta(10, 0) == "?"


def test_a_terminal_gets_a_bar_and_no_lines() -> None:
    out = io.StringIO()
    with Progress("parse train.en", 4, "sentences",
                  console=Console(file=out, force_terminal=True, width=100)) as bar:  # fmt: skip
        assert not bar.lines
        bar.advance(4, note="2 shard(s) written")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "parse train.en" in text and "4/4" in text and "2 shard(s) written" in text
    assert " | " not in text
