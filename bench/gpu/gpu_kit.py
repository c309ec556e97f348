"""What a lent GPU machine needs beside the repository to run issue 27's GPU part in one lease.

That machine (the ``device`` tool; Python 3.12 and CUDA torch, no package registry, no spaCy, no
``../shared/data``) gets two carried folders, made here:

- ``.whl/``: wheels of the packages the trainer and the tests import that its image lacks
  (pydantic and its parts, nltk; the versions of this virtualenv), for its Python;
- ``build/gpu-kit/``: ``make data``'s valid shards and vocabulary with the first
  ``--train-pairs`` training pairs (whole shards, manifest trimmed): the CUDA tests train on
  them and ``bench/gpu/gpu.py --shards`` times on them, so nothing is parsed there.

Then, on the device machine (``bench/gpu/gpu_device.sh`` says what each stage runs)::

    run(command="bash bench/gpu/gpu_device.sh tests bench", carry=[".whl", "build/gpu-kit"])

    python bench/gpu/gpu_kit.py                      # after `make data`
    python bench/gpu/gpu_kit.py --python 3.11 --whl build/whl311   # wheels for a local dry run
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from synattn_shared.manifest import MANIFEST_NAME, ShardInfo, load_manifest, write_json

REPO = Path(__file__).resolve().parents[2]

# imported by synattn_trainer, synattn_shared or the tests, and absent from the GPU image
# (/work/.library/device/KINDS.md lists what it holds; typing_extensions: pydantic needs a
# recent one)
MISSING_THERE = (
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
    "nltk", "defusedxml",
)  # fmt: skip
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def download_wheels(dest: Path, python: str) -> list[Path]:
    """This virtualenv's versions of ``MISSING_THERE`` as binary wheels for ``python``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(dest)]  # fmt: skip
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run([*cmd, *(f"{name}=={version(name)}" for name in MISSING_THERE)], check=True)
    return sorted(dest.glob("*.whl"))


def trim_shards(src: Path, dest: Path, pairs: int) -> int:
    """Copy the whole shards of ``src`` that hold its first ``pairs`` rows (at least one) to
    ``dest``, with a manifest that lists just them (as ``parse --limit`` would write it); the
    rows copied."""
    manifest = load_manifest(src)
    if not manifest.complete or manifest.syntax_rows != manifest.rows:
        raise SystemExit(f"{src}: not a complete parse with syntax on every row (make data)")
    kept: list[ShardInfo] = []
    for shard in manifest.shards:
        if kept and sum(s.rows for s in kept) >= pairs:
            break
        kept.append(shard)
    rows = sum(s.rows for s in kept)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for shard in kept:
        shutil.copy2(src / shard.file, dest / shard.file)
    trimmed = manifest.model_copy(
        update={"shards": kept, "rows": rows, "syntax_rows": rows,
                "features": {**manifest.features, "limit": rows}}
    )  # fmt: skip
    write_json(dest / MANIFEST_NAME, trimmed.model_dump())
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=REPO / "build" / "m30k", help="make data's")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "gpu-kit")
    ap.add_argument("--whl", type=Path, default=REPO / ".whl")
    ap.add_argument("--python", default="3.12", help="the device machine's Python")
    ap.add_argument("--train-pairs", type=int, default=10_000)
    args = ap.parse_args()
    needed = [args.data / "train", args.data / "valid", args.data / "tokenizer.json"]
    if not all(p.exists() for p in needed):
        raise SystemExit(f"{args.data}: no parsed train/valid and tokenizer.json (make data)")
    rows = trim_shards(args.data / "train", args.out / "train", args.train_pairs)
    if (args.out / "valid").exists():
        shutil.rmtree(args.out / "valid")
    shutil.copytree(args.data / "valid", args.out / "valid")
    shutil.copy2(args.data / "tokenizer.json", args.out / "tokenizer.json")
    wheels = download_wheels(args.whl, args.python)
    size = sum(p.stat().st_size for p in [*wheels, *args.out.rglob("*")] if p.is_file())
    print(f"{args.out}: {rows} training pairs, valid, vocabulary; {args.whl}: {len(wheels)} "
          f"wheels for Python {args.python}; {size / 2**20:.1f} MiB to carry")  # fmt: skip


if __name__ == "__main__":
    main()
