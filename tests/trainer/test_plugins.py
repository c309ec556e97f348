"""Variants from outside the repository (docs/plugins.md): the example plugin
(examples/plugins/synattn-distance-decay) installed with ``pip install --target`` into a folder
of its own, found through its entry point, checked by ``synattn variants check``, trained
through the CLI and through the queue's worker code; a worker without it (or with another
version) refuses the job; clashes and missing plugins are refused in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import typer
import yaml
from typer.testing import CliRunner

from synattn_trainer import plugins
from synattn_trainer.presets import VARIANTS
from synattn_trainer.variant_options import OPTIONS
from tests.conftest import REPO
from tests.trainer.conftest import trainer_cli

EXAMPLE = REPO / "examples" / "plugins" / "synattn-distance-decay"
SYNATTN = str(Path(sys.executable).with_name("synattn"))


def _forget_plugin_modules() -> None:
    for name in [m for m in sys.modules if m.startswith(("synattn_distance_decay",
                                                          "synattn_plugin_"))]:  # fmt: skip
        del sys.modules[name]


def _require_uninstalled() -> None:
    """Skip where the environment itself has the plugin (this test needs a process without)."""
    if any(e.name == "distance-decay" for e in entry_points(group=plugins.ENTRY_POINT_GROUP)):
        pytest.skip("the example plugin is installed in this environment: uninstall it")


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin installed by pip into a folder of its own (from a copy of its
    source: a build writes beside the source, and another test process may build too)."""
    d = tmp_path_factory.mktemp("plugin")
    shutil.copytree(EXAMPLE, d / "src", ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                       "__pycache__"))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(d / "site"), str(d / "src")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return d / "site"


@pytest.fixture
def no_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process with no plugin loaded; whatever is loaded after is forgotten again."""
    monkeypatch.delenv(plugins.PLUGINS_ENV, raising=False)
    plugins.reset()
    yield
    plugins.reset()
    _forget_plugin_modules()


@pytest.fixture
def installed(plugin_site: Path, no_plugins: None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example plugin importable in this process (its folder on ``sys.path``)."""
    monkeypatch.syspath_prepend(str(plugin_site))
    return plugin_site


