"""Reading a user's text file (a corpus, trees, CoNLL-U, references) with every failure said in
one line that names it: a file that does not exist or is a folder, a ``.gz`` that is not gzip or
is cut short, and text that does not decode, with the number of the line that does not.

Text is UTF-8 unless a reader is told otherwise (``synattn parse --encoding latin-1``).
"""

from __future__ import annotations

import codecs
import gzip
import io
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from synattn_shared.errors import BadFile, file_error, not_text, os_problem, path_problem

ENCODING_FIX = "convert it to UTF-8 (iconv -f LATIN1 -t UTF-8 FILE > NEW)"


def check_encoding(encoding: str) -> str:
    """``encoding``'s Python name; ``ValueError`` for one Python does not know, or for a codec
    that is no text encoding (``rot13``, ``base64``, ``zlib``: files cannot be read in it)."""
    try:
        info = codecs.lookup(encoding)
    except (LookupError, ValueError, TypeError):
        info = None
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise ValueError(
            f"unknown text encoding {encoding!r}; use a Python codec name such as utf-8, "
            "latin-1 or cp1252"
        ) from None
    return info.name


def open_text(path: str | Path, encoding: str = "utf-8") -> io.TextIOBase:
    """A text file, gunzipped when it ends in ``.gz`` (strict decoding; read it inside
    ``reading`` for errors that name it)."""
    p = Path(path)
    if p.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding=encoding)
    return open(p, encoding=encoding)


def undecodable(path: str | Path, encoding: str = "utf-8", fix: str | None = None) -> BadFile:
    """The error of a file that does not decode as ``encoding``, at its first bad line (read
    again, in binary, to find it); ``fix``: what to do (default: convert it to UTF-8, or name
    the encoding a file not in UTF-8 is in)."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rb") as fh:
        bad = _first_bad_line(p, fh, encoding, fix, final=True)
    return bad or BadFile(p, f"not {encoding} text", fix or _encoding_fix(encoding))


def _first_bad_line(
    path: Path, lines: Iterable[bytes], encoding: str, fix: str | None, final: bool
) -> BadFile | None:
    """The error of the first of ``lines`` that does not decode (None: all do); ``final``:
    they are the whole file, so a character cut off at its end is an error too."""
    decoder = codecs.getincrementaldecoder(encoding)()
    number = 0
    try:
        for number, raw in enumerate(lines, 1):  # noqa: B007  (its number is the error's)
            decoder.decode(raw)
        if final:
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        problem = not_text(exc, encoding)
        return BadFile(path, problem, fix or _encoding_fix(encoding), line=number or None)
    return None


def _encoding_fix(encoding: str) -> str:
    if codecs.lookup(encoding).name == "utf-8":
        return ENCODING_FIX
    return "name the encoding it is written in"


@contextmanager
def reading(
    path: str | Path,
    encoding: str = "utf-8",
    fix: str | None = None,
    encoding_fix: str | None = None,
) -> Iterator[None]:
    """Errors of reading the text file ``path`` inside the block as one ``BadFile`` naming
    it: missing, a folder, unreadable, a broken gzip file (``fix`` says what to do), text
    that does not decode (``encoding_fix`` does; default: convert it to UTF-8)."""
    try:
        yield
    except UnicodeDecodeError:
        raise undecodable(path, encoding, encoding_fix) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise BadFile(path, f"not a whole gzip file ({why})", fix) from None
    except FileNotFoundError as exc:
        raise file_error(path, os_problem(exc), fix) from None
    except OSError as exc:
        raise BadFile(path, os_problem(exc), fix) from None


def read_text(path: str | Path, encoding: str = "utf-8", fix: str | None = None) -> str:
    """The whole text of a file (``.gz`` gunzipped), or ``BadFile`` naming it (with the
    line that does not decode)."""
    problem = path_problem(path)
    if problem is not None:
        raise file_error(path, problem, fix)
    with reading(path, encoding, fix), open_text(path, encoding) as fh:
        return fh.read()


def read_lines(path: str | Path, encoding: str = "utf-8", fix: str | None = None) -> list[str]:
    """The lines of a text file (``.gz`` gunzipped) without their line ends, or ``BadFile``
    naming it."""
    return [line.rstrip("\r\n") for line in read_text(path, encoding, fix).splitlines()]


def check_text_head(
    path: str | Path,
    encoding: str = "utf-8",
    limit: int = 1 << 20,
    fix: str | None = None,
    encoding_fix: str | None = None,
) -> None:
    """A quick look at a text file before work is queued on it: it is a file that opens (a
    ``.gz`` gunzips) and its first ``limit`` bytes decode as ``encoding``. ``BadFile`` names
    it, with the line that does not decode; the rest is read when the work runs."""
    problem = path_problem(path)
    if problem is not None:
        raise file_error(path, problem, fix)
    p = Path(path)
    with reading(p, encoding, fix, encoding_fix):
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rb") as fh:
            head = fh.read(limit)
    lines = head.splitlines(keepends=True)
    bad = _first_bad_line(p, lines, encoding, encoding_fix, final=len(head) < limit)
    if bad is not None:
        raise bad
