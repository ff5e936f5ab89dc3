"""Structure of a series: a robust trend, level shifts and bursts.

Every function takes a 1-D float array of a *regular* series (one value per step) with no NaNs
or infinities: callers fill gaps first (``prism.derive`` fills with zero or hold). Indices in the
results are steps of that array.

Methods, in short:

* :func:`robust_trend`: values more than 3 robust sigmas from a short rolling median (bursts)
  replaced by that median, then a centred moving average over ``window`` steps with windows
  that shrink at the edges. Over one period the mean cancels a cycle of any shape.
* :func:`find_level_shifts`: best-first binary segmentation of a piecewise-constant mean on the
  series smoothed by a rolling median over ``min_size`` steps (which removes bursts and keeps
  step edges sharp). A split must reduce the sum of squares by more than ``penalty`` times a
  robust *long-run* noise variance ``tau2(m)``, measured from the differences of adjacent block
  means of ``m`` steps, for ``m`` from half the shorter side upwards. White noise gives
  ``sigma**2`` at every ``m``; a cycle or autocorrelated noise gives more at the sizes where it
  moves, so daily variation does not read as shifts, while a shift between long segments is
  judged against the (small) variation of long means. Each accepted point is then moved to the
  step a local matched filter finds, and kept only if that step is abrupt (z >=
  ``min_sharpness``), so a trend or a ramp is not cut into a staircase. Passing ``period``
  removes a robust seasonal profile first, which gives much more power on strongly periodic
  series.
* :func:`find_bursts`: robust z-scores of the residual from a baseline (default: a rolling
  median, :func:`burst_baseline`), runs above ``threshold`` extended while above
  ``threshold / 2`` (hysteresis), close runs merged.
* :func:`burst_component`: the residual inside bursts, zero elsewhere, so that a decomposition
  can subtract it.

A decomposition would typically find level shifts first (with the period), then the trend of
``values - level``, the seasonal part, and the bursts against ``trend + level + seasonal``.

All work is done on the series divided by its largest absolute value, so arbitrary finite inputs
neither overflow nor lose the noise floor; results are scaled back at the end.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import NDArray
from scipy.ndimage import median_filter

from prism.errors import ConfigError, DataContractError
from prism.primitives.types import Burst, LevelShift

__all__ = [
    "burst_baseline",
    "burst_component",
    "find_bursts",
    "find_level_shifts",
    "robust_trend",
]

FloatArray = NDArray[np.float64]

# 1.4826 * MAD estimates the standard deviation of Gaussian noise; sqrt(pi / 2) * mean absolute
# deviation does the same and is the fallback when more than half the values are identical.
_MAD_TO_SIGMA = 1.4826
_MEANAD_TO_SIGMA = 1.2533
# Relative to the largest |value| (the series is normalised to [-1, 1]): below this a spread is
# rounding error, never signal, so a constant series never yields bursts or shifts.
_REL_EPS = 1e-9
# Default baseline window of find_bursts: long enough that a burst of a few steps moves the
# median little, short enough to follow a daily cycle of 144 ten-minute steps.
_BURST_WINDOW = 25
# robust_trend replaces values this many robust sigmas away from a short rolling median by that
# median: wide enough to leave Gaussian noise almost untouched (0.3 % replaced, symmetrically, so
# without bias), narrow enough to catch bursts.
_OUTLIER_SIGMAS = 3.0
_CLEAN_PASSES = 3
# Default penalty is this many log(n): twice log(n) is BIC for one more change point (location
# and mean); the extra log(n) pays for the approximations (smoothing, estimated tau2, greedy
# search).
_PENALTY_LOGS = 3.0
# tau2 is measured with at least this many block means, so its spread is not a guess.
_MIN_BLOCKS = 16
# tau2 drops the largest fifth of the squared block differences (a level shift, a burst) and
# divides by E[X^2 | X^2 below its 80th percentile] of a standard normal to stay unbiased.
_TRIM_KEEP = 0.8
_TRIM_CONSISTENCY = 0.4377


# --------------------------------------------------------------------------------------------
# validation and small helpers


def _as_series(values: np.ndarray, name: str = "values") -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise DataContractError(
            f"{name} must be a 1-D array of a regular series, got shape {arr.shape}; "
            "pass one series at a time (e.g. panel['value'].to_numpy())"
        )
    if arr.size and not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise DataContractError(
            f"{name} has a non-finite value at step {bad}; fill gaps first "
            "(derive with --fill zero or --fill hold)"
        )
    return arr


def _check_positive(name: str, value: int, minimum: int = 1) -> None:
    if int(value) != value or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _scale_of(*arrays: FloatArray) -> float:
    """The largest absolute value over the arrays (1.0 when all are zero or empty)."""
    peak = max((float(np.max(np.abs(a))) if a.size else 0.0) for a in arrays)
    return peak if peak > 0.0 else 1.0


def _rolling_median(x: FloatArray, half: int) -> FloatArray:
    """Centred rolling median over ``2 * half + 1`` steps, windows shrinking at the edges."""
    n = x.size
    half = min(half, n - 1)
    if half <= 0:
        return x.copy()
    # median_filter is exact wherever the whole window lies inside the series; only the 2*half
    # edge steps need the shrunken window, and those are few.
    out = np.asarray(median_filter(x, size=2 * half + 1, mode="nearest"), dtype=np.float64)
    for i in range(min(half, n)):
        out[i] = np.median(x[: i + half + 1])
    for i in range(max(half, n - half), n):
        out[i] = np.median(x[i - half :])
    return out


def _robust_sigma(x: FloatArray) -> float:
    """Robust standard deviation: MAD, then mean absolute deviation, around the median."""
    if x.size == 0:
        return 0.0
    dev = np.abs(x - np.median(x))
    sigma = _MAD_TO_SIGMA * float(np.median(dev))
    if sigma <= 0.0:
        # More than half the values equal the median (sparse or integer series): the MAD says 0
        # although the series moves; the mean absolute deviation still sees the movement.
        sigma = _MEANAD_TO_SIGMA * float(np.mean(dev))
    return sigma


# --------------------------------------------------------------------------------------------
# trend


def _moving_average(x: FloatArray, width: int) -> FloatArray:
    """Centred moving average over exactly ``width`` steps, windows shrinking at the edges.

    An even width uses the symmetric "2 x width" average (half weight on both end values), as
    classical decomposition does, so that a cycle of ``width`` steps cancels exactly.
    """
    n = x.size
    if width <= 1 or n == 0:
        return x.copy()
    csum = np.concatenate(([0.0], np.cumsum(x)))
    idx = np.arange(n)

    def window_mean(lo: NDArray[np.intp], hi: NDArray[np.intp]) -> FloatArray:
        lo, hi = np.clip(lo, 0, n), np.clip(hi, 0, n)
        return np.asarray((csum[hi] - csum[lo]) / (hi - lo), dtype=np.float64)

    half = width // 2
    if width % 2:
        return window_mean(idx - half, idx + half + 1)
    return 0.5 * (window_mean(idx - half, idx + half) + window_mean(idx - half + 1, idx + half + 1))


def robust_trend(values: np.ndarray, *, window: int) -> np.ndarray:
    """A smooth trend that bursts hardly move.

    Two steps. First values more than 3 robust sigmas from a short rolling median
    (``min(window, 25)`` steps) are replaced by that median: bursts, spikes and dips go, and
    Gaussian noise loses 0.3 % of its values, symmetrically. Then a centred moving average over
    exactly ``window`` steps (the symmetric "2 x window" average when ``window`` is even). A
    mean, not a median, because the mean over one period cancels a cycle of any shape exactly,
    while the median of an asymmetric cycle is offset from its mean; the cleaning gives the mean
    the median's robustness. Bursts longer than about 12 steps move the short median and are
    kept in part.

    Windows shrink at the edges, so the first and last ``window // 2`` steps are estimated
    from one-sided windows: they lag a sloped trend and no longer cancel a cycle.

    Args:
        values: the series, 1-D, regular, without NaNs (fill gaps first).
        window: width of the moving average in steps, >= 1 (1 returns the series unchanged).
            One period (e.g. 144 ten-minute steps for a day) averages a daily cycle out.

    Returns:
        The trend, a float array of the same length.

    Raises:
        DataContractError: ``values`` is not 1-D or has non-finite values.
        ConfigError: ``window`` is not an integer >= 1.
    """
    x = _as_series(values)
    _check_positive("window", window)
    window = int(window)
    if x.size == 0 or window == 1:
        return x.copy()
    scale = _scale_of(x)
    z = x / scale
    half = min(window, _BURST_WINDOW) // 2
    local = _rolling_median(z, half)
    bound = _OUTLIER_SIGMAS * _robust_sigma(z - local)
    # Replaced, not clipped: a clipped burst still adds its 3 sigmas to every window it is in.
    cleaned = np.where(np.abs(z - local) > bound, local, z)
    for _ in range(_CLEAN_PASSES - 1):
        # A cluster of bursts can fill half the short window and lift its median; the median of
        # the cleaned series is lower, and the next pass catches the rest of the cluster.
        local = _rolling_median(cleaned, half)
        cleaned = np.where(np.abs(z - local) > bound, local, z)
    return np.asarray(_moving_average(cleaned, window) * scale, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# level shifts


def _deseasonalise(x: FloatArray, period: int) -> FloatArray:
    """Subtract a robust seasonal profile: the per-phase median of ``x - moving average``."""
    n = x.size
    # A moving average over exactly one period cancels any periodic shape, leaving trend and a
    # smeared level; the per-phase median over cycles then ignores the one cycle a shift smears.
    lo_half = period // 2
    csum = np.concatenate(([0.0], np.cumsum(x)))
    idx = np.arange(n)
    lo = np.maximum(idx - lo_half, 0)
    hi = np.minimum(lo + period, n)
    lo = np.maximum(hi - period, 0)
    detrended = x - (csum[hi] - csum[lo]) / (hi - lo)
    cycles = -(-n // period)
    grid = np.full(cycles * period, np.nan)
    grid[:n] = detrended
    profile = np.nanmedian(grid.reshape(cycles, period), axis=0)
    profile -= profile.mean()
    return np.asarray(x - profile[idx % period], dtype=np.float64)


def _block_scales(n: int) -> NDArray[np.intp]:
    """Block sizes 1, 2, 3, 4, 6, 8, 12, ... with at least ``_MIN_BLOCKS`` blocks in ``n``.

    Half-octave steps so that no single block size can alias a cycle away (a block of exactly
    one period hides it) without a neighbouring size seeing it.
    """
    scales: list[int] = [1]
    m = 2
    while n // m >= _MIN_BLOCKS:
        scales.append(m)
        if n // (3 * m // 2) >= _MIN_BLOCKS and 3 * m // 2 > m:
            scales.append(3 * m // 2)
        m *= 2
    return np.unique(np.array(scales, dtype=np.intp))


def _long_run_variance(x: FloatArray, scales: NDArray[np.intp]) -> FloatArray:
    """Robust long-run variance at each block size, as seen from that size upwards.

    ``m * Var(adjacent block-mean differences) / 2`` estimates the variance of a mean over ``m``
    steps times ``m``: ``sigma**2`` for white noise at any ``m``; more where a cycle or
    autocorrelation moves means over ``m`` steps. The variance is a trimmed mean of squares
    around the median difference: a level shift touches one difference and a trend only moves
    their median, so neither inflates it. The running maximum from the largest size down makes
    the value for size ``m`` cover every longer scale too.
    """
    tau2 = np.zeros(scales.size)
    for i, m in enumerate(scales):
        k = x.size // int(m)
        if k < 3:
            continue
        blocks = x[: k * m].reshape(k, int(m)).mean(axis=1)
        diffs = np.diff(blocks)
        # A trimmed mean of squares, not the MAD: a cycle makes the block differences take a
        # few repeating values, and the MAD of a few values can be zero although they are large.
        sq = np.sort((diffs - np.median(diffs)) ** 2)
        kept = sq[: max(1, int(np.ceil(_TRIM_KEEP * sq.size)))]
        tau2[i] = m * float(np.mean(kept)) / _TRIM_CONSISTENCY / 2.0
    # White noise is estimated best at size 1 (most differences); never trust a long-scale
    # estimate from few blocks below it.
    envelope = np.maximum.accumulate(tau2[::-1])[::-1]
    return np.asarray(np.maximum(envelope, tau2[0]), dtype=np.float64)


def _best_split(
    csum: FloatArray,
    a: int,
    b: int,
    min_size: int,
    scales: NDArray[np.intp],
    tau2: FloatArray,
    threshold: float,
) -> tuple[float, int]:
    """The best normalised sum-of-squares reduction from splitting ``[a, b)`` in two, and where.

    The reduction is divided by the long-run variance from half the shorter side upwards: a
    cycle can make a short segment look like another level, but not a segment of many periods.
    Half, not all of it, so that a block size that happens to be one period (where block means
    hide the cycle) is always backed by a shorter one that sees it.

    The normalised score says *whether* to split; *where* is the largest raw reduction among the
    points that pass, because the normaliser falls with the shorter side's length and would pull
    the point towards the middle.
    """
    if b - a < 2 * min_size:
        return 0.0, -1
    t = np.arange(a + min_size, b - min_size + 1)
    n1 = (t - a).astype(np.float64)
    n2 = (b - t).astype(np.float64)
    left = (csum[t] - csum[a]) / n1
    right = (csum[b] - csum[t]) / n2
    gain = n1 * n2 / (b - a) * (left - right) ** 2
    scale_idx = np.searchsorted(scales, np.minimum(n1, n2) / 2.0, side="right") - 1
    score = gain / tau2[np.maximum(scale_idx, 0)]
    best = float(np.max(score))
    if best <= threshold:
        return best, int(t[int(np.argmax(score))])
    return best, int(t[int(np.argmax(np.where(score > threshold, gain, -1.0)))])


def _split_score(
    csum: FloatArray, a: int, t: int, b: int, scales: NDArray[np.intp], tau2: FloatArray
) -> float:
    """The normalised reduction of :func:`_best_split` for one given split point ``t``."""
    n1, n2 = t - a, b - t
    diff = (csum[t] - csum[a]) / n1 - (csum[b] - csum[t]) / n2
    scale_idx = max(int(np.searchsorted(scales, min(n1, n2) / 2.0, side="right")) - 1, 0)
    return float(n1 * n2 / (b - a) * diff * diff / tau2[scale_idx])


def _step_filter(half: int) -> FloatArray:
    """The matched filter of a step in a window of ``2 * half`` steps with a local quadratic.

    The step dummy (0 before the middle, 1 from it) minus its least-squares fit on
    ``1, i, i**2``: the dot product of a window with it is the evidence for a step in the
    middle once a smooth local curve (whatever a cycle or trend does there) is allowed for.
    """
    i = np.arange(-half, half, dtype=np.float64) / half
    basis = np.stack([np.ones_like(i), i, i * i], axis=1)
    dummy = (i >= 0).astype(np.float64)
    coef, *_ = np.linalg.lstsq(basis, dummy, rcond=None)
    return np.asarray(dummy - basis @ coef, dtype=np.float64)


def _refine(
    x: FloatArray, smooth: FloatArray, a: int, t: int, b: int, min_size: int
) -> tuple[int, float]:
    """Move a change point to where a local step detector finds the step, and its z-score.

    A segment-wide split can be a few steps off, and much more when a cycle leans on it; the
    step is still the sharpest feature nearby. Each candidate within ``2 * min_size`` of ``t``
    is scored by the matched filter of :func:`_step_filter` on a window of about ``min_size``
    steps around it, with the sign of the shift. Values are first clipped to 3 noise sigmas
    around the smoothed series, so a burst next to the step cannot move it.

    The z-score (evidence over its noise, ``sigma * ||filter||``) says how abrupt the change is:
    a ramp or a slow trend, which a piecewise-constant fit also cuts into steps, scores near 0.
    ``inf`` when the series has no noise; 0 when no window fits.
    """
    n = x.size
    half = max(min_size // 2, 4)
    lo_u = max(a + min_size, t - 2 * min_size, half)
    hi_u = min(b - min_size, t + 2 * min_size, n - half)
    if hi_u <= lo_u:
        return t, 0.0
    sign = np.sign(np.median(x[t:b]) - np.median(x[a:t]))
    if sign == 0:
        return t, 0.0
    sigma = _robust_sigma(np.diff(x[a:b])) / np.sqrt(2.0)
    lo, hi = lo_u - half, hi_u + half
    y = x[lo:hi]
    if sigma > 0:
        y = smooth[lo:hi] + np.clip(y - smooth[lo:hi], -3.0 * sigma, 3.0 * sigma)
    windows = np.lib.stride_tricks.sliding_window_view(y, 2 * half)
    step_filter = _step_filter(half)
    evidence = sign * (windows @ step_filter)
    best = int(np.argmax(evidence))
    noise = sigma * float(np.linalg.norm(step_filter))
    if noise <= 0.0:
        return lo_u + best, (np.inf if evidence[best] > 0 else 0.0)
    return lo_u + best, float(evidence[best]) / noise


def find_level_shifts(
    values: np.ndarray,
    *,
    min_size: int = 36,
    penalty: float | None = None,
    max_shifts: int = 10,
    period: int | None = None,
    min_sharpness: float = 4.5,
) -> tuple[list[LevelShift], np.ndarray]:
    """Change points of the level (a piecewise-constant mean), robust to bursts and cycles.

    Best-first binary segmentation on the series smoothed by a rolling median over
    ``min_size`` steps; a split is kept while it reduces the sum of squares by more than
    ``penalty`` long-run noise variances (see the module docstring). Each new point is moved to
    the step that a local matched filter (step plus a local quadratic) finds within
    ``2 * min_size`` steps, and dropped unless that step is abrupt; at the end every point is
    checked again against its final neighbours. Segment levels are medians of the values
    (deseasonalised when ``period`` is given); neighbouring segments with equal medians merge.

    Args:
        values: the series, 1-D, regular, without NaNs (fill gaps first).
        min_size: shortest segment in steps (>= 1); also the smoothing window, so bursts
            shorter than ``min_size // 2`` steps cannot make shifts.
        penalty: least reduction of the sum of squares, in units of the long-run noise
            variance, that a split must bring; ``None`` means ``3 * log(n)`` (BIC's
            ``2 * log(n)`` plus a margin). Larger finds fewer shifts.
        max_shifts: most shifts to return (>= 0); the strongest are split first.
        period: the seasonal period in steps, if known (e.g. 144 for daily at 10 minutes). A
            robust per-phase profile is removed first; ignored on series shorter than two
            periods. With ``None`` cycles are tolerated as noise: no false shifts, but less
            power, so that an 8-sigma shift under a daily cycle of 10 sigmas is found on a
            month of 10-minute data and missed on a week.
        min_sharpness: least z-score of the local step (>= 0). With ``min_size`` 36 the
            default 4.5 keeps abrupt shifts of about 4 noise sigmas and more and rejects ramps
            and trends (their z stays below 4); 0 keeps every persistent change, gradual ones
            included.

    Returns:
        ``(shifts, level)``: the shifts sorted by ``at`` (first step of the new level,
        ``delta`` = new level - old level, in the series' unit), and the level component, a
        float array as long as ``values`` that is 0 before the first shift and steps by each
        ``delta`` at each ``at``, so that it carries only the shifts and can be added to a trend.

    Raises:
        DataContractError: ``values`` is not 1-D or has non-finite values.
        ConfigError: a parameter is out of range.
    """
    x = _as_series(values)
    _check_positive("min_size", min_size)
    _check_positive("max_shifts", max_shifts, minimum=0)
    if penalty is not None and not (np.isfinite(penalty) and penalty >= 0):
        raise ConfigError(f"penalty must be a finite number >= 0 or None, got {penalty!r}")
    if period is not None:
        _check_positive("period", period, minimum=2)
    if not (np.isfinite(min_sharpness) and min_sharpness >= 0):
        raise ConfigError(f"min_sharpness must be a finite number >= 0, got {min_sharpness!r}")
    n = x.size
    min_size = int(min_size)
    level = np.zeros(n, dtype=np.float64)
    if n < 2 * min_size or max_shifts == 0:
        return [], level

    scale = _scale_of(x)
    z = x / scale
    if period is not None and n >= 2 * period:
        z = _deseasonalise(z, int(period))
    smooth = _rolling_median(z, min_size // 2)
    scales = _block_scales(n)
    tau2 = np.maximum(_long_run_variance(z, scales), _REL_EPS**2)
    threshold = _PENALTY_LOGS * np.log(n) if penalty is None else float(penalty)
    csum = np.concatenate(([0.0], np.cumsum(smooth)))

    # Best-first: always split the segment whose best split scores most, so max_shifts keeps the
    # strongest shifts rather than the first ones found.
    cps: list[int] = []
    candidates: dict[tuple[int, int], tuple[float, int]] = {
        (0, n): _best_split(csum, 0, n, min_size, scales, tau2, threshold)
    }
    while len(cps) < max_shifts and candidates:
        (a, b), (score, t) = max(candidates.items(), key=lambda kv: kv[1][0])
        if t < 0 or score <= threshold:
            break
        del candidates[(a, b)]
        # Refine before splitting the two halves: a point a few steps off leaves a sliver of the
        # old level in one half, and that sliver would pass as a shift of its own.
        t, sharpness = _refine(z, smooth, a, t, b, min_size)
        if sharpness < min_sharpness:
            # Persistent but not abrupt (a ramp, a trend cut into a staircase): not a level
            # shift. The segment stays whole.
            continue
        cps.append(t)
        candidates[(a, t)] = _best_split(csum, a, t, min_size, scales, tau2, threshold)
        candidates[(t, b)] = _best_split(csum, t, b, min_size, scales, tau2, threshold)
    cps.sort()

    # A greedy split can become redundant once its neighbours are in place; drop the weakest such
    # point until all pass against their final neighbours.
    while cps:
        bounds = [0, *cps, n]
        scores = [
            _split_score(csum, bounds[i], bounds[i + 1], bounds[i + 2], scales, tau2)
            for i in range(len(cps))
        ]
        weakest = int(np.argmin(scores))
        if scores[weakest] > threshold:
            break
        cps.pop(weakest)

    # Equal medians (common on integer counts) mean no visible step: merge those segments, and
    # again if the merged medians meet their neighbours'.
    while True:
        bounds = [0, *cps, n]
        levels = np.array([np.median(z[lo:hi]) for lo, hi in itertools.pairwise(bounds)])
        keep = np.diff(levels) != 0.0
        if keep.all():
            break
        cps = [c for c, k in zip(cps, keep, strict=True) if k]

    with np.errstate(over="ignore", invalid="ignore"):
        deltas = np.diff(levels) * scale
        offsets = np.concatenate(([0.0], np.cumsum(deltas)))
    lengths = np.diff(bounds)
    level = np.repeat(offsets, lengths).astype(np.float64)
    # A delta far below the running offset can vanish in the cumulative sum; report only the
    # shifts the level array shows, so that its jumps are exactly the returned shifts.
    visible = offsets[1:] != offsets[:-1]
    shifts = [
        LevelShift(at=int(c), delta=float(d))
        for c, d, v in zip(cps, deltas, visible, strict=True)
        if v
    ]
    return shifts, level


# --------------------------------------------------------------------------------------------
# bursts


def _runs(mask: NDArray[np.bool_]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Starts and ends (one past) of the runs of True in ``mask``."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def burst_baseline(values: np.ndarray, *, window: int = _BURST_WINDOW) -> np.ndarray:
    """The default baseline of :func:`find_bursts`: a centred rolling median.

    Use it to get the ``baseline`` that :func:`burst_component` needs when the bursts were found
    without one.

    Args:
        values: the series, 1-D, regular, without NaNs (fill gaps first).
        window: width in steps (made odd: ``2 * (window // 2) + 1``), >= 1; windows shrink at
            the edges. Several times the longest burst, short compared with a period.

    Returns:
        The baseline, a float array of the same length.

    Raises:
        DataContractError: ``values`` is not 1-D or has non-finite values.
        ConfigError: ``window`` is not an integer >= 1.
    """
    x = _as_series(values)
    _check_positive("window", window)
    if x.size == 0:
        return x.copy()
    scale = _scale_of(x)
    return np.asarray(_rolling_median(x / scale, int(window) // 2) * scale, dtype=np.float64)


def find_bursts(
    values: np.ndarray,
    *,
    baseline: np.ndarray | None = None,
    threshold: float = 4.0,
    min_length: int = 1,
    merge_gap: int = 1,
    window: int = _BURST_WINDOW,
) -> list[Burst]:
    """Runs of steps far above a robust baseline.

    The residual ``values - baseline`` is turned into robust z-scores, ``(r - median(r)) /
    sigma`` with ``sigma = 1.4826 * MAD(r)`` (the mean absolute deviation when the MAD is 0, as
    on sparse series). A burst is a run where ``z > threshold`` extended on both sides while
    ``z > threshold / 2`` (hysteresis, so that the start and end are not cut at the first noisy
    step). Bursts separated by at most ``merge_gap`` quiet steps are merged, then bursts shorter
    than ``min_length`` are dropped. Only upward bursts are found; a series whose residual does
    not vary (e.g. a constant series) has none.

    Args:
        values: the series, 1-D, regular, without NaNs (fill gaps first).
        baseline: what the series would be without bursts, same length (e.g. trend + seasonal
            + level of a decomposition). ``None`` means :func:`burst_baseline` over ``window``
            steps.
        threshold: robust z-score a burst must exceed, > 0.
        min_length: shortest burst kept, in steps (>= 1).
        merge_gap: most quiet steps between two bursts that are still merged (0: never merge).
        window: width of the default rolling-median baseline (ignored when ``baseline`` is
            given); several times the longest burst, short compared with a period.

    Returns:
        The bursts sorted by ``start``: ``start`` (first step), ``end`` (one past the last),
        ``peak`` (the step of the largest residual, which is the highest value whenever the
        baseline is flat over the burst) and ``height`` (that residual, in the series' unit).

    Raises:
        DataContractError: ``values`` or ``baseline`` is not 1-D, has non-finite values, or the
            lengths differ.
        ConfigError: a parameter is out of range.
    """
    x = _as_series(values)
    if not (np.isfinite(threshold) and threshold > 0):
        raise ConfigError(f"threshold must be a finite number > 0, got {threshold!r}")
    _check_positive("min_length", min_length)
    _check_positive("merge_gap", merge_gap, minimum=0)
    _check_positive("window", window)
    if baseline is None:
        base = None
    else:
        base = _as_series(baseline, "baseline")
        if base.size != x.size:
            raise DataContractError(
                f"baseline has {base.size} steps but values has {x.size}; pass a baseline "
                "computed on the same series"
            )
    n = x.size
    if n == 0:
        return []

    scale = _scale_of(x) if base is None else _scale_of(x, base)
    z = x / scale
    b = _rolling_median(z, int(window) // 2) if base is None else base / scale
    resid = z - b
    sigma = _robust_sigma(resid)
    if sigma <= _REL_EPS:
        return []
    score = (resid - np.median(resid)) / sigma

    starts, ends = _runs(score > threshold / 2.0)
    if starts.size == 0:
        return []
    # Keep the hysteresis runs that hold at least one step above the full threshold.
    high = np.concatenate(([0], np.cumsum(score > threshold)))
    core = high[ends] - high[starts] > 0
    starts, ends = starts[core], ends[core]
    if starts.size == 0:
        return []

    if merge_gap > 0 and starts.size > 1:
        new_group = np.concatenate(([True], starts[1:] - ends[:-1] > merge_gap))
        first = np.flatnonzero(new_group)
        last = np.concatenate((first[1:], [starts.size])) - 1
        starts, ends = starts[first], ends[last]
    long_enough = ends - starts >= min_length
    starts, ends = starts[long_enough], ends[long_enough]
    if starts.size == 0:
        return []

    # Peak of each burst in one pass: sort the burst steps by (burst, -residual), take the first
    # of each burst.
    lengths = ends - starts
    label = np.repeat(np.arange(starts.size), lengths)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    steps = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()))
    order = np.lexsort((-resid[steps], label))
    peaks = steps[order[offsets]]
    with np.errstate(over="ignore"):
        heights = resid[peaks] * scale
    return [
        Burst(start=int(s), end=int(e), peak=int(p), height=float(h))
        for s, e, p, h in zip(starts, ends, peaks, heights, strict=True)
    ]


def burst_component(values: np.ndarray, bursts: list[Burst], baseline: np.ndarray) -> np.ndarray:
    """The part of a series that its bursts account for.

    Args:
        values: the series, 1-D, regular, without NaNs.
        bursts: bursts of this series (e.g. from :func:`find_bursts`); they may overlap.
        baseline: the baseline the bursts were measured against, same length.

    Returns:
        ``values - baseline`` inside the bursts and 0 elsewhere, a float array as long as
        ``values``; subtracting it leaves the series with its bursts replaced by the baseline.

    Raises:
        DataContractError: the arrays are not 1-D, have non-finite values or differ in length,
            or a burst lies outside the series.
    """
    x = _as_series(values)
    base = _as_series(baseline, "baseline")
    n = x.size
    if base.size != n:
        raise DataContractError(
            f"baseline has {base.size} steps but values has {n}; pass the baseline the bursts "
            "were found against"
        )
    mask = np.zeros(n + 1, dtype=np.int64)
    for burst in bursts:
        if not 0 <= burst.start < burst.end <= n:
            raise DataContractError(
                f"burst [{burst.start}, {burst.end}) is outside the series of {n} steps; pass "
                "bursts found on this series"
            )
        mask[burst.start] += 1
        mask[burst.end] -= 1
    inside = np.cumsum(mask[:n]) > 0
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(inside, x - base, 0.0).astype(np.float64)
