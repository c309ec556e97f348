"""Checks of a training configuration before it is queued (no torch: the API stays light)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from synattn_jobs.errors import BadJobSpec


def validate_train_config(config: Path, overrides: dict[str, Any], root: Path) -> Any:
    """Load the YAML with its overrides; every data path must lie inside ``root``."""
    from synattn_jobs.specs import inside_root
    from synattn_trainer.config import load_config

    try:
        cfg = load_config(config, overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise BadJobSpec(f"config {config.name}: {loc}: {first['msg']}") from None
    except (OSError, ValueError) as exc:
        raise BadJobSpec(f"config {config.name}: {exc}") from None
    for key in ("train", "valid", "test", "tokenizer"):
        value = getattr(cfg.data, key, None)
        if value:
            inside_root(value, root, f"data.{key}")
    return cfg
