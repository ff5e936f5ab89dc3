"""The capacity report: one self-contained HTML page (inline SVG charts), optionally a PDF.

Per cluster: the capacity table with its recommendations and a total over one partition of
the scopes (the VCs, else ``all``: each GPU counted once), and one planning-backtest table over
the same partition; per scope (VC, tenant, GPU type): GPUs in use against capacity (at least 7
days of history, the forecast fan, the sized level over the window, a "now" marker at the
forecast origin), the queue in its own chart, and the primitive breakdown in GPUs; then the
accuracy table of the last ``prism backtest --summary``. Times are UTC. Nothing is fetched when
the page is viewed: the styles are inline, the charts inline SVG (:mod:`prism.reports.charts`)
and there is no script.

The page only renders what :class:`ReportData` holds; :mod:`prism.usecases.report` gathers it.
Numbers in tables carry their exact value in ``data-value`` (the text shows it rounded;
:mod:`prism.reports.tables`).
"""

from __future__ import annotations

import logging
import math
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prism.capacity import CapacityPlan
from prism.capacity_inputs import coarse_step_warning
from prism.capacity_pool import PoolAdvice
from prism.errors import ConfigError
from prism.evaluation.planning import YESTERDAY, versus_reference
from prism.primitives.decompose import SeriesDecomposition
from prism.reports.charts import (
    Sizing,
    components_chart_svg,
    queue_chart_svg,
    usage_chart_svg,
)
from prism.reports.tables import (
    anchor,
    capacity_table_html,
    cluster_now,
    human,
    missing,
    partition,
    pct,
    planning_table_html,
    stale_scopes,
    table_html,
    track_record_table_html,
)
from prism.track_record import TrackRecord, track_record_warnings

logger = logging.getLogger(__name__)

_ACCURACY_METRICS = ("avg_rel_mae", "avg_rel_mae_lo", "avg_rel_mae_hi", "catastrophes",
                     "mase", "mae", "rmse", "smape", "crps", "coverage_80", "coverage_90",
                     "under_p90", "under_p95", "under_p99", "over_p90", "over_p95")


@dataclass(frozen=True)
class ScopeSection:
    """What the report shows of one scope.

    Attributes:
        scope / series_id: the scope and the series it is sized on (GPUs in use, else demand).
        history: ``ts, value`` of the recent past (at least 7 days where stored).
        decomposition: the series' decomposition, or ``None`` (with ``note``).
        note: why something is missing.
        queue_history: ``ts, value`` of its queued GPUs over the same past, or ``None``: no
            queue series.
        queue_forecast: ``ts, mean`` of its queued GPUs forecast (what the queue allowance
            averages).
        queue_source: how the queue is measured (``gpus_pending``, or ``gpu_demand -
            gpus_in_use``).
    """

    scope: str
    series_id: str
    history: pd.DataFrame
    decomposition: SeriesDecomposition | None = None
    note: str = ""
    queue_history: pd.DataFrame | None = None
    queue_forecast: pd.DataFrame | None = None
    queue_source: str = ""