def tiny_yaml(m30k: dict[str, Path], path: Path, **top: Any) -> Path:
    raw = {
        "data": {"train": str(m30k["train"]), "valid": str(m30k["valid"]),
                 "tokenizer": str(m30k["tokenizer"]), "max_tokens": 512},
        "model": {"enc_layers": 2, "dec_layers": 2, "d_model": 32, "d_ff": 64, "heads": 4},
        "optim": {"lr": 0.003, "warmup": 20},
        "train": {"max_updates": 4, "bleu_every": 0, "log_every": 2, "seed": 7,
                  "checkpoint_every_updates": 2, "checkpoint_select": "last"},
        **top,
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_the_example_plugin_is_found_through_its_entry_point(installed: Path) -> None:
    assert (installed / "synattn_distance_decay-0.1.0.dist-info").is_dir()
    (ep,) = [
        e for e in entry_points(group=plugins.ENTRY_POINT_GROUP) if e.name == "distance-decay"
    ]
    assert ep.value == "synattn_distance_decay"
    assert "distance_decay" in OPTIONS and "distance-decay" in VARIANTS  # a look-up loads it
    p = plugins.load_plugins()["distance-decay"]
    assert (p.version, list(p.variants), list(p.presets)) == (
        "0.1.0",
        ["distance_decay"],
        ["distance-decay"],
    )
    assert "entry point distance-decay" in p.origin and "synattn-distance-decay 0.1.0" in p.origin
    # the digest is of the source: the installed files are the repository's
    assert p.sha256 == plugins.source_digest([EXAMPLE / "src" / "synattn_distance_decay"])
    assert plugins.owner("distance_decay") is p and plugins.owner("dea") is None
    assert ("distance_decay", "plugin distance-decay 0.1.0") in plugins.describe()
    out = trainer_cli("variants", "list").output
    assert "distance_decay" in out and "plugin distance-decay 0.1.0" in out


def test_synattn_variants_check_passes_on_the_example_plugin(installed: Path) -> None:
    lines = trainer_cli("variants", "check").output.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["pass"] * 6, lines
    assert [line.split()[2] for line in lines] == [
        "options:",
        "gradients:",
        "masks:",
        "analysis:",
        "deterministic:",
        "resume:",
    ]
    assert all("distance_decay" in line for line in lines)


BROKEN = '''
"""A plugin whose variants break the contract."""
import torch
from pydantic import ConfigDict

from synattn_trainer.plugins import PluginVariant
from synattn_trainer.variant_options import VariantConfig
from synattn_trainer.variants import AttentionVariant

NAME = "broken"
__version__ = "0.0.1"


class LeakyConfig(VariantConfig):
    """Attends to padding."""


class LaxConfig(VariantConfig):
    """Takes any option."""

    model_config = ConfigDict(extra="allow")


class Leaky(AttentionVariant):
    def attend(self, q, k, v, mask, ctx):
        probs = torch.softmax(q @ k.transpose(-1, -2), -1)  # the mask left out
        ctx.report(probs)
        return probs @ v


VARIANTS = {"leaky": PluginVariant(LeakyConfig, Leaky), "lax": PluginVariant(LaxConfig, Leaky)}
'''


def test_a_file_plugin_that_breaks_the_contract_fails_the_check_with_the_reason(
    tmp_path: Path, no_plugins: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken.py").write_text(BROKEN, encoding="utf-8")
    monkeypatch.setenv(plugins.PLUGINS_ENV, str(tmp_path / "broken.py"))
    p = plugins.load_plugins()["broken"]
    assert (p.version, sorted(p.variants)) == ("0.0.1", ["lax", "leaky"])
    assert p.origin == f"SYNATTN_PLUGINS entry {tmp_path / 'broken.py'}"
    res = trainer_cli("variants", "check", "lax", status=1)
    assert "FAIL  lax  options: an unknown option key is accepted silently" in res.output
    from synattn_trainer.variant_check import check_variant

    results = check_variant("leaky")
    first = [next(results) for _ in range(3)]
    results.close()  # the remaining checks train: not needed here
    assert [(r.check, r.ok) for r in first] == [
        ("options", True),
        ("gradients", True),
        ("masks", False),
    ]
    assert "on padded keys" in first[2].reason, first[2].reason


def test_training_through_the_cli_records_the_plugin_and_refuses_another_version(
    installed: Path, m30k: dict[str, Path], tmp_path: Path
) -> None:
    from synattn_trainer.loading import load_model

    cfg = tiny_yaml(m30k, tmp_path / "run.yaml", preset="distance-decay")
    trainer_cli("train", str(cfg), "--out", str(tmp_path / "run"))
    p = plugins.load_plugins()["distance-decay"]
    want = {"distance-decay": {"version": "0.1.0", "sha256": p.sha256,
                               "variants": ["distance_decay"]}}  # fmt: skip
    ckpt = tmp_path / "run" / "checkpoints" / "ckpt-00000004.pt"
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert state[plugins.PLUGINS_KEY] == want
    assert [s["name"] for s in state["config"]["attention"]["enc_self"]] == ["distance_decay"]
    assert any(k.endswith("variant.raw_slope") for k in state["model"])
    model, _ = load_model(ckpt)
    assert model.encoder[0].self_attn.variant.__class__.__name__ == "DistanceDecay"
    # the run resumed, or its model loaded, with another version of the plugin: refused
    state[plugins.PLUGINS_KEY]["distance-decay"]["version"] = "0.0.9"
    torch.save(state, ckpt)
    res = trainer_cli("train", str(cfg), "--out", str(tmp_path / "run"), "--set",
                      "train.max_updates=6", status=2)  # fmt: skip
    assert "was made with plugin 'distance-decay' 0.0.9; this install has 0.1.0" in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    with pytest.raises(plugins.PluginMismatch, match=r"plugin 'distance-decay' 0\.0\.9"):
        load_model(ckpt)


def test_a_config_naming_a_variant_of_a_missing_plugin_is_refused_in_one_line(
    no_plugins: None, m30k: dict[str, Path], tmp_path: Path
) -> None:
    _require_uninstalled()
    cfg = tiny_yaml(m30k, tmp_path / "run.yaml",
                    attention={"enc_self": [{"name": "distance_decay"}]})  # fmt: skip
    res = trainer_cli("train", str(cfg), "--out", str(tmp_path / "run"), status=2)
    assert "unknown attention variant 'distance_decay'" in res.output
    assert "needs its plugin installed" in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    res = trainer_cli("train", str(cfg), "--out", str(tmp_path / "run"), "--set",
                      "attention={}", "--set", "preset=distance-decay", status=2)  # fmt: skip
    assert "unknown preset 'distance-decay'" in res.output


def _plugin_file(path: Path, name: str, variants: str = "", presets: str = "") -> Path:
    path.write_text(
        "from synattn_trainer.plugins import PluginVariant\n"
        "from synattn_trainer.variant_options import VariantConfig\n"
        f"NAME = {name!r}\n"
        f"VARIANTS = {{{variants}}}\nPRESETS = {{{presets}}}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("variants", "presets", "said"),
    [
        ('"dea": PluginVariant(VariantConfig, "x:Y")', "",
         "plugin 'clash' ({origin}) declares variant 'dea', which is a built-in variant"),
        ('"distance_decay": PluginVariant(VariantConfig, "x:Y")', "",
         "variant 'distance_decay' is declared by plugin 'distance-decay' (entry point "
         "distance-decay = synattn_distance_decay of synattn-distance-decay 0.1.0) and by "
         "plugin 'clash' ({origin})"),
        ("", '"slr-gated": {}',
         "plugin 'clash' ({origin}) declares preset 'slr-gated', which is a built-in preset"),
        ("", '"distance-decay": {}',
         "preset 'distance-decay' is declared by plugin 'distance-decay'"),
    ],
)  # fmt: skip
def test_a_name_that_clashes_is_refused_at_start_up_naming_both(
    variants: str, presets: str, said: str, installed: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    path = _plugin_file(tmp_path / "clash.py", "clash", variants, presets)
    monkeypatch.setenv(plugins.PLUGINS_ENV, str(path))
    origin = f"SYNATTN_PLUGINS entry {path}"
    with pytest.raises(plugins.PluginError) as caught:
        plugins.load_plugins()
    assert said.format(origin=origin) in str(caught.value)
    # every later look-up says the same; no plugin got in
    with pytest.raises(plugins.PluginError, match="clash"):
        _ = "vanilla" in OPTIONS
    assert "distance_decay" not in dict.keys(OPTIONS)
    assert "distance-decay" not in dict.keys(VARIANTS)
    # a training worker refuses to start, in one line
    from synattn_jobs.cli import register

    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["worker", "--queues", "train"])
    assert res.exit_code == 2 and said.format(origin=origin) in " ".join(res.output.split())


def test_synattn_presets_lists_the_plugins_presets(plugin_site: Path) -> None:
    """A fresh process, as a user runs it: the plugin found on PYTHONPATH by its metadata."""
    env = {**os.environ, "PYTHONPATH": str(plugin_site)}
    env.pop(plugins.PLUGINS_ENV, None)
    proc = subprocess.run([SYNATTN, "presets"], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("distance-decay ")]
    assert "plugin distance-decay" in line and "distance_decay" in line


# ---------------------------------------------------------------------------------- the queue


@pytest.fixture
def queue(tmp_path: Path, m30k: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:  # fmt: skip
    """A job store and settings of their own; the data root holds the parsed data."""
    from synattn_jobs import settings as settings_mod
    from synattn_jobs import worker
    from synattn_jobs.store import JobStore

    root = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("SYNATTN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SYNATTN_DATA_ROOT", str(root))
    monkeypatch.setenv("SYNATTN_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SYNATTN_HEARTBEAT_S", "0.5")
    settings_mod.get_settings.cache_clear()
    settings = settings_mod.get_settings()
    monkeypatch.setattr(worker, "_store", JobStore(settings.database_url))
    monkeypatch.setattr(worker, "once_mode", lambda: False)
    config = tiny_yaml(m30k, root / "plugin-configs" / f"{tmp_path.name}.yaml",
                       preset="distance-decay")  # fmt: skip
    yield SimpleNamespace(settings=settings, store=worker._store, config=config)
    settings_mod.get_settings.cache_clear()


def _run(queue: Any, stored: Any, name: str) -> Any:
    from synattn_jobs import worker

    out = queue.settings.runs_dir / name
    job = queue.store.create_job("train", name, stored.model_dump(mode="json"), str(out))
    worker.execute(SimpleNamespace(request=SimpleNamespace(retries=0)), job.id, "train")
    return queue.store.get(job.id)


def test_the_queue_trains_with_the_plugin_and_a_worker_without_it_refuses(
    installed: Path, queue: Any
) -> None:
    from synattn_jobs.specs import StoredTrainSpec, TrainJobSpec
    from synattn_jobs.submit import resolve_train_spec

    stored = resolve_train_spec(TrainJobSpec(config=str(queue.config), evaluate=None),
                                queue.settings)  # fmt: skip
    p = plugins.load_plugins()["distance-decay"]
    assert stored.plugins == {"distance-decay": p.record()}
    assert stored.model_dump(mode="json")["plugins"] == {"distance-decay": p.record()}
    # a worker with the plugin trains the job
    job = _run(queue, stored, "with")
    assert job.state == "succeeded", job.error
    state = torch.load(job.result["checkpoint"], map_location="cpu", weights_only=False)
    assert state[plugins.PLUGINS_KEY] == stored.plugins
    # one with another version refuses it before training
    other = StoredTrainSpec.model_validate(
        {**stored.model_dump(mode="json"),
         "plugins": {"distance-decay": {**p.record(), "version": "0.2.0"}}}
    )  # fmt: skip
    job = _run(queue, other, "other-version")
    assert job.state == "failed"
    assert job.error.startswith("PluginMismatch: the job was made with plugin 'distance-decay' "
                                "0.2.0; this install has 0.1.0")  # fmt: skip
    assert not (queue.settings.runs_dir / "other-version" / "metrics.jsonl").exists()
    # and one without the plugin refuses it too, naming it
    sys.path.remove(str(installed))
    _require_uninstalled()
    plugins.reset()
    _forget_plugin_modules()
    job = _run(queue, stored, "without")
    assert job.state == "failed"
    assert job.error.startswith(
        "PluginMismatch: the job needs plugin 'distance-decay' 0.1.0 (variants distance_decay), "
        "which is not installed here"
    )
    assert not (queue.settings.runs_dir / "without" / "metrics.jsonl").exists()


def test_a_stored_spec_of_built_in_variants_is_stored_as_before(no_plugins: None) -> None:
    from synattn_jobs.specs import StoredTrainSpec

    spec = StoredTrainSpec(config="c.yaml", resolved={"name": "x"})
    assert "plugins" not in spec.model_dump(mode="json")
