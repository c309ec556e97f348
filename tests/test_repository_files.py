"""What a clone pays for: no tracked file over 2 MB (git history keeps every version forever,
and every clone transfers it), a licence and a citation file that parse."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MAX_BYTES = 2 * 1024 * 1024


def tracked() -> list[Path]:
    """Every file git tracks in this checkout (skipped outside a git checkout)."""
    proc = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout")
    return [REPO / p for p in proc.stdout.decode().split("\0") if p]


def test_no_tracked_file_exceeds_two_megabytes() -> None:
    big = [f"{p.relative_to(REPO)} ({p.stat().st_size / 2**20:.1f} MiB)" for p in tracked()
           if p.is_file() and p.stat().st_size > MAX_BYTES]  # fmt: skip
    assert not big, (
        "tracked files over 2 MB (checkpoints and hand-off state belong in a directory named "
        "with --hand-off-dir, outside git): " + ", ".join(big)
    )


def test_licence_and_citation() -> None:
    assert (REPO / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    assert cff["title"] and cff["message"] and cff["authors"]
    titles = " ".join(r["title"] for r in cff["references"])
    for method in ("Redundant Heads", "Fixed Encoder", "Inequality of Attention Heads",
                   "Gated Self-Attention", "diversity of multi-head"):  # fmt: skip
        assert method in titles
