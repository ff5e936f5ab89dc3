"""Tests of the forecast metrics (prism/evaluation/metrics.py): oracles, references, invariants."""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from prism.errors import ConfigError, DataContractError
from prism.evaluation.backtest import backtest
from prism.evaluation.metrics import (
    avg_rel_mae,
    burst_mse,
    burst_threshold,
    by_step,
    coverage,
    crps,
    evaluate,
    mae,
    mase,
    over_provisioning,
    panel_summary,
    pinball_loss,
    quantile_levels,
    relative_mae,
    relative_to,
    rmse,
    seasonal_scale,
    smape,
    summarize_windows,
    summary,
    summary_and_windows,
    under_provisioning_rate,
    wape,
)
from prism.forecasters import get_forecaster
from tests.factories import make_panel

T0 = pd.Timestamp("2026-01-05")


# -- array oracles -----------------------------------------------------------------------------
def test_point_metrics_on_a_hand_computed_case() -> None:
    y, f = [1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 5.0, 0.0]
    assert mae(y, f) == pytest.approx(7 / 4)
    assert rmse(y, f) == pytest.approx(math.sqrt(21 / 4))
    assert smape(y, f) == pytest.approx((1 / 3 + 0 + 2 / 8 + 4 / 4) / 4)


def test_smape_defines_zero_over_zero_as_zero() -> None:
    assert smape([0.0, 0.0], [0.0, 0.0]) == 0.0
    assert smape([0.0, 0.0], [0.0, 3.0]) == pytest.approx(0.5)


def test_mase_of_the_seasonal_naive_on_its_own_scaling_window_is_one() -> None:
    history = np.random.default_rng(0).gamma(2.0, 10.0, 200)
    season = 24
    scale = seasonal_scale(history, season)
    assert mase(history[season:], history[:-season], scale) == pytest.approx(1.0, abs=1e-12)


def test_mase_is_undefined_for_a_zero_or_missing_scale() -> None:
    assert math.isnan(mase([1.0, 2.0], [1.0, 1.0], seasonal_scale([3.0] * 10, 2)))
    assert math.isnan(seasonal_scale([1.0, 2.0], 2))  # no full season of changes
    assert seasonal_scale([1.0, 2.0, 4.0], 1) == pytest.approx(1.5)
    with pytest.raises(ConfigError, match="season"):
        seasonal_scale([1.0, 2.0], 0)


def test_pinball_loss_weights_under_and_over_forecasts_by_the_level() -> None:
    assert pinball_loss([10.0], [8.0], 0.9) == pytest.approx(0.9 * 2)
    assert pinball_loss([8.0], [10.0], 0.9) == pytest.approx(0.1 * 2)
    assert pinball_loss([8.0, 10.0], [10.0, 8.0], 0.5) == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        pinball_loss([1.0], [1.0], 1.0)


def test_crps_of_a_perfect_point_forecast_is_zero() -> None:
    y = np.array([3.0, 0.0, 7.5])
    levels = [0.05, 0.5, 0.9, 0.99]
    assert crps(y, np.repeat(y[:, None], len(levels), axis=1), levels) == 0.0


def test_crps_of_a_point_mass_with_symmetric_levels_is_the_mae() -> None:
    y, f = np.array([3.0, 0.0, 7.5]), np.array([4.0, 1.0, 5.0])
    levels = [0.1, 0.25, 0.5, 0.75, 0.9]
    assert crps(y, np.repeat(f[:, None], 5, axis=1), levels) == pytest.approx(mae(y, f))


def test_crps_from_many_quantiles_approaches_the_normal_closed_form() -> None:
    # CRPS(N(0, 1), 0) = 2 phi(0) - 1 / sqrt(pi)
    exact = 2 * stats.norm.pdf(0.0) - 1 / math.sqrt(math.pi)
    levels = list(np.arange(1, 200) / 200)
    approx = crps([0.0], stats.norm.ppf(levels)[None, :], levels)
    assert approx == pytest.approx(exact, rel=0.02)


def test_coverage_of_infinite_intervals_is_one() -> None:
    y = np.array([-1e9, 0.0, 5.0, 1e12])
    assert coverage(y, np.full(4, -np.inf), np.full(4, np.inf)) == 1.0
    assert coverage([1.0, 5.0, 9.0, 3.0], [0.0, 6.0, 0.0, 3.0], [2.0, 7.0, 8.0, 3.0]) == 0.5


