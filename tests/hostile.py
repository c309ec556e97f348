"""Helpers of the hostile-input tests: raw HTTP over a socket, for requests no client library
sends (stalled bodies, half headers, invalid UTF-8)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit


def raw_exchange(base: str, payload: bytes, wait: float = 0.0, timeout: float = 30) -> bytes:
    """Send ``payload``, optionally keep the connection open ``wait`` seconds without sending
    more, then read until the server closes (or ``timeout``). Returns what the server sent."""
    url = urlsplit(base)
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as sock:
        if payload:
            sock.sendall(payload)
        if wait:
            time.sleep(wait)
        chunks = []
        sock.settimeout(timeout)
        while True:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def closed_within(base: str, payload: bytes, limit: float) -> tuple[float, bytes]:
    """Seconds until the server closed a connection that sent only ``payload``, and its reply."""
    start = time.monotonic()
    reply = raw_exchange(base, payload, timeout=limit)
    return time.monotonic() - start, reply


def status_of(reply: bytes) -> int:
    """The status code of a raw HTTP reply (0 when there is none)."""
    line = reply.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 and line[1].isdigit() else 0
