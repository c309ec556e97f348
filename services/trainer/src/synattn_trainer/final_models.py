"""The final models of a run: which checkpoints a selection takes (the last one, the best on
validation, the average of the last few inside the run's final window) and the model-only
files written for them (``averaged.pt``, ``best.pt``). A part of ``Trainer`` (its base class),
apart from the training loop."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synattn_trainer import checkpoint as ck
from synattn_trainer.config import TrainConfig
from synattn_trainer.plugins import PLUGINS_KEY
from synattn_trainer.rawtext import PARSE_KEY

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from synattn_trainer.model import Transformer

FINAL_NAMES = {"average": "averaged.pt", "best_valid": "best.pt"}  # model-only final files


class FinalModels:
    """Checkpoint selection and averaging for ``Trainer``, which sets these attributes."""

    cfg: TrainConfig
    out: Path
    ckpt_dir: Path
    update: int
    rank: int
    model: Transformer
    tok: Tokenizer
    best_select: tuple[float, int]
    parse_source: Any
    plugins: dict[str, dict[str, Any]]

    def best_checkpoint(self) -> tuple[float | None, int | None]:
        """The lowest validation loss among the scheduled checkpoints and its update: the
        checkpoint ``best.pt`` holds. (None, None) when the run has no best_valid selection
        or has validated no checkpoint yet (and on ranks other than 0, which do not save)."""
        loss, update = self.best_select
        if "best_valid" not in self.cfg.train.selections() or math.isinf(loss):
            return None, None
        return loss, update

    def _final_model(
        self, kind: str, last: Path | None
    ) -> tuple[Path | None, list[int], int | None]:
        """One final-model selection's file (averaged.pt, the last checkpoint, best.pt), the
        updates averaged into it ([] for a single checkpoint) and, for a single checkpoint, the
        update it was saved at (the best validation loss's, or the newest checkpoint's)."""
        if kind == "average":
            picked = self.averaged_updates()
            single = None if picked else (ck.update_of(last) if last else self.update)
            return self.average(picked), picked, single
        if kind == "best_valid":
            best = self.out / FINAL_NAMES["best_valid"]
            return (best if best.is_file() else None), [], self.best_select[1]
        return last, [], (ck.update_of(last) if last else self.update)

    def averaged_updates(self) -> list[int]:
        """The updates of the checkpoints ``average`` takes: the last ``average_last`` saved
        inside the run's final ``average_window`` ([] when that is one checkpoint)."""
        from synattn_trainer.selection import last_in_window

        t = self.cfg.train
        saved = [ck.update_of(p) for p in ck.checkpoints(self.ckpt_dir)]
        picked = last_in_window(saved, t.average_last, self.update, t.average_window)
        return picked if len(picked) > 1 else []

    def average(self, updates: list[int] | None = None) -> Path | None:
        """Average the checkpoints at ``updates`` (default ``averaged_updates``; none: keep the
        last one alone) into ``averaged.pt``: model weights, config, the updates that went in."""
        if self.rank != 0:
            return None
        latest = ck.latest(self.ckpt_dir)
        if latest is None:
            return None
        updates = self.averaged_updates() if updates is None else updates
        return self._write_final(updates or [ck.update_of(latest)], "average")

    def _write_final(self, updates: list[int], kind: str) -> Path:
        """``FINAL_NAMES[kind]``: a model-only file of the checkpoints at ``updates`` (averaged
        when several), or of the current weights when that is this update alone."""
        current = self.model.state_dict()
        if updates == [self.update]:
            weights = {k: v.detach().cpu().clone() for k, v in current.items()}
        else:
            weights = ck.average([self.ckpt_dir / f"ckpt-{u:08d}.pt" for u in updates])
        state = {
            "model": ck.tie_like(weights, current),  # the tied embedding saved once
            "config": self.cfg.model_dump(mode="json"),
            "vocab_size": self.tok.get_vocab_size(),
            "selection": kind,
            "updates": updates,
            PARSE_KEY: self.parse_source,
            PLUGINS_KEY: self.plugins,
        }
        target = self.out / FINAL_NAMES[kind]
        ck.atomic_save(state, target)
        return target
