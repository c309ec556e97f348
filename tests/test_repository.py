"""The repository keeps its promises: required layout, an honest docker-compose.yml."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest
import yaml

from tests.conftest import REPO


def test_required_top_level():
    for name in (
        "docker-compose.yml",
        "services/parser",
        "services/trainer",
        "shared",
        "tests",
        "deploy",
        "Makefile",
        ".ci/run",
        "README.md",
    ):
        assert (REPO / name).exists(), name


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_compose_parses_and_every_service_is_runnable():
    services = compose()["services"]
    assert services
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
        if "build" in svc:
            ctx = svc["build"]["context"] if isinstance(svc["build"], dict) else svc["build"]
            assert (REPO / ctx).is_dir(), name
        if "command" in svc:
            exe = (
                svc["command"][0]
                if isinstance(svc["command"], list)
                else svc["command"].split()[0]
            )
            assert shutil.which(exe) or (REPO / ".venv/bin" / exe).exists(), f"{name}: {exe}"
        assert "healthcheck" in svc, name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_redis_service_command_starts_outside_docker(tmp_path):
    if not shutil.which("redis-server"):
        pytest.skip("redis-server not installed")
    cmd = list(compose()["services"]["redis"]["command"])
    port = free_port()
    cmd[cmd.index("--port") + 1] = str(port)
    proc = subprocess.Popen([*cmd, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    assert s.recv(16).startswith(b"+PONG")
                    s.sendall(b"CONFIG GET maxmemory-policy\r\n")
                    assert b"noeviction" in s.recv(128)
                    break
            except ConnectionRefusedError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