@dataclass(frozen=True)
class ClusterSection:
    """What the report shows of one cluster.

    Attributes:
        cluster: the cluster.
        plan: its capacity plan (rows, per-step needs, the forecast used).
        scopes: one section per scope of the plan.
        planning: the planning backtest totals over one partition of the scopes (the VCs,
            else ``all``; ``prism.evaluation.planning`` columns), or ``None``.
        planning_by_series: the same per series.
        planning_note: how the planning backtest was run, or why there is none.
        track_record: the plans served before, against what happened, or ``None``.
        pool: the shared-pool alternative, when asked, or ``None``.
        pool_note: why a pool asked for is not there.
    """

    cluster: str
    plan: CapacityPlan
    scopes: Sequence[ScopeSection]
    planning: pd.DataFrame | None = None
    planning_by_series: pd.DataFrame | None = None
    planning_note: str = ""
    track_record: TrackRecord | None = None
    pool: PoolAdvice | None = None
    pool_note: str = ""


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows.

    Attributes:
        horizon / quantile / model: the plan's settings.
        generated_at: when the data was gathered (UTC).
        clusters: one section per cluster.
        accuracy: the last saved backtest summary (one row per model), or ``None``.
        accuracy_note: when and how it was run.
        title: the page title.
    """

    horizon: str
    quantile: float
    model: str
    generated_at: datetime
    clusters: Sequence[ClusterSection]
    accuracy: pd.DataFrame | None = None
    accuracy_note: str = ""
    title: str = "PRISM capacity report"
    notes: Sequence[str] = field(default_factory=tuple)


# -- rendering ---------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px auto;
max-width:1180px;color:#1c2430;line-height:1.4;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px}h2{border-bottom:2px solid #2f6db5;padding-bottom:4px;
margin-top:40px}h3{margin-top:28px;color:#2f6db5}h4{margin:14px 0 4px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:0.86em}
th,td{border:1px solid #cdd5df;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#eef3f9;white-space:normal;vertical-align:bottom}td.text,th.text{text-align:left}
td[data-field=recommendation]{white-space:normal;min-width:220px}
tr.add td,tr.borrow\\+add td{background:#fdecea}tr.borrow td{background:#fff6e0}
tr.lend td,tr.release td,tr.lend\\+release td{background:#eaf6ec}
.meta{color:#5b6778;font-size:0.9em}.note{color:#8a5a00;font-size:0.9em}
.warning{background:#fdecea;border-left:4px solid #c0392b;padding:6px 10px;color:#7b1e14}
.grid{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
svg.chart{display:block;max-width:900px;border:1px solid #e3e8ef;margin:6px 0}
caption{caption-side:top;text-align:left;color:#5b6778;padding:2px 0 4px}
tfoot tr.total td{font-weight:600;border-top:2px solid #2f6db5;background:#f6f8fb}
tr.stale td{color:#8a94a3;font-style:italic}
nav a{margin-right:12px}
@media print{h2{page-break-before:always}section.scope{page-break-inside:avoid}}
"""


def render_html(data: ReportData) -> str:
    """The report as one self-contained HTML page."""
    parts = [
        "<!doctype html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<link rel='icon' href='data:,'>",  # or the browser asks the server for /favicon.ico
        f"<title>{escape(data.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(data.title)}</h1>",
        f"<p class='meta'>Generated {data.generated_at:%Y-%m-%d %H:%M} UTC. Next "
        f"<b>{escape(data.horizon)}</b> planned at the <b>p{pct(data.quantile)}</b> quantile "
        f"of the <b>{escape(data.model)}</b> forecast. <span class='timezone'>All times are "
        "UTC</span>; GPU counts are GPUs, energy kWh.</p>",
    ]
    for note in data.notes:
        parts.append(f"<p class='note'>{escape(note)}</p>")
    for warning in coverage_warnings(data.accuracy, model=data.model):
        parts.append(f"<p class='warning' data-kind='coverage'>{escape(warning)}</p>")
    if data.clusters:
        parts.append("<nav>" + "".join(
            f"<a href='#cluster-{anchor(c.cluster)}'>{escape(c.cluster)}</a>"
            for c in data.clusters) + "<a href='#accuracy'>accuracy</a></nav>")
    else:
        parts.append("<p class='note'>No cluster has a demand series (gpu_demand or "
                     "gpus_in_use) to plan.</p>")
    for section in data.clusters:
        parts.append(_cluster_html(section, data))
    parts.append(_accuracy_html(data))
    parts.append(_definitions_html(data))
    parts.append("</body></html>")
    return "\n".join(parts)


