"""Shard format: schema, atomic and resumable writer, streaming and random-access reader."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from synattn_shared.features import FeatureOptions, to_row
from synattn_shared.manifest import Manifest, ParserInfo, SourceInfo, load_manifest
from synattn_shared.materialise import ALL_FEATURES, materialise
from synattn_shared.pipeline import build_dataset
from synattn_shared.records import SentenceRecord
from synattn_shared.schema import SCHEMA_VERSION, SHARD_SCHEMA
from synattn_shared.shards import ShardDataset, ShardWriter
from synattn_shared.syntax.slr import slr_log_mask
from tests.conftest import RUNNING_HEADS, RUNNING_S2W, RUNNING_UPOS, RUNNING_WORDS

OPTS = FeatureOptions()


def records(n: int) -> list[SentenceRecord]:
    return [
        SentenceRecord(
            sent_id=f"s{i}",
            words=RUNNING_WORDS[: 2 + i % 6],
            dep_head=(0, *range(1, 2 + i % 6)),
            upos=RUNNING_UPOS[: 2 + i % 6],
            line=i + 1,
        )
        for i in range(n)
    ]


def manifest(rows_per_shard: int = 4, sha: str = "abc") -> Manifest:
    return Manifest(
        dataset="t",
        source=SourceInfo(path="in.conllu", sha256=sha),
        parser=ParserInfo(backend="given", constituency="derived:flat"),
        features=OPTS.model_dump(),
        rows_per_shard=rows_per_shard,
    )


def test_write_and_read_back(tmp_path):
    recs = records(10)
    result = build_dataset(recs, tmp_path, manifest(), OPTS)
    assert result.complete and result.rows == 10 and len(result.shards) == 3
    assert result.syntax_rows == 10
    assert result.schema_version == SCHEMA_VERSION
    ds = ShardDataset(tmp_path, verify=True)
    assert len(ds) == 10
    assert [r["sent_id"] for r in ds.iter_rows(["sent_id"])] == [f"s{i}" for i in range(10)]
    for i in (0, 3, 4, 9, -1):
        row = ds[i]
        want = to_row(recs[i])
        assert row["words"] == want["words"] and row["syn_dist"] == want["syn_dist"]
        assert row["row"] == (i % 10)
    with pytest.raises(IndexError):
        ds[10]
    table = pq.read_table(tmp_path / "part-00000.parquet")
    assert table.schema.equals(SHARD_SCHEMA, check_metadata=False)
    assert table.schema.metadata[b"synattn.schema_version"] == str(SCHEMA_VERSION).encode()


def test_no_dense_matrices_on_disk_and_bytes_are_linear(tmp_path):
    short = [SentenceRecord(sent_id="a", words=("x",) * 10, dep_head=(0,) + (1,) * 9)] * 200
    long = [SentenceRecord(sent_id="a", words=("x",) * 40, dep_head=(0,) + (1,) * 39)] * 200
    a = build_dataset(short, tmp_path / "a", manifest(200), OPTS)
    b = build_dataset(long, tmp_path / "b", manifest(200), OPTS)
    # quadrupling n must not multiply bytes by ~16 (it would with n x n matrices)
    assert b.shards[0].bytes < 6 * a.shards[0].bytes


def test_resume_skips_finished_shards_and_never_duplicates(tmp_path):
    recs = records(10)
    writer = ShardWriter(tmp_path, manifest())
    writer.write_shard(0, [to_row(r) for r in recs[:4]])
    first_mtime = (tmp_path / "part-00000.parquet").stat().st_mtime_ns
    # a killed writer left a temporary file and no manifest entry for shard 1
    (tmp_path / ".part-00001.parquet.xyz.tmp").write_bytes(b"half")
    calls = []
    result = build_dataset(
        recs, tmp_path, manifest(), OPTS, on_shard=lambda i, n, s: calls.append((i, s))
    )
    assert calls == [(0, True), (1, False), (2, False)]
    assert (tmp_path / "part-00000.parquet").stat().st_mtime_ns == first_mtime
    assert not list(tmp_path.glob(".*.tmp"))
    assert result.rows == 10
    assert [r["row"] for r in ShardDataset(tmp_path).iter_rows(["row"])] == list(range(10))
    again = build_dataset(recs, tmp_path, manifest(), OPTS)
    assert again.rows == 10 and len(again.shards) == 3


def test_corrupt_shard_is_rewritten(tmp_path):
    recs = records(8)
    build_dataset(recs, tmp_path, manifest(), OPTS)
    (tmp_path / "part-00001.parquet").write_bytes(b"garbage")
    writer = ShardWriter(tmp_path, manifest())
    assert writer.done(0) is not None and writer.done(1) is None
    build_dataset(recs, tmp_path, manifest(), OPTS)
    ShardDataset(tmp_path, verify=True)


def test_other_input_is_refused_without_overwrite(tmp_path):
    build_dataset(records(3), tmp_path, manifest(sha="one"), OPTS)
    with pytest.raises(FileExistsError, match="--overwrite"):
        build_dataset(records(3), tmp_path, manifest(sha="two"), OPTS)
    build_dataset(records(5), tmp_path, manifest(sha="two"), OPTS, overwrite=True)
    assert load_manifest(tmp_path).rows == 5


def test_failure_mid_run_leaves_only_whole_shards(tmp_path):
    def boom():
        yield from records(5)
        raise RuntimeError("parser died")

    with pytest.raises(RuntimeError):
        build_dataset(boom(), tmp_path, manifest(), OPTS)
    assert not load_manifest(tmp_path).complete
    assert sorted(p.name for p in tmp_path.glob("part-*.parquet")) == ["part-00000.parquet"]
    assert not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(ValueError, match="incomplete"):
        ShardDataset(tmp_path)
    build_dataset(records(5), tmp_path, manifest(), OPTS)
    assert len(ShardDataset(tmp_path)) == 5


def test_reader_refuses_other_schema_version(tmp_path):
    build_dataset(records(2), tmp_path, manifest(), OPTS)
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["schema_version"] = 999
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="schema version 999"):
        ShardDataset(tmp_path)


def test_materialise_word_and_subword_level():
    row = to_row(
        SentenceRecord(
            sent_id="r",
            words=RUNNING_WORDS,
            dep_head=RUNNING_HEADS,
            tree=(
                "(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk)) (PP (IN with) "
                "(NP (NNP Sharon)))) (. .))"
            ),
        )
    )
    mats = materialise(row, ALL_FEATURES)
    assert mats["dea_mask"].shape == (7, 7)
    np.testing.assert_allclose(
        mats["slr_bias"], slr_log_mask([5, 3, 1, 2, 1, 4], tau=10.0), atol=1e-6
    )
    sub = materialise(row, ("slr_bias", "dea_mask", "rp_index"), subword_to_word=list(RUNNING_S2W))
    assert sub["dea_mask"].shape == (9, 9) and sub["rp_index"].shape == (9, 9)
    assert np.isfinite(np.diag(sub["slr_bias"])).all()
    with pytest.raises(ValueError, match="unknown features"):
        materialise(row, ("nope",))


def test_rows_without_syntax_give_vanilla_features():
    row = to_row(SentenceRecord(sent_id="x", words=("a", "b", "c")))
    assert row["has_syntax"] is False
    mats = materialise(row, ("slr_bias", "dea_mask", "rp"))
    assert (mats["slr_bias"] == 0).all()
    assert mats["dea_mask"] is None
    assert (mats["rp"] == 0).all()
