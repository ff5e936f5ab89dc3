"""`prism capacity` and `prism report` as a user runs them, on a small store of two VCs, and
the report a capacity planner reads (issue #16 item 6) on a store whose scopes overlap (two VCs,
``all`` and ``gpu:V100``), against a real server's ``GET /v1/capacity``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism import usecases
from prism.capacity import DISTRIBUTION_LEVELS, plan_capacity
from prism.cli import main
from prism.config import Settings
from prism.day_kind import day_kind_floor
from prism.evaluation.planning import ORACLE, STATIC, YESTERDAY, planning_backtest
from prism.reports.capacity import ClusterSection, ReportData, render_html
from prism.reports.tables import TOTAL_FIELDS
from prism.usecases.capacity import SavedModels
from prism.usecases.report import capacity_report
from service.app import create_app
from tests import chromium
from tests.factories import get_when_fitted, table_cells, write_series_store
from tests.service.conftest import LiveServer

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
    plan = _capacity_json(lab, capsys, "--steps", "--no-day-floor")
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
    # by default each step is sized at least at its day-kind floor, from the history
    with usecases.open_store(lab) as store:
        history = store.load_panel(sorted(set(fc["series_id"])), end=fc["ts"].min())
    steps = fc[["series_id", "ts"]].assign(cutoff=fc["ts"].min() - pd.Timedelta("10min"))
    floor = day_kind_floor(history, steps, freq_s=600)
    assert floor["floor"].notna().all()
    floored = plan_capacity(fc, {"vc1": 40.0, "vc2": 25.0}, quantile=0.9, freq_s=600,
                            floor=floor)
    default = {r["scope"]: r for r in _capacity_json(lab, capsys, "--steps")["rows"]}
    for row in floored.rows:
        got = default[row.scope]
        assert got["gpus_needed"] == pytest.approx(row.gpus_needed, rel=1e-6)
        assert got["gpus_needed"] >= rows[row.scope]["gpus_needed"] - 1e-9
        assert got["reason"] == row.reason
        lows = floor.loc[floor["series_id"] == row.series_id, "floor"].max()
        assert got["in_use_needed"] == pytest.approx(max(lows, rows[row.scope]["in_use_needed"]))
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
    # naive was backtested: the seasonal naive against it, as printed, is what the report keeps
    row = next(line for line in printed.splitlines()
               if "seasonal_naive" in line and "[" in line and "]" in line)
    ratio = re.findall(r"\d+\.\d{3}", row)[0]
    output = tmp_path / "report.html"
    assert main(["--db", str(lab), "report", *_models(lab), "--output", str(output),
                 "--model", "naive", "--horizon", "6h"]) == 0
    assert "wrote" in capsys.readouterr().out
    html = output.read_text()
    assert "Cluster lab" in html and "lab / vc1" in html and "lab / vc2" in html
    # the accuracy table of the backtest above, and its planning rows next to the references
    accuracy = html[html.index("id='accuracy'"):]
    assert "naive" in accuracy and "seasonal_naive" in accuracy and "mase" in accuracy
    assert "avg_rel_mae" in accuracy and "catastrophes" in accuracy and ratio in accuracy
    assert "seasonal_naive p90" in html and "static peak" in html and "oracle" in html
    assert "Primitive breakdown" in html
    # nothing to fetch: every src and href is inline or an anchor
    for link in re.findall(r"(?:src|href)='([^']*)'", html):
        assert link.startswith(("data:", "#")), link
    assert "http://" not in html and "https://" not in html
    # inline SVG charts: GPUs in use against capacity for each scope, units on the axes
    assert html.count('class="chart usage"') == 2
    assert html.count(">time (UTC)</text>") >= 2 and ">GPUs in use (GPUs)</text>" in html
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
    # 89.6 % over 140 windows: its interval over windows holds 90 %, so no warning ...
    noise = accuracy.assign(coverage_90=[0.896, 0.6], coverage_lo=[0.86, 0.5],
                            coverage_hi=[0.93, 0.7])
    assert "overconfident" not in _report(None, noise)
    # ... whereas a band whose whole interval is below nominal is overconfident, surely
    below = noise.assign(coverage_90=[0.84, 0.6], coverage_hi=[0.87, 0.7])
    assert ("held only 84.0 % of the actual values (the 95 % interval over windows ends at "
            "87.0 %) (nominal 90 %)") in _report(None, below)


def test_report_progress_names_each_stage_once(lab: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    with usecases.open_store(lab) as store:
        report = capacity_report(store, SavedModels("naive", models_dir=lab.parent / "models"),
                                 horizon="6h", progress=lambda *a: calls.append(a))
    assert report.clusters == ("lab",)
    assert calls == [("lab: plan", 1, 4), ("lab: history and breakdown", 2, 4),
                     ("lab: planning backtest", 3, 4), ("render", 4, 4)]


# -- the report a capacity planner reads -------------------------------------------------------
VCS = {"vc1": 40.0, "vc2": 25.0}
QUERY = {"cluster": "lab", "horizon": "6h", "quantile": "0.95"}


@dataclass(frozen=True)
class Planner:
    """A store of two VCs, ``all`` and ``gpu:V100`` (the same GPUs three ways), the API's plan
    of it and the report ``prism report`` wrote with the server's saved model."""

    db: Path
    api: dict
    html: str
    path: Path


