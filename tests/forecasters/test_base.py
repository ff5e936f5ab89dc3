"""The shared machinery of every forecaster: conformal calibration, update, fallback."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from prism.errors import DataContractError
from prism.forecasters import get_forecaster
from prism.forecasters.base import BaseForecaster, FloatArray

STEP = pd.Timedelta("10min")


def _panel(values: dict[str, np.ndarray], start: str = "2026-01-05") -> pd.DataFrame:
    frames = [pd.DataFrame({"series_id": sid, "ts": pd.date_range(start, periods=len(v),
                                                                   freq=STEP), "value": v})
              for sid, v in values.items()]
    return pd.concat(frames, ignore_index=True)


class _Recorder(BaseForecaster):
    """The last value; records what ``_fit`` was given."""

    alias = "recorder"

    def _fit(self, values: dict[str, FloatArray]) -> None:
        self.seen_ = {sid: len(v) for sid, v in values.items()}

    def _forecast_many(self, series_id: str, history: FloatArray, ends: npt.NDArray[np.int64],
                       steps: int) -> FloatArray:
        return np.repeat(history[ends - 1][:, None], steps, axis=1)


def test_parameters_are_learned_without_the_calibration_tail() -> None:
    panel = _panel({"a/all/gpus_in_use": np.arange(4000.0), "b/all/gpus_in_use": np.ones(90)})
    model = _Recorder().fit(panel)
    # 7 days (1,008 steps) are held out of 4,000 points; at most a third of a short series
    assert model.seen_ == {"a/all/gpus_in_use": 4000 - 1008, "b/all/gpus_in_use": 60}
    assert model.fit_len_ == model.seen_


def test_conformal_intervals_cover_exchangeable_noise() -> None:
    # i.i.d. noise around a constant: window-average errors are exchangeable, so the split
    # conformal 90 % interval covers about 90 % of fresh points.
    rng = np.random.default_rng(3)
    series = {f"c/vc{i}/gpus_in_use": 50 + rng.normal(0, 5, 1152) for i in range(40)}
    history = {sid: v[:1008] for sid, v in series.items()}
    out = get_forecaster("window_average", window="1d").fit(_panel(history)).predict(
        144, (0.05, 0.5, 0.95))
    actual = np.concatenate([series[sid][1008:] for sid in sorted(series)])
    inside = (actual >= out["p5"].to_numpy()) & (actual <= out["p95"].to_numpy())
    assert 0.85 <= inside.mean() <= 0.95
    assert 0.42 <= (actual <= out["p50"].to_numpy()).mean() <= 0.58


def test_intervals_widen_with_the_horizon_of_a_random_walk() -> None:
    rng = np.random.default_rng(0)
    walk = 100 + np.cumsum(rng.normal(0, 1, 2000))
    out = get_forecaster("naive").fit(_panel({"c/all/gpus_in_use": walk})).predict(
        300, (0.05, 0.95))
    width = (out["p95"] - out["p5"]).to_numpy()
    assert width[0] < width[20] < width[140] and width[20] < width[299]
    # a random walk's spread grows like sqrt(steps): 144 steps ~ 12 x one step, loosely
    assert 5 < width[143] / width[0] < 25


def test_update_continues_the_series_like_a_fit_on_all_of_it() -> None:
    rng = np.random.default_rng(1)
    values = 40 + 10 * np.sin(np.arange(1200) * 2 * np.pi / 144) + rng.normal(0, 1, 1200)
    full = _panel({"c/all/gpus_in_use": values})
    for alias in ("naive", "seasonal_naive", "window_average"):
        updated = get_forecaster(alias).fit(full.iloc[:1000])
        updated.fallback_margin = float("inf")  # compare the model itself, never its fallback
        updated.update(full.iloc[1000:])
        fresh = get_forecaster(alias).fit(full)
        assert updated.version_ == 2
        got, want = updated.predict("1d", (0.5,)), fresh.predict("1d", (0.5,))
        pd.testing.assert_series_equal(got["ts"], want["ts"])
        np.testing.assert_allclose(got["mean"], want["mean"])


def test_update_replaces_revised_points_and_rejects_gaps_and_strangers() -> None:
    values = np.arange(500.0)
    panel = _panel({"c/all/gpus_in_use": values})
    model = get_forecaster("naive").fit(panel)
    revised = panel.iloc[[-1]].assign(value=7.0)
    assert model.update(revised).predict(1, ())["mean"].iloc[0] == 7.0
    gap = pd.DataFrame({"series_id": ["c/all/gpus_in_use"],
                        "ts": [panel["ts"].iloc[-1] + 2 * STEP], "value": [1.0]})
    with pytest.raises(DataContractError, match="send the points from"):
        model.update(gap)
    stranger = gap.assign(series_id="c/vc9/gpus_in_use")
    with pytest.raises(DataContractError, match="was not fitted"):
        model.update(stranger)
    off_grid = gap.assign(ts=panel["ts"].iloc[-1] + pd.Timedelta("3min"))
    with pytest.raises(DataContractError, match="grid"):
        model.update(off_grid)


def test_missing_values_are_refused_with_the_fix() -> None:
    panel = _panel({"c/all/gpus_in_use": np.r_[np.ones(20), np.nan, np.ones(20)]})
    with pytest.raises(DataContractError, match="--fill"):
        get_forecaster("naive").fit(panel)


def _regime(days: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(144 * days)
    noise = rng.normal(0, 1, len(t))
    if kind == "flat":
        return 50 + noise
    return 50 + 30 * np.sin(2 * np.pi * t / 144) + noise


def test_fallback_triggers_on_a_regime_change_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A 1-day window average is fine on flat demand; when a strong daily cycle appears it
    # is far worse than the seasonal naive fallback (from the second day of the cycle, when
    # the fallback has seen one), and fine again once the cycle has left the 3-day window of
    # day-ahead errors.
    rng = np.random.default_rng(5)
    sid = "c/all/gpus_in_use"
    values = np.concatenate([_regime(6, "flat", rng), _regime(3, "daily", rng),
                             _regime(3, "flat", rng)])
    panel = _panel({sid: values})
    model = get_forecaster("window_average", window="1d").fit(panel.iloc[:864])
    states: list[bool] = []
    caplog.set_level(logging.WARNING, logger="prism.forecasters.base")
    for day in range(6, 12):
        model.update(panel.iloc[day * 144:(day + 1) * 144])
        states.append(sid in model.fallback_)
        if sid in model.fallback_:
            out = model.predict(144, (0.5,))
            np.testing.assert_allclose(out["mean"], model.history_[sid][-144:])
    assert states == [False, True, True, True, False, False]
    messages = [r.getMessage() for r in caplog.records]
    assert any("falling back to seasonal naive" in m and "rolling MAE" in m for m in messages)
    assert any("back from the fallback" in m for m in messages)


@pytest.mark.parametrize("alias", ["naive", "seasonal_naive", "time_of_day_quantile"])
def test_short_series_still_forecast(alias: str) -> None:
    params: dict[str, Any] = {"season": "3"} if alias == "seasonal_naive" else {}
    panel = _panel({"c/all/gpus_in_use": np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])})
    out = get_forecaster(alias, **params).fit(panel).predict(4, (0.1, 0.9))
    assert len(out) == 4 and out[["mean", "p10", "p90"]].notna().all().all()


def test_the_hooks_a_subclass_must_write_are_abstract() -> None:
    class Unfinished(BaseForecaster):
        alias = "unfinished"

        def _fit(self, values: dict[str, FloatArray]) -> None:
            pass

    with pytest.raises(TypeError, match="_forecast_many"):
        Unfinished()  # type: ignore[abstract]
    _Recorder()._fit_local({})  # an optional hook keeps its default: nothing to learn
