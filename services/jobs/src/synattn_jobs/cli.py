"""CLI of the job queue: tokens, submit, jobs, cancel, watch, experiment run, report, worker,
the job API server, and the presets a config or a grid may name. Commands talk to the job
store and the broker named by ``SYNATTN_*`` settings (embedded SQLite under ``SYNATTN_HOME`` by
default). Bad input: exit 2, one line.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.failure import cause
from synattn_jobs.local_worker import start_worker
from synattn_jobs.settings import get_settings
from synattn_jobs.specs import ParseJobSpec, TrainJobSpec
from synattn_jobs.store import LOCAL_ADMIN, TERMINAL, Job, JobStore, QuotaExceeded
from synattn_shared.paths import UnsafePath, slug

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(reason: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {reason}", highlight=False, soft_wrap=True)
    return typer.Exit(code=code)


def one_line(exc: Exception) -> str:
    """An error as the one line a CLI prints (pydantic's first error, not its essay)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        return f"{loc}: {first['msg']}" if loc else str(first["msg"])
    return " ".join(str(exc).split())


def _store() -> JobStore:
    return JobStore(get_settings().database_url)


def _owner(store: JobStore) -> str:
    """Who owns what this CLI submits: the user of the token in ``SYNATTN_TOKEN``, so it shows
    in that user's dashboard; without one, the local admin ``local``."""
    token = get_settings().token
    if token is None or not token.get_secret_value():
        return LOCAL_ADMIN.name
    who = store.check_token(token.get_secret_value())
    if who is None:
        raise fail("SYNATTN_TOKEN is not a valid token of this job store (revoked, or made for "
                   "another SYNATTN_HOME): create one with `synattn token create NAME`, or unset "
                   "it to submit as the local admin")  # fmt: skip
    return who.name


def _parse_sets(sets: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise fail(f"--set {item!r}: expected KEY=VALUE (dotted key, YAML value)")
        out[key] = yaml.safe_load(value)
    return out


def token_create(
    name: Annotated[str, typer.Argument(help="who the token is for (owner of their jobs)")],
    admin: Annotated[bool, typer.Option(help="may see and cancel every user's jobs")] = False,
) -> None:
    """Create a job API bearer token (printed once; only its hash is stored)."""
    try:
        slug(name, "token name")
    except UnsafePath as exc:
        raise fail(one_line(exc)) from None
    token = _store().create_token(name, admin=admin)
    err.print(f"(the token below: with SYNATTN_TOKEN=<it> what the CLI submits is {name}'s, "
              "and shows in their dashboard)", highlight=False)  # fmt: skip
    print(token, flush=True)


def token_revoke(name: str) -> None:
    """Revoke every token of that name."""
    n = _store().revoke_token(name)
    console.print(f"revoked {n} token(s) named {name}")


def submit_train_cmd(
    config: Annotated[
        Path, typer.Argument(readable=False, help="training config YAML under the data root")
    ],
    set_: Annotated[list[str], typer.Option("--set", help="override KEY=VALUE")] = [],  # noqa: B006
    name: str | None = None,
    out: Annotated[
        str | None, typer.Option(help="run directory (default: under runs_dir)")
    ] = None,
    split: Annotated[str, typer.Option(help="evaluate on valid or test")] = "valid",
    priority: Annotated[int, typer.Option(min=-1000, max=1000, help="orders your jobs")] = 0,
    processes: Annotated[
        int, typer.Option(help="data-parallel processes (torchrun on a worker with that many "
                          "devices); they count against your share and running quota")
    ] = 1,
    nodes: Annotated[
        int, typer.Option(help="machines the processes spread over (SYNATTN_EXECUTOR=slurm)")
    ] = 1,
    partition: Annotated[str | None, typer.Option(help="Slurm partition of this job")] = None,
    account: Annotated[str | None, typer.Option(help="Slurm account of this job")] = None,
    qos: Annotated[str | None, typer.Option(help="Slurm QOS of this job")] = None,
    time_limit: Annotated[
        str | None, typer.Option(help="Slurm time limit of this job (minutes or [D-]HH:MM:SS)")
    ] = None,
) -> None:  # fmt: skip
    """Queue a training job (trains, then translates and scores the split)."""
    from synattn_jobs.submit import submit_train

    s = get_settings()
    slurm = {k: v for k, v in (("partition", partition), ("account", account), ("qos", qos),
                               ("time", time_limit)) if v is not None}  # fmt: skip
    try:
        spec = TrainJobSpec(
            config=str(config.resolve()), overrides=_parse_sets(set_), evaluate={"split": split},
            resources={"processes": processes, "nodes": nodes, **({"slurm": slurm} if slurm
                                                                   else {})},
        )  # fmt: skip
        store = _store()
        job = submit_train(store, s, spec, name, out, _owner(store), priority)
    except (BadJobSpec, ValueError, QuotaExceeded) as exc:
        raise fail(one_line(exc)) from None
    print(job.id)


def submit_parse_cmd(
    src: Annotated[
        Path, typer.Option(readable=False, help="source sentences, one per line (.gz allowed)")
    ],
    out: Annotated[Path, typer.Option(help="dataset directory to write")],
    tgt: Annotated[
        Path | None, typer.Option(readable=False, help="target side, stored per row")
    ] = None,
    backend: str = "spacy",
    limit: int | None = None,
    workers: int = 1,
    rows_per_shard: int = 10_000,
    name: str | None = None,
    priority: Annotated[int, typer.Option(min=-1000, max=1000, help="orders your jobs")] = 0,
    encoding: Annotated[
        str, typer.Option(help="text encoding of --src and --tgt (a Python codec name)")
    ] = "utf-8",
) -> None:
    """Queue a parse job (a corpus into Parquet shards)."""
    from synattn_jobs.submit import submit_parse

    try:
        spec = ParseJobSpec(
            src=str(src.resolve()), tgt=str(tgt.resolve()) if tgt else None,
            out=str(out.resolve()), backend=backend, limit=limit, workers=workers,
            rows_per_shard=rows_per_shard, encoding=encoding,
        )  # fmt: skip
        store = _store()
        job = submit_parse(store, get_settings(), spec, name, _owner(store), priority)
    except (BadJobSpec, ValueError, QuotaExceeded) as exc:
        raise fail(one_line(exc)) from None
    print(job.id)


def _progress_text(job: Job) -> str:
    p = job.progress or {}
    parts = []
    if "update" in p:
        parts.append(f"upd {p['update']}/{p.get('max_updates', '?')}")
    if "loss" in p:
        parts.append(f"loss {p['loss']:.3f}")
    if "rows" in p:
        parts.append(f"rows {p['rows']}")
    if "phase" in p and job.state == "running":
        parts.append(str(p["phase"]))
    if (job.result or {}).get("bleu") is not None:
        parts.append(f"BLEU {job.result['bleu']:.2f}")
    if job.state == "failed" and (why := cause(job.error)):
        parts.append(why)  # the one line of why (the record keeps the traceback)
    return ", ".join(parts)


def jobs(
    state: str | None = None,
    experiment: str | None = None,
    kind: str | None = None,
) -> None:
    """List jobs (oldest first) with state and progress."""
    from rich.table import Table
    from rich.text import Text

    store = _store()
    s = get_settings()
    exp_id = None
    if experiment:
        exp = store.experiment(experiment)
        if exp is None:
            raise fail(f"no experiment {experiment!r}")
        exp_id = exp.id
    t = Table()
    slurm = s.executor == "slurm"
    where_col = "slurm" if slurm else "position"
    for col in ("id", "kind", "name", "state", where_col, "attempts", "progress"):
        t.add_column(col)
    if slurm:
        from synattn_jobs.slurm.executor import reconcile_quietly

        reconcile_quietly(store, s)  # Slurm's states, fresh
        positions: dict[str, int] = {}
    else:
        positions = store.queue(fifo=s.dispatch == "fifo")["positions"]
    for j in store.jobs(state, exp_id, kind):
        where = str(positions[j.id]) if j.id in positions else ""
        if slurm and j.slurm_job:
            reason = f" ({j.slurm_reason})" if j.slurm_reason else ""
            where = f"{j.slurm_job} {j.slurm_state or ''}{reason}"
        t.add_row(j.id, j.kind, j.name, j.state, where, str(j.attempts),
                  Text(_progress_text(j)))  # fmt: skip
    console.print(t)


def quota_set(
    user: Annotated[str, typer.Argument(help="the user (a token's name; local for the CLI)")],
    queued: Annotated[int | None, typer.Option(min=0, help="queued jobs at most")] = None,
    running: Annotated[
        int | None, typer.Option(min=0, help="running processes at most (a job of N counts N)")
    ] = None,
) -> None:
    """Set one user's quota (unset: the SYNATTN_MAX_*_PER_USER default)."""
    from synattn_shared.paths import UnsafePath, slug

    try:
        slug(user, "user")
    except UnsafePath as exc:
        raise fail(str(exc)) from None
    row = _store().set_quota(user, queued, running)
    print(f"{row.user}: queued {row.max_queued}, running {row.max_running}")


def quota_list() -> None:
    """The defaults and every user's overrides."""
    s = get_settings()
    print(f"* (default): queued {s.max_queued_per_user}, running {s.max_running_per_user}")
    for q in _store().quotas():
        gate = f", releases only job {q.release_only}" if q.release_only else ""
        print(f"{q.user}: queued {q.max_queued}, running {q.max_running}{gate}")


def cancel(job_id: str) -> None:
    """Cancel a job: a queued one at once, a running one at its next step (under Slurm, with
    scancel)."""
    from synattn_jobs.submit import cancel_job

    job = cancel_job(_store(), get_settings(), job_id)
    if job is None:
        raise fail(f"no job {job_id!r}")
    console.print(
        f"{job.id}: {job.state}" + (" (cancel requested)" if job.state == "running" else "")
    )


def _resolve_jobs(store: JobStore, ref: str) -> list[Job]:
    job = store.get(ref)
    if job is not None:
        return [job]
    exp = store.experiment(ref)
    if exp is None:
        raise fail(f"no job or experiment {ref!r}")
    return list(store.jobs(experiment_id=exp.id))


def wait_for(store: JobStore, ref: str, interval: float = 2.0, timeout: float | None = None,
             quiet: bool = False) -> list[Job]:  # fmt: skip
    """Poll until every job of ``ref`` (a job or an experiment) is final: a live table on a
    terminal, else a plain line per job as it moves on (``synattn_jobs.follow``)."""
    from rich.live import Live
    from rich.table import Table

    from synattn_jobs.follow import progress_text, state_text
    from synattn_shared.progress import plain

    start = time.monotonic()
    if plain(console):
        return _wait_in_lines(store, ref, interval, timeout, quiet)

    def table(js: list[Job]) -> Table:
        t = Table(title=f"{ref}: {sum(j.state in TERMINAL for j in js)}/{len(js)} done")
        for col in ("id", "name", "state", "progress"):
            t.add_column(col)
        positions = _positions(store, js)
        for j in js:
            t.add_row(j.id, j.name, state_text(j), progress_text(j, positions.get(j.id)))
        return t

    js = _resolve_jobs(store, ref)
    with Live(table(js), console=console, refresh_per_second=2, transient=False,
              auto_refresh=False, redirect_stdout=False) as live:  # fmt: skip
        while True:
            js = _fresh_jobs(store, ref)
            if not quiet:
                live.update(table(js), refresh=True)
            if all(j.state in TERMINAL for j in js):
                live.update(table(js), refresh=True)
                break
            if timeout is not None and time.monotonic() - start > timeout:
                raise fail(f"timed out after {timeout:.0f}s waiting for {ref}", code=1)
            time.sleep(interval)
    console.print()
    return js


def _fresh_jobs(store: JobStore, ref: str) -> list[Job]:
    """The jobs of ``ref``; under Slurm after a reconcile pass, so that a Slurm job that
    vanished or went silent is never shown running."""
    settings = get_settings()
    if settings.executor == "slurm":
        from synattn_jobs.slurm.executor import reconcile_quietly

        reconcile_quietly(store, settings)
    return _resolve_jobs(store, ref)


def _positions(store: JobStore, js: list[Job]) -> dict[str, int]:
    """Queued jobs' places in the fair order (only asked for while one of ``js`` waits)."""
    if not any(j.state == "queued" for j in js):
        return {}
    if get_settings().executor == "slurm":
        return {}  # Slurm orders its queue (the job's Slurm reason says why it waits)
    positions: dict[str, int] = store.queue(fifo=get_settings().dispatch == "fifo")["positions"]
    return positions


def _wait_in_lines(store: JobStore, ref: str, interval: float, timeout: float | None,
                   quiet: bool) -> list[Job]:  # fmt: skip
    """``wait_for`` off a terminal: a line per job as it moves on, then one for them all."""
    from synattn_jobs.follow import JobLines, summary_line

    start = time.monotonic()
    lines = JobLines(lambda line: console.print(line, markup=False, highlight=False))
    exp = store.experiment(ref) if store.get(ref) is None else None
    label = f"experiment {exp.name}" if exp is not None else ref
    while True:
        js = _fresh_jobs(store, ref)
        if not quiet:
            lines.update(js, _positions(store, js))
        if all(j.state in TERMINAL for j in js):
            console.print(summary_line(label, js), markup=False, highlight=False)
            return js
        if timeout is not None and time.monotonic() - start > timeout:
            raise fail(f"timed out after {timeout:.0f}s waiting for {ref}", code=1)
        time.sleep(interval)


def watch(
    ref: Annotated[str, typer.Argument(help="job id, experiment id or experiment name")],
    interval: float = 2.0,
    timeout: float | None = None,
) -> None:
    """Follow jobs until they finish; exit 1 unless all succeeded."""
    js = wait_for(_store(), ref, interval, timeout)
    bad = [j for j in js if j.state != "succeeded"]
    for j in bad:
        why = cause(j.error)
        err.print(f"{j.id} {j.name}: {j.state}" + (f": {why}" if why else ""), markup=False,
                  highlight=False)  # fmt: skip
    if bad:
        raise typer.Exit(code=1)


def experiment_run(
    grid: Annotated[Path, typer.Argument(readable=False, help="experiment grid YAML")],
    wait: Annotated[bool, typer.Option(help="wait for every job, then print the table")] = False,
    embedded_worker: Annotated[
        bool, typer.Option(help="start a local worker for the run (needs --wait)")
    ] = False,
    report_dir: Annotated[Path | None, typer.Option(help="where the HTML report goes")] = None,
) -> None:
    """Queue an experiment (variants x seeds x hyper-parameters); optionally run it here."""
    from synattn_jobs.submit import load_experiment_file, submit_experiment

    s = get_settings()
    store = _store()
    owner = _owner(store)
    try:
        exp, js = submit_experiment(store, s, load_experiment_file(grid), owner=owner)
    except (BadJobSpec, ValueError, QuotaExceeded) as exc:
        raise fail(one_line(exc)) from None
    console.print(f"experiment {exp.name} ({exp.id}): {len(js)} jobs queued, owned by {owner}")
    if not wait:
        print(exp.id)
        return
    worker = start_worker(log=s.home / "worker.log") if embedded_worker else None
    try:
        wait_for(store, exp.id)
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=60)
    _report(store, exp.id, report_dir, 1000)


def _report(store: JobStore, ref: str, out: Path | None, bootstrap: int) -> None:
    from synattn_jobs.report import comparison, print_table, write_html

    exp = store.experiment(ref)
    if exp is None:
        raise fail(f"no experiment {ref!r}")
    js = list(store.jobs(experiment_id=exp.id))
    rep = comparison(exp, js, bootstrap)
    print_table(rep)
    s = get_settings()
    assert s.runs_dir is not None
    out = out or s.runs_dir / f"{exp.name}-{exp.id[:6]}" / "report"
    path = write_html(rep, js, out)
    console.print(f"report: {path}")
    failed = [j for j in js if j.state != "succeeded"]
    if failed:
        raise fail(f"{len(failed)} of {len(js)} jobs did not succeed", code=1)


def report(
    experiment: Annotated[str, typer.Argument(help="experiment id or name")],
    out: Annotated[Path | None, typer.Option(help="report folder")] = None,
    bootstrap: int = 1000,
) -> None:
    """Comparison table of an experiment and its HTML report."""
    _report(_store(), experiment, out, bootstrap)


def worker(
    queues: Annotated[str, typer.Option(help="comma-separated: parse, train")] = "parse,train",
    once: Annotated[bool, typer.Option(help="exit after one job (a Kubernetes Job)")] = False,
    name: Annotated[
        str | None, typer.Option(help="Celery node name (default celery@HOSTNAME)")
    ] = None,
) -> None:
    """Run a worker in the foreground (solo pool, one job at a time).

    SIGTERM and SIGINT are passed to the Celery process, which shuts down warm: a running
    training job saves a checkpoint and goes back on the queue. This command exits with the
    worker's status once it has stopped, never leaving it behind.
    """
    if "train" in queues:  # a plugin clash or a broken plugin is refused here, not per job
        _load_plugins()
    proc = start_worker(queues, {"SYNATTN_WORKER_ONCE": "1"} if once else None, name=name)
    raise typer.Exit(code=supervise(proc))


def supervise(proc: subprocess.Popen[bytes]) -> int:
    """Wait for ``proc``, passing SIGTERM, SIGINT and SIGHUP on to it; its exit status."""
    forwarded: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT,
                                                        signal.SIGHUP)}  # fmt: skip
    try:
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:  # a second Ctrl-C while waiting: keep waiting
                continue
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return 0 if forwarded and code in (0, -signal.SIGTERM) else code


