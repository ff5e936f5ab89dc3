"""``arima``: ARIMA per series, the order chosen by AIC under a time budget."""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from prism.errors import ConfigError
from prism.forecasters.base import MIN_FIT_STEPS, BaseForecaster, FloatArray

logger = logging.getLogger(__name__)

Ends = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ArimaSpec:
    """One fitted ARIMA model: its orders, trend and parameters (not the data).

    Attributes:
        order: ``(p, d, q)``.
        seasonal_order: ``(P, D, Q, m)``; ``(0, 0, 0, 0)`` without a season.
        trend: statsmodels' trend code (``"c"`` a mean for ``d = D = 0``, else ``"n"``).
        params: the fitted parameters, in statsmodels' order.
        aic: the AIC of the fit.
    """

    order: tuple[int, int, int]
    seasonal_order: tuple[int, int, int, int]
    trend: str
    params: FloatArray
    aic: float

    def model(self, y: FloatArray) -> Any:
        """The statsmodels ``ARIMA`` of this spec on ``y``."""
        from statsmodels.tsa.arima.model import ARIMA

        return ARIMA(y, order=self.order, seasonal_order=self.seasonal_order, trend=self.trend)


def arima_paths(spec: ArimaSpec, history: FloatArray, ends: Ends, steps: int) -> FloatArray:
    """Forecasts ``(len(ends), steps)`` of a fitted ARIMA from origins ``ends``.

    One Kalman filter pass with the parameters fixed gives the predicted state at each
    origin (from ``history[:e]`` only); the forecast propagates it with the transition.
    """
    ends = np.asarray(ends, dtype=np.int64)
    top = int(ends.max())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = spec.model(history[:top]).filter(spec.params, cov_type="none")
    fr = res.filter_results
    design = np.asarray(fr.design[:, :, 0])
    transition = np.asarray(fr.transition[:, :, 0])
    state_c = np.asarray(fr.state_intercept[:, 0])
    obs_c = float(np.asarray(fr.obs_intercept)[0, 0])  # the mean (d = 0) or 0: constant
    state = np.asarray(fr.predicted_state[:, ends], dtype=np.float64)  # (k_states, n_ends)
    out = np.empty((len(ends), steps))
    for j in range(steps):
        out[:, j] = obs_c + (design @ state)[0]
        state = transition @ state + state_c[:, None]
    return out


def _kpss_differences(y: FloatArray, max_d: int) -> int:
    """Differences needed for a KPSS test (level stationarity, 5 %) to pass, at most max_d."""
    from statsmodels.tsa.stattools import kpss

    d = 0
    x = np.asarray(y, dtype=np.float64)
    while d < max_d and len(x) > 10 and np.ptp(x) > 0:
        with warnings.catch_warnings():  # p-value outside the table: the statistic decides
            warnings.simplefilter("ignore")
            stat, _, _, crit = kpss(x, regression="c", nlags="auto")
        if stat <= crit["5%"]:
            break
        x = np.diff(x)
        d += 1
    return d


