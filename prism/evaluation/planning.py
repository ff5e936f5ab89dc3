"""Planning backtests: replay the last days, provision from day-ahead forecasts, count the cost.

Each replayed day (a backtest window of one ``horizon`` after its cutoff, see
:func:`prism.evaluation.backtest.backtest`) each series (a VC's GPUs in use) gets one provisioned
level per block of the window (``1d``: one level for the day; ``1h``: 24 levels), set before
the window starts. The plans compared:

==========================  ==================================================================
``static peak``             the series' peak over all its history before the replayed days
``yesterday's peak``        the peak of the ``horizon`` just before the cutoff (the previous
                            day), for every block of the window
``same block yesterday``    the peak of the same block one ``horizon`` earlier (hourly plans)
``oracle``                  the block's actual peak: perfect knowledge, the limit of the block
``<model> p<q>``            the peak over the block of the model's day-ahead ``q``-quantile
                            forecast
==========================  ==================================================================

With ``capacity`` given, every plan is capped at the series' installed GPUs (a VC cannot be
provisioned beyond what it has, and demand served cannot exceed it).

Definitions, per step of ``step_h`` hours, with ``y`` the actual and ``L`` the level in force:

- idle GPU-hours ``sum max(L - y, 0) * step_h``;
- unmet demand ``sum max(y - L, 0) * step_h``, and its share of the demand
  ``sum y * step_h``;
- GPU-hours saved: ``1 - idle / idle of the static peak plan`` over the same steps.

On the 16 Helios Earth VCs (``gpus_in_use``, 10 min, the last 7 days of May 2020) the static
peak leaves 38,556.5 idle GPU-hours, yesterday's peak saves 35.1 % of them with 0.52 % of the
demand unmet and the daily oracle saves 43.1 % (``python -m evaluation.benchmarks.planning``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.evaluation.backtest import CUTOFF, MODEL, backtest, backtest_cutoffs
from prism.forecasters import BaseForecaster
from prism.forecasters.base import horizon_steps, quantile_column
from prism.schema import (
    SERIES_ID,
    TS,
    VALUE,
    panel_freq,
    parse_duration,
    validate_panel,
)

logger = logging.getLogger(__name__)

STATIC = "static peak"
YESTERDAY = "yesterday's peak"
SAME_BLOCK = "same block yesterday"
ORACLE = "oracle"
REFERENCES = (STATIC, YESTERDAY, SAME_BLOCK, ORACLE)
#: The columns of a planning table, in order.
COLUMNS = ("plan", "model", "quantile", "block", "series", "windows", "idle_gpu_hours",
           "saved_share", "unmet_gpu_hours", "unmet_share", "demand_gpu_hours")


@dataclass(frozen=True)
class PlanningResult:
    """A planning backtest.

    Attributes:
        table: one row per plan and block (:data:`COLUMNS`), totals over all series.
        by_series: the same per series (``series_id`` added).
        frame: the backtest frame it was scored on (forecasts and actuals).
    """

    table: pd.DataFrame
    by_series: pd.DataFrame
    frame: pd.DataFrame


def window_rows(panel: pd.DataFrame, *, horizon: int | str, windows: int,
                step: int | str | None = None) -> pd.DataFrame:
    """The replayed steps without any forecast: ``series_id, ts, cutoff, value``.

    The cutoffs are those of :func:`prism.evaluation.backtest.backtest_cutoffs` (short series are
    skipped), so a model's backtest frame over the same panel has the same rows.

    Raises:
        DataContractError / ConfigError: as :func:`prism.evaluation.backtest.backtest_cutoffs`.
    """
    panel = validate_panel(panel)
    cuts = backtest_cutoffs(panel, horizon=horizon, windows=windows, step=step,
                            on_short="skip")
    freq = _step(panel)
    h = horizon_steps(horizon, int(freq.total_seconds()))
    offsets = pd.to_timedelta(np.arange(1, h + 1) * freq.value, unit="ns")
    rows = cuts.loc[cuts.index.repeat(h), [SERIES_ID, CUTOFF]].reset_index(drop=True)
    rows[TS] = rows[CUTOFF] + np.tile(offsets.to_numpy(), len(cuts))
    out = rows.merge(panel, on=[SERIES_ID, TS], how="left", validate="many_to_one")
    return out[[SERIES_ID, TS, CUTOFF, VALUE]]


def plan_levels(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    block: str,
    horizon: str | int,
    quantiles: Sequence[float] = (),
    capacity: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """The level each plan provisions at each replayed step.

    Args:
        frame: one model's backtest frame (``series_id, ts, cutoff, value`` and the ``p..``
            columns of ``quantiles``), or :func:`window_rows` for the references only.
        panel: the panel the frame was replayed on (the history before each cutoff).
        block: the provisioning block, a duration dividing the horizon (``1d``, ``1h``).
        horizon: the window length (``yesterday`` is one horizon back).
        quantiles: forecast quantiles to plan from (their ``p..`` columns must be in the frame).
        capacity: series id -> installed GPUs; plans are capped there.

    Returns:
        ``series_id, ts, cutoff, value`` and one column per plan (references and ``p..``).

    Raises:
        ConfigError: for a block that does not divide the horizon into whole steps.
        DataContractError: for a missing quantile column.
    """
    panel = validate_panel(panel)
    freq = _step(panel)
    freq_s = int(freq.total_seconds())
    h = horizon_steps(horizon, freq_s)
    b = horizon_steps(block, freq_s)
    if h % b:
        raise ConfigError(f"block {block!r} ({b} steps) does not divide the horizon "
                          f"{horizon!r} ({h} steps); use e.g. 1h or 1d")
    out = frame[[SERIES_ID, TS, CUTOFF, VALUE]].copy().reset_index(drop=True)
    position = ((out[TS] - out[CUTOFF]).to_numpy().astype(np.int64) // freq.value) - 1
    out["_block"] = position // b
    keys = [SERIES_ID, CUTOFF, "_block"]
    lookup = panel.set_index([SERIES_ID, TS])[VALUE]
    back = pd.MultiIndex.from_arrays([out[SERIES_ID], out[TS] - h * freq])
    out["_previous"] = lookup.reindex(back).to_numpy()
    first = out.groupby(SERIES_ID)[CUTOFF].min()
    before = panel[panel[TS] <= panel[SERIES_ID].map(first)]
    static = before.groupby(SERIES_ID)[VALUE].max()
    out[STATIC] = out[SERIES_ID].map(static).to_numpy()
    out[YESTERDAY] = out.groupby([SERIES_ID, CUTOFF])["_previous"].transform("max")
    out[SAME_BLOCK] = out.groupby(keys)["_previous"].transform("max")
    out[ORACLE] = out.groupby(keys)[VALUE].transform("max")
    plans = list(REFERENCES)
    for q in quantiles:
        col = quantile_column(q)
        if col not in frame.columns:
            raise DataContractError(f"the backtest frame has no {col} column; backtest with "
                                    f"quantiles including {q}")
        out[col] = frame[col].to_numpy(dtype=np.float64)
        out[col] = out.groupby(keys)[col].transform("max")
        plans.append(col)
    if capacity is not None:
        cap = out[SERIES_ID].map(capacity).to_numpy(dtype=np.float64)
        for col in plans:
            out[col] = np.where(np.isnan(cap), out[col], np.minimum(out[col], cap))
    return out.drop(columns=["_block", "_previous"])


def score_plans(levels: pd.DataFrame, plans: Sequence[str], *, freq_s: int) -> pd.DataFrame:
    """Idle and unmet GPU-hours of each plan, per series.

    Args:
        levels: :func:`plan_levels`' output.
        plans: the plan columns to score (``static peak`` must be among the levels).
        freq_s: the step in seconds.

    Returns:
        ``series_id, plan, windows, idle_gpu_hours, unmet_gpu_hours, demand_gpu_hours,
        static_idle_gpu_hours``.
    """
    step_h = freq_s / 3600.0
    y = levels[VALUE].to_numpy(dtype=np.float64)
    static_idle = np.maximum(levels[STATIC].to_numpy() - y, 0.0) * step_h
    frames = []
    for plan in plans:
        level = levels[plan].to_numpy(dtype=np.float64)
        part = pd.DataFrame({
            SERIES_ID: levels[SERIES_ID], CUTOFF: levels[CUTOFF],
            "idle_gpu_hours": np.maximum(level - y, 0.0) * step_h,
            "unmet_gpu_hours": np.maximum(y - level, 0.0) * step_h,
            "demand_gpu_hours": y * step_h, "static_idle_gpu_hours": static_idle})
        grouped = part.groupby(SERIES_ID, sort=True)
        summed = grouped[["idle_gpu_hours", "unmet_gpu_hours", "demand_gpu_hours",
                          "static_idle_gpu_hours"]].sum()
        summed.insert(0, "windows", grouped[CUTOFF].nunique())
        summed.insert(0, "plan", plan)
        frames.append(summed.reset_index())
    return pd.concat(frames, ignore_index=True)


def planning_table(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    horizon: str | int = "1d",
    quantiles: Sequence[float] = (0.9, 0.95, 0.99),
    blocks: Sequence[str] = ("1d", "1h"),
    capacity: Mapping[str, float] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Score the references and each model's quantile plans on a backtest frame.

    Args:
        frame: a backtest frame (``series_id, ts, cutoff, model, mean, p.., value``) of one
            or more models with windows of one ``horizon``, or :func:`window_rows` (no
            ``model`` column: the references only).
        panel: the panel it was replayed on.
        horizon: the window length.
        quantiles: provisioning quantiles (columns of the frame).
        blocks: provisioning blocks (each divides the horizon).
        capacity: series id -> installed GPUs (plans are capped there).

    Returns:
        ``(table, by_series)``: totals per plan and block (:data:`COLUMNS`), and the same per
        series.

    Raises:
        DataContractError: for an empty frame or a missing quantile column.
        ConfigError: for a bad block.
    """
    if frame.empty:
        raise DataContractError("the backtest frame is empty; nothing to plan")
    freq_s = panel_freq(validate_panel(panel), purpose="be planned together")
    models = list(pd.unique(frame[MODEL])) if MODEL in frame.columns else []
    base = frame if not models else frame[frame[MODEL] == models[0]]
    parts = []
    for block in blocks:
        refs = plan_levels(base, panel, block=block, horizon=horizon, capacity=capacity)
        plans = [p for p in REFERENCES if not (p == SAME_BLOCK and _same(block, horizon))]
        scored = score_plans(refs, plans, freq_s=freq_s)
        scored["model"], scored["quantile"] = "", np.nan
        scored["block"] = block
        parts.append(scored)
        for model in models:
            mframe = frame[frame[MODEL] == model].reset_index(drop=True)
            levels = plan_levels(mframe, panel, block=block, horizon=horizon,
                                 quantiles=quantiles, capacity=capacity)
            scored = score_plans(levels, [quantile_column(q) for q in quantiles],
                                 freq_s=freq_s)
            scored["quantile"] = scored["plan"].map(
                {quantile_column(q): float(q) for q in quantiles})
            scored["plan"] = f"{model} " + scored["plan"]
            scored["model"] = str(model)
            scored["block"] = block
            parts.append(scored)
    by_series = pd.concat(parts, ignore_index=True)
    by_series["saved_share"] = _saved(by_series)
    by_series["unmet_share"] = _share(by_series["unmet_gpu_hours"], by_series["demand_gpu_hours"])
    by_series["series"] = 1
    by_series = by_series[[SERIES_ID, *COLUMNS, "static_idle_gpu_hours"]].sort_values(
        ["block", SERIES_ID], kind="stable").reset_index(drop=True)
    return aggregate_plans(by_series), by_series


