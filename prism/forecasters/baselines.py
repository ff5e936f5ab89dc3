"""Baselines: naive, seasonal naive, window average.

Their quantiles come from the in-sample error of the same rule (one-step changes for naive,
season-over-season changes for seasonal naive, the spread of the window for window average),
widened with the square root of how many steps (or seasons) ahead a forecast is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prism.errors import DataContractError
from prism.forecasters.base import BaseForecaster, horizon_steps


def _offsets(errors: np.ndarray, quantiles: list[float]) -> np.ndarray:
    errors = errors[np.isfinite(errors)]
    if not len(errors) or not quantiles:
        return np.zeros(len(quantiles))
    return np.quantile(errors, quantiles)


class NaiveForecaster(BaseForecaster):
    """The last value, for ever.

    Args:
        random_state: unused (the rule is deterministic); kept for the common protocol.
    """

    alias = "naive"

    def __init__(self, *, random_state: int | None = None) -> None:
        self.random_state = random_state

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [{}, {"random_state": 1}]

    def _fit(self, values: dict[str, np.ndarray]) -> None:
        self.last_ = {sid: float(v[-1]) for sid, v in values.items()}
        self.offsets_ = {sid: np.diff(v) for sid, v in values.items()}

    def _predict(
        self, series_id: str, steps: int, quantiles: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        mean = np.full(steps, self.last_[series_id])
        spread = np.sqrt(np.arange(1, steps + 1))[:, None]
        offsets = _offsets(self.offsets_[series_id], quantiles)[None, :]
        return mean, mean[:, None] + spread * offsets


class SeasonalNaiveForecaster(BaseForecaster):
    """The last season, repeated.

    Args:
        season: the season as a duration (``1d``; ``1w`` for weekly) or a number of steps.
        random_state: unused; kept for the common protocol.
    """

    alias = "seasonal_naive"

    def __init__(self, *, season: str = "1d", random_state: int | None = None) -> None:
        self.season = season
        self.random_state = random_state

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [{"season": "1h"}, {"season": "6"}]

    def _fit(self, values: dict[str, np.ndarray]) -> None:
        self.season_steps_ = horizon_steps(self.season, self.freq_s_)
        s = self.season_steps_
        short = [sid for sid, v in values.items() if len(v) < s]
        if short:
            raise DataContractError(
                f"series {short[0]!r} is shorter than one season ({self.season}); pass a "
                "shorter season or more history"
            )
        self.last_season_ = {sid: v[-s:].copy() for sid, v in values.items()}
        self.errors_ = {sid: v[s:] - v[:-s] for sid, v in values.items()}

    def _predict(
        self, series_id: str, steps: int, quantiles: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        s = self.season_steps_
        mean = np.resize(self.last_season_[series_id], steps)
        seasons_ahead = np.ceil(np.arange(1, steps + 1) / s)
        offsets = _offsets(self.errors_[series_id], quantiles)[None, :]
        return mean, mean[:, None] + np.sqrt(seasons_ahead)[:, None] * offsets


class WindowAverageForecaster(BaseForecaster):
    """The mean of the last window; quantiles are the window's own quantiles.

    Args:
        window: the window as a duration (``1d``) or a number of steps.
        random_state: unused; kept for the common protocol.
    """

    alias = "window_average"

    def __init__(self, *, window: str = "1d", random_state: int | None = None) -> None:
        self.window = window
        self.random_state = random_state

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [{"window": "1h"}, {"window": "3"}]

    def _fit(self, values: dict[str, np.ndarray]) -> None:
        w = horizon_steps(self.window, self.freq_s_)
        self.window_ = {sid: v[-w:].copy() for sid, v in values.items()}

    def _predict(
        self, series_id: str, steps: int, quantiles: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        window = self.window_[series_id]
        mean = np.full(steps, float(window.mean()))
        bands = np.quantile(window, quantiles) if quantiles else np.zeros(0)
        return mean, np.tile(bands, (steps, 1))


class TimeOfDayQuantileForecaster(BaseForecaster):
    """Empirical quantiles of the same time of day (and weekday) over recent history.

    Args:
        weekly: slots by weekday and time of day (``True``) or by time of day only.
        lookback: history used, as a duration (``4w``) or a number of steps.
        random_state: unused; kept for the common protocol.
    """

    alias = "time_of_day_quantile"

    def __init__(
        self, *, weekly: bool = True, lookback: str = "4w", random_state: int | None = None
    ) -> None:
        self.weekly = weekly
        self.lookback = lookback
        self.random_state = random_state

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [{"weekly": False, "lookback": "2d"}, {"weekly": True, "lookback": "200"}]

    def _slots(self, seconds: np.ndarray) -> np.ndarray:
        day = (seconds // self.freq_s_) % (86_400 // self.freq_s_)
        if not self.weekly:
            return day
        weekday = (seconds // 86_400 + 3) % 7  # 1970-01-01 was a Thursday
        return weekday * (86_400 // self.freq_s_) + day

    def _seconds(self, series_id: str, offsets: np.ndarray) -> np.ndarray:
        last = self.last_ts_[series_id].value // 1_000_000_000
        return last + offsets * self.freq_s_

    def _fit(self, values: dict[str, np.ndarray]) -> None:
        keep = horizon_steps(self.lookback, self.freq_s_)
        self.history_ = {}
        for sid, v in values.items():
            recent = v[-keep:]
            slots = self._slots(self._seconds(sid, np.arange(-len(recent) + 1, 1)))
            self.history_[sid] = (slots, recent.copy())

    def _predict(
        self, series_id: str, steps: int, quantiles: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        slots, recent = self.history_[series_id]
        future = self._slots(self._seconds(series_id, np.arange(1, steps + 1)))
        mean = np.empty(steps)
        bands = np.empty((steps, len(quantiles)))
        for i, slot in enumerate(future):
            same = recent[slots == slot]
            pool = same if len(same) else recent  # a slot not seen yet: all recent history
            mean[i] = pool.mean()
            if quantiles:
                bands[i] = np.quantile(pool, quantiles)
        return mean, bands
