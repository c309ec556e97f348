"""Atomic checkpoints with everything an exact resume needs, and checkpoint averaging."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from synattn_shared.atomic import atomic_path

CKPT_GLOB = "ckpt-*.pt"
RESUME_NAME = "resume.pt"  # an unscheduled save (end of epoch between K-update saves, a stop)


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch (CPU and CUDA) generator states."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` through the atomic-write helper: a killed process leaves no torn file."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def checkpoints(directory: Path) -> list[Path]:
    """Checkpoints in update order."""
    return sorted(directory.glob(CKPT_GLOB))


def latest(directory: Path) -> Path | None:
    """The newest scheduled checkpoint."""
    ckpts = checkpoints(directory)
    return ckpts[-1] if ckpts else None


def update_of(path: Path) -> int:
    """The update a scheduled checkpoint was saved at, from its name ``ckpt-<update>.pt``."""
    return int(path.stem.split("-", 1)[1])


def resume_point(directory: Path) -> Path | None:
    """Where a run continues: the newer of the last scheduled checkpoint and ``resume.pt``
    (on a tie ``resume.pt``, written later in the same update, e.g. after the epoch's end)."""
    last = latest(directory)
    extra = directory / RESUME_NAME
    if not extra.is_file():
        return last
    if last is None:
        return extra
    saved = torch.load(extra, map_location="cpu", weights_only=False)["update"]
    return extra if saved >= update_of(last) else last


def prune(directory: Path, keep: int) -> None:
    for old in checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)


def average(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the models' parameters (integer buffers from the last one)."""
    if not paths:
        raise ValueError("no checkpoints to average")
    avg: dict[str, torch.Tensor] = {}
    for p in paths:
        state = torch.load(p, map_location="cpu", weights_only=False)["model"]
        for k, v in state.items():
            if v.is_floating_point():
                avg[k] = avg.get(k, torch.zeros_like(v, dtype=torch.float64)) + v.double()
            else:
                avg[k] = v
    return {k: (v / len(paths)).float() if v.is_floating_point() else v for k, v in avg.items()}


def tie_like(weights: dict[str, torch.Tensor], template: Mapping[str, torch.Tensor]
             ) -> dict[str, torch.Tensor]:  # fmt: skip
    """``weights`` with every entry that is one tensor with an earlier entry in ``template``
    (tied source, target and output embeddings) made that earlier entry again, so that
    ``torch.save`` writes the matrix once: a copy or an average of a state dict gives each key
    its own tensor, and the model-only files carried the 8000 x 128 embedding twice (4 MB of
    a 14 MB file). Values are unchanged; an entry whose values differ is left alone."""
    out = dict(weights)
    first: dict[tuple[Any, ...], str] = {}
    for k, v in template.items():
        if k not in out or v.numel() == 0:
            continue
        view = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape),
                tuple(v.stride()), v.dtype)  # fmt: skip
        earlier = first.setdefault(view, k)
        if earlier != k and torch.equal(out[earlier], out[k]):
            out[k] = out[earlier]
    return out
