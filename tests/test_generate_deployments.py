"""Tests of the synthetic inference-fleet generator: contract, determinism, shape and the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.cli import main
from prism.errors import ConfigError
from prism.generate_deployments import (
    EVENT_COLUMNS,
    EVENT_KINDS,
    DeploymentFleet,
    generate_deployments,
    simulate_deployments,
)
from prism.schema import split_series_id, validate_panel
from prism.store import Store

DAYS = 35
APPS = 24
STEPS_PER_DAY = 144
DAY = pd.Timedelta(days=1)


@pytest.fixture(scope="module")
def fleet() -> DeploymentFleet:
    """The default fleet: 24 apps, 35 days of 10-minute steps, seed 0."""
    return simulate_deployments()


@pytest.fixture(scope="module")
def big_fleet() -> DeploymentFleet:
    """Many apps over a week, to check the shares of app kinds."""
    return simulate_deployments(apps=300, days=7, seed=1)


def _series(panel: pd.DataFrame, series_id: str) -> pd.Series:
    one = panel[panel["series_id"] == series_id]
    return pd.Series(one["value"].to_numpy(), index=pd.DatetimeIndex(one["ts"]))


def _level_series(fleet: DeploymentFleet, series_id: str, index: pd.Index) -> pd.Series:
    """The deployment level at each step, from the ``level`` events."""
    rows = fleet.events[(fleet.events["series_id"] == series_id)
                        & (fleet.events["kind"] == "level")]
    at = np.searchsorted(rows["start"].to_numpy(), index.to_numpy(), side="right") - 1
    return pd.Series(rows["gpus"].to_numpy()[at], index=index)


# -- contract --------------------------------------------------------------------------------
def test_panel_follows_the_contract(fleet: DeploymentFleet) -> None:
    panel = fleet.panel
    assert list(panel.columns) == ["series_id", "ts", "value"]
    assert panel["ts"].dtype == np.dtype("datetime64[ns]")
    assert panel["value"].dtype == np.float64
    pd.testing.assert_frame_equal(validate_panel(panel), panel)  # sorted, regular, unique
    assert panel["series_id"].nunique() == APPS
    sizes = panel.groupby("series_id").size()
    assert (sizes == DAYS * STEPS_PER_DAY).all()
    for _, group in panel.groupby("series_id"):
        steps = np.diff(group["ts"].to_numpy())
        assert (steps == np.timedelta64(10, "m")).all()
        assert group["ts"].iloc[0] == pd.Timestamp("2026-01-05")
    values = panel["value"].to_numpy()
    assert (values >= 0).all()
    assert (values == np.round(values)).all()
    for series_id in panel["series_id"].unique():
        cluster, scope, metric = split_series_id(series_id)
        assert (cluster, metric) == ("deploy", "gpus_in_use")
        assert scope


def test_frequency_and_start(fleet: DeploymentFleet) -> None:
    hourly = generate_deployments(apps=2, days=3, freq="1h", start="2026-02-01T00:00:00Z")
    assert len(hourly) == 2 * 3 * 24
    assert hourly["ts"].min() == pd.Timestamp("2026-02-01")
    assert hourly["ts"].max() == pd.Timestamp("2026-02-03T23:00")


def test_events_and_apps_describe_the_panel(fleet: DeploymentFleet) -> None:
    events, apps = fleet.events, fleet.apps
    assert list(events.columns) == list(EVENT_COLUMNS)
    assert set(events["kind"]) <= set(EVENT_KINDS)
    assert (events["end"] > events["start"]).all()
    assert sorted(apps["series_id"]) == sorted(fleet.panel["series_id"].unique())
    # level rows tile each app's whole trace
    levels = events[events["kind"] == "level"]
    end = pd.Timestamp("2026-01-05") + DAYS * DAY
    for _, rows in levels.groupby("series_id"):
        assert rows["start"].iloc[0] == pd.Timestamp("2026-01-05")
        assert rows["end"].iloc[-1] == end
        assert (rows["start"].to_numpy()[1:] == rows["end"].to_numpy()[:-1]).all()
        assert (np.diff(rows["gpus"].to_numpy()) != 0).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"apps": 0}, "apps must be a whole number >= 1"),
        ({"apps": True}, "apps must be a whole number"),
        ({"days": 0}, "days must be a whole number >= 1"),
        ({"freq": "often"}, "is not a duration"),
        ({"freq": "7min"}, "does not divide a day"),
        ({"start": "yesterday-ish"}, "is not a time"),
        ({"start": "2026-01-05T00:05"}, "is not on the 10min grid"),
        ({"apps": 10_000, "days": 400}, "rows"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        generate_deployments(**kwargs)  # type: ignore[arg-type]


# -- determinism -----------------------------------------------------------------------------
def test_same_seed_same_panel(fleet: DeploymentFleet) -> None:
    again = simulate_deployments()
    pd.testing.assert_frame_equal(again.panel, fleet.panel)
    pd.testing.assert_frame_equal(again.events, fleet.events)
    pd.testing.assert_frame_equal(again.apps, fleet.apps)


def test_different_seed_differs(fleet: DeploymentFleet) -> None:
    other = generate_deployments(seed=1)
    assert len(other) == len(fleet.panel)
    assert not np.array_equal(other["value"].to_numpy(), fleet.panel["value"].to_numpy())


def test_app_does_not_depend_on_later_apps() -> None:
    small = simulate_deployments(apps=3, days=5, seed=7)
    large = simulate_deployments(apps=9, days=5, seed=7)
    ids = small.panel["series_id"].unique()
    assert len(ids) == 3
    part = large.panel[large.panel["series_id"].isin(ids)].reset_index(drop=True)
    pd.testing.assert_frame_equal(part, small.panel)
    events = large.events[large.events["series_id"].isin(ids)].reset_index(drop=True)
    pd.testing.assert_frame_equal(events, small.events)


# -- shape -----------------------------------------------------------------------------------
def test_fixed_apps_hold_their_level_between_steps(fleet: DeploymentFleet) -> None:
    """Outside bursts and restarts, an app without an autoscaler sits exactly on its level."""
    apps = fleet.apps[~fleet.apps["autoscaled"] & ~fleet.apps["idle"]]
    assert len(apps) >= 8
    n_steps = 0
    for series_id in apps["series_id"]:
        values = _series(fleet.panel, series_id)
        level = _level_series(fleet, series_id, values.index)
        touched = np.zeros(len(values), dtype=bool)
        excursions = fleet.events[(fleet.events["series_id"] == series_id)
                                  & fleet.events["kind"].isin(["burst", "dip"])]
        for start, end in zip(excursions["start"], excursions["end"], strict=True):
            touched |= (values.index >= start) & (values.index < end)
        assert touched.mean() < 0.2, series_id
        np.testing.assert_array_equal(values[~touched].to_numpy(), level[~touched].to_numpy())
        n_steps += int((np.diff(level.to_numpy()) != 0).sum())
    assert n_steps >= 30


def test_steps_persist_a_day_later(fleet: DeploymentFleet) -> None:
    """A step holds: a fixed app's median over the next day is closer to the new level than to
    the old; an autoscaled app's mean over the next day moves from the previous day's mean the
    way the step went (for steps of 20% or more)."""
    levels = fleet.events[fleet.events["kind"] == "level"]
    autoscaled = set(fleet.apps.loc[fleet.apps["autoscaled"], "series_id"])
    day = np.timedelta64(1, "D")
    fixed_held, auto_held = [], []
    for series_id, rows in levels.groupby("series_id"):
        values = _series(fleet.panel, str(series_id))
        gpus = rows["gpus"].to_numpy()
        starts = rows["start"].to_numpy()
        lengths = (rows["end"] - rows["start"]).to_numpy()
        for i in range(1, len(rows)):
            if lengths[i] < day or lengths[i - 1] < day:
                continue  # superseded within a day: no clean day before and after
            t = starts[i]
            after = values[(values.index >= t) & (values.index < t + day)]
            before = values[(values.index >= t - day) & (values.index < t)]
            old, new = gpus[i - 1], gpus[i]
            if series_id not in autoscaled:
                fixed_held.append(abs(after.median() - new) < abs(after.median() - old))
            elif old > 0 and new > 0 and abs(np.log(new / old)) >= np.log(1.2):
                auto_held.append(np.sign(after.mean() - before.mean()) == np.sign(new - old))
    assert len(fixed_held) >= 30 and len(auto_held) >= 10
    assert all(fixed_held)
    assert np.mean(auto_held) >= 0.8, np.mean(auto_held)


def test_steps_come_in_working_hours(big_fleet: DeploymentFleet) -> None:
    levels = big_fleet.events[big_fleet.events["kind"] == "level"]
    steps = levels[levels["start"] > pd.Timestamp("2026-01-05")].merge(
        big_fleet.apps[["series_id", "utc_offset_hours"]], on="series_id")
    local = steps["start"] + pd.to_timedelta(steps["utc_offset_hours"], unit="h")
    working = (local.dt.hour >= 9) & (local.dt.hour < 18) & (local.dt.day_of_week < 5)
    assert len(steps) >= 200
    # weekday office hours are 27% of the week; they carry about 80% of the steps
    assert working.mean() > 0.65, working.mean()


def test_step_factors_are_moderate(fleet: DeploymentFleet) -> None:
    levels = fleet.events[fleet.events["kind"] == "level"]
    ratios = []
    for _, rows in levels.groupby("series_id"):
        gpus = rows["gpus"].to_numpy()
        both = (gpus[:-1] > 0) & (gpus[1:] > 0)  # launches and retirements aside
        ratios.append(gpus[1:][both] / gpus[:-1][both])
    ratio = np.concatenate(ratios)
    assert len(ratio) >= 50
    # a factor in [0.3, 2] before rounding to whole replicas (one replica at least)
    assert (ratio >= 0.2).all() and (ratio <= 3.0).all()
    assert (ratio > 1).any() and (ratio < 1).any()


def test_sizes_are_heavy_tailed(big_fleet: DeploymentFleet) -> None:
    apps = big_fleet.apps[~big_fleet.apps["idle"]]
    base = apps["base_gpus"].to_numpy()
    assert 4 <= np.median(base) <= 30
    assert 0.05 <= (base >= 100).mean() <= 0.3
    assert set(big_fleet.apps["gpus_per_replica"]) == {1, 2, 4, 8}
    assert (base % apps["gpus_per_replica"].to_numpy() == 0).all()


def test_app_kinds_have_plausible_shares(big_fleet: DeploymentFleet) -> None:
    apps = big_fleet.apps
    assert 0.04 <= apps["idle"].mean() <= 0.18
    assert 0.2 <= apps["autoscaled"].mean() <= 0.45
    assert 0.1 <= apps["bursty"].mean() <= 0.4
    assert 0.02 <= (apps["lifecycle"] == "launch").mean() <= 0.14
    assert 0.02 <= (apps["lifecycle"] == "retire").mean() <= 0.14


def test_idle_apps_are_mostly_zero(big_fleet: DeploymentFleet) -> None:
    idle = big_fleet.apps.loc[big_fleet.apps["idle"], "series_id"]
    assert len(idle) >= 10
    busy = []
    for series_id in idle:
        values = _series(big_fleet.panel, series_id)
        busy.append(values.max() > 0)
        assert (values == 0).mean() > 0.6
        assert values.max() <= 16
        experiments = big_fleet.events[(big_fleet.events["series_id"] == series_id)
                                       & (big_fleet.events["kind"] == "experiment")]
        assert (values.max() > 0) == (len(experiments) > 0)
    assert np.mean(busy) > 0.5  # most run an experiment in a week


def test_launched_and_retired_apps(big_fleet: DeploymentFleet) -> None:
    panel = big_fleet.panel
    for lifecycle in ("launch", "retire"):
        ids = big_fleet.apps.loc[big_fleet.apps["lifecycle"] == lifecycle, "series_id"]
        assert len(ids) >= 3
        for series_id in ids:
            values = _series(panel, series_id).to_numpy()
            zero = values == 0
            if lifecycle == "launch":
                assert zero[0] and not zero[-1]
                assert not zero[np.argmin(zero):].all()
            else:
                assert not zero[0] and zero[-1]
                assert zero[len(values) - np.argmin(zero[::-1]):].all()


def test_autoscaled_apps_have_a_daily_cycle(fleet: DeploymentFleet) -> None:
    """Divided by the deployment level, autoscaled apps repeat daily; fixed apps do not."""
    def daily_autocorrelation(series_id: str) -> float:
        values = _series(fleet.panel, series_id)
        level = _level_series(fleet, series_id, values.index)
        up = level > 0
        ratio = (values[up] / level[up]).to_numpy()
        ratio = ratio - ratio.mean()
        if not ratio.any():
            return 0.0  # on its level throughout
        lag = STEPS_PER_DAY
        return float((ratio[lag:] * ratio[:-lag]).sum() / (ratio * ratio).sum())

    auto = fleet.apps.loc[fleet.apps["autoscaled"], "series_id"]
    assert len(auto) >= 4
    acf = np.array([daily_autocorrelation(s) for s in auto])
    assert (acf > 0.3).mean() >= 0.75, acf
    fixed = fleet.apps.loc[~fleet.apps["autoscaled"] & ~fleet.apps["idle"], "series_id"]
    assert max(daily_autocorrelation(s) for s in fixed) < 0.3


# -- CLI -------------------------------------------------------------------------------------
def test_cli_writes_a_long_csv_that_ingests(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fleet"
    assert main(["generate", "--kind", "deployments", "--output", str(out), "--days", "3",
                 "--apps", "4"]) == 0
    path = out / "deployments.csv"
    assert str(path) in capsys.readouterr().out
    lines = path.read_text().splitlines()
    assert lines[0] == "series_id,ts,value"
    assert len(lines) == 1 + 4 * 3 * STEPS_PER_DAY
    assert lines[1].split(",")[1] == "2026-01-05T00:00:00"

    db = tmp_path / "x.duckdb"
    assert main(["--db", str(db), "ingest", str(path), "--format", "long-csv", "-q"]) == 0
    store = Store.open(db)
    try:
        series = store.list_series()
        stored = store.load_panel()
    finally:
        store.close()
    assert len(series) == 4
    assert set(series["cluster"]) == {"deploy"}
    expected = generate_deployments(apps=4, days=3, seed=0)
    pd.testing.assert_frame_equal(stored, expected, check_dtype=False)


def test_cli_jobs_kind_is_the_default(tmp_path: Path) -> None:
    assert main(["generate", "--output", str(tmp_path), "--days", "1", "--clusters", "1",
                 "-q"]) == 0
    assert (tmp_path / "jobs.csv").exists()
    assert not (tmp_path / "deployments.csv").exists()


def test_cli_rejects_bad_apps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--kind", "deployments", "--output", str(tmp_path),
                 "--apps", "0"]) != 0
    assert "--apps" in capsys.readouterr().err
    assert not (tmp_path / "deployments.csv").exists()


@pytest.mark.parametrize(("kind", "flag", "value"), [
    ("deployments", "--file-format", "parquet"), ("deployments", "--clusters", "3"),
    ("jobs", "--apps", "4")])
def test_cli_refuses_an_option_of_the_other_kind(tmp_path: Path, kind: str, flag: str,
                                                 value: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--kind", kind, "--output", str(tmp_path), "--days", "1", flag,
                 value]) == 1
    assert f"{flag} does not apply to --kind {kind}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written
