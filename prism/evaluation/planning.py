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
``day-kind peak``           yesterday's peak or, for a series with a week, the larger of it
                            and the peak of the latest complete day of the planned day's
                            kind, weekday or weekend (:mod:`prism.day_kind`): Monday is sized
                            for the Friday before
``oracle``                  the block's actual peak: perfect knowledge, the limit of the block
``yesterday's peak +<h>%``  yesterday's peak with a ``h`` % margin (``headroom``): the simple
                            rule's own saved-vs-unmet trade-off
``<model> p<q>``            the peak over the block of the model's day-ahead ``q``-quantile
                            forecast, at least the day-kind peak (``floor``, as ``prism
                            capacity`` sizes; ``floor=False``: the forecast alone)
==========================  ==================================================================

With ``capacity`` given, every plan is capped at the series' installed GPUs (a VC cannot be
provisioned beyond what it has, and demand served cannot exceed it).

Definitions, per step of ``step_h`` hours, with ``y`` the actual and ``L`` the level in force:

- idle GPU-hours ``sum max(L - y, 0) * step_h``;
- unmet demand ``sum max(y - L, 0) * step_h``, and its share of the demand
  ``sum y * step_h``;
- GPU-hours saved: ``1 - idle / idle of the static peak plan`` over the same steps.

