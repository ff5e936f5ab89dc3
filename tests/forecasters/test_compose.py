"""Composite forecasters: the per-series model set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prism import registry
from prism.errors import ConfigError
from prism.forecasters import get_forecaster
from prism.forecasters.base import clone
from prism.forecasters.compose import SeriesModels

QUANTILES = (0.1, 0.5, 0.9)


@pytest.fixture
def panel() -> pd.DataFrame:
    """Three seeded 10-minute series of three days with a daily cycle of their own."""
    rng = np.random.default_rng(1)
    ts = pd.date_range("2026-01-05", periods=432, freq="10min")
    t = np.arange(len(ts))
    return pd.concat([
        pd.DataFrame({"series_id": f"c/vc{i}/gpus_in_use", "ts": ts,
                      "value": 40 + 10 * i + 15 * np.sin(2 * np.pi * t / 144 + i)
                      + rng.normal(0, 2, len(ts))})
        for i in range(3)
    ], ignore_index=True)


def test_series_models_forecast_as_the_models_they_hold(panel: pd.DataFrame) -> None:
    spec = get_forecaster("theta", season="1h")
    held = SeriesModels(model=spec).fit(panel)
    assert held.alias == "theta" and held.series_ids_ == sorted(panel["series_id"].unique())
    alone = {str(sid): clone(spec).fit(g) for sid, g in panel.groupby("series_id")}
    out = held.predict(24, QUANTILES)
    for sid, model in alone.items():
        expected = model.predict(24, QUANTILES)
        got = out[out["series_id"] == sid].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected)
        # the forecasting hook is the held model's, origin for origin
        history = held.history_[sid]
        ends = np.array([100, 200, len(history)])
        np.testing.assert_array_equal(held._paths(sid, history, ends, 12).mean,
                                      model._paths(sid, history, ends, 12).mean)


def test_series_models_update_each_held_model(panel: pd.DataFrame) -> None:
    first = panel.groupby("series_id").head(400)
    rest = panel.drop(first.index)
    held = SeriesModels(model=get_forecaster("window_average", window="1h")).fit(first)
    alone = SeriesModels(model=get_forecaster("window_average", window="1h")).fit(first)
    held.update(rest)
    assert held.version_ == 2
    for sid in held.series_ids_:
        model = held.models_[sid]
        assert model.version_ == 2 and len(held.history_[sid]) == 432
        assert held.fit_len_[sid] == alone.fit_len_[sid]


def test_series_models_learn_nothing_themselves(panel: pd.DataFrame) -> None:
    # fit() fits the held models; the shared-parameter path is for global models only
    with pytest.raises(ConfigError, match="global"):
        SeriesModels(model=get_forecaster("naive")).fit_shared(panel)


def test_the_registry_still_names_series_models() -> None:
    # refits pickled before the class moved to compose.py refer to prism.registry.SeriesModels
    assert registry.SeriesModels is SeriesModels
