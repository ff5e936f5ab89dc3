"""Additive (damped) Holt-Winters: fitted by statsmodels, run over any history in numpy.

statsmodels' ``ExponentialSmoothing`` estimates the parameters once (:func:`fit_holt_winters`);
one pass of the same recursion in numpy (:func:`holt_winters_run`) then gives the state at
every origin, and :func:`holt_winters_paths` the forecasts from them. ``ets`` is this model;
``mstl`` runs its damped Holt trend on the seasonally adjusted series.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from prism.errors import ConfigError
from prism.forecasters.base import FloatArray

Ends = npt.NDArray[np.int64]


@dataclass(frozen=True)
class HoltWintersParams:
    """Additive (damped) Holt-Winters parameters, in statsmodels' parametrisation.

    The recursion, for the value ``y_t`` at position ``t`` of the filtered series, is (error
    correction form of statsmodels' ``ExponentialSmoothing``, trend and season additive)::

        f_t = l + phi * b + s_{t-m}          one-step forecast
        e_t = y_t - f_t
        l   = l + phi * b + alpha * e_t
        b   = phi * b + alpha * beta * e_t
        s_t = s_{t-m} + gamma * e_t

    Attributes:
        alpha / beta / gamma: smoothing of level, trend and season (``beta``/``gamma`` 0
            without a trend/season).
        phi: trend damping (1 undamped).
        level / trend: the states before the first filtered value (``trend`` 0 without one).
        seasons: ``(m,)`` the seasonal states used by the first ``m`` values; empty without a
            season.
        has_trend: whether the model has a trend.
    """

    alpha: float
    beta: float
    gamma: float
    phi: float
    level: float
    trend: float
    seasons: FloatArray
    has_trend: bool

    @classmethod
    def from_statsmodels(cls, params: dict[str, Any], has_trend: bool) -> HoltWintersParams:
        """The parameters of a fitted ``ExponentialSmoothing`` (its ``params`` dict)."""

        def num(key: str, default: float) -> float:
            value = params.get(key)
            if value is None or not np.isfinite(value):
                return default
            return float(value)

        seasons = params.get("initial_seasons")
        has_season = seasons is not None and np.size(seasons) > 0 and np.all(np.isfinite(seasons))
        return cls(
            alpha=num("smoothing_level", 1.0),
            beta=num("smoothing_trend", 0.0) if has_trend else 0.0,
            gamma=num("smoothing_seasonal", 0.0) if has_season else 0.0,
            phi=num("damping_trend", 1.0) if has_trend else 1.0,
            level=num("initial_level", 0.0),
            trend=num("initial_trend", 0.0) if has_trend else 0.0,
            seasons=(np.asarray(seasons, dtype=np.float64).copy() if has_season
                     else np.zeros(0)),
            has_trend=has_trend,
        )

    def rephased(self, shift: int) -> HoltWintersParams:
        """The same parameters with the initial seasons moved ``shift`` positions earlier.

        A filter started ``shift`` positions before the one these states belong to sees each
        phase where it belongs (the level and trend are kept as they are).
        """
        m = len(self.seasons)
        if not m:
            return self
        seasons = self.seasons[(np.arange(m) - shift) % m]
        return HoltWintersParams(self.alpha, self.beta, self.gamma, self.phi, self.level,
                                 self.trend, seasons, self.has_trend)


@dataclass
class HoltWintersRun:
    """The states of one filter pass: entry ``t`` holds the states after value ``t``.

    Attributes:
        fitted: ``(n,)`` one-step forecasts ``f_t``.
        levels / trends: ``(n,)`` level and trend after each value.
        seasons: ``(n,)`` the seasonal state of each value's phase after its update.
    """

    fitted: FloatArray
    levels: FloatArray
    trends: FloatArray
    seasons: FloatArray


def holt_winters_run(y: FloatArray, params: HoltWintersParams) -> HoltWintersRun:
    """One pass of the additive Holt-Winters recursion over ``y``.

    Returns:
        The states after every value (see :class:`HoltWintersParams` for the recursion).
    """
    m = len(params.seasons)
    values = np.asarray(y, dtype=np.float64).tolist()
    n = len(values)
    fitted = [0.0] * n
    levels = [0.0] * n
    trends = [0.0] * n
    seasons = [0.0] * n
    initial = params.seasons.tolist()
    alpha, gamma, phi = params.alpha, params.gamma, params.phi
    alpha_beta = params.alpha * params.beta
    level, trend = params.level, params.trend
    for t, value in enumerate(values):  # sequential by nature; plain floats are fastest
        season = (seasons[t - m] if t >= m else initial[t]) if m else 0.0
        damped = phi * trend
        f = level + damped + season
        error = value - f
        fitted[t] = f
        level = level + damped + alpha * error
        trend = damped + alpha_beta * error
        levels[t] = level
        trends[t] = trend
        seasons[t] = season + gamma * error
    return HoltWintersRun(np.asarray(fitted), np.asarray(levels), np.asarray(trends),
                          np.asarray(seasons))


def holt_winters_paths(params: HoltWintersParams, run: HoltWintersRun, ends: Ends,
                       steps: int) -> FloatArray:
    """Forecasts ``(len(ends), steps)`` from the states after ``ends[i]`` filtered values.

    Step ``k`` is ``l + (phi + ... + phi^k) b + s`` with ``s`` the latest seasonal state of
    that step's phase. (statsmodels' own ``forecast`` uses the state of the last value's
    phase from *before* its update at steps ``m, 2m, ...``; this uses the updated one.)
    """
    ends = np.asarray(ends, dtype=np.int64)
    k = np.arange(1, steps + 1)
    # the states after value e - 1 (the initial states for an origin at 0)
    levels = np.r_[params.level, run.levels]
    trends = np.r_[params.trend, run.trends]
    level, trend = levels[ends], trends[ends]
    if params.has_trend:
        with np.errstate(under="ignore"):
            growth = np.cumsum(params.phi ** k.astype(np.float64))
        out = level[:, None] + trend[:, None] * growth[None, :]
    else:
        out = np.repeat(level[:, None], steps, axis=1)
    m = len(params.seasons)
    if m:
        # the latest state of the phase of position e + k - 1 is at e - m + (k - 1) % m
        idx = ends[:, None] - m + ((k - 1) % m)[None, :]
        # positions before the first value hold the initial states: prepend them
        seasons = np.r_[params.seasons, run.seasons]
        out = out + seasons[idx + m]
    return np.asarray(out, dtype=np.float64)


def holt_winters_forecast(history: FloatArray, params: HoltWintersParams, start: int,
                          ends: Ends, steps: int) -> FloatArray:
    """Forecasts from origins ``ends`` (indices into ``history``) for states learned at ``start``.

    Origins after ``start`` continue the filter from the fitted initial states at ``start``;
    origins at or before it (inside or before the fitting window) use a filter from the
    series' first value with the same initial states, seasons aligned by phase.
    """
    ends = np.asarray(ends, dtype=np.int64)
    out = np.empty((len(ends), steps))
    late = ends > start
    if late.any():
        top = int(ends[late].max())
        run = holt_winters_run(history[start:top], params)
        out[late] = holt_winters_paths(params, run, ends[late] - start, steps)
    if (~late).any():
        shifted = params.rephased(start)
        top = int(ends[~late].max())
        run = holt_winters_run(history[:top], shifted)
        out[~late] = holt_winters_paths(shifted, run, ends[~late], steps)
    return out


def seasonal_profile(y: FloatArray, period: int) -> FloatArray:
    """Mean deviation of each phase from a centred moving average (classical decomposition).

    Returns:
        ``(period,)`` values summing to 0; entry ``j`` is the phase of positions ``j, j +
        period, ...`` of ``y``.
    """
    if period % 2 == 0:
        weights = np.r_[0.5, np.ones(period - 1), 0.5] / period
    else:
        weights = np.ones(period) / period
    trend = np.convolve(y, weights, mode="valid")
    offset = (len(weights) - 1) // 2
    phase = (np.arange(len(trend)) + offset) % period
    counts = np.bincount(phase, minlength=period)
    sums = np.bincount(phase, y[offset:offset + len(trend)] - trend, minlength=period)
    profile = np.divide(sums, counts, out=np.zeros(period), where=counts > 0)
    return np.asarray(profile - profile.mean(), dtype=np.float64)


def fit_holt_winters(y: FloatArray, *, period: int | None, trend: bool, damped: bool,
                     initialization: str) -> HoltWintersParams:
    """Fit additive (damped) Holt-Winters with statsmodels ``ExponentialSmoothing``.

    Args:
        y: the values to fit on.
        period: the season in steps, or ``None``.
        trend: fit an additive trend.
        damped: damp it.
        initialization: ``"profile"``: the initial seasons are the mean seasonal profile of
            all of ``y`` (classical decomposition), the initial level the mean of the first
            season and the initial trend the change between the first two season means;
            only the smoothing parameters are optimised. ``"estimated"``: statsmodels
            optimises the initial states too (one per phase: slow for long seasons). A
            model without a season is always ``"estimated"`` (two initial states).

    Returns:
        The fitted parameters.
    """
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    if initialization not in ("profile", "estimated"):
        raise ConfigError(
            f"initialization {initialization!r} is not known; use 'profile' or 'estimated'"
        )
    y = np.asarray(y, dtype=np.float64)
    kwargs: dict[str, Any] = {
        "trend": "add" if trend else None,
        "damped_trend": bool(trend and damped),
        "seasonal": "add" if period else None,
        "seasonal_periods": period,
    }
    if period and initialization == "profile":
        profile = seasonal_profile(y, period)
        level = float(y[:period].mean())
        slope = float(y[period:2 * period].mean() - level) / period if trend else 0.0
        kwargs.update(initialization_method="known", initial_level=level,
                      initial_seasonal=profile)
        if trend:
            kwargs["initial_trend"] = slope
    else:
        kwargs["initialization_method"] = "estimated"
    with warnings.catch_warnings():  # convergence chatter; the fit is still usable
        warnings.simplefilter("ignore")
        fitted = ExponentialSmoothing(y, **kwargs).fit(optimized=True)
    return HoltWintersParams.from_statsmodels(dict(fitted.params), has_trend=trend)
