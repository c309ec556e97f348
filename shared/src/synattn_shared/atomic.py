"""Atomic file writes: readers see the old content or the new, never a part, even after a crash.

The one helper every writer uses: write to a temporary file in the same folder, fsync it,
rename it over the target, then fsync the folder so the rename itself is durable.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or a new file in ``directory`` durable (a no-op where folders can't be
    opened, as on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that wants a file name (pyarrow, torch);
    on a clean exit it is fsynced and renamed onto ``path``, on an error it is removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


@contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory beside ``path`` to fill; on a clean exit it replaces ``path``
    (whatever was there is removed first) by one rename, on an error it is removed. The
    caller makes the files inside durable (``atomic_path`` does for its files)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)  # a process that maps a file in it keeps reading that file
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(target.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically and durably."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` to produce the file, then move it onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        write(tmp)
