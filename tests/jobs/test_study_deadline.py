"""The driver names a run that will still be training when the session hands it off: what
happened when a machine ran at 0.55x the last one's speed and disagreement+routing's ETA passed
the hand-off by 15 minutes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from synattn_jobs.study.deadline import (
    SETTLED_AFTER_S,
    expected_wall_s,
    overrun_s,
    overrunning,
    pace_here,
    pace_samples,
    too_long,
    update_at,
)
from synattn_shared.progress import hms

NOW = 1_800_000_000.0


def _run(name: str, update: int, eta_s: float | None, *, state: str = "running",
         phase: str = "train", claimed_s_ago: float = 1_000.0) -> Any:  # fmt: skip
    progress = {"phase": phase, "max_updates": 5000, "update": update, "eta_s": eta_s}
    return SimpleNamespace(id=f"id-{name}", name=name, state=state, progress=progress,
                           started_at=NOW - claimed_s_ago)  # fmt: skip


def test_a_run_whose_training_ends_after_the_hand_off_is_named_with_the_update_it_reaches() -> (
    None
):
    hand_off_at = NOW + 9_000  # 2:30:00 left
    jobs = [
        _run("disagreement+routing-s6", 300, 10_296.0),  # ETA 2:51:36: 21.6 min too late
        _run("slr-gated-s6", 400, 7_178.0),  # ETA 1:59:38: fits
    ]
    [(name, line)] = overrunning(jobs, hand_off_at, NOW)
    assert name == "disagreement+routing-s6"
    # 4,700 updates left in 10,296 s: 0.4565 a second, 4,108 more by the hand-off
    assert update_at(jobs[0].progress, hand_off_at, NOW) == 300 + int(4700 / 10_296 * 9_000)
    assert line == (
        "disagreement+routing-s6 will not finish training before the hand-off: update "
        "300/5,000, ETA 2:51:36, the hand-off in 2:30:00, near update 4,408; a hand-off keeps "
        "its work only where --hand-off-dir reaches the next session, and `synattn cancel "
        "id-disagreement+routing-s6` frees its worker now (a driver started again resumes it)"
    )
    assert overrun_s(jobs[0].progress, hand_off_at, NOW) == 10_296.0 - 9_000
    assert overrun_s(jobs[1].progress, hand_off_at, NOW) is None


def test_no_estimate_no_claim_settled_and_no_training_phase_name_nothing() -> None:
    """A run just claimed (its pace is loading and warm-up), one without an ETA yet (a
    resumed run's first report), one translating after training (its stale ETA is not read),
    and a queued one are not named, however late their figures look."""
    hand_off_at = NOW + 600
    jobs = [
        _run("fresh", 100, 9_000.0, claimed_s_ago=SETTLED_AFTER_S - 1),
        _run("resumed", 400, None),
        _run("translating", 5000, 9_000.0, phase="translate test (average)"),
        _run("waiting", 0, 9_000.0, state="queued"),
    ]
    assert overrunning(jobs, hand_off_at, NOW) == []
    assert [n for n, _ in overrunning([_run("fresh", 100, 9_000.0)], hand_off_at, NOW)] == [
        "fresh"
    ]


def test_the_update_reached_is_never_past_the_budget_nor_before_the_present_one() -> None:
    p: dict[str, Any] = {"update": 4_900, "max_updates": 5000, "eta_s": 100.0}
    assert update_at(p, NOW + 10_000, NOW) == 5000
    assert update_at(p, NOW - 50, NOW) == 4_900
    assert update_at({"update": 10}, NOW, NOW) is None


# published records as run.json lists them (this study's, rounded): vanilla and rhe+lpea
PUBLISHED = [
    {"variant": "vanilla", "wall_s": 6_936.0, "tokens_per_s": 2_478.0},  # slow machine
    {"variant": "vanilla", "wall_s": 4_340.0, "tokens_per_s": 3_981.0},
    {"variant": "vanilla", "wall_s": 3_881.0, "tokens_per_s": 4_609.0},  # fast machine
    {"variant": "rhe+lpea", "wall_s": 6_500.0, "tokens_per_s": 2_640.0},
    {"variant": "rhe+lpea", "wall_s": 5_000.0, "tokens_per_s": 3_393.0},
]


def test_a_variants_length_here_is_its_published_work_at_this_machines_pace() -> None:
    """Work (wall time x target tokens per second) is about the same for every run of a
    variant, on any machine; this machine's pace is the median of its runs' rates over their
    variants' published medians."""
    # vanilla trains here at 1.2x its published median (3,981): the machine is 1.2x faster
    pace = pace_here([("vanilla", 3_981.0 * 1.2), ("no-such-variant", 9_000.0)], PUBLISHED)
    assert pace is not None and abs(pace - 1.2) < 1e-9
    need = expected_wall_s("rhe+lpea", PUBLISHED, 1.2)
    work = (6_500.0 * 2_640.0 + 5_000.0 * 3_393.0) / 2  # the median of two
    assert need is not None and abs(need - work / ((2_640.0 + 3_393.0) / 2 * 1.2)) < 1e-6
    assert expected_wall_s("headmask-impt", PUBLISHED, 1.2) is None  # never published
    assert pace_here([("headmask-impt", 2_000.0)], PUBLISHED) is None
    # a variant measured here is paced by its own runs: rhe+lpea at 0.9x, vanilla at 1.2x
    here = [("vanilla", 3_981.0 * 1.2), ("rhe+lpea", (2_640.0 + 3_393.0) / 2 * 0.9)]
    assert abs((pace_here(here, PUBLISHED, "rhe+lpea") or 0) - 0.9) < 1e-9
    assert abs((pace_here(here, PUBLISHED, "headmask-impt") or 0) - 1.05) < 1e-9  # the median


def test_a_late_run_too_long_for_the_time_left_says_by_how_much() -> None:
    need = expected_wall_s("rhe+lpea", PUBLISHED, 1.0)
    assert need is not None
    assert too_long("rhe+lpea", PUBLISHED, 1.0, need + 1) is None
    why = too_long("rhe+lpea", PUBLISHED, 1.0, 3_840.0)
    assert why == (f"needs about {hms(need)} at this machine's pace (1.00x the published "
                   "runs'), the hand-off is in 1:04:00")  # fmt: skip
    # no pace measured here (this session's runs are new variants): the published pace
    assert too_long("rhe+lpea", PUBLISHED, None, need + 1) is None
    assert too_long("rhe+lpea", PUBLISHED, None, 3_840.0) == (
        f"needs about {hms(need)} at the published runs' pace (none measured here yet), "
        "the hand-off is in 1:04:00")  # fmt: skip
    # nothing tells its length: it was named to start, so it starts
    assert too_long("headmask-impt", PUBLISHED, 1.0, 10.0) is None
    assert too_long("headmask-impt", PUBLISHED, None, 10.0) is None


def test_the_pace_is_read_from_settled_running_runs_and_runs_finished_under_this_driver() -> None:
    since = NOW - 3_000

    def job(name: str, variant: str, state: str, *, progress: float | None = None,
            result: float | None = None, claimed_s_ago: float = 1_000.0,
            finished_at: float | None = None) -> Any:  # fmt: skip
        return SimpleNamespace(
            name=name, variant=variant, state=state, started_at=NOW - claimed_s_ago,
            progress={} if progress is None else {"tokens_per_s": progress},
            result={} if result is None else {"tokens_per_s": result}, finished_at=finished_at,
        )  # fmt: skip

    jobs = [
        job("vanilla-s8", "vanilla", "running", progress=3_961.0),
        job("d-s7", "d+r", "running", progress=900.0, claimed_s_ago=SETTLED_AFTER_S - 1),
        job("slr-s7", "slr-gated", "succeeded", result=3_405.0, finished_at=NOW - 10),
        job("slr-s6", "slr-gated", "succeeded", result=2_214.0, finished_at=since - 1),
        job("rhe-s4", "rhe+lpea", "queued"),
    ]
    assert pace_samples(jobs, since, NOW) == [("vanilla", 3_961.0), ("slr-gated", 3_405.0)]
