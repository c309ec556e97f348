"""Errors for bad input: each names the source, the sentence and the line it comes from."""

from __future__ import annotations


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
