"""``theta``: the Theta method as SES with drift on a deseasonalised series."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar
from scipy.signal import lfilter

from prism.errors import ConfigError
from prism.forecasters.base import BaseForecaster, FloatArray

logger = logging.getLogger(__name__)

Ends = npt.NDArray[np.int64]


def _ses_levels(x: FloatArray, alpha: float) -> FloatArray:
    """SES levels after each value, starting from the first value (statsmodels' Theta)."""
    if alpha >= 1.0:
        return np.asarray(x, dtype=np.float64).copy()
    # l_t = alpha x_t + (1 - alpha) l_{t-1}, l_{-1} = x_0
    zi = np.array([(1.0 - alpha) * x[0]])
    levels, _ = lfilter([alpha], [1.0, -(1.0 - alpha)], x, zi=zi)
    return np.asarray(levels, dtype=np.float64)


def _ses_alpha(x: FloatArray) -> float:
    """The SES smoothing that minimises the one-step squared error, level starting at x[0]."""
    if len(x) < 3 or np.ptp(x) == 0:
        return 1.0

    def sse(alpha: float) -> float:
        levels = _ses_levels(x, alpha)
        return float(np.sum((x[1:] - levels[:-1]) ** 2))

    res = minimize_scalar(sse, bounds=(1e-4, 1.0), method="bounded",
                          options={"xatol": 1e-7})
    alpha = float(res.x)
    return 1.0 if sse(1.0) <= sse(alpha) else alpha


class ThetaForecaster(BaseForecaster):
    """The Theta method (Assimakopoulos & Nikolopoulos 2000) as SES with drift.

    The series is deseasonalised (classical decomposition at ``season``) when a 90 % ACF
    test finds the season (or always, without the test); the forecast is the SES forecast
    of the deseasonalised series plus ``(1 - 1/theta) * b0 * (h - 1 + 1/alpha -
    (1 - alpha)^T / alpha)`` (Hyndman & Billah 2003; statsmodels' ``ThetaModel``), with
    ``b0`` the slope of a linear trend fitted to it and ``T`` the values seen, then
    reseasonalised. ``alpha``, ``b0`` and the seasonal indices are learned in ``fit``; the
    forecast from any origin runs the SES level with them fixed.

    Args:
        season: the seasonal period (a duration or steps); ``None`` for none.
        method: ``"additive"`` (safe with zeros), ``"multiplicative"`` (used only where every
            value and index is positive; otherwise additive, logged) or ``"auto"``
            (multiplicative where valid).
        theta: the theta coefficient (2 is the classic method: half the trend's slope).
        seasonality_test: deseasonalise only when the lag-``season`` autocorrelation is
            significant at 90 %.
    """

    alias = "theta"

    def __init__(
        self,
        *,
        season: str | None = "1d",
        method: str = "additive",
        theta: float = 2.0,
        seasonality_test: bool = True,
    ) -> None:
        self.season = season
        self.method = method
        self.theta = theta
        self.seasonality_test = seasonality_test

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [
            {"season": "1h"},
            {"season": "6h", "method": "auto", "seasonality_test": False},
            {"season": None, "theta": 3.0},
        ]

    def _fit(self, values: dict[str, FloatArray]) -> None:
        if self.method not in ("additive", "multiplicative", "auto"):
            raise ConfigError(f"method {self.method!r} is not known; use 'additive', "
                              "'multiplicative' or 'auto'")
        if not self.theta >= 1:
            raise ConfigError(f"theta must be at least 1; got {self.theta!r}")
        period = self._steps_of(self.season) if self.season else None
        self.indices_: dict[str, FloatArray] = {}
        self.multiplicative_: dict[str, bool] = {}
        self.alpha_: dict[str, float] = {}
        self.drift_: dict[str, float] = {}
        for sid, y in values.items():
            indices, multiplicative = self._seasonal_indices(sid, y, period)
            self.indices_[sid] = indices
            self.multiplicative_[sid] = multiplicative
            x = self._deseasonalise(sid, y, 0)
            t = np.arange(len(x), dtype=np.float64)
            self.drift_[sid] = float(np.polyfit(t, x, 1)[0]) if len(x) > 1 else 0.0
            self.alpha_[sid] = _ses_alpha(x)

    def _seasonal_indices(self, series_id: str, y: FloatArray,
                          period: int | None) -> tuple[FloatArray, bool]:
        """Seasonal indices by phase (from position 0) and whether they divide."""
        from statsmodels.tsa.seasonal import seasonal_decompose

        if not period or period < 2 or len(y) < 2 * period:
            if period and period >= 2:
                logger.info("%s: fewer than two seasons (%s); Theta without a season",
                            series_id, self.season)
            return np.zeros(0), False
        if self.seasonality_test and not _acf_seasonal(y, period):
            logger.info("%s: no significant season at %s; Theta without a season",
                        series_id, self.season)
            return np.zeros(0), False
        multiplicative = self.method == "multiplicative" or (
            self.method == "auto" and bool(np.all(y > 0)))
        if multiplicative and np.all(y > 0):
            indices = np.asarray(seasonal_decompose(y, model="multiplicative",
                                                    period=period).seasonal[:period])
            if np.all(indices > 0):
                return indices.astype(np.float64), True
        if multiplicative:
            logger.info("%s: multiplicative deseasonalising needs positive values and "
                        "indices; using additive", series_id)
        indices = np.asarray(seasonal_decompose(y, model="additive",
                                                period=period).seasonal[:period])
        return indices.astype(np.float64), False

    def _season_at(self, series_id: str, positions: npt.NDArray[np.int64]) -> FloatArray:
        indices = self.indices_[series_id]
        if not len(indices):
            neutral = 1.0 if self.multiplicative_[series_id] else 0.0
            return np.full(positions.shape, neutral)
        return np.asarray(indices[positions % len(indices)], dtype=np.float64)

    def _deseasonalise(self, series_id: str, y: FloatArray, start: int) -> FloatArray:
        season = self._season_at(series_id, np.arange(start, start + len(y)))
        return np.asarray(y / season if self.multiplicative_[series_id] else y - season,
                          dtype=np.float64)

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Ends,
                       steps: int) -> FloatArray:
        ends = np.asarray(ends, dtype=np.int64)
        alpha, drift = self.alpha_[series_id], self.drift_[series_id]
        x = self._deseasonalise(series_id, history[:int(ends.max())], 0)
        levels = _ses_levels(x, alpha)[ends - 1]
        h = np.arange(1, steps + 1, dtype=np.float64)
        seen = ends.astype(np.float64)[:, None]
        ramp = h[None, :] - 1.0 + (1.0 - (1.0 - alpha) ** seen) / alpha
        out = levels[:, None] + (1.0 - 1.0 / self.theta) * drift * ramp
        season = self._season_at(series_id, ends[:, None] + np.arange(steps)[None, :])
        return np.asarray(out * season if self.multiplicative_[series_id] else out + season,
                          dtype=np.float64)


def _acf_seasonal(y: FloatArray, period: int) -> bool:
    """statsmodels' Theta test: the lag-``period`` autocorrelation is significant at 90 %."""
    from statsmodels.tsa.stattools import acf

    if np.ptp(y) == 0 or len(y) <= period:
        return False
    rho = acf(y, nlags=period, fft=True)
    stat = len(y) * rho[-1] ** 2 / np.sum(rho[:-1] ** 2)
    return bool(stat > 2.705543454095404)  # chi2(1) at 90 %, 1.645 ** 2
