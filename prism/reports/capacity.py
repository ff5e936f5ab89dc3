"""The capacity report: one self-contained HTML page (PNG plots embedded), optionally a PDF.

Per cluster: the capacity table and its recommendations, the planning backtest; per scope
(VC, tenant, GPU type): the recent history with the forecast fan chart (p50, p90, p99, the
planning quantile and the capacity), the primitive breakdown (periods, top atoms, recent
bursts, variance shares) and the scope's planning backtest; and the accuracy table of the
last ``prism backtest --summary``. Nothing is fetched when the page is viewed: the styles are
inline, the plots are ``data:`` PNGs and there is no script.

The page only renders what :class:`ReportData` holds; :mod:`prism.usecases.report` gathers it.
Numbers in tables carry their exact value in ``data-value`` (the text shows it rounded).
"""

from __future__ import annotations

import base64
import io
import logging
import math
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from prism.capacity import CapacityPlan, CapacityRow  # noqa: E402
from prism.errors import ConfigError  # noqa: E402
from prism.evaluation.planning import YESTERDAY, versus_reference  # noqa: E402
from prism.primitives.decompose import SeriesDecomposition  # noqa: E402

logger = logging.getLogger(__name__)

#: Capacity table columns: (field, heading, decimals or None for text).
CAPACITY_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("scope", "scope", None),
    ("in_use_needed", "in use (peak)", 1),
    ("queue_allowance", "queue allowance", 1),
    ("gpus_needed", "GPUs needed (peak)", 1),
    ("mean_peak", "mean peak", 1),
    ("capacity", "capacity", 1),
    ("net_gpus", "net change", 0),
    ("shortfall_gpu_hours", "shortfall GPU-h", 1),
    ("queue_risk", "queue risk", 3),
    ("idle_gpu_hours", "idle GPU-h", 1),
    ("idle_energy_kwh", "idle kWh", 1),
    ("busy_energy_kwh", "busy kWh", 1),
    ("recommendation", "recommendation", None),
)
_PLANNING_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("metric", "metric", None),
    ("plan", "plan", None),
    ("block", "block", None),
    ("series", "series", 0),
    ("windows", "days", 0),
    ("idle_gpu_hours", "idle GPU-h", 1),
    ("saved_share", "saved vs static", -1),
    ("unmet_gpu_hours", "unmet GPU-h", 1),
    ("unmet_share", "unmet share", -2),
)
_ACCURACY_METRICS = ("mase", "mae", "rmse", "smape", "crps", "coverage_80", "coverage_90",
                     "under_p90", "under_p95", "under_p99", "over_p90", "over_p95")


@dataclass(frozen=True)
class ScopeSection:
    """What the report shows of one scope.

    Attributes:
        scope / series_id: the scope and its demand series.
        history: ``ts, value`` of the recent past.
        decomposition: the series' decomposition, or ``None`` (with ``note``).
        note: why something is missing.
    """

    scope: str
    series_id: str
    history: pd.DataFrame
    decomposition: SeriesDecomposition | None = None
    note: str = ""


