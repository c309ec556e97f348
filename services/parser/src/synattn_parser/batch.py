"""Batch parsing of a corpus into shards: one shard is the unit of work (a process or a task).

``parse_corpus`` plans the shards, runs the unfinished ones in a process pool and writes the
manifest; ``run_shard_job`` parses one shard and is what a pool worker and the Celery task run.
A re-run skips shards whose checksum matches, so a killed run resumes without duplicating rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
from itertools import chain, islice
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from synattn_parser.backends import Parser, load_parser
from synattn_parser.core import parse_to_rows
from synattn_parser.settings import ParserSettings
from synattn_shared.errors import SyntaxInputError
from synattn_shared.features import FeatureOptions, to_row
from synattn_shared.manifest import Manifest, ParserInfo, ShardInfo, SourceInfo, sha256_file
from synattn_shared.records import SentenceRecord
from synattn_shared.shards import ShardWriter, shard_done, write_shard_file
from synattn_shared.textfile import ENCODING_FIX, check_encoding, open_text, reading

_PARSERS: dict[str, Parser] = {}  # one loaded model per process and configuration


class ShardJob(BaseModel):
    """Everything needed to (re)build one shard anywhere: JSON-serialisable for Celery."""

    model_config = ConfigDict(frozen=True)

    out_dir: str
    index: int
    rows_per_shard: int
    src: str
    tgt: str | None = None
    backend: str = "spacy"
    pretokenized: bool = False
    settings: dict[str, Any] = {}
    features: dict[str, Any] = {}
    lines: list[str] | None = None  # the shard's source lines, when the caller has them
    tgt_lines: list[str] | None = None
    encoding: str = "utf-8"  # of the src and tgt files


CORPUS_FIX = "give a text file of one sentence per line (.gz allowed)"
# a corpus that does not decode: convert it, or say what it is in
CORPUS_ENCODING_FIX = f"{ENCODING_FIX}, or name its encoding: synattn parse --encoding latin-1"


def read_lines(
    path: str | Path, start: int = 0, stop: int | None = None, encoding: str = "utf-8"
) -> list[str]:
    """Lines ``[start, stop)`` of a (gzipped) text file, without their newlines."""
    with reading(path, encoding, CORPUS_FIX, CORPUS_ENCODING_FIX), open_text(path, encoding) as fh:
        return [line.rstrip("\r\n") for line in islice(fh, start, stop)]


def count_lines(path: str | Path, encoding: str = "utf-8") -> int:
    """Number of lines of a (gzipped) text file; every line is decoded, so a file that is not
    text in ``encoding`` is refused here, before any parser loads (``BadFile`` with the
    number of its first bad line)."""
    with reading(path, encoding, CORPUS_FIX, CORPUS_ENCODING_FIX), open_text(path, encoding) as fh:
        return sum(1 for _ in fh)


def first_empty_line(path: str | Path, stop: int, encoding: str = "utf-8") -> int | None:
    """The 1-based number of the first blank line among the first ``stop``, or None.

    A corpus is checked this way before any parser loads, so bad input fails in the
    time it takes to read the file rather than the time it takes to load a model.
    """
    with reading(path, encoding, CORPUS_FIX, CORPUS_ENCODING_FIX), open_text(path, encoding) as fh:
        for k, line in enumerate(islice(fh, stop)):
            if not line.strip():
                return k + 1
    return None


def get_parser(backend: str, settings: ParserSettings) -> Parser:
    """The process's parser for this backend and configuration (loaded once)."""
    key = f"{backend}:{settings.model_dump_json()}"
    if key not in _PARSERS:
        _PARSERS[key] = load_parser(backend, settings)
    return _PARSERS[key]


def fallback_row(line: str, sent_id: str, row: int, options: FeatureOptions) -> dict[str, Any]:
    """The row of a sentence the parser failed on: whitespace words, no syntax
    (docs/papers/index.md, "Subwords, </s> and padding")."""
    rec = SentenceRecord(
        sent_id=sent_id, words=tuple(line.split()), pretokenized=True, line=row + 1
    )
    return to_row(rec, options)


