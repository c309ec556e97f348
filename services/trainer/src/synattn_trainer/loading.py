"""A trained model back from its file: what translation, analysis, the explorer and the API
load, apart from the trainer that wrote it."""

from __future__ import annotations

from pathlib import Path

import torch

from synattn_trainer import checkpoint as ck
from synattn_trainer.config import TrainConfig
from synattn_trainer.model import Transformer, use_cudnn_attention
from synattn_trainer.plugins import PLUGINS_KEY, check_recorded


def load_model(
    path: str | Path, device: torch.device | None = None
) -> tuple[Transformer, TrainConfig]:
    """A model from a checkpoint or an averaged file, in eval mode; a model made with a
    plugin variant needs that plugin, at the version recorded in the file.

    Raises:
        BadFile: ``path`` is not a synattn model file (``checkpoint.read_checkpoint``).
    """
    state = ck.read_checkpoint(path, device or "cpu")
    check_recorded(state.get(PLUGINS_KEY), f"checkpoint {path}")
    cfg = TrainConfig.model_validate(state["config"])
    model = Transformer(cfg, state["vocab_size"])
    model.load_state_dict(state["model"])
    model.eval()
    if device is not None:
        model.to(device)
        if device.type == "cuda":
            use_cudnn_attention(cfg.train.cudnn_attention)
    return model, cfg
