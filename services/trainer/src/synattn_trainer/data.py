"""Parallel data from parse shards: subword ids at load time, token-budget batches, syntax tensors.

Shards stay word-level; subword ids and the source subword -> word map are computed when the data
is loaded (``tokenizers`` encodes Multi30k in about a second), so a new vocabulary never means
re-parsing. Batches group sentences of similar length under a source-token budget; their order is
a pure function of (seed, epoch), so a run resumes mid-epoch at the exact batch it stopped at.
Syntax features are built per batch from the variants' typed requests
(``synattn_shared.requests``), at subword level, and moved to the training device.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor

from synattn_shared.requests import FeatureRequest, build_features
from synattn_shared.shards import ShardDataset
from synattn_trainer.tokenizer import PAD_ID, encode_source, encode_target

SYNTAX_COLUMNS = ("words", "dep_head", "upos", "syn_dist", "const_layer", "has_syntax", "tree")
Features = dict[FeatureRequest, Tensor]  # a batch's syntax tensors, by what asked for them


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
    return corpus_from_rows(rows, tok, max_len, source_eos)


def corpus_from_rows(
    rows: list[dict[str, Any]], tok: Tokenizer, max_len: int | None = None, source_eos: bool = True
) -> Corpus:
    """Encode parsed rows (shard rows, or a parser API's sentences with a ``tgt``)."""
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
    """Tensors of one batch (on the training device).

    ``scored`` holds the flat (row-major) indices of the target positions that are scored (not
    padding) and ``gold`` their tokens. Both are found on the host when the batch is built:
    selecting them on a GPU with a boolean mask would make the host wait for the device (the
    size of the result is data), and would break a compiled graph.
    """

    index: list[int]
    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    syntax: Features
    scored: Tensor
    gold: Tensor

    @property
    def ntokens(self) -> int:
        return int(self.scored.shape[0])

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.index,
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            {k: v.to(device, non_blocking=True) for k, v in self.syntax.items()},
            self.scored.to(device, non_blocking=True),
            self.gold.to(device, non_blocking=True),
        )


def _pad(seqs: Sequence[np.ndarray], fill: int = PAD_ID) -> Tensor:
    width = max(len(s) for s in seqs)
    out = np.full((len(seqs), width), fill, dtype=np.int64)
    for k, s in enumerate(seqs):
        out[k, : len(s)] = s
    return torch.from_numpy(out)


def syntax_tensors(
    corpus: Corpus, index: Sequence[int], requests: Iterable[FeatureRequest]
) -> Features:
    """The batch's syntax tensors, one per request (``synattn_shared.requests`` builds them:
    subword level, padded by each request's rule)."""
    arrays = build_features(
        [corpus.rows[i] for i in index], [corpus.s2w[i] for i in index], requests
    )
    return {req: torch.from_numpy(a) for req, a in arrays.items()}


def make_batch(
    corpus: Corpus, index: Sequence[int], requests: Iterable[FeatureRequest] = ()
) -> Batch:
    """Pad one batch; teacher forcing splits ``<s> y </s>`` into input and output."""
    tgt = [corpus.tgt[i] for i in index]
    tgt_out = _pad([t[1:] for t in tgt])
    flat = tgt_out.flatten()
    scored = flat.ne(PAD_ID).nonzero().squeeze(1)
    return Batch(
        index=list(index),
        src=_pad([corpus.src[i] for i in index]),
        tgt_in=_pad([t[:-1] for t in tgt]),
        tgt_out=tgt_out,
        syntax=syntax_tensors(corpus, index, requests),
        scored=scored,
        gold=flat[scored],
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
