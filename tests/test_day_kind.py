"""The day-kind floor of a plan (:mod:`prism.day_kind`): Monday is sized for the Friday before,
not for the quiet Sunday; and ``prism capacity`` sizes by it unless told not to."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

from prism import usecases
from prism.cli import main
from prism.client import PrismClient
from prism.config import Settings
from prism.day_kind import day_kind_floor, is_weekend
from prism.usecases.capacity import plan_cluster_capacity
from service.app import create_app
from tests.factories import HandForecasts, write_series_store
from tests.service.conftest import LiveServer

SID = "lab/vc1/gpus_in_use"
#: Monday 2026-01-05: two weeks of hourly use, 60 GPUs at 14:00 on weekdays, 5 at weekends.
START = pd.Timestamp("2026-01-05")


def week_panel(days: int = 14) -> pd.DataFrame:
    ts = pd.date_range(START, periods=24 * days, freq="1h")
    value = np.where(is_weekend(ts.floor("D")), 2.0, 10.0)
    value[ts.hour == 14] = np.where(is_weekend(ts.floor("D")), 5.0, 60.0)[ts.hour == 14]
    return pd.DataFrame({"series_id": SID, "ts": ts, "value": value})


def plan_rows(cutoff: str, hours: int = 24) -> pd.DataFrame:
    at = pd.Timestamp(cutoff)
    return pd.DataFrame({"series_id": SID, "cutoff": at,
                         "ts": pd.date_range(at + pd.Timedelta("1h"), periods=hours, freq="1h")})


def floors(panel: pd.DataFrame, cutoff: str, hours: int = 24) -> pd.DataFrame:
    history = panel[panel["ts"] <= pd.Timestamp(cutoff)]
    return day_kind_floor(history, plan_rows(cutoff, hours), freq_s=3600)


def test_monday_is_sized_for_the_friday_before() -> None:
    # the plan for Monday 2026-01-12, made on Sunday night: yesterday peaked at 5
    monday = floors(week_panel(), "2026-01-11 23:00")
    assert (monday["floor"] == 60.0).all()
    assert set(monday["floor_from"]) == {"Fri 2026-01-09"}


def test_other_days_keep_yesterdays_peak() -> None:
    panel = week_panel()
    tuesday = floors(panel, "2026-01-12 23:00")  # Monday (yesterday) is a weekday
    assert (tuesday["floor"] == 60.0).all() and set(tuesday["floor_from"]) == {"the last 24 h"}
    sunday = floors(panel, "2026-01-10 23:00")  # Saturday (yesterday) is of its kind
    assert (sunday["floor"] == 5.0).all() and set(sunday["floor_from"]) == {"the last 24 h"}
    # Saturday: yesterday (Friday, 60) is above the Sunday before (5)
    saturday = floors(panel, "2026-01-09 23:00")
    assert (saturday["floor"] == 60.0).all()


def test_a_quiet_friday_lowers_monday_and_a_busy_weekend_raises_saturday() -> None:
    panel = week_panel()
    quiet = panel.copy()
    quiet.loc[quiet["ts"].dt.floor("D") == pd.Timestamp("2026-01-09"), "value"] = 20.0
    assert (floors(quiet, "2026-01-11 23:00")["floor"] == 20.0).all()
    busy = panel.copy()
    busy.loc[busy["ts"] == pd.Timestamp("2026-01-04 14:00") + pd.Timedelta(days=7), "value"] = 90
    saturday = floors(busy, "2026-01-16 23:00")  # the Sunday before peaked at 90
    assert (saturday["floor"] == 90.0).all()
    assert set(saturday["floor_from"]) == {"Sun 2026-01-11"}


def test_a_series_without_a_week_keeps_yesterdays_peak() -> None:
    # every day peaks at 60 but the weekend's at 56 (7 % lower): no week, so Monday is
    # sized for Sunday's 56 even though Friday reached 60
    flat = week_panel()
    flat.loc[flat["value"] == 5.0, "value"] = 56.0
    monday = floors(flat, "2026-01-11 23:00")
    assert (monday["floor"] == 56.0).all() and set(monday["floor_from"]) == {"the last 24 h"}
    # 20 % lower: a week
    flat.loc[flat["value"] == 56.0, "value"] = 48.0
    assert (floors(flat, "2026-01-11 23:00")["floor"] == 60.0).all()
    # one complete weekend day (Saturday has a gap) is too little to tell
    gap = week_panel()
    gap = gap[gap["ts"] != pd.Timestamp("2026-01-10 03:00")]
    monday = floors(gap, "2026-01-11 23:00")
    assert (monday["floor"] == 5.0).all() and set(monday["floor_from"]) == {"the last 24 h"}


def test_incomplete_days_and_days_the_plan_covers_are_passed_over() -> None:
    gap = week_panel()
    gap = gap[gap["ts"] != pd.Timestamp("2026-01-09 03:00")]  # Friday has a gap
    gap.loc[gap["ts"] == pd.Timestamp("2026-01-08 14:00"), "value"] = 70.0
    monday = floors(gap, "2026-01-11 23:00")
    assert (monday["floor"] == 70.0).all() and set(monday["floor_from"]) == {"Thu 2026-01-08"}
    # two days from Sunday night: Tuesday's steps look for a weekday before the plan, Friday
    two = floors(week_panel(), "2026-01-11 23:00", hours=48)
    assert (two["floor"] == 60.0).all() and set(two["floor_from"]) == {"Fri 2026-01-09"}


def test_a_short_history_floors_at_yesterday_only_and_none_without_history() -> None:
    panel = week_panel()
    weekend = panel[panel["ts"] >= pd.Timestamp("2026-01-10")]  # Saturday and Sunday only
    monday = floors(weekend, "2026-01-11 23:00")
    assert (monday["floor"] == 5.0).all() and set(monday["floor_from"]) == {"the last 24 h"}
    empty = day_kind_floor(panel.iloc[:0], plan_rows("2026-01-11 23:00"), freq_s=3600)
    assert empty["floor"].isna().all() and set(empty["floor_from"]) == {""}


def _store(folder: Path) -> Path:
    """Two weeks of 10-minute use of ``lab``: vc1 60 GPUs on weekday afternoons, 5 at
    weekends; the last step is Sunday 2026-01-18 23:50."""
    hourly = week_panel()
    values = np.repeat(hourly["value"].to_numpy(), 6)
    return write_series_store(folder, {SID: values}, "cluster,scope,gpus\nlab,vc1,80\n",
                              start=START)


def test_capacity_sizes_monday_for_friday_and_says_why(tmp_path: Path) -> None:
    db = _store(tmp_path)
    source = HandForecasts({SID: ([5.0] * 144, 4.0)})  # a forecast that stays at Sunday's
    with usecases.open_store(db) as store:
        plan = plan_cluster_capacity(store, "lab", source, horizon="1d", quantile=0.95,
                                     record=None)
        bare = plan_cluster_capacity(store, "lab", source, horizon="1d", quantile=0.95,
                                     record=None, day_floor=False)
    row, alone = plan.rows[0], bare.rows[0]
    assert alone.in_use_needed == pytest.approx(5.0 + 4.0 * 0.45)
    assert row.in_use_needed == pytest.approx(60.0)
    assert row.gpus_needed == pytest.approx(60.0)
    assert "raised to 60.0 by the day-kind floor (the peak of Fri 2026-01-16" in row.reason
    assert (plan.steps["needed"] == 60.0).all()
    assert "day-kind" not in alone.reason


def test_capacity_cli_flag_turns_the_floor_off(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path)
    capsys.readouterr()  # the ingest's lines
    models = ["--models-dir", str(tmp_path / "models")]

    def needed(*extra: str) -> float:
        assert main(["--db", str(db), "capacity", *models, "--cluster", "lab", "--model",
                     "naive", "--json", "--no-record", "-q", *extra]) == 0
        return float(json.loads(capsys.readouterr().out)["rows"][0]["in_use_needed"])

    # the last value is Sunday night's 2 GPUs: the floor sizes Monday for Friday's 60
    assert needed() == pytest.approx(60.0)
    assert needed("--no-day-floor") < 20.0
    # the API (over HTTP, the saved naive models the CLI just wrote) and its client agree
    config = Settings(db=str(db), models_dir=tmp_path / "models", default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    query = {"cluster": "lab", "horizon": "1d", "record": "false"}
    with LiveServer(create_app(config)) as live:
        floored = httpx.get(f"{live.url}/v1/capacity", params=query, timeout=120)
        bare = httpx.get(f"{live.url}/v1/capacity", params={**query, "day_floor": "false"},
                         timeout=120)
        with PrismClient(live.url, token="") as prism:
            rows, _ = prism.capacity_plan("lab", record=False, day_floor=False)
    assert floored.status_code == bare.status_code == 200, (floored.text, bare.text)
    assert floored.json()["rows"][0]["in_use_needed"] == pytest.approx(60.0)
    assert "day-kind floor" in floored.json()["rows"][0]["reason"]
    assert bare.json()["rows"][0]["in_use_needed"] == pytest.approx(needed("--no-day-floor"))
    assert rows[0].in_use_needed == pytest.approx(bare.json()["rows"][0]["in_use_needed"])
