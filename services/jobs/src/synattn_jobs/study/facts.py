"""The numbers the study's prose quotes, generated from ``results/`` like its tables.

Prose in ``docs/study.md`` and ``README.md`` holds a figure between ``<!-- fact:NAME -->`` and
``<!-- /fact -->``; ``synattn study claims`` rewrites each from ``facts(results)`` and ``--check``
fails when one differs, so that a sentence and the table it summarises cannot disagree (a
hand-typed interval once read [-0.74, +1.10] beside the table's [-0.73, +1.09]).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synattn_jobs.verdict import ALPHA, mean_ci, min_detectable_effect, reading

FACT = re.compile(r"<!-- fact:([\w.+-]+) -->(.*?)<!-- /fact -->", re.S)
SELECTIONS = ("average", "best_valid", "last")
NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten")  # fmt: skip


@dataclass(frozen=True)
class RowFacts:
    """One row of the claims table, as the prose quotes it: its per-seed Δ under its own
    protocol, its verdict and the gains its paper reported."""

    diffs: tuple[float, ...]
    verdict: str
    gains: tuple[float, ...]
    seed_p: float | None = None  # the seed-paired t-test's p, unadjusted
    seed_p_holm: float | None = None  # Holm-adjusted over the table's rows
    report_p_holm: float | None = None  # Holm-adjusted over the report's rows (controls too)
    report_verdict: str | None = None


def run_records(study: Path) -> list[dict[str, Any]]:
    """Every published run's record (``runs/<run>.json``), in file-name order: what the claims
    tables and the facts read a run's result, seed and variant from."""
    return [json.loads(path.read_text(encoding="utf-8"))
            for path in sorted((study / "runs").glob("*.json"))]  # fmt: skip