def test_provisioning_metrics_on_a_hand_computed_case() -> None:
    y, p95 = [10.0, 20.0, 30.0, 40.0], [12.0, 18.0, 30.0, 45.0]
    assert under_provisioning_rate(y, p95) == 0.25  # only 20 > 18
    assert over_provisioning(y, p95) == pytest.approx((2 + 0 + 0 + 5) / 4)


def test_burst_mse_keeps_only_changes_above_the_training_percentile() -> None:
    history = [0.0, 2.0, 1.0, 4.0, 2.0, 6.0]  # |changes| 2 1 3 2 4
    threshold = burst_threshold(history)
    assert threshold == pytest.approx(3.8)  # linear interpolation: 3 + 0.8 * (4 - 3)
    actual, forecast = [4.0, 8.0, 8.5], [5.0, 5.0, 9.0]  # changes 2, 4, 0.5 from 6
    assert burst_mse(actual, forecast, previous=6.0, threshold=threshold) == pytest.approx(9.0)
    assert math.isnan(burst_mse([6.0], [0.0], previous=6.0, threshold=threshold))


def test_array_metrics_reject_mismatched_or_empty_input() -> None:
    with pytest.raises(DataContractError, match="shape"):
        mae([1.0, 2.0], [1.0])
    with pytest.raises(DataContractError, match="at least one"):
        rmse([], [])


# -- array invariants --------------------------------------------------------------------------
# zero or a magnitude in [1e-6, 1e6]: scaling by c in [1e-3, 1e3] cannot underflow to 0
FLOATS = st.one_of(st.just(0.0), st.floats(1e-6, 1e6), st.floats(-1e6, -1e-6))
PAIRS = st.integers(1, 40).flatmap(lambda n: st.tuples(
    hnp.arrays(np.float64, n, elements=FLOATS), hnp.arrays(np.float64, n, elements=FLOATS)))
SCALES = st.floats(1e-3, 1e3)
LEVELS = st.floats(0.01, 0.99)


@settings(max_examples=60, deadline=None)
@given(pair=PAIRS, level=LEVELS)
def test_metrics_are_non_negative(pair: tuple[np.ndarray, np.ndarray], level: float) -> None:
    y, f = pair
    assert mae(y, f) >= 0
    assert rmse(y, f) >= mae(y, f) - 1e-9 * max(1.0, mae(y, f))  # RMSE >= MAE
    assert 0 <= smape(y, f) <= 1
    assert pinball_loss(y, f, level) >= 0
    assert crps(y, np.sort(np.stack([f, y], axis=1), axis=1), [level / 2, 0.5 + level / 2]) >= 0
    assert 0 <= coverage(y, np.minimum(y, f), f) <= 1
    assert 0 <= under_provisioning_rate(y, f) <= 1
    assert over_provisioning(y, f) >= 0
    scale = seasonal_scale(np.concatenate([y, f]), 1)
    m = mase(y, f, scale)
    assert math.isnan(m) or m >= 0


@settings(max_examples=60, deadline=None)
@given(pair=PAIRS, c=SCALES, level=LEVELS)
def test_scale_free_metrics_ignore_units_and_the_rest_scale_with_them(
    pair: tuple[np.ndarray, np.ndarray], c: float, level: float
) -> None:
    y, f = pair
    history = np.concatenate([f, y])
    scale, scaled = seasonal_scale(history, 1), seasonal_scale(c * history, 1)
    # c * y - c * f is off by rounding of c * y itself (about 1e-16 of it) where y and f
    # nearly cancel: the tolerances are relative to the values' magnitude, not absolute
    size = max(1.0, c * float(np.abs(history).max()))
    if scale > 1e-6 * size / c:
        assert mase(c * y, c * f, scaled) == pytest.approx(mase(y, f, scale), rel=1e-6)
    assert smape(c * y, c * f) == pytest.approx(smape(y, f), rel=1e-6, abs=1e-12)
    assert mae(c * y, c * f) == pytest.approx(c * mae(y, f), rel=1e-9, abs=1e-12 * size)
    assert rmse(c * y, c * f) == pytest.approx(c * rmse(y, f), rel=1e-9, abs=1e-12 * size)
    assert pinball_loss(c * y, c * f, level) == pytest.approx(
        c * pinball_loss(y, f, level), rel=1e-9, abs=1e-12 * size)
    assert over_provisioning(c * y, c * f) == pytest.approx(
        c * over_provisioning(y, f), rel=1e-9, abs=1e-12 * size)


