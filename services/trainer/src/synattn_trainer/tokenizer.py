"""The joint subword vocabulary (HF ``tokenizers`` BPE) and the source subword -> word map.

Source sentences are the parser's words (so syntax lines up); they are encoded pretokenised and
``word_ids()`` links each subword to its word. Targets are raw text; ``Metaspace`` keeps the
spaces, so decoding gives detokenised text for sacreBLEU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from synattn_shared.errors import BadFile, one_line, path_problem

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, show_progress: bool = False
) -> Tokenizer:
    """A cased joint BPE vocabulary over source and target text, specials first (ids 0-3);
    ``show_progress``: the tokenizers library's own bars on stderr (a terminal's)."""
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=2,
        show_progress=show_progress,
    )  # fmt: skip
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


TOKENIZER_FIX = "name the tokenizer.json that `synattn tokenizer train` wrote"


def load_tokenizer(path: str | Path, key: str | None = None) -> Tokenizer:
    """Load ``tokenizer.json`` and check the special ids this package assumes.

    Raises:
        BadFile: the file does not exist, is a folder, cannot be read, is not a tokenizers
            JSON file, or has other special ids; the message names the file (and ``key``,
            the setting that named it).
    """
    problem = path_problem(path)
    if problem is not None:
        raise BadFile(path, problem, TOKENIZER_FIX, key=key)
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception with serde's message
        why = one_line(exc) or type(exc).__name__
        raise BadFile(
            path, f"not a tokenizer (the tokenizers library cannot load it: {why})",
            TOKENIZER_FIX, key=key,
        ) from None  # fmt: skip
    for expected, token in enumerate(SPECIALS):
        if tok.token_to_id(token) != expected:
            raise BadFile(
                path, f"not a synattn tokenizer: {token} must have id {expected}",
                TOKENIZER_FIX, key=key,
            )  # fmt: skip
    return tok


def encode_source(
    tok: Tokenizer, sentences: Sequence[Sequence[str]], eos: bool = True
) -> tuple[list[list[int]], list[list[int]]]:
    """Subword ids of pretokenised sentences, plus ``</s>`` unless ``eos`` is False (the
    fixed-pattern paper trained without one: docs/papers/index.md, "Source </s>"); each
    subword's word (-1: ``</s>``)."""
    encs = tok.encode_batch(
        [list(s) for s in sentences], is_pretokenized=True, add_special_tokens=False
    )
    tail = [EOS_ID] if eos else []
    ids = [[*e.ids, *tail] for e in encs]
    s2w = [[-1 if w is None else w for w in e.word_ids] + [-1] * len(tail) for e in encs]
    return ids, s2w


def encode_target(tok: Tokenizer, sentences: Sequence[str]) -> list[list[int]]:
    """``<s> ... </s>`` subword ids of raw target sentences."""
    encs = tok.encode_batch(list(sentences), add_special_tokens=False)
    return [[BOS_ID, *e.ids, EOS_ID] for e in encs]


def decode(tok: Tokenizer, ids: Sequence[Sequence[int]]) -> list[str]:
    """Detokenised text of subword id sequences (specials removed)."""
    return tok.decode_batch([list(x) for x in ids], skip_special_tokens=True)
