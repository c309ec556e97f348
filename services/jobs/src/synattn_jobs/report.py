"""Comparison of an experiment's runs: a table (terminal and JSON) and an HTML report.

Per variant (and hyper-parameter combination): BLEU mean and standard deviation over seeds;
against its baseline the mean per-seed difference with its seed-paired 95% confidence interval,
a paired t-test over seeds, a paired bootstrap on the mean difference (the test sentences
resampled jointly across seeds, ``synattn_jobs.bootstrap``) and the verdict both must agree on
(``synattn_jobs.verdict``); the smallest difference the design could have detected; chrF,
parameters and median training tokens/s. Fewer than three seeds print a warning in words. The
HTML report embeds loss curves (one panel per system, its baseline's runs behind it) and,
where a run logged them, gate and head-label heatmaps.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from synattn_jobs.bootstrap import (
    DeltaBootstrap,
    bleu_from_statistics,
    bleu_statistics,
    delta_bootstrap,
    resample_counts,
)
from synattn_jobs.head_stats import head_statistics
from synattn_jobs.store import Experiment, Job
from synattn_jobs.verdict import (
    ALPHA,
    LEVEL,
    POWER,
    compare_seeds,
    decide,
    detectable,
    holm,
    min_detectable_effect,
    reading,
    seed_warning,
)
from synattn_shared.atomic import atomic_write_text, atomic_write_with


def _lines(path: str | None) -> list[str]:
    if not path or not Path(path).is_file():
        return []
    return Path(path).read_text(encoding="utf-8").splitlines()


def _group_key(job: Job) -> str:
    tag = ",".join(f"{k}={v}" for k, v in sorted((job.params or {}).items()))
    return f"{job.variant}" + (f" [{tag}]" if tag else "")


def scored(job: Job, protocol: str | None = None) -> dict[str, Any]:
    """A finished run's score under a final-model protocol (``average``, ``last``,
    ``best_valid``): that model's BLEU, chrF and translations when the run made it, else its
    primary model's. A comparison scores the system and its baseline with the same protocol."""
    res = job.result or {}
    other = (res.get("by_selection") or {}).get(protocol) if protocol else None
    if other is not None:
        return {"bleu": other["bleu"], "chrf": other["chrf"], "hyp": other["hyp"],
                "selection": protocol}  # fmt: skip
    return {"bleu": res.get("bleu"), "chrf": res.get("chrf"), "hyp": res.get("hyp"),
            "selection": res.get("selection")}  # fmt: skip


def model_updates(job: Job, protocol: str | None = None) -> dict[str, Any]:
    """Which checkpoints made the final model a row scores (its protocol's, else the run's
    primary one): the updates averaged into it (``[]`` for a single checkpoint), that single
    checkpoint's update when known, and the run's length, so a reader can check that an
    average came from the end of the run (docs/papers/index.md, "Checkpoint averaging")."""
    res = job.result or {}
    entry = (res.get("by_selection") or {}).get(protocol) if protocol else None
    if entry is None:
        entry = {"updates": res.get("averaged_updates"), "checkpoint": res.get("checkpoint"),
                 "checkpoint_update": res.get("checkpoint_update")}  # fmt: skip
        protocol = res.get("selection")
    single = entry.get("checkpoint_update")
    path = Path(str(entry.get("checkpoint") or ""))
    if single is None and path.name.startswith("ckpt-"):
        from synattn_trainer.checkpoint import update_of

        single = update_of(path)  # a run from before the field: its checkpoint's name says it
    return {
        "updates": list(entry.get("updates") or []),
        "checkpoint_update": None if entry.get("updates") else single,
        "max_updates": res.get("max_updates"),
        "selection": protocol,
    }


def _joint_bootstrap(
    done: list[Job],
    base_jobs: dict[int, Job],
    samples: int,
    stats: Callable[[str | None, str | None], Any],
    protocol: str | None = None,
) -> DeltaBootstrap | None:
    """The paired bootstrap on the mean Δ over the seeds whose outputs both sides kept, one
    resampling of the test sentences applied to every seed (``synattn_jobs.bootstrap``); None
    when no seed has translations of the same test set on both sides."""
    system, baseline = [], []
    ref: str | None = None
    for j in sorted(done, key=lambda j: j.seed if j.seed is not None else -1):
        b = base_jobs.get(j.seed) if j.seed is not None else None
        if b is None or not _ok(b) or "hyp" not in b.result:
            continue
        refs = j.result.get("ref")
        if ref is not None and refs != ref:
            continue  # another test set: not the same sentences to resample
        h, bh = stats(scored(j, protocol)["hyp"], refs), stats(scored(b, protocol)["hyp"], refs)
        if h is None or bh is None or h.shape != bh.shape:
            continue
        ref = refs
        system.append(h)
        baseline.append(bh)
    if not system:
        return None
    counts = resample_counts(system[0].shape[0], samples)
    return delta_bootstrap(system, baseline, counts, bleu_from_statistics)


