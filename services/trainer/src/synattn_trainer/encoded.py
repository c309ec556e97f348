"""Encoded splits: subword ids and syntax columns in one memory-mapped Arrow file per split.

Why: a trainer that keeps every pair as Python dicts and arrays pays about 8 KiB per pair, in
every DDP rank and every batch-building process, and re-encodes the corpus at each start: at
WMT'14's 4.5M pairs that is tens of GiB per process and minutes before the first update. Here a
split is encoded once (source and target subword ids, the source subword -> word map, and the
shard columns the variants read) into an uncompressed Arrow IPC file. Each process maps it:
its pages live in the page cache, shared by every process that maps the file, and private
memory holds only the per-pair lengths that batching needs (fairseq's ``MMapIndexedDataset``
and HF ``datasets`` make the same choice).

A cache is keyed by everything it was made from: the shards (every shard's file, rows and
SHA-256 from the manifest, and the manifest's fingerprint), the tokenizer (the SHA-256 of its
serialisation) and the source ``</s>`` setting. A key that does not match is never used: a
changed corpus or tokenizer gets a new cache, built with a message that says why, and the stale
one is removed. A shard whose size no longer matches its manifest is refused with a one-line
error. Builds are atomic (a temporary directory renamed into place) and serialised by a file
lock, so DDP ranks and concurrent jobs build a cache once and never read a half-written one.

Where caches live: ``$SYNATTN_CACHE_DIR`` when set; otherwise ``<shards>/encoded/`` when the
shard directory is writable, else ``$XDG_CACHE_HOME/synattn/encoded`` (``~/.cache``). A cache
already present beside the shards is used wherever it is.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from synattn_shared.atomic import atomic_dir
from synattn_shared.manifest import Manifest, load_manifest, write_json
from synattn_shared.schema import SHARD_SCHEMA
from synattn_shared.shards import ShardDataset
from synattn_trainer.tokenizer import encode_source, encode_target

FORMAT = 1  # bump on any change of the file's columns or their meaning
CHUNK_ROWS = 65536  # rows per record batch: row r is in batch r // CHUNK_ROWS
FILE_NAME = "pairs.arrow"
META_NAME = "meta.json"
CACHE_ENV = "SYNATTN_CACHE_DIR"
SYNTAX_COLUMNS = ("words", "dep_head", "upos", "syn_dist", "const_layer", "has_syntax", "tree")
ROW_COLUMNS = (*SYNTAX_COLUMNS, "tgt")  # what a row dict holds (``Corpus.rows``)
ID_COLUMNS = ("src_ids", "tgt_ids", "s2w")

Log = Callable[[str], None]
T = TypeVar("T")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class StaleShards(ValueError):
    """A shard file no longer matches the manifest it was listed in."""


def tokenizer_digest(tok: Tokenizer) -> str:
    """SHA-256 of the tokenizer's serialisation: two tokenizers that encode alike share it."""
    return hashlib.sha256(tok.to_str().encode()).hexdigest()


def cache_inputs(manifest: Manifest, tok_digest: str, source_eos: bool) -> dict[str, Any]:
    """Everything a cache depends on (its key is the hash of this, recorded in its meta)."""
    return {
        "format": FORMAT,
        "chunk_rows": CHUNK_ROWS,
        "dataset": manifest.fingerprint(),
        "shards": [[s.file, s.rows, s.sha256] for s in manifest.shards],
        "tokenizer_sha256": tok_digest,
        "source_eos": source_eos,
    }


def cache_key(inputs: dict[str, Any]) -> str:
    """A short, stable name for a cache made from ``inputs``."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def check_shard_sizes(shard_dir: Path, manifest: Manifest) -> None:
    """Refuse shards that changed after their manifest was written (a stat per shard; the full
    checksum is ``synattn_shared.shards.ShardDataset.verify``).

    Raises:
        StaleShards: a shard is missing or its size differs from the manifest's.
    """
    for s in manifest.shards:
        part = shard_dir / s.file
        size = part.stat().st_size if part.is_file() else None
        if size != s.bytes:
            found = "missing" if size is None else f"{size} bytes"
            raise StaleShards(
                f"{part}: {found}, its manifest says {s.bytes} bytes; the shards changed after "
                "they were written: re-run `synattn parse` (it resumes) before training"
            )


def _user_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "synattn" / "encoded"


def cache_roots(shard_dir: Path) -> list[Path]:
    """Where to look for a split's cache, in order; a new one is built in the first."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return [Path(env)]
    beside = shard_dir / "encoded"
    if os.access(shard_dir, os.W_OK):
        return [beside]
    return [_user_cache(), beside]


