"""Forecasters: one protocol (``BaseForecaster``), looked up by alias."""

from __future__ import annotations

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


__all__ = ["FORECASTERS", "BaseForecaster", "clone", "get_forecaster"]