def _cluster_html(section: ClusterSection, data: ReportData) -> str:
    plan = section.plan
    rows = plan.rows
    capacity = {r.scope: r.capacity for r in rows}
    start = cluster_now(rows)  # the window of the scopes with current data
    end = next((r.end for r in rows if r.start == start), None)
    stale = stale_scopes(rows)
    out = [f"<section class='cluster' id='cluster-{anchor(section.cluster)}'>",
           f"<h2>Cluster {escape(section.cluster)}</h2>"]
    if start is not None and end is not None:
        out.append(f"<p class='meta'>Window {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} "
                   f"(UTC); energy at {plan.watts.idle:g} W idle and {plan.watts.busy:g} W busy "
                   "per GPU.</p>")
    out.append("<h3>Capacity and recommendations</h3>")
    coarse = coarse_step_warning(plan.freq_s, section.cluster)
    if coarse is not None:  # each row's reason says it too, as the CLI and the API do
        out.append(f"<p class='warning' data-kind='coarse-step'>{escape(coarse)}.</p>")
    for name, why in stale.items():
        out.append(f"<p class='warning' data-kind='stale' data-scope='{escape(name)}'>"
                   f"{escape(name)} has no current data: {escape(why)}. Its row plans a "
                   "past window and is left out of the totals; ingest its recent data if it "
                   "still runs (a scrape or export that stopped?).</p>")
    out.append(capacity_table_html(rows, cluster=section.cluster))
    if plan.moves:
        out.append("<h4>Moves between VCs (before anything is added)</h4><ul class='moves'>"
                   + "".join(f"<li data-from='{escape(m.from_scope)}' "
                             f"data-to='{escape(m.to_scope)}' data-gpus='{m.gpus}'>"
                             f"{escape(m.text)}</li>" for m in plan.moves) + "</ul>")
    if rows:
        out.append("<h4>Why</h4><ul class='advice'>" + "".join(
            f"<li data-scope='{escape(r.scope)}'><b>{escape(r.scope)}</b>: "
            + ("(no current data: a past window) " if r.scope in stale else "")
            + f"{escape(r.recommendation)}. {escape(r.reason)}.</li>" for r in rows) + "</ul>")
    if section.pool is not None:
        out.append(_pool_html(section.pool))
    elif section.pool_note:
        out.append(f"<p class='meta' data-kind='pool'>{escape(section.pool_note)}</p>")
    out.append("<h3>Planning backtest</h3>")
    if section.planning_note:
        out.append(f"<p class='meta'>{escape(section.planning_note)}</p>")
    for warning in planning_warnings(section.planning, model=data.model,
                                     quantile=data.quantile):
        out.append(f"<p class='warning' data-kind='planning'>{escape(warning)}</p>")
    if section.planning is not None and not section.planning.empty:
        scopes = [r.scope for r in rows]
        out.append(planning_table_html(section.planning, partition(scopes, capacity), scopes))
    if section.track_record is not None:
        out.append(_track_record_html(section.track_record, [r.scope for r in rows],
                                      capacity))
    for scope in section.scopes:
        out.append(_scope_html(scope, section, data))
    out.append("</section>")
    return "\n".join(out)


def _pool_html(pool: PoolAdvice) -> str:
    """The shared-pool alternative: each VC's quota, the pool, the totals and why."""
    record = pool.records()
    cells = "".join(
        f"<tr data-scope='{escape(vc['scope'])}'><td>{escape(vc['scope'])}</td>"
        f"<td class='num' data-field='needed' data-value='{vc['needed']:.4f}'>"
        f"{vc['needed']:.1f}</td><td class='num' data-field='quota' "
        f"data-value='{vc['quota']}'>{vc['quota']}</td></tr>" for vc in record["vcs"])
    totals = (f"<tr data-scope='pool'><td>shared pool</td><td></td><td class='num' "
              f"data-field='quota' data-value='{pool.pool_gpus}'>{pool.pool_gpus}</td></tr>"
              f"<tr data-scope='total'><td>in all</td><td class='num' data-field='needed' "
              f"data-value='{pool.per_vc_gpus}'>{pool.per_vc_gpus}</td><td class='num' "
              f"data-field='quota' data-value='{pool.pooled_gpus}'>{pool.pooled_gpus}</td></tr>")
    costly = (f"<p class='warning' data-kind='pool'>The pool does not pay off here: it needs "
              f"{pool.extra_gpus} GPUs more than sizing each VC apart ({pool.pooled_gpus} "
              f"against {pool.per_vc_gpus}).</p>" if pool.extra_gpus > 0 else "")
    return ("<h4>Shared pool (an alternative to sizing each VC apart)</h4>" + costly +
            "<table class='pool'><thead><tr><th>VC</th><th>GPUs needed, sized apart</th>"
            "<th>GPUs it keeps (quota)</th></tr></thead><tbody>" + cells + totals
            + f"</tbody></table><p class='meta' data-kind='pool'>{escape(pool.text)}.</p>")


def _track_record_html(record: TrackRecord, scopes: Sequence[str],
                       capacity: Mapping[str, float | None]) -> str:
    """The track record of the served plans: the note, the warnings and one table over the
    partition of the scopes (a total per model)."""
    out = [f"<h3 id='track-record-{anchor(record.cluster)}'>Track record of served plans</h3>",
           f"<p class='meta' data-kind='track-record'>{escape(record.note())}</p>"]
    for warning in track_record_warnings(record.summary):
        out.append(f"<p class='warning' data-kind='track-record'>{escape(warning)}</p>")
    if not record.summary.empty:
        part = partition(scopes, capacity)
        out.append(track_record_table_html(record.summary, part, scopes))
    return "\n".join(out)


