"""A misspelled key or variant is refused with the close match, as preset names are (issue 72
§5): ``train.max_update`` gets pydantic's "Extra inputs are not permitted" and the setting it
is close to; a grid's misspelled variant gets its close presets, not all 31."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from synattn_shared.errors import one_line
from synattn_trainer.config import load_config

DATA = {"train": "t", "valid": "v", "tokenizer": "k"}


def config(tmp_path: Path, **raw: object) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"data": DATA, **raw}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("raw", "overrides", "want"),
    [
        ({"train": {"max_update": 5}}, {},
         "train.max_update: Extra inputs are not permitted; close matches: train.max_updates"),
        ({}, {"optim.lrr": 0.1},
         "optim.lrr: Extra inputs are not permitted; close matches: optim.lr"),
        ({"optm": {"lr": 0.1}}, {}, "optm: Extra inputs are not permitted; close matches: optim"),
        # nothing close: pydantic's own line
        ({"train": {"zzz": 1}}, {}, "train.zzz: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_a_misspelled_key_is_refused_with_its_close_match(
    tmp_path: Path, raw: dict[str, object], overrides: dict[str, object], want: str
) -> None:
    with pytest.raises(ValidationError) as info:
        load_config(config(tmp_path, **raw), overrides)
    assert one_line(info.value) == want


def test_the_right_keys_are_untouched(tmp_path: Path) -> None:
    cfg = load_config(config(tmp_path, train={"max_updates": 5}, preset="dea"))
    assert cfg.train.max_updates == 5


def test_a_grids_misspelled_variant_names_its_close_presets_only() -> None:
    from synattn_jobs.errors import BadJobSpec
    from synattn_jobs.specs import ExperimentSpec
    from synattn_trainer.presets import VARIANTS

    spec = ExperimentSpec(name="g", config="c.yaml", variants=["vanila", "slr-gatd"])
    with pytest.raises(BadJobSpec) as info:
        spec.expand(100)
    said = str(info.value)
    assert "'vanila': close matches: vanilla" in said
    assert "'slr-gatd': close matches: slr-gated" in said
    assert f"synattn presets lists all {len(VARIANTS)}" in said
    assert "headmask" not in said and len(said) < 300  # not every preset there is
