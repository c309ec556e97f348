"""Waiting for a server just started: its first 200 ends the wait, an exited server or a
deadline ends it with a reason, and errors before the first 200 (not listening yet, 503 while
loading) are waited through."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from synattn_shared.serve import wait_answering
from tests.conftest import free_port


def loading_server(port: int, ready_after: int, sent: list[int]) -> ThreadingHTTPServer:
    """A server on ``port`` answering 503 to its first ``ready_after`` requests, then 200
    with a body; each status it sends is appended to ``sent``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = 503 if len(sent) < ready_after else 200
            sent.append(status)
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"status": "ok"}' if status == 200 else b"loading")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_it_waits_through_refusals_and_503s_and_returns_the_first_200s_body() -> None:
    port, sent, servers = free_port(), [], []

    def listen_late() -> None:  # nothing listens for the first 0.4 s: refused
        time.sleep(0.4)
        servers.append(loading_server(port, ready_after=2, sent=sent))

    late = threading.Thread(target=listen_late)
    late.start()
    try:
        body = wait_answering(f"http://127.0.0.1:{port}/v1/health", timeout=10)
    finally:
        late.join()
        for server in servers:
            server.shutdown()
            server.server_close()
    assert body == b'{"status": "ok"}'
    assert sent == [503, 503, 200]


def test_an_exited_server_ends_the_wait_at_once_saying_so() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with 3"):
        wait_answering(f"http://127.0.0.1:{free_port()}/v1/health", proc, timeout=30)
    assert time.monotonic() - t0 < 1


def test_a_server_that_never_answers_times_out_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/ready"
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"/v1/ready did not answer within 0\.5 s"):
        wait_answering(url, timeout=0.5)
    assert time.monotonic() - t0 < 3
