"""Request and response models of the job API (they are its OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from synattn_jobs.specs import ExperimentSpec, ParseJobSpec, PathText, Slug, TrainJobSpec

__all__ = ["ExperimentSpec", "ParseJobSpec", "TrainJobSpec"]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TrainRequest(Request):
    """One training job: a config under the data root, overrides, what to evaluate, and maybe
    a preset (``synattn presets``) to lay on the config."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"spec": {"config": "configs/tiny.yaml"}},
                {"name": "dea-lr", "preset": "dea", "priority": 10,
                 "spec": {"config": "configs/tiny.yaml",
                          "overrides": {"optim.lr": 0.001, "train.seed": 2},
                          "evaluate": {"split": "test", "beam": 4}}},
            ]
        }
    )  # fmt: skip

    name: Slug | None = Field(None, description="run name (default: the config's file name)")
    out: PathText | None = Field(None, description="run folder inside the runs folder")
    spec: TrainJobSpec
    priority: int = Field(0, ge=-1000, le=1000, description="orders your own queued jobs")
    preset: Slug | None = Field(
        None,
        description="a preset by name (synattn presets): the config with that paper's settings, "
        "as `preset: NAME` in the config gives them; the same as spec.overrides.preset, where "
        "the stored job keeps it",
    )

    @model_validator(mode="after")
    def _one_preset(self) -> TrainRequest:
        given = self.spec.overrides.get("preset")
        if self.preset is not None and given is not None and given != self.preset:
            raise ValueError(
                f"preset {self.preset!r} and spec.overrides.preset {given!r}: give one"
            )
        return self

    def train_spec(self) -> TrainJobSpec:
        """The spec to submit: ``preset`` moved into its overrides, where ``--set preset=`` and
        a grid put it and the configuration's own check expands it."""
        if self.preset is None:
            return self.spec
        overrides = {"preset": self.preset, **self.spec.overrides}
        return self.spec.model_copy(update={"overrides": overrides})


class ParseRequest(Request):
    """One parse job: a corpus under the data root into a shard folder under it."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"spec": {"src": "corpora/m30k/train.en", "out": "datasets/m30k/train"}},
                {"name": "m30k-train", "priority": 5,
                 "spec": {"src": "corpora/m30k/train.en", "tgt": "corpora/m30k/train.de",
                          "out": "datasets/m30k/train", "backend": "spacy", "workers": 2}},
            ]
        }
    )  # fmt: skip

    name: Slug | None = None
    spec: ParseJobSpec
    priority: int = Field(0, ge=-1000, le=1000, description="orders your own queued jobs")


class TokenRequest(Request):
    """A new bearer token (admins only)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "alice"}, {"name": "ops", "admin": True}]}
    )

    name: Slug = Field(description="the user the token acts for (owner of their jobs)")
    admin: bool = False


class JobView(BaseModel):
    """A job: what it runs (``spec``, the resolved configuration included) and what happened."""

    id: str
    kind: str
    name: str
    owner: str | None
    state: str
    experiment_id: str | None
    variant: str | None
    seed: int | None
    params: dict[str, Any]
    spec: dict[str, Any]
    out_dir: str
    progress: dict[str, Any]
    result: dict[str, Any]
    error: str | None
    attempts: int
    worker: str | None
    cancel_requested: bool
    priority: int = 0
    processes: int = Field(1, description="data-parallel processes (resources.processes)")
    released_at: float | None = None
    created_at: float
    started_at: float | None
    heartbeat_at: float | None
    finished_at: float | None
    earlier_claims_s: float | None = Field(
        None, description="seconds that earlier claims (a lost or released worker's) held the job"
    )
    slurm_job: str | None = Field(None, description="its Slurm job id (SYNATTN_EXECUTOR=slurm)")
    slurm_state: str | None = Field(
        None, description="Slurm's last word on it: PENDING, RUNNING, TIMEOUT, ..."
    )
    slurm_reason: str | None = Field(
        None, description="why Slurm keeps it waiting or ended it: Priority, Resources, ..."
    )


class ExperimentSummary(BaseModel):
    id: str
    name: str
    owner: str | None
    baseline: str
    created_at: float


class ExperimentView(ExperimentSummary):
    spec: dict[str, Any]
    jobs: list[JobView]


class ArtifactInfo(BaseModel):
    name: str = Field(description="path inside the job's folder")
    bytes: int


