"""Stand-in data for tests that queue training jobs without running them: real enough for the
checks at the door (``synattn_trainer.preflight``: shard directories with a manifest and their
shards, a tokenizer that loads), small enough to make in a few milliseconds. Made once per
process and copied where a test wants it (a job's data must lie inside its data root)."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

KEYS = ("train", "valid", "tokenizer")
TREES = (
    "(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk)) (PP (IN with) (NP (NNP Sharon)))) "
    "(. .))\n(S (NP (DT A) (NN dog)) (VP (VBZ runs)) (. .))\n"
)


@functools.cache
def _made() -> Path:
    """The stand-in data, made once in a folder of this process's own."""
    from synattn_shared.features import FeatureOptions
    from synattn_shared.manifest import Manifest, ParserInfo, SourceInfo, sha256_file
    from synattn_shared.pipeline import build_dataset
    from synattn_shared.readers import read_ptb
    from synattn_trainer.tokenizer import train_tokenizer

    folder = Path(tempfile.mkdtemp(prefix="synattn-stand-in-"))
    atexit.register(shutil.rmtree, folder, True)
    trees = folder / "trees.mrg"
    trees.write_text(TREES, encoding="utf-8")
    options = FeatureOptions()
    for split in ("train", "valid"):
        manifest = Manifest(
            dataset=split,
            source=SourceInfo(path=str(trees), sha256=sha256_file(trees)),
            parser=ParserInfo(backend="given", model=trees.name, constituency="given"),
            features=options.model_dump(),
            rows_per_shard=10,
        )
        build_dataset(read_ptb(trees), folder / split, manifest, options)
    tok = train_tokenizer(["Bush held a talk with Sharon .", "A dog runs ."] * 3, vocab_size=60)
    tok.save(str(folder / "tokenizer"))
    return folder


def stand_in_data(folder: Path) -> dict[str, Path]:
    """``folder/train`` and ``folder/valid`` (shard directories) and ``folder/tokenizer`` (a
    tokenizer file): the paths of a config's ``data`` block, keyed as ``tiny_yaml`` takes
    them."""
    made = _made()
    folder.mkdir(parents=True, exist_ok=True)
    for key in KEYS:
        src, dst = made / key, folder / key
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copyfile(src, dst)
    return {key: folder / key for key in KEYS}
