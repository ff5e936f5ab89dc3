"""Statistical forecasters on statsmodels: ``ets``, ``arima``, ``theta``, ``mstl``.

statsmodels estimates the parameters once, in ``_fit``; forecasts from any origin then run
cheap recursions with those parameters fixed, so calibration's ~72 origins and every
``update`` reuse one fit:

- ``ets``: additive Holt-Winters (damped trend, additive season at a duration) fitted by
  statsmodels ``ExponentialSmoothing``; one pass of the same recursion in numpy
  (:func:`holt_winters_run`) gives the state at every origin.
- ``arima``: ARIMA(p, d, q) with d from KPSS tests and (p, q) by AIC inside bounds
  (stepwise or grid, under a time budget); the Kalman filter of the fitted state space model
  run once over the history gives the predicted state at every origin.
- ``theta``: the Theta method (SES with half the linear-trend drift, Hyndman & Billah 2003)
  on a classically deseasonalised series; the SES level at every origin is one linear filter.
- ``mstl``: MSTL seasonal components (daily and weekly by default) continued by phase, plus a
  damped Holt trend on the seasonally adjusted series.

Quantiles come from the base class (conformal calibration on the held-out tail). One module
per model (``ets``, ``arima``, ``theta``, ``mstl``), and ``holt_winters`` for the recursion
that ``ets`` and ``mstl`` share.

Random draws play no part in any of them, so none takes a ``random_state``.
"""

from prism.forecasters.statistical.arima import ArimaForecaster, ArimaSpec, arima_paths
from prism.forecasters.statistical.ets import EtsForecaster
from prism.forecasters.statistical.holt_winters import (
    HoltWintersParams,
    HoltWintersRun,
    fit_holt_winters,
    holt_winters_forecast,
    holt_winters_paths,
    holt_winters_run,
    seasonal_profile,
)
from prism.forecasters.statistical.mstl import MstlForecaster
from prism.forecasters.statistical.theta import ThetaForecaster

__all__ = [
    "ArimaForecaster",
    "ArimaSpec",
    "EtsForecaster",
    "HoltWintersParams",
    "HoltWintersRun",
    "MstlForecaster",
    "ThetaForecaster",
    "arima_paths",
    "fit_holt_winters",
    "holt_winters_forecast",
    "holt_winters_paths",
    "holt_winters_run",
    "seasonal_profile",
]
