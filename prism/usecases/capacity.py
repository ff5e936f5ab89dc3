"""The capacity plan of a cluster: forecast its series, load capacities, plan.

``prism capacity`` and ``GET /v1/capacity`` call :func:`plan_cluster_capacity` with their
forecast source: :class:`SavedModels` (the CLI: the newest saved model of each series, refit
only when asked or when there is none) or :class:`~prism.usecases.forecast.HubModels` (the
API: the same registry models, served by the hub). Loading capacities, reservations and history
is here, the planning itself in :mod:`prism.capacity`, and the report
(:mod:`prism.usecases.report`) plans each cluster with the same function.

With a target unmet share (``--max-unmet``, ``max_unmet=``), :func:`choose_cluster_quantiles`
picks each scope's quantile from the planning backtest first. :func:`plan_cluster_procurement`
is the plan for buying beside the day-ahead one (``--procurement 30d``): each scope's daily
peaks projected from their trend (:mod:`prism.procurement`). A served plan is kept in the
store (:func:`record_plan`) so that the report can score it once its window has passed.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd

from prism.errors import ConfigError, IngestError, SeriesNotFound
from prism.progress import Progress
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX, SERIES_ID, TS, freq_seconds, split_series_id
from prism.usecases.saved_models import SavedModels as SavedModels  # the CLI's source

if TYPE_CHECKING:
    from prism.capacity import CapacityPlan, Reservation, Watts
    from prism.forecasters import BaseForecaster
    from prism.procurement import ProcurementPlan
    from prism.store import Store
    from prism.usecases.forecast import ForecastSource

logger = logging.getLogger(__name__)

#: A plan's row (day-ahead or procurement): a dataclass with a ``reason``.
_Row = TypeVar("_Row", bound=Any)

#: Series a capacity plan sizes each scope on, preferred first (``gpu_demand`` only for a
#: scope without GPUs in use).
DEMAND_METRICS = ("gpus_in_use", "gpu_demand")
#: The history behind the release guard, the cap of the queue allowance and the share of the
#: queue in jobs that fit their scope.
_RECENT = pd.Timedelta(days=7)
#: Plans are capped at capacity only for GPUs in use (allocations cannot exceed what is
#: installed; demand with a queue can).
ALLOCATED = "/gpus_in_use"
#: Quantiles the planning backtest replays when a plan chooses its quantile per scope.
CANDIDATE_QUANTILES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.975, 0.99)


@dataclass(frozen=True)
class PlannedSeries:
    """The series a cluster's plan forecasts.

    Attributes:
        sizing: scope -> its GPUs in use series (else its demand series).
        queue: scope -> ``(pending, None)`` with its queued GPUs series, or ``(demand, in
            use)``: queued GPUs as demand minus in use; absent: no queue series.
    """

    sizing: dict[str, str]
    queue: dict[str, tuple[str, str | None]]

    def all_ids(self) -> list[str]:
        """Every series to forecast."""
        ids = set(self.sizing.values())
        for first, second in self.queue.values():
            ids.update(s for s in (first, second) if s)
        return sorted(ids)


def demand_series(store: Store, cluster: str, *, scope: str | None = None) -> dict[str, str]:
    """Scope -> the series a capacity plan sizes it on (``gpus_in_use``, else ``gpu_demand``).

    Raises:
        SeriesNotFound: for a cluster (or scope) without such series, naming the ones there are.
    """
    frame = store.list_series(cluster=cluster)
    if frame.empty:
        known = sorted(store.list_series()["cluster"].unique())
        raise SeriesNotFound(f"no series for cluster {cluster!r}; the store has "
                             f"{', '.join(map(str, known)) or 'no cluster'} "
                             "(`GET /v1/series` or `prism series list` lists them)")
    out: dict[str, str] = {}
    for metric in reversed(DEMAND_METRICS):  # the preferred metric overwrites
        for row in frame[frame["metric"] == metric].itertuples():
            if scope is None or row.scope == scope:
                out[str(row.scope)] = str(row.series_id)
    if not out:
        where = f"cluster {cluster!r}" + (f" scope {scope!r}" if scope else "")
        scopes = sorted(frame.loc[frame["metric"].isin(DEMAND_METRICS), "scope"].unique())
        hint = (f"; its scopes are {', '.join(map(str, scopes))}" if scopes else
                "; `GET /v1/series` lists the series there are")
        raise SeriesNotFound(f"no gpus_in_use or gpu_demand series for {where}{hint}")
    return dict(sorted(out.items()))


def planned_series(store: Store, cluster: str) -> PlannedSeries:
    """The series of a cluster's plan: per scope what it is sized on and its queue.

    Raises:
        SeriesNotFound: as :func:`demand_series`.
    """
    sizing = demand_series(store, cluster)
    frame = store.list_series(cluster=cluster)
    ids = {(str(r.scope), str(r.metric)): str(r.series_id) for r in frame.itertuples()}
    queue: dict[str, tuple[str, str | None]] = {}
    for scope, sid in sizing.items():
        if not sid.endswith(ALLOCATED):
            continue  # sized on demand: the queue is in it already
        if (scope, "gpus_pending") in ids:
            queue[scope] = (ids[scope, "gpus_pending"], None)
        elif (scope, "gpu_demand") in ids:
            queue[scope] = (ids[scope, "gpu_demand"], sid)
    return PlannedSeries(sizing, queue)


def capacities_at(store: Store, cluster: str, scopes: Sequence[str], at: pd.Timestamp | None,
                  table: pd.DataFrame | None = None
                  ) -> tuple[dict[str, float], dict[str, str]]:
    """Scope -> GPUs installed at ``at`` (``None``: now) and where that came from: a
    ``--capacity`` table (:func:`prism.capacity.read_capacity_table`), else the store's
    ``capacity`` rows (capacity-csv, node-list), else the ``gpu_capacity`` samples; a cluster
    whose series have one GPU type gives that type's scope the cluster's capacity (source
    ``cluster``)."""
    gpus: dict[str, float] = {}
    source: dict[str, str] = {}
    sampled = set(store.list_series(cluster=cluster, metric="gpu_capacity")[SERIES_ID])
    for scope in scopes:
        value = store.capacity_at(cluster, scope, at)
        if value is not None:
            gpus[scope], source[scope] = value, "store"
            continue
        sid = f"{cluster}/{scope}/gpu_capacity"
        if sid in sampled:
            values = store.load_panel([sid], end=at)
            if values.empty:
                values = store.load_panel([sid])
            if not values.empty:
                gpus[scope], source[scope] = float(values["value"].iloc[-1]), "samples"
    if table is not None:
        mine = table[table["cluster"].isna() | (table["cluster"] == cluster)]
        for name, value in zip(mine["scope"].astype(str), mine["gpus"].astype(float),
                               strict=True):
            if name in scopes:
                gpus[name], source[name] = float(value), "file"
        other = sorted(set(mine["scope"]) - set(scopes))
        if other:
            logger.warning("capacity table: scope(s) %s have no demand series in %s",
                           ", ".join(map(str, other)), cluster)
    every = store.list_series(cluster=cluster)["scope"].astype(str)
    types = sorted({s for s in every if s.startswith(GPU_TYPE_PREFIX)})
    if len(types) == 1 and types[0] in scopes and types[0] not in gpus and ALL_SCOPE in gpus:
        gpus[types[0]], source[types[0]] = gpus[ALL_SCOPE], "cluster"
    return gpus, source


def _check_reservations(store: Store, cluster: str,
                        reservations: Sequence[Reservation]) -> None:
    """Every reservation of the cluster names one of its scopes (or ``all``).

    Raises:
        IngestError: for one read from a file, naming the file, the line and the scope.
        ConfigError: for another (the API's ``reservation=`` values).
    """
    scopes = set(store.list_series(cluster=cluster)["scope"]) | {"all"}
    for r in reservations:
        if r.cluster not in (None, cluster) or r.scope in scopes:
            continue
        known = ", ".join(sorted(map(str, scopes)))
        if r.source is None:
            raise ConfigError(f"reservation of scope {r.scope!r}: cluster {cluster!r} has no "
                              f"such scope; its scopes: {known}")
        raise IngestError(f"cluster {cluster!r} has no scope {r.scope!r}", path=r.source,
                          line=r.line, column="scope", fix=f"use one of: {known}")


def plan_cluster_capacity(
    store: Store,
    cluster: str,
    source: ForecastSource,
    *,
    scope: str | None = None,
    horizon: str = "1d",
    quantile: float = 0.95,
    capacity_table: pd.DataFrame | None = None,
    reservations: Sequence[Reservation] = (),
    growth: float = 1.0,
    watts: Watts | None = None,
    max_unmet: float | None = None,
    choice: QuantileChoices | None = None,
    progress: Progress | None = None,
    record: str | None = None,
    day_floor: bool = True,
) -> CapacityPlan:
    """Plan a cluster's capacity: forecast each scope's GPUs in use and queued GPUs with
    ``source``, load capacities and recent peaks, and plan
    (:func:`prism.capacity.plan_capacity`: in-use quantile plus a queue allowance, moves
    between VCs, the cluster's net).

    Args:
        store: the store (series, capacities, history).
        cluster: the cluster.
        source: the forecasts (saved models, or the hub's models).
        scope: show one scope only (the whole cluster is planned: the moves need every VC).
        horizon: the window (a duration or steps).
        quantile: the planning quantile.
        capacity_table: ``cluster, scope, gpus`` rows that override stored capacities
            (:func:`prism.capacity.read_capacity_table`).
        reservations: known future jobs added on top of the forecast (read from a file with
            :func:`prism.capacity.read_reservations`, or parsed with
            :func:`prism.capacity.parse_reservation`).
        growth: demand growth factor.
        watts: idle and busy draw per GPU.
        max_unmet: plan each scope at the cheapest quantile whose unmet share of demand in
            the planning backtest is at most this (0.003: 0.3 %;
            :func:`choose_cluster_quantiles`); ``quantile`` is then the fallback of a scope
            without a backtest. ``None``: every scope at ``quantile``.
        choice: quantiles already chosen (:func:`choose_cluster_quantiles`), instead of
            choosing them here for ``max_unmet``.
        progress: called as ``progress(stage, done, total)`` per stage (``backtest`` when
            quantiles are chosen, ``forecast``, ``plan``).
        record: who serves the plan (``cli``, ``api``, ``report``): keep the whole cluster's
            plan in the store for its track record (:func:`record_plan`); ``None``: do not.
        day_floor: size each scope at least for what yesterday and, where it has a week, the
            latest day of its kind (weekday or weekend) used (:mod:`prism.day_kind`);
            ``False``: the forecast's quantile alone.

    Returns:
        The :class:`~prism.capacity.CapacityPlan` (with ``max_unmet``, each row's reason says
        how its quantile was chosen).

    Raises:
        SeriesNotFound: for an unknown cluster or scope.
        IngestError: for a reservation from a file whose scope the cluster lacks (file and
            line named).
        ConfigError / ModelNotReady: for a bad model, horizon, quantile, growth or
            reservation, or while the hub fits a model.
    """
    from prism.capacity import DISTRIBUTION_LEVELS, plan_capacity
    from prism.capacity_inputs import coarse_step_warning
    from prism.day_kind import WEEK_DAYS
    from prism.queue_fit import fits_at

    if not 0 < quantile < 1:
        raise ConfigError(f"--quantile {quantile!r} must be between 0 and 1, e.g. 0.95")
    if scope is not None:
        demand_series(store, cluster, scope=scope)  # an unknown scope is named
    series = planned_series(store, cluster)
    _check_reservations(store, cluster, reservations)
    if choice is None and max_unmet is not None:
        choice = choose_cluster_quantiles(store, cluster, source, max_unmet=max_unmet,
                                          horizon=horizon, fallback=quantile,
                                          capacity_table=capacity_table, progress=progress,
                                          day_floor=day_floor)
    chosen = choice.quantiles() if choice is not None else {}
    levels = sorted({*DISTRIBUTION_LEVELS, float(quantile), *chosen.values()})
    if progress is not None:
        progress("forecast", 0, 1)
    frame, freq_s = source.forecast(store, series.all_ids(), horizon, levels)
    if progress is not None:
        progress("forecast", 1, 1)
    sizing = frame[frame[SERIES_ID].isin(set(series.sizing.values()))]
    at = pd.Timestamp(frame["ts"].min())
    gpus, where = capacities_at(store, cluster, list(series.sizing), at, capacity_table)
    # one read of the history: the last 7 days (peaks, queue) and, for the floor, 4 weeks
    back = pd.Timedelta(days=WEEK_DAYS + 1) if day_floor else _RECENT
    history = store.load_panel(series.all_ids(), start=at - back, end=at)
    recent = history[history[TS] >= at - _RECENT]
    peaks = recent.groupby(SERIES_ID)["value"].max()
    recent_peak = {s: float(peaks[sid]) for s, sid in series.sizing.items() if sid in peaks}
    queue, queue_peak = _queue(frame, recent, series)
    fits = fits_at(store, cluster, gpus, at, _RECENT) if len(queue) else {}
    floor = _day_floor(history, sizing, at, freq_s) if day_floor else None
    plan = plan_capacity(sizing, gpus, quantile=float(quantile), freq_s=freq_s, watts=watts,
                         growth=growth, reservations=reservations, recent_peak=recent_peak,
                         capacity_source=where, queue=queue, queue_peak=queue_peak,
                         queue_fit=fits, scope_quantiles=chosen, floor=floor)
    if choice is not None:
        why = {c.scope: c.text for c in choice.rows}
        plan = replace(plan, rows=tuple(
            replace(r, reason=f"{r.reason}; {why[r.scope]}") if r.scope in why else r
            for r in plan.rows))
    plan = replace(plan, rows=_warned(plan.rows, coarse_step_warning(freq_s, cluster)))
    if progress is not None:
        progress("plan", 1, 1)
    if record is not None:
        record_plan(store, plan, model=source.label, served_by=record, growth=growth)
    return plan.only(scope) if scope is not None else plan


def _warned(rows: Sequence[_Row], warning: str | None) -> tuple[_Row, ...]:
    """``rows`` with ``warning`` added to each reason (and logged: the CLI prints it once as
    a ``warning:`` line); unchanged without one. Every row carries it, so that one scope's
    plan (``--scope``, ``scope=``) does too."""
    if warning is None:
        return tuple(rows)
    logger.warning("%s", warning)
    return tuple(replace(r, reason=f"{r.reason}; {warning}") for r in rows)


def _day_floor(history: pd.DataFrame, sizing: pd.DataFrame, at: pd.Timestamp,
               freq_s: int) -> pd.DataFrame:
    """The day-kind floor of each planned step (:func:`prism.day_kind.day_kind_floor`), from
    the history before the window."""
    from prism.day_kind import day_kind_floor

    steps = sizing[[SERIES_ID, TS]].assign(cutoff=at - pd.Timedelta(seconds=freq_s))
    return day_kind_floor(history[history[SERIES_ID].isin(set(steps[SERIES_ID]))], steps,
                          freq_s=freq_s)


def record_plan(store: Store, plan: CapacityPlan, *, model: str, served_by: str,
                growth: float = 1.0) -> int:
    """Keep a served plan's rows in the store (``capacity_plans``) for its track record
    (:mod:`prism.track_record`): per scope, the sized level (GPUs in use at the quantile plus
    the queue allowance) over the window. The same plan recorded again (same scope, window,
    quantile and model) replaces its rows. Recording never fails the plan: a read-only store,
    a what-if (``growth`` other than 1) or a failed write is logged and skipped.

    Args:
        store: the store.
        plan: the whole cluster's plan (not one scope's view).
        model: the forecast source's label (``prism``, ``prism[use_rnn=false]``).
        served_by: ``cli``, ``api`` or ``report``.
        growth: the plan's growth factor.

    Returns:
        The rows recorded (0 when skipped).
    """
    return keep_plan_rows(store, plan.cluster, [{
        "scope": r.scope, "series_id": r.series_id, "valid_from": r.start, "valid_to": r.end,
        "gpus_planned": float(r.gpus_needed), "quantile": float(r.quantile)}
        for r in plan.rows], model=model, served_by=served_by, growth=growth, what="plan")


def keep_plan_rows(store: Store, cluster: str, rows: list[dict[str, object]], *, model: str,
                   served_by: str, growth: float, what: str) -> int:
    """Write served plan rows (``scope, series_id, valid_from, valid_to, gpus_planned,
    quantile``) to ``capacity_plans``, or log why not: a read-only store, a what-if
    (``growth`` other than 1), no rows, a failed write (``what`` names it in the log).

    Returns:
        The rows recorded (0 when skipped).
    """
    from prism.errors import PrismError
    from prism.store import PLAN_COLUMNS

    if store.read_only or growth != 1.0 or not rows:
        logger.info("%s of %s not recorded: %s", what, cluster,
                    "the store is read-only" if store.read_only else
                    "a what-if with growth" if growth != 1.0 else "no rows")
        return 0
    frame = pd.DataFrame([{**r, "cluster": cluster, "made_at": r["valid_from"], "model": model,
                           "served_by": served_by} for r in rows], columns=list(PLAN_COLUMNS))
    try:
        return store.add_capacity_plans(frame)
    except PrismError as exc:
        logger.warning("%s of %s not recorded for its track record: %s", what, cluster, exc)
        return 0


def _queue(frame: pd.DataFrame, recent: pd.DataFrame, series: PlannedSeries
           ) -> tuple[pd.DataFrame, dict[str, float]]:
    """The mean forecast of each scope's queued GPUs (``series_id, mean``) and the queue's
    recent peak: ``gpus_pending``, or ``gpu_demand`` minus ``gpus_in_use`` (means add up)."""
    parts, peak = [], {}
    means = {str(sid): g["mean"].to_numpy(dtype=float)
             for sid, g in frame.sort_values("ts").groupby(SERIES_ID)}
    history = {str(sid): g.set_index("ts")["value"] for sid, g in recent.groupby(SERIES_ID)}
    for scope, (first, minus) in series.queue.items():
        if first not in means or (minus is not None and minus not in means):
            continue
        mean = means[first] - (means[minus] if minus is not None else 0.0)
        parts.append(pd.DataFrame({SERIES_ID: first, "mean": mean}))
        seen = history.get(first)
        if seen is not None and minus is not None:
            seen = (seen - history.get(minus, pd.Series(dtype=float))).dropna()
        if seen is not None and len(seen):
            peak[scope] = max(float(seen.max()), 0.0)
    queue = (pd.concat(parts, ignore_index=True) if parts
             else pd.DataFrame({SERIES_ID: pd.Series(dtype=str), "mean": pd.Series(dtype=float)}))
    return queue, peak


# -- choosing the quantile per scope (--max-unmet) ------------------------------------------
def parse_max_unmet(value: str | float, *, name: str = "--max-unmet") -> float:
    """A target unmet share from ``0.3%`` or ``0.003``.

    Raises:
        ConfigError: naming ``name``, for text that is not a number, a negative share or one
            of 100 % or more.
    """
    text = str(value).strip()
    percent = text.endswith("%")
    try:
        share = float(text[:-1].strip() if percent else text)
    except ValueError:
        raise ConfigError(f"{name} {text!r} is not a number: give the unmet share of demand "
                          "allowed as a fraction (0.003) or a percentage (0.3%)") from None
    share = share / 100 if percent else share
    if not math.isfinite(share) or not 0 <= share < 1:
        raise ConfigError(f"{name} {text!r} must be at least 0 and below 100 %, e.g. 0.3% or "
                          "0.003")
    return share


@dataclass(frozen=True)
class QuantileChoice:
    """The planning quantile chosen for one scope.

    Attributes:
        scope / series_id: the scope and the series it is sized on.
        quantile: the quantile it is planned at.
        unmet_share / saved_share: that quantile's unmet share of demand and share of the
            static peak's idle GPU-hours saved in the planning backtest (``None``: no backtest).
        windows: days replayed.
        meets_target: whether the unmet share is within the target (``None``: no backtest, the
            fallback quantile is used).
        basis: where the backtest came from (a saved run id, or ``replayed now``).
        text: the choice in words (added to the row's reason).
    """

    scope: str
    series_id: str
    quantile: float
    unmet_share: float | None
    saved_share: float | None
    windows: int
    meets_target: bool | None
    basis: str
    text: str


@dataclass(frozen=True)
class QuantileChoices:
    """The quantiles of a cluster's scopes for a target unmet share.

    Attributes:
        max_unmet: the target.
        model: the model whose planning backtest they come from.
        block: the provisioning block of that backtest (``1d`` or ``1h``).
        rows: one :class:`QuantileChoice` per scope.
    """

    max_unmet: float
    model: str
    block: str
    rows: tuple[QuantileChoice, ...]

    def quantiles(self) -> dict[str, float]:
        """Scope -> its quantile."""
        return {c.scope: c.quantile for c in self.rows}

    def records(self) -> list[dict[str, object]]:
        """The choices as plain dicts."""
        return [dict(c.__dict__) for c in self.rows]


def choose_cluster_quantiles(
    store: Store,
    cluster: str,
    source: ForecastSource,
    *,
    max_unmet: float,
    horizon: str = "1d",
    fallback: float = 0.95,
    capacity_table: pd.DataFrame | None = None,
    progress: Progress | None = None,
    day_floor: bool = True,
) -> QuantileChoices:
    """Per scope, the cheapest quantile of ``source``'s model whose unmet share of demand in
    the planning backtest is at most ``max_unmet``
    (:func:`prism.evaluation.planning.choose_quantiles`); where none is, the highest.

    The backtest is the last saved ``prism backtest --planning`` of the model where it covers
    a scope's series and sized its plans as ``day_floor`` asks; the other series are replayed
    now: the model's day-ahead forecasts of
    the last (up to) 7 days at :data:`CANDIDATE_QUANTILES`, GPUs in use capped at capacity.
    The block is ``1d`` for a horizon of a day or more, else ``1h``.

    Args:
        store: the store.
        cluster: the cluster.
        source: the forecast source; its ``label`` names the model (``naive``, ``prism``).
        max_unmet: the target unmet share (0.003: 0.3 %; :func:`parse_max_unmet`).
        horizon: the plan's window (chooses the block).
        fallback: the quantile of a scope without a backtest (too little history).
        capacity_table: capacities overriding the store's (the replay's cap).
        progress: called as ``progress("backtest", done, total)`` while replaying.
        day_floor: whether the plans are sized at least at the day-kind floor (the backtest's
            plans must be sized the same way; :func:`plan_cluster_capacity`).

    Returns:
        The :class:`QuantileChoices`.

    Raises:
        SeriesNotFound: for a cluster without demand series.
        ConfigError: for a bad target or an unknown model.
    """
    from prism.evaluation.planning import choose_quantiles

    max_unmet = parse_max_unmet(max_unmet, name="max_unmet")
    sizing = demand_series(store, cluster)
    ids = set(sizing.values())
    info = store.list_series(cluster=cluster).set_index(SERIES_ID)
    freq_s = freq_seconds(str(info.loc[next(iter(ids)), "freq"]))
    block = "1d" if _window_s(horizon, freq_s) >= 86_400 or 3600 % freq_s else "1h"
    model = source.label
    parts, basis = [], {}
    saved = store.latest_evaluation("planning")
    if (saved is not None and SERIES_ID in saved[3].columns
            and bool(json.loads(saved[2] or "{}").get("day_kind_floor")) == day_floor):
        run_id, table = saved[0], saved[3]
        mine = table[table[SERIES_ID].isin(ids) & (table["model"] == model)
                     & (table["block"] == block) & table["quantile"].notna()]
        parts.append(mine)
        basis.update(dict.fromkeys(mine[SERIES_ID].astype(str), f"saved run {run_id}"))
    missing = sorted(ids - set(basis))
    if missing:
        replayed = _replay(store, cluster, missing, model, block, capacity_table, progress,
                           day_floor)
        if replayed is not None:
            parts.append(replayed)
            basis.update(dict.fromkeys(replayed[SERIES_ID].astype(str), "replayed now"))
    rows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    picked = (choose_quantiles(rows, model=model, block=block, max_unmet=max_unmet)
              .set_index(SERIES_ID) if not rows.empty else pd.DataFrame())
    windows = (rows.groupby(SERIES_ID)["windows"].max() if not rows.empty
               else pd.Series(dtype=float))
    target = f"{max_unmet * 100:.3g} %"
    choices = []
    for scope, sid in sizing.items():
        if sid not in picked.index:
            choices.append(QuantileChoice(
                scope, sid, float(fallback), None, None, 0, None, "none",
                f"p{fallback * 100:g} (the fallback quantile): no planning backtest of "
                f"{model} on {sid} (too little history for a day-ahead replay)"))
            continue
        row = picked.loc[sid].to_dict()
        q, unmet, saved_share = (float(row["quantile"]), float(row["unmet_share"]),
                                 float(row["saved_share"]))
        days = int(windows.get(sid, 0))
        unmet = 0.0 if math.isnan(unmet) else unmet
        where = f"{days} day(s) of {model}'s planning backtest ({basis[sid]}, {block} levels)"
        if bool(row["meets_target"]):
            text = (f"p{q * 100:g} chosen: the cheapest quantile with at most {target} of "
                    f"demand unmet over {where}: {unmet:.2%} unmet, {saved_share:.1%} of the "
                    "static peak's idle GPU-hours saved")
        else:
            text = (f"no quantile keeps the unmet share within {target} over {where}; the "
                    f"highest, p{q * 100:g}, is used ({unmet:.2%} unmet)")
        choices.append(QuantileChoice(scope, sid, q, unmet, saved_share, days,
                                      bool(row["meets_target"]), basis[sid], text))
    return QuantileChoices(max_unmet, model, block, tuple(choices))


def _window_s(horizon: str, freq_s: int) -> float:
    """A horizon (a duration, or steps) in seconds."""
    from prism.schema import parse_duration

    text = str(horizon).strip()
    if text.isdigit():
        return int(text) * freq_s
    return float(parse_duration(text).total_seconds())


def _replay(store: Store, cluster: str, series_ids: list[str], model: str, block: str,
            capacity_table: pd.DataFrame | None, progress: Progress | None,
            day_floor: bool = True) -> pd.DataFrame | None:
    """The per-series planning backtest of ``model`` replayed now on the last (up to) 7 days
    at :data:`CANDIDATE_QUANTILES`; ``None`` when the series are too short."""
    from prism.evaluation.backtest import backtest
    from prism.evaluation.planning import planning_backtest
    from prism.schema import panel_freq

    panel = store.load_panel(series_ids)
    freq_s = panel_freq(panel, purpose="be planned together")
    days = min(7, int(panel.groupby(SERIES_ID).size().min() * freq_s // 86_400) - 2)
    if days < 1 or 86_400 % freq_s:
        logger.info("%s: too short for a day-ahead planning replay", ", ".join(series_ids))
        return None
    levels = sorted({0.5, *CANDIDATE_QUANTILES})
    frame = backtest({model: _forecaster(model)}, panel, horizon="1d", windows=days,
                     quantiles=levels, on_short="skip",
                     progress=(lambda d, t: progress("backtest", d, t)) if progress else None)
    if frame.empty:
        return None
    scopes = {sid: split_series_id(sid)[1] for sid in series_ids}
    gpus, _ = capacities_at(store, cluster, sorted(set(scopes.values())),
                            pd.Timestamp(frame["cutoff"].min()), capacity_table)
    capacity = {sid: gpus[s] for sid, s in scopes.items()
                if s in gpus and sid.endswith(ALLOCATED)}
    result = planning_backtest(None, panel, days=days, horizon="1d",
                               quantiles=CANDIDATE_QUANTILES, blocks=[block],
                               capacity=capacity, frame=frame, floor=day_floor)
    return result.by_series


def _forecaster(label: str) -> BaseForecaster:
    """The forecaster of a model key (``naive``, ``prism[use_rnn=false]``).

    Raises:
        ConfigError: for a key that names no model.
    """
    from prism.forecasters import get_forecaster

    match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(.*)\])?", label)
    if match is None:
        raise ConfigError(f"model {label!r} is not a model key such as prism or "
                          "prism[use_rnn=false]")
    params: dict[str, object] = {}
    for part in re.split(r",(?=[A-Za-z_][A-Za-z0-9_]*=)", match.group(2) or ""):
        if part:
            name, _, value = part.partition("=")
            params[name] = json.loads(value)
    return get_forecaster(match.group(1), **params)


# -- procurement ---------------------------------------------------------------------------
def procurement_days(horizon: str, *, name: str = "--procurement") -> int:
    """Whole days of a procurement horizon (``30d``, ``8w``; at least a day).

    Raises:
        ConfigError: naming ``name``, for text that is not a duration of a day or more.
    """
    from prism.schema import parse_duration

    try:
        seconds = parse_duration(str(horizon)).total_seconds()
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    if seconds < 86_400:
        raise ConfigError(f"{name} {horizon!r} is shorter than a day: a procurement plan looks "
                          "weeks or months ahead, e.g. 30d or 12w")
    return math.ceil(seconds / 86_400 - 1e-9)


def plan_cluster_procurement(
    store: Store,
    cluster: str,
    *,
    scope: str | None = None,
    horizon: str = "30d",
    weeks: int = 4,
    quantile: float = 0.95,
    growth: float = 1.0,
    capacity_table: pd.DataFrame | None = None,
    progress: Progress | None = None,
) -> ProcurementPlan:
    """A cluster's procurement plan: each scope's daily level (peak GPUs in use plus mean
    queued GPUs) projected over ``horizon`` from its Theil-Sen trend over the last ``weeks``
    weeks, against its capacity (:func:`prism.procurement.plan_procurement`).

    Args:
        store: the store.
        cluster: the cluster.
        scope: show one scope only.
        horizon: the days projected (``30d``, ``12w``).
        weeks: the weeks of history the trend is fitted on.
        quantile: the quantile of the days' levels above their trend added as a margin.
        growth: demand growth factor on top of the trend.
        capacity_table: capacities overriding the store's.
        progress: called as ``progress("procure", done, total)``.

    Returns:
        The :class:`~prism.procurement.ProcurementPlan`: one row per scope, ``no trend``
        where its series has under 7 complete days (also none at all), and the day-ahead
        plan's warning in each reason where the series' step is coarser than an hour.

    Raises:
        SeriesNotFound: for an unknown cluster or scope.
        ConfigError: for a bad horizon, weeks, quantile or growth.
    """
    from prism.capacity_inputs import coarse_step_warning
    from prism.procurement import daily_levels, plan_procurement
    from prism.queue_fit import fits_at

    days = procurement_days(horizon)
    if scope is not None:
        demand_series(store, cluster, scope=scope)
    if progress is not None:
        progress("procure", 0, 1)
    series = planned_series(store, cluster)
    info = store.list_series(cluster=cluster).set_index(SERIES_ID)
    sizing_ids = sorted(series.sizing.values())
    freq_s = freq_seconds(str(info.loc[sizing_ids[0], "freq"]))
    end = pd.Timestamp(pd.to_datetime(info.loc[sizing_ids, "last_ts"]).max())
    start = end.floor("D") - pd.Timedelta(weeks=max(int(weeks), 1)) - pd.Timedelta(days=1)
    panel = store.load_panel(series.all_ids(), start=start)
    in_use = panel[panel[SERIES_ID].isin(sizing_ids)]
    queues = []
    wide = panel.pivot(index="ts", columns=SERIES_ID, values="value")
    gpus, where = capacities_at(store, cluster, list(series.sizing), end, capacity_table)
    fits = fits_at(store, cluster, gpus, end, end - start) if series.queue else {}
    for name, (first, minus) in series.queue.items():
        if first not in wide or (minus is not None and minus not in wide):
            continue
        queued = wide[first] - (wide[minus] if minus is not None else 0.0)
        queued = queued * (fits[name].share if name in fits else 1.0)
        queues.append(pd.DataFrame({SERIES_ID: series.sizing[name], "ts": queued.index,
                                    "value": queued.to_numpy()}).dropna())
    queue = pd.concat(queues, ignore_index=True) if queues else None
    daily = daily_levels(in_use, freq_s=freq_s, queue=queue)
    # every sized series gets a row, "no trend" where it has too few complete days (none
    # at all: the horizon starts at the first midnight after its last step)
    plan = plan_procurement(daily, gpus, horizon_days=days, weeks=int(weeks),
                            quantile=float(quantile), growth=float(growth),
                            capacity_source=where, series_ids=sizing_ids,
                            until=end + pd.Timedelta(seconds=freq_s))
    plan = replace(plan, rows=_warned(tuple(
        replace(r, reason=f"{r.reason}; the queue{fits[r.scope].words()}")
        if r.scope in fits and fits[r.scope].share < 1 else r for r in plan.rows),
        coarse_step_warning(freq_s, cluster)))
    if progress is not None:
        progress("procure", 1, 1)
    return plan.only(scope) if scope is not None else plan
