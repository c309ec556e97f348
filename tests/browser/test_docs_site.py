"""The documentation site opened from disk (file://), as the README says to read it: every paper
page's formulas are drawn (MathJax typeset them and their glyphs are painted, not only laid out
as empty boxes) and search finds pages. The site is built once for the module (about 10 s)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from tests.browser.conftest import assert_own_origin, wait_for

REPO = Path(__file__).resolve().parents[2]
PAPERS = sorted(p.stem for p in (REPO / "docs" / "papers").glob("*.md"))
SAMPLE = 6  # display formulas screenshot per page, spread over the page
MIN_INK = 40  # dark pixels a drawn formula has at least (a one-symbol formula has ~100)

pytestmark = pytest.mark.skipif(
    not ((shutil.which("chromium") or shutil.which("chromium-browser"))
         and shutil.which("chromedriver")),
    reason="no chromium or chromedriver on the PATH (.ci/services.sh installs Debian's packages)",
)  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The site as ``make docs`` builds it (not strict here: a broken anchor fails
    tests/test_docs.py, not these)."""
    out = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--no-strict", "-q", "-d", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (out / "index.html").is_file(), done.stdout + done.stderr
    yield out


def ink(element: WebElement) -> int:
    """How many pixels of the element's screenshot are dark (text on the light scheme)."""
    image = Image.open(io.BytesIO(element.screenshot_as_png)).convert("L")
    return sum(image.histogram()[:128])


def console_errors(browser: WebDriver) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_every_paper_page_draws_its_formulas(site: Path, browser: WebDriver,
                                             tmp_path: Path) -> None:  # fmt: skip
    """Each display formula sampled holds drawn glyphs. The formulas once kept their boxes but
    painted nothing: the glyphs' CSS rules were dropped by a second typeset on page load."""
    assert len(PAPERS) >= 6, PAPERS
    for name in PAPERS:
        page = site / "papers" / f"{name}.html"
        browser.get(page.as_uri())
        # every formula typeset (arithmatex leaves each one in an element of its class)
        wait_for(browser, "window.MathJax && MathJax.startup && MathJax.startup.document && "
                          "[...document.querySelectorAll('.arithmatex')].every("
                          "e => e.querySelector('mjx-container'))", timeout=30)  # fmt: skip
        shown = browser.find_elements(By.CSS_SELECTOR, "mjx-container[display='true']")
        assert shown, f"{name}: no display formula"
        step = max(1, len(shown) // SAMPLE)
        for i, formula in enumerate(shown[::step][:SAMPLE]):
            # laid out in view, its fonts asked for; text in a font still loading is not drawn
            browser.execute_async_script(
                "arguments[0].scrollIntoView({block: 'center'}); document.body.offsetHeight;"
                "document.fonts.ready.then(() => arguments[1]());", formula)  # fmt: skip
            dark = ink(formula)
            if i == 0:
                formula.screenshot(str(tmp_path / f"{name}-formula.png"))
            assert dark > MIN_INK, (name, i, dark, formula.get_attribute("outerHTML")[:300])
        assert not console_errors(browser), (name, console_errors(browser))
        assert_own_origin(browser, "file://")  # the fonts and scripts come from the site


def test_search_works_from_disk(site: Path, browser: WebDriver, tmp_path: Path) -> None:
    """The offline plugin's search index (search/search_index.js) and the iframe worker shim
    let a page opened from disk search; without them every page logged the missing index."""
    browser.get((site / "index.html").as_uri())
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.click()
    box.send_keys("slr-gated")
    wait_for(browser, "document.querySelectorAll('.md-search-result__item').length > 0",
             timeout=30)  # fmt: skip
    meta = browser.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text
    assert "matching document" in meta and not meta.startswith("No"), meta
    links = [a.get_attribute("href") for a in
             browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")]  # fmt: skip
    assert any(h and h.startswith("file://") and "gated-slr.html" in h for h in links), links
    results = browser.find_element(By.CSS_SELECTOR, ".md-search__output")
    results.screenshot(str(tmp_path / "search.png"))
    assert ink(results) > 500  # the list is drawn, not only in the DOM
    assert not console_errors(browser), console_errors(browser)
    assert_own_origin(browser, "file://")
