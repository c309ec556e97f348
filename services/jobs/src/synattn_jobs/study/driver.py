"""Run an experiment file through the job queue and publish its results into ``results/<name>/``.

The reproduction study's driver (README, "The papers' claims, measured here"). It queues the
experiment on the embedded queue under ``--home`` (or finds it there from an earlier call),
starts ``--workers`` worker processes with ``--threads`` threads each, and every time a run
finishes writes into ``results/<name>/``: ``report.json`` and ``report.html`` with their
figures, each run's translations of the evaluation split, and ``run.json`` (the command, the
budget, the git commit, the hardware, each run's wall time, and under ``provenance`` every
commit the runs trained under, across sessions). Checkpoints stay under ``--home``.

Interrupted (a cut-off session, a reboot)? Run the same command again: the queued jobs are
still in the embedded broker, a job whose worker died is put back on the queue by the next
worker's reaper, and a run resumes exactly from its last checkpoint.

On a fresh checkout (``--home`` gone, ``results/`` committed), the study goes on from what was
published: each finished run's record (``results/<name>/runs/<run>.json``, its result and
timing) and its translations under every final-model selection let the new queue take that
run as done, without training it again, when its resolved configuration is the same. Only
the runs that never finished are trained.

A published run whose configuration changed stops the driver with the runs named, unless
``--retrain-changed`` asks to train them again.

A session that must end before its runs do hands them over: ``--hand-off-after SECONDS`` stops
the workers after that long (each run saves where it is) and copies what each unfinished run
needs to go on into ``<DIR>/<name>/``, ``DIR`` being the directory ``--hand-off-dir`` names
(``synattn_jobs.study.handoff``; ``--hand-off`` does the same for a driver stopped otherwise).
The same command with the same ``--hand-off-dir`` on the next checkout (copy ``DIR`` there
when it is another machine) resumes those runs exactly, instead of from update 0, and a run's
published record keeps the stretches its hand-offs name. ``DIR`` must lie outside the
repository, or where git ignores it (``build/``): a hand-off holds model checkpoints, tens of
MB a run, and a checkpoint once committed stays in the git history, paid by every clone
forever. ``--no-new-runs-after SECONDS`` keeps a worker freed near the end from starting a run
it would only hand off minutes in: after that long no new run starts, and the driver exits
once the running ones have ended. ``--late RUN ...`` names the exceptions: runs short enough to
finish in what is left, each started alone on the next worker that frees after the hold (two
runs side by side rarely end together, and the core the first frees would idle for the rest).
With ``--hand-off-after``, a late run that would still be training at the hand-off is passed
over, with a line that says why: its variant's published runs give its length (wall time
times target tokens per second), and the runs training here give this machine's pace against
theirs (``--late-may-overrun`` starts them anyway, where the hand-off reaches the next
session).
With ``--hand-off-after``, a run whose pace shows it will still be training at the hand-off is
named once, with the update it will have reached (``synattn_jobs.study.deadline``): machines
differ in speed, and its worker could still take a shorter run: ``synattn cancel`` stops it
where it is, the hand-off carries it as a stopped run, and a driver started again on the same
queue puts a run cancelled under an earlier one back to wait.
A session can also be cut off before its finished runs are committed: ``--commit-results``
commits each run as it lands (``synattn_jobs.study.commit``).

    make data
    synattn study run examples/experiments/headline-tiny8.yaml --workers 2 --threads 1
    synattn study run examples/experiments/headline-tiny8.yaml --publish-only
    synattn study run examples/experiments/study-conv5k.yaml --hand-off-after 9000 \
        --hand-off-dir ~/synattn-handoff
    synattn study run examples/experiments/study-conv5k.yaml --hand-off-after 9000 \
        --no-new-runs-after 7200 --hand-off-dir ~/synattn-handoff
    synattn study run examples/experiments/study-conv5k.yaml --hand-off-after 9600 \
        --no-new-runs-after 600 --first slr-gated-s6 disagreement+routing-s6 --late vanilla-s7 \
        --hand-off-dir ~/synattn-handoff
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from synattn_jobs.study import commit as study_commit
from synattn_jobs.study import handoff as study_handoff
from synattn_jobs.study import project_root
from synattn_jobs.study.deadline import overrunning, pace_here, pace_samples, too_long

REPO = project_root()  # the project folder: experiment files, results/, build/


def settings_env(home: Path) -> dict[str, str]:
    """The embedded queue of the study: store, broker and runs under ``home``."""
    return {
        "SYNATTN_HOME": str(home / "jobs"),
        "SYNATTN_DATA_ROOT": str(REPO),
        "SYNATTN_RUNS_DIR": str(home / "runs"),
    }


def hardware(threads: int, workers: int) -> dict[str, Any]:
    """What the runs ran on, in words a reader can compare."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "device": gpu or "cpu",
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cpu_isa": cpu_isa(),
        "workers": workers,
        "threads_per_worker": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def cpu_isa() -> str:
    """The widest vector instruction set torch's CPU kernels use here (``AVX2``, ``AVX512``,
    ...): two machines that share a model name may differ in it, and a run's speed with them."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def git_commit() -> str:
    """The project folder's HEAD, with ``+dirty`` when the working tree differs from it; for a
    folder outside git, the synattn release that ran the study instead."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True)  # fmt: skip
    if head.returncode != 0:
        from importlib.metadata import version

        return f"synattn-jobs {version('synattn-jobs')} (the project folder is not a git checkout)"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    return head.stdout.strip() + ("+dirty" if dirty else "")


