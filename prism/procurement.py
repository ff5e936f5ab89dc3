"""Procurement plans: weeks to months ahead, from the trend of daily peaks.

The day-ahead plan (:mod:`prism.capacity`) sizes lending and power for the next window from a
quantile forecast. Buying GPUs takes weeks, so a procurement plan looks further: per scope it
fits the trend of the recent **daily levels** and projects them over a horizon such as 30 d.

- A scope's daily level is the day's peak of its GPUs in use plus the day's mean of its
  queued GPUs (the day-ahead plan's sizing: the in-use peak plus a queue allowance, never a
  peak of in use + queue). GPUs in use cannot exceed what is installed, so without the queue a
  saturated VC would show no growth. Only complete days count.
- The trend is the Theil-Sen line of the daily levels over the last ``weeks`` weeks: the
  median of the pairwise slopes, robust to a few burst days, with Sen's 90 % interval of the
  slope (:func:`fit_trend`).
- The projected level of day ``k`` after the last complete day is the line there plus a
  margin, the ``quantile`` of the days' residuals around the line (how far a day's peak has
  risen above its trend), times ``growth`` (the what-if factor of ``prism capacity``). The
  projected peak is its maximum over the horizon; ``projected_low`` and ``projected_high``
  take the slope's interval instead.
- A projection never goes below 0 GPUs: a falling line is floored there, and the reason
  says so.
- Against the scope's capacity: the day the projection first exceeds it (also after the
  horizon, while the trend rises) and the whole GPUs needed to cover the projected peak
  (:func:`plan_procurement`). A flat or falling trend under capacity buys nothing.
- Where the VCs split the cluster's GPUs (not :func:`prism.capacity.shared_vcs`) and each has
  a trend, the cluster's projection is the sum of theirs, day by day, as the day-ahead plan's
  advice for ``all`` is the net of the VCs' plans: its purchase then covers what the VCs'
  rows need (less what one VC's spare covers of another's). The cluster's own trend, fitted
  on its own daily peaks, is quoted in its reason: it differs where the VCs' peaks do not
  coincide or their queues are not in the cluster's series.

Buying is the cluster's decision (the ``all`` row); a VC's row says what its own trend needs,
which moves between VCs may cover first. No SQL: :mod:`prism.usecases.capacity` loads the
series and capacities.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.capacity import shared_vcs
from prism.errors import ConfigError, DataContractError
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX, SERIES_ID, TS, VALUE, split_series_id

__all__ = ["DAY", "MIN_DAYS", "ProcurementPlan", "ProcurementRow", "Trend", "daily_levels",
           "fit_trend", "plan_procurement"]

DAY = pd.Timedelta(days=1)
#: Complete days a trend needs; a scope with fewer gets no projection.
MIN_DAYS = 7
#: The confidence of the slope's interval.
CONFIDENCE = 0.90
#: Exceed dates further out than this are not given (a trend is not a 10-year forecast).
_MAX_DAYS_OUT = 3650
_EPS = 1e-9


@dataclass(frozen=True)
class Trend:
    """A Theil-Sen line ``level(x) = pivot_y + slope * (x - pivot_x)`` of daily levels.

    Attributes:
        slope: GPUs per day (the median pairwise slope).
        low / high: the slope's :data:`CONFIDENCE` interval (Sen's method).
        pivot_x / pivot_y: the median day index and the line there (``pivot_y`` is the
            median of ``level - slope * x`` plus ``slope * pivot_x``); the lines of the
            interval pass through it.
    """

    slope: float
    low: float
    high: float
    pivot_x: float
    pivot_y: float

    def at(self, x: float | np.ndarray, slope: float | None = None) -> Any:
        """The line (or, with ``slope``, the line of that slope through the pivot) at ``x``."""
        return self.pivot_y + (self.slope if slope is None else slope) * (
            np.asarray(x, dtype=np.float64) - self.pivot_x)


def fit_trend(values: np.ndarray | pd.Series, days: np.ndarray | None = None) -> Trend:
    """The Theil-Sen trend of daily values.

    Args:
        values: the daily levels.
        days: their day indices (default ``0, 1, ...``; a missing day keeps its place).

    Raises:
        DataContractError: for fewer than two values or a value that is not finite.
    """
    from scipy.stats import theilslopes

    y = np.asarray(values, dtype=np.float64)
    if len(y) < 2 or not np.isfinite(y).all():
        raise DataContractError(f"a trend needs two or more finite daily levels, got {len(y)}")
    x = np.arange(len(y), dtype=np.float64) if days is None else np.asarray(days, np.float64)
    fit = theilslopes(y, x, alpha=CONFIDENCE)
    slope = float(fit.slope)
    # the intercept as the median of y - slope * x (a burst day moves it no more than the
    # slope), the line's value at the median day as the pivot
    pivot_x = float(np.median(x))
    return Trend(slope=slope, low=float(fit.low_slope), high=float(fit.high_slope),
                 pivot_x=pivot_x, pivot_y=float(np.median(y - slope * x)) + slope * pivot_x)


def daily_levels(in_use: pd.DataFrame, *, freq_s: int,
                 queue: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each complete day's level per series: the peak of its GPUs in use plus the mean of its
    queued GPUs.

    Args:
        in_use: a panel (``series_id, ts, value``) of the series each scope is sized on.
        freq_s: its step in seconds.
        queue: ``series_id, ts, value``: the queued GPUs of a sized series (``series_id`` is
            the sized series'), at the same step; missing: no queue.

    Returns:
        ``series_id, day, peak, queue, level``, one row per series and complete UTC day (a
        day with every step present; with a step that does not divide a day, every day
        with a point), sorted.
    """
    per_day = (86_400 // freq_s) if freq_s > 0 and 86_400 % freq_s == 0 else 0
    frame = in_use[[SERIES_ID, TS, VALUE]].copy()
    frame["day"] = frame[TS].dt.floor("D")
    grouped = frame.groupby([SERIES_ID, "day"], sort=True)[VALUE]
    out = pd.DataFrame({"peak": grouped.max(), "_n": grouped.count()})
    if per_day:
        out = out[out["_n"] >= per_day]
    out = out.drop(columns="_n")
    out["queue"] = 0.0
    if queue is not None and not queue.empty:
        q = queue[[SERIES_ID, TS, VALUE]].copy()
        q["day"] = q[TS].dt.floor("D")
        means = q.groupby([SERIES_ID, "day"])[VALUE].mean().clip(lower=0.0)
        out["queue"] = means.reindex(out.index).fillna(0.0).to_numpy()
    out["level"] = out["peak"] + out["queue"]
    return out.reset_index()


@dataclass(frozen=True)
class ProcurementRow:
    """One scope's procurement plan over the horizon.

    Attributes:
        cluster / scope / series_id: the scope and the series it is sized on.
        start / end: the projected days (the day after the last complete day, to the end of
            the horizon).
        days_fitted: complete days the trend was fitted on (0: too few for a trend).
        first_day / last_day: the first and last of them.
        last_level: the last complete day's level (peak in use + mean queue).
        recent_peak: the highest daily level fitted.
        slope_per_day / slope_low / slope_high: the trend in GPUs per day and its interval.
        trend_now: the trend line at the last complete day.
        margin: the ``quantile`` of the days' levels above their trend, added to it.
        quantile / growth: as planned.
        projected_peak / projected_low / projected_high: the highest projected daily level
            over the horizon, with the slope and its interval's ends.
        capacity / capacity_source: GPUs installed and where that came from.
        exceeds_on: the first day the projection exceeds capacity (``None``: not at this
            trend, or capacity unknown); may lie after the horizon.
        needed_gpus: whole GPUs to add to cover ``projected_peak`` (0: none).
        action: ``buy`` (the cluster), ``needs`` (a VC: its own trend; moves may cover it),
            ``keep``, ``unknown`` (no capacity) or ``no trend`` (too little history).
        text: the advice in words.
        reason: the fit and the projection in words.
    """

    cluster: str
    scope: str
    series_id: str
    start: datetime
    end: datetime
    days_fitted: int
    first_day: datetime | None
    last_day: datetime | None
    last_level: float | None
    recent_peak: float | None
    slope_per_day: float | None
    slope_low: float | None
    slope_high: float | None
    trend_now: float | None
    margin: float | None
    quantile: float
    growth: float
    projected_peak: float | None
    projected_low: float | None
    projected_high: float | None
    capacity: float | None
    capacity_source: str | None
    exceeds_on: datetime | None
    needed_gpus: int
    action: str
    text: str
    reason: str


@dataclass(frozen=True)
class ProcurementPlan:
    """A cluster's procurement plan.

    Attributes:
        cluster: the cluster.
        horizon_days: the days projected.
        weeks: the weeks of history the trends were fitted on.
        rows: one :class:`ProcurementRow` per scope, sorted by scope.
        days: ``series_id, scope, day, projected, low, high, capacity``: the projected daily
            level of each scope on each day of the horizon.
    """

    cluster: str
    horizon_days: int
    weeks: int
    rows: tuple[ProcurementRow, ...]
    days: pd.DataFrame = field(repr=False)

    def table(self) -> pd.DataFrame:
        """The rows as a frame (one per scope)."""
        return pd.DataFrame([r.__dict__ for r in self.rows],
                            columns=list(ProcurementRow.__dataclass_fields__))

    def records(self, *, steps: bool = False) -> list[dict[str, Any]]:
        """The rows as plain dicts, each with its projected ``days`` when asked."""
        out = []
        for row in self.rows:
            record: dict[str, Any] = dict(row.__dict__)
            if steps:
                mine = self.days[self.days[SERIES_ID] == row.series_id]
                record["days"] = [
                    {"day": pd.Timestamp(d).to_pydatetime(), "projected": float(p),
                     "low": float(lo), "high": float(hi)}
                    for d, p, lo, hi in zip(mine["day"], mine["projected"], mine["low"],
                                            mine["high"], strict=True)]
            out.append(record)
        return out

    def only(self, scope: str) -> ProcurementPlan:
        """The plan of one scope."""
        return replace(self, rows=tuple(r for r in self.rows if r.scope == scope),
                       days=self.days[self.days["scope"] == scope].reset_index(drop=True))


def plan_procurement(
    daily: pd.DataFrame,
    capacity: Mapping[str, float | None],
    *,
    horizon_days: int = 30,
    weeks: int = 4,
    quantile: float = 0.95,
    growth: float = 1.0,
    capacity_source: Mapping[str, str] | None = None,
    series_ids: Sequence[str] = (),
    until: pd.Timestamp | None = None,
) -> ProcurementPlan:
    """Project each scope's daily level over the horizon from its trend (module docstring).

    Args:
        daily: :func:`daily_levels` of one series per scope, all of one cluster.
        capacity: scope -> GPUs installed (absent or ``None``: unknown).
        horizon_days: days to project (30: a month).
        weeks: weeks of the most recent complete days the trend is fitted on.
        quantile: the quantile of the residuals above the trend added as a margin.
        growth: demand growth factor on top of the trend.
        capacity_source: scope -> where its capacity came from.
        series_ids: the series planned, each given a row (``no trend`` where it has too
            few complete days in ``daily``, none included); the series of ``daily`` are.
        until: the end of the history (the last step's end): with no complete day in
            ``daily``, the horizon starts at the first midnight from it.

    Returns:
        The :class:`ProcurementPlan`.

    Raises:
        ConfigError: for a horizon, weeks, quantile or growth out of range.
        DataContractError: for no daily levels and no ``series_ids`` and ``until`` to say
            "no trend" for, or series of several clusters.
    """
    if not 1 <= horizon_days <= _MAX_DAYS_OUT:
        raise ConfigError(f"procurement horizon of {horizon_days} days: give 1d to "
                          f"{_MAX_DAYS_OUT}d, e.g. 30d")
    if not 1 <= weeks <= 520:
        raise ConfigError(f"--trend-weeks {weeks}: give 1 to 520 weeks, e.g. 4")
    if not 0 < quantile < 1:
        raise ConfigError(f"quantile {quantile!r} must be between 0 and 1, e.g. 0.95")
    if not math.isfinite(growth) or growth <= 0:
        raise ConfigError(f"growth {growth!r} must be a positive factor such as 1.1")
    if daily.empty:  # no complete day (maybe no columns either)
        daily = pd.DataFrame({SERIES_ID: pd.Series(dtype=str),
                              "day": pd.Series(dtype="datetime64[ns]"),
                              "level": pd.Series(dtype=float)})
    ids = sorted({*daily[SERIES_ID].astype(str).unique(), *map(str, series_ids)})
    if daily.empty and (not ids or until is None):
        raise DataContractError("no complete day of history to fit a trend on; ingest more "
                                f"days (a trend needs at least {MIN_DAYS})")
    clusters = sorted({split_series_id(s)[0] for s in ids})
    if len(clusters) != 1:
        raise DataContractError(f"a procurement plan covers one cluster; got "
                                f"{', '.join(clusters)}")
    # the last complete day; with none, the day before the first midnight from ``until``
    last_day = (pd.Timestamp(daily["day"].max()) if not daily.empty or until is None
                else pd.Timestamp(until).ceil("D") - DAY)
    start = last_day + DAY
    end = start + horizon_days * DAY
    ahead = np.arange(1, horizon_days + 1, dtype=np.float64)
    shared = shared_vcs(capacity) is not None
    rows: list[ProcurementRow] = []
    fitted: dict[str, _Fit] = {}
    for sid in ids:
        cluster, scope, _ = split_series_id(sid)
        mine = daily[daily[SERIES_ID] == sid].sort_values("day")
        mine = mine[mine["day"] > last_day - weeks * 7 * DAY]
        cap = capacity.get(scope)
        cap = None if cap is None or not math.isfinite(float(cap)) else float(cap)
        base = dict(cluster=cluster, scope=scope, series_id=sid, start=start.to_pydatetime(),
                    end=end.to_pydatetime(), quantile=float(quantile), growth=float(growth),
                    capacity=cap, capacity_source=(capacity_source or {}).get(scope)
                    if cap is not None else None)
        if len(mine) < MIN_DAYS:
            rows.append(ProcurementRow(
                **base, days_fitted=len(mine), first_day=None, last_day=None, last_level=None,
                recent_peak=None, slope_per_day=None, slope_low=None, slope_high=None,
                trend_now=None, margin=None, projected_peak=None, projected_low=None,
                projected_high=None, exceeds_on=None, needed_gpus=0, action="no trend",
                text=f"no trend: {len(mine)} complete day(s) of history, a trend needs "
                     f"{MIN_DAYS}",
                reason=f"too little history: {len(mine)} complete UTC day(s) (days with "
                       f"every step) in the last {weeks} week(s)"))
            continue
        levels = mine["level"].to_numpy(dtype=np.float64)
        # day indices from the first fitted day (a missing day keeps its place)
        x = ((mine["day"] - mine["day"].iloc[0]) / DAY).to_numpy(dtype=np.float64)
        trend = fit_trend(levels, x)
        x_now = float((last_day - mine["day"].iloc[0]) / DAY)
        fit = _Fit(trend, x_now, max(float(np.quantile(levels - trend.at(x), quantile)), 0.0),
                   float(growth))
        fitted[scope] = fit
        projected, low, high = fit.days(horizon_days)
        peak = float(projected.max())
        exceeds = _first_over(fit.days(_MAX_DAYS_OUT)[0], cap, last_day)
        needed = 0 if cap is None else max(0, math.ceil(peak - cap - _EPS))
        action, text = _advice(scope, cap, needed, peak, exceeds, end, shared=shared)
        reason = (f"daily level (peak in use + mean queue) over {len(mine)} days "
                  f"{mine['day'].iloc[0]:%Y-%m-%d} to {last_day:%Y-%m-%d}: Theil-Sen trend "
                  f"{trend.slope:+,.2f} GPUs/day ({CONFIDENCE:.0%} interval "
                  f"{trend.low:+,.2f} to {trend.high:+,.2f}), at {fit.now:,.1f} "
                  f"now; + p{round(quantile * 100, 6):g} margin {fit.margin:,.1f}"
                  + (f", x{growth:g} growth" if growth != 1.0 else "")
                  + f" = {peak:,.1f} peak by {end - DAY:%Y-%m-%d} "
                  f"({float(low.max()):,.1f} to {float(high.max()):,.1f})"
                  + fit.floored(horizon_days))
        if cap is not None:
            reason += f"; capacity {cap:,.1f}"
        rows.append(ProcurementRow(
            **base, days_fitted=len(mine), first_day=mine["day"].iloc[0].to_pydatetime(),
            last_day=last_day.to_pydatetime(), last_level=float(levels[-1]),
            recent_peak=float(levels.max()), slope_per_day=trend.slope, slope_low=trend.low,
            slope_high=trend.high, trend_now=fit.now, margin=fit.margin,
            projected_peak=peak, projected_low=float(low.max()),
            projected_high=float(high.max()),
            exceeds_on=None if exceeds is None else exceeds.to_pydatetime(),
            needed_gpus=needed, action=action, text=text, reason=reason))
    summed = False
    if not shared:
        rows, summed = _cluster_from_vcs(rows, fitted, horizon_days=horizon_days, end=end)
    frames = []
    for row in rows:
        if row.scope in fitted:
            projected, low, high = _row_days(row.scope, fitted, horizon_days,
                                             summed=summed and row.scope == ALL_SCOPE)
            frames.append(pd.DataFrame({
                SERIES_ID: row.series_id, "scope": row.scope,
                "day": start + (ahead - 1) * DAY, "projected": projected, "low": low,
                "high": high, "capacity": np.nan if row.capacity is None else row.capacity}))
    days = (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=[SERIES_ID, "scope", "day", "projected", "low", "high", "capacity"]))
    return ProcurementPlan(cluster=clusters[0], horizon_days=int(horizon_days),
                           weeks=int(weeks), rows=tuple(sorted(rows, key=lambda r: r.scope)),
                           days=days)


