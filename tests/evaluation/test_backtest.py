"""Tests of the rolling-origin backtest (prism/evaluation/backtest.py)."""

from __future__ import annotations

import logging
from typing import Any, Literal, Self

import numpy as np
import pandas as pd
import pytest

import prism.evaluation.backtest as bt
from prism.errors import ConfigError, DataContractError
from prism.evaluation.backtest import backtest, backtest_cutoffs
from prism.forecasters import get_forecaster
from prism.forecasters.base import DEFAULT_QUANTILES
from prism.forecasters.baselines import NaiveForecaster
from tests import factories

T0 = pd.Timestamp("2026-01-05")
HOUR = pd.Timedelta("1h")


def make_panel(lengths: dict[str, int], *, trend: bool = False) -> pd.DataFrame:
    """Hourly series that all end at the same time (so longer ones start earlier): a daily
    cycle with noise, or a noiseless ramp ``10 + 0.5 t`` (``trend``)."""
    ids = sorted(lengths)
    n = [lengths[s] for s in ids]
    if trend:
        return factories.make_panel(ids=ids, length=n, freq="h", end=T0 + 400 * HOUR,
                                    level=10, trend=0.5, amplitude=0, noise=0)
    return factories.make_panel(ids=ids, length=n, freq="h", end=T0 + 400 * HOUR,
                                level=40, amplitude=15, noise=2)


# -- cutoffs -----------------------------------------------------------------------------------
def test_cutoffs_end_the_last_window_at_the_last_observation() -> None:
    panel = make_panel({"c/a/m": 20, "c/b/m": 30})
    cuts = backtest_cutoffs(panel, horizon=3, windows=4, step=2)
    for sid, n in (("c/a/m", 20), ("c/b/m", 30)):
        ts = panel.loc[panel["series_id"] == sid, "ts"].to_numpy()
        got = cuts.loc[cuts["series_id"] == sid, "cutoff"].to_numpy()
        # positions n - 1 - h - (windows - 1 - w) * step: 10 12 14 16 for n = 20
        assert list(got) == [ts[n - 1 - 3 - (3 - w) * 2] for w in range(4)]
        assert got[-1] + 3 * np.timedelta64(1, "h") == ts[-1]
    assert list(cuts["window"]) == [0, 1, 2, 3] * 2


def test_step_defaults_to_the_horizon_and_takes_durations() -> None:
    panel = make_panel({"c/a/m": 50})
    default = backtest_cutoffs(panel, horizon="3h", windows=3)
    explicit = backtest_cutoffs(panel, horizon=3, windows=3, step="3h")
    pd.testing.assert_frame_equal(default, explicit)
    assert (default["cutoff"].diff().dropna() == 3 * HOUR).all()


def test_a_short_series_raises_with_the_points_it_needs_or_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    panel = make_panel({"c/long/m": 40, "c/short/m": 12})
    need = 6 + 2 * 3 + 2  # horizon + (windows - 1) * step + 2 to fit on
    with pytest.raises(DataContractError, match=rf"'c/short/m' has 12 points.*at least {need}"):
        backtest_cutoffs(panel, horizon=6, windows=3, step=3)
    with caplog.at_level(logging.INFO, logger="prism.evaluation.backtest"):
        out = backtest(get_forecaster("naive"), panel, horizon=6, windows=3, step=3,
                       on_short="skip")
    assert f"skipped 1 series shorter than the {need} points" in caplog.text
    assert "(the shortest, c/short/m, holds 12)" in caplog.text
    assert set(out["series_id"]) == {"c/long/m"}
    with pytest.raises(DataContractError, match=r"no series is long enough.*the longest holds "
                                                r"40\): pass at most 2 window\(s\)"):
        backtest_cutoffs(panel, horizon=34, windows=3, step=3, on_short="skip")
    with pytest.raises(DataContractError, match="holds 40\\): pass a shorter horizon"):
        backtest_cutoffs(panel, horizon=40, windows=3, on_short="skip")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"windows": 0}, "windows"),
    ({"refit": 0}, "refit"),
    ({"refit": "sometimes"}, "refit"),
    ({"horizon": "90min"}, "whole number"),
    ({"on_short": "ignore"}, "on_short"),
])
def test_bad_settings_raise_config_errors(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"horizon": 3, "windows": 2, **kwargs}
    with pytest.raises(ConfigError, match=match):
        backtest(get_forecaster("naive"), make_panel({"c/a/m": 30}), **args)


