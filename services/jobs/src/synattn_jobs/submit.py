"""Submitting work: validate a spec against the data root, record the job, send its task.

Shared by the job API and the CLI, so both refuse the same bad input with the same message.
A training job stores its configuration resolved at submit time; the worker trains that.
"""

from __future__ import annotations

import itertools
import posixpath
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.settings import JobSettings
from synattn_jobs.specs import (
    ExperimentSpec,
    ParseJobSpec,
    Resources,
    StoredTrainSpec,
    TrainJobSpec,
    check_parse_spec,
    inside_root,
    no_such_file,
    root_note,
)
from synattn_jobs.store import Experiment, Job, JobStore, new_id
from synattn_shared.errors import validation_line
from synattn_shared.paths import UnsafePath, check_path_text, slug


def _queue(store: JobStore, settings: JobSettings, jobs: list[Job]) -> None:
    """Hand new jobs on: to Slurm at once (``executor = slurm``), straight to the broker
    (``dispatch = fifo``), or to the fair dispatcher, which releases them as worker slots
    free up (``synattn_jobs.dispatch``)."""
    if settings.executor == "slurm":
        from synattn_jobs.slurm.executor import submit_all

        submit_all(store, settings, jobs)
        return
    from synattn_jobs.worker import enqueue, sender

    if settings.dispatch == "fifo":
        for job in jobs:
            enqueue(job.id, job.kind, job.processes or 1)
        return
    from synattn_jobs.dispatch import dispatch

    dispatch(store, settings, kinds=sorted({j.kind for j in jobs}), send=sender(store))


def _private(settings: JobSettings) -> tuple[Path, ...]:
    """Folders no user path may name: the service's own (job store, broker, tokens)."""
    return (settings.home,)


def _name(name: str | None, default: str, what: str) -> str:
    try:
        return slug(name if name is not None else default, what)
    except UnsafePath as exc:
        raise BadJobSpec(str(exc)) from None


def resolve_train_spec(spec: TrainJobSpec, settings: JobSettings) -> StoredTrainSpec:
    """The spec with its config file confined and its whole configuration resolved."""
    from synattn_jobs.trainconfig import validate_train_config

    config = inside_root(spec.config, settings.data_root, "config", _private(settings))
    if not config.is_file():
        raise no_such_file("config", spec.config, settings.data_root)
    split = spec.evaluate.split if spec.evaluate is not None else None
    cfg = validate_train_config(config, spec.overrides, settings, split)
    from synattn_trainer.plugins import record

    return StoredTrainSpec(
        config=str(config),
        overrides=spec.overrides,
        evaluate=spec.evaluate,
        resources=spec.resources,
        resolved=cfg.model_dump(mode="json"),
        plugins=record(cfg),  # what a worker must have to run it
    )


def check_executor(
    settings: JobSettings, kind: str, resources: Resources | None = None, cpus: int = 1
) -> None:
    """Refuse what the executor cannot run: a job over several nodes without Slurm; under
    Slurm, whatever ``sbatch --test-only`` refuses (with Slurm's own message)."""
    resources = resources or Resources()
    if settings.executor != "slurm":
        if resources.nodes > 1:
            raise BadJobSpec(
                f"resources.nodes {resources.nodes}: a job over several machines runs under "
                "Slurm (SYNATTN_EXECUTOR=slurm); a synattn worker runs one machine's processes"
            )
        if resources.slurm is not None:
            raise BadJobSpec("resources.slurm: these jobs run on synattn's own workers "
                             "(SYNATTN_EXECUTOR is not slurm)")  # fmt: skip
        return
    from synattn_jobs.slurm.executor import check_submittable

    check_submittable(settings, kind, resources, cpus)


