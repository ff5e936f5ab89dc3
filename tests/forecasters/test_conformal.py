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
    # the 6 h group's misses stretch the drift check's band as far as allowed; the stretch
    # applied is its geometric mean with adaptive conformal inference's (1 here: all
    # origins' errors have zero width, so ACI has nothing to scale)
    target = ends[:, None] + np.arange(mean.shape[1])[None, :]
    errors = history[np.minimum(target, len(history) - 1)] - mean
    adaptive = conformal.adaptive_factors(errors[None], target < len(history), ends, freq_s)[0]
    assert adaptive[1] == 1.0
    assert factors[1] == np.sqrt(hi * adaptive[1])


def test_adaptive_conformal_widens_bands_when_errors_grow_and_narrows_when_they_shrink(
        ) -> None:
    """Errors whose spread grows over the calibration origins: bands built from the earlier
    ones miss more than 10 %, and ACI's miss rate falls, so its stretch is above 1; errors
    whose spread shrinks give a stretch below 1. A series with a missing error gets none."""
    n, steps, freq_s = 3_000, 6, 600
    ends = calibration_origins(n, 1_000)
    rng = np.random.default_rng(3)
    noise = rng.normal(0, 1, (len(ends), steps))
    ramp = np.linspace(0.5, 3.0, len(ends))[:, None]
    missing = noise.copy()
    missing[3, 2] = np.nan
    errors = np.stack([noise * ramp, noise * ramp[::-1], missing * ramp])
    seen = np.ones((len(ends), steps), dtype=bool)
    factors = conformal.adaptive_factors(errors, seen, ends, freq_s)
    assert factors[0, 0] > 1.1 and factors[1, 0] < 0.9 and factors[2, 0] == 1.0, factors
    # each series' stretch is its own, whatever else is in the batch
    alone = conformal.adaptive_factors(errors[1:2], seen, ends, freq_s)
    assert np.array_equal(alone[0], factors[1])
    # the same shrinking spread in whole GPUs, a third of the errors 0: a miss rate between
    # two atoms is no coverage level, so ACI may widen such bands but never narrow them
    atoms = np.round(errors[1:2])
    assert (atoms == 0).mean() > conformal.ACI_MAX_ATOM
    assert conformal.adaptive_factors(atoms, seen, ends, freq_s)[0, 0] == 1.0
    assert conformal.adaptive_factors(np.round(errors[:1]), seen, ends, freq_s)[0, 0] > 1.1


