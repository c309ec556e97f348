"""The claims tables (docs/study.md) and their summary (README.md) are generated from results/
and must match it."""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def claims() -> ModuleType:
    return import_module("synattn_jobs.study.claims")


def test_readme_table_matches_results() -> None:
    """The study page's tables and the README's summary both match results/."""
    c = claims()
    page = (REPO / "docs" / "study.md").read_text(encoding="utf-8")
    assert c.splice(page, c.render(REPO / "results")) == page, (
        "docs/study.md's claims tables differ from results/: run synattn study claims"
    )
    known = c.study_facts(REPO / "results")
    assert c.fill(page, known, "study.md") == page, (
        "docs/study.md's quoted numbers differ from results/: run synattn study claims"
    )
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert c.fill(readme, known, "README.md") == readme
    summary = c.summary(REPO / "results")
    assert c.splice(readme, summary, c.SUMMARY_BEGIN, c.SUMMARY_END) == readme, (
        "README.md's claims summary differs from results/: run synattn study claims"
    )
    assert summary.count("\n| [") == len(c.CLAIMS)  # one line per paper
    assert "[docs/study.md](docs/study.md)" in summary


def test_the_installed_command_regenerates_the_published_tables_byte_identical() -> None:
    """``synattn study claims --check`` (the installed CLI, from the repository as its
    project folder): the published study folders give back docs/study.md's and README.md's
    tables byte for byte, and the papers' claims come from the versioned claims file."""
    import subprocess
    import sys

    synattn = str(Path(sys.executable).with_name("synattn"))
    done = subprocess.run([synattn, "study", "claims", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    spec = import_module("synattn_jobs.study.claims_file").load_claims()
    assert spec.version == 1 and [c.system for c in spec.claims] == [
        c.system for c in claims().CLAIMS
    ]


def test_the_summary_states_what_the_table_states(tmp_path: Path) -> None:
    """One line per paper, linked to its page: the system, Δ, interval and verdict of the
    table's row (Holm-adjusted over the same family), "not measured yet" for a paper without
    one; the link to the full tables."""
    c = claims()
    exp = tmp_path / c.STUDY
    exp.mkdir()
    rows = [
        {"variant": "vanilla", "bleu_by_seed": {"1": 20.0, "2": 21.0, "3": 20.0},
         "is_baseline": True},
        {"variant": "slr-gated", "vs": "vanilla", "delta": 0.57,  # one seed the other way
         "diffs": {"1": 1.0, "2": -0.2, "3": 0.9}, "seed_p": 0.01, "p_value": 0.01},
        {"variant": "fixed-word", "vs": "8L", "delta": -2.0,
         "diffs": {"1": -2.0, "2": -2.1, "3": -1.9}, "seed_p": 0.01, "p_value": 0.01},
    ]  # fmt: skip
    (exp / "report.json").write_text(json.dumps({"name": c.STUDY, "seeds": [1, 2, 3],
                                                 "rows": rows}))  # fmt: skip
    (exp / "run.json").write_text(json.dumps({
        "budget": {"model": "3+3 layers", "max_updates": 5000, "max_tokens": 4096},
        "hardware": {"device": "cpu", "cpu_count": 2, "threads_per_worker": 1},
    }))  # fmt: skip
    text = c.summary(tmp_path)
    lines = text.splitlines()
    assert lines[0] == c.SUMMARY_BEGIN and lines[-1] == c.SUMMARY_END
    assert "3 seeds, 5,000 updates of a small model (3+3 layers)" in text
    table = c.render(tmp_path, earlier=())
    for system, verdict in (("slr-gated", "inconclusive"), ("fixed-word", "worse")):
        line = next(x for x in lines if f"| `{system}` |" in x)
        row = next(x for x in table.splitlines() if f"`{system}`:" in x)
        assert f"| {verdict} |" in line and f"**{verdict}**" in row, (line, row)
        delta, ci, said = line.split(" | ")[2:5]
        assert f"| {delta} | {ci} | {said} |" in row, (line, row)
    gated = next(x for x in lines if "`slr-gated`" in x)
    assert gated.startswith(
        "| [Gated self-attention with SLR (Hou et al.)](docs/papers/gated-slr.md) |"
    )
    rhe = next(x for x in lines if "`rhe+lpea`" in x)
    assert rhe.startswith("| [RHE + SEA (Zhang et al. 2021)](docs/papers/rhe-sea.md) |")
    assert rhe.endswith("| not measured yet | – | – | – |")
    assert lines[-2] == ("Full tables (controls, final models, earlier budgets): "
                         "[docs/study.md](docs/study.md).")  # fmt: skip
    # where the section lives, relative to its file
    assert "(papers/headmask.md)" in c.summary(tmp_path, docs="")


def test_check_fails_when_either_file_is_out_of_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--check`` exits 1 naming the stale files; a plain run rewrites them: both generated
    sections, and the study's figures a paper's page quotes."""
    c = claims()
    page, readme = tmp_path / "study.md", tmp_path / "README.md"
    page.write_text(f"# study\n\n{c.BEGIN}\nold\n{c.END}\n", encoding="utf-8")
    readme.write_text(f"# x\n{c.SUMMARY_BEGIN}\n{c.SUMMARY_END}\nend\n", encoding="utf-8")
    papers = tmp_path / "papers"
    papers.mkdir()
    paper = papers / "headmask.md"
    paper.write_text("Its <!-- fact:seeds.fixed-word -->two<!-- /fact --> seeds.\n", "utf-8")

    def run(*extra: str) -> int:
        argv = ["claims.py", "--readme", str(page), "--summary", str(readme),
                "--pages", str(papers), *extra]  # fmt: skip
        monkeypatch.setattr("sys.argv", argv)
        capsys.readouterr()
        try:
            c.main()
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0

    assert run("--check") == 1
    assert "study.md and README.md and headmask.md" in capsys.readouterr().out
    assert run() == 0 and run("--check") == 0
    seeds = c.study_facts(c.REPO / "results")["seeds.fixed-word"]
    assert paper.read_text(encoding="utf-8") == (
        f"Its <!-- fact:seeds.fixed-word -->{seeds}<!-- /fact --> seeds.\n"
    )
    assert readme.read_text(encoding="utf-8").endswith(f"{c.SUMMARY_END}\nend\n")
    assert "| `slr-gated` |" in readme.read_text(encoding="utf-8")
    # one file stale: only it is named
    readme.write_text(readme.read_text(encoding="utf-8").replace("inconclusive", "better"))
    assert run("--check") == 1
    assert capsys.readouterr().out.startswith("README.md: ")


def test_table_rows_come_from_the_reports(tmp_path: Path) -> None:
    c = claims()
    exp = tmp_path / "exp"
    exp.mkdir()
    rows = [
        {"variant": "vanilla", "bleu_by_seed": {"1": 20.0, "2": 21.0}, "is_baseline": True},
        {"variant": "8L", "bleu_by_seed": {"1": 18.0, "2": 18.5}, "is_baseline": True},
        {"variant": "slr-gated", "bleu_by_seed": {"1": 21.0, "2": 22.5}, "vs": "vanilla",
         "delta": 1.25, "diffs": {"1": 1.0, "2": 1.5}, "seed_p": 0.2, "p_value": 0.01,
         "verdict": "inconclusive"},
    ]  # fmt: skip
    (exp / "report.json").write_text(json.dumps({"name": "exp", "seeds": [1, 2, 3], "rows": rows}))
    (exp / "run.json").write_text(json.dumps({
        "budget": {"model": "3+3 layers", "max_updates": 600, "max_tokens": 2048},
        "hardware": {"device": "cpu", "cpu_count": 2, "threads_per_worker": 1},
    }))  # fmt: skip
    text = c.render(tmp_path, study="exp")
    line = next(x for x in text.splitlines() if "`slr-gated`" in x)
    assert "+1.25 ± 0.35 vs vanilla" in line and "**inconclusive**" in line
    # one measured row: the Holm family has one member, the p-values stay
    assert "| 0.200 | 0.010 |" in line and "2 of 3 so far" in line
    # its interval (t with 1 df), what the interval says of the paper's +1.12, what it detects
    assert "| [-1.93, +4.43] | consistent with no effect; with the paper's +1.12 |" in line
    assert "| ≥ " in line
    assert "final model: average" in line and "≤2048 padded tokens" in line
    assert "not measured yet" in next(x for x in text.splitlines() if "`rhe+lpea`" in x)
    assert "+2.25 ± 0.35 BLEU over 2 seeds" in text  # vanilla minus 8L
    assert "95% CI [-0.93, +5.43]" in text
    assert "larger in size than every method's mean" in text


def test_verdicts_stand_on_p_values_adjusted_over_the_table(tmp_path: Path) -> None:
    """Two rows, each 'better' alone at p = 0.04: Holm over the table's rows makes the larger
    one 0.08, so that row's verdict is inconclusive; the earlier tables are labelled as such."""
    c = claims()
    for name in (c.STUDY, c.SHORT, c.EARLY):
        exp = tmp_path / name
        exp.mkdir()
        rows = [
            {"variant": "vanilla", "bleu_by_seed": {"1": 20.0, "2": 21.0, "3": 20.0},
             "is_baseline": True},
            {"variant": "slr-gated", "vs": "vanilla", "delta": 1.0,
             "diffs": {"1": 1.0, "2": 1.1, "3": 0.9}, "seed_p": 0.01, "p_value": 0.04},
            {"variant": "fixed-word", "vs": "8L", "delta": 2.0,
             "diffs": {"1": 2.0, "2": 2.1, "3": 1.9}, "seed_p": 0.01, "p_value": 0.04},
        ]  # fmt: skip
        (exp / "report.json").write_text(json.dumps({"name": name, "seeds": [1, 2, 3],
                                                     "rows": rows}))  # fmt: skip
        (exp / "run.json").write_text(json.dumps({
            "budget": {"model": "3+3 layers", "max_updates": 4000, "max_tokens": 4096},
            "hardware": {"device": "cpu", "cpu_count": 2, "threads_per_worker": 1},
        }))  # fmt: skip
    text = c.render(tmp_path)
    study, rest = text.split("**Shorter budget, same protocol**")
    short, early = rest.split("**Early training, previous protocol**")
    for part, name in ((study, c.STUDY), (short, c.SHORT), (early, c.EARLY)):
        lines = {s: next(x for x in part.splitlines() if f"`{s}`" in x and "|" in x)
                 for s in ("slr-gated", "fixed-word")}  # fmt: skip
        for line in lines.values():
            assert "| 0.020 | 0.080 | **inconclusive** |" in line, line
            assert f"`{name}` |" in line, line  # each table names its experiment
    assert "not evidence about the papers" in early
    assert "2.6 BLEU below its converged score" in short


def test_controls_stand_beside_their_systems(tmp_path: Path) -> None:
    """A control planned in the study gets a row: its own Δ, and the system minus the control
    paired on the seeds both finished; a system not yet run leaves that cell empty."""
    c = claims()
    exp = tmp_path / c.STUDY
    exp.mkdir()
    rows = [
        {"variant": "vanilla", "bleu_by_seed": {"1": 30.0, "2": 31.0}, "is_baseline": True},
        {"variant": "rhe+lpea", "bleu_by_seed": {"1": 29.5, "2": 31.0}, "vs": "vanilla",
         "delta": -0.25, "diffs": {"1": -0.5, "2": 0.0}},
        {"variant": "lpea", "bleu_by_seed": {"1": 30.5, "2": 30.0, "3": 29.0}, "vs": "vanilla",
         "delta": -0.25, "diffs": {"1": 0.5, "2": -1.0}},
        {"variant": "headmask-impt", "bleu_by_seed": {}, "vs": "vanilla", "delta": None},
        {"variant": "headmask-random", "bleu_by_seed": {"1": 29.0}, "vs": "vanilla",
         "delta": -1.0, "diffs": {"1": -1.0}},
    ]  # fmt: skip
    (exp / "report.json").write_text(json.dumps({"name": c.STUDY, "seeds": [1, 2, 3],
                                                 "rows": rows}))  # fmt: skip
    (exp / "run.json").write_text(json.dumps({
        "budget": {"model": "3+3 layers", "max_updates": 3500, "max_tokens": 4096},
        "hardware": {"device": "cpu", "cpu_count": 2, "threads_per_worker": 1},
    }))  # fmt: skip
    text = c.render(tmp_path, earlier=())
    lpea = next(x for x in text.splitlines() if x.startswith("| `rhe+lpea` | `lpea` |"))
    # rhe+lpea minus lpea on seeds 1 and 2: -1.0 and +1.0
    assert (
        "| -0.25 ± 0.35 vs vanilla, CI [-3.43, +2.93] | -0.25 ± 1.06 vs vanilla, CI [-9.78, "
        "+9.28] | +0.00 ± 1.41 (2 seeds), CI [-12.71, +12.71] |"
    ) in lpea  # two seeds: t(0.975, 1 df) = 12.71 makes the intervals wide
    assert lpea.endswith("| 3 of 3 |")
    random = next(x for x in text.splitlines() if "| `headmask-random` |" in x)
    assert "| not measured yet | -1.00 vs vanilla | – | 1 of 3 |" in random
    assert "`routing-em`" not in text  # not planned in this study: no row


def test_the_study_scores_only_end_of_run_models() -> None:
    """Averaging only at the end of training, on what is published: every averaged model of the
    study's rows comes from the last quarter of its run, every single checkpoint is named by its
    update (a best-validation one wherever the run recorded it: slr-gated-s1 was published before
    the trainer did), and each row's record names the selection it was scored with (its paper's
    protocol)."""
    path = REPO / "results" / claims().STUDY / "report.json"
    if not path.is_file():
        return  # nothing published yet: nothing to audit
    report = json.loads(path.read_text(encoding="utf-8"))
    protocols = report.get("protocols") or {}
    checked = 0
    for row in report["rows"]:
        for seed, model in row["averaged_updates"].items():
            n = model["max_updates"]
            assert model["selection"] == protocols.get(row["variant"], "average"), (row, seed)
            assert all(0.75 * n <= u <= n for u in model["updates"]), (row["variant"], seed)
            if model["selection"] == "last":
                assert model["updates"] == [] and model["checkpoint_update"] == n
            if model["selection"] == "average":
                assert len(model["updates"]) > 1 and model["checkpoint_update"] is None
            if model["selection"] == "best_valid":
                assert model["updates"] == []
                update = model["checkpoint_update"]
                if update is None:  # only a run published before the trainer recorded it
                    record = path.parent / "runs" / f"{row['variant']}-s{seed}.json"
                    by = json.loads(record.read_text(encoding="utf-8"))["result"]["by_selection"]
                    assert all("checkpoint_update" not in m or m["checkpoint_update"] is None
                               for m in by.values()), (row["variant"], seed)  # fmt: skip
                else:
                    assert 0 < update <= n, (row["variant"], seed)
            checked += 1
    assert checked == sum(row["succeeded"] for row in report["rows"])  # every finished run


def test_the_hardware_cell_counts_threads_from_each_run_s_record() -> None:
    mod = claims()
    hw = {"threads_per_worker": 2}
    run = {"hardware": hw, "runs": [
        {"state": "succeeded", "trained_with": {"workers": 2, "threads": 1}},
        {"state": "succeeded", "trained_with": None},  # published before it was recorded
        {"state": "queued", "trained_with": None},
    ]}  # fmt: skip
    assert mod._threads(run) == "1-2 threads/run"
    assert mod._threads({"hardware": hw, "runs": run["runs"][:1]}) == "1 thread/run"
    assert mod._threads({"hardware": hw, "runs": []}) == "2 threads/run"


def test_the_hardware_cell_names_the_cpu_isa_the_runs_recorded() -> None:
    mod = claims()
    avx2 = {"state": "succeeded", "trained_with": {"threads": 1, "cpu_isa": "AVX2"}}
    older = {"state": "succeeded", "trained_with": {"threads": 1}}
    avx512 = {"state": "succeeded", "trained_with": {"threads": 1, "cpu_isa": "AVX512"}}
    assert mod._isa({"runs": [avx2]}) == ", AVX2"
    assert mod._isa({"runs": [avx2, older]}) == ", AVX2 where recorded"
    assert mod._isa({"runs": [avx512, avx2]}) == ", AVX2/AVX512"
    assert mod._isa({"runs": [older, {"state": "queued"}]}) == ""


_SCORERS: dict[str, Any] = {}


def _scorers(ref: str) -> None:
    """A scoring process's BLEU and chrF, the references' statistics computed once."""
    import sacrebleu

    refs = [Path(ref).read_text(encoding="utf-8").splitlines()]
    _SCORERS.update(bleu=sacrebleu.BLEU(references=refs), chrf=sacrebleu.CHRF(references=refs))


def _score(hyp: str) -> tuple[int, float, float]:
    """Lines, BLEU and chrF of one hypothesis file, as a record rounds them."""
    hyps = Path(hyp).read_text(encoding="utf-8").splitlines()
    bleu = round(_SCORERS["bleu"].corpus_score(hyps, None).score, 2)
    return len(hyps), bleu, round(_SCORERS["chrf"].corpus_score(hyps, None).score, 2)


def test_every_published_score_recomputes_from_its_hypotheses() -> None:
    """An outside reader's audit: sacreBLEU on each published hypothesis file against the
    published reference gives the BLEU and chrF its run's record states, for every model
    selection, and each row's per-seed BLEU is its own protocol's figure. (About a hundred
    files: scored in two processes, each with the references' statistics computed once.)"""
    import multiprocessing
    import os
    import threading
    from concurrent.futures import ProcessPoolExecutor

    study = REPO / "results" / claims().STUDY
    if not (study / "report.json").is_file():
        return  # nothing published yet: nothing to audit
    report = json.loads((study / "report.json").read_text(encoding="utf-8"))
    ref = study / "translations" / "ref.test.txt"
    stated: dict[tuple[str, str], tuple[Path, float, float]] = {}
    for path in sorted((study / "runs").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        assert record["result"]["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
        for selection, model in record["result"]["by_selection"].items():
            stated[(record["name"], selection)] = (study / model["hyp"], model["bleu"],
                                                   model["chrf"])  # fmt: skip
    assert stated, "a published study has run records"
    n_ref = len(ref.read_text(encoding="utf-8").splitlines())
    hyps = [str(hyp) for hyp, _, _ in stated.values()]
    if (os.cpu_count() or 1) > 1 and threading.active_count() == 1:  # a fork is safe
        with ProcessPoolExecutor(2, multiprocessing.get_context("fork"), _scorers,
                                 (str(ref),)) as pool:  # fmt: skip
            got = list(pool.map(_score, hyps))
    else:
        _scorers(str(ref))
        got = [_score(hyp) for hyp in hyps]
    scored: dict[tuple[str, str], float] = {}
    for (key, (_, bleu, chrf)), (lines, bleu_now, chrf_now) in zip(stated.items(), got,
                                                                   strict=True):  # fmt: skip
        assert lines == n_ref, key
        assert (bleu_now, chrf_now) == (bleu, chrf), key
        scored[key] = bleu_now
    for row in report["rows"]:
        for seed, bleu in row["bleu_by_seed"].items():
            selection = row["averaged_updates"][seed]["selection"]
            assert scored[(f"{row['variant']}-s{seed}", selection)] == bleu, (row["variant"], seed)


def test_the_protocol_table_pairs_each_selection_seed_by_seed(tmp_path: Path) -> None:
    """Δ under every final model the runs made, paired by seed and by kind of model, the
    row's own protocol in bold; a seed the baseline lacks is left out."""
    c = claims()
    runs = tmp_path / "runs"
    runs.mkdir()
    bleu = {("vanilla", 1): (30.0, 29.0, 28.0), ("vanilla", 2): (31.0, 30.0, 29.0),
            ("slr-gated", 1): (31.0, 29.5, 27.0), ("slr-gated", 2): (31.0, 31.0, 30.0),
            ("slr-gated", 3): (40.0, 40.0, 40.0)}  # fmt: skip
    for (variant, seed), (avg, best, last) in bleu.items():
        by = {"average": {"bleu": avg}, "best_valid": {"bleu": best}, "last": {"bleu": last}}
        (runs / f"{variant}-s{seed}.json").write_text(json.dumps(
            {"variant": variant, "seed": seed, "result": {"by_selection": by}}))  # fmt: skip
    report = {"name": "exp", "rows": [
        {"variant": "vanilla", "is_baseline": True},
        {"variant": "slr-gated", "vs": "vanilla", "protocol": "best_valid"},
    ]}  # fmt: skip
    lines = c.protocols(report, c.run_scores(tmp_path))
    row = next(x for x in lines if x.startswith("| `slr-gated`"))
    assert (
        row == "| `slr-gated` | vanilla | +0.50 ± 0.71 (2) [-5.85, +6.85] | **+0.75 ± 0.35 (2) "
        "[-2.43, +3.93]** | +0.00 ± 1.41 (2) [-12.71, +12.71] |"
    )
    assert lines[-1] == ("Baselines' mean BLEU: vanilla end-of-run average 30.50, best "
                         "validation 29.50, last checkpoint 28.50.")  # fmt: skip
    assert c.protocols(report, {}) == []


def test_the_published_protocol_table_agrees_with_the_claims_rows() -> None:
    """Each row's bold cell (its own protocol) is the Δ the report's row states."""
    c = claims()
    exp = REPO / "results" / c.STUDY
    if not (exp / "report.json").is_file():
        return  # nothing published yet
    report = json.loads((exp / "report.json").read_text(encoding="utf-8"))
    lines = c.protocols(report, c.run_scores(exp))
    for row in report["rows"]:
        if row.get("delta") is None:
            continue
        line = next(x for x in lines if x.startswith(f"| `{row['variant']}` |"))
        assert f"**{row['delta']:+.2f}" in line, (row["variant"], line)


def test_prose_numbers_are_generated_facts(tmp_path: Path) -> None:
    """A number between fact markers is rewritten from results/ (a hand-typed interval is
    replaced), and a marker naming no known fact stops the generator naming it."""
    c = claims()
    import re

    known = c.study_facts(REPO / "results")
    # the same comparison through the report's own sentence (another code path) in the tables
    page = (REPO / "docs" / "study.md").read_text(encoding="utf-8")
    said = re.search(r"minus 8L \(without\) is (\S+ ± \S+) BLEU over \d+ seeds in "
                     r"`study-conv5k` \(95% CI (\[[^\]]+\])", page)  # fmt: skip
    assert said is not None and known["vanilla-minus-8L"] == f"{said[1]}, CI {said[2]}"
    finals = sorted((REPO / "results" / "study-conv5k" / "runs").glob("vanilla-s*.metrics.jsonl"))
    assert known["vanilla-final-valid"].startswith("3.069, 3.117")  # seeds 1 and 2
    assert known["vanilla-final-valid"].count(".") == len(finals)  # one loss per seed
    assert known["slr-gated-averaged"].startswith(known["diff.slr-gated.vanilla.average"])
    # each row's quoted Δ is the table's own cell
    for system in ("fixed-word", "slr-gated", "headmask-impt"):
        assert f"| {known['row.' + system].split(', CI ')[0]} vs " in page, system
    typed = "is <!-- fact:vanilla-minus-8L -->+0.18 ± 0.37, CI [-0.74, +1.10]<!-- /fact -->:"
    assert c.fill(typed, known, "x") == (
        f"is <!-- fact:vanilla-minus-8L -->{known['vanilla-minus-8L']}<!-- /fact -->:"
    )
    with pytest.raises(SystemExit, match="unknown fact 'nope'"):
        c.fill("<!-- fact:nope -->1<!-- /fact -->", known, "x")


def test_the_head_importance_fact_averages_the_seeds_that_recorded_it(tmp_path: Path) -> None:
    """The HeadMask paper's Tables 5-6 in the prose: each system's mean and variance of head
    importance, averaged over the seeds whose runs recorded them; runs without are left out,
    and a study with none says so."""
    import json

    from synattn_jobs.study.facts import head_importance

    runs = tmp_path / "runs"
    runs.mkdir()
    assert head_importance(tmp_path).startswith("none recorded yet")
    for name, variant, result in (
        ("vanilla-s1", "vanilla", {"bleu": 30.0}),  # trained before the record
        ("vanilla-s4", "vanilla", {"importance_mean": 0.4, "importance_variance": 0.2}),
        ("vanilla-s5", "vanilla", {"importance_mean": 0.6, "importance_variance": 0.4}),
        ("headmask-impt-s4", "headmask-impt",
         {"importance_mean": 0.5, "importance_variance": 0.25}),
    ):  # fmt: skip
        (runs / f"{name}.json").write_text(json.dumps({"variant": variant, "result": result}))
    assert head_importance(tmp_path) == (
        "vanilla mean 0.5, variance 0.3 (2 seeds) and Impt-N mean 0.5, variance 0.25 (1 seed)"
    )


def test_the_spread_fact_pairs_each_row_with_its_own_baseline() -> None:
    """The median seed spread of Δ per final-model selection: each row against its paper's
    baseline (fixed-word against 8L), Impt-N and rows of one paired seed left out."""
    from synattn_jobs.study.facts import delta_spreads

    def runs(*bleu: float) -> dict[int, dict[str, float]]:
        return {k + 1: {"average": b, "last": b - 1} for k, b in enumerate(bleu)}

    scores = {
        "vanilla": runs(30.0, 30.0, 30.0),
        "8L": runs(20.0, 20.0, 20.0),
        "fixed-word": runs(21.0, 22.0, 23.0),  # against 8L: +1, +2, +3 (sd 1)
        "dea": runs(30.0, 30.5, 31.0),  # +0, +0.5, +1 (sd 0.5)
        "lpea": runs(30.0, 32.0, 34.0),  # sd 2
        "headmask-impt": runs(10.0, 20.0, 5.0),  # left out
        "rhe+lpea": runs(31.0),  # one seed: no spread
    }
    vs = {"fixed-word": "8L", "dea": "vanilla", "lpea": "vanilla", "headmask-impt": "vanilla",
          "rhe+lpea": "vanilla"}  # fmt: skip
    assert delta_spreads(scores, vs) == (
        "over the 3 rows besides Impt-N is 1.00 averaged and 1.00 on last checkpoints"
    )
    assert delta_spreads({}, {}) == "not measured"


def test_the_baseline_status_and_provenance_facts(tmp_path: Path) -> None:
    """The baselines' BLEU per seed, what averaging gains over the last checkpoint, how far
    the study is (runs landed of those planned, seeds per system) and under which commits
    its runs trained, each from a small study folder."""
    from synattn_jobs.study.facts import facts, provenance, study_plan, study_status

    runs = tmp_path / "runs"
    runs.mkdir()
    for name, variant, seed, bleu in (("vanilla-s1", "vanilla", 1, 30.0),
                                      ("vanilla-s2", "vanilla", 2, 31.5),
                                      ("dea-s1", "dea", 1, 29.0),
                                      ("dea-s2", "dea", 2, None)):  # fmt: skip
        record = {"variant": variant, "seed": seed, "result": {"bleu": bleu}}
        (runs / f"{name}.json").write_text(json.dumps(record))
    commits = [{"commit": "a" * 40, "dirty": False, "updates": 1500},
               {"commit": "b" * 40, "dirty": True, "updates": 500}]  # fmt: skip
    plan = {"planned": 8, "provenance": {"commits": commits,
            "not_recorded": {"runs": ["dea-s1"], "updates": 1000},
            "runs": {"vanilla-s1": [], "vanilla-s2": [], "dea-s1": []}}}  # fmt: skip
    assert study_plan(tmp_path) is None  # before the first publication
    (tmp_path / "run.json").write_text(json.dumps(plan))
    assert study_plan(tmp_path) == plan
    assert study_status(tmp_path, plan) == (
        "3 of the 8 planned runs have landed: 2 seeds of `vanilla`; 1 seed of `dea`"
    )
    assert provenance(plan) == (
        "3 runs trained under 2 commits, 1 of them dirty, which hold 2,000 of the 3,000 "
        "updates trained; the other 1,000"
    )
    scores = {"vanilla": {1: {"average": 30.0, "last": 29.0}, 2: {"average": 31.5, "last": 29.0}},
              "8L": {1: {"average": 29.0}}}  # fmt: skip
    known = facts(tmp_path, tmp_path, {}, 5, scores, {})
    assert known["vanilla-bleu"] == "30.00 and 31.50 (mean 30.75)"
    assert known["8L-bleu"] == "29.00 (mean 29.00)"
    assert known["vanilla-last-bleu"] == "29.00 and 29.00"
    assert known["vanilla-averaging-gain"] == "1.0-2.5"
    assert "wall-total" not in known  # no run's wall time recorded
    from synattn_jobs.study.facts import wall_times

    plan["runs"] = [{"state": "succeeded", "wall_s": 3600.0},
                    {"state": "succeeded", "wall_s": 7200.0},
                    {"state": "succeeded", "wall_s": 5400.0},
                    {"state": "succeeded", "wall_s": None},
                    {"state": "cancelled", "wall_s": 757.7},  # stopped to free its worker
                    {"state": "running", "wall_s": None}]  # fmt: skip
    assert wall_times(plan) == {
        "wall-total": "3 runs landed so far add up to 4 hours",
        "wall-median": "90 minutes of wall time at the median (60-120 minutes",
    }


def test_the_pair_and_row_facts_quote_every_comparison_and_its_test() -> None:
    """Any two systems, seed-paired under each final model (the per-seed Δ, their signs, mean
    ± std with its interval and what it excludes), and each claims row's own figures: mean,
    verdict, reading against the paper, p-values and detectable Δ."""
    from synattn_jobs.study.facts import RowFacts, pair_facts, row_facts

    scores = {"vanilla": {1: {"average": 30.0}, 2: {"average": 30.0}, 3: {"average": 30.0}},
              "dea": {1: {"average": 31.0}, 2: {"average": 32.0}, 3: {"average": 30.0}},
              "lpea": {1: {"average": 29.0}}}  # fmt: skip
    known = pair_facts(scores)
    assert known["each.dea.vanilla.average"] == "+1.00, +2.00 and +0.00"
    assert known["signs.dea.vanilla.average"] == "2 of 3 seeds above"
    assert known["signs.vanilla.dea.average"] == "2 of 3 seeds below"
    assert known["diff.dea.vanilla.average"] == "+1.00 ± 1.00, CI [-1.48, +3.48]"
    assert known["reading.dea.vanilla.average"] == "consistent with no effect"
    assert known["signs.lpea.vanilla.average"] == "every seed below"
    assert "diff.lpea.vanilla.average" not in known  # one paired seed: no spread, no interval
    assert not any(".dea.dea." in name for name in known)

    row = RowFacts((1.0, 2.0, 3.0, 2.0, 2.0), "inconclusive", (1.5,), 0.0123, 0.05, 0.2, "worse")
    facts = row_facts({"dea": row}, 5)
    assert facts["mean.dea"] == "+2.00" and facts["seeds.dea"] == "five"
    assert facts["row.dea"] == "+2.00 ± 0.71, CI [+1.12, +2.88]"
    assert facts["verdict.dea"] == "*inconclusive*"
    assert facts["verdict-report.dea"] == "*worse*"
    assert facts["reading.dea"] == "above zero; with the paper's +1.50"
    p_values = (facts["p.dea"], facts["p-holm.dea"], facts["p-report.dea"])
    assert p_values == ("0.012", "0.050", "0.200")
    assert facts["mde.dea"].endswith(" BLEU") and 1.0 < float(facts["mde.dea"].split()[0]) < 5.0


def test_the_log_facts_read_validation_gaps_gates_and_rhe_labels(tmp_path: Path) -> None:
    """From the runs' logs: how one system's validation loss stood against another's at every
    seed (below, above or within), the floor and swing of a system's loss, gated SLR's dev-set
    gates and RHE's label rates."""
    from synattn_jobs.study.facts import (
        rhe_label_phases,
        rhe_label_rates,
        slr_gates,
        valid_gaps,
        valid_spans,
    )

    runs = tmp_path / "runs"
    runs.mkdir()

    def log(name: str, *records: dict[str, Any]) -> None:
        (runs / f"{name}.metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def epochs(losses: dict[int, float]) -> list[dict[str, Any]]:
        return [{"event": "epoch", "update": u, "valid_loss": v} for u, v in losses.items()]

    log("vanilla-s1", *epochs({500: 9.0, 1000: 3.0, 2000: 2.9}))
    log("vanilla-s2", *epochs({500: 9.0, 1000: 3.1, 2000: 3.0}))
    log("dea-s1", *epochs({500: 1.0, 1000: 2.9, 2000: 2.7}))  # update 500: before 750
    log("dea-s2", *epochs({500: 1.0, 1000: 3.05, 2000: 2.85}))
    log("lpea-s1", *epochs({1000: 3.04, 2000: 2.86}))
    gaps = valid_gaps(tmp_path)
    assert gaps["valid-gap.dea.vanilla"] == "0.05-0.20 below"
    assert gaps["valid-gap.vanilla.dea"] == "0.05-0.20 above"
    assert gaps["valid-gap.lpea.vanilla"] == "within 0.04 of"
    spans = valid_spans(tmp_path)
    assert spans["valid-floor.vanilla"] == "2.90-3.00"
    assert spans["valid-swing.dea"] == "2.7 and 2.9"

    assert slr_gates(tmp_path) is None and rhe_label_rates(tmp_path) is None
    log("slr-gated-s1", {"event": "gates_dev", "enc_self.0.gate.h0": 0.2,
                         "enc_self.0.gate_std.h0": 0.9, "enc_self.0.gate.h1": 0.6})  # fmt: skip
    log("slr-gated-s2", {"event": "gates_dev", "enc_self.0.gate.h0": 0.5})
    assert slr_gates(tmp_path) == "0.40 and 0.50 over the two seeds (0.20-0.60 per head)"
    log("rhe+lpea-s1", *[{"event": "variants", "enc.0.important.h0": share,
                          "enc.0.important.h1": 0.0} for share in (0.01, 0.03)])  # fmt: skip
    assert rhe_label_rates(tmp_path) == (
        "across the 2 training logs of its one seed, layer-0 heads counted as "
        "important in 1.000% of sentences on average (at most 3.00% for one head in one batch)"
    )
    assert rhe_label_phases(tmp_path) is None  # no prose-reading run
    labels = {1: 0.9, 500: 0.6, 1000: 0.3, 1100: 0.02, 2000: 0.0}
    log("rhe+lpea-prose-s1", {"event": "epoch", "update": 500, "valid_loss": 4.0},
        *[{"event": "variants", "update": u, "enc.0.important.h0": share,
           "enc.0.important.h1": share} for u, share in labels.items()])  # fmt: skip
    assert rhe_label_phases(tmp_path) == (
        "60% of (sentence, head) pairs up to update 1,000 and 1.00% after it (at least half of "
        "them last at update 500; one seed)"
    )