def check_processes(
    store: JobStore, settings: JobSettings, resources: Resources, owner: str | None
) -> None:
    """Refuse a job of ``resources.processes`` that could never start, rather than queue it
    forever: more than ``SYNATTN_MAX_PROCESSES`` on one node (a multi-node Slurm job may have
    that many on each); more than the largest live training worker owns devices (workers
    advertise them with their registration beat; while none is live, anything up to the cap is
    accepted and waits for a worker that fits; under Slurm, Slurm says what fits); more than its
    owner's running quota. One process always fits."""
    processes = resources.processes
    if processes <= 1:
        return
    if resources.per_node > settings.max_processes:
        spread = f" {resources.per_node} on each of {resources.nodes} nodes;" * (
            resources.nodes > 1
        )
        raise BadJobSpec(
            f"resources.processes {processes}:{spread} a job may have at most "
            f"{settings.max_processes} processes per node (SYNATTN_MAX_PROCESSES)"
        )
    most = (
        None
        if settings.executor == "slurm"
        else store.live_devices("train", settings.stale_after_s)
    )
    if most is not None and processes > most:
        raise BadJobSpec(
            f"resources.processes {processes}: no worker can run it: the largest live training "
            f"worker owns {most} device(s) (SYNATTN_WORKER_DEVICES)"
        )
    limit = store.running_limit(owner, settings.max_running_per_user)
    if limit is not None and processes > limit:
        raise BadJobSpec(
            f"resources.processes {processes}: user {owner or 'local'} may run at most {limit} "
            "processes at once (SYNATTN_MAX_RUNNING_PER_USER, or synattn quota set USER "
            "--running N)"
        )


def _run_dir(settings: JobSettings, name: str, out: str | None) -> Path:
    assert settings.runs_dir is not None
    if out is not None:
        run_dir = inside_root(
            out, settings.runs_dir, "out", _private(settings), root_name="the runs folder",
            note=root_note(settings.runs_dir, "runs folder", "SYNATTN_RUNS_DIR"),
        )  # fmt: skip
        if run_dir == settings.runs_dir:
            raise BadJobSpec("out must be a folder inside the runs folder, not the folder itself")
        return run_dir
    return settings.runs_dir / f"{name}-{new_id()[:6]}"


def submit_train(
    store: JobStore, settings: JobSettings, spec: TrainJobSpec, name: str | None = None,
    out: str | None = None, owner: str | None = None, priority: int = 0,
) -> Job:  # fmt: skip
    """Queue one training job (its run directory under ``runs_dir``); ``QuotaExceeded`` when
    the owner's queued jobs are at their limit."""
    stored = resolve_train_spec(spec, settings)
    check_processes(store, settings, spec.resources, owner)
    check_executor(settings, "train", spec.resources)
    job_name = _name(name, Path(stored.config).stem, "name")
    run_dir = _run_dir(settings, job_name, out)
    _, (job,) = store.submit(
        [{"kind": "train", "name": job_name, "spec": stored.model_dump(mode="json"),
          "out_dir": str(run_dir), "priority": priority,
          "processes": spec.resources.processes}],
        owner, settings.max_queued_per_user,
    )  # fmt: skip
    _queue(store, settings, [job])
    return job


def submit_parse(
    store: JobStore, settings: JobSettings, spec: ParseJobSpec, name: str | None = None,
    owner: str | None = None, priority: int = 0,
) -> Job:  # fmt: skip
    """Queue one parse job; its output folder is the spec's ``out``."""
    spec = check_parse_spec(spec, settings.data_root, _private(settings))
    check_executor(settings, "parse", cpus=spec.workers)
    job_name = _name(name, Path(spec.out).name, "name")
    _, (job,) = store.submit(
        [{"kind": "parse", "name": job_name, "spec": spec.model_dump(mode="json"),
          "out_dir": spec.out, "priority": priority}],
        owner, settings.max_queued_per_user,
    )  # fmt: skip
    _queue(store, settings, [job])
    return job


