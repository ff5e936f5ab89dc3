"""Forecast metrics: pure functions over arrays and over backtest frames.

Array functions take actuals ``y`` and forecasts ``f`` (same shape) and return one number;
frame functions take a backtest frame (``series_id, ts, cutoff, model, mean, p.., value``, see
:func:`prism.evaluation.backtest.backtest`) and the panel it was run on (the in-sample history that
scales MASE and sets the burst threshold before each cutoff) and return tidy tables:

- :func:`evaluate`: one row per ``(model, series_id, cutoff)`` window;
- :func:`by_step`: one row per ``(model, horizon_step)`` (step 1 is the first after the cutoff);
- :func:`summary`: one row per model, the mean over its windows.

Accuracy claims are ratios against a baseline (the last value, ``naive``), per window, over the
per-window frame of :func:`evaluate`:

- :func:`relative_mae`: each window's ``mae_model / mae_baseline``;
- :func:`avg_rel_mae`: per model the geometric mean of those ratios (AvgRelMAE) with a paired
  block-bootstrap interval over cutoffs;
- :func:`relative_to`: the same for two models against each other (ablations);
- :func:`summarize_windows` / :func:`panel_summary`: one row per model of a panel, AvgRelMAE
  with its interval next to MASE, pooled WAPE, CRPS, 90 % coverage and width, catastrophes.

Metric columns (``q`` is a quantile column such as ``p90``; formulas in each function):

==========================  ==================================================================
``mae`` / ``rmse``          of the ``mean`` forecast
``mase``                    MAE over the in-sample one-day seasonal naive MAE before the cutoff
``smape``                   ``mean(|y - f| / (|y| + |f|))``, in [0, 1], ``0/0 = 0``
``wape``                    ``sum|y - f| / sum|y|`` (``NaN`` when every actual is 0)
``mean_abs_actual``         ``mean(|y|)``: the window's level (scales ratios and widths)
``pinball_q``               pinball (quantile) loss of each quantile column
``crps``                    ``2 * mean_q pinball_q`` over the frame's quantile columns
``coverage_L``              share of actuals inside the central ``L``% interval
``width_L``                 mean width of that interval (upper minus lower quantile)
``burst_mse``               MSE of the mean over burst steps (change above the in-sample p95)
``under_q`` / ``over_q``    share of steps with ``y > q`` / mean GPUs ``max(q - y, 0)`` idle
==========================  ==================================================================

MASE is undefined (``NaN``) for a window whose in-sample seasonal changes are all zero (a
constant history) or that has less than one season and a step of history; such windows are
logged, left out of the means and counted in :func:`summary`'s ``mase_undefined``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.forecasters.base import horizon_steps, quantile_column
from prism.schema import SERIES_ID, TS, VALUE, panel_freq, validate_panel

logger = logging.getLogger(__name__)

ArrayLike = npt.ArrayLike
FloatArray = npt.NDArray[np.float64]

CUTOFF = "cutoff"
MODEL = "model"
MEAN = "mean"
HORIZON_STEP = "horizon_step"
WINDOW_KEYS = (MODEL, SERIES_ID, CUTOFF)
#: Upper quantiles at or above this level are provisioning quantiles (``under_``/``over_``).
PROVISION_FROM = 0.9
_QCOL = re.compile(r"^p(\d+(?:\.\d+)?)$")


# -- array metrics ----------------------------------------------------------------------------
def _pair(actual: ArrayLike, forecast: ArrayLike) -> tuple[FloatArray, FloatArray]:
    y = np.asarray(actual, dtype=np.float64)
    f = np.asarray(forecast, dtype=np.float64)
    if y.shape != f.shape:
        raise DataContractError(f"actuals {y.shape} and forecasts {f.shape} differ in shape")
    if y.size == 0:
        raise DataContractError("a metric needs at least one actual")
    return y, f


def mae(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Mean absolute error ``mean(|y - f|)``.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.mean(np.abs(y - f)))


def rmse(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Root mean squared error ``sqrt(mean((y - f)^2))``.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.sqrt(np.mean((y - f) ** 2)))


def _smape_terms(y: FloatArray, f: FloatArray) -> FloatArray:
    num = np.abs(y - f)
    den = np.abs(y) + np.abs(f)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def smape(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Symmetric MAPE ``mean(|y - f| / (|y| + |f|))``, in [0, 1]; a ``0/0`` term is 0.

    This is utilsforecast's convention; multiply by 200 for the M4 percentage.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.mean(_smape_terms(y, f)))


def wape(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Weighted absolute percentage error ``sum|y - f| / sum|y|`` (a share, not a percentage).

    Pooled over a panel (every window's absolute errors over every window's actuals) it is the
    share of the panel's volume the forecast misses, which no near-idle series can dominate.

    Returns:
        WAPE, or ``NaN`` when every actual is 0 (undefined).

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    volume = float(np.sum(np.abs(y)))
    if volume == 0:
        return float("nan")
    return float(np.sum(np.abs(y - f))) / volume


def seasonal_scale(history: ArrayLike, season: int) -> float:
    """In-sample MAE of the seasonal naive: ``mean_{t >= s} |y_t - y_{t-s}|`` (MASE's scale).

    Returns:
        The scale, or ``NaN`` when the history has ``season`` points or fewer.

    Raises:
        ConfigError: for a season below one step.
    """
    if season < 1:
        raise ConfigError(f"season must be at least one step, got {season}")
    h = np.asarray(history, dtype=np.float64)
    if len(h) <= season:
        return float("nan")
    return float(np.mean(np.abs(h[season:] - h[:-season])))


def mase(actual: ArrayLike, forecast: ArrayLike, scale: float) -> float:
    """Mean absolute scaled error ``mean(|y - f|) / scale``.

    Args:
        actual: actuals.
        forecast: point forecasts.
        scale: the in-sample seasonal naive MAE (:func:`seasonal_scale`).

    Returns:
        MASE, or ``NaN`` when the scale is 0 or ``NaN`` (undefined).

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    error = mae(actual, forecast)
    if not np.isfinite(scale) or scale <= 0:
        return float("nan")
    return error / scale


def _pinball_terms(y: FloatArray, f: FloatArray, level: float) -> FloatArray:
    d = y - f
    return np.maximum(level * d, (level - 1.0) * d)


def pinball_loss(actual: ArrayLike, forecast: ArrayLike, level: float) -> float:
    """Pinball (quantile) loss ``mean(max(q (y - f), (q - 1)(y - f)))`` of a level-``q`` forecast.

    Raises:
        ConfigError: for a level outside (0, 1).
        DataContractError: for arrays of different shapes or empty ones.
    """
    _check_level(level)
    y, f = _pair(actual, forecast)
    return float(np.mean(_pinball_terms(y, f, level)))


def crps(actual: ArrayLike, quantiles: ArrayLike, levels: Sequence[float]) -> float:
    """CRPS approximated from quantile forecasts: ``2 * mean_q pinball_q``.

    The CRPS is the integral over ``q`` in (0, 1) of twice the pinball loss at ``q``; the mean
    over the available levels is the usual quadrature of that integral (exact for a point mass
    forecast, where every quantile is the same number: then it is the MAE).

    Args:
        actual: ``(n,)`` actuals.
        quantiles: ``(n, k)`` forecasts, column ``j`` at level ``levels[j]``.
        levels: the ``k`` levels.

    Raises:
        ConfigError: for no level or a level outside (0, 1).
        DataContractError: for shapes that do not match.
    """
    y = np.asarray(actual, dtype=np.float64)
    qf = np.asarray(quantiles, dtype=np.float64)
    if not levels:
        raise ConfigError("CRPS needs at least one quantile level")
    if qf.shape != (*y.shape, len(levels)):
        raise DataContractError(
            f"quantile forecasts have shape {qf.shape}, expected {(*y.shape, len(levels))}"
        )
    return float(np.mean([pinball_loss(y, qf[..., j], q) for j, q in enumerate(levels)]) * 2)


def coverage(actual: ArrayLike, lower: ArrayLike, upper: ArrayLike) -> float:
    """Share of actuals inside their interval: ``mean(lower <= y <= upper)``.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, lo = _pair(actual, lower)
    _, hi = _pair(actual, upper)
    return float(np.mean((lo <= y) & (y <= hi)))


def under_provisioning_rate(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Share of steps where the actual exceeds the provisioned quantile: ``mean(y > f_q)``.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.mean(y > f))


def over_provisioning(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Mean provisioned GPUs above the actual: ``mean(max(f_q - y, 0))`` (idle capacity).

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.mean(np.maximum(f - y, 0.0)))


def burst_threshold(history: ArrayLike, percentile: float = 95.0) -> float:
    """The ``percentile`` of the absolute one-step changes ``|y_t - y_{t-1}|`` of a history.

    Returns:
        The threshold, or ``NaN`` for a history of fewer than two points.
    """
    h = np.asarray(history, dtype=np.float64)
    if len(h) < 2:
        return float("nan")
    return float(np.percentile(np.abs(np.diff(h)), percentile))


def burst_mse(actual: ArrayLike, forecast: ArrayLike, previous: float, threshold: float) -> float:
    """MSE over burst steps: ``mean((y_t - f_t)^2)`` over ``t`` with ``|y_t - y_{t-1}| > thr``.

    Args:
        actual: the actuals after the cutoff, in order.
        forecast: their point forecasts.
        previous: the last actual at or before the cutoff (``y_0``'s predecessor).
        threshold: the burst threshold (:func:`burst_threshold` of the history).

    Returns:
        The burst-phase MSE, or ``NaN`` when no step is a burst.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    burst = _burst_mask(y, previous, threshold)
    if not burst.any():
        return float("nan")
    return float(np.mean((y[burst] - f[burst]) ** 2))


def _burst_mask(y: FloatArray, previous: float, threshold: float) -> npt.NDArray[np.bool_]:
    change = np.abs(np.diff(np.concatenate([[previous], y])))
    out: npt.NDArray[np.bool_] = change > threshold
    return out


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ConfigError(f"quantile levels are between 0 and 1 (exclusive), got {level}")


# -- frame metrics ----------------------------------------------------------------------------
def quantile_levels(frame: pd.DataFrame) -> dict[float, str]:
    """Level -> column of every quantile column (``p90`` -> 0.9) of a forecast frame, sorted."""
    found = {}
    for col in frame.columns:
        m = _QCOL.match(str(col))
        if m:
            level = float(m.group(1)) / 100
            if 0 < level < 1:
                found[level] = str(col)
    return dict(sorted(found.items()))


def evaluate(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    season: int | str = "1d",
    coverage_levels: Sequence[float] | None = None,
    provision_levels: Sequence[float] | None = None,
    burst_percentile: float = 95.0,
) -> pd.DataFrame:
    """Every metric of every window: one row per ``(model, series_id, cutoff)``.

    Args:
        frame: a backtest frame (``series_id, ts, cutoff, model, mean, p.., value``).
        panel: the panel the backtest ran on; its points up to each cutoff scale MASE and set
            the burst threshold.
        season: MASE's seasonal naive season (a duration, or steps).
        coverage_levels: central interval levels (``0.9`` needs ``p5`` and ``p95``); ``None``
            means every symmetric pair of quantile columns in the frame.
        provision_levels: quantiles for ``under_``/``over_``; ``None`` means every quantile
            column at or above ``PROVISION_FROM`` (0.9).
        burst_percentile: the percentile of in-sample absolute changes a burst step exceeds.

    Returns:
        ``model, series_id, cutoff, n, mean_abs_actual, mae, rmse, mase, smape, wape,
        pinball_p.., crps, coverage_.., width_.., burst_mse, burst_steps, under_p..,
        over_p..``. ``mean_abs_actual`` is the window's ``mean(|y|)``: :func:`relative_mae`
        floors MAEs at a thousandth of it, and :func:`summarize_windows` pools WAPE with it
        (``sum n * mae / sum n * mean_abs_actual``) and makes interval widths relative.

    Raises:
        DataContractError: for a frame missing columns or a quantile the levels need, or a
            series not in the panel.
        ConfigError: for a bad season or level.
    """
    points = _points(frame, panel, season=season, coverage_levels=coverage_levels,
                     provision_levels=provision_levels, burst_percentile=burst_percentile)
    return _windows(points)


def by_step(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    season: int | str = "1d",
    coverage_levels: Sequence[float] | None = None,
    provision_levels: Sequence[float] | None = None,
    burst_percentile: float = 95.0,
) -> pd.DataFrame:
    """Every metric by model and horizon step (1 is the first step after the cutoff).

    Each metric pools the points of that step over series and cutoffs (``rmse`` is the root of
    their mean squared error, ``mase`` the mean of the scaled absolute errors). Arguments as in
    :func:`evaluate`.

    Returns:
        ``model, horizon_step, n, mae, rmse, ...`` (the columns of :func:`evaluate`).

    Raises:
        DataContractError: as :func:`evaluate`.
        ConfigError: as :func:`evaluate`.
    """
    points = _points(frame, panel, season=season, coverage_levels=coverage_levels,
                     provision_levels=provision_levels, burst_percentile=burst_percentile)
    return _aggregate(points, [MODEL, HORIZON_STEP])


def summary(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    season: int | str = "1d",
    coverage_levels: Sequence[float] | None = None,
    provision_levels: Sequence[float] | None = None,
    burst_percentile: float = 95.0,
) -> pd.DataFrame:
    """One row per model: each metric's mean over the model's windows (:func:`evaluate`).

    Windows where a metric is undefined (``NaN``) are left out of its mean. ``burst_mse`` is
    pooled over all burst steps of the model (most windows have few), ``burst_steps`` is their
    count; ``wape`` is pooled over all points (total absolute error over total actual, not a
    mean of window WAPEs). Arguments as in :func:`evaluate`.

    Returns:
        ``model, windows, series, mase_undefined, mae, rmse, mase, ...`` in the frame's model
        order, where ``windows`` counts ``(series, cutoff)`` pairs and ``mase_undefined`` the
        windows without a MASE.

    Raises:
        DataContractError: as :func:`evaluate`.
        ConfigError: as :func:`evaluate`.
    """
    points = _points(frame, panel, season=season, coverage_levels=coverage_levels,
                     provision_levels=provision_levels, burst_percentile=burst_percentile)
    windows = _windows(points)
    metrics = [c for c in windows.columns if c not in (*WINDOW_KEYS, "n", "burst_steps")]
    out = windows.groupby(MODEL, sort=False)[metrics].mean()
    pooled = _aggregate(points, [MODEL]).set_index(MODEL)
    out["wape"] = pooled["wape"]
    out["burst_mse"] = pooled["burst_mse"]
    out["burst_steps"] = pooled["burst_steps"]
    out.insert(0, "windows", windows.groupby(MODEL, sort=False).size())
    out.insert(1, "series", windows.groupby(MODEL, sort=False)[SERIES_ID].nunique())
    out.insert(2, "mase_undefined", windows.groupby(MODEL, sort=False)["mase"].apply(
        lambda s: int(s.isna().sum())))
    return out.reset_index()


# -- relative accuracy ------------------------------------------------------------------------
#: A window's MAE is floored at this share of its mean absolute actual (ratios stay finite).
FLOOR_SHARE = 1e-3
#: The floor of a window whose actuals are all 0.
FLOOR_MIN = 1e-9
#: A window whose MAE is more than this many times the baseline's is a catastrophe.
CATASTROPHE = 2.0
REL_MAE = "rel_mae"
_WINDOW_NEED = (MODEL, SERIES_ID, CUTOFF, "mae", "mean_abs_actual")


def relative_mae(windows: pd.DataFrame, *, baseline: str = "naive") -> pd.DataFrame:
    """Each window's MAE relative to the baseline's MAE in the same window.

    The ratio is ``max(mae, floor) / max(mae_baseline, floor)`` with
    ``floor = 1e-3 * mean_abs_actual`` of the window (``1e-9`` when the actuals are all 0), so
    that a window where the baseline is exactly right (a flat stretch) gives a large but finite
    ratio. Windows where both MAEs are 0 say nothing about either model and are left out. The
    baseline's own windows are kept (ratio 1, unless its MAE is 0).

    Args:
        windows: the per-window frame of :func:`evaluate` (``model, series_id, cutoff, mae,
            mean_abs_actual, ...``). Every other column that is not a number (say ``dataset``
            or ``horizon``) is a key of the window too and is carried to the output.
        baseline: the model the others are divided by.

    Returns:
        ``<extra keys>, model, series_id, cutoff, mae, mae_baseline, rel_mae``, one row per
        window of each model, in the frame's order.

    Raises:
        DataContractError: for a frame missing columns, a window given twice, or a window of a
            model that the baseline lacks (run the baseline in the same backtest).
    """
    missing = [c for c in _WINDOW_NEED if c not in windows.columns]
    if missing:
        raise DataContractError(
            f"relative accuracy needs the per-window frame of evaluate() with columns "
            f"{list(_WINDOW_NEED)}; missing {missing}"
        )
    keys = [*_extra_keys(windows), SERIES_ID, CUTOFF]
    repeated = windows.duplicated([MODEL, *keys])
    if repeated.any():
        first = windows.loc[repeated].iloc[0]
        raise DataContractError(
            f"window (model {first[MODEL]!r}, series {first[SERIES_ID]!r}, cutoff "
            f"{first[CUTOFF]}) appears more than once; give the column that tells the copies "
            "apart (e.g. dataset or horizon) as text, so that it is a key"
        )
    base = windows.loc[windows[MODEL] == baseline, [*keys, "mae"]]
    if base.empty:
        raise DataContractError(
            f"no window of the baseline {baseline!r} (models: "
            f"{list(pd.unique(windows[MODEL]))}); run the baseline in the same backtest"
        )
    out = windows[[*keys[:-2], MODEL, SERIES_ID, CUTOFF, "mae", "mean_abs_actual"]].merge(
        base.rename(columns={"mae": "mae_baseline"}), on=keys, how="left", indicator=True,
        sort=False)
    lacking = out["_merge"] == "left_only"
    if lacking.any():
        first = out.loc[lacking].iloc[0]
        raise DataContractError(
            f"model {first[MODEL]!r} has a window (series {first[SERIES_ID]!r}, cutoff "
            f"{first[CUTOFF]}) that the baseline {baseline!r} lacks: run the baseline in the "
            "same backtest, on the same series and cutoffs"
        )
    model_mae = out["mae"].to_numpy(np.float64)
    base_mae = out["mae_baseline"].to_numpy(np.float64)
    floor = FLOOR_SHARE * out["mean_abs_actual"].to_numpy(np.float64)
    floor = np.where(floor > 0, floor, FLOOR_MIN)
    out[REL_MAE] = np.maximum(model_mae, floor) / np.maximum(base_mae, floor)
    keep = ~((model_mae == 0) & (base_mae == 0))
    out = out.loc[keep].drop(columns=["_merge", "mean_abs_actual"])
    return out.reset_index(drop=True)


def avg_rel_mae(
    windows: pd.DataFrame,
    *,
    baseline: str = "naive",
    n_boot: int = 1000,
    level: float = 0.95,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """AvgRelMAE per model: the geometric mean over windows of :func:`relative_mae`.

    ``exp(mean(log r))`` over the model's windows: below 1 the model beats the baseline, and
    no single window (a near-idle series, a flat day) can dominate it as it dominates a mean of
    ratios. The interval is a paired block bootstrap over cutoffs: each replicate draws the
    frame's cutoffs with replacement, and all windows at a drawn cutoff (every series, every
    other key) come along, so that the correlation between series at one time is kept; with
    one series this is resampling windows. The same draws serve every model (paired). The
    geometric mean of each replicate is computed at once from a ``(n_boot, n_cutoffs)``
    matrix of draw counts times the per-cutoff sums of log ratios; the interval is the
    replicates' percentile interval.

    Args:
        windows: the per-window frame of :func:`evaluate` (see :func:`relative_mae`).
        baseline: the model the others are divided by.
        n_boot: bootstrap replicates.
        level: the interval's coverage (0.95: the 2.5 and 97.5 percentiles).
        random_state: seed of the draws.

    Returns:
        ``model, avg_rel_mae, lo, hi, windows`` in the frame's model order, ``windows`` the
        count used (both-zero windows left out); a model without one has ``NaN``.

    Raises:
        DataContractError: as :func:`relative_mae`.
        ConfigError: for ``n_boot < 1`` or a level outside (0, 1).
    """
    rel = relative_mae(windows, baseline=baseline)
    return _geometric_means(rel, n_boot=n_boot, level=level, random_state=random_state,
                            models=list(pd.unique(windows[MODEL])))


def relative_to(
    windows: pd.DataFrame,
    model: str | Sequence[str],
    reference: str,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """How much better or worse ``model`` is than ``reference``, paired window by window.

    The ratio is ``exp(mean(log r_model - log r_reference))`` over the windows both have,
    which is the AvgRelMAE of ``model`` with ``reference`` as the baseline (the baseline's
    MAE cancels out of the difference of logs); floors and left-out windows as in
    :func:`relative_mae`, interval as in :func:`avg_rel_mae`. For ablations: with ``model``
    PRISM with a part turned off and ``reference`` PRISM, a ratio of 1.05 means turning the
    part off costs 5 % of MAE.

    Args:
        windows: the per-window frame of :func:`evaluate`.
        model: a model, or several (one row each).
        reference: the model they are compared with.
        n_boot: bootstrap replicates.
        level: the interval's coverage.
        random_state: seed of the draws.

    Returns:
        ``model, reference, ratio, lo, hi, windows``.

    Raises:
        DataContractError: for a model not in the frame, or as :func:`relative_mae` (here the
            reference must have every window of the models).
        ConfigError: as :func:`avg_rel_mae`.
    """
    models = [model] if isinstance(model, str) else list(model)
    present = set(pd.unique(windows[MODEL])) if MODEL in windows.columns else set()
    absent = [m for m in [*models, reference] if m not in present]
    if absent:
        raise DataContractError(
            f"models {absent} have no window in the frame (models: {sorted(present)}); "
            "evaluate them in the same backtest"
        )
    rel = relative_mae(windows[windows[MODEL].isin([*models, reference])], baseline=reference)
    out = _geometric_means(rel, n_boot=n_boot, level=level, random_state=random_state,
                           models=models)
    out.insert(1, "reference", reference)
    return out.rename(columns={"avg_rel_mae": "ratio"})


def summarize_windows(
    windows: pd.DataFrame,
    *,
    baseline: str = "naive",
    n_boot: int = 1000,
    level: float = 0.95,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """One row per model of a panel's windows: the decision metrics.

    Every window given is pooled (call it once per panel and horizon):

    - ``avg_rel_mae``, ``lo``, ``hi``, ``windows``: :func:`avg_rel_mae`;
    - ``mase``, ``crps``, ``coverage_90``: means over the model's windows (``coverage_90`` is
      ``NaN`` when the frame has no ``p5``/``p95``);
    - ``wape``: pooled, the total absolute error over the total actual of all windows
      (``sum n * mae / sum n * mean_abs_actual``), not a mean of window WAPEs;
    - ``width_90``: the mean width of the 90 % interval (``p95 - p5``) over the mean
      ``|actual|`` of the windows: a relative width, comparable across panels (0.5 means the
      interval spans half the average level);
    - ``catastrophes``: the share of windows whose MAE is more than twice the baseline's in the
      same window (``rel_mae > 2``, floors as in :func:`relative_mae`).

    Args:
        windows: the per-window frame of :func:`evaluate`.
        baseline: the model ratios are taken against.
        n_boot: bootstrap replicates.
        level: the interval's coverage.
        random_state: seed of the draws.

    Returns:
        ``model, avg_rel_mae, lo, hi, mase, wape, crps, coverage_90, width_90, catastrophes,
        windows`` in the frame's model order.

    Raises:
        DataContractError: as :func:`relative_mae`.
        ConfigError: as :func:`avg_rel_mae`.
    """
    models = list(pd.unique(windows[MODEL])) if MODEL in windows.columns else []
    rel = relative_mae(windows, baseline=baseline)
    out = _geometric_means(rel, n_boot=n_boot, level=level, random_state=random_state,
                           models=models).set_index(MODEL)
    g = windows.groupby(MODEL, sort=False)
    n = windows["n"] if "n" in windows.columns else pd.Series(1.0, index=windows.index)
    errors = (n * windows["mae"]).groupby(windows[MODEL], sort=False).sum()
    volume = (n * windows["mean_abs_actual"]).groupby(windows[MODEL], sort=False).sum()
    mean_level = g["mean_abs_actual"].mean()
    for col in ("mase", "crps", "coverage_90"):
        out[col] = g[col].mean() if col in windows.columns else np.nan
    out["wape"] = errors / volume.where(volume > 0)
    if "width_90" in windows.columns:
        out["width_90"] = g["width_90"].mean() / mean_level.where(mean_level > 0)
    else:
        out["width_90"] = np.nan
    out["catastrophes"] = (rel[REL_MAE] > CATASTROPHE).groupby(rel[MODEL], sort=False).mean()
    cols = ["avg_rel_mae", "lo", "hi", "mase", "wape", "crps", "coverage_90", "width_90",
            "catastrophes", "windows"]
    return out[cols].reset_index()


def panel_summary(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    baseline: str = "naive",
    n_boot: int = 1000,
    level: float = 0.95,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """The decision metrics of a backtest on one panel: :func:`summarize_windows` of
    :func:`evaluate`.

    Args:
        frame: a backtest frame with the baseline among its models (``p5`` and ``p95`` for
            the 90 % coverage and width).
        panel: the panel the backtest ran on.
        baseline: the model ratios are taken against.
        n_boot: bootstrap replicates.
        level: the interval's coverage.
        random_state: seed of the draws.

    Returns:
        ``model, avg_rel_mae, lo, hi, mase, wape, crps, coverage_90, width_90, catastrophes,
        windows`` (see :func:`summarize_windows`).

    Raises:
        DataContractError: as :func:`evaluate` and :func:`relative_mae` (no baseline).
        ConfigError: as :func:`evaluate` and :func:`avg_rel_mae`.
    """
    return summarize_windows(evaluate(frame, panel), baseline=baseline, n_boot=n_boot,
                             level=level, random_state=random_state)


def _extra_keys(windows: pd.DataFrame) -> list[str]:
    """The columns besides model, series and cutoff that identify a window (not numbers)."""
    return [str(c) for c in windows.columns if c not in WINDOW_KEYS
            and (not pd.api.types.is_numeric_dtype(windows[c])
                 or pd.api.types.is_bool_dtype(windows[c]))]


def _geometric_means(
    rel: pd.DataFrame, *, n_boot: int, level: float, random_state: int | None,
    models: list[str],
) -> pd.DataFrame:
    """Per model: ``exp(mean(log rel_mae))`` and its block-bootstrap interval over cutoffs."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise ConfigError(f"n_boot must be a whole number >= 1, got {n_boot!r}")
    _check_level(level)
    blocks, cutoffs = pd.factorize(rel[CUTOFF], sort=True)
    k = len(cutoffs)
    rng = np.random.default_rng(random_state)
    # one draw of cutoffs for every model: the intervals of two models are paired
    counts = rng.multinomial(k, np.full(k, 1.0 / k), size=n_boot) if k else None
    logs = np.log(rel[REL_MAE].to_numpy(np.float64))
    by_model = rel.groupby(MODEL, sort=False).indices
    rows = []
    for name in models:
        idx = by_model.get(name, np.array([], dtype=np.int64))
        est, lo, hi = _bootstrap_geomean(logs[idx], blocks[idx], counts, level)
        rows.append({MODEL: name, "avg_rel_mae": est, "lo": lo, "hi": hi, "windows": len(idx)})
    return pd.DataFrame(rows, columns=[MODEL, "avg_rel_mae", "lo", "hi", "windows"])


def _bootstrap_geomean(
    logs: FloatArray, blocks: npt.NDArray[np.intp], counts: npt.NDArray[np.int64] | None,
    level: float,
) -> tuple[float, float, float]:
    """The geometric mean of ``exp(logs)`` and its percentile interval over block draws."""
    if logs.size == 0 or counts is None:
        return float("nan"), float("nan"), float("nan")
    # centred on the median, so that equal ratios give exactly that ratio and a zero-width
    # interval (sums of equal floats are not exact multiples)
    centre = float(np.median(logs))
    d = logs - centre
    k = counts.shape[1]
    sums = np.bincount(blocks, weights=d, minlength=k)
    sizes = np.bincount(blocks, minlength=k).astype(np.float64)
    num = counts @ sums
    den = counts @ sizes
    reps = centre + np.divide(num, den, out=np.full(len(num), np.nan), where=den > 0)
    lo, hi = np.nanquantile(reps, [(1 - level) / 2, (1 + level) / 2])
    est = centre + float(np.sum(d)) / len(d)
    return float(np.exp(est)), float(np.exp(lo)), float(np.exp(hi))


def _points(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    season: int | str,
    coverage_levels: Sequence[float] | None,
    provision_levels: Sequence[float] | None,
    burst_percentile: float,
) -> pd.DataFrame:
    """Per-row loss terms: the frame's keys plus one column per metric term."""
    need = [SERIES_ID, TS, CUTOFF, MODEL, MEAN, VALUE]
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise DataContractError(
            f"a backtest frame needs columns {need}; missing {missing} (run backtest first)"
        )
    if frame.empty:
        raise DataContractError("the backtest frame is empty")
    if not 0 <= burst_percentile <= 100:
        raise ConfigError(f"burst_percentile must be in [0, 100], got {burst_percentile}")
    order = {m: i for i, m in enumerate(pd.unique(frame[MODEL]))}
    frame = frame.sort_values(
        [MODEL, SERIES_ID, CUTOFF, TS], kind="stable",
        key=lambda c: c.map(order) if c.name == MODEL else c).reset_index(drop=True)
    levels = quantile_levels(frame)
    y = frame[VALUE].to_numpy(dtype=np.float64)
    f = frame[MEAN].to_numpy(dtype=np.float64)
    err = y - f
    pts = frame[[MODEL, SERIES_ID, CUTOFF]].copy()
    pts["n"] = 1
    step = frame[TS] - frame[CUTOFF]
    first = step.groupby(frame[SERIES_ID]).transform("min")
    pts[HORIZON_STEP] = (step / first).round().astype(np.int64)
    scale, thresh, previous = _history_stats(frame, panel, season, burst_percentile)
    pts["ae"] = np.abs(err)
    pts["se"] = err**2
    pts["sae"] = np.divide(pts["ae"].to_numpy(), scale, out=np.full(len(y), np.nan),
                           where=np.isfinite(scale) & (scale > 0))
    pts["smape"] = _smape_terms(y, f)
    pts["abs_actual"] = np.abs(y)
    for level, col in levels.items():
        pts[f"pinball_{col}"] = _pinball_terms(y, frame[col].to_numpy(np.float64), level)
    if levels:
        pts["crps"] = 2 * pts[[f"pinball_{c}" for c in levels.values()]].mean(axis=1)
    else:
        pts["crps"] = pts["ae"]  # a point forecast is a point mass: its CRPS is the MAE
    for level in _coverage_levels(levels, coverage_levels):
        lo, hi = quantile_column((1 - level) / 2), quantile_column((1 + level) / 2)
        yq = frame[VALUE]
        pts[f"coverage_{_percent(level)}"] = ((frame[lo] <= yq) & (yq <= frame[hi])).astype(
            np.float64)
        pts[f"width_{_percent(level)}"] = (frame[hi] - frame[lo]).to_numpy(np.float64)
    burst = np.abs(y - previous) > thresh
    pts["burst"] = burst.astype(np.float64)
    pts["burst_se"] = np.where(burst, err**2, 0.0)
    for level in _provision_levels(levels, provision_levels):
        fq = frame[quantile_column(level)].to_numpy(np.float64)
        col = quantile_column(level)
        pts[f"under_{col}"] = (y > fq).astype(np.float64)
        pts[f"over_{col}"] = np.maximum(fq - y, 0.0)
    return pts


def _windows(points: pd.DataFrame) -> pd.DataFrame:
    """Metrics per ``(model, series_id, cutoff)``; windows without a MASE are logged."""
    out = _aggregate(points, list(WINDOW_KEYS))
    undefined = int(out["mase"].isna().sum())
    if undefined:
        logger.info("MASE is undefined (constant or too short history) in %d of %d windows; "
                    "they are left out of the means", undefined, len(out))
    return out


def _aggregate(points: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each metric over groups of points (``keys``), in the documented column order."""
    terms = [c for c in points.columns if c not in (MODEL, SERIES_ID, CUTOFF, HORIZON_STEP)]
    g = points.groupby(keys, sort=False)[terms]
    sums = g.sum(min_count=1)
    means = g.mean()
    out = pd.DataFrame(index=sums.index)
    out["n"] = sums["n"].astype(np.int64)
    out["mean_abs_actual"] = means["abs_actual"]
    out["mae"] = means["ae"]
    out["rmse"] = np.sqrt(means["se"])
    out["mase"] = means["sae"]  # NaN terms (no scale) are skipped; all-NaN stays NaN
    out["smape"] = means["smape"]
    volume = sums["abs_actual"]
    out["wape"] = sums["ae"] / volume.where(volume > 0)
    for col in [c for c in terms if c.startswith("pinball_")]:
        out[col] = means[col]
    out["crps"] = means["crps"]
    for col in [c for c in terms if c.startswith("coverage_")]:
        out[col] = means[col]
    for col in [c for c in terms if c.startswith("width_")]:
        out[col] = means[col]
    steps = sums["burst"]
    out["burst_mse"] = sums["burst_se"] / steps.where(steps > 0)
    out["burst_steps"] = steps.astype(np.int64)
    for col in [c for c in terms if c.startswith(("under_", "over_"))]:
        out[col] = means[col]
    return out.reset_index()


def _history_stats(
    frame: pd.DataFrame, panel: pd.DataFrame, season: int | str, percentile: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per row: its window's MASE scale and burst threshold, and the actual one step before it.

    The scale and threshold come from the series' points up to the row's cutoff; the previous
    actual is the panel's value one step before the row's ``ts`` (the last point of the history
    for the first step after the cutoff).
    """
    panel = validate_panel(panel)
    series = {str(s): g for s, g in panel.groupby(SERIES_ID, sort=False)}
    scale = np.full(len(frame), np.nan)
    thresh = np.full(len(frame), np.nan)
    previous = np.full(len(frame), np.nan)
    rows = frame.groupby([SERIES_ID, CUTOFF], sort=False).indices
    for key, idx in rows.items():
        raw_sid, raw_cutoff = cast(tuple[Any, Any], key)
        sid, cutoff = str(raw_sid), pd.Timestamp(raw_cutoff)
        if sid not in series:
            raise DataContractError(
                f"series {sid!r} of the backtest frame is not in the panel; pass the panel "
                "the backtest ran on"
            )
        g = series[sid]
        season_steps = _season_steps(g, season)
        ts = g[TS].to_numpy()
        end = int(np.searchsorted(ts, cutoff.to_datetime64(), side="right"))
        if end == 0:
            raise DataContractError(
                f"series {sid!r} has no point at or before cutoff {cutoff}; pass the panel "
                "the backtest ran on"
            )
        values = g[VALUE].to_numpy(dtype=np.float64)
        history = values[:end]
        scale[idx] = seasonal_scale(history, season_steps)
        thresh[idx] = burst_threshold(history, percentile)
        at = np.searchsorted(ts, frame[TS].to_numpy()[idx])
        at_ok = (at < len(ts)) & (ts[np.minimum(at, len(ts) - 1)] == frame[TS].to_numpy()[idx])
        if not at_ok.all():
            raise DataContractError(
                f"series {sid!r} has no actual at {frame[TS].iloc[idx[~at_ok][0]]} in the "
                "panel; pass the panel the backtest ran on"
            )
        previous[idx] = values[at - 1]
    return scale, thresh, previous


def _season_steps(series: pd.DataFrame, season: int | str) -> int:
    return horizon_steps(season, panel_freq(series, purpose="scale errors"))


def _coverage_levels(levels: dict[float, str], wanted: Sequence[float] | None) -> list[float]:
    if wanted is None:
        return sorted({round(hi - lo, 9) for lo in levels for hi in levels
                       if hi > 0.5 and abs(lo + hi - 1) < 1e-9})
    out = []
    for level in wanted:
        _check_level(level)
        lo, hi = quantile_column((1 - level) / 2), quantile_column((1 + level) / 2)
        have = list(levels.values())
        if lo not in have or hi not in have:
            raise DataContractError(
                f"coverage of the central {_percent(level)}% interval needs columns {lo} and "
                f"{hi}; the frame has {have or 'no quantile columns'}: backtest with quantiles "
                f"{(1 - level) / 2:g} and {(1 + level) / 2:g}, or ask for another level"
            )
        out.append(float(level))
    return out


def _provision_levels(levels: dict[float, str], wanted: Sequence[float] | None) -> list[float]:
    if wanted is None:
        return [q for q in levels if q >= PROVISION_FROM - 1e-12]
    for level in wanted:
        _check_level(level)
        if quantile_column(level) not in levels.values():
            raise DataContractError(
                f"provisioning at {level:g} needs column {quantile_column(level)}; the frame has "
                f"{list(levels.values()) or 'no quantile columns'}: backtest with that quantile"
            )
    return [float(q) for q in wanted]


def _percent(level: float) -> str:
    return f"{round(level * 100, 6):g}"
