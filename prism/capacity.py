"""Capacity planning: decisions from quantile forecasts, as pure functions over frames.

A plan answers, per scope (VC, tenant, GPU type, or ``all``) of one cluster and a forecast
window: how many GPUs the scope needs at a planning quantile (per step and at the peak), the
GPUs it has, the GPU-hours of demand expected above that capacity (shortfall) and the risk
that jobs queue, the GPU-hours of capacity expected to sit idle and the energy they draw, and
what to do (add, lend or release N GPUs). No SQL, no HTTP: :mod:`prism.usecases.capacity`
loads the forecasts and capacities and calls :func:`plan_capacity`.

**The forecast distribution.** A forecast frame (``series_id, ts, model, mean, p..``) gives
each step's quantile function at its quantile levels. Between two levels it is taken as
linear, and flat beyond the outermost levels (the mass below the lowest level sits at that
level's value, the mass above the highest at that one's). Every expectation below is the exact
integral of that piecewise-linear quantile function ``Q(u)`` over ``u`` in (0, 1):

- expected demand ``E[D] = int Q(u) du``;
- expected shortfall ``E[(D - c)+] = int max(Q(u) - c, 0) du`` (demand above capacity ``c``);
- expected idle ``E[(c - D)+] = int max(c - Q(u), 0) du``;
- queueing risk ``P(D > c)``, the share of ``u`` where ``Q(u) > c``.

A forecast with one quantile column is a point forecast: the shortfall of a step is then
simply ``max(q - c, 0)``. GPU-hours are each step's expectation times the step in hours,
summed over the window.

**What-if.** ``growth`` multiplies the demand (every quantile and the mean); reservations
(known future jobs: scope, start, end, GPUs) add their GPUs to every step they overlap, in
proportion to the overlap (a job holding 8 GPUs for half a 10-minute bucket adds 4, as
``gpus_in_use`` counts it). A reservation of a VC also counts for the cluster's ``all``
scope. Both move every quantile by the same monotone map, so the result is again a quantile
function.

**Energy.** Idle GPU-hours times the idle draw, and the expected busy GPU-hours (demand served
within capacity, ``E[min(D, c)]``) times the busy draw (:class:`Watts`, default 60 W idle and
300 W busy, a V100/A100-class board; pass the hardware's figures).

**Recommendation.** From the peak of the GPUs needed at the planning quantile against
capacity: *add* ``ceil(needed - capacity)`` when short; otherwise the spare
``floor(capacity - needed)`` GPUs are *released* when the scope did not use them either over
its recent history (``recent_peak``), and *lent* for the window (to another scope, or powered
down) when it did; *keep* when less than one GPU is spare.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError, IngestError
from prism.schema import ALL_SCOPE, SERIES_ID, TS, split_series_id

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]

#: Quantile levels a capacity plan asks the forecaster for: enough of the distribution for
#: the expectations, plus the fan chart's p50/p90/p99.
DISTRIBUTION_LEVELS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95,
                       0.975, 0.99)
#: Tolerance below which a difference of GPUs is rounding noise.
_EPS = 1e-9


# -- inputs ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Watts:
    """Power drawn by one GPU, in watts.

    Attributes:
        idle: an allocated-but-idle (or powered, unused) GPU.
        busy: a GPU running a job.
    """

    idle: float = 60.0
    busy: float = 300.0


def parse_watts(text: str) -> Watts:
    """``"60,300"`` or ``"idle=60,busy=300"`` -> :class:`Watts`.

    Raises:
        ConfigError: for anything else, or a negative figure.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    values: dict[str, float] = {}
    try:
        if len(parts) == 2 and all("=" not in p for p in parts):
            values = {"idle": float(parts[0]), "busy": float(parts[1])}
        else:
            for part in parts:
                key, sep, value = part.partition("=")
                if not sep or key.strip() not in ("idle", "busy"):
                    raise ValueError(part)
                values[key.strip()] = float(value)
    except ValueError:
        values = {}
    if set(values) != {"idle", "busy"} or any(not math.isfinite(v) or v < 0
                                              for v in values.values()):
        raise ConfigError(f"--watts-per-gpu {text!r}: give the idle and busy draw of one GPU "
                          "in watts, e.g. 60,300 or idle=60,busy=300")
    return Watts(idle=values["idle"], busy=values["busy"])