# -- the output --------------------------------------------------------------------------------
def test_output_follows_the_contract_and_lines_up_the_actuals() -> None:
    panel = make_panel({"c/a/m": 60, "c/b/m": 80})
    template = get_forecaster("naive")
    out = backtest(template, panel, horizon=4, windows=3, quantiles=(0.9, 0.5))
    assert list(out.columns) == ["series_id", "ts", "cutoff", "model", "mean", "p50", "p90",
                                 "value"]
    assert len(out) == 2 * 3 * 4
    assert (out["model"] == "naive").all()
    assert not hasattr(template, "series_ids_")  # the given forecaster is never fitted
    step = (out["ts"] - out["cutoff"]).dt.total_seconds() / 3600
    assert sorted(step.unique()) == [1, 2, 3, 4]
    truth = panel.set_index(["series_id", "ts"])["value"]
    assert np.array_equal(out["value"], truth.loc[list(zip(out["series_id"], out["ts"],
                                                           strict=True))].to_numpy())
    # the naive forecast is the last value at or before the cutoff
    last = truth.loc[list(zip(out["series_id"], out["cutoff"], strict=True))].to_numpy()
    assert np.allclose(out["mean"], np.maximum(last, 0))


def test_several_models_keep_their_order_and_names() -> None:
    panel = make_panel({"c/a/m": 60})
    out = backtest([get_forecaster("seasonal_naive", season="6"), get_forecaster("naive")],
                   panel, horizon=2, windows=2, quantiles=DEFAULT_QUANTILES)
    assert list(pd.unique(out["model"])) == ["seasonal_naive", "naive"]
    named = backtest({"sn6": get_forecaster("seasonal_naive", season="6"),
                      "sn12": get_forecaster("seasonal_naive", season="12")},
                     panel, horizon=2, windows=2)
    assert list(pd.unique(named["model"])) == ["sn6", "sn12"]
    with pytest.raises(ConfigError, match="given twice"):
        backtest([get_forecaster("naive"), get_forecaster("naive")], panel, horizon=2)


def test_progress_is_reported_per_model_and_window() -> None:
    calls: list[tuple[int, int]] = []
    backtest([get_forecaster("naive"), get_forecaster("window_average", window="3")],
             make_panel({"c/a/m": 40}), horizon=2, windows=3,
             progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, 6) for i in range(1, 7)]


def test_a_forecaster_that_cannot_fit_names_the_window() -> None:
    panel = make_panel({"c/a/m": 40})
    with pytest.raises(DataContractError, match=r"'seasonal_naive' at window 0.*shorter than"):
        backtest(get_forecaster("seasonal_naive", season="1d"), panel, horizon=6, windows=3)


# -- no forecaster sees the future -------------------------------------------------------------
class SpyForecaster(NaiveForecaster):
    """The naive forecaster, logging the last ts of each series it is given.

    ``log`` is a hyperparameter, so every clone the backtest makes writes to the same list.
    """

    alias = "spy"

    def __init__(self, *, log: list[tuple[str, dict[str, pd.Timestamp]]] | None = None,
                 random_state: int | None = None) -> None:
        self.log = log
        self.random_state = random_state

    def _record(self, kind: str, panel: pd.DataFrame) -> None:
        assert self.log is not None
        self.log.append((kind, {str(k): pd.Timestamp(v)
                                for k, v in panel.groupby("series_id")["ts"].max().items()}))

    def fit(self, panel: pd.DataFrame) -> Self:
        self._record("fit", panel)
        return super().fit(panel)

    def update(self, new_points: pd.DataFrame, *, fallback: bool = True) -> Self:
        self._record("update", new_points)
        return super().update(new_points, fallback=fallback)