class Identity(BaseModel):
    name: str
    admin: bool


class NewToken(Identity):
    token: str = Field(description="shown once; only its SHA-256 digest is stored")


class Health(BaseModel):
    status: str


class AttentionRequest(Request):
    """One sentence for the attention explorer: a row of the job's own data, or free text,
    parsed as the run's training data was (the parser its checkpoint records: in this process,
    or through the parser API named in ``SYNATTN_PARSER_URL``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"split": "valid", "row": 0},
                {"text": "Two dogs run across the green field ."},
            ]
        }
    )

    split: Literal["valid", "test"] = "valid"
    row: int | None = Field(None, ge=0, le=10_000_000, description="0-based row of the split")
    text: str | None = Field(None, min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _one_sentence(self) -> AttentionRequest:
        if self.row is not None and self.text is not None:
            raise ValueError("give a row or a text, not both")
        if self.row is None and self.text is None:
            self.row = 0
        return self


class AttentionView(BaseModel):
    """What every head of a finished run applies to one sentence (eval mode, teacher-forced on
    the reference, or on the model's own translation for free text), beside its syntax."""

    job: str
    split: str | None
    row: int | None
    tokens: dict[str, list[str]] = Field(description="source and target subwords")
    modules: dict[str, list[list[list[float]]]] = Field(
        description="per module (enc_self.0, dec_self.0, enc_dec.0, ...): [heads][queries][keys]"
    )
    roles: dict[str, list[str]] = Field(description="per module and head: what the head is")
    syntax: dict[str, Any] = Field(
        description="words, dependency arcs (dep -> head, 0-based words), subword_to_word, and "
        "the source matrices the run's variants requested, at subword level"
    )
    stats: dict[str, dict[str, list[float | None]]] = Field(
        description="per module: importance, confidence, gate per head, where the run has them"
    )
    translation: str | None = Field(
        None,
        description="free text: the model's greedy translation, which the target side is "
        "teacher-forced on; null for a row of the data (teacher-forced on its reference)",
    )
    model_cached: bool = Field(description="the model was already loaded in this process")


class QueuedJob(BaseModel):
    id: str
    kind: str
    name: str
    priority: int
    position: int = Field(description="1 = next to start on its queue (parse or train)")
    released: bool = Field(description="already handed to the broker")


class UserCounts(BaseModel):
    user: str
    queued: int
    running: int


class QueueView(BaseModel):
    """Your queued jobs in the fair order, and every user's counts (no other job details)."""

    jobs: list[QueuedJob]
    users: list[UserCounts]
    dispatch: str


class QuotaRequest(Request):
    """An admin's limits for one user; null keeps the server's default."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"queued": 100, "running": 4}, {"running": None}]}
    )

    queued: int | None = Field(None, ge=0, le=1_000_000)
    running: int | None = Field(
        None, ge=0, le=1_000_000, description="processes of running jobs (a job of N counts N)"
    )


class QuotaView(BaseModel):
    user: str
    queued: int | None
    running: int | None


TRANSLATE_MAX_SENTENCES = 64  # sentences one translate request may hold
TRANSLATE_MAX_CHARS = 1000  # characters per sentence (the explorer's free-text bound)


class TranslateRequest(Request):
    """Raw sentences for a finished training job's model, parsed as its training data was."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"sentences": ["Two dogs run across the green field .", "A man reads ."]},
                {"sentences": ["A girl in a red coat ."], "beam": 1},
            ]
        },
    )

    sentences: list[Annotated[str, Field(min_length=1, max_length=TRANSLATE_MAX_CHARS)]] = Field(
        min_length=1,
        max_length=TRANSLATE_MAX_SENTENCES,
        description="raw source sentences, one string each, tokenised and parsed by the parser "
        "the run's training data was parsed with",
    )
    beam: int | None = Field(None, ge=1, le=16, description="default: the run's decode.beam")
    lenpen: float | None = Field(None, ge=0, le=10, description="default: the run's decode.lenpen")


class TranslateView(BaseModel):
    """The translations, in order, and the parse the sentences went through."""

    job: str
    translations: list[str]
    parse: dict[str, Any] = Field(
        description="the recorded parse: parser (backend, model, version, constituency), "
        "feature options, pretokenized"
    )
    model_cached: bool = Field(description="the model was already loaded in this process")
