"""Periods of a series and the adaptive spectral refinement of a residual.

Two tools of the PRISM decomposition live here:

* :func:`find_periods` finds the significant periods of a series (a day, a week, a shift
  pattern, ...) without being told which to look for.
* :class:`SpectralRefiner` models what a decomposition leaves over with the few sinusoids that
  stand out of its spectrum, and continues them past the end of the series.

Method of :func:`find_periods`, in order:

1. *Robustify.* NaN or infinite values are gaps. A run of one repeated value far longer than
   the series' usual runs (an outage at 0 GPUs, a stuck counter) is a gap too; the long idle
   stretches of an idle cluster are its usual runs and stay values. Gaps are filled by linear
   interpolation. Bursts are winsorised: deviations from a running median (half-width
   ``n / 100`` steps) are clipped at 5 robust standard deviations (1.4826 MAD, or the standard
   deviation when more than half of them are equal). A least-squares line is removed.
2. *Periodogram.* Hann taper (its sidelobes fall fast, so the large low-frequency power of a
   workload does not leak onto the lines) and zero padding to twice the length.
3. *Local background.* Workloads have red spectra: the slow wander of the load has far more
   power than a faint daily cycle, and shuffled surrogates are white, so against them every
   slow wiggle would be significant. The periodogram is divided by a robust local background:
   the median power within +-25 % in frequency (at least +-16 bins), where a line fills too few
   bins to move it. At the lowest frequencies such a window would be lopsided (it cannot reach
   below the first bin) and would sit under the steep red spectrum; a resistant power-law fit
   over the first bins replaces it there.
4. *Surrogate threshold.* ``n_surrogates`` random permutations of the robustified series
   destroy any periodicity but keep the distribution of values (zeros and clipped bursts
   included). They are normalised exactly like the series, one ``rfft`` over a 2-D array.
   Periods of every scale being a priori alike, the error rate is shared between the octaves
   of period (2-4 steps, 4-8 steps, ...): in each, the largest normalised ordinate of every
   surrogate is recorded, a Gumbel law is fitted to these maxima (location per octave, scale
   common to all) and its ``1 - alpha / octaves`` quantile is the threshold. The whole search
   is thus a family-wise test at ``alpha``: white or red noise yields no period with
   probability about ``1 - alpha``.
5. *Candidates.* Local maxima of the normalised periodogram above the threshold, with periods
   of 2 to ``n / min_cycles`` steps. The frequency is refined by parabolic interpolation of the
   log power (near exact on the Gaussian-like Hann main lobe) at the line and at each of its
   overtones that is significant on its own, combined as the weighted least-squares fit of
   ``f_k = k f``: a week spans only four or five bins of a month, its seventh harmonic (the
   day) pins it down seven times better.
6. *Confirmation.* From the shortest candidate up, each on the series less the mean profiles
   of the shorter periods already confirmed (so that a strong short cycle does not put its own
   autocorrelation peaks next to a longer lag, and a week must repeat beyond its days): the
   autocorrelation at ``round(period)`` of that series less a centred moving average over one
   period (which keeps the cycle but not the slow wander that makes a raw ACF decay
   monotonically) must exceed ``2 / sqrt(n)`` and the autocorrelation at half the period.
7. *Strength.* The share of the variance of the robustified series less a moving average over
   one period (as in a classical decomposition, so the slow wander, which no cycle explains,
   does not dilute it) that the mean profile of a fold at the (fractional) period explains,
   with ``round(period)`` phases, corrected for the share that phase means of pure noise
   explain (the epsilon-squared of a one-way ANOVA). This is the seasonal strength of Wang,
   Smith and Hyndman (2006) with the profile as the seasonal part; it is in ``0..1``.
8. *Harmonics.* A period ``P / k`` of another found period ``P`` is an overtone of ``P``'s shape
   (the 12 hours of a peaked daily profile) when its line is the weaker of the two and it
   explains less than half of ``P``'s profile; it is dropped. A day inside a week explains most
   of the weekly profile, and a day whose line is stronger than that of a longer multiple is a
   fundamental of its own: both stay. A period of strength 0 (a line whose profile explains no
   more than noise would) is dropped too.

Summing the power of several harmonics of each trial frequency (as pulsar searches do) was
tried and left out: on the Helios traces it raised the thresholds more than it raised the
lines, which are close to sinusoidal there.

:class:`SpectralRefiner` divides the residual's (Hann-tapered, padded) periodogram by the same
robust local background, the noise floor. It then repeatedly takes the highest peak above the
threshold, refits all kept sinusoids by linear least squares and removes them (a CLEAN-like
greedy search), and finally refines all frequencies, amplitudes and phases jointly by
non-linear least squares (the Gaussian maximum-likelihood fit), which keeps long
extrapolations in phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import fft as sp_fft
from scipy.ndimage import median_filter
from scipy.optimize import least_squares

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.primitives.types import Period

__all__ = ["SpectralRefiner", "find_periods"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]

# 1.4826 * MAD estimates the standard deviation of Gaussian noise.
_MAD_TO_SIGMA = 1.4826
# Winsorise deviations from the running median at this many robust standard deviations: noise
# is never clipped, a burst of ten times the noise is.
_CLIP_SIGMAS = 5.0
# Relative to the largest |value| (the series is scaled to [-1, 1]): a spread below this is
# rounding error, so a constant series has no periods.
_REL_EPS = 1e-9
# Flat runs (outages) are runs of one value at least this many times the 99th percentile of
# the series' run lengths, and at least this long.
_FLAT_FACTOR = 10.0
_FLAT_MIN = 10
# Hampel window: half-width n // 100 steps (45 on a month of 10-minute steps), at least 3.
_HAMPEL_FRACTION = 100
_HAMPEL_MIN_HALF = 3
# Shorter series have too few spectral bins for a background and a surrogate test.
_MIN_LENGTH = 32
# Zero padding factor of the periodogram: half-bin sampling makes the parabolic peak refinement
# accurate to a few hundredths of a bin on the Hann main lobe.
_PAD = 2
# Local background window: +-25 % in frequency (a red spectrum changes little over it), but at
# least +-16 native bins, so that the median is over enough values and a line (4 bins wide under
# the Hann taper) is a small minority of them.
_BG_REL = 0.25
_BG_MIN_BINS = 16
# The background is evaluated at this many log-spaced frequencies and interpolated in log-log in
# between (it is smooth by construction), and each median uses at most this many ordinates:
# this keeps the medians of 99 surrogates cheap.
_BG_GRID = 28
_BG_MAX_SAMPLES = 96
# Overtones used to refine a line's frequency.
_REFINE_HARMONICS = 8
# The Euler-Mascheroni constant: mean of the standard Gumbel law.
_EULER_GAMMA = 0.5772156649015329
# The refiner keeps no sinusoid slower than this many cycles over the residual: slower, it is
# a trend, and a sinusoid fitted to a trend turns back soon after the end.
_REFINER_MIN_CYCLES = 2.0
# Two periods closer than this (relative) are the same period.
_SAME_PERIOD = 0.03
# A shorter period P / k is its own period if it explains at least this share of what P does.
_OWN_PERIOD_SHARE = 0.5
# Candidate lines examined at most (highest over threshold first); more are noise peaks.
_MAX_CANDIDATES = 16


# --------------------------------------------------------------------------------------------
# validation and preparation


def _as_1d(values: np.ndarray, name: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise DataContractError(
            f"{name} must be a 1-D array of a regular series, got shape {arr.shape}; "
            "pass one series at a time (e.g. panel['value'].to_numpy())"
        )
    return arr


def _fill_gaps(x: FloatArray) -> FloatArray | None:
    """Linear interpolation over non-finite values (held flat at the ends); None if all are."""
    ok = np.isfinite(x)
    if ok.all():
        return x.copy()
    if not ok.any():
        return None
    idx = np.arange(x.size)
    return np.asarray(np.interp(idx, idx[ok], x[ok]), dtype=np.float64)


def _robust_sigma(e: FloatArray) -> float:
    sigma = _MAD_TO_SIGMA * float(np.median(np.abs(e - np.median(e))))
    if sigma <= _REL_EPS:
        # More than half the values are identical (an idle cluster at 0 GPUs): the MAD is 0
        # although the series moves, so only the standard deviation can scale the clip.
        sigma = float(np.std(e))
    return sigma


def _flat_runs(x: FloatArray) -> NDArray[np.bool_]:
    """Steps inside runs of one repeated value far longer than the series' usual runs.

    A series that moves every step and then sits at exactly one value (0 in an outage, a stuck
    counter) for hours is not measuring workload there. "Far longer" is ten times the 99th
    percentile of its run lengths (at least 10 steps), so the long idle stretches of an idle
    cluster, which are its usual runs, stay values.
    """
    n = x.size
    starts = np.concatenate(([0], np.flatnonzero(np.diff(x) != 0.0) + 1))
    lengths = np.diff(np.concatenate((starts, [n])))
    limit = max(_FLAT_MIN, _FLAT_FACTOR * float(np.quantile(lengths, 0.99)))
    mask = np.zeros(n, dtype=bool)
    for s in np.flatnonzero(lengths >= limit):
        mask[starts[s] : starts[s] + lengths[s]] = True
    return mask


def _robustify(values: FloatArray) -> FloatArray | None:
    """The gap-filled, de-burst, detrended series, scaled; None when nothing varies.

    Scaling by the largest |value| first keeps arbitrary finite inputs (up to 1e308) from
    overflowing in the squares of the periodogram.
    """
    finite = np.isfinite(values)
    if values.size < _MIN_LENGTH or int(finite.sum()) < 2:
        return None
    scale = float(np.max(np.abs(values[finite])))
    if scale <= 0.0:
        return None
    x = np.where(finite, values / scale, np.nan)
    # Outages become gaps, but only while they are a minority: otherwise nothing would be left.
    filled = _fill_gaps(x)
    if filled is None:
        return None
    flat = _flat_runs(filled) & finite
    if 0 < int(flat.sum()) < values.size // 2:
        x[flat] = np.nan
        filled = _fill_gaps(x)
        if filled is None:
            return None
    # Bursts: winsorise the deviations from a running median (a Hampel filter that clips
    # instead of replacing). The window is short against the series, so the median follows the
    # cycles and the deviations measure noise; a burst shorter than half the window does not
    # move it. A cycle shorter than the window only widens the deviations, hence the clip: a
    # cycle is never clipped itself.
    half = max(_HAMPEL_MIN_HALF, filled.size // _HAMPEL_FRACTION)
    level = np.asarray(median_filter(filled, size=2 * half + 1, mode="nearest"), dtype=np.float64)
    dev = filled - level
    sigma = _robust_sigma(dev)
    centre = float(np.median(dev))
    clipped = level + np.clip(dev, centre - _CLIP_SIGMAS * sigma, centre + _CLIP_SIGMAS * sigma)
    t = np.arange(clipped.size, dtype=np.float64)
    slope, intercept = np.polyfit(t, clipped, 1)
    out = clipped - (intercept + slope * t)
    if float(np.std(out)) <= _REL_EPS:
        return None
    return np.asarray(out, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# spectrum and local background


def _nfft(n: int) -> int:
    return int(sp_fft.next_fast_len(_PAD * n, real=True))


def _periodogram(x: NDArray[np.floating], nfft: int) -> NDArray[np.floating]:
    """Hann-tapered, zero-padded periodogram along the last axis (rows are series)."""
    taper = np.hanning(x.shape[-1]).astype(x.dtype)
    spec = sp_fft.rfft(x * taper, n=nfft, axis=-1)
    return np.asarray(spec.real**2 + spec.imag**2)


@dataclass(frozen=True)
class _Background:
    """Local robust background of periodograms, planned once per ``(n, nfft)``.

    At each of a log-spaced grid of frequencies the background is the median power over a
    window centred on it. At the lowest frequencies such a window cannot reach below the first
    bin: a plain median of the lopsided window would sit at a higher frequency, under the
    steep red spectrum of a workload, and make slow wander significant. There the spectrum is
    fitted by a power law instead, over one window from the first bin: a resistant line
    (Tukey's three-group line: medians of the first and last thirds give the slope) through
    the log power against log frequency, its level the median of the log power less the line.
    Between grid points the log background is interpolated linearly in log frequency.
    """

    low: tuple[int, int, int]  # (start, stop, step) of the power-law window
    low_centres: FloatArray  # log frequencies of the grid points it serves
    windows: list[tuple[int, int, int]]  # (start, stop, step) of the other grid points
    # Linear interpolation in log frequency, per stretch of bins between two grid points:
    # (first bin, stop bin, left grid point) and the weight of the right one, per bin.
    stretches: list[tuple[int, int, int]]
    weight: FloatArray
    log_freq: FloatArray  # log of the bin index (bin 0 counted as 1)

    @classmethod
    def plan(cls, n: int, nfft: int) -> _Background:
        nbins = nfft // 2 + 1
        per_native = nfft / n  # padded bins per native bin
        # Neighbouring padded bins are strongly correlated; a stride of one native bin loses
        # nothing, and wide windows are thinned further to bound the cost.
        base_step = max(int(round(per_native)), 1)
        min_half = _BG_MIN_BINS * per_native
        # Log-spaced grid from the first native bin to Nyquist: the background of a red
        # spectrum is close to a power law, a straight line in log-log.
        centres = np.unique(np.round(np.geomspace(per_native, nbins - 1, _BG_GRID)))
        low_centres, windows = [], []
        for c in centres:
            half = max(_BG_REL * c, min_half)
            if c - half < 1.0:
                low_centres.append(float(np.log(c)))
                continue
            lo, hi = int(c - half), min(int(c + half) + 1, nbins)
            windows.append((lo, hi, max(base_step, (hi - lo) // _BG_MAX_SAMPLES)))
        low_stop = min(int(2.0 * min_half) + 2, nbins)
        grid = np.log(centres)
        log_freq = np.log(np.maximum(np.arange(nbins, dtype=np.float64), 1.0))
        if grid.size == 1:
            left = np.zeros(nbins, dtype=np.intp)
            weight = np.zeros(nbins)
        else:
            left = np.clip(np.searchsorted(grid, log_freq, side="right") - 1, 0, grid.size - 2)
            weight = np.clip((log_freq - grid[left]) / (grid[left + 1] - grid[left]), 0.0, 1.0)
        # Bins between two grid points are contiguous: slices, not gathers, for 99 rows.
        edges = np.flatnonzero(np.diff(left)) + 1
        starts = np.concatenate(([0], edges))
        stops = np.concatenate((edges, [nbins]))
        stretches = [(int(a), int(b), int(left[a])) for a, b in zip(starts, stops, strict=True)]
        return cls(
            low=(1, low_stop, base_step),
            low_centres=np.array(low_centres),
            windows=windows,
            stretches=stretches,
            weight=weight,
            log_freq=log_freq,
        )

    def of(self, power: NDArray[np.floating]) -> NDArray[np.floating]:
        """The background of periodogram rows (same shape, strictly positive)."""
        tiny = np.finfo(power.dtype).tiny
        levels: list[NDArray[np.floating]] = []
        if self.low_centres.size:
            lo, hi, step = self.low
            seg = np.log(np.maximum(power[..., lo:hi:step], tiny))
            lf = self.log_freq[lo:hi:step].astype(power.dtype)
            third = seg.shape[-1] // 3
            slope = np.zeros(seg.shape[:-1], dtype=power.dtype)
            run = float(np.median(lf[-third:]) - np.median(lf[:third])) if third >= 2 else 0.0
            if run > 0.0:
                rise = np.median(seg[..., -third:], axis=-1) - np.median(seg[..., :third], axis=-1)
                slope = rise / run
            level = np.median(seg - slope[..., None] * lf, axis=-1)
            levels.extend(level + slope * c for c in self.low_centres)
        # A window centred on its frequency needs no line: its median is unbiased for any
        # monotone spectrum, and less noisy. (The log of a median is the median of the logs.)
        levels.extend(
            np.log(np.maximum(np.median(power[..., a:b:s], axis=-1), tiny))
            for a, b, s in self.windows
        )
        log_levels = np.stack(levels, axis=-1)
        if log_levels.shape[-1] == 1:
            return np.asarray(np.exp(np.broadcast_to(log_levels, power.shape)))
        out = np.empty_like(power)
        weight = self.weight.astype(power.dtype)
        for start, stop, j in self.stretches:
            left, right = log_levels[..., j : j + 1], log_levels[..., j + 1 : j + 2]
            out[..., start:stop] = left + (right - left) * weight[start:stop]
        return np.asarray(np.exp(out, out=out))


def _refine_peak(log_power: FloatArray, k: int) -> float:
    """Sub-bin position of the peak at bin ``k``: parabola through the log power at k-1, k, k+1."""
    if k <= 0 or k >= log_power.size - 1:
        return float(k)
    a, b, c = log_power[k - 1], log_power[k], log_power[k + 1]
    denom = a - 2.0 * b + c
    if not np.isfinite(denom) or denom >= 0.0:
        return float(k)
    return float(k + min(max(0.5 * (a - c) / denom, -0.5), 0.5))


# --------------------------------------------------------------------------------------------
# surrogates


def _surrogates(x: FloatArray, count: int, rng: np.random.Generator) -> NDArray[np.float32]:
    """``count`` random permutations of ``x`` (rows), as float32.

    Drawing 99 independent permutations of 4,464 values costs more than the whole rest of the
    test, so each surrogate is ``x[p][q]`` for ``p`` and ``q`` from two small sets of independent
    uniform permutations. Every such composition is a uniform permutation and any two of them
    are independent (a composition with an independent uniform permutation is uniform and
    independent of the other factor). An empirical quantile is a sum of indicators whose
    variance depends only on pairwise covariances, so the threshold is as precise as with fully
    independent surrogates. float32 halves the FFT time; the statistic needs no more precision.
    """
    n = x.size
    base = max(int(math.ceil(math.sqrt(count))), 1)
    first = x.astype(np.float32)[np.stack([rng.permutation(n) for _ in range(base)])]
    second = np.stack([rng.permutation(n) for _ in range(base)])
    return np.asarray(first[:, second].reshape(-1, n)[:count], dtype=np.float32)


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
    nfft = _nfft(n)
    nbins = nfft // 2 + 1
    lo_bin = max(int(math.ceil(min_cycles * nfft / n)), 1)
    if lo_bin >= nbins - 1:
        return None
    background = _Background.plan(n, nfft)
    power = np.asarray(_periodogram(x, nfft), dtype=np.float64)
    ratio = power / background.of(power)
    rng = np.random.default_rng(seed)
    s_power = _periodogram(_surrogates(x, count, rng), nfft)
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

    See the module docstring for the method. Nothing about days or weeks is assumed: a period is
    anything from 2 steps to ``len(values) / min_cycles`` steps whose spectral line stands out
    of the local background more than in shuffled copies of the series, that repeats in the
    autocorrelation and that is not a harmonic of another period.

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
        confirming autocorrelation (see the module docstring). Empty for a constant,
        all-missing or too short (< 32 values) series, or when nothing is significant.

    Raises:
        DataContractError: ``values`` is not 1-D.
        ConfigError: an argument is out of range.
    """
    arr = _as_1d(values, "values")
    _check_args(freq_s, max_periods, min_cycles, alpha, n_surrogates)
    x = _robustify(arr)
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
        num += w * k * _refine_peak(spec.log_power, j)
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


# --------------------------------------------------------------------------------------------
# SpectralRefiner


class SpectralRefiner:
    """Sinusoids that stand out of a residual's spectrum, fitted and continued.

    The noise floor is the robust local background of the residual's periodogram (as in
    :func:`find_periods`), so a red residual does not pass its slow wander off as sinusoids.
    Only frequencies with at least two cycles over the residual are considered: anything
    slower is a trend, and a sinusoid fitted to a trend turns back soon after the end.

    Args:
        max_terms: at most this many sinusoids are kept (0 keeps none).
        threshold: ``"adaptive"``: a line must exceed the noise floor (a median) by the factor
            that one Gaussian-noise ordinate exceeds with probability ``0.05 / (n / 2)``, so
            about 0.05 false terms are expected on white noise; ``"surrogate"``: the largest
            normalised ordinate of 99 shuffled copies of the residual; a number: that factor
            over the noise floor.
        random_state: seed of the shuffles of ``threshold="surrogate"``.

    Attributes:
        frequencies_: kept frequencies in cycles per step, largest amplitude first.
        amplitudes_: their amplitudes, in the unit of the residual.
        phases_: their phases in radians: term ``j`` is
            ``amplitudes_[j] * cos(2 * pi * frequencies_[j] * t + phases_[j])`` at step ``t``
            (``t = 0`` is the first value passed to :meth:`fit`).
        n_: length of the fitted residual.
    """

    def __init__(
        self,
        *,
        max_terms: int = 8,
        threshold: str | float = "adaptive",
        random_state: int | None = 0,
    ) -> None:
        self.max_terms = max_terms
        self.threshold = threshold
        self.random_state = random_state

    # -- public API --------------------------------------------------------------------------

    def fit(self, residual: np.ndarray) -> SpectralRefiner:
        """Find and fit the significant sinusoids of ``residual``.

        Args:
            residual: a 1-D series (what a decomposition left over). NaN and infinite values are
                gaps, filled by linear interpolation for the fit.

        Returns:
            self, with ``frequencies_``, ``amplitudes_``, ``phases_`` and ``n_`` set (a refit
            replaces them).

        Raises:
            DataContractError: ``residual`` is not 1-D.
            ConfigError: ``max_terms`` or ``threshold`` is invalid.
        """
        arr = _as_1d(residual, "residual")
        self._check_params()
        freqs, amps, phases = self._fit(arr)
        self.n_ = int(arr.size)
        self.frequencies_ = freqs
        self.amplitudes_ = amps
        self.phases_ = phases
        return self

    def fitted(self) -> np.ndarray:
        """The in-sample sum of the kept sinusoids at steps ``0 .. n_ - 1``.

        Returns:
            A float array of length ``n_`` (zeros when no term was kept).

        Raises:
            NotFittedError: before :meth:`fit`.
        """
        self._check_fitted()
        return self._evaluate(np.arange(self.n_, dtype=np.float64))

    def extrapolate(self, horizon: int) -> np.ndarray:
        """The kept sinusoids continued for ``horizon`` steps after the end of the residual.

        Args:
            horizon: number of steps, >= 0.

        Returns:
            A float array of length ``horizon`` (steps ``n_ .. n_ + horizon - 1``).

        Raises:
            NotFittedError: before :meth:`fit`.
            ConfigError: ``horizon`` is negative or not an integer.
        """
        self._check_fitted()
        if int(horizon) != horizon or horizon < 0:
            raise ConfigError(f"horizon must be an integer >= 0, got {horizon!r}")
        return self._evaluate(np.arange(self.n_, self.n_ + int(horizon), dtype=np.float64))

    # -- internals ---------------------------------------------------------------------------

    def _check_params(self) -> None:
        if int(self.max_terms) != self.max_terms or self.max_terms < 0:
            raise ConfigError(f"max_terms must be an integer >= 0, got {self.max_terms!r}")
        th = self.threshold
        valid = (
            th in ("adaptive", "surrogate")
            if isinstance(th, str)
            else (isinstance(th, int | float) and th > 0)
        )
        if not valid:
            raise ConfigError(
                f"threshold must be 'adaptive', 'surrogate' or a factor > 0, got {th!r}"
            )

    def _check_fitted(self) -> None:
        if not hasattr(self, "frequencies_"):
            raise NotFittedError("this SpectralRefiner is not fitted yet; call fit(residual)")

    def _evaluate(self, t: FloatArray) -> FloatArray:
        out = np.zeros(t.size, dtype=np.float64)
        for f, a, p in zip(self.frequencies_, self.amplitudes_, self.phases_, strict=True):
            out += a * np.cos(2.0 * np.pi * f * t + p)
        return out

    def _fit(self, arr: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        empty = np.zeros(0, dtype=np.float64)
        n = arr.size
        filled = _fill_gaps(arr) if n else None
        if filled is None or n < _MIN_LENGTH or self.max_terms == 0:
            return empty, empty, empty
        scale = float(np.max(np.abs(filled)))
        if scale <= 0.0:
            return empty, empty, empty
        # Scaled to [-1, 1] so that any finite input is safe to square; the mean is not a
        # sinusoid and would leak into the lowest bins.
        y = filled / scale
        y = y - float(np.mean(y))
        if float(np.std(y)) <= _REL_EPS:
            return empty, empty, empty
        nfft = _nfft(n)
        t = np.arange(n, dtype=np.float64)
        background = _Background.plan(n, nfft)
        # The floor comes from the residual as given: its median ignores the few lines, and
        # keeping it fixed stops it sinking as the lines are removed.
        floor = background.of(np.asarray(_periodogram(y, nfft), dtype=np.float64))
        lowest = int(math.ceil(_REFINER_MIN_CYCLES * nfft / n))
        factor = self._factor(y, nfft, background, lowest)
        chosen: list[float] = []
        current = y
        for _ in range(int(self.max_terms)):
            p = np.asarray(_periodogram(current, nfft), dtype=np.float64)
            ratio = p / floor
            ratio[:lowest] = 0.0
            k = int(np.argmax(ratio))
            if ratio[k] <= factor:
                break
            f = _refine_peak(np.log(np.maximum(p, np.finfo(np.float64).tiny)), k) / nfft
            f = float(min(max(f, _REFINER_MIN_CYCLES / n), 0.5))
            if any(abs(f - g) < 0.5 / n for g in chosen):
                break  # the same line again: least squares could not remove it further
            chosen.append(f)
            coef = _linear_fit(y, t, np.array(chosen))
            current = y - _design(t, np.array(chosen)) @ coef
        if not chosen:
            return empty, empty, empty
        freqs, coef = _nonlinear_refine(y, t, np.array(chosen))
        a, b = coef[0::2], coef[1::2]
        amps = np.hypot(a, b) * scale
        # a cos(wt) + b sin(wt) = A cos(wt + phi) with A = hypot(a, b), phi = atan2(-b, a).
        phases = np.arctan2(-b, a)
        order = np.argsort(-amps)
        return (
            np.asarray(freqs[order], dtype=np.float64),
            np.asarray(amps[order], dtype=np.float64),
            np.asarray(phases[order], dtype=np.float64),
        )

    def _factor(self, y: FloatArray, nfft: int, background: _Background, lowest: int) -> float:
        """The factor over the noise floor that a line must exceed (see ``threshold``)."""
        n = y.size
        th = self.threshold
        if th == "adaptive":
            # A Gaussian-noise periodogram ordinate is exponential with mean mu and median
            # mu ln 2, and the floor is a median: P(ratio > c) = exp(-c ln 2) = 0.05 / (n / 2).
            return float(-math.log(0.05 / max(n / 2.0, 1.0)) / math.log(2.0))
        if th == "surrogate":
            rng = np.random.default_rng(self.random_state)
            sp = np.asarray(_periodogram(_surrogates(y, 99, rng), nfft), dtype=np.float64)
            return float(np.max((sp / background.of(sp))[:, lowest:]))
        return float(th)


def _design(t: FloatArray, freqs: FloatArray) -> FloatArray:
    """Columns ``cos(2 pi f_0 t), sin(2 pi f_0 t), cos(2 pi f_1 t), ...``."""
    w = 2.0 * np.pi * np.outer(t, freqs)
    out = np.empty((t.size, 2 * freqs.size), dtype=np.float64)
    out[:, 0::2] = np.cos(w)
    out[:, 1::2] = np.sin(w)
    return out


def _linear_fit(y: FloatArray, t: FloatArray, freqs: FloatArray) -> FloatArray:
    coef, *_ = np.linalg.lstsq(_design(t, freqs), y, rcond=None)
    return np.asarray(coef, dtype=np.float64)


def _nonlinear_refine(
    y: FloatArray, t: FloatArray, freqs: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Joint least squares of frequencies and coefficients (the Gaussian MLE of the sinusoids).

    Starts from the greedy estimates (Levenberg-Marquardt). A frequency may move by at most one
    bin: if one wanders further (onto another line or into the noise), the greedy estimates are
    kept. Time is centred for the fit so that frequency and phase errors do not correlate;
    the coefficients are moved back to ``t = 0`` at the end.

    Returns:
        The frequencies and the coefficients ``(a_0, b_0, a_1, b_1, ...)`` at ``t = 0``.
    """
    n, m = t.size, freqs.size
    t0 = 0.5 * (n - 1)
    tc = t - t0
    start = np.concatenate([freqs, _linear_fit(y, tc, freqs)])

    def residuals(p: FloatArray) -> FloatArray:
        return np.asarray(_design(tc, p[:m]) @ p[m:] - y, dtype=np.float64)

    def jacobian(p: FloatArray) -> FloatArray:
        w = 2.0 * np.pi * np.outer(tc, p[:m])
        cos, sin = np.cos(w), np.sin(w)
        a, b = p[m::2], p[m + 1 :: 2]
        jac = np.empty((n, 3 * m), dtype=np.float64)
        jac[:, :m] = 2.0 * np.pi * tc[:, None] * (b * cos - a * sin)
        jac[:, m::2] = cos
        jac[:, m + 1 :: 2] = sin
        return jac

    sol = least_squares(residuals, start, jac=jacobian, method="lm")
    moved = np.abs(sol.x[:m] - freqs)
    best = (
        sol.x if sol.success and np.all(moved <= 1.0 / n) and np.all(np.isfinite(sol.x)) else start
    )
    if float(np.sum(residuals(best) ** 2)) > float(np.sum(residuals(start) ** 2)):
        best = start
    f = np.asarray(best[:m], dtype=np.float64)
    a, b = best[m::2], best[m + 1 :: 2]
    # a cos(w (t - t0)) + b sin(w (t - t0)) in terms of cos(wt), sin(wt):
    w0 = 2.0 * np.pi * f * t0
    coef = np.empty(2 * m, dtype=np.float64)
    coef[0::2] = a * np.cos(w0) - b * np.sin(w0)
    coef[1::2] = a * np.sin(w0) + b * np.cos(w0)
    return f, coef
