"""A small parsed Multi30k subset, a vocabulary and tiny configs for trainer tests."""

from __future__ import annotations

import functools
import gzip
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import typer
from typer.testing import CliRunner, Result

from synattn_shared.shards import ShardDataset
from synattn_trainer.config import TrainConfig
from synattn_trainer.tokenizer import train_tokenizer
from tests.conftest import data_file

TRAIN_PAIRS = 600
VALID_PAIRS = 60


def _head(split: str, lang: str, n: int, out: Path) -> Path:
    with gzip.open(data_file(f"multi30k/{split}.{lang}.gz"), "rt", encoding="utf-8") as fh:
        lines = [next(fh) for _ in range(n)]
    out.write_text("".join(lines), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def m30k(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Parsed train/valid subsets with targets, and a joint BPE vocabulary of 600."""
    # imported here: test_cuda.py on a machine without spaCy trains on carried shards instead
    from synattn_parser.batch import parse_corpus

    d = tmp_path_factory.mktemp("m30k")
    paths: dict[str, Path] = {}
    for split, name, n in (("train", "train", TRAIN_PAIRS), ("val", "valid", VALID_PAIRS)):
        src = _head(split, "en", n, d / f"{name}.en")
        tgt = _head(split, "de", n, d / f"{name}.de")
        parse_corpus(src, d / name, tgt=tgt, rows_per_shard=1000)
        paths[name] = d / name
        paths[f"{name}.de"] = tgt
    texts = []
    for name in ("train", "valid"):
        for row in ShardDataset(paths[name]).iter_rows(columns=["words", "tgt"]):
            texts += [" ".join(row["words"]), row["tgt"]]
    tok = train_tokenizer(texts, vocab_size=600)
    tok.save(str(d / "tok.json"))
    paths["tokenizer"] = d / "tok.json"
    return paths


@functools.cache
def _trainer_commands() -> typer.Typer:
    from synattn_trainer.cli import register

    app = typer.Typer()
    register(app)
    return app


def trainer_cli(*args: str, status: int = 0) -> Result:
    """The trainer's ``synattn`` commands in this process: the same code, without a second
    start-up that imports torch (and matplotlib) again, 3-9 s a call with a checkpoint's load.
    A test checks exit status and stderr as a user sees them through a real process."""
    res = CliRunner().invoke(_trainer_commands(), list(args))
    assert res.exit_code == status, (res.output, res.exception)
    return res


def tiny_config(m30k: dict[str, Path], **sections: dict) -> TrainConfig:
    """A 2+2-layer d=32 model with 4 heads; sections override parts of the config."""
    raw: dict = {
        "data": {
            "train": str(m30k["train"]), "valid": str(m30k["valid"]),
            "tokenizer": str(m30k["tokenizer"]), "max_tokens": 512,
        },
        "model": {
            "enc_layers": 2, "dec_layers": 2, "d_model": 32, "d_ff": 64, "heads": 4,
            "dropout": 0.1, "attn_dropout": 0.1,
        },
        "optim": {"lr": 0.003, "warmup": 20},
        "train": {"max_updates": 10, "bleu_every": 0, "log_every": 5, "seed": 7},
        "decode": {"beam": 3},
    }  # fmt: skip
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return TrainConfig.model_validate(raw)


def preset_config(m30k: dict[str, Path], name: str, **model: object) -> TrainConfig:
    """A preset (``synattn_trainer.presets``) on the tiny model with 8 heads and no dropout."""
    from synattn_trainer.presets import VARIANTS, merge

    base = tiny_config(m30k, model={"dropout": 0.0, "attn_dropout": 0.0, "heads": 8, **model})
    return TrainConfig.model_validate(merge(base.model_dump(), VARIANTS[name]))


@pytest.fixture
def fx_config_restored() -> Iterator[ModuleType]:
    """torch's symbolic-shape settings, restored after the test (``compile_forward`` changes
    them for the whole process)."""
    import torch.fx.experimental._config as fx_config

    saved = fx_config.save_config()
    try:
        yield fx_config
    finally:
        fx_config.load_config(saved)
