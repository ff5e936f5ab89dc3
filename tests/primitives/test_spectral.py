"""Tests of prism.primitives.spectral: significant periods and the spectral refiner.

Ground truth is synthetic (built here) or decided on the real Helios traces by a criterion
computed independently of the code under test (see ``_has_daily_cycle``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.primitives.spectral import SpectralRefiner, find_periods, whole_ratio
from prism.primitives.types import Period

FREQ_S = 600  # 10-minute steps
DAY = 144  # steps
WEEK = 1008  # steps
MONTH = 4464  # 31 days of 10-minute steps, like the Helios traces
HELIOS_VCS = (
    "vc3sl vc6YE vc8Sj vcJLV vcJkd vcLJZ vcMod vcSoL vcTJs vccaA vcdI0 vcgkz vchbv vcira vcpDC "
    "vcvlY"
).split()


def _near(periods: list[Period], steps: float, tol: float = 0.02) -> list[Period]:
    return [p for p in periods if abs(p.steps / steps - 1.0) <= tol]


def _assert_valid(periods: list[Period], freq_s: int = FREQ_S) -> None:
    assert isinstance(periods, list)
    for p in periods:
        assert isinstance(p, Period)
        assert 0.0 <= p.strength <= 1.0
        assert p.steps >= 2.0
        assert p.seconds == pytest.approx(p.steps * freq_s)
        assert p.power_ratio > 1.0
    strengths = [p.strength for p in periods]
    assert strengths == sorted(strengths, reverse=True)


def _workload(seed: int, n: int = MONTH) -> np.ndarray:
    """A month of GPU demand: busy hours every day, a weekly swing, noise and damage.

    Damage: 12 bursts of +30..80 GPUs lasting 2..20 steps, 10 isolated zero readings, an outage
    of 200 steps at 0 and a gap of 60 NaN steps, plus a slow upward trend.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    busy = np.clip(np.sin(2 * np.pi * t / DAY), -0.3, 1.0)  # flat nights, peaked days
    week = 0.7 * np.sin(2 * np.pi * t / WEEK) + 0.3 * np.sin(4 * np.pi * t / WEEK + 1.0)
    y = 50.0 + 12.0 * busy + 8.0 * week + 0.01 * t / DAY + rng.normal(0.0, 2.5, n)
    for start in rng.choice(n - 20, 12, replace=False):
        y[start : start + rng.integers(2, 20)] += rng.uniform(30.0, 80.0)
    y[rng.choice(n, 10, replace=False)] = 0.0
    outage = int(rng.integers(0, n - 300))
    y[outage : outage + 200] = 0.0
    gap = int(rng.integers(0, n - 100))
    y[gap : gap + 60] = np.nan
    return y


# --------------------------------------------------------------------------------------------
# find_periods on synthetic ground truth


def test_daily_and_weekly_recovered_through_bursts_zeros_and_gaps() -> None:
    periods = find_periods(_workload(0), freq_s=FREQ_S)
    _assert_valid(periods)
    day, week = _near(periods, DAY), _near(periods, WEEK)
    assert len(day) == 1 and len(week) == 1, periods
    assert day[0].seconds == pytest.approx(86_400, rel=0.02)
    assert week[0].seconds == pytest.approx(7 * 86_400, rel=0.02)
    assert len(periods) == 2, periods  # no overtone (12 h) and no spurious period
    # the weekly profile contains the daily one, so it explains more of its (longer) detrending
    assert week[0].strength > 0.5 and day[0].strength > 0.5


def test_five_hours_and_ninety_minutes_found() -> None:
    rng = np.random.default_rng(5)
    t = np.arange(MONTH)
    # a sinusoid of 30 steps and a square wave of 9 steps (whose overtones are not periods)
    y = 3.0 * np.sin(2 * np.pi * t / 30) + 2.0 * np.sign(np.sin(2 * np.pi * t / 9 + 1.0))
    periods = find_periods(y + rng.normal(0.0, 2.0, MONTH), freq_s=FREQ_S)
    _assert_valid(periods)
    assert [round(p.seconds / 60) for p in sorted(periods, key=lambda p: p.steps)] == [90, 300]
    assert _near(periods, 30, tol=0.005) and _near(periods, 9, tol=0.005)