def _load_plugins() -> None:
    """The installed plugins (``synattn_trainer.plugins``), or exit 2 with the line saying
    why they cannot be used (a clash names both sides)."""
    from synattn_trainer.plugins import PluginError, load_plugins

    try:
        load_plugins()
    except PluginError as exc:
        raise fail(one_line(exc)) from None


def presets_list(ctx: typer.Context) -> None:
    """Every preset: its paper and what it sets. `synattn presets show NAME` prints one; a
    config uses one with `preset: NAME` (or `--set preset=NAME`, or a grid's variants)."""
    if ctx.invoked_subcommand is not None:
        return
    from synattn_trainer.presets import VARIANTS, paper_of, summary

    _load_plugins()  # the plugins' presets are listed too

    rows = [(n, paper_of(n).label(), summary(n)) for n in VARIANTS]
    width = [max(len(r[i]) for r in rows) for i in (0, 1)]
    print(f"{'preset':<{width[0]}}  {'paper':<{width[1]}}  sets")
    for name, paper, sets in rows:
        print(f"{name:<{width[0]}}  {paper:<{width[1]}}  {sets}")


def presets_show(name: Annotated[str, typer.Argument(help="a preset (synattn presets)")]) -> None:
    """Print a preset's settings: the YAML block that `preset: NAME` stands for in a config."""
    from synattn_trainer.presets import VARIANTS, paper_of, summary, unknown_preset

    _load_plugins()
    if name not in VARIANTS:
        raise fail(unknown_preset(name))
    paper = paper_of(name)
    print(f"# {name}: {summary(name)}")
    print(f"# {paper.cite}, {paper.title}")
    print(f"# in a config: `preset: {name}`, or this block")
    print(yaml.safe_dump(VARIANTS[name], sort_keys=False, default_flow_style=None), end="")


