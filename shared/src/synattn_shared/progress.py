"""Progress of long work on stderr: a bar on a terminal, plain lines anywhere else.

A command that runs for more than a few seconds says where it is. On a terminal that is a rich
progress bar; when stderr is a file, a pipe or a CI log, a bar is invisible or a mess of
carriage returns, so the same progress comes as plain lines, as ``synattn train`` prints them
(``synattn_trainer.progress_lines``)::

    parse train.en.gz: 2,000/6,000 sentences (33.3%) | 95 sent/s | ETA 0:00:42

one per step at most every ``every`` seconds, and always the last one. stdout keeps what the
command produces (translations, ids, tables), so progress never mixes into it.
"""

from __future__ import annotations

import datetime
import time
from types import TracebackType
from typing import Any

from rich.console import Console


def hms(seconds: float) -> str:
    """``H:MM:SS`` of a duration (whole seconds)."""
    return str(datetime.timedelta(seconds=max(0, round(seconds))))


def eta(left: float, rate: float) -> str:
    """The time ``left`` units take at ``rate`` units per second ("?" without a rate)."""
    return hms(left / rate) if rate > 0 else "?"


def stderr_console() -> Console:
    """A console on this process's stderr (``sys.stderr`` as it is when a line is written)."""
    return Console(stderr=True, soft_wrap=True, highlight=False)


def plain(console: Console) -> bool:
    """True when progress on ``console`` must be plain lines: it is not an interactive
    terminal (a file, a pipe, CI; ``TERM=dumb`` too)."""
    return not console.is_terminal or console.is_dumb_terminal


class Progress:
    """One task's progress: ``advance`` it as work is done, ``close`` it at the end (or use it
    as a context manager). ``total`` may be unknown (None) or set later.

    Args:
        label: what runs, the start of every line ("parse train.en.gz").
        total: the units of the whole task, if known.
        unit: what is counted ("sentences").
        rate_unit: the unit of the rate ("sent" gives "95 sent/s"; default: ``unit``).
        every: plain lines: seconds between two lines at least (the last always prints).
        console: where it goes (default: stderr).
        lines: plain lines (True) or a bar (False); default: lines unless on a terminal.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        unit: str = "items",
        *,
        rate_unit: str | None = None,
        every: float = 5.0,
        console: Console | None = None,
        lines: bool | None = None,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.rate_unit = rate_unit or unit
        self.every = every
        self.console = console or stderr_console()
        self.lines = plain(self.console) if lines is None else lines
        self.done = 0
        self.timed = 0  # units done here (not found done by an earlier run): the rate's count
        self.note = ""
        self._t0 = time.monotonic()
        self._last_line = self._t0
        self._printed_at: int | None = None  # ``done`` at the last plain line
        self._bar: Any = None
        self._task: Any = None
        if not self.lines:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn(unit), TimeElapsedColumn(), TimeRemainingColumn(),
                TextColumn("{task.fields[note]}"), console=self.console, transient=False,
            )  # fmt: skip
            self._task = self._bar.add_task(label, total=total, note="")
            self._bar.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(finished=kind is None)

    def set_total(self, total: int | None) -> None:
        self.total = total
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def rate(self) -> float:
        """Units per second done here so far (0 before any)."""
        elapsed = time.monotonic() - self._t0
        return self.timed / elapsed if elapsed > 0 and self.timed else 0.0

    def line(self) -> str:
        """The plain line of where the task is now."""
        if self.total:
            parts = [
                f"{self.label}: {self.done:,}/{self.total:,} {self.unit} "
                f"({100 * self.done / self.total:.1f}%)"
            ]
        else:
            parts = [f"{self.label}: {self.done:,} {self.unit}"]
        rate = self.rate()
        if rate:
            parts.append(f"{rate:,.{1 if rate < 10 else 0}f} {self.rate_unit}/s")
        if self.total and self.done < self.total:
            parts.append(f"ETA {eta(self.total - self.done, rate)}")
        elif self.total:
            parts.append(f"took {hms(time.monotonic() - self._t0)}")
        if self.note:
            parts.append(self.note)
        return " | ".join(parts)

    def advance(self, n: int = 1, *, note: str | None = None, timed: bool = True) -> None:
        """``n`` more units done; ``timed=False``: found done (a resumed run), not counted in
        the rate; ``note``: a few words shown after the counts until the next note."""
        self.done += n
        if timed:
            self.timed += n
        if note is not None:
            self.note = note
        if self._bar is not None:
            self._bar.update(self._task, advance=n, note=self.note)
            return
        now = time.monotonic()
        final = self.total is not None and self.done >= self.total
        if final or now - self._last_line >= self.every:
            self._print(self.line())
            self._last_line, self._printed_at = now, self.done

    def say(self, text: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        self._print(text)

    def _print(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def close(self, finished: bool = True) -> None:
        """Stop the bar; plain lines: the last state, unless it was just printed (or the task
        failed: its error says where it stopped)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            return
        if finished and self._printed_at != self.done and self.done:
            self._print(self.line())
            self._printed_at = self.done
