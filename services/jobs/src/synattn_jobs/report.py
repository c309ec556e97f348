"""Comparison of an experiment's runs: a table (terminal and JSON) and an HTML report.

Per variant (and hyper-parameter combination): BLEU mean and standard deviation over seeds;
against its baseline the mean per-seed difference, a paired t-test over seeds, the paired
bootstrap (sacreBLEU; seeds pooled: each seed's output is paired with the baseline's output of
the same seed and the pairs are concatenated) and the verdict both must agree on
(``synattn_jobs.verdict``); chrF, parameters and median training tokens/s. Fewer than three
seeds print a warning in words. The HTML report embeds loss curves and, where a run
logged them, gate and head-label heatmaps.
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

from synattn_jobs.store import Experiment, Job
from synattn_jobs.verdict import ALPHA, compare_seeds, decide, holm, seed_warning
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
    average came from the end of the run (DECISIONS §7)."""
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


def _pooled_bootstrap(
    done: list[Job],
    base_jobs: dict[int, Job],
    samples: int,
    read: Callable[[str | None], list[str]],
    protocol: str | None = None,
) -> float | None:
    """sacreBLEU's paired bootstrap p-value over every seed's output, each paired with the
    baseline's output of the same seed (pairs concatenated)."""
    from synattn_trainer.evaluate import paired_bootstrap

    sys_h: list[str] = []
    base_h: list[str] = []
    refs: list[str] = []
    for j in done:
        b = base_jobs.get(j.seed) if j.seed is not None else None
        if b is None or not _ok(b) or "hyp" not in b.result:
            continue
        h, bh = read(scored(j, protocol)["hyp"]), read(scored(b, protocol)["hyp"])
        r = read(j.result.get("ref"))
        if h and len(h) == len(bh) == len(r):
            sys_h += h
            base_h += bh
            refs += r
    return paired_bootstrap(sys_h, base_h, refs, samples).p_value if refs else None


def _ok(job: Job) -> bool:
    """A run that finished and was scored."""
    return job.state == "succeeded" and "bleu" in (job.result or {})


def _adjust_for_the_table(rows: list[dict[str, Any]]) -> int:
    """Holm-adjust each test's p-values over the rows compared with a baseline and base their
    verdicts on the adjusted ones (the unadjusted verdict is kept); the family's size."""
    family = [r for r in rows if r.get("diffs") is not None]
    for raw, adjusted in (("seed_p", "seed_p_holm"), ("p_value", "p_value_holm")):
        for row, p in zip(family, holm([r[raw] for r in family]), strict=True):
            row[adjusted] = p
    for row in family:
        row["verdict_unadjusted"] = row["verdict"]
        diffs = list(row["diffs"].values())
        row["verdict"] = str(decide(diffs, row["seed_p_holm"], row["p_value_holm"]))
    return len(family)


