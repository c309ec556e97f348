"""Records -> shard rows -> shard directory, resumable shard by shard."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from synattn_shared.features import FeatureOptions, to_rows
from synattn_shared.manifest import Manifest
from synattn_shared.records import SentenceRecord
from synattn_shared.shards import ShardWriter

T = TypeVar("T")


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last may be shorter)."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def build_dataset(
    records: Iterable[SentenceRecord],
    out_dir: str | Path,
    manifest: Manifest,
    options: FeatureOptions,
    overwrite: bool = False,
    on_shard: Callable[[int, int, bool], None] | None = None,
) -> Manifest:
    """Compute every row's features and write the shards; finished shards are skipped.

    Args:
        records: the input, in a deterministic order (a re-run must see the same order).
        out_dir: dataset directory.
        manifest: dataset description (source hash, parser, feature options).
        options: how constituency features are obtained.
        overwrite: replace a directory made from other input or options.
        on_shard: progress callback ``(shard_index, rows, skipped)``.

    Returns:
        The final manifest.
    """
    writer = ShardWriter(out_dir, manifest, overwrite=overwrite)
    total = 0
    for index, chunk in enumerate(chunked(records, writer.rows_per_shard)):
        total += len(chunk)
        skipped = writer.done(index) is not None
        if not skipped:
            writer.write_shard(index, to_rows(chunk, options))
        if on_shard is not None:
            on_shard(index, len(chunk), skipped)
    return writer.finalize(expected_rows=total)
