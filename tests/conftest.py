"""Shared fixtures: the running example ("Bush held a talk with Sharon .", docs/papers/) and
paths to ../shared/data."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from pathlib import Path
from types import ModuleType

# One compute thread per test process, set before torch is first imported: the suite runs two
# pytest-xdist workers on two cores, and two torch processes of two OpenMP threads each
# (their default there) spin against each other; a 3-second test took 50 in the full suite.
# Subprocesses inherit it; a test that wants threads sets them itself.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import nltk
import pytest
from hypothesis import HealthCheck, settings

# No per-example deadline (a loaded 2-core CI machine is slow, not wrong); CI runs derandomised so
# a red run is reproducible.
settings.register_profile("dev", deadline=None)
settings.register_profile(
    "ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if __import__("os").environ.get("CI") else "dev")

pytest_plugins = ["tests.file_order"]  # the slowest files first (make test spreads files)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(
    __import__("os").environ.get("SYNATTN_DATA_DIR", REPO.parent / "shared" / "data")
)


def free_port() -> int:
    """A TCP port free on loopback now (for servers the tests start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bench_script(name: str) -> ModuleType:
    """``bench/<kind>/<name>.py`` loaded as the module ``bench_<name>`` (bench/ is not a
    package; its scripts are grouped by kind: parsing, training, scale, jobs, peers, gpu)."""
    (path,) = (REPO / "bench").glob(f"*/{name}.py")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = mod
    spec.loader.exec_module(mod)
    return mod


RUNNING_WORDS = ("Bush", "held", "a", "talk", "with", "Sharon", ".")
RUNNING_TREE = (
    "(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk)) (PP (IN with) (NP (NNP Sharon))))"
    " (. .))"
)
RUNNING_HEADS = (2, 0, 4, 2, 2, 5, 2)
RUNNING_UPOS = ("PROPN", "VERB", "DET", "NOUN", "ADP", "PROPN", "PUNCT")
RUNNING_XPOS = ("NNP", "VBD", "DT", "NN", "IN", "NNP", ".")
# Sharon -> Shar@@ on, then </s>
RUNNING_SUBWORDS = ("Bush", "held", "a", "talk", "with", "Shar@@", "on", ".", "</s>")
RUNNING_S2W = (0, 1, 2, 3, 4, 5, 5, 6, -1)


@pytest.fixture
def running_tree() -> nltk.Tree:
    return nltk.Tree.fromstring(RUNNING_TREE)


def data_file(*parts: str) -> Path:
    """A file under ../shared/data, skipping the test when the data is not beside the repo."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path
