"""Verdicts over seeds: each outcome from constructed scores, and the report's rows and warning
built from a store whose runs have known BLEU and translations."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from synattn_jobs.report import comparison, table_rows
from synattn_jobs.store import JobStore
from synattn_jobs.verdict import Verdict, compare_seeds, decide, holm, paired_t_p, seed_warning


def test_paired_t_matches_the_textbook_value() -> None:
    # diffs 1, 2, 3: mean 2, sd 1, t = 2 / (1 / sqrt 3) = 3.4641 with 2 df -> p = 0.0742
    assert paired_t_p([1.0, 2.0, 3.0]) == pytest.approx(0.07418, abs=1e-4)
    assert paired_t_p([0.5, 0.5, 0.5]) == 0.0  # no spread, all moved: as strong as it gets
    assert paired_t_p([0.0, 0.0]) == 1.0
    assert paired_t_p([1.0]) is None
    with pytest.raises(ValueError, match="finite"):
        paired_t_p([1.0, float("nan")])


@pytest.mark.parametrize(
    ("diffs", "seed_p", "boot_p", "verdict"),
    [
        ((1.0, 1.2, 0.9), 0.01, 0.001, Verdict.BETTER),
        ((-1.0, -1.2, -0.9), 0.01, 0.001, Verdict.WORSE),
        ((1.0, 1.2, 0.9), 0.20, 0.001, Verdict.INCONCLUSIVE),  # seeds disagree with bootstrap
        ((1.0, 1.2, 0.9), 0.01, 0.30, Verdict.INCONCLUSIVE),  # bootstrap disagrees
        ((1.0, 1.2, -0.1), 0.01, 0.001, Verdict.INCONCLUSIVE),  # one seed went the other way
        ((1.0, 1.2, 0.0), 0.01, 0.001, Verdict.INCONCLUSIVE),  # a tie is not a sign
        ((1.0,), None, 0.001, Verdict.INCONCLUSIVE),  # one seed: no seed test
        ((1.0, 1.2, 0.9), 0.01, None, Verdict.INCONCLUSIVE),  # no translations to resample
    ],
)
def test_each_verdict(
    diffs: tuple[float, ...], seed_p: float | None, boot_p: float | None, verdict: Verdict
) -> None:
    assert decide(diffs, seed_p, boot_p) is verdict


def test_compare_uses_the_seeds_both_finished() -> None:
    cmp = compare_seeds({1: 21.0, 2: 22.0, 3: 23.5}, {1: 20.0, 2: 21.0, 4: 30.0}, 0.01)
    assert cmp is not None
    assert cmp.seeds == (1, 2) and cmp.diffs == (1.0, 1.0) and cmp.mean_diff == 1.0
    assert cmp.seed_p == 0.0 and cmp.verdict is Verdict.BETTER
    assert compare_seeds({1: 20.0}, {2: 20.0}, 0.5) is None


def test_identical_outputs_never_win_although_the_bootstrap_says_so() -> None:
    from synattn_trainer.evaluate import paired_bootstrap

    refs = [f"ein kleiner hund läuft schnell über die wiese {i}" for i in range(40)]
    hyps = [f"ein kleiner hund rennt schnell über eine wiese {i}" for i in range(40)]
    boot = paired_bootstrap(hyps, hyps, refs, 200).p_value
    assert boot < 0.05  # sacreBLEU (multeval): a zero difference is not "chance"
    cmp = compare_seeds({1: 20.0, 2: 21.0, 3: 19.0}, {1: 20.0, 2: 21.0, 3: 19.0}, boot)
    assert cmp is not None and cmp.verdict is Verdict.INCONCLUSIVE


def test_holm_adjustment() -> None:
    """Holm's step-down: sorted p (0.005, 0.01, 0.03, 0.04) times (4, 3, 2, 1), made monotone."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, None, 0.9]) == [pytest.approx(1.0), None, pytest.approx(1.0)]
    assert holm([]) == []
    with pytest.raises(ValueError, match="not in"):
        holm([1.5])


def test_holm_turns_a_lone_marginal_win_inconclusive(tmp_path: Path) -> None:
    """Five rows, each with p just under 0.05 alone: adjusted over the table, none is 'better'
    unless its evidence survives the family (the README's claims table rule)."""
    diffs, raw = [0.5, 0.4, 0.6], [0.04, 0.03, 0.045, 0.02, 0.049]
    adjusted = holm(raw)
    assert all(decide(diffs, p, p) is Verdict.BETTER for p in raw)
    assert all(decide(diffs, p, p) is Verdict.INCONCLUSIVE for p in adjusted)