def budget_of(resolved: dict[str, Any]) -> dict[str, Any]:
    """The training budget of a resolved configuration, as the README table states it."""
    m, t = resolved["model"], resolved["train"]
    return {
        "model": f"{m['enc_layers']}+{m['dec_layers']} layers, d={m['d_model']}, "
        f"FFN {m['d_ff']}, {m['heads']} heads",
        "max_updates": t["max_updates"],
        "max_epochs": t.get("max_epochs"),
        "max_tokens": resolved["data"]["max_tokens"],
        "lr": resolved["optim"]["lr"],
        "warmup": resolved["optim"]["warmup"],
    }


def parse_source(resolved: dict[str, Any]) -> dict[str, Any] | None:
    """Which parser made the training shards (docs/papers/index.md asks every run to say): the
    ``parser`` entry of the training data's manifest."""
    train = (resolved.get("data") or {}).get("train")
    manifest = Path(str(train)) / "manifest.json"
    if train is None or not manifest.is_file():
        return None
    parser: dict[str, Any] | None = json.loads(manifest.read_text(encoding="utf-8")).get("parser")
    return parser


def study_store() -> Any:
    """The job store of the embedded queue that ``settings_env`` points the settings at."""
    from synattn_jobs.settings import JobSettings
    from synattn_jobs.store import JobStore

    return JobStore(JobSettings().database_url)


def study_summary(store: Any, name: str) -> list[str]:
    """``synattn study status``: one line per run of the study ``name`` in ``store`` (its
    state; a finished run's BLEU; for a running or stopped run, the update it has reached and,
    while it trains, its loss, speed and time left, as ``synattn watch`` words them: a study's
    runs take hours, and "update 1,200/5,000" alone does not say when the next one lands),
    then the counts."""
    from synattn_jobs.follow import progress_parts

    exp = store.experiment(name)
    if exp is None:
        return [f"{name}: no such experiment in this queue"]
    jobs = sorted(store.jobs(experiment_id=exp.id), key=lambda j: (j.variant or "", j.seed or 0))
    lines = []
    for j in jobs:
        r = j.result or {}
        where = (
            f"BLEU {r['bleu']}" if j.state == "succeeded" and r.get("bleu") is not None
            else ", ".join(progress_parts(j))
        )  # fmt: skip
        lines.append(f"{j.name:<32} {j.state:<10} {where}".rstrip())
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.state] = counts.get(j.state, 0) + 1
    done = counts.get("succeeded", 0)
    lines.append(f"{name}: {done}/{len(jobs)} runs done ("
                 + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")")  # fmt: skip
    return lines


def study_results(exp_id: str, results: Path) -> tuple[Any, Any, Path]:
    """The embedded queue's store, the experiment, and its folder under ``results`` (or under
    the ``--hand-off-dir``: the study's hand-off directory)."""
    store = study_store()
    exp = store.experiment(exp_id)
    assert exp is not None
    return store, exp, (results / exp.name).resolve()


def find_or_submit(grid: Path, env: dict[str, str]) -> str:
    """The experiment's id: an earlier submission of the same name, or a new one."""
    from synattn_jobs.settings import JobSettings
    from synattn_jobs.store import JobStore
    from synattn_jobs.submit import load_experiment_file

    name = load_experiment_file(grid).name
    settings = JobSettings()
    settings.prepare()
    store = JobStore(settings.database_url)
    exp = store.experiment(name)
    if exp is not None:
        return exp.id
    synattn = Path(sys.executable).with_name("synattn")
    out = subprocess.run([str(synattn), "experiment", "run", str(grid)], env={**os.environ, **env},
                         capture_output=True, text=True)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"submit failed: {(out.stderr or out.stdout).strip()}")
    return out.stdout.strip().splitlines()[-1]


def claimed_s(job: Any, until: float | None) -> float | None:
    """The seconds the job's claims held it in this queue: the last from its start to ``until``
    (its finish, or its hand-off's save), plus any a lost or released worker held before it.
    None when it never started or has no end."""
    if not (job.started_at and until):
        return None
    return float(until - job.started_at) + float(job.earlier_claims_s or 0.0)


