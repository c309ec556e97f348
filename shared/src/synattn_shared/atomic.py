"""Atomic file writes: readers see the old content or the new, never a part, even after a crash.

The one helper every writer uses: write to a temporary file in the same folder, fsync it,
rename it over the target, then fsync the folder so the rename itself is durable.

The temporary file is created with mode 0666 and the temporary folder with 0777, each less
the process umask, as ``open()`` and ``mkdir`` create them (``mkstemp`` and ``mkdtemp`` make
0600 and 0700, and a rename keeps the mode): a container that runs as another user can read
a parser's shards and tokenizers as it reads any other tool's files.
"""

from __future__ import annotations

import os
import secrets
import shutil
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


def _create_beside(target: Path, create: Callable[[Path], object]) -> Path:
    """A new hidden ``.NAME.XXXXXXXX.tmp`` beside ``target``, made by ``create`` (which must
    fail with ``FileExistsError`` when the name is taken, as ``O_EXCL`` and ``mkdir`` do)."""
    for _ in range(100):
        tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            create(tmp)
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name beside {target}")


def _new_file(path: Path) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    os.close(os.open(path, flags, 0o666))  # the umask applies, as for open(path, "w")


def _new_dir(path: Path) -> None:
    path.mkdir(0o777)  # the umask applies, as for mkdir


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that wants a file name (pyarrow, torch);
    on a clean exit it is fsynced and renamed onto ``path``, on an error it is removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_beside(target, _new_file)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


@contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory beside ``path`` to fill; on a clean exit it replaces ``path``
    (whatever was there is removed first) by one rename, on an error it is removed. The
    caller makes the files inside durable (``atomic_path`` does for its files)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_beside(target, _new_dir)
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
