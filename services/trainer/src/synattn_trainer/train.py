"""The training loop: Adam + warm-up/inverse-sqrt, label smoothing, accumulation, clipping,
bf16 autocast on GPU, atomic checkpoints with exact resume, averaging, validation, metrics.

Data-parallel training: launch with ``torchrun --nproc_per_node N -m synattn_trainer.cli_train``
(gloo on CPU, NCCL on GPU). Each rank takes every N-th batch of the same epoch order; the loss is
normalised by the global token count, so the update equals the single-process one.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn

from synattn_shared.atomic import atomic_write_text
from synattn_trainer import checkpoint as ck
from synattn_trainer.config import TrainConfig
from synattn_trainer.data import (
    Batch,
    Corpus,
    EpochIterator,
    MappedCorpus,
    load_corpus,
    make_batch,
)
from synattn_trainer.dropout import use_fast as use_fast_dropout
from synattn_trainer.final_models import FinalModels
from synattn_trainer.headmask import MaskTally
from synattn_trainer.headmask_training import HeadMaskTraining
from synattn_trainer.losses import corpus_losses, token_loss
from synattn_trainer.model import Transformer, count_parameters, use_cudnn_attention
from synattn_trainer.plugins import PLUGINS_KEY, check_recorded, record
from synattn_trainer.prefetch import BatchPrefetcher, read_ahead
from synattn_trainer.rawtext import PARSE_KEY, training_parse
from synattn_trainer.tokenizer import load_tokenizer


def lr_factor(step: int, warmup: int) -> float:
    """Linear warm-up to 1 over ``warmup`` updates, then ``sqrt(warmup / step)``."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def world() -> tuple[int, int]:
    """(rank, world size) of this process."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_distributed() -> None:
    """Join the process group when launched by ``torchrun`` (gloo on CPU, NCCL on GPU)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


def global_sum(x: float, device: torch.device) -> float:
    """Sum of a number over all ranks (itself when not distributed)."""
    _, n = world()
    if n == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def update_loss(
    model: nn.Module, batch: Batch, smoothing: float, global_tokens: float
) -> tuple[Tensor, Tensor, Tensor]:
    """This rank's share of the update loss: summed loss / global target tokens x world size,
    with the summed label-smoothed loss and NLL (detached, on the device: read after the update,
    so that the host never waits for the forward before it queues the backward).

    DDP averages gradients over ranks, so multiplying by the world size makes the update the
    gradient of (total loss / total tokens), exactly what one process would compute.
    """
    _, n = world()
    # logits only where a target token is scored
    logits: Tensor = model(batch.src, batch.tgt_in, batch.syntax, batch.scored)
    loss, nll = token_loss(logits, batch.gold, smoothing)
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    aux = cast(Transformer, inner).aux_loss()
    total = loss
    if aux is not None:
        total = total + aux  # summed over tokens, like ``loss``
    return total * n / global_tokens, loss.detach(), nll.detach()


class Stop(StrEnum):
    """Why a run stopped (a ``str``: logged and compared as its value)."""

    MAX_UPDATES = "max_updates"
    MAX_EPOCHS = "max_epochs"
    PATIENCE = "patience"
    INTERRUPTED = "interrupted"  # stop_after_updates (tests of resume)
    CANCELLED = "cancelled"  # should_stop: a job's cancel flag, or a worker shutting down


@dataclass
class StepStats:
    """One update: summed label-smoothed loss and NLL over its target tokens (this rank)."""

    loss: float
    nll: float
    tokens: int


@dataclass
class _Clock:
    """Target tokens since the loop started, for the logged tokens/s."""

    world: int
    tokens: int = 0
    t0: float = field(default_factory=time.perf_counter)

    def rate(self) -> float:
        return self.tokens * self.world / (time.perf_counter() - self.t0)


