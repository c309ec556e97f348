"""What a worker does with a claimed job: train (then translate and score) or parse.

Runners are plain functions of the job's spec, its run directory and two callbacks (progress,
cancellation), so they run the same under Celery, in tests and in a debugger. A training run
resumes from its newest checkpoint, which is what makes a redelivered task continue, not restart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synattn_jobs.errors import Cancelled
from synattn_jobs.settings import get_settings
from synattn_jobs.specs import ParseJobSpec, StoredTrainSpec, TrainJobSpec

if TYPE_CHECKING:  # the trainer (torch) is imported when a job runs, not with this module
    from synattn_trainer.config import TrainConfig
    from synattn_trainer.train import TrainResult

__all__ = [
    "Cancelled",
    "run_job",
    "run_parse",
    "run_train",
]  # Cancelled: where it was first defined

Progress = Callable[[dict[str, Any]], None]
ShouldStop = Callable[[], bool]


def median_tokens_per_s(metrics: Path) -> float | None:
    """Median of the logged training speeds (first record excluded: it includes start-up)."""
    speeds: list[float] = []
    if metrics.is_file():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("event") == "update" and rec.get("update", 0) > 1:
                speeds.append(float(rec["tokens_per_s"]))
    if not speeds:
        return None
    speeds.sort()
    return speeds[len(speeds) // 2]


class Pace:
    """The training time left, at the rate of the updates this claim of the job has logged
    (timed from its first logged update, so start-up and a resumed run's earlier updates do
    not skew it): the job's ``eta_s`` progress field, which ``synattn watch`` and the
    dashboard show. ``max_updates`` is the budget; an earlier stop (patience, epochs) comes
    sooner."""

    def __init__(self, max_updates: int) -> None:
        self.max_updates = max_updates
        self.first: tuple[int, float] | None = None

    def eta_s(self, update: int, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        if self.first is None:
            self.first = (update, now)
            return None
        done, elapsed = update - self.first[0], now - self.first[1]
        if done <= 0 or elapsed <= 0:
            return None
        return round(max(self.max_updates - update, 0) * elapsed / done, 1)


def run_train(
    spec: TrainJobSpec, out_dir: Path, progress: Progress, should_stop: ShouldStop
) -> dict[str, Any]:
    """Train (or resume) the run in ``out_dir``, then translate and score the eval split. A job
    of one process trains here; one of N > 1 under ``torchrun`` (``synattn_jobs.ddp``), with the
    same result."""
    from synattn_trainer.config import TrainConfig, load_config
    from synattn_trainer.evaluate import corpus_bleu, corpus_chrf
    from synattn_trainer.inference import translate_split

    if isinstance(spec, StoredTrainSpec):
        from synattn_trainer.plugins import check_recorded

        check_recorded(spec.plugins, "the job")  # before training: never another method
        cfg = TrainConfig.model_validate(spec.resolved)  # what was checked at submit
    else:
        cfg = load_config(spec.config, spec.overrides)
    from synattn_trainer.preflight import check_config_files

    check_config_files(cfg)  # checked at submit; a file moved or damaged since is said here
    processes = spec.resources.processes
    phase: dict[str, Any] = {"phase": "train", "max_updates": cfg.train.max_updates}
    pace = Pace(cfg.train.max_updates)

    def on_update(rec: dict[str, Any]) -> None:
        progress(
            {"update": rec["update"], "epoch": rec["epoch"], "loss": round(rec["loss"], 4),
             "tokens_per_s": round(rec["tokens_per_s"], 1), "eta_s": pace.eta_s(rec["update"])}
        )  # fmt: skip

    if processes > 1:
        from synattn_jobs.ddp import train_ddp

        progress({**phase, "processes": processes})
        result, parameters = train_ddp(
            cfg, out_dir, processes, on_update, should_stop, get_settings(),
            spec.resources.nodes,
        )  # fmt: skip
    else:
        result, parameters = _train_here(cfg, out_dir, lambda: progress(phase), on_update,
                                         should_stop)  # fmt: skip
    if result.stopped == "cancelled":
        raise Cancelled(f"cancelled at update {result.update}")
    checkpoint = result.averaged or result.checkpoint
    out: dict[str, Any] = {
        "update": result.update,
        "epoch": result.epoch,
        "stopped": result.stopped,
        # the lowest epoch-end validation loss (what patience compares); best.pt holds the
        # checkpoint with the lowest validation loss among checkpoints, which may be another
        "best_valid_loss": result.best_valid_loss,
        "best_checkpoint_valid_loss": result.best_checkpoint_valid_loss,  # None: no best.pt
        "best_checkpoint_update": result.best_checkpoint_update,
        "checkpoint": str(checkpoint) if checkpoint else None,
        "selection": result.selection,
        "averaged_updates": result.averaged_updates,
        "checkpoint_update": result.checkpoint_updates.get(result.selection),
        "max_updates": cfg.train.max_updates,
        "parameters": parameters,
        "tokens_per_s": median_tokens_per_s(out_dir / "metrics.jsonl"),
        "metrics": str(out_dir / "metrics.jsonl"),
    }
    if checkpoint is not None:  # the HeadMask paper's Tables 5-6, for every system
        from synattn_trainer.analysis import importance_statistics

        progress({"phase": "head importance (valid)"})
        out.update(importance_statistics(Path(checkpoint), Path(cfg.data.valid)))
    ev = spec.evaluate
    if ev is not None and checkpoint is not None:
        split = getattr(cfg.data, ev.split)
        if split is None:
            raise ValueError(f"evaluate.split {ev.split!r}: the config has no data.{ev.split}")
        refs = [r["tgt"] for r in _rows(Path(split))]
        if ev.limit:
            refs = refs[: ev.limit]
        _write_lines(out_dir / f"ref.{ev.split}.txt", refs)
        by_selection: dict[str, Any] = {}
        for kind, model in _finals(result, checkpoint).items():
            progress({"phase": f"translate {ev.split} ({kind})"})
            hyps = translate_split(model, Path(split), beam=ev.beam)[: len(refs)]
            # the primary selection keeps the plain name; the others carry theirs
            primary = kind == result.selection
            hyp_path = out_dir / (
                f"hyp.{ev.split}.txt" if primary else f"hyp.{ev.split}.{kind}.txt"
            )
            _write_lines(hyp_path, hyps)
            bleu = corpus_bleu(hyps, refs)
            by_selection[kind] = {
                "bleu": round(bleu.score, 2), "chrf": round(corpus_chrf(hyps, refs).score, 2),
                "hyp": str(hyp_path), "checkpoint": str(model),
                "updates": result.final_updates.get(kind, []),
                "checkpoint_update": result.checkpoint_updates.get(kind),
            }  # fmt: skip
            if primary:
                out.update(
                    split=ev.split, bleu=by_selection[kind]["bleu"],
                    bleu_signature=str(bleu.signature), chrf=by_selection[kind]["chrf"],
                    hyp=str(hyp_path), ref=str(out_dir / f"ref.{ev.split}.txt"),
                )  # fmt: skip
        out["by_selection"] = by_selection
        progress({"bleu": out["bleu"]})
        if ev.analyze:
            from synattn_trainer.analysis import analyze

            progress({"phase": "analyze"})
            analyze(Path(checkpoint), Path(split), out_dir / "analysis")
            out["analysis"] = str(out_dir / "analysis")
    return out


def run_job(
    kind: str, spec: dict[str, Any], out_dir: Path, progress: Progress, should_stop: ShouldStop
) -> dict[str, Any]:
    """A stored job run by its kind's runner: what a Celery worker and a Slurm batch step both
    do with a claimed job (a training spec queued before specs were resolved is read as
    submitted)."""
    if kind == "train":
        train: TrainJobSpec = (
            StoredTrainSpec.model_validate(spec)
            if "resolved" in spec
            else TrainJobSpec.model_validate(spec)
        )
        return run_train(train, out_dir, progress, should_stop)
    return run_parse(ParseJobSpec.model_validate(spec), out_dir, progress, should_stop)


def _train_here(
    cfg: TrainConfig,
    out_dir: Path,
    started: Callable[[], None],
    on_update: Callable[[dict[str, Any]], None],
    should_stop: ShouldStop,
) -> tuple[TrainResult, int]:
    """A one-process job: the trainer in this process; (its ``TrainResult``, the parameters).
    ``started`` is called once the trainer is built (the job's ``train`` phase)."""
    from synattn_trainer.model import count_parameters
    from synattn_trainer.train import Trainer

    trainer = Trainer(cfg, out_dir, progress=False, loader_workers=get_settings().loader_workers)
    started()
    result = trainer.train(should_stop=should_stop, on_update=on_update)
    return result, count_parameters(trainer.model)


def _finals(result: Any, checkpoint: Path) -> dict[str, Path]:
    """Every final model the run made (``train.checkpoint_select`` and ``extra_selections``),
    the primary one first; the evaluated checkpoint alone for a result without them."""
    finals: dict[str, Path] = result.finals
    primary = result.selection
    if primary not in finals:
        return {primary: Path(checkpoint)}
    return {primary: finals[primary], **{k: v for k, v in finals.items() if k != primary}}


def _rows(data: Path) -> list[dict[str, Any]]:
    from synattn_shared.shards import ShardDataset

    return list(ShardDataset(data).iter_rows(columns=["tgt"]))


def _write_lines(path: Path, lines: list[str]) -> None:
    from synattn_shared.atomic import atomic_write_text

    atomic_write_text(path, "".join(line + "\n" for line in lines))


def run_parse(
    spec: ParseJobSpec, out_dir: Path, progress: Progress, should_stop: ShouldStop
) -> dict[str, Any]:
    """Parse a corpus into shards; finished shards of an earlier attempt are kept (resume)."""
    from synattn_parser.batch import parse_corpus

    done = {"shards": 0, "rows": 0, "skipped": 0}

    def on_shard(info: Any, skipped: bool) -> None:
        done["shards"] += 1
        done["rows"] += info.rows
        done["skipped"] += int(skipped)
        progress(dict(done))
        if should_stop():
            raise Cancelled(f"cancelled after {done['shards']} shards")

    manifest = parse_corpus(
        Path(spec.src), Path(spec.out), tgt=Path(spec.tgt) if spec.tgt else None,
        backend=spec.backend, workers=spec.workers, rows_per_shard=spec.rows_per_shard,
        pretokenized=spec.pretokenized, limit=spec.limit, on_shard=on_shard,
        encoding=spec.encoding,
    )  # fmt: skip
    return {"out": spec.out, "rows": manifest.rows, "shards": len(manifest.shards), **done}
