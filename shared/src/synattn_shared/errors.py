"""Errors for bad input: each names the source, the sentence and the line it comes from; and
pydantic's validation errors as the one line a user reads."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# what pydantic puts before the message of a ValueError or an assert raised in a validator
PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


class SyntaxInputError(ValueError):
    """A sentence or file that cannot be turned into a valid record.

    The message always starts with ``source:line: sentence <id>:`` when those are known, so a user
    can jump straight to the offending sentence.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str | None = None,
        line: int | None = None,
        sentence: str | int | None = None,
    ) -> None:
        self.reason = reason
        self.source = source
        self.line = line
        self.sentence = sentence
        super().__init__(self._format())

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Pickle with every field (errors cross process boundaries in pools and the API)."""
        return (_rebuild, (self.reason, self.source, self.line, self.sentence))

    def _format(self) -> str:
        where = []
        if self.source is not None:
            where.append(self.source if self.line is None else f"{self.source}:{self.line}")
        elif self.line is not None:
            where.append(f"line {self.line}")
        if self.sentence is not None:
            where.append(f"sentence {self.sentence}")
        prefix = ": ".join(where)
        return f"{prefix}: {self.reason}" if prefix else self.reason

    def located(
        self,
        *,
        source: str | None = None,
        line: int | None = None,
        sentence: str | int | None = None,
    ) -> SyntaxInputError:
        """Return a copy that fills in location fields this error does not know yet."""
        return SyntaxInputError(
            self.reason,
            source=self.source if self.source is not None else source,
            line=self.line if self.line is not None else line,
            sentence=self.sentence if self.sentence is not None else sentence,
        )


def _rebuild(
    reason: str, source: str | None, line: int | None, sentence: str | int | None
) -> SyntaxInputError:
    return SyntaxInputError(reason, source=source, line=line, sentence=sentence)


def validation_reason(msg: str) -> str:
    """pydantic's message without the ``Value error, `` (or ``Assertion failed, ``) it puts
    before the text of an error raised in a validator."""
    for prefix in PYDANTIC_PREFIXES:
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def validation_line(error: Mapping[str, Any]) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as ``a.b.0: reason``, or
    the reason alone when the error has no location (a model validator's): empty location
    parts are left out, so the line never starts with ``: ``."""
    loc = ".".join(str(x) for x in error.get("loc", ()) if str(x) != "")
    reason = validation_reason(str(error.get("msg", "invalid")))
    return f"{loc}: {reason}" if loc else reason


def one_line(exc: BaseException) -> str:
    """An error as the one line a CLI or an API prints: a pydantic ``ValidationError``'s first
    error (``validation_line``, with how many more there are), any other error's message with
    its whitespace folded."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        items = errors()
        if isinstance(items, list) and items and isinstance(items[0], Mapping):
            more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
            return validation_line(items[0]) + more
    return " ".join(str(exc).split())


class BadFile(ValueError):
    """A file (or folder) a user named that cannot be read as what it should be.

    The message is one line: ``[key: ]path[:line]: what is wrong[; what to do]``. ``key`` is
    the setting or option that named the file (``data.tokenizer``, ``--checkpoint``) when it
    is known. Every reader of user files (tokenizers, checkpoints, shards, manifests, corpora,
    trees, configs) turns its library's errors into this, so a command prints one line and an
    API answers 4xx with it; it is a ``ValueError``, which callers already refuse.
    """

    def __init__(
        self,
        path: str | Path,
        problem: str,
        fix: str | None = None,
        *,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.path = str(path)
        self.problem = problem
        self.fix = fix
        self.key = key
        self.line = line
        super().__init__(self._format())

    def __reduce__(self) -> tuple[object, tuple[object, ...], dict[str, object]]:
        """Pickle with every field (errors cross process boundaries in pools and queues)."""
        state: dict[str, object] = {"key": self.key, "line": self.line}
        return (type(self), (self.path, self.problem, self.fix), state)

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        self.__dict__.update(state or {})
        self.args = (self._format(),)

    def _format(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        text = f"{where}: {self.problem}" + (f"; {self.fix}" if self.fix else "")
        text = " ".join(text.split())
        return f"{self.key}: {text}" if self.key else text

    def keyed(self, key: str, fix: str | None = None) -> BadFile:
        """The same error said of the setting ``key`` (and with ``fix`` when it has none)."""
        return type(self)(self.path, self.problem, self.fix or fix, key=key, line=self.line)


class MissingFile(BadFile, FileNotFoundError):
    """A ``BadFile`` that does not exist; callers that catch ``FileNotFoundError`` still do."""


def file_error(
    path: str | Path, problem: str, fix: str | None = None, *, key: str | None = None
) -> BadFile:
    """``BadFile`` for ``problem`` (from ``path_problem``), a ``MissingFile`` when the path
    does not exist."""
    cls = MissingFile if problem.startswith("does not exist") else BadFile
    return cls(path, problem, fix, key=key)


def first_sentence(text: str) -> str:
    """A library's message up to the end of its first sentence (torch adds advice that is not
    the user's to act on: "This is an internal miniz error. If you are seeing ...")."""
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def os_problem(exc: OSError) -> str:
    """What an ``OSError`` of opening or reading a file means, in words (no errno, no path)."""
    if isinstance(exc, FileNotFoundError):
        return "does not exist"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(exc, NotADirectoryError):
        return "a part of this path is a file, not a directory"
    if isinstance(exc, PermissionError):
        return "cannot be read: permission denied"
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"cannot be read: {reason}"


def path_problem(path: str | Path, kind: str = "file") -> str | None:
    """Why ``path`` is not a readable ``kind`` (``file`` or ``directory``), or None when it
    is one: it does not exist, it is the other kind, or it cannot be read."""
    import os

    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "does not exist (a part of this path is a file, not a directory)"
    except OSError as exc:
        return os_problem(exc)
    import stat

    if kind == "directory":
        if not stat.S_ISDIR(st.st_mode):
            return "is a file, not a directory"
        if not os.access(p, os.R_OK | os.X_OK):
            return "cannot be read: permission denied"
        return None
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    if not os.access(p, os.R_OK):
        return "cannot be read: permission denied"
    return None


def not_text(exc: UnicodeDecodeError, encoding: str = "utf-8", line: bool = True) -> str:
    """The problem of bytes that do not decode: which byte and where (its column when
    ``exc`` came from decoding one line, else its offset in the file)."""
    byte = exc.object[exc.start : exc.start + 1]
    shown = f"byte 0x{byte[0]:02x}" if byte else "a byte"
    where = f"column {exc.start + 1}" if line else f"offset {exc.start}"
    name = "UTF-8" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    return f"not {name} text ({shown} at {where})"
