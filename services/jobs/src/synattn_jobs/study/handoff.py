"""Hand a study's unfinished runs from one checkout to the next (``synattn study run``).

A session that ends in the middle of a run loses the run with ``build/``: at the study's
budget a run takes most of a session, so without a hand-off every session would waste the
time between its last finished run and its end. ``hand_off`` copies what a stopped run needs
to go on, and no more, into the study's hand-off directory ``<DIR>/<study>/`` (``DIR``: the
driver's ``--hand-off-dir``): the resume state in full (weights, optimiser, scheduler, data
position, random generators), the model weights alone of every kept checkpoint that the final
average can still take, the best-validation model, and the run's log, under ``<run>/``, and
its record ``<run>.json``. ``restore`` puts them back into a fresh queue's run directory,
after checking every file against the SHA-256 recorded when it was handed off and the run's
configuration against the one it was trained with; the trainer then resumes from them exactly
as it would have in the first checkout (on the same CPU kernels: see ``KERNEL_ENV``). Once the
run has finished and is published, its hand-off is deleted (``forget``).

The hand-off never goes into git: ``DIR`` lies outside the repository, or inside it where git
ignores it (``checked_dir``). A model checkpoint once committed stays in the history, deleted
or not, and every clone pays for it forever (the hand-offs committed under ``results/`` once
made a clone transfer 863 MiB). To carry a hand-off to another machine, copy ``DIR`` there.

Each hand-off records the stretch of training it ends (``segments``: updates, wall time,
command, commit, hardware, and the queue it trained in), so the published run states where and
how long it trained.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synattn_shared.atomic import atomic_path, atomic_write_text
from synattn_shared.manifest import sha256_file

# where a handed-off file may go inside a run directory: the trainer's own names
TARGET_RE = re.compile(r"checkpoints/(ckpt-\d{8}|resume)\.pt|best\.pt|metrics\.jsonl|config\.json")
ROUNDING_KEYS = ("cpu_isa", "device", "threads_per_worker", "torch")
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")


def kernel_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment settings that choose torch's CPU kernels, and so the rounding."""
    return {k: env[k] for k in KERNEL_ENV if env.get(k)}


def command_line(program: str, argv: list[str], env: Mapping[str, str]) -> str:
    """The command as a reader would type it again (``program``: ``synattn study run``), with
    the environment settings that choose the CPU kernels (and so the rounding) in front:
    without them a rerun is another draw."""
    kernels = [f"{k}={v}" for k, v in kernel_env(env).items()]
    return " ".join([*kernels, program, *argv])


