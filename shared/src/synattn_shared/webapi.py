"""What both synattn APIs do at the door: strict JSON in, one error shape out.

- Request bodies are parsed strictly: ``NaN``, ``Infinity`` and numbers that overflow to
  infinity (``1e999``), lone surrogates (``"\\ud800"``), invalid UTF-8 and absurd nesting are a
  422 with a message, before any route sees them.
- Every error body is a ``Problem``: ``{"detail": "...", "errors": [...]}``. Validation errors
  never echo the input (it may not be serialisable, and it may be large). A body of the wrong
  shape (a field missing or unknown, not an object) is answered with what the route's body
  looks like: its model's first OpenAPI example.
- ``problems(401, 404)`` documents a route's error responses in OpenAPI as they really are.

Imported only by services that serve HTTP; the shared core does not depend on FastAPI.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeVar

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from synattn_shared.errors import validation_reason

MAX_JSON_DEPTH = 64
MAX_ERRORS_SHOWN = 20
MAX_EXAMPLE_SHOWN = 400  # characters of a body example in a 422's detail
# pydantic error types that mean the body is not shaped like the route's model
SHAPE_ERRORS = frozenset(
    {"missing", "extra_forbidden", "model_attributes_type", "model_type", "dict_type"}
)

DESCRIPTIONS = {
    400: "Malformed request",
    401: "Missing bearer token",
    403: "Invalid or revoked token",
    404: "No such resource (or not yours)",
    408: "The request was not received in time",
    409: "The resource is not in a state that allows this (the message says why)",
    413: "Request or response too large (the limit is in the message)",
    422: "Invalid input (the message names the field)",
    429: "Over a quota; retry after the Retry-After header's seconds",
    501: "Not available in this installation",
    502: "A service this one relies on failed",
    503: "Not ready or temporarily unavailable; retry",
}


class ErrorItem(BaseModel):
    """One invalid field."""

    loc: list[str | int] = Field(description="where: 'body', then field names and indices")
    msg: str
    type: str


class Problem(BaseModel):
    """Every error response of the synattn APIs."""

    detail: str = Field(description="one line a person can act on")
    errors: list[ErrorItem] | None = Field(None, description="validation errors, first 20")


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for these error statuses (all bodies are ``Problem``)."""
    return {code: {"model": Problem, "description": DESCRIPTIONS[code]} for code in codes}


class BadJSON(json.JSONDecodeError):
    """A body that is JSON by syntax but not by the rules of these APIs."""


def _reject_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a number these APIs accept (finite numbers only)", name, 0)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJSON(f"number {text[:40]} is out of range (finite numbers only)", text, 0)
    return value


