"""The capacity report: per cluster the plan, histories, decompositions and planning scores.

``prism report`` (an HTML file, and a PDF) and ``GET /v1/reports/capacity`` (the page) call
:func:`capacity_report` with their forecast source; gathering is here, rendering in
:mod:`prism.reports.capacity`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from prism.errors import ConfigError, PrismError
from prism.progress import Progress
from prism.schema import SERIES_ID, split_series_id
from prism.usecases.capacity import (
    ALLOCATED,
    DEMAND_METRICS,
    capacities_at,
    plan_cluster_capacity,
    planned_series,
)
from prism.usecases.files import output_path
from prism.usecases.pool import plan_cluster_pool
from prism.usecases.series import dictionary_series

if TYPE_CHECKING:
    from prism.capacity import CapacityPlan, Watts
    from prism.reports.capacity import ReportData, ScopeSection
    from prism.store import Store
    from prism.track_record import TrackRecord
    from prism.usecases.forecast import ForecastSource

#: Models the report's planning backtest runs itself (cheap); others come from
#: ``prism backtest --planning``.
_REPORT_PLANNING_MODELS = ("naive", "seasonal_naive")
#: The least history the charts show before the forecast origin.
_HISTORY = pd.Timedelta(days=7)
#: Stages of the report per cluster (the ``progress`` callback names them).
_STAGES = ("plan", "history and breakdown", "planning backtest")



@dataclass(frozen=True)
class CapacityReport:
    """The capacity report and where it went.

    Attributes:
        html: the self-contained HTML page.
        clusters: the clusters in it.
        path: the HTML file, when it was written to one.
        pdf: the PDF file, when one was printed.
    """

    html: str
    clusters: tuple[str, ...]
    path: Path | None = None
    pdf: Path | None = None


def capacity_report(
    store: Store,
    source: ForecastSource,
    *,
    clusters: Sequence[str] | None = None,
    horizon: str = "1d",
    quantile: float = 0.95,
    capacity_table: pd.DataFrame | None = None,
    watts: Watts | None = None,
    output: str | Path | None = None,
    pdf: bool = False,
    max_unmet: float | None = None,
    progress: Progress | None = None,
    record: bool = False,
    day_floor: bool = True,
    pool: bool = False,
) -> CapacityReport:
    """The capacity report (one self-contained HTML page), written to ``output`` if named.

    Args:
        store: the store.
        source: the forecasts (a model fitted now, or the hub's models).
        clusters: clusters to report (default: every cluster with a demand series).
        horizon / quantile / capacity_table / watts: as
            :func:`prism.usecases.capacity.plan_cluster_capacity`.
        output: an ``.html`` file to write the page to (checked before any work is done).
        pdf: also print ``output`` with a ``.pdf`` suffix (needs Chromium).
        max_unmet: choose each scope's quantile from the planning backtest, the cheapest
            whose unmet share is within this (as :func:`plan_cluster_capacity`).
        progress: called once after each stage as ``progress(stage, done, total)``: the stage
            just finished (``"<cluster>: plan"``, ``"<cluster>: history and breakdown"``,
            ``"<cluster>: planning backtest"`` per cluster, then ``"render"`` and, with
            ``pdf``, ``"pdf"``), how many stages are done (1 to ``total``) and their total,
            fixed once the clusters are known.
        record: keep each cluster's plan in the store for its track record (served by
            ``report``; :func:`prism.usecases.capacity.record_plan`).
        day_floor: size at least for what the latest day of its kind used (as
            :func:`prism.usecases.capacity.plan_cluster_capacity`).
        pool: also each cluster's shared-pool alternative
            (:func:`prism.usecases.pool.plan_cluster_pool`; a cluster it does not fit, one
            VC or too short a history, says why instead).

    Raises:
        ConfigError: for a bad output name or folder, or no Chromium with ``pdf``.
        SeriesNotFound / IngestError / ModelNotReady: as
            :func:`prism.usecases.capacity.plan_cluster_capacity`.
    """
    from prism.reports.capacity import render_html, write_pdf

    path = output_path(output, (".html", ".htm"), ignore_case=True) if output else None
    if clusters is None:
        every = store.list_series()
        clusters = sorted(every.loc[every["metric"].isin(DEMAND_METRICS), "cluster"].unique())
    tick = _Ticker(progress, len(_STAGES) * len(clusters) + 1 + int(pdf and path is not None))
    data = _report_data(store, clusters, source, horizon=horizon, quantile=quantile,
                        capacity_table=capacity_table, watts=watts, max_unmet=max_unmet,
                        tick=tick, record=record, day_floor=day_floor, pool=pool)
    html = render_html(data)
    tick("render")
    printed = None
    if path is not None:
        path.write_text(html, encoding="utf-8")
        if pdf:
            printed = write_pdf(html, path.with_suffix(".pdf"))
            tick("pdf")
    return CapacityReport(html, tuple(c.cluster for c in data.clusters), path, printed)


class _Ticker:
    """Counts the finished stages for a ``progress`` callback (or nothing without one)."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self._progress = progress
        self._total = total
        self._done = 0

    def __call__(self, stage: str) -> None:
        self._done += 1
        if self._progress is not None:
            self._progress(stage, self._done, self._total)


