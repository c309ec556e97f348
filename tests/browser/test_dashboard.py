"""The experiment dashboard in a real browser against a real job API and a real worker on the
embedded queue: sign in, live progress, cancel, a finished experiment's report (the table, and
the full HTML report in a new tab), a finished job's line, a bad token."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import (
    SIZE,
    assert_accessible_basics,
    assert_own_origin,
    screenshot,
    wait_for,
)
from tests.jobs.conftest import Env, h, serving

DOCS = Path(__file__).resolve().parents[2] / "docs"


def sign_in(browser: WebDriver, base: str, token: str) -> None:
    browser.get(base + "/")
    wait_for(browser, "document.body.dataset.ready")
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#signin button[type=submit]").click()


def click(browser: WebDriver, selector: str, tries: int = 5) -> None:
    """Click the element ``selector`` finds, finding it again if the page re-rendered it in
    between (the dashboard redraws its lists as events and polls arrive)."""
    for attempt in range(tries):
        try:
            browser.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            if attempt == tries - 1:
                raise


def progress_of(browser: WebDriver, job_id: str) -> str:
    return str(browser.execute_script(
        "const r = document.getElementById(arguments[0]);"
        "return r ? r.querySelector('td.progress').textContent : '';", f"job-{job_id}"
    ))  # fmt: skip


def test_a_wrong_token_shows_an_error(embedded: Env, browser: WebDriver) -> None:
    with serving(embedded) as (base, _, _):
        sign_in(browser, base, "not-a-token")
        wait_for(browser, "!document.getElementById('error').hidden")
        text = browser.find_element(By.ID, "error").text
        assert "That token was refused (403: invalid or revoked token)" in text
        assert browser.find_element(By.ID, "app").get_attribute("hidden") is not None
        assert "not-a-token" not in browser.current_url  # never in a URL
        assert browser.execute_script("return sessionStorage.getItem('synattn-token');") is None


def test_dashboard_follows_cancels_and_reports(embedded: Env, browser: WebDriver,
                                               tmp_path: Path) -> None:  # fmt: skip
    with serving(embedded) as (base, token, env):
        sign_in(browser, base, token)
        wait_for(browser, "!document.getElementById('empty').hidden")  # a new user: the how-to
        assert "synattn experiment run" in browser.find_element(By.ID, "empty").text
        assert browser.execute_script("return sessionStorage.getItem('synattn-token');") == token
        r = httpx.post(f"{base}/v1/jobs/train", json={"spec": {"config": "configs/long.yaml"}},
                       headers=h(token))  # fmt: skip
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        # no worker yet: the job waits in the store, and the page says where in the queue
        wait_for(browser, f"/position 1 in the train queue/.test(document.querySelector("
                 f"'#job-{job} td.progress')?.textContent)", timeout=30)  # fmt: skip
        env.worker("train")
        # live progress from the event stream: the update count moves on its own
        wait_for(browser, f"document.getElementById('job-{job}')?.dataset.state === 'running'"
                 f" && /update \\d+/.test(document.querySelector('#job-{job} td.progress')"
                 ".textContent)", timeout=180)  # fmt: skip
        first = progress_of(browser, job)
        wait_for(browser, f"document.querySelector('#job-{job} td.progress').textContent !== "
                 f"{first!r}", timeout=120)  # fmt: skip
        wait_for(browser, "document.querySelector('#loss polyline')?.dataset.points > 15", 120)
        shot = screenshot(browser, tmp_path / "dashboard.png")
        if os.environ.get("SYNATTN_UPDATE_SCREENSHOTS"):
            DOCS.mkdir(exist_ok=True)
            shutil.copy(shot, DOCS / "dashboard.png")
        click(browser, f"#job-{job} button.cancel")
        wait_for(browser, f"document.getElementById('job-{job}')?.dataset.state === 'cancelled'",
                 timeout=120)  # fmt: skip
        # an experiment: the report link appears once every job has finished
        r = httpx.post(f"{base}/v1/experiments", headers=h(token), json={
            "name": "ui", "config": "configs/tiny.yaml", "variants": ["vanilla"], "seeds": [1],
            "evaluate": {"split": "valid"}})  # fmt: skip
        assert r.status_code == 201, r.text
        exp = r.json()["id"]
        wait_for(browser, f"document.querySelector('#exp-{exp} a.report-link')", timeout=300)
        click(browser, f"#exp-{exp} a.report-link")
        wait_for(browser, "!document.getElementById('report').hidden")
        report = browser.find_element(By.ID, "report-table").text
        assert "vanilla" in report and "Only 1 seed" in browser.find_element(
            By.ID, "report-note").text  # fmt: skip
        heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#report-table th")]
        assert {"BLEU", "Δ BLEU", "95% CI of Δ", "verdict"} <= set(heads), heads
        assert not any("_" in h for h in heads), heads  # no bleu_mean, seed_p, p_value
        # a finished job says so (not its last phase), and each final model's BLEU once
        run = next(j for j in httpx.get(f"{base}/v1/experiments/{exp}", headers=h(token))
                   .json()["jobs"])  # fmt: skip
        text = progress_of(browser, run["id"])
        assert text.startswith("finished · ") and "translate" not in text, text
        bleus = [part for part in text.split(" · ") if part.startswith("BLEU ")]
        selections = run["result"]["by_selection"]
        assert len(bleus) == len({round(s["bleu"], 2) for s in selections.values()}), text
        assert bleus[0].startswith(f"BLEU {run['result']['bleu']:.2f} ("), text
        assert sorted(sel for part in bleus for sel in part.split("(")[1].rstrip(")")
                      .split(", ")) == sorted(selections), text  # fmt: skip
        # three final models, two of them the same model by score: each BLEU once, labelled
        line = browser.execute_script("""return progressText({id: 'x', state: 'succeeded',
            progress: {phase: 'translate valid (average)', bleu: 1.27},
            result: {bleu: 1.27, selection: 'average', by_selection: {last: {bleu: 1.27},
                     best_valid: {bleu: 1.1}, average: {bleu: 1.27}}}});""")  # fmt: skip
        assert line == "finished · BLEU 1.27 (average, last) · BLEU 1.10 (best_valid)", line
        # the full report in a new tab: fetched with the token, shown from a blob URL
        dashboard = browser.current_window_handle
        click(browser, f"#exp-{exp} a.report-html-link")
        tabs = WebDriverWait(browser, 120).until(
            lambda d: [w for w in d.window_handles if w != dashboard] or False
        )
        browser.switch_to.window(tabs[0])
        wait_for(browser, "location.protocol === 'blob:' && "
                 "document.getElementById('comparison')", timeout=120)  # fmt: skip
        full = browser.find_element(By.ID, "comparison").text
        assert "vanilla (baseline)" in full and "Δ BLEU" in full and "bleu_mean" not in full
        imgs = browser.find_elements(By.TAG_NAME, "img")
        assert imgs and all(
            browser.execute_script("return arguments[0].naturalWidth;", i) > 0 for i in imgs
        )  # the embedded figures decode
        assert token not in browser.page_source
        browser.close()
        browser.switch_to.window(dashboard)
        assert_own_origin(browser, base)
        assert_accessible_basics(browser)
        from PIL import Image

        assert Image.open(shot).size == SIZE