@dataclass(frozen=True)
class Reservation:
    """A known future job: ``gpus`` GPUs held in ``scope`` from ``start`` to ``end``.

    Attributes:
        scope: the VC/tenant (or ``all``).
        start / end: naive UTC times, ``start < end``.
        gpus: GPUs held (fractional allowed).
        cluster: the cluster, or ``None`` for any.
        name: a label.
        line: the line of the file it was read from, if any (for error messages).
        source: the file it was read from, if any (for error messages).
    """

    scope: str
    start: pd.Timestamp
    end: pd.Timestamp
    gpus: float
    cluster: str | None = None
    name: str = ""
    line: int | None = None
    source: str | None = None


_RESERVATION_COLUMNS = ("start", "end", "gpus", "scope")
_RESERVATION_OPTIONAL = ("cluster", "name")


def read_reservations(path: str | Path) -> list[Reservation]:
    """Read known future jobs from a CSV file: ``start, end, gpus, scope [, cluster, name]``.

    Times are ISO 8601 (a zone converts to UTC; naive times are taken as UTC, as stored).

    Raises:
        IngestError: for a missing file or column, an unknown column, or a bad row, naming
            the file, the line and the field.
    """
    p = Path(path)
    if not p.is_file():
        raise IngestError("no such file", path=str(p),
                          fix="pass --reservations with a CSV file of start,end,gpus,scope")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError("not UTF-8 text", path=str(p), fix="save the file as UTF-8") from exc
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise IngestError("empty file", path=str(p), line=1,
                          fix="write a header start,end,gpus,scope and one row per job")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in _RESERVATION_COLUMNS if c not in header]
    if missing:
        raise IngestError(f"missing column(s) {', '.join(missing)}", path=str(p), line=1,
                          column=missing[0],
                          fix="the header needs start,end,gpus,scope (cluster, name optional)")
    unknown = [c for c in header if c not in (*_RESERVATION_COLUMNS, *_RESERVATION_OPTIONAL)]
    if unknown:
        raise IngestError(f"unknown column {unknown[0]!r}", path=str(p), line=1,
                          column=unknown[0],
                          fix="use only start, end, gpus, scope, cluster and name")
    out = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise IngestError(f"{len(row)} fields where the header has {len(header)}",
                              path=str(p), line=number, fix="give every row the header's fields")
        cells = {h: c.strip() for h, c in zip(header, row, strict=True)}

        def bad(column: str, message: str, fix: str, *, _n: int = number,
                _cells: dict[str, str] = cells) -> IngestError:
            return IngestError(f"{message} (value {_cells[column]!r})", path=str(p),
                               line=_n, column=column, fix=fix)

        times = {}
        for column in ("start", "end"):
            ts = _time(cells[column])
            if ts is None:
                raise bad(column, "not a time", "write an ISO time such as 2026-01-12T08:00")
            times[column] = ts
        if times["end"] <= times["start"]:
            raise bad("end", "end is not after start", "check the row's start and end")
        try:
            gpus = float(cells["gpus"])
        except ValueError:
            gpus = float("nan")
        if not math.isfinite(gpus) or gpus < 0:
            raise bad("gpus", "not a number of GPUs >= 0", "write e.g. 8 or 0.5")
        if not cells["scope"]:
            raise bad("scope", "empty scope", "name the VC/tenant, or 'all'")
        out.append(Reservation(scope=cells["scope"], start=times["start"], end=times["end"],
                               gpus=gpus, cluster=cells.get("cluster") or None,
                               name=cells.get("name", ""), line=number, source=str(p)))
    return out


def parse_reservation(text: str) -> Reservation:
    """``"SCOPE,START,END,GPUS"`` (the API's ``reservation=`` query value) -> a reservation.

    Raises:
        ConfigError: for another shape or a bad field (named).
    """
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 4:
        raise ConfigError(f"reservation {text!r}: write SCOPE,START,END,GPUS, e.g. "
                          "vc-27a,2026-01-12T08:00,2026-01-12T20:00,8")
    scope, start, end, gpus = parts
    lo, hi = _time(start), _time(end)
    try:
        n = float(gpus)
    except ValueError:
        n = float("nan")
    if lo is None or hi is None or hi <= lo:
        raise ConfigError(f"reservation {text!r}: end must be a time after start")
    if not math.isfinite(n) or n < 0:
        raise ConfigError(f"reservation {text!r}: GPUS must be a number >= 0")
    if not scope:
        raise ConfigError(f"reservation {text!r}: name the scope (a VC, or all)")
    return Reservation(scope=scope, start=lo, end=hi, gpus=n)