@dataclass
class TrainResult:
    """Where a run ended.

    Two best validation losses, since the run validates at two kinds of points:
    ``best_valid_loss`` is the lowest at an epoch's end (what patience compares), and
    ``best_checkpoint_valid_loss`` the lowest at a scheduled checkpoint, the one ``best.pt``
    holds (``checkpoint_select`` or ``extra_selections`` best_valid), saved at
    ``best_checkpoint_update``. The two differ when checkpoints are saved every K updates; the
    checkpoint's pair is None without a best_valid selection."""

    update: int
    epoch: int
    best_valid_loss: float  # the lowest epoch-end validation loss, not best.pt's
    checkpoint: Path | None
    averaged: Path | None  # the final model file when it is not ``checkpoint`` itself
    stopped: Stop
    selection: str = "last"  # how the final model was chosen (train.checkpoint_select)
    finals: dict[str, Path] = field(default_factory=dict)  # every selection made: its model
    final_updates: dict[str, list[int]] = field(default_factory=dict)  # and its updates
    # the update of each selection's single checkpoint (last, best_valid; not an average)
    checkpoint_updates: dict[str, int] = field(default_factory=dict)
    best_checkpoint_valid_loss: float | None = None  # best.pt's validation loss
    best_checkpoint_update: int | None = None  # and the update it was saved at

    @property
    def averaged_updates(self) -> list[int]:
        """The updates averaged into the chosen final model ([] for a single checkpoint)."""
        return self.final_updates.get(self.selection, [])


def compile_forward(net: nn.Module, backend: str = "inductor") -> nn.Module:
    """``torch.compile`` for a forward whose batch shapes vary from update to update: sizes
    are symbolic from the first call, and no two dimensions share a symbol because they were
    equal once. With duck sizing (torch's default) a first batch whose source and target were
    the same length traced a graph only for such batches, and the next one traced another.
    The setting is process-wide; a trainer process compiles nothing else. ``backend``:
    ``"eager"`` traces the same way without generating code (the tests)."""
    import torch.fx.experimental._config as fx_config

    from synattn_trainer.variants.common import keep_outside_graphs

    keep_outside_graphs()
    fx_config.use_duck_shape = False
    return cast(nn.Module, torch.compile(net, backend=backend, dynamic=True))


