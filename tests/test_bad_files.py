"""Every wrong input refused at the door, in one line that names it (issue 71).

A table over every command and API route that takes a file or a folder, crossed with the kinds
of wrong input a user meets: it does not exist, is a folder (or a file where a folder is due),
is empty, is truncated, is of the wrong format, cannot be read, is not UTF-8, is huge. Each
must end in a refusal (exit status 2, or HTTP 422) of one line that names the file, with no
Python traceback. The commands run in this process (``CliRunner``, the root ``synattn`` app
with every plugin's commands, as a user's shell gets them); the APIs through ``TestClient``.
A file of mode 000 is readable by root, who runs the tests here: as root, ``os.access`` (what
the checks ask) is made to say no for those stand-ins (``unreadable_as_root``).

Nothing here parses with a model or trains: the data are stand-ins (``tests.stand_in``) and the
checkpoints files ``torch.save`` writes in milliseconds; the whole table takes seconds.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from tests.stand_in import stand_in_data

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
HUGE = 64 << 20  # a sparse file of zeros: huge to read, nothing on disk

FILE_KINDS = ("missing", "folder", "empty", "truncated", "wrong", "unreadable", "not-utf8",
              "huge")  # fmt: skip
DIR_KINDS = ("missing", "file", "empty", "truncated", "wrong", "unreadable", "not-utf8")
TEXT_KINDS = ("missing", "folder", "unreadable", "not-utf8", "wrong-gz")


@functools.cache
def root_app() -> Any:
    """The ``synattn`` app with every plugin's commands (``synattn_shared.cli.main`` does the
    same before it runs)."""
    from synattn_shared import cli

    cli._load_plugins()
    return cli.app


class World:
    """A data root with stand-in data, a good config, and a factory of bad files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = stand_in_data(root / "data")
        self.bad = root / "bad"
        self.bad.mkdir()
        self.configs = root / "configs"
        self.configs.mkdir()
        self.checkpoint = root / "good.pt"
        import torch

        torch.save({"model": {}, "config": {}, "vocab_size": 60}, self.checkpoint)
        self.other_torch = root / "other.pt"
        torch.save([1, 2, 3], self.other_torch)

    def config(self, name: str, **data: str) -> Path:
        """A valid tiny config (relative data paths: read from ``configs/``), with ``data``
        entries replaced."""
        block = {"train": "../data/train", "valid": "../data/valid",
                 "tokenizer": "../data/tokenizer", "max_tokens": 512, **data}  # fmt: skip
        cfg = {"name": "t", "data": block,
               "model": {"enc_layers": 1, "dec_layers": 1, "d_model": 16, "d_ff": 32,
                         "heads": 2},
               "train": {"max_updates": 2, "average_last": 1}}  # fmt: skip
        path = self.configs / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        return path

    def file(self, slot: str, kind: str, like: Path | None = None, suffix: str = "") -> Path:
        """A wrong file of ``kind`` standing where ``slot`` is expected (``like``: a right
        one, for a truncated copy)."""
        path = self.bad / f"{slot}-{kind}{suffix}"
        if kind == "missing":
            return path
        if kind == "folder":
            path.mkdir()
        elif kind == "empty":
            path.touch()
        elif kind == "truncated":
            assert like is not None
            data = like.read_bytes()
            path.write_bytes(data[: len(data) // 2])
        elif kind == "wrong":
            path.write_text("garbage\n{ not: [this, kind\n", encoding="utf-8")
        elif kind == "wrong-gz":
            path = path.with_name(path.name + ".gz")
            path.write_bytes(b"this is not gzip\n")
        elif kind == "unreadable":
            path.write_text("secret\n", encoding="utf-8")
            path.chmod(0)
        elif kind == "not-utf8":
            path.write_bytes(b"good line\n\xff\xfe latin-1: Gr\xfc\xdfe\n")
        elif kind == "huge":
            with open(path, "wb") as fh:
                fh.truncate(HUGE)
        else:
            raise AssertionError(kind)
        return path

    def folder(self, slot: str, kind: str) -> Path:
        """A wrong shard directory of ``kind`` (the stand-in training split, damaged)."""
        path = self.bad / f"{slot}-{kind}"
        if kind == "missing":
            return path
        if kind == "file":
            path.write_text("not a folder\n", encoding="utf-8")
            return path
        path.mkdir()
        if kind == "empty":
            return path
        shutil.copytree(self.data["train"], path, dirs_exist_ok=True)
        manifest = path / "manifest.json"
        if kind == "truncated":
            shard = path / "part-00000.parquet"
            data = shard.read_bytes()
            shard.write_bytes(data[: len(data) // 2])
        elif kind == "wrong":
            manifest.write_text('{"dataset": 3', encoding="utf-8")
        elif kind == "not-utf8":
            manifest.write_bytes(b'{"dataset": "\xff"}')
        elif kind == "unreadable":
            path.chmod(0)
        else:
            raise AssertionError(kind)
        return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(tmp_path_factory.mktemp("bad-files"))
    yield w
    for p in w.bad.rglob("*"):  # let pytest remove what chmod 000 made unreadable
        p.chmod(0o700)
    for p in w.bad.iterdir():
        p.chmod(0o700)


@pytest.fixture
def jobs_env(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The job CLI's settings: an embedded store of its own over the world's data root."""
    from synattn_jobs import settings as settings_mod

    monkeypatch.setenv("SYNATTN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SYNATTN_DATA_ROOT", str(world.root))
    monkeypatch.delenv("SYNATTN_TOKEN", raising=False)
    settings_mod.get_settings.cache_clear()
    yield tmp_path
    settings_mod.get_settings.cache_clear()


def unreadable_as_root(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root reads a file or folder of mode 000: there, ``os.access`` (what the checks ask)
    says no for the unreadable stand-ins, as it does for any other user."""
    if kind != "unreadable" or not AS_ROOT:
        return
    real = os.access

    def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if "/bad/" in str(path) and "-unreadable" in str(path):
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def refused(res: Result, named: Path) -> str:
    """The command refused, in one ``error:`` line naming ``named``, without a traceback;
    the line."""
    out = res.output
    assert res.exit_code == 2, (res.exit_code, out, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in out, out
    lines = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, out
    assert named.name in lines[0], (named.name, lines[0])
    return lines[0]


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(root_app(), [str(a) for a in args])


# ------------------------------------------------------------------ the commands' table


@dataclass(frozen=True)
class Case:
    """A command with one wrong input: ``make(world, kind)`` gives (the offending path,
    the arguments)."""

    name: str
    kinds: tuple[str, ...]
    make: Callable[[World, str], tuple[Path, list[str | Path]]]
    jobs: bool = False  # needs the job CLI's settings


def _train_tok(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.file("tokenizer", kind, like=w.data["tokenizer"], suffix=".json")
    cfg = w.config(f"train-tok-{kind}", tokenizer=f"../bad/{bad.name}")
    return bad, ["train", cfg, "--out", w.root / "runs" / "x"]


def _train_shards(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.folder("train", kind)
    cfg = w.config(f"train-shards-{kind}", train=f"../bad/{bad.name}")
    return bad, ["train", cfg, "--out", w.root / "runs" / "x"]


def _train_config(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.file("config", kind, suffix=".yaml")
    return bad, ["train", bad, "--out", w.root / "runs" / "x"]


def _submit_tok(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.file("submit-tokenizer", kind, like=w.data["tokenizer"], suffix=".json")
    return bad, ["submit", "train", w.config(f"submit-tok-{kind}", tokenizer=f"../bad/{bad.name}")]


def _submit_shards(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.folder("submit-valid", kind)
    return bad, ["submit", "train", w.config(f"submit-valid-{kind}", valid=f"../bad/{bad.name}")]


def _submit_parse(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.file("submit-src", kind, suffix=".en")
    return bad, ["submit", "parse", "--src", bad, "--out", w.root / "parsed"]


def _grid(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.file("grid", kind, suffix=".yaml")
    return bad, ["experiment", "run", bad]


def _grid_data(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.file("grid-tokenizer", kind, like=w.data["tokenizer"], suffix=".json")
    cfg = w.config(f"grid-tok-{kind}", tokenizer=f"../bad/{bad.name}")
    grid = w.configs / f"grid-{kind}.yaml"
    grid.write_text(yaml.safe_dump({"name": "g", "config": cfg.name, "variants": ["vanilla"]}),
                    encoding="utf-8")  # fmt: skip
    return bad, ["experiment", "run", grid]


def _checkpoint(command: list[str]) -> Callable[[World, str], tuple[Path, list[str | Path]]]:
    def make(w: World, kind: str) -> tuple[Path, list[str | Path]]:
        if kind == "wrong-torch":
            bad = w.other_torch
        else:
            bad = w.file(f"ckpt-{command[0]}", kind, like=w.checkpoint, suffix=".pt")
        args: list[str | Path] = [*command]
        if command[0] == "analyze":
            args[1:1] = [bad]
        else:
            args += ["--checkpoint", bad]
        return bad, [a.replace("{tmp}", str(w.root)) if isinstance(a, str) else a for a in args]

    return make


def _evaluate(side: str) -> Callable[[World, str], tuple[Path, list[str | Path]]]:
    def make(w: World, kind: str) -> tuple[Path, list[str | Path]]:
        good = w.root / "good.txt"
        good.write_text("a line\n", encoding="utf-8")
        bad = w.file(f"evaluate-{side}", kind, suffix=".txt")
        hyp, ref = (bad, good) if side == "hyp" else (good, bad)
        return bad, ["evaluate", "--hyp", hyp, "--ref", ref]

    return make


def _inspect(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.folder("inspect", kind)
    return bad, ["inspect", bad]


def _tokenizer_train(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.folder("tokdata", kind)
    return bad, ["tokenizer", "train", "--data", bad, "--out", w.root / "tok-out.json"]


def _features(w: World, kind: str) -> tuple[Path, list[str | Path]]:
    bad = w.file("trees", kind, suffix=".mrg")
    return bad, ["features", "--trees", bad, "--out", w.root / "features-out"]


def _parse(side: str) -> Callable[[World, str], tuple[Path, list[str | Path]]]:
    def make(w: World, kind: str) -> tuple[Path, list[str | Path]]:
        good = w.root / "good.en"
        good.write_text("A dog runs .\n", encoding="utf-8")
        bad = w.file(f"parse-{side}", kind, suffix=".en")
        if kind == "empty" and side == "src":
            bad.write_text("", encoding="utf-8")
        args: list[str | Path] = ["parse", "--out", w.root / "parse-out"]
        args += ["--src", bad] if side == "src" else ["--src", good, "--tgt", bad]
        return bad, args

    return make


def _plot(kind_of_plot: str) -> Callable[[World, str], tuple[Path, list[str | Path]]]:
    def make(w: World, kind: str) -> tuple[Path, list[str | Path]]:
        run = w.bad / f"run-{kind_of_plot}-{kind}"
        run.mkdir()
        metrics = run / "metrics.jsonl"
        if kind == "folder":
            metrics.mkdir()
        elif kind == "wrong":
            metrics.write_text('{"event": "update"}\nnot json\n', encoding="utf-8")
        elif kind == "not-utf8":
            metrics.write_bytes(b'{"event": "update"}\n{"x": "\xff"}\n')
        return run, ["plot", kind_of_plot, run, "--out", w.root / "p.png"]

    return make


CKPT_KINDS = ("missing", "folder", "empty", "truncated", "wrong", "wrong-torch", "unreadable",
              "not-utf8", "huge")  # fmt: skip
CASES = [
    Case("train data.tokenizer", FILE_KINDS, _train_tok),
    Case("train data.train", DIR_KINDS, _train_shards),
    Case(
        "train CONFIG",
        ("missing", "folder", "empty", "wrong", "unreadable", "not-utf8", "huge"),
        _train_config,
    ),
    Case(
        "submit train data.tokenizer",
        ("missing", "folder", "wrong", "not-utf8"),
        _submit_tok,
        jobs=True,
    ),
    Case("submit train data.valid", DIR_KINDS, _submit_shards, jobs=True),
    Case(
        "submit parse --src",
        ("missing", "folder", "empty", "unreadable", "not-utf8", "wrong-gz"),
        _submit_parse,
        jobs=True,
    ),
    Case(
        "experiment run GRID",
        ("missing", "folder", "empty", "wrong", "unreadable", "not-utf8"),
        _grid,
        jobs=True,
    ),
    Case(
        "experiment run: its config's data.tokenizer",
        ("missing", "truncated"),
        _grid_data,
        jobs=True,
    ),
    Case("translate --checkpoint", CKPT_KINDS, _checkpoint(["translate", "--text", "A dog ."])),
    Case(
        "translate --checkpoint --data",
        ("missing", "wrong"),
        _checkpoint(["translate", "--data", "{tmp}/data/valid"]),
    ),
    Case(
        "score --checkpoint",
        ("missing", "truncated", "wrong"),
        _checkpoint(["score", "--data", "{tmp}/data/valid"]),
    ),
    Case(
        "attention --checkpoint",
        ("missing", "wrong-torch"),
        _checkpoint(["attention", "--data", "{tmp}/data/valid", "--out", "{tmp}/a.npz"]),
    ),
    Case(
        "plot attention --checkpoint",
        ("missing", "wrong"),
        _checkpoint(["plot", "attention", "--data", "{tmp}/data/valid", "--out", "{tmp}/a.png"]),
    ),
    Case(
        "analyze CHECKPOINT",
        ("missing", "folder", "wrong"),
        _checkpoint(["analyze", "--dev", "{tmp}/data/valid", "--out", "{tmp}/analysis"]),
    ),
    Case("evaluate --hyp", TEXT_KINDS, _evaluate("hyp")),
    Case("evaluate --ref", TEXT_KINDS, _evaluate("ref")),
    Case("inspect DIR", DIR_KINDS, _inspect),
    Case("tokenizer train --data", DIR_KINDS, _tokenizer_train),
    Case(
        "features --trees",
        ("missing", "folder", "empty", "wrong", "unreadable", "not-utf8"),
        _features,
    ),
    Case(
        "parse --src",
        ("missing", "folder", "empty", "unreadable", "not-utf8", "wrong-gz"),
        _parse("src"),
    ),
    Case("plot gates RUN", ("missing", "folder", "wrong", "not-utf8"), _plot("gates")),
    Case("plot labels RUN", ("missing", "not-utf8"), _plot("labels")),
    Case("parse --tgt", ("missing", "folder", "not-utf8", "wrong-gz"), _parse("tgt")),
]


@pytest.mark.parametrize(
    ("case", "kind"),
    [pytest.param(c, k, id=f"{c.name}: {k}") for c in CASES for k in c.kinds],
)
def test_a_command_refuses_a_bad_file_in_one_line_that_names_it(
    world: World,
    case: Case,
    kind: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unreadable_as_root(kind, monkeypatch)
    if case.jobs:
        request.getfixturevalue("jobs_env")
    bad, args = case.make(world, kind)
    refused(run(*args), bad)


def test_a_relative_data_path_names_the_folder_it_was_read_from(world: World) -> None:
    """The config in configs/ says tokenizer: data/tokenizer, which exists beside configs/ (where
    the command runs), not in it: the refusal says where relative paths are read from."""
    cfg = world.config("relative", tokenizer="data/tokenizer")
    line = refused(run("train", cfg, "--out", world.root / "runs" / "rel"), cfg)
    where = str((world.configs / "data" / "tokenizer").resolve())
    assert f"data.tokenizer: {where}: does not exist" in line, line
    assert f"relative paths are read from the config's folder, {world.configs.resolve()}/" in line


def test_the_debug_flag_shows_the_traceback_of_an_error_no_command_caught(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error no command turned into its line: one ``error:`` line (status 1, unexpected;
    2 for a file that cannot be read); ``--debug`` lets it through, with its traceback."""
    from synattn_shared import cli
    from synattn_shared.errors import BadFile

    calls: list[BaseException] = []

    def boom() -> None:
        raise calls[-1]

    app = root_app()
    monkeypatch.setattr(cli.console, "print", lambda *a, **k: boom())  # `version` prints
    calls.append(RuntimeError("something broke"))
    res = run("version")
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "RuntimeError: something broke (unexpected: `synattn --debug" in res.output
    calls.append(BadFile(world.bad / "x.bin", "is not one"))
    res = run("version")
    assert res.exit_code == 2 and "x.bin: is not one" in res.output
    calls.append(RuntimeError("something broke"))
    res = CliRunner().invoke(app, ["--debug", "version"])
    assert isinstance(res.exception, RuntimeError)  # raised: Python prints its traceback


# ------------------------------------------------------------------ the APIs' table


@pytest.fixture(scope="module")
def job_api(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The job API over the world's data root (in this process) and a user's token."""
    from synattn_jobs.api import create_app
    from synattn_jobs.settings import JobSettings

    settings = JobSettings(data_root=world.root, home=tmp_path_factory.mktemp("api-home"))
    settings.prepare()
    app = create_app(settings)
    token = app.state.store.create_token("alice")
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def _api_config(world: World, name: str, **data: str) -> str:
    return str(world.config(name, **data).relative_to(world.root))


API_CASES: list[tuple[str, tuple[str, ...], Callable[[World, str], tuple[Path, str, Any]]]] = [
    ("POST /v1/jobs/train config", ("missing", "folder", "empty", "not-utf8", "wrong"),
     lambda w, k: (b := w.file("api-config", k, suffix=".yaml"), "/v1/jobs/train",
                   {"spec": {"config": str(b.relative_to(w.root))}})),
    ("POST /v1/jobs/train data.tokenizer", ("missing", "folder", "empty", "truncated",
                                            "not-utf8", "huge"),
     lambda w, k: (b := w.file("api-tok", k, like=w.data["tokenizer"], suffix=".json"),
                   "/v1/jobs/train",
                   {"spec": {"config": _api_config(w, f"api-tok-{k}",
                                                   tokenizer=f"../bad/{b.name}")}})),
    ("POST /v1/jobs/train data.train", DIR_KINDS,
     lambda w, k: (b := w.folder("api-train", k), "/v1/jobs/train",
                   {"spec": {"config": _api_config(w, f"api-train-{k}",
                                                   train=f"../bad/{b.name}")}})),
    ("POST /v1/jobs/parse src", ("missing", "folder", "empty", "unreadable", "not-utf8",
                                 "wrong-gz"),
     lambda w, k: (b := w.file("api-src", k, suffix=".en"), "/v1/jobs/parse",
                   {"spec": {"src": str(b.relative_to(w.root)), "out": "parsed"}})),
    ("POST /v1/experiments config's data.valid", ("missing", "truncated"),
     lambda w, k: (b := w.folder("api-grid-valid", k), "/v1/experiments",
                   {"name": "g", "variants": ["vanilla"],
                    "config": _api_config(w, f"api-grid-{k}", valid=f"../bad/{b.name}")})),
]  # fmt: skip


@pytest.mark.parametrize(
    ("route", "kind"),
    [pytest.param(i, k, id=f"{name}: {k}") for i, (name, kinds, _) in enumerate(API_CASES)
     for k in kinds],
)  # fmt: skip
def test_an_api_route_refuses_a_bad_file_with_422_naming_it(
    world: World, job_api: Any, route: int, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unreadable_as_root(kind, monkeypatch)
    bad, url, body = API_CASES[route][2](world, kind)
    r = job_api.post(url, json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail
    assert bad.name in detail, detail


def test_a_good_config_passes_the_door(world: World, job_api: Any) -> None:
    """The stand-in data pass every check: the table's refusals are the bad file's alone."""
    from synattn_trainer.config import load_config
    from synattn_trainer.preflight import check_config_files

    cfg_path = world.config("good")
    check_config_files(load_config(cfg_path), cfg_path)
    r = job_api.post("/v1/jobs/train", json={"spec": {"config": "configs/good.yaml"}})
    assert r.status_code == 201, r.text