def study_plan(study: Path) -> dict[str, Any] | None:
    """The study folder's ``run.json`` (the plan, each run's state and wall time, the
    provenance), read once for every fact and estimate that quotes it; None before the first
    publication."""
    try:
        plan: dict[str, Any] = json.loads((study / "run.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return plan


def _pm(diffs: list[float]) -> str:
    return f"{statistics.fmean(diffs):+.2f} ± {statistics.stdev(diffs):.2f}"


def ci_text(diffs: list[float] | tuple[float, ...]) -> str:
    """The seed-paired 95% confidence interval of the mean difference, or "–" for one seed
    (the claims tables' and the prose's one form)."""
    ci = mean_ci(list(diffs))
    return "–" if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _and(values: list[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def _paired(scores: dict[str, dict[int, dict[str, float]]], system: str, base: str,
            selection: str) -> list[float]:  # fmt: skip
    """``system`` minus ``base`` per seed both finished, under one final-model selection."""
    a, b = scores.get(system, {}), scores.get(base, {})
    return [a[s][selection] - b[s][selection] for s in sorted(a)
            if s in b and selection in a[s] and selection in b[s]]  # fmt: skip


def final_valid_losses(experiment: Path, variant: str) -> list[float]:
    """Each seed's last epoch-end validation loss (runs/<variant>-s<seed>.metrics.jsonl)."""
    out = []
    for path in sorted((experiment / "runs").glob(f"{variant}-s*.metrics.jsonl")):
        last = None
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("event") == "epoch":
                last = rec["valid_loss"]
        if last is not None:
            out.append(last)
    return out


HEAD_STATS_ROWS = (("vanilla", "vanilla"), ("headmask-random", "Random-N"),
                   ("headmask-impt", "Impt-N"), ("impt-signed", "Impt-N signed"))  # fmt: skip


def head_importance(experiment: Path) -> str:
    """The HeadMask paper's Tables 5-6 as the study's runs recorded them: per system, the mean
    and population variance of head importance on the validation set, averaged over the seeds
    that recorded them (runs trained before every run recorded them have none)."""
    got: dict[str, list[tuple[float, float]]] = {}
    for run in run_records(experiment):
        res = run.get("result") or {}
        if "importance_mean" in res and "importance_variance" in res:
            got.setdefault(run.get("variant", ""), []).append(
                (float(res["importance_mean"]), float(res["importance_variance"]))
            )
    parts = []
    for variant, label in HEAD_STATS_ROWS:
        if variant in got:
            pairs = got[variant]
            mean = statistics.fmean(m for m, _ in pairs)
            var = statistics.fmean(v for _, v in pairs)
            seeds = f"{len(pairs)} seed{'s' if len(pairs) > 1 else ''}"
            parts.append(f"{label} mean {mean:.3g}, variance {var:.3g} ({seeds})")
    return _and(parts) if parts else "none recorded yet (the published runs predate the record)"


def delta_spreads(scores: dict[str, dict[int, dict[str, float]]], vs: dict[str, str]) -> str:
    """The median over the study's rows (``vs``: each row's baseline, from its report; Impt-N
    aside, whose spread is of another order) of the standard deviation of Δ over seeds, under
    each final-model selection."""
    parts = []
    for key, words in (("average", "averaged"), ("best_valid", "on best-validation"),
                       ("last", "on last checkpoints")):  # fmt: skip
        diffs = [_paired(scores, row, base, key) for row, base in sorted(vs.items())
                 if row != "headmask-impt"]  # fmt: skip
        sds = [statistics.stdev(d) for d in diffs if len(d) > 1]
        if sds:
            parts.append((len(sds), f"{statistics.median(sds):.2f} {words}"))
    if not parts:
        return "not measured"
    return f"over the {parts[0][0]} rows besides Impt-N is " + _and([p for _, p in parts])


def seed_bleu(scores: dict[str, dict[int, dict[str, float]]], variant: str,
              selection: str = "average") -> list[float]:  # fmt: skip
    """``variant``'s test BLEU per seed (in seed order) under one final-model selection."""
    return [by[selection] for _, by in sorted(scores.get(variant, {}).items()) if selection in by]


def _scored(values: list[float]) -> str:
    return f"{_and([f'{v:.2f}' for v in values])} (mean {statistics.fmean(values):.2f})"


def seeds_word(n: int) -> str:
    """A seed count as the prose says it ("three", "five", "12")."""
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)


def _signs(diffs: list[float]) -> str:
    below, above = sum(d < 0 for d in diffs), sum(d > 0 for d in diffs)
    if below == len(diffs) or above == len(diffs):
        return f"every seed {'below' if below else 'above'}"
    more, word = (below, "below") if below >= above else (above, "above")
    return f"{more} of {len(diffs)} seeds {word}"


def pair_facts(scores: dict[str, dict[int, dict[str, float]]]) -> dict[str, str]:
    """Every seed-paired comparison the prose may quote, by system, other system and final
    model: ``diff.A.B.SEL`` is "mean ± std, CI [low, high]" of A minus B, ``each.A.B.SEL``
    the per-seed differences in seed order, ``signs.A.B.SEL`` which way the seeds went
    ("every seed below", "4 of 5 seeds above") and ``reading.A.B.SEL`` whether the interval
    excludes no effect."""
    out: dict[str, str] = {}
    for a in scores:
        for b in scores:
            for sel in SELECTIONS if a != b else ():
                diffs = _paired(scores, a, b, sel)
                if diffs:
                    out[f"each.{a}.{b}.{sel}"] = _and([f"{d:+.2f}" for d in diffs])
                    out[f"signs.{a}.{b}.{sel}"] = _signs(diffs)
                if len(diffs) > 1:
                    out[f"diff.{a}.{b}.{sel}"] = f"{_pm(diffs)}, CI {ci_text(diffs)}"
                    out[f"reading.{a}.{b}.{sel}"] = reading(mean_ci(diffs))
    return out


def row_facts(rows: dict[str, RowFacts], family: int) -> dict[str, str]:
    """Per claims-table row (by system): ``row.S`` its Δ and interval under its own protocol,
    ``verdict.S``, ``reading.S`` (what the interval excludes), ``mde.S`` (its detectable Δ
    after Holm over ``family`` rows), ``seeds.S`` (how many seeds, in words), ``mean.S`` (the
    mean Δ), and its seed
    test's p: ``p.S`` alone, ``p-holm.S`` over the table's rows, ``p-report.S`` (with
    ``verdict-report.S``) over the report's, which counts the controls too."""
    out: dict[str, str] = {}
    for system, row in rows.items():
        diffs = list(row.diffs)
        out[f"seeds.{system}"] = seeds_word(len(diffs))
        if diffs:
            out[f"mean.{system}"] = f"{statistics.fmean(diffs):+.2f}"
        out[f"verdict.{system}"] = f"*{row.verdict}*"
        out[f"reading.{system}"] = reading(mean_ci(diffs), row.gains)
        for name, p in (("p", row.seed_p), ("p-holm", row.seed_p_holm),
                        ("p-report", row.report_p_holm)):  # fmt: skip
            if p is not None:
                out[f"{name}.{system}"] = f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
        if row.report_verdict is not None:
            out[f"verdict-report.{system}"] = f"*{row.report_verdict}*"
        if len(diffs) > 1:
            out[f"row.{system}"] = f"{_pm(diffs)}, CI {ci_text(diffs)}"
            mde = min_detectable_effect(statistics.stdev(diffs), len(diffs),
                                        ALPHA / max(1, family))  # fmt: skip
            if mde is not None:
                out[f"mde.{system}"] = f"{mde:.1f} BLEU"
    return out


def _epoch_losses(path: Path) -> dict[int, float]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("event") == "epoch":
            out[int(rec["update"])] = float(rec["valid_loss"])
    return out


def _epoch_logs(study: Path) -> dict[str, dict[int, dict[int, float]]]:
    """variant -> seed -> update -> epoch-end validation loss, from every run's log."""
    logs: dict[str, dict[int, dict[int, float]]] = {}
    for path in sorted((study / "runs").glob("*-s*.metrics.jsonl")):
        variant, _, seed = path.name.removesuffix(".metrics.jsonl").rpartition("-s")
        if seed.isdigit():
            logs.setdefault(variant, {})[int(seed)] = _epoch_losses(path)
    return logs


def valid_spans(study: Path, after: int = 1500) -> dict[str, str]:
    """Per variant, ``valid-floor.V``: the range over seeds of each seed's lowest epoch-end
    validation loss; ``valid-swing.V``: the lowest and highest value any seed logged from
    update ``after`` on."""
    out: dict[str, str] = {}
    for variant, by_seed in _epoch_logs(study).items():
        floors = [min(losses.values()) for losses in by_seed.values() if losses]
        late = [v for losses in by_seed.values() for u, v in losses.items() if u >= after]
        if floors:
            out[f"valid-floor.{variant}"] = f"{min(floors):.2f}-{max(floors):.2f}"
        if late:
            out[f"valid-swing.{variant}"] = f"{min(late):.1f} and {max(late):.1f}"
    return out


def valid_gaps(study: Path, after: int = 750) -> dict[str, str]:
    """``valid-gap.A.B``: how A's epoch-end validation loss stood against B's from update
    ``after`` on, at every seed both logged ("0.05-0.15 below", "0.01-0.12 above" or "within
    0.06 of"), the same batches on both sides since a seed fixes the data order."""
    logs = _epoch_logs(study)
    out: dict[str, str] = {}
    for a, by_a in logs.items():
        for b, by_b in logs.items():
            gaps = [la[u] - by_b[s][u] for s, la in by_a.items() if s in by_b and a != b
                    for u in la if u >= after and u in by_b[s]]  # fmt: skip
            if not gaps:
                continue
            low, high = min(gaps), max(gaps)
            if high < 0:
                out[f"valid-gap.{a}.{b}"] = f"{-high:.2f}-{-low:.2f} below"
            elif low > 0:
                out[f"valid-gap.{a}.{b}"] = f"{low:.2f}-{high:.2f} above"
            else:
                out[f"valid-gap.{a}.{b}"] = f"within {max(-low, high):.2f} of"
    return out


def slr_gates(study: Path, variant: str = "slr-gated") -> str | None:
    """Gated SLR's dev-set gates at the end of each run (its ``gates_dev`` log): the mean over
    heads per seed, and the range over every head of every seed."""
    means, heads = [], []
    for path in sorted((study / "runs").glob(f"{variant}-s*.metrics.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("event") == "gates_dev":
                gates = [float(v) for k, v in rec.items() if ".gate.h" in k]
                if gates:
                    means.append(statistics.fmean(gates))
                    heads += gates
    if not means:
        return None
    return (f"{_and([f'{m:.2f}' for m in means])} over the {seeds_word(len(means))} seeds "
            f"({min(heads):.2f}-{max(heads):.2f} per head)")  # fmt: skip


def label_logs(study: Path, variant: str) -> list[list[tuple[int | None, list[float]]]]:
    """Each seed's RHE labels as its training log recorded them (``runs/<variant>-s*``, in
    file order): per logged batch, its update (None where not recorded) and the share of
    sentences that labelled each layer-0 head important."""
    seeds = []
    for path in sorted((study / "runs").glob(f"{variant}-s*.metrics.jsonl")):
        logged = []
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            heads = [float(v) for k, v in rec.items() if ".important." in k]
            if rec.get("event") == "variants" and heads:
                update = rec.get("update")
                logged.append((None if update is None else int(update), heads))
        seeds.append(logged)
    return seeds


def rhe_label_rates(study: Path, variant: str = "rhe+lpea") -> str | None:
    """How often RHE labelled a layer-0 head important in each seed's training logs: the
    share of sentences, averaged over heads and logs, and its largest value for one head in
    one logged batch."""
    means, peaks, logs = [], [], []
    for logged in label_logs(study, variant):
        shares = [statistics.fmean(heads) for _, heads in logged]
        top = max((max(heads) for _, heads in logged), default=0.0)
        if shares:
            means.append(100 * statistics.fmean(shares))
            peaks.append(100 * top)
            logs.append(len(shares))
    if not means:
        return None
    count = f"{logs[0]}" if len(set(logs)) == 1 else f"{min(logs)}-{max(logs)}"
    whose = f"each of its {seeds_word(len(means))} seeds" if len(means) > 1 else "its one seed"
    return (f"across the {count} training logs of {whose}, "
            f"layer-0 heads counted as important in {_and([f'{m:.3f}%' for m in means])} of "
            f"sentences on average (at most {_and([f'{p:.2f}%' for p in peaks])} for one head "
            f"in one batch)")  # fmt: skip


def rhe_label_phases(
    study: Path, variant: str = "rhe+lpea-prose", split: int = 1000
) -> str | None:  # fmt: skip
    """When RHE labelled layer-0 heads important in each seed's training logs: the share of
    (sentence, head) pairs up to update ``split`` and after it, and the last logged update at
    which at least half were. The prose reading labels most heads early and almost none once
    they grow confident, so one average over the run would hide both."""
    seeds = []
    for logged in label_logs(study, variant):
        timed = [(u, statistics.fmean(heads)) for u, heads in logged if u is not None]
        early = [share for u, share in timed if u <= split]
        late = [share for u, share in timed if u > split]
        last_half = max((u for u, share in timed if share >= 0.5), default=None)
        if early and late:
            seeds.append((100 * statistics.fmean(early), 100 * statistics.fmean(late), last_half))
    if not seeds:
        return None
    halves = [f"{u:,}" if u is not None else "none" for _, _, u in seeds]
    whose = "one seed" if len(seeds) == 1 else f"{seeds_word(len(seeds))} seeds"
    return (f"{_and([f'{e:.0f}%' for e, _, _ in seeds])} of (sentence, head) pairs up to update "
            f"{split:,} and {_and([f'{lt:.2f}%' for _, lt, _ in seeds])} after it (at least "
            f"half of them last at update {_and(halves)}; {whose})")  # fmt: skip


def study_status(study: Path, plan: dict[str, Any]) -> str:
    """How far the study is: runs published of those planned (``plan``, its ``run.json``), and
    the seeds each system has."""
    seeds: dict[str, list[int]] = {}
    for run in run_records(study):
        if (run.get("result") or {}).get("bleu") is not None and run.get("seed") is not None:
            seeds.setdefault(run["variant"], []).append(int(run["seed"]))
    done = sum(len(v) for v in seeds.values())
    counts: dict[int, list[str]] = {}
    for variant, got in seeds.items():
        counts.setdefault(len(got), []).append(f"`{variant}`")
    parts = [f"{n} seed{'s' if n > 1 else ''} of {_and(sorted(names))}"
             for n, names in sorted(counts.items(), reverse=True)]  # fmt: skip
    return f"{done} of the {plan['planned']} planned runs have landed: {'; '.join(parts)}"


def wall_times(plan: dict[str, Any]) -> dict[str, str]:
    """The landed runs' wall time (``run.json``'s ``wall_s``, every stretch of a handed-off
    run counted once; a run cancelled or still training has not landed): ``wall-total`` in
    hours over the runs, ``wall-median`` in minutes, with the range."""
    walls = [float(r["wall_s"]) / 60 for r in plan.get("runs") or []
             if r.get("wall_s") and r.get("state") == "succeeded"]  # fmt: skip
    if not walls:
        return {}
    return {"wall-total": f"{len(walls)} runs landed so far add up to "
                          f"{sum(walls) / 60:.0f} hours",
            "wall-median": f"{statistics.median(walls):.0f} minutes of wall time at the median "
                           f"({min(walls):.0f}-{max(walls):.0f} minutes"}  # fmt: skip


def provenance(plan: dict[str, Any]) -> str:
    """Under which commits the study's runs trained (``run.json``'s ``provenance``): how many
    runs, commits and dirty commits, and the updates recorded under them of all trained."""
    prov = plan.get("provenance") or {}
    commits = prov.get("commits") or []
    recorded = sum(int(c["updates"]) for c in commits)
    unknown = int((prov.get("not_recorded") or {}).get("updates", 0))
    dirty = sum(1 for c in commits if c.get("dirty"))
    return (f"{len(prov.get('runs') or {})} runs trained under {len(commits)} commits, {dirty} "
            f"of them dirty, which hold {recorded:,} of the {recorded + unknown:,} updates "
            f"trained; the other {unknown:,}")  # fmt: skip


def facts(
    results: Path,
    study: Path,
    rows: dict[str, RowFacts],
    family: int,
    scores: dict[str, dict[int, dict[str, float]]],
    vs: dict[str, str],
) -> dict[str, str]:
    """Every fact the prose may quote, by name: from the study's folder, its claims table's
    rows (by system, over a Holm family of ``family`` rows), every run's test BLEU per
    final-model selection (``claims.run_scores``) and each report row's baseline."""
    out: dict[str, str] = {**pair_facts(scores), **row_facts(rows, family)}
    mdes = []
    for diffs in (list(r.diffs) for r in rows.values()):
        spread = statistics.stdev(diffs) if len(diffs) > 1 else None
        mde = min_detectable_effect(spread, len(diffs), ALPHA / max(1, family))
        if mde is not None:
            mdes.append(mde)
    if counts := sorted(len(r.diffs) for r in rows.values()):
        low, high = seeds_word(counts[0]), seeds_word(counts[-1])
        out["seed-range"] = low if low == high else f"{low} to {high}"
    if mdes:
        out["mde-range"] = f"{min(mdes):.1f} to {max(mdes):.1f} BLEU"
        out["mde-min"] = f"{min(mdes):.1f} BLEU"
    for variant in ("vanilla", "8L"):
        if bleu := seed_bleu(scores, variant):
            out[f"{variant}-bleu"] = _scored(bleu)
    averaged, last = seed_bleu(scores, "vanilla"), seed_bleu(scores, "vanilla", "last")
    if averaged and len(last) == len(averaged):
        gains = [a - b for a, b in zip(averaged, last, strict=True)]
        out["vanilla-last-bleu"] = _and([f"{v:.2f}" for v in last])
        out["vanilla-averaging-gain"] = f"{min(gains):.1f}-{max(gains):.1f}"
    if (plan := study_plan(study)) is not None:
        out["study-status"] = study_status(study, plan)
        out["provenance"] = provenance(plan)
        out.update(wall_times(plan))
    eos = _paired(scores, "vanilla", "8L", "average")
    if len(eos) > 1:
        out["vanilla-minus-8L"] = f"{_pm(eos)}, CI {ci_text(eos)}"
    gated = _paired(scores, "slr-gated", "vanilla", "average")
    if len(gated) > 1:
        below = all(d < 0 for d in gated)
        out["slr-gated-averaged"] = (
            f"{_pm(gated)}, CI {ci_text(gated)} ({_and([f'{d:+.2f}' for d in gated])}"
            f"{': every seed below vanilla' if below else ''}); the interval is "
            f"{reading(mean_ci(gated), (1.12,))}"
        )
    if (study / "runs").is_dir():
        out.update(valid_gaps(study))
        out.update(valid_spans(study))
        logged = {"slr-gates": slr_gates(study), "rhe-label-rates": rhe_label_rates(study),
                  "rhe-prose-label-phases": rhe_label_phases(study)}  # fmt: skip
        out.update({name: fact for name, fact in logged.items() if fact is not None})
    out["headmask-importance"] = head_importance(study)
    out["delta-spreads"] = delta_spreads(scores, vs)
    losses = final_valid_losses(study, "vanilla")
    if losses:
        out["vanilla-final-valid"] = _and([f"{v:.3f}" for v in losses])
    curve = results / "learning-curve" / "vanilla-s1.json"
    avg = results / "learning-curve" / "vanilla-s1-avg.json"
    if curve.is_file() and avg.is_file():
        points = json.loads(curve.read_text(encoding="utf-8"))["points"]
        best = max(points, key=lambda p: p["valid_bleu"])
        after = [p for p in points if p["update"] >= best["update"]]
        out["curve-valid-loss"] = _and(
            [f"{p['valid_loss']:.4f} at {p['update']:,}" for p in after]
        )
        curve_avg = json.loads(avg.read_text(encoding="utf-8"))["points"]
        tail = [p for p in curve_avg if p["update"] >= best["update"] - 500]
        out["curve-averaged-valid-bleu"] = _and(
            [f"{p['avg_valid_bleu']:.2f} at {p['update']:,}" for p in tail]
        )
        converged = curve_avg[-1]["avg_test_bleu"]
        out["curve-converged"] = f"{converged:.1f}"
        if vanilla := seed_bleu(scores, "vanilla"):
            out["vanilla-below-converged"] = (
                f"{converged - statistics.fmean(vanilla):.1f} below the converged "
                f"{converged:.1f} and each seed within {converged - min(vanilla):.1f} of it"
            )
    return out


def fill(text: str, known: dict[str, str], where: str) -> str:
    """``text`` with every fact span rewritten; a span naming an unknown fact is an error."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in known:
            raise SystemExit(f"{where}: unknown fact '{name}' (known: {', '.join(known)})")
        return f"<!-- fact:{name} -->{known[name]}<!-- /fact -->"

    return FACT.sub(one, text)
