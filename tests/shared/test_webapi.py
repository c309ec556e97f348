"""Strict JSON at the door of both APIs, and error bodies that are always valid JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synattn_shared.webapi import finite_json, safe_text, strict_loads


@pytest.mark.parametrize(
    "body",
    [b"NaN", b"[Infinity]", b"{\"a\": -Infinity}", b"1e999", b"[-1e400]", b"\"\\ud800\"",
     b"{\"\\udfff\": 1}", b"\xff", b"[" * 100 + b"]" * 100, b"123456789012345678901234567890"],
)  # fmt: skip
def test_refused(body: bytes) -> None:
    with pytest.raises(json.JSONDecodeError):
        strict_loads(body)


def test_accepted() -> None:
    assert strict_loads(b'{"a": [1, 2.5, "\\u00e9", null, true]}') == {
        "a": [1, 2.5, "é", None, True]}  # fmt: skip


@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_a_decode_error(body: bytes) -> None:
    try:
        value = strict_loads(body)
    except json.JSONDecodeError:
        return
    json.dumps(value, allow_nan=False).encode("utf-8")  # what passed is serialisable


def test_safe_text_and_finite_json() -> None:
    assert safe_text("a\ud800b").encode("utf-8")
    assert len(safe_text("x" * 10_000)) < 400
    assert finite_json({"a": [float("nan"), 1.0, float("inf")]}) == {"a": [None, 1.0, None]}


def test_app_state_dependencies_run_on_the_event_loop() -> None:
    """A plain-function dependency costs a thread-pool round trip per request in FastAPI;
    the state readers are coroutine functions, and still return the app's object."""
    import asyncio
    import inspect
    from types import SimpleNamespace

    from synattn_shared.webapi import app_state

    read = app_state("store", dict)
    assert inspect.iscoroutinefunction(read)
    store: dict[str, int] = {"a": 1}
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(store=store)))
    assert asyncio.run(read(request)) is store  # type: ignore[arg-type]
