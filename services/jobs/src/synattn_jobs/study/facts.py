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
from pathlib import Path

from synattn_jobs.verdict import ALPHA, mean_ci, min_detectable_effect, reading

FACT = re.compile(r"<!-- fact:([\w.-]+) -->(.*?)<!-- /fact -->", re.S)


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
    for path in sorted((experiment / "runs").glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
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


def study_status(study: Path) -> str:
    """How far the study is: runs published of those planned (``run.json``), and the seeds
    each system has."""
    plan = json.loads((study / "run.json").read_text(encoding="utf-8"))
    seeds: dict[str, list[int]] = {}
    for path in sorted((study / "runs").glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        if (run.get("result") or {}).get("bleu") is not None and run.get("seed") is not None:
            seeds.setdefault(run["variant"], []).append(int(run["seed"]))
    done = sum(len(v) for v in seeds.values())
    counts: dict[int, list[str]] = {}
    for variant, got in seeds.items():
        counts.setdefault(len(got), []).append(f"`{variant}`")
    parts = [f"{n} seed{'s' if n > 1 else ''} of {_and(sorted(names))}"
             for n, names in sorted(counts.items(), reverse=True)]  # fmt: skip
    return f"{done} of the {plan['planned']} planned runs have landed: {'; '.join(parts)}"


def provenance(study: Path) -> str:
    """Under which commits the study's runs trained (``run.json``'s ``provenance``): how many
    runs, commits and dirty commits, and the updates recorded under them of all trained."""
    plan = json.loads((study / "run.json").read_text(encoding="utf-8"))
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
    row_diffs: list[list[float]],
    family: int,
    scores: dict[str, dict[int, dict[str, float]]],
    vs: dict[str, str],
) -> dict[str, str]:
    """Every fact the prose may quote, by name: from the study's folder, its claims table's
    rows (each row's per-seed Δ, over a Holm family of ``family`` rows), every run's test
    BLEU per final-model selection (``claims.run_scores``) and each report row's baseline."""
    out: dict[str, str] = {}
    mdes = []
    for diffs in row_diffs:
        spread = statistics.stdev(diffs) if len(diffs) > 1 else None
        mde = min_detectable_effect(spread, len(diffs), ALPHA / max(1, family))
        if mde is not None:
            mdes.append(mde)
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
    if (study / "run.json").is_file():
        out["study-status"] = study_status(study)
        out["provenance"] = provenance(study)
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
