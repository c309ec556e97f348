"""Analysis figures from a real (tiny) run with a gated and an RHE variant."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from synattn_trainer.plots import variant_history
from synattn_trainer.train import Trainer
from tests.trainer.conftest import tiny_config, trainer_cli

PNG = b"\x89PNG\r\n\x1a\n"


def synattn(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``synattn`` command in its own process: exit status and stderr as a user sees them."""
    return subprocess.run(
        [sys.executable, "-m", "synattn_shared.cli", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_gate_heatmap_label_history_and_attention_png(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    cfg = tiny_config(
        m30k,
        train={"max_updates": 6, "log_every": 2},
        attention={
            "enc_self": [
                {"name": "slr", "layers": [1], "options": {"mode": "gated"}},
                {"name": "rhe", "layers": [0], "options": {"sea": "lpea"}},
            ]
        },
    )
    run = tmp_path / "run"
    Trainer(cfg, run, progress=False).train()
    history = variant_history(run / "metrics.jsonl")
    assert {"gate", "important"} <= set(history)
    update, gates = history["gate"][-1]
    assert update == 6 and set(gates) == {f"enc_self.1.h{h}" for h in range(4)}
    # the heatmap's values: the dev set in eval mode (gated SLR's Fig. 3), mean and spread
    from synattn_trainer.analysis import dev_gates
    from synattn_trainer.data import load_corpus
    from synattn_trainer.loading import load_model
    from synattn_trainer.plots import dev_gate_values
    from synattn_trainer.tokenizer import load_tokenizer

    dev = dev_gate_values(run / "metrics.jsonl")
    assert dev is not None
    dev_update, means, stds = dev
    assert dev_update == 6 and set(means) == set(stds) == {f"enc_self.1.h{h}" for h in range(4)}
    assert all(0 <= v <= 1 for v in means.values()) and all(s >= 0 for s in stds.values())
    model, _ = load_model(run / "checkpoints" / "ckpt-00000006.pt")
    again = dev_gates(model, load_corpus(m30k["valid"], load_tokenizer(m30k["tokenizer"])))
    assert again == {f"enc_self.1.gate.h{h}": means[f"enc_self.1.h{h}"] for h in range(4)} | {
        f"enc_self.1.gate_std.h{h}": stds[f"enc_self.1.h{h}"] for h in range(4)}  # fmt: skip

    trainer_cli("plot", "gates", str(run))
    assert (run / "plots" / "gates.png").read_bytes().startswith(PNG)
    trainer_cli("plot", "labels", str(run))
    assert (run / "plots" / "rhe-labels.png").read_bytes().startswith(PNG)
    for kind in ("enc_self", "enc_dec"):
        out = tmp_path / f"{kind}.png"
        trainer_cli(
            "plot", "attention", "--checkpoint", str(run / "averaged.pt"), "--data",
            str(m30k["valid"]), "--row", "3", "--kind", kind, "--layer", "0", "--out", str(out),
        )  # fmt: skip
        assert out.read_bytes().startswith(PNG)
    bad = trainer_cli(
        "plot", "attention", "--checkpoint", str(run / "averaged.pt"), "--data",
        str(m30k["valid"]), "--layer", "9", "--out", str(tmp_path / "x.png"), status=2,
    )  # fmt: skip
    assert "no enc_self layer 9" in bad.output


def test_plots_without_logged_values_fail_clearly(m30k: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "vanilla"
    Trainer(tiny_config(m30k, train={"max_updates": 2}), run, progress=False).train()
    res = synattn("plot", "gates", str(run))
    assert res.returncode == 2 and "no 'gate' values logged" in res.stderr


def test_attention_export_holds_every_module_as_applied(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """``synattn attention``: one (heads, queries, keys) array per module, the probabilities
    the model applied; fixed heads export their patterns, not a softmax."""
    import numpy as np

    from synattn_trainer.patterns import token_patterns

    cfg = tiny_config(
        m30k,
        model={"heads": 8},
        train={"max_updates": 2},
        attention={"enc_self": [{"name": "fixed", "layers": [0]}]},
    )
    run = tmp_path / "fixed"
    Trainer(cfg, run, progress=False).train()
    out = tmp_path / "att.npz"
    trainer_cli("attention", "--checkpoint", str(run / "averaged.pt"), "--data",
                str(m30k["valid"]), "--row", "2", "--out", str(out))  # fmt: skip
    z = np.load(out)
    names = {"enc_self.0", "enc_self.1", "dec_self.0", "dec_self.1", "enc_dec.0", "enc_dec.1"}
    assert names <= set(z.files)
    n, m = len(z["src_tokens"]), len(z["tgt_tokens"])
    assert z["enc_self.0"].shape == (8, n, n) and z["enc_dec.1"].shape == (8, m, n)
    assert z["dec_self.0"].shape == (8, m, m)
    np.testing.assert_allclose(z["enc_self.0"][:7], token_patterns(n)[:7], atol=1e-6)
    np.testing.assert_allclose(z["enc_dec.0"].sum(-1), 1, atol=1e-4)
    bad = synattn("attention", "--checkpoint", str(tmp_path / "nope.pt"), "--data",
                  str(m30k["valid"]), "--out", str(tmp_path / "x.npz"))  # fmt: skip
    assert bad.returncode == 2 and "no such checkpoint" in bad.stderr


def test_the_gate_figure_title_is_inside_the_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dev-set gate title is long; over a few heads it was cut off at both edges of
    report.html's figure. It is wrapped to the figure's width and the whole of it is drawn."""
    import json

    import matplotlib.pyplot as plt

    from synattn_trainer import plots

    for heads in (1, 4, 8, 16):
        metrics = tmp_path / f"metrics-{heads}.jsonl"
        rec: dict[str, float | str] = {"event": "gates_dev", "update": 1200}
        for h in range(heads):
            rec |= {f"enc_self.1.gate.h{h}": 0.1, f"enc_self.1.gate_std.h{h}": 0.01}
        metrics.write_text(json.dumps(rec) + "\n", encoding="utf-8")
        figures: list[Any] = []
        monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to measure it
        out = plots.gate_heatmap(metrics, tmp_path / f"gates-{heads}.png")
        monkeypatch.undo()
        (fig,) = figures
        title = fig._suptitle
        assert title.get_text().replace("\n", " ") == (
            "gate per layer and head, dev set, eval mode (update 1200); mean ± std"
        )
        box, page = title.get_window_extent(fig.canvas.get_renderer()), fig.bbox
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1, heads
        for ax in fig.axes:  # the title is above the heatmap and its colour bar
            assert box.y0 >= ax.get_window_extent().y1, heads
        assert out.read_bytes().startswith(PNG)
        plt.close(fig)
