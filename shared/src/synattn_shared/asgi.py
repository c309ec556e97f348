"""ASGI middleware shared by the synattn APIs (parser and job API).

Imported only by services that serve HTTP; they depend on FastAPI, the shared core does not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import HTTPException
from fastapi.responses import JSONResponse

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Any]


class BodyLimit:
    """Reject request bodies over ``limit`` bytes with 413, by header and while streaming.

    Starlette reads a body of any size into memory; this refuses before that happens.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(413, f"request body is larger than {self.limit} bytes")
            return message

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Any) -> None:
        response = JSONResponse(
            {"detail": f"request body is larger than {self.limit} bytes"}, status_code=413
        )
        await response({"type": "http"}, _no_receive, send)


class _TooLarge(HTTPException):
    """Raised from ``receive``: FastAPI re-raises HTTPExceptions met while reading the body."""


async def _no_receive() -> Any:  # pragma: no cover - JSONResponse never reads
    return {"type": "http.disconnect"}