class ArimaForecaster(BaseForecaster):
    """ARIMA per series, the order chosen by AIC inside bounds under a time budget.

    ``d`` is the number of differences a KPSS test needs (at most ``max_d``); ``(p, q)`` is
    searched stepwise (Hyndman & Khandakar: start from (2, 2), (0, 0), (1, 0), (0, 1), move to
    the best neighbour p +- 1, q +- 1 while the AIC improves) or over the whole grid, each
    candidate fitted by exact maximum likelihood (statsmodels ``ARIMA``, innovations MLE; state
    space MLE with a season). A mean is included when the series is not differenced. The
    search stops when ``time_budget`` seconds have passed (a fit under way finishes) and keeps
    the best model so far. Forecasts from any origin reuse the fitted parameters through one
    Kalman filter pass.

    Args:
        max_p / max_d / max_q: upper bounds of the orders.
        d: the number of differences, fixed; ``None`` (default) lets KPSS tests choose it
            up to ``max_d``.
        season: a seasonal part at this period (a duration or steps), ``None`` (default) for
            none: a daily season of 144 ten-minute steps makes the state space very slow.
        seasonal_order: ``(P, D, Q)`` of the seasonal part when ``season`` is set (fixed, not
            searched).
        stepwise: stepwise search (``True``) or the whole grid.
        fit_window: fit on the last ``fit_window`` of each series (a duration or steps;
            ``None`` for all). A week at ten minutes is 1,008 points, plenty for a few ARMA
            coefficients; on 14 Helios and Alibaba series its mean day-ahead error was lower
            than with two or four weeks (median within 5 %; the longer windows let KPSS
            pick ``d = 0`` more often, whose mean one day cannot reach) and it fits faster.
            At least ``MIN_FIT_STEPS`` steps (a week of a daily series is 7 points).
        time_budget: seconds for the order search of one series.
    """

    alias = "arima"

    def __init__(
        self,
        *,
        max_p: int = 3,
        max_d: int = 1,
        max_q: int = 3,
        d: int | None = None,
        season: str | None = None,
        seasonal_order: tuple[int, int, int] = (0, 1, 1),
        stepwise: bool = True,
        fit_window: str | None = "1w",
        time_budget: float = 30.0,
    ) -> None:
        self.max_p = max_p
        self.max_d = max_d
        self.max_q = max_q
        self.d = d
        self.season = season
        self.seasonal_order = seasonal_order
        self.stepwise = stepwise
        self.fit_window = fit_window
        self.time_budget = time_budget

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [
            {"max_p": 1, "max_q": 1, "fit_window": "1d"},
            {"max_p": 1, "max_d": 0, "max_q": 1, "stepwise": False, "time_budget": 5.0},
            {"max_p": 1, "max_d": 0, "max_q": 0, "season": "1h", "fit_window": "1d"},
        ]

    def _check_params(self) -> None:
        for name in ("max_p", "max_d", "max_q", "d"):
            value = getattr(self, name)
            if name == "d" and value is None:
                continue
            if not isinstance(value, int | np.integer) or value < 0:
                raise ConfigError(f"{name} must be a whole number >= 0; got {value!r}")
        if len(tuple(self.seasonal_order)) != 3 or min(self.seasonal_order) < 0:
            raise ConfigError(
                f"seasonal_order must be three whole numbers (P, D, Q) >= 0; "
                f"got {self.seasonal_order!r}"
            )
        if not self.time_budget > 0:
            raise ConfigError(f"time_budget must be a positive number of seconds; "
                              f"got {self.time_budget!r}")

    def _fit(self, values: dict[str, FloatArray]) -> None:
        self._check_params()
        window = (max(self._steps_of(self.fit_window), MIN_FIT_STEPS) if self.fit_window
                  else None)  # a week of a daily series is 7 points: too few to fit on
        period = self._steps_of(self.season) if self.season else None
        self.specs_: dict[str, ArimaSpec] = {}
        for sid, y in values.items():
            part = y[-window:] if window else y
            self.specs_[sid] = self._search(sid, part, period)

    def _search(self, series_id: str, y: FloatArray, period: int | None) -> ArimaSpec:
        if np.ptp(y) == 0:  # nothing to fit: the constant, with a negligible variance
            logger.info("%s: constant over the fitting window; ARIMA is its mean", series_id)
            return ArimaSpec((0, 0, 0), (0, 0, 0, 0), "c", np.array([float(y[0]), 1e-8]),
                             math.inf)
        big_p, big_d, big_q = (int(v) for v in self.seasonal_order)
        if period is not None and period < 2:
            logger.info("%s: season %s is one step of this series; ARIMA without a season",
                        series_id, self.season)
            period = None
        if period and len(y) < 2 * period + 2:
            logger.info("%s: fewer than two seasons (%s) to fit on; ARIMA without a season",
                        series_id, self.season)
            period = None
        m = period or 0
        seasonal = (big_p, big_d, big_q, m) if m else (0, 0, 0, 0)
        x = y
        for _ in range(big_d if m else 0):  # KPSS decides d after seasonal differencing
            x = np.asarray(x[m:] - x[:-m], dtype=np.float64)
        d = int(self.d) if self.d is not None else _kpss_differences(x, int(self.max_d))
        trend = "c" if d == 0 and seasonal[1] == 0 else "n"
        method = "statespace" if m else "innovations_mle"
        tried: dict[tuple[int, int], ArimaSpec | None] = {}
        start = time.perf_counter()
        out_of_time = False

        def fit(p: int, q: int) -> None:
            nonlocal out_of_time
            if (p, q) in tried or p > self.max_p or q > self.max_q or p < 0 or q < 0:
                return
            if any(tried.values()) and time.perf_counter() - start > self.time_budget:
                out_of_time = True
                return
            tried[(p, q)] = None
            # innovations MLE would estimate a mean by feasible GLS (several full fits):
            # the sample mean is as efficient for a stationary series, so fit the demeaned
            # series and count the mean as one more parameter
            demean = trend == "c" and method == "innovations_mle"
            mean = float(np.mean(y)) if demean else 0.0
            spec = ArimaSpec((p, d, q), seasonal, "n" if demean else trend, np.zeros(0),
                             math.inf)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = spec.model(y - mean).fit(method=method)
            except (ValueError, np.linalg.LinAlgError, IndexError, ArithmeticError) as exc:
                logger.debug("%s: ARIMA%s failed: %s", series_id, (p, d, q), exc)
                return
            params = np.asarray(res.params, dtype=np.float64)
            aic = float(res.aic) + (2.0 if demean else 0.0)
            if np.isfinite(aic) and np.all(np.isfinite(params)):
                tried[(p, q)] = ArimaSpec((p, d, q), seasonal, trend,
                                          np.r_[mean, params] if demean else params, aic)

        def best() -> ArimaSpec | None:
            fitted = [s for s in tried.values() if s is not None]
            return min(fitted, key=lambda s: s.aic) if fitted else None

        if self.stepwise:
            for p, q in ((2, 2), (0, 0), (1, 0), (0, 1)):
                fit(min(p, self.max_p), min(q, self.max_q))
            current = best()
            while current is not None and not out_of_time:
                p0, q0 = current.order[0], current.order[2]
                for dp, dq in ((-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (1, 1), (-1, 1),
                               (1, -1)):
                    fit(p0 + dp, q0 + dq)
                nxt = best()
                if nxt is None or nxt.aic >= current.aic:
                    break
                current = nxt
        else:
            pairs = sorted(((p, q) for p in range(self.max_p + 1) for q in range(self.max_q + 1)),
                           key=lambda pq: (pq[0] + pq[1], pq))
            for p, q in pairs:
                fit(p, q)
        chosen = best()
        elapsed = time.perf_counter() - start
        if out_of_time:
            logger.warning(
                "%s: ARIMA order search stopped by its %.0f s time budget after %d fits "
                "(%.1f s); keeping the best so far%s", series_id, self.time_budget, len(tried),
                elapsed, f" {chosen.order}" if chosen else "")
        if chosen is None:
            chosen = self._random_walk(series_id, y, seasonal)
        logger.info("%s: ARIMA%s%s AIC %.1f (%d fits, %.1f s)", series_id, chosen.order,
                    chosen.seasonal_order[:3] if period else "", chosen.aic, len(tried), elapsed)
        return chosen

    @staticmethod
    def _random_walk(series_id: str, y: FloatArray,
                     seasonal: tuple[int, int, int, int]) -> ArimaSpec:
        """ARIMA(0, 1, 0) with the variance of the steps, when no candidate could be fitted."""
        logger.warning("%s: no ARIMA candidate could be fitted; using a random walk",
                       series_id)
        var = float(np.var(np.diff(y))) if len(y) > 2 else 1.0
        n_seasonal = sum(seasonal[i] for i in (0, 2))
        params = np.r_[np.zeros(n_seasonal), max(var, 1e-8)]
        return ArimaSpec((0, 1, 0), seasonal, "n", params, math.inf)

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Ends,
                       steps: int) -> FloatArray:
        return arima_paths(self.specs_[series_id], history, ends, steps)