A plan family (a model over its quantiles, yesterday's peak over its margins) traces a
frontier of ``(unmet share, saved share)`` points (:func:`planning_frontier`). A plan beats
a reference only when it leaves no more demand unmet (within :data:`UNMET_TOLERANCE`) and
keeps fewer GPUs idle (:func:`beats_reference`, the one test the planning backtest, the
report's warnings and the track record of served plans share); a family beats it when one of
its points does (:func:`versus_reference`). :func:`choose_quantiles` picks, per series, the
cheapest quantile whose unmet share meets a target.

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

from prism.day_kind import FLOOR, day_kind_floor
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
DAY_KIND = "day-kind peak"
REFERENCES = (STATIC, YESTERDAY, SAME_BLOCK, DAY_KIND, ORACLE)
#: The unmet share of demand a chosen provisioning quantile may leave (0.3 %).
MAX_UNMET = 0.003
#: The unmet share of demand below which two plans leave "as much" unmet: 0.01 % of the
#: GPU-hours in use, the smallest difference the tables show (unmet shares are printed with
#: two decimals of a percent), well under the 0.3 % a plan is chosen for (:data:`MAX_UNMET`).
UNMET_TOLERANCE = 1e-4
#: Idle GPU-hours below which two plans idle as much (stored levels keep 3 decimals).
_IDLE_EPS = 1e-6
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
    headroom: Sequence[float] = (),
    floor: bool = True,
    day_kind: pd.DataFrame | None = None,
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
        headroom: margins over yesterday's peak (``0.1``: 10 % more), one plan each
            (:func:`headroom_plan`).
        floor: size each quantile plan at least at the day-kind peak, as ``prism capacity``
            does (:mod:`prism.day_kind`); ``False``: the forecast's quantile alone.
        day_kind: the day-kind floor of the frame's steps already computed on this panel
            (:func:`prism.day_kind.day_kind_floor`); ``None``: computed here.

    Returns:
        ``series_id, ts, cutoff, value`` and one column per plan (references, margins and
        ``p..``).

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
    steps = [SERIES_ID, CUTOFF, TS]
    if day_kind is None:
        day_kind = day_kind_floor(panel, out[steps], freq_s=freq_s)
    out[DAY_KIND] = day_kind.set_index(steps)[FLOOR].reindex(
        pd.MultiIndex.from_frame(out[steps])).to_numpy()
    plans = list(REFERENCES)
    for margin in headroom:
        out[headroom_plan(margin)] = out[YESTERDAY] * (1.0 + float(margin))
        plans.append(headroom_plan(margin))
    for q in quantiles:
        col = quantile_column(q)
        if col not in frame.columns:
            raise DataContractError(f"the backtest frame has no {col} column; backtest with "
                                    f"quantiles including {q}")
        out[col] = frame[col].to_numpy(dtype=np.float64)
        out[col] = out.groupby(keys)[col].transform("max")
        if floor:
            out[col] = np.fmax(out[col].to_numpy(), out[DAY_KIND].to_numpy())
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
    headroom: Sequence[float] = (),
    floor: bool = True,
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
        headroom: margins over yesterday's peak scored as references (:func:`plan_levels`).
        floor: quantile plans at least at the day-kind peak (:func:`plan_levels`).

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
    # the floor depends on the steps and the history only: once for every model and block
    day_kind = day_kind_floor(panel, frame[[SERIES_ID, CUTOFF, TS]].drop_duplicates(),
                              freq_s=freq_s)
    parts = []
    for block in blocks:
        refs = plan_levels(base, panel, block=block, horizon=horizon, capacity=capacity,
                           headroom=headroom, day_kind=day_kind)
        plans = [p for p in REFERENCES if not (p == SAME_BLOCK and _same(block, horizon))]
        plans += [headroom_plan(m) for m in headroom]
        scored = score_plans(refs, plans, freq_s=freq_s)
        scored["model"], scored["quantile"] = "", np.nan
        scored["block"] = block
        parts.append(scored)
        for model in models:
            mframe = frame[frame[MODEL] == model].reset_index(drop=True)
            levels = plan_levels(mframe, panel, block=block, horizon=horizon,
                                 quantiles=quantiles, capacity=capacity, floor=floor,
                                 day_kind=day_kind)
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
    headroom: Sequence[float] = (),
    floor: bool = True,
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
        headroom: margins over yesterday's peak scored as references.
        floor: quantile plans at least at the day-kind peak (:func:`plan_levels`).

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
                                      blocks=blocks, capacity=capacity, headroom=headroom,
                                      floor=floor)
    return PlanningResult(table, by_series, frame)


def headroom_plan(margin: float) -> str:
    """The name of the plan "yesterday's peak with ``margin`` more" (``0.1``: ``+10%``)."""
    return f"{YESTERDAY} +{round(float(margin) * 100, 6):g}%"


#: The columns of a frontier (after any extra key of the table, such as ``metric``).
FRONTIER_COLUMNS = ("block", "family", "setting", "plan", "unmet_share", "saved_share",
                    "idle_gpu_hours", "unmet_gpu_hours")


def planning_frontier(table: pd.DataFrame) -> pd.DataFrame:
    """The saved-vs-unmet points of each plan family, per block.

    Args:
        table: a planning table (:data:`COLUMNS`, totals or per series, extra keys kept).

    Returns:
        :data:`FRONTIER_COLUMNS`, one row per plan: ``family`` is the model (``setting``: the
        quantile), yesterday's peak (``setting``: its margin, 0 for the plain rule) or another
        reference (``setting`` NaN); sorted by key, block, family and unmet share.
    """
    extra = [c for c in table.columns if c not in (*COLUMNS, "static_idle_gpu_hours")]
    out = table.copy()
    margins = out["plan"].map(_margin)
    is_model = out["model"].fillna("").astype(str) != ""
    out["family"] = np.where(is_model, out["model"].astype(str),
                             np.where(margins.notna(), YESTERDAY, out["plan"]))
    out["setting"] = np.where(is_model, out["quantile"], margins).astype(np.float64)
    out = out[[*extra, *FRONTIER_COLUMNS]]
    return out.sort_values([*extra, "block", "family", "unmet_share", "setting"],
                           kind="stable").reset_index(drop=True)


def best_within(points: pd.DataFrame, max_unmet: float) -> pd.Series | None:
    """The point saving most among those leaving at most ``max_unmet`` of demand unmet.

    Args:
        points: rows with ``unmet_share`` and ``saved_share`` (e.g. one family of
            :func:`planning_frontier`, or one model's rows of a planning table).
        max_unmet: the largest unmet share allowed.

    Returns:
        The row (ties: the one leaving less unmet), or ``None`` when no point meets it.
    """
    unmet = points["unmet_share"].fillna(0.0)  # no demand: nothing unmet
    within = points[unmet <= max_unmet + 1e-12]
    if within.empty:
        return None
    ranked = within.assign(_u=unmet[within.index]).sort_values(
        ["saved_share", "_u"], ascending=[False, True], kind="stable")
    return ranked.drop(columns="_u").iloc[0]


def choose_quantiles(by_series: pd.DataFrame, *, model: str, block: str = "1d",
                     max_unmet: float = MAX_UNMET) -> pd.DataFrame:
    """The provisioning quantile of each scope: the cheapest whose unmet share meets a target.

    Among ``model``'s quantiles backtested on a series, the one leaving the fewest idle
    GPU-hours with an unmet share of at most ``max_unmet``. When none meets it, the highest
    quantile (the safest there is), with ``meets_target`` false and a logged warning.

    Args:
        by_series: a per-series planning table (:func:`planning_table`'s second part); without
            ``series_id`` its rows count as one scope.
        model: the model whose quantiles are chosen from.
        block: the provisioning block (``1d``, ``1h``).
        max_unmet: the unmet share of demand allowed (0.003: 0.3 %).

    Returns:
        ``[series_id,] model, block, quantile, unmet_share, saved_share, idle_gpu_hours,
        meets_target``, one row per series.

    Raises:
        DataContractError: when the table has no quantile rows of ``model`` at ``block``.
    """
    rows = by_series[(by_series["model"] == model) & (by_series["block"] == block)
                     & by_series["quantile"].notna()]
    if rows.empty:
        known = sorted(str(m) for m in by_series["model"].dropna().unique() if m)
        raise DataContractError(f"the planning table has no quantile plans of {model!r} at "
                                f"block {block!r} (models: {', '.join(known) or 'none'}); "
                                f"backtest {model} with --planning first")
    keys = [SERIES_ID] if SERIES_ID in rows.columns else []
    groups = rows.groupby(keys, sort=True) if keys else [((), rows)]
    chosen, missed = [], []
    for key, group in groups:
        unmet = group["unmet_share"].fillna(0.0)
        within = group[unmet <= max_unmet + 1e-12]
        if within.empty:
            pick = group.sort_values("quantile", kind="stable").iloc[-1]
            missed.append(f"{key[0] if keys else 'the table'} ({pick['unmet_share']:.2%} "
                          f"unmet at p{pick['quantile'] * 100:g})")
        else:
            pick = within.sort_values(["idle_gpu_hours", "quantile"], kind="stable").iloc[0]
        chosen.append({**({SERIES_ID: key[0]} if keys else {}), "model": model,
                       "block": block, "quantile": float(pick["quantile"]),
                       "unmet_share": float(pick["unmet_share"]),
                       "saved_share": float(pick["saved_share"]),
                       "idle_gpu_hours": float(pick["idle_gpu_hours"]),
                       "meets_target": not within.empty})
    if missed:
        logger.warning("no quantile of %s keeps the unmet share at most %.2f %% (block %s) "
                       "for %s; the highest quantile is used there", model, max_unmet * 100,
                       block, ", ".join(missed))
    return pd.DataFrame(chosen)


def beats_reference(unmet_share: float, idle_gpu_hours: float, reference_unmet_share: float,
                    reference_idle_gpu_hours: float) -> bool:
    """Whether a plan beats a reference plan on the same windows: it leaves no more demand
    unmet (its unmet share at most the reference's plus :data:`UNMET_TOLERANCE`) and keeps
    fewer GPUs idle. A plan that leaves more unmet never beats it, however few GPUs it idles
    (a plan of 0 GPUs idles none); nor does one that buys a lower unmet share with more idle
    GPUs. A missing share (no demand) counts as nothing unmet.

    Args:
        unmet_share / idle_gpu_hours: the plan's unmet share of demand and idle GPU-hours.
        reference_unmet_share / reference_idle_gpu_hours: the reference's, on the same windows.

    Returns:
        Whether the plan beats the reference.
    """
    return (lost_to_reference(unmet_share, idle_gpu_hours, reference_unmet_share,
                              reference_idle_gpu_hours) is None)


def lost_to_reference(unmet_share: float, idle_gpu_hours: float, reference_unmet_share: float,
                      reference_idle_gpu_hours: float) -> str | None:
    """How a plan loses to a reference (:func:`beats_reference`): ``"unmet"`` where it leaves
    more demand unmet, ``"idle"`` where it leaves no more unmet but keeps at least as many
    GPUs idle, ``None`` where it beats the reference."""
    unmet = float(np.nan_to_num(unmet_share))
    reference = float(np.nan_to_num(reference_unmet_share))
    if unmet > reference + UNMET_TOLERANCE:
        return "unmet"
    if not float(idle_gpu_hours) < float(reference_idle_gpu_hours) - _IDLE_EPS:
        return "idle"
    return None


def versus_reference(table: pd.DataFrame, model: str, *,
                     reference: str = YESTERDAY) -> pd.DataFrame:
    """Whether ``model``'s plans beat a reference plan, per block (and extra key).

    The model beats the reference when one of its quantiles does (:func:`beats_reference`:
    no more demand unmet, within :data:`UNMET_TOLERANCE`, and fewer idle GPU-hours); the
    point compared is the one saving most among those leaving no more unmet.

    Args:
        table: a planning table of totals (:data:`COLUMNS`, extra keys such as ``metric``).
        model: the model.
        reference: the reference plan (default: yesterday's peak).

    Returns:
        ``[extra keys,] block, reference_saved, reference_unmet, quantile, saved_share,
        unmet_share, beats``: the model's point saving most with no more unmet than the
        reference (``quantile`` NaN when every quantile leaves more unmet); empty when the
        table has no rows of the model or of the reference.
    """
    extra = [c for c in table.columns if c not in (*COLUMNS, "static_idle_gpu_hours")]
    keys = [*extra, "block"]
    rows = []
    for key, group in table.groupby(keys, sort=False, dropna=False):
        ref = group[group["plan"] == reference]
        mine = group[(group["model"] == model) & group["quantile"].notna()]
        if ref.empty or mine.empty:
            continue
        ref_saved = float(ref["saved_share"].iloc[0])
        ref_unmet = float(np.nan_to_num(ref["unmet_share"].iloc[0]))
        best = best_within(mine, ref_unmet + UNMET_TOLERANCE)
        saved = np.nan if best is None else float(best["saved_share"])
        unmet = np.nan if best is None else float(np.nan_to_num(best["unmet_share"]))
        beats = best is not None and beats_reference(
            unmet, float(best["idle_gpu_hours"]), ref_unmet,
            float(ref["idle_gpu_hours"].iloc[0]))
        rows.append({**dict(zip(keys, key, strict=True)), "reference_saved": ref_saved,
                     "reference_unmet": ref_unmet,
                     "quantile": np.nan if best is None else float(best["quantile"]),
                     "saved_share": saved, "unmet_share": unmet, "beats": bool(beats)})
    return pd.DataFrame(rows, columns=[*keys, "reference_saved", "reference_unmet", "quantile",
                                       "saved_share", "unmet_share", "beats"])


# -- helpers ------------------------------------------------------------------------------------
def _margin(plan: object) -> float:
    """The margin of a :func:`headroom_plan` name (0 for yesterday's peak), else NaN."""
    text = str(plan)
    if text == YESTERDAY:
        return 0.0
    prefix = f"{YESTERDAY} +"
    if not (text.startswith(prefix) and text.endswith("%")):
        return float("nan")
    try:
        return float(text[len(prefix):-1]) / 100.0
    except ValueError:
        return float("nan")
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
