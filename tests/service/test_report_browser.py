"""The capacity report in a real headless Chromium, served by the real server (uvicorn).

It renders without console errors, fetches nothing, every chart is drawn, a screenshot is not
blank, and each number of the capacity table equals the one ``GET /v1/capacity`` returns for
the same data (to the digits shown).
"""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from tests import chromium
from tests.factories import get_when_fitted
from tests.service.conftest import LiveServer

pytestmark = pytest.mark.slow

#: Capacity table fields and the decimals the report shows them with.
SHOWN = {"gpus_needed": 1, "mean_peak": 1, "capacity": 1, "shortfall_gpu_hours": 1,
         "queue_risk": 3, "idle_gpu_hours": 1, "idle_energy_kwh": 1, "busy_energy_kwh": 1}


@pytest.fixture
def browser() -> chromium.Chromium:
    chromium.require()
    return chromium.Chromium()


def test_the_checks_catch_a_broken_page(browser: chromium.Chromium, tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><body><p>x</p><img src='data:image/png;base64,AAAA'>"
                    "<img src='missing.png'><script>console.error('boom')</script></body></html>")
    with browser as b:
        b.open(page.as_uri())
        loaded = b.evaluate("Array.from(document.images).map(i => i.naturalWidth > 0)")
        errors = b.console_errors()
    assert loaded == [False, False]
    assert any("boom" in e for e in errors) and len(errors) >= 2  # and the missing file


def test_report_renders_and_shows_the_api_numbers(live: LiveServer,
                                                  browser: chromium.Chromium) -> None:
    query = {"cluster": "cluster-0", "horizon": "6h", "quantile": "0.95"}
    api = get_when_fitted(f"{live.url}/v1/capacity", query, tries=30)
    rows = {r["scope"]: r for r in api.json()["rows"]}
    url = str(httpx.URL(f"{live.url}/v1/reports/capacity", params=query))
    # the models are ready and the forecasts cached: the browser gets the page
    get_when_fitted(url, {}, tries=30)
    with browser as b:
        b.open(url)
        title = b.evaluate("document.title")
        assert title == "PRISM capacity report", b.evaluate("document.body.innerText")[:500]
        charts = b.evaluate("Array.from(document.querySelectorAll('svg.chart.usage')).map("
                            "s => [s.getBoundingClientRect().width, s.getBoundingClientRect()"
                            ".height, !!s.querySelector('g.sized-level'), "
                            "!!s.querySelector('g.now-marker')])")
        fetched = b.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        links = b.evaluate("Array.from(document.querySelectorAll('[src],[href]')).map("
                           "e => e.getAttribute('src') || e.getAttribute('href'))")
        table = b.evaluate(
            "Array.from(document.querySelectorAll('table.capacity tr[data-scope]')).map(tr =>"
            " [tr.dataset.scope, Object.fromEntries(Array.from(tr.querySelectorAll("
            "'td[data-field]')).map(td => [td.dataset.field, td.textContent]))])")
        shot = b.screenshot()
        errors = b.console_errors()
    assert errors == [], errors
    # one in-use chart per scope (inline SVG), each with its sized level and "now" marker
    assert len(charts) == len(rows)
    assert all(w > 0 and h > 0 and sized and now for w, h, sized, now in charts), charts
    assert fetched == []  # self-contained: the page loads nothing
    assert all(link.startswith(("data:", "#")) for link in links), links
    pixels = np.asarray(Image.open(io.BytesIO(shot)).convert("L"), dtype=float)
    assert pixels.shape == (1600, 1280)
    assert pixels.std() > 10 and (pixels < 200).mean() > 0.01  # text and plots, not blank
    shown = dict(table)
    assert set(shown) == set(rows)
    for scope, cells in shown.items():
        row = rows[scope]
        assert cells["recommendation"] == row["recommendation"]
        for field, decimals in SHOWN.items():
            text = cells[field].replace(",", "")
            if row[field] is None:
                assert text == "–", (scope, field, text)
            else:
                assert float(text) == pytest.approx(row[field], abs=0.5 * 10**-decimals), (
                    scope, field, text, row[field])
