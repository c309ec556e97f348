"""Checks at the door: every file a training configuration names exists and is what it should
be, before a run starts or a job is queued.

``synattn train``, ``synattn submit train``, a grid (``synattn experiment run``, ``POST
/v1/experiments``) and ``POST /v1/jobs/train`` all call ``check_config_files`` once the
configuration is valid, and a worker calls it again before it trains (a file may have moved
since). A refusal is one line (``BadFile``): the config key, the path as resolved, what is wrong
with it, and what to do; a relative path adds the folder it was resolved against (a config's
relative data paths are read from the config's own folder, not from where the command ran).

The checks read little: a shard directory's manifest and a ``stat`` of each shard it lists (a
missing or truncated shard is caught by its size), and the tokenizer, loaded once per file
version in a process (a grid of 200 jobs over one tokenizer loads it once). No torch.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synattn_shared.errors import BadFile, file_error, path_problem

if TYPE_CHECKING:
    from synattn_trainer.config import TrainConfig

SHARD_KEYS = ("train", "valid", "test")  # data.* keys that name shard directories
PATH_KEYS = (*SHARD_KEYS, "tokenizer")  # every data.* key that names a file or folder

_seen_lock = threading.Lock()
_seen: dict[tuple[str, int, int], None] = {}  # tokenizers that loaded: (path, mtime, size)


def written_data_paths(config: Path, overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The ``data.*`` paths as the config file (and ``overrides``) write them, before they are
    resolved; {} when the file cannot be read (the config's own check said why)."""
    import yaml

    try:
        raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        raw = None
    block = raw.get("data") if isinstance(raw, dict) else None
    data: dict[str, Any] = dict(block) if isinstance(block, dict) else {}
    for key, value in (overrides or {}).items():
        if key == "data" and isinstance(value, Mapping):
            data.update(value)
        elif isinstance(key, str) and key.startswith("data."):
            data[key.split(".", 1)[1]] = value
    return {k: v for k, v in data.items() if k in PATH_KEYS and isinstance(v, str)}


def resolved_note(written: str | None, config: Path | None) -> str | None:
    """Where a relative path was read from: the config's folder (None for an absolute one,
    or when the config file is not known)."""
    if config is None or written is None or Path(written).is_absolute():
        return None
    folder = str(config.parent.resolve())
    return (
        f"relative paths are read from the config's folder, {folder}/ ({config.name} says "
        f"{written!r})"
    )


def check_config_files(
    cfg: TrainConfig,
    config: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> None:
    """Refuse a configuration whose data paths are not what they should be: each shard
    directory (``data.train``, ``data.valid``, ``data.test``) exists with a readable manifest
    of a complete dataset of this schema and every shard it lists at its recorded size; the
    tokenizer (``data.tokenizer``) loads as this package's vocabulary.

    Args:
        cfg: the resolved configuration (absolute paths).
        config: the YAML file it came from, when there is one: a refusal of a relative path
            then says which folder it was read from.
        overrides: the ``--set`` overrides it was loaded with (a path written by one).

    Raises:
        BadFile: the first path at fault, keyed ``data.<key>`` (a ``MissingFile``, which is
            a ``FileNotFoundError`` too, when it does not exist).
    """
    written = written_data_paths(config, overrides) if config is not None else {}
    for key in PATH_KEYS:
        value = getattr(cfg.data, key, None)
        if not value:
            continue
        try:
            if key == "tokenizer":
                check_tokenizer(value)
            else:
                check_shards(value)
        except BadFile as exc:
            note = resolved_note(written.get(key), config)
            fix = "; ".join(x for x in (exc.fix, note) if x)
            raise type(exc)(exc.path, exc.problem, fix or None, key=f"data.{key}") from None


def check_shards(path: str | Path) -> None:
    """``path`` is a complete shard directory whose every shard is there at its recorded size
    (``BadFile`` otherwise, naming the folder, its manifest or the shard at fault)."""
    from synattn_shared.manifest import SHARDS_FIX
    from synattn_shared.shards import ShardDataset

    problem = path_problem(path, "directory")
    if problem is not None:
        raise file_error(path, problem, SHARDS_FIX)
    ShardDataset(path).check_files()


def check_tokenizer(path: str | Path) -> None:
    """``path`` loads as this package's vocabulary (``tokenizer.load_tokenizer``); a file that
    loaded once is not loaded again while it keeps its modification time and size."""
    from synattn_trainer.tokenizer import TOKENIZER_FIX, load_tokenizer

    problem = path_problem(path)
    if problem is not None:
        raise file_error(path, problem, TOKENIZER_FIX)
    st = Path(path).stat()
    seen = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size)
    with _seen_lock:
        if seen in _seen:
            return
    load_tokenizer(path)
    with _seen_lock:
        if len(_seen) > 256:
            _seen.clear()
        _seen[seen] = None
