"""The capacity report's tables, their totals and the number formats.

A cluster's scopes overlap: ``all`` is the whole cluster, each ``gpu:<type>`` a slice of it by
GPU type, each VC (or tenant) a slice by owner. Adding them together counts each GPU several
times, so a total is taken over one :func:`partition` of the scopes only (the VCs, else
``all``, else the GPU types), and the table says which.

Numbers in tables carry their exact value in ``data-value`` (the text shows it rounded).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from html import escape
from typing import Any

import pandas as pd

from prism.capacity import CapacityRow, shared_vcs
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX

#: Capacity table columns: (field, heading, decimals or None for text).
CAPACITY_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("scope", "scope", None),
    ("in_use_needed", "in use (peak, GPUs)", 1),
    ("queue_allowance", "queue allowance (GPUs)", 1),
    ("gpus_needed", "GPUs needed (peak)", 1),
    ("mean_peak", "mean peak (GPUs)", 1),
    ("capacity", "capacity (GPUs)", 1),
    ("net_gpus", "net change (GPUs)", 0),
    ("shortfall_gpu_hours", "shortfall GPU-h", 1),
    ("queue_risk", "queue risk", 3),
    ("idle_gpu_hours", "idle GPU-h", 1),
    ("idle_energy_kwh", "idle kWh", 1),
    ("busy_energy_kwh", "busy kWh", 1),
    ("recommendation", "recommendation", None),
)
#: Capacity fields a total adds up over a partition (the others are not sums: a risk, a peak
#: of the mean, advice).
TOTAL_FIELDS = ("in_use_needed", "queue_allowance", "gpus_needed", "capacity", "net_gpus",
                "shortfall_gpu_hours", "idle_gpu_hours", "idle_energy_kwh", "busy_energy_kwh")
PLANNING_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
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


TRACK_RECORD_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("model", "model", None),
    ("scope", "scope", None),
    ("plans", "plans", 0),
    ("quantile", "quantile", -1),
    ("in_use_gpu_hours", "in use GPU-h", 1),
    ("unmet_share", "unmet share", -2),
    ("idle_gpu_hours", "idle GPU-h", 1),
    ("coverage", "coverage", -1),
    ("rule_unmet_share", "yesterday's peak: unmet share", -2),
    ("rule_idle_gpu_hours", "yesterday's peak: idle GPU-h", 1),
    ("rule_coverage", "yesterday's peak: coverage", -1),
)


@dataclass(frozen=True)
class Partition:
    """Scopes that split a cluster's GPUs with no overlap.

    Attributes:
        kind: ``vcs``, ``all`` or ``gpu_types``.
        scopes: the scopes, sorted.
    """

    kind: str
    scopes: tuple[str, ...]
    shared: bool = False
    #: scopes of the partition left out of the totals, with why (no current data)
    stale: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """The partition in words: ``the 2 VCs (vc1, vc2)``."""
        names = ", ".join(self.scopes)
        if self.kind == "all":
            return ("the whole cluster (scope all; its VCs share GPUs, so they do not add up)"
                    if self.shared else "the whole cluster (scope all; it has no VCs)")
        if self.kind == "gpu_types":
            return f"the {len(self.scopes)} GPU type(s) ({names}; the cluster has no VCs)"
        return f"the {len(self.scopes)} VC(s) ({names})"

    def left_out(self, scopes: Iterable[str]) -> list[str]:
        """The other scopes (they count the same GPUs again; not the stale ones)."""
        return sorted(set(scopes) - set(self.scopes) - {s for s, _ in self.stale})


def partition(scopes: Iterable[str], capacity: Mapping[str, float | None] | None = None
              ) -> Partition:
    """The partition a total is taken over: the VCs (every scope but ``all`` and the GPU
    types), else ``all``, else the GPU types. VCs whose ``capacity`` adds up to more than the
    cluster's share GPUs (:func:`prism.capacity.shared_vcs`): then ``all``."""
    every = sorted(set(scopes))
    vcs = tuple(s for s in every if s != ALL_SCOPE and not s.startswith(GPU_TYPE_PREFIX))
    if vcs and ALL_SCOPE in every and capacity is not None and shared_vcs(capacity):
        return Partition("all", (ALL_SCOPE,), shared=True)
    if vcs:
        return Partition("vcs", vcs)
    if ALL_SCOPE in every:
        return Partition("all", (ALL_SCOPE,))
    return Partition("gpu_types", tuple(every))


