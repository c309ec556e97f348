"""``synattn study``: run, follow, publish and compare a study (``synattn_jobs.study``).

``run``, ``publish``, ``curve`` and ``claims`` take the options of their engine modules, which
``synattn study COMMAND --help`` prints in full."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

FORWARD = {"allow_extra_args": True, "ignore_unknown_options": True}


def run(ctx: typer.Context) -> None:
    """Queue an experiment file and run it (all options: synattn study run --help).

    Workers x threads; published into results/<name>/ as runs finish; handed over between
    sessions (--hand-off-after, --hand-off-dir); resumed by the same command."""
    from synattn_jobs.study.driver import main

    main(list(ctx.args), prog="synattn study run")


def publish(ctx: typer.Context) -> None:
    """Write results/<name>/ from the study's queue, without training.

    report.json, report.html, the translations and run.json (the same as synattn study run
    GRID --publish-only)."""
    from synattn_jobs.study.driver import main

    main([*ctx.args, "--publish-only"], prog="synattn study publish")


def status(
    grid: Annotated[Path, typer.Argument(help="the study's experiment file")],
    home: Annotated[
        Path, typer.Option(help="the study's queue (synattn study run --home)")
    ] = Path("build/repro"),
) -> None:
    """Each run of a study and where it stands.

    Its state; a finished run's BLEU; the update a running or stopped run has reached and, while
    it trains, its loss, speed and time left."""
    from synattn_jobs.settings import JobSettings
    from synattn_jobs.store import JobStore
    from synattn_jobs.study.driver import settings_env, study_summary
    from synattn_jobs.submit import load_experiment_file

    try:
        spec = load_experiment_file(grid)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    settings = JobSettings(home=Path(settings_env(home.resolve())["SYNATTN_HOME"]))
    if not Path(settings.database_url.removeprefix("sqlite:///")).is_file():
        typer.echo(f"{spec.name}: not started under {home} (synattn study run {grid})")
        raise typer.Exit(0)
    for line in study_summary(JobStore(settings.database_url), spec.name):
        typer.echo(line)


def curve(ctx: typer.Context) -> None:
    """The learning curve that fixes a study's budget (all options: synattn study curve --help).

    One system trained in steps, each point scored on its final quarter."""
    from synattn_jobs.study.curve import main

    main(list(ctx.args), prog="synattn study curve")


def claims(ctx: typer.Context) -> None:
    """Each paper's claim beside what the study measured (options: synattn study claims --help).

    Δ with its interval, Holm-adjusted p-values, verdicts and detectable effects, written into
    docs/study.md and README.md; --check exits 1 where they are out of date."""
    from synattn_jobs.study.claims import main

    main(list(ctx.args), prog="synattn study claims")


def register(app: typer.Typer) -> None:
    study = typer.Typer(help="Studies: grids run for days, published with claims and verdicts.",
                        no_args_is_help=True)  # fmt: skip
    for name, fn in (("run", run), ("publish", publish), ("curve", curve), ("claims", claims)):
        study.command(name, context_settings=FORWARD, add_help_option=False)(fn)
    study.command("status")(status)
    app.add_typer(study, name="study")
