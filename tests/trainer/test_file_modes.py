"""Files the trainer writes get the umask's mode, as any tool writes them: a container running
as another user reads a tokenizer the trainer wrote (``mkstemp`` made every file 0600)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from synattn_shared.features import FeatureOptions
from synattn_shared.manifest import Manifest, ParserInfo, SourceInfo
from synattn_shared.pipeline import build_dataset
from synattn_shared.records import SentenceRecord
from synattn_trainer.cli import tokenizer_train
from tests.conftest import RUNNING_WORDS


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_a_tokenizer_gets_the_umask_mode(tmp_path: Path, umask: int) -> None:
    records = [
        SentenceRecord(sent_id=f"s{i}", words=RUNNING_WORDS[: 3 + i % 5], line=i + 1)
        for i in range(20)
    ]
    manifest = Manifest(
        dataset="t",
        source=SourceInfo(path="in.txt", sha256="abc"),
        parser=ParserInfo(backend="given", constituency="none"),
        features=FeatureOptions().model_dump(),
        rows_per_shard=8,
    )
    build_dataset(records, tmp_path / "data", manifest, FeatureOptions())
    out = tmp_path / "tok" / "tokenizer.json"
    tokenizer_train(data=[tmp_path / "data"], out=out, vocab_size=100)
    want = {0o022: 0o644, 0o077: 0o600}[umask]
    written = [out, out.with_suffix(".meta.json"), *sorted((tmp_path / "data").iterdir())]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in written} == {
        p.name: want for p in written
    }
