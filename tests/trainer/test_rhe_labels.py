"""synattn analyze --rhe-labels: RHE's two readings (Eq. 10 and the paper's prose) measured on a
checkpoint's plain attention, and on an RHE run's own labels, with where confident heads look."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synattn_trainer.train import Trainer
from tests.trainer.conftest import tiny_config, trainer_cli

REPO = Path(__file__).resolve().parents[2]
RHE = {"enc_self": [{"name": "rhe", "layers": [0], "options": {"gate": "confidence"}}]}


def _labels(run: Path, data: Path, out: Path) -> dict:  # type: ignore[type-arg]
    done = trainer_cli("analyze", str(run), "--rhe-labels", "--dev", str(data), "--out", str(out))
    assert "Eq.10" in done.output and "prose" in done.output
    return json.loads((out / "rhe_labels.json").read_text())["checkpoints"][-1]["layers"]["0"]


@pytest.mark.parametrize("attention", [{}, RHE], ids=["vanilla", "rhe-prose"])
def test_both_readings_are_measured(attention, m30k, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tiny_config(
        m30k, attention=attention, train={"max_updates": 2, "checkpoint_every_updates": 2}
    )
    Trainer(cfg, tmp_path / "run", progress=False).train()
    layer = _labels(tmp_path / "run", m30k["valid"], tmp_path / "analysis")
    for reading in ("dynamic", "confidence", "fixed_0.5"):
        share = layer[reading]["head_sentence_share"]
        assert 0.0 <= share <= 1.0 and len(layer[reading]["per_head"]) == 4
    assert 0 < layer["mean_h_conf"] <= 1 and 0 <= layer["mean_syn_attn"] <= 1
    if attention:  # the labels the run applied are its configured reading's
        assert layer["applied_confidence"] == layer["confidence"]
    else:  # where the largest weights go: every query's argmax has exactly one kind
        kinds = [k for k in layer if k.startswith("mean_argmax_")]
        assert len(kinds) == 5
        assert sum(layer[k] for k in kinds) == pytest.approx(1.0, abs=2e-4)


def test_tree_depth_is_an_analysis_of_the_parsed_split(m30k, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """synattn analyze --tree-depth: the constituency depth of a parsed split beside the RHE
    paper's, and the k its rule gives (no model needed)."""
    done = trainer_cli("analyze", "--tree-depth", "--dev", str(m30k["valid"]), "--out",
                       str(tmp_path / "depth"))  # fmt: skip
    assert "dev: 60 sentences" in done.output and "its rule: k =" in done.output
    record = json.loads((tmp_path / "depth" / "tree_depth.json").read_text())
    assert record["dev"]["sentences"] == 60 and len(record["rule_k"]) == 2
    assert 0 < record["dev"]["max_layer_mean"] < 40
