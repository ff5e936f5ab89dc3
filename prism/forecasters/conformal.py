"""Conformal quantiles of every forecaster, calibrated out of sample, with a drift correction.

:class:`~prism.forecasters.base.BaseForecaster` calls these functions; no model calibrates its
own quantiles.

**Conformal quantiles.** ``fit`` holds out the last ``calibration_window`` of each series (at
least ``MIN_HOLDOUT_STEPS``, at most a third of it): the parameters are learned on what comes
before, then the model forecasts from origins spread over the held-out tail
(:func:`calibration_origins`), from data before each origin only. The signed errors of those
out-of-sample forecasts, pooled in blocks of horizon steps that widen with the step, give each
quantile's offset from the point forecast (split conformal prediction, per horizon step;
:func:`calibration_offsets`). Models with native quantiles (``native_levels``) are calibrated
the same way on their own quantiles (conformalised quantile regression): the offset of level
``q`` is the ``q``-quantile of ``y - yhat_q``. The final forecast continues from the end of the
whole history with the parameters learned on the prefix: nothing is fitted twice.

**Drift correction.** Errors of the held-out tail are exchangeable with the future's only if
the series' volatility has not moved, and GPU demand's does (a VC fills up, a queue forms). So
the errors of the latest third of the calibration origins check the tail's bands (the latest
regime weighs twice): per horizon group (up to 1 h, 6 h, 1 d, beyond) and per series (so a
series is calibrated the same in any batch), the factor by which the central 90 % band would
have to stretch (or could shrink) around the median to hold 90 % of those origins' errors
scales every level's offset from the median (clipped to 0.5-4; :func:`calibrate`). Those
origins' errors overlap more the further ahead they look, so the stretch is taken at split
conformal's finite-sample level for the number of independent windows they hold
(:func:`drift_level`: 0.90 an hour ahead, about 0.93 a day ahead).

**Adaptive conformal inference.** That check rests on the latest origins alone: a couple of
independent windows a day ahead. A second estimate of the same stretch runs adaptive conformal
inference (ACI, Gibbs and Candes 2021) through all the calibration origins in time order
(:func:`adaptive_factors`): each origin's band is built from the errors seen before it, and
its miss rate moves by ``ACI_GAMMA`` times the gap between the nominal and the observed
misses. The stretch applied is the geometric mean of the two estimates. On errors with atoms
(counts near zero, levels that hold), ACI's stretch only widens: a miss rate between two atoms
is no coverage level (a Poisson count of mean 0.7 got a 95 % quantile below 1). On a
synthetic panel whose volatility triples four days before the backtest, the 90 % bands cover
88-92 % with it (``tests/forecasters/test_stacking.py``); the accuracy benchmark's coverage
table gives the real panels.

**Short tails.** A series of 3 days holds out one: its day-ahead errors come from origins a few
hours apart, overlapping windows. A block of steps is *sure* only where the origins spread over
``MIN_BLOCK_WINDOWS`` times its first step; past the last sure block, each level's offset is
the wider of the block's own and the last sure block's widened with the square root of the
step (:func:`widen_unsure`). With a full 7-day tail every block up to a day ahead is sure
(though the block across a day ahead takes the drift factor of the group beyond it, which reads
the widened blocks too: the day-ahead bands of long series moved by under 1 %).

**Too short to calibrate.** A series whose held-out tail gives no block ``MIN_BLOCK_RESIDUALS``
errors (under 72 points) has no out-of-sample errors to calibrate on. Its bands are then those
of the last value's errors in its own history (:func:`change_offsets`: for step ``k``, the
changes ``y[t + k] - y[t]`` over all ``t``) around the model's forecast, at the wider
finite-sample levels of split conformal: the bands of a model fitted on a few hours are no
narrower than what the series has done in those hours. A series with fewer than
``MIN_CHANGES`` changes one step apart (under 5 points) has no band (the mean at every level).

A forecast's bands (:func:`bands`) are its mean (or native quantiles) plus the offsets of each
step ahead, interpolated between blocks and widened with the square root of the step beyond
the last calibrated one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Quantile levels at which calibration offsets are kept; requested levels are interpolated.
LEVELS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75,
          0.8, 0.85, 0.9, 0.95, 0.975, 0.99, 0.995)
#: Horizon steps are pooled in blocks whose width grows with the step (1, 2, 3, 4, 5-6, 7-8,
#: ...): near steps need their own offsets, far steps share errors that change slowly.
_BLOCK_EDGES = np.array([1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385,
                         513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193])
#: A block needs this many residuals to get its own offsets; later steps extrapolate the last
#: block that has them, widened with the square root of the step.
MIN_BLOCK_RESIDUALS = 24
#: A block is *sure* when the calibration origins spread over this many times its first step.
#: Errors ``k`` steps ahead from origins closer together than ``k`` overlap: on a series with
#: 3-7 days of history (a tail of 1-2.3 days), the day-ahead blocks rest on origins a few
#: hours apart, one or two independent windows. Past the last sure block, each level's offset
#: is the wider of the block's own and the last sure block's widened with the square root of
#: the step (:func:`widen_unsure`). With a full 7-day tail every block up to a day ahead is
#: sure (10-min, 5-min, 1-min and hourly steps alike): long series keep their offsets to a day.
MIN_BLOCK_WINDOWS = 6
#: A series too short to calibrate out of sample (:func:`change_offsets`) needs this many
#: changes in a block of steps for a band there.
MIN_CHANGES = 4
#: The tail held out for calibration is at least this many steps when a third of the series
#: allows (a 7-day window is 7 steps of a daily series: too few for any block).
MIN_HOLDOUT_STEPS = 2 * MIN_BLOCK_RESIDUALS
#: At most this many calibration origins per series (spread evenly over the held-out tail).
MAX_ORIGINS = 72
#: The tail held out for calibration is at most this share of a series.
MAX_HOLDOUT_SHARE = 1 / 3
#: The central interval whose coverage the bands' drift correction tracks.
TRACKED_LEVEL = 0.9
#: Horizon groups (upper edges in seconds ahead) with a drift correction of their own.
_DRIFT_GROUPS_S = (3_600, 21_600, 86_400)
#: The drift correction widens bands at most 4-fold and narrows them at most to half.
_DRIFT_CLIP = (0.5, 4.0)
#: The origins after this share of the calibration origins check the bands.
_DRIFT_SPLIT = 2 / 3
#: Step size of adaptive conformal inference's miss rate (:func:`adaptive_factors`).
ACI_GAMMA = 0.05
#: ACI needs bands at this many origins to set a stretch.
ACI_MIN_STEPS = 8
#: ACI's stretch may narrow a band only where no single error value holds more than this
#: share of a group's errors. On errors with atoms (counts near zero, levels that hold), a
#: miss rate between two atoms is no coverage level: a band narrowed there under-covers.
ACI_MAX_ATOM = 0.05
#: ACI's bands are rebuilt once the errors known since would add this share to their pool
#: (a band from slightly fewer past errors is as valid, and sorting at every origin was most
#: of the cheap models' panel time).
ACI_POOL_GROWTH = 1.2
#: The miss rate ACI's bands are taken at stays within these.
_ACI_ALPHA = (0.002, 0.5)


@dataclass
class Calibration:
    """Conformal offsets of one series, by block of horizon steps and quantile level.

    Attributes:
        centers: ``(n_blocks,)`` representative step of each block with enough residuals.
        levels: the quantile levels of ``offsets``' columns.
        offsets: ``(n_blocks, n_levels)`` offset of each level from its base forecast (the
            mean, or the native quantile of the same level).
        n_residuals: residuals behind each block.
        one_step: the one-step-ahead errors at the calibration origins (for reconciliation).
        origins: the origins (indices into the history) those errors come from.
    """

    centers: FloatArray
    levels: FloatArray
    offsets: FloatArray
    n_residuals: npt.NDArray[np.int64]
    one_step: FloatArray
    origins: npt.NDArray[np.int64]


def calibration_origins(n: int, holdout: int) -> IntArray:
    """The calibration origins of a series of ``n`` points whose last ``holdout`` are held out.

    At most ``MAX_ORIGINS``, spread evenly over the held-out tail (indices into the history:
    an origin ``e`` forecasts from ``history[:e]``); none when the series is too short.
    """
    start = max(n - holdout, 1)
    count = min(MAX_ORIGINS, n - start)
    if count < 1:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(start, n - 1, count).round().astype(np.int64))


def calibrate(history: FloatArray, ends: IntArray, mean: FloatArray, quantiles: FloatArray | None,
              native_levels: Sequence[float], freq_s: int) -> tuple[Calibration, FloatArray]:
    """Conformal offsets of one series, with its drift correction (module docstring).

    Args:
        history: the series' values.
        ends: its calibration origins (:func:`calibration_origins`).
        mean: ``(len(ends), steps)`` the model's point forecasts from those origins, through
            the end of the history.
        quantiles: ``(len(ends), steps, len(native_levels))`` its native quantiles, or
            ``None`` without them.
        native_levels: the model's native quantile levels (empty: none).
        freq_s: the series' step in seconds (the drift groups are in time ahead).

    Returns:
        The calibration and the drift factor of each horizon group (all 1 for a model with
        native quantiles, whose offsets are not rescaled).
    """
    calibration = calibration_offsets(history, ends, mean, quantiles, native_levels)
    factors = np.ones(len(_DRIFT_GROUPS_S) + 1)
    if not native_levels:
        for g, need in enumerate(_spread_needs(history, ends, mean, freq_s)):
            if len(need) >= MIN_BLOCK_RESIDUALS:
                # a zero-width band that misses needs an infinite stretch: cap it above the
                # clip, or a quantile between two infinities is NaN (and so was every band)
                need = np.minimum(need, 2 * _DRIFT_CLIP[1])
                level = drift_level(_late_span(ends), _group_steps(g, freq_s, mean.shape[1]))
                factors[g] = float(np.clip(np.quantile(need, level), *_DRIFT_CLIP))
        n = len(history)
        target = ends[:, None] + np.arange(mean.shape[1])[None, :]
        seen = target < n
        errors = history[np.minimum(target, n - 1)] - mean
        factors = np.sqrt(factors * adaptive_factors(errors[None], seen, ends, freq_s)[0])
        calibration = _rescaled(calibration, factors, freq_s)
    return calibration, factors


def adaptive_factors(errors: FloatArray, seen: npt.NDArray[np.bool_], ends: IntArray,
                     freq_s: int) -> FloatArray:
    """``(series, n_groups)``: per series and horizon group, the stretch of the central
    band that adaptive conformal inference (ACI, Gibbs and Candes 2021) ends the calibration
    origins at.

    ``errors`` is ``(series, origins, steps)``, each origin's signed errors step by step
    (``seen``, ``(origins, steps)``, marks those whose value was observed; the rest are
    ignored). The origins are taken in time order. Each one's band, at miss rate ``alpha``
    (starting at ``1 - TRACKED_LEVEL``), is built only from the errors of the earlier origins
    whose steps in the group had all been observed by then (day-ahead errors arrive a day
    late). The share ``miss`` of its errors outside that band moves the rate:
    ``alpha += ACI_GAMMA * (1 - TRACKED_LEVEL - miss)``. The stretch is the width of all
    origins' errors between the final ``alpha``'s quantiles over their width at
    ``TRACKED_LEVEL`` (clipped as the drift check's; 1 where fewer than ``ACI_MIN_STEPS``
    origins had a band, or the errors have no spread; at least 1 where one error value holds
    more than ``ACI_MAX_ATOM`` of them). The per-series calibration and the
    cheap models' panel path (:mod:`prism.forecasters.panel_fast`) both call it, so their
    bands agree bit for bit.
    """
    n_series, _, steps = errors.shape
    nominal = 1.0 - TRACKED_LEVEL
    # a series with a missing or infinite observed error has no ACI stretch (all errors 0)
    broken = np.asarray(~np.isfinite(errors[:, seen]).all(axis=1))
    if broken.any():
        errors = np.where(broken[:, None, None], 0.0, errors)
    groups = _drift_group(np.arange(1, steps + 1), freq_s)
    factors = np.ones((n_series, len(_DRIFT_GROUPS_S) + 1))
    for g in range(factors.shape[1]):
        cols = np.flatnonzero(groups == g)
        if not len(cols):
            continue
        group_seen = seen[:, cols]
        # origins whose errors in the group were all known at each origin: a prefix
        known = np.searchsorted(ends + int(cols.max()) + 1, ends, side="right")
        steps_taken = np.flatnonzero((known * len(cols) >= MIN_BLOCK_RESIDUALS)
                                     & group_seen.any(axis=1))
        if len(steps_taken) < ACI_MIN_STEPS:
            continue
        group_err = errors[:, :, cols]
        alpha = np.full((n_series, 1), nominal)
        pool = np.zeros((n_series, 0))
        for i in steps_taken:
            # the origins known since join the sorted pool once they add a fifth to it
            if pool.shape[1] * ACI_POOL_GROWTH <= known[i] * len(cols) - len(cols):
                fresh = group_err[:, pool.shape[1] // len(cols):known[i]].reshape(n_series, -1)
                pool = np.sort(np.concatenate([pool, fresh], axis=1), axis=1)
            a = np.minimum(np.maximum(alpha, _ACI_ALPHA[0]), _ACI_ALPHA[1])
            edges = _row_quantiles(pool, np.concatenate([a / 2, 1 - a / 2], axis=1))
            own = group_err[:, i, group_seen[i]]
            miss = ((own < edges[:, :1]) | (own > edges[:, 1:])).mean(axis=1, keepdims=True)
            alpha += ACI_GAMMA * (nominal - miss)
        # all the group's seen errors: the sorted pool and the origins not in it yet
        pooled = pool.shape[1] // len(cols)
        rest = group_err[:, pooled:][:, group_seen[pooled:]]
        every = np.sort(np.concatenate([pool, rest], axis=1), axis=1)
        continuous = _largest_atom(every) <= ACI_MAX_ATOM
        a = np.clip(alpha, *_ACI_ALPHA)
        nominal_levels = np.broadcast_to([nominal / 2, 1 - nominal / 2], (n_series, 2))
        q = _row_quantiles(every, np.concatenate([a / 2, 1 - a / 2, nominal_levels], axis=1))
        want, base = q[:, 1] - q[:, 0], q[:, 3] - q[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            stretch = np.where(base > 0, np.clip(want / base, *_DRIFT_CLIP), 1.0)
            factors[:, g] = np.where(continuous, stretch, np.maximum(stretch, 1.0))
    return factors


def _largest_atom(rows: FloatArray) -> FloatArray:
    """The share of each sorted row held by its most frequent value."""
    width = rows.shape[1]
    position = np.arange(width)
    new_run = np.ones(rows.shape, dtype=bool)
    new_run[:, 1:] = rows[:, 1:] != rows[:, :-1]
    run_start = np.maximum.accumulate(np.where(new_run, position, 0), axis=1)
    return np.asarray((position - run_start + 1).max(axis=1) / width, dtype=np.float64)


def _row_quantiles(rows: FloatArray, levels: FloatArray) -> FloatArray:
    """``(series, k)``: the quantiles at ``levels[r]`` (``(series, k)``, within 0-1) of each
    sorted row ``rows[r]``, linear between order statistics (numpy's default method)."""
    virtual = (rows.shape[1] - 1) * levels
    below = virtual.astype(np.intp)  # the floor: the levels are not negative
    above = np.minimum(below + 1, rows.shape[1] - 1)
    weight = virtual - below
    r = np.arange(len(rows))[:, None]
    return np.asarray(rows[r, below] + weight * (rows[r, above] - rows[r, below]),
                      dtype=np.float64)


def drift_level(span: float, horizon: float) -> float:
    """The level at which the drift correction takes its stretches, for ``TRACKED_LEVEL``.

    The late origins' errors at ``horizon`` steps ahead overlap: origins ``span`` steps
    apart hold about ``n = span / horizon`` independent windows (at least 1). A band fitted
    to cover ``TRACKED_LEVEL`` of ``n`` exchangeable errors covers less of the next one;
    split conformal prediction's finite-sample level ``1 - alpha * n / (n + 1)`` corrects
    it: 0.90 an hour ahead on a week of 10-min origins, 0.93 a day ahead. Measured on the
    accuracy benchmark's panels (naive's bands, 28 cutoffs each), it brings the day-ahead
    coverage from 0.845-0.901 to 0.861-0.931.
    """
    n = max(span / max(horizon, 1.0), 1.0)
    return 1.0 - (1.0 - TRACKED_LEVEL) * n / (n + 1.0)


def _late_span(ends: IntArray) -> float:
    """Steps between the first late calibration origin (the drift check's) and the last."""
    split = min(int(len(ends) * _DRIFT_SPLIT), len(ends) - 1)
    return float(max(ends[-1] - ends[split], 1)) if len(ends) else 1.0


def _group_steps(group: int, freq_s: int, steps: int) -> float:
    """The steps ahead at the far edge of a drift group (the last group: the forecast's)."""
    if group < len(_DRIFT_GROUPS_S):
        return min(_DRIFT_GROUPS_S[group] / freq_s, float(steps))
    return float(steps)


def calibration_offsets(history: FloatArray, ends: IntArray, mean: FloatArray,
                        quantiles: FloatArray | None,
                        native_levels: Sequence[float]) -> Calibration:
    """Offsets per block of steps and level from the errors of forecasts made at ``ends``.

    ``mean`` and ``quantiles`` are as for :func:`calibrate`; with ``native_levels``, each
    level's offsets are those of its own native quantile.
    """
    n = len(history)
    steps = mean.shape[1]
    k = np.arange(1, steps + 1)
    target = ends[:, None] + k[None, :] - 1  # index of the value each forecast step predicts
    seen = target < n
    actual = np.where(seen, history[np.minimum(target, n - 1)], np.nan)
    if native_levels:
        levels = np.asarray(native_levels, dtype=np.float64)
        assert quantiles is not None
        errors = actual[:, :, None] - quantiles  # (origins, steps, levels)
    else:
        levels = np.asarray(LEVELS)
        errors = (actual - mean)[:, :, None]
    centers: list[float] = []
    offsets: list[Any] = []
    counts: list[int] = []
    for lo, hi in zip(_BLOCK_EDGES[:-1], _BLOCK_EDGES[1:], strict=True):
        if lo > steps:
            break
        block = errors[:, lo - 1:min(hi - 1, steps), :].reshape(-1, errors.shape[2])
        block = block[np.isfinite(block[:, 0])]
        if len(block) < MIN_BLOCK_RESIDUALS:
            break  # later blocks have fewer residuals still
        if native_levels:
            offsets.append([np.quantile(block[:, j], q) for j, q in enumerate(levels)])
        else:
            offsets.append(np.quantile(block[:, 0], levels))
        centers.append(0.5 * (lo + min(hi - 1, steps)))
        counts.append(len(block))
    one_step = actual[:, 0] - mean[:, 0]
    table = np.asarray(offsets, dtype=np.float64).reshape(len(centers), len(levels))
    return Calibration(
        centers=np.asarray(centers, dtype=np.float64),
        levels=levels,
        offsets=widen_unsure(np.asarray(centers, dtype=np.float64), table, levels,
                             sure_blocks(len(centers), n - int(ends[0]) if len(ends) else 0)),
        n_residuals=np.asarray(counts, dtype=np.int64),
        one_step=one_step[np.isfinite(one_step)],
        origins=ends[np.isfinite(one_step)],
    )


def sure_blocks(n_blocks: int, span: int) -> int:
    """How many of the first ``n_blocks`` blocks are sure (``MIN_BLOCK_WINDOWS``) when the
    calibration origins spread over ``span`` steps."""
    return int(np.sum(_BLOCK_EDGES[:n_blocks] * MIN_BLOCK_WINDOWS <= span))


def widen_unsure(centers: FloatArray, offsets: FloatArray, levels: FloatArray,
                 n_sure: int) -> FloatArray:
    """Offsets ``(..., n_blocks, n_levels)`` with each block past the first ``n_sure`` at
    least as wide as the last sure block's widened with the square root of the step: below
    the median the lower of the two offsets, above it the higher.

    Neither estimate is to be trusted alone there: the block's own rests on overlapping
    windows, the extrapolation misses errors that grow faster than a random walk's (a cycle
    forecast from a few days drifts out of phase). Measured on the shapes' 10-minute series
    cut to 3-21 days of history (``python -m evaluation.benchmarks.short_history``).
    """
    if n_sure == 0 or n_sure >= len(centers):
        return offsets
    growth = np.sqrt(centers[n_sure:] / centers[n_sure - 1])
    reach = offsets[..., n_sure - 1:n_sure, :] * growth[:, None]
    own = offsets[..., n_sure:, :]
    wide = np.where(levels < 0.5, np.minimum(own, reach),
                    np.where(levels > 0.5, np.maximum(own, reach), own))
    out = offsets.copy()
    out[..., n_sure:, :] = wide
    return out


def bands(mean: FloatArray, native: FloatArray | None, native_levels: Sequence[float],
          calibration: Calibration | None, steps: int, quantiles: list[float]) -> FloatArray:
    """Quantile bands ``(steps, len(quantiles))`` from the calibration offsets.

    Without a calibration (a series too short to calibrate), the native quantiles as they
    are, or the mean at every level (no spread can be measured).
    """
    nl = np.asarray(native_levels, dtype=np.float64)
    if calibration is None or len(calibration.centers) == 0:
        if native is not None:  # native quantiles as they are
            return np.stack([_at_level(q, nl, native) for q in quantiles], axis=1)
        return np.repeat(mean[:, None], len(quantiles), axis=1)  # no spread can be measured
    per_step = _per_step(calibration, steps)
    if native is not None:
        calibrated = np.sort(native + per_step, axis=1)  # each level moved by its own offset
        return np.stack([_at_level(q, nl, calibrated) for q in quantiles], axis=1)
    return np.stack([mean + _at_level(q, calibration.levels, per_step) for q in quantiles],
                    axis=1)


def change_offsets(values: FloatArray, steps: int) -> tuple[FloatArray, FloatArray]:
    """Bands of series too short to calibrate: the last value's errors in their own history.

    For each block of steps ``k`` (the calibration's blocks, up to ``steps`` and the series'
    length), the changes ``values[:, t + k] - values[:, t]`` over all ``t`` give each
    level's offset at split conformal's finite-sample level (``m`` changes: level ``q`` is
    taken at ``0.5 + (q - 0.5) (m + 1) / m``, clipped to [0, 1]). Blocks past the first
    :func:`sure_blocks` of the series' length are widened as :func:`widen_unsure` widens
    them. Both the per-series bands and the panel path (:mod:`.panel_fast`) call this.

    Args:
        values: ``(n_series, n)`` the series' values, finite.
        steps: the horizon in steps.

    Returns:
        Block centres ``(n_blocks,)`` and offsets ``(n_series, n_blocks, len(LEVELS))``
        (no blocks when the series are shorter than ``MIN_CHANGES + 1`` points).
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[1]
    levels = np.asarray(LEVELS)
    centers: list[float] = []
    offsets: list[FloatArray] = []
    last = min(steps, n - 1)
    for lo, hi in zip(_BLOCK_EDGES[:-1], _BLOCK_EDGES[1:], strict=True):
        if lo > last:
            break
        stop = min(hi - 1, last)
        changes = np.concatenate([values[:, k:] - values[:, :-k] for k in range(lo, stop + 1)],
                                 axis=1)
        if changes.shape[1] < MIN_CHANGES:
            break  # later blocks have fewer changes still
        m = (n - 1) / lo  # independent windows: changes ``lo`` steps apart overlap
        at = np.clip(0.5 + (levels - 0.5) * (m + 1) / m, 0.0, 1.0)
        offsets.append(np.quantile(changes, at, axis=1).T)
        centers.append(0.5 * (lo + stop))
    c = np.asarray(centers, dtype=np.float64)
    if not len(c):
        return c, np.zeros((len(values), 0, len(levels)))
    return c, widen_unsure(c, np.stack(offsets, axis=1), levels, sure_blocks(len(c), n - 1))


def history_calibration(history: FloatArray, steps: int) -> Calibration | None:
    """A series' :func:`change_offsets` as a calibration for :func:`bands`, or ``None``
    when it is too short even for those (no out-of-sample errors: ``one_step`` is empty)."""
    centers, offsets = change_offsets(np.asarray(history, dtype=np.float64)[None, :], steps)
    if not len(centers):
        return None
    return Calibration(centers=centers, levels=np.asarray(LEVELS), offsets=offsets[0],
                       n_residuals=np.zeros(len(centers), dtype=np.int64),
                       one_step=np.zeros(0), origins=np.zeros(0, dtype=np.int64))


def _rescaled(calibration: Calibration, factors: FloatArray, freq_s: int) -> Calibration:
    """Offsets moved from the median by the drift correction of their horizon group."""
    if len(calibration.centers) == 0:
        return calibration
    groups = _drift_group(calibration.centers, freq_s)
    median = _at_level(0.5, calibration.levels, calibration.offsets)
    offsets = median[:, None] + factors[groups][:, None] * (
        calibration.offsets - median[:, None])
    return dataclasses.replace(calibration, offsets=offsets)


def _at_level(q: float, levels: FloatArray, table: FloatArray) -> FloatArray:
    """Column ``q`` of ``table`` (columns at ``levels``), linear between levels, clamped."""
    j = int(np.clip(np.searchsorted(levels, q), 1, len(levels) - 1))
    lo, hi = levels[j - 1], levels[j]
    w = float(np.clip((q - lo) / (hi - lo), 0.0, 1.0)) if hi > lo else 1.0
    return np.asarray((1.0 - w) * table[:, j - 1] + w * table[:, j], dtype=np.float64)


def _drift_group(steps_ahead: npt.ArrayLike, freq_s: int) -> npt.NDArray[np.int64]:
    """The drift-correction group of each (possibly fractional) step ahead."""
    seconds = np.asarray(steps_ahead, dtype=np.float64) * freq_s
    return np.searchsorted(np.asarray(_DRIFT_GROUPS_S, dtype=np.float64), seconds,
                           side="left").astype(np.int64)


def _per_step(calibration: Calibration, steps: int) -> FloatArray:
    """``(steps, n_levels)`` offsets of every step ahead from a calibration's blocks.

    Interpolated between block centres; beyond the last calibrated block, its offsets widened
    with the square root of the step (random-walk growth).
    """
    k = np.arange(1, steps + 1, dtype=np.float64)
    centers, offsets = calibration.centers, calibration.offsets
    per_step = np.stack([np.interp(k, centers, offsets[:, j])
                         for j in range(offsets.shape[1])], axis=1)
    beyond = k > centers[-1]
    per_step[beyond] = offsets[-1] * np.sqrt(k[beyond] / centers[-1])[:, None]
    return per_step


def _spread_needs(history: FloatArray, ends: IntArray, mean: FloatArray,
                  freq_s: int) -> list[FloatArray]:
    """How far the tail's band had to stretch to hold each error of the latest origins.

    The offsets are calibrated on all origins (scored out of sample against the bands of only
    the earlier ones, the correction overshot: 0.93 on the regime-change test); each error of
    an origin after the first ``_DRIFT_SPLIT`` at step ``k`` needs the ``TRACKED_LEVEL``
    band's half-width on its side of the median times ``(error - median) / half-width``
    (``inf`` where a zero-width band misses).
    Returned per horizon group (see ``_DRIFT_GROUPS_S``).
    """
    n_groups = len(_DRIFT_GROUPS_S) + 1
    out = [np.zeros(0) for _ in range(n_groups)]
    split = int(len(ends) * _DRIFT_SPLIT)
    if split < 8 or len(ends) - split < 4:
        return out
    early = calibration_offsets(history, ends, mean, None, ())
    if len(early.centers) == 0:
        return out
    steps = mean.shape[1]
    table = _per_step(early, steps)
    lo = _at_level((1 - TRACKED_LEVEL) / 2, early.levels, table)
    med = _at_level(0.5, early.levels, table)
    hi = _at_level((1 + TRACKED_LEVEL) / 2, early.levels, table)
    late = ends[split:]
    k = np.arange(steps)
    target = late[:, None] + k[None, :]
    seen = target < len(history)
    err = history[np.minimum(target, len(history) - 1)] - mean[split:]
    dev = err - med[None, :]
    width = np.where(dev >= 0, (hi - med)[None, :], (med - lo)[None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(width > 0, np.abs(dev) / width, np.where(dev == 0, 0.0, np.inf))
    groups = np.broadcast_to(_drift_group(k + 1, freq_s)[None, :], need.shape)
    for g in range(n_groups):
        out[g] = need[seen & (groups == g)]
    return out