def checked_dir(path: Path, repo: Path, option: str = "--hand-off-dir") -> Path:
    """``path`` resolved, where a hand-off may go: outside the repository ``repo``, or inside it
    where git ignores it (``build/``). Anywhere else it would be committed, and a checkpoint in
    git history is paid by every clone forever: ``SystemExit`` says so."""
    where = path.expanduser().resolve()
    if not where.is_relative_to(repo.resolve()):
        return where
    probe = subprocess.run(["git", "check-ignore", "-q", str(where)], cwd=repo,
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode == 0:
        return where
    if probe.returncode != 1:  # not a yes or a no: git could not tell
        raise SystemExit(f"{option} {path}: inside the repository, and git cannot tell whether "
                         f"it ignores it ({probe.stderr.strip()}): the hand-off could be "
                         "committed; name a directory outside the repository")  # fmt: skip
    raise SystemExit(f"{option} {path}: inside the repository and not ignored by git, so the "
                     "hand-off would be committed (a checkpoint in git history is paid by every "
                     "clone forever); name a directory outside the repository, or under "
                     "build/")  # fmt: skip


def record_path(home: Path, run: str) -> Path:
    """``<home>/<run>.json``: the hand-off's record in the study's hand-off directory."""
    return home / f"{run}.json"


def load_record(home: Path, run: str) -> dict[str, Any] | None:
    path = record_path(home, run)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def resume_state(run_dir: Path) -> tuple[Path, int] | None:
    """The file a stopped run continues from and its update; None when it never saved."""
    import torch

    from synattn_trainer import checkpoint as ck

    point = ck.resume_point(run_dir / "checkpoints")
    if point is None:
        return None
    return point, int(torch.load(point, map_location="cpu", weights_only=False)["update"])


def averageable(updates: list[int], resolved: dict[str, Any]) -> list[int]:
    """The checkpoint updates the run's final average can still take: those inside the final
    window of ``train.max_updates`` (docs/papers/index.md); earlier ones are never averaged."""
    from synattn_trainer.config import TrainConfig
    from synattn_trainer.selection import window_start

    t = TrainConfig.model_validate(resolved).train
    if t.average_last <= 1:
        return []
    start = window_start(t.max_updates, t.average_window)
    return [u for u in updates if u >= start - 1e-9]


def hand_off(
    run: str, run_dir: Path, home: Path, digest: str, resolved: dict[str, Any],
    stretch: dict[str, Any],
) -> dict[str, Any] | None:  # fmt: skip
    """Copy the stopped run in ``run_dir`` into ``<home>/<run>/`` and write its record
    ``<home>/<run>.json`` (``home``: the study's hand-off directory, ``<DIR>/<study>``); None
    (and nothing written) when the run never saved a state. ``digest``: the run's spec
    digest; ``stretch``: this stretch's ``wall_s``, command, commit, hardware and kernel
    settings, appended to the segments of an earlier hand-off the run was restored from."""
    import torch

    from synattn_trainer import checkpoint as ck

    found = resume_state(run_dir)
    if found is None:
        return None
    point, update = found
    earlier = load_record(home, run)
    if earlier is not None and int(earlier["update"]) >= update:
        return earlier  # nothing trained since it was restored: the hand-off stands as it is
    segments = list(earlier["segments"]) if earlier else []
    start = int(earlier["update"]) if earlier else 0
    segments.append({"from_update": start, "to_update": update, **stretch})
    where = home / run
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    files = []

    def put(target: str, write: Any) -> None:
        dest = where / target.replace("/", "__")
        with atomic_path(dest) as tmp:
            write(tmp)
        files.append({"file": str(dest.relative_to(home)), "to": target,
                      "bytes": dest.stat().st_size, "sha256": sha256_file(dest)})  # fmt: skip

    put(f"checkpoints/{point.name}", lambda tmp: shutil.copyfile(point, tmp))
    saved = {ck.update_of(p): p for p in ck.checkpoints(run_dir / "checkpoints")}
    for u in averageable([u for u in saved if saved[u] != point], resolved):

        def weights(tmp: Path, src: Path = saved[u]) -> None:
            state = torch.load(src, map_location="cpu", weights_only=False)
            torch.save({"model": state["model"], "update": state["update"]}, tmp)

        put(f"checkpoints/{saved[u].name}", weights)
    for name in ("best.pt", "metrics.jsonl", "config.json"):
        if (run_dir / name).is_file():
            put(name, lambda tmp, src=run_dir / name: shutil.copyfile(src, tmp))
    record = {"run": run, "spec_digest": digest, "update": update, "files": files,
              "segments": segments}  # fmt: skip
    atomic_write_text(record_path(home, run), json.dumps(record, indent=1) + "\n")
    return record


def problem(record: dict[str, Any], home: Path, digest: str) -> str | None:
    """Why a hand-off cannot continue the queued run here, or None. The record is a file
    anyone can edit: every file lies in ``<home>/<run>/``, goes to a name the trainer
    writes, and has the SHA-256 recorded when it was handed off."""
    run = record.get("run", "?")
    if record.get("spec_digest") != digest:
        return (f"{run}: handed off with another configuration than the queued run's (delete "
                f"{record_path(home, run)} to train it from the start)")  # fmt: skip
    inside = (home / str(run)).resolve()
    for f in record.get("files", []):
        path = home / str(f.get("file"))
        if path.resolve().parent != inside:
            return f"{run}: {f.get('file')!r} lies outside {home / str(run)}"
        if not TARGET_RE.fullmatch(str(f.get("to"))):
            return f"{run}: {f.get('to')!r} is not a file the trainer writes"
        if not path.is_file():
            return f"{run}: {path} is missing"
        if sha256_file(path) != f.get("sha256"):
            return f"{run}: {path}: its SHA-256 differs from the one recorded at the hand-off"
    if not any(str(f.get("to")).startswith("checkpoints/") for f in record.get("files", [])):
        return f"{run}: the hand-off holds no state to resume from"
    return None


def restore(record: dict[str, Any], home: Path, run_dir: Path) -> bool:
    """Put a checked hand-off into the queued run's directory; False (nothing copied) when the
    directory already holds a state at least as new (the same checkout going on)."""
    here = resume_state(run_dir) if (run_dir / "checkpoints").is_dir() else None
    if here is not None and here[1] >= int(record["update"]):
        return False
    for f in record["files"]:
        dest = run_dir / f["to"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(dest) as tmp:
            shutil.copyfile(home / f["file"], tmp)
    return True


def rounding_change(record: dict[str, Any], now: dict[str, Any]) -> str | None:
    """What differs between the handed-off stretch and this machine in what sets the
    floating-point rounding (instruction set, device, threads, torch, the kernel settings);
    None when nothing does. Continued on other kernels a run is a correct run of its recipe,
    but not bit for bit the one it would have been."""
    last = record["segments"][-1] if record.get("segments") else {}
    before = {**last.get("hardware", {}), "kernel_env": last.get("kernel_env", {})}
    changed = [f"{k} {before[k]} -> {now.get(k)}" for k in (*ROUNDING_KEYS, "kernel_env")
               if k in before and before[k] != now.get(k)]  # fmt: skip
    return ", ".join(changed) or None


def forget(home: Path, run: str) -> None:
    """Delete a run's hand-off from the study's hand-off directory ``home`` (once the finished
    run is published), and the directory once no hand-off is left in it."""
    shutil.rmtree(home / run, ignore_errors=True)
    record_path(home, run).unlink(missing_ok=True)
    if home.is_dir() and not any(home.iterdir()):
        home.rmdir()


def stretch(
    wall_s: float, command: str, git_commit: str, hardware: dict[str, Any], queue: str,
    env: Mapping[str, str] = os.environ,
) -> dict[str, Any]:  # fmt: skip
    """One stretch of training as a hand-off records it. ``queue``: the experiment id of the
    queue it trained in, whose claims already count its wall time if the run finishes there
    (``handed_off_wall_s``)."""
    return {"wall_s": round(wall_s, 1), "ended_at": round(time.time(), 1), "command": command,
            "git_commit": git_commit, "hardware": hardware, "queue": queue,
            "kernel_env": kernel_env(env)}  # fmt: skip


def handed_off_wall_s(segments: list[dict[str, Any]], queue: str | None) -> float:
    """The wall time of a finished run's stretches that its claims in ``queue``, the queue it
    finished in, do not already count: those trained in other queues (other checkouts). A
    driver started again on the same queue resumes a handed-off run in that queue, whose
    earlier claim then holds the first stretch too; counted again, the run's wall would be
    that stretch too long. A stretch recorded without its queue (before it was recorded), or a
    run whose finishing queue is not known, counts as from another queue, the usual case."""
    return round(sum(float(g["wall_s"]) for g in segments
                     if queue is None or g.get("queue") != queue), 1)  # fmt: skip