def comparison(exp: Experiment, jobs: list[Job], bootstrap: int = 1000) -> dict[str, Any]:
    """The table's rows: one per variant x hyper-parameters, seeds aggregated, each measured
    against its baseline (the experiment's, or the variant's own from ``baselines``) with a
    verdict that needs the seed test and the bootstrap to agree (``synattn_jobs.verdict``)."""
    groups: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        groups[_group_key(job)].append(job)
    read = functools.cache(_lines)  # a baseline's outputs serve every row: read them once
    own_baselines: dict[str, str] = dict(exp.spec.get("baselines") or {})
    protocols: dict[str, str] = dict(exp.spec.get("protocols") or {})
    baseline_names = {exp.baseline, *own_baselines.values()}

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
            "seed_p": None,
            "p_value": None,  # the paired bootstrap's
            "verdict": None,
            "jobs": [j.id for j in members],
        }
        if done and not is_baseline:
            base_jobs = seeds_of(vs)
            boot = _pooled_bootstrap(done, base_jobs, bootstrap, read, protocol)
            cmp = compare_seeds(
                {j.seed: scores[j.id]["bleu"] for j in done if j.seed is not None},
                {s: scored(b, protocol)["bleu"] for s, b in base_jobs.items() if _ok(b)},
                boot,
            )
            row["p_value"] = boot
            if cmp is not None:
                row.update(
                    delta=cmp.mean_diff, seed_p=cmp.seed_p, verdict=str(cmp.verdict),
                    diffs=dict(zip(map(str, cmp.seeds), cmp.diffs, strict=True)),
                )  # fmt: skip
        rows.append(row)
    family = _adjust_for_the_table(rows)
    rows.sort(key=lambda r: (not r["is_baseline"], r["variant"]))
    signature = next(
        (j.result.get("bleu_signature") for j in jobs if (j.result or {}).get("bleu_signature")),
        None,
    )
    seeds = sorted(set(exp.spec.get("seeds") or []))
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
        "protocols": protocols,
        "warnings": [warning] if warning else [],
        "rows": rows,
        "signature": signature,
    }


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    """Formatted cells (header first), shared by the terminal and the HTML table."""
    out = [["variant", "runs", "BLEU", "± std", "vs", "Δ BLEU", "p (seeds, Holm)",
            "p (bootstrap, Holm)", "verdict", "chrF", "params", "tok/s"]]  # fmt: skip
    for r in report["rows"]:
        runs = f"{r['succeeded']}/{r['runs']}"
        if r["succeeded"] < r["runs"]:
            runs += " (" + ",".join(r["states"]) + ")"
        out.append(
            [r["variant"] + (" (baseline)" if r["is_baseline"] else ""), runs,
             _fmt(r["bleu_mean"], ".2f"), _fmt(r["bleu_std"], ".2f"),
             r.get("vs") or "-", _fmt(r.get("delta"), "+.2f"),
             _fmt(r.get("seed_p_holm", r.get("seed_p")), ".4f"),
             _fmt(r.get("p_value_holm", r["p_value"]), ".4f"), r.get("verdict") or "-",
             _fmt(r["chrf_mean"], ".2f"), _fmt(r["parameters"], ",d"),
             _fmt(r["tokens_per_s"], ".0f")]
        )  # fmt: skip
    return out


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = table_rows(report)
    t = Table(
        title=f"experiment {report['name']} ({report['experiment']}), {report['split']} BLEU",
        caption=report.get("signature") or "",
    )
    for i, h in enumerate(rows[0]):
        t.add_column(h, justify="left" if i == 0 else "right")
    for r in rows[1:]:
        t.add_row(*r)
    console = Console(width=160)
    console.print(t)
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


def loss_curves(jobs: list[Job], out: Path) -> Path | None:
    """Training loss over updates for every run, one line each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = 0
    for job in jobs:
        metrics = run_metrics(job)
        if metrics is None:
            continue
        pts = [
            (rec["update"], rec["loss"])
            for rec in map(json.loads, metrics.read_text(encoding="utf-8").splitlines())
            if rec.get("event") == "update"
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), label=job.name)
            drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("update")
    ax.set_ylabel("training loss (label-smoothed, per token)")
    if drawn > 12:  # a study's many runs: the legend beside the plot, not over the curves
        fig.set_size_inches(7 + 1.8 * (1 + drawn // 20), 4)
        ax.legend(fontsize=6, ncol=1 + drawn // 20, loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        ax.legend(fontsize=7)
    ax.set_title("loss curves")
    fig.tight_layout()
    atomic_write_with(
        out, lambda tmp: fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight")
    )
    plt.close(fig)
    return out


def write_html(report: dict[str, Any], jobs: list[Job], out_dir: Path) -> Path:
    """``report.html`` with the table and figures (PNG beside it and embedded)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    from synattn_trainer.plots import gate_heatmap, label_history, variant_history

    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[dict[str, str]] = []
    curves = loss_curves(jobs, out_dir / "loss.png")
    if curves:
        figures.append({"title": "Loss curves", "png": _png_b64(curves)})
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