class CheatingForecaster(SpyForecaster):
    """Forecasts by reading the future: it holds back the last ``peek`` points it is given
    and 'forecasts' them from memory. Only a backtest that leaks data lets it through."""

    alias = "cheater"

    def __init__(self, *, log: list[tuple[str, dict[str, pd.Timestamp]]] | None = None,
                 peek: int = 1, random_state: int | None = None) -> None:
        self.log = log
        self.peek = peek
        self.random_state = random_state

    def fit(self, panel: pd.DataFrame) -> Self:
        self._record("fit", panel)
        keep = panel.groupby("series_id").cumcount(ascending=False) >= self.peek
        NaiveForecaster.fit(self, panel[keep])
        self.memory_ = panel.set_index(["series_id", "ts"])["value"]
        return self

    def predict(self, horizon: int | str,
                quantiles: Any = DEFAULT_QUANTILES) -> pd.DataFrame:
        out = super().predict(horizon, quantiles)
        known = self.memory_.reindex(list(zip(out["series_id"], out["ts"], strict=True)))
        for col in [c for c in out.columns if c == "mean" or c.startswith("p")]:
            out[col] = np.where(known.notna(), known.to_numpy(), out[col])
        return out


def assert_never_past_cutoff(log: list[tuple[str, dict[str, pd.Timestamp]]],
                             panel: pd.DataFrame, horizon: int, windows: int, step: int,
                             refit: int = 1) -> None:
    """Each logged call saw nothing after its window's cutoff (computed here, independently)."""
    assert len(log) == windows
    for w, (kind, seen) in enumerate(log):
        assert kind == ("fit" if w % refit == 0 else "update")
        for sid, last in seen.items():
            ts = panel.loc[panel["series_id"] == sid, "ts"].to_numpy()
            cutoff = ts[len(ts) - 1 - horizon - (windows - 1 - w) * step]
            assert last <= cutoff, f"window {w} of {sid}: saw {last} after cutoff {cutoff}"
            assert last == cutoff  # and it saw everything up to the cutoff


@pytest.mark.parametrize("refit", ["always", 1, 2, 3])
def test_no_forecaster_sees_data_after_its_cutoff(refit: int | Literal["always"]) -> None:
    panel = make_panel({"c/a/m": 50, "c/b/m": 64})
    log: list[tuple[str, dict[str, pd.Timestamp]]] = []
    out = backtest(SpyForecaster(log=log), panel, horizon=5, windows=4, step=3, refit=refit)
    assert_never_past_cutoff(log, panel, 5, 4, 3, refit=1 if refit == "always" else refit)
    assert len(out) == 2 * 4 * 5