def load_experiment_file(path: Path) -> ExperimentSpec:
    """Read a grid YAML; its ``config`` is relative to the YAML's folder when not absolute."""
    from synattn_shared.errors import BadFile
    from synattn_shared.textfile import read_text

    try:
        raw = yaml.safe_load(read_text(path, fix="give a grid file (YAML)")) or {}
    except BadFile as exc:  # missing, a folder, unreadable, not UTF-8 (with its line)
        raise BadJobSpec(str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise BadJobSpec(f"{path}: not valid YAML{where}") from None
    if not isinstance(raw, dict):
        raise BadJobSpec(f"{path}: an experiment is a mapping, not a {type(raw).__name__}")
    if isinstance(raw.get("config"), str):
        # relative to the grid file (a local file: "../configs/x.yaml" is fine); the result is
        # still confined to the data root when the grid is submitted
        try:
            check_path_text(raw["config"], "config")
            cfg = Path(raw["config"])
            if not cfg.is_absolute():
                raw["config"] = str((path.parent / cfg).resolve())
        except (UnsafePath, OSError, RuntimeError) as exc:
            raise BadJobSpec(f"{path}: {exc}") from None
    try:
        return ExperimentSpec.model_validate(raw)
    except ValidationError as exc:
        raise BadJobSpec(f"{path}: {validation_line(exc.errors()[0])}") from None


def check_grid_config(config: str, settings: JobSettings) -> None:
    """Refuse a grid's config that names no file under the data root, saying how to write it.

    A grid file names its config relative to itself (``load_experiment_file`` resolves it, so
    the CLI always gives an absolute path); a grid posted to the API names it relative to the
    data root. The same grid posted unchanged (``../configs/x.yaml``) is refused, with the
    path under the data root it most likely means when that file exists: guessing it silently
    would make a path's meaning depend on what exists.
    """
    try:
        path = inside_root(config, settings.data_root, "config", _private(settings))
        if not path.is_file():
            raise no_such_file("config", config, settings.data_root)
    except BadJobSpec as exc:
        if Path(config).is_absolute():
            raise
        hint = (
            "a grid sent to the API names its config relative to the data root, not to the "
            "grid file as `synattn experiment run` does"
        )
        meant = _meant_under_root(config, settings)
        if meant is not None:
            hint += f": write config: {meant!r}"
        raise BadJobSpec(f"{exc}; {hint}") from None


def _meant_under_root(config: str, settings: JobSettings) -> str | None:
    """``config`` with its leading ``..`` steps dropped, when that names a file under the data
    root (``../configs/x.yaml`` from a grid in ``experiments/``: ``configs/x.yaml``)."""
    parts = Path(posixpath.normpath(config)).parts
    rest = list(itertools.dropwhile(lambda p: p in ("..", "."), parts))
    if not rest or len(rest) == len(parts):
        return None
    candidate = "/".join(rest)
    try:
        path = inside_root(candidate, settings.data_root, "config", _private(settings))
    except BadJobSpec:
        return None
    return candidate if path.is_file() else None


def submit_experiment(
    store: JobStore, settings: JobSettings, spec: ExperimentSpec, owner: str | None = None
) -> tuple[Experiment, list[Job]]:
    """Queue every job of a grid; all are validated before the first one is queued."""
    planned = spec.expand(settings.max_grid_jobs)
    check_grid_config(spec.config, settings)
    check_processes(store, settings, spec.resources, owner)
    check_executor(settings, "train", spec.resources)
    checked = [(p, resolve_train_spec(p["spec"], settings)) for p in planned]
    exp_id = new_id()
    assert settings.runs_dir is not None
    root = settings.runs_dir / f"{spec.name}-{exp_id[:6]}"
    exp, jobs = store.submit(
        [{"kind": "train", "name": p["name"], "spec": train_spec.model_dump(mode="json"),
          "out_dir": str(root / p["name"]), "variant": p["variant"], "seed": p["seed"],
          "params": p["params"], "priority": spec.priority,
          "processes": spec.resources.processes}
         for p, train_spec in checked],
        owner, settings.max_queued_per_user,
        experiment={"id": exp_id, "name": spec.name, "baseline": spec.baseline,
                    "spec": spec.model_dump(mode="json")},
    )  # fmt: skip
    assert exp is not None
    _queue(store, settings, jobs)
    return exp, jobs


def cancel_job(store: JobStore, settings: JobSettings, job_id: str) -> Job | None:
    """Cancel a job: a queued one at once, a running one at its next update (it saves a
    resume point); under Slurm also ``scancel`` (``synattn_jobs.slurm.executor.cancel``)."""
    before = store.get(job_id)
    job = store.request_cancel(job_id)
    if job is not None and before is not None and settings.executor == "slurm":
        from synattn_jobs.slurm.executor import cancel

        if before.state in ("queued", "running"):
            cancel(before)
    return job


def job_view(job: Job) -> dict[str, Any]:
    """The public view of a job (what the API returns and the CLI prints); non-finite numbers
    (a diverged loss) become null so the view is always valid JSON."""
    from synattn_shared.webapi import finite_json

    view: dict[str, Any] = finite_json(job.as_dict())
    return view