@pytest.fixture(scope="module")
def planner(tmp_path_factory: pytest.TempPathFactory) -> Planner:
    folder = tmp_path_factory.mktemp("planner")
    rng = np.random.default_rng(11)
    n = 144 * DAYS
    day = np.sin(2 * np.pi * np.arange(n) / 144)
    vc1 = np.clip(20 + 6 * day + rng.normal(0, 1.5, n), 0, 40)
    vc2 = np.clip(8 + 3 * day + rng.normal(0, 1.0, n), 0, 25)
    pending = np.clip(3 + 3 * day + rng.normal(0, 1.0, n), 0, None)
    series = {"lab/vc1/gpus_in_use": vc1, "lab/vc1/gpus_pending": pending,
              "lab/vc2/gpus_in_use": vc2, "lab/all/gpus_in_use": vc1 + vc2,
              "lab/all/gpus_pending": pending, "lab/gpu:V100/gpus_in_use": vc1 + vc2}
    db = write_series_store(folder, series, "cluster,scope,gpus\nlab,vc1,40\nlab,vc2,25\n"
                            "lab,all,65\n", start=START)
    models = folder / "models"
    config = Settings(db=str(db), models_dir=models, default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    with LiveServer(create_app(config)) as live:
        response = get_when_fitted(f"{live.url}/v1/capacity", QUERY)
    output = folder / "report.html"
    assert main(["--db", str(db), "report", "--cluster", "lab", "--models-dir", str(models),
                 "--model", "naive", "--horizon", "6h", "--quantile", "0.95",
                 "--output", str(output)]) == 0
    return Planner(db, response.json(), output.read_text(encoding="utf-8"), output)


@pytest.mark.slow
def test_one_planning_table_totals_one_partition(planner: Planner) -> None:
    html = planner.html
    # one planning table for the cluster, none per scope
    assert html.count("<table class='planning'") == 1 and "planning-scope" not in html
    table = re.search(r"<table class='planning' data-partition='vcs' data-scopes='vc1 vc2'>"
                      r"<caption>(.*?)</caption>.*?<tbody>(.*?)</tbody>", html)
    assert table is not None
    assert "adds up the 2 VC(s) (vc1, vc2)" in table.group(1)
    assert "all, gpu:V100 count the same GPUs again and are not added" in table.group(1)
    rows = [table_cells(r) for r in re.findall(r"<tr>(.*?)</tr>", table.group(2))]
    assert rows and all(float(r["series"]) == 2 for r in rows)
    shown = {(r["plan"], r["block"]): float(r["idle_gpu_hours"]) for r in rows}
    # the references replayed on the VCs alone add up to the table; on every scope they would
    # count the cluster's GPUs three times
    with usecases.open_store(planner.db) as store:
        every = store.load_panel([f"lab/{s}/gpus_in_use" for s in ("vc1", "vc2", "all",
                                                                    "gpu:V100")])
    caps = {f"lab/{s}/gpus_in_use": c for s, c in {**VCS, "all": 65.0, "gpu:V100": 65.0}.items()}
    replay = planning_backtest(None, every, days=7, horizon="1d", quantiles=(0.9, 0.95, 0.99),
                               blocks=("1d", "1h"), capacity=caps).by_series
    vcs = replay[replay["series_id"].isin(["lab/vc1/gpus_in_use", "lab/vc2/gpus_in_use"])]
    for plan in (STATIC, YESTERDAY, ORACLE):
        for block in ("1d", "1h"):
            mine = vcs[(vcs["plan"] == plan) & (vcs["block"] == block)]
            assert len(mine) == 2
            assert shown[plan, block] == pytest.approx(mine["idle_gpu_hours"].sum(), rel=1e-9)
            everything = replay[(replay["plan"] == plan) & (replay["block"] == block)]
            assert everything["idle_gpu_hours"].sum() > 2 * shown[plan, block]


def _api_totals(api: dict) -> dict[str, float]:
    rows = [r for r in api["rows"] if r["scope"] in VCS]
    assert len(rows) == 2
    return {f: float(sum(r[f] for r in rows)) for f in TOTAL_FIELDS}


def test_the_capacity_total_is_the_vcs_and_the_apis(planner: Planner) -> None:
    total = re.search(r"<tfoot><tr class='total' data-total='vcs' data-scopes='vc1 vc2'>(.*?)"
                      r"</tr></tfoot>", planner.html)
    assert total is not None and planner.html.count("class='total'") == 1
    cells = table_cells(total.group(1))
    assert cells["scope"] == "total of the VCs"
    expected = _api_totals(planner.api)
    for field in TOTAL_FIELDS:
        assert float(cells[field]) == pytest.approx(expected[field], abs=1e-3), field
    assert float(cells["capacity"]) == 65.0  # not 65 + 65 + 65 + 40 + 25


@pytest.mark.slow
def test_the_report_in_chromium_draws_the_sized_level_and_now(planner: Planner) -> None:
    chromium.require()
    rows = {r["scope"]: r for r in planner.api["rows"]}
    assert set(rows) == {"all", "gpu:V100", "vc1", "vc2"}
    assert any(r["net_gpus"] for r in rows.values())  # the advised line below is drawn
    with chromium.Chromium() as b:
        b.open(planner.path.as_uri())
        charts = b.evaluate("""Array.from(document.querySelectorAll('svg.chart')).map(svg => {
            const box = g => { if (!g) return null; const r = g.querySelector('path')
                .getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top,
                width: r.width, height: r.height, data: Object.assign({}, g.dataset)}; };
            return {id: svg.id, kind: svg.classList[1], sized: box(svg.querySelector(
                'g.sized-level')), now: box(svg.querySelector('g.now-marker')),
                capacity: box(svg.querySelector('g.capacity-line')),
                advised: box(svg.querySelector('g.advised-level')),
                history: box(svg.querySelector('g.history-line')),
                allowance: box(svg.querySelector('g.queue-allowance')),
                texts: Array.from(svg.querySelectorAll('text')).map(t => t.textContent)}; })""")
        total = b.evaluate("""Object.fromEntries(Array.from(document.querySelectorAll(
            'table.capacity tr.total td[data-value]')).map(td => [td.dataset.field,
            Number(td.dataset.value)]))""")
        fetched = b.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        errors = b.console_errors()
    assert errors == [] and fetched == []
    usage = {c["id"]: c for c in charts if c["kind"] == "usage"}
    assert set(usage) == {f"usage-lab-{s}" for s in ("all", "gpu-V100", "vc1", "vc2")}
    for scope, row in rows.items():
        chart = usage[f"usage-lab-{scope.replace(':', '-')}"]
        sized, now, cap, history = (chart[k] for k in ("sized", "now", "capacity", "history"))
        # the sized level: a horizontal line over the window, at the API's GPUs needed
        assert float(sized["data"]["gpus"]) == pytest.approx(row["gpus_needed"], abs=1e-3)
        assert sized["width"] > 5 and sized["height"] < 1
        assert f"sized p95: {float(sized['data']['gpus']):,.1f} GPUs" in " ".join(chart["texts"])
        # "now": a vertical line at the forecast origin, where the sized line starts
        assert now["height"] > 50 and now["width"] < 1
        assert pd.Timestamp(now["data"]["ts"]) == pd.Timestamp(row["start"])
        assert abs(sized["left"] - now["left"]) < 1
        assert any(t.startswith("now 2026-01-14 00:00 UTC") for t in chart["texts"])
        # above or below the capacity line as the numbers say (screen y grows downwards)
        assert float(cap["data"]["gpus"]) == row["capacity"]
        assert (sized["top"] < cap["top"]) == (row["gpus_needed"] > row["capacity"])
        # the capacity after the advice, where it changes it; a VC has what it needs then
        if row["net_gpus"]:
            advised = float(chart["advised"]["data"]["gpus"])
            assert advised == row["capacity"] + row["net_gpus"]
            if scope in VCS:
                assert chart["advised"]["top"] <= sized["top"] + 0.5
        else:
            assert chart["advised"] is None
        # at least 7 days of history before now: 28 times the 6 h window's width
        assert (now["left"] - history["left"]) >= 27.9 * sized["width"]
        assert pd.Timestamp(history["data"]["start"]) <= pd.Timestamp(row["start"]) - \
            pd.Timedelta(days=7)
        assert {"time (UTC)", "GPUs in use (GPUs)"} <= set(chart["texts"])
    # the queue in its own chart, for the scopes with a queue series
    queue = {c["id"]: c for c in charts if c["kind"] == "queue"}
    assert set(queue) == {"queue-lab-all", "queue-lab-vc1"}
    for scope in ("all", "vc1"):
        chart = queue[f"queue-lab-{scope}"]
        assert float(chart["allowance"]["data"]["gpus"]) == pytest.approx(
            rows[scope]["queue_allowance"], abs=1e-3)
        assert chart["now"]["height"] > 20 and chart["sized"] is None
        assert {"time (UTC)", "queued (GPUs)"} <= set(chart["texts"])
    # the primitive breakdown in GPUs, with labelled axes
    parts = [c for c in charts if c["kind"] == "components"]
    assert parts and all({"GPUs", "GPUs added", "time (UTC)"} <= set(c["texts"]) for c in parts)
    # the totals equal the API's, over the VCs only
    expected = _api_totals(planner.api)
    assert set(total) == set(TOTAL_FIELDS)
    for field in TOTAL_FIELDS:
        assert total[field] == pytest.approx(expected[field], abs=1e-3), field


def _overlapping_store(folder: Path) -> Path:
    """5 days of ``lab``: two VCs' GPUs in use, ``all`` and ``gpu:X`` (their sum: the same
    GPUs again), each scope's queued GPUs and a count of jobs submitted."""
    rng = np.random.default_rng(5)
    n = 144 * 5
    t = np.arange(n)
    a = np.clip(10 + 4 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 1, n), 0, 20)
    b = np.clip(6 + 2 * np.cos(2 * np.pi * t / 144) + rng.normal(0, 1, n), 0, 12)
    series = {}
    for scope, value in (("vc-a", a), ("vc-b", b), ("all", a + b), ("gpu:X", a + b)):
        series[f"lab/{scope}/gpus_in_use"] = value
        series[f"lab/{scope}/gpus_pending"] = rng.poisson(3, n).astype(float)
        series[f"lab/{scope}/jobs_submitted"] = rng.poisson(40, n).astype(float)
    return write_series_store(folder, series, "cluster,scope,gpus\nlab,vc-a,20\nlab,vc-b,12\n"
                              "lab,all,32\n", start=START)


