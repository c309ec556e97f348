"""Serving the synattn APIs with uvicorn, with time limits uvicorn itself does not have.

uvicorn closes idle keep-alive connections, but a client that sends half its headers, or a
``Content-Length`` larger than what it sends, holds a connection (and a task) forever. The
protocol here gives every request a deadline for its headers and one for its body; past either
the client gets a 408 (when nothing was answered yet) and the connection is closed. And
waiting for a server just started to answer, as the tests, benchmarks and tools do.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import time
import urllib.request
from typing import Any

from pydantic import BaseModel, Field


class ServeTimeouts(BaseModel):
    """The HTTP deadlines served here, as settings fields (both APIs); kept out of
    ``synattn_shared.webapi`` so that a worker or the CLI, which read the settings, never
    imports FastAPI."""

    header_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="a request's headers must arrive within this"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="a request's body must arrive within this"
    )


def guarded_http(header_timeout: float, body_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with header and body deadlines (seconds)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpProtocol(HttpToolsProtocol):
        """Closes requests whose headers or body do not arrive in time."""

        _deadline: asyncio.TimerHandle | None = None

        def _arm(self, seconds: float, part: str) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expire, part, seconds)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm(header_timeout, "headers")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm(header_timeout, "headers")

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._arm(body_timeout, "body")

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _expire(self, part: str, seconds: float) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            cycle = self.cycle  # for "headers", the previous request's cycle (or None)
            idle = cycle is None or (
                cycle.response_complete if part == "headers" else not cycle.response_started
            )
            if idle:  # nothing of ours is on the wire: a 408 cannot interleave with a reply
                body = json.dumps(
                    {"detail": f"request {part} not received within {seconds:g} s"}
                ).encode()
                self.transport.write(
                    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                    b"content-length: " + str(len(body)).encode() + b"\r\n"
                    b"connection: close\r\n\r\n" + body
                )
            if cycle is not None:
                cycle.keep_alive = False
            self.transport.close()

    return GuardedHttpProtocol


def serve(
    target: str,
    *,
    host: str,
    port: int,
    header_timeout: float,
    body_timeout: float,
    **uvicorn_options: Any,
) -> None:
    """Run ``target`` (an ASGI app factory, ``module:function``) with the guarded protocol."""
    import uvicorn

    uvicorn.run(
        target,
        factory=True,
        host=host,
        port=port,
        http=guarded_http(header_timeout, body_timeout),
        **uvicorn_options,
    )


def wait_answering(
    url: str, process: subprocess.Popen[bytes] | None = None, timeout: float = 60.0
) -> bytes:
    """Block until ``GET url`` answers 200, and return its body: a server just started (by the
    tests, a benchmark or a tool) takes requests from then on. Raises ``RuntimeError`` at once
    when ``process`` (the server) exits first, ``TimeoutError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return bytes(answer.read())
        except (OSError, http.client.HTTPException):  # refused, reset, not yet listening, 5xx
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout:g} s")
