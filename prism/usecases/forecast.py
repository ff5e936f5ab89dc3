"""Forecasts: from a model fitted now or saved (the CLI), or from the running hub (the API).

``prism forecast``, ``prism models list`` and ``prism models prune``; ``GET|POST
/v1/forecast`` and ``/readyz``. Hyperparameters that reach the hub come from requests: they
are bounded (:data:`prism.forecasters.params.PARAM_LIMITS`), and a model of ad-hoc
hyperparameters is not saved to the registry unless the request asks for it.

A **forecast source** is where a use case that needs forecasts (a capacity plan, the capacity
report) gets them: :class:`FittedModel` fits a forecaster now on the store's series (the CLI),
:class:`HubModels` asks the running :class:`~prism.hub.ForecastHub` (its cached models; the
API). Both answer the same question, so the CLI and the API call the same use case.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pandas as pd

from prism.errors import ConfigError, PrismError
from prism.forecasters.base import PAST_HISTORY
from prism.forecasters.compose import SeriesModels
from prism.forecasters.params import typed_params
from prism.progress import Progress
from prism.schema import SERIES_ID, TS
from prism.usecases.series import load_panel

if TYPE_CHECKING:
    from prism.config import Settings
    from prism.forecasters.base import BaseForecaster
    from prism.hub import ForecastHub, ServedForecast
    from prism.registry import ModelRecord
    from prism.store import Store


# -- forecast sources ----------------------------------------------------------------------------
class ForecastSource(Protocol):
    """Where a use case gets the forecasts of stored series.

    Attributes:
        label: the model, as reports name it.
    """

    @property
    def label(self) -> str:
        """The model, as reports name it."""
        ...

    def forecast(self, store: Store, series_ids: list[str], horizon: str,
                 levels: list[float]) -> tuple[pd.DataFrame, int]:
        """``(frame, freq_s)``: the forecast contract (``series_id, ts, model, mean, p..``)
        of the series over ``horizon`` at the quantile ``levels``, and their step.

        Raises:
            SeriesNotFound / ConfigError / ModelNotReady / DataContractError.
        """
        ...


class FittedModel:
    """Forecasts by a forecaster fitted now on the series it is asked for (the CLI).

    Args:
        model: the forecaster's alias.
        params: its hyperparameters as text, typed as their defaults.

    Raises:
        ConfigError: for a parameter the forecaster does not take.
    """

    def __init__(self, model: str, params: dict[str, str] | None = None) -> None:
        self._model = model
        self._params = typed_params(model, params or {})

    @property
    def label(self) -> str:
        """The forecaster's alias."""
        return self._model

    def forecast(self, store: Store, series_ids: list[str], horizon: str,
                 levels: list[float]) -> tuple[pd.DataFrame, int]:
        """Fit the forecaster on the series, then forecast them."""
        from prism.forecasters import get_forecaster

        forecaster = get_forecaster(self._model, **self._params)
        forecaster.fit(store.load_panel(series_ids))
        return forecaster.predict(horizon, levels), int(forecaster.freq_s_)


class HubModels:
    """Forecasts by the running hub's models (cached, fitted on demand; the API).

    Args:
        hub: the forecast hub.
        model: a forecaster alias (default: the hub's default model).
        params: its hyperparameters as text, typed as their defaults and bounded; models
            fitted with them are not saved.

    Raises:
        ConfigError: for an unknown model or parameter, or one out of its range.
    """

    def __init__(self, hub: ForecastHub, model: str | None = None,
                 params: dict[str, str] | None = None) -> None:
        alias = model or hub.spec().alias
        self._hub = hub
        self._spec = hub.spec(alias, typed_params(alias, params or {}, bounded=True))
        self._save = not params

    @property
    def label(self) -> str:
        """The hub's model key (``prism``, or ``prism[use_rnn=false]``)."""
        return str(self._spec.key)

    def forecast(self, store: Store, series_ids: list[str], horizon: str,
                 levels: list[float]) -> tuple[pd.DataFrame, int]:
        """The hub's forecasts of the series (``store`` is not read: the hub has its own)."""
        served = self._hub.forecast_many(series_ids, horizon=horizon, quantiles=levels,
                                         spec=self._spec, save=self._save)
        return pd.concat([f.frame() for f in served], ignore_index=True), served[0].freq_s


