"""The forecaster protocol: public ``fit``/``predict`` wrap private ``_fit``/``_predict``.

Hyperparameters are keyword-only ``__init__`` arguments stored as given; learned state ends in
``_``; ``get_params()`` comes from the ``__init__`` signature, so ``clone(f)`` is
``type(f)(**f.get_params())``. ``predict`` returns the forecast contract: ``series_id, ts,
model, mean`` and one ``p{percent}`` column per quantile, quantiles never crossing and never
below 0 (GPU demand is not negative).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, ClassVar, Self

import numpy as np
import pandas as pd

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.schema import SERIES_ID, TS, VALUE, parse_duration, validate_panel

DEFAULT_QUANTILES = (0.5, 0.9)


def quantile_column(q: float) -> str:
    """``0.5 -> 'p50'``, ``0.975 -> 'p97.5'``."""
    return f"p{round(q * 100, 6):g}"


def horizon_steps(horizon: int | str, freq_s: int) -> int:
    """A horizon as a number of steps: ``"1d"`` at 10 min is 144; a number is steps.

    Raises:
        ConfigError: when the horizon is not positive or not a whole number of steps.
    """
    if isinstance(horizon, int | np.integer) and not isinstance(horizon, bool):
        steps = int(horizon)
    elif isinstance(horizon, str) and horizon.strip().isdigit():
        steps = int(horizon)
    else:
        seconds = parse_duration(str(horizon)).total_seconds()
        if seconds % freq_s:
            raise ConfigError(
                f"horizon {horizon!r} is not a whole number of {freq_s}-second steps"
            )
        steps = int(seconds // freq_s)
    if steps < 1:
        raise ConfigError(f"horizon {horizon!r} must be at least one step")
    return steps


def check_quantiles(quantiles: Sequence[float]) -> list[float]:
    """Sorted unique quantiles, each strictly between 0 and 1.

    Raises:
        ConfigError: for a quantile outside (0, 1).
    """
    out = sorted({float(q) for q in quantiles})
    bad = [q for q in out if not 0 < q < 1]
    if bad:
        raise ConfigError(f"quantiles must be between 0 and 1 (exclusive); got {bad}")
    return out


class BaseForecaster:
    """Base of every forecaster; subclasses set ``alias`` and write ``_fit``/``_predict``.

    Attributes (after ``fit``):
        freq_s_: the panel's step in seconds.
        series_ids_: the series fitted, sorted.
        last_ts_: series id -> its last timestamp.
    """

    alias: ClassVar[str] = ""
    supports_quantiles: ClassVar[bool] = True

    # -- parameters ---------------------------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind == p.KEYWORD_ONLY]

    def get_params(self) -> dict[str, Any]:
        """The hyperparameters, as given to ``__init__``."""
        return {name: getattr(self, name) for name in self._param_names()}

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Two or more cheap settings for the shared conformance suite."""
        return [{}]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # -- fit / predict ------------------------------------------------------------------------
    def fit(self, panel: pd.DataFrame) -> Self:
        """Learn from a regular panel (``series_id, ts, value``); refitting replaces all state.

        Raises:
            DataContractError: for a panel that breaks the contract or has fewer than two
                points per series.
        """
        panel = validate_panel(panel)
        if panel.empty:
            raise DataContractError("cannot fit on an empty panel")
        steps = panel.groupby(SERIES_ID)[TS].agg(["min", "max", "count"])
        if (steps["count"] < 2).any():
            short = steps.index[steps["count"] < 2][0]
            raise DataContractError(f"series {short!r} has fewer than two points to fit on")
        diffs = panel.groupby(SERIES_ID)[TS].diff().dropna()
        freqs = diffs.dt.total_seconds().unique()
        if len(freqs) != 1:
            raise DataContractError(
                "every series of a panel needs the same step to be fitted together; got "
                f"{sorted(int(f) for f in freqs)} s"
            )
        for name in [n for n in vars(self) if n.endswith("_") and not n.startswith("_")]:
            delattr(self, name)  # refitting replaces all learned state
        self.freq_s_ = int(freqs[0])
        self.series_ids_ = sorted(steps.index.astype(str))
        self.last_ts_ = {str(k): pd.Timestamp(v) for k, v in steps["max"].items()}
        values = {str(sid): g[VALUE].to_numpy(dtype=np.float64)
                  for sid, g in panel.groupby(SERIES_ID, sort=True)}
        self._fit(values)
        return self

    def predict(
        self, horizon: int | str, quantiles: Sequence[float] = DEFAULT_QUANTILES
    ) -> pd.DataFrame:
        """Forecast ``horizon`` (steps, or a duration such as ``"1d"``) past each series' end.

        Returns:
            ``series_id, ts, model, mean, p..`` with one row per series and step.

        Raises:
            NotFittedError: before ``fit``.
            ConfigError: for a bad horizon or quantile.
        """
        if not hasattr(self, "series_ids_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit(panel) first")
        steps = horizon_steps(horizon, self.freq_s_)
        qs = check_quantiles(quantiles)
        frames = []
        step = pd.Timedelta(seconds=self.freq_s_)
        for sid in self.series_ids_:
            mean, bands = self._predict(sid, steps, qs)
            mean = np.maximum(np.asarray(mean, dtype=np.float64), 0.0)
            data: dict[str, Any] = {
                SERIES_ID: sid,
                TS: pd.date_range(self.last_ts_[sid] + step, periods=steps, freq=step),
                "model": self.alias,
                "mean": mean,
            }
            if qs:
                matrix = np.maximum(np.asarray(bands, dtype=np.float64), 0.0)
                matrix = np.maximum.accumulate(matrix, axis=1)  # quantiles never cross
                for j, q in enumerate(qs):
                    data[quantile_column(q)] = matrix[:, j]
            frames.append(pd.DataFrame(data))
        out = pd.concat(frames, ignore_index=True)
        out[TS] = out[TS].astype("datetime64[ns]")
        return out

    # -- for subclasses -----------------------------------------------------------------------
    def _fit(self, values: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def _predict(
        self, series_id: str, steps: int, quantiles: list[float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(mean of shape (steps,), quantiles of shape (steps, len(quantiles)))``."""
        raise NotImplementedError


def clone(forecaster: BaseForecaster) -> BaseForecaster:
    """A new, unfitted forecaster with the same hyperparameters."""
    return type(forecaster)(**forecaster.get_params())