def cluster_now(rows: Sequence[CapacityRow]) -> datetime | None:
    """The cluster's "now": the latest forecast origin of its scopes (a scope whose series
    stopped earlier has its own, earlier origin); ``None`` without rows."""
    return max((r.start for r in rows), default=None)


def stale_scopes(rows: Sequence[CapacityRow]) -> dict[str, str]:
    """The scopes with no current data, and why: their series stopped so long before the
    cluster's others that their plan's window has passed by the cluster's now
    (:func:`cluster_now`). The plan says so (action ``stale``, :func:`prism.capacity.
    plan_capacity` decides); their plan sizes a window of the past, so no total adds it."""
    now = cluster_now(rows)
    if now is None:
        return {}
    return {r.scope: (f"its series {r.series_id} stops before {r.start:%Y-%m-%d %H:%M}, "
                      f"{human((now - r.start).total_seconds())} before the cluster's now "
                      f"({now:%Y-%m-%d %H:%M} UTC), so its plan's window (to "
                      f"{r.end:%Y-%m-%d %H:%M}) has passed")
            for r in rows if r.action == "stale"}


def capacity_totals(rows: Sequence[CapacityRow]) -> tuple[Partition, dict[str, float | None]]:
    """The totals of :data:`TOTAL_FIELDS` over the partition of the rows' scopes (``None``
    where a row of it does not know the field, e.g. an unknown capacity), leaving out the
    scopes with no current data (:func:`stale_scopes`; the partition names them in
    ``stale`` and no longer in ``scopes``)."""
    part = partition((r.scope for r in rows), {r.scope: r.capacity for r in rows})
    old = stale_scopes(rows)
    if any(s in old for s in part.scopes):
        part = replace(part, scopes=tuple(s for s in part.scopes if s not in old),
                       stale=tuple((s, old[s]) for s in part.scopes if s in old))
    mine = [r for r in rows if r.scope in part.scopes]
    totals: dict[str, float | None] = {}
    for name in TOTAL_FIELDS:
        values = [getattr(r, name) for r in mine]
        totals[name] = (None if not values or any(v is None for v in values)
                        else float(sum(values)))
    return part, totals


def capacity_table_html(rows: Sequence[CapacityRow], *, cluster: str) -> str:
    """The capacity table: one ``<tr data-scope=...>`` per scope, cells ``data-field``, and a
    ``<tr class='total' data-total=KIND>`` footer over one partition of the scopes."""
    head = "".join(f"<th class='{'text' if d is None else 'num'}'>{escape(h)}</th>"
                   for _, h, d in CAPACITY_COLUMNS)
    body = []
    old = stale_scopes(rows)
    for r in rows:
        cells = []
        for name, _, decimals in CAPACITY_COLUMNS:
            value = getattr(r, name)
            if decimals is None:
                cells.append(f"<td class='text' data-field='{name}'>{escape(str(value))}</td>")
            else:
                cells.append(_number_cell(name, value, decimals))
        css, stale = ((f"{r.action} stale", " data-stale='true'") if r.scope in old
                      else (r.action, ""))
        body.append(f"<tr class='{escape(css)}'{stale} data-cluster='{escape(cluster)}' "
                    f"data-scope='{escape(r.scope)}'>{''.join(cells)}</tr>")
    foot = caption = ""
    if rows:
        part, totals = capacity_totals(rows)
        cells = []
        for name, _, decimals in CAPACITY_COLUMNS:
            if name == "scope":
                cells.append(f"<td class='text' data-field='scope'>total of "
                             f"{escape(_short(part))}</td>")
            elif name in totals and decimals is not None:
                cells.append(_number_cell(name, totals[name], decimals))
            else:
                cells.append(f"<td data-field='{name}'></td>")
        foot = (f"<tfoot><tr class='total' data-total='{part.kind}' "
                f"data-scopes='{escape(' '.join(part.scopes))}'>{''.join(cells)}</tr></tfoot>")
        caption = f"<caption>{escape(_total_words(part, [r.scope for r in rows]))}</caption>"
    return (f"<table class='capacity' data-cluster='{escape(cluster)}'>{caption}<thead><tr>"
            f"{head}</tr></thead><tbody>{''.join(body)}</tbody>{foot}</table>")