def strict_loads(body: bytes | str) -> Any:
    """``json.loads`` that refuses non-finite numbers, invalid text and deep nesting.

    Raises:
        json.JSONDecodeError: with a message safe to show.
    """
    if isinstance(body, bytes):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadJSON("the body is not valid UTF-8", "", exc.start) from None
    else:
        text = body
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise BadJSON(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", "", 0) from None
    _check_tree(value)
    return value


def _check_tree(value: Any) -> None:
    """Refuse lone surrogates (in keys or values), huge integers and deep nesting."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise BadJSON(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", "", 0)
        if isinstance(node, str):
            _check_text(node)
        elif isinstance(node, int) and not isinstance(node, bool):
            if abs(node) >= 1 << 63:
                raise BadJSON("integer out of range (at most 2**63 - 1 in size)", "", 0)
        elif isinstance(node, float):
            if not math.isfinite(node):  # pragma: no cover - parse_float already refused it
                raise BadJSON("non-finite number", "", 0)
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, dict):
            for key, item in node.items():
                _check_text(key)
                stack.append((item, depth + 1))


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadJSON(
            "a string holds a lone surrogate (not valid Unicode)", "", exc.start
        ) from None


class StrictJSONRequest(Request):
    """A request whose ``json()`` is ``strict_loads`` (FastAPI parses bodies through it)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = strict_loads(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """Routes of these APIs: bodies parsed by ``StrictJSONRequest``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler


def safe_text(value: object, limit: int = 300) -> str:
    """Any value as bounded text that always encodes (surrogates escaped)."""
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _loc(loc: Any) -> list[str | int]:
    return [x if isinstance(x, int) else safe_text(x, 100) for x in loc]


@lru_cache(maxsize=256)
def _first_example(model: type[BaseModel]) -> str | None:
    extra = model.model_config.get("json_schema_extra")  # as written: the schema sorts keys
    examples = extra.get("examples") if isinstance(extra, dict) else None
    if not isinstance(examples, list) or not examples:
        return None
    text = json.dumps(examples[0], ensure_ascii=False)
    return None if len(text) > MAX_EXAMPLE_SHOWN else text


def body_hint(request: Request, errors: Sequence[Mapping[str, Any]]) -> str | None:
    """What the route's body looks like (its model's first OpenAPI example), when ``errors``
    say the body has the wrong shape: a field missing or unknown, or not an object at all
    (``{"src": ...}`` where ``{"spec": {"src": ...}}`` belongs). None for errors in values,
    and for routes whose body has no example."""
    shape = any(
        e.get("type") in SHAPE_ERRORS and tuple(e.get("loc", ()))[:1] == ("body",) for e in errors
    )
    route = request.scope.get("route")
    if not shape or not isinstance(route, APIRoute) or route.body_field is None:
        return None
    model = route.body_field.field_info.annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    example = _first_example(model)
    if example is None:
        return None
    docs = getattr(request.app, "docs_url", None) or getattr(request.app, "openapi_url", None)
    where = f" (see {docs})" if docs else ""
    return f"the body of {request.method} {route.path_format} looks like {example}{where}"


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 with the fields that failed and why, never the input itself; for a body of the
    wrong shape, what the body looks like (``body_hint``)."""
    assert isinstance(exc, RequestValidationError)
    raw = exc.errors()
    items = []
    for e in raw[:MAX_ERRORS_SHOWN]:
        msg = safe_text(validation_reason(str(e.get("msg", "invalid"))))
        ctx = e.get("ctx") or {}
        if e.get("type") == "json_invalid" and "error" in ctx:
            msg = f"invalid JSON: {safe_text(ctx['error'])}"
        items.append({"loc": _loc(e.get("loc", ())), "msg": msg, "type": safe_text(e.get("type"))})
    if items:
        first = items[0]
        where = ".".join(str(x) for x in first["loc"] if str(x) != "")
        detail = f"{where}: {first['msg']}" if where else str(first["msg"])
    else:
        detail = "invalid request"
    if len(raw) > 1:
        detail += f" (and {len(raw) - 1} more)"
    if (hint := body_hint(request, raw)) is not None:
        detail += f"; {hint}"
    return JSONResponse({"detail": detail, "errors": items}, status_code=422)


async def http_error(_: Request, exc: Exception) -> Response:
    """HTTP errors as ``Problem`` bodies (Starlette's 404/405 included)."""
    assert isinstance(exc, StarletteHTTPException)
    headers = getattr(exc, "headers", None)
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=headers)
    return JSONResponse(
        {"detail": safe_text(exc.detail, 1000)}, status_code=exc.status_code, headers=headers
    )


def install_error_handlers(app: FastAPI) -> None:
    """Give ``app`` the error shape and validation handler of every synattn API."""
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)


def finite_json(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


T = TypeVar("T")


def app_state(name: str, kind: type[T]) -> Callable[[Request], Awaitable[T]]:
    """A dependency that reads ``request.app.state.<name>`` (an object of type ``kind`` that
    ``create_app`` put there): ``Store = Annotated[JobStore, Depends(app_state("store",
    JobStore))]``. It is a coroutine function: FastAPI runs a plain function dependency in
    its thread pool, a round trip per dependency and request that was an eighth of the parser
    API's event loop under load (bench/parsing/parse.py)."""

    async def read(request: Request) -> T:
        value: T = getattr(request.app.state, name)
        return value

    read.__name__ = f"app_state_{name}"
    return read
