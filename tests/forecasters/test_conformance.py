"""One conformance suite over every forecaster x its test_params (STYLE.md section 8)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.forecasters import FORECASTERS, BaseForecaster, clone, get_forecaster

CASES = [
    pytest.param(cls, params, id=f"{alias}-{i}")
    for alias, cls in sorted(FORECASTERS.items())
    for i, params in enumerate(cls.test_params())
]
QUANTILES = (0.1, 0.5, 0.9, 0.99)


@pytest.fixture
def panel() -> pd.DataFrame:
    """Two seeded 10-minute series of three days with a daily cycle."""
    rng = np.random.default_rng(0)
    ts = pd.date_range("2026-01-05", periods=432, freq="10min")
    t = np.arange(len(ts))
    frames = [
        pd.DataFrame({"series_id": f"c/vc{i}/gpus_in_use", "ts": ts,
                      "value": 50 + 20 * np.sin(2 * np.pi * t / 144 + i) + rng.normal(0, 3,
                                                                                   len(ts))})
        for i in range(2)
    ]
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize(("cls", "params"), CASES)
def test_fit_returns_self_and_predict_before_fit_raises(
    cls: type[BaseForecaster], params: dict[str, Any], panel: pd.DataFrame
) -> None:
    model = cls(**params)
    with pytest.raises(NotFittedError):
        model.predict(6)
    assert model.fit(panel) is model


@pytest.mark.parametrize(("cls", "params"), CASES)
def test_contract_rows_and_quantiles(
    cls: type[BaseForecaster], params: dict[str, Any], panel: pd.DataFrame
) -> None:
    out = cls(**params).fit(panel).predict("2h", QUANTILES)
    assert list(out.columns) == ["series_id", "ts", "model", "mean", "p10", "p50", "p90", "p99"]
    assert len(out) == 2 * 12
    assert (out["model"] == cls.alias).all()
    for sid, group in out.groupby("series_id"):
        last = panel.loc[panel["series_id"] == sid, "ts"].max()
        expected = pd.date_range(last + pd.Timedelta("10min"), periods=12, freq="10min")
        assert list(group["ts"]) == list(expected)
    bands = out[["p10", "p50", "p90", "p99"]].to_numpy()
    assert (np.diff(bands, axis=1) >= 0).all()  # never cross
    assert (bands >= 0).all() and (out["mean"] >= 0).all()
    assert out[["mean", "p10", "p99"]].notna().all().all()


@pytest.mark.parametrize(("cls", "params"), CASES)
def test_deterministic_params_round_trip_and_input_untouched(
    cls: type[BaseForecaster], params: dict[str, Any], panel: pd.DataFrame
) -> None:
    before = panel.copy()
    model = cls(**params)
    first = model.fit(panel).predict(6, QUANTILES)
    second = clone(model).fit(panel).predict(6, QUANTILES)
    pd.testing.assert_frame_equal(first, second)
    pd.testing.assert_frame_equal(panel, before)
    assert clone(model).get_params() == model.get_params() == {**cls().get_params(), **params}
    assert not hasattr(clone(model), "series_ids_")


@pytest.mark.parametrize(("cls", "params"), CASES)
def test_refit_replaces_state(
    cls: type[BaseForecaster], params: dict[str, Any], panel: pd.DataFrame
) -> None:
    model = cls(**params).fit(panel)
    one = panel[panel["series_id"] == "c/vc1/gpus_in_use"]
    out = model.fit(one).predict(3)
    assert out["series_id"].unique().tolist() == ["c/vc1/gpus_in_use"]


def test_bad_horizons_quantiles_and_aliases(panel: pd.DataFrame) -> None:
    model = get_forecaster("naive").fit(panel)
    for horizon in ("-1h", "0", "15min", "soon"):
        with pytest.raises(ConfigError):
            model.predict(horizon)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        model.predict(3, (0.5, 1.5))
    with pytest.raises(ConfigError, match="unknown model 'prophet'.*seasonal_naive"):
        get_forecaster("prophet")
    with pytest.raises(DataContractError, match="shorter than one season"):
        get_forecaster("seasonal_naive", season="1w").fit(panel)


def test_seasonal_naive_repeats_the_last_season_exactly(panel: pd.DataFrame) -> None:
    out = get_forecaster("seasonal_naive", season="1d").fit(panel).predict("2d", (0.5,))
    for sid, group in out.groupby("series_id"):
        history = panel.loc[panel["series_id"] == sid, "value"].to_numpy()
        np.testing.assert_array_equal(group["mean"].to_numpy(),
                                      np.tile(history[-144:], 2).clip(min=0))


def test_naive_and_window_average_oracles(panel: pd.DataFrame) -> None:
    naive = get_forecaster("naive").fit(panel).predict(4, ())
    window = get_forecaster("window_average", window="1h").fit(panel).predict(4, ())
    for sid in naive["series_id"].unique():
        history = panel.loc[panel["series_id"] == sid, "value"].to_numpy()
        assert (naive.loc[naive["series_id"] == sid, "mean"] == history[-1]).all()
        expected = history[-6:].mean()
        np.testing.assert_allclose(window.loc[window["series_id"] == sid, "mean"], expected)
    assert list(naive.columns) == ["series_id", "ts", "model", "mean"]


def test_time_of_day_quantile_oracle(panel: pd.DataFrame) -> None:
    # Daily slots over the last 2 days: each forecast step is the mean of the two values at
    # the same time of day; the median is their median moved by the calibrated offset.
    model = get_forecaster("time_of_day_quantile", weekly=False, lookback="2d").fit(panel)
    out = model.predict("1d", (0.5,))
    for sid, group in out.groupby("series_id"):
        history = panel.loc[panel["series_id"] == sid, "value"].to_numpy()[-288:]
        expected = history.reshape(2, 144).mean(axis=0).clip(min=0)
        np.testing.assert_allclose(group["mean"].to_numpy(), expected)
        # the median of two values is their mean; the p50 offset is the calibrated one
        calibration = model.calibration_[str(sid)]
        level = list(calibration.levels).index(0.5)
        k = np.arange(1, 145)
        offsets = np.interp(k, calibration.centers, calibration.offsets[:, level])
        last = calibration.centers[-1]  # beyond the last block: widened with sqrt(step)
        offsets[k > last] = calibration.offsets[-1, level] * np.sqrt(k[k > last] / last)
        np.testing.assert_allclose(group["p50"].to_numpy(), (expected + offsets).clip(min=0))


def test_slot_quantiles_match_numpy() -> None:
    from prism.forecasters.baselines import _TOD_LEVELS, _nan_quantiles

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(300, 6))
    rows[rng.random(rows.shape) < 0.4] = np.nan
    rows[:, 0] = rng.normal(size=300)  # at least one value per row
    np.testing.assert_allclose(_nan_quantiles(rows, _TOD_LEVELS),
                               np.nanquantile(rows, _TOD_LEVELS, axis=1).T, rtol=1e-12)


def test_only_models_that_draw_at_random_take_a_random_state() -> None:
    # the boosted trees sample rows, the networks initialise weights, the hybrid does both
    seeded = {alias for alias, cls in FORECASTERS.items() if "random_state" in cls().get_params()}
    assert seeded == {"gbm", "gru", "lstm", "prism"}
