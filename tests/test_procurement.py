"""Procurement plans (#16 item 5): each scope's daily level projected from the Theil-Sen trend
of its daily peaks, the day capacity runs out and the GPUs to buy; the same numbers from
``prism capacity --procurement 30d`` and ``GET /v1/capacity?procurement=30d``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

from prism import usecases
from prism.cli import main
from prism.client import PrismClient
from prism.config import Settings
from prism.procurement import daily_levels, fit_trend, plan_procurement
from prism.usecases.capacity import plan_cluster_procurement
from service.app import create_app
from tests.factories import write_series_store
from tests.service.conftest import LiveServer

START = pd.Timestamp("2026-11-01")
DAYS = 42  # six weeks of hourly points
LAST_DAY = START + pd.Timedelta(days=DAYS - 1)


def _write_store(folder: Path) -> Path:
    """Hourly series of cluster ``lab``: vc-up's daily peak rises 2 GPUs a day (110 + 2 d,
    plus a constant queue of 4), vc-flat's stays at 60, ``all`` is their sum (170 + 2 d).
    Capacities: vc-up 200, vc-flat 100, all 300."""
    hours = np.arange(DAYS * 24)
    day, hour = hours // 24, hours % 24
    wave = np.sin(2 * np.pi * hour / 24)  # 1 at 06:00 each day
    up = 100 + 2 * day + 10 * wave
    flat = 50 + 10 * wave
    series = {"lab/vc-up/gpus_in_use": up, "lab/vc-up/gpus_pending": np.full(len(hours), 4.0),
              "lab/vc-flat/gpus_in_use": flat, "lab/all/gpus_in_use": up + flat}
    return write_series_store(folder, series, "cluster,scope,gpus\nlab,vc-up,200\n"
                              "lab,vc-flat,100\nlab,all,300\n", start=START, freq="1h",
                              decimals=6)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_store(tmp_path_factory.mktemp("procurement"))


def test_theil_sen_ignores_a_burst_day() -> None:
    values = 100 + 2.0 * np.arange(28)
    values[10] += 500  # one burst day: a least-squares line would tilt
    trend = fit_trend(values)
    assert trend.slope == pytest.approx(2.0)
    assert trend.low <= 2.0 <= trend.high
    assert float(trend.at(27)) == pytest.approx(154.0)


def test_daily_levels_add_the_mean_queue_and_skip_partial_days() -> None:
    ts = pd.date_range("2026-01-01", periods=24 * 2 + 5, freq="1h")  # 2 days and 5 hours
    in_use = pd.DataFrame({"series_id": "c/v/gpus_in_use", "ts": ts,
                           "value": np.arange(len(ts), dtype=float)})
    queue = pd.DataFrame({"series_id": "c/v/gpus_in_use", "ts": ts,
                          "value": np.where(ts.hour < 12, 2.0, 0.0)})
    daily = daily_levels(in_use, freq_s=3600, queue=queue)
    assert list(daily["day"]) == [pd.Timestamp("2026-01-01"), pd.Timestamp("2026-01-02")]
    assert list(daily["peak"]) == [23.0, 47.0]
    assert list(daily["level"]) == [24.0, 48.0]  # + the day's mean queue (1)


def test_an_upward_trend_projects_the_date_and_the_gpus(db: Path) -> None:
    with usecases.open_store(db) as store:
        plan = plan_cluster_procurement(store, "lab", horizon="30d", weeks=4)
    rows = {r.scope: r for r in plan.rows}
    up, flat, cluster = rows["vc-up"], rows["vc-flat"], rows["all"]
    assert up.days_fitted == 28 and up.last_day == LAST_DAY.to_pydatetime()
    # vc-up's level: 110 + 2 d + 4 (queue); the last day d = 41 is at 196
    assert up.slope_per_day == pytest.approx(2.0, abs=1e-6)
    assert up.trend_now == pytest.approx(196.0, abs=1e-3)
    assert up.margin == pytest.approx(0.0, abs=1e-6)
    assert up.projected_peak == pytest.approx(196.0 + 2 * 30, abs=1e-3)  # day 71
    assert up.needed_gpus == 56
    assert up.exceeds_on == (LAST_DAY + pd.Timedelta(days=3)).to_pydatetime()  # 202 > 200
    assert up.action == "needs" and "vc-up needs +56 GPUs by" in up.text
    assert f"{LAST_DAY + pd.Timedelta(days=3):%Y-%m-%d}" in up.text
    # the cluster: the sum of its VCs' projections (114 + 2 d + 60, vc-up's queue included)
    # against 300: exceeded on day 64, +16 GPUs by the end: vc-up's 56 less vc-flat's 40
    # spare; its own peaks (170 + 2 d, no queue series) are quoted, not used
    assert cluster.projected_peak == pytest.approx(316.0, abs=1e-3)
    assert cluster.slope_per_day == pytest.approx(2.0, abs=1e-6)
    assert cluster.needed_gpus == 16 and cluster.action == "buy"
    assert cluster.exceeds_on == (LAST_DAY + pd.Timedelta(days=23)).to_pydatetime()
    assert cluster.reason.startswith("the sum of the VCs' projections (vc-flat, vc-up")
    assert "the cluster's own daily levels trend +2.00 GPUs/day (projected peak 312.0)" \
        in cluster.reason
    summed = plan.days[plan.days["scope"] == "all"]["projected"].to_numpy()
    assert summed == pytest.approx(
        sum(plan.days[plan.days["scope"] == s]["projected"].to_numpy()
            for s in ("vc-up", "vc-flat")))
    # flat: no purchase, never exceeded at this trend
    assert flat.slope_per_day == pytest.approx(0.0, abs=1e-9)
    assert flat.projected_peak == pytest.approx(60.0, abs=1e-3)
    assert (flat.needed_gpus, flat.exceeds_on, flat.action) == (0, None, "keep")
    assert flat.text.startswith("no purchase")
    days = plan.days[plan.days["scope"] == "vc-up"]
    assert len(days) == 30 and days["projected"].iloc[0] == pytest.approx(198.0, abs=1e-3)
    # growth multiplies the projection
    with usecases.open_store(db) as store:
        grown = plan_cluster_procurement(store, "lab", horizon="30d", growth=1.1, scope="vc-up")
    assert grown.rows[0].projected_peak == pytest.approx(1.1 * 256.0, abs=1e-3)


def test_a_flat_noisy_series_buys_nothing() -> None:
    rng = np.random.default_rng(3)
    days = pd.date_range("2026-01-01", periods=35, freq="D")
    daily = pd.DataFrame({"series_id": "c/v/gpus_in_use", "day": days,
                          "level": 50 + rng.normal(0, 3, len(days))})
    plan = plan_procurement(daily, {"v": 80.0}, horizon_days=30, weeks=4)
    [row] = plan.rows
    assert row.slope_low is not None and row.slope_high is not None
    assert row.slope_low <= 0.0 <= row.slope_high  # no clear trend
    assert row.needed_gpus == 0 and row.action == "keep"
    assert row.projected_peak is not None and row.projected_peak < 70


def test_a_vc_that_shares_its_gpus_is_not_promised_moves() -> None:
    days = pd.date_range("2026-01-01", periods=28, freq="D")
    ramp = np.linspace(10.0, 20.0, len(days))
    daily = pd.concat([pd.DataFrame({"series_id": f"c/{s}/gpus_in_use", "day": days,
                                     "level": ramp}) for s in ("train", "debug")])
    split = {r.scope: r for r in plan_procurement(
        daily, {"all": 32.0, "train": 16.0, "debug": 16.0}, horizon_days=30).rows}
    assert split["train"].action == "needs" and "moves from other VCs" in split["train"].text
    # the same two partitions over the same 16 GPUs
    shared = {r.scope: r for r in plan_procurement(
        daily, {"all": 16.0, "train": 16.0, "debug": 16.0}, horizon_days=30).rows}
    assert shared["train"].action == "needs"
    assert "moves" not in shared["train"].text and "shares its GPUs" in shared["train"].text


def test_too_little_history_says_so() -> None:
    days = pd.date_range("2026-01-01", periods=4, freq="D")
    daily = pd.DataFrame({"series_id": "c/v/gpus_in_use", "day": days, "level": 1.0})
    [row] = plan_procurement(daily, {"v": 8.0}, horizon_days=30).rows
    assert row.action == "no trend" and "needs 7" in row.text and row.projected_peak is None


def test_the_cli_and_the_api_give_the_same_procurement(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = tmp_path / "models"
    capsys.readouterr()
    argv = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(models), "--procurement", "30d"]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["rows"]  # the day-ahead plan beside it
    config = Settings(db=str(db), models_dir=models, default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    with LiveServer(create_app(config)) as live:  # over HTTP
        api = httpx.get(f"{live.url}/v1/capacity", timeout=60,
                        params={"cluster": "lab", "procurement": "30d", "steps": "true"})
        assert api.status_code == 200, api.text
        bad = httpx.get(f"{live.url}/v1/capacity", timeout=60,
                        params={"cluster": "lab", "procurement": "6h"})
        assert bad.status_code == 422
        assert "procurement '6h' is shorter than a day" in bad.json()["detail"]
        plain = httpx.get(f"{live.url}/v1/capacity", params={"cluster": "lab"}, timeout=60)
        assert plain.status_code == 200 and plain.json()["procurement"] is None
        with PrismClient(live.url, token="") as prism:
            by_client = prism.procurement("lab", horizon="30d", scope="vc-up")
    body = api.json()["procurement"]
    assert [r["needed_gpus"] for r in by_client] == [56]
    assert by_client[0]["text"] == next(r["text"] for r in body["rows"]
                                        if r["scope"] == "vc-up")
    cli_rows = {r["scope"]: r for r in printed["procurement"]["rows"]}
    api_rows = {r["scope"]: r for r in body["rows"]}
    assert set(cli_rows) == set(api_rows) == {"all", "vc-up", "vc-flat"}
    for scope, row in api_rows.items():
        for field in ("projected_peak", "slope_per_day", "trend_now", "capacity"):
            assert cli_rows[scope][field] == pytest.approx(row[field], abs=1e-6), field
        assert cli_rows[scope]["needed_gpus"] == row["needed_gpus"]
        assert cli_rows[scope]["exceeds_on"] == row["exceeds_on"]
        assert cli_rows[scope]["text"] == row["text"]
    assert api_rows["vc-up"]["needed_gpus"] == 56 and len(api_rows["vc-up"]["days"]) == 30
    assert api_rows["vc-up"]["exceeds_on"].startswith(
        f"{LAST_DAY + pd.Timedelta(days=3):%Y-%m-%d}")
    # the table, and a bad horizon naming the flag
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "lab procurement" in shown and "vc-up needs +56 GPUs" in shown
    assert main([*argv[:-1], "6h"]) == 1
    assert "--procurement '6h' is shorter than a day" in capsys.readouterr().err


def test_the_cluster_is_projected_from_its_vcs_and_never_below_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``prism capacity --procurement 30d``: the cluster's purchase adds up from its VCs'
    projections (its own trend quoted beside), and a falling trend projects 0 GPUs, never a
    negative count, saying so."""
    hours = np.arange(10 * 24)
    day, wave = hours // 24, np.sin(2 * np.pi * (hours % 24) / 24)
    grow = 20 + 3 * day + 2 * wave  # +3 GPUs a day
    fall = np.clip(90 - 9 * day + 2 * wave, 0, None)  # -9 GPUs a day, 9 days to 0
    db = write_series_store(tmp_path, {
        "lab/vc-grow/gpus_in_use": grow, "lab/vc-fall/gpus_in_use": fall,
        "lab/all/gpus_in_use": grow + fall}, "cluster,scope,gpus\nlab,vc-grow,40\n"
        "lab,vc-fall,100\nlab,all,140\n", start=START, freq="1h", decimals=6)
    capsys.readouterr()
    assert main(["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
                 "--models-dir", str(tmp_path / "models"), "--no-record", "--procurement",
                 "30d", "--json", "--steps"]) == 0
    rows = {r["scope"]: r for r in json.loads(capsys.readouterr().out)["procurement"]["rows"]}
    fall_row, grow_row, cluster = rows["vc-fall"], rows["vc-grow"], rows["all"]
    for row in rows.values():
        assert min(min(d["projected"], d["low"], d["high"]) for d in row["days"]) >= 0.0
        assert row["projected_low"] >= 0.0
    assert "falls below 0 GPUs" in fall_row["reason"] and "floored at 0" in fall_row["reason"]
    assert "below 0" not in grow_row["reason"]
    # the cluster: the VCs' days added up, so its purchase is what the VCs' rows need less
    # what one's spare GPUs cover of the other's
    assert [d["projected"] for d in cluster["days"]] == pytest.approx(
        [g["projected"] + f["projected"] for g, f in zip(grow_row["days"], fall_row["days"],
                                                         strict=True)])
    assert cluster["projected_peak"] == pytest.approx(
        max(d["projected"] for d in cluster["days"]))
    assert cluster["needed_gpus"] == max(0, math.ceil(cluster["projected_peak"] - 140 - 1e-9))
    assert cluster["reason"].startswith("the sum of the VCs' projections")
    assert "the cluster's own daily levels trend" in cluster["reason"]