# -- prism forecast ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ForecastResult:
    """A forecast and the model behind it.

    Attributes:
        frame: the forecast contract (``series_id, ts, model, mean, p..``).
        model_id: the registry id of the model (saved now, or loaded), if one model made it.
        fallback: series id -> why it was forecast by the fallback.
        model_ids: every registry model it was made with (several when ``from_model`` is an
            alias whose series are spread over models, as a batch refit saves them).
        notes: what the caller should know about the forecast (a saved model refitted
            because it was fitted on other data, a horizon longer than the history it
            stands on).
        refitted: the note on a saved model refitted because it was fitted on other data.
    """

    frame: pd.DataFrame
    model_id: str | None
    fallback: dict[str, str]
    model_ids: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    refitted: str | None = None


def forecast_series(
    store: Store,
    series_ids: Sequence[str] | None,
    *,
    horizon: str,
    quantiles: Sequence[float],
    model: str,
    params: dict[str, str] | None = None,
    save: bool = False,
    from_model: str | None = None,
    models_dir: str | Path | None = None,
    reconcile: str | None = None,
    clusters: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> ForecastResult:
    """Forecast stored series with a newly fitted model, or with a saved one.

    Args:
        store: the store.
        series_ids: series to forecast (all when ``None`` and no ``clusters``).
        horizon: a duration or a number of steps.
        quantiles: quantile levels.
        model: the forecaster's alias (ignored with ``from_model``).
        params: its hyperparameters as text (``season=1w``), parsed to the types of their
            defaults.
        save: save the fitted model in the registry (also a saved model refitted because
            it was fitted on other data).
        from_model: a registry model id to forecast with, or an alias: each series is then
            forecast by the newest model of that alias fitted on it (the series of those
            models that are in the store when no series are named). The models are updated
            with the stored points that arrived or were revised after their fitted part; a
            model fitted on other data (another store's, a series re-derived since) is
            refitted on the stored series and says so in ``notes``
            (:mod:`prism.forecasters.sync`, as the API's hub decides).
        models_dir: the registry (default ``PRISM_MODELS_DIR`` or ``./models``).
        reconcile: ``bottom_up`` or ``mint_shrink`` to make scope forecasts add up.
        clusters: also forecast every series of these clusters (:func:`select_series`).
        progress: called as ``progress(stage, done, total)`` as the work goes on, in series:
            ``fit`` (or ``load``: the saved models, one step per registry model, then
            ``update``), ``forecast``, then ``save`` and ``reconcile`` when asked for. A
            model is fitted on all the series at once (a global model learns its shared
            parts from all of them), so ``fit`` goes from 0 to all series in one step.

    Returns:
        The :class:`ForecastResult`.

    Raises:
        SeriesNotFound: for an unknown series.
        ConfigError: for an unknown model, a bad horizon, quantile or parameter, or an
            unknown cluster.
    """
    from prism import registry
    from prism.forecasters import get_forecaster
    from prism.forecasters.base import clone
    from prism.forecasters.sync import store_sync
    from prism.reconcile import one_step_residuals
    from prism.reconcile import reconcile as reconcile_frame

    def step(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(stage, done, total)

    series_ids = select_series(store, series_ids, clusters)
    root = _registry(models_dir)
    model_id: str | None = None
    model_ids: tuple[str, ...] = ()
    notes: list[str] = []
    refitted: str | None = None
    if from_model:
        held = _saved_models(store, root, from_model, series_ids, progress=step)
        wanted = [sid for _, sids, _ in held for sid in sids]
        history = load_panel(store, wanted)
        n = len(wanted)
        if len(held) > 1:
            notes.append(f"the series are stored at {len(held)} steps: the saved models of "
                         "each step forecast them")
        parts = []
        steps = _stored_steps(store, wanted)  # one catalogue read for every held model
        _check_horizon(horizon, steps.values())  # before any refit
        for forecaster, sids, ids in held:
            fresh = history[history[SERIES_ID].isin(sids)]
            sync = store_sync(forecaster, fresh, steps)
            if sync.refit is not None:  # fitted on other data: refit it on the store's
                step("fit", 0, n)
                forecaster = clone(forecaster).fit(fresh)
                step("fit", n, n)
                saved_as = "not saved: --save keeps it"
                if save:
                    ids = (registry.save_model(forecaster, root).model_id,)
                    saved_as = f"saved as {ids[0]}"
                else:
                    ids = ()
                refitted = (f"the saved {forecaster.alias} model was fitted on other data "
                            f"({sync.refit}): refitted on the stored series, {saved_as}")
                notes.append(refitted)
            elif not sync.points.empty:
                touched = int(sync.points[SERIES_ID].nunique())
                step("update", 0, touched)
                forecaster.update(sync.points)
                step("update", touched, touched)
            step("forecast", 0, n)
            frame = forecaster.predict(horizon, quantiles)
            parts.append((forecaster, frame[frame[SERIES_ID].isin(sids)].reset_index(drop=True)))
            model_ids += ids
        step("forecast", n, n)
        model_id = model_ids[0] if len(model_ids) == 1 else None
    else:
        panel = load_panel(store, series_ids)
        history = panel
        n = int(panel[SERIES_ID].nunique())
        groups: dict[int, list[str]] = {}
        for sid, freq_s in _stored_steps(store, panel[SERIES_ID].unique()).items():
            groups.setdefault(freq_s, []).append(sid)
        if len(groups) > 1:  # a global model learns across series of one step
            notes.append(f"the series are stored at {len(groups)} steps "
                         f"({', '.join(f'{s:,} s' for s in sorted(groups))}): one {model} "
                         "model was fitted per step")
        _check_horizon(horizon, groups)  # before any fit
        parts = []
        step("fit", 0, n)
        for _, group in sorted(groups.items()):
            fitted = get_forecaster(model, **typed_params(model, params or {}))
            parts.append((fitted.fit(panel[panel[SERIES_ID].isin(group)]), pd.DataFrame()))
        step("fit", n, n)
        step("forecast", 0, n)
        parts = [(fitted, fitted.predict(horizon, quantiles)) for fitted, _ in parts]
        step("forecast", n, n)
        if save:
            model_ids = tuple(registry.save_model(fitted, root).model_id for fitted, _ in parts)
            model_id = model_ids[0] if len(model_ids) == 1 else None
            step("save", n, n)
    if reconcile:  # whole hierarchies only: a total with some of its VCs is refused
        stored = set(store.list_series()[SERIES_ID].astype(str))
        parts = [(fitted, reconcile_frame(part, method=reconcile,
                                          residuals=one_step_residuals(fitted), stored=stored))
                 for fitted, part in parts]
        step("reconcile", n, n)
    frame = parts[0][1] if len(parts) == 1 else pd.concat(
        [part for _, part in parts], ignore_index=True).sort_values(
        [SERIES_ID, TS], kind="stable", ignore_index=True)
    fallback = {sid: why for fitted, _ in parts for sid, why in fitted.fallback_.items()}
    return ForecastResult(frame, model_id, fallback, model_ids,
                          (*notes, *_horizon_notes(frame, history),
                           *_band_notes([fitted for fitted, _ in parts])), refitted)


def _check_horizon(horizon: str, steps: Iterable[int]) -> None:
    """Raise the error ``predict`` would raise for ``horizon`` at any of ``steps`` (seconds),
    before a fit that could take minutes."""
    from prism.forecasters.base import horizon_steps

    for freq_s in sorted(set(steps)):
        horizon_steps(horizon, int(freq_s))


def _stored_steps(store: Store, series_ids: Iterable[str]) -> dict[str, int]:
    """Series id -> its stored step in seconds."""
    from prism.schema import freq_seconds

    catalogue = store.list_series()
    catalogue = catalogue[catalogue[SERIES_ID].astype(str).isin(set(series_ids))]
    return {str(sid): freq_seconds(str(freq))
            for sid, freq in zip(catalogue[SERIES_ID], catalogue["freq"], strict=True)}


def _band_notes(models: Sequence[BaseForecaster]) -> tuple[str, ...]:
    """A note per kind of bands not calibrated out of sample (:func:`~prism.forecasters.
    base.band_source`), naming how many series and the first."""
    from prism.forecasters.base import BAND_NOTES, band_source

    kinds: dict[str, list[str]] = {}
    for model in models:
        for sid in model.series_ids_:
            kinds.setdefault(band_source(model, sid), []).append(sid)
    return tuple(f"{len(sids):,} series ({sids[0]}{', ...' if len(sids) > 1 else ''}): "
                 f"{BAND_NOTES[kind]}" for kind, sids in kinds.items() if kind in BAND_NOTES)


def _horizon_notes(frame: pd.DataFrame, history: pd.DataFrame) -> tuple[str, ...]:
    """A note when the forecast runs further ahead than some series' stored history: past
    it, a model only repeats what it saw and its bands grow without evidence."""
    steps = frame.groupby("series_id").size()
    held = history.groupby("series_id").size().reindex(steps.index).fillna(0)
    short = held[steps > held]
    if short.empty:
        return ()
    shortest = str(short.idxmin())
    return (f"the horizon ({int(steps.max()):,} steps) is longer than the stored history of "
            f"{len(short)} series (the shortest, {shortest}, holds {int(short.min()):,} "
            f"points): {PAST_HISTORY}",)


def select_series(store: Store, series_ids: Sequence[str] | None,
                  clusters: Sequence[str] | None, metric: str | None = None
                  ) -> list[str] | None:
    """The series named, and every series of the ``clusters`` (``prism forecast --cluster``),
    of one ``metric`` if given (``prism backtest --cluster C --metric gpus_in_use``; a metric
    without clusters: that metric's series of every cluster).

    Returns:
        The series ids, in the order named then by cluster, without repeats; ``None`` (all
        series) when nothing names any.

    Raises:
        ConfigError: for a cluster the store has no series of (naming those it has), or a
            metric none of them has (naming those they have).
    """
    wanted = list(dict.fromkeys(series_ids or ()))
    chosen: list[str | None] = list(dict.fromkeys(clusters or ()))
    for cluster in chosen or ([None] if metric else []):
        ids = store.list_series(cluster=cluster)
        if cluster is not None and ids.empty:
            known = sorted(set(store.list_series()["cluster"].astype(str)))
            raise ConfigError(f"no series of cluster {cluster!r} in the store (clusters: "
                              f"{', '.join(known) or 'none'}); `prism series list` shows them")
        if metric is not None:
            metrics = sorted(set(ids["metric"].astype(str)))
            ids = ids[ids["metric"] == metric]
            if ids.empty:
                where = f"cluster {cluster!r}" if cluster is not None else "the store"
                raise ConfigError(f"no {metric!r} series in {where} (metrics: "
                                  f"{', '.join(metrics) or 'none'})")
        wanted += [s for s in ids[SERIES_ID].astype(str) if s not in wanted]
    return wanted or None


def _registry(models_dir: str | Path | None) -> Path:
    from prism.config import get_settings

    return Path(models_dir) if models_dir is not None else get_settings().models_dir


def _saved_models(store: Store, root: Path, name: str, series_ids: Sequence[str] | None,
                  progress: Progress | None = None,
                  ) -> list[tuple[BaseForecaster, list[str], tuple[str, ...]]]:
    """The saved model(s) that forecast the series, one per stored step: ``(forecaster,
    series, model ids)``.

    ``name`` is a model id (that model), or an alias (for each series, the newest model of
    the alias fitted on it, the models of one step held together as one
    :class:`~prism.forecasters.compose.SeriesModels` when they are several).

    Raises:
        ConfigError: for an unknown model, or a series no model named by ``name`` holds.
    """
    from prism import registry

    by_id = [r for r in registry.list_models(root) if r.model_id == name]
    if by_id:
        records = dict.fromkeys(by_id[0].series_ids, by_id[0])
    else:
        records = registry.newest_for_series(root, name)
        if not records:
            registry.find_model(root, name)  # raises, naming the models there are
    if series_ids:
        wanted = list(dict.fromkeys(series_ids))
    elif by_id:
        wanted = list(records)
    else:  # an alias: its series that are still in the store
        stored = set(store.list_series()[SERIES_ID].astype(str))
        wanted = sorted(s for s in records if s in stored)
        if not wanted:
            raise ConfigError(f"none of the series of the {name} models in {str(root)!r} is "
                              "in the store; name the series, or fit new models")
    unknown = [s for s in wanted if s not in records]
    if unknown:
        what = f"model {name}" if by_id else f"no {name} model in {str(root)!r}"
        raise ConfigError(f"{what} was not fitted on {unknown[0]!r}; fit a model on it "
                          "(prism forecast --model ... --save, or prism refit)")
    needed = {records[s].model_id: records[s] for s in wanted}
    per_model = Counter(records[s].model_id for s in wanted)
    loaded: dict[str, BaseForecaster] = {}
    done = 0
    for mid in needed:  # a batch refit saves one model per chunk of series
        loaded[mid] = registry.load_model(root, mid)[0]
        done += per_model[mid]
        if progress is not None:
            progress("load", done, len(wanted))
    by_step: dict[int, list[str]] = {}  # series of one step are held as one model
    for sid in wanted:
        by_step.setdefault(loaded[records[sid].model_id].freq_s_, []).append(sid)
    held = []
    for _, sids in sorted(by_step.items()):
        mids = tuple(sorted({records[s].model_id for s in sids}))
        model = (loaded[mids[0]] if len(mids) == 1 else
                 SeriesModels.join({s: loaded[records[s].model_id] for s in sids}))
        held.append((model, sids, mids))
    return held


_MODEL_COLUMNS = ["model_id", "alias", "series", "data_start", "data_end", "version",
                  "created", "calibration_mae_1step"]


def list_models(models_dir: str | Path | None = None) -> pd.DataFrame:
    """The saved models, newest first: id, alias, series, data range, metrics."""
    from prism import registry

    return _model_frame(registry.list_models(_registry(models_dir)))


def prune_models(models_dir: str | Path | None = None, *, keep: int = 1,
                 dry_run: bool = False) -> pd.DataFrame:
    """Remove the registry models that newer ones of the same alias replace
    (``prism models prune``): each series keeps the ``keep`` newest models of each alias
    fitted on it, so the newest model of every series stays.

    Args:
        models_dir: the registry (default ``PRISM_MODELS_DIR`` or ``./models``).
        keep: models kept per series and alias (at least 1).
        dry_run: only say what would be removed.

    Returns:
        The models removed (or that would be), newest first, as :func:`list_models` lists
        them, with their ``path``.

    Raises:
        ConfigError: for ``keep`` below 1.
    """
    from prism import registry

    removed = registry.prune_models(_registry(models_dir), keep=keep, dry_run=dry_run)
    frame = _model_frame(removed)
    frame["path"] = [r.path for r in removed]
    return frame


def _model_frame(records: Sequence[ModelRecord]) -> pd.DataFrame:
    """Registry records as the rows :func:`list_models` prints; ``data_start``,
    ``data_end`` and ``created`` as UTC times without a zone, as the panel's (``meta.json``
    holds them as text, ``created`` with its offset), so that JSON writes them with ``Z``."""
    rows = [{"model_id": r.model_id, "alias": r.alias, "series": len(r.series_ids),
             "data_start": r.data_start, "data_end": r.data_end, "version": r.version,
             "created": r.created,
             "calibration_mae_1step": r.metrics.get("calibration_mae_1step")}
            for r in records]
    frame = pd.DataFrame(rows, columns=_MODEL_COLUMNS)
    for col in ("data_start", "data_end", "created"):
        frame[col] = pd.to_datetime(frame[col], utc=True, format="ISO8601").dt.tz_localize(None)
    return frame


# -- the hub (the API) ---------------------------------------------------------------------------
def start_hub(store: Store, settings: Settings) -> ForecastHub:
    """A started :class:`~prism.hub.ForecastHub` on ``store`` with the settings' registry,
    default model, fit budget, workers, refit schedule and cache size (and
    ``fit_timeout_s``, a fit's time budget per series, where the settings have it).

    Raises:
        ConfigError: for a bad ``refit_every`` duration.
    """
    from prism.hub import ForecastHub

    return ForecastHub(
        store, models_dir=settings.models_dir, default_model=settings.default_model,
        fit_budget_s=settings.fit_budget_s, fit_workers=settings.fit_workers,
        fit_queue=settings.fit_queue, refit_every=settings.refit_every,
        cache_entries=settings.forecast_cache_entries, drift_window=settings.drift_window,
        max_models=settings.max_models,
        fit_timeout_s=settings.fit_timeout_s,
    ).start()


def hub_status(hub: ForecastHub) -> dict[str, int] | None:
    """What the hub holds (series, models, jobs, cache), or ``None`` when it is not serving
    (starting or stopping)."""
    return hub.status() if hub.ready else None


def refit_served(hub: ForecastHub, series_ids: Sequence[str] | None, *,
                 model: str | None = None, params: dict[str, str] | None = None
                 ) -> tuple[int, int]:
    """Have the hub refit its models of ``model`` for ``series_ids`` (``None``: all) on the
    data it holds now, and fit the series that have none; the jobs run in the background
    and each new model is saved to the registry (``prism refit`` while a server runs).

    Returns:
        ``(refits, fits)`` queued.

    Raises:
        SeriesNotFound: for an unknown series.
        ConfigError: for a bad model or parameter, or one out of its range.
        ModelNotReady: when the hub's job queue is full.
    """
    alias = model or hub.spec().alias
    return hub.refit(series_ids, alias, typed_params(alias, params or {}, bounded=True))


def serve_forecasts(
    hub: ForecastHub,
    series_ids: Sequence[str],
    *,
    horizon: str,
    quantiles: Sequence[float],
    model: str | None = None,
    params: dict[str, str] | None = None,
    save: bool = False,
) -> list[ServedForecast]:
    """Forecasts of stored series from the hub (cached, or fitted on demand).

    Args:
        hub: the forecast hub.
        series_ids: one or more series.
        horizon: a duration or a number of steps.
        quantiles: quantile levels.
        model: a forecaster alias (default: the hub's default model).
        params: hyperparameters as text (``use_rnn=false``), typed as their defaults and
            checked against their limits.
        save: save a model fitted with ``params`` to the registry (models without
            ``params`` are always saved, so that a restart reuses them).

    Raises:
        SeriesNotFound: for an unknown series.
        ConfigError: for a bad horizon, quantile, model or parameter, a parameter out of its
            range, a fit that ran past its time budget, or more values than one request may
            ask for (:data:`prism.hub.core.MAX_FORECAST_VALUES`).
        ModelNotReady: when a model is still being fitted or updated.
    """
    alias = model or hub.spec().alias
    spec = hub.spec(alias, typed_params(alias, params or {}, bounded=True))
    keep = save or not params
    if len(series_ids) == 1:
        return [hub.forecast(series_ids[0], horizon=horizon, quantiles=quantiles, spec=spec,
                             save=keep)]
    hub.check_size(series_ids, horizon, quantiles)  # before any fit or forecast
    return hub.forecast_many(series_ids, horizon=horizon, quantiles=quantiles, spec=spec,
                             save=keep)


def cached_forecast(
    hub: ForecastHub,
    series_id: str,
    *,
    horizon: str,
    quantiles: Sequence[float],
    model: str | None = None,
    params: dict[str, str] | None = None,
    save: bool = False,
) -> ServedForecast | None:
    """The forecast from the hub's memory cache, or ``None``; never waits.

    For the API's event loop: a hit is answered there without a trip through the thread
    pool; a miss goes to :func:`serve_forecasts` on a worker thread. ``None`` also for any
    request :func:`serve_forecasts` would refuse (it then says why), and for one that asks to
    ``save`` a model of ``params`` (it may not be saved yet).
    """
    if save and params:
        return None
    try:
        alias = model or hub.spec().alias
        spec = hub.spec(alias, typed_params(alias, params, bounded=True) if params else None)
    except PrismError:
        return None
    return hub.cached(series_id, horizon=horizon, quantiles=quantiles, spec=spec)
