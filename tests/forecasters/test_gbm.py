"""The gradient-boosting forecaster ``gbm``: oracles, exact features, properties, real data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from prism.errors import ConfigError, DataContractError
from prism.forecasters import FORECASTERS, get_forecaster
from prism.forecasters.gbm import GbmForecaster, _origin_features, _tails, feature_names

DAY = 144  # 10-minute steps


def _daily_panel(days: int, shapes: list[tuple[float, float]],
                 extra_steps: int = 0) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Noiseless daily sines ``level + amp * sin``, one series per shape, and what follows."""
    ts = pd.date_range("2026-01-05", periods=days * DAY, freq="10min")
    t = np.arange(len(ts) + extra_steps)
    frames, future = [], {}
    for i, (level, amp) in enumerate(shapes):
        y = level + amp * np.sin(2 * np.pi * t / DAY + i)
        sid = f"c/vc{i}/gpus_in_use"
        frames.append(pd.DataFrame({"series_id": sid, "ts": ts, "value": y[:len(ts)]}))
        future[sid] = y[len(ts):]
    return pd.concat(frames, ignore_index=True), future


def test_registered_as_a_global_model() -> None:
    assert FORECASTERS["gbm"] is GbmForecaster
    assert GbmForecaster.global_model
    assert isinstance(get_forecaster("gbm", strategy="recursive"), GbmForecaster)


def test_direct_model_continues_a_noiseless_daily_pattern() -> None:
    # Three series of very different size share one model: in units of each one's daily
    # range the next day is the same change from the last value, which the model learns.
    shapes = [(50.0, 20.0), (10.0, 5.0), (200.0, 60.0)]
    panel, future = _daily_panel(6, shapes, extra_steps=DAY)
    model = GbmForecaster(max_iter=200, max_rows=10_000, random_state=0).fit(panel)
    out = model.predict("1d", ())
    for (sid, group), (_, amp) in zip(out.groupby("series_id"), shapes, strict=True):
        error = np.abs(group["mean"].to_numpy() - future[str(sid)])
        assert error.max() < 0.08 * amp, sid  # within 8 % of the amplitude at every step
        assert error.mean() < 0.02 * amp, sid
    naive = {sid: np.abs(fut - panel.loc[panel["series_id"] == sid, "value"].iloc[-1]).mean()
             for sid, fut in future.items()}
    assert all(0.02 * amp < naive[sid] for sid, (_, amp) in zip(future, shapes, strict=True))


def test_features_of_a_ramp_are_exact() -> None:
    # y = 1, 2, 3, ...: every feature has a closed form at origin e (last value e).
    n = 3 * DAY
    panel = pd.DataFrame({"series_id": "c/vc0/gpus_in_use",
                          "ts": pd.date_range("2026-01-05", periods=n, freq="10min"),
                          "value": np.arange(1.0, n + 1)})
    model = GbmForecaster(max_iter=5, max_rows=500).fit(panel)
    y = model.history_["c/vc0/gpus_in_use"]
    e = np.array([2 * DAY + 30])
    k = np.array([1, 6, DAY, 2 * DAY])
    x, last, scale = model._features("c/vc0/gpus_in_use", _tails(y, e, model.layout_.tail),
                                     np.zeros(len(k), dtype=np.int64), e.repeat(len(k)), k)
    f = dict(zip(feature_names(), x.T, strict=True))
    assert x.shape == (4, len(feature_names()))
    s = float(e[0])  # the last value, also the largest of the last day
    np.testing.assert_array_equal(last, s)
    np.testing.assert_array_equal(scale, s)
    np.testing.assert_allclose(f["level"], 1.0)
    np.testing.assert_allclose(f["lag_10min"], -1 / s)  # one step back is one less
    np.testing.assert_allclose(f["lag_2h"], -12 / s)
    np.testing.assert_allclose(f["mean_30min"], -1 / s)  # mean of s-2, s-1, s
    np.testing.assert_allclose(f["std_1h"], np.std(np.arange(6.0)) / s)
    np.testing.assert_allclose(f["min_1d"], -(DAY - 1) / s)
    np.testing.assert_allclose(f["max_1d"], 0.0)
    np.testing.assert_allclose(f["step"], [1, 6, DAY, DAY])  # held at max_horizon (1d)
    # the target's time of day (the series starts at midnight) and the origin's
    np.testing.assert_allclose(f["tod"], ((e[0] + k - 1) % DAY) / DAY)
    np.testing.assert_allclose(f["tod_origin"], ((e[0] - 1) % DAY) / DAY)
    # the target a day earlier is k - DAY away from the last value; two days ahead, two days
    # earlier; only two days of history exist before the latest one, so the mean is over them
    np.testing.assert_allclose(f["tod_latest"], (k - DAY * np.ceil(k / DAY)) / s)
    latest = k - DAY * np.ceil(k / DAY)
    seen = [[d for d in (latest[i], latest[i] - DAY, latest[i] - 2 * DAY) if s + d >= 1]
            for i in range(len(k))]
    np.testing.assert_allclose(f["tod_mean"], [np.mean(v) / s for v in seen])


