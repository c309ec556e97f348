"""What a job runs: typed specs for parse jobs, training jobs and experiment grids.

Every path a client sends is relative to the data root (or absolute inside it) and goes through
``synattn_shared.paths.confine``: anything that escapes it (``..``, an absolute path elsewhere,
a symlink out) or lies in the service's own folder is refused before a job exists. Names that
become path components (jobs, experiments, variants, grid values) are slugs or are refused.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from synattn_jobs.errors import BadJobSpec
from synattn_shared.paths import SLUG_MAX, SLUG_PATTERN, UnsafePath, confine, slug

PathText = Annotated[str, Field(min_length=1, max_length=4096)]
Slug = Annotated[str, Field(pattern=f"^{SLUG_PATTERN}$")]
DottedKey = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")]
GridValue = bool | int | float | Annotated[str, Field(max_length=SLUG_MAX)]
Seed = Annotated[int, Field(ge=0, le=2**31 - 1)]
MAX_PROCESSES = 16  # one node's devices: ``torchrun --standalone`` runs on a single machine
MAX_NODES = 16  # a multi-node job (the Slurm executor): its processes spread over this many
# what Slurm's own option values may be: names (partition, account, QOS), a time limit, memory
SlurmName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.,+-]{0,99}$")]
SLURM_TIME = r"^(\d{1,7}|\d{1,7}:\d{2}(:\d{2})?|\d{1,5}-\d{1,2}(:\d{2}){0,2}|UNLIMITED)$"
SlurmTime = Annotated[str, Field(pattern=SLURM_TIME)]
SlurmMem = Annotated[str, Field(pattern=r"^\d{1,9}[KMGT]?$")]


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ParseJobSpec(Spec):
    """Parse a corpus into a shard dataset (``synattn parse`` as a job)."""

    src: PathText
    tgt: PathText | None = None
    out: PathText
    backend: Literal["spacy", "benepar", "stanza", "derived", "given"] = "spacy"
    limit: int | None = Field(None, ge=1, le=1_000_000_000)
    workers: int = Field(1, ge=1, le=64)
    rows_per_shard: int = Field(10_000, ge=1, le=1_000_000)
    pretokenized: bool = False
    encoding: str = Field(
        "utf-8",
        min_length=1,
        max_length=40,
        description="text encoding of src and tgt (a Python codec name: latin-1, cp1252, ...)",
    )

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        from synattn_shared.textfile import check_encoding

        return check_encoding(value)  # its Python name; an unknown one is refused (422)

    @model_serializer(mode="wrap")
    def _utf8_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``encoding`` only when not UTF-8: a stored spec of a UTF-8 corpus reads as before."""
        data: dict[str, Any] = handler(self)
        if data.get("encoding") == "utf-8":
            data.pop("encoding")
        return data


class EvalSpec(Spec):
    """What a finished training job translates and scores (the report's BLEU)."""

    split: Literal["valid", "test"] = "valid"
    beam: int | None = Field(None, ge=1, le=64)
    limit: int | None = Field(None, ge=1, le=10_000_000)
    analyze: bool = Field(False, description="head importance and confidence on the split")


class SlurmRequest(Spec):
    """A job's (or a grid's) own Slurm request, over the service's ``SYNATTN_SLURM_*``
    settings. Only these options: whoever runs the service sets any other (``slurm_extra``)."""

    partition: SlurmName | None = None
    account: SlurmName | None = None
    qos: SlurmName | None = None
    time: SlurmTime | None = Field(None, description="minutes, or [D-]HH:MM:SS")
    mem: SlurmMem | None = None