@dataclass(frozen=True)
class ClusterSection:
    """What the report shows of one cluster.

    Attributes:
        cluster: the cluster.
        plan: its capacity plan (rows, per-step needs, the forecast used).
        scopes: one section per scope of the plan.
        planning: the planning backtest totals (``prism.evaluation.planning`` columns), or ``None``.
        planning_by_series: the same per series.
        planning_note: how the planning backtest was run, or why there is none.
    """

    cluster: str
    plan: CapacityPlan
    scopes: Sequence[ScopeSection]
    planning: pd.DataFrame | None = None
    planning_by_series: pd.DataFrame | None = None
    planning_note: str = ""


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
th{background:#eef3f9}td.text,th.text{text-align:left}
td[data-field=recommendation]{white-space:normal;min-width:220px}
tr.add td,tr.borrow\\+add td{background:#fdecea}tr.borrow td{background:#fff6e0}
tr.lend td,tr.release td,tr.lend\\+release td{background:#eaf6ec}
.meta{color:#5b6778;font-size:0.9em}.note{color:#8a5a00;font-size:0.9em}
.warning{background:#fdecea;border-left:4px solid #c0392b;padding:6px 10px;color:#7b1e14}
.grid{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
img{max-width:100%;height:auto;border:1px solid #e3e8ef}
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
        f"<b>{escape(data.horizon)}</b> planned at the <b>p{_pct(data.quantile)}</b> quantile "
        f"of the <b>{escape(data.model)}</b> forecast.</p>",
    ]
    for note in data.notes:
        parts.append(f"<p class='note'>{escape(note)}</p>")
    for warning in coverage_warnings(data.accuracy, model=data.model):
        parts.append(f"<p class='warning' data-kind='coverage'>{escape(warning)}</p>")
    if data.clusters:
        parts.append("<nav>" + "".join(
            f"<a href='#cluster-{_anchor(c.cluster)}'>{escape(c.cluster)}</a>"
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
    start = rows[0].start if rows else None
    end = rows[0].end if rows else None
    out = [f"<section class='cluster' id='cluster-{_anchor(section.cluster)}'>",
           f"<h2>Cluster {escape(section.cluster)}</h2>"]
    if start is not None and end is not None:
        out.append(f"<p class='meta'>Window {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} "
                   f"(UTC); energy at {plan.watts.idle:g} W idle and {plan.watts.busy:g} W busy "
                   "per GPU.</p>")
    out.append("<h3>Capacity and recommendations</h3>")
    out.append(capacity_table_html(rows, cluster=section.cluster))
    if plan.moves:
        out.append("<h4>Moves between VCs (before anything is added)</h4><ul class='moves'>"
                   + "".join(f"<li data-from='{escape(m.from_scope)}' "
                             f"data-to='{escape(m.to_scope)}' data-gpus='{m.gpus}'>"
                             f"{escape(m.text)}</li>" for m in plan.moves) + "</ul>")
    if rows:
        out.append("<h4>Why</h4><ul class='advice'>" + "".join(
            f"<li data-scope='{escape(r.scope)}'><b>{escape(r.scope)}</b>: "
            f"{escape(r.recommendation)}. {escape(r.reason)}.</li>" for r in rows) + "</ul>")
    out.append("<h3>Planning backtest</h3>")
    if section.planning_note:
        out.append(f"<p class='meta'>{escape(section.planning_note)}</p>")
    for warning in planning_warnings(section.planning, model=data.model,
                                     quantile=data.quantile):
        out.append(f"<p class='warning' data-kind='planning'>{escape(warning)}</p>")
    if section.planning is not None and not section.planning.empty:
        out.append(_table_html(section.planning, _PLANNING_COLUMNS, css="planning"))
    for scope in section.scopes:
        out.append(_scope_html(scope, section, data))
    out.append("</section>")
    return "\n".join(out)


def planning_warnings(planning: pd.DataFrame | None, *, model: str,
                      quantile: float) -> list[str]:
    """Plain-words warnings where ``model``'s plans do not beat yesterday's peak on the
    planning backtest (none without a backtest of the model).

    The model beats yesterday's peak when one of its backtested quantiles saved at least as
    many idle GPU-hours with no more demand unmet
    (:func:`prism.evaluation.planning.versus_reference`).

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
                     f"p{_pct(r['quantile'])}, saved only {_pct1(r['saved_share'])} "
                     f"({_pct2(r['unmet_share'])} unmet).")
        mine = planning[(planning["model"] == name) & (planning["block"] == r["block"])
                        & np.isclose(planning["quantile"].astype(float), quantile)]
        if "metric" in planning.columns:
            mine = mine[mine["metric"] == r["metric"]]
        if not mine.empty:
            text += (f" At the report's p{_pct(quantile)} it saved "
                     f"{_pct1(mine['saved_share'].iloc[0])} with "
                     f"{_pct2(mine['unmet_share'].iloc[0])} unmet.")
        out.append(text + " The simple rule would have cost fewer idle GPU-hours for no more "
                   "unmet demand.")
    return out


def coverage_warnings(accuracy: pd.DataFrame | None, *, model: str) -> list[str]:
    """Plain-words warnings where ``model``'s prediction intervals covered fewer actual values
    than nominal in the last accuracy backtest (``coverage_80``: nominal 80 %).

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
        if _missing(value) or float(value) >= nominal:
            continue
        out.append(f"{name}'s forecasts are overconfident: in the last accuracy backtest its "
                   f"central {_pct(nominal)} % interval held only {_pct1(value)} of the actual "
                   f"values (nominal {_pct(nominal)} %), so plans at its upper quantiles leave "
                   "more demand unmet than their level promises.")
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


def capacity_table_html(rows: Sequence[CapacityRow], *, cluster: str) -> str:
    """The capacity table: one ``<tr data-scope=...>`` per scope, cells ``data-field``."""
    head = "".join(f"<th class='{'text' if d is None else 'num'}'>{escape(h)}</th>"
                   for _, h, d in CAPACITY_COLUMNS)
    body = []
    for r in rows:
        cells = []
        for name, _, decimals in CAPACITY_COLUMNS:
            value = getattr(r, name)
            if decimals is None:
                cells.append(f"<td class='text' data-field='{name}'>{escape(str(value))}</td>")
            else:
                exact = "" if value is None else f" data-value='{float(value)!r}'"
                cells.append(f"<td data-field='{name}'{exact}>{_fmt(value, decimals)}</td>")
        body.append(f"<tr class='{escape(r.action)}' data-cluster='{escape(cluster)}' "
                    f"data-scope='{escape(r.scope)}'>{''.join(cells)}</tr>")
    return (f"<table class='capacity' data-cluster='{escape(cluster)}'><thead><tr>{head}</tr>"
            f"</thead><tbody>{''.join(body)}</tbody></table>")


def _scope_html(scope: ScopeSection, section: ClusterSection, data: ReportData) -> str:
    plan = section.plan
    row = next((r for r in plan.rows if r.scope == scope.scope), None)
    forecast = plan.forecast[plan.forecast["series_id"] == scope.series_id]
    out = [f"<section class='scope' id='scope-{_anchor(section.cluster)}-{_anchor(scope.scope)}'>",
           f"<h3>{escape(section.cluster)} / {escape(scope.scope)}</h3>",
           f"<p class='meta'>{escape(scope.series_id)}</p>"]
    if row is not None:
        png = fan_chart_png(scope.history, forecast, capacity=row.capacity,
                            quantile=plan.quantile, title=scope.series_id)
        out.append(f"<img class='fan' alt='history and forecast fan chart of "
                   f"{escape(scope.series_id)}' width='900' height='300' src='{_data_uri(png)}'>")
    if scope.note:
        out.append(f"<p class='note'>{escape(scope.note)}</p>")
    if scope.decomposition is not None:
        out.append(_decomposition_html(scope.decomposition))
    if section.planning_by_series is not None and not section.planning_by_series.empty:
        mine = section.planning_by_series[
            section.planning_by_series["series_id"].isin(
                [scope.series_id, *_siblings(scope.series_id, section.planning_by_series)])]
        if not mine.empty:
            out.append("<h4>Planning backtest of this scope</h4>")
            out.append(_table_html(mine, (("series_id", "series", None),
                                          *_PLANNING_COLUMNS[1:3], *_PLANNING_COLUMNS[4:]),
                                   css="planning-scope"))
    out.append("</section>")
    return "\n".join(out)


def _siblings(series_id: str, frame: pd.DataFrame) -> list[str]:
    """Other metrics of the same scope in the planning table (e.g. gpus_in_use)."""
    prefix = series_id.rsplit("/", 1)[0] + "/"
    return [s for s in frame["series_id"].unique() if str(s).startswith(prefix)]


def _decomposition_html(d: SeriesDecomposition) -> str:
    summary = d.summary(top=5)
    out = ["<h4>Primitive breakdown</h4><div class='grid'><div>"]
    periods = summary["periods"]
    out.append("<table class='periods'><thead><tr><th class='text'>period</th>"
               "<th>strength</th></tr></thead><tbody>" + "".join(
                   f"<tr><td class='text'>{_human(p['seconds'])}</td>"
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
               "<th>height</th></tr></thead><tbody>" + "".join(
                   f"<tr><td class='text'>{escape(b['start'][:16])}</td>"
                   f"<td class='text'>{escape(b['end'][:16])}</td>"
                   f"<td>{b['height']:,.1f}</td></tr>" for b in reversed(bursts))
               + ("" if bursts else "<tr><td class='text' colspan='3'>none</td></tr>")
               + "</tbody></table></div>")
    if d.top_atoms:
        png = atoms_png(d)
        out.append(f"<div><img class='atoms' alt='top primitives of {escape(d.series_id)}' "
                   f"width='420' height='210' src='{_data_uri(png)}'></div>")
    out.append("</div>")
    return "".join(out)


def _accuracy_html(data: ReportData) -> str:
    out = ["<section id='accuracy'><h2>Forecast accuracy (last backtest)</h2>"]
    if data.accuracy is None or data.accuracy.empty:
        out.append("<p class='note'>No backtest saved yet: run <code>prism backtest --models "
                   "prism,seasonal_naive --all --horizon 1d --windows 7 --summary</code> and "
                   "regenerate the report.</p></section>")
        return "".join(out)
    if data.accuracy_note:
        out.append(f"<p class='meta'>{escape(data.accuracy_note)}</p>")
    cols: list[tuple[str, str, int | None]] = [("model", "model", None)]
    for extra in ("windows", "series"):
        if extra in data.accuracy.columns:
            cols.append((extra, extra, 0))
    cols += [(m, m, 3) for m in _ACCURACY_METRICS if m in data.accuracy.columns]
    out.append(_table_html(data.accuracy, tuple(cols), css="accuracy"))
    out.append("</section>")
    return "".join(out)


def _definitions_html(data: ReportData) -> str:
    return (
        "<section id='definitions'><h2>How to read this</h2><ul>"
        "<li><b>GPUs needed</b>: the peak over the window of the forecast of GPUs in use at "
        f"the planning quantile (p{_pct(data.quantile)}), growth and reservations included, "
        "plus the <b>queue allowance</b>: the mean queued GPUs forecast over the window (not "
        "an upper quantile: queued jobs start as GPUs free up), at most the queue's peak over "
        "the last 7 days.</li>"
        "<li><b>Shortfall GPU-h</b>: expected GPU-hours of demand above capacity (jobs that "
        "queue); <b>queue risk</b>: the largest per-step probability that demand exceeds "
        "capacity. <b>Idle GPU-h</b>: expected GPU-hours of capacity left unused; "
        "<b>kWh</b>: what idle and busy GPUs draw. The expectations integrate the forecast's "
        "quantile function (linear between quantiles).</li>"
        "<li><b>Planning backtest</b>: the last days replayed with one level per VC per block "
        "(1d or 1h), set before the day from the day-ahead forecast's quantile; idle GPU-hours "
        "= sum of max(level - actual, 0), unmet = sum of max(actual - level, 0) over the "
        "demand; saved = 1 - idle / idle of the static historical peak.</li>"
        "<li><b>Recommendation</b>: VCs short at the quantile first borrow the spare GPUs "
        "of the others for the window (the moves); only what no VC can lend is added, and "
        "spare GPUs nobody borrows, unused over the last 7 days too, are released. Add and "
        "release are the cluster's net (its row); the VCs' <b>net change</b> adds up to it."
        "</li></ul></section>")


def _table_html(frame: pd.DataFrame, columns: Sequence[tuple[str, str, int | None]],
                *, css: str) -> str:
    cols = [c for c in columns if c[0] in frame.columns]
    head = "".join(f"<th class='{'text' if d is None else 'num'}'>{escape(h)}</th>"
                   for _, h, d in cols)
    body = []
    for record in frame.to_dict("records"):
        cells = []
        for name, _, decimals in cols:
            value = record[name]
            if decimals is None:
                text = "" if _missing(value) else str(value)
                cells.append(f"<td class='text' data-field='{name}'>{escape(text)}</td>")
            else:
                exact = "" if _missing(value) else f" data-value='{float(value)!r}'"
                shown = (_fmt(value, -decimals, percent=True) if decimals < 0
                         else _fmt(value, decimals))
                cells.append(f"<td data-field='{name}'{exact}>{shown}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f"<table class='{css}'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


# -- plots -------------------------------------------------------------------------------------
def fan_chart_png(history: pd.DataFrame, forecast: pd.DataFrame, *, capacity: float | None,
                  quantile: float, title: str) -> bytes:
    """History and the forecast fan (p50 line, p50-p90 and p90-p99 bands), the planning
    quantile and the capacity, as PNG bytes."""
    fig, ax = plt.subplots(figsize=(9, 3), dpi=100)
    if not history.empty:
        ax.plot(history["ts"], history["value"], color="#1c2430", lw=0.9, label="history")
    if not forecast.empty:
        ts = forecast["ts"]
        cols = set(forecast.columns)
        if {"p50", "p90"} <= cols:
            ax.fill_between(ts, forecast["p50"], forecast["p90"], color="#2f6db5", alpha=0.35,
                            lw=0, label="p50-p90")
        if {"p90", "p99"} <= cols:
            ax.fill_between(ts, forecast["p90"], forecast["p99"], color="#2f6db5", alpha=0.15,
                            lw=0, label="p90-p99")
        if "p50" in cols:
            ax.plot(ts, forecast["p50"], color="#2f6db5", lw=1.2, label="p50")
        qcol = f"p{_pct(quantile)}"
        if qcol in cols and qcol not in ("p50", "p90", "p99"):
            ax.plot(ts, forecast[qcol], color="#b5642f", lw=1, ls="--", label=qcol)
    if capacity is not None:
        ax.axhline(capacity, color="#c0392b", lw=1, ls=":", label="capacity")
    ax.set_title(title, fontsize=9, loc="left")
    ax.set_ylabel("GPUs", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))
    ax.legend(fontsize=7, loc="upper left", ncol=6, frameon=False)
    ax.grid(alpha=0.25)
    fig.tight_layout()
    return _png(fig)


def atoms_png(d: SeriesDecomposition) -> bytes:
    """The series' top primitives (atom shapes with their shares) as PNG bytes."""
    fig, ax = plt.subplots(figsize=(4.2, 2.1), dpi=100)
    shares = dict(zip(d.usage["atom_id"], d.usage["share"], strict=True))
    for atom_id, atom in d.top_atoms.items():
        ax.plot(np.asarray(atom), lw=1, label=f"{atom_id} ({shares.get(atom_id, 0):.0%})")
    ax.set_title("top primitives (atom shapes)", fontsize=8, loc="left")
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=6, loc="upper right", frameon=False)
    fig.tight_layout()
    return _png(fig)


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


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


# -- formatting --------------------------------------------------------------------------------
def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt(value: Any, decimals: int, *, percent: bool = False) -> str:
    if _missing(value):
        return "&ndash;"
    if percent:
        return f"{float(value) * 100:,.{decimals}f} %"
    return f"{float(value):,.{decimals}f}"


def _pct(q: float) -> str:
    return f"{round(q * 100, 6):g}"


def _anchor(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"