def parse_lines(
    parser: Parser,
    lines: list[str],
    first_row: int,
    pretokenized: bool,
    options: FeatureOptions,
    tgt_lines: list[str] | None = None,
    source: str = "<input>",
) -> tuple[list[dict[str, Any]], int]:
    """Shard rows of consecutive input lines; returns the rows and how many fell back.

    Raises:
        SyntaxInputError: an empty line (it has no words to align a parse with), located.
    """
    for k, line in enumerate(lines):
        if not line.strip():
            raise SyntaxInputError(
                "empty line; remove it from both sides of the corpus",
                source=source,
                line=first_row + k + 1,
            )
    items: list[Any] = [line.split() for line in lines] if pretokenized else lines
    ids = [str(first_row + k) for k in range(len(lines))]
    results = parse_to_rows(parser, items, ids, options)
    rows: list[dict[str, Any]] = []
    failed = 0
    for k, r in enumerate(results):
        if isinstance(r, SyntaxInputError):
            failed += 1
            r = fallback_row(lines[k], ids[k], first_row + k, options)
        r["line"] = first_row + k + 1
        r["tgt"] = None if tgt_lines is None else tgt_lines[k]
        rows.append(r)
    return rows, failed


def run_shard_job(job: ShardJob) -> ShardInfo:
    """Parse and write one shard (or return it when it is already written and intact)."""
    done = shard_done(job.out_dir, job.index)
    if done is not None:
        return done
    start = job.index * job.rows_per_shard
    stop = start + job.rows_per_shard
    lines = job.lines
    if lines is None:
        lines = read_lines(job.src, start, stop, job.encoding)
    tgts = job.tgt_lines
    if tgts is None and job.tgt is not None:
        tgts = read_lines(job.tgt, start, stop, job.encoding)
    settings = ParserSettings(**job.settings)
    parser = get_parser(job.backend, settings)
    options = FeatureOptions(**job.features)
    rows, _ = parse_lines(parser, lines, start, job.pretokenized, options, tgts, source=job.src)
    return write_shard_file(job.out_dir, job.index, job.rows_per_shard, rows)


def run_shard_payload(job: dict[str, Any]) -> dict[str, Any]:
    """``run_shard_job`` over JSON: the body of the Celery shard tasks."""
    return run_shard_job(ShardJob.model_validate(job)).model_dump(mode="json")


def _chunks(path: str | Path, size: int, encoding: str = "utf-8") -> Iterator[list[str]]:
    with reading(path, encoding, CORPUS_FIX, CORPUS_ENCODING_FIX), open_text(path, encoding) as fh:
        while chunk := [line.rstrip("\r\n") for line in islice(fh, size)]:
            yield chunk


def plan_manifest(
    src: Path,
    tgt: Path | None,
    out_name: str,
    info: ParserInfo,
    options: FeatureOptions,
    rows_per_shard: int,
) -> Manifest:
    """The manifest of a parse run (its fingerprint decides whether a re-run may resume)."""
    return Manifest(
        dataset=out_name,
        source=SourceInfo(
            path=str(src),
            sha256=sha256_file(src),
            tgt_path=None if tgt is None else str(tgt),
            tgt_sha256=None if tgt is None else sha256_file(tgt),
        ),
        parser=info,
        features=options.model_dump(),
        rows_per_shard=rows_per_shard,
    )


