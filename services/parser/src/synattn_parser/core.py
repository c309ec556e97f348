"""Sentences -> shard rows, the one code path shared by the API, the batch CLI and the task."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np

from synattn_parser.backends import Parser, SentenceInput, parse_isolated
from synattn_shared.errors import SyntaxInputError
from synattn_shared.features import FeatureOptions, to_row, to_rows

RowOrError = dict[str, Any] | SyntaxInputError


def parse_to_rows(
    parser: Parser,
    items: Sequence[SentenceInput],
    ids: Sequence[str],
    options: FeatureOptions,
    max_tokens: int | None = None,
) -> list[RowOrError]:
    """Parse and compute each sentence's shard row; a bad sentence gets its error, alone.

    Args:
        parser: a loaded backend.
        items: raw strings or pretokenised word lists.
        ids: one ``sent_id`` per item.
        options: how constituency features are obtained.
        max_tokens: sentences with more words than this get an error instead of a row.
    """
    parsed = parse_isolated(parser, items, ids)
    out: list[Any] = list(parsed)  # records become rows (or errors) below
    ok = [k for k, r in enumerate(parsed) if not isinstance(r, SyntaxInputError)]
    if max_tokens is not None:
        for k in list(ok):
            rec = parsed[k]
            assert not isinstance(rec, SyntaxInputError)
            if rec.n > max_tokens:
                out[k] = SyntaxInputError(
                    f"{rec.n} tokens, the limit is {max_tokens}", sentence=ids[k]
                )
                ok.remove(k)
    records = [parsed[k] for k in ok]
    try:
        rows = to_rows(records, options)  # type: ignore[arg-type]
        for k, row in zip(ok, rows, strict=True):
            out[k] = row
    except SyntaxInputError:
        for k in ok:
            try:
                out[k] = to_row(parsed[k], options)  # type: ignore[arg-type]
            except SyntaxInputError as exc:
                out[k] = exc
    return out


ArrayFormat = Literal["compact", "dense"]


def encode_array(a: np.ndarray, fmt: ArrayFormat) -> Any:
    """JSON form of a feature array; non-finite values (``-inf`` biases) become null.

    ``dense``: nested lists. ``compact``: ``{"shape", "dtype", "data"}`` with row-major flat data.
    """
    if a.dtype.kind == "f":
        wide = a.astype(np.float64).round(6)  # float32 -> shortest decimal, not 0.5498340129...
        finite = np.isfinite(wide)
        values: Any = wide if finite.all() else np.where(finite, wide, cast(Any, None))
    else:
        values = a
    if fmt == "dense":
        return values.tolist()
    return {"shape": list(a.shape), "dtype": str(a.dtype), "data": values.reshape(-1).tolist()}