def test_blocks_past_the_sure_ones_are_as_wide_as_either_estimate(monkeypatch) -> None:
    """A 3-day series holds out 1 day: its day-ahead errors come from origins a few hours
    apart. Blocks whose first step times ``MIN_BLOCK_WINDOWS`` exceeds that spread are not
    sure: each level there is the wider of the block's own offset and the last sure block's
    widened with the square root of the step. The sure blocks are as before."""
    rng = np.random.default_rng(3)
    n = 3 * 144
    history = 50 + np.cumsum(rng.choice([-4.0, 0.0, 0.0, 0.0, 4.0], n))
    ends = calibration_origins(n, n // 3)
    mean = _naive_forecasts(history, ends, n - int(ends[0]))
    new = conformal.calibration_offsets(history, ends, mean, None, ())
    span, windows = n - int(ends[0]), conformal.MIN_BLOCK_WINDOWS
    sure = conformal.sure_blocks(len(new.centers), span)
    edges = conformal._BLOCK_EDGES  # each block's first step
    assert 0 < sure < len(new.centers)
    assert edges[sure] * windows > span >= edges[sure - 1] * windows  # "sure" as documented
    monkeypatch.setattr(conformal, "MIN_BLOCK_WINDOWS", 1)  # every block sure: as before
    old = conformal.calibration_offsets(history, ends, mean, None, ())
    np.testing.assert_array_equal(new.centers, old.centers)
    np.testing.assert_array_equal(new.offsets[:sure], old.offsets[:sure])
    reach = old.offsets[sure - 1] * np.sqrt(old.centers[sure:] / old.centers[sure - 1])[:, None]
    lower, upper = new.levels < 0.5, new.levels > 0.5
    far = new.offsets[sure:]
    assert (far[:, lower] <= np.minimum(old.offsets[sure:, lower], reach[:, lower])).all()
    assert (far[:, upper] >= np.maximum(old.offsets[sure:, upper], reach[:, upper])).all()
    assert (np.diff(far, axis=1) >= 0).all()  # levels stay ordered
    assert (far != old.offsets[sure:]).any()  # the rule changed something here


def test_a_series_with_a_full_tail_is_calibrated_as_before(monkeypatch) -> None:
    # 28 days of 10-min data hold out 7: every block up to a day ahead is sure
    rng = np.random.default_rng(4)
    n, steps = 28 * 144, 144
    history = 50 + np.cumsum(rng.choice([-4.0, 0.0, 0.0, 0.0, 4.0], n))
    ends = calibration_origins(n, 7 * 144)
    mean = _naive_forecasts(history, ends, steps)
    new, _ = calibrate(history, ends, mean, None, (), 600)
    monkeypatch.setattr(conformal, "MIN_BLOCK_WINDOWS", 1)
    old, _ = calibrate(history, ends, mean, None, (), 600)
    assert conformal.sure_blocks(len(new.centers), 7 * 144) == len(new.centers)
    np.testing.assert_array_equal(new.offsets, old.offsets)


def _short_coverage(kind: str, n: int, reps: int = 400) -> float:
    """90 % coverage of the next 6 steps by the bands of series of ``n`` points too short to
    calibrate out of sample (:func:`conformal.history_calibration`), naive's forecast."""
    rng = np.random.default_rng(11)
    hits = 0.0
    for _ in range(reps):
        e = rng.normal(0.0, 10.0, n + 6)
        y = 100.0 + (np.cumsum(e) if kind == "walk" else e)
        calibration = conformal.history_calibration(y[:n], 6)
        assert calibration is not None
        band = conformal.bands(np.full(6, y[n - 1]), None, (), calibration, 6, [0.05, 0.95])
        hits += float(np.mean((y[n:] >= band[:, 0]) & (y[n:] <= band[:, 1])))
    return hits / reps


def test_a_series_too_short_to_calibrate_gets_bands_from_its_own_changes() -> None:
    """Under 72 points no block has the errors out-of-sample calibration needs: the bands had
    zero width (a 90 % band covering a noisy series' next hour 0 % of the time). Now they are
    the last value's errors in the series' own history, at the finite-sample level of the
    independent windows they hold: 88-93 % on noise and on a random walk of 30-60 points."""
    for kind in ("noise", "walk"):
        for n in (30, 60):
            assert 0.85 <= _short_coverage(kind, n) <= 0.95, (kind, n)
    assert conformal.history_calibration(np.array([1.0, 5.0, 2.0, 7.0]), 6) is None  # 3 changes
    flat = conformal.history_calibration(np.zeros(20), 6)  # idle: a zero-width band is right
    assert flat is not None and not np.any(flat.offsets)


def test_a_short_or_daily_series_forecast_has_bands() -> None:
    """Through a model, as a user fits one: 30 ten-minute points, and 120 daily points (7
    days held out were 7 steps, too few for any block: the tail is now at least 48 steps
    where a third of the series allows, so a daily series is calibrated out of sample)."""
    import pandas as pd

    from prism.forecasters import get_forecaster

    rng = np.random.default_rng(5)
    for freq, n in (("10min", 30), ("1D", 120)):
        panel = pd.DataFrame({"series_id": "c/vc/gpus_in_use",
                              "ts": pd.date_range("2026-01-01", periods=n, freq=freq),
                              "value": 100 + rng.normal(0, 10, n).round()})
        for alias in ("naive", "prism"):
            model = get_forecaster(alias).fit(panel)
            out = model.predict(6, (0.05, 0.95))
            assert (out["p95"] - out["p5"] > 20).all(), (alias, freq)  # sd 10: about 46 wide
            calibrated = model.calibration_.get("c/vc/gpus_in_use")
            assert (calibrated is not None and len(calibrated.centers) > 0) == (freq == "1D")
