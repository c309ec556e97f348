"""One identity between the command line and the dashboard, in a real browser against a real job
API (nothing trains): what the CLI submits with ``SYNATTN_TOKEN`` shows in that user's
dashboard, and an admin's dashboard shows every job's and experiment's owner (and, for a job
the Slurm executor submitted, Slurm's id, state and reason)."""

from __future__ import annotations

from pathlib import Path

import yaml
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.conftest import assert_own_origin, wait_for
from tests.browser.test_dashboard import sign_in
from tests.jobs.conftest import Env, serving, tiny_yaml
from tests.stand_in import stand_in_data

OWNERS = "[...document.querySelectorAll('#jobs tbody td.owner')].map((td) => td.hidden)"


def test_cli_jobs_show_in_their_users_dashboard_and_an_admin_sees_owners(
    tmp_path: Path, browser: WebDriver
) -> None:
    root, home = tmp_path / "root", tmp_path / "home"
    home.mkdir()
    fake = stand_in_data(root / "data")  # real enough for the checks at the door
    tiny_yaml(fake, root / "configs" / "tiny.yaml")
    grid = root / "configs" / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "tour", "config": "tiny.yaml",
                                    "baseline": "vanilla", "variants": ["vanilla"],
                                    "seeds": [1]}), encoding="utf-8")  # fmt: skip
    env = Env(root, home, f"sqla+sqlite:///{home / 'broker.sqlite'}")
    with serving(env) as (base, token, env):
        boss = env.cli("token", "create", "boss", "--admin").stdout.strip()
        env.cli("experiment", "run", str(grid))  # the local admin's
        env.vars["SYNATTN_TOKEN"] = token  # the user "tester"'s
        assert "owned by tester" in env.cli("experiment", "run", str(grid)).stdout
        del env.vars["SYNATTN_TOKEN"]

        sign_in(browser, base, token)
        wait_for(browser, "document.querySelectorAll('#experiments tbody tr').length === 1")
        assert browser.find_element(By.ID, "empty").get_attribute("hidden") is not None
        assert browser.execute_script(f"return {OWNERS};") == [True]  # own jobs: no column
        assert not browser.find_element(By.CSS_SELECTOR, "#jobs th.owner").is_displayed()

        browser.find_element(By.ID, "signout").click()
        sign_in(browser, base, boss)
        wait_for(browser, "document.querySelectorAll('#experiments tbody tr').length === 2")
        assert browser.find_element(By.CSS_SELECTOR, "#jobs th.owner").is_displayed()
        owners = browser.execute_script(
            "return [...document.querySelectorAll('#jobs tbody td.owner')]"
            ".filter((td) => !td.hidden).map((td) => td.textContent);"
        )
        assert sorted(owners) == ["local", "tester"]
        exp_owners = browser.execute_script(
            "return [...document.querySelectorAll('#experiments tbody td.owner')]"
            ".map((td) => td.textContent);"
        )
        assert sorted(exp_owners) == ["local", "tester"]
        assert_own_origin(browser, base)

        # under the Slurm executor a waiting job's row says Slurm's id, state and reason
        from synattn_jobs.slurm import ledger

        store = env.store()
        job = next(iter(store.jobs()))
        ledger.submitted(store, job.id, "4242")
        ledger.note(store, job.id, "4242", "PENDING", "Priority")
        browser.refresh()
        wait_for(
            browser,
            "[...document.querySelectorAll('#jobs tbody tr')].some("
            "(tr) => tr.textContent.includes('Slurm 4242 PENDING (Priority)'))",
        )
        for job in env.store().jobs():  # their event streams end, so the API may stop
            env.store().request_cancel(job.id)
        wait_for(
            browser, "document.querySelectorAll('#jobs tr[data-state=cancelled]').length === 2"
        )
