"""What a job runs: typed specs for parse jobs, training jobs and experiment grids.

Every path a client sends is relative to the data root (or absolute inside it); anything that
escapes it (``..``, an absolute path elsewhere, a symlink out) is refused before a job exists.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from synattn_jobs.errors import BadJobSpec


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParseJobSpec(Spec):
    """Parse a corpus into a shard dataset (``synattn parse`` as a job)."""

    src: str
    tgt: str | None = None
    out: str
    backend: str = "spacy"
    limit: int | None = Field(None, ge=1)
    workers: int = Field(1, ge=1, le=64)
    rows_per_shard: int = Field(10_000, ge=1)
    pretokenized: bool = False


class EvalSpec(Spec):
    """What a finished training job translates and scores (the report's BLEU)."""

    split: str = Field("valid", pattern="^(valid|test)$")
    beam: int | None = Field(None, ge=1, le=64)
    limit: int | None = Field(None, ge=1)
    analyze: bool = Field(False, description="head importance and confidence on the split")


class TrainJobSpec(Spec):
    """Train one configuration (YAML under the data root, plus dotted-key overrides)."""

    config: str
    overrides: dict[str, Any] = Field(default_factory=dict)
    evaluate: EvalSpec | None = Field(default_factory=EvalSpec)


class ExperimentSpec(Spec):
    """A grid: variants x seeds x hyper-parameters over one base configuration."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.+-]{1,100}$")
    config: str
    baseline: str = "vanilla"
    variants: list[str] | dict[str, dict[str, Any]]
    seeds: list[int] = Field(default_factory=lambda: [1], min_length=1)
    params: dict[str, list[Any]] = Field(default_factory=dict)
    overrides: dict[str, Any] = Field(default_factory=dict)
    evaluate: EvalSpec = Field(default_factory=EvalSpec)

    @field_validator("variants")
    @classmethod
    def _nonempty(cls, v: Any) -> Any:
        if not v:
            raise ValueError("at least one variant")
        return v

    def variant_fragments(self) -> dict[str, dict[str, Any]]:
        """Each variant's config fragment: a preset by name, or the grid's own."""
        if isinstance(self.variants, dict):
            return dict(self.variants)
        from synattn_trainer.presets import VARIANTS

        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise BadJobSpec(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
        return {v: VARIANTS[v] for v in self.variants}

    def expand(self) -> list[dict[str, Any]]:
        """One training job per (variant, seed, hyper-parameter combination)."""
        fragments = self.variant_fragments()
        if self.baseline not in fragments:
            raise BadJobSpec(f"baseline {self.baseline!r} is not one of the variants")
        keys = sorted(self.params)
        combos = [
            dict(zip(keys, vals, strict=True))
            for vals in itertools.product(*(self.params[k] for k in keys))
        ]
        jobs = []
        for variant, fragment in fragments.items():
            for combo in combos or [{}]:
                for seed in self.seeds:
                    tag = "-".join(f"{k.split('.')[-1]}{v}" for k, v in combo.items())
                    name = f"{variant}-s{seed}" + (f"-{tag}" if tag else "")
                    overrides = {**self.overrides, **combo, **fragment, "train.seed": seed}
                    jobs.append(
                        {"name": name, "variant": variant, "seed": seed, "params": combo,
                         "spec": TrainJobSpec(config=self.config, overrides=overrides,
                                              evaluate=self.evaluate)}
                    )  # fmt: skip
        return jobs


def inside_root(path: str | Path, root: Path, what: str = "path") -> Path:
    """Resolve ``path`` against ``root`` and refuse it unless it stays inside ``root``."""
    p = Path(path)
    if ".." in p.parts:
        raise BadJobSpec(f"{what} {str(path)!r} must not contain '..'")
    full = (p if p.is_absolute() else root / p).resolve()
    if not full.is_relative_to(root.resolve()):
        raise BadJobSpec(f"{what} {str(path)!r} is outside the data root {root}")
    return full


def check_parse_spec(spec: ParseJobSpec, root: Path) -> ParseJobSpec:
    """The spec with every path resolved inside the data root; the source must exist."""
    src = inside_root(spec.src, root, "src")
    if not src.is_file():
        raise BadJobSpec(f"src {spec.src!r}: no such file under the data root")
    tgt = None
    if spec.tgt is not None:
        tgt = inside_root(spec.tgt, root, "tgt")
        if not tgt.is_file():
            raise BadJobSpec(f"tgt {spec.tgt!r}: no such file under the data root")
    out = inside_root(spec.out, root, "out")
    return spec.model_copy(update={"src": str(src), "tgt": tgt and str(tgt), "out": str(out)})


def check_train_spec(spec: TrainJobSpec, root: Path) -> TrainJobSpec:
    """Resolve the config inside the data root and validate it, data paths included."""
    from synattn_jobs.trainconfig import validate_train_config

    config = inside_root(spec.config, root, "config")
    if not config.is_file():
        raise BadJobSpec(f"config {spec.config!r}: no such file under the data root")
    validate_train_config(config, spec.overrides, root)
    return spec.model_copy(update={"config": str(config)})
