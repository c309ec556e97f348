"""docs/your-study.md, executed: its YAML files written as the page gives them, its
``synattn study`` commands run as the page gives them, in a project folder of their own, with
the example plugin installed (``pip install --target``) and the suite's small parsed data in
place of ``make data``'s. The one change: ``--poll 1``, so the driver looks every second."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import m30k  # noqa: F401  (session fixture: parsed data + vocab)
from tests.trainer.test_plugins import plugin_site  # noqa: F401  (session fixture)

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "your-study.md"
SYNATTN = str(Path(sys.executable).with_name("synattn"))

pytestmark = pytest.mark.integration


def page_files(text: str) -> dict[str, str]:
    """The page's titled YAML blocks: file name -> content."""
    return dict(re.findall(r'```yaml title="([^"]+)"\n(.*?)```', text, re.DOTALL))


def page_commands(text: str) -> list[list[str]]:
    """The ``synattn`` commands of the page's bash blocks, in order (comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("synattn "):
                out.append(shlex.split(line))
    return out


def test_the_run_your_own_study_walk_runs_as_written(
    m30k: dict[str, Path],  # noqa: F811
    plugin_site: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    text = PAGE.read_text(encoding="utf-8")
    files, commands = page_files(text), page_commands(text)
    assert set(files) == {"tiny.yaml", "my-study.yaml", "my-claims.yaml"}
    assert [c[:3] for c in commands] == [["synattn", "study", "run"],
                                         ["synattn", "study", "status"],
                                         ["synattn", "study", "claims"]]  # fmt: skip
    project = tmp_path / "my-study"
    (project / "data").mkdir(parents=True)  # what `cp -r build/m30k my-study/data` makes
    shutil.copytree(m30k["train"], project / "data" / "train")
    shutil.copytree(m30k["valid"], project / "data" / "valid")
    shutil.copy(m30k["tokenizer"], project / "data" / "tokenizer.json")
    for name, content in files.items():
        (project / name).write_text(content, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNATTN_")}
    env.update(PYTHONPATH=str(plugin_site), OMP_NUM_THREADS="1")  # the plugin, installed
    outputs = []
    for command in commands:
        argv = [SYNATTN, *command[1:]]
        if command[2] == "run":
            argv += ["--poll", "1"]
        proc = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert proc.returncode == 0, (command, proc.stdout[-3000:], proc.stderr[-3000:])
        outputs.append(proc.stdout)
    run_out, status_out, claims_out = outputs
    assert "9/9 runs published" in run_out, run_out[-2000:]
    report = json.loads((project / "results" / "my-study" / "report.json").read_text())
    rows = {r["variant"]: r for r in report["rows"]}
    assert set(rows) == {"vanilla", "distance-decay", "dea"}
    assert all(r["succeeded"] == 3 for r in rows.values())
    assert rows["distance-decay"]["vs"] == "vanilla" and len(rows["dea"]["diffs"]) == 3
    assert "my-study: 9/9 runs done (9 succeeded)" in status_out, status_out
    assert status_out.count("succeeded  BLEU") == 9
    mine = next(x for x in claims_out.splitlines() if x.startswith("| Distance decay (mine) |"))
    verdict = re.search(r"\*\*(better|worse|inconclusive)\*\*", mine)
    assert verdict is not None and "vs vanilla" in mine and "| 3 |" in mine, mine
    assert claims_out.count("\n| DEA (Zhang et al. 2021) |") == 1
