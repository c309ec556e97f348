"""The example notebook (examples/notebooks/attention.ipynb) executed as a user runs it: a real
Jupyter kernel on this interpreter, a tiny trained model in ``SYNATTN_CHECKPOINT``; every cell
runs, the heads and the parse come out as images, and the committed file carries no outputs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import install
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from synattn_trainer.train import Trainer
from tests.trainer.conftest import tiny_config

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebooks" / "attention.ipynb"
ATTENTION = {  # syntax-aware: the notebook shows the gated layer's heads beside slr_soft
    "enc_self": [
        {"name": "fixed", "layers": [0], "options": {"fixed": 2}},
        {"name": "slr", "layers": [1], "options": {"mode": "gated"}},
    ]
}


@pytest.fixture(scope="module")
def checkpoint(m30k: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny syntax-aware model trained for a few updates; its final model file."""
    # a short length cap: an untrained model's translations run to it, which costs time
    cfg = tiny_config(m30k, attention=ATTENTION, train={"max_updates": 10},
                      decode={"beam": 2, "max_len_b": 5})  # fmt: skip
    result = Trainer(cfg, tmp_path_factory.mktemp("notebook") / "run", progress=False).train()
    final = result.averaged or result.checkpoint
    assert final is not None
    return final


def _kernel_manager(prefix: Path) -> KernelManager:
    """A kernel manager whose ``python3`` kernel is this interpreter (a kernelspec written
    under ``prefix``), whatever kernels the machine has installed elsewhere."""
    install(prefix=str(prefix), kernel_name="python3")
    specs = KernelSpecManager(
        kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")], ensure_native_kernel=False
    )
    assert specs.get_kernel_spec("python3").argv[0] == sys.executable
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def test_the_committed_notebook_has_no_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert NOTEBOOK.stat().st_size < 50_000


def test_without_a_checkpoint_the_first_cell_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    monkeypatch.delenv("SYNATTN_CHECKPOINT", raising=False)
    with pytest.raises(RuntimeError, match="SYNATTN_CHECKPOINT is not set"):
        exec(first.source, {})
    monkeypatch.setenv("SYNATTN_CHECKPOINT", "/nonexistent/averaged.pt")
    with pytest.raises(FileNotFoundError, match="no such file"):
        exec(first.source, {})


def test_the_notebook_runs_on_a_trained_model(checkpoint: Path, tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the kernel's own inline
    env["SYNATTN_CHECKPOINT"] = str(checkpoint)
    client = NotebookClient(
        nb, km=_kernel_manager(tmp_path / "kernel"), kernel_name="python3", timeout=180,
        resources={"metadata": {"path": str(tmp_path)}},
    )  # fmt: skip
    client.execute(env=env)  # raises CellExecutionError with the cell and traceback
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3, [o.output_type for o in outputs]  # parse, heads, cross-attention
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "parsed with: spacy" in text and "enc_self.1 head 0" in text
    assert "gated (SLR)" in text
