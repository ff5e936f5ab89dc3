"""`prism capacity` and `prism report` as a user runs them, on a small store of two VCs."""

from __future__ import annotations

import json
import re
from datetime import datetime
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.capacity import DISTRIBUTION_LEVELS, plan_capacity
from prism.cli import main
from prism.reports.capacity import ClusterSection, ReportData, render_html
from tests import chromium

START = pd.Timestamp("2026-01-05")
DAYS = 9


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with 9 days of two VCs' GPUs in use (10 min) and their capacities."""
    folder = tmp_path_factory.mktemp("lab")
    rng = np.random.default_rng(7)
    n = 144 * DAYS
    t = np.arange(n)
    frames = []
    for scope, base, cap in (("vc1", 20, 40), ("vc2", 8, 25)):
        value = np.clip(base + 0.3 * base * np.sin(2 * np.pi * t / 144)
                        + rng.normal(0, 1.5, n), 0, cap)
        frames.append(pd.DataFrame({"series_id": f"lab/{scope}/gpus_in_use",
                                    "ts": pd.date_range(START, periods=n, freq="10min"),
                                    "value": np.round(value, 3)}))
    samples = folder / "samples.csv"
    pd.concat(frames).to_csv(samples, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    capacity = folder / "capacity.csv"
    capacity.write_text("cluster,scope,gpus\nlab,vc1,40\nlab,vc2,25\n")
    db = folder / "prism.duckdb"
    assert main(["--db", str(db), "ingest", str(samples), "--format", "long-csv", "-q"]) == 0
    assert main(["--db", str(db), "ingest", str(capacity), "--format", "capacity-csv",
                 "-q"]) == 0
    return db


def _models(db: Path) -> tuple[str, str]:
    """A registry beside the store (never ./models)."""
    return ("--models-dir", str(db.parent / "models"))


def _capacity_json(db: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    code = main(["--db", str(db), "capacity", *_models(db), "--cluster", "lab", "--horizon", "6h",
                 "--quantile", "0.9", "--model", "naive", "--json", *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return dict(json.loads(captured.out))


def test_capacity_cli_plans_the_forecast_prism_forecast_writes(
        lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _capacity_json(lab, capsys, "--steps")
    rows = {r["scope"]: r for r in plan["rows"]}
    assert set(rows) == {"vc1", "vc2"}
    assert (rows["vc1"]["capacity"], rows["vc1"]["capacity_source"]) == (40.0, "store")
    # the same forecast through `prism forecast`, planned by hand with prism.capacity
    levels = ",".join(f"{q:g}" for q in sorted({*DISTRIBUTION_LEVELS, 0.9}))
    out = tmp_path / "fc.csv"
    assert main(["--db", str(lab), "forecast", "lab/vc1/gpus_in_use", "lab/vc2/gpus_in_use",
                 "--model", "naive", "--horizon", "6h", "--quantiles", levels,
                 "--output", str(out)]) == 0
    capsys.readouterr()
    fc = pd.read_csv(out, parse_dates=["ts"])
    expected = plan_capacity(fc, {"vc1": 40.0, "vc2": 25.0}, quantile=0.9, freq_s=600)
    for row in expected.rows:
        got = rows[row.scope]
        for field in ("gpus_needed", "shortfall_gpu_hours", "idle_gpu_hours", "queue_risk",
                      "idle_energy_kwh", "busy_energy_kwh"):
            assert got[field] == pytest.approx(getattr(row, field), rel=1e-6, abs=1e-9), field
        assert len(got["steps"]) == 36
        assert got["steps"][0]["ts"].startswith("2026-01-14")
    assert main(["--db", str(lab), "capacity", *_models(lab), "--cluster", "lab", "--horizon", "6h",
                 "--model", "naive"]) == 0
    table = capsys.readouterr().out
    assert "vc1" in table and "vc2" in table and "needed p95" in table


def test_capacity_cli_what_if_and_overrides(lab: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    base = {r["scope"]: r for r in _capacity_json(lab, capsys, "--steps")["rows"]}
    override = tmp_path / "cap.csv"
    override.write_text("scope,gpus\nvc1,100\n")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("start,end,gpus,scope,name\n"
                    "2026-01-14T01:00,2026-01-14T02:00,12,vc2,eval run\n")
    what_if = {r["scope"]: r for r in _capacity_json(
        lab, capsys, "--steps", "--capacity", str(override), "--reservations", str(jobs),
        "--growth", "2", "--watts-per-gpu", "10,100")["rows"]}
    assert (what_if["vc1"]["capacity"], what_if["vc1"]["capacity_source"]) == (100.0, "file")
    assert what_if["vc2"]["capacity_source"] == "store"
    assert what_if["vc1"]["gpus_needed"] == pytest.approx(2 * base["vc1"]["gpus_needed"])
    assert what_if["vc2"]["reserved_gpu_hours"] == pytest.approx(12.0)
    needed = [2 * s["needed"] + (12 if "T01:" in s["ts"] else 0)
              for s in base["vc2"]["steps"]]
    assert [s["needed"] for s in what_if["vc2"]["steps"]] == pytest.approx(needed)
    assert what_if["vc1"]["idle_energy_kwh"] == pytest.approx(
        what_if["vc1"]["idle_gpu_hours"] * 10 / 1000)


def test_capacity_cli_errors_name_the_input(lab: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    def fails(*args: str) -> str:
        assert main(["--db", str(lab), "capacity", *_models(lab), "--model", "naive", *args]) == 1
        return capsys.readouterr().err

    assert "no series for cluster 'nope'; the store has lab" in fails("--cluster", "nope")
    assert "its scopes are vc1, vc2" in fails("--cluster", "lab", "--scope", "vc9")
    bad = tmp_path / "bad.csv"
    bad.write_text("start,end,gpus,scope\n2026-01-14T01:00,2026-01-14T02:00,4,vc1\n"
                   "2026-01-14T01:00,2026-01-14T02:00,many,vc1\n")
    err = fails("--cluster", "lab", "--reservations", str(bad))
    assert f"{bad}, line 3, column 'gpus'" in err and "'many'" in err
    bad.write_text("start,end,gpus,scope\n2026-01-14T01:00,2026-01-14T02:00,4,vc7\n")
    err = fails("--cluster", "lab", "--reservations", str(bad))
    assert "line 2, column 'scope'" in err and "vc7" in err and "vc1" in err
    assert "watts-per-gpu" in fails("--cluster", "lab", "--watts-per-gpu", "lots")
    assert "quantile" in fails("--cluster", "lab", "--quantile", "1.5")


def test_report_cli_shows_plans_backtests_and_stays_self_contained(
        lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(lab), "backtest", "--models", "naive,seasonal_naive", "--all",
                 "--horizon", "1d", "--windows", "3", "--summary", "--planning", "-q"]) == 0
    printed = capsys.readouterr().out
    assert "planning backtest" in printed and "static peak" in printed
    output = tmp_path / "report.html"
    assert main(["--db", str(lab), "report", *_models(lab), "--output", str(output),
                 "--model", "naive", "--horizon", "6h"]) == 0
    assert "wrote" in capsys.readouterr().out
    html = output.read_text()
    assert "Cluster lab" in html and "lab / vc1" in html and "lab / vc2" in html
    # the accuracy table of the backtest above, and its planning rows next to the references
    accuracy = html[html.index("id='accuracy'"):]
    assert "naive" in accuracy and "seasonal_naive" in accuracy and "mase" in accuracy
    assert "seasonal_naive p90" in html and "static peak" in html and "oracle" in html
    assert "Primitive breakdown" in html
    # nothing to fetch: every src and href is inline or an anchor
    for link in re.findall(r"(?:src|href)='([^']*)'", html):
        assert link.startswith(("data:", "#")), link
    assert "http://" not in html and "https://" not in html
    assert len(re.findall(r"<img [^>]*src='data:image/png;base64,", html)) >= 2
    # the capacity table shows what `prism capacity` computes
    plan = {r["scope"]: r for r in _capacity_json(lab, capsys)["rows"]}
    for scope, row in plan.items():
        cells = re.search(rf"data-scope='{scope}'>(.*?)</tr>", html)
        assert cells is not None
        needed = re.search(r"data-field='gpus_needed' data-value='([^']+)'", cells.group(1))
        assert needed is not None
        # the report plans at its own quantile (0.95), the JSON above at 0.9
        assert float(needed.group(1)) >= row["gpus_needed"] - 1e-9


def test_report_errors(lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(lab), "report", *_models(lab), "--output",
                 str(tmp_path / "r.txt")]) == 1
    assert ".html" in capsys.readouterr().err
    assert main(["--db", str(lab), "report", *_models(lab), "--output",
                 str(tmp_path / "no" / "r.html")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_an_empty_report_says_so() -> None:
    html = render_html(ReportData(horizon="1d", quantile=0.95, model="prism",
                                  generated_at=datetime(2026, 1, 1), clusters=()))
    assert "No cluster has a demand series" in html and "No backtest saved yet" in html


@pytest.mark.slow
def test_report_pdf(lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chromium.require()
    output = tmp_path / "report.html"
    assert main(["--db", str(lab), "report", *_models(lab), "--output", str(output),
                 "--model", "naive", "--horizon", "6h", "--pdf"]) == 0, capsys.readouterr().err
    pdf = output.with_suffix(".pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and pdf.count(b"/Type /Page") >= 2


def _planning(prism_saved: float, prism_unmet: float) -> pd.DataFrame:
    """A planning table of totals: yesterday's peak saves 35 % with 0.5 % unmet; prism's p95
    (the report's quantile) and p99 as given, p99 saving 10 points less with half the unmet."""
    rows = [("yesterday's peak", "", np.nan, 0.35, 0.005),
            ("prism p95", "prism", 0.95, prism_saved, prism_unmet),
            ("prism p99", "prism", 0.99, prism_saved - 0.1, prism_unmet / 2),
            ("naive p95", "naive", 0.95, 0.5, 0.001)]
    return pd.DataFrame([{"metric": "gpus_in_use", "plan": plan, "model": model,
                          "quantile": q, "block": "1d", "series": 2, "windows": 7,
                          "idle_gpu_hours": 100 * (1 - saved), "saved_share": saved,
                          "unmet_gpu_hours": 1000 * unmet, "unmet_share": unmet,
                          "demand_gpu_hours": 1000.0} for plan, model, q, saved, unmet in rows])


def _report(planning: pd.DataFrame | None, accuracy: pd.DataFrame | None = None) -> str:
    """The page of one cluster with this planning table and accuracy, as text (unescaped)."""
    from prism.forecasters import get_forecaster

    history = pd.DataFrame({"series_id": "lab/vc1/gpus_in_use",
                            "ts": pd.date_range(START, periods=288, freq="10min"),
                            "value": np.tile([4.0, 6.0], 144)})
    forecast = get_forecaster("naive").fit(history).predict("6h", list(DISTRIBUTION_LEVELS))
    plan = plan_capacity(forecast, {"vc1": 8.0}, quantile=0.95, freq_s=600)
    section = ClusterSection(cluster="lab", plan=plan, scopes=(), planning=planning)
    return unescape(render_html(ReportData(horizon="6h", quantile=0.95, model="prism",
                                           generated_at=datetime(2026, 1, 1),
                                           clusters=(section,), accuracy=accuracy)))


LOSES = "prism's plan does not beat yesterday's peak on this backtest"


def test_report_warns_when_prism_does_not_beat_yesterdays_peak() -> None:
    # p95 saves 20 % with 0.2 % unmet, p99 10 % with 0.1 %: none saves the 35 % of yesterday's
    # peak with no more than its 0.5 % unmet
    html = _report(_planning(0.20, 0.002))
    assert LOSES in html
    assert ("provisioning each VC at yesterday's peak saved 35.0 % of the static peak's idle "
            "GPU-hours with 0.50 % of demand unmet, while the best prism quantile leaving no "
            "more unmet, p95, saved only 20.0 % (0.20 % unmet)") in html
    assert "gpus_in_use, daily levels" in html
    # every quantile leaves more unmet
    assert "every prism quantile backtested left more demand unmet" in _report(
        _planning(0.30, 0.02))


def test_report_stays_quiet_when_prism_beats_yesterdays_peak() -> None:
    # p95 saves 40 % with 0.2 % unmet: more saved, less unmet
    html = _report(_planning(0.40, 0.002))
    assert LOSES not in html and "class='warning'" not in html
    # no backtest of prism: nothing to warn about
    naive_only = _planning(0.2, 0.002)
    html = _report(naive_only[naive_only["model"] != "prism"])
    assert LOSES not in html and "class='warning'" not in html


def test_report_warns_when_coverage_is_below_nominal() -> None:
    accuracy = pd.DataFrame({"model": ["prism", "naive"], "coverage_80": [0.83, 0.5],
                             "coverage_90": [0.84, 0.6]})
    html = _report(None, accuracy)
    assert ("prism's forecasts are overconfident: in the last accuracy backtest its central "
            "90 % interval held only 84.0 % of the actual values (nominal 90 %)") in html
    assert "central 80 % interval" not in html  # 83 % covered: at least nominal
    fine = accuracy.assign(coverage_90=[0.91, 0.6])
    assert "overconfident" not in _report(None, fine)
