"""Baselines: naive, seasonal naive, window average, time-of-day quantiles.

They have no parameters to learn: each forecast is a rule over the history before the origin.
Their quantiles are conformal, from the errors of the same rule on the held-out tail
(:mod:`prism.forecasters.conformal`); ``time_of_day_quantile`` has native quantiles (the
empirical quantiles of its slot), calibrated the same way. None of them draws anything at
random, so none takes a ``random_state``.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt

from prism.errors import DataContractError
from prism.forecasters.base import BaseForecaster, FloatArray, Paths

Ends = npt.NDArray[np.int64]


class _PanelRule(BaseForecaster):
    """A baseline whose rule forecasts every row of a 2-D panel at once.

    ``_forecast_panel`` is the rule, written once over ``(series, time)``: the per-series
    ``_forecast_many`` is its one-row case, and :mod:`prism.forecasters.panel_fast` runs it
    (and the conformal calibration) over many series of one step and length together, with
    the same numbers.
    """

    def _fit(self, values: dict[str, FloatArray]) -> None:
        self._learn_rule()

    def _learn_rule(self) -> None:  # noqa: B027 (optional hook)
        """Set the rule's state (a season or a window in steps) from ``freq_s_`` alone."""

    def _min_points(self) -> int:
        """The fewest points a series needs for ``fit`` (after :meth:`_learn_rule`)."""
        return 2

    @abc.abstractmethod
    def _forecast_panel(self, values: FloatArray, ends: Ends, steps: int) -> FloatArray:
        """``(n_series, len(ends), steps)`` forecasts of each row of ``values`` (series of
        one length) from each origin, using ``values[:, :end]`` only; may be a read-only
        broadcast view."""

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Ends,
                       steps: int) -> FloatArray:
        return np.array(self._forecast_panel(history[None, :], ends, steps)[0])


class NaiveForecaster(_PanelRule):
    """The last value, for ever (no hyperparameters)."""

    alias = "naive"

    def _forecast_panel(self, values: FloatArray, ends: Ends, steps: int) -> FloatArray:
        last = values[:, ends - 1]
        return np.broadcast_to(last[:, :, None], (*last.shape, steps))


class SeasonalNaiveForecaster(_PanelRule):
    """The last season, repeated.

    Args:
        season: the season as a duration (``1d``; ``1w`` for weekly) or a number of steps.
    """

    alias = "seasonal_naive"

    def __init__(self, *, season: str = "1d") -> None:
        self.season = season

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [{"season": "1h"}, {"season": "6"}]

    def _fit(self, values: dict[str, FloatArray]) -> None:
        self._learn_rule()
        short = [sid for sid, v in self.history_.items() if len(v) < self.season_steps_]
        if short:
            raise DataContractError(
                f"series {short[0]!r} is shorter than one season ({self.season}); pass a "
                "shorter season or more history"
            )

    def _learn_rule(self) -> None:
        self.season_steps_ = self._steps_of(self.season)

    def _min_points(self) -> int:
        return max(2, self.season_steps_)

    def _forecast_panel(self, values: FloatArray, ends: Ends, steps: int) -> FloatArray:
        # as base._seasonal_naive_paths: the season before each origin, repeated; the last
        # value from an origin less than a season in
        season = self.season_steps_
        k = np.arange(steps)
        idx = np.where((ends >= season)[:, None], (ends - season)[:, None] + k[None, :] % season,
                       (ends - 1)[:, None])
        return values[:, idx]


class WindowAverageForecaster(_PanelRule):
    """The mean of the last window.

    Args:
        window: the window as a duration (``1d``) or a number of steps.
    """

    alias = "window_average"

    def __init__(self, *, window: str = "1d") -> None:
        self.window = window

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [{"window": "1h"}, {"window": "3"}]

    def _learn_rule(self) -> None:
        self.window_steps_ = self._steps_of(self.window)

    def _forecast_panel(self, values: FloatArray, ends: Ends, steps: int) -> FloatArray:
        w = self.window_steps_
        csum = np.concatenate([np.zeros((len(values), 1)), np.cumsum(values, axis=1)], axis=1)
        starts = np.maximum(ends - w, 0)
        means = (csum[:, ends] - csum[:, starts]) / (ends - starts)
        return np.broadcast_to(means[:, :, None], (*means.shape, steps))


#: Native quantile levels of ``time_of_day_quantile``.
_TOD_LEVELS = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)


class TimeOfDayQuantileForecaster(BaseForecaster):
    """Empirical quantiles of the same time of day (and weekday) over recent history.

    The mean is the mean of the slot's values in the lookback, its quantiles their empirical
    quantiles (then calibrated on the held-out tail). A slot with no value in the lookback
    takes all of the lookback.

    Args:
        weekly: slots by weekday and time of day (``True``) or by time of day only.
        lookback: history used, as a duration (``4w``) or a number of steps.
    """

    alias = "time_of_day_quantile"
    native_levels = _TOD_LEVELS

    def __init__(self, *, weekly: bool = True, lookback: str = "4w") -> None:
        self.weekly = weekly
        self.lookback = lookback

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [{"weekly": False, "lookback": "2d"}, {"weekly": True, "lookback": "200"}]

    def _fit(self, values: dict[str, FloatArray]) -> None:
        self.keep_ = self._steps_of(self.lookback)

    def _period(self) -> int:
        """Steps between two visits of the same slot (a day, or a week)."""
        per_day = max(1, 86_400 // self.freq_s_)
        return per_day * (7 if self.weekly else 1)

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Ends,
                       steps: int) -> Paths:
        # On a regular grid the values of target t's slot are t - P, t - 2P, ... (P a day or
        # a week); those before the origin and inside the lookback form its pool.
        period = self._period()
        reach = self.keep_ // period + 2
        target = ends[:, None] + np.arange(steps)[None, :]  # (origins, steps)
        first_j = (target - ends[:, None]) // period + 1
        j = first_j[:, :, None] + np.arange(reach)[None, None, :]
        idx = target[:, :, None] - j * period
        lo = np.maximum(ends - self.keep_, 0)[:, None, None]
        ok: npt.NDArray[np.bool_] = idx >= lo
        pool = np.where(ok, history[np.clip(idx, 0, None)], np.nan)
        empty: npt.NDArray[np.bool_] = ~np.any(ok, axis=2)
        means = np.empty(target.shape)
        bands = np.empty((*target.shape, len(_TOD_LEVELS)))
        full = ~empty
        if full.any():
            means[full] = np.nanmean(pool[full], axis=1)
            bands[full] = _nan_quantiles(pool[full], _TOD_LEVELS)
        for i in np.flatnonzero(empty.any(axis=1)):  # slots not seen yet: all recent history
            recent = history[int(lo[i, 0, 0]):int(ends[i])]
            means[i, empty[i]] = recent.mean()
            bands[i, empty[i]] = np.quantile(recent, _TOD_LEVELS)
        return Paths(means, bands)


def _nan_quantiles(rows: FloatArray, levels: tuple[float, ...]) -> FloatArray:
    """Quantiles of each row, NaN ignored (as ``np.nanquantile``, linear), vectorised.

    ``np.nanquantile`` loops over rows in Python: 100 times slower on many short rows.
    """
    ordered = np.sort(rows, axis=1)  # NaN last
    count = np.isfinite(ordered).sum(axis=1)
    out = np.empty((len(rows), len(levels)))
    r = np.arange(len(rows))
    for j, q in enumerate(levels):
        pos = (count - 1) * q
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, count - 1)
        w = pos - lo
        out[:, j] = ordered[r, lo] * (1.0 - w) + ordered[r, hi] * w
    return out