def parse_corpus(
    src: Path,
    out: Path,
    *,
    tgt: Path | None = None,
    backend: str = "spacy",
    settings: ParserSettings | None = None,
    workers: int = 1,
    rows_per_shard: int = 10_000,
    pretokenized: bool = False,
    overwrite: bool = False,
    limit: int | None = None,
    on_shard: Callable[[ShardInfo, bool], None] | None = None,
    encoding: str = "utf-8",
    on_start: Callable[[int], None] | None = None,
) -> Manifest:
    """Parse a corpus (one sentence per line) into a shard directory, resumably.

    Args:
        src: source sentences (``.gz`` allowed).
        out: dataset directory.
        tgt: optional target side, stored per row for training (same number of lines).
        backend: parser backend name.
        settings: parser settings (model names, scheme).
        workers: processes; each loads its own model once.
        rows_per_shard: sentences per shard.
        pretokenized: split lines on whitespace and keep exactly those tokens.
        overwrite: replace a directory made from other input or options.
        limit: parse only the first ``limit`` lines (a different dataset from the full one).
        on_shard: progress callback ``(shard, skipped)``.
        on_start: called with the sentences to parse once the input is checked, before the
            parser loads (a progress display's first line).
        encoding: of ``src`` and ``tgt`` (a dataset of its own: recorded in the manifest's
            ``features`` when it is not UTF-8).

    Raises:
        SyntaxInputError: bad input (located); FileExistsError: ``out`` holds another dataset;
        BadFile: a file that cannot be read, or is not text in ``encoding`` (with the number
            of its first line that is not), named.
    """
    cfg = settings or ParserSettings()
    options = FeatureOptions(derived_scheme=cfg.derived_scheme)
    encoding = check_encoding(encoding)
    n_src = count_lines(src, encoding)
    if tgt is not None and (n_tgt := count_lines(tgt, encoding)) != n_src:
        raise SyntaxInputError(
            f"{n_src} source lines but {n_tgt} target lines in {tgt}", source=str(src)
        )
    total = n_src if limit is None else min(limit, n_src)
    if total == 0:
        raise SyntaxInputError("no sentences", source=str(src))
    if (empty := first_empty_line(src, total, encoding)) is not None:  # before the model loads
        raise SyntaxInputError(
            "empty line; remove it from both sides of the corpus", source=str(src), line=empty
        )
    if on_start is not None:
        on_start(total)
    parser = get_parser(backend, cfg)
    info = parser.info.model_copy()
    manifest = plan_manifest(src, tgt, out.name, info, options, rows_per_shard)
    if limit is not None:
        manifest.features = {**manifest.features, "limit": total}
    if encoding != "utf-8":  # other text from the same bytes: another dataset
        manifest.features = {**manifest.features, "encoding": encoding}
    writer = ShardWriter(out, manifest, overwrite=overwrite)
    n_shards = (total + rows_per_shard - 1) // rows_per_shard
    base = dict(
        out_dir=str(out),
        rows_per_shard=rows_per_shard,
        src=str(src),
        tgt=None if tgt is None else str(tgt),
        backend=backend,
        pretokenized=pretokenized,
        settings=cfg.model_dump(),
        features=options.model_dump(),
        encoding=encoding,
    )

    def pending() -> Iterator[ShardJob]:
        """The shards still to parse, read from the input one shard at a time."""
        tgt_chunks = _chunks(tgt, rows_per_shard, encoding) if tgt is not None else None
        for index, lines in enumerate(_chunks(src, rows_per_shard, encoding)):
            if index >= n_shards:
                break
            tgt_lines = next(tgt_chunks) if tgt_chunks is not None else None
            if index == n_shards - 1 and total % rows_per_shard:
                keep = total - index * rows_per_shard
                lines = lines[:keep]
                tgt_lines = None if tgt_lines is None else tgt_lines[:keep]
            done = writer.done(index)
            if done is not None:
                if on_shard is not None:
                    on_shard(done, True)
                continue
            yield ShardJob(index=index, lines=lines, tgt_lines=tgt_lines, **base)

    def report(shard: ShardInfo) -> None:
        if on_shard is not None:
            on_shard(shard, False)

    jobs = pending()
    first = list(islice(jobs, 2))
    if workers <= 1 or len(first) <= 1:
        for job in chain(first, jobs):
            report(run_shard_job(job))
    else:
        # At most two shards per worker are read and queued ahead, so memory stays flat
        # however long the corpus is (every job carries its shard's lines).
        ctx = get_context("forkserver" if os.name == "posix" else "spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            inflight: set[Future[ShardInfo]] = set()
            for job in chain(first, jobs):
                if len(inflight) >= 2 * workers:
                    finished, inflight = wait(inflight, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        report(fut.result())
                inflight.add(pool.submit(run_shard_job, job))
            for fut in as_completed(inflight):
                report(fut.result())
    return writer.finalize(expected_rows=total)