def aggregate_plans(by_series: pd.DataFrame, keys: Sequence[str] = ("plan", "model", "quantile",
                                                                      "block")) -> pd.DataFrame:
    """Totals over series of a per-series planning table (``planning_table``'s second part).

    Args:
        by_series: rows of :data:`COLUMNS` plus ``series_id`` and ``static_idle_gpu_hours``.
        keys: what to total by (the plan columns; add e.g. ``metric`` when present).

    Returns:
        One row per key, in first-seen order, with :data:`COLUMNS` (and any extra key).
    """
    keys = list(keys)
    grouped = by_series.groupby(keys, sort=False, dropna=False)
    total = grouped[["series", "idle_gpu_hours", "unmet_gpu_hours", "demand_gpu_hours",
                     "static_idle_gpu_hours"]].sum()
    total["windows"] = grouped["windows"].max()
    total = total.reset_index()
    total["saved_share"] = _saved(total)
    total["unmet_share"] = _share(total["unmet_gpu_hours"], total["demand_gpu_hours"])
    extra = [k for k in keys if k not in COLUMNS]
    return total[[*extra, *COLUMNS]].reset_index(drop=True)


def planning_backtest(
    forecasters: Mapping[str, BaseForecaster] | Sequence[BaseForecaster] | None,
    panel: pd.DataFrame,
    *,
    days: int = 7,
    horizon: str = "1d",
    quantiles: Sequence[float] = (0.9, 0.95, 0.99),
    blocks: Sequence[str] = ("1d", "1h"),
    capacity: Mapping[str, float] | None = None,
    frame: pd.DataFrame | None = None,
) -> PlanningResult:
    """Replay the last ``days`` windows: backtest the forecasters day-ahead and score the plans.

    Args:
        forecasters: models to backtest (``None`` or empty: the references only).
        panel: the panel (e.g. each VC's ``gpus_in_use``).
        days: windows replayed (one ``horizon`` each, the last ending at the last point).
        horizon: the planning window (``1d``: day-ahead).
        quantiles: provisioning quantiles.
        blocks: provisioning blocks.
        capacity: series id -> installed GPUs (plans are capped there).
        frame: a backtest frame already computed on this panel with these windows (its models
            are scored instead of backtesting ``forecasters``).

    Returns:
        The :class:`PlanningResult`.

    Raises:
        DataContractError / ConfigError: as :func:`prism.evaluation.backtest.backtest` and
            :func:`planning_table`.
    """
    levels = sorted({*(float(q) for q in quantiles), 0.5})
    if frame is None and forecasters:
        frame = backtest(forecasters, panel, horizon=horizon, windows=days, quantiles=levels,
                         on_short="skip")
    if frame is None:
        frame = window_rows(panel, horizon=horizon, windows=days)
    table, by_series = planning_table(frame, panel, horizon=horizon, quantiles=quantiles,
                                      blocks=blocks, capacity=capacity)
    return PlanningResult(table, by_series, frame)


# -- helpers ------------------------------------------------------------------------------------
def _step(panel: pd.DataFrame) -> pd.Timedelta:
    return pd.Timedelta(seconds=panel_freq(panel, purpose="be planned together"))


def _same(block: str, horizon: str | int) -> bool:
    try:
        return bool(parse_duration(str(block)) == parse_duration(str(horizon)))
    except ConfigError:
        return str(block) == str(horizon)


def _share(num: pd.Series, den: pd.Series) -> pd.Series:
    return (num / den.where(den > 0)).astype(np.float64)


def _saved(frame: pd.DataFrame) -> pd.Series:
    return 1.0 - _share(frame["idle_gpu_hours"], frame["static_idle_gpu_hours"])
