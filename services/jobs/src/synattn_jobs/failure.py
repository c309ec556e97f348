"""Why a job failed, in one line, and the record that keeps the rest.

A failed job's ``error`` starts with its cause on one line (``failure_text``): the message of
a refusal (a bad file, a bad configuration: ``BadFile``, ``BadJobSpec``, pydantic's first
error), or ``Type: message`` of anything else followed by its traceback; a multi-process job's
names the rank that failed first. ``cause`` reads that line back, and the older records that
were a bare traceback by their last line, so ``synattn watch``, ``synattn jobs`` and the
dashboard (``static/dashboard.js``: ``causeOf``, the same rule) show one line, while the job
record keeps the traceback.
"""

from __future__ import annotations

import traceback

from synattn_shared.errors import one_line

MAX_ERROR = 4000  # characters a job record keeps of an error
MAX_CAUSE = 600  # characters of the cause line


class Described(RuntimeError):
    """A failure whose message is already the record: its first line the cause, then what
    else there is to know (``synattn_jobs.ddp.RankFailed``: each rank's error, torchrun's
    log); no Python traceback of the process that saw it is added."""


def _refusal(exc: BaseException) -> bool:
    """An error whose message is the whole story: bad input, said by its own line."""
    from pydantic import ValidationError

    from synattn_jobs.errors import BadJobSpec
    from synattn_shared.errors import BadFile, SyntaxInputError

    return isinstance(exc, BadFile | BadJobSpec | SyntaxInputError | ValidationError)


def cause_line(exc: BaseException) -> str:
    """The one line that says why ``exc`` ended a job."""
    if isinstance(exc, Described):
        return cause(str(exc)) or type(exc).__name__
    said = one_line(exc)
    line = said if _refusal(exc) else f"{type(exc).__name__}: {said}".rstrip(": ")
    return line[:MAX_CAUSE]


def failure_text(exc: BaseException, with_traceback: bool | None = None) -> str:
    """A failed job's ``error``: the cause line, then (for an unexpected error, or when
    ``with_traceback``) a blank line and the traceback's end, at most ``MAX_ERROR``
    characters in all."""
    if isinstance(exc, Described) and not with_traceback:
        return str(exc)[:MAX_ERROR]
    first = cause_line(exc)
    if with_traceback is None:
        with_traceback = not _refusal(exc)
    if not with_traceback:
        return first
    tb = "".join(traceback.format_exception(exc))
    room = MAX_ERROR - len(first) - 2
    return f"{first}\n\n{tb[-room:]}"


def cause(error: str | None) -> str | None:
    """The one line of a job's ``error``: its first line, or the last line of a record that
    is a bare (possibly cut) traceback, as records were before causes came first."""
    if not error:
        return None
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return None
    first = lines[0]
    traceback_first = (
        first.startswith(("Traceback", " ", "\t"))
        or 'File "' in first
        or '", line ' in first  # a traceback cut inside its first frame
        or first.lstrip().startswith("^")
    )
    line = lines[-1] if traceback_first else first
    return " ".join(line.split())[:MAX_CAUSE]
