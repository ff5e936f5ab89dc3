"""The tapered periodogram, its robust local background and shuffled surrogates.

Shared by :func:`~prism.primitives.spectral.find_periods` (steps 2-4) and
:class:`~prism.primitives.spectral.SpectralRefiner` (its noise floor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import fft as sp_fft

FloatArray = NDArray[np.float64]

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


def padded_length(n: int) -> int:
    """The FFT length for ``n`` values: zero padded ``_PAD``-fold, rounded up to a fast size."""
    return int(sp_fft.next_fast_len(_PAD * n, real=True))


def periodogram(x: NDArray[np.floating], nfft: int) -> NDArray[np.floating]:
    """Hann-tapered, zero-padded periodogram along the last axis (rows are series)."""
    taper = np.hanning(x.shape[-1]).astype(x.dtype)
    spec = sp_fft.rfft(x * taper, n=nfft, axis=-1)
    return np.asarray(spec.real**2 + spec.imag**2)


@dataclass(frozen=True)
class Background:
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
    def plan(cls, n: int, nfft: int) -> Background:
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


def refine_peak(log_power: FloatArray, k: int) -> float:
    """Sub-bin position of the peak at bin ``k``: parabola through the log power at k-1, k, k+1."""
    if k <= 0 or k >= log_power.size - 1:
        return float(k)
    a, b, c = log_power[k - 1], log_power[k], log_power[k + 1]
    denom = a - 2.0 * b + c
    if not np.isfinite(denom) or denom >= 0.0:
        return float(k)
    return float(k + min(max(0.5 * (a - c) / denom, -0.5), 0.5))


def surrogates(x: FloatArray, count: int, rng: np.random.Generator) -> NDArray[np.float32]:
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