def test_the_guards_catch_a_backtest_that_leaks_the_future(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    panel = make_panel({"c/a/m": 50, "c/b/m": 64})
    h = 4

    # an honest backtest: the cheater is only ever given the past, so its trick shifts its
    # forecast before the cutoff, which the backtest refuses
    log: list[tuple[str, dict[str, pd.Timestamp]]] = []
    with pytest.raises(RuntimeError, match="not fitted on exactly the points up to the cutoff"):
        backtest(CheatingForecaster(log=log, peek=h), panel, horizon=h, windows=3)
    assert log and all(last <= panel["ts"].max() - 3 * h * HOUR for last in log[0][1].values())

    # a leaky slicing helper hands each model the horizon after its cutoff too
    def leaky_until(p: pd.DataFrame, cutoff: pd.Series) -> pd.DataFrame:
        keep = p["ts"] <= p["series_id"].map(cutoff) + h * HOUR
        return p.loc[keep.to_numpy()].reset_index(drop=True)

    monkeypatch.setattr(bt, "_until", leaky_until)
    log = []
    out = backtest(CheatingForecaster(log=log, peek=h), panel, horizon=h, windows=3)
    assert np.allclose(out["mean"], out["value"])  # reading the future makes it perfect ...
    with pytest.raises(AssertionError, match="after cutoff"):  # ... and the spy catches it
        assert_never_past_cutoff(log, panel, h, 3, h)
    # an ordinary model on the leaky backtest forecasts from the wrong origin: refused
    with pytest.raises(RuntimeError, match="cutoff"):
        backtest(get_forecaster("naive"), panel, horizon=h, windows=3)


class FirstSeenSpy(SpyForecaster):
    """Logs the first ts of each series it is given instead."""

    alias = "first_seen_spy"

    def _record(self, kind: str, panel: pd.DataFrame) -> None:
        assert self.log is not None
        self.log.append((kind, {str(k): pd.Timestamp(v)
                                for k, v in panel.groupby("series_id")["ts"].min().items()}))


def test_refit_every_k_updates_in_between_and_matches_refitting_for_the_naive() -> None:
    panel = make_panel({"c/a/m": 120, "c/b/m": 100}, trend=True)
    log: list[tuple[str, dict[str, pd.Timestamp]]] = []
    every = backtest(SpyForecaster(log=log), panel, horizon=6, windows=5, refit=2)
    assert [kind for kind, _ in log] == ["fit", "update", "fit", "update", "fit"]
    first: list[tuple[str, dict[str, pd.Timestamp]]] = []
    backtest(FirstSeenSpy(log=first), panel, horizon=6, windows=5, refit=2)
    for w in (1, 3):  # an update gets exactly the points after the previous cutoff
        assert first[w][1] == {sid: last + HOUR for sid, last in log[w - 1][1].items()}
    always = backtest(SpyForecaster(log=[]), panel, horizon=6, windows=5)
    pd.testing.assert_series_equal(every["mean"], always["mean"])
    pd.testing.assert_frame_equal(every[["series_id", "ts", "cutoff", "value"]],
                                  always[["series_id", "ts", "cutoff", "value"]])


@pytest.mark.parametrize("alias", ["naive", "seasonal_naive", "window_average"])
def test_cheap_baselines_backtest_through_the_panel_path_to_the_same_numbers(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # series of different lengths: the panel path groups them by length
    panel = make_panel({"a": 300, "b": 260, "c": 300})
    kwargs: dict[str, Any] = {"horizon": 24, "windows": 3, "step": 12,
                              "quantiles": (0.05, 0.5, 0.9, 0.95)}
    assert bt.supports_panel(get_forecaster(alias))
    fast = backtest(get_forecaster(alias), panel, **kwargs)
    monkeypatch.setattr(bt, "supports_panel", lambda model: False)
    slow = backtest(get_forecaster(alias), panel, **kwargs)
    pd.testing.assert_frame_equal(fast, slow)
    assert fast["cutoff"].nunique() >= 3 and fast["p95"].notna().all()


def test_a_backtest_between_refits_measures_the_model_it_names_not_the_fallback() -> None:
    # a clean daily cycle: the last value loses to seasonal naive by far, so a served naive
    # model would switch to its fallback on update; a backtest row labelled naive stays naive
    t = np.arange(144 * 12)
    panel = factories.panel_of({"c/all/gpus_in_use": 50 + 40 * np.sin(2 * np.pi * t / 144)})
    served = get_forecaster("naive").fit(panel.iloc[:144 * 9])
    served.update(panel.iloc[144 * 9:144 * 10])
    assert "c/all/gpus_in_use" in served.fallback_  # what serving does
    frame = backtest(get_forecaster("naive"), panel, horizon="6h", windows=6, refit=3)
    for (_, cutoff), window in frame.groupby(["series_id", "cutoff"]):
        last = panel.loc[panel["ts"] == cutoff, "value"].item()
        np.testing.assert_allclose(window["mean"], last)  # the last value, every window