def _ok(job: Job) -> bool:
    """A run that finished and was scored."""
    return job.state == "succeeded" and "bleu" in (job.result or {})


def _adjust_for_the_table(rows: list[dict[str, Any]]) -> int:
    """Holm-adjust each test's p-values over the rows compared with a baseline and base their
    verdicts on the adjusted ones (the unadjusted verdict is kept); give each row the smallest
    difference it could have detected at the level a lone effect must meet in this family
    (alpha over the family's size, Holm's first step) and its interval in words. Returns the
    family's size."""
    family = [r for r in rows if r.get("diffs") is not None]
    for raw, adjusted in (("seed_p", "seed_p_holm"), ("p_value", "p_value_holm")):
        for row, p in zip(family, holm([r[raw] for r in family]), strict=True):
            row[adjusted] = p
    alpha = ALPHA / max(1, len(family))
    for row in family:
        row["verdict_unadjusted"] = row["verdict"]
        diffs = list(row["diffs"].values())
        row["verdict"] = str(decide(diffs, row["seed_p_holm"], row["p_value_holm"]))
        spread = statistics.stdev(diffs) if len(diffs) > 1 else None
        row["seed_sd"] = spread
        row["mde"] = min_detectable_effect(spread, len(diffs), alpha)
        row["mde_alpha"] = alpha
        row["mde_words"] = detectable(row["mde"], len(diffs), len(family))
        ci = row.get("ci95")
        row["reading"] = reading(tuple(ci) if ci else None)
    return len(family)


def _statistics_reader(
    read: Callable[[str | None], list[str]],
) -> Callable[[str | None, str | None], Any]:
    """Per-sentence BLEU statistics of a translation file against its references, computed
    once per file: a baseline's outputs serve every row compared with it."""

    @functools.cache
    def stats(hyp: str | None, ref: str | None) -> Any:
        h, r = read(hyp), read(ref)
        if not h or len(h) != len(r):
            return None
        return bleu_statistics(h, r)

    return stats


