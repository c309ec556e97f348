"""The Python API of a trained model: load a checkpoint, translate raw sentences through the parse
its training data had, and read what every head applies to a sentence.

```python
from synattn_trainer import api

model = api.load("runs/tiny/averaged.pt")      # refuses a parser that differs from training's
model.translate(["A dog runs across the field ."])   # -> ["Ein Hund ..."]
view = model.attention("A dog runs .")         # view["modules"]["enc_self.0"]: [H, Tq, Tk]
model.config.model.heads                        # the run's resolved TrainConfig
```

The same code serves ``synattn translate --text`` and ``POST /v1/jobs/{id}/translate``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from synattn_trainer.config import TrainConfig
from synattn_trainer.model import Transformer
from synattn_trainer.rawtext import (
    MAX_CHARS,
    ParseMismatch,
    ParseRecord,
    RecordedParser,
    cached_parser,
    check_sentence,
    checkpoint_entries,
    parse_record,
    translate_rows,
)

__all__ = ["Model", "ParseMismatch", "ParseRecord", "load"]
SOURCE = "sentence"  # what messages call a position in the list: "sentence:3: empty sentence"


@dataclass
class Model:
    """A trained model in eval mode with its vocabulary and the parser its data was made with.

    Attributes:
        net: the Transformer (eval mode, on ``device``).
        config: the run's resolved configuration (``TrainConfig``).
        tokenizer: the joint subword vocabulary.
        parse: which parse the training data came from (backend, model, options).
        parser: that parse, loaded here and checked against ``parse``.
        device: where the model runs.
        max_chars: characters one sentence may have (None: no limit).
    """

    net: Transformer
    config: TrainConfig
    tokenizer: Tokenizer
    parse: ParseRecord
    parser: RecordedParser
    device: torch.device
    max_chars: int | None = MAX_CHARS
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def rows(
        self, sentences: Sequence[str], first_line: int = 1, source: str = SOURCE
    ) -> list[dict[str, Any]]:
        """The shard rows (words, parse, syntax columns) of raw sentences, as ``synattn parse``
        writes them with the recorded parser.

        Raises:
            SyntaxInputError: an empty sentence or one over ``max_chars``, with its position.
        """
        for k, text in enumerate(sentences):
            check_sentence(text, first_line + k, self.max_chars, source=source)
        return self.parser.rows(sentences, first_line, source=source)

    def translate(
        self,
        sentences: Sequence[str],
        *,
        beam: int | None = None,
        lenpen: float | None = None,
        first_line: int = 1,
        source: str = SOURCE,
    ) -> list[str]:
        """Translate raw sentences (one string each): parsed as the training data was, then
        beam search with the run's decoding settings (``beam``/``lenpen`` override them).

        Args:
            sentences: raw source sentences.
            beam: beam size (default: the config's ``decode.beam``).
            lenpen: length penalty exponent (default: the config's).
            first_line: the number of ``sentences[0]`` in error messages.
            source: what error messages call the input.

        Returns:
            One detokenised translation per sentence, in order; equal to what
            ``inference.translate_split`` gives for the same sentences parsed into shards.

        Raises:
            SyntaxInputError: an empty or over-long sentence, named by its position.
        """
        if isinstance(sentences, str):
            raise TypeError("translate takes a list of sentences, not one string")
        rows = self.rows(sentences, first_line, source)
        with self.lock:  # decoding keeps per-call state on the modules
            return translate_rows(
                self.net, self.tokenizer, self.config, rows, beam=beam, lenpen=lenpen,
                device=self.device, first_line=first_line, source=source,
            )  # fmt: skip

    def attention(self, sentence: str) -> dict[str, Any]:
        """What every head applies to one raw sentence, teacher-forced on the model's own
        greedy translation (as the explorer shows a typed sentence).

        Returns:
            ``{"sentence", "translation", "tokens": {"source": [...], "target": [...]},
            "modules": {"enc_self.0": array [H, Tq, Tk], "dec_self.0": ..., "enc_dec.0": ...},
            "roles": {module: [what each head is]}, "syntax": {"words", "arcs",
            "subword_to_word", "matrices"}}``: source and target subwords (with ``</s>`` and
            ``<s>``), one float32 array of probabilities per module (queries x keys over those
            subwords), each head's role (fixed, gated, masked, learned), and the parse the
            model read (dependency arcs between 0-based words).

        Raises:
            SyntaxInputError: an empty or over-long sentence.
        """
        from synattn_trainer.explorer import (
            Loaded,
            head_roles,
            row_attention,
            row_syntax,
            text_corpus,
        )

        (row,) = self.rows([sentence])
        dep_rel = row.get("dep_rel")
        run = Loaded(self.net, self.config, self.tokenizer)
        with self.lock:
            corpus = text_corpus(run, row)
            arrays, src, tgt = row_attention(self.net, self.tokenizer, corpus, 0)
            roles = head_roles(self.net)
        modules: dict[str, np.ndarray] = dict(arrays)
        return {
            "sentence": sentence,
            "translation": corpus.refs[0],
            "tokens": {"source": src, "target": tgt},
            "modules": modules,
            "roles": roles,
            "syntax": row_syntax(corpus, 0, self.net, None if dep_rel is None else list(dep_rel)),
        }


def _device(device: str | torch.device | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def load(
    checkpoint: str | Path,
    device: str | torch.device | None = None,
    *,
    tokenizer: str | Path | None = None,
    ablate: Sequence[int] = (),
    max_chars: int | None = MAX_CHARS,
) -> Model:
    """Load a checkpoint (``averaged.pt``, ``best.pt`` or ``ckpt-*.pt``) with its vocabulary
    and the parser its training data was made with.

    Args:
        checkpoint: the model file.
        device: where to run (default: CUDA when available, else the CPU).
        tokenizer: the vocabulary (default: the one the config names).
        ablate: fixed-pattern heads to switch off (test-time ablation).
        max_chars: characters one sentence may have (None: no limit).

    Raises:
        BadFile: (a ``ValueError``) the checkpoint or the vocabulary is not one, named: a
            ``MissingFile``, also a ``FileNotFoundError``, when it does not exist.
        ParseMismatch: the recorded parser is not installed here, or differs (model or
            library version, constituency source, feature options); the message says which.
    """
    from synattn_trainer.checkpoint import checkpoint_file_error
    from synattn_trainer.loading import load_model
    from synattn_trainer.tokenizer import load_tokenizer

    path = Path(checkpoint)
    if (bad := checkpoint_file_error(path)) is not None:
        raise bad  # BadFile: a ValueError (MissingFile, also a FileNotFoundError)
    entry, raw_cfg = checkpoint_entries(path)
    record = parse_record(entry, (raw_cfg.get("data") or {}).get("train"), path)
    parser = cached_parser(record)  # before the weights: a refusal costs no model load
    dev = _device(device)
    net, cfg = load_model(path, dev)
    net.eval()
    if ablate:
        net.ablate_fixed_heads(ablate)
    tok = load_tokenizer(tokenizer or cfg.data.tokenizer)
    return Model(net, cfg, tok, record, parser, dev, max_chars)
