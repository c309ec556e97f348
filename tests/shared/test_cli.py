"""The ``synattn`` CLI as a user runs it: a real process, exit codes, one-line errors."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

EXAMPLES = REPO / "examples"


def synattn(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "synattn_shared.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_features_and_inspect_on_ptb(tmp_path):
    out = tmp_path / "ptb"
    res = synattn("features", "--trees", str(EXAMPLES / "running_example.mrg"), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "4 sentences (4 with syntax) in 1 shards" in res.stdout
    shown = synattn("inspect", str(out), "--row", "0", "--k", "2")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "Bush held a talk with Sharon ." in text
    assert "syn_dist (flat) [3, 2, 1, 2, 1, 3]" in text
    assert "RP (key layer - query layer" in text and "oo" in text
    assert "parser given" in text and "constituency=given" in text
    # a re-run keeps the finished shard
    again = synattn(
        "features", "--trees", str(EXAMPLES / "running_example.mrg"), "--out", str(out)
    )
    assert "0 written, 1 kept" in again.stdout


def test_features_on_conllu_derives_constituency(tmp_path):
    out = tmp_path / "dep"
    res = synattn(
        "features",
        "--trees",
        str(EXAMPLES / "running_example.conllu"),
        "--out",
        str(out),
        "--scheme",
        "two_level",
    )
    assert res.returncode == 0, res.stderr
    shown = synattn("inspect", str(out), "--row", "1")
    assert "sent_id hearing" in shown.stdout
    assert "syn_dist (flat) [1, 4, 4, 3, 2, 1, 3, 3]" in shown.stdout
    assert "derived:two_level" in shown.stdout


def test_bad_input_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.conllu"
    bad.write_text(
        "# sent_id = loop\n1\ta\ta\tX\tX\t_\t2\tdep\t_\t_\n2\tb\tb\tX\tX\t_\t1\tdep\t_\t_\n\n"
    )
    out = tmp_path / "out"
    res = synattn("features", "--trees", str(bad), "--out", str(out))
    assert res.returncode == 2
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1
    assert "bad.conllu:1: sentence loop:" in lines[0] and "cycle" in lines[0]
    assert not list(out.glob("part-*.parquet"))
    missing = synattn("features", "--trees", str(tmp_path / "nope.mrg"), "--out", str(out))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    wrong = tmp_path / "x.txt"
    wrong.write_text("hello")
    assert synattn("features", "--trees", str(wrong), "--out", str(out)).returncode == 2
    assert synattn("inspect", str(tmp_path / "empty")).returncode == 2


def test_starting_the_cli_loads_no_tree_library_and_no_torch() -> None:
    """Every command, API server and worker starts through these imports: nltk (which pulls in
    scipy.stats, 1-2 s) and torch load only where a command builds a tree or a model."""
    startup = "from synattn_shared.cli import _load_plugins; _load_plugins()"
    assert loaded_after(startup, ("nltk", "scipy", "torch", "spacy")) == "[]"


def test_a_worker_and_the_settings_load_no_web_framework() -> None:
    """A queue worker, and every command that reads the job or parser settings, needs the
    HTTP deadlines as settings fields, not FastAPI (0.19 s of imports per process, a median of
    15: bench/jobs/process_start.py; the tests start dozens of workers)."""
    startup = "import synattn_jobs.worker, synattn_parser.settings"
    assert loaded_after(startup, ("fastapi", "starlette", "uvicorn")) == "[]"


def loaded_after(startup: str, modules: tuple[str, ...]) -> str:
    """Which of ``modules`` a fresh interpreter holds after running ``startup``, printed as a
    sorted list."""
    probe = f"import sys; {startup}; print(sorted(m for m in {modules!r} if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()
