"""The parse playground in a real browser against a real uvicorn parser server."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.conftest import (
    SIZE,
    assert_accessible_basics,
    assert_own_origin,
    screenshot,
    wait_for,
)
from tests.parser.conftest import TEST_LIMITS, api_server

SENTENCE = "Bush held a talk with Sharon ."  # pretokenised: 7 words
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory, m30k: dict[str, Path]) -> Iterator[str]:
    """A parser server with one subword vocabulary (the test data's tokenizer) configured."""
    vocab = tmp_path_factory.mktemp("vocab")
    shutil.copy(m30k["tokenizer"], vocab / "m30k.json")
    log = tmp_path_factory.mktemp("server") / "uvicorn.log"
    with api_server({**TEST_LIMITS, "PARSER_TOKENIZERS_DIR": str(vocab)}, log) as (_, url):
        yield url


def cells(driver: WebDriver, level: str, feature: str) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(td => td.dataset.value);",
        f"#heatmaps-{level} table[data-feature='{feature}'] td.cell",
    )


def crossed_labels(driver: WebDriver) -> list[str]:
    """Labels of displaCy's arcs that another arc's line runs through (sampled every 2 px),
    or that overlap another label: what makes nested arcs' labels unreadable."""
    return list(driver.execute_script("""
        const svg = document.querySelector('#arcs svg.displacy');
        const groups = [...svg.querySelectorAll('g.displacy-arrow')];
        const boxes = groups.map(g => g.querySelector('text').getBoundingClientRect());
        const out = [];
        const m = svg.getScreenCTM();
        groups.forEach((g, i) => {
          const b = boxes[i];
          const label = g.querySelector('textPath').textContent;
          groups.forEach((other, j) => {
            if (i === j) return;
            const path = other.querySelector('path.displacy-arc');
            const len = path.getTotalLength();
            for (let s = 0; s <= len; s += 2) {
              const p = path.getPointAtLength(s).matrixTransform(m);
              if (p.x > b.left + 1 && p.x < b.right - 1 && p.y > b.top + 1 && p.y < b.bottom - 1) {
                out.push(label + ' crossed by arc ' + j); return;
              }
            }
            const o = boxes[j];
            const apart = b.right <= o.left || o.right <= b.left || b.bottom <= o.top
              || o.bottom <= b.top;
            if (j > i && !apart) out.push(label + ' overlaps label ' + j);
          });
        });
        return out;"""))  # fmt: skip


