"""What a clone of this repository transfers: a full clone against the partial clone the README
recommends (``--filter=blob:none``: every commit and tree, but only the file contents the
checkout needs; older contents are fetched on demand by ``git log -p`` or ``git blame``).

The history holds large files that were committed and later removed (study hand-off
checkpoints): a full clone pays for them, a partial one does not. Both clones are made from this
checkout over git's own transport (``file://``, with the server-side filter enabled as GitHub
and GitLab enable it), so the figures are pack bytes, not network timing.

    python bench/scale/clone_size.py                 # print and write results/clone/clone.json
    python bench/scale/clone_size.py --partial-only  # skip the (slow) full clone
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILTER = "blob:none"


def pack_bytes(git_dir: Path) -> int:
    """Bytes of every pack a clone received: what it transferred, compressed."""
    return sum(p.stat().st_size for p in (git_dir / "objects" / "pack").glob("*.pack"))


def tree_bytes(work: Path) -> int:
    """Bytes of the checked-out files (the working tree without .git)."""
    return sum(p.stat().st_size for p in work.rglob("*") if p.is_file() and ".git" not in p.parts)


def clone(dest: Path, partial: bool) -> dict[str, float]:
    """Clone this repository's HEAD into ``dest``; the packs' size, the tree's and the time."""
    cmd = ["git", "clone", "-q", "--no-local"]
    if partial:
        cmd += [f"--filter={FILTER}",
                "--upload-pack=git -c uploadpack.allowFilter=true upload-pack"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run([*cmd, f"file://{REPO}", str(dest)], check=True)
    wall = time.perf_counter() - start
    return {"pack_mib": pack_bytes(dest / ".git") / 2**20,
            "tree_mib": tree_bytes(dest) / 2**20, "wall_s": wall}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--partial-only", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "clone" / "clone.json")
    args = ap.parse_args()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        out: dict[str, object] = {"commit": head, "filter": FILTER,
                                  "partial": clone(Path(tmp) / "partial", True)}  # fmt: skip
        if not args.partial_only:
            out["full"] = clone(Path(tmp) / "full", False)
    partial = out["partial"]
    assert isinstance(partial, dict)
    print(f"partial clone (--filter={FILTER}): {partial['pack_mib']:.1f} MiB transferred, "
          f"{partial['tree_mib']:.1f} MiB checked out, {partial['wall_s']:.1f} s")  # fmt: skip
    full = out.get("full")
    if isinstance(full, dict):
        ratio = full["pack_mib"] / partial["pack_mib"]
        out["full_over_partial"] = ratio
        print(f"full clone: {full['pack_mib']:.1f} MiB transferred, {full['wall_s']:.1f} s; "
              f"the partial clone transfers {ratio:.0f}x less")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