def comparison(exp: Experiment, jobs: list[Job], bootstrap: int = 1000) -> dict[str, Any]:
    """The table's rows: one per variant x hyper-parameters, seeds aggregated, each measured
    against its baseline (the experiment's, or the variant's own from ``baselines``) with a
    verdict that needs the seed test and the bootstrap to agree (``synattn_jobs.verdict``)."""
    groups: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        groups[_group_key(job)].append(job)
    read = functools.cache(_lines)  # a baseline's outputs serve every row: read them once
    stats = _statistics_reader(read)
    own_baselines: dict[str, str] = dict(exp.spec.get("baselines") or {})
    protocols: dict[str, str] = dict(exp.spec.get("protocols") or {})
    baseline_names = {exp.baseline, *own_baselines.values()}
    own_seeds: dict[str, list[int]] = dict(exp.spec.get("seeds_by_variant") or {})

    def seeds_of(variant: str) -> dict[int, Job]:
        named = [j for j in jobs if j.variant == variant and j.seed is not None]
        plain = [j for j in named if not j.params]
        return {j.seed: j for j in (plain or named) if j.seed is not None}

    rows = []
    for key, members in groups.items():
        done = [j for j in members if _ok(j)]
        variant = members[0].variant or key
        protocol = protocols.get(variant)
        scores = {j.id: scored(j, protocol) for j in done}
        bleus = [scores[j.id]["bleu"] for j in done]
        is_baseline = variant in baseline_names and not any(j.params for j in members)
        vs = own_baselines.get(variant, exp.baseline)
        row: dict[str, Any] = {
            "variant": key,
            "runs": len(members),
            "succeeded": len(done),
            "states": sorted({j.state for j in members}),
            "bleu_mean": statistics.fmean(bleus) if bleus else None,
            "bleu_std": statistics.stdev(bleus) if len(bleus) > 1 else None,  # one seed: no std
            "bleu_by_seed": {str(j.seed): scores[j.id]["bleu"] for j in done},
            "chrf_mean": statistics.fmean(scores[j.id]["chrf"] for j in done) if done else None,
            "protocol": protocol or (done[0].result.get("selection") if done else None),
            "parameters": done[0].result.get("parameters") if done else None,
            "tokens_per_s": statistics.median(
                [j.result["tokens_per_s"] for j in done if j.result.get("tokens_per_s")] or [0]
            )
            if done
            else None,
            "averaged_updates": {str(j.seed): model_updates(j, protocol) for j in done},
            "is_baseline": is_baseline,
            "vs": None if is_baseline else vs,
            "delta": None,
            "ci95": None,  # seed-paired t-interval of the mean difference
            "seed_p": None,
            "p_value": None,  # the joint paired bootstrap's (synattn_jobs.bootstrap)
            "bootstrap": None,
            "verdict": None,
            "jobs": [j.id for j in members],
            "seeds_planned": len(set(own_seeds.get(variant) or exp.spec.get("seeds") or [])),
            "heads": head_statistics(done, run_metrics),
        }
        if done and not is_baseline:
            base_jobs = seeds_of(vs)
            boot = _joint_bootstrap(done, base_jobs, bootstrap, stats, protocol)
            cmp = compare_seeds(
                {j.seed: scores[j.id]["bleu"] for j in done if j.seed is not None},
                {s: scored(b, protocol)["bleu"] for s, b in base_jobs.items() if _ok(b)},
                boot.p_value if boot else None,
            )
            if boot is not None:
                row["p_value"] = boot.p_value
                row["bootstrap"] = {
                    "method": "paired, test sentences resampled jointly across seeds",
                    "delta": boot.delta, "ci95": list(boot.ci95), "samples": boot.samples,
                    "seeds": boot.seeds,
                }  # fmt: skip
            if cmp is not None:
                row.update(
                    delta=cmp.mean_diff, seed_p=cmp.seed_p, verdict=str(cmp.verdict),
                    diffs=dict(zip(map(str, cmp.seeds), cmp.diffs, strict=True)),
                    ci95=list(cmp.ci95) if cmp.ci95 else None,
                )  # fmt: skip
        rows.append(row)
    family = _adjust_for_the_table(rows)
    rows.sort(key=lambda r: (not r["is_baseline"], r["variant"]))
    signature = next(
        (j.result.get("bleu_signature") for j in jobs if (j.result or {}).get("bleu_signature")),
        None,
    )
    by_variant = exp.spec.get("seeds_by_variant") or {}
    seeds = sorted({*(exp.spec.get("seeds") or []), *(s for v in by_variant.values() for s in v)})
    warning = seed_warning(len(seeds))
    return {
        "experiment": exp.id,
        "name": exp.name,
        "baseline": exp.baseline,
        "baselines": own_baselines,
        "split": exp.spec.get("evaluate", {}).get("split", "valid"),
        "seeds": seeds,
        "alpha": ALPHA,
        "multiple_comparisons": {"method": "holm", "family": family},
        "intervals": {
            "level": LEVEL,
            "seeds": "t-interval of the mean per-seed difference (n - 1 degrees of freedom)",
            "bootstrap": "percentile interval, test sentences resampled jointly across seeds",
        },
        "power": {
            "level": POWER,
            "alpha": ALPHA / max(1, family),
            "meaning": "mde: the smallest true mean difference the seed-paired t-test would "
            "call significant with this probability, at the row's seed count and observed "
            "seed spread and at the level a lone effect must meet after Holm over the family",
        },
        "protocols": protocols,
        "warnings": [warning] if warning else [],
        "rows": rows,
        "signature": signature,
    }


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    """Formatted cells (header first), shared by the terminal and the HTML table."""
    out = [["variant", "runs", "BLEU", "± std", "vs", "Δ BLEU", "95% CI of Δ",
            "detectable Δ", "p seeds", "p bootstrap", "verdict", "chrF", "params",
            "tok/s"]]  # fmt: skip
    for r in report["rows"]:
        runs = f"{r['succeeded']}/{r['runs']}"
        if r["succeeded"] < r["runs"]:
            runs += " (" + ",".join(r["states"]) + ")"
        out.append(
            [r["variant"] + (" (baseline)" if r["is_baseline"] else ""), runs,
             _fmt(r["bleu_mean"], ".2f"), _fmt(r["bleu_std"], ".2f"),
             r.get("vs") or "-", _fmt(r.get("delta"), "+.2f"), _interval(r.get("ci95")),
             _mde(r),
             _fmt(r.get("seed_p_holm", r.get("seed_p")), ".4f"),
             _fmt(r.get("p_value_holm", r["p_value"]), ".4f"), r.get("verdict") or "-",
             _fmt(r["chrf_mean"], ".2f"), _fmt(r["parameters"], ",d"),
             _fmt(r["tokens_per_s"], ".0f")]
        )  # fmt: skip
    return out