class _Recorded:
    """A forecast source that keeps what it answered (the report charts the queue forecasts
    the plan used, without forecasting again)."""

    def __init__(self, source: ForecastSource) -> None:
        self._source = source
        self.frames: list[pd.DataFrame] = []

    @property
    def label(self) -> str:
        return self._source.label

    def forecast(self, store: Store, series_ids: list[str], horizon: str,
                 levels: list[float]) -> tuple[pd.DataFrame, int]:
        frame, freq_s = self._source.forecast(store, series_ids, horizon, levels)
        self.frames.append(frame)
        return frame, freq_s


def _report_data(
    store: Store,
    clusters: Sequence[str],
    source: ForecastSource,
    *,
    horizon: str,
    quantile: float,
    capacity_table: pd.DataFrame | None = None,
    watts: Watts | None = None,
    max_unmet: float | None = None,
    tick: _Ticker | None = None,
    record: bool = False,
    day_floor: bool = True,
    pool: bool = False,
) -> ReportData:
    """Gather the report: per cluster the plan, histories, decompositions, planning and the
    track record of the plans served before."""
    from datetime import UTC, datetime

    from prism.reports.capacity import ClusterSection, ReportData
    from prism.reports.tables import partition

    tick = tick or _Ticker(None, 0)
    sections = []
    for cluster in clusters:
        recorded = _Recorded(source)
        plan = plan_cluster_capacity(store, cluster, recorded, horizon=horizon,
                                     quantile=quantile, capacity_table=capacity_table,
                                     watts=watts, max_unmet=max_unmet,
                                     record="report" if record else None,
                                     day_floor=day_floor)
        tick(f"{cluster}: plan")
        forecasts = (pd.concat(recorded.frames, ignore_index=True) if recorded.frames
                     else plan.forecast)
        scopes = _scope_sections(store, plan, forecasts)
        tick(f"{cluster}: history and breakdown")
        planning, by_series, note = _report_planning(store, plan)
        record_of = cluster_track_record(store, cluster, partition(
            (r.scope for r in plan.rows), {r.scope: r.capacity for r in plan.rows}).scopes)
        tick(f"{cluster}: planning backtest")
        pooled, pool_note = None, ""
        if pool:
            try:
                pooled = plan_cluster_pool(store, plan, max_unmet=max_unmet,
                                           record="report" if record else None,
                                           model=recorded.label)
            except ConfigError as exc:
                pool_note = f"No shared pool: {exc}"
        sections.append(ClusterSection(cluster=cluster, plan=plan, scopes=scopes,
                                       planning=planning, planning_by_series=by_series,
                                       planning_note=note, track_record=record_of,
                                       pool=pooled, pool_note=pool_note))
    accuracy, accuracy_note = None, ""
    saved = store.latest_evaluation("accuracy")
    if saved is not None:
        run_id, created, params, accuracy = saved
        accuracy_note = f"{run_id}, saved {created:%Y-%m-%d %H:%M} UTC: {_describe(params)}"
    return ReportData(horizon=horizon, quantile=float(quantile), model=source.label,
                      generated_at=datetime.now(UTC).replace(tzinfo=None),
                      clusters=sections, accuracy=accuracy, accuracy_note=accuracy_note)


