"""Learning curve: validation and test2016 BLEU every K updates until validation BLEU stops
improving (issue 27: choose the study's budget from where the baseline converges).

One process trains one system (a preset of ``synattn_trainer.presets`` on a config) and, every
``--every`` updates, pauses to score its current weights: validation loss, validation BLEU and
test2016 BLEU (cased detokenised sacreBLEU, and lowercased), with beam search as configured.
It stops once ``--patience`` points in a row bring no better validation BLEU (or at
``--max-updates``). Each point is appended to ``results/learning-curve/<system>-s<seed>.json``
as it lands, with the training wall time per update, and ``curve.png`` is redrawn from every
JSON file there.

Killed? Run the same command again: training resumes exactly from its last checkpoint (kept
under ``--home``), points already written are kept, a point whose scoring was cut off is
scored again. A fresh checkout has the points but not the checkpoints (build/ is not kept):
the command then stops and says so, unless a session handed its state over. ``--hand-off``
copies the newest checkpoint (weights, optimizer, schedule, data position, generators: an
exact resume) to ``<DIR>/<system>-s<seed>.pt``, ``DIR`` being the directory ``--hand-off-dir``
names, and writes its file name, size and digest, the recipe's and the training data's into
the curve's record; the same command with the same ``--hand-off-dir`` on the next checkout
(copy ``DIR`` there when it is another machine) continues the curve from there, after checking
all three. A curve longer than one session's CPU time needs this. ``DIR`` must lie outside the
repository, or where git ignores it (``build/``): the state is a model checkpoint, and one
committed stays in the git history, paid by every clone forever. ``--restart`` trains again
from update 0 with the old points set aside under ``previous/``. Two systems side by side on a
2-core machine: two processes, ``--threads 1``.

    make data
    synattn study curve --variant vanilla --seed 1 &
    synattn study curve --variant disagreement+routing --seed 1 &
    synattn study curve --plot-only
    # before a session ends, then the first command again, with the same --hand-off-dir
    synattn study curve --variant vanilla --seed 1 --hand-off --hand-off-dir ~/curve
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synattn_jobs.study import project_root
from synattn_jobs.study.handoff import ROUNDING_KEYS, checked_dir, command_line
from synattn_shared.atomic import atomic_path
from synattn_shared.manifest import sha256_file

REPO = project_root()


def load_points(path: Path) -> dict[str, Any]:
    """The run's record so far (empty points when it has not started)."""
    if path.is_file():
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return record
    return {"points": []}


def best_index(points: list[dict[str, Any]]) -> int:
    """Index of the first point with the highest validation BLEU (-1 when none)."""
    best, where = -1.0, -1
    for k, p in enumerate(points):
        if p["valid_bleu"] > best:
            best, where = p["valid_bleu"], k
    return where


def converged(points: list[dict[str, Any]], patience: int) -> bool:
    """Whether the last ``patience`` points brought no better validation BLEU."""
    k = best_index(points)
    return k >= 0 and len(points) - 1 - k >= patience


