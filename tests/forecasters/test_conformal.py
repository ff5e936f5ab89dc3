"""The conformal calibration's drift correction (prism.forecasters.conformal)."""

from __future__ import annotations

import numpy as np

from prism.forecasters import conformal
from prism.forecasters.conformal import TRACKED_LEVEL, calibrate, calibration_origins, drift_level


def _naive_forecasts(history: np.ndarray, ends: np.ndarray, steps: int) -> np.ndarray:
    """The last value carried forward from each origin."""
    return np.repeat(history[ends - 1][:, None], steps, axis=1)


def test_drift_level_is_split_conformal_finite_sample_level() -> None:
    # a week of 10-min origins: ~168 independent hour-ahead windows, ~2 day-ahead ones
    span = 7 * 144 / 3
    hour, day = drift_level(span, 6), drift_level(span, 144)
    assert TRACKED_LEVEL < hour < 0.905
    assert 0.92 < day < 0.94
    assert drift_level(10, 1000) == 1 - (1 - TRACKED_LEVEL) / 2  # one window at most
    assert abs(drift_level(1e9, 1) - TRACKED_LEVEL) < 1e-6  # many windows: the level itself


def test_zero_width_bands_that_miss_leave_finite_bands() -> None:
    """Forecasts exact at almost every calibration origin (a level that holds), so the bands
    have zero width, and 12 % of the late origins' errors off by one GPU (steps): each of
    those misses needs an infinite stretch. Before they were capped, the quantile of the
    stretches fell between two infinities and was NaN, and so was every band."""
    n, steps, freq_s = 3_000, 36, 600
    history = np.full(n, 40.0)
    ends = calibration_origins(n, 1_000)
    mean = np.repeat(history[ends - 1][:, None], steps, axis=1)
    late = np.arange(len(ends)) >= int(len(ends) * conformal._DRIFT_SPLIT)
    rng = np.random.default_rng(0)
    missed = late[:, None] & (rng.random(mean.shape) < 0.12)
    mean[missed] += rng.choice([-1.0, 1.0], size=int(missed.sum()))
    calibration, factors = calibrate(history, ends, mean, None, (), freq_s)
    assert np.isfinite(factors).all()
    assert np.isfinite(calibration.offsets).all()
    lo, hi = conformal._DRIFT_CLIP
    assert ((factors >= lo) & (factors <= hi)).all()
    assert factors[1] == hi  # the 6 h group's misses stretch its band as far as allowed
