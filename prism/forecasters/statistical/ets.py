"""``ets``: additive Holt-Winters per series (damped trend, additive season at a duration)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt

from prism.forecasters.base import MIN_FIT_STEPS, BaseForecaster, FloatArray
from prism.forecasters.statistical.holt_winters import (
    HoltWintersParams,
    fit_holt_winters,
    holt_winters_forecast,
)

logger = logging.getLogger(__name__)

Ends = npt.NDArray[np.int64]


class EtsForecaster(BaseForecaster):
    """Holt-Winters exponential smoothing per series (additive, damped trend, additive season).

    statsmodels fits the parameters; forecasts from any origin run the same recursion in
    numpy from the fitted initial states (one pass over the history for all origins).

    Args:
        season: the seasonal period as a duration (``1d``) or steps; ``None`` for no season.
            A series with fewer than two seasons of history is fitted without one.
        trend: add an additive trend.
        damped: damp it.
        initialization: ``"profile"`` (initial seasons from the mean seasonal profile, only
            the smoothing parameters optimised) or ``"estimated"`` (statsmodels optimises
            every initial state too). On 30 Helios, Alibaba and Philly series at 10 min,
            ``"profile"`` fitted ~4x faster with a day-ahead MAE within 0.5 % on average.
        fit_window: fit on the last ``fit_window`` (a duration or steps) of each series only;
            ``None`` for all of it. Shorter windows fit faster but estimate the season from
            fewer cycles (less accurate on the Helios series at 2-3 weeks). At least
            ``MIN_FIT_STEPS`` steps.
    """

    alias = "ets"

    def __init__(
        self,
        *,
        season: str | None = "1d",
        trend: bool = True,
        damped: bool = True,
        initialization: str = "profile",
        fit_window: str | None = None,
    ) -> None:
        self.season = season
        self.trend = trend
        self.damped = damped
        self.initialization = initialization
        self.fit_window = fit_window

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [
            {"season": "1h"},
            {"season": None, "trend": False, "damped": False},
            {"season": "1h", "initialization": "estimated", "fit_window": "1d"},
        ]

    def _fit(self, values: dict[str, FloatArray]) -> None:
        period = self._steps_of(self.season) if self.season else None
        if period is not None and period < 2:
            logger.info("season %s is %d step of these series: ETS without a season",
                        self.season, period)
            period = None
        window = (max(self._steps_of(self.fit_window), MIN_FIT_STEPS) if self.fit_window
                  else None)  # a week of a daily series is 7 points: too few to fit on
        self.params_: dict[str, HoltWintersParams] = {}
        self.start_: dict[str, int] = {}
        for sid, y in values.items():
            start = max(0, len(y) - window) if window else 0
            part = y[start:]
            seasonal = period if period and len(part) >= 2 * period else None
            if period and seasonal is None:
                logger.info("%s: fewer than two seasons (%s) to fit on; ETS without a season",
                            sid, self.season)
            self.params_[sid] = fit_holt_winters(
                part, period=seasonal, trend=self.trend, damped=self.damped,
                initialization=self.initialization)
            self.start_[sid] = start

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Ends,
                       steps: int) -> FloatArray:
        return holt_winters_forecast(history, self.params_[series_id], self.start_[series_id],
                                     ends, steps)