# -- frames ------------------------------------------------------------------------------------
def hand_case() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two hourly series, one window of two steps each; ``b`` has a constant history."""
    ts = pd.date_range(T0, periods=8, freq="h")
    panel = pd.concat([
        pd.DataFrame({"series_id": "c/a/m", "ts": ts,
                      "value": [2.0, 4.0, 3.0, 6.0, 4.0, 8.0, 6.0, 10.0]}),
        pd.DataFrame({"series_id": "c/b/m", "ts": ts, "value": [5.0] * 6 + [5.0, 6.0]}),
    ], ignore_index=True)
    frame = pd.DataFrame({
        "series_id": ["c/a/m"] * 2 + ["c/b/m"] * 2,
        "ts": [ts[6], ts[7]] * 2,
        "cutoff": [ts[5]] * 4,
        "model": "m1",
        "mean": [7.0, 7.0, 5.0, 5.0],
        "p10": [5.0, 5.0, 5.0, 5.0],
        "p50": [7.0, 8.0, 5.0, 5.0],
        "p90": [9.0, 9.0, 5.0, 5.0],
        "value": [6.0, 10.0, 5.0, 6.0],
    })
    return panel, frame


def test_evaluate_on_a_hand_computed_window() -> None:
    panel, frame = hand_case()
    out = evaluate(frame, panel, season=2).set_index("series_id")
    assert list(out.columns) == [
        "model", "cutoff", "n", "mean_abs_actual", "mae", "rmse", "mase", "smape", "wape",
        "pinball_p10", "pinball_p50", "pinball_p90", "crps", "coverage_80", "width_80",
        "burst_mse", "burst_steps", "under_p90", "over_p90"]
    a = out.loc["c/a/m"]
    assert a["n"] == 2
    assert a["mean_abs_actual"] == pytest.approx(8.0)
    assert a["wape"] == pytest.approx(4.0 / 16.0)
    assert a["width_80"] == pytest.approx(4.0)
    assert a["mae"] == pytest.approx(2.0)  # |6 - 7|, |10 - 7|
    assert a["rmse"] == pytest.approx(math.sqrt(5.0))
    assert a["mase"] == pytest.approx(2.0 / 1.5)  # seasonal (2) changes 1 2 1 2
    assert a["smape"] == pytest.approx((1 / 13 + 3 / 17) / 2)
    assert a["pinball_p10"] == pytest.approx((0.1 * 1 + 0.1 * 5) / 2)
    assert a["pinball_p50"] == pytest.approx((0.5 * 1 + 0.5 * 2) / 2)
    assert a["pinball_p90"] == pytest.approx((0.1 * 3 + 0.9 * 1) / 2)
    assert a["crps"] == pytest.approx(2 * (0.3 + 0.75 + 0.6) / 3)
    assert a["coverage_80"] == 0.5  # 6 in [5, 9], 10 not
    # |changes| of the history 2 1 3 2 4 -> p95 3.8; test changes |6-8| = 2, |10-6| = 4
    assert a["burst_steps"] == 1
    assert a["burst_mse"] == pytest.approx(9.0)
    assert a["under_p90"] == 0.5
    assert a["over_p90"] == pytest.approx(1.5)
    b = out.loc["c/b/m"]
    assert pd.isna(b["mase"])  # constant history: no scale
    assert b["burst_steps"] == 1  # threshold 0: the change 5 -> 6 is a burst, 5 -> 5 is not
    assert b["burst_mse"] == pytest.approx(1.0)


def test_summary_excludes_and_counts_windows_without_a_mase(
    caplog: pytest.LogCaptureFixture,
) -> None:
    panel, frame = hand_case()
    with caplog.at_level(logging.INFO, logger="prism.evaluation.metrics"):
        evaluate(frame, panel, season=2)
    assert "undefined" in caplog.text
    out = summary(frame, panel, season=2).iloc[0]
    assert out["model"] == "m1"
    assert out["windows"] == 2 and out["series"] == 2 and out["mase_undefined"] == 1
    assert out["mase"] == pytest.approx(2.0 / 1.5)
    assert out["mae"] == pytest.approx((2.0 + 0.5) / 2)
    assert out["burst_mse"] == pytest.approx((9.0 + 1.0) / 2)  # pooled over burst steps
    assert out["wape"] == pytest.approx((4.0 + 1.0) / (16.0 + 11.0))  # pooled over points


def test_by_step_pools_series_and_cutoffs_per_horizon_step() -> None:
    panel, frame = hand_case()
    out = by_step(frame, panel, season=2).set_index("horizon_step")
    assert list(out.index) == [1, 2]
    assert out.loc[1, "mae"] == pytest.approx((1.0 + 0.0) / 2)
    assert out.loc[2, "mae"] == pytest.approx((3.0 + 1.0) / 2)
    assert out.loc[2, "rmse"] == pytest.approx(math.sqrt((9.0 + 1.0) / 2))
    assert out.loc[2, "mase"] == pytest.approx(3.0 / 1.5)  # b has no scale: left out


def test_coverage_of_a_level_without_its_quantiles_says_which_columns_it_needs() -> None:
    panel, frame = hand_case()
    with pytest.raises(DataContractError, match=r"p5 and p95.*quantiles 0.05 and 0.95"):
        evaluate(frame, panel, season=2, coverage_levels=[0.9])
    with pytest.raises(DataContractError, match="p99"):
        evaluate(frame, panel, season=2, provision_levels=[0.99])
    out = evaluate(frame, panel, season=2, coverage_levels=[0.8], provision_levels=[0.5])
    assert "coverage_80" in out and "under_p50" in out and "under_p90" not in out


def test_a_frame_without_quantiles_has_crps_equal_to_mae() -> None:
    panel, frame = hand_case()
    out = evaluate(frame.drop(columns=["p10", "p50", "p90"]), panel, season=2)
    assert (out["crps"] == out["mae"]).all()
    assert not any(c.startswith(("coverage_", "under_", "pinball_")) for c in out.columns)


def test_frame_errors_name_the_problem() -> None:
    panel, frame = hand_case()
    with pytest.raises(DataContractError, match="missing"):
        evaluate(frame.drop(columns=["cutoff"]), panel)
    with pytest.raises(DataContractError, match="not in the panel"):
        evaluate(frame, panel[panel["series_id"] == "c/a/m"], season=2)


def test_quantile_levels_parses_columns() -> None:
    frame = pd.DataFrame(columns=["mean", "p50", "p97.5", "p5", "p100", "pct"])
    assert quantile_levels(frame) == {0.05: "p5", 0.5: "p50", 0.975: "p97.5"}


def synthetic_panel(n: int = 240) -> pd.DataFrame:
    """Two hourly series of ``n`` steps around 40 with a daily swing of 15 (seeded)."""
    return make_panel(length=n, freq="h", start=T0, level=40, amplitude=15)


def test_evaluate_matches_the_array_metrics_window_by_window() -> None:
    panel = synthetic_panel()
    frame = backtest(get_forecaster("naive"), panel, horizon=6, windows=3,
                     quantiles=(0.05, 0.5, 0.95, 0.99))
    out = evaluate(frame, panel)
    assert len(out) == 2 * 3
    for row in out.itertuples():
        w = frame[(frame["series_id"] == row.series_id) & (frame["cutoff"] == row.cutoff)]
        s = panel[panel["series_id"] == row.series_id]
        history = s.loc[s["ts"] <= row.cutoff, "value"].to_numpy()
        y, f = w["value"].to_numpy(), w["mean"].to_numpy()
        assert row.mae == pytest.approx(mae(y, f))
        assert row.rmse == pytest.approx(rmse(y, f))
        assert row.mase == pytest.approx(mase(y, f, seasonal_scale(history, 24)))
        assert row.smape == pytest.approx(smape(y, f))
        assert row.wape == pytest.approx(wape(y, f))
        assert row.mean_abs_actual == pytest.approx(np.mean(np.abs(y)))
        assert row.width_90 == pytest.approx(np.mean(w["p95"] - w["p5"]))
        qs = w[["p5", "p50", "p95", "p99"]].to_numpy()
        assert row.crps == pytest.approx(crps(y, qs, [0.05, 0.5, 0.95, 0.99]))
        assert row.coverage_90 == pytest.approx(coverage(y, w["p5"], w["p95"]))
        assert row.under_p95 == pytest.approx(under_provisioning_rate(y, w["p95"]))
        assert row.over_p99 == pytest.approx(over_provisioning(y, w["p99"]))
        expected = burst_mse(y, f, history[-1], burst_threshold(history))
        assert row.burst_mse == pytest.approx(expected, nan_ok=True)


def _window(history: np.ndarray, actual: np.ndarray, mean: np.ndarray,
            spread: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    n, h = len(history), len(actual)
    ts = pd.date_range(T0, periods=n + h, freq="h")
    panel = pd.DataFrame({"series_id": "c/a/m", "ts": ts,
                          "value": np.concatenate([history, actual])})
    frame = pd.DataFrame({"series_id": "c/a/m", "ts": ts[n:], "cutoff": ts[n - 1],
                          "model": "m", "mean": mean, "p5": mean - spread, "p50": mean,
                          "p95": mean + spread, "value": actual})
    return panel, frame


POSITIVE = st.one_of(st.just(0.0), st.floats(1e-6, 1e4))  # no subnormals: scaling is exact


@settings(max_examples=25, deadline=None)
@given(
    data=st.integers(2, 12).flatmap(lambda h: st.tuples(
        hnp.arrays(np.float64, 30, elements=POSITIVE),
        hnp.arrays(np.float64, h, elements=POSITIVE),
        hnp.arrays(np.float64, h, elements=POSITIVE),
        hnp.arrays(np.float64, h, elements=st.floats(0, 100)))),
    c=st.sampled_from([0.125, 0.5, 2.0, 16.0]),
)
def test_frame_metrics_are_scale_free_or_scale_with_the_units(
    data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], c: float
) -> None:
    # powers of two scale floats exactly, so comparisons (bursts, coverage) cannot flip
    history, actual, mean, spread = data
    panel, frame = _window(history, actual, mean, spread)
    spanel, sframe = _window(c * history, c * actual, c * mean, c * spread)
    base = evaluate(frame, panel, season=4).iloc[0]
    scaled = evaluate(sframe, spanel, season=4).iloc[0]
    for col in ("mase", "smape", "wape", "coverage_90", "under_p95", "burst_steps"):
        assert scaled[col] == pytest.approx(base[col], rel=1e-9, nan_ok=True)
    for col in ("mae", "rmse", "crps", "pinball_p95", "over_p95", "mean_abs_actual",
                "width_90"):
        assert scaled[col] == pytest.approx(c * base[col], rel=1e-9, abs=1e-12)
    assert scaled["burst_mse"] == pytest.approx(c * c * base["burst_mse"], rel=1e-9,
                                                nan_ok=True)
    for col in base.index:
        if isinstance(base[col], float) and not math.isnan(base[col]):
            assert base[col] >= 0, col


def test_real_backtest_of_the_naive_has_the_expected_mase(traces: object) -> None:
    from pathlib import Path

    from prism.ingest.pipeline import ingest
    from prism.store import Store

    assert isinstance(traces, Path)
    with Store.open(":memory:") as store:
        ingest(store, [traces / "helios_earth_vc" / "earth_vc6YE_1min.csv.gz"], "helios-vc")
        panel = store.load_panel(["earth/vc6YE/gpus_in_use"])
    frame = backtest([get_forecaster("naive"), get_forecaster("seasonal_naive")], panel,
                     horizon="1d", windows=7)
    out = summary(frame, panel).set_index("model")
    # reference: the naive forecast is the value at the cutoff; the scale the one-day
    # seasonal differences of everything up to it
    y = panel["value"].to_numpy()
    n, day = len(y), 144
    ratios = []
    for w in range(7):
        c = n - 1 - day - (6 - w) * day
        scale = np.mean(np.abs(y[day:c + 1] - y[:c + 1 - day]))
        ratios.append(np.mean(np.abs(y[c + 1:c + 1 + day] - y[c])) / scale)
    assert out.loc["naive", "mase"] == pytest.approx(np.mean(ratios))
    assert out.loc["naive", "windows"] == 7
    assert out["mase"].idxmin() == "naive"


# -- relative accuracy -------------------------------------------------------------------------
def test_wape_is_total_error_over_total_actual() -> None:
    assert wape([10.0, 0.0, 30.0], [12.0, 1.0, 27.0]) == pytest.approx((2 + 1 + 3) / 40)
    assert math.isnan(wape([0.0, 0.0], [1.0, 0.0]))


def windows_frame(rows: list[tuple[str, str, int, float, float]], **extra: str
                  ) -> pd.DataFrame:
    """A per-window frame from ``(model, series, cutoff hour, mae, mean_abs_actual)``."""
    out = pd.DataFrame(rows, columns=["model", "series_id", "cutoff", "mae", "mean_abs_actual"])
    out["cutoff"] = T0 + pd.to_timedelta(out["cutoff"], unit="h")
    out.insert(3, "n", 6)
    for key, value in extra.items():
        out[key] = str(value)
    return out


def test_avg_rel_mae_is_the_geometric_mean_of_window_ratios() -> None:
    w = windows_frame([
        ("naive", "a", 0, 1.0, 10.0), ("m", "a", 0, 2.0, 10.0),   # ratio 2
        ("naive", "a", 6, 4.0, 10.0), ("m", "a", 6, 2.0, 10.0),   # ratio 0.5
        ("naive", "b", 0, 0.0, 3.0), ("m", "b", 0, 0.0, 3.0),     # both exact: left out
    ])
    rel = relative_mae(w).set_index(["model", "series_id", "cutoff"])["rel_mae"]
    assert len(rel) == 4 and rel[("m", "a", T0)] == 2.0
    out = avg_rel_mae(w, n_boot=200).set_index("model")
    assert out.loc["m", "avg_rel_mae"] == 1.0
    assert out.loc["m", "windows"] == 2
    m = out.loc["m"]
    assert m["lo"] <= 1.0 <= m["hi"]
    assert out.loc["m", "lo"] == pytest.approx(0.5) and out.loc["m", "hi"] == pytest.approx(2.0)
    assert (out.loc["naive", ["avg_rel_mae", "lo", "hi"]] == 1.0).all()


def test_equal_ratios_give_a_zero_width_interval() -> None:
    rows = []
    for hour in range(0, 48, 6):
        for sid, base in (("a", 1.0), ("b", 7.0), ("c", 0.3)):
            rows += [("naive", sid, hour, base, 50.0), ("m", sid, hour, 1.25 * base, 50.0)]
    out = avg_rel_mae(windows_frame(rows)).set_index("model").loc["m"]
    assert out["avg_rel_mae"] == out["lo"] == out["hi"] == pytest.approx(1.25, rel=1e-15)
    assert out["windows"] == 24


def test_mae_is_floored_at_a_thousandth_of_the_series_level() -> None:
    w = windows_frame([
        ("naive", "a", 0, 0.0, 100.0), ("m", "a", 0, 0.5, 100.0),    # 0.5 / floor 0.1
        ("naive", "b", 0, 0.0, 0.0), ("m", "b", 0, 1e-9, 0.0),       # idle: floor 1e-9
    ])
    rel = relative_mae(w).set_index(["model", "series_id"])["rel_mae"]
    assert rel[("m", "a")] == pytest.approx(5.0)
    assert rel[("m", "b")] == pytest.approx(1.0)


def test_an_idle_window_of_a_busy_series_is_floored_at_the_series_level() -> None:
    # arrivals at night: every actual 0, the last value 0 and exact. The floor is a thousandth
    # of the series' mean level over its windows (2), not of the idle window's (0): a forecast
    # 0.1 off is 50 times the floor, not 1e8 times the 1e-9 of a series that is always idle
    w = windows_frame([
        ("naive", "a", 0, 0.0, 0.0), ("m", "a", 0, 0.1, 0.0),
        ("naive", "a", 6, 1.0, 4.0), ("m", "a", 6, 1.0, 4.0),
        ("naive", "b", 0, 0.0, 0.0), ("m", "b", 0, 0.1, 0.0),        # always idle
    ])
    rel = relative_mae(w).set_index(["model", "series_id", "cutoff"])["rel_mae"]
    assert rel[("m", "a", T0)] == pytest.approx(50.0)
    assert rel[("m", "b", T0)] == pytest.approx(1e8)
    # the scale comes from the baseline's windows: a model missing one is floored the same
    fewer = w.drop(w.index[(w["model"] == "m") & (w["cutoff"] > T0)])
    assert relative_mae(fewer).set_index(["model", "series_id", "cutoff"])[
        "rel_mae"][("m", "a", T0)] == pytest.approx(50.0)


def test_bootstrap_resamples_cutoffs_as_blocks() -> None:
    # at cutoff 0 both series have ratio 4, at cutoff 6 both 1/4: a draw of one cutoff moves
    # both series, so every replicate is a power of 4 between 1/4 and 4 in steps of 2 windows
    w = windows_frame([
        ("naive", "a", 0, 1.0, 9.0), ("m", "a", 0, 4.0, 9.0),
        ("naive", "b", 0, 1.0, 9.0), ("m", "b", 0, 4.0, 9.0),
        ("naive", "a", 6, 4.0, 9.0), ("m", "a", 6, 1.0, 9.0),
        ("naive", "b", 6, 4.0, 9.0), ("m", "b", 6, 1.0, 9.0),
    ])
    out = avg_rel_mae(w, n_boot=500, level=0.99).set_index("model").loc["m"]
    assert out["avg_rel_mae"] == pytest.approx(1.0)
    assert out["lo"] == pytest.approx(0.25) and out["hi"] == pytest.approx(4.0)


def test_extra_key_columns_keep_windows_apart() -> None:
    one = windows_frame([("naive", "a", 0, 1.0, 5.0), ("m", "a", 0, 2.0, 5.0)],
                        horizon="1h")
    two = windows_frame([("naive", "a", 0, 1.0, 5.0), ("m", "a", 0, 8.0, 5.0)],
                        horizon="1d")
    rel = relative_mae(pd.concat([one, two], ignore_index=True))
    assert list(rel.columns) == ["horizon", "model", "series_id", "cutoff", "mae",
                                 "mae_baseline", "rel_mae"]
    assert rel.loc[rel["model"] == "m", "rel_mae"].tolist() == [2.0, 8.0]
    with pytest.raises(DataContractError, match="more than once"):
        relative_mae(pd.concat([one, one], ignore_index=True))


def test_a_window_without_the_baseline_says_to_run_it() -> None:
    w = windows_frame([("naive", "a", 0, 1.0, 5.0), ("m", "a", 0, 2.0, 5.0),
                       ("m", "a", 6, 2.0, 5.0)])
    with pytest.raises(DataContractError, match="baseline 'naive' lacks.*same backtest"):
        avg_rel_mae(w)
    with pytest.raises(DataContractError, match="no window of the baseline 'snaive'"):
        avg_rel_mae(w, baseline="snaive")
    with pytest.raises(DataContractError, match="evaluate"):
        relative_mae(w.drop(columns="mean_abs_actual"))
    with pytest.raises(ConfigError, match="n_boot"):
        avg_rel_mae(w.iloc[:2], n_boot=0)


def test_relative_to_is_the_paired_ratio_of_two_models() -> None:
    w = windows_frame([
        ("naive", "a", 0, 1.0, 5.0), ("full", "a", 0, 2.0, 5.0), ("off", "a", 0, 3.0, 5.0),
        ("naive", "a", 6, 1.0, 5.0), ("full", "a", 6, 1.0, 5.0), ("off", "a", 6, 4.0, 5.0),
    ])
    out = relative_to(w, ["off", "naive"], "full").set_index("model")
    assert list(out.columns) == ["reference", "ratio", "lo", "hi", "windows"]
    assert out.loc["off", "ratio"] == pytest.approx(math.sqrt(1.5 * 4.0))
    avg = avg_rel_mae(w).set_index("model")["avg_rel_mae"]
    assert out.loc["off", "ratio"] == pytest.approx(avg["off"] / avg["full"])
    assert out.loc["naive", "ratio"] == pytest.approx(math.sqrt(0.5 * 1.0))
    with pytest.raises(DataContractError, match="no window"):
        relative_to(w, "missing", "full")


def test_summarize_windows_counts_catastrophes_and_pools_wape() -> None:
    # window 1: level 10, errors naive 1, m 3 (catastrophe); window 2: level 1, naive 1, m 1.5
    w = windows_frame([
        ("naive", "a", 0, 1.0, 10.0), ("m", "a", 0, 3.0, 10.0),
        ("naive", "a", 6, 1.0, 1.0), ("m", "a", 6, 1.5, 1.0),
        ("naive", "b", 0, 2.0, 10.0), ("m", "b", 0, 4.0, 10.0),   # exactly 2x: not one
        ("naive", "b", 6, 2.0, 10.0), ("m", "b", 6, 1.0, 10.0),
    ])
    w["mase"] = [1.0, 2.0] * 4
    w["crps"] = 0.5
    out = summarize_windows(w, n_boot=100).set_index("model")
    assert list(out.columns) == ["avg_rel_mae", "lo", "hi", "mase", "wape", "crps",
                                 "coverage_90", "coverage_lo", "coverage_hi", "width_90",
                                 "catastrophes", "windows"]
    assert out.loc["m", "catastrophes"] == 0.25
    assert out.loc["naive", "catastrophes"] == 0.0
    pooled = (3.0 + 1.5 + 4.0 + 1.0) / (10.0 + 1.0 + 10.0 + 10.0)
    mean_of_windows = (3.0 / 10 + 1.5 / 1 + 4.0 / 10 + 1.0 / 10) / 4
    assert out.loc["m", "wape"] == pytest.approx(pooled)
    assert out.loc["m", "wape"] != pytest.approx(mean_of_windows)
    assert out.loc["m", "mase"] == 2.0
    assert out.loc["m", ["coverage_90", "width_90", "coverage_lo", "coverage_hi"]].isna().all()


def test_coverage_interval_is_a_block_bootstrap_over_cutoffs() -> None:
    # cutoff 0 covers everything on both series, cutoff 6 nothing: the cutoffs, not the 4
    # windows, are the independent draws, so the interval spans most of [0, 1]
    w = windows_frame([
        ("naive", "a", 0, 1.0, 10.0), ("naive", "b", 0, 1.0, 10.0),
        ("naive", "a", 6, 1.0, 10.0), ("naive", "b", 6, 1.0, 10.0),
    ])
    w["coverage_90"] = [1.0, 1.0, 0.0, 0.0]
    out = summarize_windows(w, n_boot=400).set_index("model")
    assert out.loc["naive", "coverage_90"] == 0.5
    assert out.loc["naive", "coverage_lo"] == 0.0
    assert out.loc["naive", "coverage_hi"] == 1.0
    w["coverage_90"] = 0.9  # no spread: a zero-width interval at the value
    out = summarize_windows(w, n_boot=50).set_index("model")
    assert out.loc["naive", "coverage_lo"] == pytest.approx(0.9)
    assert out.loc["naive", "coverage_hi"] == pytest.approx(0.9)


def test_panel_summary_of_a_backtest_has_the_relative_width_and_coverage() -> None:
    panel = synthetic_panel(n=120)
    frame = backtest([get_forecaster("naive"), get_forecaster("seasonal_naive")], panel,
                     horizon=6, windows=4, step=3, quantiles=(0.05, 0.5, 0.95))
    out = panel_summary(frame, panel, n_boot=50).set_index("model")
    windows = evaluate(frame, panel)
    s = windows[windows["model"] == "seasonal_naive"]
    assert out.loc["naive", "avg_rel_mae"] == 1.0
    assert out.loc["seasonal_naive", "windows"] == 8
    assert out.loc["seasonal_naive", "coverage_90"] == pytest.approx(s["coverage_90"].mean())
    assert out.loc["seasonal_naive", "width_90"] == pytest.approx(
        s["width_90"].mean() / s["mean_abs_actual"].mean())


def test_summary_and_windows_equal_summary_and_evaluate() -> None:
    panel = synthetic_panel(n=120)
    frame = backtest([get_forecaster("naive"), get_forecaster("seasonal_naive")], panel,
                     horizon=6, windows=4, step=3, quantiles=(0.05, 0.5, 0.95))
    table, windows = summary_and_windows(frame, panel)
    pd.testing.assert_frame_equal(table, summary(frame, panel))
    pd.testing.assert_frame_equal(windows, evaluate(frame, panel))
    pd.testing.assert_frame_equal(summarize_windows(windows, random_state=0),
                                  panel_summary(frame, panel))


# AvgRelMAE invariants: MAEs well above the floor (a thousandth of the level)
WINDOW_ROWS = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 5),
                                 st.floats(0.5, 100.0), st.floats(0.5, 100.0)),
                       min_size=1, max_size=30, unique_by=lambda r: (r[0], r[1]))


@settings(max_examples=40, deadline=None)
@given(rows=WINDOW_ROWS, c=st.floats(0.25, 4.0))
def test_avg_rel_mae_is_one_for_the_baseline_and_scales_with_the_errors(
    rows: list[tuple[str, int, float, float]], c: float
) -> None:
    frame = []
    for sid, hour, err, other in rows:
        frame += [("naive", sid, hour, err, 50.0), ("m", sid, hour, other, 50.0),
                  ("cm", sid, hour, c * other, 50.0)]
    out = avg_rel_mae(windows_frame(frame), n_boot=100).set_index("model")
    assert (out.loc["naive", ["avg_rel_mae", "lo", "hi"]] == 1.0).all()
    for col in ("avg_rel_mae", "lo", "hi"):
        assert out.loc["cm"][col] == pytest.approx(c * out.loc["m"][col], rel=1e-9)