def publish(
    exp_id: str,
    results: Path,
    meta: dict[str, Any],
    trained_with: dict[str, Any] | None = None,
    hand_off_dir: Path | None = None,
) -> dict[str, Any]:
    """Write the report, translations and ``run.json`` of the experiment's finished runs.
    ``trained_with``: the driver's workers, threads and CPU ISA, recorded with each run it finished
    (a run's wall time depends on how many ran beside it); None when only publishing.
    ``hand_off_dir``: the ``--hand-off-dir``, whose hand-offs name the stretches a finished run
    trained in earlier checkouts (and are deleted once it is published); None when not given,
    and then only a published record's own stretches count."""
    from synattn_jobs.report import comparison, scored, write_html
    from synattn_shared.atomic import atomic_write_text

    store = study_store()
    exp = store.experiment(exp_id)
    assert exp is not None
    jobs = list(store.jobs(experiment_id=exp.id))
    out = results / exp.name
    home = None if hand_off_dir is None else hand_off_dir / exp.name
    report = comparison(exp, jobs)
    write_html(report, jobs, out)
    runs = []
    protocols: dict[str, str] = dict(exp.spec.get("protocols") or {})
    translations = out / "translations"
    translations.mkdir(parents=True, exist_ok=True)
    # a run this driver finishes trained its last stretch under this driver's command and
    # commit; when only publishing, which driver finished a run is not known here
    driver = None if trained_with is None else {
        "command": meta.get("command"), "git_commit": meta.get("git_commit")}  # fmt: skip
    records = []
    for job in sorted(jobs, key=lambda j: j.name):
        res = job.result or {}
        record = _ledger(out, job.name)
        if job.state == "succeeded" and res.get("hyp"):
            ref = translations / f"ref.{res.get('split', 'test')}.txt"
            if not ref.is_file():
                shutil.copyfile(res["ref"], ref)
            if not ledger_is_current(job, record):
                record = write_ledger(job, out, trained_with, driver, home)
        if job.state == "succeeded" and record:
            records.append(record)
        wall = claimed_s(job, job.finished_at)
        wall = wall or res.get("wall_s")  # a record rebuilt without its timestamps keeps its wall
        if wall and job.state == "succeeded":  # the stretches earlier checkouts handed off
            wall += float(record.get("earlier_wall_s") or 0.0)
        model = scored(job, protocols.get(job.variant or ""))  # the row's protocol's model
        runs.append({"name": job.name, "variant": job.variant, "seed": job.seed,
                     "state": job.state, "bleu": model["bleu"],
                     "selection": model["selection"], "updates": res.get("update"),
                     "wall_s": round(wall, 1) if wall else None, "attempts": job.attempts,
                     "tokens_per_s": res.get("tokens_per_s"),
                     "trained_with": record.get("trained_with")})  # fmt: skip
    resolved = next((j.spec.get("resolved") for j in jobs if j.spec.get("resolved")), None)
    walls: list[float] = [float(r["wall_s"]) for r in runs if r["wall_s"]]
    starts = [j.started_at for j in jobs if j.started_at]
    ends = [j.finished_at for j in jobs if j.finished_at]
    info = {
        **meta,
        "parse": parse_source(resolved) if resolved else None,
        "experiment": exp.name,
        "experiment_id": exp.id,
        "budget": budget_of(resolved) if resolved else None,
        "runs": runs,
        "finished": sum(r["state"] == "succeeded" for r in runs),
        "planned": len(runs),
        "run_wall_s_total": round(sum(walls), 1),
        # first start to last finish (with --workers N, runs overlap; an interrupted study
        # counts its pause too)
        "study_wall_s": round(max(ends) - min(starts), 1) if starts and ends else None,
        "provenance": provenance(records),
    }
    atomic_write_text(out / "run.json", json.dumps(info, indent=2) + "\n")
    return info


PROVENANCE_NOTE = (
    "the top-level command and git_commit are the last driver's only; the runs trained under "
    "every commit listed here (dirty: the working tree differed from the commit; commit null: "
    "not recorded, the run finished before the finishing driver's commit was kept)"
)


def split_commit(git_commit: str | None) -> tuple[str | None, bool | None]:
    """``git_commit()``'s text as (the commit, whether the working tree was dirty);
    (None, None) when it was not recorded."""
    if git_commit is None:
        return None, None
    commit, dirty = git_commit.removesuffix("+dirty"), git_commit.endswith("+dirty")
    return commit, dirty