NO_WRAP = {"variant", "95% CI of Δ", "detectable Δ", "p bootstrap", "verdict"}
KEY = (
    "Δ: mean per-seed difference from its baseline; 95% CI of Δ: seed-paired t-interval (an "
    "interval holding 0 is not evidence of no effect); detectable Δ: the smallest true Δ the "
    "seed test would find 4 times in 5 at this seed count and spread; p seeds: paired t-test; "
    "p bootstrap: test sentences resampled jointly across seeds; both Holm-adjusted over the "
    "compared rows."
)


def _interval(ci: list[float] | None) -> str:
    return "-" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _mde(row: dict[str, Any]) -> str:
    """The minimum detectable effect as a table cell: "≥ X", or "-" where it is not estimable
    (a baseline, one seed, or seeds that did not vary)."""
    mde = row.get("mde")
    return "-" if mde is None else f"≥ {mde:.2f}"


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = table_rows(report)
    t = Table(
        title=f"experiment {report['name']} ({report['experiment']}), {report['split']} BLEU",
        caption=report.get("signature") or "",
    )
    for i, h in enumerate(rows[0]):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=h in NO_WRAP)
    for r in rows[1:]:
        t.add_row(*r)
    console = Console(width=180)
    console.print(t)
    console.print(KEY, highlight=False)
    for warning in report.get("warnings", []):
        console.print(f"[bold yellow]warning:[/] {warning}")


def _png_b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def run_metrics(job: Job) -> Path | None:
    """A run's metrics log: in its run folder while that exists, else the published copy its
    result names by absolute path (a run an earlier session published and this queue adopted
    from ``results/``: its run folder was on another checkout, and the report drew only this
    session's runs)."""
    local = Path(job.out_dir) / "metrics.jsonl"
    if local.is_file():
        return local
    published = (job.result or {}).get("metrics")  # relative: not against wherever this runs
    if isinstance(published, str) and Path(published).is_absolute():
        return Path(published) if Path(published).is_file() else None
    return None


def loss_points(metrics: Path) -> dict[str, list[tuple[int, float]]]:
    """A run's loss by update: ``validation`` at each epoch's end and ``training`` at each
    logged update. A resumed run logs again the updates after its last checkpoint; the later
    value is kept, the trajectory the run went on with."""
    valid: dict[int, float] = {}
    train: dict[int, float] = {}
    for line in metrics.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("event") == "epoch" and rec.get("valid_loss") is not None:
            valid[int(rec["update"])] = float(rec["valid_loss"])
        elif rec.get("event") == "update" and rec.get("loss") is not None:
            train[int(rec["update"])] = float(rec["loss"])
    return {"validation": sorted(valid.items()), "training": sorted(train.items())}


def loss_panels(report: dict[str, Any], jobs: list[Job]) -> tuple[str, list[dict[str, Any]]]:
    """The loss figure's data: one panel per table row, its runs by seed, and the runs of the
    baseline it is compared with, so that a row's curves are read against the curves its
    verdict is measured on (a collapse shows as a rise its baseline does not make). Validation
    loss, and only the runs that logged one (a run still in its first epoch waits); training
    loss for all when none did (runs shorter than an epoch)."""
    by_id = {j.id: j for j in jobs}
    points: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for job in jobs:
        metrics = run_metrics(job)
        if metrics is not None:
            points[job.id] = loss_points(metrics)
    drawn = [p for p in points.values() if p["validation"] or p["training"]]
    if not drawn:
        return "validation", []
    kind = "validation" if any(p["validation"] for p in drawn) else "training"

    def curves(ids: list[str]) -> dict[str, list[tuple[int, float]]]:
        out = {}
        for i in ids:
            if points.get(i, {}).get(kind) and i in by_id:
                job = by_id[i]
                out[f"seed {job.seed}" if job.seed is not None else job.name] = points[i][kind]
        return dict(sorted(out.items()))

    rows = {r["variant"]: r for r in report["rows"]}
    panels = []
    for row in report["rows"]:
        own = curves(row["jobs"])
        if not own:
            continue
        vs = row.get("vs")
        base = curves(rows[vs]["jobs"]) if vs in rows else {}
        panels.append({"variant": row["variant"], "vs": vs if base else None, "runs": own,
                       "baseline": base})  # fmt: skip
    return kind, panels