def test_playground_draws_arcs_tree_and_heatmaps(playground: str, browser: WebDriver,
                                                 tmp_path: Path) -> None:  # fmt: skip
    page = httpx.get(playground + "/")
    assert (
        page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    )
    url = f"{playground}/?text={quote(SENTENCE)}&pretok=1&tau=10&k=6&tokenizer=m30k"
    browser.get(url)
    wait_for(browser, "document.body.dataset.parsed")
    # displaCy's arcs: one labelled arc per non-root word
    arcs = browser.find_elements(By.CSS_SELECTOR, "#arcs svg.displacy .displacy-arc")
    labels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#arcs svg textPath")]
    assert len(arcs) == 6 and "nsubj" in labels
    assert not crossed_labels(browser), crossed_labels(browser)
    # the tree: derived from the dependencies, and says so; every word is a leaf
    leaves = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#tree svg text.leaf")]
    assert leaves == SENTENCE.split()
    assert "derived from the dependency parse" in browser.find_element(By.ID, "tree-source").text
    # every heatmap, with a cell per (query, key) pair, at word and at subword level
    for feature in ("slr_soft", "dea_mask", "dep_hops", "rp_index"):
        assert len(cells(browser, "word", feature)) == 7 * 7, feature
    subwords = browser.execute_script(
        "return document.querySelectorAll('#heatmaps-subword table[data-feature=slr_soft] "
        "thead th').length - 1;"
    )
    assert subwords > 7 and len(cells(browser, "subword", "dea_mask")) == subwords**2
    hover = browser.find_element(By.CSS_SELECTOR, "#heatmaps-word td.cell").get_attribute("title")
    assert hover is not None and hover.startswith("Bush → Bush:")
    shot = screenshot(browser, tmp_path / "playground.png")
    # nested arcs keep their labels clear of every other arc (displaCy spacing, issue 29)
    nested = "A man in a blue shirt is standing on a ladder cleaning the windows of a bus ."
    browser.get(f"{playground}/?text={quote(nested)}&pretok=1&tau=10&k=6")
    wait_for(browser, "document.body.dataset.parsed")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#arcs .displacy-arc")) == 17
    assert not crossed_labels(browser), crossed_labels(browser)
    browser.get(url)
    wait_for(browser, "document.body.dataset.parsed")
    if os.environ.get("SYNATTN_UPDATE_SCREENSHOTS"):
        DOCS.mkdir(exist_ok=True)
        shutil.copy(shot, DOCS / "playground.png")
    # a new tau re-parses and changes the soft SLR cells (and the permalink)
    before = cells(browser, "word", "slr_soft")
    stamp = browser.execute_script("return document.body.dataset.parsed;")
    tau = browser.find_element(By.ID, "tau")
    tau.clear()
    tau.send_keys("2")
    browser.execute_script("document.getElementById('tau').dispatchEvent(new Event('change'));")
    wait_for(browser, f"document.body.dataset.parsed !== '{stamp}'")
    after = cells(browser, "word", "slr_soft")
    assert len(after) == 49 and after != before
    assert "tau=2" in browser.current_url
    # the exact curl for the same request
    browser.find_element(By.ID, "show-curl").click()
    curl = browser.find_element(By.ID, "curl").text
    assert curl.startswith(f"curl -s -X POST {playground}/v1/parse") and '"tau":2' in curl
    assert_own_origin(browser, playground)
    assert_accessible_basics(browser)
    from PIL import Image

    assert Image.open(shot).size == SIZE


def test_playground_shows_the_api_error(playground: str, browser: WebDriver) -> None:
    browser.get(f"{playground}/?text={quote('word ' * 300)}&pretok=1")
    wait_for(browser, "document.getElementById('status').classList.contains('error')")
    text = browser.find_element(By.ID, "status").text
    assert text.startswith("Could not parse: 422") and "limit" in text


def test_a_first_visit_parses_the_example_and_long_arcs_scroll_in_their_box(
    playground: str, browser: WebDriver
) -> None:
    """No query string: the example sentence is parsed on load (the page showed an empty
    form). A 16-word sentence's arcs are wider than the page and scroll inside their own box
    instead of widening the page. A string of two sentences says so in the status line."""
    browser.get(playground + "/")
    wait_for(browser, "document.body.dataset.parsed")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#arcs svg.displacy .displacy-arc")) == 6
    assert len(cells(browser, "word", "slr_soft")) == 7 * 7  # "Bush held a talk with Sharon."
    assert "text=Bush" in browser.current_url  # the permalink of what is shown

    long = "The man in the blue coat read the long letter from his sister at home ."
    assert len(long.split()) == 16
    browser.get(f"{playground}/?text={quote(long)}&pretok=1")
    wait_for(browser, "document.body.dataset.parsed")
    sizes = browser.execute_script("""
        const box = document.getElementById('arcs');
        const svg = box.querySelector('svg.displacy');
        return {view: document.documentElement.clientWidth,
                page: document.documentElement.scrollWidth,
                right: box.getBoundingClientRect().right, svg: svg.getBoundingClientRect().width,
                scroll: box.scrollWidth, client: box.clientWidth};""")  # fmt: skip
    assert sizes["svg"] > sizes["view"], sizes  # the arcs are wider than the page...
    assert sizes["page"] <= sizes["view"] and sizes["right"] <= sizes["view"], sizes
    assert sizes["scroll"] > sizes["client"], sizes  # ...and scroll in their box

    browser.get(f"{playground}/?text={quote('Dr. Smith arrived. Then he left.')}")
    wait_for(browser, "document.body.dataset.parsed")
    status = browser.find_element(By.ID, "status").text
    assert "warning: the text parsed as 2 sentences" in status and "split" in status
    assert_own_origin(browser, playground)