def _scope_sections(store: Store, plan: CapacityPlan,
                    forecasts: pd.DataFrame) -> list[ScopeSection]:
    """History (at least 7 days, or all there is), queue and decomposition of each scope.

    Each scope's history runs to its own series' end (its forecast origin): a series that
    stopped before the cluster's others shows where it stopped, and the others are not cut
    to it.
    """
    from prism.errors import DataContractError
    from prism.primitives.decompose import decompose
    from prism.reports.capacity import ScopeSection

    origins = plan.forecast.groupby(SERIES_ID)["ts"].min()
    steps = int(plan.forecast.groupby(SERIES_ID).size().max())
    span = max(pd.Timedelta(seconds=3 * steps * plan.freq_s), _HISTORY)
    ids = [r.series_id for r in plan.rows]
    queue = planned_series(store, plan.cluster).queue
    queue_ids = sorted({s for pair in queue.values() for s in pair if s} - set(ids))
    history = store.load_panel(ids + queue_ids, start=pd.Timestamp(origins.min()) - span,
                               end=pd.Timestamp(origins.max()))
    decompositions: dict[str, Any] = {}
    notes: dict[str, str] = {}
    by_metric: dict[str, list[str]] = {}
    for sid in ids:
        by_metric.setdefault(split_series_id(sid)[2], []).append(sid)
    for metric, wanted in by_metric.items():
        chosen = dictionary_series(store, plan.cluster, metric, wanted)
        try:
            result = decompose(store.load_panel(chosen), series_ids=wanted)
            decompositions.update(result.series)
        except DataContractError as exc:
            for sid in wanted:
                notes[sid] = f"no primitive breakdown: {exc}"
    out = []
    for row in plan.rows:
        origin = pd.Timestamp(origins.get(row.series_id, row.start))
        before = history[(history["ts"] >= origin - span) & (history["ts"] < origin)]
        mine = before[before[SERIES_ID] == row.series_id][["ts", "value"]]
        queued, queued_fc, how = _queue_of(queue.get(row.scope), before, forecasts)
        out.append(ScopeSection(scope=row.scope, series_id=row.series_id,
                                history=mine.reset_index(drop=True),
                                decomposition=decompositions.get(row.series_id),
                                note=notes.get(row.series_id, ""), queue_history=queued,
                                queue_forecast=queued_fc, queue_source=how))
    return out