def planning_warnings(planning: pd.DataFrame | None, *, model: str,
                      quantile: float) -> list[str]:
    """Plain-words warnings where ``model``'s plans do not beat yesterday's peak on the
    planning backtest (none without a backtest of the model).

    The model beats yesterday's peak when one of its backtested quantiles left no more demand
    unmet and fewer idle GPU-hours (:func:`prism.evaluation.planning.beats_reference`, the
    test of the track record too; :func:`prism.evaluation.planning.versus_reference`).

    Args:
        planning: the planning totals (``prism.evaluation.planning`` columns, maybe
            ``metric``), or ``None``.
        model: the report's model (``prism``, or a hub key such as ``prism[use_rnn=false]``).
        quantile: the report's planning quantile (its point is quoted when backtested).

    Returns:
        One sentence per metric and block where the model does not beat it.
    """
    if planning is None or planning.empty or "model" not in planning.columns:
        return []
    name = _model_in(planning["model"], model)
    if name is None:
        return []
    out = []
    for r in versus_reference(planning, name, reference=YESTERDAY).to_dict("records"):
        if r["beats"]:
            continue
        where = ", ".join(str(v) for v in (r.get("metric"), _block_words(r["block"])) if v)
        text = (f"{name}'s plan does not beat yesterday's peak on this backtest ({where}): "
                f"provisioning each VC at yesterday's peak saved {_pct1(r['reference_saved'])} "
                f"of the static peak's idle GPU-hours with {_pct2(r['reference_unmet'])} of "
                "demand unmet, ")
        if math.isnan(r["quantile"]):
            text += (f"while every {name} quantile backtested left more demand unmet than "
                     "that.")
        else:
            text += (f"while the best {name} quantile leaving no more unmet, "
                     f"p{pct(r['quantile'])}, saved only {_pct1(r['saved_share'])} "
                     f"({_pct2(r['unmet_share'])} unmet).")
        mine = planning[(planning["model"] == name) & (planning["block"] == r["block"])
                        & np.isclose(planning["quantile"].astype(float), quantile)]
        if "metric" in planning.columns:
            mine = mine[mine["metric"] == r["metric"]]
        if not mine.empty:
            text += (f" At the report's p{pct(quantile)} it saved "
                     f"{_pct1(mine['saved_share'].iloc[0])} with "
                     f"{_pct2(mine['unmet_share'].iloc[0])} unmet.")
        out.append(text + (" It lost on unmet demand: a plan beats the rule only with no "
                           "more demand unmet and fewer idle GPU-hours."
                           if math.isnan(r["quantile"]) else
                           " The simple rule would have cost no more idle GPU-hours for no "
                           "more unmet demand."))
    return out


def coverage_warnings(accuracy: pd.DataFrame | None, *, model: str) -> list[str]:
    """Plain-words warnings where ``model``'s prediction intervals covered fewer actual values
    than nominal in the last accuracy backtest (``coverage_80``: nominal 80 %); for the 90 %
    band, only where the upper end of its interval over windows (``coverage_hi``) is below.

    Returns:
        One sentence per interval below its nominal coverage (none without the model's row).
    """
    if accuracy is None or accuracy.empty or "model" not in accuracy.columns:
        return []
    name = _model_in(accuracy["model"], model)
    if name is None:
        return []
    row = accuracy[accuracy["model"] == name].iloc[0]
    out = []
    for col in [c for c in accuracy.columns if str(c).startswith("coverage_")]:
        try:
            nominal = float(str(col).removeprefix("coverage_")) / 100.0
        except ValueError:
            continue  # coverage_lo / coverage_hi: bounds of an interval, not a level
        value = row[col]
        if missing(value) or float(value) >= nominal:
            continue
        # the 90 % band's coverage has a 95 % interval over windows: below nominal only when
        # all of it is (89.6 % over 140 windows is noise, not an overconfident model)
        upper = row.get("coverage_hi") if col == "coverage_90" else None
        if upper is not None and not missing(upper) and float(upper) >= nominal:
            continue
        surely = (f" (the 95 % interval over windows ends at {_pct1(upper)})"
                  if upper is not None and not missing(upper) else "")
        out.append(f"{name}'s forecasts are overconfident: in the last accuracy backtest its "
                   f"central {pct(nominal)} % interval held only {_pct1(value)} of the actual "
                   f"values{surely} (nominal {pct(nominal)} %), so plans at its upper quantiles "
                   "leave more demand unmet than their level promises.")
    return out


