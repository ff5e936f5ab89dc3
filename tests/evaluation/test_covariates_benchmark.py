"""The covariates benchmark's learner: features known at the origin, and they carry signal."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evaluation.benchmarks import covariates as cov
from prism.forecasters.gbm import GbmForecaster


def _grid(values: np.ndarray, first: pd.Timestamp) -> cov.Covariates:
    return cov.Covariates(first=int(first.timestamp()), step=600, values=values)


def test_features_read_nothing_after_the_origin() -> None:
    first = pd.Timestamp("2024-01-01")
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 50, size=(200, 3))
    at = np.array([first.timestamp() + 600 * i for i in (40, 100, 150)])
    last, scale = np.array([10.0, 20.0, 30.0]), np.array([40.0, 40.0, 40.0])
    before = cov.covariate_features(_grid(values, first), at, last, scale, hour=6)
    future = values.copy()
    future[41:] = 1e6  # everything after the first origin's last point
    after = cov.covariate_features(_grid(future, first), at, last, scale, hour=6)
    assert np.array_equal(before[0], after[0])  # the first origin: unchanged
    assert not np.array_equal(before[1], after[1])  # later origins do read their own past
    # pending now / over the hour / its change, headroom, what of the queue fits in it, GPUs
    # submitted over 1 h and 6 h
    np.testing.assert_allclose(before[0, 0], values[40, 0] / 40)
    np.testing.assert_allclose(before[0, 1], values[35:41, 0].mean() / 40)
    np.testing.assert_allclose(before[0, 2], (values[40, 0] - values[34, 0]) / 40)
    np.testing.assert_allclose(before[0, 3], (values[40, 1] - 10.0) / 40)
    np.testing.assert_allclose(before[0, 4], max(0.0, min(values[40, 0], values[40, 1] - 10.0))
                               / 40)
    np.testing.assert_allclose(before[0, 5], values[35:41, 2].sum() / 40)
    np.testing.assert_allclose(before[0, 6], values[5:41, 2].sum() / 40)


def test_missing_covariates_are_nan_not_zero() -> None:
    first = pd.Timestamp("2024-01-01")
    values = np.full((100, 3), np.nan)
    values[:, 0] = 5.0  # only a queue
    at = np.array([first.timestamp() + 600 * 50, first.timestamp() - 600 * 10])
    out = cov.covariate_features(_grid(values, first), at, np.ones(2), np.ones(2), hour=6)
    assert out[0, 0] == 5.0 and np.isnan(out[0, 3:]).all()  # no capacity: no headroom
    assert np.isnan(out[1]).all()  # before the grid starts
    assert np.isnan(cov.covariate_features(None, at, np.ones(2), np.ones(2), 6)).all()


@pytest.mark.slow
def test_a_queue_that_leads_the_series_makes_the_learner_better() -> None:
    # 8-GPU jobs queue for an hour, then run for an hour: the queue says what starts over the
    # next hour, which the series' own past cannot
    rng = np.random.default_rng(1)
    n, wait, run = 144 * 14, 6, 6
    queue = np.where(rng.uniform(size=n) < 0.3, 8.0, 0.0)
    starts = np.concatenate([np.zeros(wait), queue[:-wait]])
    ends = np.concatenate([np.zeros(wait + run), queue[:-(wait + run)]])
    ts = pd.date_range("2024-01-01", periods=n, freq="10min")
    sid = "c/vc/gpus_in_use"
    panel = pd.DataFrame({"series_id": sid, "ts": ts, "value": 40 + np.cumsum(starts - ends)})
    values = np.column_stack([queue, np.full(n, np.nan), np.full(n, np.nan)])
    covs = {sid: _grid(values, ts[0])}
    errors = []
    for back in range(4):  # four cutoffs an hour apart (with eight: 0.72, not 0.62)
        train = panel.iloc[:n - 6 * (back + 1)]
        actual = panel["value"].to_numpy()[len(train):len(train) + 6]
        errors.append([
            float(np.abs(m.fit(train).predict(horizon="1h")["mean"].to_numpy() - actual).mean())
            for m in (cov.CovariateGbm(covariates=covs, random_state=0),
                      GbmForecaster(random_state=0))])
    with_cov, without = np.mean(errors, axis=0)
    assert with_cov < 0.85 * without, errors


def test_an_unknown_panel_or_learner_is_refused_by_name(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cov.main(["--datasets", "helios_in_use,philly"]) == 2
    assert "['philly']" in capsys.readouterr().err
    assert cov.main(["--models", "gbm,ets"]) == 2
    assert "['ets']" in capsys.readouterr().err