class Resources(Spec):
    """What one training job runs on: ``processes`` data-parallel ranks under ``torchrun``,
    one device each on a GPU worker (gloo processes on a CPU one). One process trains inside
    the worker itself, as every job did before this field existed."""

    processes: int = Field(
        1,
        ge=1,
        le=MAX_PROCESSES * MAX_NODES,
        description="data-parallel processes (DDP ranks), in all; a worker that owns at least "
        "this many devices runs the job, and it counts this many against your share and quota",
    )
    nodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
        description="machines the processes spread over, the same number on each (the Slurm "
        "executor: srun starts torchrun on each, which meet at the first)",
    )
    slurm: SlurmRequest | None = Field(
        None, description="this job's own Slurm partition, account, QOS or time limit"
    )

    @model_validator(mode="after")
    def _per_node(self) -> Resources:
        if self.processes % self.nodes:
            raise ValueError(
                f"processes ({self.processes}) must be a multiple of nodes ({self.nodes}): "
                "each node runs the same number"
            )
        if self.processes // self.nodes > MAX_PROCESSES:
            raise ValueError(f"at most {MAX_PROCESSES} processes per node")
        return self

    @property
    def per_node(self) -> int:
        return self.processes // self.nodes

    @model_serializer(mode="wrap")
    def _defaults_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``nodes`` and ``slurm`` only when set: a stored spec of one node reads as before."""
        data: dict[str, Any] = handler(self)
        if self.nodes == 1:
            data.pop("nodes", None)
        if self.slurm is None:
            data.pop("slurm", None)
        elif isinstance(data.get("slurm"), dict):
            data["slurm"] = {k: v for k, v in data["slurm"].items() if v is not None}
        return data


class WithResources(Spec):
    """A spec with ``resources``, which its stored form leaves out at the default: the specs
    of one-process jobs, hence their digests (``synattn study run``), stay what they were."""

    resources: Resources = Field(default_factory=Resources)

    @model_serializer(mode="wrap")
    def _default_resources_left_out(
        self, handler: SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.resources == Resources():
            data.pop("resources", None)
        if data.get("plugins") == {}:  # a stored spec of built-in variants: as it always was
            data.pop("plugins")
        return data


class TrainJobSpec(WithResources):
    """Train one configuration (YAML under the data root, plus dotted-key overrides)."""

    config: PathText
    overrides: dict[DottedKey, Any] = Field(default_factory=dict, max_length=200)
    evaluate: EvalSpec | None = Field(default_factory=EvalSpec)

    @field_validator("overrides")
    @classmethod
    def _finite(cls, v: dict[str, Any]) -> dict[str, Any]:
        check_finite(v, "overrides")
        return v


class StoredTrainSpec(TrainJobSpec):
    """A training job as stored: the request plus the configuration resolved at submit time.
    The worker trains ``resolved``, so editing the YAML afterwards changes nothing."""

    resolved: dict[str, Any]
    plugins: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="the plugins the configuration's variants come from, as the submitting "
        "process had them (name: version, source sha256); a worker without the same refuses "
        "the job (synattn_trainer.plugins.check_recorded)",
    )


class ExperimentSpec(WithResources):
    """A grid: variants x seeds x hyper-parameters over one base configuration; every job of
    it asks for ``resources`` (a grid of 2-process jobs: ``resources: {processes: 2}``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"name": "demo", "config": "configs/tiny.yaml",
                 "variants": ["vanilla", "dea", "slr-gated"]},
                {"name": "slr-lr", "config": "configs/tiny.yaml", "baseline": "vanilla",
                 "variants": ["vanilla", "slr-gated"], "seeds": [1, 2, 3],
                 "params": {"optim.lr": [0.001, 0.002]},
                 "overrides": {"train.max_updates": 400},
                 "evaluate": {"split": "valid", "analyze": True}, "priority": 5},
            ]
        }
    )  # fmt: skip

    name: Slug
    config: PathText = Field(
        description="the base configuration: relative to the job service's data root "
        "(SYNATTN_DATA_ROOT), or absolute inside it; '..' is refused. A grid file given to "
        "`synattn experiment run` names it relative to the file instead (the CLI resolves it "
        "so); posted to the API, the same grid names it relative to the data root"
    )
    baseline: Slug = "vanilla"
    baselines: dict[Slug, Slug] = Field(
        default_factory=dict,
        max_length=200,
        description="a variant's own baseline where it is not ``baseline`` (for example a "
        "paper's systems trained without a source </s> against 8L)",
    )
    protocols: dict[Slug, Literal["average", "last", "best_valid"]] = Field(
        default_factory=dict,
        max_length=200,
        description="a variant's final-model protocol where its paper had its own (the "
        "diversity paper's: the last checkpoint; gated SLR's: the best on validation loss): "
        "the variant and its "
        "baseline are both scored with it; every run of the grid makes those models too",
    )
    variants: (
        Annotated[list[Slug], Field(min_length=1, max_length=200)]
        | Annotated[dict[Slug, dict[str, Any]], Field(min_length=1, max_length=200)]
    )
    seeds: list[Seed] = Field(default_factory=lambda: [1], min_length=1, max_length=100)
    seeds_by_variant: dict[Slug, Annotated[list[Seed], Field(min_length=1, max_length=100)]] = (
        Field(
            default_factory=dict,
            max_length=200,
            description="a variant's own seeds where it needs more (or fewer) than ``seeds``, "
            "e.g. the rows whose seed spread asks for 8; a variant's baseline must train every "
            "seed the variant does, so that each comparison stays seed-paired",
        )
    )
    params: dict[DottedKey, Annotated[list[GridValue], Field(min_length=1, max_length=100)]] = (
        Field(default_factory=dict, max_length=10)
    )
    overrides: dict[DottedKey, Any] = Field(default_factory=dict, max_length=200)
    evaluate: EvalSpec = Field(default_factory=EvalSpec)
    priority: int = Field(
        0, ge=-1000, le=1000, description="orders your own queued jobs (higher first)"
    )

    @field_validator("overrides", "variants")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        check_finite(v, "value")
        return v

    def seeds_of(self, variant: str) -> list[int]:
        """The seeds ``variant`` trains: its own ``seeds_by_variant`` entry, else ``seeds``."""
        return list(dict.fromkeys(self.seeds_by_variant.get(variant, self.seeds)))

    def all_seeds(self) -> list[int]:
        """Every seed some variant trains, ``seeds`` first, then the others in order."""
        extra = [s for v in self.seeds_by_variant.values() for s in v]
        return list(dict.fromkeys([*self.seeds, *extra]))

    def planned_jobs(self) -> int:
        """How many training jobs the grid plans (computed without planning them)."""
        names = self.variants if isinstance(self.variants, list) else list(self.variants)
        return sum(len(self.seeds_of(v)) for v in names) * math.prod(
            map(len, self.params.values())
        )

    def variant_fragments(self) -> dict[str, dict[str, Any]]:
        """Each variant's config fragment: a preset by name, or the grid's own; a grid's own
        fragment under a preset's name refines that preset (nested mappings merge, anything
        else replaces), e.g. LPEA's clip calibrated to the data's trees."""
        from synattn_trainer.presets import VARIANTS, close_presets, merge

        if isinstance(self.variants, dict):
            return {v: merge(VARIANTS.get(v, {}), frag) for v, frag in self.variants.items()}

        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:  # each with its close matches, not all the presets there are
            said = "; ".join(f"{v!r}: {close_presets(v)}" for v in unknown)
            raise BadJobSpec(
                f"unknown variants {unknown} (a grid's list names presets): {said} (synattn "
                f"presets lists all {len(VARIANTS)})"
            )
        return {v: VARIANTS[v] for v in self.variants}

    def baseline_of(self, variant: str) -> str:
        """The variant a row of the comparison is measured against."""
        return self.baselines.get(variant, self.baseline)

    def expand(self, max_jobs: int) -> list[dict[str, Any]]:
        """One training job per (variant, seed, hyper-parameter combination), seed-major: the
        first seed of every variant is queued before any second seed, so that a run cut short
        still compares every system.

        Raises:
            BadJobSpec: more than ``max_jobs`` jobs, an unknown preset, or a job name that is
                not a slug (grid values become part of each run's folder name).
        """
        planned = self.planned_jobs()
        if planned > max_jobs:
            raise BadJobSpec(
                f"the grid plans {planned} jobs; the limit is {max_jobs} (SYNATTN_MAX_GRID_JOBS)"
            )
        fragments = self.variant_fragments()
        if self.baseline not in fragments:
            raise BadJobSpec(f"baseline {self.baseline!r} is not one of the variants")
        for variant, base in self.baselines.items():
            if variant not in fragments or base not in fragments:
                raise BadJobSpec(
                    f"baselines: {variant!r} -> {base!r} names a variant the grid does not have"
                )
        for variant in self.protocols:
            if variant not in fragments:
                raise BadJobSpec(f"protocols: {variant!r} is not one of the variants")
        for variant in self.seeds_by_variant:
            if variant not in fragments:
                raise BadJobSpec(f"seeds_by_variant: {variant!r} is not one of the variants")
        for variant in fragments:
            base = self.baselines.get(variant, self.baseline)
            missing = sorted(set(self.seeds_of(variant)) - set(self.seeds_of(base)))
            if variant != base and missing:
                raise BadJobSpec(
                    f"seeds_by_variant: {variant!r} trains seeds {missing} that its baseline "
                    f"{base!r} does not; add them to the baseline so the comparison stays "
                    "seed-paired"
                )
        extra = sorted(set(self.protocols.values()))
        keys = sorted(self.params)
        combos = [
            dict(zip(keys, vals, strict=True))
            for vals in itertools.product(*(self.params[k] for k in keys))
        ]
        jobs = []
        for seed in self.all_seeds():
            for variant, fragment in fragments.items():
                if seed not in self.seeds_of(variant):
                    continue
                for combo in combos or [{}]:
                    tag = "-".join(f"{k.split('.')[-1]}{_grid_text(v)}" for k, v in combo.items())
                    name = f"{variant}-s{seed}" + (f"-{tag}" if tag else "")
                    try:
                        slug(name, "job name")
                    except UnsafePath as exc:
                        raise BadJobSpec(f"grid values make a bad run name: {exc}") from None
                    overrides = {**self.overrides, **combo, **fragment, "train.seed": seed}
                    if extra:
                        overrides["train.extra_selections"] = extra
                    jobs.append(
                        {"name": name, "variant": variant, "seed": seed, "params": combo,
                         "spec": TrainJobSpec(config=self.config, overrides=overrides,
                                              evaluate=self.evaluate,
                                              resources=self.resources)}
                    )  # fmt: skip
        return jobs


