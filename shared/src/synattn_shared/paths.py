"""Confinement of every path that comes from a user: one function, used by every service.

A user names files (configs, corpora, output folders, artifacts) and names things that become
path components (jobs, experiments, variants, grid values). Both are checked here: names are
slugs or refused; paths are resolved (symlinks followed) and must then lie inside their root.
Anything odd (a NUL byte, an over-long path, a symlink loop) is an ``UnsafePath`` with a
message, never an ``OSError`` from deep inside ``pathlib``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

SLUG_MAX = 100
# "+" is allowed because preset names combine methods ("rhe+dea"); it means nothing to a path
_SLUG = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")
# the same rule with the length bound, for request schemas (pydantic ``pattern``) and routes
SLUG_PATTERN = rf"[A-Za-z0-9_+-][A-Za-z0-9._+-]{{0,{SLUG_MAX - 1}}}"
PATH_MAX = 4096  # Linux PATH_MAX: longer paths cannot be opened anyway
NAME_MAX = 255  # bytes of one path component on every common file system


class UnsafePath(ValueError):
    """A user-given path or name that is refused (the message says why; safe to show)."""


def slug(name: object, what: str = "name", max_len: int = SLUG_MAX) -> str:
    """``name`` when it is a safe path component: ``[A-Za-z0-9._+-]``, no leading dot, at most
    ``max_len`` characters; otherwise ``UnsafePath``."""
    if not isinstance(name, str):
        raise UnsafePath(f"{what} must be a string, not {type(name).__name__}")
    if not name:
        raise UnsafePath(f"{what} must not be empty")
    if len(name) > max_len:
        raise UnsafePath(f"{what} is {len(name)} characters long; at most {max_len}")
    if _SLUG.fullmatch(name) is None:
        raise UnsafePath(
            f"{what} {_show(name)} may hold only letters, digits and '._+-', "
            "and must not start with a dot"
        )
    return name


def check_path_text(path: str | os.PathLike[str], what: str = "path") -> str:
    """The path as text when it can name a file at all (no NUL, bounded length, valid text)."""
    text = os.fspath(path)
    if not isinstance(text, str):
        raise UnsafePath(f"{what} must be text")
    if "\x00" in text:
        raise UnsafePath(f"{what} contains a NUL byte")
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafePath(f"{what} is not valid Unicode text") from None
    if len(encoded) > PATH_MAX:
        raise UnsafePath(f"{what} is {len(encoded)} bytes long; at most {PATH_MAX}")
    if any(len(part.encode("utf-8")) > NAME_MAX for part in Path(text).parts):
        raise UnsafePath(f"{what} has a component longer than {NAME_MAX} bytes")
    if not text.strip():
        raise UnsafePath(f"{what} must not be empty")
    return text


def confine(
    path: str | os.PathLike[str],
    root: str | os.PathLike[str],
    what: str = "path",
    *,
    exclude: Iterable[str | os.PathLike[str]] = (),
    root_name: str = "the data root",
) -> Path:
    """``path`` (relative to ``root``, or absolute) resolved with symlinks followed; refused
    unless the result lies inside ``root`` and outside every folder of ``exclude``.

    ``..`` components are refused outright, even when they would stay inside: they are never
    needed and make a path's meaning depend on what exists. ``root_name`` is what a message
    calls ``root`` ("outside the runs folder").
    """
    text = check_path_text(path, what)
    p = Path(text)
    if ".." in p.parts:
        raise UnsafePath(f"{what} {_show(text)} must not contain '..'")
    base = _resolve(Path(root), "root")
    try:
        full = _resolve(p if p.is_absolute() else base / p, what)
    except UnsafePath:
        raise
    if not full.is_relative_to(base):
        raise UnsafePath(f"{what} {_show(text)} is outside {root_name}")
    for folder in exclude:
        private = _resolve(Path(folder), "excluded folder")
        if full.is_relative_to(private):
            raise UnsafePath(f"{what} {_show(text)} lies in a folder the service keeps private")
    return full


def _resolve(p: Path, what: str) -> Path:
    try:
        return p.resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # loops, ENAMETOOLONG, EACCES
        raise UnsafePath(f"{what} cannot be resolved: {type(exc).__name__}") from None


def _show(text: str, limit: int = 80) -> str:
    """A user string quoted for a message: bounded, and printable whatever it holds."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    return ascii(shown)
