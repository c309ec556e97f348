"""Every number input of the services' pages starts at a value the browser accepts: inside
``min``/``max`` and on the ``step`` grid (HTML's step base is ``min``), so a page never refuses
its own default ("the two nearest valid values are 9.6 and 10.1" for the playground's τ = 10
with ``min=0.1 step=0.5``)."""

from __future__ import annotations

from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest

import synattn_jobs
import synattn_parser

PAGES = [
    Path(synattn_parser.__file__).parent / "static" / "playground.html",
    Path(synattn_jobs.__file__).parent / "static" / "dashboard.html",
]


class _Numbers(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "input" and a.get("type") == "number":
            self.inputs.append(a)


def step_mismatch(value: str, lo: str | None, step: str | None) -> bool:
    """HTML's "suffering from a step mismatch" for a number input's initial value."""
    if step == "any":
        return False
    size = Decimal(step or "1")
    base = Decimal(lo) if lo is not None else Decimal(0)
    return (Decimal(value) - base) % size != 0


def test_step_mismatch_as_the_browser_sees_it() -> None:
    assert step_mismatch("10", "0.1", "0.5")  # the playground's τ before: 9.6 or 10.1
    assert not step_mismatch("10.1", "0.1", "0.5") and not step_mismatch("10", "0.1", "any")
    assert not step_mismatch("6", "0", "1") and step_mismatch("2.5", None, None)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_number_input_starts_valid(page: Path) -> None:
    found = _Numbers()
    found.feed(page.read_text(encoding="utf-8"))
    assert found.inputs, page
    for a in found.inputs:
        value = a.get("value")
        if value is None:
            continue
        assert a.get("min") is None or Decimal(value) >= Decimal(str(a["min"])), a
        assert a.get("max") is None or Decimal(value) <= Decimal(str(a["max"])), a
        assert not step_mismatch(value, a.get("min"), a.get("step")), a
    if page.name == "playground.html":  # τ takes any positive value the API takes
        (tau,) = [a for a in found.inputs if a["id"] == "tau"]
        assert tau["value"] == "10" and tau["step"] == "any"
