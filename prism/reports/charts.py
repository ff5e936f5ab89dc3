"""The capacity report's charts: matplotlib figures drawn off-screen as inline SVG.

Inline SVG (not PNG) so that what a chart draws is in the page: the sized level, the "now"
marker and the capacity line are ``<g>`` elements with stable classes (:data:`MARKS`) and data
attributes (``data-gpus``, ``data-ts``) that a browser test, or a reader's devtools, can find.
Text stays text (``svg.fonttype: none``). Every id inside a chart is prefixed with the chart's
own id, so that many charts share one page without clashing; nothing is fetched (no fonts, no
links).

Every axis carries its unit: GPUs on the value axes, ``time (UTC)`` on the time axes (stored
timestamps are UTC).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from prism.primitives.decompose import SeriesDecomposition  # noqa: E402
from prism.reports.tables import pct  # noqa: E402

#: The classes of the marks a chart draws (on its ``<g>`` element).
MARKS = {"sized": "sized-level", "now": "now-marker", "capacity": "capacity-line",
         "advised": "advised-level", "allowance": "queue-allowance", "history": "history-line",
         "end": "series-end"}
#: What the time axes say.
TIME_LABEL = "time (UTC)"
_INK, _BLUE, _ORANGE, _RED, _GREEN = "#1c2430", "#2f6db5", "#b5642f", "#c0392b", "#1e8449"


@dataclass(frozen=True)
class Sizing:
    """What the in-use chart draws of a scope's plan.

    Attributes:
        quantile: the planning quantile.
        gpus_needed: the sized level (in use at the quantile plus the queue allowance).
        in_use_needed / queue_allowance: its two parts.
        capacity: GPUs installed (``None``: unknown).
        start / end: the planning window (``start`` is the forecast origin: "now").
        net_gpus: the advice's net change of the scope's GPUs (moves, add, release).
    """

    quantile: float
    gpus_needed: float
    in_use_needed: float
    queue_allowance: float
    capacity: float | None
    start: pd.Timestamp
    end: pd.Timestamp
    net_gpus: int = 0


def usage_chart_svg(history: pd.DataFrame, forecast: pd.DataFrame, sizing: Sizing, *,
                    chart_id: str, title: str, what: str = "GPUs in use",
                    now: pd.Timestamp | None = None) -> str:
    """GPUs in use against capacity: the history, the forecast fan (p50 line, p50-p90 and
    p90-p99 bands, the planning quantile), the capacity, the sized level over the window, the
    capacity after the advice (where it changes it) and the "now" marker at the forecast
    origin.

    Args:
        history: ``ts, value`` of the recent past.
        forecast: the scope's forecast (``ts, p..``).
        sizing: the plan's numbers for the scope.
        chart_id: a page-unique id (prefixes every id of the chart).
        title: the chart's title.
        what: what the series counts (the value axis reads ``{what} (GPUs)``).
        now: the cluster's now, when the series stopped before it: the "now" marker goes
            there and a "data ends" marker (``g.series-end``) at the series' forecast origin.

    Returns:
        The ``<svg>`` element.
    """
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
    marks: dict[str, dict[str, str]] = {}
    if not history.empty:
        ax.plot(history["ts"], history["value"], color=_INK, lw=0.8, label="history",
                gid="history")
        marks["history"] = {"data-start": _iso(history["ts"].min()),
                            "data-end": _iso(history["ts"].max())}
    if not forecast.empty:
        ts = forecast["ts"]
        cols = set(forecast.columns)
        if {"p50", "p90"} <= cols:
            ax.fill_between(ts, forecast["p50"], forecast["p90"], color=_BLUE, alpha=0.35,
                            lw=0, label="p50-p90")
        if {"p90", "p99"} <= cols:
            ax.fill_between(ts, forecast["p90"], forecast["p99"], color=_BLUE, alpha=0.15,
                            lw=0, label="p90-p99")
        if "p50" in cols:
            ax.plot(ts, forecast["p50"], color=_BLUE, lw=1.1, label="p50")
        qcol = f"p{pct(sizing.quantile)}"
        if qcol in cols and qcol not in ("p50", "p90", "p99"):
            ax.plot(ts, forecast[qcol], color=_ORANGE, lw=0.9, ls="--", label=qcol)
    if sizing.capacity is not None:
        ax.axhline(sizing.capacity, color=_RED, lw=1.1, ls=":", gid="capacity",
                   label=f"capacity {sizing.capacity:,.0f} GPUs")
        marks["capacity"] = {"data-gpus": repr(float(sizing.capacity))}
    sized_label = (f"sized p{pct(sizing.quantile)}: {sizing.gpus_needed:,.1f} GPUs")
    if sizing.queue_allowance:
        sized_label += (f" (in use {sizing.in_use_needed:,.1f} + queue "
                        f"{sizing.queue_allowance:,.1f})")
    ax.hlines(sizing.gpus_needed, _x(sizing.start), _x(sizing.end), color=_GREEN, lw=1.6,
              gid="sized", label=sized_label)
    if sizing.capacity is not None and sizing.net_gpus:
        advised = sizing.capacity + sizing.net_gpus
        ax.hlines(advised, _x(sizing.start), _x(sizing.end), color=_GREEN, lw=1.1, ls="--",
                  gid="advised", label=f"after the advice {advised:,.0f} GPUs "
                  f"({sizing.net_gpus:+,d})")
        marks["advised"] = {"data-gpus": repr(float(advised))}
    marks["sized"] = {"data-gpus": repr(float(sizing.gpus_needed)),
                      "data-start": _iso(sizing.start), "data-end": _iso(sizing.end)}
    _now(ax, sizing.start, marks, now)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.2)  # room for the legend above the lines
    _axes(ax, title=title, ylabel=f"{what} (GPUs)")
    ax.legend(fontsize=7, loc="upper left", ncol=4, frameon=False)
    return _svg(fig, chart_id, marks, css="chart usage",
                label=f"{what} of {title} against capacity, with the sized level")


def queue_chart_svg(history: pd.DataFrame, forecast: pd.DataFrame, *, allowance: float,
                    now: pd.Timestamp, end: pd.Timestamp, chart_id: str, title: str,
                    source: str, cluster_now: pd.Timestamp | None = None) -> str:
    """Queued GPUs in their own chart: the history, the mean forecast, the queue allowance the
    plan adds over the window and the "now" marker.

    Args:
        history: ``ts, value`` of the queued GPUs in the recent past.
        forecast: ``ts, mean`` of the queued GPUs forecast.
        allowance: the plan's queue allowance.
        now / end: the forecast origin and the end of the window.
        chart_id / title: as :func:`usage_chart_svg`.
        source: how the queue is measured (``gpus_pending``, or demand minus in use).
        cluster_now: as ``now`` of :func:`usage_chart_svg`.

    Returns:
        The ``<svg>`` element.
    """
    fig, ax = plt.subplots(figsize=(9, 2.2), dpi=100)
    if not history.empty:
        ax.plot(history["ts"], history["value"], color=_INK, lw=0.8, label=f"queued ({source})")
    if not forecast.empty:
        ax.plot(forecast["ts"], forecast["mean"], color=_BLUE, lw=1.1, label="mean forecast")
    ax.hlines(allowance, _x(now), _x(end), color=_GREEN, lw=1.6, gid="allowance",
              label=f"queue allowance {allowance:,.1f} GPUs")
    marks = {"allowance": {"data-gpus": repr(float(allowance))}}
    _now(ax, now, marks, cluster_now)
    ax.set_ylim(0, max(ax.get_ylim()[1], 1.0) * 1.25)
    _axes(ax, title=title, ylabel="queued (GPUs)")
    ax.legend(fontsize=7, loc="upper left", ncol=3, frameon=False)
    return _svg(fig, chart_id, marks, css="chart queue", label=f"queued GPUs of {title}")


def components_chart_svg(d: SeriesDecomposition, *, since: pd.Timestamp | None,
                         chart_id: str) -> str:
    """The decomposition in GPUs: the series with its level + trend, and below what the
    primitives, bursts, spectral part and residual add (they sum to the series).

    Args:
        d: the decomposition.
        since: draw from here (the history's start), or everything.
        chart_id: as :func:`usage_chart_svg`.

    Returns:
        The ``<svg>`` element.
    """
    keep = slice(None) if since is None else d.ts >= since
    ts = d.ts[keep]
    fig, (top, low) = plt.subplots(2, 1, figsize=(9, 3.6), dpi=100, sharex=True)
    top.plot(ts, d.values[keep], color=_INK, lw=0.8, label="series")
    top.plot(ts, (d.components["level"] + d.components["trend"])[keep], color=_ORANGE, lw=1.2,
             label="level + trend")
    top.legend(fontsize=7, loc="upper left", ncol=2, frameon=False)
    for name in ("primitives", "bursts", "spectral", "residual"):
        if name in d.components:
            low.plot(ts, d.components[name][keep], lw=0.8, label=name)
    low.axhline(0, color="#8a94a3", lw=0.5)
    low.legend(fontsize=7, loc="upper left", ncol=4, frameon=False)
    _axes(top, title=f"primitive breakdown of {d.series_id}", ylabel="GPUs", xlabel=None)
    _axes(low, title=None, ylabel="GPUs added")
    return _svg(fig, chart_id, {}, css="chart components",
                label=f"primitive breakdown of {d.series_id} in GPUs")


def _now(ax: Any, origin: pd.Timestamp, marks: dict[str, dict[str, str]],
         now: pd.Timestamp | None = None) -> None:
    """The "now" marker: a vertical line at the forecast origin, labelled with its time; for
    a series that stopped before the cluster's ``now``, a "data ends" line at its origin
    and the "now" marker at ``now``."""
    if now is not None and pd.Timestamp(now) > pd.Timestamp(origin):
        ax.axvline(origin, color=_RED, lw=1, ls="-.", gid="end")
        ax.text(origin, 0.86, f"data ends {origin:%Y-%m-%d %H:%M} UTC ",
                transform=ax.get_xaxis_transform(), fontsize=7, va="top", ha="right",
                color=_RED, gid="end-label")
        marks["end"] = {"data-ts": _iso(origin)}
    else:
        now = origin
    ax.axvline(now, color="#5b6778", lw=1, ls="--", gid="now")
    # left of the line, inside the axes: a label past the right edge would shrink the plot
    ax.text(now, 0.98, f"now {now:%Y-%m-%d %H:%M} UTC ", transform=ax.get_xaxis_transform(),
            fontsize=7, va="top", ha="right", color="#5b6778", gid="now-label")
    marks["now"] = {"data-ts": _iso(now)}


def _axes(ax: Any, *, title: str | None, ylabel: str, xlabel: str | None = TIME_LABEL) -> None:
    if title:
        ax.set_title(title, fontsize=9, loc="left")
    ax.set_ylabel(ylabel, fontsize=8)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))
    ax.grid(alpha=0.25)


_ID_REF = re.compile(r'(\bid="|href="#|url\(#)([^")]+)')


def _svg(fig: Any, chart_id: str, marks: Mapping[str, Mapping[str, str]], *, css: str,
         label: str) -> str:
    """The figure as an inline ``<svg>``: ids prefixed with ``chart_id``, the marked groups
    given their class (:data:`MARKS`) and data attributes, no metadata, no namespaces."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": chart_id}):
        fig.tight_layout()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text)  # HTML gives inline SVG its namespace
    text = _ID_REF.sub(lambda m: f"{m.group(1)}{chart_id}-{m.group(2)}", text)
    for gid, attrs in marks.items():
        extra = "".join(f' {k}="{escape(v)}"' for k, v in attrs.items())
        text = text.replace(f'<g id="{chart_id}-{gid}">',
                            f'<g id="{chart_id}-{gid}" class="{MARKS[gid]}"{extra}>', 1)
    head = re.match(r"<svg\b[^>]*>", text)
    assert head is not None  # matplotlib always writes one
    view = re.search(r'viewBox="([^"]+)"', head.group(0))
    opening = (f'<svg id="{chart_id}" class="{css}" role="img" aria-label="{escape(label)}" '
               f'viewBox="{view.group(1) if view else "0 0 648 230"}" width="100%" '
               'preserveAspectRatio="xMinYMin meet">')
    return opening + text[head.end():]


def _iso(ts: Any) -> str:
    """A stored time (naive, UTC) in ISO 8601 with its zone: ``2026-01-14T00:00:00+00:00``."""
    stamp = pd.Timestamp(ts)
    return (stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp).isoformat()


def _x(ts: pd.Timestamp) -> float:
    """A time as matplotlib's date number (for calls that take no units)."""
    return float(mdates.date2num(ts))