def loss_curves(report: dict[str, Any], jobs: list[Job], out: Path) -> Path | None:
    """Loss over updates, one panel per system (``loss_panels``): its seeds in colour, its
    baseline's seeds in grey behind them. None when no run logged a loss."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    kind, panels = loss_panels(report, jobs)
    if not panels:
        return None
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.5 * rows + 0.6), sharex=True,
                             sharey=True, squeeze=False)  # fmt: skip
    labels = sorted({label for p in panels for label in p["runs"]})
    colour = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    for ax, panel in zip(axes.flat, panels, strict=False):
        for pts in panel["baseline"].values():
            ax.plot(*zip(*pts, strict=True), color="0.75", lw=0.9)
        for label, pts in panel["runs"].items():
            ax.plot(*zip(*pts, strict=True), color=colour[label], lw=1.1)
        title = panel["variant"] + (f"  (grey: {panel['vs']})" if panel["vs"] else "")
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    # the early, steep part of every curve would flatten the end, where systems differ: show
    # up to 1 nat above the worst final loss
    every = [v for p in panels for c in (*p["runs"].values(), *p["baseline"].values())
             for _, v in c if math.isfinite(v)]  # fmt: skip
    finals = [c[-1][1] for p in panels for c in p["runs"].values() if math.isfinite(c[-1][1])]
    if every and finals:
        low, high = min(every), min(max(every), max(finals) + 1.0)
        pad = 0.03 * max(high - low, 1e-3)
        axes.flat[0].set_ylim(low - pad, high + pad)
    for ax in axes[-1]:
        ax.set_xlabel("update", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{kind} loss", fontsize=8)
    handles = [Line2D([], [], color=colour[label], label=label) for label in labels]
    handles.append(Line2D([], [], color="0.75", label="the baseline's runs"))
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncol=min(len(handles), 6))
    what = "at each epoch's end" if kind == "validation" else "(label-smoothed, per token)"
    fig.suptitle(f"{kind.capitalize()} loss {what}, per system", fontsize=9, x=0.01,
                 ha="left")  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    atomic_write_with(
        out, lambda tmp: fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight")
    )
    plt.close(fig)
    return out


def write_html(report: dict[str, Any], jobs: list[Job], out_dir: Path) -> Path:
    """``report.html`` with the table and figures (PNG beside it and embedded)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    from synattn_trainer.mask_frequency import mask_records
    from synattn_trainer.plots import gate_heatmap, label_history, mask_heatmap, variant_history

    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[dict[str, str]] = []
    curves = loss_curves(report, jobs, out_dir / "loss.png")
    if curves:
        figures.append({"title": "Loss curves per system, each against its baseline",
                        "png": _png_b64(curves)})  # fmt: skip
    for job in jobs:
        metrics = run_metrics(job)
        if job.state != "succeeded" or metrics is None:
            continue
        stats = variant_history(metrics)
        if "gate" in stats:
            p = gate_heatmap(metrics, out_dir / f"gates-{job.name}.png")
            figures.append({"title": f"Gates per layer and head: {job.name}", "png": _png_b64(p)})
        importance = Path(job.out_dir) / "analysis" / "importance.png"
        if importance.is_file():
            figures.append({"title": f"Head importance: {job.name}", "png": _png_b64(importance)})
        if "important" in stats:
            p = label_history(metrics, out_dir / f"labels-{job.name}.png")
            figures.append({"title": f"RHE head labels: {job.name}", "png": _png_b64(p)})
        if mask_records(metrics):
            p = mask_heatmap(metrics, out_dir / f"masks-{job.name}.png")
            figures.append({"title": f"Heads masked in training (HeadMask): {job.name}",
                            "png": _png_b64(p)})  # fmt: skip
    env = Environment(
        loader=PackageLoader("synattn_jobs", "templates"), autoescape=select_autoescape()
    )
    page = env.get_template("report.html").render(
        report=report, table=table_rows(report), figures=figures, jobs=jobs,
        escape=html.escape,
    )  # fmt: skip
    path = out_dir / "report.html"
    atomic_write_text(path, page)
    atomic_write_text(out_dir / "report.json", json.dumps(report, indent=2))
    return path
