"""Commit a study's runs as they land (``synattn study run --commit-results``).

A study's run takes hours and a session can be cut off at any moment: a run published into
``results/<name>/`` but not committed survives only if the next checkout happens to keep the
working tree. With ``--commit-results`` the driver commits each landing itself: the study's
folder and, in synattn's own repository, the pages ``synattn study claims`` fills from it
(``docs/study.md``, ``README.md``, ``docs/papers/``), regenerated first. It commits only those
paths (whatever else is staged stays staged and uncommitted), never a file over
``MAX_BYTES`` (a file once committed is paid by every clone forever; a checkpoint never lies
under ``results/``, and this is the guard should one ever be written there: that file is left
out and named, the rest of the landing committed), and a commit
that fails (a lock held by another git command, a hook that refuses) is said and tried again
at the next landing: the study goes on either way.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MAX_BYTES = 2_000_000  # the repository's limit for one committed file


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git`` in ``repo``; paths are taken literally (a run's name may hold any character)."""
    return subprocess.run(
        ["git", "--literal-pathspecs", *args], cwd=repo, capture_output=True, text=True
    )


def work_tree(repo: Path) -> Path | None:
    """The top of the git work tree ``repo`` lies in; None outside one."""
    probe = git(repo, "rev-parse", "--show-toplevel")
    return Path(probe.stdout.strip()).resolve() if probe.returncode == 0 else None


def problem(repo: Path, results: Path) -> str | None:
    """Why ``--commit-results`` cannot commit ``results`` from ``repo``, or None: the folder
    must lie inside the git work tree ``repo`` lies in."""
    top = work_tree(repo)
    if top is None:
        return f"{repo} is not in a git checkout"
    if not results.resolve().is_relative_to(top):
        return f"{results} lies outside the git checkout {top}"
    return None


def landed_message(landed: Sequence[dict[str, Any]], finished: int, planned: int) -> str:
    """The commit's subject: each run that landed with its BLEU on its row's final model, and
    how far the study is (``landed``: ``run.json``'s rows of those runs)."""
    parts = []
    for run in landed:
        bleu = run.get("bleu")
        score = f"{bleu:.2f}" if isinstance(bleu, int | float) else "no BLEU"
        parts.append(f"{run['name']} ({score}, {run.get('selection') or 'its final model'})")
    return (f"Study: {', '.join(parts)} landed: {finished} of {planned} runs (committed by "
            "synattn study run --commit-results)")  # fmt: skip


def commit_paths(repo: Path, paths: Sequence[Path], message: str) -> tuple[bool, str]:
    """Commit ``paths`` (files or folders, new files included) alone, with ``message``.
    Returns whether the paths now stand committed (False: try again later) and what happened,
    in one line. Nothing else staged is taken, and a file over ``MAX_BYTES`` is left out
    (unstaged again, and named) while the rest of the paths are committed."""
    top = work_tree(repo)
    if top is None:
        return False, f"not committed: {repo} is not in a git checkout"
    names = [str(p.resolve().relative_to(top)) for p in paths if p.exists()]
    if not names:
        return True, "nothing to commit: none of the paths exists"
    added = git(top, "add", "--", *names)
    if added.returncode != 0:
        return False, f"not committed: git add failed ({added.stderr.strip()})"
    staged = git(top, "diff", "--cached", "--no-renames", "--name-only", "-z", "--", *names)
    files = [f for f in staged.stdout.split("\0") if f]
    if not files:
        return True, "nothing to commit: the results are as committed"
    big = [f for f in files if (top / f).is_file() and (top / f).stat().st_size > MAX_BYTES]
    left_out = ""
    if big:  # the rest of the landing is committed; only the oversized files stay out
        git(top, "reset", "-q", "--", *big)
        oversize = f"{', '.join(big)}: over {MAX_BYTES / 1e6:.0f} MB (every clone would pay for it"
        if git(top, "ls-files", "-z", "--", *big).stdout:  # committed before: --only takes it
            git(top, "reset", "-q", "--", *names)
            return False, f"not committed: {oversize} forever); commit the rest by hand"
        left_out = f"; left out {oversize} forever), move it out of the results"
        if len(big) == len(files):
            return False, f"not committed{left_out}"
    # --only with the folders: a deletion is committed too, an untracked file is not
    done = git(top, "commit", "-q", "-m", message, "--only", "--", *names)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return False, f"not committed: git commit failed ({why[-1] if why else 'no reason'})"
    head = git(top, "rev-parse", "--short", "HEAD").stdout.strip()
    return True, f"committed {head}: {len(files) - len(big)} file(s){left_out}"
