"""Validation and robust preparation of a series for its spectrum (step 1 of find_periods).

Gaps are filled by linear interpolation, outages (runs of one value far longer than the
series' usual runs) become gaps, bursts are winsorised around a running median and a line is
removed (see :mod:`prism.primitives.spectral`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.ndimage import median_filter

from prism.errors import DataContractError

FloatArray = NDArray[np.float64]

# 1.4826 * MAD estimates the standard deviation of Gaussian noise.
_MAD_TO_SIGMA = 1.4826
# Winsorise deviations from the running median at this many robust standard deviations: noise
# is never clipped, a burst of ten times the noise is.
_CLIP_SIGMAS = 5.0
# Relative to the largest |value| (the series is scaled to [-1, 1]): a spread below this is
# rounding error, so a constant series has no periods.
REL_EPS = 1e-9
# Flat runs (outages) are runs of one value at least this many times the 99th percentile of
# the series' run lengths, and at least this long.
_FLAT_FACTOR = 10.0
_FLAT_MIN = 10
# Hampel window: half-width n // 100 steps (45 on a month of 10-minute steps), at least 3.
_HAMPEL_FRACTION = 100
_HAMPEL_MIN_HALF = 3
# Shorter series have too few spectral bins for a background and a surrogate test.
MIN_LENGTH = 32


def as_1d(values: np.ndarray, name: str) -> FloatArray:
    """``values`` as a float array, which must be 1-D (one regular series).

    Raises:
        DataContractError: for any other shape (``name`` says which argument).
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise DataContractError(
            f"{name} must be a 1-D array of a regular series, got shape {arr.shape}; "
            "pass one series at a time (e.g. panel['value'].to_numpy())"
        )
    return arr


def fill_gaps(x: FloatArray) -> FloatArray | None:
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
    if sigma <= REL_EPS:
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


def robustify(values: FloatArray) -> FloatArray | None:
    """The gap-filled, de-burst, detrended series, scaled; None when nothing varies.

    Scaling by the largest |value| first keeps arbitrary finite inputs (up to 1e308) from
    overflowing in the squares of the periodogram.
    """
    finite = np.isfinite(values)
    if values.size < MIN_LENGTH or int(finite.sum()) < 2:
        return None
    scale = float(np.max(np.abs(values[finite])))
    if scale <= 0.0:
        return None
    x = np.where(finite, values / scale, np.nan)
    # Outages become gaps, but only while they are a minority: otherwise nothing would be left.
    filled = fill_gaps(x)
    if filled is None:
        return None
    flat = _flat_runs(filled) & finite
    if 0 < int(flat.sum()) < values.size // 2:
        x[flat] = np.nan
        filled = fill_gaps(x)
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
    if float(np.std(out)) <= REL_EPS:
        return None
    return np.asarray(out, dtype=np.float64)
