"""Presets by name through the job queue: ``synattn submit train --set preset=NAME``, the job
API's ``preset``, grids whose variants name presets, and ``synattn presets [show NAME]``.

Nothing here trains: a data root of configs over stand-in data (``tests.stand_in``: a shard
directory of two sentences, a tiny tokenizer) is enough for what is checked and stored at
submit time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer import Typer
from typer.testing import CliRunner

from synattn_trainer.config import TrainConfig, load_config
from synattn_trainer.presets import VARIANTS, paper_of, summary
from tests.jobs.conftest import Env, h, serving, tiny_yaml
from tests.stand_in import stand_in_data


@pytest.fixture
def light(tmp_path: Path) -> Env:
    """A queue (embedded broker and store) over a data root holding ``configs/tiny.yaml``."""
    root, home = tmp_path / "root", tmp_path / "home"
    home.mkdir()
    fake = stand_in_data(root / "data")  # real enough for the checks at the door
    tiny_yaml(fake, root / "configs" / "tiny.yaml")
    return Env(root, home, f"sqla+sqlite:///{home / 'broker.sqlite'}")


def by_name(env: Env, preset: str) -> dict[str, Any]:
    """The configuration ``preset`` gives on ``configs/tiny.yaml``, resolved as a job stores it."""
    cfg = load_config(env.root / "configs" / "tiny.yaml", {"preset": preset})
    return cfg.model_dump(mode="json")


def test_submit_train_with_set_preset(light: Env) -> None:
    cfg = str(light.root / "configs" / "tiny.yaml")
    job_id = light.cli("submit", "train", cfg, "--set", "preset=dea").stdout.strip()
    spec = light.store().get(job_id).spec
    assert spec["overrides"] == {"preset": "dea"}
    assert spec["resolved"] == by_name(light, "dea")
    assert spec["resolved"]["attention"] == {
        "enc_self": [{"name": "dea", "layers": [0], "options": {}}]
    }
    # with a variant of the submitter's own beside the preset's
    job_id = light.cli("submit", "train", cfg, "--set", "preset=slr-gated", "--set",
                       "attention={dec_self: [{name: disagreement}]}").stdout.strip()  # fmt: skip
    resolved = light.store().get(job_id).spec["resolved"]["attention"]
    assert [s["name"] for s in resolved["enc_self"]] == ["slr"]
    assert [s["name"] for s in resolved["dec_self"]] == ["disagreement"]

    for sets, words in [
        (["preset=dae"], ["preset: unknown preset 'dae'; close matches: dea"]),
        (["preset=slr-gated", "attention={enc_self: [{name: rhe, layers: [0]}]}"],
         ["'slr' (from preset 'slr-gated')", "'rhe'", "both replace the attention"]),
    ]:  # fmt: skip
        args = [a for s in sets for a in ("--set", s)]
        bad = light.cli("submit", "train", cfg, *args, check=False)
        assert bad.returncode == 2, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        for word in words:
            assert word in bad.stderr, bad.stderr
    assert len(light.store().jobs()) == 2


def test_the_job_api_takes_a_preset(light: Env) -> None:
    with serving(light) as (base, token, _):
        spec = {"config": "configs/tiny.yaml", "overrides": {"train.max_updates": 4}}
        r = httpx.post(f"{base}/v1/jobs/train", headers=h(token),
                       json={"name": "gated", "spec": spec, "preset": "slr-gated"})  # fmt: skip
        assert r.status_code == 201, r.text
        stored = r.json()["spec"]
        assert stored["overrides"] == {"preset": "slr-gated", "train.max_updates": 4}
        want = by_name(light, "slr-gated")
        assert stored["resolved"] == {**want, "train": {**want["train"], "max_updates": 4}}
        # the preset as an override, as the CLI's --set and a grid give it
        as_override = {"spec": {**spec, "overrides": {"preset": "headmask-impt"}}}
        r = httpx.post(f"{base}/v1/jobs/train", headers=h(token), json=as_override)
        assert r.status_code == 201, r.text
        assert r.json()["spec"]["resolved"]["headmask"]["mode"] == "impt"

        for body, words in [
            ({"spec": spec, "preset": "slr-gatd"}, ["unknown preset 'slr-gatd'", "slr-gated"]),
            ({"spec": {**spec, "overrides": {"preset": "dea"}}, "preset": "lpea"},
             ["preset 'lpea' and spec.overrides.preset 'dea'"]),
            ({"spec": spec, "preset": "../x"}, ["preset"]),
        ]:  # fmt: skip
            r = httpx.post(f"{base}/v1/jobs/train", headers=h(token), json=body)
            assert r.status_code == 422, r.text
            for word in words:
                assert word in r.text, r.text
        schema = httpx.get(f"{base}/openapi.json").json()["components"]["schemas"]
        assert "preset" in schema["TrainRequest"]["properties"]
        assert len(httpx.get(f"{base}/v1/jobs", headers=h(token)).json()) == 2


def test_a_grid_names_presets_in_its_variants(light: Env) -> None:
    """A grid file's variants may be presets by name (as before), or fragments that name a
    preset and add to it; a grid may also sweep presets as a parameter."""
    grid = {
        "name": "by-name",
        "config": "../configs/tiny.yaml",
        "variants": {
            "vanilla": {},
            "slr-gated": {},
            "gated": {"preset": "slr-gated"},
            "gated+dis": {"preset": "slr-gated",
                          "attention": {"dec_self": [{"name": "disagreement"}]}},
        },
        "seeds": [7],
    }  # fmt: skip
    path = light.root / "grids" / "by-name.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(grid), encoding="utf-8")
    light.cli("experiment", "run", str(path))
    jobs = {j.variant: j.spec["resolved"] for j in light.store().jobs()}
    assert jobs["gated"] == jobs["slr-gated"] == by_name(light, "slr-gated")
    assert jobs["gated+dis"]["attention"]["enc_self"] == jobs["gated"]["attention"]["enc_self"]
    assert [s["name"] for s in jobs["gated+dis"]["attention"]["dec_self"]] == ["disagreement"]
    assert jobs["vanilla"]["attention"] == {}

    sweep = {"name": "sweep", "config": "../configs/tiny.yaml", "variants": ["vanilla"],
             "params": {"preset": ["dea", "headmask-impt"]}, "seeds": [7]}  # fmt: skip
    path.write_text(yaml.safe_dump(sweep), encoding="utf-8")
    light.cli("experiment", "run", str(path))
    swept = {j.name: j.spec["resolved"] for j in light.store().jobs()}
    assert swept["vanilla-s7-presetdea"] == by_name(light, "dea")
    assert swept["vanilla-s7-presetheadmask-impt"] == by_name(light, "headmask-impt")


def presets_cli(*args: str, status: int = 0) -> Any:
    """``synattn presets ...`` in this process (the job commands' own registration)."""
    from synattn_jobs.cli import register

    app = Typer()
    register(app)
    res = CliRunner().invoke(app, ["presets", *args])
    assert res.exit_code == status, (res.output, res.exception)
    return res


def test_presets_lists_every_preset_with_its_paper_and_what_it_sets() -> None:
    lines = presets_cli().stdout.splitlines()
    assert lines[0].split() == ["preset", "paper", "sets"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == list(VARIANTS)
    for name, line in rows.items():
        assert paper_of(name).label() in line and line.endswith(summary(name)), line
        assert "seed" not in line.lower(), line
    assert "Hou" in rows["slr-gated"] and "gated SLR" in rows["slr-gated"]
    assert "slr(mode=gated, prewarm_fraction=0.4, ignore_p=0.2)" in rows["slr-gated"]
    assert (
        "Zhang et al. 2021" in rows["rhe+lpea"] and "rhe(sea=lpea) on layer 0" in rows["rhe+lpea"]
    )
    assert "Sun et al." in rows["headmask-impt"] and "headmask.mode=impt" in rows["headmask-impt"]


@pytest.mark.parametrize("name", ["slr-gated", "disagreement+routing", "8L", "vanilla"])
def test_presets_show_prints_the_block_a_preset_stands_for(name: str) -> None:
    out = presets_cli("show", name).stdout
    assert out.startswith(f"# {name}: {summary(name)}\n")
    assert yaml.safe_load(out) == VARIANTS[name]
    if name == "slr-gated":
        assert "attention:\n  enc_self:\n  - name: slr\n" in out
    base = {"data": {"train": "t", "valid": "v", "tokenizer": "k"}}
    from synattn_trainer.presets import merge

    assert TrainConfig.model_validate(merge(base, yaml.safe_load(out))) == TrainConfig(
        **base, preset=name
    )


def test_an_unknown_preset_exits_with_one_line_naming_close_matches(light: Env) -> None:
    bad = light.cli("presets", "show", "slr-gate", check=False)  # a real process's streams
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "error: unknown preset 'slr-gate'; close matches: slr-gated, slr-gated-bn, slr-avg, "
        f"slr-pure (synattn presets lists all {len(VARIANTS)})"
    ]
    assert "none is close" in presets_cli("show", "transformer-xl", status=2).output