def planning_table_html(table: pd.DataFrame, part: Partition, scopes: Sequence[str]) -> str:
    """The cluster's one planning table: totals per plan over ``part`` only."""
    caption = _total_words(part, scopes).replace("The total row", "Every row")
    return table_html(table, PLANNING_COLUMNS, css="planning",
                      attrs={"data-partition": part.kind,
                             "data-scopes": " ".join(part.scopes)}, caption=caption)


def track_record_table_html(summary: pd.DataFrame, part: Partition,
                            scopes: Sequence[str]) -> str:
    """The track record of served plans: one ``<tr data-model data-scope>`` per model and
    scope of ``part``, and a ``<tr class='total'>`` per model over them."""
    def marks(record: dict[str, Any]) -> dict[str, str]:
        total = {"class": "total"} if record["scope"] == "total" else {}
        return {**total, "data-model": str(record["model"]), "data-scope": str(record["scope"])}

    return table_html(summary, TRACK_RECORD_COLUMNS, css="track-record",
                      attrs={"data-partition": part.kind, "data-scopes": " ".join(part.scopes)},
                      caption=_total_words(part, scopes), row_attrs=marks)


def _short(part: Partition) -> str:
    return {"vcs": "the VCs", "all": "all", "gpu_types": "the GPU types"}[part.kind]


def _total_words(part: Partition, scopes: Sequence[str]) -> str:
    text = f"The total row adds up {part.describe()}, so that each GPU counts once"
    others = part.left_out(scopes)
    if others:
        text += (f"; {', '.join(others)} count the same GPUs again and are not added")
    for scope, why in part.stale:
        text += f"; {scope} is left out: it has no current data ({why})"
    return text + "."


def table_html(frame: pd.DataFrame, columns: Sequence[tuple[str, str, int | None]], *,
               css: str, attrs: dict[str, str] | None = None, caption: str = "",
               row_attrs: Callable[[dict[str, Any]], dict[str, str]] | None = None) -> str:
    """A frame as a table (negative decimals: a share shown as a percentage; ``row_attrs``
    gives each row's attributes from its record)."""
    cols = [c for c in columns if c[0] in frame.columns]
    head = "".join(f"<th class='{'text' if d is None else 'num'}'>{escape(h)}</th>"
                   for _, h, d in cols)
    body = []
    for raw in frame.to_dict("records"):
        record = {str(k): v for k, v in raw.items()}
        cells = []
        for name, _, decimals in cols:
            value = record[name]
            if decimals is None:
                text = "" if missing(value) else str(value)
                cells.append(f"<td class='text' data-field='{name}'>{escape(text)}</td>")
            else:
                cells.append(_number_cell(name, value, decimals))
        marks = "".join(f" {k}='{escape(v)}'" for k, v in
                        (row_attrs(record) if row_attrs else {}).items())
        body.append(f"<tr{marks}>{''.join(cells)}</tr>")
    extra = "".join(f" {k}='{escape(v)}'" for k, v in (attrs or {}).items())
    top = f"<caption>{escape(caption)}</caption>" if caption else ""
    return (f"<table class='{css}'{extra}>{top}<thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _number_cell(name: str, value: Any, decimals: int) -> str:
    exact = "" if missing(value) else f" data-value='{float(value)!r}'"
    shown = fmt(value, -decimals, percent=True) if decimals < 0 else fmt(value, decimals)
    return f"<td data-field='{name}'{exact}>{shown}</td>"


# -- formatting --------------------------------------------------------------------------------
def missing(value: Any) -> bool:
    """Whether a cell is empty (``None`` or NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value: Any, decimals: int, *, percent: bool = False) -> str:
    """A number with thousands separators (a dash when missing)."""
    if missing(value):
        return "&ndash;"
    if percent:
        return f"{float(value) * 100:,.{decimals}f} %"
    return f"{float(value):,.{decimals}f}"


def pct(q: float) -> str:
    """A quantile level as a percentage without trailing zeros (0.95 -> ``95``)."""
    return f"{round(q * 100, 6):g}"


def anchor(text: str) -> str:
    """``text`` as an HTML id part."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def human(seconds: float) -> str:
    """A duration in its largest unit (``1 d``, ``12 h``)."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"