def test_seed_warning_in_words() -> None:
    assert seed_warning(3) is None
    one = seed_warning(1)
    assert one is not None and "Only 1 seed per variant" in one and "at least 3" in one
    assert "2 seeds" in (seed_warning(2) or "")


def _experiment(tmp_path: Path, bleu: dict[str, dict[int, float]], hyps: dict[str, list[str]],
                baselines: dict[str, str] | None = None) -> tuple[JobStore, str]:  # fmt: skip
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    seeds = sorted({s for by_seed in bleu.values() for s in by_seed})
    exp = store.create_experiment("e", "vanilla", {"seeds": seeds, "baselines": baselines or {},
                                                   "evaluate": {"split": "test"}})  # fmt: skip
    refs = tmp_path / "ref.txt"
    refs.write_text("".join(f"ein hund läuft über die wiese nummer {i}\n" for i in range(60)))
    for variant, by_seed in bleu.items():
        for seed, score in by_seed.items():
            hyp = tmp_path / f"{variant}-{seed}.txt"
            hyp.write_text("".join(h + "\n" for h in hyps[variant]))
            job = store.create_job("train", f"{variant}-s{seed}", {}, str(tmp_path),
                                   experiment_id=exp.id, variant=variant, seed=seed)  # fmt: skip
            store.claim(job.id, "w", 60)
            store.finish(job.id, "succeeded", {"bleu": score, "chrf": 50.0, "hyp": str(hyp),
                                               "ref": str(refs), "parameters": 1})  # fmt: skip
    return store, exp.id


def test_report_rows_carry_the_verdict(tmp_path: Path) -> None:
    good = [f"ein hund läuft über die wiese nummer {i}" for i in range(60)]
    poor = [f"eine katze sitzt {i}" for i in range(60)]
    store, exp_id = _experiment(
        tmp_path,
        {"vanilla": {1: 20.0, 2: 21.0, 3: 20.5}, "good": {1: 25.0, 2: 26.5, 3: 25.2},
         "noisy": {1: 22.0, 2: 19.0, 3: 21.0}, "8L": {1: 30.0, 2: 31.0, 3: 30.0}},
        {"vanilla": poor, "good": good, "noisy": poor, "8L": good},
        baselines={"noisy": "8L"},
    )  # fmt: skip
    exp = store.experiment(exp_id)
    assert exp is not None
    rep = comparison(exp, list(store.jobs(experiment_id=exp_id)), bootstrap=200)
    rows = {r["variant"]: r for r in rep["rows"]}
    assert rows["good"]["vs"] == "vanilla" and rows["good"]["verdict"] == "better"
    assert rows["good"]["delta"] == pytest.approx((5.0 + 5.5 + 4.7) / 3)
    assert rows["good"]["p_value"] < 0.05 and rows["good"]["seed_p"] < 0.05
    # measured against its own baseline: every seed worse, and the outputs differ
    assert rows["noisy"]["vs"] == "8L" and rows["noisy"]["verdict"] == "worse"
    assert rows["8L"]["is_baseline"] and rows["8L"]["verdict"] is None
    assert rep["warnings"] == []
    header, *cells = table_rows(rep)
    assert header[4:11] == ["vs", "Δ BLEU", "95% CI of Δ", "detectable Δ", "p seeds",
                            "p bootstrap", "verdict"]  # fmt: skip
    # every compared row carries its interval, its detectable effect and the joint bootstrap
    from synattn_jobs.verdict import mean_ci, min_detectable_effect

    diffs = list(rows["good"]["diffs"].values())
    assert rows["good"]["ci95"] == pytest.approx(list(mean_ci(diffs) or ()))
    assert rows["good"]["mde"] == pytest.approx(min_detectable_effect(
        statistics.stdev(diffs), 3, 0.05 / 2))  # fmt: skip
    assert rows["good"]["mde_alpha"] == 0.025 and "4 times in 5" in rows["good"]["mde_words"]
    assert rows["good"]["reading"] == "above zero"
    boot = rows["good"]["bootstrap"]
    assert boot["seeds"] == 3 and boot["samples"] == 200 and boot["ci95"][0] > 0
    assert rep["power"]["level"] == 0.8 and rep["power"]["alpha"] == 0.025
    assert rows["vanilla"]["ci95"] is None and "mde" not in rows["vanilla"]
    # the verdicts stand on p-values adjusted over the table's two compared rows
    assert rep["multiple_comparisons"] == {"method": "holm", "family": 2}
    for row in (rows["good"], rows["noisy"]):
        assert row["seed_p_holm"] >= row["seed_p"] and row["p_value_holm"] >= row["p_value"]
        assert row["verdict_unadjusted"] == row["verdict"]
    assert rows["good"]["averaged_updates"]["1"] == {
        "updates": [],
        "checkpoint_update": None,
        "max_updates": None,
        "selection": None,
    }
    assert any(c[0] == "good" and c[10] == "better" and c[7].startswith("≥") for c in cells)


