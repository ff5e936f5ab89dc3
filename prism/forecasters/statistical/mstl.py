"""``mstl``: MSTL seasonal components continued by phase, plus damped Holt on the rest."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from prism.errors import ConfigError
from prism.forecasters.base import BaseForecaster, FloatArray
from prism.forecasters.statistical.holt_winters import (
    HoltWintersParams,
    fit_holt_winters,
    holt_winters_paths,
    holt_winters_run,
)

logger = logging.getLogger(__name__)

Ends = npt.NDArray[np.int64]


class MstlForecaster(BaseForecaster):
    """MSTL seasonal components continued by phase, plus damped Holt on the adjusted series.

    ``fit`` decomposes each series with statsmodels ``MSTL`` at ``periods`` (those without
    more than two cycles of history are dropped, logged, as MSTL would) and fits a (damped)
    Holt trend to the seasonally adjusted series (trend + remainder). A forecast from origin
    ``e`` repeats the last cycle before ``e`` of each seasonal component and adds the Holt
    forecast of the adjusted series from ``e``, its parameters fixed.

    What is approximated: the decomposition is fitted once, on the data ``fit`` sees. Past
    the fitted data (calibration origins, ``update``, the final forecast) the seasonal
    components are the last fitted cycle of each, continued by phase, so they use no value
    after the origin; before it (origins inside the fitted data) the in-sample components,
    which STL smooths on both sides, are used as they are.

    Args:
        periods: the seasonal periods as durations (or steps).
        trend: Holt with a trend on the adjusted series (else simple exponential smoothing).
        damped: damp the trend.
        iterate: MSTL's iterations over the components.
        jump: STL evaluates its trend and low-pass smoothers every ``jump`` points and
            interpolates (R's ``stl`` uses a tenth of each window). ``None``: a 25th of the
            shortest period (5 at a daily season of 144 steps: 5x faster than 1, seasonal
            components within 0.01 %).
    """

    alias = "mstl"

    def __init__(
        self,
        *,
        periods: Sequence[str] = ("1d", "1w"),
        trend: bool = True,
        damped: bool = True,
        iterate: int = 2,
        jump: int | None = None,
    ) -> None:
        self.periods = periods
        self.trend = trend
        self.damped = damped
        self.iterate = iterate
        self.jump = jump

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [
            {"periods": ("1h",)},
            {"periods": ("1h", "6h", "1w"), "damped": False, "jump": 2},
        ]

    def _fit(self, values: dict[str, FloatArray]) -> None:
        if isinstance(self.periods, str):
            raise ConfigError(f"periods must be a list of durations, e.g. ('1d', '1w'); "
                              f"got the string {self.periods!r}")
        steps = sorted({self._steps_of(p) for p in self.periods})
        self.periods_: dict[str, list[int]] = {}
        self.components_: dict[str, FloatArray] = {}
        self.holt_: dict[str, HoltWintersParams] = {}
        for sid, y in values.items():
            kept = [p for p in steps if p >= 2 and len(y) > 2 * p]  # as MSTL needs
            dropped = [p for p in steps if p not in kept]
            if dropped:
                logger.info("%s: periods of %s steps dropped (no more than two cycles in %d "
                            "values)", sid, dropped, len(y))
            components = self._decompose(y, kept)
            self.periods_[sid] = kept
            self.components_[sid] = components
            adjusted = y - components.sum(axis=0)
            self.holt_[sid] = fit_holt_winters(adjusted, period=None, trend=self.trend,
                                               damped=self.damped, initialization="estimated")

    def _decompose(self, y: FloatArray, periods: list[int]) -> FloatArray:
        """``(len(periods), n)`` seasonal components of ``y``."""
        from statsmodels.tsa.seasonal import MSTL

        if not periods or np.ptp(y) == 0:
            return np.zeros((len(periods), len(y)))
        jump = self.jump if self.jump is not None else max(1, periods[0] // 25)
        stl_kwargs = {"trend_jump": jump, "low_pass_jump": jump}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = MSTL(y, periods=periods, iterate=self.iterate, stl_kwargs=stl_kwargs).fit()
        seasonal = np.asarray(res.seasonal, dtype=np.float64)
        return seasonal.reshape(len(y), -1).T.copy()

    def _season_paths(self, series_id: str, n: int, ends: Ends, steps: int) -> FloatArray:
        """The seasonal forecast from each origin: each component's last cycle, repeated."""
        components = self.components_[series_id]
        fitted = components.shape[1]
        out = np.zeros((len(ends), steps))
        k = np.arange(steps)
        for component, period in zip(components, self.periods_[series_id], strict=True):
            # the component at every position: fitted, then its last cycle by phase
            last = component[fitted - period:]
            extended = np.concatenate([component, last[(np.arange(fitted, n) - fitted)
                                                       % period]])
            idx = ends[:, None] - period + (k % period)[None, :]
            idx = np.where(idx < 0, idx % period, idx)
            out += extended[idx]
        return out

    def _adjusted(self, series_id: str, history: FloatArray) -> FloatArray:
        """The history less its seasonal components (continued by phase past the fit)."""
        components = self.components_[series_id]
        fitted = components.shape[1]
        n = len(history)
        season = np.zeros(n)
        for component, period in zip(components, self.periods_[series_id], strict=True):
            last = component[fitted - period:]
            season[:min(n, fitted)] += component[:n]
            if n > fitted:
                season[fitted:] += last[(np.arange(fitted, n) - fitted) % period]
        return np.asarray(history - season, dtype=np.float64)

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Ends,
                       steps: int) -> FloatArray:
        ends = np.asarray(ends, dtype=np.int64)
        top = int(ends.max())
        adjusted = self._adjusted(series_id, history[:top])
        params = self.holt_[series_id]
        run = holt_winters_run(adjusted, params)
        return holt_winters_paths(params, run, ends, steps) + self._season_paths(
            series_id, top, ends, steps)
