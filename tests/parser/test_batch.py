"""``synattn parse``: shards from a corpus, several processes, resume, clear errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synattn_shared.errors import SyntaxInputError
from synattn_shared.shards import ShardDataset
from tests.conftest import data_file
from tests.shared.test_cli import synattn

N = 300


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The first N Multi30k training pairs, gzipped like the real files."""
    d = tmp_path_factory.mktemp("corpus")
    paths = []
    for lang in ("en", "de"):
        with gzip.open(data_file(f"multi30k/train.{lang}.gz"), "rt", encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(N)]
        p = d / f"train.{lang}.gz"
        with gzip.open(p, "wt", encoding="utf-8") as out:
            out.writelines(lines)
        paths.append(p)
    return paths[0], paths[1]


def parse(*args: str):  # type: ignore[no-untyped-def]
    return synattn("parse", "--rows-per-shard", "100", *args)


def test_parse_with_workers_then_resume(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    src, tgt = corpus
    out = tmp_path / "m30k"
    res = parse("--src", str(src), "--tgt", str(tgt), "--out", str(out), "--workers", "2")
    assert res.returncode == 0, res.stderr
    assert f"{N} sentences ({N} with syntax) in 3 shards; 3 written, 0 kept" in res.stdout
    ds = ShardDataset(out, verify=True)
    assert ds.manifest.parser.backend == "spacy" and ds.manifest.source.tgt_sha256
    rows = list(ds.iter_rows())
    assert [r["row"] for r in rows] == list(range(N))
    with (
        gzip.open(src, "rt", encoding="utf-8") as fh,
        gzip.open(tgt, "rt", encoding="utf-8") as fg,
    ):
        first_src, first_tgt = fh.readline().split(), fg.readline().strip()
    assert rows[0]["tgt"] == first_tgt and rows[0]["line"] == 1
    assert len(rows[0]["words"]) >= len(first_src) - 1  # spaCy splits the final "."

    # a killed run: one shard lost, another half-written (a temp file); the re-run redoes one
    (out / "part-00001.parquet").unlink()
    (out / ".part-00002.parquet.x.tmp").write_bytes(b"garbage")
    again = parse("--src", str(src), "--tgt", str(tgt), "--out", str(out), "--workers", "2")
    assert again.returncode == 0, again.stderr
    assert "1 written, 2 kept from an earlier run" in again.stdout
    assert list(ShardDataset(out, verify=True).iter_rows()) == rows
    assert not list(out.glob(".*.tmp"))


def test_single_process_gives_the_same_rows(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    src, _ = corpus
    one = tmp_path / "one"
    two = tmp_path / "two"
    assert parse("--src", str(src), "--out", str(one), "--limit", "150").returncode == 0
    assert (
        parse("--src", str(src), "--out", str(two), "--limit", "150", "--workers", "2").returncode
        == 0
    )
    t1 = pq.read_table(one / "part-00001.parquet")
    t2 = pq.read_table(two / "part-00001.parquet")
    assert t1.num_rows == 50 and t1.equals(t2)
    assert ShardDataset(one).manifest.rows == 150


def test_pretokenised_lines_keep_their_tokens(tmp_path: Path) -> None:
    src = tmp_path / "tok.txt"
    src.write_text("Mr. O'Neil can't e-mail U.S. co-workers .\nIt rained .\n", encoding="utf-8")
    out = tmp_path / "tok"
    assert parse("--src", str(src), "--out", str(out), "--pretokenized").returncode == 0
    rows = list(ShardDataset(out).iter_rows())
    assert rows[0]["words"] == ["Mr.", "O'Neil", "can't", "e-mail", "U.S.", "co-workers", "."]
    assert rows[0]["pretokenized"] and rows[1]["words"] == ["It", "rained", "."]


def test_bad_input_exits_2_with_one_line(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    src, _ = corpus
    short = tmp_path / "short.de"
    short.write_text("nur eine Zeile\n", encoding="utf-8")
    res = parse("--src", str(src), "--tgt", str(short), "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and f"{N} source lines but 1 target lines" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1

    holes = tmp_path / "holes.txt"
    holes.write_text("one line\n\nthird line\n", encoding="utf-8")
    res = parse("--src", str(holes), "--out", str(tmp_path / "y"))
    assert res.returncode == 2 and "holes.txt:2" in res.stderr and "empty line" in res.stderr
    assert not (tmp_path / "y" / "part-00000.parquet").exists()

    res = parse("--src", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "z"))
    assert res.returncode == 2 and "no such file" in res.stderr
    res = parse("--src", str(src), "--out", str(tmp_path / "w"), "--backend", "bogus")
    assert res.returncode == 2 and "unknown backend 'bogus'" in res.stderr
    res = parse("--src", str(src), "--out", str(tmp_path / "v"), "--spacy-model", "xx_none_sm")
    assert res.returncode == 2 and "python -m spacy download xx_none_sm" in res.stderr


def test_an_empty_line_fails_before_any_parser_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from synattn_parser import batch

    def no_parser(*_: object) -> None:
        raise AssertionError("a parser was loaded for input that fails anyway")

    monkeypatch.setattr(batch, "get_parser", no_parser)
    holes = tmp_path / "holes.txt.gz"
    with gzip.open(holes, "wt", encoding="utf-8") as fh:
        fh.write("one line\ntwo line\n \nfour\n")
    with pytest.raises(SyntaxInputError, match="empty line") as err:
        batch.parse_corpus(holes, tmp_path / "out")
    assert err.value.line == 3 and err.value.source == str(holes)
    with pytest.raises(AssertionError, match="a parser was loaded"):  # the hole is past the limit
        batch.parse_corpus(holes, tmp_path / "out", limit=2)
    assert batch.first_empty_line(holes, 2) is None and batch.first_empty_line(holes, 9) == 3


def test_other_input_into_the_same_directory_is_refused(
    corpus: tuple[Path, Path], tmp_path: Path
) -> None:
    src, tgt = corpus
    out = tmp_path / "d"
    assert parse("--src", str(src), "--out", str(out), "--limit", "20").returncode == 0
    res = parse("--src", str(tgt), "--out", str(out), "--limit", "20")
    assert res.returncode == 2 and "--overwrite" in res.stderr
    assert (
        parse("--src", str(tgt), "--out", str(out), "--limit", "20", "--overwrite").returncode == 0
    )
