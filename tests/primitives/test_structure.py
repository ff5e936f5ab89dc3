"""Trend, level shifts and bursts: seeded ground truth, oracles, a real trace, properties."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from prism.errors import ConfigError, DataContractError
from prism.primitives.structure import (
    burst_baseline,
    burst_component,
    find_bursts,
    find_level_shifts,
    robust_trend,
)
from prism.primitives.types import Burst

DAY = 144  # ten-minute steps
SIGMA = 1.0


def _cycle(n: int, amplitude: float, rng: np.random.Generator) -> np.ndarray:
    """A daily cycle with a second harmonic, so that it is not symmetric."""
    t = np.arange(n)
    return amplitude * (
        np.sin(2 * np.pi * t / DAY + rng.uniform(0, 2 * np.pi))
        + 0.4 * np.sin(4 * np.pi * t / DAY + rng.uniform(0, 2 * np.pi))
    )


def _inject_bursts(
    x: np.ndarray,
    rng: np.random.Generator,
    count: int = 20,
    margin: int = 3,
    avoid: tuple[int, int] | None = None,
) -> list[tuple[int, int]]:
    """Add ``count`` bursts (5-15 sigma, 1-6 steps) at random places, ``margin`` steps apart.

    ``avoid`` is a span of steps kept free of bursts.
    """
    n = x.size
    taken = np.zeros(n, dtype=bool)
    if avoid is not None:
        taken[avoid[0] : avoid[1]] = True
    spans: list[tuple[int, int]] = []
    while len(spans) < count:
        length = int(rng.integers(1, 7))
        start = int(rng.integers(30, n - 30 - length))
        if taken[start - margin : start + length + margin].any():
            continue
        taken[start : start + length] = True
        x[start : start + length] += rng.uniform(5, 15) * SIGMA
        spans.append((start, start + length))
    return sorted(spans)


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _stationary(n: int, seed: int, amplitude: float = 5.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 100.0 + _cycle(n, amplitude, rng) + rng.normal(0, SIGMA, n)


# --------------------------------------------------------------------------------------------
# bursts


@pytest.mark.parametrize("seed", range(6))
def test_bursts_recovered_with_precision_and_recall(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 14 * DAY
    x = 50.0 + _cycle(n, 5.0, rng) + rng.normal(0, SIGMA, n)
    truth = _inject_bursts(x, rng)
    found = find_bursts(x)
    spans = [(b.start, b.end) for b in found]
    precision = np.mean([any(_overlaps(s, t) for t in truth) for s in spans])
    recall = np.mean([any(_overlaps(s, t) for s in spans) for t in truth])
    assert precision >= 0.9 and recall >= 0.9, (precision, recall)
    for burst in found:
        hits = [t for t in truth if _overlaps((burst.start, burst.end), t)]
        if hits:
            assert any(t0 <= burst.peak < t1 for t0, t1 in hits)
            assert burst.height > 3 * SIGMA


def test_bursts_against_an_explicit_baseline_oracle() -> None:
    # Residuals repeat -1.5, -1, 0, 1, 1.5: median 0 and MAD 1 however a few are replaced, so
    # sigma = 1.4826, z > 4 means a residual above 5.93 and z > 2 (hysteresis) above 2.97.
    values = np.tile([-1.5, -1.0, 0.0, 1.0, 1.5], 40)
    values[50:53] = [4.0, 10.0, 4.0]  # core at 51, shoulders above threshold / 2: 50..53
    values[100] = values[102] = 10.0  # one quiet step between: merged by merge_gap=1
    values[150] = 4.0  # above threshold / 2 only: never a burst on its own
    zero = np.zeros_like(values)
    bursts = find_bursts(values, baseline=zero)
    assert [(b.start, b.end, b.peak) for b in bursts] == [(50, 53, 51), (100, 103, 100)]
    assert [b.height for b in bursts] == [10.0, 10.0]

    separate = find_bursts(values, baseline=zero, merge_gap=0)
    assert [(b.start, b.end) for b in separate] == [(50, 53), (100, 101), (102, 103)]
    longer = find_bursts(values, baseline=zero, min_length=3, merge_gap=0)
    assert [(b.start, b.end) for b in longer] == [(50, 53)]
    assert find_bursts(values, baseline=zero, threshold=7.0) == []


def test_no_bursts_on_a_constant_series_and_spikes_found_on_a_sparse_one() -> None:
    assert find_bursts(np.full(500, 7.0)) == []
    assert find_bursts(np.zeros(0)) == []
    sparse = np.zeros(500)
    sparse[[100, 300]] = 8.0  # MAD is 0 here: the mean absolute deviation takes over
    assert [(b.start, b.end) for b in find_bursts(sparse)] == [(100, 101), (300, 301)]


def test_burst_component_is_the_residual_inside_bursts() -> None:
    values = np.arange(10.0)
    baseline = np.ones(10)
    bursts = [Burst(start=2, end=4, peak=3, height=2.0), Burst(start=3, end=6, peak=5, height=4.0)]
    component = burst_component(values, bursts, baseline)
    expected = np.where((np.arange(10) >= 2) & (np.arange(10) < 6), values - 1.0, 0.0)
    np.testing.assert_array_equal(component, expected)
    np.testing.assert_array_equal(burst_component(values, [], baseline), np.zeros(10))


def test_burst_component_removes_the_bursts() -> None:
    rng = np.random.default_rng(3)
    n = 7 * DAY
    clean = 50.0 + _cycle(n, 5.0, rng) + rng.normal(0, SIGMA, n)
    x = clean.copy()
    truth = _inject_bursts(x, rng, count=10)
    baseline = burst_baseline(x)
    remainder = x - burst_component(x, find_bursts(x, baseline=baseline), baseline)
    inside = np.zeros(n, dtype=bool)
    for start, end in truth:
        inside[start:end] = True
    assert np.max(np.abs(remainder - clean)[inside]) < 4 * SIGMA
    # The default baseline of find_bursts is burst_baseline.
    assert find_bursts(x) == find_bursts(x, baseline=baseline)


# --------------------------------------------------------------------------------------------
# level shifts


def _first_shift_checks(x: np.ndarray, at: int, delta: float, *, period: int | None) -> None:
    shifts, level = find_level_shifts(x, period=period)
    assert len(shifts) == 1, shifts
    assert abs(shifts[0].at - at) <= 2, (shifts, at)
    assert shifts[0].delta == pytest.approx(delta, abs=1.5 * SIGMA)


@pytest.mark.parametrize("seed", range(8))
def test_one_shift_located_under_a_daily_cycle(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = 14 * DAY
    x = _stationary(n, seed)
    at = int(rng.integers(60, n - 60))
    x[at:] += 8 * SIGMA
    _first_shift_checks(x, at, 8 * SIGMA, period=DAY)


@pytest.mark.parametrize("seed", range(4))
def test_one_shift_located_without_the_period_on_a_month(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    n = 31 * DAY
    x = _stationary(n, seed, amplitude=5.0)
    at = int(rng.integers(n // 4, 3 * n // 4))
    x[at:] -= 8 * SIGMA
    _first_shift_checks(x, at, -8 * SIGMA, period=None)


@pytest.mark.parametrize("seed", range(5))
def test_two_shifts_both_found(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    n = 14 * DAY
    x = _stationary(n, seed)
    first = int(rng.integers(100, n // 2 - 100))
    second = int(rng.integers(n // 2 + 100, n - 100))
    x[first:] += 8 * SIGMA
    x[second:] -= 8 * SIGMA * float(rng.choice([-1.0, 1.0]))
    shifts, _ = find_level_shifts(x, period=DAY)
    assert len(shifts) == 2, shifts
    assert abs(shifts[0].at - first) <= 2 and abs(shifts[1].at - second) <= 2, shifts


@pytest.mark.parametrize("seed", range(3))
def test_shift_found_among_bursts(seed: int) -> None:
    # A burst touching the step is the same shape as an earlier step, so none within 10 steps.
    rng = np.random.default_rng(500 + seed)
    n = 14 * DAY
    x = _stationary(n, seed)
    at = int(rng.integers(200, n - 200))
    _inject_bursts(x, rng, avoid=(at - 10, at + 10))
    x[at:] += 8 * SIGMA
    _first_shift_checks(x, at, 8 * SIGMA, period=DAY)


@pytest.mark.parametrize("period", [DAY, None])
def test_no_shift_on_a_stationary_series(period: int | None) -> None:
    clean = [
        find_level_shifts(_stationary(14 * DAY, seed), period=period)[0] == [] for seed in range(10)
    ]
    assert sum(clean) >= 9


def test_a_trend_is_not_cut_into_a_staircase() -> None:
    rng = np.random.default_rng(5)
    n = 31 * DAY
    ramp = np.linspace(0, 20 * SIGMA, n) + _cycle(n, 5.0, rng) + rng.normal(0, SIGMA, n)
    assert find_level_shifts(ramp, period=DAY)[0] == []
    # ...while a shift on top of the trend is still found.
    ramp[2000:] += 8 * SIGMA
    shifts, _ = find_level_shifts(ramp, period=DAY)
    assert len(shifts) == 1 and abs(shifts[0].at - 2000) <= 2


def test_level_is_relative_and_piecewise_constant_oracle() -> None:
    x = np.concatenate([np.full(100, 5.0), np.full(100, 9.0), np.full(100, 2.0)])
    x += np.tile([0.1, -0.1], 150)
    shifts, level = find_level_shifts(x, min_size=20)
    assert [s.at for s in shifts] == [100, 200]
    assert [s.delta for s in shifts] == pytest.approx([4.0, -7.0])
    np.testing.assert_allclose(level, np.repeat([0.0, 4.0, -3.0], 100))


def test_short_or_constant_series_have_no_shifts() -> None:
    shifts, level = find_level_shifts(np.arange(50.0), min_size=36)
    assert shifts == [] and level.shape == (50,) and not level.any()
    shifts, level = find_level_shifts(np.full(1000, 3.0))
    assert shifts == [] and not level.any()
    assert find_level_shifts(np.ones(1000), max_shifts=0)[0] == []


# --------------------------------------------------------------------------------------------
# trend


@pytest.mark.parametrize("seed", range(4))
def test_trend_follows_the_line_and_ignores_bursts(seed: int) -> None:
    rng = np.random.default_rng(400 + seed)
    n = 14 * DAY
    line = np.linspace(10.0, 40.0, n)
    clean = line + _cycle(n, 5.0, rng) + rng.normal(0, SIGMA, n)
    bursty = clean.copy()
    _inject_bursts(bursty, rng)
    trend = robust_trend(bursty, window=DAY)
    inner = slice(DAY, n - DAY)
    assert np.max(np.abs(trend - line)[inner]) < 0.5 * SIGMA
    # Bursts move the robust trend far less than they move a plain moving average.
    pull = np.max(np.abs(trend - robust_trend(clean, window=DAY))[inner])
    kernel = np.ones(DAY + 1) / (DAY + 1)
    plain = np.convolve(bursty - clean, kernel, mode="same")
    assert pull < 0.4 * SIGMA and pull < 0.5 * np.max(plain[inner])


def test_trend_edge_cases() -> None:
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0])
    np.testing.assert_array_equal(robust_trend(x, window=1), x)
    np.testing.assert_allclose(robust_trend(np.full(300, 2.5), window=DAY), 2.5)
    assert robust_trend(np.zeros(0), window=5).shape == (0,)
    assert robust_trend(x, window=1000).shape == (5,)


# --------------------------------------------------------------------------------------------
# validation


def test_inputs_are_validated() -> None:
    with pytest.raises(DataContractError, match="fill gaps first"):
        find_bursts(np.array([1.0, np.nan, 2.0]))
    with pytest.raises(DataContractError, match="1-D"):
        robust_trend(np.ones((3, 3)), window=2)
    with pytest.raises(DataContractError, match="baseline has 2 steps"):
        find_bursts(np.ones(3), baseline=np.ones(2))
    with pytest.raises(DataContractError, match="outside the series"):
        burst_component(np.ones(3), [Burst(start=2, end=5, peak=2, height=1.0)], np.ones(3))
    with pytest.raises(ConfigError, match="window"):
        robust_trend(np.ones(3), window=0)
    with pytest.raises(ConfigError, match="threshold"):
        find_bursts(np.ones(3), threshold=0.0)
    with pytest.raises(ConfigError, match="min_size"):
        find_level_shifts(np.ones(3), min_size=0)
    with pytest.raises(ConfigError, match="penalty"):
        find_level_shifts(np.ones(3), penalty=-1.0)


# --------------------------------------------------------------------------------------------
# a real trace


def _gpus_in_use(traces: Path, vc: str) -> np.ndarray:
    frame = pd.read_csv(
        traces / "helios_earth_vc" / f"earth_{vc}_1min.csv.gz",
        usecols=["time", "running_gpu_num"],
        parse_dates=["time"],
        index_col="time",
    )
    return frame["running_gpu_num"].resample("10min").mean().to_numpy(dtype=np.float64)


# vc6YE is the busiest VC; vcvlY steps from 48 to 64 GPUs in use on 13 May, a shift to find.
@pytest.mark.parametrize("vc", ["vc6YE", "vcvlY"])
def test_real_helios_vc(traces: Path, vc: str) -> None:
    x = _gpus_in_use(traces, vc)
    n = x.size
    assert n == 4464

    trend = robust_trend(x, window=DAY)
    assert trend.shape == (n,) and np.isfinite(trend).all()
    assert x.min() <= trend.min() and trend.max() <= x.max()

    for period in (DAY, None):
        shifts, level = find_level_shifts(x, period=period)
        assert level.shape == (n,) and len(shifts) <= 10
        ats = [s.at for s in shifts]
        assert ats == sorted(ats) and all(36 <= a <= n - 36 for a in ats)
        # Piecewise constant, 0 before the first shift, jumping by delta exactly at each shift.
        assert (np.flatnonzero(np.diff(level)) + 1).tolist() == ats
        assert not level[: ats[0] if ats else n].any()
        idx = np.array(ats, dtype=int)
        np.testing.assert_allclose(level[idx] - level[idx - 1], [s.delta for s in shifts])
        if vc == "vcvlY":
            assert any(s.delta > 10 for s in shifts)

    baseline = burst_baseline(x)
    bursts = find_bursts(x, baseline=baseline)
    assert bursts and bursts == sorted(bursts, key=lambda b: b.start)
    assert all(0 <= b.start <= b.peak < b.end <= n and b.height > 0 for b in bursts)
    assert all(a.end < b.start for a, b in zip(bursts, bursts[1:], strict=False))
    component = burst_component(x, bursts, baseline)
    assert component.shape == (n,)
    assert np.count_nonzero(component) <= sum(b.end - b.start for b in bursts)


# --------------------------------------------------------------------------------------------
# properties

_finite = st.floats(allow_nan=False, allow_infinity=False)
_series = arrays(np.float64, st.integers(0, 400), elements=_finite)
# Mostly-repeated values with a few jumps: the shapes that break MAD-based code.
_steppy = arrays(
    np.float64, st.integers(0, 400), elements=st.sampled_from([0.0, 0.0, 0.0, 1.0, 5.0, -3.0, 1e6])
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.one_of(_series, _steppy), threshold=st.floats(0.5, 8.0), gap=st.integers(0, 3))
def test_find_bursts_is_well_formed(values: np.ndarray, threshold: float, gap: int) -> None:
    n = values.size
    bursts = find_bursts(values, threshold=threshold, merge_gap=gap)
    assert all(0 <= b.start <= b.peak < b.end <= n for b in bursts)
    assert all(a.end + gap < b.start for a, b in zip(bursts, bursts[1:], strict=False))
    if np.max(np.abs(values), initial=0.0) <= 1e300:
        assert all(np.isfinite(b.height) for b in bursts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.one_of(_series, _steppy),
    min_size=st.integers(1, 60),
    period=st.one_of(st.none(), st.integers(2, 100)),
)
def test_find_level_shifts_is_well_formed(
    values: np.ndarray, min_size: int, period: int | None
) -> None:
    n = values.size
    shifts, level = find_level_shifts(values, min_size=min_size, period=period)
    assert level.shape == (n,) and len(shifts) <= 10
    bounds = [0, *(s.at for s in shifts), n]
    if shifts:
        assert all(hi - lo >= min_size for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))
    if np.max(np.abs(values), initial=0.0) <= 1e300:
        assert np.isfinite(level).all()
        assert np.flatnonzero(np.diff(level)).tolist() == [s.at - 1 for s in shifts]
        assert not level[: bounds[1]].any()


@settings(max_examples=60, deadline=None)
@given(values=_series, window=st.integers(1, 500))
def test_robust_trend_is_well_formed(values: np.ndarray, window: int) -> None:
    trend = robust_trend(values, window=window)
    assert trend.shape == values.shape
    if values.size and np.max(np.abs(values)) <= 1e300:
        assert np.isfinite(trend).all()
