"""synattn study run --commit-results: each run committed as it lands, those paths alone, in
a real git repository."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from synattn_jobs.study import commit as study_commit
from synattn_jobs.study import driver


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit and a change of someone else's staged in it."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.org")
    git(root, "config", "user.name", "t")
    (root / "README.md").write_text("hello\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "start")
    (root / "notes.txt").write_text("half-written\n")
    git(root, "add", "notes.txt")  # staged by the user: no commit of the study takes it
    return root


def committed_files(repo: Path) -> set[str]:
    return set(git(repo, "show", "--no-renames", "--name-only", "--format=", "HEAD").split())


def test_only_the_named_paths_are_committed_new_files_too_and_again_is_nothing(
    repo: Path,
) -> None:
    study = repo / "results" / "s"
    (study / "runs").mkdir(parents=True)
    (study / "run.json").write_text("{}\n")
    (study / "runs" / "a-s1.json").write_text("{}\n")
    ok, line = study_commit.commit_paths(repo, [study], "Study: a-s1 landed")
    assert ok and line.startswith("committed ") and line.endswith("2 file(s)")
    assert committed_files(repo) == {"results/s/run.json", "results/s/runs/a-s1.json"}
    assert git(repo, "log", "-1", "--format=%s") == "Study: a-s1 landed\n"
    assert git(repo, "diff", "--cached", "--name-only") == "notes.txt\n"  # still staged
    assert study_commit.commit_paths(repo, [study], "again") == (
        True, "nothing to commit: the results are as committed")  # fmt: skip
    assert git(repo, "log", "-1", "--format=%s") == "Study: a-s1 landed\n"


def test_a_file_over_two_megabytes_is_left_out_and_named_and_the_rest_committed(
    repo: Path,
) -> None:
    study = repo / "results" / "s"
    study.mkdir(parents=True)
    (study / "run.json").write_text("{}\n")
    (study / "model.pt").write_bytes(b"\0" * (study_commit.MAX_BYTES + 1))
    ok, line = study_commit.commit_paths(repo, [study], "Study: x")
    assert ok and line.startswith("committed ") and "1 file(s)" in line
    assert "left out results/s/model.pt: over 2 MB" in line
    assert committed_files(repo) == {"results/s/run.json"}
    assert git(repo, "diff", "--cached", "--name-only") == "notes.txt\n"  # nor model.pt


def test_a_landing_of_only_oversized_files_commits_nothing(repo: Path) -> None:
    study = repo / "results" / "s"
    study.mkdir(parents=True)
    (study / "model.pt").write_bytes(b"\0" * (study_commit.MAX_BYTES + 1))
    head = git(repo, "rev-parse", "HEAD")
    ok, line = study_commit.commit_paths(repo, [study], "Study: x")
    assert not ok and line.startswith("not committed; left out results/s/model.pt: over 2 MB")
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "diff", "--cached", "--name-only") == "notes.txt\n"


def test_a_committed_file_grown_over_two_megabytes_stops_the_commit(repo: Path) -> None:
    study = repo / "results" / "s"
    study.mkdir(parents=True)
    (study / "log.txt").write_text("small\n")
    git(repo, "add", "results")
    git(repo, "commit", "-q", "-m", "log", "--", "results")
    (study / "log.txt").write_bytes(b"\0" * (study_commit.MAX_BYTES + 1))
    (study / "run.json").write_text("{}\n")
    head = git(repo, "rev-parse", "HEAD")
    ok, line = study_commit.commit_paths(repo, [study], "Study: x")
    assert not ok and "results/s/log.txt: over 2 MB" in line and "by hand" in line
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "diff", "--cached", "--name-only") == "notes.txt\n"


def test_a_deleted_file_and_a_name_with_glob_characters_are_committed(repo: Path) -> None:
    study = repo / "results" / "s"
    study.mkdir(parents=True)
    (study / "old.json").write_text("{}\n")
    git(repo, "add", "results")
    git(repo, "commit", "-q", "-m", "old", "--", "results")
    (study / "old.json").unlink()
    (study / "rhe+lpea-[s1]*.json").write_text("{}\n")
    ok, line = study_commit.commit_paths(repo, [study], "Study: y")
    assert ok and line.endswith("2 file(s)")
    assert committed_files(repo) == {"results/s/old.json", "results/s/rhe+lpea-[s1]*.json"}
    assert git(repo, "status", "--short", "--", "results") == ""


def test_a_failing_commit_is_said_not_raised(repo: Path) -> None:
    study = repo / "results" / "s"
    study.mkdir(parents=True)
    (study / "run.json").write_text("{}\n")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'refused by the hook' >&2\nexit 1\n")
    hook.chmod(0o755)
    ok, line = study_commit.commit_paths(repo, [study], "Study: x")
    assert not ok and line == "not committed: git commit failed (refused by the hook)"


def test_commit_results_needs_the_results_inside_a_git_checkout(
    repo: Path, tmp_path: Path
) -> None:
    assert study_commit.problem(repo, repo / "results") is None
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert study_commit.problem(repo, outside) == (
        f"{outside} lies outside the git checkout {repo.resolve()}"
    )
    assert study_commit.problem(outside, outside) == f"{outside} is not in a git checkout"
    with pytest.raises(SystemExit, match=r"^--commit-results: .* lies outside the git checkout"):
        driver.main(["examples/experiments/study-conv5k.yaml", "--commit-results",
                     "--results", str(outside)])  # fmt: skip


def test_the_message_names_each_landed_run_its_bleu_and_how_far_the_study_is() -> None:
    landed = [{"name": "rhe+lpea-s5", "bleu": 37.123, "selection": "average"},
              {"name": "x-s1", "bleu": None, "selection": None}]  # fmt: skip
    assert study_commit.landed_message(landed, 55, 62) == (
        "Study: rhe+lpea-s5 (37.12, average), x-s1 (no BLEU, its final model) landed: 55 of "
        "62 runs (committed by synattn study run --commit-results)"
    )


def test_the_driver_commits_what_landed_since_its_last_commit(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``commit_landed``: the runs landed since the last commit, once each; a repository
    other than synattn's own gets its study folder committed and no claims regenerated."""
    monkeypatch.setattr(driver, "REPO", repo)
    results = repo / "results"
    (results / "s").mkdir(parents=True)

    def published(*states: str) -> dict[str, object]:
        runs = [{"name": f"a-s{i + 1}", "state": st, "bleu": 30.0 + i, "selection": "average"}
                for i, st in enumerate(states)]  # fmt: skip
        (results / "s" / "run.json").write_text(json.dumps(runs))
        done = sum(st == "succeeded" for st in states)
        return {"experiment": "s", "runs": runs, "finished": done, "planned": len(states)}

    first = published("succeeded", "running")
    committed = driver.landed_runs(first)  # landed before this driver: not its to commit
    assert committed == {"a-s1"}
    assert driver.commit_landed(results, first, committed) == {"a-s1"}
    assert git(repo, "log", "-1", "--format=%s") == "start\n"
    second = published("succeeded", "succeeded")
    assert driver.commit_landed(results, second, committed) == {"a-s1", "a-s2"}
    assert git(repo, "log", "-1", "--format=%s") == (
        "Study: a-s2 (31.00, average) landed: 2 of 2 runs (committed by synattn study run "
        "--commit-results)\n"
    )
    assert committed_files(repo) == {"results/s/run.json"}
