"""The day-kind floor of a capacity plan: at least what the latest day of the same kind used.

A cluster used by people follows their week. Demand on a Monday morning looks like the Friday
before it, not like the quiet Sunday just gone, so yesterday's peak under-sizes Mondays (and
over-sizes nothing on the other days). The floor of a planned step is the larger of:

- the peak of the 24 hours before the plan starts (yesterday's peak), and
- where the series has a week, the peak of the latest complete calendar day before the plan
  whose *kind* is the kind of the step's day: a weekday (Monday to Friday) or a weekend day
  (Saturday, Sunday), looked for up to :data:`SEARCH_DAYS` days back.

A series *has a week* when, over the complete days of the :data:`WEEK_DAYS` days before the
plan (at least :data:`MIN_DAYS_OF_KIND` of each kind), its weekend days' mean peak differs from
its weekdays' by more than :data:`WEEK_CONTRAST` (10 %). A fleet serving the world around the
clock has none, and there a weekday's peak says no more about Monday than Sunday's does.

For a day-ahead plan at midnight that second day is yesterday from Tuesday to Friday and on
Sunday, the Friday before on Monday and the Sunday before on Saturday. A day with a gap (fewer
steps than a whole day) is not complete and is passed over, and so is a day the plan covers.
Calendar days are those of the series' timestamps (the store keeps a trace's own clock).

Measured in the planning backtest (``python -m evaluation.benchmarks.planning``; the numbers
and the variants tried are in ``evaluation/README.md``, Planning).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from prism.evaluation.backtest import CUTOFF
from prism.schema import SERIES_ID, TS, VALUE

#: Days looked back for the latest complete day of the planned day's kind.
SEARCH_DAYS = 7
#: Days of history that say whether a series has a week.
WEEK_DAYS = 28
#: Complete days of each kind those must hold.
MIN_DAYS_OF_KIND = 2
#: How far the weekend's mean daily peak must be from the weekdays' (a share of the latter).
WEEK_CONTRAST = 0.1
#: ``Timestamp.day_of_week`` of the weekend days.
WEEKEND = (5, 6)
#: The output columns: the floor and where it came from.
FLOOR = "floor"
FLOOR_FROM = "floor_from"

_DAY = pd.Timedelta(days=1)


def is_weekend(days: pd.Series | pd.DatetimeIndex) -> np.ndarray:
    """Whether each day (a timestamp) is a Saturday or a Sunday."""
    return np.isin(pd.DatetimeIndex(days).day_of_week, WEEKEND)


def day_kind_floor(panel: pd.DataFrame, rows: pd.DataFrame, *, freq_s: int) -> pd.DataFrame:
    """The day-kind floor (see the module docstring) of each planned step.

    Args:
        panel: the history (``series_id, ts, value``) at a regular step of ``freq_s``; only
            what lies at or before each row's cutoff is used.
        rows: the planned steps, ``series_id, cutoff, ts`` (``cutoff``: the last observed
            step before the plan; ``ts``: the planned step).
        freq_s: the step of the panel in seconds.

    Returns:
        ``rows`` with ``floor`` (NaN where the history holds neither yesterday nor a
        complete day of the kind) and ``floor_from`` (``"the last 24 h"`` or the day,
        e.g. ``"Fri 2020-05-22"``, whose peak set the floor; empty where NaN).
    """
    out = rows.copy()
    step = pd.Timedelta(seconds=int(freq_s))
    hist = panel[[SERIES_ID, TS, VALUE]].sort_values([SERIES_ID, TS], kind="stable")
    # complete calendar days and their peaks
    stats = (hist.assign(_day=hist[TS].dt.floor("D"))
             .groupby([SERIES_ID, "_day"])[VALUE].agg(["max", "size"]))
    daily = stats.loc[stats["size"] >= round(86_400 / int(freq_s)), "max"]
    cuts = out[[SERIES_ID, CUTOFF]].drop_duplicates()
    yesterday = np.full(len(cuts), np.nan)
    has_week = np.zeros(len(cuts), dtype=bool)
    by_series: dict[object, pd.DataFrame] = dict(iter(hist.groupby(SERIES_ID, sort=False)))
    for sid, idx in cuts.groupby(SERIES_ID, sort=False).groups.items():
        mine = by_series.get(sid)
        if mine is None:
            continue
        at = pd.DatetimeIndex(cuts.loc[idx, CUTOFF])
        where = cuts.index.get_indexer(idx)
        # yesterday: the peak over the 24 h ending at each cutoff (a rolling max there)
        rolled = mine.set_index(TS)[VALUE].rolling(_DAY).max()
        pos = rolled.index.searchsorted(at, side="right") - 1
        found = (pos >= 0) & (rolled.index[np.maximum(pos, 0)] > at - _DAY)
        yesterday[where] = np.where(found, rolled.to_numpy()[np.maximum(pos, 0)], np.nan)
        has_week[where] = _has_week(daily, sid, at, step)
    cuts = cuts.assign(_yesterday=yesterday, _week=has_week)
    out = out.merge(cuts, on=[SERIES_ID, CUTOFF], how="left", validate="many_to_one")
    day = pd.DatetimeIndex(out[TS]).floor("D")
    weekend = is_weekend(day)
    cutoff = pd.DatetimeIndex(out[CUTOFF])
    kind_peak = np.full(len(out), np.nan)
    kind_day = np.full(len(out), np.datetime64("NaT"), dtype="datetime64[ns]")
    for back in range(1, SEARCH_DAYS + 1):
        earlier = day - back * _DAY
        usable = (earlier + _DAY <= cutoff + step) & (is_weekend(earlier) == weekend)
        peak = daily.reindex(pd.MultiIndex.from_arrays([out[SERIES_ID], earlier])).to_numpy()
        take = np.isnan(kind_peak) & usable & ~np.isnan(peak)
        kind_peak[take] = peak[take]
        kind_day[take] = earlier.to_numpy()[take]
    yest = out.pop("_yesterday").to_numpy(dtype=np.float64)
    kind_peak[~out.pop("_week").to_numpy(dtype=bool)] = np.nan
    floor = np.fmax(yest, kind_peak)
    from_day = ~np.isnan(kind_peak) & ~(kind_peak <= yest)
    names = pd.DatetimeIndex(kind_day).strftime("%a %Y-%m-%d")
    out[FLOOR] = floor
    out[FLOOR_FROM] = np.where(np.isnan(floor), "",
                               np.where(from_day, np.asarray(names, dtype=object),
                                        "the last 24 h"))
    return out


def _has_week(daily: pd.Series, series_id: object, at: pd.DatetimeIndex,
              step: pd.Timedelta) -> np.ndarray:
    """Whether the series has a week at each cutoff ``at``: over its complete days in the
    :data:`WEEK_DAYS` days before, the weekend's mean peak is more than :data:`WEEK_CONTRAST`
    away from the weekdays' (with :data:`MIN_DAYS_OF_KIND` days of each kind)."""
    try:
        peaks = daily.xs(series_id, level=0)
    except KeyError:
        return np.zeros(len(at), dtype=bool)
    days = pd.DatetimeIndex(peaks.index).to_numpy()
    values = peaks.to_numpy(dtype=np.float64)
    weekend = is_weekend(pd.DatetimeIndex(days))
    ends = (at + step).to_numpy()[:, None]
    inside = (days[None, :] + _DAY.to_timedelta64() <= ends) & (
        days[None, :] >= ends - pd.Timedelta(days=WEEK_DAYS).to_timedelta64())
    out = np.zeros(len(at), dtype=bool)
    for i, row in enumerate(inside):
        ends_kind, days_kind = values[row & weekend], values[row & ~weekend]
        if min(len(ends_kind), len(days_kind)) < MIN_DAYS_OF_KIND:
            continue
        base = days_kind.mean()
        out[i] = base > 0 and abs(ends_kind.mean() / base - 1.0) > WEEK_CONTRAST
    return out
