"""Submitting work: validate a spec against the data root, record the job, send its task.

Shared by the job API and the CLI, so both refuse the same bad input with the same message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.settings import JobSettings
from synattn_jobs.specs import (
    ExperimentSpec,
    ParseJobSpec,
    TrainJobSpec,
    check_parse_spec,
    check_train_spec,
    inside_root,
)
from synattn_jobs.store import Experiment, Job, JobStore, new_id


def _enqueue(job: Job) -> None:
    from synattn_jobs.worker import enqueue

    enqueue(job.id, job.kind)


def _run_dir(settings: JobSettings, name: str, out: str | None) -> Path:
    if out is not None:
        return inside_root(out, settings.data_root, "out")
    assert settings.runs_dir is not None
    return settings.runs_dir / f"{name}-{new_id()[:6]}"


def submit_train(
    store: JobStore, settings: JobSettings, spec: TrainJobSpec, name: str | None = None,
    out: str | None = None,
) -> Job:  # fmt: skip
    """Queue one training job (its run directory under ``runs_dir`` unless given)."""
    spec = check_train_spec(spec, settings.data_root)
    name = name or Path(spec.config).stem
    run_dir = _run_dir(settings, name, out)
    job = store.create_job("train", name, spec.model_dump(mode="json"), str(run_dir))
    _enqueue(job)
    return job


def submit_parse(
    store: JobStore, settings: JobSettings, spec: ParseJobSpec, name: str | None = None
) -> Job:
    """Queue one parse job; its output folder is the spec's ``out``."""
    spec = check_parse_spec(spec, settings.data_root)
    job = store.create_job(
        "parse", name or Path(spec.out).name, spec.model_dump(mode="json"), spec.out
    )
    _enqueue(job)
    return job


def load_experiment_file(path: Path) -> ExperimentSpec:
    """Read a grid YAML; its ``config`` is relative to the YAML's folder when not absolute."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BadJobSpec(f"{path}: {exc}") from None
    if isinstance(raw, dict) and isinstance(raw.get("config"), str):
        cfg = Path(raw["config"])
        if not cfg.is_absolute():
            raw["config"] = str((path.parent / cfg).resolve())
    try:
        return ExperimentSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadJobSpec(
            f"{path}: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}"
        ) from None


def submit_experiment(
    store: JobStore, settings: JobSettings, spec: ExperimentSpec
) -> tuple[Experiment, list[Job]]:
    """Queue every job of a grid; all are validated before the first one is queued."""
    planned = spec.expand()
    checked = [(p, check_train_spec(p["spec"], settings.data_root)) for p in planned]
    exp = store.create_experiment(spec.name, spec.baseline, spec.model_dump(mode="json"))
    assert settings.runs_dir is not None
    root = settings.runs_dir / f"{spec.name}-{exp.id[:6]}"
    jobs = []
    for p, train_spec in checked:
        job = store.create_job(
            "train", p["name"], train_spec.model_dump(mode="json"), str(root / p["name"]),
            experiment_id=exp.id, variant=p["variant"], seed=p["seed"], params=p["params"],
        )  # fmt: skip
        jobs.append(job)
    for job in jobs:
        _enqueue(job)
    return exp, jobs


def job_view(job: Job) -> dict[str, Any]:
    """The public view of a job (what the API returns and the CLI prints)."""
    return job.as_dict()
