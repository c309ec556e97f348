"""``confine`` and ``slug``: the one gate every user-given path and name goes through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synattn_shared.paths import UnsafePath, confine, slug


@pytest.mark.parametrize("name", ["vanilla", "rhe+dea", "slr-gated_s3", "lr0.001", "a" * 100])
def test_slugs_that_pass(name: str) -> None:
    assert slug(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", ".hidden", "a/b", "a\\b", "a b", "a\x00b", "é", "a" * 101, "x\n", "../etc"],
)
def test_slugs_that_are_refused(name: str) -> None:
    with pytest.raises(UnsafePath):
        slug(name)


def test_slug_refuses_non_strings() -> None:
    with pytest.raises(UnsafePath, match="must be a string"):
        slug(5)


def test_confine_inside_and_outside(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert confine("a/b.yaml", tmp_path) == tmp_path / "a" / "b.yaml"
    assert confine(str(tmp_path / "a"), tmp_path) == tmp_path / "a"
    for bad, why in [
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("/etc/passwd", "outside"),
        ("a\x00b", "NUL"),
        ("x" * 300, "longer than 255"),
        ("a/" * 2100, "bytes long"),
        ("   ", "empty"),
        ("a\udc80", "Unicode"),
    ]:
        with pytest.raises(UnsafePath, match=why):
            confine(bad, tmp_path)


def test_confine_follows_symlinks_and_loops(tmp_path: Path) -> None:
    (tmp_path / "out").symlink_to("/etc")
    with pytest.raises(UnsafePath, match="outside"):
        confine("out/passwd", tmp_path)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UnsafePath):
        confine("loop/x", tmp_path)
    (tmp_path / "in").symlink_to(tmp_path)
    assert confine("in/x", tmp_path) == tmp_path / "x"  # a link that stays inside is fine


def test_confine_keeps_private_folders_private(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    with pytest.raises(UnsafePath, match="private"):
        confine("home/jobs.sqlite", tmp_path, exclude=[tmp_path / "home"])
    assert confine("homework", tmp_path, exclude=[tmp_path / "home"]) == tmp_path / "homework"


@given(st.text(max_size=300))
def test_confine_never_raises_anything_else_and_never_escapes(text: str) -> None:
    root = Path(os.environ.get("TMPDIR", "/tmp")).resolve()
    try:
        full = confine(text, root)
    except UnsafePath:
        return
    assert full.is_relative_to(root)
