"""The repository keeps its promises: required layout, an honest docker-compose.yml."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time

import pytest
import yaml

from synattn_shared.serve import wait_answering
from tests.conftest import REPO, free_port


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


def test_parser_api_service_command_starts_outside_docker():

    cmd = list(compose()["services"]["parser-api"]["command"])
    port = free_port()
    cmd[cmd.index("--port") + 1] = str(port)
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    exe = shutil.which(cmd[0]) or str(REPO / ".venv/bin" / cmd[0])
    proc = subprocess.Popen([exe, *cmd[1:]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready = json.loads(wait_answering(f"http://127.0.0.1:{port}/v1/ready", proc))
        assert ready["backend"] == "spacy"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


WORKER_SERVICES = ("parser-worker", "trainer-worker", "trainer-worker-multi", "trainer-worker-cpu")


def test_worker_service_commands_start_outside_docker(tmp_path):
    """Each worker service's command, as compose runs it, starts a Celery worker that answers
    a ping (all four at once: each takes seconds to start)."""
    import os

    celery = shutil.which("celery") or str(REPO / ".venv/bin" / "celery")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    env: dict[str, str] = {}
    services = compose()["services"]
    try:
        for service in WORKER_SERVICES:
            svc = services[service]
            cmd = list(svc["command"])
            exe = shutil.which(cmd[0]) or str(REPO / ".venv/bin" / cmd[0])
            env = {**os.environ, **svc["environment"]}
            env["SYNATTN_BROKER_URL"] = "redis://127.0.0.1:6379/14"
            env["SYNATTN_DATABASE_URL"] = "sqlite://"  # compose's PostgreSQL host is not here
            env["SYNATTN_HOME"] = env["SYNATTN_DATA_ROOT"] = str(tmp_path / service)
            name = f"compose-check-{service}-{os.getpid()}@localhost"
            if cmd[0] == "synattn":  # `synattn worker`: Celery's solo worker, supervised
                extra = ["--name", name]
            else:
                extra = [*([] if "--pool" in cmd else ["--pool", "solo"]), "-n", name,
                         "--without-gossip", "--without-mingle"]  # fmt: skip
            procs[name] = subprocess.Popen([exe, *cmd[1:], *extra], env=env,
                                           stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.time() + 90
        waiting = set(procs)
        while waiting:
            ping = subprocess.run(
                [celery, "-A", "synattn_jobs.worker", "inspect", "ping", "-d", ",".join(waiting),
                 "--timeout", "2"],
                env=env, capture_output=True, text=True,
            )  # fmt: skip
            waiting = {n for n in waiting if f"{n}: OK" not in ping.stdout}
            exited = [n for n in waiting if procs[n].poll() is not None]
            assert not exited, f"exited: {exited}"
            assert time.time() < deadline, f"no pong from {sorted(waiting)}: {ping.stdout}"
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=20)


def _serve(cmd: list[str], env: dict, url: str, what: str) -> None:

    exe = shutil.which(cmd[0]) or str(REPO / ".venv/bin" / cmd[0])
    proc = subprocess.Popen(
        [exe, *cmd[1:]], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_answering(url, proc)
    except (RuntimeError, TimeoutError) as exc:
        raise AssertionError(f"the {what}: {exc}") from None
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_job_api_and_flower_service_commands_start_outside_docker(tmp_path):
    import os

    services = compose()["services"]
    env = {**os.environ, **services["job-api"]["environment"]}
    env.update(SYNATTN_BROKER_URL="redis://127.0.0.1:6379/14", SYNATTN_HOME=str(tmp_path),
               SYNATTN_DATA_ROOT=str(tmp_path),
               SYNATTN_DATABASE_URL=f"sqlite:///{tmp_path / 'jobs.sqlite'}")  # fmt: skip
    cmd = list(services["job-api"]["command"])
    port = free_port()
    cmd[cmd.index("--port") + 1] = str(port)
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    _serve(cmd, env, f"http://127.0.0.1:{port}/v1/health", "job API")
    port = free_port()
    cmd = [c for c in services["flower"]["command"] if not c.startswith(("--port", "--address"))]
    cmd += [f"--port={port}", "--address=127.0.0.1"]
    _serve(cmd, env, f"http://127.0.0.1:{port}/healthcheck", "flower")


def test_postgres_counts_as_ready_only_once_it_listens_on_tcp():
    """A first start initialises the database on a socket-only server (the official image and
    deploy/images' stand-in both do), then restarts it; services that trusted a socket check
    met "the database system is starting up". Checked over TCP, ready means the real server."""
    compose_check = compose()["services"]["postgres"]["healthcheck"]["test"]
    k8s = yaml.safe_load_all((REPO / "deploy" / "k8s" / "11-postgres.yaml").read_text())
    sts = next(d for d in k8s if d and d["kind"] == "StatefulSet")
    probe = sts["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]
    assert "pg_isready -h 127.0.0.1 " in compose_check[-1], compose_check
    assert probe[:3] == ["pg_isready", "-h", "127.0.0.1"], probe
    entrypoint = (REPO / "deploy" / "images" / "postgres-entrypoint.sh").read_text()
    assert "listen_addresses=''" in entrypoint  # the init server this check must not see


def test_kubernetes_manifests_cover_the_services():
    docs = [
        d
        for f in sorted((REPO / "deploy" / "k8s").glob("*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
        if d
    ]
    by_kind: dict[str, dict[str, dict]] = {}
    for d in docs:
        assert {"apiVersion", "kind", "metadata"} <= d.keys()
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    assert {"redis", "postgres"} <= set(by_kind["StatefulSet"])
    assert {"parser-api", "job-api", "flower", "parser-worker"} <= set(by_kind["Deployment"])
    job = by_kind["ScaledJob"]["trainer"]
    container = job["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["synattn", "worker", "--queues", "train", "--once"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    # fair share: queued jobs wait in the job store, so KEDA counts them there
    trigger = job["spec"]["triggers"][0]
    assert trigger["type"] == "postgresql"
    assert "kind = 'train' AND state = 'queued'" in trigger["metadata"]["query"]
    parse = by_kind["ScaledObject"]["parser-worker"]["spec"]["triggers"][0]
    assert "kind = 'parse' AND state = 'queued'" in parse["metadata"]["query"]
    redis_args = by_kind["StatefulSet"]["redis"]["spec"]["template"]["spec"]["containers"][0]
    assert "noeviction" in redis_args["args"] and "--appendonly" in redis_args["args"]
    # every command is one this install provides
    for d in docs:
        spec = d.get("spec", {})
        tmpl = spec.get("template") or spec.get("jobTargetRef", {}).get("template")
        for c in (tmpl or {}).get("spec", {}).get("containers", []):
            exe = c.get("command", [c.get("args", ["redis-server"])[0]])[0]
            if exe in ("redis-server", "postgres") or "command" not in c:
                continue
            assert shutil.which(exe) or (REPO / ".venv/bin" / exe).exists(), exe


def test_the_job_api_parses_raw_text_with_the_parser_api_service():
    """Compose and Kubernetes point the job API's SYNATTN_PARSER_URL at the parser API's
    service name and port (translate and the explorer's typed sentences parse there); the
    workers do not get it."""
    from urllib.parse import urlsplit

    services = compose()["services"]
    url = urlsplit(services["job-api"]["environment"]["SYNATTN_PARSER_URL"])
    cmd = list(services["parser-api"]["command"])
    listens = int(cmd[cmd.index("--port") + 1])
    assert (url.scheme, url.hostname, url.port) == ("http", "parser-api", listens)
    for name in ("flower", "parser-worker", *WORKER_SERVICES):
        assert "SYNATTN_PARSER_URL" not in services[name].get("environment", {}), name
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "k8s" / "20-apis.yaml").read_text())
            if d]  # fmt: skip
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    container = by[("Deployment", "job-api")]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    k8s = urlsplit(env["SYNATTN_PARSER_URL"])
    port = by[("Service", "parser-api")]["spec"]["ports"][0]["port"]
    assert (k8s.scheme, k8s.hostname, k8s.port) == ("http", "parser-api", port)


def doc_lines() -> list[tuple[str, str]]:
    """``(file, line)`` for every line of the README and the documentation pages."""
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [(f.relative_to(REPO).as_posix(), line)
            for f in files for line in f.read_text(encoding="utf-8").splitlines()]  # fmt: skip


def test_the_docs_send_the_playground_to_the_parser_default_port():
    """Every README or documentation line that starts ``synattn serve-parser`` and names a URL
    names the port the server listens on: ``--port`` when given, else the command's default
    (it said 8000)."""
    import inspect
    import re

    from synattn_parser.cli import serve_parser

    default = inspect.signature(serve_parser).parameters["port"].default
    url = re.compile(r"(?:127\.0\.0\.1|localhost):(\d+)")
    lines = [(name, line) for name, line in doc_lines()
             if "synattn serve-parser" in line and url.search(line)]  # fmt: skip
    assert any("playground" in line.lower() for _, line in lines)
    assert any(name == "README.md" for name, _ in lines)
    for name, line in lines:
        given = re.search(r"--port (\d+)", line)
        want = int(given.group(1)) if given else default
        ports = {int(p) for p in url.findall(line)}
        assert ports == {want}, (name, line)


README_MAX_LINES = 250


def test_the_readme_is_a_landing_page():
    """The README stays short enough to read in minutes; the detail lives in docs/."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    text = "\n".join(lines)
    for page in ("docs/getting-started.md", "docs/study.md", "docs/papers/index.md"):
        assert f"]({page})" in text, page


def readme_commands() -> list[str]:
    """The README's shell commands: each line of a ``sh`` block, continuations joined, comments
    and here-document bodies left out."""
    import re

    text = (REPO / "README.md").read_text(encoding="utf-8")
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        heredoc = None
        for line in joined.splitlines():
            if heredoc is not None:
                heredoc = None if line.strip() == heredoc else heredoc
                continue
            if m := re.search(r"<<'?(\w+)'?", line):
                heredoc = m.group(1)
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def test_the_readme_commands_are_real():
    """Every ``synattn`` command of the README names a command and options the CLI has, and
    every ``make`` target is one the Makefile defines."""
    import re
    import shlex

    import typer.main

    from synattn_shared import cli

    cli._load_plugins()
    root = typer.main.get_command(cli.app)
    targets = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))
    commands = readme_commands()
    assert any(c.startswith("synattn experiment run") for c in commands)
    assert any(c.startswith("synattn report") for c in commands)
    for command in commands:
        if not command.startswith(("synattn ", "make ")):
            continue  # curl, python, cat: their own tools
        words = shlex.split(command.rstrip("&").strip())
        if words[0] == "make":
            assert set(words[1:]) <= targets, command
            continue
        group, rest = root, words[1:]
        ctx = group.make_context("synattn", [], resilient_parsing=True)
        while rest and hasattr(group, "get_command") and rest[0] in group.list_commands(ctx):
            group = group.get_command(ctx, rest.pop(0))
            ctx = group.make_context(group.name, [], parent=ctx, resilient_parsing=True)
        assert not hasattr(group, "list_commands") or not group.list_commands(ctx), command
        known = {o for p in group.params for o in (*p.opts, *p.secondary_opts)}
        for word in rest:
            if word.startswith("--"):
                assert word.split("=", 1)[0] in known, (command, word)
