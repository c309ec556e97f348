"""``synattn study``: a grid of systems × seeds run for days, surviving interruptions, and
published as a results folder with claims tables, intervals, verdicts and provenance.

- ``driver``: ``synattn study run`` / ``publish``: queue an experiment file on an embedded
  queue, run it with workers × threads, hand unfinished runs over between sessions, publish
  ``results/<name>/`` as runs finish (``report.json``, ``report.html``, translations,
  ``run.json`` with provenance);
- ``handoff``: what an unfinished run needs to go on exactly on the next checkout;
- ``commit``: ``--commit-results``, each run committed as it lands;
- ``curve``: ``synattn study curve``, the learning curve that fixes a study's budget;
- ``claims`` and ``facts``: ``synattn study claims``, each paper's claim beside what was
  measured, and the numbers the study's prose quotes.

Every path is relative to the project folder (``project_root``): the current directory, or
``SYNATTN_STUDY_ROOT``.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The folder a study's files are relative to: its experiment files, ``results/`` and
    ``build/`` (``SYNATTN_STUDY_ROOT``, else the current directory)."""
    return Path(os.environ.get("SYNATTN_STUDY_ROOT") or Path.cwd()).resolve()