def serve_jobs(host: str | None = None, port: int | None = None) -> None:
    """Serve the job API (uvicorn, with header and body time limits)."""
    from synattn_shared.serve import serve

    s = get_settings()
    serve(
        "synattn_jobs.api:app_factory", host=host or s.api_host, port=port or s.api_port,
        header_timeout=s.header_timeout_s, body_timeout=s.body_timeout_s,
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add the job commands to the ``synattn`` CLI (entry point ``synattn.cli``)."""
    tok = typer.Typer(help="Job API bearer tokens.", no_args_is_help=True)
    tok.command("create")(token_create)
    tok.command("revoke")(token_revoke)
    app.add_typer(tok, name="token")
    sub = typer.Typer(help="Queue a job.", no_args_is_help=True)
    sub.command("train")(submit_train_cmd)
    sub.command("parse")(submit_parse_cmd)
    app.add_typer(sub, name="submit")
    app.command("jobs")(jobs)
    quota = typer.Typer(help="Per-user limits of queued and running jobs.", no_args_is_help=True)
    quota.command("set")(quota_set)
    quota.command("list")(quota_list)
    app.add_typer(quota, name="quota")
    app.command("cancel")(cancel)
    app.command("watch")(watch)
    exp = typer.Typer(help="Experiments: grids of training jobs.", no_args_is_help=True)
    exp.command("run")(experiment_run)
    app.add_typer(exp, name="experiment")
    app.command("report")(report)
    app.command("worker")(worker)
    app.command("serve-jobs")(serve_jobs)
    presets = typer.Typer(
        help="Presets: each paper's settings by name.", invoke_without_command=True
    )
    presets.callback()(presets_list)
    presets.command("show")(presets_show)
    app.add_typer(presets, name="presets")
    from synattn_jobs.slurm.cli import register as register_slurm
    from synattn_jobs.study.cli import register as register_study

    register_slurm(app)
    register_study(app)
