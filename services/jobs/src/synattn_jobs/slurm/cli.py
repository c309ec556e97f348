"""``synattn slurm``: the Slurm executor's own commands."""

from __future__ import annotations

import time
from typing import Annotated

import typer


def sync(
    every: Annotated[
        float | None, typer.Option(min=1, help="repeat every SECONDS until interrupted")
    ] = None,
) -> None:
    """Bring the job store in line with Slurm: Slurm's state and reason on every job, and
    each job whose Slurm job ended, vanished or went silent settled (requeued, submitted
    anew, failed or cancelled). The job API and running jobs do this on their own; this is
    for a cluster where neither runs."""
    from synattn_jobs.settings import get_settings
    from synattn_jobs.slurm.commands import SlurmError
    from synattn_jobs.slurm.executor import reconcile_once
    from synattn_jobs.store import JobStore

    settings = get_settings()
    if settings.executor != "slurm":
        raise _fail("SYNATTN_EXECUTOR is not slurm: synattn's own workers run these jobs")
    store = JobStore(settings.database_url)
    while True:
        try:
            for line in reconcile_once(store, settings):
                print(line, flush=True)
        except SlurmError as exc:
            raise _fail(f"Slurm: {exc}", code=1) from None
        if every is None:
            return
        time.sleep(every)


def _fail(reason: str, code: int = 2) -> typer.Exit:
    """One line on stderr and the exit status (as the rest of the CLI does)."""
    typer.echo(f"error: {reason}", err=True)
    return typer.Exit(code=code)


def register(app: typer.Typer) -> None:
    slurm = typer.Typer(help="The Slurm executor (SYNATTN_EXECUTOR=slurm).",
                        no_args_is_help=True)  # fmt: skip
    slurm.command("sync")(sync)
    app.add_typer(slurm, name="slurm")
