"""Atomic checkpoints with everything an exact resume needs, and checkpoint averaging."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from synattn_shared.atomic import atomic_path
from synattn_shared.errors import BadFile, file_error, first_sentence, one_line, path_problem

CKPT_GLOB = "ckpt-*.pt"
RESUME_NAME = "resume.pt"  # an unscheduled save (end of epoch between K-update saves, a stop)
CHECKPOINT_FIX = "name a model file a synattn run saved (RUN/averaged.pt, best.pt or ckpt-*.pt)"
MODEL_KEYS = ("model", "config", "vocab_size")  # what every saved model file holds


def checkpoint_file_error(path: str | Path, key: str | None = None) -> BadFile | None:
    """Why ``path`` cannot be a checkpoint before it is read (it does not exist, is a folder,
    is empty or cannot be read), or None."""
    problem = path_problem(path)
    if problem == "does not exist":
        return file_error(path, "no such checkpoint (the file does not exist)", CHECKPOINT_FIX,
                          key=key)  # fmt: skip
    if problem is None and Path(path).stat().st_size == 0:
        problem = "is empty, not a checkpoint"
    return None if problem is None else BadFile(path, problem, CHECKPOINT_FIX, key=key)


def read_checkpoint(
    path: str | Path,
    map_location: str | torch.device | None = "cpu",
    *,
    mmap: bool = False,
    key: str | None = None,
) -> dict[str, Any]:
    """A checkpoint's contents (``torch.load``), or ``BadFile`` naming the file: it does not
    exist, is a folder or empty, cannot be read, is not a file torch saved (a truncated copy,
    another format), or is not a synattn model file. ``mmap``: map its tensors rather than
    read them (a file of torch's legacy format is read instead). ``key``: the setting or
    option that named the file, for the message."""
    bad = checkpoint_file_error(path, key)
    if bad is not None:
        raise bad
    with open(path, "rb") as fh:
        head = fh.read(4)
    if not head.startswith((b"PK\x03\x04", b"\x80")):  # a zip archive, or a legacy pickle
        raise BadFile(
            path, f"not a synattn checkpoint (not a file torch saved: it starts {head!r})",
            CHECKPOINT_FIX, key=key,
        )  # fmt: skip
    try:
        try:
            state = torch.load(path, map_location=map_location, weights_only=False, mmap=mmap)
        except RuntimeError:
            if not mmap:
                raise
            # a file of the legacy (non-zip) format cannot be mapped
            state = torch.load(path, map_location=map_location, weights_only=False)
    except MemoryError:
        raise
    except Exception as exc:  # torch and pickle raise many kinds for a file that is not one
        why = first_sentence(one_line(exc))[:200] or type(exc).__name__
        raise BadFile(
            path, f"not a synattn checkpoint (torch cannot load it: {why})", CHECKPOINT_FIX,
            key=key,
        ) from None  # fmt: skip
    if not isinstance(state, dict) or any(k not in state for k in MODEL_KEYS):
        raise BadFile(
            path, "not a synattn checkpoint (a file torch saved, without a synattn model, "
            "config and vocabulary size)", CHECKPOINT_FIX, key=key,
        )  # fmt: skip
    return state


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


RESUME_FIX = (
    "a damaged checkpoint in the run folder (a disk filled, a copy cut short): delete it to "
    "resume from the one before, or train into another folder"
)


def read_resume_state(
    path: Path, map_location: str | torch.device | None = "cpu"
) -> dict[str, Any]:
    """A run folder's checkpoint read to resume from, or ``BadFile`` naming it and saying
    what to do: a resumed run never ends in a traceback from deep inside torch."""
    try:
        state = read_checkpoint(path, map_location)
    except BadFile as exc:
        raise BadFile(path, exc.problem, RESUME_FIX) from None
    if not isinstance(state.get("update"), int) or "optim" not in state:
        raise BadFile(path, "not a resume point (a model file without the optimizer and the "
                      "update it was saved at)", RESUME_FIX)  # fmt: skip
    return state


def resume_point(directory: Path) -> Path | None:
    """Where a run continues: the newer of the last scheduled checkpoint and ``resume.pt``
    (on a tie ``resume.pt``, written later in the same update, e.g. after the epoch's end).

    Raises:
        BadFile: ``resume.pt`` is damaged (``read_resume_state``).
    """
    last = latest(directory)
    extra = directory / RESUME_NAME
    if not extra.is_file():
        return last
    if last is None:
        return extra
    saved = read_resume_state(extra)["update"]
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
