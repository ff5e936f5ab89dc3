"""The significant periods of a series: :func:`find_periods` (method: see the package)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from prism.errors import ConfigError
from prism.primitives.spectral.periodogram import (
    Background,
    padded_length,
    periodogram,
    refine_peak,
    surrogates,
)
from prism.primitives.spectral.robust import as_1d, robustify
from prism.primitives.types import Period

FloatArray = NDArray[np.float64]

# Overtones used to refine a line's frequency.
_REFINE_HARMONICS = 8
# The Euler-Mascheroni constant: mean of the standard Gumbel law.
_EULER_GAMMA = 0.5772156649015329
# Two periods closer than this (relative) are the same period.
_SAME_PERIOD = 0.03
# A shorter period P / k is its own period if it explains at least this share of what P does.
_OWN_PERIOD_SHARE = 0.5
# Candidate lines examined at most (highest over threshold first); more are noise peaks.
_MAX_CANDIDATES = 16


# --------------------------------------------------------------------------------------------
# fold strength and ACF confirmation


def _minus_moving_average(x: FloatArray, period: float) -> FloatArray:
    """``x`` less its centred moving average over ``round(period)`` steps (valid part only).

    An average over exactly one period contains none of the periodic part, so the difference
    keeps the cycle intact and removes what moves more slowly (the classical decomposition's
    detrending).
    """
    lag = int(round(period))
    if lag <= 1:
        return x - float(np.mean(x))
    csum = np.concatenate(([0.0], np.cumsum(x)))
    start = lag // 2
    return np.asarray(x[start : start + x.size - lag + 1] - (csum[lag:] - csum[:-lag]) / lag)


def _fold_ss(x: FloatArray, period: float, offset: int = 0) -> tuple[float, float]:
    """Bias-corrected between-phase sum of squares of a fold, and the total sum of squares.

    The series (whose first value is step ``offset``) is folded at the fractional period
    (phase ``(t mod P) / P``) into ``round(P)`` phase bins. Each phase mean fits some noise, so
    the raw between-phase sum of squares grows with the number of phases even on noise; the
    epsilon-squared correction of a one-way ANOVA subtracts that expected part.
    """
    n = x.size
    m = max(int(round(period)), 2)
    mean = float(np.mean(x)) if n else 0.0
    ss_total = float(np.sum((x - mean) ** 2))
    if m >= n or ss_total <= 0.0:
        return 0.0, ss_total
    t = np.arange(offset, offset + n, dtype=np.float64)
    phase = np.minimum((np.mod(t, period) / period * m).astype(np.intp), m - 1)
    counts = np.bincount(phase, minlength=m).astype(np.float64)
    sums = np.bincount(phase, weights=x - mean, minlength=m)
    used = counts > 0
    ss_between = float(np.sum(sums[used] ** 2 / counts[used]))
    groups = int(used.sum())
    ms_within = max(ss_total - ss_between, 0.0) / max(n - groups, 1)
    return max(ss_between - (groups - 1) * ms_within, 0.0), ss_total


def _strength(x: FloatArray, period: float) -> float:
    """Share of the detrended variance that the mean profile at ``period`` explains, 0..1.

    Detrended as in a classical decomposition (less a moving average over one period), so the
    slow wander of a workload, which no cycle explains, does not dilute the share; this is the
    seasonal strength of Wang, Smith and Hyndman (2006) with the profile as the seasonal part.
    """
    between, total = _fold_ss(_minus_moving_average(x, period), period, int(round(period)) // 2)
    return float(min(max(between / total, 0.0), 1.0)) if total > 0.0 else 0.0


def _harmonic_share(x: FloatArray, long: float, short: float) -> float:
    """Share of the profile at ``long`` that is periodic at ``short`` (a divisor of it).

    Both folds are taken on the same series (detrended over ``long``), so the shares compare:
    a weekly profile made of seven similar days is mostly day-periodic, a daily profile is not
    12-hour-periodic although its overtone shows at 12 hours.
    """
    hp = _minus_moving_average(x, long)
    offset = int(round(long)) // 2
    between_long, _ = _fold_ss(hp, long, offset)
    between_short, _ = _fold_ss(hp, short, offset)
    return between_short / between_long if between_long > 0.0 else 0.0


def _confirm_acf(x: FloatArray, period: float) -> float | None:
    """ACF at ``round(period)`` of the series less a moving average; None if unconfirmed.

    On the series less its moving average over one period (which keeps the cycle), the ACF
    peaks at the period instead of decaying monotonically as red workload noise makes a raw
    ACF do. Confirmed when the ACF at the period exceeds ``2 / sqrt(n)`` (the white-noise
    band) and the ACF half a period away: a cycle correlates with itself a cycle later, and
    against itself half a cycle later. (Whether the ACF peaks exactly at the lag is not asked:
    over the few cycles of a long period the peak is too broad and noisy to place.)
    """
    n = x.size
    lag = int(round(period))
    if lag < 2 or 2 * lag >= n:
        return None
    hp = _minus_moving_average(x, period)
    hp = hp - float(np.mean(hp))
    denom = float(np.dot(hp, hp))
    if denom <= 0.0 or lag >= hp.size - 1:
        return None
    value = float(np.dot(hp[:-lag], hp[lag:])) / denom
    half = max(lag // 2, 1)
    at_half = float(np.dot(hp[:-half], hp[half:])) / denom
    if value <= 2.0 / math.sqrt(n) or value <= at_half:
        return None
    return value


# --------------------------------------------------------------------------------------------
# find_periods


def _check_args(
    freq_s: int, max_periods: int, min_cycles: float, alpha: float, n_surrogates: int
) -> None:
    if not (isinstance(freq_s, int | float) and freq_s > 0):
        raise ConfigError(f"freq_s must be the step in seconds, > 0, got {freq_s!r}")
    if int(max_periods) != max_periods or max_periods < 1:
        raise ConfigError(f"max_periods must be an integer >= 1, got {max_periods!r}")
    if not min_cycles >= 1.0:
        raise ConfigError(
            f"min_cycles must be >= 1 (cycles of a period in the series), got {min_cycles!r}"
        )
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must be a significance level in (0, 1), got {alpha!r}")
    if int(n_surrogates) != n_surrogates or n_surrogates < 2:
        raise ConfigError(
            f"n_surrogates must be an integer >= 2 (99 is the default), got {n_surrogates!r}"
        )


@dataclass(frozen=True)
class _Spectrum:
    """The normalised periodogram of one series and its surrogate thresholds."""

    nfft: int  # FFT length (bin i is frequency i / nfft)
    ratio: FloatArray  # periodogram over local background, per padded bin
    log_power: FloatArray
    thresholds: FloatArray  # per padded bin; inf outside the band of periods


def _spectrum(
    x: FloatArray, min_cycles: float, alpha: float, count: int, seed: int | None
) -> _Spectrum | None:
    """Normalised periodogram of ``x`` and the surrogate threshold of each trial frequency.

    Returns:
        None when no trial frequency is left (series too short for ``min_cycles``).
    """
    n = x.size
    nfft = padded_length(n)
    nbins = nfft // 2 + 1
    lo_bin = max(int(math.ceil(min_cycles * nfft / n)), 1)
    if lo_bin >= nbins - 1:
        return None
    background = Background.plan(n, nfft)
    power = np.asarray(periodogram(x, nfft), dtype=np.float64)
    ratio = power / background.of(power)
    rng = np.random.default_rng(seed)
    s_power = periodogram(surrogates(x, count, rng), nfft)
    s_ratio = (s_power / background.of(s_power))[:, lo_bin:]

    # Periods of every scale are a priori alike, so the error rate is shared evenly between the
    # octaves of period (2-4 steps, 4-8 steps, ...), each tested family-wise at
    # alpha / octaves: the few trial frequencies of long periods are not drowned by the
    # thousands of short ones, and the whole test still holds at alpha.
    octave = np.floor(np.log2((nbins - 1) / np.arange(lo_bin, nbins))).astype(np.intp)
    octaves = int(octave.max()) + 1
    # Bins run from low to high frequency, so octaves run from the last to the first.
    bounds = np.searchsorted(-octave, -np.arange(octaves + 1), side="left")
    s_max = np.empty((count, octaves))
    for o in range(octaves):
        stop = int(bounds[o - 1]) if o else octave.size
        s_max[:, o] = s_ratio[:, int(bounds[o]) : stop].max(axis=-1)
    # The largest normalised ordinate of a surrogate in an octave follows a Gumbel law (the
    # maximum of many nearly exponential values). Its quantile from moment estimates is far
    # steadier than an order statistic of 99 values, and it reaches the small levels that
    # alpha / octaves asks for.
    # The Gumbel scale is that of the ordinates' exponential tail, alike in every octave, so it
    # is estimated from all octaves together; only the location (which grows with the number
    # of bins in the octave) is estimated per octave. With 99 maxima per octave a separate
    # scale would make the thresholds of the long periods jump by several units.
    spread = float(np.sqrt(np.mean(np.var(s_max, axis=0, ddof=1))))
    scale = spread * math.sqrt(6.0) / math.pi
    loc = np.mean(s_max, axis=0) - _EULER_GAMMA * scale
    per_octave = loc - scale * math.log(-math.log1p(-alpha / octaves))
    thresholds = np.full(nbins, np.inf)
    thresholds[lo_bin:] = per_octave[octave]
    return _Spectrum(
        nfft=nfft,
        ratio=ratio,
        log_power=np.log(np.maximum(power, np.finfo(np.float64).tiny)),
        thresholds=thresholds,
    )


def find_periods(
    values: np.ndarray,
    *,
    freq_s: int,
    max_periods: int = 4,
    min_cycles: float = 3.0,
    alpha: float = 0.01,
    n_surrogates: int = 99,
    random_state: int | None = 0,
) -> list[Period]:
    """The significant periods of a series, strongest first.

    See :mod:`prism.primitives.spectral` for the method. Nothing about days or weeks is
    assumed: a period is anything from 2 steps to ``len(values) / min_cycles`` steps whose
    spectral line stands out of the local background more than in shuffled copies of the
    series, that repeats in the autocorrelation and that is not a harmonic of another period.

    Args:
        values: the series, 1-D, one value per step. NaN and infinite values are gaps (filled
            by linear interpolation); zeros are values.
        freq_s: the step in seconds (600 for 10-minute data), for ``Period.seconds``.
        max_periods: at most this many periods are returned.
        min_cycles: a period must fit at least this many times in the series.
        alpha: family-wise significance level of the spectral test.
        n_surrogates: shuffled surrogates for the significance threshold, >= 2.
        random_state: seed of the shuffles (None: fresh entropy, results may vary).

    Returns:
        The periods, sorted by strength descending. ``power_ratio`` is the normalised
        periodogram at the line over the surrogate threshold there (> 1); ``acf`` is the
        confirming autocorrelation (see :mod:`prism.primitives.spectral`). Empty for a constant,
        all-missing or too short (< 32 values) series, or when nothing is significant.

    Raises:
        DataContractError: ``values`` is not 1-D.
        ConfigError: an argument is out of range.
    """
    arr = as_1d(values, "values")
    _check_args(freq_s, max_periods, min_cycles, alpha, n_surrogates)
    x = robustify(arr)
    if x is None:
        return []
    spec = _spectrum(x, min_cycles, alpha, int(n_surrogates), random_state)
    if spec is None:
        return []
    n, nfft = x.size, spec.nfft

    lines: list[tuple[float, int]] = []  # (period, peak bin), strongest line first
    for i in _local_maxima(spec.ratio, spec.thresholds)[:_MAX_CANDIDATES]:
        f = _refine_frequency(spec, i) / nfft
        if not (min_cycles / n <= f <= 0.5):
            continue
        period = 1.0 / f
        if all(abs(period - p) > _SAME_PERIOD * p for p, _ in lines):
            lines.append((period, i))

    # Confirm from the shortest period up, each on the series less the mean profiles of the
    # shorter periods already confirmed: a strong short cycle would otherwise put its own
    # autocorrelation peaks next to a longer period's lag, and a longer period must repeat
    # beyond what the shorter ones explain (a week beyond its days).
    residual = x.copy()
    found: list[tuple[Period, float]] = []  # with the line's normalised power
    for period, i in sorted(lines):
        acf = _confirm_acf(residual, period)
        if acf is None:
            continue
        residual = residual - _profile(residual, period)
        ratio = float(spec.ratio[i])
        found.append(
            (
                Period(
                    steps=period,
                    seconds=period * float(freq_s),
                    strength=_strength(x, period),
                    power_ratio=ratio / float(spec.thresholds[i]),
                    acf=acf,
                ),
                ratio,
            )
        )
    return _drop_harmonics(found, x)[: int(max_periods)]


def whole_ratio(a: float, b: float, tolerance: float = 0.1) -> bool:
    """Whether the longer of two periods is a whole number of the shorter, within
    ``tolerance`` of their ratio (a day of 144 steps and a spectral line at 151: ratio 1.05)."""
    if a <= 0 or b <= 0:
        return False
    ratio = max(a, b) / min(a, b)
    return abs(ratio - round(ratio)) <= tolerance


def _local_maxima(ratio: FloatArray, thresholds: FloatArray) -> list[int]:
    """Bins where ``ratio`` is a local maximum above its threshold, highest over it first."""
    above = np.flatnonzero(ratio > thresholds)
    if above.size == 0:
        return []
    padded = np.concatenate(([-np.inf], ratio, [-np.inf]))
    peaks = [int(i) for i in above if padded[i + 1] >= padded[i] and padded[i + 1] > padded[i + 2]]
    return sorted(peaks, key=lambda i: -float(ratio[i] / thresholds[i]))


def _refine_frequency(spec: _Spectrum, i: int) -> float:
    """Sub-bin fundamental (in padded bins) from the line and its significant overtones.

    Each harmonic ``k`` significant on its own (the fundamental always counts) gives a refined peak
    ``f_k``; the fundamental is the least-squares fit of ``f_k = k f`` weighted by the
    normalised power, a stronger line having a more precise position. Overtones pin a long
    period down ``k`` times better than its own line, which spans only a few cycles.
    """
    ratio = spec.ratio
    num = den = 0.0
    for k in range(1, _REFINE_HARMONICS + 1):
        reach = k // 2 + 1
        lo, hi = max(k * i - reach, 1), min(k * i + reach + 1, ratio.size - 1)
        if hi <= lo:
            break
        j = lo + int(np.argmax(ratio[lo:hi]))
        if k > 1 and ratio[j] <= spec.thresholds[j]:
            continue
        w = float(ratio[j])
        num += w * k * refine_peak(spec.log_power, j)
        den += w * k * k
    return num / den if den > 0 else float(i)


def _profile(x: FloatArray, period: float) -> FloatArray:
    """The mean profile of ``x`` at ``period`` (fractional fold, ``round(period)`` phases)."""
    n = x.size
    m = max(int(round(period)), 2)
    phase = np.minimum(
        (np.mod(np.arange(n, dtype=np.float64), period) / period * m).astype(np.intp), m - 1
    )
    counts = np.bincount(phase, minlength=m).astype(np.float64)
    means = np.bincount(phase, weights=x, minlength=m) / np.maximum(counts, 1.0)
    means -= float(np.sum(means * counts) / max(float(counts.sum()), 1.0))
    return np.asarray(means[phase], dtype=np.float64)


def _drop_harmonics(found: list[tuple[Period, float]], x: FloatArray) -> list[Period]:
    """Periods by strength, without those that are only an overtone of a longer one.

    A shorter period ``S = L / k`` of a longer one ``L`` is an overtone of ``L``'s shape when
    its spectral line is the weaker of the two and it explains less than half of ``L``'s
    profile (the 12-hour overtone of a peaked daily profile). A day inside a week explains
    most of the weekly profile, and a line stronger than that of a longer multiple is a
    fundamental of its own; both stay.
    """
    n = x.size
    keep = []
    for short, short_line in found:
        overtone = any(
            long.steps > short.steps
            and _is_multiple(long.steps, short.steps, n)
            and short_line < long_line
            and _harmonic_share(x, long.steps, short.steps) < _OWN_PERIOD_SHARE
            for long, long_line in found
        )
        if not overtone and short.strength > 0.0:
            keep.append(short)
    return sorted(keep, key=lambda p: (-p.strength, p.steps))


def _is_multiple(long: float, short: float, n: int) -> bool:
    """Whether frequency ``1 / short`` is ``k >= 2`` times ``1 / long``, within half a bin."""
    k = round(long / short)
    if k < 2:
        return False
    return abs(1.0 / short - k / long) <= (0.5 + 0.05 * k) / n
