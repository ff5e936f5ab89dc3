"""The cheap baselines and their conformal quantiles over a whole panel at once.

``naive``, ``seasonal_naive`` and ``window_average`` cost nothing to forecast; what costs, per
series in Python, is the machinery around them: validating, calibrating the quantiles on 72
origins, formatting. Here the series of a panel that share a step and a length are stacked
into one ``(series, time)`` array and everything runs over it with numpy: the rule (the
model's own ``_forecast_panel``, the one the per-series path runs on one row), the split
conformal offsets per block of horizon steps, the drift correction and the bands. The
numbers are those of :meth:`~prism.forecasters.base.BaseForecaster.fit` then ``predict``
(:mod:`prism.forecasters.conformal`), operation for operation: ``tests/forecasters/
test_panel_fast.py`` compares them exactly. Series of other lengths or steps form groups of
their own.

:func:`forecast_panel` takes a panel and answers ``clone(model).fit(panel).predict(...)``;
:func:`forecast_block` takes the arrays (what the batch engine holds). Work is done a few
series at a time (``_MAX_ELEMENTS`` per temporary), so memory does not grow with the panel
beyond its input and output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.forecasters.base import (
    DEFAULT_QUANTILES,
    BaseForecaster,
    FloatArray,
    _checked_panel,
    check_quantiles,
    clone,
    horizon_steps,
    quantile_column,
)
from prism.forecasters.baselines import (
    NaiveForecaster,
    SeasonalNaiveForecaster,
    WindowAverageForecaster,
    _PanelRule,
)
from prism.forecasters.conformal import (
    _BLOCK_EDGES,
    _DRIFT_CLIP,
    _DRIFT_GROUPS_S,
    _DRIFT_SPLIT,
    LEVELS,
    MIN_BLOCK_RESIDUALS,
    TRACKED_LEVEL,
    _drift_group,
    _group_steps,
    _late_span,
    adaptive_factors,
    calibration_origins,
    change_offsets,
    drift_level,
    sure_blocks,
    widen_unsure,
)
from prism.frames import to_frame
from prism.schema import SERIES_ID, TS, VALUE, panel_freq

IntArray = npt.NDArray[np.int64]

#: The models with a panel rule (exact types: a subclass may change the rule).
PANEL_MODELS: tuple[type[BaseForecaster], ...] = (NaiveForecaster, SeasonalNaiveForecaster,
                                                  WindowAverageForecaster)
#: At most this many elements (series x origins x steps) in one temporary: 8 MB of float64.
_MAX_ELEMENTS = 1 << 20
#: Values beyond this could overflow a window's sum or an error; such series go one by one.
_SAFE_ABS = 1e300
_LEVELS = np.asarray(LEVELS)


def supports_panel(model: BaseForecaster) -> bool:
    """Whether :func:`forecast_panel` can forecast ``model`` (a cheap baseline)."""
    return type(model) in PANEL_MODELS


def panel_rule(model: BaseForecaster, freq_s: int) -> _PanelRule:
    """An unfitted copy of ``model`` with its rule learned for a step of ``freq_s`` seconds.

    Raises:
        ConfigError: for a model without a panel rule, or a season or window that is not a
            whole number of steps.
    """
    if not supports_panel(model):
        raise ConfigError(f"{model.alias} has no vectorised panel path; fit it with "
                          f"fit(panel) (the panel path serves {_aliases()})")
    rule = clone(model)
    assert isinstance(rule, _PanelRule)
    rule.freq_s_ = int(freq_s)
    rule._learn_rule()
    return rule


def forecast_panel(model: BaseForecaster, panel: pd.DataFrame, horizon: int | str,
                   quantiles: Sequence[float] = DEFAULT_QUANTILES) -> pd.DataFrame:
    """``clone(model).fit(panel).predict(horizon, quantiles)``, vectorised over the series.

    Args:
        model: a ``naive``, ``seasonal_naive`` or ``window_average`` forecaster (its
            settings; it is not fitted).
        panel: ``series_id, ts, value`` (or Nixtla's ``unique_id, ds, y``), as for ``fit``.
        horizon: steps or a duration (``1d``).
        quantiles: quantile levels.

    Returns:
        The forecast contract, row for row and number for number what the per-series fit
        and predict give.

    Raises:
        ConfigError: for another model, a bad horizon or quantile.
        DataContractError: as ``fit`` (a broken panel, a series shorter than a season).
    """
    if not supports_panel(model):
        panel_rule(model, 1)  # raises, naming the models it serves
    panel, style = _checked_panel(panel, "fit on")
    freq_s = panel_freq(panel, purpose="be fitted together")
    rule = panel_rule(model, freq_s)
    steps = horizon_steps(horizon, freq_s)
    qs = check_quantiles(quantiles)
    ids = panel[SERIES_ID].astype(str).to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    lengths = np.diff(np.r_[starts, len(ids)])
    short = np.flatnonzero(lengths < rule._min_points())
    if len(short):
        rule.history_ = {str(ids[starts[i]]): np.zeros(int(lengths[i])) for i in short}
        rule._fit({})  # the model's own message for a series it cannot fit
    values = panel[VALUE].to_numpy(dtype=np.float64)
    mean = np.empty((len(starts), steps))
    bands = np.empty((len(starts), steps, len(qs)))
    for n in np.unique(lengths):
        rows = np.flatnonzero(lengths == n)
        block = values[starts[rows][:, None] + np.arange(n)[None, :]]
        mean[rows], bands[rows] = forecast_block(rule, block, steps, qs)
    ts = panel[TS].to_numpy("datetime64[ns]").view(np.int64)
    last = ts[starts + lengths - 1]
    out = forecast_frame(ids[starts], last, freq_s, model.alias, mean, bands, qs)
    return to_frame(out, style)


def forecast_frame(series_ids: npt.ArrayLike, last_ts: IntArray, freq_s: int, alias: str,
                   mean: FloatArray, bands: FloatArray, quantiles: Sequence[float]
                   ) -> pd.DataFrame:
    """The forecast contract of ``(series, steps)`` means and ``(series, steps, n_q)`` bands
    after each series' last timestamp (ns since the epoch), as ``predict`` formats it."""
    n_series, steps = mean.shape
    step_ns = np.int64(freq_s) * 1_000_000_000
    ts = (np.asarray(last_ts, dtype=np.int64)[:, None]
          + step_ns * np.arange(1, steps + 1, dtype=np.int64)[None, :])
    data = {
        SERIES_ID: np.repeat(np.asarray(series_ids, dtype=object), steps),
        TS: ts.ravel().view("datetime64[ns]"),
        "model": np.full(n_series * steps, alias, dtype=object),
        "mean": mean.ravel(),
    }
    for j, q in enumerate(quantiles):
        data[quantile_column(q)] = bands[:, :, j].ravel()
    out = pd.DataFrame(data)
    out[SERIES_ID] = out[SERIES_ID].astype(pd.Series([""]).dtype)
    out["model"] = out["model"].astype(pd.Series([""]).dtype)
    return out


def forecast_block(rule: _PanelRule, values: FloatArray, steps: int,
                   quantiles: Sequence[float]) -> tuple[FloatArray, FloatArray]:
    """Means and bands of series of one step and length, as ``forecast_arrays`` of each.

    Args:
        rule: from :func:`panel_rule` (the model with its rule learned for the step).
        values: ``(n_series, n)`` the series' values, finite.
        steps: the horizon in steps.
        quantiles: sorted quantile levels (:func:`~prism.forecasters.base.check_quantiles`).

    Returns:
        ``(n_series, steps)`` means and ``(n_series, steps, len(quantiles))`` bands, never
        crossing and never below 0.

    Raises:
        DataContractError: for a non-finite value or one too large to sum safely (fit such
            a series with ``fit``).
    """
    values = np.asarray(values, dtype=np.float64)
    n_series, n = values.shape
    if not np.isfinite(values).all() or (n_series and np.abs(values).max() * (n + 2)
                                         >= _SAFE_ABS):
        raise DataContractError("the panel path takes finite values of moderate size only; "
                                "fit series with missing or huge values with fit(panel)")
    qs = list(quantiles)
    mean = np.maximum(rule._forecast_panel(values, np.array([n], dtype=np.int64), steps)[:, 0],
                      0.0)
    bands = np.repeat(mean[:, :, None], len(qs), axis=2)  # no spread measured: none
    if not qs:
        return mean, bands
    ends = calibration_origins(n, rule._holdout(n))
    width = int(n - ends[0]) if len(ends) else 0
    adaptive = _adaptive_factors(rule, values, ends) if len(ends) else None
    per = max(1, _MAX_ELEMENTS // (max(len(ends), n) * max(width, steps, n)))
    for lo in range(0, n_series, per):
        rows = slice(lo, min(lo + per, n_series))
        if adaptive is not None:
            centers, offsets = _calibrated_offsets(rule, values[rows], ends, adaptive[rows])
        if adaptive is None or not len(centers):
            # too short to calibrate out of sample, as ``forecast_arrays``
            centers, offsets = change_offsets(values[rows], steps)
        if len(centers):
            for j, q in enumerate(qs):
                bands[rows, :, j] = mean[rows] + _per_step_at(q, centers, offsets, steps)
    bands = np.maximum.accumulate(np.maximum(bands, 0.0), axis=2)
    return mean, bands


def _adaptive_factors(rule: _PanelRule, values: FloatArray, ends: IntArray) -> FloatArray:
    """``(series, n_groups)`` ACI stretches (:func:`~prism.forecasters.conformal.
    adaptive_factors`), from the errors up to a day ahead only (the later group never has
    them in time), so in chunks of many more series than the full errors allow."""
    width = min(int(values.shape[1] - ends[0]), int(_DRIFT_GROUPS_S[-1] // rule.freq_s_))
    out = np.ones((len(values), len(_DRIFT_GROUPS_S) + 1))
    if width < 1:
        return out
    per = max(1, _MAX_ELEMENTS // (len(ends) * width))
    for lo in range(0, len(values), per):
        rows = slice(lo, min(lo + per, len(values)))
        errors, seen = _errors(rule, values[rows], ends, width)
        out[rows] = adaptive_factors(errors, seen, ends, rule.freq_s_)
    return out


def _errors(rule: _PanelRule, values: FloatArray, ends: IntArray,
            width: int) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """``(series, origins, width)`` errors of the paths from each calibration origin, and
    ``(origins, width)`` which of them were seen."""
    n = values.shape[1]
    paths = rule._forecast_panel(values, ends, width)
    seen = ends[:, None] + np.arange(width)[None, :] < n
    # what each path forecast: the window of ``width`` values from its origin, copied from a
    # strided view (5x faster than gathering element by element); past the end, the last
    # value (those errors are never used)
    padded = np.concatenate([values, np.repeat(values[:, -1:], width, axis=1)], axis=1)
    errors = np.lib.stride_tricks.sliding_window_view(padded, width, axis=1)[:, ends]
    errors -= paths
    return errors, seen


def _calibrated_offsets(rule: _PanelRule, values: FloatArray, ends: IntArray,
                        adaptive: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Block centres ``(n_blocks,)`` and drift-corrected offsets ``(series, n_blocks,
    n_levels)``: :func:`~prism.forecasters.conformal.calibrate` of each row (``adaptive``:
    their ACI stretches, :func:`_adaptive_factors`)."""
    width = int(values.shape[1] - ends[0])
    errors, seen = _errors(rule, values, ends, width)
    centers: list[float] = []
    offsets: list[FloatArray] = []
    for lo, hi in zip(_BLOCK_EDGES[:-1], _BLOCK_EDGES[1:], strict=True):
        if lo > width:
            break
        stop = min(hi - 1, width)
        mask = seen[:, lo - 1:stop]
        if mask.sum() < MIN_BLOCK_RESIDUALS:
            break  # later blocks have fewer residuals still
        window = errors[:, :, lo - 1:stop]
        block = np.sort(window.reshape(len(values), -1) if mask.all() else window[:, mask],
                        axis=1)
        offsets.append(_sorted_quantiles(block, _LEVELS).T)
        centers.append(0.5 * (lo + stop))
    c = np.asarray(centers, dtype=np.float64)
    if not len(c):
        return c, np.zeros((len(values), 0, len(_LEVELS)))
    table = widen_unsure(c, np.stack(offsets, axis=1), _LEVELS,  # (series, blocks, levels)
                         sure_blocks(len(c), width))
    factors = np.sqrt(_drift_factors(errors, seen, ends, c, table, rule.freq_s_) * adaptive)
    groups = _drift_group(c, rule.freq_s_)
    median = _at_level(0.5, table)
    table = median[..., None] + factors[:, groups][..., None] * (table - median[..., None])
    return c, table


def _drift_factors(errors: FloatArray, seen: npt.NDArray[np.bool_], ends: IntArray,
                   centers: FloatArray, table: FloatArray, freq_s: int) -> FloatArray:
    """``(series, n_groups)`` drift corrections (``conformal.calibrate``/``_spread_needs``)."""
    n_groups = len(_DRIFT_GROUPS_S) + 1
    factors = np.ones((len(errors), n_groups))
    split = int(len(ends) * _DRIFT_SPLIT)
    if split < 8 or len(ends) - split < 4:
        return factors
    width = errors.shape[2]
    lo = _per_step_at((1 - TRACKED_LEVEL) / 2, centers, table, width)
    med = _per_step_at(0.5, centers, table, width)
    hi = _per_step_at((1 + TRACKED_LEVEL) / 2, centers, table, width)
    # only the late origins' errors that were seen, a sixth of them: each element as there
    late, step = np.nonzero(seen[split:])
    dev = errors[:, split + late, step] - med[:, step]
    half = np.where(dev >= 0, (hi - med)[:, step], (med - lo)[:, step])
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(half > 0, np.abs(dev) / half, np.where(dev == 0, 0.0, np.inf))
    groups = _drift_group(step + 1, freq_s)
    for g in range(n_groups):
        mask = groups == g
        if mask.sum() >= MIN_BLOCK_RESIDUALS:
            # capped as conformal.calibrate caps it (a zero-width band that misses)
            picked = np.sort(np.minimum(need[:, mask], 2 * _DRIFT_CLIP[1]), axis=1)
            level = drift_level(_late_span(ends), _group_steps(g, freq_s, width))
            factors[:, g] = np.clip(_sorted_quantiles(picked, np.array([level]))[0],
                                    *_DRIFT_CLIP)
    return factors


def _sorted_quantiles(rows: FloatArray, levels: FloatArray) -> FloatArray:
    """``np.quantile(rows, levels, axis=1)`` of rows already sorted, operation for operation
    (its default linear method): numpy partitions every row again for each call, which was
    most of the panel path's time. ``tests/forecasters/test_panel_fast.py`` holds it to
    numpy's answer bit for bit."""
    m = rows.shape[1]
    virtual = (m - 1) * np.asarray(levels, dtype=np.float64)
    previous = np.floor(virtual)
    following = previous + 1
    top = virtual >= m - 1
    previous[top] = following[top] = -1  # numpy's index of the largest value
    below = virtual < 0
    previous[below] = following[below] = 0
    prev_i, next_i = previous.astype(np.intp), following.astype(np.intp)
    gamma = (virtual - prev_i)[:, None]
    a, b = rows[:, prev_i].T, rows[:, next_i].T  # (levels, series)
    diff = b - a
    out = a + diff * gamma
    np.subtract(b, diff * (1 - gamma), out=out, where=np.broadcast_to(gamma >= 0.5, out.shape))
    return np.asarray(out, dtype=np.float64)


def _at_level(q: float, table: FloatArray) -> FloatArray:
    """``conformal._at_level`` over the last axis (levels ``LEVELS``) of any array."""
    j, w = _level_weights(q)
    return np.asarray((1.0 - w) * table[..., j - 1] + w * table[..., j], dtype=np.float64)


def _level_weights(q: float) -> tuple[int, float]:
    j = int(np.clip(np.searchsorted(_LEVELS, q), 1, len(_LEVELS) - 1))
    lo, hi = _LEVELS[j - 1], _LEVELS[j]
    return j, float(np.clip((q - lo) / (hi - lo), 0.0, 1.0)) if hi > lo else 1.0


def _per_step_at(q: float, centers: FloatArray, table: FloatArray, steps: int) -> FloatArray:
    """``(series, steps)`` offsets at level ``q`` of each step ahead: ``conformal._per_step``
    then ``_at_level``, for the two level columns ``q`` needs only."""
    j, w = _level_weights(q)
    return np.asarray((1.0 - w) * _per_step_column(centers, table[..., j - 1], steps)
                      + w * _per_step_column(centers, table[..., j], steps), dtype=np.float64)


def _per_step_column(centers: FloatArray, offsets: FloatArray, steps: int) -> FloatArray:
    """``(series, steps)``: each row's ``np.interp(k, centers, row)``, widened with the square
    root of the step beyond the last centre, as ``conformal._per_step`` does per series."""
    k = np.arange(1, steps + 1, dtype=np.float64)
    j = np.searchsorted(centers, k, side="right") - 1
    inside = (j >= 0) & (j < len(centers) - 1)
    jj = np.clip(j, 0, max(len(centers) - 2, 0))
    out = offsets[:, np.clip(j, 0, len(centers) - 1)]  # clamped ends and exact hits
    if len(centers) > 1:
        # numpy's interp: slope * (x - x_j) + y_j, the slope from the neighbouring points
        slope = (offsets[:, 1:] - offsets[:, :-1]) / (centers[1:] - centers[:-1])
        inner = slope[:, jj] * (k - centers[jj]) + offsets[:, jj]
        hit = inside & (k == centers[jj])
        out = np.where(inside & ~hit, inner, out)
    beyond = k > centers[-1]
    out[:, beyond] = offsets[:, -1:] * np.sqrt(k[beyond] / centers[-1])[None, :]
    return out


def _aliases() -> str:
    return ", ".join(m.alias for m in PANEL_MODELS)