def plot(results: Path) -> Path | None:
    """``curve.png``: validation and test2016 BLEU against updates for every run in ``results``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted(p for p in results.glob("*-s*.json") if not p.stem.endswith("-avg"))
    if not runs:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for path in runs:
        rec = json.loads(path.read_text(encoding="utf-8"))
        pts = rec.get("points", [])
        if not pts:
            continue
        ups = [p["update"] for p in pts]
        avg_file = path.with_name(f"{path.stem}-avg.json")
        avg_pts = load_points(avg_file)["points"] if avg_file.is_file() else []
        for ax, key in zip(axes, ("valid_bleu", "test_bleu"), strict=True):
            line = ax.plot(ups, [p[key] for p in pts], marker="o", ms=3, label=path.stem)[0]
            avg = [(p["update"], p[f"avg_{key}"]) for p in avg_pts if f"avg_{key}" in p]
            if avg:
                ax.plot(*zip(*avg, strict=True), ls="--", marker="s", ms=3,
                        color=line.get_color(), label=f"{path.stem} averaged")  # fmt: skip
    for ax, title in zip(axes, ("validation BLEU", "test2016 BLEU"), strict=True):
        ax.set_title(title + " (cased sacreBLEU)")
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("BLEU")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    out = results / "curve.png"
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return out


def average_window(update: int, every: int) -> list[int]:
    """The checkpoints a point at ``update`` averages: the last 5 saved every ``every`` updates
    whose update lies in ``[0.75 U, U]`` (the final quarter: docs/papers/index.md)."""
    return [k for k in range(every, update + 1, every) if 0.75 * update - 1e-9 <= k][-5:]


def kept_checkpoints(run: Path, handed_off: tuple[int, Path] | None = None) -> dict[int, Path]:
    """The run's checkpoints by update, with a handed-off state standing in for the one
    scheduled at its update (``rescore_averages``)."""
    from synattn_trainer import checkpoint as ck

    saved = {ck.update_of(p): p for p in ck.checkpoints(run / "checkpoints")}
    if handed_off is not None:
        saved.setdefault(*handed_off)
    return saved


def handed_off_state(
    entry: dict[str, Any] | None, hand_off_dir: Path | None
) -> tuple[int, Path] | None:
    """The update and file of the record's handed-off state where the file is the one handed
    off (inside ``hand_off_dir``, its SHA-256 as recorded); None otherwise, and when no
    ``--hand-off-dir`` is given (a converged curve's state is deleted: its record stays)."""
    if not entry or hand_off_dir is None or state_problem(entry, hand_off_dir):
        return None
    return int(entry["update"]), hand_off_dir / entry["file"]


def rescore_averages(
    trainer: Any,
    test_data: Any,
    points: list[dict[str, Any]],
    run: Path,
    every: int,
    handed_off: tuple[int, Path] | None = None,
) -> None:
    """``avg_*`` fields per point: the average of its ``average_window``. A point some of
    whose checkpoints are not kept (the ones before a hand-off) is left unscored rather than
    averaged over fewer, which would not be the same protocol as its neighbours.
    ``handed_off``: the update and file of a handed-off state, the weights of the checkpoint
    scheduled at that update (saved in the same update), which stands in for it."""
    from synattn_trainer import checkpoint as ck
    from synattn_trainer.evaluate import corpus_bleu

    saved = kept_checkpoints(run, handed_off)
    for point in points:
        u = point["update"]
        window = average_window(u, every)
        if len(window) < 2 or point.get("avg_updates") == window:
            continue
        missing = [k for k in window if k not in saved]
        if missing:
            print(f"update {u}: not averaged, checkpoints {missing} are not kept", flush=True)
            continue
        trainer.model.load_state_dict(ck.average([saved[k] for k in window]))
        vh = trainer.translate(trainer.valid_data)
        th = trainer.translate(test_data)
        point.update(
            avg_updates=window,
            avg_valid_bleu=round(corpus_bleu(vh, trainer.valid_data.refs).score, 2),
            avg_test_bleu=round(corpus_bleu(th, test_data.refs).score, 2),
            avg_test_bleu_lc=round(corpus_bleu(th, test_data.refs, lowercase=True).score, 2),
        )
        print(json.dumps({k: point[k] for k in ("update", "avg_updates", "avg_valid_bleu",
                                                  "avg_test_bleu")}), flush=True)  # fmt: skip


def resume_gap(record_path: Path, points: list[dict[str, Any]], resumed: bool) -> str | None:
    """Why training cannot continue the curve already written, or None. Points without a
    checkpoint to resume from (a fresh checkout: ``--home`` lives under build/) would have the
    run start again at update 0 and append a second copy of every point, from weights that
    need not match the first trajectory (another CPU's kernels round differently)."""
    if not points or resumed:
        return None
    return (
        f"{record_path}: points up to update {points[-1]['update']} but no checkpoint to "
        "resume from under --home; pass --restart to train again from update 0 (the written "
        f"points are kept under {record_path.parent / 'previous'})"
    )


def recipe_of(resolved: dict[str, Any]) -> dict[str, Any]:
    """What a continued curve must share with the run it continues: the resolved config less
    where the data lives (another checkout's paths) and the ``name``."""
    recipe = {k: v for k, v in resolved.items() if k != "name"}
    recipe["data"] = {k: v for k, v in resolved["data"].items()
                      if k not in ("train", "valid", "test", "tokenizer")}  # fmt: skip
    return recipe


def json_digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def corpus_digest(tok_json: str, corpus: Any) -> str:
    """SHA-256 of what training reads: the vocabulary and, pair by pair, the source and target
    ids, the subword-to-word maps and the syntax columns (not the shard files' bytes, whose
    metadata may differ between two equal ``make data`` runs)."""
    h = hashlib.sha256(tok_json.encode())
    for k in range(len(corpus)):
        for arr in (corpus.src[k], corpus.tgt[k], corpus.s2w[k]):
            h.update(len(arr).to_bytes(4, "little"))
            h.update(arr.tobytes())
        h.update(json.dumps(corpus.rows[k], sort_keys=True, default=_plain).encode())
    return h.hexdigest()


def _plain(obj: Any) -> Any:
    """numpy values as JSON (the shard rows' syntax columns)."""
    return obj.tolist() if hasattr(obj, "tolist") else str(obj)


def hand_off(
    source: Path, hand_off_dir: Path, name: str, recipe: str, data: str
) -> dict[str, Any]:
    """Copy the checkpoint ``source`` to ``<hand_off_dir>/<name>.pt`` atomically and return
    the record's ``hand_off`` entry that lets the next checkout trust it (its ``file``: the
    name inside ``hand_off_dir``). ``recipe``: this command's, which must be the one the
    checkpoint was trained with."""
    import torch

    state = torch.load(source, map_location="cpu", weights_only=False)
    if json_digest(recipe_of(state["config"])) != recipe:
        raise SystemExit(f"{source}: trained with another configuration than this command's "
                         "(pass the training command's --config, --variant, --seed, --every, "
                         "--max-updates)")  # fmt: skip
    target = hand_off_dir / f"{name}.pt"
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)
    return {
        "update": int(state["update"]),
        "file": target.name,
        "checkpoint": source.name,
        "bytes": target.stat().st_size,
        "sha256": sha256_file(target),
        "recipe_sha256": recipe,
        "data_sha256": data,
    }


