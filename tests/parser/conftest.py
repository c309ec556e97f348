"""A real uvicorn process serving the parser API on loopback, shared by the API tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

TEST_LIMITS = {
    "PARSER_MAX_SENTENCES": "64",
    "PARSER_MAX_CHARS": "600",
    "PARSER_MAX_TOKENS": "200",
    "PARSER_MAX_BODY_BYTES": "65536",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/v1/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s")


@pytest.fixture(scope="session")
def parser_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a uvicorn process running ``synattn_parser.api:create_app``."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "uvicorn.log"
    env = {**os.environ, **TEST_LIMITS}
    cmd = [
        sys.executable, "-m", "uvicorn", "synattn_parser.api:create_app", "--factory",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def client(parser_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=parser_server, timeout=60) as c:
        yield c