@dataclass(frozen=True)
class _Fit:
    """A scope's fitted trend, where today is (``x_now``), its margin and the growth."""

    trend: Trend
    x_now: float
    margin: float
    growth: float

    @property
    def now(self) -> float:
        """The line at the last complete day."""
        return float(self.trend.at(self.x_now))

    def raw(self, days: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The projected levels of the ``days`` days after today, with the slope and its
        interval's ends, before any floor."""
        xs = self.x_now + np.arange(1, days + 1, dtype=np.float64)
        mid, low, high = (self.growth * (self.trend.at(xs, slope) + self.margin)
                          for slope in (self.trend.slope, self.trend.low, self.trend.high))
        return mid, low, high

    def days(self, days: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """:meth:`raw` floored at 0 GPUs (a scope never needs fewer than none)."""
        projected, low, high = self.raw(days)
        return (np.maximum(projected, 0.0), np.maximum(low, 0.0), np.maximum(high, 0.0))

    def floored(self, days: int) -> str:
        """The reason's words where the floor at 0 bites over the horizon (else empty)."""
        projected, low, high = self.raw(days)
        which = [name for name, v in (("projection", projected), ("low end", low),
                                      ("high end", high)) if float(v.min()) < 0.0]
        if not which:
            return ""
        return (f"; the line falls below 0 GPUs (its {', '.join(which)} down to "
                f"{float(min(v.min() for v in (projected, low, high))):,.1f}): floored at 0")


FloatArray = npt.NDArray[np.float64]


def _row_days(scope: str, fitted: Mapping[str, _Fit], horizon_days: int, *, summed: bool
              ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """A scope's projected days: its own fit's or, ``summed`` (the cluster projected from its
    VCs: :func:`_cluster_from_vcs`), the sum of the VCs'."""
    if summed:
        parts = [f.days(horizon_days) for s, f in fitted.items() if _is_vc(s)]
        mid, low, high = (np.sum([p[i] for p in parts], axis=0) for i in range(3))
        return mid, low, high
    return fitted[scope].days(horizon_days)


def _is_vc(scope: str) -> bool:
    return scope != ALL_SCOPE and not scope.startswith(GPU_TYPE_PREFIX)


def _cluster_from_vcs(rows: list[ProcurementRow], fitted: Mapping[str, _Fit], *,
                      horizon_days: int, end: pd.Timestamp
                      ) -> tuple[list[ProcurementRow], bool]:
    """The cluster's row projected as the sum of its VCs' projections, day by day, where the
    VCs split its GPUs and each has a trend (else its own trend, and a reason that says why
    it is not the VCs' sum); and whether it was."""
    own = next((r for r in rows if r.scope == ALL_SCOPE), None)
    vcs = [r for r in rows if _is_vc(r.scope)]
    if own is None or ALL_SCOPE not in fitted or not vcs:
        return rows, False
    short = [r.scope for r in vcs if r.scope not in fitted]
    if short:
        why = (f"; the cluster's own trend: the VCs' projections are not added up, as "
               f"{', '.join(short)} has no trend, so this row need not match the VCs' rows")
        return [replace(r, reason=r.reason + why) if r is own else r for r in rows], False
    parts = [fitted[r.scope].days(_MAX_DAYS_OUT) for r in vcs]
    projected, low, high = (np.sum([p[i] for p in parts], axis=0) for i in range(3))
    now = [fitted[r.scope] for r in vcs]
    cap = own.capacity
    peak = float(projected[:horizon_days].max())
    last_day = pd.Timestamp(own.start) - DAY  # the last complete day
    exceeds = _first_over(projected, cap, last_day)
    needed = 0 if cap is None else max(0, math.ceil(peak - cap - _EPS))
    action, text = _advice(ALL_SCOPE, cap, needed, peak, exceeds, end)
    own_fit = fitted[ALL_SCOPE]
    slope, slope_low, slope_high = (sum(getattr(f.trend, k) for f in now)
                                    for k in ("slope", "low", "high"))
    reason = (f"the sum of the VCs' projections ({', '.join(r.scope for r in vcs)}: they "
              "split the cluster's GPUs, and each is projected from its own daily levels, "
              "queue included, as the day-ahead plan sizes each VC apart): trend "
              f"{slope:+,.2f} GPUs/day (the VCs' intervals added up, {slope_low:+,.2f} to "
              f"{slope_high:+,.2f}), at "
              f"{sum(f.now for f in now):,.1f} now; + their margins "
              f"{sum(f.margin for f in now):,.1f} = {peak:,.1f} peak by {end - DAY:%Y-%m-%d} "
              f"({float(low[:horizon_days].max()):,.1f} to "
              f"{float(high[:horizon_days].max()):,.1f})")
    if cap is not None:
        reason += f"; capacity {cap:,.1f}"
    reason += (f"; the cluster's own daily levels trend {own_fit.trend.slope:+,.2f} GPUs/day "
               f"(projected peak {own.projected_peak:,.1f}): not used, as the VCs' needs "
               "would not add up to it (their peaks need not coincide, and a VC's spare GPUs "
               "cover another's need only as moves)")
    cluster = replace(
        own, slope_per_day=slope, slope_low=slope_low, slope_high=slope_high,
        trend_now=sum(f.now for f in now), margin=sum(f.margin for f in now),
        projected_peak=peak, projected_low=float(low[:horizon_days].max()),
        projected_high=float(high[:horizon_days].max()),
        exceeds_on=None if exceeds is None else exceeds.to_pydatetime(), needed_gpus=needed,
        action=action, text=text, reason=reason)
    return [cluster if r is own else r for r in rows], True


def _first_over(projected: FloatArray, cap: float | None,
                last_day: pd.Timestamp) -> pd.Timestamp | None:
    """The first day after ``last_day`` whose projected level (``projected[k - 1]`` for day
    ``k``, up to :data:`_MAX_DAYS_OUT` days) exceeds ``cap``."""
    if cap is None:
        return None
    over = np.flatnonzero(projected > cap + _EPS)
    return None if not len(over) else last_day + int(over[0] + 1) * DAY


def _advice(scope: str, cap: float | None, needed: int, peak: float,
            exceeds: pd.Timestamp | None, end: pd.Timestamp, *, shared: bool = False
            ) -> tuple[str, str]:
    """The action and its words (``buy`` only for the cluster; ``shared``: the VCs share
    GPUs, so no VC's need is met by moves from the others)."""
    last = f"{end - DAY:%Y-%m-%d}"
    if cap is None:
        return "unknown", ("capacity unknown: pass --capacity FILE or ingest a capacity-csv "
                           "file or the cluster's node list (node-list) for this scope")
    if needed:
        by = f"{exceeds:%Y-%m-%d}" if exceeds is not None else last
        if scope == ALL_SCOPE:
            return "buy", (f"at this trend, the cluster needs +{needed} GPUs by {by} (buy "
                           f"{needed}: the projected peak {peak:,.1f} to {last} against "
                           f"{cap:,.0f})")
        how = ("it shares its GPUs with other VCs, so it grows only with the nodes it "
               "shares" if shared else "moves from other VCs first, the cluster buys the rest")
        return "needs", (f"at this trend, {scope} needs +{needed} GPUs by {by} (the projected "
                         f"peak {peak:,.1f} to {last} against {cap:,.0f}; {how})")
    text = f"no purchase: the projected peak {peak:,.1f} stays within {cap:,.0f} GPUs to {last}"
    if exceeds is not None:
        text += f" (at this trend exceeded from {exceeds:%Y-%m-%d})"
    return "keep", text