def state_problem(entry: dict[str, Any], hand_off_dir: Path) -> str | None:
    """Why the record's handed-off state file is not the one handed off, or None: it lies
    inside ``hand_off_dir`` (the record is a file anyone can edit), exists, and has the
    SHA-256 recorded at the hand-off."""
    state = hand_off_dir / entry["file"]
    if not state.resolve().is_relative_to(hand_off_dir.resolve()):
        return f"{entry['file']}: a handed-off state lies in the --hand-off-dir {hand_off_dir}"
    if not state.is_file():
        return f"{state}: the handed-off state is missing"
    if sha256_file(state) != entry["sha256"]:
        return f"{state}: its SHA-256 differs from the one recorded at the hand-off"
    return None


def hand_off_problem(
    entry: dict[str, Any], hand_off_dir: Path, recipe: str, data: str, last_point: int
) -> str | None:
    """Why the handed-off state cannot continue this curve here, or None. The record is a
    file anyone can edit: its paths stay inside ``hand_off_dir`` and the checkpoint name is
    one the trainer writes."""
    state = hand_off_dir / entry["file"]
    if not re.fullmatch(r"ckpt-\d{8}\.pt|resume\.pt", entry["checkpoint"]):
        return f"{entry['checkpoint']!r}: not a checkpoint name the trainer writes"
    why = state_problem(entry, hand_off_dir)
    if why:
        return why
    if entry["update"] < last_point:
        return (f"{state}: handed off at update {entry['update']}, before the curve's last point "
                f"({last_point}); hand off again from the checkout that scored it")  # fmt: skip
    if recipe != entry["recipe_sha256"]:
        return (f"{state}: the configuration differs from the one the curve was trained with "
                "(same --config, --variant, --seed, --every, --max-updates?)")  # fmt: skip
    if data != entry["data_sha256"]:
        return (f"{state}: the training data or vocabulary differs from the one the curve was "
                "trained on (`make data` gave other ids here)")  # fmt: skip
    return None