def _queue_of(pair: tuple[str, str | None] | None, history: pd.DataFrame,
              forecasts: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """A scope's queued GPUs: ``ts, value`` history, ``ts, mean`` forecast and what they
    are (``gpus_pending``, or ``gpu_demand - gpus_in_use``), as the plan's queue allowance
    reads them; ``None`` without a queue series."""
    if pair is None:
        return None, None, ""
    first, minus = pair

    def series(frame: pd.DataFrame, sid: str, column: str) -> pd.Series:
        mine = frame[frame[SERIES_ID] == sid]
        return pd.Series(mine[column].to_numpy(dtype=float), index=pd.DatetimeIndex(mine["ts"]))

    seen = series(history, first, "value")
    ahead = series(forecasts, first, "mean")
    how = split_series_id(first)[2]
    if minus is not None:
        seen = (seen - series(history, minus, "value")).dropna()
        ahead = (ahead - series(forecasts, minus, "mean")).dropna()
        how = f"{how} - {split_series_id(minus)[2]}"
    return (pd.DataFrame({"ts": seen.index, "value": seen.to_numpy()}),
            pd.DataFrame({"ts": ahead.index, "mean": ahead.clip(lower=0).to_numpy()}), how)


def _report_planning(store: Store, plan: CapacityPlan
                     ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """The planning backtest the report shows for a cluster, over one partition of its scopes
    (the VCs, else ``all``: each GPU counted once): the references and the cheap baselines
    run now on the partition's planned series, plus the last saved ``prism backtest
    --planning`` rows of those series."""
    from prism.evaluation.planning import aggregate_plans, planning_backtest
    from prism.forecasters import get_forecaster
    from prism.reports.tables import partition

    part = partition((r.scope for r in plan.rows), {r.scope: r.capacity for r in plan.rows})
    ids = [r.series_id for r in plan.rows if r.scope in part.scopes]
    panel = store.load_panel(ids)
    day = 86_400
    days_there = int(panel.groupby(SERIES_ID).size().min() * plan.freq_s // day)
    days = min(7, days_there - 2)  # two days before the replay: the static peak, yesterday
    capacity = {r.series_id: r.capacity for r in plan.rows
                if r.capacity is not None and r.series_id.endswith(ALLOCATED)}
    parts, notes = [], []
    if days >= 1 and day % plan.freq_s == 0:
        blocks = [b for b in ("1d", "1h") if 3600 % plan.freq_s == 0 or b == "1d"]
        forecasters = {m: get_forecaster(m) for m in _REPORT_PLANNING_MODELS}
        try:
            result = planning_backtest(forecasters, panel, days=days, horizon="1d",
                                       quantiles=(0.9, 0.95, 0.99), blocks=blocks,
                                       capacity=capacity)
            parts.append(result.by_series)
            notes.append(f"The last {days} day(s) replayed now on the planned series of "
                         f"{part.describe()} with {', '.join(_REPORT_PLANNING_MODELS)} "
                         "(day-ahead, one level per block; GPUs in use capped at capacity).")
        except PrismError as exc:
            notes.append(f"no planning backtest of the planned series: {exc}")
    else:
        notes.append("the series are too short (or not at a step dividing a day) for a "
                     "day-ahead planning backtest")
    saved = store.latest_evaluation("planning")
    if saved is not None:
        run_id, created, params, table = saved
        mine = (table[table[SERIES_ID].map(lambda s: _in_partition(str(s), plan.cluster,
                                                                    part.scopes))]
                if SERIES_ID in table.columns else table.iloc[:0])
        if not mine.empty:
            parts.append(mine)
            notes.append(f"Plus {run_id} (prism backtest --planning, saved "
                         f"{created:%Y-%m-%d %H:%M} UTC: {_describe(params)}), its rows of "
                         "the same scopes.")
    if not parts:
        return None, None, " ".join(notes)
    by_series = pd.concat(parts, ignore_index=True)
    by_series["metric"] = by_series[SERIES_ID].map(lambda s: split_series_id(str(s))[2])
    by_series = by_series.drop_duplicates([SERIES_ID, "plan", "block"], keep="last")
    table = aggregate_plans(by_series, keys=("metric", "plan", "model", "quantile", "block"))
    return table, by_series, " ".join(notes)


def track_record(store: Store, cluster: str) -> TrackRecord:
    """The track record of a cluster's served plans, summed over the partition of the scopes
    of its GPUs-in-use series (its VCs, else ``all``): what ``prism track-record`` and
    ``GET /v1/capacity/track-record`` show, and the report's section.

    Raises:
        SeriesNotFound: for a cluster without GPUs-in-use series, naming the clusters there
            are.
    """
    from prism.errors import SeriesNotFound
    from prism.reports.tables import partition

    scopes = store.list_series(cluster=cluster, metric="gpus_in_use")["scope"]
    if scopes.empty:
        there = sorted(set(store.list_series(metric="gpus_in_use")["cluster"]))
        raise SeriesNotFound(f"no gpus_in_use series for cluster {cluster!r}; the store has "
                             f"them for {', '.join(map(repr, there)) or 'no cluster'}")
    names = [str(s) for s in scopes]
    return cluster_track_record(store, cluster, partition(
        names, capacities_at(store, cluster, names, None)[0]).scopes)


def cluster_track_record(store: Store, cluster: str, scopes: Sequence[str]) -> TrackRecord:
    """The track record of a cluster's served plans (:mod:`prism.track_record`): the stored
    plans whose window has passed and is in the store, scored against the GPUs in use and
    yesterday's peak, summed over ``scopes`` (one partition of the cluster's scopes).

    Args:
        store: the store (the plans, the series).
        cluster: the cluster.
        scopes: the scopes the totals add up (the VCs, else ``all``: see ``_in_partition``).

    Returns:
        The :class:`~prism.track_record.TrackRecord` (empty frames when nothing is recorded).
    """
    from prism.schema import freq_seconds
    from prism.track_record import TrackRecord, pooled_rows, score_plans, summarise

    known = store.list_series(cluster=cluster).set_index(SERIES_ID)
    plans = store.capacity_plans(cluster)
    # a shared pool's rows stay together (its pool row has no series; a pool whose VC has
    # gone from the store is not scored, rather than scored without that VC)
    plans = plans[(plans["scope"].isin(list(scopes)) & plans[SERIES_ID].isin(known.index))
                  | pooled_rows(plans)]
    ids = sorted(set(plans[SERIES_ID].dropna().astype(str)) & set(known.index))
    if not ids:
        plans = plans.iloc[:0]
        empty = score_plans(plans, pd.DataFrame(columns=[SERIES_ID, "ts", "value"]), freq_s=1)
        return TrackRecord(cluster, plans, empty, summarise(empty, scopes), tuple(scopes), None)
    freq_s = freq_seconds(str(known.loc[ids[0], "freq"]))
    start = pd.Timestamp(plans["valid_from"].min()) - pd.Timedelta(days=1)
    panel = store.load_panel(ids, start=start, end=pd.Timestamp(plans["valid_to"].max()))
    scored = score_plans(plans, panel, freq_s=freq_s)
    # a window not over yet: it ends after the last stored step of its series
    stored_to = pd.to_datetime(plans[SERIES_ID].map(known["last_ts"])) + pd.Timedelta(
        seconds=freq_s)
    waiting = pd.to_datetime(plans["valid_to"])[pd.to_datetime(plans["valid_to"]) > stored_to]
    return TrackRecord(cluster, plans.reset_index(drop=True), scored,
                       summarise(scored, scopes), tuple(scopes),
                       waiting.min().to_pydatetime() if len(waiting) else None)


def _in_partition(series_id: str, cluster: str, scopes: Sequence[str]) -> bool:
    """Whether a series is of ``cluster`` and one of ``scopes``."""
    parts = series_id.split("/")
    return len(parts) == 3 and parts[0] == cluster and parts[1] in scopes


def _describe(params: str) -> str:
    """Saved evaluation parameters (JSON) as ``key value, ...``."""
    import json

    try:
        values = json.loads(params)
    except ValueError:
        return params
    if not isinstance(values, dict):
        return str(values)
    variants = values.pop("variants", None)
    text = ", ".join(f"{k} {v}" for k, v in values.items())
    if isinstance(variants, dict):  # prism backtest --models LABEL=ALIAS --param LABEL.X=Y
        for label, spec in variants.items():
            spec = dict(spec) if isinstance(spec, dict) else {}
            alias = spec.pop("model", label)
            given = ", ".join(f"{k}={v}" for k, v in spec.items())
            text += f"; {label} is {alias}" + (f" with {given}" if given else "")
    return text