def _model_in(models: pd.Series, model: str) -> str | None:
    """``model`` as the table names it: itself, else its alias without ``[params]``."""
    names = {str(m) for m in models.dropna()}
    for name in (model, model.split("[", 1)[0]):
        if name in names:
            return name
    return None


def _block_words(block: object) -> str:
    return {"1d": "daily levels", "1h": "hourly levels"}.get(str(block), f"{block} levels")


def _pct1(value: Any) -> str:
    return f"{float(value) * 100:.1f} %"


def _pct2(value: Any) -> str:
    return f"{float(value) * 100:.2f} %"


def _scope_html(scope: ScopeSection, section: ClusterSection, data: ReportData) -> str:
    plan = section.plan
    row = next((r for r in plan.rows if r.scope == scope.scope), None)
    forecast = plan.forecast[plan.forecast["series_id"] == scope.series_id]
    key = f"{anchor(section.cluster)}-{anchor(scope.scope)}"
    now = cluster_now(plan.rows)
    origin = pd.Timestamp(row.start) if row is not None else None
    out = [f"<section class='scope' id='scope-{key}'>",
           f"<h3>{escape(section.cluster)} / {escape(scope.scope)}</h3>",
           f"<p class='meta'>{escape(scope.series_id)}; "
           f"{escape(_span_words(scope.history, origin, now))}</p>"]
    why = stale_scopes(plan.rows).get(scope.scope)
    if why:
        out.append(f"<p class='warning' data-kind='stale'>No current data: {escape(why)}; "
                   "it is left out of the totals.</p>")
    if row is not None:
        sizing = Sizing(quantile=row.quantile, gpus_needed=row.gpus_needed,
                        in_use_needed=row.in_use_needed, queue_allowance=row.queue_allowance,
                        capacity=row.capacity, start=pd.Timestamp(row.start),
                        end=pd.Timestamp(row.end), net_gpus=row.net_gpus)
        what = "GPUs in use" if scope.series_id.endswith("/gpus_in_use") else "GPU demand"
        out.append(f"<h4>{what} against capacity</h4>")
        out.append(usage_chart_svg(scope.history, forecast, sizing, chart_id=f"usage-{key}",
                                   title=scope.series_id, what=what,
                                   now=pd.Timestamp(now) if now is not None else None))
        if scope.queue_history is not None:
            out.append("<h4>Queue</h4>")
            out.append(queue_chart_svg(
                scope.queue_history, scope.queue_forecast if scope.queue_forecast is not None
                else pd.DataFrame(columns=["ts", "mean"]), allowance=row.queue_allowance,
                now=sizing.start, end=sizing.end, chart_id=f"queue-{key}",
                title=f"{section.cluster}/{scope.scope}", source=scope.queue_source,
                cluster_now=pd.Timestamp(now) if now is not None else None))
        else:
            out.append("<p class='meta'>No queue series (gpus_pending, or gpu_demand beside "
                       "gpus_in_use) for this scope: no queue allowance.</p>")
    if scope.note:
        out.append(f"<p class='note'>{escape(scope.note)}</p>")
    if scope.decomposition is not None:
        since = scope.history["ts"].min() if not scope.history.empty else None
        out.append(_decomposition_html(scope.decomposition, since=since,
                                       chart_id=f"parts-{key}"))
    out.append("</section>")
    return "\n".join(out)


def _span_words(history: pd.DataFrame, origin: pd.Timestamp | None = None,
                now: datetime | None = None) -> str:
    """How much history the charts show, in days (saying when it is under 7), and where the
    series stops when that is before the cluster's ``now`` (its forecast ``origin``)."""
    behind = (pd.Timestamp(now) - origin if origin is not None and now is not None
              else pd.Timedelta(0))
    if history.empty:
        text = "no stored history before the forecast"
    else:
        days = (history["ts"].max() - history["ts"].min()).total_seconds() / 86_400
        text = f"{days:.1f} days of history before " + (
            "now (UTC)" if behind <= pd.Timedelta(0) else "its forecast")
        text += "" if days >= 6.99 else ": all the store holds"
    if behind > pd.Timedelta(0) and origin is not None and now is not None:
        text += (f"; the series stops before {origin:%Y-%m-%d %H:%M} UTC, "
                 f"{human(behind.total_seconds())} before the cluster's now "
                 f"({pd.Timestamp(now):%Y-%m-%d %H:%M} UTC)")
    return text


