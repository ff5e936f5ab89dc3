"""The forecasts a capacity plan sizes from on the command line: the newest saved model of
each series (:class:`SavedModels`), as the API's hub serves them (``prism capacity`` and
``prism report``; :mod:`prism.usecases.capacity` re-exports it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from prism.errors import ConfigError
from prism.schema import SERIES_ID, freq_seconds

if TYPE_CHECKING:
    from prism.store import Store


class SavedModels:
    """Forecasts by the newest saved model of each series (the CLI's default), as the API's
    hub serves them: the newest registry model of the alias and hyperparameters fitted on
    the series, updated with the points stored since. Series without one (or all, with
    ``refit``) are fitted now, together, and the model is saved, so that later runs and the
    server use it too. ``notes`` says what was done.

    Args:
        model: the forecaster's alias.
        params: its hyperparameters as text, typed as their defaults.
        models_dir: the registry (default ``PRISM_MODELS_DIR`` or ``./models``).
        refit: fit a new model on every series, even those with a saved one.

    Raises:
        ConfigError: for an unknown model or parameter.
    """

    def __init__(self, model: str = "prism", params: dict[str, str] | None = None, *,
                 models_dir: str | Path | None = None, refit: bool = False) -> None:
        from prism.forecasters.params import typed_params
        from prism.hub.types import spec_key

        self._model = model
        self._params = dict(params or {})
        self._key = spec_key(model, typed_params(model, self._params))
        self._models_dir = models_dir
        self._refit = refit
        self.notes: list[str] = []

    @property
    def label(self) -> str:
        """The model key (``prism``, or ``prism[use_rnn=false]``)."""
        return self._key

    def forecast(self, store: Store, series_ids: list[str], horizon: str,
                 levels: list[float]) -> tuple[pd.DataFrame, int]:
        """Forecast with the saved models; fit (and save) one for the series without."""
        from prism import registry
        from prism.config import get_settings
        from prism.hub.types import spec_key
        from prism.usecases.forecast import forecast_series

        root = (Path(self._models_dir) if self._models_dir is not None
                else get_settings().models_dir)
        newest: dict[str, str] = {}
        for record in registry.list_models(root, alias=self._model):  # newest first
            try:
                key = spec_key(record.alias, record.params)
            except ConfigError:
                continue
            if key == self._key:
                for sid in record.series_ids:
                    newest.setdefault(sid, record.model_id)
        by_model: dict[str, list[str]] = {}
        missing = list(series_ids) if self._refit else [s for s in series_ids if s not in newest]
        for sid in series_ids:
            if sid not in missing:
                by_model.setdefault(newest[sid], []).append(sid)
        frames = []
        used = []
        for model_id, sids in sorted(by_model.items()):
            # a saved model fitted on other data (another store's) is refitted and saved
            result = forecast_series(store, sids, horizon=horizon, quantiles=levels,
                                     model=self._model, from_model=model_id,
                                     models_dir=root, save=True)
            frames.append(result.frame)
            if result.refitted:
                self.notes.append(f"{model_id}: {result.refitted}")
            else:
                used.append(model_id)
        if used:
            self.notes.append(f"forecast by the saved {self._key} model(s) "
                              f"{', '.join(used)} in {root} (updated to the stored "
                              "data); --refit fits a new one")
        if missing:
            done = forecast_series(store, missing, horizon=horizon, quantiles=levels,
                                   model=self._model, params=self._params, save=True,
                                   models_dir=root)
            why = "--refit" if self._refit else "no saved model of them"
            self.notes.append(f"fitted {self._key} now on {len(missing)} series ({why}) and "
                              f"saved it as {done.model_id} in {root}")
            frames.append(done.frame)
        frame = pd.concat(frames, ignore_index=True)
        freq = store.list_series().set_index(SERIES_ID).loc[series_ids[0], "freq"]
        return frame, freq_seconds(str(freq))