def _time(text: str) -> pd.Timestamp | None:
    """An ISO time as naive UTC (a zone converts), or ``None`` when it is not one."""
    try:
        ts = pd.Timestamp(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(ts, pd.Timestamp) or pd.isna(ts):
        return None
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo else ts


def read_capacity_table(path: str | Path) -> pd.DataFrame:
    """Read a capacity table from CSV: ``scope, gpus [, cluster]`` (one row per scope).

    Raises:
        IngestError: for a missing file or column, or a bad row (file, line and field named).
    """
    p = Path(path)
    if not p.is_file():
        raise IngestError("no such file", path=str(p),
                          fix="pass --capacity with a CSV file of scope,gpus[,cluster]")
    rows = list(csv.reader(p.read_text(encoding="utf-8", errors="replace").splitlines()))
    header = [h.strip() for h in rows[0]] if rows else []
    for column in ("scope", "gpus"):
        if column not in header:
            raise IngestError(f"missing column {column!r}", path=str(p), line=1, column=column,
                              fix="the header needs scope,gpus (cluster optional)")
    extra = [h for h in header if h not in ("scope", "gpus", "cluster", "gpu_type")]
    if extra:
        raise IngestError(f"unknown column {extra[0]!r}", path=str(p), line=1, column=extra[0],
                          fix="use only scope, gpus, cluster and gpu_type")
    records = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise IngestError(f"{len(row)} fields where the header has {len(header)}",
                              path=str(p), line=number, fix="give every row the header's fields")
        cells = {h: c.strip() for h, c in zip(header, row, strict=True)}
        try:
            gpus = float(cells["gpus"])
        except ValueError:
            gpus = float("nan")
        if not math.isfinite(gpus) or gpus < 0:
            raise IngestError(f"not a number of GPUs >= 0 (value {cells['gpus']!r})",
                              path=str(p), line=number, column="gpus", fix="write e.g. 64")
        if not cells["scope"]:
            raise IngestError("empty scope", path=str(p), line=number, column="scope",
                              fix="name the VC/tenant, or 'all'")
        records.append({"cluster": cells.get("cluster") or None, "scope": cells["scope"],
                        "gpus": gpus})
    if not records:
        raise IngestError("no rows", path=str(p), line=2, fix="add one row per scope")
    frame = pd.DataFrame(records, columns=["cluster", "scope", "gpus"])
    # several GPU types of one scope add up
    return (frame.groupby(["cluster", "scope"], dropna=False, sort=True)["gpus"].sum()
            .reset_index())


# -- the distribution --------------------------------------------------------------------------
def quantile_matrix(frame: pd.DataFrame) -> tuple[FloatArray, FloatArray]:
    """The quantile levels of a forecast frame and its ``(rows, levels)`` values.

    Columns ``p{percent}`` are read in level order; a row's values are made non-decreasing
    (forecasts never cross, but a what-if or rounding must not make them).

    Raises:
        DataContractError: when the frame has no quantile column.
    """
    levels: dict[float, str] = {}
    for col in frame.columns:
        name = str(col)
        if name.startswith("p"):
            try:
                level = float(name[1:]) / 100
            except ValueError:
                continue
            if 0 < level < 1:
                levels[level] = name
    if not levels:
        raise DataContractError("a capacity plan needs quantile columns (p50, p90, ...) in the "
                                "forecast; forecast with quantiles")
    order = sorted(levels)
    values = frame[[levels[q] for q in order]].to_numpy(dtype=np.float64)
    return np.array(order), np.maximum.accumulate(values, axis=1)


def _knots(levels: FloatArray, values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Knots ``(u, q)`` of the piecewise-linear quantile function, flat tails added."""
    u = np.concatenate([[0.0], levels, [1.0]])
    q = np.concatenate([values[:, :1], values, values[:, -1:]], axis=1)
    return u, q


def expected_value(levels: Sequence[float] | FloatArray, values: FloatArray) -> FloatArray:
    """``E[D] = int Q(u) du`` of each row's piecewise-linear quantile function.

    Args:
        levels: ``(k,)`` increasing quantile levels.
        values: ``(n, k)`` quantiles, non-decreasing along each row.

    Returns:
        ``(n,)`` expectations.
    """
    u, q = _knots(np.asarray(levels, dtype=np.float64), np.asarray(values, dtype=np.float64))
    du = np.diff(u)
    out: FloatArray = ((q[:, :-1] + q[:, 1:]) / 2 * du).sum(axis=1)
    return out


def expected_above(levels: Sequence[float] | FloatArray, values: FloatArray,
                   threshold: float | FloatArray) -> FloatArray:
    """``E[(D - c)+] = int max(Q(u) - c, 0) du`` per row (exact for the piecewise-linear Q).

    Args:
        levels: ``(k,)`` increasing quantile levels.
        values: ``(n, k)`` quantiles, non-decreasing along each row.
        threshold: ``c``, one number or ``(n,)``.

    Returns:
        ``(n,)`` expected excess over ``c``.
    """
    u, q = _knots(np.asarray(levels, dtype=np.float64), np.asarray(values, dtype=np.float64))
    c = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (q.shape[0],))[:, None]
    du = np.diff(u)
    q0, q1 = q[:, :-1] - c, q[:, 1:] - c  # heights above c at the ends of each segment
    whole = np.where(q0 >= 0, (q0 + q1) / 2 * du, 0.0)  # the segment lies above c
    span = q1 - q0
    part = np.divide(np.square(np.maximum(q1, 0)) * du, 2 * span, out=np.zeros_like(span),
                     where=(q0 < 0) & (span > 0))  # c cuts the segment: a triangle above it
    out: FloatArray = (whole + part).sum(axis=1)
    return out


def expected_below(levels: Sequence[float] | FloatArray, values: FloatArray,
                   threshold: float | FloatArray) -> FloatArray:
    """``E[(c - D)+] = int max(c - Q(u), 0) du`` per row (idle capacity ``c`` leaves).

    Uses ``E[(c - D)+] = E[(D - c)+] - E[D] + c``.
    """
    c = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (np.shape(values)[0],))
    out: FloatArray = np.maximum(
        expected_above(levels, values, c) - expected_value(levels, values) + c, 0.0)
    return out


def exceed_probability(levels: Sequence[float] | FloatArray, values: FloatArray,
                       threshold: float | FloatArray) -> FloatArray:
    """``P(D > c)`` per row: the share of ``u`` in (0, 1) where ``Q(u) > c``.

    Returns:
        ``(n,)`` probabilities (1 when ``c`` is below the lowest quantile, 0 at or above the
        highest).
    """
    u, q = _knots(np.asarray(levels, dtype=np.float64), np.asarray(values, dtype=np.float64))
    c = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (q.shape[0],))[:, None]
    du = np.diff(u)
    q0, q1 = q[:, :-1], q[:, 1:]
    span = q1 - q0
    below = np.where(span > 0,
                     np.clip(np.divide(c - q0, span, out=np.zeros_like(span), where=span > 0),
                             0.0, 1.0),
                     (q0 <= c).astype(np.float64))  # share of each segment with Q(u) <= c
    out: FloatArray = np.clip(1.0 - (below * du).sum(axis=1), 0.0, 1.0)
    return out


def quantile_at(levels: Sequence[float] | FloatArray, values: FloatArray,
                level: float) -> FloatArray:
    """Each row's quantile at ``level`` (linear between levels, flat beyond them)."""
    lv = np.asarray(levels, dtype=np.float64)
    vals = np.asarray(values, dtype=np.float64)
    j = int(np.searchsorted(lv, level))
    if j < len(lv) and abs(lv[j] - level) < 1e-12:
        return vals[:, j].copy()
    out: FloatArray = np.array([np.interp(level, lv, row) for row in vals])
    return out


# -- what-if -----------------------------------------------------------------------------------
def reservation_load(reservations: Iterable[Reservation], *, scope: str, ts: pd.DatetimeIndex,
                     freq_s: int, cluster: str | None = None) -> FloatArray:
    """GPUs the reservations hold in each bucket ``[ts, ts + freq)`` of ``scope``.

    A reservation counts in proportion to its overlap with the bucket; those of every scope
    count for ``all``; those naming another cluster are left out.
    """
    start = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    end = start + int(freq_s) * 10**9
    load = np.zeros(len(ts))
    for r in reservations:
        if r.cluster is not None and cluster is not None and r.cluster != cluster:
            continue
        if r.scope != scope and scope != ALL_SCOPE:
            continue
        lo, hi = pd.Timestamp(r.start).value, pd.Timestamp(r.end).value
        overlap = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0, None)
        load += r.gpus * overlap / (int(freq_s) * 10**9)
    return load


def apply_what_if(forecast: pd.DataFrame, *, freq_s: int, growth: float = 1.0,
                  reservations: Sequence[Reservation] = ()) -> pd.DataFrame:
    """The forecast under a growth factor plus known future jobs (see the module docstring).

    Args:
        forecast: the forecast contract of one cluster's series.
        freq_s: its step in seconds.
        growth: multiplies the demand (``1.1``: 10 % more).
        reservations: known future jobs added on top.

    Returns:
        A copy with ``mean`` and every ``p..`` column moved, plus ``reserved`` (the GPUs the
        reservations hold in each step).

    Raises:
        ConfigError: for a growth factor that is not a positive number.
    """
    if not math.isfinite(growth) or growth <= 0:
        raise ConfigError(f"growth {growth!r} must be a positive factor such as 1.1")
    out = forecast.copy()
    qcols = [c for c in out.columns if str(c).startswith("p") and _is_level(str(c))]
    reserved = np.zeros(len(out))
    for sid, index in out.groupby(SERIES_ID, sort=False).indices.items():
        cluster, scope, _ = split_series_id(str(sid))
        reserved[index] = reservation_load(
            reservations, scope=scope, ts=pd.DatetimeIndex(out[TS].to_numpy()[index]),
            freq_s=freq_s, cluster=cluster)
    for col in ["mean", *qcols]:
        out[col] = out[col].to_numpy(dtype=np.float64) * growth + reserved
    out["reserved"] = reserved
    return out


def _is_level(name: str) -> bool:
    try:
        return 0 < float(name[1:]) / 100 < 1
    except ValueError:
        return False


# -- decisions ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Recommendation:
    """What to do with a scope's capacity over the window.

    Attributes:
        action: ``add``, ``lend``, ``release``, ``release+lend``, ``keep`` or ``unknown``.
        add_gpus / lend_gpus / release_gpus: whole GPUs.
        text: the advice in words.
    """

    action: str
    add_gpus: int
    lend_gpus: int
    release_gpus: int
    text: str


def recommend(needed: float, capacity: float | None, *,
              recent_peak: float | None = None) -> Recommendation:
    """Advice from the GPUs needed at the planning quantile against capacity.

    Args:
        needed: peak GPUs needed over the window.
        capacity: GPUs installed (``None``: unknown).
        recent_peak: the scope's peak demand over its recent history; spare GPUs above both
            are released, the rest lent for the window. ``None``: spare GPUs are lent.
    """
    if capacity is None:
        return Recommendation("unknown", 0, 0, 0, "capacity unknown: pass --capacity FILE or "
                              "ingest a capacity-csv file for this scope")
    if needed > capacity + _EPS:
        add = math.ceil(needed - capacity - _EPS)
        return Recommendation("add", add, 0, 0, f"add {add} GPUs")
    spare = math.floor(capacity - needed + _EPS)
    if spare < 1:
        return Recommendation("keep", 0, 0, 0, "keep")
    release = 0
    if recent_peak is not None:
        release = max(0, min(spare, math.floor(capacity - max(needed, recent_peak) + _EPS)))
    lend = spare - release
    if release and lend:
        return Recommendation("release+lend", 0, lend, release,
                              f"release {release} GPUs and lend {lend} more for the window")
    if release:
        return Recommendation("release", 0, 0, release, f"release {release} GPUs")
    return Recommendation("lend", 0, lend, 0, f"lend {lend} GPUs for the window")


@dataclass(frozen=True)
class CapacityRow:
    """One scope's plan over the window.

    Attributes:
        cluster / scope / series_id / model: what was forecast, with which model.
        start / end: the window (first step, and the end of the last one).
        quantile: the planning quantile.
        gpus_needed: peak over the window of the demand at ``quantile`` (what-if included).
        mean_peak: peak of the mean forecast.
        demand_gpu_hours: expected GPU-hours of demand over the window.
        reserved_gpu_hours: GPU-hours the reservations add.
        growth: the growth factor applied.
        capacity: GPUs installed (``None``: unknown).
        capacity_source: where ``capacity`` came from (``file``, ``store``, ``samples``).
        shortfall_gpu_hours: expected GPU-hours of demand above capacity.
        queue_risk: the largest per-step probability that demand exceeds capacity.
        queue_hours: expected hours with demand above capacity.
        idle_gpu_hours: expected GPU-hours of capacity left idle.
        idle_energy_kwh: what the idle GPUs draw over the window.
        busy_energy_kwh: what the busy GPUs draw (demand served within capacity).
        action / add_gpus / lend_gpus / release_gpus / recommendation: the advice.
    """

    cluster: str
    scope: str
    series_id: str
    model: str
    start: datetime
    end: datetime
    quantile: float
    gpus_needed: float
    mean_peak: float
    demand_gpu_hours: float
    reserved_gpu_hours: float
    growth: float
    capacity: float | None
    capacity_source: str | None
    shortfall_gpu_hours: float | None
    queue_risk: float | None
    queue_hours: float | None
    idle_gpu_hours: float | None
    idle_energy_kwh: float | None
    busy_energy_kwh: float | None
    action: str
    add_gpus: int
    lend_gpus: int
    release_gpus: int
    recommendation: str


@dataclass(frozen=True)
class CapacityPlan:
    """A cluster's plan: one row per scope, the per-step needs, the what-if forecast.

    Attributes:
        cluster: the cluster.
        quantile: the planning quantile.
        freq_s: the step of the forecasts in seconds.
        watts: the power figures used.
        rows: one :class:`CapacityRow` per scope, sorted by scope.
        steps: ``series_id, scope, ts, needed, mean, reserved, capacity, p_exceed``: the
            GPUs needed at the quantile in each step.
        forecast: the forecast with the what-if applied (the contract, plus ``reserved``).
    """

    cluster: str
    quantile: float
    freq_s: int
    watts: Watts
    rows: tuple[CapacityRow, ...]
    steps: pd.DataFrame = field(repr=False)
    forecast: pd.DataFrame = field(repr=False)

    def table(self) -> pd.DataFrame:
        """The rows as a frame (one per scope)."""
        return pd.DataFrame([r.__dict__ for r in self.rows],
                            columns=list(CapacityRow.__dataclass_fields__))

    def records(self, *, steps: bool = False) -> list[dict[str, Any]]:
        """The rows as plain dicts (times as ``datetime``), each with its ``steps``
        (``ts, needed, mean, reserved, p_exceed``) when asked."""
        out = []
        for row in self.rows:
            record: dict[str, Any] = dict(row.__dict__)
            if steps:
                mine = self.steps[self.steps[SERIES_ID] == row.series_id]
                record["steps"] = [
                    {"ts": pd.Timestamp(t).to_pydatetime(), "needed": float(n),
                     "mean": float(m), "reserved": float(r),
                     "p_exceed": None if math.isnan(p) else float(p)}
                    for t, n, m, r, p in zip(mine[TS], mine["needed"], mine["mean"],
                                             mine["reserved"], mine["p_exceed"], strict=True)]
            out.append(record)
        return out


def plan_capacity(
    forecast: pd.DataFrame,
    capacity: Mapping[str, float | None],
    *,
    quantile: float,
    freq_s: int,
    watts: Watts | None = None,
    growth: float = 1.0,
    reservations: Sequence[Reservation] = (),
    recent_peak: Mapping[str, float] | None = None,
    capacity_source: Mapping[str, str] | None = None,
) -> CapacityPlan:
    """Plan each scope's capacity from its quantile forecast (see the module docstring).

    Args:
        forecast: the forecast contract (``series_id, ts, model, mean, p..``) of one demand
            series per scope, all of one cluster.
        capacity: scope -> GPUs installed (a scope absent or ``None``: unknown).
        quantile: the planning quantile in (0, 1); interpolated when it is not a column.
        freq_s: the forecast step in seconds.
        watts: idle and busy draw of one GPU (default :class:`Watts`).
        growth: demand growth factor.
        reservations: known future jobs added on top of the forecast.
        recent_peak: scope -> its peak demand over recent history (for release vs lend).
        capacity_source: scope -> where its capacity came from (shown in the table).

    Returns:
        The :class:`CapacityPlan`.

    Raises:
        DataContractError: for a frame without quantile columns, without rows, or of several
            clusters, or with two series for one scope.
        ConfigError: for a quantile outside (0, 1), a bad growth factor or step.
    """
    if not 0 < quantile < 1:
        raise ConfigError(f"quantile {quantile!r} must be between 0 and 1, e.g. 0.95")
    if freq_s <= 0:
        raise ConfigError(f"freq_s must be positive, got {freq_s}")
    if forecast.empty:
        raise DataContractError("the forecast has no rows; nothing to plan")
    watts = watts or Watts()
    ids = list(dict.fromkeys(forecast[SERIES_ID].astype(str)))
    parts = [split_series_id(s) for s in ids]
    clusters = sorted({c for c, _, _ in parts})
    if len(clusters) != 1:
        raise DataContractError(f"a capacity plan covers one cluster; the forecast has "
                                f"{', '.join(clusters)}: plan each on its own")
    scopes = [s for _, s, _ in parts]
    if len(set(scopes)) != len(scopes):
        raise DataContractError("the forecast has two demand series for one scope; give one "
                                "series per scope (gpu_demand or gpus_in_use)")
    cluster = clusters[0]
    adjusted = apply_what_if(forecast.sort_values([SERIES_ID, TS], kind="stable")
                             .reset_index(drop=True), freq_s=freq_s, growth=growth,
                             reservations=reservations)
    known = {r.scope for r in reservations if r.cluster in (None, cluster)} - {ALL_SCOPE}
    for scope in sorted(known - set(scopes)):
        logger.warning("reservations of scope %r: no demand series of it in %s; they count "
                       "only for 'all'", scope, cluster)
    step_h = freq_s / 3600.0
    rows: list[CapacityRow] = []
    steps: list[pd.DataFrame] = []
    for sid, group in adjusted.groupby(SERIES_ID, sort=True):
        _, scope, _ = split_series_id(str(sid))
        levels, values = quantile_matrix(group)
        needed = quantile_at(levels, values, quantile)
        cap = capacity.get(scope)
        cap = None if cap is None or not math.isfinite(float(cap)) else float(cap)
        demand = expected_value(levels, values)
        p_exceed = (exceed_probability(levels, values, cap) if cap is not None
                    else np.full(len(group), np.nan))
        ts = pd.DatetimeIndex(group[TS].to_numpy())
        peak = float(needed.max())
        advice = recommend(peak, cap, recent_peak=(recent_peak or {}).get(scope))
        shortfall = idle = risk = hours = idle_kwh = busy_kwh = None
        if cap is not None:
            shortfall = float(expected_above(levels, values, cap).sum() * step_h)
            idle = float(expected_below(levels, values, cap).sum() * step_h)
            risk = float(p_exceed.max())
            hours = float(p_exceed.sum() * step_h)
            busy = float(demand.sum() * step_h) - shortfall  # E[min(D, c)]
            idle_kwh = idle * watts.idle / 1000.0
            busy_kwh = max(busy, 0.0) * watts.busy / 1000.0
        rows.append(CapacityRow(
            cluster=cluster, scope=scope, series_id=str(sid), model=str(group["model"].iloc[0]),
            start=ts[0].to_pydatetime(),
            end=(ts[-1] + pd.Timedelta(seconds=freq_s)).to_pydatetime(),
            quantile=float(quantile), gpus_needed=peak, mean_peak=float(group["mean"].max()),
            demand_gpu_hours=float(demand.sum() * step_h),
            reserved_gpu_hours=float(group["reserved"].sum() * step_h), growth=float(growth),
            capacity=cap, capacity_source=(capacity_source or {}).get(scope) if cap is not None
            else None,
            shortfall_gpu_hours=shortfall, queue_risk=risk, queue_hours=hours,
            idle_gpu_hours=idle, idle_energy_kwh=idle_kwh, busy_energy_kwh=busy_kwh,
            action=advice.action, add_gpus=advice.add_gpus, lend_gpus=advice.lend_gpus,
            release_gpus=advice.release_gpus, recommendation=advice.text))
        steps.append(pd.DataFrame({
            SERIES_ID: str(sid), "scope": scope, TS: ts, "needed": needed,
            "mean": group["mean"].to_numpy(), "reserved": group["reserved"].to_numpy(),
            "capacity": np.nan if cap is None else cap, "p_exceed": p_exceed}))
    return CapacityPlan(cluster=cluster, quantile=float(quantile), freq_s=int(freq_s),
                        watts=watts, rows=tuple(rows),
                        steps=pd.concat(steps, ignore_index=True), forecast=adjusted)