def _decomposition_html(d: SeriesDecomposition, *, since: pd.Timestamp | None,
                        chart_id: str) -> str:
    summary = d.summary(top=5)
    out = ["<h4>Primitive breakdown</h4><div class='grid'>"]
    periods = summary["periods"]
    out.append("<table class='periods'><thead><tr><th class='text'>period</th>"
               "<th>strength</th></tr></thead><tbody>" + "".join(
                   f"<tr><td class='text'>{human(p['seconds'])}</td>"
                   f"<td>{p['strength']:.0%}</td></tr>" for p in periods)
               + ("" if periods else "<tr><td class='text' colspan='2'>none found</td></tr>")
               + "</tbody></table>")
    prims = summary["primitives"]
    out.append("<table class='primitives'><thead><tr><th class='text'>top atom</th>"
               "<th class='text'>kind</th><th class='text'>label</th><th>share</th></tr>"
               "</thead><tbody>" + "".join(
                   f"<tr><td class='text'>{escape(str(p['id']))}</td>"
                   f"<td class='text'>{escape(str(p['kind']))}</td>"
                   f"<td class='text'>{escape(str(p['label']))}</td>"
                   f"<td>{p['share']:.0%}</td></tr>" for p in prims)
               + ("" if prims else "<tr><td class='text' colspan='4'>none</td></tr>")
               + "</tbody></table>")
    shares = summary["variance_share"]
    out.append("<table class='variance'><thead><tr><th class='text'>component</th>"
               "<th>variance share</th></tr></thead><tbody>" + "".join(
                   f"<tr><td class='text'>{escape(k)}</td><td>{v:.0%}</td></tr>"
                   for k, v in shares.items()) + "</tbody></table>")
    bursts = summary["bursts"][-5:]
    out.append(f"<table class='bursts'><thead><tr><th class='text'>recent bursts "
               f"({len(summary['bursts'])} in all)</th><th class='text'>end</th>"
               "<th>height (GPUs)</th></tr></thead><tbody>" + "".join(
                   f"<tr><td class='text'>{escape(b['start'][:16])}</td>"
                   f"<td class='text'>{escape(b['end'][:16])}</td>"
                   f"<td>{b['height']:,.1f}</td></tr>" for b in reversed(bursts))
               + ("" if bursts else "<tr><td class='text' colspan='3'>none</td></tr>")
               + "</tbody></table>")
    out.append("</div>")
    out.append(components_chart_svg(d, since=since, chart_id=chart_id))
    return "".join(out)


def _accuracy_html(data: ReportData) -> str:
    out = ["<section id='accuracy'><h2>Forecast accuracy (last backtest)</h2>"]
    if data.accuracy is None or data.accuracy.empty:
        out.append("<p class='note'>No backtest saved yet: run <code>prism backtest --models "
                   "prism,seasonal_naive,naive --all --horizon 1d --windows 7</code> and "
                   "regenerate the report.</p></section>")
        return "".join(out)
    if data.accuracy_note:
        out.append(f"<p class='meta'>{escape(data.accuracy_note)}</p>")
    cols: list[tuple[str, str, int | None]] = [("model", "model", None)]
    for extra in ("windows", "series"):
        if extra in data.accuracy.columns:
            cols.append((extra, extra, 0))
    cols += [(m, m, 3) for m in _ACCURACY_METRICS if m in data.accuracy.columns]
    out.append(table_html(data.accuracy, tuple(cols), css="accuracy"))
    out.append("</section>")
    return "".join(out)