def rounding_change(segments: list[dict[str, Any]], now: dict[str, Any]) -> str | None:
    """What differs, in what sets the floating-point rounding (the vector instruction set,
    the device, the thread count, torch), between the stretch of training a handed-off state
    ends and this machine; None when nothing does. A continuation on other kernels is a
    correct run of the same recipe but not bit for bit the uninterrupted one: its points from
    the hand-off on are another draw of the same noise (the record's segments say where)."""
    before = segments[-1].get("hardware", {}) if segments else {}
    changed = [f"{k} {before[k]} -> {now.get(k)}" for k in ROUNDING_KEYS
               if k in before and before[k] != now.get(k)]  # fmt: skip
    return ", ".join(changed) or None


ISA_ORDER = ("DEFAULT", "AVX2", "AVX512")  # torch.backends.cpu.get_cpu_capability(), narrow first


def kernel_hint(segments: list[dict[str, Any]], now: dict[str, Any]) -> str | None:
    """How to continue on the earlier stretch's kernels, where only the instruction set changed
    and this machine has the earlier one too: torch's ``ATEN_CPU_CAPABILITY`` picks narrower
    vector kernels (the vanilla curve's state from an AVX2 EPYC, continued so on an AVX-512
    one, scored its next point to the last digit as the uninterrupted run had). None otherwise."""
    before = segments[-1].get("hardware", {}) if segments else {}
    if any(before.get(k) != now.get(k) for k in ROUNDING_KEYS if k != "cpu_isa"):
        return None
    old, new = before.get("cpu_isa"), now.get("cpu_isa")
    if old in ISA_ORDER and new in ISA_ORDER and ISA_ORDER.index(old) < ISA_ORDER.index(new):
        return f"ATEN_CPU_CAPABILITY={str(old).lower()}"
    return None


def launch_command(argv: list[str], env: Mapping[str, str]) -> str:
    """This command as a reader would type it again, its kernel settings in front."""
    return command_line("synattn study curve", argv, env)


def close_segment(record: dict[str, Any], update: int) -> None:
    """End the record's current stretch of training at ``update`` (a hand-off); the first
    stretch is named from the record's own command, commit and hardware."""
    segments: list[dict[str, Any]] = record.setdefault("segments", [])
    if not segments:
        segments.append(segment(record, 0))
    segments[-1]["to_update"] = update


def segment(record: dict[str, Any], start: int) -> dict[str, Any]:
    """A stretch of training from update ``start``: the command, commit and hardware of it."""
    out: dict[str, Any] = {"from_update": start}
    out.update((k, record[k]) for k in ("command", "git_commit", "hardware") if k in record)
    return out


