"""Frame metrics: a backtest frame and its panel in, tidy tables per window, step or model."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.evaluation.metrics.arrays import (
    _pinball_terms,
    _smape_terms,
    burst_threshold,
    check_level,
    seasonal_scale,
)
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
        floors MAEs at a thousandth of its mean over the series' windows, and
        :func:`summarize_windows` pools WAPE with it (``sum n * mae / sum n *
        mean_abs_actual``) and makes interval widths relative.

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
    return summary_and_windows(frame, panel, season=season, coverage_levels=coverage_levels,
                               provision_levels=provision_levels,
                               burst_percentile=burst_percentile)[0]


def summary_and_windows(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    season: int | str = "1d",
    coverage_levels: Sequence[float] | None = None,
    provision_levels: Sequence[float] | None = None,
    burst_percentile: float = 95.0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`summary` and :func:`evaluate` of one backtest, its points scored once (for a
    caller that needs both, e.g. the summary and :func:`summarize_windows`)."""
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
    return out.reset_index(), windows


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
    scale, thresh, previous, freq_s = _history_stats(frame, panel, season, burst_percentile)
    # steps of the series' own grid: a frame need not start at the step after the cutoff
    ahead = (frame[TS] - frame[CUTOFF]).dt.total_seconds().to_numpy()
    pts[HORIZON_STEP] = np.round(ahead / freq_s).astype(np.int64)
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
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per row: its window's MASE scale and burst threshold, the actual one step before it and
    its series' step in seconds.

    The scale and threshold come from the series' points up to the row's cutoff; the previous
    actual is the panel's value one step before the row's ``ts`` (the last point of the history
    for the first step after the cutoff).
    """
    panel = validate_panel(panel)
    series = {str(s): g for s, g in panel.groupby(SERIES_ID, sort=False)}
    scale = np.full(len(frame), np.nan)
    thresh = np.full(len(frame), np.nan)
    previous = np.full(len(frame), np.nan)
    freq_s = np.full(len(frame), np.nan)
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
        freq_s[idx] = panel_freq(g, purpose="scale errors")
        season_steps = horizon_steps(season, int(freq_s[idx[0]]))
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
    return scale, thresh, previous, freq_s


def _coverage_levels(levels: dict[float, str], wanted: Sequence[float] | None) -> list[float]:
    if wanted is None:
        return sorted({round(hi - lo, 9) for lo in levels for hi in levels
                       if hi > 0.5 and abs(lo + hi - 1) < 1e-9})
    out = []
    for level in wanted:
        check_level(level)
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
        check_level(level)
        if quantile_column(level) not in levels.values():
            raise DataContractError(
                f"provisioning at {level:g} needs column {quantile_column(level)}; the frame has "
                f"{list(levels.values()) or 'no quantile columns'}: backtest with that quantile"
            )
    return [float(q) for q in wanted]


def _percent(level: float) -> str:
    return f"{round(level * 100, 6):g}"
