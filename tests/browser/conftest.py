"""Headless Chromium (Debian's package, driven by Selenium through Debian's chromedriver) for the
browser tests of the services' pages; every test also checks the page asked no other host."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.jobs.conftest import data_root, embedded  # noqa: F401  (an embedded job queue)
from tests.trainer.conftest import m30k  # noqa: F401  (session fixture: parsed data + vocab)

SIZE = (1280, 800)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_exe = shutil.which("chromedriver")
    if exe is None or driver_exe is None:
        pytest.fail("chromium and chromedriver are needed (.ci/services.sh installs them)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = exe
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--window-size={SIZE[0]},{SIZE[1]}", "--disable-extensions",
                "--no-first-run", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_exe), options=opts)
    driver.execute_cdp_cmd(  # the viewport itself, so screenshots are exactly SIZE
        "Emulation.setDeviceMetricsOverride",
        {"width": SIZE[0], "height": SIZE[1], "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: WebDriver, script: str, timeout: float = 60) -> object:
    """Wait until the JavaScript expression ``script`` is truthy; its value."""
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(
        lambda d: d.execute_script(f"return ({script});")
    )


def requested_urls(driver: WebDriver) -> list[str]:
    """Every URL the page asked for since the last call (Chrome's network log)."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def assert_own_origin(driver: WebDriver, base: str) -> None:
    """No request to any host but the page's own (data: and blob: URLs stay in the page)."""
    urls = requested_urls(driver)
    assert urls, "no request was logged"
    foreign = [u for u in urls if not (u.startswith(base + "/") or u == base
                                       or u.startswith(("data:", "blob:")))]  # fmt: skip
    assert not foreign, foreign


def screenshot(driver: WebDriver, path: Path) -> Path:
    driver.save_screenshot(str(path))
    return path


def assert_accessible_basics(driver: WebDriver) -> None:
    """Every form control has a label, every button a name, the page a language, and the
    keyboard reaches the controls (nothing focusable is taken out of the tab order)."""
    problems = driver.execute_script("""
        const out = [];
        if (!document.documentElement.lang) out.push('no lang');
        for (const e of document.querySelectorAll('input:not([type=hidden]), select, textarea'))
          if (!e.labels || e.labels.length === 0) out.push('unlabelled ' + (e.id || e.name));
        for (const b of document.querySelectorAll('button'))
          if (!(b.textContent.trim() || b.getAttribute('aria-label'))) out.push('nameless button');
        for (const e of document.querySelectorAll('[tabindex]'))
          if (Number(e.getAttribute('tabindex')) < 0) out.push('out of tab order ' + e.id);
        return out;""")
    assert not problems, problems
