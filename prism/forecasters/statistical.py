"""Statistical forecasters on statsmodels.

``ets``: Holt-Winters exponential smoothing (additive, optionally damped trend, additive season
at a duration). Quantiles assume Gaussian errors with the in-sample residual spread, widened
with the square root of the steps ahead; conformal calibration on rolling-origin residuals is
still to come (issue #4).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
from scipy.stats import norm

from prism.forecasters.base import BaseForecaster, horizon_steps

logger = logging.getLogger(__name__)


class EtsForecaster(BaseForecaster):
    """Holt-Winters exponential smoothing per series.

    Args:
        season: the seasonal period as a duration (``1d``) or steps; ``None`` for no season.
        trend: add a (damped) additive trend.
        damped: damp the trend.
        random_state: unused (the fit is deterministic); kept for the common protocol.
    """

    alias = "ets"

    def __init__(
        self,
        *,
        season: str | None = "1d",
        trend: bool = True,
        damped: bool = True,
        random_state: int | None = None,
    ) -> None:
        self.season = season
        self.trend = trend
        self.damped = damped
        self.random_state = random_state

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [{"season": "1h"}, {"season": None, "trend": False, "damped": False}]

    def _fit(self, values: dict[str, np.ndarray]) -> None:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        period = horizon_steps(self.season, self.freq_s_) if self.season else None
        self.models_: dict[str, Any] = {}
        self.sigma_: dict[str, float] = {}
        for sid, y in values.items():
            seasonal = period if period and len(y) >= 2 * period else None
            if period and seasonal is None:
                logger.info("%s: fewer than two seasons of history; ETS without a season", sid)
            model = ExponentialSmoothing(
                y, trend="add" if self.trend else None,
                damped_trend=bool(self.trend and self.damped),
                seasonal="add" if seasonal else None, seasonal_periods=seasonal,
                initialization_method="estimated",
            )
            with warnings.catch_warnings():  # convergence chatter; the fit is still usable
                warnings.simplefilter("ignore")
                fitted = model.fit(optimized=True)
            self.models_[sid] = fitted
            resid = y - fitted.fittedvalues
            self.sigma_[sid] = float(np.std(resid[np.isfinite(resid)])) if len(y) > 1 else 0.0

    def _predict(
        self, series_id: str, steps: int, quantiles: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        mean = np.asarray(self.models_[series_id].forecast(steps), dtype=np.float64)
        spread = self.sigma_[series_id] * np.sqrt(np.arange(1, steps + 1))[:, None]
        z = norm.ppf(quantiles)[None, :] if quantiles else np.zeros((1, 0))
        return mean, mean[:, None] + spread * z
