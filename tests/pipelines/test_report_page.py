"""``foreshock report`` writes one self-contained page that a real browser renders.

The page is opened in Debian's Chromium driven by Playwright (no browser download:
``executable_path`` is the system binary; install it with ``.ci/services.sh``).  The test
fails on any request that leaves the file (a CDN stylesheet, a remote font) or fails, on
console errors, and on a blank screenshot.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from foreshock.pipelines.cli import main

CHROMIUM = Path("/usr/lib/chromium/chromium")


def _page_path(capsys) -> Path:
    out = capsys.readouterr().out
    return Path(re.search(r"fleet risk page: (\S+)", out).group(1))


@pytest.mark.slow
def test_fleet_report_page_renders_in_chromium(demo_data_dir, use_registry, tmp_path, capsys):
    from demo_fleet import demo_config_file, demo_tracking_uri

    use_registry(demo_tracking_uri(demo_data_dir))  # the demo's champion
    config = str(demo_config_file(demo_data_dir))
    assert main(["--config", config, "--data-dir", str(demo_data_dir), "report", "--top", "4"]) == 0
    page = _page_path(capsys)
    text = page.read_text()
    assert (demo_data_dir / "reports" / "fleet.html").read_text() == text
    for section in ("Fleet", "Top units", "Latest backtest", "Drain replay", "Champion model", "Pipeline freshness"):
        assert f"<h2>{section}</h2>" in text
    assert "models:/foreshock-demo-fleet@champion (version" in text and "T*" in text  # champion, checkpoint
    # self-contained: nothing to fetch, no script
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", text)
    assert "<script" not in text and "@import" not in text
    assert text.count("<svg") >= 2  # risk over time and calibration, inline

    if not CHROMIUM.exists() or shutil.which("chromium") is None:
        pytest.skip("Debian chromium not installed (run .ci/services.sh): page checked as HTML only")
    sync_api = pytest.importorskip("playwright.sync_api")
    requests, failed, errors = [], [], []
    shot = tmp_path / "fleet.png"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            view = browser.new_page(viewport={"width": 1280, "height": 1000})
            view.on("request", lambda r: requests.append(r.url))
            view.on("requestfailed", lambda r: failed.append(r.url))
            view.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            response = view.goto(page.as_uri(), wait_until="load")
            assert response is None or response.ok
            assert view.title() == "foreshock fleet risk"
            # the six above, telemetry health and trends, repeat offenders and learned actions
            assert view.locator("section").count() == 8
            assert view.locator("svg").count() >= 2
            view.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert failed == [] and errors == []
    assert all(url.startswith(("file:", "data:")) for url in requests), requests

    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape[0] > 1500  # the full page, not one viewport
    dark = (pixels < 128).mean()
    assert 0.005 < dark < 0.5 and pixels.std() > 10  # text and plots, not a blank page