def _definitions_html(data: ReportData) -> str:
    return (
        "<section id='definitions'><h2>How to read this</h2><ul>"
        "<li><b>GPUs needed</b>: the peak over the window of the forecast of GPUs in use at "
        f"the planning quantile (p{pct(data.quantile)}), growth and reservations included, "
        "plus the <b>queue allowance</b>: the mean queued GPUs forecast over the window (not "
        "an upper quantile: queued jobs start as GPUs free up), counting only jobs that fit "
        "the scope's GPUs where the jobs are known, at most the queue's peak over the last 7 "
        "days.</li>"
        "<li><b>Charts</b> (times in UTC, values in GPUs): GPUs in use over at least the last "
        "7 days with the forecast fan, the capacity (dotted red), the <b>sized level</b> "
        "(solid green over the window: GPUs in use at the planning quantile plus the queue "
        "allowance), the capacity after the advice (dashed green, where it changes it) and a "
        "<b>now</b> marker at the forecast origin; the queue has its own "
        "chart; the primitive breakdown shows what each component adds, in GPUs.</li>"
        "<li><b>Totals</b> add up one partition of the scopes: the VCs (else <code>all</code>"
        "), never <code>all</code>, the GPU types and the VCs together, which would count "
        "each GPU several times.</li>"
        "<li><b>Shortfall GPU-h</b>: expected GPU-hours of demand above capacity (jobs that "
        "queue); <b>queue risk</b>: the largest per-step probability that demand exceeds "
        "capacity. <b>Idle GPU-h</b>: expected GPU-hours of capacity left unused; "
        "<b>kWh</b>: what idle and busy GPUs draw. The expectations integrate the forecast's "
        "quantile function (linear between quantiles).</li>"
        "<li><b>Planning backtest</b>: the last days replayed with one level per VC per block "
        "(1d or 1h), set before the day from the day-ahead forecast's quantile; idle GPU-hours "
        "= sum of max(level - actual, 0), unmet = sum of max(actual - level, 0) over the "
        "demand; saved = 1 - idle / idle of the static historical peak.</li>"
        "<li><b>Forecast accuracy</b>: the last <code>prism backtest</code>'s means over its "
        "windows; with <code>naive</code> among its models, <b>avg_rel_mae</b> is each "
        "model's error against the last value carried forward (the geometric mean over "
        "windows of the MAE ratio; below 1 is better), with its 95 % bootstrap interval over "
        "the cutoffs (lo, hi), and <b>catastrophes</b> the share of windows with more than "
        "twice the last value's MAE.</li>"
        "<li><b>Track record</b>: the plans PRISM served before (<code>prism capacity</code>, "
        "<code>GET /v1/capacity</code>, <code>prism report</code>; kept in the store's "
        "<code>capacity_plans</code> table), each scored once its window has passed: unmet = "
        "sum of max(in use - planned, 0) over the GPU-hours in use, idle GPU-h = sum of "
        "max(planned - in use, 0), coverage = the share of windows whose peak in use stayed "
        "within the plan (to compare with the quantile); the same for yesterday's peak (each "
        "scope at its peak of the day before the window) on the same windows.</li>"
        "<li><b>Recommendation</b>: VCs short at the quantile first borrow the spare GPUs "
        "of the others for the window (the moves); only what no VC can lend is added, and "
        "spare GPUs nobody borrows, unused over the last 7 days too, are released. Add and "
        "release are the cluster's net (its row); the VCs' <b>net change</b> adds up to it."
        "</li></ul></section>")


# -- PDF ---------------------------------------------------------------------------------------
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The path of a Chromium/Chrome binary on ``PATH``, or ``None``."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def write_pdf(html: str, output: Path, *, timeout_s: float = 120.0) -> Path:
    """Print the page to PDF with headless Chromium (the same page, laid out for paper).

    Raises:
        ConfigError: when no Chromium is installed or it fails.
    """
    browser = find_chromium()
    if browser is None:
        raise ConfigError("--pdf prints the page with headless Chromium, which is not "
                          "installed: apt-get install chromium (or drop --pdf)")
    with tempfile.TemporaryDirectory(prefix="prism-report-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html, encoding="utf-8")
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu",
                   "--disable-background-networking", "--disable-component-update",
                   "--disable-sync", "--no-first-run", f"--user-data-dir={tmp}/profile",
                   "--no-pdf-header-footer", f"--print-to-pdf={output.resolve()}",
                   page.as_uri()]
        try:
            done = subprocess.run(command, capture_output=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"Chromium could not print the report: {exc}") from exc
    if done.returncode != 0 or not output.exists() or output.stat().st_size == 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise ConfigError(f"Chromium could not print the report (exit {done.returncode}): "
                          + " | ".join(tail))
    return output