def _grid_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_finite(value: Any, where: str) -> None:
    """Refuse NaN and infinities anywhere in a nested value (YAML can write ``.inf``); the
    message names the key that holds one."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise ValueError(f"{path}: non-finite number {node}; finite numbers only")
        if isinstance(node, dict):
            stack.extend((f"{path}.{k}", v) for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))


DATA_ROOT_ENV = "SYNATTN_DATA_ROOT"  # the setting every request path is resolved against


def root_note(root: Path, name: str = "data root", env: str = DATA_ROOT_ENV) -> str:
    """What an error that names a path adds: the root it was resolved against, and the
    setting that chose it."""
    return f"paths in a request are resolved against the job service's {name} {root} ({env})"


def inside_root(
    path: str | Path,
    root: Path,
    what: str = "path",
    private: tuple[Path, ...] = (),
    *,
    note: str | None = None,
    root_name: str = "the data root",
) -> Path:
    """``path`` resolved inside ``root`` (and outside ``private``), or ``BadJobSpec`` whose
    message ends with ``note`` (default: ``root_note(root)``, which root it was resolved
    against)."""
    try:
        return confine(path, root, what, exclude=private, root_name=root_name)
    except UnsafePath as exc:
        raise BadJobSpec(f"{exc}: {note or root_note(root)}") from None


def no_such_file(what: str, path: str, root: Path) -> BadJobSpec:
    """The error for a request path that names no file under the data root ``root``."""
    return BadJobSpec(
        f"{what} {path!r}: no such file under the job service's data root {root} ({DATA_ROOT_ENV})"
    )


def check_corpus(what: str, written: str, path: Path, root: Path, encoding: str = "utf-8") -> None:
    """A corpus a parse job names is a text file whose start decodes as ``encoding``
    (``synattn_shared.textfile.check_text_head``; the worker reads the rest), or ``BadJobSpec``
    naming it with the data root it was resolved against."""
    from synattn_shared.errors import BadFile, path_problem
    from synattn_shared.textfile import ENCODING_FIX, check_text_head

    if path_problem(path) == "does not exist":
        raise no_such_file(what, written, root)
    if path.is_file() and path.stat().st_size == 0:
        raise BadJobSpec(f"{what} {written!r}: is empty: no sentences ({root_note(root)})")
    try:
        check_text_head(
            path,
            encoding,
            encoding_fix=f"{ENCODING_FIX}, or name its encoding "
            '(the spec\'s "encoding": "latin-1"; synattn submit parse --encoding)',
        )
    except BadFile as exc:
        line = "" if exc.line is None else f" line {exc.line}"
        fix = "" if exc.fix is None else f"; {exc.fix}"
        raise BadJobSpec(
            f"{what} {written!r}{line}: {exc.problem}{fix} ({root_note(root)})"
        ) from None


def check_parse_spec(spec: ParseJobSpec, root: Path, private: tuple[Path, ...]) -> ParseJobSpec:
    """The spec with every path resolved inside the data root; the source (and target) must
    be text files (``check_corpus``)."""
    src = inside_root(spec.src, root, "src", private)
    check_corpus("src", spec.src, src, root, spec.encoding)
    tgt = None
    if spec.tgt is not None:
        tgt = inside_root(spec.tgt, root, "tgt", private)
        check_corpus("tgt", spec.tgt, tgt, root, spec.encoding)
    out = inside_root(spec.out, root, "out", private)
    if out == root:
        raise BadJobSpec("out must be a folder inside the data root, not the root itself")
    return spec.model_copy(update={"src": str(src), "tgt": tgt and str(tgt), "out": str(out)})