def test_a_row_and_its_baseline_are_scored_with_the_row_s_protocol(tmp_path: Path) -> None:
    """The diversity paper reports single final models: with ``protocols: {div: last}`` the row
    compares both systems' last checkpoints, not their averages."""
    good = [f"ein hund läuft über die wiese nummer {i}" for i in range(60)]
    poor = [f"eine katze sitzt {i}" for i in range(60)]
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    spec = {"seeds": [1, 2, 3], "protocols": {"div": "last"}, "evaluate": {"split": "test"}}
    exp = store.create_experiment("e", "vanilla", spec)
    refs = tmp_path / "ref.txt"
    refs.write_text("".join(f"ein hund läuft über die wiese nummer {i}\n" for i in range(60)))
    for name, averaged, last in (("vanilla", (30, good), (20, poor)), ("div", (20, poor),
                                                                      (25, good))):  # fmt: skip
        for seed in (1, 2, 3):
            paths = {}
            for kind, (_, lines) in (("average", averaged), ("last", last)):
                paths[kind] = tmp_path / f"{name}-{seed}-{kind}.txt"
                paths[kind].write_text("".join(line + "\n" for line in lines))
            job = store.create_job("train", f"{name}-s{seed}", {}, str(tmp_path),
                                   experiment_id=exp.id, variant=name, seed=seed)  # fmt: skip
            store.claim(job.id, "w", 60)
            by = {kind: {"bleu": score + seed / 10, "chrf": 50.0, "hyp": str(paths[kind])}
                  for kind, (score, _) in (("average", averaged), ("last", last))}  # fmt: skip
            by["average"].update(updates=[80, 90, 100], checkpoint="/r/averaged.pt")
            # seed 1 from before the field: its last checkpoint's name tells its update
            by["last"].update(updates=[], checkpoint="/r/checkpoints/ckpt-00000100.pt",
                              **({} if seed == 1 else {"checkpoint_update": 100}))  # fmt: skip
            store.finish(job.id, "succeeded", {
                "bleu": by["average"]["bleu"], "chrf": 50.0, "hyp": str(paths["average"]),
                "ref": str(refs), "selection": "average", "by_selection": by,
                "averaged_updates": [80, 90, 100], "max_updates": 100})  # fmt: skip
    rep = comparison(exp, list(store.jobs(experiment_id=exp.id)), bootstrap=200)
    rows = {r["variant"]: r for r in rep["rows"]}
    div = rows["div"]
    assert div["protocol"] == "last" and div["bleu_by_seed"] == {"1": 25.1, "2": 25.2, "3": 25.3}
    # vanilla's last checkpoints (20.x), not its averages (30.x), are the baseline here
    assert div["delta"] == pytest.approx(5.0) and div["verdict"] == "better"
    assert rows["vanilla"]["protocol"] == "average" and rows["vanilla"]["bleu_mean"] == 30.2
    # the row names the checkpoints of the model it scored: the last one, not the average
    single = {"updates": [], "checkpoint_update": 100, "max_updates": 100, "selection": "last"}
    assert div["averaged_updates"] == {"1": single, "2": single, "3": single}
    assert rows["vanilla"]["averaged_updates"]["2"] == {
        "updates": [80, 90, 100], "checkpoint_update": None, "max_updates": 100,
        "selection": "average"}  # fmt: skip


