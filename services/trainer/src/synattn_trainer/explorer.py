"""The attention explorer's model side: what every head of a trained run applies to one sentence,
the syntax that sentence gave the model, and what each head is (fixed, gated, masked, pruned).

The probabilities are the ones the model applies (docs/papers/index.md, "What an analysis
reads"), teacher-forced on the reference
target so decoder and cross attention are defined; ``synattn attention`` exports the same arrays
(``inference.applied_attention`` calls ``row_attention`` here). ``ExplorerCache`` keeps a few
loaded models and corpora per process, so clicking from row to row does not reload either.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from tokenizers import Tokenizer

from synattn_trainer.config import TrainConfig
from synattn_trainer.data import Corpus, corpus_from_rows, load_corpus, make_batch
from synattn_trainer.model import Transformer
from synattn_trainer.tokenizer import load_tokenizer

NAMES = {  # P^(k) of docs/papers/fixed-patterns.md, by fixed head index
    0: "current token", 1: "previous token", 2: "next token", 3: "left context",
    4: "right context", 5: "end of sentence", 6: "start of sentence", 7: "last token",
}  # fmt: skip
SYNTAX_FEATURES = {"dea": ("dea_mask",), "slr": ("slr_soft", "slr_interval")}

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Loaded:
    """A trained model in eval mode, its configuration and its vocabulary. ``lock`` is held
    around each use: a forward pass leaves its probabilities (and RHE's labels) on the
    modules, so two requests must not interleave on one model."""

    model: Transformer
    cfg: TrainConfig
    tok: Tokenizer
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)


class _Lru:
    """A small least-recently-used map whose values are built once per key."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[Any, Any] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: K, build: Callable[[], V]) -> tuple[V, bool]:
        """The value of ``key`` and whether it was cached (built and kept when it was not)."""
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key], True
        value = build()
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value, False


