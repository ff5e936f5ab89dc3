"""Forecasters: one protocol (``BaseForecaster``), looked up by alias."""

from __future__ import annotations

import importlib

from prism.errors import ConfigError
from prism.forecasters.base import BaseForecaster, clone
from prism.forecasters.baselines import (
    NaiveForecaster,
    SeasonalNaiveForecaster,
    TimeOfDayQuantileForecaster,
    WindowAverageForecaster,
)
from prism.forecasters.gbm import GbmForecaster
from prism.forecasters.hybrid import PrismForecaster
from prism.forecasters.rnn import GruForecaster, LstmForecaster
from prism.forecasters.statistical import (
    ArimaForecaster,
    EtsForecaster,
    MstlForecaster,
    ThetaForecaster,
)

#: Every forecaster by alias.
FORECASTERS: dict[str, type[BaseForecaster]] = {
    cls.alias: cls
    for cls in (NaiveForecaster, SeasonalNaiveForecaster, WindowAverageForecaster,
                TimeOfDayQuantileForecaster, EtsForecaster, ArimaForecaster,
                ThetaForecaster, MstlForecaster, GbmForecaster,
                PrismForecaster, LstmForecaster, GruForecaster)
}


def get_forecaster(alias: str, **params: object) -> BaseForecaster:
    """A new forecaster of ``alias`` with ``params``.

    Raises:
        ConfigError: for an unknown alias (listing the known ones) or unknown parameters.
    """
    if alias not in FORECASTERS:
        raise ConfigError(
            f"unknown model {alias!r}; pass --model with one of: {', '.join(sorted(FORECASTERS))}"
        )
    try:
        return FORECASTERS[alias](**params)
    except TypeError as exc:
        raise ConfigError(f"bad parameters for {alias!r}: {exc}") from exc


#: The libraries the forecasters and the decomposer import on first use (inside functions,
#: so that ``prism --help`` and the cheap baselines stay light).
LAZY_LIBRARIES = (
    "sklearn.ensemble", "sklearn.decomposition", "sklearn.cluster", "sklearn.exceptions",
    "scipy.optimize", "scipy.stats", "statsmodels.tsa.stattools", "statsmodels.tsa.seasonal",
    "statsmodels.tsa.holtwinters", "statsmodels.tsa.arima.model", "torch",
)


def import_libraries() -> None:
    """Import :data:`LAZY_LIBRARIES` now, in this thread.

    A server calls it before it starts threads: two threads importing scikit-learn at once
    (the hub's warm-up fit and a request that loads a saved model) made Python raise a
    ``_DeadlockError`` in one of them (in 3 of 6 starts of the API with a request at once).
    """
    for name in LAZY_LIBRARIES:
        importlib.import_module(name)


__all__ = ["FORECASTERS", "LAZY_LIBRARIES", "BaseForecaster", "clone", "get_forecaster",
           "import_libraries"]
