"""Public data sets: a real downloader (URL + sha256) with a local ``--data-dir`` override.

Multi30k task 1 raw text (Elliott et al. 2016), from the multi30k/dataset repository. A local copy
laid out as ``<data_dir>/multi30k/<file>`` is used when present and its checksum matches.
"""

from __future__ import annotations

import gzip
import hashlib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from synattn_shared.atomic import atomic_write_bytes
from synattn_shared.manifest import sha256_file

MULTI30K_BASE = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file and the checksum it must have."""

    name: str
    url: str
    sha256: str


MULTI30K = {
    f.name: f
    for f in (
        RemoteFile(
            "train.en.gz",
            MULTI30K_BASE + "train.en.gz",
            "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
        ),
        RemoteFile(
            "train.de.gz",
            MULTI30K_BASE + "train.de.gz",
            "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
        ),
        RemoteFile(
            "val.en.gz",
            MULTI30K_BASE + "val.en.gz",
            "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
        ),
        RemoteFile(
            "val.de.gz",
            MULTI30K_BASE + "val.de.gz",
            "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
        ),
        RemoteFile(
            "test_2016_flickr.en.gz",
            MULTI30K_BASE + "test_2016_flickr.en.gz",
            "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        ),
        RemoteFile(
            "test_2016_flickr.de.gz",
            MULTI30K_BASE + "test_2016_flickr.de.gz",
            "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        ),
    )
}


def fetch(file: RemoteFile, data_dir: Path, subdir: str, cache_dir: Path | None = None) -> Path:
    """Path of a verified local copy: ``data_dir/subdir/name`` if present, else downloaded.

    Raises:
        ValueError: a local or downloaded file does not match its sha256.
    """
    local = data_dir / subdir / file.name
    if local.is_file():
        if sha256_file(local) != file.sha256:
            raise ValueError(f"{local}: sha256 does not match {file.url}")
        return local
    target = (cache_dir or data_dir) / subdir / file.name
    target.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(file.url, timeout=60) as resp:
        data = resp.read()
    if hashlib.sha256(data).hexdigest() != file.sha256:
        raise ValueError(f"download of {file.url} does not match its sha256")
    atomic_write_bytes(target, data)
    return target


def multi30k_lines(
    split: str, lang: str, data_dir: Path, limit: int | None = None
) -> Iterator[str]:
    """Lines of a Multi30k split (``train``, ``val``, ``test_2016_flickr``), stripped."""
    path = fetch(MULTI30K[f"{split}.{lang}.gz"], data_dir, "multi30k")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for k, line in enumerate(fh):
            if limit is not None and k >= limit:
                return
            yield line.rstrip("\n")


def link_multi30k(data_dir: Path, out: Path, cache_dir: Path | None = None) -> list[Path]:
    """Verified Multi30k files (local copy or download) linked into ``out`` (nothing copied)."""
    out.mkdir(parents=True, exist_ok=True)
    links = []
    for name, remote in MULTI30K.items():
        path = fetch(remote, data_dir, "multi30k", cache_dir)
        link = out / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path.resolve())
        links.append(link)
    return links


def main(argv: list[str] | None = None) -> None:
    """``python -m synattn_shared.datasets --data-dir D --out DIR``: get Multi30k."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="Get Multi30k (verified local copy or download).")
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "synattn")
    args = ap.parse_args(argv)
    try:
        links = link_multi30k(args.data_dir, args.out, args.cache_dir)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"{args.out}: {len(links)} Multi30k files")


if __name__ == "__main__":
    main()
