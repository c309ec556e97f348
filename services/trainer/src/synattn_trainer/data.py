"""Parallel data from parse shards: subword ids at load time, token-budget batches, syntax tensors.

Shards stay word-level; subword ids and the source subword -> word map are computed when the data
is loaded (``tokenizers`` encodes Multi30k in about a second), so a new vocabulary never means
re-parsing. Batches group sentences of similar length under a source-token budget; their order is
a pure function of (seed, epoch), so a run resumes mid-epoch at the exact batch it stopped at.
Syntax features are materialised per batch, at subword level, and moved to the training device.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor

from synattn_shared.materialise import MaterialiseOptions, materialise
from synattn_shared.shards import ShardDataset
from synattn_shared.syntax.dependency import dep_hops
from synattn_shared.syntax.targets import (
    is_punctuation,
    lisa_targets,
    pascal_centres,
    sla_keep_mask,
)
from synattn_trainer.tokenizer import PAD_ID, encode_source, encode_target

SYNTAX_COLUMNS = ("words", "dep_head", "upos", "syn_dist", "const_layer", "has_syntax", "tree")
# fill for padded positions of each feature (masked anyway by key padding; keeps values finite)
PAD_FILL: dict[str, Any] = {
    "slr_bias": 0.0, "slr_soft": 1.0, "slr_hard": True, "dea_bias": 0.0, "dea_mask": True,
    "dep_hops": 255, "rp": 0, "rp_index": 0, "sla_keep": True, "lisa_target": 0,
    "pascal_centre": 0.0,
}  # fmt: skip


@dataclass
class Corpus:
    """One split, encoded: source and target ids, word maps, and the rows' syntax columns."""

    src: list[np.ndarray]
    tgt: list[np.ndarray]
    s2w: list[np.ndarray]
    rows: list[dict[str, Any]]
    refs: list[str]
    words: list[list[str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.src)


def load_corpus(
    shard_dir: str | Path,
    tok: Tokenizer,
    max_len: int | None = None,
    limit: int | None = None,
    require_tgt: bool = True,
    source_eos: bool = True,
) -> Corpus:
    """Read a parsed split and encode it.

    Args:
        shard_dir: dataset written by ``synattn parse --tgt``.
        tok: the joint vocabulary.
        max_len: drop pairs with a longer source or target (training only).
        limit: keep only the first ``limit`` pairs.
        require_tgt: refuse shards without a target side (False: translation input).
        source_eos: append ``</s>`` to each source (``data.source_eos`` of the config).

    Raises:
        ValueError: the shards have no target side.
    """
    ds = ShardDataset(shard_dir)
    rows = []
    for row in ds.iter_rows(columns=[*SYNTAX_COLUMNS, "tgt"]):
        if row["tgt"] is None:
            if require_tgt:
                raise ValueError(f"{shard_dir}: no target side; parse with --tgt")
            row["tgt"] = ""
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    src_ids, s2w = encode_source(tok, [r["words"] for r in rows], eos=source_eos)
    tgt_ids = encode_target(tok, [r["tgt"] for r in rows])
    keep = [
        k
        for k in range(len(rows))
        if max_len is None or (len(src_ids[k]) <= max_len and len(tgt_ids[k]) <= max_len)
    ]
    return Corpus(
        src=[np.asarray(src_ids[k], np.int64) for k in keep],
        tgt=[np.asarray(tgt_ids[k], np.int64) for k in keep],
        s2w=[np.asarray(s2w[k], np.int64) for k in keep],
        rows=[rows[k] for k in keep],
        refs=[rows[k]["tgt"] for k in keep],
        words=[rows[k]["words"] for k in keep],
    )


def token_batches(
    src_lens: Sequence[int], tgt_lens: Sequence[int], max_tokens: int, seed: int, epoch: int
) -> list[list[int]]:
    """Length-bucketed batches under a padded source/target token budget, order fixed by
    ``(seed, epoch)``; ``epoch < 0`` gives the unshuffled order (evaluation)."""
    n = len(src_lens)
    src = np.asarray(src_lens)
    tgt = np.asarray(tgt_lens)
    if epoch >= 0:
        rng = np.random.default_rng([seed, epoch])
        order = np.lexsort((rng.random(n), tgt, src))
    else:
        order = np.lexsort((np.arange(n), tgt, src))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order.tolist():
        width = max(longest, int(src[i]), int(tgt[i]))
        if cur and width * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, width = [], max(int(src[i]), int(tgt[i]))
        cur.append(i)
        longest = width
    if cur:
        batches.append(cur)
    if epoch >= 0:
        perm = np.random.default_rng([seed, epoch, 1]).permutation(len(batches))
        batches = [batches[k] for k in perm.tolist()]
    return batches


@dataclass
class Batch:
    """Tensors of one batch (on the training device)."""

    index: list[int]
    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    syntax: dict[str, Tensor]

    @property
    def ntokens(self) -> int:
        return int(self.tgt_out.ne(PAD_ID).sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.index,
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            {k: v.to(device, non_blocking=True) for k, v in self.syntax.items()},
        )


def _pad(seqs: Sequence[np.ndarray], fill: int = PAD_ID) -> Tensor:
    width = max(len(s) for s in seqs)
    out = np.full((len(seqs), width), fill, dtype=np.int64)
    for k, s in enumerate(seqs):
        out[k, : len(s)] = s
    return torch.from_numpy(out)


VECTOR_FEATURES = {"lisa_target", "pascal_centre", "word_ids"}
EXTRA_FEATURES = {"lisa_target", "pascal_centre", "sla_keep", "word_ids"}
MATERIALISE_KEYS = set(MaterialiseOptions.model_fields)


def _extra_feature(
    name: str, row: dict[str, Any], s2w: np.ndarray, opts: dict[str, Any]
) -> np.ndarray:
    if name == "word_ids":  # specials (</s>) are words of their own
        return np.where(s2w >= 0, s2w, s2w.max(initial=-1) + 1 + np.cumsum(s2w < 0) - 1)
    heads = row["dep_head"]
    if name == "lisa_target" and (heads is None or not row["has_syntax"]):
        return np.full(len(s2w), -1, dtype=np.int64)  # no parse: no LISA loss on this row
    if heads is None:
        raise ValueError(f"feature {name} needs a dependency parse")
    if name == "lisa_target":
        return lisa_targets(heads, s2w)
    if name == "pascal_centre":
        return pascal_centres(heads, s2w)
    if name == "sla_keep":
        punct = (
            is_punctuation(row["words"], row.get("upos"))
            if opts.get("sla_punct_visible", True)
            else None
        )
        keep = sla_keep_mask(
            dep_hops(heads),
            int(opts.get("sla_m", 3)),
            bool(opts.get("sla_neighbour_union", True)),
            punct,
            s2w,
        )
        if not row["has_syntax"]:
            keep = np.ones_like(keep)
        return keep
    raise ValueError(f"unknown batch feature {name!r}")


def syntax_tensors(
    corpus: Corpus,
    index: Sequence[int],
    features: Sequence[str],
    options: dict[str, Any] | None = None,
) -> dict[str, Tensor]:
    """Subword-level batch features: ``[B, S, S]`` matrices and ``[B, S]`` vectors, padded."""
    if not features:
        return {}
    opts = options or {}
    mopts = MaterialiseOptions(**{k: v for k, v in opts.items() if k in MATERIALISE_KEYS})
    dense = tuple(f for f in features if f not in EXTRA_FEATURES)
    width = max(len(corpus.src[i]) for i in index)
    out: dict[str, list[np.ndarray]] = {name: [] for name in features}
    for i in index:
        s2w = corpus.s2w[i]
        mats = materialise(corpus.rows[i], dense, mopts, s2w.tolist()) if dense else {}
        for name in features:
            m = (
                _extra_feature(name, corpus.rows[i], s2w, opts)
                if name in EXTRA_FEATURES
                else mats[name]
            )
            if m is None:
                raise ValueError(f"feature {name} needs a dependency parse (row {i})")
            out[name].append(m)
    tensors: dict[str, Tensor] = {}
    for name, mats_ in out.items():
        vector = name in VECTOR_FEATURES
        for m, i in zip(mats_, index, strict=True):
            t = len(corpus.src[i])
            if m.shape != ((t,) if vector else (t, t)):
                raise ValueError(f"feature {name} has shape {m.shape} for {t} subwords")
        shape = (len(mats_), width) if vector else (len(mats_), width, width)
        padded = np.full(shape, PAD_FILL.get(name, 0), dtype=mats_[0].dtype)
        for k, m in enumerate(mats_):
            padded[(k, *[slice(0, int(s)) for s in m.shape])] = m  # type: ignore[index]
        tensors[name] = torch.from_numpy(padded)
    return tensors


def make_batch(
    corpus: Corpus,
    index: Sequence[int],
    features: Sequence[str] = (),
    options: dict[str, Any] | None = None,
) -> Batch:
    """Pad one batch; teacher forcing splits ``<s> y </s>`` into input and output."""
    tgt = [corpus.tgt[i] for i in index]
    return Batch(
        index=list(index),
        src=_pad([corpus.src[i] for i in index]),
        tgt_in=_pad([t[:-1] for t in tgt]),
        tgt_out=_pad([t[1:] for t in tgt]),
        syntax=syntax_tensors(corpus, index, features, options),
    )


class EpochIterator:
    """The batches of one epoch from a position on (exact mid-epoch resume)."""

    def __init__(
        self,
        corpus: Corpus,
        max_tokens: int,
        seed: int,
        epoch: int,
        position: int = 0,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        all_batches = token_batches(
            [len(s) for s in corpus.src], [len(t) - 1 for t in corpus.tgt], max_tokens, seed, epoch
        )
        usable = len(all_batches) - len(all_batches) % world if world > 1 else len(all_batches)
        self.batches = all_batches[rank:usable:world]  # every rank the same number of steps
        self.position = position

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        while self.position < len(self.batches):
            batch = self.batches[self.position]
            self.position += 1
            yield batch
