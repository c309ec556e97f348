"""Checks of a training configuration before it is queued (no torch: the API stays light).

The whole configuration is resolved here, every variant's options included (the torch-free
``synattn_trainer.variant_options``), held to the operator's resource caps, and its files
checked (``synattn_trainer.preflight``: the shard directories and the tokenizer exist and are
what they should be), so a job that is accepted cannot fail later for a configuration reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.settings import JobSettings
from synattn_shared.errors import validation_line

if TYPE_CHECKING:
    from synattn_trainer.config import TrainConfig


def validate_train_config(
    config: Path, overrides: dict[str, Any], settings: JobSettings, split: str | None = None
) -> TrainConfig:
    """Load the YAML with its overrides and check it all: options, data paths inside the data
    root, the resource caps, that the evaluation ``split`` exists, and that every file the
    configuration names is what it should be (``synattn_trainer.preflight``)."""
    from synattn_jobs.specs import DATA_ROOT_ENV, inside_root
    from synattn_trainer.config import load_config

    try:
        cfg = load_config(config, overrides)
    except ValidationError as exc:
        raise BadJobSpec(f"config {config.name}: {validation_line(exc.errors()[0])}") from None
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        raise BadJobSpec(f"config {config.name}: {exc}") from None
    private = (settings.home,)
    note = (
        f"a config's data paths are resolved against its own folder and must lie inside the "
        f"job service's data root {settings.data_root} ({DATA_ROOT_ENV})"
    )
    for key in ("train", "valid", "test", "tokenizer"):
        value = getattr(cfg.data, key, None)
        if value:
            inside_root(value, settings.data_root, f"data.{key}", private, note=note)
    if split is not None and getattr(cfg.data, split, None) is None:
        raise BadJobSpec(f"evaluate.split {split!r}: the config has no data.{split}")
    check_caps(cfg, settings)
    from synattn_shared.errors import BadFile
    from synattn_trainer.preflight import check_config_files

    try:  # every file it names is there and is what it should be: nothing fails in a worker
        check_config_files(cfg, config, overrides)
    except BadFile as exc:
        raise BadJobSpec(f"config {config.name}: {exc}") from None
    return cfg


def check_caps(cfg: TrainConfig, s: JobSettings) -> None:
    """Refuse a configuration larger than the operator allows (``SYNATTN_MAX_*``)."""
    m = cfg.model
    caps = [
        ("model.d_model", m.d_model, s.max_d_model, "SYNATTN_MAX_D_MODEL"),
        ("model.d_ff", m.d_ff, s.max_d_ff, "SYNATTN_MAX_D_FF"),
        ("model.enc_layers", m.enc_layers, s.max_layers, "SYNATTN_MAX_LAYERS"),
        ("model.dec_layers", m.dec_layers, s.max_layers, "SYNATTN_MAX_LAYERS"),
        ("model.heads", m.heads, s.max_heads, "SYNATTN_MAX_HEADS"),
        ("model.enc_heads", m.enc_heads or 0, s.max_heads, "SYNATTN_MAX_HEADS"),
        ("data.max_tokens", cfg.data.max_tokens, s.max_tokens_per_batch,
         "SYNATTN_MAX_TOKENS_PER_BATCH"),
        ("train.max_updates", cfg.train.max_updates, s.max_updates, "SYNATTN_MAX_UPDATES"),
    ]  # fmt: skip
    for key, value, cap, env in caps:
        if value > cap:
            raise BadJobSpec(f"{key} {value} is over this service's limit {cap} ({env})")
