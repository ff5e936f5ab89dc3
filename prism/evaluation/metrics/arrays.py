"""Array metrics: actuals ``y`` and forecasts ``f`` (same shape) in, one number out."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from prism.errors import ConfigError, DataContractError

logger = logging.getLogger(__name__)

ArrayLike = npt.ArrayLike
FloatArray = npt.NDArray[np.float64]


# -- array metrics ----------------------------------------------------------------------------
def _pair(actual: ArrayLike, forecast: ArrayLike) -> tuple[FloatArray, FloatArray]:
    y = np.asarray(actual, dtype=np.float64)
    f = np.asarray(forecast, dtype=np.float64)
    if y.shape != f.shape:
        raise DataContractError(f"actuals {y.shape} and forecasts {f.shape} differ in shape")
    if y.size == 0:
        raise DataContractError("a metric needs at least one actual")
    return y, f


def mae(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Mean absolute error ``mean(|y - f|)``.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.mean(np.abs(y - f)))


def rmse(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Root mean squared error ``sqrt(mean((y - f)^2))``.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.sqrt(np.mean((y - f) ** 2)))


def _smape_terms(y: FloatArray, f: FloatArray) -> FloatArray:
    num = np.abs(y - f)
    den = np.abs(y) + np.abs(f)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def smape(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Symmetric MAPE ``mean(|y - f| / (|y| + |f|))``, in [0, 1]; a ``0/0`` term is 0.

    This is utilsforecast's convention; multiply by 200 for the M4 percentage.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.mean(_smape_terms(y, f)))


def wape(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Weighted absolute percentage error ``sum|y - f| / sum|y|`` (a share, not a percentage).

    Pooled over a panel (every window's absolute errors over every window's actuals) it is the
    share of the panel's volume the forecast misses, which no near-idle series can dominate.

    Returns:
        WAPE, or ``NaN`` when every actual is 0 (undefined).

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    volume = float(np.sum(np.abs(y)))
    if volume == 0:
        return float("nan")
    return float(np.sum(np.abs(y - f))) / volume


def seasonal_scale(history: ArrayLike, season: int) -> float:
    """In-sample MAE of the seasonal naive: ``mean_{t >= s} |y_t - y_{t-s}|`` (MASE's scale).

    Returns:
        The scale, or ``NaN`` when the history has ``season`` points or fewer.

    Raises:
        ConfigError: for a season below one step.
    """
    if season < 1:
        raise ConfigError(f"season must be at least one step, got {season}")
    h = np.asarray(history, dtype=np.float64)
    if len(h) <= season:
        return float("nan")
    return float(np.mean(np.abs(h[season:] - h[:-season])))


def mase(actual: ArrayLike, forecast: ArrayLike, scale: float) -> float:
    """Mean absolute scaled error ``mean(|y - f|) / scale``.

    Args:
        actual: actuals.
        forecast: point forecasts.
        scale: the in-sample seasonal naive MAE (:func:`seasonal_scale`).

    Returns:
        MASE, or ``NaN`` when the scale is 0 or ``NaN`` (undefined).

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    error = mae(actual, forecast)
    if not np.isfinite(scale) or scale <= 0:
        return float("nan")
    return error / scale


def _pinball_terms(y: FloatArray, f: FloatArray, level: float) -> FloatArray:
    d = y - f
    return np.maximum(level * d, (level - 1.0) * d)


def pinball_loss(actual: ArrayLike, forecast: ArrayLike, level: float) -> float:
    """Pinball (quantile) loss ``mean(max(q (y - f), (q - 1)(y - f)))`` of a level-``q`` forecast.

    Raises:
        ConfigError: for a level outside (0, 1).
        DataContractError: for arrays of different shapes or empty ones.
    """
    check_level(level)
    y, f = _pair(actual, forecast)
    return float(np.mean(_pinball_terms(y, f, level)))


def crps(actual: ArrayLike, quantiles: ArrayLike, levels: Sequence[float]) -> float:
    """CRPS approximated from quantile forecasts: ``2 * mean_q pinball_q``.

    The CRPS is the integral over ``q`` in (0, 1) of twice the pinball loss at ``q``; the mean
    over the available levels is the usual quadrature of that integral (exact for a point mass
    forecast, where every quantile is the same number: then it is the MAE).

    Args:
        actual: ``(n,)`` actuals.
        quantiles: ``(n, k)`` forecasts, column ``j`` at level ``levels[j]``.
        levels: the ``k`` levels.

    Raises:
        ConfigError: for no level or a level outside (0, 1).
        DataContractError: for shapes that do not match.
    """
    y = np.asarray(actual, dtype=np.float64)
    qf = np.asarray(quantiles, dtype=np.float64)
    if not levels:
        raise ConfigError("CRPS needs at least one quantile level")
    if qf.shape != (*y.shape, len(levels)):
        raise DataContractError(
            f"quantile forecasts have shape {qf.shape}, expected {(*y.shape, len(levels))}"
        )
    return float(np.mean([pinball_loss(y, qf[..., j], q) for j, q in enumerate(levels)]) * 2)


def coverage(actual: ArrayLike, lower: ArrayLike, upper: ArrayLike) -> float:
    """Share of actuals inside their interval: ``mean(lower <= y <= upper)``.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, lo = _pair(actual, lower)
    _, hi = _pair(actual, upper)
    return float(np.mean((lo <= y) & (y <= hi)))


def under_provisioning_rate(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Share of steps where the actual exceeds the provisioned quantile: ``mean(y > f_q)``.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.mean(y > f))


def over_provisioning(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Mean provisioned GPUs above the actual: ``mean(max(f_q - y, 0))`` (idle capacity).

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    return float(np.mean(np.maximum(f - y, 0.0)))


def burst_threshold(history: ArrayLike, percentile: float = 95.0) -> float:
    """The ``percentile`` of the absolute one-step changes ``|y_t - y_{t-1}|`` of a history.

    Returns:
        The threshold, or ``NaN`` for a history of fewer than two points.
    """
    h = np.asarray(history, dtype=np.float64)
    if len(h) < 2:
        return float("nan")
    return float(np.percentile(np.abs(np.diff(h)), percentile))


def burst_mse(actual: ArrayLike, forecast: ArrayLike, previous: float, threshold: float) -> float:
    """MSE over burst steps: ``mean((y_t - f_t)^2)`` over ``t`` with ``|y_t - y_{t-1}| > thr``.

    Args:
        actual: the actuals after the cutoff, in order.
        forecast: their point forecasts.
        previous: the last actual at or before the cutoff (``y_0``'s predecessor).
        threshold: the burst threshold (:func:`burst_threshold` of the history).

    Returns:
        The burst-phase MSE, or ``NaN`` when no step is a burst.

    Raises:
        DataContractError: for arrays of different shapes or empty ones.
    """
    y, f = _pair(actual, forecast)
    burst = _burst_mask(y, previous, threshold)
    if not burst.any():
        return float("nan")
    return float(np.mean((y[burst] - f[burst]) ** 2))


def _burst_mask(y: FloatArray, previous: float, threshold: float) -> npt.NDArray[np.bool_]:
    change = np.abs(np.diff(np.concatenate([[previous], y])))
    out: npt.NDArray[np.bool_] = change > threshold
    return out


def check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ConfigError(f"quantile levels are between 0 and 1 (exclusive), got {level}")


