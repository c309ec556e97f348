"""Errors for bad input: each names the source, the sentence and the line it comes from; and
pydantic's validation errors as the one line a user reads."""

from __future__ import annotations

from collections.abc import Mapping
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