@dataclass(frozen=True)
class CacheInfo:
    """An encoded split on disk: its directory and what its meta records."""

    path: Path
    meta: dict[str, Any]

    @property
    def file(self) -> Path:
        return self.path / FILE_NAME


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta: dict[str, Any] = json.loads((path / META_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta


def _lists(seqs: Sequence[Sequence[int]]) -> pa.ListArray:
    """An Arrow ``list<int32>`` of integer sequences, built from flat numpy buffers."""
    lens = np.fromiter(map(len, seqs), np.int64, len(seqs))
    offsets = np.zeros(len(seqs) + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(seqs), np.int32, int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def file_schema() -> pa.Schema:
    """The columns of ``pairs.arrow``: the shard's row columns, then the encoded ids."""
    fields = [SHARD_SCHEMA.field(name) for name in ROW_COLUMNS]
    ids = [pa.field(name, pa.list_(pa.int32()), nullable=False) for name in ID_COLUMNS]
    return pa.schema([*fields, *ids], metadata={"synattn.encoded_format": str(FORMAT)})


def _encode(table: pa.Table, tok: Tokenizer, source_eos: bool) -> pa.RecordBatch:
    """One record batch of shard rows with their subword ids appended."""
    words = table.column("words").to_pylist()
    tgt = [t or "" for t in table.column("tgt").to_pylist()]
    src_ids, s2w = encode_source(tok, words, eos=source_eos)
    tgt_ids = encode_target(tok, tgt)
    cols = [table.column(name).combine_chunks() for name in ROW_COLUMNS]
    cols += [_lists(src_ids), _lists(tgt_ids), _lists(s2w)]
    return pa.RecordBatch.from_arrays(cols, schema=file_schema())


def _chunks(ds: ShardDataset) -> Iterator[pa.Table]:
    """The dataset's rows in tables of exactly ``CHUNK_ROWS`` (the last may be shorter)."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in ds.iter_batches(columns=list(ROW_COLUMNS), batch_size=8192):
        pending.append(batch)
        held += batch.num_rows
        while held >= CHUNK_ROWS:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, CHUNK_ROWS)
            rest = table.slice(CHUNK_ROWS)
            pending, held = rest.to_batches(), rest.num_rows
    if held:
        yield pa.Table.from_batches(pending)


def build_cache(
    shard_dir: Path, tok: Tokenizer, source_eos: bool, inputs: dict[str, Any], target: Path
) -> CacheInfo:
    """Encode a split into ``target`` (atomically: written beside it, then renamed)."""
    t0 = time.perf_counter()
    ds = ShardDataset(shard_dir)
    rows = 0
    first_missing_tgt: int | None = None
    with atomic_dir(target) as tmp:
        with pa.OSFile(str(tmp / FILE_NAME), "wb") as sink:
            with pa.ipc.new_file(sink, file_schema()) as writer:
                for table in _chunks(ds):
                    if first_missing_tgt is None and table.column("tgt").null_count:
                        nulls = table.column("tgt").is_null().to_numpy(zero_copy_only=False)
                        first_missing_tgt = rows + int(np.argmax(nulls))
                    writer.write_batch(_encode(table, tok, source_eos))
                    rows += table.num_rows
            sink.flush()
            os.fsync(sink.fileno())
        meta = {
            "key": target.name,
            "inputs": inputs,
            "shards": str(shard_dir.resolve()),
            "rows": rows,
            "first_missing_tgt": first_missing_tgt,
            "bytes": (tmp / FILE_NAME).stat().st_size,
            "build_seconds": round(time.perf_counter() - t0, 2),
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_json(tmp / META_NAME, meta)
    return CacheInfo(target, meta)


def _stale_siblings(root: Path, shard_dir: Path, key: str) -> list[Path]:
    """Caches in ``root`` made from the same shard directory under another key."""
    if not root.is_dir():
        return []
    here = str(shard_dir.resolve())
    out = []
    for d in root.iterdir():
        if d.is_dir() and d.name != key and not d.name.startswith("."):
            meta = _read_meta(d)
            if meta is not None and meta.get("shards") == here:
                out.append(d)
    return out


def _valid(path: Path, inputs: dict[str, Any]) -> CacheInfo | None:
    """The cache at ``path`` when it exists, is complete and was made from ``inputs``."""
    meta = _read_meta(path)
    if meta is None or meta.get("inputs") != inputs or not (path / FILE_NAME).is_file():
        return None
    return CacheInfo(path, meta)


def ensure_cache(
    shard_dir: str | Path, tok: Tokenizer, source_eos: bool = True, log: Log = _stderr
) -> CacheInfo:
    """The encoded cache of a split, built first when none matches the shards and tokenizer.

    Raises:
        StaleShards: a shard changed after its manifest was written.
        ValueError: the dataset is incomplete or of another schema version.
        PermissionError: no cache location is writable (set ``SYNATTN_CACHE_DIR``).
    """
    d = Path(shard_dir)
    manifest = load_manifest(d)
    check_shard_sizes(d, manifest)
    inputs = cache_inputs(manifest, tokenizer_digest(tok), source_eos)
    key = cache_key(inputs)
    roots = cache_roots(d)
    for root in roots:
        found = _valid(root / key, inputs)
        if found is not None:
            return found
    root = roots[0]
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PermissionError(
            f"{root}: cannot create the encoded-corpus cache ({exc.strerror}); "
            f"set {CACHE_ENV} to a writable directory"
        ) from None
    with open(root / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another rank or job may be building it now
        found = _valid(root / key, inputs)
        if found is not None:
            return found
        stale = _stale_siblings(root, d, key)
        why = (
            "its shards or tokenizer changed since the cache in "
            + ", ".join(p.name for p in stale)
            + " was built (removed)"
            if stale
            else "first use of these shards with this tokenizer"
        )
        log(f"{d}: encoding {manifest.rows} pairs into {root / key} ({why})")
        for leftover in root.glob(f".{key}.*.tmp"):  # a build that was killed (we hold the lock)
            shutil.rmtree(leftover, ignore_errors=True)
        for old in stale:
            shutil.rmtree(old, ignore_errors=True)
            (root / f".{old.name}.lock").unlink(missing_ok=True)
        info = build_cache(d, tok, source_eos, inputs, root / key)
        log(
            f"{d}: encoded in {info.meta['build_seconds']:.1f} s "
            f"({info.meta['bytes'] / 2**20:.1f} MiB)"
        )
        return info


class _View(Sequence[T]):
    """A read-only sequence over one column of a mapped corpus."""

    def __init__(self, corpus: MappedCorpus, get: Callable[[int], T]) -> None:
        self._corpus = corpus
        self._get = get

    def __len__(self) -> int:
        return len(self._corpus)

    @overload
    def __getitem__(self, k: int) -> T: ...
    @overload
    def __getitem__(self, k: slice) -> list[T]: ...
    def __getitem__(self, k: int | slice) -> T | list[T]:
        if isinstance(k, slice):
            return [self._get(i) for i in range(*k.indices(len(self)))]
        n = len(self)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError(f"row {k} outside [0, {n})")
        return self._get(k)

    def __iter__(self) -> Iterator[T]:
        return (self._get(i) for i in range(len(self)))


class MappedCorpus:
    """A split read from its memory-mapped cache: the same sequences as an in-memory
    ``Corpus`` (``src``, ``tgt``, ``s2w``, ``rows``, ``refs``, ``words``), built per access.

    Private memory holds the kept rows' index and their source and target lengths (12 bytes a
    pair); every byte of the pairs themselves is in the shared, mapped file.
    """

    def __init__(
        self, info: CacheInfo, max_len: int | None = None, limit: int | None = None
    ) -> None:
        self.info = info
        self._mmap = pa.memory_map(str(info.file), "r")
        reader = pa.ipc.open_file(self._mmap)
        self._batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self._row_batches = [b.select(list(ROW_COLUMNS)) for b in self._batches]
        self._ids: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for name in ID_COLUMNS:
            cols = [b.column(name) for b in self._batches]
            self._ids[name] = [
                (c.offsets.to_numpy(), c.values.to_numpy())
                for c in cols  # zero-copy views
            ]
        src = self._lengths("src_ids")
        tgt = self._lengths("tgt_ids")
        n = len(src) if limit is None else min(limit, len(src))
        keep: np.ndarray | None = None
        if max_len is not None:
            ok = (src[:n] <= max_len) & (tgt[:n] <= max_len)
            if not ok.all():
                keep = np.flatnonzero(ok).astype(np.int32 if n < 2**31 else np.int64)
        self._keep = keep
        self._src_len = src[:n] if keep is None else src[keep]
        self._tgt_len = tgt[:n] if keep is None else tgt[keep]
        self._n = len(self._src_len)
        self.src: Sequence[np.ndarray] = _View(self, lambda k: self._row_ids("src_ids", k))
        self.tgt: Sequence[np.ndarray] = _View(self, lambda k: self._row_ids("tgt_ids", k))
        self.s2w: Sequence[np.ndarray] = _View(self, lambda k: self._row_ids("s2w", k))
        self.rows: Sequence[dict[str, Any]] = _View(self, lambda k: self.take_rows([k])[0])
        self.refs: Sequence[str] = _View(self, lambda k: str(self._cell("tgt", k) or ""))
        self.words: Sequence[list[str]] = _View(self, lambda k: list(self._cell("words", k)))

    def __len__(self) -> int:
        return self._n

    def _lengths(self, name: str) -> np.ndarray:
        parts = [np.diff(off).astype(np.int32) for off, _ in self._ids[name]]
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)

    def _file_row(self, k: int) -> tuple[int, int]:
        r = int(self._keep[k]) if self._keep is not None else k
        return divmod(r, CHUNK_ROWS)

    def _locate(self, index: Sequence[int]) -> Iterator[tuple[int, int]]:
        """(record batch, row in it) of each of ``index``; IndexError for one out of range
        (a slice past a record batch's end would be empty, not an error)."""
        idx = np.asarray(index, dtype=np.int64)
        if len(idx) and (idx.min() < -self._n or idx.max() >= self._n):
            raise IndexError(f"row out of range for a split of {self._n:,} pairs")
        idx = idx % max(self._n, 1)
        rows = self._keep[idx].astype(np.int64) if self._keep is not None else idx
        chunk, local = np.divmod(rows, CHUNK_ROWS)
        return zip(chunk.tolist(), local.tolist(), strict=True)

    def _row_ids(self, name: str, k: int) -> np.ndarray:
        c, i = self._file_row(k)
        off, values = self._ids[name][c]
        return values[off[i] : off[i + 1]].astype(np.int64)

    def _cell(self, name: str, k: int) -> Any:
        c, i = self._file_row(k)
        return self._batches[c].column(name)[i].as_py()

    def src_lens(self) -> np.ndarray:
        """Source lengths in subwords (``</s>`` included when the split has it)."""
        return self._src_len

    def tgt_lens(self) -> np.ndarray:
        """Target lengths in subwords, ``<s>`` and ``</s>`` included."""
        return self._tgt_len

    def take_rows(self, index: Sequence[int]) -> list[dict[str, Any]]:
        """The row dicts (syntax columns and ``tgt``) of ``index``: one-row slices of the
        mapped record batches (zero-copy), joined into one small batch and converted at once.
        Its cost does not grow with the corpus: a batch of rows scattered over 4.5M pairs
        touches some 60 record batches, and a ``take`` per record batch cost 7 ms a batch
        there against 0.8 ms this way (an Arrow ``take`` over the whole chunked table
        concatenates every chunk first: 200 ms)."""
        parts = [self._row_batches[c].slice(i, 1) for c, i in self._locate(index)]
        if not parts:
            return []
        out: list[dict[str, Any]] = pa.concat_batches(parts).to_pylist()
        for rec in out:
            if rec["tgt"] is None:
                rec["tgt"] = ""
        return out

    def read_ahead(self, index: Sequence[int]) -> None:
        """Bring the pages of rows ``index`` (every column) into memory, and drop them: a
        hint, called from a background thread for a batch to come. Why: at 4.5M pairs a batch
        reads rows from all over a file of several GB, and pages the kernel evicted were read
        back from disk inside the update (some 1,300 major faults in 100 updates at WMT-like
        lengths: 52.7 ms to build a batch against 29.5 at 29k pairs; 30.5 ms read ahead).
        Arrow copies the rows with the GIL released, so those reads overlap the update that
        is running instead of stalling it."""
        parts = [self._batches[c].slice(i, 1) for c, i in self._locate(index)]
        if parts:
            pa.concat_batches(parts)
