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

**Sizing.** A scope needs the peak over the window of its GPUs in use (``gpus_in_use``) at the
planning quantile, raised where it is lower to the *day-kind floor* (what the last 24 h used
and, for a series with a week, the latest complete day of the same kind, weekday or weekend:
Monday is sized for the Friday before; :mod:`prism.day_kind`), plus a *queue allowance*: the
mean over the window of the mean forecast of its queued GPUs (``gpus_pending``, or
``gpu_demand`` minus ``gpus_in_use``), at most the queue's peak over recent history. Where
the store holds the jobs, that forecast is scaled to what the queue can start: the share of the
recent queued GPU-hours in jobs no larger than the scope (:mod:`prism.queue_fit`). The queue is
never added at an upper quantile: queued jobs start as GPUs free up, they are not one spike
on top of the in-use peak. Each row says so in ``reason``.

**Advice.** VCs short at the quantile borrow the spare GPUs of the others first (:class:`Move`:
"lend 40 GPUs from vc-he9 to vc-27a for the next 24 h"); only what no VC can lend is *added*,
and spare GPUs nobody borrows, unused over the recent history too, are *released*: both for the
cluster (the ``all`` row), and the VCs' net changes add up to it (:func:`advise`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.capacity_inputs import (
    Reservation,
    Watts,
    apply_what_if,
    parse_reservation,
    parse_watts,
    read_capacity_table,
    read_reservations,
    reservation_load,
)
from prism.day_kind import FLOOR, FLOOR_FROM
from prism.errors import ConfigError, DataContractError
from prism.queue_fit import QueueFit, queue_allowance
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX, SERIES_ID, TS, split_series_id

__all__ = [
    "DISTRIBUTION_LEVELS", "CapacityPlan", "CapacityRow", "Move", "Recommendation",
    "Reservation", "Watts", "advise", "apply_what_if", "exceed_probability", "expected_above",
    "expected_below", "expected_value", "parse_reservation", "parse_watts", "plan_capacity",
    "quantile_at", "quantile_matrix", "read_capacity_table", "read_reservations", "recommend",
    "reservation_load", "shared_vcs", "tidy", "gpus_text",
]

#: A scope told to release GPUs that used under this share of them recently gets a check in
#: its reason: a sampled trace against the whole cluster's node list looks like this.
_BARELY = 0.05

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]

#: Quantile levels a capacity plan asks the forecaster for: enough of the distribution for
#: the expectations, plus the fan chart's p50/p90/p99.
DISTRIBUTION_LEVELS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95,
                       0.975, 0.99)
