"""Composite forecasters: forecasters made of other forecasters, used like any other.

**Per-series models.** :class:`SeriesModels` holds forecasters fitted on separate series (the
batch engine fits each series of a chunk on its own, in a worker) and behaves as one fitted
multi-series forecaster of the same alias and hyperparameters: ``predict``, ``update`` and
``forecast_arrays`` hand each series to the model that holds it, so its forecasts are bit for
bit those of the models it holds. The registry saves and serves it like any model.

The seasonal naive fallback is not a composite here: it is part of the protocol of every
forecaster (see :mod:`prism.forecasters.base`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Self

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.forecasters.base import BaseForecaster, FloatArray, Paths, clone
from prism.frames import to_panel
from prism.schema import SERIES_ID, validate_panel

__all__ = ["SeriesModels"]


class SeriesModels(BaseForecaster):
    """Forecasters fitted on separate series, as one fitted multi-series forecaster.

    Its alias and (in the registry) hyperparameters are those of ``model``, so the serving
    index and ``prism forecast --from-model ALIAS`` treat it as a model of that alias. Each
    series is forecast and updated by the model that holds it, so its forecasts are those of
    that model, bit for bit. ``fit`` fits a copy of ``model`` on each series (a global model:
    its shared parts once on the whole panel, then each series against them), as the batch
    engine does with its sample being the whole panel.

    Args:
        model: the (unfitted) forecaster the held models are fitted copies of.

    Attributes (after ``fit`` or :meth:`join`):
        models_: series id -> the fitted forecaster that holds it (series may share one).
        version_: 1 after ``fit`` or :meth:`join`, +1 per ``update``.
        The other per-series state of :class:`BaseForecaster` (``history_``, ``last_ts_``,
        ``calibration_``, ``fallback_``, ...) is gathered from the held models.
    """

    def __init__(self, *, model: BaseForecaster) -> None:
        self.model = model

    @property  # the held models' alias, not a class constant
    def alias(self) -> str:  # type: ignore[override]
        """The alias of the models held."""
        return self.model.alias

    @classmethod
    def join(cls, models: Mapping[str, BaseForecaster]) -> SeriesModels:
        """A fitted container of already fitted models, by series.

        Args:
            models: series id -> a fitted forecaster that holds it (a :class:`SeriesModels`
                is looked into: the model holding the series is kept).

        Raises:
            ConfigError: for no models, or models of different aliases.
            DataContractError: for a model that does not hold its series, or different steps.
        """
        if not models:
            raise ConfigError("no fitted models to hold; fit at least one series")
        held: dict[str, BaseForecaster] = {}
        for sid, model in models.items():
            if isinstance(model, SeriesModels):
                model._check_fitted()
                model = model.models_[sid] if sid in model.models_ else model
            model._check_fitted()
            if sid not in model.history_:
                raise DataContractError(f"the {model.alias} model given for {sid!r} was not "
                                        "fitted on it")
            held[sid] = model
        aliases = sorted({m.alias for m in held.values()})
        if len(aliases) > 1:
            raise ConfigError(f"cannot hold models of different aliases ({', '.join(aliases)})"
                              " as one; keep one model per alias")
        out = cls(model=clone(next(iter(held.values()))))
        out._hold(held)
        return out

    def fit(self, panel: pd.DataFrame) -> Self:
        """Fit a copy of ``model`` on each series of ``panel``; refitting replaces all state.

        Raises:
            DataContractError: as :meth:`BaseForecaster.fit`.
        """
        for name in [n for n in vars(self) if n.endswith("_") and not n.startswith("_")]:
            delattr(self, name)
        panel, style = to_panel(panel)
        panel = validate_panel(panel)
        groups = {str(sid): g for sid, g in panel.groupby(SERIES_ID, sort=True)}
        if not groups:
            raise DataContractError("cannot fit on an empty panel")
        if self.model.global_model:
            shared = clone(self.model).fit_shared(panel)
            models = {sid: shared.fit_local(g) for sid, g in groups.items()}
        else:
            models = {sid: clone(self.model).fit(g) for sid, g in groups.items()}
        self._hold(models)
        self.frame_style_ = style
        return self

    def _hold(self, models: Mapping[str, BaseForecaster]) -> None:
        steps = {int(m.freq_s_) for m in models.values()}
        if len(steps) > 1:
            raise DataContractError(f"the models have different steps ({sorted(steps)} s); "
                                    "hold series of each step in their own model")
        self.models_ = dict(sorted(models.items()))
        self.freq_s_ = steps.pop()
        self.series_ids_ = list(self.models_)
        self.first_ts_: dict[str, pd.Timestamp] = {}
        self.last_ts_: dict[str, pd.Timestamp] = {}
        self.history_: dict[str, FloatArray] = {}
        self.fit_len_: dict[str, int] = {}
        self.calibration_ = {}
        self.fallback_: dict[str, str] = {}
        self._gather(self.series_ids_)
        self.version_ = 1

    def _gather(self, series_ids: Sequence[str]) -> None:
        """Copy the held models' state of these series (after a fit or an update)."""
        for sid in series_ids:
            model = self.models_[sid]
            self.first_ts_[sid] = model.first_ts_[sid]
            self.last_ts_[sid] = model.last_ts_[sid]
            self.history_[sid] = model.history_[sid]
            self.fit_len_[sid] = model.fit_len_[sid]
            if sid in model.calibration_:
                self.calibration_[sid] = model.calibration_[sid]
            else:
                self.calibration_.pop(sid, None)
            if sid in model.fallback_:
                self.fallback_[sid] = model.fallback_[sid]
            else:
                self.fallback_.pop(sid, None)

    def forecast_arrays(
        self, series_id: str, steps: int, quantiles: Sequence[float]
    ) -> tuple[FloatArray, FloatArray]:
        """The forecast of one series by the model that holds it (see
        :meth:`BaseForecaster.forecast_arrays`)."""
        self._check_fitted()
        return self.models_[series_id].forecast_arrays(series_id, steps, quantiles)

    def update(self, new_points: pd.DataFrame, *, fallback: bool = True) -> Self:
        """Each held model absorbs the new points of its series (see
        :meth:`BaseForecaster.update`, and its ``fallback``).

        Raises:
            NotFittedError: before ``fit``.
            DataContractError: for an unknown series, another step, or a gap after the end.
        """
        self._check_fitted()
        panel = validate_panel(to_panel(new_points, what="new points")[0], regular=False)
        if panel.empty:
            raise DataContractError("cannot update with an empty panel")
        touched = sorted(set(panel[SERIES_ID].astype(str)))
        unknown = [sid for sid in touched if sid not in self.models_]
        if unknown:
            raise DataContractError(
                f"series {unknown[0]!r} was not fitted; fit the model on it before updating it")
        by_model: dict[int, tuple[BaseForecaster, list[str]]] = {}
        for sid in touched:
            model = self.models_[sid]
            by_model.setdefault(id(model), (model, []))[1].append(sid)
        for model, sids in by_model.values():
            model.update(panel[panel[SERIES_ID].isin(sids)], fallback=fallback)
        self._gather(touched)
        self.version_ += 1
        return self

    # -- the hooks, for the held models ---------------------------------------------------------
    def _fit(self, values: dict[str, FloatArray]) -> None:
        """Never called: :meth:`fit` fits a copy of ``model`` on each series instead."""
        raise TypeError("SeriesModels learns nothing itself; fit() fits each held model")

    def _forecast_many(self, series_id: str, history: FloatArray,
                       ends: npt.NDArray[np.int64], steps: int) -> FloatArray | Paths:
        """The forecasts of the model that holds the series."""
        return self.models_[series_id]._forecast_many(series_id, history, ends, steps)