def test_identical_outputs_are_inconclusive_and_one_seed_warns(tmp_path: Path) -> None:
    same = [f"ein hund {i}" for i in range(60)]
    store, exp_id = _experiment(
        tmp_path, {"vanilla": {1: 20.0}, "other": {1: 21.0}}, {"vanilla": same, "other": same}
    )
    exp = store.experiment(exp_id)
    assert exp is not None
    rep = comparison(exp, list(store.jobs(experiment_id=exp_id)), bootstrap=200)
    other = next(r for r in rep["rows"] if r["variant"] == "other")
    assert other["verdict"] == "inconclusive" and other["seed_p"] is None
    assert rep["warnings"] and "Only 1 seed" in rep["warnings"][0]


EXPERIMENTS = sorted((Path(__file__).parents[2] / "examples" / "experiments").glob("*.yaml"))


DIAGNOSTICS = {
    "headmask-diagnose",
    "headmask-diagnose-b",
    "headmask-diagnose-c",
    "rhe-prose",
}  # one seed


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_files_plan_known_presets(path: Path) -> None:
    """Every shipped experiment names presets that exist, says which table it mirrors and
    plans at least three seeds (the demo excepted: it is a minutes-long tour; and the short
    one-seed diagnostic runs, which say which issue's question they answer)."""
    from synattn_jobs.submit import load_experiment_file

    spec = load_experiment_file(path)
    jobs = spec.expand(200)
    assert {j["variant"] for j in jobs} == set(spec.variant_fragments())
    assert (path.parent / spec.config).is_file()
    if spec.name in DIAGNOSTICS:
        assert "(issue 70)" in path.read_text(encoding="utf-8").split("\nname:")[0]
    elif spec.name != "demo":
        assert len(set(spec.seeds)) >= 3
        assert "Table" in path.read_text(encoding="utf-8").split("\nname:")[0]
    # seed-major: the first seed of every system comes before any second seed
    first = [j["seed"] for j in jobs[: len(spec.variant_fragments())]]
    assert first == [spec.seeds[0]] * len(first)


def test_confidence_interval_of_the_mean_difference() -> None:
    """diffs 1, 2, 3: mean 2, sd 1, t(0.975, 2 df) = 4.3027, half-width 4.3027 / sqrt 3."""
    from synattn_jobs.verdict import mean_ci

    low, high = mean_ci([1.0, 2.0, 3.0]) or (0.0, 0.0)
    assert (low, high) == (pytest.approx(-0.4841, abs=1e-4), pytest.approx(4.4841, abs=1e-4))
    assert mean_ci([0.5, 0.5]) == (0.5, 0.5)
    assert mean_ci([1.0]) is None
    cmp = compare_seeds({1: 21.0, 2: 22.0, 3: 23.0}, {1: 20.0, 2: 20.0, 3: 20.0}, None)
    assert cmp is not None and cmp.ci95 == pytest.approx((-0.4841, 4.4841), abs=1e-4)


def test_minimum_detectable_effect_has_the_power_it_claims() -> None:
    """At the returned effect, simulated paired t-tests over 3 seeds reject 4 times in 5; with
    30 seeds it is near the normal approximation (1.96 + 0.84) sd / sqrt 30 = 0.51 sd."""
    import numpy as np
    from scipy.stats import t

    from synattn_jobs.verdict import min_detectable_effect

    alpha = 0.05 / 5
    mde = min_detectable_effect(0.5, 3, alpha)
    assert mde is not None
    rng = np.random.default_rng(0)
    diffs = rng.normal(mde, 0.5, size=(200_000, 3))
    stat = diffs.mean(1) / (diffs.std(1, ddof=1) / np.sqrt(3))
    power = np.mean(np.abs(stat) > t.ppf(1 - alpha / 2, 2))
    assert power == pytest.approx(0.8, abs=0.01)
    assert min_detectable_effect(1.0, 30) == pytest.approx(0.529, abs=0.01)
    assert min_detectable_effect(1.0, 3, 0.01) > min_detectable_effect(1.0, 3, 0.05)  # type: ignore[operator]
    assert min_detectable_effect(0.0, 3) is None and min_detectable_effect(1.0, 1) is None


def test_reading_says_only_what_the_interval_allows() -> None:
    from synattn_jobs.verdict import reading

    assert reading((-0.98, 1.20), (1.12,)) == "consistent with no effect; with the paper's +1.12"
    assert reading((0.81, 1.91), (3.0,)) == "above zero; below the paper's +3.00"
    assert reading((-2.2, -1.0)) == "below zero"
    assert reading(None) == "one seed: no interval"
