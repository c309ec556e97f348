"""The attention explorer in a real browser, against a real job API and real trained runs (a
worker trains two small runs on the embedded queue): the layers x heads grid holds the API's
numbers, one head enlarged with one dependency arc per non-root word, two runs compared with
their difference, permalinks, a sentence the user types (parsed as the run's data was, shown
with the model's translation), and another user's run is a 404 on the page as in the API."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from tests.browser.conftest import (
    assert_accessible_basics,
    assert_own_origin,
    screenshot,
    wait_for,
)
from tests.browser.test_dashboard import click, sign_in
from tests.jobs.conftest import Env, h, serving

DOCS = Path(__file__).resolve().parents[2] / "docs"
SYNTAX = {"enc_self": [{"name": "fixed", "layers": [0], "options": {"fixed": 3}},
                       {"name": "slr", "layers": [1], "options": {"mode": "gated"}}]}  # fmt: skip
TYPED = "Two dogs run across the green field ."


# run before the page's own scripts: the jobs list answers 2 s late
SLOW_LIST = """
const f = window.fetch.bind(window);
window.fetch = (url, ...rest) => String(url).includes("/v1/jobs?")
  ? new Promise((ok) => setTimeout(ok, 2000)).then(() => f(url, ...rest))
  : f(url, ...rest);"""


def _train(base: str, token: str, name: str, overrides: dict) -> str:  # type: ignore[type-arg]
    r = httpx.post(f"{base}/v1/jobs/train", headers=h(token), json={"name": name, "spec": {
        "config": "configs/tiny.yaml", "overrides": overrides,
        "evaluate": {"split": "valid"}}})  # fmt: skip
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _cells(browser: WebDriver, selector: str) -> list[float]:
    return [
        float(v)
        for v in browser.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(r => r.dataset.v);", selector
        )
    ]


def test_explorer_grid_detail_compare_and_permalinks(
    embedded: Env, browser: WebDriver, tmp_path: Path
) -> None:
    with serving(embedded) as (base, token, env):
        syntax = _train(base, token, "syntax-run", {"attention": SYNTAX})
        plain = _train(base, token, "plain-run", {})
        env.worker("train")
        for job in (syntax, plain):
            env.wait(job, {"succeeded"}, timeout=300)
        api = httpx.post(f"{base}/v1/jobs/{syntax}/attention", headers=h(token),
                         json={"split": "valid", "row": 4}, timeout=60).json()  # fmt: skip
        sign_in(browser, base, token)
        wait_for(browser, f"document.querySelector('#job-{syntax} button.attention')", 60)
        click(browser, f"#job-{syntax} button.attention")
        wait_for(browser, f"document.body.dataset.explorer?.startsWith('{syntax}/valid/0/')")
        row = browser.find_element(By.ID, "ex-row")
        row.clear()
        row.send_keys("4")
        click(browser, "#explorer-form button[type=submit]")
        wait_for(browser, f"document.body.dataset.explorer?.startsWith('{syntax}/valid/4/')")
        # the grid: layers x heads small maps, whose cells are the API's numbers
        maps = browser.find_elements(By.CSS_SELECTOR, "#ex-grid button.head")
        assert len(maps) == 2 * 4
        for name in ("enc_self.0", "enc_self.1"):
            for head in range(4):
                got = _cells(browser, f"#ex-grid button.head[data-module='{name}']"
                                      f"[data-head='{head}'] rect.cell")  # fmt: skip
                want = np.asarray(api["modules"][name][head]).ravel()
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        labels = [m.get_attribute("aria-label") for m in maps]
        assert labels[0] == "layer 0 head 0: fixed: current token"
        assert labels[3] == "layer 0 head 3: learned" and "gated (SLR)" in labels[4]
        # one head enlarged, with token labels and a dependency arc per non-root word
        click(browser, "#ex-grid button.head[data-module='enc_self.1'][data-head='2']")
        Select(browser.find_element(By.ID, "ex-overlay")).select_by_value("arcs")
        wait_for(browser, "document.querySelectorAll('#ex-map-a path.arc').length > 0")
        arcs = browser.find_elements(By.CSS_SELECTOR, "#ex-map-a path.arc")
        words = api["syntax"]["words"]
        assert len(arcs) == len(api["syntax"]["arcs"]) and 0 < len(arcs) < len(words)
        heads = {int(a.get_attribute("data-dep")) for a in arcs}
        assert len(heads) == len(arcs)  # one arc per dependent word
        ktoks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#ex-map-a text.ktok")]
        assert ktoks == api["tokens"]["source"]
        title = browser.execute_script(
            "return document.querySelector('#ex-map-a rect.cell title').textContent;"
        )
        assert title.startswith(f"{api['tokens']['source'][0]} → {api['tokens']['source'][0]}:")
        Select(browser.find_element(By.ID, "ex-overlay")).select_by_value("slr")
        wait_for(browser, "document.querySelectorAll('#ex-map-a rect.slr-window').length > 0")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#ex-map-a rect.slr-window")) == len(
            api["tokens"]["source"]
        )
        Select(browser.find_element(By.ID, "ex-overlay")).select_by_value("arcs")
        # compare with the vanilla run: two maps and their difference, cell by cell
        Select(browser.find_element(By.ID, "ex-compare")).select_by_value(plain)
        wait_for(browser, "document.getElementById('ex-map-diff')", 60)
        other = httpx.post(f"{base}/v1/jobs/{plain}/attention", headers=h(token),
                           json={"split": "valid", "row": 4}, timeout=60).json()  # fmt: skip
        a = np.asarray(api["modules"]["enc_self.1"][2])
        b = np.asarray(other["modules"]["enc_self.1"][2])
        np.testing.assert_allclose(_cells(browser, "#ex-map-a rect.cell"), a.ravel(), atol=1e-12)
        np.testing.assert_allclose(_cells(browser, "#ex-map-b rect.cell"), b.ravel(), atol=1e-12)
        np.testing.assert_allclose(_cells(browser, "#ex-map-diff rect.cell"), (a - b).ravel(),
                                   atol=1e-9)  # fmt: skip
        # the runs are named by their jobs' names, not their ids
        captions = [
            c.text for c in browser.find_elements(By.CSS_SELECTOR, "#ex-detail figcaption")
        ]
        assert captions[0].startswith("syntax-run · enc_self.1 head 2"), captions
        assert captions[1].startswith("plain-run · "), captions
        assert captions[2].startswith("difference (syntax-run − plain-run;"), captions
        assert not any(syntax in c or plain in c for c in captions), captions
        assert Select(browser.find_element(By.ID, "ex-compare")).first_selected_option.text == (
            "plain-run"
        )
        browser.execute_script("document.getElementById('explorer-note').scrollIntoView();")
        shot = screenshot(browser, tmp_path / "attention.png")
        if os.environ.get("SYNATTN_UPDATE_SCREENSHOTS"):
            DOCS.mkdir(exist_ok=True)
            shutil.copy(shot, DOCS / "attention.png")
        # the permalink encodes job, row, module and head, and opens the same view
        link = browser.current_url
        assert f"#attention/{syntax}/valid/4/enc_self/1/2/vs/{plain}" in link
        browser.get(base + "/")
        browser.get(link)
        wait_for(browser, f"document.body.dataset.explorer === '{syntax}/valid/4/enc_self/1/2/"
                 f"{plain}'", 60)  # fmt: skip
        assert browser.find_element(By.ID, "ex-map-diff")
        # one attention request per run shown, though sign-in and the hashchange both route it
        asked = browser.execute_script(
            "return performance.getEntriesByType('resource')"
            ".filter(e => e.name.includes('/attention')).length;"
        )
        assert asked == 2, asked
        assert_accessible_basics(browser)
        assert_own_origin(browser, base)
        _typed_sentence(browser, base, token, syntax, plain, tmp_path)
        # another user's run: 404 in the API and on the page
        mallory = env.cli("token", "create", "mallory").stdout.strip()
        assert httpx.post(f"{base}/v1/jobs/{syntax}/attention", headers=h(mallory),
                          json={"row": 0}).status_code == 404  # fmt: skip
        browser.execute_script("sessionStorage.clear();")
        browser.get(f"{base}/?as=mallory#attention/{syntax}/valid/0/enc_self/0/0")  # a new load
        wait_for(browser, "document.body.dataset.ready")
        field = browser.find_element(By.ID, "token")
        field.send_keys(mallory)
        click(browser, "#signin button[type=submit]")
        wait_for(browser, "document.getElementById('explorer-note').className === 'error'", 60)
        note = browser.find_element(By.ID, "explorer-note").text
        assert f"No attention for job {syntax}: 404" in note
        assert not browser.find_elements(By.CSS_SELECTOR, "#ex-grid button.head")


def _typed_sentence(
    browser: WebDriver, base: str, token: str, syntax: str, plain: str, tmp_path: Path
) -> None:
    """A sentence typed into the explorer, with the compare run still chosen: each run's
    translation beside the maps, which hold the API's numbers for that text; encoder maps
    compared (same source subwords); a permalink that opens the same sentence."""
    url, body = f"{base}/v1/jobs/{{}}/attention", {"text": TYPED}
    want = {
        job: httpx.post(url.format(job), headers=h(token), json=body, timeout=180).json()
        for job in (syntax, plain)
    }
    assert want[syntax]["translation"] and want[syntax]["syntax"]["words"] == TYPED.split(" ")
    field = browser.find_element(By.ID, "ex-text")
    field.clear()
    field.send_keys(TYPED)
    assert browser.execute_script(
        "return document.getElementById('ex-row').disabled && "
        "document.getElementById('ex-split').disabled;"
    )
    click(browser, "#explorer-form button[type=submit]")
    done = f"{syntax}/text/{TYPED}/enc_self/1/2/{plain}"
    wait_for(browser, f"document.body.dataset.explorer === {done!r}", 180)
    lines = {
        t.get_attribute("data-job"): t.text
        for t in browser.find_elements(By.CSS_SELECTOR, "#ex-translation .translation")
    }
    assert lines == {
        syntax: f"syntax-run translates: {want[syntax]['translation']}",
        plain: f"plain-run translates: {want[plain]['translation']}",
    }
    note = browser.find_element(By.ID, "explorer-note").text
    assert note.startswith("your sentence (parsed as the run's training data was): ")
    assert "teacher-forced on the model's own greedy translation" in note
    api = want[syntax]
    for head in range(4):
        got = _cells(browser, f"#ex-grid button.head[data-module='enc_self.1'][data-head='{head}']"
                              " rect.cell")  # fmt: skip
        want_cells = np.asarray(api["modules"]["enc_self.1"][head]).ravel()
        np.testing.assert_allclose(got, want_cells, rtol=0, atol=1e-12)
    ktoks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#ex-map-a text.ktok")]
    assert ktoks == api["tokens"]["source"]
    Select(browser.find_element(By.ID, "ex-overlay")).select_by_value("arcs")  # not linked
    wait_for(browser, "document.querySelectorAll('#ex-map-a path.arc').length > 0")
    arcs = browser.find_elements(By.CSS_SELECTOR, "#ex-map-a path.arc")
    assert len(arcs) == len(api["syntax"]["arcs"]) == 7  # eight words, one root
    a = np.asarray(api["modules"]["enc_self.1"][2])
    b = np.asarray(want[plain]["modules"]["enc_self.1"][2])
    np.testing.assert_allclose(_cells(browser, "#ex-map-diff rect.cell"), (a - b).ravel(),
                               atol=1e-9)  # fmt: skip
    browser.execute_script("document.getElementById('explorer-note').scrollIntoView();")
    screenshot(browser, tmp_path / "attention-typed.png")
    # the permalink names the sentence and opens it again, translation and all
    link = browser.current_url
    assert f"#attention/{syntax}/text/{quote(TYPED, safe='')}/enc_self/1/2/vs/{plain}" in link
    browser.get(base + "/")
    browser.get(link)
    wait_for(browser, f"document.body.dataset.explorer === {done!r}", 60)
    assert browser.find_element(By.ID, "ex-text").get_attribute("value") == TYPED
    shown = browser.find_element(By.CSS_SELECTOR, f"#ex-translation [data-job='{syntax}']").text
    assert shown == f"syntax-run translates: {api['translation']}"
    # the link followed while the jobs list is still on its way (held back 2 s here, as on a
    # loaded server) waits for it: the run is named, not shown by its id
    slow = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": SLOW_LIST})
    browser.get(base + "/")
    browser.get(link)
    wait_for(browser, f"document.body.dataset.explorer === {done!r}", 60)
    shown = browser.find_element(By.CSS_SELECTOR, f"#ex-translation [data-job='{syntax}']").text
    assert shown == f"syntax-run translates: {api['translation']}"
    browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", slow)
    # cleared, a row is shown again (the form's, 0 on a fresh page), without a translation
    field = browser.find_element(By.ID, "ex-text")
    field.clear()
    click(browser, "#explorer-form button[type=submit]")
    wait_for(browser, f"document.body.dataset.explorer?.startsWith('{syntax}/valid/0/')", 60)
    assert browser.find_element(By.ID, "ex-row").is_enabled()
    assert not browser.find_element(By.ID, "ex-translation").is_displayed()
    assert_accessible_basics(browser)
