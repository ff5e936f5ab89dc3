"""The season a series repeats, and whether it cycles at all.

The season candidate repeats the period whose last cycle predicted the next one best, among
the series' spectral periods and a day (a period's harmonic can outscore it in the spectrum
of a square wave), or a week where that predicted clearly better still. Whether the series
*cycles* (its cycle candidates forecast it, a held value is not held, a fresh move is not a
jump) is told apart from the season chosen: a random walk has a best lag too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prism.forecasters.base import FloatArray
from prism.primitives.spectral import whole_ratio
from prism.primitives.types import Period

#: With ``use_cycle_gate``, a series without a spectral period keeps its cycle candidates when
#: its season's lag error is under this share of half a season's.
REPEAT_SHARE = 0.5
#: A week is the season when the series holds two and its last week predicts the next
#: clearly better (this share of the error, or less) than the best shorter period: the
#: spectrum of a few weeks rarely shows a weekly period, and a weekday plateau that stops at
#: the weekend made the daily season candidates forecast Monday morning at Sunday's level
#: (13 times the last value's MAE over the next 6 h on a generated weekly panel). On the noise
#: of a random walk a week's lag error is the larger (a day's on the Helios VCs: within 4 %).
WEEK_MARGIN = 0.9
#: A series is periodic when its season and one of its spectral periods are whole multiples,
#: within this much of their ratio (Helios' day: 149-151 steps in the spectrum, 144 by lag
#: error). A hand-scaled fleet's steps (a random walk) showed a "period" of 695 steps, 3.1
#: times in 15 days, beside a season of a day: treated as cycling, its forecast went back to
#: yesterday's level where the last value held.
SEASON_MATCH = 0.1


@dataclass(frozen=True)
class Season:
    """A series' season (in steps) and the two tests of whether it cycles."""

    steps: int
    periodic: bool  # the season matches a period of the spectrum (``SEASON_MATCH``)
    repeats: bool  # its last season predicted the next far better than half a season did


def choose_season(y: FloatArray, periods: Sequence[Period], day: int, *,
                  use_week: bool) -> Season:
    """The season of ``y`` among ``periods`` (its spectrum's) and ``day`` (steps), or a week
    with ``use_week``; see the module docstring."""
    choices = {int(round(p.steps)) for p in periods} | {day}
    choices = {c for c in choices if 2 <= c < len(y)} or {min(day, max(1, len(y) - 1))}

    def lag_error(c: int) -> float:
        return float(np.mean(np.abs(y[c:] - y[:-c])))

    season = min(sorted(choices), key=lag_error)
    week = 7 * day
    if use_week and week not in choices and len(y) >= 2 * week and (
            lag_error(week) <= WEEK_MARGIN * lag_error(season)):
        season = week
    # a cycle the spectrum misses (a noiseless square wave: its background is all leakage)
    # still repeats: its last season predicts the next far better than half a season does
    repeats = season >= 4 and lag_error(season) < REPEAT_SHARE * lag_error(season // 2)
    periodic = any(whole_ratio(season, p.steps, SEASON_MATCH) for p in periods)
    return Season(steps=season, periodic=periodic, repeats=bool(repeats))
