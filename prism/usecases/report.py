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

from prism.errors import PrismError
from prism.schema import SERIES_ID, split_series_id
from prism.usecases.capacity import ALLOCATED, DEMAND_METRICS, plan_cluster_capacity
from prism.usecases.files import output_path
from prism.usecases.series import dictionary_series

if TYPE_CHECKING:
    from prism.capacity import CapacityPlan, Watts
    from prism.reports.capacity import ReportData, ScopeSection
    from prism.store import Store
    from prism.usecases.forecast import ForecastSource

#: Models the report's planning backtest runs itself (cheap); others come from
#: ``prism backtest --planning``.
_REPORT_PLANNING_MODELS = ("naive", "seasonal_naive")


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

    Raises:
        ConfigError: for a bad output name or folder, or no Chromium with ``pdf``.
        SeriesNotFound / IngestError / ModelNotReady: as
            :func:`prism.usecases.capacity.plan_cluster_capacity`.
    """
    from prism.reports.capacity import render_html, write_pdf

    path = output_path(output, (".html", ".htm"), ignore_case=True) if output else None
    data = _report_data(store, clusters, source, horizon=horizon, quantile=quantile,
                        capacity_table=capacity_table, watts=watts)
    html = render_html(data)
    printed = None
    if path is not None:
        path.write_text(html, encoding="utf-8")
        printed = write_pdf(html, path.with_suffix(".pdf")) if pdf else None
    return CapacityReport(html, tuple(c.cluster for c in data.clusters), path, printed)


def _report_data(
    store: Store,
    clusters: Sequence[str] | None,
    source: ForecastSource,
    *,
    horizon: str,
    quantile: float,
    capacity_table: pd.DataFrame | None = None,
    watts: Watts | None = None,
) -> ReportData:
    """Gather the report: per cluster the plan, histories, decompositions, planning."""
    from datetime import UTC, datetime

    from prism.reports.capacity import ClusterSection, ReportData

    if clusters is None:
        every = store.list_series()
        clusters = sorted(every.loc[every["metric"].isin(DEMAND_METRICS), "cluster"].unique())
    sections = []
    for cluster in clusters:
        plan = plan_cluster_capacity(store, cluster, source, horizon=horizon, quantile=quantile,
                                     capacity_table=capacity_table, watts=watts)
        scopes = _scope_sections(store, plan)
        planning, by_series, note = _report_planning(store, plan)
        sections.append(ClusterSection(cluster=cluster, plan=plan, scopes=scopes,
                                       planning=planning, planning_by_series=by_series,
                                       planning_note=note))
    accuracy, accuracy_note = None, ""
    saved = store.latest_evaluation("accuracy")
    if saved is not None:
        run_id, created, params, accuracy = saved
        accuracy_note = f"{run_id}, saved {created:%Y-%m-%d %H:%M} UTC: {_describe(params)}"
    return ReportData(horizon=horizon, quantile=float(quantile), model=source.label,
                      generated_at=datetime.now(UTC).replace(tzinfo=None),
                      clusters=sections, accuracy=accuracy, accuracy_note=accuracy_note)


def _scope_sections(store: Store, plan: CapacityPlan) -> list[ScopeSection]:
    """History and decomposition of each planned scope (one dictionary per metric)."""
    from prism.errors import DataContractError
    from prism.primitives.decompose import decompose
    from prism.reports.capacity import ScopeSection

    start = pd.Timestamp(plan.forecast["ts"].min())
    span = max(3 * (plan.forecast.groupby(SERIES_ID).size().max() * plan.freq_s), 86_400 * 3)
    ids = [r.series_id for r in plan.rows]
    history = store.load_panel(ids, start=start - pd.Timedelta(seconds=span), end=start)
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
        mine = history[history[SERIES_ID] == row.series_id][["ts", "value"]]
        out.append(ScopeSection(scope=row.scope, series_id=row.series_id,
                                history=mine.reset_index(drop=True),
                                decomposition=decompositions.get(row.series_id),
                                note=notes.get(row.series_id, "")))
    return out


def _report_planning(store: Store, plan: CapacityPlan
                     ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """The planning backtest the report shows for a cluster: the references and the cheap
    baselines run now on the planned series, plus the last saved ``prism backtest
    --planning`` rows of the cluster's series."""
    from prism.evaluation.planning import aggregate_plans, planning_backtest
    from prism.forecasters import get_forecaster

    ids = [r.series_id for r in plan.rows]
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
            notes.append(f"The last {days} day(s) replayed now on the planned series with "
                         f"{', '.join(_REPORT_PLANNING_MODELS)} (day-ahead, one level per "
                         "block; GPUs in use capped at capacity).")
        except PrismError as exc:
            notes.append(f"no planning backtest of the planned series: {exc}")
    else:
        notes.append("the series are too short (or not at a step dividing a day) for a "
                     "day-ahead planning backtest")
    saved = store.latest_evaluation("planning")
    if saved is not None:
        run_id, created, params, table = saved
        mine = table[table[SERIES_ID].map(
            lambda s: str(s).split("/")[0] == plan.cluster)] if SERIES_ID in table else table
        if not mine.empty:
            parts.append(mine)
            notes.append(f"Plus {run_id} (prism backtest --planning, saved "
                         f"{created:%Y-%m-%d %H:%M} UTC: {_describe(params)}).")
    if not parts:
        return None, None, " ".join(notes)
    by_series = pd.concat(parts, ignore_index=True)
    by_series["metric"] = by_series[SERIES_ID].map(lambda s: split_series_id(str(s))[2])
    by_series = by_series.drop_duplicates([SERIES_ID, "plan", "block"], keep="last")
    table = aggregate_plans(by_series, keys=("metric", "plan", "model", "quantile", "block"))
    return table, by_series, " ".join(notes)


def _describe(params: str) -> str:
    """Saved evaluation parameters (JSON) as ``key value, ...``."""
    import json

    try:
        values = json.loads(params)
    except ValueError:
        return params
    if not isinstance(values, dict):
        return str(values)
    return ", ".join(f"{k} {v}" for k, v in values.items())
