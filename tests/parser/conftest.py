"""A real uvicorn process serving the parser API on loopback, shared by the API tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest

from synattn_shared.serve import wait_answering
from tests.conftest import free_port

TEST_LIMITS = {
    "PARSER_MAX_SENTENCES": "64",
    "PARSER_MAX_CHARS": "600",
    "PARSER_MAX_TOKENS": "200",
    "PARSER_MAX_BODY_BYTES": "65536",
    "PARSER_MAX_RESPONSE_CELLS": "200000",
    "PARSER_HEADER_TIMEOUT_S": "2",
    "PARSER_BODY_TIMEOUT_S": "3",
}


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """The parser API at ``url`` has its models loaded (``/v1/ready``)."""
    wait_answering(f"{url}/v1/ready", proc, timeout)


@contextmanager
def api_server(
    env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A ready uvicorn process with ``env`` added to ours; stopped (or killed) on exit."""
    port = free_port()
    cmd = [
        str(Path(sys.executable).with_name("synattn")), "serve-parser",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    with open(log or os.devnull, "wb") as out:  # the child keeps its own copy of the file
        proc = subprocess.Popen(
            cmd, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def model_processes(server: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The server's model worker processes (spawned pool workers)."""
    found = []
    for child in psutil.Process(server.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # a zombie (exited) is none of them
            if "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
    return found


def all_exited(procs: list[psutil.Process], timeout: float = 15) -> bool:
    """Whether every process in ``procs`` has exited within ``timeout`` seconds."""

    def alive() -> bool:
        return any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)

    deadline = time.monotonic() + timeout
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive()


@pytest.fixture(scope="session")
def parser_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a uvicorn process running ``synattn_parser.api:create_app``."""
    log = tmp_path_factory.mktemp("server") / "uvicorn.log"
    with api_server(TEST_LIMITS, log) as (_, url):
        yield url


@pytest.fixture
def client(parser_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=parser_server, timeout=60) as c:
        yield c
