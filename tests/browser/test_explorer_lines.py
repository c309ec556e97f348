"""The attention explorer's line view (bertviz's, beside the heat map) in a real browser against
a real job API: one line per query-key pair weighing 2% or more, as opaque as the API's weight,
and pointing at a token keeps only its lines. The run is trained here (a few updates) and
recorded as a finished job, so no worker is needed."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.conftest import assert_own_origin, wait_for
from tests.browser.test_dashboard import sign_in
from tests.jobs.conftest import Env, h, serving
from tests.trainer.conftest import tiny_config

LINKS = "#ex-lines line.link"


def test_the_line_view_links_tokens_by_their_weights(
    embedded: Env, m30k: dict[str, Path], browser: WebDriver, tmp_path: Path
) -> None:
    from synattn_trainer.train import Trainer

    run = embedded.root / "runs" / f"lines-{tmp_path.name}"
    result = Trainer(tiny_config(m30k, train={"max_updates": 3}), run, progress=False).train()
    checkpoint = result.averaged or result.checkpoint
    store = embedded.store()
    with serving(embedded) as (base, token, _):
        job = store.create_job("train", "lines-run", {}, str(run), owner="tester")
        assert store.claim(job.id, "here", 60)
        store.finish(job.id, "succeeded", {"checkpoint": str(checkpoint)})
        api = httpx.post(f"{base}/v1/jobs/{job.id}/attention", headers=h(token),
                         json={"split": "valid", "row": 2}, timeout=120).json()  # fmt: skip
        weights = np.asarray(api["modules"]["enc_self.1"][3])
        sign_in(browser, base, token)
        wait_for(browser, f"document.getElementById('job-{job.id}')")
        browser.get(f"{base}/#attention/{job.id}/valid/2/enc_self/1/3")
        wait_for(browser, f"document.querySelectorAll('{LINKS}').length > 0", 120)
        drawn = browser.execute_script(
            f"return [...document.querySelectorAll('{LINKS}')].map((l) => "
            "[+l.dataset.q, +l.dataset.k, +l.dataset.v, +l.getAttribute('stroke-opacity')]);"
        )
        expected = [(q, k, v) for (q, k), v in np.ndenumerate(weights) if v >= 0.02]
        assert [(q, k) for q, k, _, _ in drawn] == [(q, k) for q, k, _ in expected]
        np.testing.assert_allclose([d[2] for d in drawn], [v for _, _, v in expected], atol=1e-12)
        np.testing.assert_allclose([d[3] for d in drawn], [min(1, v) for _, _, v in expected],
                                   atol=6e-4)  # fmt: skip
        tokens = browser.execute_script(
            "return [...document.querySelectorAll('#ex-lines text.qtok')]"
            ".map((t) => t.textContent);"
        )
        assert tokens == api["tokens"]["source"]
        # pointing at the first query keeps only its lines; leaving the view shows them all
        shown = (
            f"return [...document.querySelectorAll('{LINKS}')]"
            ".filter((l) => l.style.display !== 'none').map((l) => +l.dataset.q);"
        )
        browser.execute_script(
            "document.querySelector('#ex-lines text.qtok[data-q=\"0\"]')"
            ".dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));"
        )
        assert set(browser.execute_script(shown)) == {0}
        browser.execute_script(
            "document.getElementById('ex-lines').dispatchEvent(new MouseEvent('mouseleave'));"
        )
        assert len(browser.execute_script(shown)) == len(expected)
        captions = browser.execute_script(
            "return [...document.querySelectorAll('#ex-detail figcaption')]"
            ".map((c) => c.textContent);"
        )
        assert len(captions) == 2 and captions[1].startswith("line view: each query linked")
        assert_own_origin(browser, base)