def test_whole_ratio_tells_a_period_and_its_multiples_from_others() -> None:
    assert whole_ratio(144, 151) and whole_ratio(151, 144)  # the day, placed by the spectrum
    assert whole_ratio(144, 1008) and whole_ratio(288, 144)  # a week of days, two days
    assert not whole_ratio(144, 695)  # 4.8 days: no whole number of days
    assert not whole_ratio(144, 210)  # 1.46
    assert whole_ratio(144, 160, tolerance=0.15) and not whole_ratio(144, 160)
    assert not whole_ratio(0, 144) and not whole_ratio(144, -1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_white_noise_has_no_period(seed: int) -> None:
    noise = np.random.default_rng(100 + seed).normal(10.0, 1.0, MONTH)
    assert find_periods(noise, freq_s=FREQ_S) == []


def test_random_walk_has_no_period() -> None:
    # Red noise: the slow wander that shuffled surrogates alone would call significant.
    walk = np.cumsum(np.random.default_rng(7).normal(size=MONTH))
    assert find_periods(walk, freq_s=FREQ_S) == []


@pytest.mark.parametrize(
    "values",
    [
        np.full(MONTH, 16.0),  # constant
        np.zeros(MONTH),  # an idle cluster, all month
        np.full(MONTH, np.nan),  # all missing
        np.array([]),  # empty
        np.sin(2 * np.pi * np.arange(31) / 8),  # too short (< 32 values)
    ],
    ids=["constant", "zeros", "all-nan", "empty", "too-short"],
)
def test_degenerate_series_have_no_period(values: np.ndarray) -> None:
    assert find_periods(values, freq_s=FREQ_S) == []


@pytest.mark.parametrize("n", [110, 301, 1000])  # 110 and 301 get an odd FFT length
def test_fractional_period_at_any_length(n: int) -> None:
    t = np.arange(n)
    y = np.sin(2 * np.pi * t / 7.3) + np.random.default_rng(n).normal(0.0, 0.3, n)
    periods = find_periods(y, freq_s=60)
    assert len(periods) == 1 and periods[0].steps == pytest.approx(7.3, rel=0.01), periods


def test_period_needs_min_cycles() -> None:
    t = np.arange(1200)
    y = np.sin(2 * np.pi * t / 500) + np.random.default_rng(3).normal(0.0, 0.1, t.size)
    assert find_periods(y, freq_s=FREQ_S) == []  # 2.4 cycles < min_cycles = 3
    assert _near(find_periods(y, freq_s=FREQ_S, min_cycles=2.0), 500)


def test_deterministic_and_input_untouched() -> None:
    y = _workload(1)
    before = y.copy()
    first = find_periods(y, freq_s=FREQ_S)
    assert find_periods(y, freq_s=FREQ_S) == first
    np.testing.assert_array_equal(y, before)


def test_bad_arguments_raise() -> None:
    y = _workload(0)
    with pytest.raises(DataContractError, match="1-D"):
        find_periods(y.reshape(-1, 2), freq_s=FREQ_S)
    with pytest.raises(ConfigError, match="alpha"):
        find_periods(y, freq_s=FREQ_S, alpha=1.5)
    with pytest.raises(ConfigError, match="freq_s"):
        find_periods(y, freq_s=0)
    with pytest.raises(ConfigError, match="n_surrogates"):
        find_periods(y, freq_s=FREQ_S, n_surrogates=0)


@settings(max_examples=150, deadline=None)
@given(
    arrays(
        np.float64,
        st.integers(0, 500),
        elements=st.floats(allow_nan=True, allow_infinity=False, width=64),
    )
)
def test_never_raises_on_arbitrary_series(values: np.ndarray) -> None:
    _assert_valid(find_periods(values, freq_s=FREQ_S))


# --------------------------------------------------------------------------------------------
# find_periods on the real Helios traces


def _has_daily_cycle(series: pd.Series) -> bool:
    """A daily cycle by the autocorrelation, decided without the code under test.

    The series less its centred one-day moving average (which removes the slow wander that
    makes a raw ACF decay monotonically, and keeps any daily cycle) has a daily cycle when its
    ACF at one day exceeds two Bartlett standard errors (``sqrt((1 + 2 sum r_k^2) / n)`` over
    the lags below one day, as statsmodels' ``acf`` bands) and peaks there: above the ACF at
    half a day and at a day and a half.
    """
    x = (series - series.rolling(DAY, center=True).mean()).dropna().to_numpy()
    x = x - x.mean()
    denom = float(np.dot(x, x))
    acf = np.array([np.dot(x[:-k], x[k:]) / denom for k in range(1, DAY * 3 // 2 + 1)])
    bartlett = np.sqrt((1.0 + 2.0 * np.sum(acf[: DAY - 1] ** 2)) / x.size)
    at = {k: float(acf[k - 1]) for k in (DAY // 2, DAY, DAY * 3 // 2)}
    return at[DAY] > 2.0 * bartlett and at[DAY] > at[DAY // 2] and at[DAY] > at[DAY * 3 // 2]


@pytest.fixture(scope="module")
def helios(traces: Path) -> dict[str, pd.Series]:
    """GPUs in use per Earth VC, as 10-minute means (4,464 points, May 2020)."""
    folder = traces / "helios_earth_vc"
    out = {}
    for vc in HELIOS_VCS:
        frame = pd.read_csv(
            folder / f"earth_{vc}_1min.csv.gz",
            usecols=["time", "running_gpu_num"],
            parse_dates=["time"],
            index_col="time",
        )
        out[vc] = frame["running_gpu_num"].resample("10min").mean()
    return out


def test_helios_daily_period_found_where_the_acf_shows_one(helios: dict[str, pd.Series]) -> None:
    daily = [vc for vc, s in helios.items() if _has_daily_cycle(s)]
    # The criterion must select something, or the test would pass vacuously.
    assert len(daily) >= 2, daily
    missed = {}
    for vc in daily:
        periods = find_periods(helios[vc].to_numpy(), freq_s=FREQ_S)
        if not [p for p in periods if abs(p.seconds / 86_400 - 1.0) <= 0.02]:
            missed[vc] = periods
    assert not missed, missed


def test_helios_every_vc_including_the_idle_ones(helios: dict[str, pd.Series]) -> None:
    for vc, series in helios.items():
        assert series.size == MONTH
        periods = find_periods(series.to_numpy(), freq_s=FREQ_S)
        _assert_valid(periods)
        # a period found must fit three times into the month
        assert all(p.steps <= MONTH / 3 for p in periods), (vc, periods)
    # vcJkd and vcira have no jobs 89 % and 94 % of the time
    for vc in ("vcJkd", "vcira"):
        assert (helios[vc] == 0).mean() > 0.85
        _assert_valid(find_periods(helios[vc].to_numpy(), freq_s=FREQ_S))


# --------------------------------------------------------------------------------------------
# SpectralRefiner


def _three_sinusoids(n: int, amplitude: float) -> tuple[np.ndarray, np.ndarray]:
    """Three sinusoids of non-integer periods, over ``n`` steps and the 144 after."""
    t = np.arange(n + DAY)
    terms = [(37.3, 0.3), (101.7, 1.1), (13.9, 2.0)]  # (period in steps, phase)
    total = sum(amplitude * np.cos(2 * np.pi * t / period + phase) for period, phase in terms)
    return total[:n], total[n:]


def test_refiner_extrapolates_three_sinusoids() -> None:
    amplitude = 1.0
    signal, future = _three_sinusoids(MONTH, amplitude)
    residual = signal + np.random.default_rng(0).normal(0.0, 1.0, MONTH)
    refiner = SpectralRefiner().fit(residual)
    assert refiner.frequencies_.size == 3
    np.testing.assert_allclose(np.sort(1.0 / refiner.frequencies_), [13.9, 37.3, 101.7], rtol=1e-3)
    np.testing.assert_allclose(refiner.amplitudes_, amplitude, rtol=0.1)
    forecast = refiner.extrapolate(DAY)
    rmse = float(np.sqrt(np.mean((forecast - future) ** 2)))
    assert rmse < 0.2 * amplitude, rmse


@pytest.mark.parametrize("seed", range(5))
def test_refiner_keeps_nearly_nothing_of_white_noise(seed: int) -> None:
    noise = np.random.default_rng(50 + seed).normal(0.0, 1.0, MONTH)
    assert SpectralRefiner().fit(noise).frequencies_.size <= 1


def test_refiner_fitted_and_remainder_rebuild_the_residual() -> None:
    signal, _ = _three_sinusoids(MONTH, 2.0)
    residual = signal + np.random.default_rng(1).normal(0.0, 0.5, MONTH)
    refiner = SpectralRefiner(max_terms=2).fit(residual)
    assert refiner.frequencies_.size == 2  # max_terms caps the terms
    fitted = refiner.fitted()
    assert fitted.shape == residual.shape
    # Exact up to the one rounding of each floating-point subtraction and addition.
    np.testing.assert_allclose(fitted + (residual - fitted), residual, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(refiner.fitted(), fitted)  # stable across calls


def test_refiner_surrogate_and_fixed_thresholds() -> None:
    signal, future = _three_sinusoids(MONTH, 1.0)
    residual = signal + np.random.default_rng(2).normal(0.0, 1.0, MONTH)
    for threshold in ("surrogate", 30.0):
        refiner = SpectralRefiner(threshold=threshold).fit(residual)
        assert refiner.frequencies_.size == 3
        assert np.sqrt(np.mean((refiner.extrapolate(DAY) - future) ** 2)) < 0.2


def test_refiner_degenerate_inputs_and_errors() -> None:
    flat = SpectralRefiner().fit(np.full(100, 3.0))
    assert flat.frequencies_.size == 0
    np.testing.assert_array_equal(flat.fitted(), np.zeros(100))
    np.testing.assert_array_equal(flat.extrapolate(5), np.zeros(5))
    assert SpectralRefiner().fit(np.array([])).extrapolate(3).shape == (3,)
    with pytest.raises(NotFittedError):
        SpectralRefiner().extrapolate(3)
    with pytest.raises(ConfigError, match="horizon"):
        flat.extrapolate(-1)
    with pytest.raises(ConfigError, match="threshold"):
        SpectralRefiner(threshold="loud").fit(np.zeros(50))
    with pytest.raises(DataContractError):
        SpectralRefiner().fit(np.zeros((10, 10)))
