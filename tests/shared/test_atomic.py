"""The atomic-write helper: old or new content, never a part; no temporary file left behind;
the folder fsynced after the rename; files get the umask's mode; every writer uses it."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from synattn_shared import atomic
from synattn_shared.atomic import atomic_path, atomic_write_bytes, atomic_write_text

REPO = Path(__file__).resolve().parents[2]


def test_writes_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.txt"
    atomic_write_text(target, "one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["f.txt"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_file_and_folder_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    atomic_write_text(tmp_path / "f.txt", "x")
    assert any(s.endswith(".tmp") for s in synced)  # the data, before the rename
    assert synced[-1] == str(tmp_path)  # the folder, after it


def test_every_writer_goes_through_the_helper() -> None:
    """No module renames a temporary file or writes a final file by hand."""
    hand_made = re.compile(r"os\.replace\(|\.replace\(path\)|\.replace\(out\)|tempfile\.mkstemp")
    offenders = []
    for path in (REPO / "shared").rglob("*.py"):
        offenders += [str(path) for line in path.read_text().splitlines()
                      if hand_made.search(line) and path.name != "atomic.py"]  # fmt: skip
    for path in (REPO / "services").rglob("*.py"):
        offenders += [str(path) for line in path.read_text().splitlines()
                      if hand_made.search(line)]  # fmt: skip
    assert offenders == []


def test_a_directory_is_published_whole_or_not_at_all(tmp_path: Path) -> None:
    from synattn_shared.atomic import atomic_dir

    target = tmp_path / "cache"
    with atomic_dir(target) as d:
        (d / "a").write_text("1")
    assert (target / "a").read_text() == "1"
    with atomic_dir(target) as d:  # replaces what was there
        (d / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    try:
        with atomic_dir(target) as d:
            (d / "c").write_text("3")
            raise RuntimeError("killed mid-build")
    except RuntimeError:
        pass
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]  # no temporary left


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The process umask set to the parameter for one test (restored after it)."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_shards_get_the_umask_mode_like_any_tool_writes(tmp_path: Path, umask: int) -> None:
    """A container running as another user reads the parser's shards: 0644 under umask 022,
    0600 under 077 (``mkstemp`` made 0600 whatever the umask)."""
    from synattn_shared.features import to_row
    from synattn_shared.records import SentenceRecord
    from synattn_shared.shards import write_shard_file

    row = to_row(SentenceRecord(sent_id="s0", words=("It", "rained"), dep_head=(2, 0)))
    write_shard_file(tmp_path / "data", 0, 4, [row])
    part, side = tmp_path / "data" / "part-00000.parquet", tmp_path / "data" / "part-00000.json"
    assert mode(part) == mode(side) == 0o666 & ~umask
    assert mode(part) == {0o022: 0o644, 0o077: 0o600}[umask]
    assert sorted(p.name for p in part.parent.iterdir()) == sorted([part.name, side.name])


def test_every_helper_follows_the_umask(tmp_path: Path, umask: int) -> None:
    from synattn_shared.atomic import atomic_dir, atomic_write_with

    atomic_write_text(tmp_path / "a.txt", "x")
    atomic_write_text(tmp_path / "a.txt", "y")  # replacing keeps the umask's mode too
    atomic_write_with(tmp_path / "b.bin", lambda tmp: tmp.write_bytes(b"z"))
    with atomic_dir(tmp_path / "d") as d:
        atomic_write_text(d / "inside.txt", "1")
    assert mode(tmp_path / "a.txt") == mode(tmp_path / "b.bin") == 0o666 & ~umask
    assert mode(tmp_path / "d") == 0o777 & ~umask
    assert mode(tmp_path / "d" / "inside.txt") == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin", "d"]
