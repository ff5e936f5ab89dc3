""":class:`ForecastHub`: the series, their models, the forecast cache and ingest, wired together
(see :mod:`prism.hub`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from prometheus_client.core import Metric

from prism.errors import ConfigError
from prism.forecasters import get_forecaster, import_libraries
from prism.forecasters.base import (
    BAND_NOTES,
    band_source,
    check_quantiles,
    horizon_note,
    horizon_steps,
    quantile_column,
)
from prism.hub.cache import ForecastCache, cache_key
from prism.hub.catalogue import Catalogue
from prism.hub.jobs import ModelJobs
from prism.hub.metrics import HubMetrics
from prism.hub.scoring import ServedLog
from prism.hub.types import (
    IngestOutcome,
    LoadedModel,
    ModelSpec,
    SeriesState,
    ServedForecast,
    spec_key,
)
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import ingest
from prism.schema import freq_seconds
from prism.store import Store

if TYPE_CHECKING:
    from prism.capacity import CapacityPlan

logger = logging.getLogger(__name__)

#: Served forecasts are rounded to this many decimals (1e-4 GPU): shorter answers, no
#: information lost that a capacity decision could use.
_DECIMALS = 4
#: The longest forecast one request may ask for (at 10 min: 138 days).
MAX_HORIZON_STEPS = 20_000
#: The most values (series x steps x (the mean and each quantile)) one request may ask for:
#: one series at the longest horizon with 99 quantiles. A request of 1,000 series x 20,000
#: steps x 99 quantiles held the server's memory until the kernel killed it.
MAX_FORECAST_VALUES = 2_000_000
#: How long :meth:`ForecastHub.close` waits for its threads (a warm-up fit, the cache writer).
_CLOSE_S = 5.0


class ForecastHub:
    """Serves forecasts of the series in a store (see :mod:`prism.hub`).

    Args:
        store: the open store (the hub takes cursors of it; the caller closes it).
        models_dir: the model registry.
        default_model: alias used when a request names no model.
        fit_budget_s: how long a request waits for a fit, load or update.
        fit_workers: jobs that run at once, and as many fits again that run past the fit
            budget (see :mod:`prism.hub.jobs`).
        fit_queue: the most jobs waiting at once.
        refit_every: refit models older than this duration (``None``: never).
        cache_entries: forecasts kept in memory (0: DuckDB cache only).
        drift_window: scored points per series in the rolling forecast error.
        max_models: models kept in memory; the least recently used leaves first (it reloads
            from the registry when asked again).
        fit_timeout_s: a fit's time budget per series: past it the fit (in a child process)
            is killed, and the series answers 422 for a while.
    """

    def __init__(
        self,
        store: Store,
        *,
        models_dir: str | Path,
        default_model: str = "prism",
        fit_budget_s: float = 2.0,
        fit_workers: int = 1,
        fit_queue: int = 64,
        refit_every: str | None = None,
        cache_entries: int = 4096,
        drift_window: int = 144,
        max_models: int = 512,
        fit_timeout_s: float = 60.0,
    ) -> None:
        self._store = store
        self._default_model = default_model
        self._budget = float(fit_budget_s)
        self._drift_window = int(drift_window)
        self._write_lock = threading.Lock()  # every write to the store
        self._stop = threading.Event()
        self._metrics = HubMetrics()
        self._catalogue = Catalogue(store)
        self._cache = ForecastCache(store, entries=cache_entries, write_lock=self._write_lock,
                                    catalogue=self._catalogue, metrics=self._metrics)
        self._jobs = ModelJobs(store, models_dir=Path(models_dir), catalogue=self._catalogue,
                               metrics=self._metrics, stop=self._stop, workers=fit_workers,
                               queue_limit=fit_queue,
                               refit_s=freq_seconds(refit_every) if refit_every else None,
                               max_models=max_models, fit_timeout_s=fit_timeout_s,
                               overtime_after_s=self._budget)
        self._served = ServedLog()
        self._specs: dict[tuple[str, tuple[tuple[str, Any], ...]], ModelSpec] = {}
        self._horizons: dict[tuple[str | int, int], int] = {}
        self._threads: list[threading.Thread] = []
        self._started = False

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> ForecastHub:
        """Import the forecasting libraries, read the catalogue and the registry, and start
        the background threads.

        The imports (about 3 s the first time in a process) come first, in this thread: the
        warm-up fit and the first requests would otherwise import scikit-learn and torch in
        several threads at once, which can end in Python's ``_DeadlockError``
        (:func:`prism.forecasters.import_libraries`).
        """
        import_libraries()
        with self._store.cursor() as cur:
            self._catalogue.refresh(cur)
        self._jobs.index_registry()
        self._threads = [
            threading.Thread(target=self._cache.write_rows, daemon=True,
                             name="prism-cache-writer"),
            threading.Thread(target=self._jobs.warm_up, args=(self._default_model,),
                             daemon=True, name="prism-warm-up")]
        if self._jobs.refit_s:
            self._threads.append(threading.Thread(target=self._jobs.refit_schedule,
                                                  daemon=True, name="prism-refit"))
        for thread in self._threads:
            thread.start()
        self._started = True
        logger.info("serving %d series; %d registry entries", len(self._catalogue),
                    self._jobs.counts()["models_in_registry"])
        return self

    def close(self) -> None:
        """Stop the background work within a few seconds: waiting jobs are dropped, running
        fits killed, the cache writer writes what is waiting."""
        self._stop.set()
        self._cache.stop()
        self._jobs.shutdown()
        deadline = time.monotonic() + _CLOSE_S
        for thread in self._threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        self._started = False

    @property
    def ready(self) -> bool:
        """Whether :meth:`start` has run, the default model's warm-up fit has ended (the
        first request does not pay for the imports) and :meth:`close` has not run."""
        return self._started and not self._stop.is_set() and self._jobs.warm.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :attr:`ready`; whether it is."""
        self._jobs.warm.wait(timeout)
        return self.ready

    def status(self) -> dict[str, int]:
        """Counts for the readiness probe: ``series``, ``models_loaded``,
        ``models_in_registry``, ``jobs`` and ``cached_forecasts``."""
        return {"series": len(self._catalogue), **self._jobs.counts(),
                "cached_forecasts": len(self._cache)}

    # -- series --------------------------------------------------------------------------------
    def series_state(self, series_id: str) -> SeriesState:
        """The series' state.

        Raises:
            DataContractError: for an id that is not ``cluster/scope/metric``.
            SeriesNotFound: for an unknown series (with the closest ids).
        """
        return self._catalogue.state(series_id)

    def catalogue(self) -> dict[str, SeriesState]:
        """Every series' state (a copy)."""
        return self._catalogue.snapshot()

    # -- models --------------------------------------------------------------------------------
    def spec(self, model: str | None = None, params: Mapping[str, Any] | None = None
             ) -> ModelSpec:
        """The model spec of an alias (default: the hub's) with typed hyperparameters.

        Raises:
            ConfigError: for an unknown alias or hyperparameter.
        """
        alias = model or self._default_model
        items = tuple(sorted((params or {}).items()))
        try:
            cached = self._specs.get((alias, items))
        except TypeError:  # unhashable values: no memo
            cached = None
        if cached is not None:
            return cached
        forecaster = get_forecaster(alias, **dict(items))
        spec = ModelSpec(alias, spec_key(alias, forecaster.get_params()), dict(items))
        try:
            self._specs[(alias, items)] = spec
        except TypeError:
            pass
        return spec

    def refit(self, series_ids: Sequence[str] | None, model: str | None = None,
              params: Mapping[str, Any] | None = None) -> tuple[int, int]:
        """Queue refits of the models of ``model`` serving ``series_ids`` (``None``: every
        series), and fits for the series without one; the jobs run in the background.

        Returns:
            ``(refits, fits)`` queued.

        Raises:
            SeriesNotFound: for an unknown series.
            ConfigError: for an unknown alias or hyperparameter.
            ModelNotReady: when the job queue is full.
        """
        spec = self.spec(model, params)
        ids = sorted(self.catalogue()) if series_ids is None else list(series_ids)
        for sid in ids:
            self.series_state(sid)
        return self._jobs.refit_series(ids, spec)

    # -- forecasts -----------------------------------------------------------------------------
    def forecast(
        self,
        series_id: str,
        *,
        horizon: str | int,
        quantiles: Sequence[float],
        spec: ModelSpec | None = None,
        deadline: float | None = None,
        save: bool = True,
    ) -> ServedForecast:
        """The forecast of one series, from the cache when it can.

        Args:
            series_id: the series.
            horizon: a duration or a number of steps.
            quantiles: quantile levels in (0, 1).
            spec: the model (default: the hub's default model).
            deadline: ``time.monotonic()`` by which a fit or update must be done (default:
                now + the fit budget).
            save: save a model fitted for it to the registry (false: it serves from memory
                only, until it leaves memory or the server stops).

        Raises:
            SeriesNotFound: for an unknown series.
            ConfigError: for a bad horizon, quantile or model.
            ModelNotReady: when the model is still being fitted or updated.
            DataContractError: when the series cannot be fitted (too short).
        """
        state = self.series_state(series_id)
        qs = tuple(check_quantiles(quantiles))
        steps = self._steps(horizon, state.freq_s)
        spec = spec or self.spec()
        if deadline is None:
            deadline = time.monotonic() + self._budget
        loaded = self._jobs.wait_ready(series_id, spec, deadline, save=save)
        key = self._key(series_id, spec, loaded, steps, qs)
        hit = self._cache.get(key, spec.alias)
        if hit is not None:
            self._metrics.forecast_served(hit)
            return hit
        forecaster = loaded.forecaster
        mean, bands = forecaster.forecast_arrays(series_id, steps, qs)
        step = pd.Timedelta(seconds=forecaster.freq_s_)
        index = pd.date_range(forecaster.last_ts_[series_id] + step, periods=steps, freq=step)
        version, watermark = key[2], key[3]
        fresh = ServedForecast(
            series_id=series_id, model=spec.key, model_id=loaded.model_id,
            model_version=version, watermark=watermark, freq_s=int(forecaster.freq_s_),
            horizon_steps=steps, quantiles=qs,
            ts=list(index.tz_localize("UTC").to_pydatetime()),
            mean=np.round(mean, _DECIMALS).tolist(),
            bands={quantile_column(q): np.round(bands[:, j], _DECIMALS).tolist()
                   for j, q in enumerate(qs)},
            fallback=forecaster.fallback_.get(series_id),
            note="; ".join(note for note in (
                horizon_note(steps, state.n_points),
                BAND_NOTES.get(band_source(forecaster, series_id))) if note) or None,
        )
        self._cache.add(key, fresh, spec.alias)
        self._served.note(series_id, spec.key, version,
                          index.to_numpy().astype("datetime64[ns]").astype(np.int64), mean)
        self._metrics.forecast_served(fresh)
        return fresh

    def cached(
        self,
        series_id: str,
        *,
        horizon: str | int,
        quantiles: Sequence[float],
        spec: ModelSpec,
    ) -> ServedForecast | None:
        """The forecast if it is in the memory cache and still current, else ``None``.

        Never blocks on a lock held for long, a job or the store: for an event loop.
        """
        state = self._catalogue.get(series_id)
        if state is None:
            return None
        try:
            qs = tuple(check_quantiles(quantiles))
            steps = self._steps(horizon, state.freq_s)
        except (ConfigError, ValueError):
            return None
        loaded = self._jobs.ready(series_id, spec)
        if loaded is None:
            return None
        return self._cache.in_memory(self._key(series_id, spec, loaded, steps, qs), spec.alias)

    def rendered(self, served: ServedForecast,
                 render: Callable[[ServedForecast], bytes]) -> bytes:
        """``render(served)`` (the API's JSON of a forecast), kept with the forecast in the
        memory cache so that a cached answer is rendered once, not per request.

        Args:
            served: an answer of :meth:`cached` or :meth:`forecast`.
            render: the same function on every call (one rendering is kept per forecast).
        """
        return self._cache.rendered(served, render)

    def forecast_many(
        self,
        series_ids: Sequence[str],
        *,
        horizon: str | int,
        quantiles: Sequence[float],
        spec: ModelSpec | None = None,
        save: bool = True,
    ) -> list[ServedForecast]:
        """Forecasts of several series; their fits run side by side within one budget.

        Raises:
            The same as :meth:`forecast`; :class:`ModelNotReady` when any is not ready.
        """
        spec = spec or self.spec()
        deadline = time.monotonic() + self._budget
        for sid in dict.fromkeys(series_ids):  # start every job first, then wait
            loaded = self._jobs.ready(sid, spec)
            if loaded is None or (save and not loaded.saved):
                self._jobs.job_for(sid, spec, save=save)
        return [self.forecast(sid, horizon=horizon, quantiles=quantiles, spec=spec,
                              deadline=deadline, save=save) for sid in series_ids]

    def check_size(self, series_ids: Sequence[str], horizon: str | int,
                   quantiles: Sequence[float]) -> None:
        """Refuse a request for more than :data:`MAX_FORECAST_VALUES` forecast values, before
        any work: each limit alone (series, steps, quantiles) lets their product through.
        (Use cases that keep only a summary, such as a capacity plan, are not bounded so.)

        Raises:
            ConfigError: naming the limit; SeriesNotFound for an unknown series.
        """
        per_step = len(check_quantiles(quantiles)) + 1  # the mean and each band
        values = 0
        for sid in series_ids:
            values += self._steps(horizon, self.series_state(sid).freq_s) * per_step
            if values > MAX_FORECAST_VALUES:
                raise ConfigError(
                    f"{len(series_ids):,} series x horizon {horizon!r} x {per_step - 1} "
                    f"quantile(s) is over {MAX_FORECAST_VALUES:,} forecast values (series x "
                    "steps x (quantiles + the mean)) for one request: ask for fewer series, "
                    "a shorter horizon or fewer quantiles, and split the rest over requests")

    @staticmethod
    def _key(series_id: str, spec: ModelSpec, loaded: LoadedModel, steps: int,
             qs: tuple[float, ...]) -> tuple[str, str, str, str, int, str]:
        return cache_key(series_id, spec.key, loaded.version, loaded.synced[series_id], steps,
                         qs)

    def _steps(self, horizon: str | int, freq_s: int) -> int:
        """``horizon_steps``, memoised: the same few horizons come again and again."""
        key = (horizon, freq_s)
        steps = self._horizons.get(key)
        if steps is None:
            steps = horizon_steps(horizon, freq_s)
            if steps > MAX_HORIZON_STEPS:
                raise ConfigError(f"horizon {horizon!r} is {steps:,} steps of {freq_s} s; ask "
                                  f"for at most {MAX_HORIZON_STEPS:,} steps at a time")
            if len(self._horizons) < 1024:
                self._horizons[key] = steps
        return steps

    # -- ingest --------------------------------------------------------------------------------
    def ingest(
        self,
        paths: Sequence[str | Path],
        fmt: str,
        options: IngestOptions,
        *,
        freq: str | None = None,
        fill: str | None = None,
    ) -> IngestOutcome:
        """Ingest files as ``prism ingest`` does, then refresh what depends on the data.

        Raises:
            IngestError / ConfigError: as :func:`prism.ingest.pipeline.ingest`; nothing is
                written then.
        """
        with self._write_lock, self._store.cursor() as cur:
            report = ingest(cur, paths, fmt, options, freq=freq, fill=fill)
            changed: list[str] = []
            scored = 0
            if report.clusters:
                changed, scored = self._after_ingest(cur, report.clusters)
        self._jobs.sync_series(changed)
        return IngestOutcome(report, changed, scored)

    def _after_ingest(self, cur: Store, clusters: Sequence[str]) -> tuple[list[str], int]:
        """Refresh the catalogue, drop stale cached forecasts, score the served ones."""
        changed = self._catalogue.refresh(cur, clusters)
        if not changed:
            return [], 0
        self._cache.drop(cur, changed)
        current = self._catalogue.snapshot()
        scored = self._served.score(cur, [sid for sid in changed if sid in current])
        logger.info("ingest changed %d series; %d forecast points scored", len(changed), scored)
        return changed, scored

    # -- metrics -------------------------------------------------------------------------------
    def collect(self, *, shared: bool = True, per_series: bool = True) -> Iterator[Metric]:
        """Prometheus metrics of the hub: cache, fits and counts (``shared``) and the
        freshness and forecast errors of each series (``per_series``)."""
        errors = pd.DataFrame()
        if per_series:
            with self._store.cursor() as cur:
                errors = cur.rolling_forecast_errors(self._drift_window)
        return self._metrics.collect(catalogue=self.catalogue() if per_series else {},
                                     errors=errors, status=self.status(), shared=shared,
                                     per_series=per_series)

    def collect_forecasts(self) -> Iterator[Metric]:
        """Prometheus gauges of the latest forecast served per series (at 1h, 6h, 1d ahead)
        and of the latest capacity plan per scope (:meth:`HubMetrics.collect_forecasts`)."""
        return self._metrics.collect_forecasts(self._catalogue.snapshot())

    def note_capacity(self, plan: CapacityPlan) -> None:
        """Keep the rows of a capacity plan just served, for :meth:`collect_forecasts`."""
        self._metrics.capacity_planned(plan.rows)
