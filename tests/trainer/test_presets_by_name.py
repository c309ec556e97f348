"""A preset named in a training config (``preset: NAME``): the experiment path's configuration,
composed with the config's own variants, refused with both named where they contradict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from synattn_shared.defaults import RP_CLIP
from synattn_trainer.config import TrainConfig, load_config
from synattn_trainer.presets import VARIANTS, merge, paper_of, summary

BASE: dict[str, Any] = {
    "name": "tiny",
    "data": {"train": "data/train", "valid": "data/valid", "tokenizer": "data/tok.json"},
    "model": {"enc_layers": 2, "dec_layers": 2, "d_model": 32, "d_ff": 64, "heads": 8},
    "train": {"max_updates": 10, "seed": 7},
}


def write(folder: Path, name: str, **extra: Any) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**BASE, **extra}), encoding="utf-8")
    return path


def refusal(raw: dict[str, Any]) -> tuple[str, str]:
    """``(location, message)`` of the first error validating ``BASE`` plus ``raw``."""
    with pytest.raises(ValidationError) as info:
        TrainConfig.model_validate({**BASE, **raw})
    first = info.value.errors()[0]
    return ".".join(map(str, first["loc"])), first["msg"]


def dea(layers: list[int] | str = "all", **options: Any) -> dict[str, Any]:
    return {"name": "dea", "layers": layers, "options": options}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_preset_key_equals_the_experiment_paths_configuration(tmp_path: Path, name: str) -> None:
    """``preset: NAME`` in the YAML, or ``--set preset=NAME``, resolves to what a grid running
    variant NAME on the same config queues."""
    from synattn_jobs.specs import ExperimentSpec

    plain = write(tmp_path, "plain")
    grid = ExperimentSpec(name="g", config=str(plain), baseline=name, variants=[name], seeds=[7])
    (job,) = grid.expand(max_jobs=10)
    via_grid = load_config(plain, job["spec"].overrides)
    via_key = load_config(write(tmp_path, "preset", preset=name))
    assert via_key == via_grid
    assert load_config(plain, {"preset": name}) == via_grid
    assert "preset" not in via_key.model_dump()
    # the resolved form, which a job stores and a worker trains, is not expanded twice
    assert TrainConfig.model_validate(via_key.model_dump()) == via_key


def test_the_shown_block_is_what_the_key_stands_for() -> None:
    for name, fragment in VARIANTS.items():
        block = yaml.safe_load(yaml.safe_dump(fragment))
        by_key = TrainConfig.model_validate({**BASE, "preset": name})
        assert TrainConfig.model_validate(merge(BASE, block)) == by_key, name


def test_a_preset_and_the_configs_own_variants_compose() -> None:
    cfg = TrainConfig.model_validate(
        {**BASE, "preset": "slr-gated",
         "attention": {"enc_self": [dea([1])], "dec_self": [{"name": "disagreement"}]}}
    )  # fmt: skip
    assert [s.name for s in cfg.attention["enc_self"]] == ["slr", "dea"]  # the preset's first
    assert cfg.attention["enc_self"][0].options["mode"] == "gated"
    assert [s.name for s in cfg.attention["dec_self"]] == ["disagreement"]
    # a preset outside attention, beside the config's own variants
    cfg = TrainConfig.model_validate(
        {**BASE, "preset": "headmask-impt", "attention": {"enc_self": [dea([0])]}}
    )
    assert cfg.headmask.mode == "impt" and [s.name for s in cfg.attention["enc_self"]] == ["dea"]
    # RHE on the config's Rel_Pos: the preset's variant replaces the attention, Rel_Pos biases it
    cfg = TrainConfig.model_validate(
        {**BASE, "preset": "rhe+dea", "attention": {"enc_self": [{"name": "rel_pos"}]}}
    )
    assert [s.name for s in cfg.variants_for("enc_self", 0)] == ["rhe", "rel_pos"]


def test_settings_the_config_repeats_are_accepted_once() -> None:
    cfg = TrainConfig.model_validate(
        {**BASE, "preset": "8L", "data": {**BASE["data"], "source_eos": False}}
    )
    assert cfg.data.source_eos is False and cfg.data.train.endswith("train")
    # the same variant again, a default spelled out: one LPEA, not two
    lpea = {"name": "lpea", "layers": [0], "options": {"k": RP_CLIP}}
    cfg = TrainConfig.model_validate({**BASE, "preset": "lpea", "attention": {"enc_self": [lpea]}})
    assert len(cfg.attention["enc_self"]) == 1
    assert TrainConfig.model_validate({**BASE, "preset": None}) == TrainConfig(**BASE)


@pytest.mark.parametrize(
    ("raw", "where", "words"),
    [
        # two variants that both replace the attention of layer 0
        ({"preset": "slr-gated", "attention": {"enc_self": [{"name": "rhe", "layers": [0]}]}},
         "attention.enc_self", ["'slr' (from preset 'slr-gated')", "'rhe'", "layer 0",
                                "replace the attention"]),
        # a setting outside attention that says otherwise
        ({"preset": "fixed-word", "data": {**BASE["data"], "source_eos": True}},
         "data.source_eos", ["the config sets true", "preset 'fixed-word' sets false"]),
        ({"preset": "1L", "model": {**BASE["model"], "enc_heads": 2}},
         "model.enc_heads", ["the config sets 2", "preset '1L' sets 1"]),
        # the preset's own variant placed otherwise
        ({"preset": "lpea",
          "attention": {"enc_self": [{"name": "lpea", "layers": [0], "options": {"k": 3}}]}},
         "attention.enc_self", ["preset 'lpea' places lpea on layer 0",
                                "the config places lpea(k=3) on layer 0", "once"]),
        ({"preset": "dea", "attention": {"enc_self": [dea([1])]}},
         "attention.enc_self", ["dea on layer 0", "dea on layer 1"]),
    ],
)  # fmt: skip
def test_a_contradiction_is_refused_naming_both(
    raw: dict[str, Any], where: str, words: list[str]
) -> None:
    loc, msg = refusal(raw)
    assert loc == where
    for word in words:
        assert word in msg, msg


def test_an_unknown_preset_is_refused_with_close_matches() -> None:
    loc, msg = refusal({"preset": "slr-gate"})
    assert loc == "preset"
    assert msg.startswith("unknown preset 'slr-gate'; close matches: slr-gated"), msg
    assert "synattn presets" in msg
    assert "close matches: rhe+dea" in refusal({"preset": "RHE+DEA"})[1]
    assert "none is close" in refusal({"preset": "transformer-xl"})[1]
    assert refusal({"preset": 3}) == ("preset", "a preset's name, not a int")


def test_a_presets_name_in_a_variant_slot_says_how_to_name_it() -> None:
    _, msg = refusal({"attention": {"enc_self": [{"name": "slr-gated"}]}})
    assert msg.startswith("Value error, unknown attention variant 'slr-gated'; known: vanilla")
    assert "'slr-gated' is a preset: write `preset: slr-gated`" in msg
    assert "is a preset" not in refusal({"attention": {"enc_self": [{"name": "nope"}]}})[1]


def test_every_preset_has_a_paper_and_a_summary() -> None:
    assert paper_of("slr-gated").cite.startswith("Hou")
    assert paper_of("dea").cite == "Zhang et al. 2021"
    assert summary("dea") == "enc_self: dea on layer 0"
    assert summary("8L").startswith("data.source_eos=false (the paper's baseline")
    assert summary("disagreement-output") == (
        "enc_self/dec_self/enc_dec: disagreement(term=output)"
    )
    for name in VARIANTS:
        assert "seed" not in paper_of(name).label().lower() and summary(name)
