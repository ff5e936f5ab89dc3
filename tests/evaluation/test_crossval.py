"""statsforecast-style cross-validation on PRISM's backtest: cutoffs, actuals and layout."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prism.errors import ConfigError, DataContractError
from prism.evaluation.crossval import cross_validation
from prism.forecasters import get_forecaster

START = pd.Timestamp("2026-01-05")
HOUR = pd.Timedelta("1h")


def _frame() -> pd.DataFrame:
    """Series a: 1..12 and b: 10, 20, .., 100, hourly from 2026-01-05 00:00, Nixtla names."""
    return pd.concat([
        pd.DataFrame({"unique_id": "a", "ds": pd.date_range(START, periods=12, freq=HOUR),
                      "y": np.arange(1.0, 13.0)}),
        pd.DataFrame({"unique_id": "b", "ds": pd.date_range(START, periods=10, freq=HOUR),
                      "y": np.arange(10.0, 101.0, 10.0)}),
    ], ignore_index=True)


def _hours(*hours: int) -> list[pd.Timestamp]:
    return [START + h * HOUR for h in hours]


def test_cutoffs_actuals_and_naive_match_a_hand_computation() -> None:
    out = cross_validation(get_forecaster("naive"), _frame(), h=2, n_windows=3, step_size=1,
                           level=[90])
    assert list(out.columns) == ["unique_id", "ds", "cutoff", "y", "naive", "naive-lo-90",
                                 "naive-hi-90"]
    # a has 12 points: the last window's 2 steps end at its last point (11:00), so its
    # cutoffs are 09:00, 08:00 and 07:00; b has 10 points: 07:00, 06:00 and 05:00
    assert out["unique_id"].tolist() == ["a"] * 6 + ["b"] * 6
    assert out["cutoff"].tolist() == _hours(7, 7, 8, 8, 9, 9, 5, 5, 6, 6, 7, 7)
    assert out["ds"].tolist() == _hours(8, 9, 9, 10, 10, 11, 6, 7, 7, 8, 8, 9)
    assert out["y"].tolist() == [9, 10, 10, 11, 11, 12, 70, 80, 80, 90, 90, 100]
    # naive: the last value at or before each cutoff
    assert out["naive"].tolist() == [8, 8, 9, 9, 10, 10, 60, 60, 70, 70, 80, 80]
    assert (out["naive-lo-90"] <= out["naive-hi-90"]).all()
    assert out[["naive-lo-90", "naive-hi-90"]].notna().all().all()


def test_models_side_by_side_refit_false_and_levels_in_statsforecast_order() -> None:
    models = {"naive": get_forecaster("naive"),
              "snaive": get_forecaster("seasonal_naive", season="2h")}
    out = cross_validation(models, _frame(), h=2, n_windows=2, step_size=2, level=[90, 80])
    assert list(out.columns[4:]) == [
        "naive", "naive-lo-80", "naive-lo-90", "naive-hi-80", "naive-hi-90",
        "snaive", "snaive-lo-80", "snaive-lo-90", "snaive-hi-80", "snaive-hi-90"]
    # a's cutoffs are 07:00 and 09:00; a season of two steps repeats the values at 06:00, 07:00
    a = out[out["unique_id"] == "a"]
    assert a["cutoff"].tolist() == _hours(7, 7, 9, 9)
    assert a["snaive"].tolist() == [7, 8, 9, 10]
    refit_once = cross_validation(get_forecaster("naive"), _frame(), h=2, n_windows=3,
                                  refit=False)
    every = cross_validation(get_forecaster("naive"), _frame(), h=2, n_windows=3)
    pd.testing.assert_frame_equal(refit_once, every)  # update-d naive = refitted naive


def test_prism_names_and_zoned_times_come_back_as_given() -> None:
    frame = _frame().rename(columns={"unique_id": "series_id", "ds": "ts", "y": "value"})
    frame["ts"] = frame["ts"].dt.tz_localize("UTC").dt.tz_convert("Europe/Paris")
    out = cross_validation(get_forecaster("naive"), frame, h=2, n_windows=3)
    assert list(out.columns) == ["series_id", "ts", "cutoff", "value", "naive"]
    assert str(out["ts"].dt.tz) == str(out["cutoff"].dt.tz) == "Europe/Paris"
    expected = cross_validation(get_forecaster("naive"), _frame(), h=2, n_windows=3)
    assert out["cutoff"].dt.tz_convert(None).tolist() == expected["cutoff"].tolist()
    assert out["value"].tolist() == expected["y"].tolist()


def test_bad_arguments_say_what_is_accepted() -> None:
    naive = get_forecaster("naive")
    with pytest.raises(ConfigError, match="strictly between 0 and 100"):
        cross_validation(naive, _frame(), h=2, level=[100])
    with pytest.raises(ConfigError, match="refit must be True, False or"):
        cross_validation(naive, _frame(), h=2, refit=0)
    with pytest.raises(DataContractError, match="mixes PRISM names"):
        cross_validation(naive, _frame().rename(columns={"y": "value"}), h=2)
    with pytest.raises(DataContractError, match="series 'b' has 10 points"):
        cross_validation(naive, _frame(), h=4, n_windows=4, step_size=2)


def test_cutoffs_match_statsforecast_cross_validation_of_its_naive() -> None:
    statsforecast = pytest.importorskip(
        "statsforecast", reason="statsforecast is an optional reference (the `bench` extra, "
        "which needs pandas < 3, so it is not in the test environment); to compare, run this "
        "test with it on PYTHONPATH: pip install --target DIR 'statsforecast>=2,<3'")
    from statsforecast.models import Naive

    frame = _frame()
    ours = cross_validation(get_forecaster("naive"), frame, h=2, n_windows=3, step_size=1)
    ref = statsforecast.StatsForecast(models=[Naive()], freq="h").cross_validation(
        df=frame, h=2, n_windows=3, step_size=1)
    if "unique_id" not in ref.columns:  # statsforecast < 1.7 kept it as the index
        ref = ref.reset_index()
    ref = ref.sort_values(["unique_id", "cutoff", "ds"]).reset_index(drop=True)
    for col in ("unique_id", "ds", "cutoff", "y"):
        assert ours[col].astype(ref[col].dtype).tolist() == ref[col].tolist(), col
    np.testing.assert_allclose(ours["naive"], ref["Naive"])
