"""What a store's data changes in what a fitted model saw: update it, or refit it.

A saved model holds the history it was fitted on (``history_``, from ``first_ts_``) and the
length of the part its parameters were learned from (``fit_len_``; the rest is its
calibration tail and what :meth:`~prism.forecasters.base.BaseForecaster.update` added since).
Before a saved model forecasts a store's series, the store's values are compared with it:

- points after the model's end, and late revisions of its calibration tail or of points added
  by updates, are **updated** into it (its parameters stay; its bands are recalibrated);
- a series that starts elsewhere, holds fewer points, has another step, or whose values differ
  where the parameters were learned is **refitted**: the model was fitted on other data (a
  registry shared by two stores, a series re-derived with another ``--fill``, a re-ingested
  trace), and forecasting from it would serve another store's history.

The CLI's and the API's saved-model paths both decide here, so they give one answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from prism.forecasters.base import BaseForecaster
from prism.schema import SERIES_ID, TS, VALUE


@dataclass(frozen=True)
class StoreSync:
    """How a fitted model stands against the stored series.

    Attributes:
        points: the stored points to :meth:`update` the model with (newer points and late
            revisions, from the first that differs), panel-shaped; empty when none.
        refit: why the model must be refitted instead (the first series found), or None.
    """

    points: pd.DataFrame
    refit: str | None = None


def _differ(seen: np.ndarray, stored: np.ndarray) -> np.ndarray:
    """Positions where two value arrays differ (NaN equals NaN)."""
    same = (seen == stored) | (np.isnan(seen) & np.isnan(stored))
    return np.flatnonzero(~same)


def store_sync(forecaster: BaseForecaster, panel: pd.DataFrame,
               freq_s: Mapping[str, int] | None = None) -> StoreSync:
    """Compare a fitted model with the stored series it holds; see the module docstring.

    Args:
        forecaster: a fitted forecaster (or :class:`~prism.forecasters.compose.SeriesModels`).
        panel: the stored panel of (some of) its series, sorted by series and time.
        freq_s: the stored step of each series in seconds, where known.

    Returns:
        The :class:`StoreSync`: the points to update with, or why to refit.
    """
    freq_s = freq_s or {}
    updates = []
    step = pd.Timedelta(seconds=forecaster.freq_s_)
    for sid, group in panel.groupby(SERIES_ID, sort=True):
        sid = str(sid)
        if sid not in forecaster.history_:
            continue
        seen = forecaster.history_[sid]
        stored = group[VALUE].to_numpy(dtype=np.float64)
        start = pd.Timestamp(group[TS].iloc[0])
        if freq_s.get(sid, forecaster.freq_s_) != forecaster.freq_s_:
            return StoreSync(panel.iloc[:0], f"{sid} is now stored every {freq_s[sid]} s, "
                                             f"the model's step is {forecaster.freq_s_} s")
        if start != forecaster.first_ts_[sid]:
            return StoreSync(panel.iloc[:0], f"{sid} now starts at {start}, the model's data "
                                             f"at {forecaster.first_ts_[sid]}")
        if len(stored) < len(seen):
            return StoreSync(panel.iloc[:0], f"the store holds {len(stored)} points of {sid}, "
                                             f"fewer than the {len(seen)} the model saw")
        same = len(seen)
        differ = _differ(seen, stored[:same])
        first = int(differ[0]) if len(differ) else same
        if first < forecaster.fit_len_[sid]:
            return StoreSync(panel.iloc[:0], f"the stored values of {sid} differ from those "
                                             f"the model was fitted on (first at "
                                             f"{forecaster.first_ts_[sid] + first * step})")
        if first < len(stored):
            updates.append(group.iloc[first:])
    points = pd.concat(updates, ignore_index=True) if updates else panel.iloc[:0]
    return StoreSync(points)
