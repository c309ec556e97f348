"""Nothing in the repository points to a file outside it.

The methods were first specified in documents that a clone does not carry, and the five papers
were once called by internal numbers. Both now live in the repository: docs/papers/ has a page per
paper, with the decisions synattn took in reading it. A reference to a spec section ("METHODS-heads
§2", "DECISIONS §7", a bare "(§3.1)"), to ``../shared/docs`` or to a paper by number ("seed 003")
is a pointer a user cannot follow, so none may come back.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()

OUTSIDE = re.compile(
    r"METHODS-(?:syntax|heads)"  # the two method specs, with or without a section
    r"|METHODS(?:\.md)?\s*§"
    r"|METHODS decisions"
    r"|DECISIONS(?:\.md)?\s*§"
    r"|DECISIONS\.md"
    r"|shared/docs"
    r"|\b[Ss]eeds? 00[0-4x]\b"  # "seed 003", "seeds 000/001", "Seed 00x"
    r"|\bseed00[0-4x]"  # the old experiment file names
    r"|\(§\d"  # a bare section of a spec: "(§3.1)"
    r"|^[ \t]*#[ \t]*§\d",  # a comment that starts with one: "# §4.7: ..."
    re.MULTILINE,
)
"""What a reference outside the repository looks like. A paper's own section ("the paper's
§4.5", "RFC 9110 §12.5.1") is no such reference."""

GENERATED = re.compile(r"^results/.+\.(?:jsonl|json|txt)$")
"""Measured data that scripts write (run records, reports, logs): not prose anyone edits."""


def tracked_files() -> list[str]:
    """Every file ``git ls-files`` lists, less generated results and this test."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode("utf-8")
    return [p for p in out.split("\0") if p and p != SELF and not GENERATED.match(p)]


def outside_references(text: str) -> list[tuple[int, str]]:
    """``(line, match)`` for every reference to a file outside the repository in ``text``."""
    return [(text.count("\n", 0, m.start()) + 1, m.group()) for m in OUTSIDE.finditer(text)]


def test_the_pattern_finds_what_it_must_and_nothing_else() -> None:
    found = [
        "see METHODS-syntax §3.1",
        "(METHODS-heads §6.3)",
        "defaults: METHODS decisions",
        "(METHODS §10.11: results depend on it)",
        "widen train.average_window (DECISIONS §7)",
        "their presets set false (DECISIONS.md §1)",
        "the precise formulas live in ../shared/docs/METHODS-*.md",
        "as seed 003 reported",
        "Seed 000's source",
        "seeds 000/001 (OpenNMT)",
        "examples/experiments/seed004-diversity.yaml",
        "over clipped RP (§4.4).",
        "    # §4.7: Bush 3, held 3",
    ]
    for text in found:
        assert outside_references(text), text
    kept = [
        "Pre-warm-up (the paper's §4.5)",
        "media range, RFC 9110 §12.5.1",
        "the run seed 1, seeds [1, 2, 3], seed 12345",
        "paths to ../shared/data",
        "(docs/papers/gated-slr.md, 'Syntactic distance')",
        'app.add_api_route("/", root, methods=["GET"])',
    ]
    for text in kept:
        assert not outside_references(text), text


def test_no_tracked_file_refers_outside_the_repository() -> None:
    offenders: list[str] = []
    for rel in tracked_files():
        path = REPO / rel
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary
            continue
        text = data.decode("utf-8", errors="replace")
        offenders += [f"{rel}:{line}: {match!r}" for line, match in outside_references(text)]
    assert not offenders, (
        f"{len(offenders)} references to files outside the repository (name the paper, and "
        "point to its page, e.g. (docs/papers/gated-slr.md, 'Syntactic distance')):\n"
        + "\n".join(offenders[:60])
    )


def test_no_tracked_file_is_named_by_a_paper_number() -> None:
    named = [rel for rel in tracked_files() if re.search(r"seed00[0-4x]", rel)]
    assert not named, f"files named by internal paper numbers: {named}"