class Trainer(FinalModels, HeadMaskTraining):
    """One training run in ``out_dir`` (checkpoints/, metrics.jsonl, tb/, config.json)."""

    def __init__(
        self,
        cfg: TrainConfig,
        out_dir: str | Path,
        device: torch.device | None = None,
        progress: bool = True,
        limit: int | None = None,
        loader_workers: int = 0,
        mapped: bool = True,
    ) -> None:
        """``loader_workers``: processes that build training batches ahead of the update that
        needs them (``prefetch``; 0 builds them inline). ``mapped``: read the splits from their
        memory-mapped caches (``encoded``); False holds them in memory, as before the cache
        (the reference it is tested against). The batches are the same either way: both are
        settings of the machine, not of the run, and stay out of ``cfg``."""
        if loader_workers < 0:
            raise ValueError(f"loader_workers must be 0 or more, not {loader_workers}")
        self.cfg = cfg
        self.loader_workers = loader_workers
        self._prefetcher: BatchPrefetcher | None = None
        self.out = Path(out_dir)
        self.ckpt_dir = self.out / "checkpoints"
        init_distributed()
        self.rank, self.world = world()
        if device is None:
            device = (
                torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
                if torch.cuda.is_available()
                else torch.device("cpu")
            )
        self.device = device
        if device.type == "cuda":
            use_cudnn_attention(cfg.train.cudnn_attention)
        self.progress = progress and self.rank == 0
        ck.seed_everything(cfg.train.seed)
        use_fast_dropout(cfg.train.fast_dropout)
        self.tok = load_tokenizer(cfg.data.tokenizer)
        eos = cfg.data.source_eos
        self.train_data = load_corpus(
            cfg.data.train, self.tok, cfg.data.max_len, limit, source_eos=eos, mapped=mapped
        )
        self.valid_data = load_corpus(cfg.data.valid, self.tok, source_eos=eos, mapped=mapped)
        self.parse_source = training_parse(cfg.data.train)  # what raw text must be parsed with
        self.plugins = record(cfg)  # the plugins its variants come from: name, version, source
        self.model = Transformer(cfg, self.tok.get_vocab_size()).to(device)
        self.model.state.max_updates = cfg.train.max_updates  # pre-warm-up fractions
        self.requests = self.model.feature_requests()
        self.net: nn.Module = self.model
        if self.world > 1:
            self.net = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[device.index] if device.type == "cuda" else None
            )
        if cfg.train.compile:  # the training forward only (decoding stays eager)
            self.net = compile_forward(self.net)
        o = cfg.optim
        self.optim = torch.optim.Adam(
            self.model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps,
            weight_decay=o.weight_decay, fused=o.implementation == "fused",
            foreach=o.implementation == "foreach",
        )  # fmt: skip
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.optim, lambda step: lr_factor(step + 1, o.warmup)
        )
        use_bf16 = cfg.train.precision == "bf16" or (
            cfg.train.precision == "auto" and device.type == "cuda"
        )
        self.autocast_dtype = torch.bfloat16 if use_bf16 else None
        self.update = 0
        self.epoch = 0
        self._module_heads = self.model.heads_per_module()  # Impt-N's per-module ranking
        self._mask_tally = (  # HeadMask runs: which heads each log interval masked
            None
            if cfg.headmask.mode == "none"
            else MaskTally([self.model.head_name(g) for g in range(self.model.num_heads)])
        )
        self._lines = False  # plain progress lines (``progress`` and stderr not a terminal)
        self._first_update, self._t_start = 0, time.perf_counter()
        self.position = 0  # batches of the current epoch already consumed
        self.best_valid = math.inf
        self.bad_epochs = 0
        self.best_select = (math.inf, 0)  # (valid loss, update) of checkpoint_select best_valid
        self._select_checked = -1  # the update whose checkpoint best_valid last compared
        self._tb: Any = None
        self._check_epoch_averaging()

    def _check_epoch_averaging(self) -> None:
        """Refuse, before any training, an average of per-epoch checkpoints that would reach
        outside the run's final window (docs/papers/index.md, "Checkpoint averaging only at the end
        of training"; K-update saving is checked by the config)."""
        t = self.cfg.train
        if "average" not in t.selections() or t.checkpoint_every_updates or t.average_last <= 1:
            return
        from synattn_trainer.selection import averaging_error

        batches = len(
            EpochIterator(self.train_data, self.cfg.data.max_tokens, t.seed, 0, 0, self.rank,
                          self.world)
        )  # fmt: skip
        per_epoch = max(1, batches // self.cfg.optim.accumulate)
        end = min(t.max_updates, t.max_epochs * per_epoch)
        why = averaging_error(end, per_epoch, t.average_last, t.average_window,
                              unit="updates (once per epoch)")  # fmt: skip
        if why:
            raise ValueError(why)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optim": self.optim.state_dict(),
            "sched": self.sched.state_dict(),
            "update": self.update,
            "epoch": self.epoch,
            "position": self.position,
            "best_valid": self.best_valid,
            "bad_epochs": self.bad_epochs,
            "best_select": list(self.best_select),
            "rng": ck.rng_state(),
            "config": self.cfg.model_dump(mode="json"),
            "vocab_size": self.tok.get_vocab_size(),
            PARSE_KEY: self.parse_source,
            PLUGINS_KEY: self.plugins,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optim.load_state_dict(state["optim"])
        self.sched.load_state_dict(state["sched"])
        self.update = state["update"]
        self.epoch = state["epoch"]
        self.position = state["position"]
        self.best_valid = state["best_valid"]
        self.bad_epochs = state["bad_epochs"]
        loss, update = state.get("best_select", (math.inf, 0))
        self.best_select = (float(loss), int(update))
        ck.set_rng_state(state["rng"])

    def save(self, scheduled: bool = True, valid_loss: float | None = None) -> Path | None:
        """Write the state atomically (rank 0): a scheduled checkpoint ``ckpt-<update>.pt``
        (the newest ones are kept; the final model is chosen among them), or ``resume.pt``,
        a point to resume from that never enters the final model (an epoch's end between
        K-update saves, an interruption). ``valid_loss``: this update's, when the caller has
        it (``best_valid`` compares it, and validates otherwise)."""
        if self.rank != 0:
            return None
        if not scheduled:
            path = self.ckpt_dir / ck.RESUME_NAME
            ck.atomic_save(self.state_dict(), path)
            return path
        if "best_valid" in self.cfg.train.selections() and self._select_checked != self.update:
            self._select_checked = self.update  # the run's last update is saved twice
            loss = self.validate()["valid_loss"] if valid_loss is None else valid_loss
            best = loss < self.best_select[0]
            if best:
                self.best_select = (loss, self.update)
                self._write_final([self.update], "best_valid")
            # the log alone then shows which checkpoint best.pt is, and why
            self.log({"event": "checkpoint", "update": self.update, "valid_loss": loss,
                      "best_valid": best})  # fmt: skip
        path = self.ckpt_dir / f"ckpt-{self.update:08d}.pt"
        ck.atomic_save(self.state_dict(), path)
        ck.prune(self.ckpt_dir, max(self.cfg.train.keep_checkpoints, self.cfg.train.average_last))
        return path

    def resume(self) -> bool:
        """Continue from the newest checkpoint or resume point when there is one."""
        last = ck.resume_point(self.ckpt_dir)
        if last is None:
            return False
        state = ck.read_resume_state(last, self.device)  # damaged: one line naming the file
        check_recorded(state.get(PLUGINS_KEY), f"checkpoint {last}")  # never another method
        self.load_state_dict(state)
        return True

    # ---------------------------------------------------------------- logging
    def log(self, record: dict[str, Any]) -> None:
        if self.rank != 0:
            return
        record = {"time": round(time.time(), 3), **record}
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.out / "tb"))
            except ImportError:  # pragma: no cover - tensorboard is a dependency
                self._tb = False
        if self._tb:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k not in ("time", "update", "epoch"):
                    self._tb.add_scalar(f"{record.get('event', 'x')}/{k}", v, self.update)

    # ---------------------------------------------------------------- loop
    def _forward_backward(self, batch: Batch, global_tokens: float) -> tuple[Tensor, Tensor]:
        ctx = (
            torch.autocast(self.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else torch.autocast(self.device.type, enabled=False)
        )
        with ctx:
            loss, raw, nll = update_loss(
                self.net, batch, self.cfg.optim.label_smoothing, global_tokens
            )
        loss.backward()  # type: ignore[no-untyped-call]
        return raw, nll

    def train(
        self,
        stop_after_updates: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_update: Callable[[dict[str, Any]], None] | None = None,
    ) -> TrainResult:
        """Train until a limit; ``stop_after_updates`` ends early (tests of resume), and
        ``should_stop`` is checked between updates (job cancellation)."""
        cfg = self.cfg
        self._start(self.resume())
        clock = _Clock(self.world)
        bar = self._progress_bar()
        # a finished run, resumed: no more steps
        stop: Stop | None = Stop.MAX_UPDATES if self.update >= cfg.train.max_updates else None
        if stop is None and self.loader_workers:
            self._prefetcher = BatchPrefetcher(self.train_data, self.requests, self.loader_workers)
        try:
            while stop is None and self.epoch < cfg.train.max_epochs:
                stop = self._run_epoch(clock, bar, stop_after_updates, should_stop, on_update)
                if stop in (Stop.INTERRUPTED, Stop.CANCELLED):
                    self.save(scheduled=False)
                    break
                if stop is None:  # the epoch ran to its end
                    self.epoch += 1
                    self.position = 0
                self._end_of_epoch(final=stop is not None)
                if stop is None and cfg.train.patience and self.bad_epochs >= cfg.train.patience:
                    stop = Stop.PATIENCE
        finally:
            if self._prefetcher is not None:
                self._prefetcher.close()
                self._prefetcher = None
        stop = stop or Stop.MAX_EPOCHS
        if bar is not None:
            bar.close()
        return self._finish(stop)

    def _start(self, resumed: bool) -> None:
        """Write the config and log the start of a run (or of its resumption)."""
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.out / "config.json", self.cfg.model_dump_json(indent=2))
        self.log(
            {
                "event": "start",
                "resumed": resumed,
                "update": self.update,
                "epoch": self.epoch,
                "parameters": count_parameters(self.model),
                "train_pairs": len(self.train_data),
                "device": str(self.device),
                "world": self.world,
            }
        )

    def _progress_bar(self) -> Any:
        """A bar on a terminal; elsewhere None, and ``_say`` prints a line per log interval."""
        from synattn_shared.progress import plain, stderr_console

        self._lines = self.progress and plain(stderr_console())
        self._first_update, self._t_start = self.update, time.perf_counter()
        if not self.progress or self._lines:
            return None
        from tqdm import tqdm

        return tqdm(total=self.cfg.train.max_updates, initial=self.update, unit="upd")

    def _say(self, line: str) -> None:
        """A plain progress line on stderr, when the output is not a terminal."""
        if self._lines:
            print(line, file=sys.stderr, flush=True)

    def _run_epoch(
        self,
        clock: _Clock,
        bar: Any,
        stop_after_updates: int | None,
        should_stop: Callable[[], bool] | None,
        on_update: Callable[[dict[str, Any]], None] | None,
    ) -> Stop | None:
        """The rest of the current epoch, one update per ``accumulate`` batches; why it stopped
        early, or None when the epoch ran to its end."""
        cfg = self.cfg
        it = EpochIterator(
            self.train_data, cfg.data.max_tokens, cfg.train.seed, self.epoch,
            self.position, self.rank, self.world,
        )  # fmt: skip
        self.model.train()
        start = it.position
        items = self._batches_ahead(it)
        pending: list[list[int] | Batch] = []
        for consumed, item in enumerate(items, start + 1):
            pending.append(item)
            if len(pending) < cfg.optim.accumulate:
                continue
            stats = self.step(pending)
            pending = []
            self.position = consumed
            clock.tokens += stats.tokens
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{stats.loss / max(stats.tokens, 1):.3f}", ep=self.epoch)
            self._log_update(stats, clock, on_update)
            every = cfg.train.checkpoint_every_updates
            if every and self.update % every == 0:
                self.save()
            if self.update >= cfg.train.max_updates:
                return Stop.MAX_UPDATES
            if stop_after_updates is not None and self.update >= stop_after_updates:
                return Stop.INTERRUPTED
            if should_stop is not None and should_stop():
                return Stop.CANCELLED
        return None

    def _batches_ahead(self, it: EpochIterator) -> Iterable[list[int] | Batch]:
        """The rest of the epoch: batches built by the loader workers, else the index lists,
        a mapped corpus's rows read from disk a few batches ahead by a thread."""
        if self._prefetcher is not None:
            return self._prefetcher.batches(it.batches[it.position :])
        if isinstance(self.train_data, MappedCorpus):
            return read_ahead(it, self.train_data.read_ahead)
        return it

    def step(self, group: Sequence[list[int] | Batch]) -> StepStats:
        """One update from ``accumulate`` batches (training-row indices, or their batches built
        ahead): forward and backward of each (HeadMask gates, mixed precision), clipping, the
        optimiser and the schedule. Benchmarks call this too, so they time what training does."""
        cfg = self.cfg
        self.model.state.update, self.model.state.epoch = self.update, self.epoch
        built = [
            b if isinstance(b, Batch) else make_batch(self.train_data, b, self.requests)
            for b in group
        ]
        tokens = sum(b.ntokens for b in built)  # counted on the host: no device sync
        global_tokens = global_sum(tokens, self.device)
        batches = [b.to(self.device) for b in built]
        sums: list[Tensor] = []  # each micro-batch's loss and NLL, read once the update is queued
        for micro, b in enumerate(batches):
            self.model.set_head_gates(self._headmask_gates(b, micro))
            try:
                sums.extend(self._forward_backward(b, global_tokens))
            finally:
                self.model.set_head_gates(None)
        if cfg.optim.clip_norm > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.optim.clip_norm)
        self.optim.step()
        self.sched.step()
        self.optim.zero_grad(set_to_none=True)
        self.update += 1
        values = torch.stack(sums).tolist()  # one sync per update; summed as before, in doubles
        loss_sum = nll_sum = 0.0
        for raw, nll in zip(values[::2], values[1::2], strict=True):
            loss_sum += raw
            nll_sum += nll
        return StepStats(loss_sum, nll_sum, tokens)

    def _log_update(
        self,
        stats: StepStats,
        clock: _Clock,
        on_update: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        last = self.update == self.cfg.train.max_updates  # a run's final loss is always on record
        if not (self.update % self.cfg.train.log_every == 0 or self.update == 1 or last):
            return
        rec = {
            "event": "update", "update": self.update, "epoch": self.epoch,
            "loss": stats.loss / max(stats.tokens, 1),
            "nll": stats.nll / max(stats.tokens, 1),
            "lr": self.sched.get_last_lr()[0],
            "tokens_per_s": clock.rate(),
        }  # fmt: skip
        self.log(rec)
        from synattn_trainer.progress_lines import update_line

        elapsed = time.perf_counter() - self._t_start
        self._say(update_line(rec, self.cfg.train.max_updates, self._first_update, elapsed))
        variant_stats = self.model.variant_stats()
        if variant_stats:
            self.log({"event": "variants", "update": self.update, **variant_stats})
        masks = self._mask_tally.record(self.update) if self._mask_tally is not None else None
        if masks is not None:
            self.log(masks)
        if on_update is not None:
            on_update(rec)

    def _finish(self, stop: Stop) -> TrainResult:
        """Choose the final model, log the dev-set gates and the end; what the run produced."""
        done = stop not in (Stop.INTERRUPTED, Stop.CANCELLED)
        select = self.cfg.train.checkpoint_select
        finals: dict[str, Path] = {}
        updates: dict[str, list[int]] = {}
        single: dict[str, int] = {}
        last = ck.latest(self.ckpt_dir)
        if done and self.rank == 0:
            for kind in self.cfg.train.selections():
                path, picked, at = self._final_model(kind, last)
                if path is not None:
                    finals[kind], updates[kind] = path, picked
                    if at is not None:
                        single[kind] = at
            self._log_dev_gates()
        chosen = finals.get(select)
        self.log({"event": "end", "update": self.update, "epoch": self.epoch, "stopped": stop,
                  "selection": select, "averaged_updates": updates.get(select, []),
                  "checkpoint_updates": single,
                  "finals": {k: str(v) for k, v in finals.items()}})  # fmt: skip
        best_loss, best_update = self.best_checkpoint()
        return TrainResult(
            self.update, self.epoch, self.best_valid, last, None if chosen == last else chosen,
            stop, select, finals, updates, single, best_loss, best_update,
        )  # fmt: skip

    def _log_dev_gates(self) -> None:
        """Gated SLR: the gates over the dev set in eval mode (what the paper's Fig. 3 shows),
        logged as a ``gates_dev`` event; nothing for models without a gate."""
        from synattn_trainer.analysis import dev_gates

        gates = dev_gates(self.model, self.valid_data)
        if gates:
            self.log({"event": "gates_dev", "update": self.update, **gates})

    def _end_of_epoch(self, final: bool = False) -> None:
        """Validation (patience, BLEU every k epochs) and a save: a scheduled checkpoint when
        checkpoints are per epoch or the run has reached its end, else a resume point."""
        valid = self.validate()
        if self.cfg.headmask.mode != "none":
            valid.update(self.validate_masked())
        if valid["valid_loss"] < self.best_valid - 1e-6:
            self.best_valid = valid["valid_loss"]
            self.bad_epochs = 0
        else:
            self.bad_epochs += 1
        rec = {"event": "epoch", "update": self.update, "epoch": self.epoch, **valid}
        k = self.cfg.train.bleu_every
        if k and self.rank == 0 and self.epoch % k == 0:
            from synattn_trainer.evaluate import corpus_bleu

            n = self.cfg.train.bleu_max_sentences or len(self.valid_data)
            hyps = self.translate(self.valid_data, limit=n)
            bleu = corpus_bleu(hyps, self.valid_data.refs[:n])
            rec.update(valid_bleu=bleu.score, bleu_signature=bleu.signature)
        self.log(rec)
        from synattn_trainer.progress_lines import epoch_line

        self._say(epoch_line(rec))
        self.save(final or not self.cfg.train.checkpoint_every_updates, valid["valid_loss"])

    def validate(self) -> dict[str, float]:
        """Validation loss (label-smoothed) and NLL per target token, and perplexity."""
        loss, nll = self._valid_losses()
        return {"valid_loss": loss, "valid_nll": nll, "valid_ppl": math.exp(min(nll, 50))}

    def _valid_losses(
        self, gates: Callable[[Batch, int], Tensor] | None = None
    ) -> tuple[float, float]:
        """Label-smoothed loss and NLL per target token over the validation split, in eval
        mode; ``gates(batch, i)`` gates each batch's heads (HeadMask)."""
        self.model.eval()
        try:
            return corpus_losses(self.model, self.valid_data, self.requests,
                                 self.cfg.data.max_tokens, self.device,
                                 self.cfg.optim.label_smoothing, gates)  # fmt: skip
        finally:
            self.model.train()

    def translate(self, data: Corpus, limit: int | None = None) -> list[str]:
        """Beam-search translations of a split (detokenised), with the config's decoding."""
        from synattn_trainer.decode import translate_corpus

        try:
            return translate_corpus(
                self.model, data, self.tok, self.cfg.decode, limit=limit, device=self.device
            )
        finally:
            self.model.train()
