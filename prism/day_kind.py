"""The day-kind floor of a capacity plan: at least what the latest day of the same kind used.

A cluster used by people follows their week. Demand on a Monday morning looks like the Friday
before it, not like the quiet Sunday just gone, so yesterday's peak under-sizes Mondays (and
over-sizes nothing on the other days). The floor of a planned step is the larger of:

- the peak of the 24 hours before the plan starts (yesterday's peak), and
- the peak of the latest complete calendar day before the plan whose *kind* is the kind of the
  step's day: a weekday (Monday to Friday) or a weekend day (Saturday, Sunday), looked for up to
  :data:`SEARCH_DAYS` days back.

For a day-ahead plan at midnight that second day is yesterday from Tuesday to Friday and on
Sunday, the Friday before on Monday and the Sunday before on Saturday. A day with a gap (fewer
steps than a whole day) is not complete and is passed over, and so is a day the plan covers.
Calendar days are those of the series' timestamps (the store keeps a trace's own clock).

Planning backtest on the 16 Helios Earth VCs (``python -m evaluation.benchmarks.planning``,
``evaluation/README.md``): the floor alone saves 28.3 % of the static peak's idle GPU-hours with
0.23 % of demand unmet over the last 7 days, where yesterday's peak needs a 20 % margin to
leave 0.28 % unmet and then saves 23.1 %; over 14 and 21 days it keeps the unmet share at 0.25
and 0.47 % (yesterday's peak: 0.76 and 4.44 %, the latter after a day without data).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from prism.evaluation.backtest import CUTOFF
from prism.schema import SERIES_ID, TS, VALUE

#: Days looked back for the latest complete day of the planned day's kind.
SEARCH_DAYS = 7
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
    cuts = out[[SERIES_ID, CUTOFF]].drop_duplicates()
    # yesterday: the peak over the 24 h ending at each cutoff (a rolling max at the cutoff)
    yesterday = np.full(len(cuts), np.nan)
    by_series: dict[object, pd.DataFrame] = dict(iter(hist.groupby(SERIES_ID, sort=False)))
    for sid, idx in cuts.groupby(SERIES_ID, sort=False).groups.items():
        mine = by_series.get(sid)
        if mine is None:
            continue
        rolled = mine.set_index(TS)[VALUE].rolling(_DAY).max()
        at = pd.DatetimeIndex(cuts.loc[idx, CUTOFF])
        pos = rolled.index.searchsorted(at, side="right") - 1
        found = (pos >= 0) & (rolled.index[np.maximum(pos, 0)] > at - _DAY)
        yesterday[cuts.index.get_indexer(idx)] = np.where(
            found, rolled.to_numpy()[np.maximum(pos, 0)], np.nan)
    cuts = cuts.assign(_yesterday=yesterday)
    out = out.merge(cuts, on=[SERIES_ID, CUTOFF], how="left", validate="many_to_one")
    # complete calendar days and their peaks
    day_of = hist[TS].dt.floor("D")
    stats = hist.assign(_day=day_of).groupby([SERIES_ID, "_day"])[VALUE].agg(["max", "size"])
    daily = stats.loc[stats["size"] >= round(86_400 / int(freq_s)), "max"]
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
    floor = np.fmax(yest, kind_peak)
    from_day = ~np.isnan(kind_peak) & ~(kind_peak <= yest)
    names = pd.DatetimeIndex(kind_day).strftime("%a %Y-%m-%d")
    out[FLOOR] = floor
    out[FLOOR_FROM] = np.where(np.isnan(floor), "",
                               np.where(from_day, np.asarray(names, dtype=object),
                                        "the last 24 h"))
    return out
