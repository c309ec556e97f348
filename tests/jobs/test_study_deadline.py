"""The driver names a run that will still be training when the session hands it off: what
happened when a machine ran at 0.55x the last one's speed and disagreement+routing's ETA passed
the hand-off by 15 minutes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from synattn_jobs.study.deadline import SETTLED_AFTER_S, overrun_s, overrunning, update_at

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