def _stamp(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_mtime_ns, st.st_size


class ExplorerCache:
    """Loaded models (at most ``models``) and encoded splits (at most ``corpora``), keyed by the
    file and its modification time so a rewritten checkpoint is loaded afresh."""

    def __init__(self, models: int = 2, corpora: int = 4) -> None:
        self._models = _Lru(models)
        self._corpora = _Lru(corpora)
        self._relations = _Lru(corpora)

    def model(self, checkpoint: Path) -> tuple[Loaded, bool]:
        """The run's model (and whether it was already loaded)."""
        from synattn_trainer.loading import load_model

        def build() -> Loaded:
            model, cfg = load_model(checkpoint)
            model.eval()
            return Loaded(model, cfg, load_tokenizer(cfg.data.tokenizer))

        return self._models.get(_stamp(checkpoint), build)

    def corpus(self, data: Path, run: Loaded) -> Corpus:
        """A split encoded with the run's vocabulary and source ``</s>`` setting."""
        manifest = data / "manifest.json"
        key = (_stamp(manifest), run.cfg.data.tokenizer, run.cfg.data.source_eos)
        corpus, _ = self._corpora.get(
            key,
            lambda: load_corpus(
                data, run.tok, require_tgt=False, source_eos=run.cfg.data.source_eos
            ),
        )
        return corpus

    def dep_rels(self, data: Path) -> list[list[str] | None]:
        """Each row's dependency labels (the arcs' names; training never reads them)."""
        from synattn_shared.shards import ShardDataset

        rels, _ = self._relations.get(
            _stamp(data / "manifest.json"),
            lambda: [r["dep_rel"] for r in ShardDataset(data).iter_rows(columns=["dep_rel"])],
        )
        return rels


def row_attention(
    model: Transformer, tok: Tokenizer, corpus: Corpus, row: int
) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """The probabilities the model applies to row ``row`` (eval mode, teacher-forced):
    ``{"enc_self.0": [H, Tq, Tk], ...}`` over subwords, with the source and target tokens."""
    if not 0 <= row < len(corpus):
        raise IndexError(f"row {row} is outside 0..{len(corpus) - 1}")
    modules = model.attention_modules()
    device = next(model.parameters()).device  # a model loaded on a GPU reads its batch there
    b = make_batch(corpus, [row], model.feature_requests()).to(device)
    try:
        for _, _, m in modules:
            m.keep_probs = True
        with torch.no_grad():
            model(b.src, b.tgt_in, b.syntax)
        arrays = {}
        for kind, layer, m in modules:
            assert m.last_probs is not None
            arrays[f"{kind}.{layer}"] = m.last_probs[0].float().cpu().numpy()
    finally:
        for _, _, m in modules:
            m.keep_probs, m.last_probs = False, None
    src = [tok.id_to_token(int(t)) or "<unk>" for t in b.src[0]]
    tgt = [tok.id_to_token(int(t)) or "<unk>" for t in b.tgt_in[0]]
    return arrays, src, tgt


def head_roles(model: Transformer) -> dict[str, list[str]]:
    """What each head of each module is, in words: ``learned``, ``fixed: previous token``,
    ``gated (SLR)``, ``masked (DEA)``, ``important`` / ``enlivened (LPEA)`` / ``pruned`` (RHE,
    for the sentence of the last forward pass), ``routed``; several joined by ``; ``."""
    from synattn_trainer.variants.base import AttentionVariant
    from synattn_trainer.variants.disagreement import Disagreement
    from synattn_trainer.variants.fixed import Fixed
    from synattn_trainer.variants.rhe import Rhe
    from synattn_trainer.variants.routing import Routing
    from synattn_trainer.variants.slr import Slr

    out: dict[str, list[str]] = {}
    for kind, layer, m in model.attention_modules():
        tags: list[list[str]] = [[] for _ in range(m.h)]
        for v in m.variant.members():
            cfg: Any = v.config
            chosen = range(m.h) if getattr(cfg, "heads", "all") == "all" else cfg.heads
            if isinstance(v, Fixed):
                off = set(cfg.ablate)
                for h in range(cfg.fixed):
                    word = " (word-based)" if cfg.word_based else ""
                    tags[h].append(f"fixed: {NAMES[h]}{word}" + (" (ablated)" if h in off else ""))
            elif isinstance(v, Slr):
                tag = {"gated": "gated (SLR)", "avg": "averaged (SLR)", "pure": "masked (SLR)"}
                for h in chosen:
                    tags[h].append(tag[cfg.mode])
            elif isinstance(v, Rhe):
                labels = v.last_labels
                sea = cfg.sea.upper()
                for h in range(m.h):
                    if labels is None:
                        tags[h].append("RHE")
                    elif bool(labels[0, h]):
                        tags[h].append("important (plain)")
                    else:
                        tags[h].append("pruned" if cfg.mode == "prune" else f"enlivened ({sea})")
            elif isinstance(v, Routing):
                for h in range(m.h):
                    tags[h].append(f"routed ({cfg.method})")
            elif type(v) is not AttentionVariant and not isinstance(v, Disagreement):
                name = type(v).__name__  # vanilla adds nothing; disagreement is a loss only
                label = {"Dea": "masked (DEA)", "Lpea": "biased (LPEA)"}.get(name, name.lower())
                for h in chosen:
                    tags[h].append(label)
        out[f"{kind}.{layer}"] = ["; ".join(t) or "learned" for t in tags]
    return out


def row_syntax(
    corpus: Corpus, row: int, model: Transformer, dep_rel: list[str] | None
) -> dict[str, Any]:
    """The syntax the model read for a row: words, dependency arcs (one per non-root word), the
    subword-to-word map, and the source matrices its variants request, at subword level."""
    from synattn_shared.materialise import materialise

    rec = corpus.rows[row]
    words = list(rec["words"])
    heads = rec.get("dep_head")
    arcs = []
    if heads is not None and rec.get("has_syntax", True):
        for i, h in enumerate(heads):
            if int(h) > 0:
                rel = dep_rel[i] if dep_rel is not None and i < len(dep_rel) else None
                arcs.append({"dep": i, "head": int(h) - 1, "rel": rel})
    s2w = corpus.s2w[row].tolist()
    from synattn_shared.requests import DeaBias, DeaMask, SlrBias

    requests = model.feature_requests()
    want: list[str] = []
    if any(isinstance(r, DeaMask | DeaBias) for r in requests):
        want += SYNTAX_FEATURES["dea"]
    if any(isinstance(r, SlrBias) for r in requests):
        want += SYNTAX_FEATURES["slr"]
    matrices: dict[str, Any] = {}
    if want and rec.get("has_syntax", True):
        dense = materialise(rec, tuple(want), subword_to_word=s2w)
        for key in want:
            value = dense.get(key)
            if value is not None:
                matrices[key] = np.asarray(value).astype(float).round(6).tolist()
    return {"words": words, "arcs": arcs, "subword_to_word": s2w, "matrices": matrices}


def run_stats(folder: Path) -> dict[str, dict[str, list[float | None]]]:
    """Per-head statistics the run recorded, by module: ``importance`` and ``confidence`` (its
    analysis, when the job ran one) and ``gate`` (gated SLR's dev-set means)."""
    import json

    out: dict[str, dict[str, list[float | None]]] = {}

    def put(module: str, key: str, head: int, value: float) -> None:
        slot = out.setdefault(module, {}).setdefault(key, [])
        slot.extend([None] * (head + 1 - len(slot)))
        slot[head] = value

    analysis = folder / "analysis" / "analysis.json"
    if analysis.is_file():
        rec = json.loads(analysis.read_text(encoding="utf-8"))
        for key in ("importance", "confidence"):
            for name, value in zip(rec.get("heads", []), rec.get(key, []), strict=False):
                module, head = name.rsplit(".", 1)
                put(module, key, int(head), round(float(value), 6))
    metrics = folder / "metrics.jsonl"
    if metrics.is_file():
        gates: dict[str, Any] = {}
        for line in metrics.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"gates_dev"' in line:
                try:
                    gates = json.loads(line)
                except ValueError:
                    continue
        for name, value in gates.items():
            parts = name.split(".")
            if len(parts) == 4 and parts[2] == "gate" and parts[3].startswith("h"):
                put(f"{parts[0]}.{parts[1]}", "gate", int(parts[3][1:]), float(value))
    return out


def text_corpus(run: Loaded, parsed: dict[str, Any]) -> Corpus:
    """A one-row corpus from a parsed sentence (the row the run's recorded parse makes of it,
    ``rawtext``); the target is the model's own greedy translation (there is no reference), so
    decoder attention is over what it would output. ``refs[0]`` is that translation."""
    from synattn_trainer.data import SYNTAX_COLUMNS
    from synattn_trainer.decode import translate_corpus

    row = {k: parsed.get(k) for k in SYNTAX_COLUMNS}
    row["tgt"] = ""
    row["has_syntax"] = bool(parsed.get("has_syntax"))
    source = corpus_from_rows([row], run.tok, source_eos=run.cfg.data.source_eos)
    device = next(run.model.parameters()).device
    (hyp,) = translate_corpus(
        run.model, source, run.tok, run.cfg.decode, beam=1, device=device
    )  # greedy
    row["tgt"] = hyp
    return corpus_from_rows([row], run.tok, source_eos=run.cfg.data.source_eos)
