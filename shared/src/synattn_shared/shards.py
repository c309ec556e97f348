"""Parquet shards: the only code that writes them, and the streaming/random-access reader.

A dataset directory holds ``part-NNNNN.parquet`` files, one ``part-NNNNN.json`` sidecar per
finished shard, and ``manifest.json``. Shard ``i`` holds rows ``[i*R, (i+1)*R)`` of the input.
Every file is written to a temporary name and renamed, so a killed writer leaves only whole
shards; a re-run skips shards whose sidecar and checksum are present and never duplicates rows.
Shards are independent units of work, so several processes (or Celery tasks) can write them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from synattn_shared.atomic import atomic_path
from synattn_shared.errors import BadFile, file_error, os_problem, path_problem
from synattn_shared.manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    load_manifest,
    sha256_file,
    write_json,
)
from synattn_shared.schema import SCHEMA_VERSION, SHARD_SCHEMA

ROW_GROUP_SIZE = 1024  # granularity of random access
SHARD_FIX = (
    "the shard is damaged or missing (a partial copy?): copy the folder again, or re-run the "
    "`synattn parse` or `synattn features` that made it into a new folder"
)


def shard_name(index: int) -> str:
    """File name of shard ``index``."""
    return f"part-{index:05d}.parquet"


def rows_to_table(rows: Sequence[dict[str, Any]], first_row: int) -> pa.Table:
    """Columnar Arrow table of shard rows (feature dicts from ``features.to_row``)."""
    cols: dict[str, list[Any]] = {name: [] for name in SHARD_SCHEMA.names}
    cols["row"] = list(range(first_row, first_row + len(rows)))
    for name in SHARD_SCHEMA.names[1:]:
        cols[name] = [r.get(name) for r in rows]
    return pa.table(cols, schema=SHARD_SCHEMA)


def shard_done(directory: str | Path, index: int) -> ShardInfo | None:
    """The finished shard ``index`` of a dataset directory, or None if it must be (re)written."""
    d = Path(directory)
    side = d / shard_name(index).replace(".parquet", ".json")
    part = d / shard_name(index)
    if not side.is_file() or not part.is_file():
        return None
    info = ShardInfo.model_validate_json(side.read_text(encoding="utf-8"))
    if info.bytes != part.stat().st_size or info.sha256 != sha256_file(part):
        return None
    return info


def write_shard_file(
    directory: str | Path, index: int, rows_per_shard: int, rows: Sequence[dict[str, Any]]
) -> ShardInfo:
    """Write shard ``index`` atomically and record it in its sidecar.

    Safe to call from any process (a pool worker, a Celery task): it touches only this shard's
    two files, each written to a temporary name, fsynced and renamed.
    """
    d = Path(directory)
    if not rows:
        raise ValueError(f"shard {index} has no rows")
    if len(rows) > rows_per_shard:
        raise ValueError(f"shard {index}: {len(rows)} rows > rows_per_shard")
    first = index * rows_per_shard
    table = rows_to_table(rows, first)
    part = d / shard_name(index)
    with atomic_path(part) as tmp:
        pq.write_table(
            table,
            tmp,
            compression="zstd",
            row_group_size=ROW_GROUP_SIZE,
            use_dictionary=["sent_id", "dep_rel", "upos", "xpos"],
            write_statistics=["row"],
        )
    info = ShardInfo(
        file=part.name,
        index=index,
        first_row=first,
        rows=len(rows),
        sha256=sha256_file(part),
        bytes=part.stat().st_size,
    )
    write_json(part.with_suffix(".json"), info.model_dump(mode="json"))
    return info


class ShardWriter:
    """Writes a dataset's shards and manifest atomically; resumes a run that stopped.

    Args:
        out_dir: dataset directory (created if missing).
        manifest: the dataset description; ``shards``/``rows``/``complete`` are filled in here.
        overwrite: discard an existing dataset that was made from other input or options.

    Raises:
        FileExistsError: the directory holds a different dataset and ``overwrite`` is False.
    """

    def __init__(self, out_dir: str | Path, manifest: Manifest, overwrite: bool = False) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.glob(".*.tmp"):
            stale.unlink()  # leftovers of a killed writer: never valid data
        existing = self.dir / MANIFEST_NAME
        if existing.is_file():
            old = load_manifest(self.dir)
            if old.fingerprint() != manifest.fingerprint():
                if not overwrite:
                    raise FileExistsError(
                        f"{self.dir} holds shards of another input or with other options; "
                        "choose a new --out or pass --overwrite"
                    )
                self._clear()
            else:
                manifest = manifest.model_copy(update={"created": old.created})
        self.manifest = manifest.model_copy(update={"complete": False})
        write_json(existing, self.manifest.model_dump(mode="json"))
        self.rows_per_shard = manifest.rows_per_shard

    def _clear(self) -> None:
        for pattern in ("part-*.parquet", "part-*.json", MANIFEST_NAME):
            for f in self.dir.glob(pattern):
                f.unlink()

    def done(self, index: int) -> ShardInfo | None:
        """The finished shard ``index``, or None if it must be (re)written."""
        return shard_done(self.dir, index)

    def write_shard(self, index: int, rows: Sequence[dict[str, Any]]) -> ShardInfo:
        """Write shard ``index`` (rows ``index*R ...``) atomically and record it in its sidecar."""
        return write_shard_file(self.dir, index, self.rows_per_shard, rows)

    def finalize(self, expected_rows: int | None = None) -> Manifest:
        """Collect the sidecars into ``manifest.json`` and mark the dataset complete.

        Raises:
            RuntimeError: a shard is missing (a gap) or the row count differs from ``expected``.
        """
        infos = []
        for side in sorted(self.dir.glob("part-*.json")):
            info = self.done(int(side.stem.split("-")[1]))
            if info is None:
                raise RuntimeError(f"{side.name}: shard is missing or does not match its checksum")
            infos.append(info)
        for k, info in enumerate(infos):
            if info.index != k:
                raise RuntimeError(f"shard {k} is missing (found {info.file} in its place)")
        rows = sum(i.rows for i in infos)
        if expected_rows is not None and rows != expected_rows:
            raise RuntimeError(f"shards hold {rows} rows, the input has {expected_rows}")
        syntax_rows = 0
        for info in infos:
            col = pq.read_table(self.dir / info.file, columns=["has_syntax"]).column(0)
            syntax_rows += int(pc.sum(col).as_py() or 0)
        self.manifest = self.manifest.model_copy(
            update={"shards": infos, "rows": rows, "syntax_rows": syntax_rows, "complete": True}
        )
        write_json(self.dir / MANIFEST_NAME, self.manifest.model_dump(mode="json"))
        return self.manifest


class ShardDataset:
    """Read-only view of a finished dataset: streaming batches and random access by row.

    Raises:
        BadFile: (a ``ValueError``) the folder is not a shard directory (``MissingFile``, a
            ``FileNotFoundError``, when it or its manifest does not exist), the dataset is
            incomplete or of another schema version; reading a shard that is damaged names it.
    """

    def __init__(self, directory: str | Path, verify: bool = False) -> None:
        self.dir = Path(directory)
        self.manifest = load_manifest(self.dir)
        if self.manifest.schema_version != SCHEMA_VERSION:
            raise BadFile(
                self.dir,
                f"schema version {self.manifest.schema_version}, this synattn reads "
                f"{SCHEMA_VERSION}",
                "re-run `synattn features`/`parse`",
            )
        if not self.manifest.complete:
            raise BadFile(self.dir, "dataset is incomplete", "re-run the command to resume")
        self._starts = [s.first_row for s in self.manifest.shards]
        self._files: dict[int, pq.ParquetFile] = {}
        self._groups: dict[int, list[int]] = {}
        self._cache: tuple[int, int, pa.Table] | None = None
        if verify:
            self.verify()

    def __len__(self) -> int:
        return self.manifest.rows

    def verify(self) -> None:
        """Check every shard against its checksum; ValueError names the first bad one."""
        for s in self.manifest.shards:
            if sha256_file(self.dir / s.file) != s.sha256:
                raise ValueError(f"{self.dir / s.file}: checksum mismatch")

    def check_files(self) -> None:
        """Every shard the manifest lists is a file of the size it records (a stat each, no
        read): ``BadFile`` names the first that is missing, a folder, or truncated."""
        for s in self.manifest.shards:
            path = self.dir / s.file
            problem = path_problem(path)
            if problem is None and (size := path.stat().st_size) != s.bytes:
                problem = (
                    f"is {size:,} bytes where the manifest records {s.bytes:,}: truncated or "
                    "changed since it was written"
                )
            if problem is not None:
                raise file_error(path, problem, SHARD_FIX)

    def iter_batches(
        self, columns: Sequence[str] | None = None, batch_size: int = 1024
    ) -> Iterator[pa.RecordBatch]:
        """Stream record batches in row order without loading whole shards."""
        for s in self.manifest.shards:
            batches = self._file(s.index).iter_batches(
                batch_size=batch_size, columns=list(columns) if columns else None
            )
            with self._reading(s.index):
                yield from batches

    def iter_rows(self, columns: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
        """Rows as dicts, streaming."""
        for batch in self.iter_batches(columns):
            yield from batch.to_pylist()

    @contextmanager
    def _reading(self, index: int) -> Iterator[None]:
        """Arrow's and the OS's errors of reading shard ``index`` as ``BadFile`` naming it."""
        path = self.dir / self.manifest.shards[index].file
        try:
            yield
        except OSError as exc:
            raise BadFile(path, os_problem(exc), SHARD_FIX) from None
        except pa.ArrowException as exc:
            why = " ".join(str(exc).split())[:200]
            raise BadFile(path, f"not a readable Parquet shard ({why})", SHARD_FIX) from None

    def _file(self, index: int) -> pq.ParquetFile:
        if index not in self._files:
            with self._reading(index):
                self._files[index] = pq.ParquetFile(self.dir / self.manifest.shards[index].file)
        return self._files[index]

    def __getitem__(self, row: int) -> dict[str, Any]:
        """Row ``row`` as a dict (reads only its row group)."""
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} outside [0, {len(self)})")
        k = bisect.bisect_right(self._starts, row) - 1
        offset = row - self._starts[k]
        if k not in self._groups:
            meta = self._file(k).metadata
            starts, acc = [], 0
            for g in range(meta.num_row_groups):
                starts.append(acc)
                acc += meta.row_group(g).num_rows
            self._groups[k] = starts
        group = bisect.bisect_right(self._groups[k], offset) - 1
        within = offset - self._groups[k][group]
        if self._cache is None or self._cache[:2] != (k, group):
            with self._reading(k):
                self._cache = (k, group, self._file(k).read_row_group(group))
        record: dict[str, Any] = self._cache[2].slice(within, 1).to_pylist()[0]
        return record