def set_aside(results: Path, name: str) -> list[Path]:
    """Move a curve's records (``<name>.json`` and ``<name>-avg.json``) into ``previous/``
    under the first free number, so a restarted run writes a curve of one trajectory and the
    old one is kept (and no longer drawn). Returns the new paths."""
    kept = results / "previous"
    kept.mkdir(exist_ok=True)
    suffixes = ("", "-avg")
    n = 1
    while any((kept / f"{name}.{n}{suffix}.json").exists() for suffix in suffixes):
        n += 1
    moved = []
    for suffix in suffixes:
        src = results / f"{name}{suffix}.json"
        if src.is_file():
            moved.append(kept / f"{name}.{n}{suffix}.json")
            src.rename(moved[-1])  # a free name: a plain rename, atomic on one file system
    return moved


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--config", type=Path, default=REPO / "examples/configs/m30k-conv.yaml")
    ap.add_argument("--variant", default="vanilla", help="a preset name (synattn presets)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=500, help="updates between points")
    ap.add_argument("--patience", type=int, default=4, help="points without a better valid BLEU")
    ap.add_argument("--max-updates", type=int, default=20_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--home", type=Path, default=REPO / "build" / "curve")
    ap.add_argument("--results", type=Path, default=REPO / "results" / "learning-curve")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument(
        "--restart",
        action="store_true",
        help="where points are written but no checkpoint under --home holds their weights "
        "(a fresh checkout), train again from update 0; the old records move to previous/",
    )
    ap.add_argument(
        "--hand-off",
        action="store_true",
        help="copy the newest checkpoint under --home to <--hand-off-dir>/<system>-s<seed>.pt, "
        "with the digests that let another checkout continue the curve from it, and exit",
    )
    ap.add_argument(
        "--hand-off-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where --hand-off puts the state and a later run continues from it: outside the "
        "repository, or where git ignores it (build/), since a checkpoint in git history is "
        "paid by every clone forever; copy it to the next machine",
    )
    ap.add_argument(
        "--rescore-averages",
        action="store_true",
        help="score, for each point, the average of the last 5 kept checkpoints inside the "
        "final quarter of the updates so far (what the study's protocol would report had the "
        "run ended there) into <system>-s<seed>-avg.json, and exit",
    )
    args = ap.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    if args.every < 1 or args.patience < 1 or args.max_updates < args.every:
        raise SystemExit("--every and --patience must be >= 1 and --max-updates >= --every")
    if args.hand_off and args.hand_off_dir is None:
        raise SystemExit("--hand-off needs --hand-off-dir DIR, a directory outside the repository "
                         "(or under build/) for the state: a checkpoint in git history is paid "
                         "by every clone forever")  # fmt: skip
    hand_offs = None if args.hand_off_dir is None else checked_dir(args.hand_off_dir, REPO)
    args.results.mkdir(parents=True, exist_ok=True)
    if args.plot_only:
        print(plot(args.results))
        return

    import torch
    import yaml

    torch.set_num_threads(args.threads)
    from synattn_jobs.study.driver import git_commit, hardware
    from synattn_shared.atomic import atomic_write_text
    from synattn_trainer import checkpoint as ck
    from synattn_trainer.config import resolve_config
    from synattn_trainer.data import load_corpus
    from synattn_trainer.evaluate import corpus_bleu
    from synattn_trainer.presets import VARIANTS, merge
    from synattn_trainer.train import Trainer

    if args.variant not in VARIANTS:
        raise SystemExit(f"unknown variant {args.variant!r}; known: {', '.join(VARIANTS)}")
    raw = yaml.safe_load(args.config.read_text(encoding="utf-8"))
    raw = merge(raw, VARIANTS[args.variant])
    cfg = resolve_config(
        raw,
        args.config.parent,
        {
            "train.seed": args.seed,
            "train.max_updates": args.max_updates,
            "train.checkpoint_every_updates": args.every,
            "train.keep_checkpoints": 10_000,  # every point's weights stay for later averaging
            "train.patience": 0,
            "train.bleu_every": 0,
        },
    )
    name = f"{args.variant}-s{args.seed}"
    run_dir = args.home / name
    record_path = args.results / f"{name}.json"
    record = load_points(record_path)
    points: list[dict[str, Any]] = record["points"]
    if not (args.restart or args.hand_off or args.rescore_averages) and converged(
        points, args.patience
    ):  # nothing to train (its handed-off state may be gone): the record stays as it is
        best = points[best_index(points)]["update"]
        print(f"{name}: converged at update {points[-1]['update']} (best validation BLEU at "
              f"update {best}); --restart trains it again", flush=True)  # fmt: skip
        return
    record.update(
        system=args.variant,
        seed=args.seed,
        config=str(args.config.resolve().relative_to(REPO)),
        every=args.every,
        patience=args.patience,
        command=launch_command(given, os.environ),
        git_commit=git_commit(),
        hardware=hardware(args.threads, 1),
        resolved=cfg.model_dump(mode="json"),
    )
    scored = {p["update"] for p in points}
    # before the Trainer loads the corpora: a fresh checkout stops at once
    ckpt_dir = run_dir / "checkpoints"
    newest = ck.resume_point(ckpt_dir)
    entry = None if args.restart or newest is not None else record.get("hand_off")
    if entry is not None and hand_offs is None:
        raise SystemExit(f"{record_path}: its state was handed off at update {entry['update']} "
                         f"as {entry['file']}; pass --hand-off-dir DIR, the directory it was "
                         "handed off into, to continue from it (or --restart to train again "
                         "from update 0)")  # fmt: skip
    gap = resume_gap(record_path, points, newest is not None or entry is not None)
    if gap and not args.restart and not args.rescore_averages:
        raise SystemExit(gap)
    if args.hand_off and newest is None:
        raise SystemExit(f"{ckpt_dir}: no checkpoint to hand off")
    trainer = Trainer(cfg, run_dir, progress=False)
    if args.hand_off or entry is not None:
        recipe = json_digest(recipe_of(record["resolved"]))
        data = corpus_digest(trainer.tok.to_str(), trainer.train_data)
    if args.hand_off:  # the record's command, commit and hardware stay the training run's
        assert newest is not None and hand_offs is not None
        kept = load_points(record_path)
        kept["hand_off"] = hand_off(newest, hand_offs, name, recipe, data)
        close_segment(kept, kept["hand_off"]["update"])
        atomic_write_text(record_path, json.dumps(kept, indent=2) + "\n")
        print(json.dumps(kept["hand_off"]), flush=True)
        return
    if entry is not None:
        assert hand_offs is not None
        why = hand_off_problem(entry, hand_offs, recipe, data,
                               points[-1]["update"] if points else 0)  # fmt: skip
        if why:
            raise SystemExit(why)
        with atomic_path(ckpt_dir / entry["checkpoint"]) as tmp:
            shutil.copyfile(hand_offs / entry["file"], tmp)
        print(f"continuing from the state handed off at update {entry['update']}", flush=True)
        change = rounding_change(record.get("segments", []), record["hardware"])
        if change:
            hint = kernel_hint(record.get("segments", []), record["hardware"])
            print(f"note: trained before on other kernels ({change}); from update "
                  f"{entry['update']} on the points follow another rounding, not the one an "
                  "uninterrupted run there would have"
                  + (f" (stop and run the command again with {hint} to keep it)" if hint else ""),
                  flush=True)  # fmt: skip
    test_data = load_corpus(cfg.data.test or "", trainer.tok, source_eos=cfg.data.source_eos)

    def score(train_s: float, updates: int) -> None:
        t0 = time.perf_counter()
        valid = trainer.validate()
        vh = trainer.translate(trainer.valid_data)
        th = trainer.translate(test_data)
        point = {
            "update": trainer.update,
            "epoch": trainer.epoch,
            **{k: round(v, 4) for k, v in valid.items()},
            "valid_bleu": round(corpus_bleu(vh, trainer.valid_data.refs).score, 2),
            "test_bleu": round(corpus_bleu(th, test_data.refs).score, 2),
            "test_bleu_lc": round(corpus_bleu(th, test_data.refs, lowercase=True).score, 2),
            "train_s": round(train_s, 1),
            "s_per_update": round(train_s / updates, 4) if updates else None,
            "eval_s": round(time.perf_counter() - t0, 1),
        }
        points.append(point)
        record["best"] = points[best_index(points)]
        atomic_write_text(record_path, json.dumps(record, indent=2) + "\n")
        plot(args.results)
        print(json.dumps(point), flush=True)

    if args.rescore_averages:  # a file of its own: the training process rewrites the other
        avg_path = args.results / f"{name}-avg.json"
        averaged = load_points(avg_path)
        known = {p["update"]: p for p in averaged["points"]}
        fresh = [known.get(p["update"], {"update": p["update"]}) for p in points]
        rescore_averages(trainer, test_data, fresh, run_dir, args.every,
                         handed_off_state(record.get("hand_off"), hand_offs))  # fmt: skip
        averaged.update(
            points=[p for p in fresh if "avg_updates" in p],
            command=launch_command(given, os.environ),
        )
        atomic_write_text(avg_path, json.dumps(averaged, indent=2) + "\n")
        plot(args.results)
        return
    resumed = trainer.resume()
    if gap:
        print("set aside: " + ", ".join(map(str, set_aside(args.results, name))), flush=True)
        points.clear()
        scored.clear()
        for stale in ("best", "hand_off", "segments"):
            record.pop(stale, None)
    if record.get("segments") and "to_update" in record["segments"][-1]:
        record["segments"].append(segment(record, trainer.update))
    if resumed and trainer.update % args.every == 0 and trainer.update not in scored:
        score(0.0, 0)  # killed while scoring this checkpoint
    record["stopped"] = None
    while not converged(points, args.patience) and trainer.update < args.max_updates:
        start = trainer.update
        target = (start // args.every + 1) * args.every
        t0 = time.perf_counter()
        trainer.train(stop_after_updates=target)
        score(time.perf_counter() - t0, trainer.update - start)
    record["stopped"] = "converged" if converged(points, args.patience) else "max_updates"
    atomic_write_text(record_path, json.dumps(record, indent=2) + "\n")
    print(f"{name}: {record['stopped']} at update {trainer.update}; best {record['best']}")


if __name__ == "__main__":
    main()