def test_tails_hold_the_values_before_each_origin_and_nan_before_the_start() -> None:
    y = np.arange(10.0)
    tails = _tails(y, np.array([0, 3, 10]), 4)
    np.testing.assert_array_equal(tails[0], [np.nan] * 4)
    np.testing.assert_array_equal(tails[1], [np.nan, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(tails[2], [6.0, 7.0, 8.0, 9.0])
    assert _tails(np.arange(5), np.array([2]), 3).dtype == np.float64  # integer series


def test_scale_falls_back_to_the_whole_tail_and_then_to_one() -> None:
    # a VC busy two days ago and idle since: its scale is the busy level, not 0; a VC idle
    # for its whole tail is in its own units (scale 1)
    lay = GbmForecaster(max_iter=5, max_rows=500).fit(_daily_panel(3, [(5.0, 1.0)])[0]).layout_
    busy_then_idle = np.concatenate([np.full(DAY, 40.0), np.zeros(2 * DAY)])
    ends = np.array([len(busy_then_idle), len(busy_then_idle) - DAY // 2, DAY + 1])
    _, last, scale = _origin_features(_tails(busy_then_idle, ends, lay.tail), lay)
    np.testing.assert_array_equal(scale, [40.0, 40.0, 40.0])
    np.testing.assert_array_equal(last, [0.0, 0.0, 0.0])
    _, _, scale = _origin_features(_tails(np.zeros(3 * DAY), ends, lay.tail), lay)
    np.testing.assert_array_equal(scale, [1.0, 1.0, 1.0])


def test_the_forecast_of_a_fitted_model_follows_the_prediction_of_its_trees() -> None:
    panel, _ = _daily_panel(4, [(50.0, 20.0), (10.0, 5.0)])
    model = GbmForecaster(max_iter=30, max_rows=3_000, random_state=0).fit(panel)
    sid = "c/vc1/gpus_in_use"
    y = model.history_[sid]
    ends = np.array([len(y) - 50, len(y)])
    calls: list[int] = []
    predict = model.model_.predict

    def counted(x: np.ndarray) -> np.ndarray:
        calls.append(len(x))
        return np.asarray(predict(x))

    model.model_.predict = counted
    paths = model._forecast_many(sid, y, ends, 12)
    assert calls == [2 * 12]  # all origins and steps in one predict call
    x, last, scale = model._features(sid, _tails(y, ends, model.layout_.tail),
                                     np.array([1]), ends[1:], np.array([3]))
    np.testing.assert_allclose(paths[1, 2], last[0] + scale[0] * predict(x)[0])


def test_recursive_forecast_feeds_its_forecasts_back() -> None:
    panel, _ = _daily_panel(4, [(50.0, 20.0), (10.0, 5.0)])
    model = GbmForecaster(strategy="recursive", max_iter=30, max_rows=3_000,
                          random_state=0).fit(panel)
    sid = "c/vc0/gpus_in_use"
    y = model.history_[sid]
    n = len(y)
    three = model._forecast_many(sid, y, np.array([n - 10, n]), 3)
    # the second and third steps are one- and two-step forecasts from the extended history
    grown = np.append(y, three[1, 0])
    two = model._forecast_many(sid, grown, np.array([n + 1]), 2)
    np.testing.assert_allclose(three[1, 1:], two[0])
    # an origin inside the history uses only what comes before it
    cut = model._forecast_many(sid, y[:n - 10], np.array([n - 10]), 3)
    np.testing.assert_array_equal(three[0], cut[0])


def test_global_model_is_equivariant_to_the_size_of_a_series() -> None:
    # Features and targets are in units of each series' own range: a series times 4 (exact in
    # floating point) trains the same model and is forecast exactly 4 times larger.
    rng = np.random.default_rng(3)
    panel, _ = _daily_panel(4, [(50.0, 20.0), (10.0, 5.0)])
    panel["value"] = np.round(panel["value"] + rng.normal(0, 2, len(panel)))
    bigger = panel.copy()
    vc1 = bigger["series_id"] == "c/vc1/gpus_in_use"
    bigger.loc[vc1, "value"] *= 4.0
    params: dict[str, Any] = {"max_iter": 40, "max_rows": 3_000, "random_state": 5}
    one = GbmForecaster(**params).fit(panel).predict("6h", (0.1, 0.9))
    two = GbmForecaster(**params).fit(bigger).predict("6h", (0.1, 0.9))
    mask = one["series_id"] == "c/vc1/gpus_in_use"
    for col in ("mean", "p10", "p90"):
        np.testing.assert_allclose(two.loc[mask, col], 4.0 * one.loc[mask, col], rtol=1e-9)
        np.testing.assert_allclose(two.loc[~mask, col], one.loc[~mask, col], rtol=1e-9)


def test_seeded_and_deterministic() -> None:
    rng = np.random.default_rng(1)
    panel, _ = _daily_panel(3, [(50.0, 20.0), (30.0, 10.0)])
    panel["value"] += rng.normal(0, 3, len(panel))
    params: dict[str, Any] = {"max_iter": 20, "max_rows": 1_500}
    a = GbmForecaster(**params, random_state=7).fit(panel).predict(12, (0.5,))
    b = GbmForecaster(**params, random_state=7).fit(panel).predict(12, (0.5,))
    c = GbmForecaster(**params, random_state=8).fit(panel).predict(12, (0.5,))
    none = GbmForecaster(**params).fit(panel).predict(12, (0.5,))
    zero = GbmForecaster(**params, random_state=0).fit(panel).predict(12, (0.5,))
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(none, zero)  # None is seed 0
    assert not np.allclose(a["mean"], c["mean"])  # the seed picks the training pairs


def test_bad_parameters_and_too_short_panels() -> None:
    panel, _ = _daily_panel(2, [(50.0, 20.0)])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"strategy": "sideways"}, "strategy 'sideways' is unknown"),
        ({"loss": "huber"}, "loss 'huber' is unknown"),
        ({"max_rows": 5}, "max_rows must be at least"),
        ({"n_jobs": 0}, "n_jobs must be at least 1"),
        ({"max_horizon": "0min"}, "max_horizon: duration '0min' must be positive"),
    ]
    for params, match in cases:
        with pytest.raises(ConfigError, match=match):
            GbmForecaster(**params).fit(panel)
    tiny = panel.head(12)
    with pytest.raises(DataContractError, match="training pairs.*use a baseline"):
        GbmForecaster().fit(tiny)


def test_hourly_data_gets_windows_of_at_least_one_step() -> None:
    # 10-minute lags and 30-minute windows of hourly data are one step, not an error
    ts = pd.date_range("2026-01-05", periods=24 * 12, freq="1h")
    t = np.arange(len(ts))
    panel = pd.DataFrame({"series_id": "c/all/gpus_in_use", "ts": ts,
                          "value": 100 + 30 * np.sin(2 * np.pi * t / 24)})
    model = GbmForecaster(max_iter=50, max_rows=2_000, random_state=0).fit(panel)
    assert model.layout_.lags == (1, 1, 1, 1, 2)
    assert model.layout_.windows == (1, 1, 6, 24)
    assert model.layout_.horizon == 24
    out = model.predict("2d", (0.5,))
    assert len(out) == 48 and out["mean"].notna().all()
    truth = 100 + 30 * np.sin(2 * np.pi * np.arange(len(ts), len(ts) + 24) / 24)
    error = np.abs(out["mean"].to_numpy()[:24] - truth)
    assert error.max() < 4.5 and error.mean() < 1.0  # 15 % and 3 % of the amplitude


def test_far_steps_are_predicted_at_knots_and_linearly_between(monkeypatch) -> None:
    # Paths over a long horizon (PRISM's 7-day calibration tail: 10,080 steps at 1 min) are
    # predicted step by step up to _EXACT_STEPS and at _FAR_KNOTS knots beyond, linearly
    # between them. The knots and the exact steps are what a full prediction gives.
    from prism.forecasters import gbm

    panel, _ = _daily_panel(6, [(50.0, 20.0), (10.0, 5.0)])
    model = GbmForecaster(max_iter=50, random_state=0).fit(panel)
    sid = "c/vc0/gpus_in_use"
    history = model.history_[sid]
    ends = np.array([len(history) - 2 * DAY, len(history) - DAY])
    steps = 4 * DAY  # 576 > 288 + 256
    knots = gbm._direct_knots(steps)
    assert len(knots) < steps and knots[0] == 1 and knots[-1] == steps
    assert (knots[:gbm._EXACT_STEPS] == np.arange(1, gbm._EXACT_STEPS + 1)).all()
    fast = model._forecast_many(sid, history, ends, steps)
    monkeypatch.setattr(gbm, "_EXACT_STEPS", steps)  # every step predicted
    full = model._forecast_many(sid, history, ends, steps)
    np.testing.assert_allclose(fast[:, knots - 1], full[:, knots - 1], rtol=0, atol=1e-9)
    between = np.setdiff1d(np.arange(1, steps + 1), knots)
    assert len(between) > 0
    j = np.searchsorted(knots, between) - 1  # the knots on each side
    lo = np.minimum(full[:, knots[j] - 1], full[:, knots[j + 1] - 1])
    hi = np.maximum(full[:, knots[j] - 1], full[:, knots[j + 1] - 1])
    assert ((fast[:, between - 1] >= lo - 1e-9) & (fast[:, between - 1] <= hi + 1e-9)).all()
    # a horizon within the exact reach is predicted step by step, bit for bit
    monkeypatch.setattr(gbm, "_EXACT_STEPS", 288)
    short = model._forecast_many(sid, history, ends, DAY)
    np.testing.assert_array_equal(short, full[:, :DAY])


def test_minute_steps_are_predicted_every_minute_for_an_hour_then_every_ten(
        monkeypatch) -> None:
    from prism.forecasters import gbm

    knots = gbm._direct_knots(1440, stride=10, first=60)
    np.testing.assert_array_equal(knots[:60], np.arange(1, 61))
    assert (np.diff(knots[59:]) == 10).all() and knots[-1] == 1440
    # 10-minute steps (stride 1) keep every step up to _EXACT_STEPS, as before
    np.testing.assert_array_equal(gbm._direct_knots(144), np.arange(1, 145))
    n = 3 * 1440
    t = np.arange(n)
    panel = pd.DataFrame({"series_id": "c/vc0/gpus_in_use",
                          "ts": pd.date_range("2026-01-05", periods=n, freq="1min"),
                          "value": 40 + 20 * np.sin(2 * np.pi * t / 1440)})
    model = GbmForecaster(max_iter=20, max_rows=3_000, random_state=0).fit(panel)
    history = model.history_["c/vc0/gpus_in_use"]
    ends = np.array([n - 600, n - 300])
    fast = model._forecast_many("c/vc0/gpus_in_use", history, ends, 300)
    monkeypatch.setattr(gbm, "_KNOT_S", 0)  # every step predicted
    full = model._forecast_many("c/vc0/gpus_in_use", history, ends, 300)
    used = gbm._direct_knots(300, stride=10, first=60)
    assert len(used) == 60 + 24  # the first hour, then 70, 80, ..., 300
    np.testing.assert_allclose(fast[:, used - 1], full[:, used - 1], rtol=0, atol=1e-9)
    assert not np.array_equal(fast, full)  # between the knots: linear, not the trees