#: Tolerance below which a difference of GPUs is rounding noise.
_EPS = 1e-9


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
    with np.errstate(over="ignore"):  # a span of 1e-300 is a step: +-inf clips to 1 or 0
        share = np.divide(c - q0, span, out=np.zeros_like(span), where=span > 0)
    below = np.where(span > 0, np.clip(share, 0.0, 1.0),
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


# -- decisions ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Move:
    """GPUs one VC lends another for the window.

    Attributes:
        from_scope / to_scope: the lending and the borrowing VC.
        gpus: whole GPUs moved.
        hours: the window, in hours.
    """

    from_scope: str
    to_scope: str
    gpus: int
    hours: float

    @property
    def text(self) -> str:
        """The move in words."""
        return (f"lend {self.gpus} GPUs from {self.from_scope} to {self.to_scope} for the next "
                f"{self.hours:g} h")


@dataclass(frozen=True)
class Recommendation:
    """What to do with a scope's capacity over the window.

    Attributes:
        action: the cluster (``all``): ``add``, ``release``, ``keep`` or ``unknown``; a VC:
            ``borrow``, ``lend``, ``add`` / ``release`` (its part of the cluster's),
            ``borrow+add``, ``lend+release``, ``keep`` or ``unknown``; ``stale``: a scope
            whose series stopped before its plan's window (no advice).
        add_gpus / release_gpus: GPUs added or released (a VC: its part of the cluster's).
        lend_gpus / borrow_gpus: GPUs a VC lends or borrows for the window.
        net_gpus: the change of the scope's GPUs; the VCs' add up to the cluster's.
        text: the advice in words.
    """

    action: str
    add_gpus: int
    lend_gpus: int
    release_gpus: int
    text: str
    borrow_gpus: int = 0
    net_gpus: int = 0


def recommend(needed: float, capacity: float | None, *,
              recent_peak: float | None = None) -> Recommendation:
    """Advice for a scope that plans on its own (no VCs to move GPUs between).

    Args:
        needed: peak GPUs needed over the window.
        capacity: GPUs installed (``None``: unknown).
        recent_peak: the scope's peak use over its recent history: spare GPUs above both it
            and ``needed`` are released, the others kept. ``None``: spare GPUs are kept.
    """
    if capacity is None:
        return Recommendation("unknown", 0, 0, 0, "capacity unknown: pass --capacity FILE or "
                              "ingest a capacity-csv file or the cluster's node list "
                              "(node-list) for this scope")
    if needed > capacity + _EPS:
        add = math.ceil(needed - capacity - _EPS)
        return Recommendation("add", add, 0, 0, f"add {add} GPUs", net_gpus=add)
    release = 0
    if recent_peak is not None:
        release = max(0, math.floor(capacity - max(needed, recent_peak) + _EPS))
    if release:
        return Recommendation("release", 0, 0, release, f"release {release} GPUs",
                              net_gpus=-release)
    return Recommendation("keep", 0, 0, 0, "keep")


def shared_vcs(capacity: Mapping[str, float | None]) -> tuple[float, float] | None:
    """``(the VCs' capacities added up, the cluster's)`` where that sum is more than the
    cluster has: the VCs share GPUs (Slurm partitions over the same nodes), so neither moves
    between them nor their sum mean anything. ``None`` where they split the cluster."""
    total = capacity.get(ALL_SCOPE)
    vcs = [float(c) for s, c in capacity.items() if c is not None and s != ALL_SCOPE
           and not s.startswith(GPU_TYPE_PREFIX)]
    if total is None or not vcs or sum(vcs) <= float(total) + _EPS:
        return None
    return sum(vcs), float(total)


def advise(needed: Mapping[str, float], capacity: Mapping[str, float | None], *, hours: float,
           recent_peak: Mapping[str, float] | None = None
           ) -> tuple[dict[str, Recommendation], tuple[Move, ...]]:
    """Advice for every scope of one cluster: moves between VCs first, then the cluster's net.

    VCs short at the planning quantile (``ceil(needed - capacity)``) borrow the spare GPUs
    (``floor(capacity - needed)``) of the others, the largest shortage from the largest spare
    first. What no VC can lend, the cluster adds; spare GPUs nobody borrows and that the VC
    did not use over its recent history either are released. Either way, the VCs' net changes
    add up to the cluster's (its ``add`` or ``release``). Without a VC of known capacity, or
    with VCs that share GPUs (:func:`shared_vcs`), each scope plans on its own
    (:func:`recommend`). A cluster of one GPU type gives its GPU-type scope the cluster's
    advice.

    Args:
        needed: scope -> peak GPUs needed over the window.
        capacity: scope -> GPUs installed (absent or ``None``: unknown).
        hours: the window, in hours (the length of the moves).
        recent_peak: scope -> peak GPUs in use over recent history (the release guard).

    Returns:
        ``(scope -> advice, moves)``.
    """
    peaks = recent_peak or {}
    out = {s: recommend(n, capacity.get(s), recent_peak=peaks.get(s)) for s, n in needed.items()}
    vcs = sorted(s for s in needed if s != ALL_SCOPE and not s.startswith(GPU_TYPE_PREFIX)
                 and capacity.get(s) is not None)
    if not vcs or shared_vcs(capacity) is not None:
        return out, ()
    cap = {s: float(capacity[s] or 0.0) for s in vcs}
    short = {s: math.ceil(needed[s] - cap[s] - _EPS) for s in vcs if needed[s] > cap[s] + _EPS}
    spare = {s: math.floor(cap[s] - needed[s] + _EPS) for s in vcs if s not in short}
    moves: list[Move] = []
    lent = dict.fromkeys(vcs, 0)
    got = dict.fromkeys(vcs, 0)
    for taker in sorted(short, key=lambda s: (-short[s], s)):
        while got[taker] < short[taker]:
            free = {s: spare[s] - lent[s] for s in spare if spare[s] - lent[s] > 0}
            if not free:
                break
            giver = min(free, key=lambda s: (-free[s], s))
            gpus = min(free[giver], short[taker] - got[taker])
            moves.append(Move(giver, taker, gpus, float(hours)))
            lent[giver] += gpus
            got[taker] += gpus
    add = {s: short[s] - got[s] for s in short}
    release = {s: max(0, min(spare[s] - lent[s], math.floor(
        cap[s] - max(needed[s], peaks.get(s, cap[s])) + _EPS))) for s in spare}
    for s in vcs:
        out[s] = _vc_advice(s, got[s], lent[s], add.get(s, 0), release.get(s, 0),
                            [m for m in moves if s in (m.from_scope, m.to_scope)])
    total_add, total_release = sum(add.values()), sum(release.values())
    moved = sum(m.gpus for m in moves)
    after = (f" after {len(moves)} move(s) of {moved} GPUs between VCs" if moves else "")
    if total_add:
        cluster = Recommendation("add", total_add, 0, 0, f"add {total_add} GPUs{after}",
                                 net_gpus=total_add)
    elif total_release:
        cluster = Recommendation("release", 0, 0, total_release,
                                 f"release {total_release} GPUs{after}",
                                 net_gpus=-total_release)
    else:
        cluster = Recommendation("keep", 0, 0, 0, f"keep{after}")
    if ALL_SCOPE in needed:
        out[ALL_SCOPE] = cluster
    types = [s for s in needed if s.startswith(GPU_TYPE_PREFIX)]
    if len(types) == 1 and capacity.get(types[0]) is not None:
        kind = types[0][len(GPU_TYPE_PREFIX):]
        out[types[0]] = replace(cluster, text=f"all the cluster's GPUs are {kind}: "
                                f"{cluster.text}")
    return out, tuple(moves)


def _vc_advice(scope: str, got: int, lent: int, add: int, release: int,
               moves: Sequence[Move]) -> Recommendation:
    """One VC's part: its moves, then its share of the cluster's add or release."""
    parts, words = [], []
    if got:
        parts.append("borrow")
        givers = ", ".join(f"{m.gpus} from {m.from_scope}" for m in moves if m.to_scope == scope)
        words.append(f"borrow {got} GPUs ({givers})")
    if lent:
        parts.append("lend")
        takers = ", ".join(f"{m.gpus} to {m.to_scope}" for m in moves if m.from_scope == scope)
        words.append(f"lend {lent} GPUs ({takers}) for the next {moves[0].hours:g} h")
    if add:
        parts.append("add")
        words.append(f"take {add} of the GPUs the cluster adds")
    if release:
        parts.append("release")
        words.append(f"give up {release} GPUs (part of the cluster's release)")
    return Recommendation("+".join(parts) or "keep", add, lent, release,
                          "; ".join(words) or "keep", borrow_gpus=got,
                          net_gpus=got - lent + add - release)


def _types_apart(advice: Mapping[str, Recommendation], known: Sequence[str],
                 vcs: bool) -> dict[str, str]:
    """GPU type -> the reason's words where the types' own advice (each planned on all its
    GPUs) does not add up to the cluster's, the net of the VCs' plans (empty where it does)."""
    types = [s for s in known if s.startswith(GPU_TYPE_PREFIX)]
    if not vcs or len(types) < 2 or ALL_SCOPE not in advice:
        return {}
    mine, cluster = sum(advice[t].net_gpus for t in types), advice[ALL_SCOPE].net_gpus
    if mine == cluster:
        return {}
    return dict.fromkeys(types, (
        f"; planned on its own, on all the cluster's GPUs of this type together: the GPU "
        f"types' net changes ({mine:+d} in all) do not add up to the cluster's ({cluster:+d}), "
        "which adds each VC's own peak and moves GPUs between VCs whatever their type; buy "
        "by type from these rows, which assume a type's GPUs serve all its VCs"))


@dataclass(frozen=True)
class CapacityRow:
    """One scope's plan over the window.

    Attributes:
        cluster / scope / series_id / model: what was forecast, with which model.
        start / end: the window (first step, and the end of the last one).
        quantile: the planning quantile.
        gpus_needed: ``in_use_needed + queue_allowance`` (what-if included).
        in_use_needed: peak over the window of the GPUs in use at ``quantile``.
        queue_allowance: GPUs for the queue: the mean queued GPUs forecast over the window,
            at most the queue's recent peak (0 without a queue series).
        mean_peak: peak of the mean forecast of GPUs in use.
        demand_gpu_hours: expected GPU-hours of demand over the window.
        reserved_gpu_hours: GPU-hours the reservations add.
        growth: the growth factor applied.
        capacity: GPUs installed (``None``: unknown).
        capacity_source: where ``capacity`` came from (``file``, ``store``, ``samples``,
            ``cluster``: the cluster's, of one GPU type).
        headroom: ``capacity - gpus_needed`` (negative: short).
        shortfall_gpu_hours: expected GPU-hours of demand above capacity.
        queue_risk: the largest per-step probability that demand exceeds capacity.
        queue_hours: expected hours with demand above capacity.
        idle_gpu_hours: expected GPU-hours of capacity left idle.
        idle_energy_kwh: what the idle GPUs draw over the window.
        busy_energy_kwh: what the busy GPUs draw (demand served within capacity).
        action / add_gpus / lend_gpus / release_gpus / borrow_gpus / net_gpus /
            recommendation: the advice (:class:`Recommendation`).
        reason: how ``gpus_needed`` was sized, and why the advice.
    """

    cluster: str
    scope: str
    series_id: str
    model: str
    start: datetime
    end: datetime
    quantile: float
    gpus_needed: float
    in_use_needed: float
    queue_allowance: float
    mean_peak: float
    demand_gpu_hours: float
    reserved_gpu_hours: float
    growth: float
    capacity: float | None
    capacity_source: str | None
    headroom: float | None
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
    borrow_gpus: int
    net_gpus: int
    recommendation: str
    reason: str


@dataclass(frozen=True)
class CapacityPlan:
    """A cluster's plan: one row per scope, the moves, the per-step needs, the forecast.

    Attributes:
        cluster: the cluster.
        quantile: the planning quantile.
        freq_s: the step of the forecasts in seconds.
        watts: the power figures used.
        rows: one :class:`CapacityRow` per scope, sorted by scope.
        steps: ``series_id, scope, ts, needed, mean, reserved, capacity, p_exceed``: the
            GPUs needed (in use at the quantile plus the queue allowance) in each step.
        forecast: the forecast of GPUs in use with the what-if applied (plus ``reserved``).
        moves: GPUs lent between VCs for the window, before anything is added.
    """

    cluster: str
    quantile: float
    freq_s: int
    watts: Watts
    rows: tuple[CapacityRow, ...]
    steps: pd.DataFrame = field(repr=False)
    forecast: pd.DataFrame = field(repr=False)
    moves: tuple[Move, ...] = ()

    def table(self) -> pd.DataFrame:
        """The rows as a frame (one per scope)."""
        return pd.DataFrame([r.__dict__ for r in self.rows],
                            columns=list(CapacityRow.__dataclass_fields__))

    def move_records(self) -> list[dict[str, Any]]:
        """The moves as plain dicts (``from_scope, to_scope, gpus, hours, text``)."""
        return [{**m.__dict__, "text": m.text} for m in self.moves]

    def only(self, scope: str) -> CapacityPlan:
        """The plan of one scope (its row, steps and forecast, and the moves it takes part in)."""
        return replace(
            self, rows=tuple(r for r in self.rows if r.scope == scope),
            steps=self.steps[self.steps["scope"] == scope].reset_index(drop=True),
            forecast=self.forecast[self.forecast[SERIES_ID].map(
                lambda s: split_series_id(str(s))[1] == scope)].reset_index(drop=True),
            moves=tuple(m for m in self.moves if scope in (m.from_scope, m.to_scope)))

    def records(self, *, steps: bool = False) -> list[dict[str, Any]]:
        """The rows as plain dicts (times as ``datetime``), each with its ``steps``
        (``ts, needed, mean, reserved, p_exceed``) when asked."""
        out = []
        for row in self.rows:
            record: dict[str, Any] = {k: tidy(v) for k, v in row.__dict__.items()}
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


def gpus_text(value: float, against: float | None, sign: str = "") -> str:
    """GPUs to one decimal, or to as many as it takes not to read as ``against`` where they
    differ by more than rounding noise: 16.01 GPUs needed against 16 installed (an added GPU)
    is "16.01", not "16.0", and a headroom of -0.004 is "-0.004", not "-0.0"."""
    digits = 1
    while (against is not None and digits < 9 and abs(value - against) > _EPS
           and round(value, digits) == round(against, digits)):
        digits += 1
    return f"{value + 0.0:{sign},.{digits}f}"


def tidy(value: Any) -> Any:
    """A float as an output shows it: rounded to 9 decimals, so that float noise (a quantile
    of 0.9500000000000001, 6e-14 idle GPU-hours) reads as the number it is; others as given."""
    if isinstance(value, float) and math.isfinite(value):
        return round(value, 9) + 0.0  # + 0.0: no -0.0
    return value


def _floored(level: FloatArray, mine: pd.DataFrame | None, ts: pd.DatetimeIndex,
             growth: float, reserved: FloatArray) -> tuple[FloatArray, str]:
    """``level`` raised to the day-kind floor of its steps (``mine``: the series' rows of
    ``floor``; times ``growth``, plus what the reservations add there), and the reason's
    words for it (empty where the floor does not raise the peak)."""
    if mine is None or mine.empty:
        return level, ""
    at = pd.DatetimeIndex(mine[TS])
    lows = pd.Series(mine[FLOOR].to_numpy(dtype=np.float64), index=at).reindex(ts).to_numpy()
    lows = lows * growth + reserved
    raised = np.fmax(level, lows)
    if not raised.max() > level.max() + _EPS:
        return raised, ""
    where = pd.Series(mine[FLOOR_FROM].to_numpy(), index=at).reindex(ts).to_numpy()
    source = where[int(np.nanargmax(lows))]
    grown = "" if growth == 1.0 else f" times the growth {growth:g}"
    grown += " plus the reservations" if reserved.any() else ""
    kind = ("" if source == "the last 24 h" else ", the latest day of its kind: this scope's "
            "weekends and weekdays differ")
    return raised, (f", raised to {raised.max():,.1f} by the day-kind floor (the peak of "
                    f"{source}{grown}{kind})")


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
    queue: pd.DataFrame | None = None,
    queue_peak: Mapping[str, float] | None = None,
    queue_fit: Mapping[str, QueueFit] | None = None,
    scope_quantiles: Mapping[str, float] | None = None,
    floor: pd.DataFrame | None = None,
) -> CapacityPlan:
    """Plan each scope's capacity from its quantile forecast (see the module docstring).

    A scope needs the peak over the window of its GPUs in use at ``quantile`` plus a queue
    allowance: the mean over the window of the mean forecast of its queued GPUs (never an
    upper quantile: a queue drains as GPUs free up), times the share of its recent queue in
    jobs that fit the scope where the jobs are known, at most the queue's recent peak. The
    shortfall, idle and risk figures integrate the in-use distribution shifted by that
    allowance. Then :func:`advise`.

    Args:
        forecast: the forecast contract (``series_id, ts, model, mean, p..``) of one series of
            GPUs in use per scope (or of demand, where a scope has no such series), all of
            one cluster.
        capacity: scope -> GPUs installed (a scope absent or ``None``: unknown).
        quantile: the planning quantile in (0, 1); interpolated when it is not a column.
        freq_s: the forecast step in seconds.
        watts: idle and busy draw of one GPU (default :class:`Watts`).
        growth: demand growth factor (of the GPUs in use and of the queue).
        reservations: known future jobs added on top of the forecast.
        recent_peak: scope -> its peak use over recent history (the release guard).
        capacity_source: scope -> where its capacity came from (shown in the table).
        queue: ``series_id, mean`` of the queued GPUs forecast per scope, over the window.
        queue_peak: scope -> the peak of its queue over recent history (caps the allowance).
        queue_fit: scope -> the share of its recent queue in jobs that fit it
            (:mod:`prism.queue_fit`); the queued-GPU forecast is scaled by it before the cap.
        scope_quantiles: scope -> its own planning quantile (e.g. chosen from the planning
            backtest); the others plan at ``quantile``.
        floor: ``series_id, ts, floor, floor_from``: the least GPUs in use to size each step
            for (:func:`prism.day_kind.day_kind_floor`: what yesterday and the latest day of
            its kind used), times ``growth`` plus the reservations; the quantile's level is
            raised to it where it is lower.

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
        raise DataContractError("the forecast has two series for one scope; give one series "
                                "per scope (gpus_in_use, or gpu_demand)")
    cluster = clusters[0]
    adjusted = apply_what_if(forecast.sort_values([SERIES_ID, TS], kind="stable")
                             .reset_index(drop=True), freq_s=freq_s, growth=growth,
                             reservations=reservations)
    known = {r.scope for r in reservations if r.cluster in (None, cluster)} - {ALL_SCOPE}
    for scope in sorted(known - set(scopes)):
        logger.warning("reservations of scope %r: no demand series of it in %s; they count "
                       "only for 'all'", scope, cluster)
    first = pd.Timestamp(adjusted[TS].min())
    last = pd.Timestamp(adjusted[TS].max()) + pd.Timedelta(seconds=freq_s)
    for r in reservations:
        if r.cluster in (None, cluster) and (pd.Timestamp(r.end) <= first
                                             or pd.Timestamp(r.start) >= last):
            where = f"{r.source}, line {r.line}" if r.source else r.name or "given"
            logger.warning("the reservation of %g GPUs of %s (%s) from %s to %s lies wholly "
                           "outside the plan's window (%s to %s UTC): it adds nothing",
                           r.gpus, r.scope, where, f"{r.start:%Y-%m-%d %H:%M}",
                           f"{r.end:%Y-%m-%d %H:%M}", f"{first:%Y-%m-%d %H:%M}",
                           f"{last:%Y-%m-%d %H:%M}")
    step_h = freq_s / 3600.0
    floors = {} if floor is None else dict(iter(floor.groupby(SERIES_ID, sort=False)))
    sized: list[dict[str, Any]] = []
    steps: list[pd.DataFrame] = []
    for sid, group in adjusted.groupby(SERIES_ID, sort=True):
        _, scope, metric = split_series_id(str(sid))
        q = float((scope_quantiles or {}).get(scope, quantile))
        if not 0 < q < 1:
            raise ConfigError(f"quantile {q!r} of scope {scope!r} must be between 0 and 1")
        levels, raw = quantile_matrix(group)
        allowance, why_queue = queue_allowance(queue, scope, growth,
                                                (queue_peak or {}).get(scope),
                                                (queue_fit or {}).get(scope))
        values = raw + allowance
        ts = pd.DatetimeIndex(group[TS].to_numpy())
        forecast_q = quantile_at(levels, raw, q)
        in_use, why_floor = _floored(forecast_q, floors.get(str(sid)), ts, growth,
                                     group["reserved"].to_numpy(dtype=np.float64))
        needed = in_use + allowance
        cap = capacity.get(scope)
        cap = None if cap is None or not math.isfinite(float(cap)) else float(cap)
        demand = expected_value(levels, values)
        p_exceed = (exceed_probability(levels, values, cap) if cap is not None
                    else np.full(len(group), np.nan))
        figures: dict[str, float | None] = dict.fromkeys(
            ("shortfall_gpu_hours", "idle_gpu_hours", "queue_risk", "queue_hours",
             "idle_energy_kwh", "busy_energy_kwh"))
        if cap is not None:
            short = float(expected_above(levels, values, cap).sum() * step_h)
            idle = float(expected_below(levels, values, cap).sum() * step_h)
            busy = float(demand.sum() * step_h) - short  # E[min(D, c)]
            figures.update(shortfall_gpu_hours=short, idle_gpu_hours=idle,
                           queue_risk=float(p_exceed.max()),
                           queue_hours=float(p_exceed.sum() * step_h),
                           idle_energy_kwh=idle * watts.idle / 1000.0,
                           busy_energy_kwh=max(busy, 0.0) * watts.busy / 1000.0)
        what = "GPUs in use" if metric != "gpu_demand" else "demand (no gpus_in_use series)"
        peak = float(needed.max())
        reason = (f"p{round(q * 100, 6):g} of {what} peaks at {float(forecast_q.max()):,.1f}"
                  f"{why_floor} + {why_queue} = {gpus_text(peak, cap)} needed")
        if cap is not None:
            reason += f"; capacity {cap:,.1f}: headroom {gpus_text(cap - peak, 0.0, '+')}"
        sized.append(dict(
            cluster=cluster, scope=scope, series_id=str(sid), model=str(group["model"].iloc[0]),
            start=ts[0].to_pydatetime(),
            end=(ts[-1] + pd.Timedelta(seconds=freq_s)).to_pydatetime(),
            quantile=q, gpus_needed=peak, in_use_needed=float(in_use.max()),
            queue_allowance=float(allowance), mean_peak=float(group["mean"].max()),
            demand_gpu_hours=float(demand.sum() * step_h),
            reserved_gpu_hours=float(group["reserved"].sum() * step_h), growth=float(growth),
            capacity=cap, capacity_source=(capacity_source or {}).get(scope)
            if cap is not None else None, headroom=None if cap is None else cap - peak,
            reason=reason, **figures))
        steps.append(pd.DataFrame({
            SERIES_ID: str(sid), "scope": scope, TS: ts, "needed": needed,
            "mean": group["mean"].to_numpy() + allowance, "reserved": group["reserved"].to_numpy(),
            "capacity": np.nan if cap is None else cap, "p_exceed": p_exceed}))
    hours = len(steps[0]) * step_h
    # a scope whose series stopped so long ago that its window has passed by the cluster's
    # now plans the past: it lends, borrows and adds nothing (a stale feed, a VC gone)
    now = max(r["start"] for r in sized)
    stale = {rec["scope"]: rec for rec in sized if rec["end"] <= now}
    current = [rec for rec in sized if rec["scope"] not in stale]
    advice, moves = advise({rec["scope"]: rec["gpus_needed"] for rec in current},
                           {rec["scope"]: rec["capacity"] for rec in current}, hours=hours,
                           recent_peak=recent_peak)
    for scope, rec in stale.items():
        advice[scope] = Recommendation(
            "stale", 0, 0, 0, f"no current data: {rec['series_id']} stops before "
            f"{rec['start']:%Y-%m-%d %H:%M}, so this plan's window (to {rec['end']:%Y-%m-%d %H:%M})"
            f" has passed by the cluster's now ({now:%Y-%m-%d %H:%M}); it takes part in no "
            "move or add: check that its data still arrives")
    vcs = [r for r in current if r["capacity"] is not None and r["scope"] != ALL_SCOPE
           and not r["scope"].startswith(GPU_TYPE_PREFIX)]
    shared = shared_vcs({r["scope"]: r["capacity"] for r in sized})
    apart = _types_apart(advice, [r["scope"] for r in sized if r["capacity"] is not None],
                         bool(vcs and not shared))
    rows = []
    for record in sized:
        a = advice[record["scope"]]
        if shared and record["scope"] == ALL_SCOPE:
            record["reason"] += (f"; the VCs' capacities add up to {shared[0]:,.0f} GPUs, more "
                                 f"than the cluster's {shared[1]:,.0f}: they share GPUs (e.g. "
                                 "partitions over the same nodes), so each scope is planned on "
                                 "its own, without moves between them")
        elif shared and not record["scope"].startswith(GPU_TYPE_PREFIX):
            record["reason"] += "; planned on its own: the VCs share GPUs"
        elif vcs and (record["scope"] == ALL_SCOPE or a.text.startswith("all the cluster")):
            record["reason"] += (f"; the advice is the net of the VCs' plans (they need "
                                 f"{sum(r['gpus_needed'] for r in vcs):,.1f} of "
                                 f"{sum(r['capacity'] for r in vcs):,.1f} GPUs)")
        elif record["scope"] in apart:
            record["reason"] += apart[record["scope"]]
        used = (recent_peak or {}).get(record["scope"])
        if a.release_gpus and used is not None and used < _BARELY * record["capacity"]:
            record["reason"] += (f"; it used at most {used / record['capacity']:.1%} of its "
                                 f"GPUs over recent history: check that the capacity and the "
                                 "jobs describe the same GPUs (a sampled trace, or nodes of "
                                 "another cluster?) before releasing")
        rows.append(CapacityRow(**record, action=a.action, add_gpus=a.add_gpus,
                                lend_gpus=a.lend_gpus, release_gpus=a.release_gpus,
                                borrow_gpus=a.borrow_gpus, net_gpus=a.net_gpus,
                                recommendation=a.text))
    return CapacityPlan(cluster=cluster, quantile=float(quantile), freq_s=int(freq_s),
                        watts=watts, rows=tuple(rows),
                        steps=pd.concat(steps, ignore_index=True), forecast=adjusted,
                        moves=moves)
