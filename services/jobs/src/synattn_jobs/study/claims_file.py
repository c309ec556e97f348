"""Claims as data: what a study's claims tables compare, in a versioned YAML file.

synattn's own file (``claims.yaml`` beside this module) holds the five papers' headline
claims, how each paper evaluated and the controls beside each system. A user writes one of
the same shape for their own method ("my variant against vanilla, expected +0.8") and
``synattn study claims --claims FILE`` prints the same table, verdicts and detectable
effects for it.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from synattn_shared.errors import BadFile, validation_line
from synattn_shared.textfile import read_text

BUILTIN = "claims.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class ClaimSpec(_Strict):
    """One headline result: the system that makes it (a variant of the experiment), what its
    paper (or its author) says, and the gains to read the measured interval against."""

    paper: str = Field(min_length=1, max_length=200)
    system: str = Field(min_length=1, max_length=100)
    claim: str = Field(min_length=1, max_length=2000)
    gains: tuple[float, ...] = Field(min_length=1, max_length=20)
    tests: str = Field("", max_length=1000, description="what the row measures, in words")
    short: str = Field("", max_length=200, description="its name in the summary")
    page: str = Field("index", max_length=100, description="its page under docs/papers/")


class ProtocolSpec(_Strict):
    """How a paper evaluated, beside how the study scores its row."""

    paper: str = Field(min_length=1, max_length=200)
    says: str = Field(max_length=1000)
    here: str = Field(max_length=1000)
    chosen: str = Field(max_length=1000)


class ControlSpec(_Strict):
    """A run beside a system that takes one of its parts away."""

    system: str = Field(min_length=1, max_length=100)
    control: str = Field(min_length=1, max_length=100)
    isolates: str = Field(max_length=1000)


class ClaimsFile(_Strict):
    """A claims file: the study (``results/<study>/``) and what it is to show."""

    version: Literal[1] = 1
    study: str = Field(min_length=1, max_length=100, description="the experiment's name")
    claims: tuple[ClaimSpec, ...] = Field(min_length=1, max_length=100)
    protocols: tuple[ProtocolSpec, ...] = ()
    controls: tuple[ControlSpec, ...] = ()


def load_claims(path: Path | None = None) -> ClaimsFile:
    """A claims file (synattn's own when ``path`` is None); ``BadFile`` naming the file and
    the key at fault when it is not one."""
    if path is None:
        text = files("synattn_jobs.study").joinpath(BUILTIN).read_text(encoding="utf-8")
        where: Path = Path(BUILTIN)
    else:
        text, where = read_text(path, fix="give a claims file (YAML)"), path
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise BadFile(
            where, "not valid YAML", line=None if mark is None else mark.line + 1
        ) from None
    try:
        return ClaimsFile.model_validate(raw)
    except ValidationError as exc:
        raise BadFile(where, f"not a claims file: {validation_line(exc.errors()[0])}") from None
