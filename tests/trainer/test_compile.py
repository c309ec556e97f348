"""``train.compile``: the training forward is traced once, whatever the batch's shape.

On the GPU run (results/gpu/) a compiled forward was slower than eager: it recompiled for every
update until dynamo gave up. These tests pin what caused that, with dynamo's ``eager`` backend
(the same tracing and guards as inductor, none of its code generation): no guard on the update
counter, on the batch's sizes or on the count of target tokens, and no graph break in vanilla.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from synattn_trainer.config import TrainConfig
from synattn_trainer.data import load_corpus, make_batch
from synattn_trainer.model import Transformer
from synattn_trainer.tokenizer import load_tokenizer
from synattn_trainer.train import compile_forward, update_loss
from tests.trainer.conftest import preset_config

# sentence groups of different lengths and sizes: each is a batch of a new shape (never one
# sentence: dynamo specialises a size of 1, and a token-budget batch is never that small)
GROUPS = [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9, 10], [11, 12, 13], [14, 15], [16, 17, 18, 19]]


@pytest.mark.parametrize(
    "preset", ["vanilla", "disagreement+routing", "fixed-word", "lisa", "pascal", "localness+rhe"]
)
def test_a_compiled_forward_is_one_graph_for_every_shape_and_update(
    preset: str, m30k: dict[str, Path], fx_config_restored: ModuleType
) -> None:
    """One graph, no break, traced once: five more updates with other shapes (and a growing
    update counter, which schedules read) trace nothing new, and the compiled loss is the
    eager loss. ``disagreement`` scales its loss by the target tokens, which once were a
    Python number read from the device inside the forward; ``fixed`` once built its patterns
    inside the forward from sentence lengths read back from the device; ``lisa``'s one-hot
    target pinned the source length; the first batch of ``pascal`` and ``localness+rhe`` has a
    source as long as its target, which duck sizing once made a condition of the graph."""
    cfg = preset_config(m30k, preset)
    tok = load_tokenizer(cfg.data.tokenizer)
    corpus = load_corpus(m30k["valid"], tok, source_eos=cfg.data.source_eos)
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).train()
    model.state.max_updates = 100
    torch._dynamo.reset()
    counters.clear()
    compiled = compile_forward(model, backend="eager")
    requests = model.feature_requests()
    shapes = set()
    traced_after_warmup = 0
    for update, group in enumerate(GROUPS):
        model.state.update = update
        batch = make_batch(corpus, group, requests)
        shapes.add((*batch.src.shape, *batch.tgt_in.shape))
        torch.manual_seed(update)  # the same draws for both (pascal drops parents at random)
        loss, _, _ = update_loss(compiled, batch, 0.1, batch.ntokens)
        loss.backward()
        torch.manual_seed(update)
        eager, _, _ = update_loss(model, batch, 0.1, batch.ntokens)
        torch.testing.assert_close(loss, eager)
        if update == 1:
            traced_after_warmup = counters["stats"]["unique_graphs"]
    assert len(shapes) == len(GROUPS)  # every batch had a shape of its own
    assert traced_after_warmup == 1
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert not counters["graph_break"], dict(counters["graph_break"])


def test_gated_slrs_prewarm_check_stays_outside_the_graph(
    m30k: dict[str, Path], fx_config_restored: ModuleType
) -> None:
    """``Slr.frozen`` reads the update counter, a Python number: traced, it would be guarded on
    and recompile the graph at every update. ``compile_forward`` keeps it out of the graph
    (``outside_graph``), so updates trace nothing new once both of its answers were seen
    (frozen for the first 40% of the run, then not), and the compiled loss is the eager one
    (without syntax ignoring, whose eager CPU dropout draws other masks than a traced one)."""
    raw = preset_config(m30k, "slr-gated").model_dump()
    raw["attention"]["enc_self"][0]["options"]["ignore_p"] = 0.0
    cfg = TrainConfig.model_validate(raw)
    tok = load_tokenizer(cfg.data.tokenizer)
    corpus = load_corpus(m30k["valid"], tok, source_eos=cfg.data.source_eos)
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).train()
    model.state.max_updates = 10  # updates 0-3 pre-warm, 4 on train the gate
    torch._dynamo.reset()
    counters.clear()
    compiled = compile_forward(model, backend="eager")
    requests = model.feature_requests()
    graphs = []
    for update, group in enumerate(GROUPS):
        model.state.update = update
        batch = make_batch(corpus, group, requests)
        torch.manual_seed(update)
        loss, _, _ = update_loss(compiled, batch, 0.1, batch.ntokens)
        loss.backward()
        torch.manual_seed(update)
        eager, _, _ = update_loss(model, batch, 0.1, batch.ntokens)
        torch.testing.assert_close(loss, eager)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[1] == graphs[3] and graphs[5] == graphs[6], graphs
    assert counters["graph_break"], "frozen() was traced into the graph"


def test_a_process_that_compiles_nothing_never_imports_dynamo(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """Dynamo is 1-2 s of start-up; a worker, the CLI or the API that trains or runs a model
    with an ``outside_graph`` method (gated SLR, here past its pre-warm-up) eagerly does not
    pay it."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(preset_config(m30k, "slr-gated").model_dump_json())
    code = f"""
import sys, torch
from synattn_trainer.config import TrainConfig
from synattn_trainer.data import load_corpus, make_batch
from synattn_trainer.model import Transformer
from synattn_trainer.tokenizer import load_tokenizer
from synattn_trainer.train import update_loss
cfg = TrainConfig.model_validate_json(open({str(cfg)!r}).read())
tok = load_tokenizer(cfg.data.tokenizer)
model = Transformer(cfg, tok.get_vocab_size()).train()
model.state.update, model.state.max_updates = 5, 10
corpus = load_corpus(cfg.data.valid, tok, source_eos=cfg.data.source_eos)
batch = make_batch(corpus, [0, 1, 2], model.feature_requests())
update_loss(model, batch, 0.1, batch.ntokens)[0].backward()
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", res.stdout