def stretches(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A published run's stretches of training, in order, each with the commit it trained
    under: the ones earlier checkouts handed off (``segments``), then the last, to the run's
    end, under the driver that finished it (``finished_under``; commit None in a record
    written before that was kept)."""
    parts = []
    for seg in record.get("segments") or []:
        commit, dirty = split_commit(seg.get("git_commit"))
        parts.append({"from_update": int(seg["from_update"]), "to_update": int(seg["to_update"]),
                      "commit": commit, "dirty": dirty})  # fmt: skip
    start = parts[-1]["to_update"] if parts else 0
    end = (record.get("result") or {}).get("update")
    commit, dirty = split_commit((record.get("finished_under") or {}).get("git_commit"))
    parts.append({"from_update": start, "to_update": start if end is None else int(end),
                  "commit": commit, "dirty": dirty})  # fmt: skip
    return parts


def provenance(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Every commit the published runs (their ``runs/<run>.json`` records) trained under, for
    ``run.json``: per commit, dirty or not, the runs and the updates trained under it, in the
    order the commits were first used; the updates whose commit was not recorded; and each
    run's stretches. A study trains over many sessions, so one top-level commit says too
    little."""
    commits: dict[tuple[str, bool], dict[str, Any]] = {}
    first: dict[tuple[str, bool], float] = {}  # when a stretch under the commit first ended
    unknown: dict[str, Any] = {"runs": [], "updates": 0}
    runs: dict[str, list[dict[str, Any]]] = {}
    for record in sorted(records, key=lambda r: str(r["name"])):
        name = str(record["name"])
        parts = stretches(record)
        runs[name] = parts
        segments = record.get("segments") or []
        ends = [g.get("ended_at") for g in segments] + [record.get("finished_at")]
        for part, ended in zip(parts, ends, strict=True):
            trained = part["to_update"] - part["from_update"]
            if part["commit"] is None:
                entry = unknown
            else:
                key = (part["commit"], bool(part["dirty"]))
                entry = commits.setdefault(key, {"commit": key[0], "dirty": key[1], "runs": [],
                                                 "updates": 0})  # fmt: skip
                first[key] = min(first.get(key, float("inf")), float(ended or float("inf")))
            if name not in entry["runs"]:
                entry["runs"].append(name)
            entry["updates"] += trained
    order = sorted(commits, key=lambda k: (first[k], k))
    return {"note": PROVENANCE_NOTE, "commits": [commits[k] for k in order],
            "not_recorded": unknown, "runs": runs}  # fmt: skip


def republish_meta(grid: Path, results: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """``run.json``'s provenance when only publishing: the command, commit and hardware that
    trained the runs stay those of the training driver (an earlier ``run.json``), and this
    call is recorded beside them as ``republished``."""
    from synattn_jobs.submit import load_experiment_file

    earlier = results / load_experiment_file(grid).name / "run.json"
    if not earlier.is_file():
        return meta
    kept = json.loads(earlier.read_text(encoding="utf-8"))
    if "--publish-only" in str(kept.get("command")):
        return meta  # nothing earlier to keep (a study only ever published)
    return {
        "command": kept.get("command"),
        "git_commit": kept.get("git_commit"),
        "hardware": kept.get("hardware"),
        "republished": {"command": meta["command"], "git_commit": meta["git_commit"]},
    }


def spec_digest(spec: dict[str, Any]) -> str:
    """What a run trains, independent of where the checkout lies: its stored spec (the resolved
    configuration included) with this repository's path taken out, and every setting the
    config marks execution-only (``synattn_trainer.config.EXECUTION_ONLY``) left out at its
    default, the value older runs, whose specs lack it, had in effect."""
    from synattn_trainer.config import execution_only_defaults

    spec = json.loads(json.dumps(spec))
    resolved = spec.get("resolved")
    if isinstance(resolved, dict):
        for (section, key), old in execution_only_defaults().items():
            part = resolved.get(section)
            if isinstance(part, dict) and key in part and part[key] == old:
                del part[key]
    text = json.dumps(spec, sort_keys=True).replace(str(REPO), "$REPO")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _published_hyp(job_name: str, hyp: str) -> str:
    """``<run>.<split>[.<selection>].txt``: the name a translation file gets under results/."""
    return f"{job_name}.{Path(hyp).name.split('.', 1)[1]}"


def _entries(res: dict[str, Any]) -> list[dict[str, Any]]:
    """A result and its entry for every final-model selection: each names its own files."""
    return [res, *(res.get("by_selection") or {}).values()]


def _ledger(out: Path, name: str) -> dict[str, Any]:
    """A published run's record ``runs/<name>.json``, or {} when it has none."""
    path = out / "runs" / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def ledger_is_current(job: Any, record: dict[str, Any]) -> bool:
    """Whether the run's published record (``runs/<run>.json``, {} when none) already records
    this finish of this configuration, so that publishing after each run rewrites only the runs
    that are new."""
    if not record:
        return False
    published = (record.get("finished_at"), record.get("spec_digest"))
    return published == (job.finished_at, spec_digest(job.spec))


def write_ledger(
    job: Any,
    out: Path,
    trained_with: dict[str, Any] | None = None,
    finished_under: dict[str, Any] | None = None,
    hand_offs: Path | None = None,
) -> dict[str, Any]:
    """Publish one finished run so that a later session can take it as done: its translations
    under every final-model selection, its metrics, and ``runs/<run>.json`` with the result
    (paths relative to ``out``), the spec's digest, the timing and, when known, how many runs
    trained side by side with how many threads each (``trained_with``) and the command and
    commit of the driver that trained its last stretch (``finished_under``; the earlier
    stretches' are in ``segments``, from the run's hand-off in ``hand_offs``, the study's
    hand-off directory, which is then deleted). Returns the record."""
    from synattn_shared.atomic import atomic_write_text

    res = json.loads(json.dumps(job.result))
    translations = out / "translations"
    for entry in _entries(res):
        if entry.get("hyp") and Path(entry["hyp"]).is_file():
            name = _published_hyp(job.name, entry["hyp"])
            if not (translations / name).is_file() or entry is res:
                atomic_write_text(translations / name,
                                  Path(entry["hyp"]).read_text(encoding="utf-8"))  # fmt: skip
            entry["hyp"] = f"translations/{name}"
    if res.get("ref"):
        res["ref"] = f"translations/ref.{res.get('split', 'test')}.txt"
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    if res.get("metrics") and Path(res["metrics"]).is_file():
        atomic_write_text(runs / f"{job.name}.metrics.jsonl",
                          Path(res["metrics"]).read_text(encoding="utf-8"))  # fmt: skip
        res["metrics"] = f"runs/{job.name}.metrics.jsonl"
    record = {
        "name": job.name, "variant": job.variant, "seed": job.seed,
        "spec_digest": spec_digest(job.spec), "attempts": job.attempts,
        "started_at": job.started_at, "finished_at": job.finished_at,
        # claims before the last one (a warm restart, a lost worker): the wall counts them
        "earlier_claims_s": job.earlier_claims_s,
        "trained_with": trained_with, "result": res,
    }  # fmt: skip
    old = _ledger(out, job.name)
    same = old if old.get("finished_at") == job.finished_at else {}
    # the same finish published again keeps the driver that published it first
    finished_under = same.get("finished_under") or finished_under
    if finished_under:
        record["finished_under"] = finished_under
    history = None if hand_offs is None else study_handoff.load_record(hand_offs, job.name)
    if history is None:  # the same finish published again keeps its stretches
        history = same or None
    # the queue whose claims (started_at to finished_at, earlier_claims_s) the record holds: the
    # same finish published again from another queue (adopted there) keeps the first one's
    queue = same.get("queue") if same else job.experiment_id
    if queue:
        record["queue"] = queue
    if history and history.get("segments") and history.get("spec_digest") == record["spec_digest"]:
        # trained over several checkouts: the stretches before the last one, and the time of
        # those not already in the claims
        record["segments"] = history["segments"]
        record["earlier_wall_s"] = study_handoff.handed_off_wall_s(history["segments"], queue)
    atomic_write_text(runs / f"{job.name}.json", json.dumps(record, indent=1) + "\n")
    if hand_offs is not None:  # published: its hand-off is no longer needed
        study_handoff.forget(hand_offs, job.name)
    return record


def adopt_published(exp_id: str, results: Path, retrain_changed: bool = False) -> list[str]:
    """Take the runs published by an earlier session as done in this queue: every queued job
    of the experiment whose ``runs/<name>.json`` has the same spec digest becomes succeeded
    with that result (paths pointing into ``results/``). Returns the names taken.

    A published run whose configuration differs from the queued one is trained again only
    with ``retrain_changed``: otherwise nothing is taken and ``SystemExit`` names those runs,
    since a setting added or changed in the code would silently re-queue (and in time
    overwrite) hours of published runs."""
    store, exp, out = study_results(exp_id, results)
    found = []
    for job in store.jobs(experiment_id=exp.id, state="queued"):
        path = out / "runs" / f"{job.name}.json"
        if path.is_file():
            found.append((job, json.loads(path.read_text(encoding="utf-8"))))
    changed = [job.name for job, record in found
               if record.get("spec_digest") != spec_digest(job.spec)]  # fmt: skip
    if changed and not retrain_changed:
        raise SystemExit(
            f"{len(changed)} published run(s) of {exp.name} trained another configuration "
            f"({', '.join(changed)}): a setting was added or changed since (one that does not "
            "change what a run computes is marked EXECUTION_ONLY in synattn_trainer.config); "
            "pass --retrain-changed to train them again"
        )
    taken = []
    for job, record in found:
        if job.name in changed:
            print(f"{job.name}: the published run trained another configuration; training again")
            continue
        res = record["result"]
        for entry in _entries(res):
            for key in ("hyp", "ref", "metrics"):
                if isinstance(entry.get(key), str) and not Path(entry[key]).is_absolute():
                    entry[key] = str(out / entry[key])
        if not Path(res["hyp"]).is_file():
            print(f"{job.name}: its published translation is missing; training again")
            continue
        if store.adopt_finished(job.id, res, record.get("started_at"), record.get("finished_at"),
                                record.get("attempts") or 1,
                                record.get("earlier_claims_s")):  # fmt: skip
            taken.append(job.name)
    return taken


def restore_handed_off(exp_id: str, hand_off_dir: Path, now: dict[str, Any]) -> list[str]:
    """Put every hand-off under ``<hand_off_dir>/<name>/`` into its queued run's directory, so
    that the run resumes where an earlier checkout stopped it. Returns the runs restored. A
    hand-off that does not check out (another configuration, a file changed or missing) stops
    the driver with the reason rather than training the run again from update 0; ``now``: this
    machine's hardware, to say where the rounding differs from the handed-off stretch's."""
    store, exp, home = study_results(exp_id, hand_off_dir)
    restored = []
    for job in store.jobs(experiment_id=exp.id, state="queued"):
        record = study_handoff.load_record(home, job.name)
        if record is None:
            continue
        why = study_handoff.problem(record, home, spec_digest(job.spec))
        if why:
            raise SystemExit(f"hand-off: {why}")
        if study_handoff.restore(record, home, Path(job.out_dir)):
            restored.append(job.name)
            change = study_handoff.rounding_change(record, now)
            if change:
                print(f"note: {job.name} continues on other kernels than it trained with "
                      f"({change}); from update {record['update']} on it is another draw of "
                      "the same noise, not the run it would have been", flush=True)  # fmt: skip
    return restored


def hand_off_stopped(exp_id: str, hand_off_dir: Path, meta: dict[str, Any]) -> list[str]:
    """Hand off every queued or cancelled run of the experiment that has trained (stopped by
    a warm worker shutdown, or by ``synattn cancel``) into ``<hand_off_dir>/<name>/``, for the
    next checkout to resume. Returns ``run@update`` for each."""
    store, exp, home = study_results(exp_id, hand_off_dir)
    handed = []
    for job in store.jobs(experiment_id=exp.id, state=("queued", "cancelled")):
        found = study_handoff.resume_state(Path(job.out_dir))
        if found is None:
            continue
        # this stretch: the run's claims in this queue, the last up to its save (a run never
        # claimed in this queue, restored and not trained, keeps its hand-off as it was)
        wall = claimed_s(job, found[0].stat().st_mtime) or 0.0
        stretch = study_handoff.stretch(wall, meta["command"], meta["git_commit"],
                                        meta["hardware"], exp.id)  # fmt: skip
        record = study_handoff.hand_off(job.name, Path(job.out_dir), home,
                                        spec_digest(job.spec), job.spec["resolved"],
                                        stretch)  # fmt: skip
        if record is not None:
            size = sum(f["bytes"] for f in record["files"]) / 1e6
            handed.append(f"{job.name}@{record['update']} ({size:.0f} MB)")
    return handed


def resume_cancelled(exp_id: str) -> list[str]:
    """The study's runs cancelled under an earlier driver (``synattn cancel``, to give a
    worker to a shorter run) wait again: the experiment file still plans them, and each
    resumes from where it stopped. Returns their names."""
    store = study_store()
    cancelled = {j.id: j.name for j in store.jobs(experiment_id=exp_id, state="cancelled")}
    return [cancelled[i] for i in store.requeue_cancelled(list(cancelled))]


def waiting_runs(exp_id: str, names: list[str], flag: str) -> dict[str, Any]:
    """The experiment's runs by name, once every one of ``names`` is found waiting to train;
    otherwise ``flag``'s refusal, with the reason."""
    jobs = {j.name: j for j in study_store().jobs(experiment_id=exp_id)}
    unknown = [n for n in names if n not in jobs]
    if unknown:
        example = next(iter(jobs), "vanilla-s1")
        raise SystemExit(f"{flag}: no run {', '.join(unknown)} in this experiment "
                         f"(runs are named like {example})")  # fmt: skip
    busy = [f"{n} ({jobs[n].state})" for n in names if jobs[n].state != "queued"]
    if busy:
        raise SystemExit(f"{flag}: {', '.join(busy)} not waiting to train")
    return jobs


def put_first(exp_id: str, names: list[str]) -> None:
    """Queue the named runs of the experiment before its others, in the order given (to fit
    what a session can finish); the rest keep their order. A run that a stopped driver handed
    back (already in the broker, to resume) still comes before them. A name that is not a
    waiting run of the experiment is refused with the reason."""
    store = study_store()
    jobs = waiting_runs(exp_id, names, "--first")
    store.prioritise([j.id for j in jobs.values()], 0)
    for rank, name in enumerate(names):
        store.prioritise([jobs[name].id], len(names) - rank)


def hold_new_runs(exp_id: str, hold: bool) -> None:
    """Stop (``hold``) or let again the queue hand the experiment's waiting runs to workers:
    its owners' running limit is 0 while held. Runs already running go on; a session near its
    end thus starts no run it would only hand off minutes in. The owners' other limits stay.
    Either way, a run ``let_one_start`` let through no longer passes alone."""
    set_running_limits(exp_id, lambda _owner: 0 if hold else None)
    study_store().gate_releases(study_owners(exp_id), None)


def set_running_limits(exp_id: str, limit: Callable[[str], int | None]) -> None:
    """Each owner of the experiment's runs gets ``limit(owner)`` as running limit; their other
    limits stay."""
    store = study_store()
    quotas = {q.user: q for q in store.quotas()}
    for owner in study_owners(exp_id):
        queued = quotas[owner].max_queued if owner in quotas else None
        store.set_quota(owner, queued, limit(owner))


def study_owners(exp_id: str) -> list[str]:
    """The users the experiment's runs belong to ("" for runs with no owner)."""
    return sorted({j.owner or "" for j in study_store().jobs(experiment_id=exp_id)})


def holds_a_worker(job: Any) -> bool:
    """Running, or released to a worker and not yet taken."""
    return bool(job.state == "running" or (job.state == "queued" and job.released_at))


def let_one_start(exp_id: str, name: str) -> None:
    """Under a hold, let the waiting run ``name`` alone start (``--late``): the dispatcher's
    releases for the study's owners are gated to that one run, and only then is the hold
    lifted, so no other run slips through beside it, not even into a place a run ending
    before the driver's next look frees. ``hold_new_runs`` sets the hold back (and lifts the
    gate) once it runs."""
    store = study_store()
    job = waiting_runs(exp_id, [name], "--late")[name]
    store.gate_releases(study_owners(exp_id), job.id)
    set_running_limits(exp_id, lambda _owner: None)


def late_runs(
    exp_id: str,
    jobs: Sequence[Any],
    letting: str | None,
    late: list[str],
    workers: int,
    started: float,
    too_long_for: Callable[[str], str | None] | None = None,
) -> tuple[str | None, list[str]]:
    """One step of ``--late`` under the hold: once the run let through has left the queue, the
    hold is whole again; with none let through and a worker free, the next late run still
    waiting is let through. A late run for which ``too_long_for`` gives a reason (it would
    still train at the hand-off, and its hours would be lost with a hand-off that does not
    reach the next machine) is passed over, once and for good: the time left only shrinks.
    Returns the run being let through and the late runs left."""
    state = {j.name: j.state for j in jobs}
    if letting is not None:
        if state.get(letting) == "queued":
            return letting, late
        hold_new_runs(exp_id, True)
        print(f"[{time.time() - started:7.0f} s] {letting} started; no new run starts from now",
              flush=True)  # fmt: skip
        letting = None
    busy = sum(1 for j in jobs if holds_a_worker(j))
    late = [n for n in late if state.get(n) == "queued"]
    if not late or busy >= workers:
        return letting, late
    while late and (why := (too_long_for(late[0]) if too_long_for else None)):
        print(f"[{time.time() - started:7.0f} s] {late[0]} does not start (--late): {why}; "
              "it waits for a later session", flush=True)  # fmt: skip
        late = late[1:]
    if not late:
        return letting, late
    let_one_start(exp_id, late[0])
    print(f"[{time.time() - started:7.0f} s] a worker is free: {late[0]} may start (--late)",
          flush=True)  # fmt: skip
    return late[0], late[1:]


def late_fit(store: Any, exp_id: str, results: Path, started: float,
             hand_off_at: float) -> Callable[[str], str | None]:  # fmt: skip
    """``--late``'s check under ``--hand-off-after``: for a waiting run, why it would still be
    running at ``hand_off_at`` (its variant's published length at this machine's pace,
    ``synattn_jobs.study.deadline``), or None."""

    def why(name: str) -> str | None:
        now = time.time()
        jobs = store.jobs(experiment_id=exp_id)
        variant = next((j.variant for j in jobs if j.name == name), None)
        published = published_runs(results / store.experiment(exp_id).name)
        pace = pace_here(pace_samples(jobs, started, now), published, variant)
        return too_long(str(variant or ""), published, pace, hand_off_at - now)

    return why


def late_check(args: argparse.Namespace, store: Any, exp_id: str,
               started: float) -> Callable[[str], str | None] | None:  # fmt: skip
    """``late_fit`` where the driver hands off and a late run must end before it; None (every
    late run may start) without ``--hand-off-after`` or with ``--late-may-overrun``."""
    if args.hand_off_after is None or args.late_may_overrun:
        return None
    return late_fit(store, exp_id, args.results, started, started + args.hand_off_after)


def published_runs(out: Path) -> list[dict[str, Any]]:
    """The finished runs ``run.json`` lists (variant, wall time, target tokens per second);
    none before the first publication."""
    from synattn_jobs.study.facts import study_plan

    plan = study_plan(out) or {}
    return [r for r in plan.get("runs") or [] if r.get("state") == "succeeded"]


def wait_until_ready(worker: Any, log: Path, timeout_s: float = 120.0) -> None:
    """Until a worker's log says it is ready (Celery's ``ready.``), it exits, or ``timeout_s``
    passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and worker.poll() is None:
        try:
            if " ready." in log.read_text(encoding="utf-8", errors="replace"):
                return
        except FileNotFoundError:
            pass
        time.sleep(0.2)


def exit_on_termination() -> None:
    """SIGTERM and SIGHUP (a ``kill``, a closed terminal, a session's end) leave through
    ``SystemExit``, so that the driver's ``finally`` stops its workers warmly (each running run
    saves where it is and goes back on the queue); by default they would end the driver alone
    and leave its workers training on, unsupervised and unpublished."""

    def leave(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, leave)


def checked_hand_off_dir(given: Path | None, hand_off: bool, after: float | None) -> Path | None:
    """The ``--hand-off-dir``, checked (``study_handoff.checked_dir``), or None when not given;
    ``--hand-off`` and ``--hand-off-after`` (``hand_off``, ``after``) are refused without it."""
    if given is None:
        option = "--hand-off" if hand_off else "--hand-off-after" if after is not None else None
        if option:
            raise SystemExit(f"{option} needs --hand-off-dir DIR, a directory outside the "
                             "repository (or under build/) for the runs' state: a checkpoint "
                             "in git history is paid by every clone forever")  # fmt: skip
        return None
    return study_handoff.checked_dir(given, REPO)


def landed_runs(info: dict[str, Any]) -> set[str]:
    """The runs of ``info`` (``publish``'s) that have landed."""
    return {r["name"] for r in info["runs"] if r["state"] == "succeeded"}


def commit_landed(results: Path, info: dict[str, Any], committed: set[str]) -> set[str]:
    """``--commit-results``: commit the runs of ``info`` (``publish``'s) that landed since the
    ``committed`` ones, with the study's folder and, for synattn's own ``results/``, the claims
    pages regenerated from it. Returns the runs now committed (unchanged when the commit
    failed: the next landing tries again)."""
    new = landed_runs(info) - committed
    landed = [r for r in info["runs"] if r["name"] in new]
    if not landed:
        return committed
    paths = [results / info["experiment"]]
    from synattn_jobs.study import claims

    own = claims.REPO.resolve() == REPO.resolve() and claims.PAGE.is_file()
    if own and results.resolve() == (REPO / "results").resolve():
        try:
            paths += claims.regenerate(results)[1]
        except Exception as exc:  # the study goes on; its folder is committed without them
            print(f"claims not regenerated ({type(exc).__name__}: {exc}): run synattn study "
                  "claims by hand", flush=True)  # fmt: skip
    message = study_commit.landed_message(landed, info["finished"], info["planned"])
    ok, line = study_commit.commit_paths(REPO, paths, message)
    print(f"--commit-results: {line}", flush=True)
    return committed | landed_runs(info) if ok else committed


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("grid", type=Path, help="experiment file (examples/experiments/*.yaml)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--home", type=Path, default=REPO / "build" / "repro")
    ap.add_argument("--results", type=Path, default=REPO / "results")
    ap.add_argument("--publish-only", action="store_true", help="write results/ and exit")
    ap.add_argument("--poll", type=float, default=30.0)
    ap.add_argument(
        "--retrain-changed",
        action="store_true",
        help="train again the published runs whose configuration changed (refused without it)",
    )
    ap.add_argument(
        "--hand-off-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after this long, stop the workers (each run saves where it is), hand the\n"
        "unfinished runs off into <--hand-off-dir>/<name>/ for the next checkout, and exit",
    )
    ap.add_argument(
        "--hand-off-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where hand-offs go and are restored from: outside the repository, or where git\n"
        "ignores it (build/), since a checkpoint in git history is paid by every clone\n"
        "forever; needed by --hand-off-after and --hand-off; copy it to the next machine",
    )
    ap.add_argument(
        "--no-new-runs-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after this long, start no new run: the running ones go on to their end (or to\n"
        "--hand-off-after); the driver exits once none is running",
    )
    ap.add_argument(
        "--hand-off", action="store_true",
        help="hand off the stopped runs under --home (a driver stopped otherwise) into\n"
        "--hand-off-dir and exit",
    )  # fmt: skip
    ap.add_argument(
        "--first", nargs="+", default=[], metavar="RUN",
        help="train these runs (e.g. fixed-word-s2) before the others, in this order",
    )  # fmt: skip
    ap.add_argument(
        "--late", nargs="+", default=[], metavar="RUN",
        help="after --no-new-runs-after, still start these, one at a time, each on the next\n"
        "worker that frees: runs short enough to end before the session does (with\n"
        "--hand-off-after, one that would still train at the hand-off, by its variant's\n"
        "published length at this machine's pace, is passed over)",
    )  # fmt: skip
    ap.add_argument(
        "--late-may-overrun", action="store_true",
        help="start --late runs even where they would still train at the hand-off (its\n"
        "--hand-off-dir reaches the next session, which resumes them)",
    )  # fmt: skip
    ap.add_argument(
        "--commit-results", action="store_true",
        help="commit each run as it lands: results/<name>/ and, for this repository's\n"
        "results/, the pages synattn study claims regenerates from it; those paths alone,\n"
        "no file over 2 MB (synattn_jobs.study.commit): a session cut off mid-study keeps\n"
        "every run it finished",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.commit_results and (why := study_commit.problem(REPO, args.results)):
        raise SystemExit(f"--commit-results: {why}")
    if args.late_may_overrun and not args.late:
        raise SystemExit("--late-may-overrun: only with --late")
    if args.late and args.no_new_runs_after is None:
        raise SystemExit("--late: only with --no-new-runs-after (before it, every waiting run "
                         "may start anyway)")  # fmt: skip
    hand_offs = checked_hand_off_dir(args.hand_off_dir, args.hand_off, args.hand_off_after)
    env = settings_env(args.home.resolve())
    os.environ.update(env)
    exp_id = find_or_submit(args.grid, env)
    taken = adopt_published(exp_id, args.results, args.retrain_changed)
    if taken:
        print(f"{len(taken)} runs taken as done from {args.results}: {', '.join(taken)}")
    quoted = [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)]
    meta: dict[str, Any] = {
        "command": study_handoff.command_line("synattn study run", quoted, os.environ),
        "git_commit": git_commit(),
        "hardware": hardware(args.threads, args.workers),
    }  # fmt: skip
    if args.hand_off:  # the stretch is the training driver's: its command, commit, hardware
        trained = republish_meta(args.grid, args.results, meta)
        assert hand_offs is not None
        handed = hand_off_stopped(
            exp_id,
            hand_offs,
            {
                **meta,
                **{k: trained[k] for k in ("command", "git_commit", "hardware") if trained.get(k)},
            },
        )
        print(f"handed off: {', '.join(handed) or 'nothing (no stopped run has trained)'}")
        return
    now = {**meta["hardware"], "kernel_env": study_handoff.kernel_env(os.environ)}
    restored = (
        restore_handed_off(exp_id, hand_offs, now)
        if hand_offs is not None and not args.publish_only
        else []
    )
    if restored:
        print(f"{len(restored)} runs continue from their hand-off: {', '.join(restored)}")
    again = resume_cancelled(exp_id) if not args.publish_only else []
    if again:
        print(
            f"{len(again)} runs cancelled under an earlier driver wait again: {', '.join(again)}"
        )
    hold_new_runs(exp_id, False)  # a hold is one driver's: a stopped one's does not carry over
    if restored or args.first:
        put_first(exp_id, [*restored, *(n for n in args.first if n not in restored)])
    still_late = [n for n in args.late if n not in restored and n not in args.first]
    waiting_runs(exp_id, still_late, "--late")
    letting: str | None = None  # the --late run let through, until it runs
    if args.publish_only:
        meta = republish_meta(args.grid, args.results, meta)
        info = publish(exp_id, args.results, meta, None, hand_offs)
        print(f"{info['finished']}/{info['planned']} runs published to {args.results}")
        return
    from synattn_jobs.local_worker import start_worker

    exit_on_termination()
    trained_with = {"workers": args.workers, "threads": args.threads, "cpu_isa": cpu_isa()}

    threads = {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    logs = args.home / "jobs"
    workers = []
    for k in range(args.workers):
        log = logs / f"repro-worker-{k}.log"
        workers.append(start_worker("train", {**env, **threads}, log=log))
        if k == 0 and args.workers > 1:
            # the first worker creates the embedded broker's tables and queue rows; a second
            # one starting beside it on a fresh study can lose that race and exit (SQLite's
            # UNIQUE constraint on kombu_queue.name), so the others start once it is ready
            wait_until_ready(workers[0], log)
    from synattn_jobs.store import TERMINAL

    store = study_store()
    started = time.time()
    ended = -1
    handing_off = held = False
    warned: set[str] = set()  # the runs said to overrun the hand-off, once each
    committed: set[str] | None = None  # --commit-results: the runs landed and committed
    fits = late_check(args, store, exp_id, started)
    try:
        while True:
            jobs = store.jobs(experiment_id=exp_id)
            states = [j.state for j in jobs]
            done = sum(s in TERMINAL for s in states)
            if done == len(states):
                break
            starting = any(holds_a_worker(j) and j.state == "queued" for j in jobs)
            if held:
                letting, still_late = late_runs(
                    exp_id, jobs, letting, still_late, args.workers, started, fits
                )
            if args.hand_off_after is not None:
                unnamed = [j for j in jobs if j.name not in warned]
                for name, line in overrunning(unnamed, started + args.hand_off_after, time.time()):
                    warned.add(name)
                    print(f"[{time.time() - started:7.0f} s] {line}", flush=True)
            quiet = "running" not in states and not starting and not letting and not still_late
            if held and quiet:
                print(f"[{time.time() - started:7.0f} s] no run is running and no new one "
                      "starts: done for this session", flush=True)  # fmt: skip
                break
            if done != ended:  # publish (bootstrap, figures, copies) only when a run ended
                ended = done
                info = publish(exp_id, args.results, meta, trained_with, hand_offs)
                print(f"[{time.time() - started:7.0f} s] {info['finished']}/{info['planned']} "
                      "runs done", flush=True)  # fmt: skip
                if args.commit_results:  # at the first publication: what landed before
                    committed = (landed_runs(info) if committed is None
                                 else commit_landed(args.results, info, committed))  # fmt: skip
            if any(w.poll() is not None for w in workers):
                raise SystemExit("a worker exited; see " + str(logs))
            if args.hand_off_after is not None and time.time() - started >= args.hand_off_after:
                handing_off = True
                break
            late = args.no_new_runs_after is not None
            if late and not held and time.time() - started >= args.no_new_runs_after:
                hold_new_runs(exp_id, True)
                held = True
                print(f"[{time.time() - started:7.0f} s] no new run starts from now",
                      flush=True)  # fmt: skip
            time.sleep(args.poll)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:  # a run that is translating finishes that first
            w.wait(timeout=1800 if handing_off else 120)
        if held:  # lifted once no worker is left to take a run
            hold_new_runs(exp_id, False)
    if handing_off:
        assert hand_offs is not None
        handed = hand_off_stopped(exp_id, hand_offs, meta)
        print(f"handed off: {', '.join(handed) or 'nothing'}", flush=True)
    info = publish(exp_id, args.results, meta, trained_with, hand_offs)
    if args.commit_results and committed is not None:  # a run that ended as the workers stopped
        commit_landed(args.results, info, committed)
    where = args.results / info["experiment"]
    print(f"{info['finished']}/{info['planned']} runs published to {where}")


if __name__ == "__main__":
    main()