def test_no_complete_day_plans_the_day_ahead_and_says_no_trend(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two days of history that start at 00:10 and stop at 23:40 hold no complete UTC day:
    ``prism capacity --procurement 30d`` still prints the day-ahead plan, and every scope's
    procurement row (the CLI's and the use case the API calls) says "no trend" and why."""
    steps = 2 * 144 - 3  # 00:10 on day 1 to 23:40 on day 2
    wave = 20 + 5 * np.sin(2 * np.pi * np.arange(steps) / 144)
    db = write_series_store(tmp_path, {
        "lab/vc-a/gpus_in_use": wave, "lab/vc-b/gpus_in_use": wave + 5,
        "lab/all/gpus_in_use": 2 * wave + 5}, "cluster,scope,gpus\nlab,vc-a,40\n"
        "lab,vc-b,40\nlab,all,80\n", start=START + pd.Timedelta(minutes=10))
    capsys.readouterr()
    argv = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(tmp_path / "models"), "--no-record", "--procurement", "30d"]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {r["scope"] for r in printed["rows"]} == {"all", "vc-a", "vc-b"}  # the day ahead
    rows = {r["scope"]: r for r in printed["procurement"]["rows"]}
    assert set(rows) == {"all", "vc-a", "vc-b"}
    for row in rows.values():
        assert (row["action"], row["days_fitted"], row["needed_gpus"]) == ("no trend", 0, 0)
        assert row["projected_peak"] is None and "a trend needs 7" in row["text"]
        assert "0 complete UTC day(s)" in row["reason"]
        assert row["start"].startswith(f"{START + pd.Timedelta(days=2):%Y-%m-%d}")
    with usecases.open_store(db) as store:  # what GET /v1/capacity?procurement=30d calls
        plan = plan_cluster_procurement(store, "lab", horizon="30d", scope="vc-a")
    assert [(r.scope, r.action) for r in plan.rows] == [("vc-a", "no trend")]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "lab procurement" in shown and "vc-b: no trend: 0 complete day(s)" in shown