def _planning_rows(printed: str) -> dict[tuple[str, str], list[str]]:
    """The printed planning table: (plan, block) -> its cells after them."""
    rows = {}
    for line in printed.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) >= 8 and cells[1] in ("1d", "1h"):
            rows[cells[0], cells[1]] = cells[2:]
    return rows


def test_the_planning_backtest_of_a_cluster_counts_each_gpu_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`prism backtest --cluster C --planning` plans GPUs in use over the VCs only, not the
    jobs counted, the queue, ``all`` and the GPU types on top (each GPU counted 4 times)."""
    db = _overlapping_store(tmp_path)
    base = ["--db", str(db), "backtest", "--models", "naive", "--horizon", "1d", "--windows",
            "2", "--planning", "-q"]
    capsys.readouterr()
    assert main([*base, "--cluster", "lab"]) == 0
    printed = capsys.readouterr().out
    assert ("planned lab's gpus_in_use: the totals add up the 2 VC(s) (vc-a, vc-b), so that "
            "each GPU counts once; all, gpu:X count the same GPUs again") in " ".join(
        printed.split())
    cluster = _planning_rows(printed)
    with usecases.open_store(db) as store:
        saved = store.latest_evaluation("planning")
    assert saved is not None
    # every scope's GPUs in use is kept per series (prism capacity --max-unmet reuses them);
    # no count of jobs, no queue
    assert sorted(saved[3]["series_id"].unique()) == [
        f"lab/{s}/gpus_in_use" for s in ("all", "gpu:X", "vc-a", "vc-b")]
    # the totals: those of the two VCs named, by hand
    assert main([*base, "--series", "lab/vc-a/gpus_in_use", "--series",
                 "lab/vc-b/gpus_in_use"]) == 0
    by_hand = _planning_rows(capsys.readouterr().out)
    assert cluster == by_hand and cluster[STATIC, "1d"][0] == "2"
    # a metric named is planned as asked, over the same partition
    assert main([*base, "--cluster", "lab", "--metric", "gpus_pending"]) == 0
    printed = capsys.readouterr().out
    assert "planned lab's gpus_pending: the totals add up the 2 VC(s)" in " ".join(
        printed.split())
    assert _planning_rows(printed)[STATIC, "1d"][0] == "2"
    # series named across metrics and overlapping scopes: per metric, each GPU once
    assert main([*base, "--series", "lab/all/gpus_in_use", "--series", "lab/vc-a/gpus_in_use",
                 "--series", "lab/vc-a/jobs_submitted"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "planned lab's gpus_in_use: the totals add up the 1 VC(s) (vc-a)" in printed
    assert "all count the same GPUs again" in printed
    assert "planned lab's jobs_submitted" in printed and "metric" in printed


# -- series that end at different times ------------------------------------------------------
def _scope_html(html: str, cluster: str, scope: str) -> str:
    found = re.search(rf"<section class='scope' id='scope-{cluster}-{scope}'>(.*?)</section>",
                      html, re.S)
    assert found is not None, scope
    return found.group(1)


def test_a_series_that_stopped_early_neither_cuts_the_others_nor_adds_into_the_total(
        tmp_path: Path) -> None:
    # prom: team-a and team-b sampled to 2026-01-14 23:50, team-old stopped at 2026-01-11
    # 22:30. The report cut every chart to 2026-01-11 22:30 ("6.9 days ... all the store
    # holds", a 3-day hole before now) and added team-old's past plan into the total.
    # short: vc2 has 3 points at the end; every scope showed "0.0 days of history".
    n = 144 * 10
    day = np.sin(2 * np.pi * np.arange(n) / 144)
    series = {"prom/team-a/gpus_in_use": 30 + 8 * day, "prom/team-b/gpus_in_use": 15 + 4 * day,
              "prom/team-old/gpus_in_use": 12 + 2 * day[:1000],
              "short/vc1/gpus_in_use": 10 + 2 * day}
    db = write_series_store(tmp_path, series, "cluster,scope,gpus\nprom,team-a,60\n"
                            "prom,team-b,40\nprom,team-old,30\nshort,vc1,20\nshort,vc2,20\n",
                            start=START)
    late = tmp_path / "late.csv"
    late.write_text("series_id,ts,value\n" + "".join(
        f"short/vc2/gpus_in_use,2026-01-14T23:{m}:00,3\n" for m in (30, 40, 50)))
    assert main(["--db", str(db), "ingest", str(late), "--format", "long-csv", "-q"]) == 0
    output = tmp_path / "report.html"
    assert main(["--db", str(db), "report", "--output", str(output), "--model", "naive",
                 "--models-dir", str(tmp_path / "models"), "--no-record"]) == 0
    html = output.read_text(encoding="utf-8")

    for scope in ("team-a", "team-b"):
        mine = _scope_html(html, "prom", scope)
        assert ('history-line" data-start="2026-01-08T00:00:00+00:00" '
                'data-end="2026-01-14T23:50:00+00:00"') in mine
        assert "7.0 days of history before now (UTC)</p>" in mine
        assert 'now-marker" data-ts="2026-01-15T00:00:00+00:00"' in mine
        assert "series-end" not in mine and "data-kind='stale'" not in mine
    old = _scope_html(html, "prom", "team-old")
    assert 'data-end="2026-01-11T22:30:00+00:00"' in old
    assert 'series-end" data-ts="2026-01-11T22:40:00+00:00"' in old  # where it stopped
    assert 'now-marker" data-ts="2026-01-15T00:00:00+00:00"' in old  # the cluster's now
    assert ("the series stops before 2026-01-11 22:40 UTC, 3.06 d before the cluster&#x27;s "
            "now (2026-01-15 00:00 UTC)") in old
    assert "<p class='warning' data-kind='stale'>No current data" in old

    # flagged above the table, marked in it, and left out of the total, which says so
    assert ("<p class='warning' data-kind='stale' data-scope='team-old'>team-old has no "
            "current data: its series prom/team-old/gpus_in_use stops before 2026-01-11 "
            "22:40") in html
    assert "data-stale='true' data-cluster='prom' data-scope='team-old'" in html
    table = re.search(r"<table class='capacity' data-cluster='prom'>(.*?)</table>", html, re.S)
    assert table is not None
    rows = {s: table_cells(r) for s, r in re.findall(
        r"<tr class='[^']*'[^>]* data-scope='([^']+)'>(.*?)</tr>", table.group(1))}
    total = re.search(r"<tr class='total' data-total='vcs' data-scopes='team-a team-b'>(.*?)"
                      r"</tr>", table.group(1))
    assert total is not None
    cells = table_cells(total.group(1))
    assert float(cells["capacity"]) == 100.0  # not 130: team-old's 30 GPUs are not added
    assert float(cells["in_use_needed"]) == pytest.approx(
        float(rows["team-a"]["in_use_needed"]) + float(rows["team-b"]["in_use_needed"]))
    caption = re.search(r"<caption>(.*?)</caption>", table.group(1))
    assert caption is not None
    caption_text = unescape(caption.group(1))
    assert caption_text.startswith("The total row adds up the 2 VC(s) (team-a, team-b)")
    assert "team-old is left out: it has no current data" in caption_text
    assert "Window 2026-01-15 00:00 to 2026-01-16 00:00 (UTC)" in html

    # a short series that is current cuts no other history
    assert "7.0 days of history before now (UTC)</p>" in _scope_html(html, "short", "vc1")
    assert "0.0 days of history before now" in _scope_html(html, "short", "vc2")
    short = re.search(r"<table class='capacity' data-cluster='short'>.*?</table>", html, re.S)
    assert short is not None and "data-stale" not in short.group(0)
