"""Forecast serving for the REST API: models per series, a forecast cache, background work.

A :class:`ForecastServer` sits on one :class:`~prism.store.Store` and answers "forecast series
S with model M over horizon H at quantiles Q" quickly and consistently:

- **Models.** The model of ``(series, model)`` is, in order: one already in memory; the newest
  model of the same alias and hyperparameters in the registry (``models/``) that was fitted on
  the series (one fitted by ``prism forecast --all --save`` serves all its series; ``prism
  refit`` saves one per chunk of series); or a new one, fitted on demand on the series alone
  and saved to the registry, so a restart reuses it.
  ``model`` is an alias plus hyperparameters; its key reads ``prism`` for the defaults, or
  ``prism[use_rnn=false]``.
- **Data watermark.** Each series' watermark is its last timestamp and a checksum of all its
  values (:meth:`Store.series_watermarks`): it changes when a point is added or revised, and
  only then. A model serves a series only when it has absorbed the data up to the series'
  current watermark (``update``, without refitting).
- **Cache.** Forecasts are cached in DuckDB (``forecast_cache``), keyed by series, model, model
  version (``<model id>.v<version>``), data watermark, horizon steps and quantiles, with an LRU
  of recent answers in memory in front of it. A request that hits either does no model work.
  Answers are written to DuckDB behind the request, by one writer thread.
- **Ingest.** :meth:`ForecastServer.ingest` runs the CLI's ingestion (same adapters, one
  transaction) under the one write lock; afterwards the cached forecasts of every series whose
  watermark changed are dropped, their last served forecasts are scored against the points
  that arrived (rolling forecast error, in ``forecast_errors``), and the models serving them
  are updated in the background.
- **Background work.** Fits, loads, updates and refits run on a bounded thread pool
  (``fit_workers`` threads, at most ``fit_queue`` jobs waiting), never on a request thread. A
  request that needs one waits at most ``fit_budget_s`` and then gets :class:`ModelNotReady`
  (HTTP 503 with ``Retry-After``, from an estimate of the job's remaining time). A refit
  schedule (``refit_every``) refits models whose parameters are older than that.

Concurrency: reads run on their own cursors (DuckDB's MVCC gives each a consistent snapshot);
every write (ingest, cache rows, errors) takes one lock, so concurrent ingests are serialised
instead of conflicting, and no lock is held while waiting for another.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from prism import registry
from prism.errors import ConfigError, DataContractError, ModelNotReady, PrismError, SeriesNotFound
from prism.forecasters import get_forecaster
from prism.forecasters.base import (
    BaseForecaster,
    check_quantiles,
    clone,
    horizon_steps,
    quantile_column,
)
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import IngestReport, ingest
from prism.schema import SERIES_ID, TS, VALUE, freq_seconds, split_series_id
from prism.store import Store

logger = logging.getLogger(__name__)

#: What a job is expected to take before any was timed (seconds), for ``Retry-After``.
_FIRST_GUESS = {"fit": 5.0, "load": 2.0, "sync": 1.0, "refit": 5.0}
#: Served forecasts are rounded to this many decimals (1e-4 GPU): shorter answers, no
#: information lost that a capacity decision could use.
_DECIMALS = 4
#: The longest forecast one request may ask for (at 10 min: 138 days).
MAX_HORIZON_STEPS = 20_000
_FIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


# -- values ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SeriesState:
    """A series as the server sees it.

    Attributes:
        series_id: the id.
        cluster: its cluster.
        freq_s: its step in seconds.
        first_ts / last_ts: its first and last timestamp.
        n_points: its number of values.
        watermark: ``<last ts>#<checksum of its values>``.
    """

    series_id: str
    cluster: str
    freq_s: int
    first_ts: pd.Timestamp
    last_ts: pd.Timestamp
    n_points: int
    watermark: str


@dataclass(frozen=True)
class ModelSpec:
    """A forecaster alias with its hyperparameters.

    Attributes:
        alias: the forecaster's alias.
        key: ``alias`` for the default hyperparameters, else ``alias[name=value,...]`` with
            the ones that differ (JSON values): the ``model`` label of forecasts and caches.
        params: the hyperparameters to construct it with.
    """

    alias: str
    key: str
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ServedForecast:
    """One series' forecast as the API serves it (columns of the forecast contract).

    Attributes:
        series_id: the series.
        model: the model key (see :class:`ModelSpec`).
        model_id: the registry id of the model.
        model_version: ``<model id>.v<version>`` (the version grows with each update).
        watermark: the data watermark the model had absorbed.
        freq_s: step in seconds.
        horizon_steps: number of steps.
        quantiles: the quantile levels of ``bands``.
        ts: the forecast timestamps (UTC, with the zone: they leave the process).
        mean: point forecasts.
        bands: ``p50``-style column name -> that quantile's forecasts.
        fallback: why the series is served by the seasonal naive fallback, if it is.
        cached: whether the answer came from the cache.
    """

    series_id: str
    model: str
    model_id: str
    model_version: str
    watermark: str
    freq_s: int
    horizon_steps: int
    quantiles: tuple[float, ...]
    ts: list[datetime]
    mean: list[float]
    bands: dict[str, list[float]]
    fallback: str | None = None
    cached: bool = False

    def to_json(self) -> str:
        """The forecast as a JSON object (the ``forecast_cache`` payload)."""
        data = {k: getattr(self, k) for k in (
            "series_id", "model", "model_id", "model_version", "watermark", "freq_s",
            "horizon_steps", "quantiles", "mean", "bands", "fallback")}
        data["ts"] = [t.isoformat() for t in self.ts]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> ServedForecast:
        """The forecast back from :meth:`to_json`."""
        data = json.loads(text)
        data["ts"] = [_utc(datetime.fromisoformat(t)) for t in data["ts"]]
        data["quantiles"] = tuple(data["quantiles"])
        return cls(**data)

    def frame(self) -> pd.DataFrame:
        """The forecast contract: ``series_id, ts, model, mean, p..``."""
        ts = pd.to_datetime(self.ts, utc=True).tz_convert(None)  # the contract: naive UTC
        out = pd.DataFrame({SERIES_ID: self.series_id, TS: ts,
                            "model": self.model, "mean": self.mean})
        for name, values in self.bands.items():
            out[name] = values
        return out


@dataclass(frozen=True)
class IngestOutcome:
    """What an ingest through the server did.

    Attributes:
        report: the ingestion report (files, rows, clusters).
        changed: series whose data changed (their cached forecasts were dropped).
        scored: forecast points scored against the new data.
    """

    report: IngestReport
    changed: list[str]
    scored: int


@dataclass(frozen=True)
class _Loaded:
    """A model in memory; replaced whole (copy on write), never changed once published."""

    model_id: str
    spec: ModelSpec
    forecaster: BaseForecaster
    fitted_at: float  # Unix time the parameters were learned
    synced: Mapping[str, str]  # series id -> the watermark its history matches


@dataclass
class _Served:
    """The latest forecast served for a series and model, kept to score it later."""

    model_version: str
    ts: np.ndarray  # int64 nanoseconds
    mean: np.ndarray


# -- the server --------------------------------------------------------------------------------
class ForecastServer:
    """Serves forecasts of the series in a store (see the module docstring).

    Args:
        store: the open store (the server takes cursors of it; the caller closes it).
        models_dir: the model registry.
        default_model: alias used when a request names no model.
        fit_budget_s: how long a request waits for a fit, load or update.
        fit_workers: background threads.
        fit_queue: the most jobs waiting at once.
        refit_every: refit models older than this duration (``None``: never).
        cache_entries: forecasts kept in memory (0: DuckDB cache only).
        drift_window: scored points per series in the rolling forecast error.
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
    ) -> None:
        self._store = store
        self._models_dir = Path(models_dir)
        self._default_model = default_model
        self._budget = float(fit_budget_s)
        self._queue_limit = int(fit_queue)
        self._refit_s = (freq_seconds(refit_every) if refit_every else None)
        self._cache_cap = int(cache_entries)
        self._drift_window = int(drift_window)
        self._executor = ThreadPoolExecutor(max_workers=fit_workers,
                                            thread_name_prefix="prism-fit")
        self._lock = threading.Lock()  # guards the dicts below; never held while waiting
        self._write_lock = threading.Lock()  # every write to the store
        self._catalogue: dict[str, SeriesState] = {}
        self._models: dict[str, _Loaded] = {}
        self._routes: dict[tuple[str, str], str] = {}  # (series, model key) -> model id
        self._index: dict[tuple[str, str], registry.ModelRecord] = {}  # registry, not loaded
        self._jobs: dict[tuple[str, ...], Future[None]] = {}
        self._job_started: dict[tuple[str, ...], float] = {}
        self._durations: dict[tuple[str, str], float] = {}  # (kind, alias) -> EMA seconds
        self._specs: dict[tuple[str, tuple[tuple[str, Any], ...]], ModelSpec] = {}
        self._horizons: dict[tuple[str | int, int], int] = {}
        self._memory: OrderedDict[tuple[Any, ...], ServedForecast] = OrderedDict()
        self._served: dict[tuple[str, str], _Served] = {}
        self._pending_rows: queue.Queue[tuple[str, str, str, str, int, str, str] | None] = (
            queue.Queue())
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = False
        self._cache_counter = Counter(
            "prism_forecast_cache", "Forecast answers by where they came from",
            ["model", "result"], registry=None)
        self._fit_histogram = Histogram(
            "prism_model_fit_duration_seconds",
            "Time to fit, load, update or refit a served model", ["model", "kind"],
            buckets=_FIT_BUCKETS, registry=None)
        self._jobs_rejected = Counter(
            "prism_fit_jobs_rejected", "Fit/update jobs refused because the queue was full",
            registry=None)

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> ForecastServer:
        """Read the catalogue and the registry, and start the background threads."""
        with self._cursor() as cur:
            self._set_catalogue(cur.series_watermarks(), clusters=None)
        self._index_registry()
        self._threads = [threading.Thread(target=self._write_cache_rows, daemon=True,
                                          name="prism-cache-writer"),
                         threading.Thread(target=self._warm_up, daemon=True,
                                          name="prism-warm-up")]
        if self._refit_s:
            self._threads.append(threading.Thread(target=self._refit_schedule, daemon=True,
                                                  name="prism-refit"))
        for thread in self._threads:
            thread.start()
        self._started = True
        logger.info("serving %d series; %d registry entries", len(self._catalogue),
                    len(self._index))
        return self

    def _warm_up(self) -> None:
        """Fit the default model once on a small synthetic series, off the request path.

        The first fit in a process imports torch, scikit-learn and scipy and sets torch up
        (about 2 s here); without this the first request for a series without a saved model
        would pay that on top of its fit and exceed the fit budget.
        """
        started = time.perf_counter()
        try:
            steps = 144 * 4
            t = np.arange(steps)
            panel = pd.DataFrame({
                SERIES_ID: "warm-up/all/gpus_in_use",
                TS: pd.date_range("2026-01-05", periods=steps, freq="10min"),
                VALUE: 40.0 + 20.0 * np.sin(2 * np.pi * t / 144) + (t % 37 == 0) * 10.0,
            })
            get_forecaster(self._default_model).fit(panel).predict(6, (0.5, 0.9))
        except Exception as exc:  # a warm-up must never take the server down
            logger.warning("warm-up fit of %s failed (%s: %s); the first fit will be slower",
                           self._default_model, type(exc).__name__, exc)
            return
        logger.info("warmed up %s in %.1f s", self._default_model, time.perf_counter() - started)

    def close(self) -> None:
        """Stop the background threads (running jobs finish; waiting ones are dropped)."""
        self._stop.set()
        self._pending_rows.put(None)
        self._executor.shutdown(wait=True, cancel_futures=True)
        for thread in self._threads:
            thread.join(timeout=10)
        self._started = False

    @property
    def ready(self) -> bool:
        """Whether :meth:`start` has run and :meth:`close` has not."""
        return self._started and not self._stop.is_set()

    def status(self) -> dict[str, int]:
        """Counts for the readiness probe."""
        with self._lock:
            return {"series": len(self._catalogue), "models_loaded": len(self._models),
                    "models_in_registry": len({r.model_id for r in self._index.values()}),
                    "jobs": sum(not f.done() for f in self._jobs.values()),
                    "cached_forecasts": len(self._memory)}

    # -- series --------------------------------------------------------------------------------
    def series_state(self, series_id: str) -> SeriesState:
        """The series' state.

        Raises:
            DataContractError: for an id that is not ``cluster/scope/metric``.
            SeriesNotFound: for an unknown series (with the closest ids).
        """
        state = self._catalogue.get(series_id)
        if state is not None:
            return state
        split_series_id(series_id)
        with self._cursor() as cur:
            cur.require_series([series_id])  # raises with the closest ids
            self._set_catalogue(cur.series_watermarks([split_series_id(series_id)[0]]),
                                clusters=[split_series_id(series_id)[0]])
        state = self._catalogue.get(series_id)
        if state is None:  # pragma: no cover - the store has it but the catalogue not
            raise SeriesNotFound(f"series {series_id!r} is not in the store")
        return state

    def catalogue(self) -> dict[str, SeriesState]:
        """Every series' state (a copy)."""
        with self._lock:
            return dict(self._catalogue)

    # -- models --------------------------------------------------------------------------------
    def spec(self, model: str | None = None, params: Mapping[str, Any] | None = None
             ) -> ModelSpec:
        """The model spec of an alias (default: the server's) with typed hyperparameters.

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
        spec = ModelSpec(alias, _spec_key(alias, forecaster.get_params()), dict(items))
        try:
            self._specs[(alias, items)] = spec
        except TypeError:
            pass
        return spec

    def forecast(
        self,
        series_id: str,
        *,
        horizon: str | int,
        quantiles: Sequence[float],
        spec: ModelSpec | None = None,
        deadline: float | None = None,
    ) -> ServedForecast:
        """The forecast of one series, from the cache when it can.

        Args:
            series_id: the series.
            horizon: a duration or a number of steps.
            quantiles: quantile levels in (0, 1).
            spec: the model (default: the server's default model).
            deadline: ``time.monotonic()`` by which a fit or update must be done (default:
                now + the fit budget).

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
        loaded = self._ready_model(series_id, spec, deadline)
        forecaster = loaded.forecaster
        key = self._cache_key(series_id, spec, loaded, steps, qs)
        version, watermark = key[2], key[3]
        hit = self._memory_hit(key, spec)
        if hit is not None:
            return hit
        with self._cursor() as cur:
            payload = cur.cached_forecast(*key)
        if payload is not None:
            served = replace(ServedForecast.from_json(payload), cached=True)
            self._remember(key, served)
            self._cache_counter.labels(spec.alias, "hit_store").inc()
            return served
        mean, bands = forecaster.forecast_arrays(series_id, steps, qs)
        step = pd.Timedelta(seconds=forecaster.freq_s_)
        index = pd.date_range(forecaster.last_ts_[series_id] + step, periods=steps, freq=step)
        fresh = ServedForecast(
            series_id=series_id, model=spec.key, model_id=loaded.model_id,
            model_version=version, watermark=watermark, freq_s=int(forecaster.freq_s_),
            horizon_steps=steps, quantiles=qs,
            ts=list(index.tz_localize("UTC").to_pydatetime()),
            mean=np.round(mean, _DECIMALS).tolist(),
            bands={quantile_column(q): np.round(bands[:, j], _DECIMALS).tolist()
                   for j, q in enumerate(qs)},
            fallback=forecaster.fallback_.get(series_id),
        )
        self._cache_counter.labels(spec.alias, "miss").inc()
        self._pending_rows.put((*key, fresh.to_json()))
        cached = replace(fresh, cached=True)
        self._remember(key, cached)
        self._note_served(series_id, spec.key, version,
                          index.to_numpy().astype("datetime64[ns]").astype(np.int64), mean)
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
        loaded = self._ready(series_id, spec)
        if loaded is None:
            return None
        return self._memory_hit(self._cache_key(series_id, spec, loaded, steps, qs), spec)

    @staticmethod
    def _cache_key(series_id: str, spec: ModelSpec, loaded: _Loaded, steps: int,
                   qs: tuple[float, ...]) -> tuple[str, str, str, str, int, str]:
        """``(series, model key, model version, watermark, steps, quantiles)``: what a cached
        forecast is stored under, in memory and in ``forecast_cache``."""
        version = f"{loaded.model_id}.v{loaded.forecaster.version_}"
        return (series_id, spec.key, version, loaded.synced[series_id], steps,
                ",".join(f"{q:g}" for q in qs))

    def _memory_hit(self, key: tuple[Any, ...], spec: ModelSpec) -> ServedForecast | None:
        """The forecast under ``key`` in the in-memory LRU (marked recently used), counted."""
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None:
                self._memory.move_to_end(key)
        if hit is not None:
            self._cache_counter.labels(spec.alias, "hit_memory").inc()
        return hit

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

    def forecast_many(
        self,
        series_ids: Sequence[str],
        *,
        horizon: str | int,
        quantiles: Sequence[float],
        spec: ModelSpec | None = None,
    ) -> list[ServedForecast]:
        """Forecasts of several series; their fits run side by side within one budget.

        Raises:
            The same as :meth:`forecast`; :class:`ModelNotReady` when any is not ready.
        """
        spec = spec or self.spec()
        deadline = time.monotonic() + self._budget
        for sid in dict.fromkeys(series_ids):  # start every job first, then wait
            if self._ready(sid, spec) is None:
                self._job_for(sid, spec)
        return [self.forecast(sid, horizon=horizon, quantiles=quantiles, spec=spec,
                              deadline=deadline) for sid in series_ids]

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
        with self._write_lock, self._cursor() as cur:
            report = ingest(cur, paths, fmt, options, freq=freq, fill=fill)
            changed: list[str] = []
            scored = 0
            if report.clusters:
                changed, scored = self._after_ingest(cur, report.clusters)
        for model_id in self._models_serving(changed):
            try:
                self._submit(("sync", model_id), self._sync_job, model_id)
            except ModelNotReady:  # queue full: the next request for it schedules it
                pass
        return IngestOutcome(report, changed, scored)

    def _after_ingest(self, cur: Store, clusters: Sequence[str]) -> tuple[list[str], int]:
        """Refresh the catalogue, drop stale cached forecasts, score the served ones."""
        before = {sid: s for sid, s in self.catalogue().items() if s.cluster in clusters}
        self._set_catalogue(cur.series_watermarks(clusters), clusters=clusters)
        after = {sid: s for sid, s in self.catalogue().items() if s.cluster in clusters}
        changed = sorted(sid for sid in set(before) | set(after)
                         if before.get(sid) is None or after.get(sid) is None
                         or before[sid].watermark != after[sid].watermark)
        if not changed:
            return [], 0
        gone = set(changed)
        with self._lock:
            for key in [k for k in self._memory if k[0] in gone]:
                del self._memory[key]
        cur.drop_cached_forecasts(changed)
        scored = self._score(cur, [sid for sid in changed if sid in after])
        logger.info("ingest changed %d series; %d forecast points scored", len(changed), scored)
        return changed, scored

    # -- drift ---------------------------------------------------------------------------------
    def _note_served(self, series_id: str, model_key: str, version: str,
                     ts: np.ndarray, mean: np.ndarray) -> None:
        with self._lock:
            old = self._served.get((series_id, model_key))
            if old is None or ts[0] > old.ts[0] or (ts[0] == old.ts[0] and len(ts) > len(old.ts)):
                self._served[(series_id, model_key)] = _Served(version, ts, np.asarray(mean))

    def _score(self, cur: Store, series_ids: Sequence[str]) -> int:
        """Score the last served forecasts of these series against the values now stored."""
        wanted = set(series_ids)
        with self._lock:
            todo = {k: v for k, v in self._served.items() if k[0] in wanted}
        frames = []
        for (sid, model_key), served in todo.items():
            start = pd.Timestamp(int(served.ts[0]))
            end = pd.Timestamp(int(served.ts[-1])) + pd.Timedelta(seconds=1)
            actual = cur.load_panel([sid], start=start, end=end)
            if actual.empty:
                continue
            at = actual[TS].to_numpy().astype("datetime64[ns]").astype(np.int64)
            pos = np.searchsorted(served.ts, at)
            ok = (pos < len(served.ts)) & (served.ts[np.minimum(pos, len(served.ts) - 1)] == at)
            if not ok.any():
                continue
            frames.append(pd.DataFrame({
                "series_id": sid, "model": model_key, "model_version": served.model_version,
                "origin_ts": start, "ts": actual[TS].to_numpy()[ok], "step": pos[ok] + 1,
                "forecast": served.mean[pos[ok]], "actual": actual[VALUE].to_numpy()[ok],
                "scored_at": pd.Timestamp.now("UTC").tz_localize(None),
            }))
            with self._lock:  # each point is scored once: keep only what is still ahead
                keep = served.ts > at.max()
                if keep.any():
                    self._served[(sid, model_key)] = _Served(
                        served.model_version, served.ts[keep], served.mean[keep])
                else:
                    self._served.pop((sid, model_key), None)
        if not frames:
            return 0
        return cur.add_forecast_errors(pd.concat(frames, ignore_index=True))

    # -- metrics -------------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        """Prometheus metrics of the server: cache, fits, freshness and forecast errors."""
        yield from self._cache_counter.collect()
        yield from self._fit_histogram.collect()
        yield from self._jobs_rejected.collect()
        now = time.time()
        last = GaugeMetricFamily("prism_series_last_timestamp_seconds",
                                 "Unix time of the series' last bucket", labels=["series_id"])
        age = GaugeMetricFamily("prism_series_data_age_seconds",
                                "Seconds from the end of the series' last bucket to now",
                                labels=["series_id"])
        for sid, state in sorted(self.catalogue().items()):
            end = state.last_ts.value / 1e9
            last.add_metric([sid], end)
            age.add_metric([sid], now - end - state.freq_s)
        yield last
        yield age
        mae = GaugeMetricFamily(
            "prism_forecast_rolling_mae",
            "Mean absolute error of the served forecasts over the last scored points",
            labels=["series_id", "model"])
        wape = GaugeMetricFamily(
            "prism_forecast_rolling_wape",
            "Sum of absolute errors over the sum of actuals, last scored points",
            labels=["series_id", "model"])
        points = GaugeMetricFamily("prism_forecast_scored_points",
                                   "Points in the rolling forecast error",
                                   labels=["series_id", "model"])
        with self._cursor() as cur:
            errors = cur.rolling_forecast_errors(self._drift_window)
        for row in errors.to_dict("records"):
            labels = [str(row["series_id"]), str(row["model"])]
            mae.add_metric(labels, float(row["mae"]))
            points.add_metric(labels, float(row["points"]))
            if pd.notna(row["wape"]):
                wape.add_metric(labels, float(row["wape"]))
        yield mae
        yield wape
        yield points
        status = self.status()
        for name, help_text in (("models_loaded", "Models in memory"),
                                ("jobs", "Fit/update jobs waiting or running"),
                                ("cached_forecasts", "Forecasts in the memory cache")):
            gauge = GaugeMetricFamily(f"prism_{name}", help_text)
            gauge.add_metric([], status[name])
            yield gauge

    def rolling_errors(self) -> pd.DataFrame:
        """``series_id, model, points, mae, wape`` over the last scored points."""
        with self._cursor() as cur:
            return cur.rolling_forecast_errors(self._drift_window)

    # -- internals: catalogue, cache -----------------------------------------------------------
    def _cursor(self) -> _CursorContext:
        return _CursorContext(self._store)

    def _set_catalogue(self, frame: pd.DataFrame, *, clusters: Sequence[str] | None) -> None:
        states = {}
        for row in frame.to_dict("records"):
            last = pd.Timestamp(row["last_ts"])
            states[str(row["series_id"])] = SeriesState(
                series_id=str(row["series_id"]), cluster=str(row["cluster"]),
                freq_s=freq_seconds(str(row["freq"])), first_ts=pd.Timestamp(row["first_ts"]),
                last_ts=last, n_points=int(row["n_points"]),
                watermark=f"{last.isoformat()}#{int(row['checksum']):016x}")
        with self._lock:
            if clusters is None:
                self._catalogue = states
            else:
                keep = {k: v for k, v in self._catalogue.items() if v.cluster not in clusters}
                self._catalogue = {**keep, **states}

    def _remember(self, key: tuple[Any, ...], served: ServedForecast) -> None:
        if self._cache_cap <= 0:
            return
        with self._lock:
            self._memory[key] = served
            self._memory.move_to_end(key)
            while len(self._memory) > self._cache_cap:
                self._memory.popitem(last=False)

    def _write_cache_rows(self) -> None:
        """The one thread that writes forecast payloads to DuckDB (behind the requests)."""
        while True:
            item = self._pending_rows.get()
            rows = [] if item is None else [item]
            while True:  # take what else is waiting: one insert for a burst of answers
                try:
                    more = self._pending_rows.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    item = None
                else:
                    rows.append(more)
            current = self.catalogue()
            rows = [r for r in rows if r[0] in current and current[r[0]].watermark == r[3]]
            if rows:
                try:
                    with self._write_lock, self._cursor() as cur:
                        cur.cache_forecasts(rows)
                except Exception:  # the cache is an optimisation: log, never stop serving
                    logger.exception("could not write %d forecasts to the cache", len(rows))
            if item is None:
                return

    # -- internals: models and jobs ------------------------------------------------------------
    def _index_registry(self) -> None:
        index: dict[tuple[str, str], registry.ModelRecord] = {}
        for record in registry.list_models(self._models_dir):  # newest first
            try:
                key = _spec_key(record.alias, record.params)
            except ConfigError:
                continue  # an alias this PRISM does not know
            for sid in record.series_ids:
                index.setdefault((sid, key), record)
        with self._lock:
            self._index = index

    def _ready(self, series_id: str, spec: ModelSpec) -> _Loaded | None:
        """The model of ``(series, spec)`` if it has absorbed the series' current data."""
        state = self._catalogue.get(series_id) or self.series_state(series_id)
        with self._lock:
            model_id = self._routes.get((series_id, spec.key))
            loaded = self._models.get(model_id) if model_id else None
        if loaded is not None and loaded.synced.get(series_id) == state.watermark:
            return loaded
        return None

    def _ready_model(self, series_id: str, spec: ModelSpec, deadline: float) -> _Loaded:
        """The model of ``(series, spec)`` with the series' current data absorbed."""
        while True:
            loaded = self._ready(series_id, spec)
            if loaded is not None:
                return loaded
            key, future = self._job_for(series_id, spec)
            remaining = deadline - time.monotonic()
            try:
                future.result(timeout=max(0.0, remaining))
            except FutureTimeout:
                raise ModelNotReady(
                    f"model {spec.key} for {series_id!r} is being "
                    f"{'fitted' if key[0] in ('fit', 'refit') else 'updated'}; "
                    "retry after the time in Retry-After", retry_after=self._eta(key, spec)
                ) from None
            except PrismError as exc:
                if key[0] != "load":
                    raise
                logger.warning("cannot load %s for %s (%s); fitting a new one", key[1],
                               series_id, exc)
                with self._lock:
                    self._index = {k: r for k, r in self._index.items()
                                   if r.model_id != key[1]}
            if time.monotonic() >= deadline:
                loaded = self._ready(series_id, spec)
                if loaded is not None:
                    return loaded
                raise ModelNotReady(f"model {spec.key} for {series_id!r} is catching up with "
                                    "new data", retry_after=self._eta(key, spec))

    def _job_for(self, series_id: str, spec: ModelSpec
                 ) -> tuple[tuple[str, ...], Future[None]]:
        """Start (or join) the job that makes the model of ``(series, spec)`` ready."""
        with self._lock:
            model_id = self._routes.get((series_id, spec.key))
            record = self._index.get((series_id, spec.key))
        if model_id is not None:
            key: tuple[str, ...] = ("sync", model_id)
            return key, self._submit(key, self._sync_job, model_id)
        if record is not None:
            key = ("load", record.model_id)
            return key, self._submit(key, self._load_job, record, spec)
        key = ("fit", series_id, spec.key)
        return key, self._submit(key, self._fit_job, series_id, spec)

    def _submit(self, key: tuple[str, ...], fn: Callable[..., None], *args: Any
                ) -> Future[None]:
        with self._lock:
            existing = self._jobs.get(key)
            if existing is not None and not existing.done():
                return existing
            waiting = sum(not f.running() and not f.done() for f in self._jobs.values())
            if waiting >= self._queue_limit:
                self._jobs_rejected.inc()
                raise ModelNotReady(f"{waiting} model jobs are waiting; retry later",
                                    retry_after=_FIRST_GUESS["fit"])
            if self._stop.is_set():
                raise ModelNotReady("the server is shutting down", retry_after=5)

            def run() -> None:
                with self._lock:
                    self._job_started[key] = time.monotonic()
                try:
                    fn(*args)
                finally:
                    with self._lock:
                        self._job_started.pop(key, None)

            future: Future[None] = self._executor.submit(run)
            self._jobs[key] = future

        def forget(done: Future[None]) -> None:
            with self._lock:
                if self._jobs.get(key) is done:
                    del self._jobs[key]
            if not done.cancelled() and done.exception() is not None:
                logger.warning("job %s failed: %s", key, done.exception())

        future.add_done_callback(forget)
        return future

    def _eta(self, key: tuple[str, ...], spec: ModelSpec) -> float:
        """Seconds until the job ``key`` is likely done."""
        with self._lock:
            expected = self._durations.get((key[0], spec.alias), _FIRST_GUESS[key[0]])
            started = self._job_started.get(key)
            ahead = sum(not f.running() and not f.done()
                        for k, f in self._jobs.items() if k != key)
        elapsed = time.monotonic() - started if started is not None else 0.0
        return max(1.0, expected - elapsed) + ahead * expected

    def _timed(self, kind: str, alias: str, seconds: float) -> None:
        self._fit_histogram.labels(alias, kind).observe(seconds)
        with self._lock:
            old = self._durations.get((kind, alias))
            self._durations[(kind, alias)] = seconds if old is None else 0.7 * old + 0.3 * seconds

    def _publish(self, loaded: _Loaded, *, replaces: str | None = None) -> None:
        with self._lock:
            self._models[loaded.model_id] = loaded
            for sid in loaded.forecaster.series_ids_:
                route = (sid, loaded.spec.key)
                if replaces is None or self._routes.get(route) in (None, replaces):
                    self._routes[route] = loaded.model_id
            if replaces is not None and replaces != loaded.model_id:
                self._models.pop(replaces, None)

    def _models_serving(self, series_ids: Sequence[str]) -> list[str]:
        wanted = set(series_ids)
        with self._lock:
            return sorted({mid for (sid, _), mid in self._routes.items() if sid in wanted})

    def _save(self, forecaster: BaseForecaster) -> str:
        try:
            return registry.save_model(forecaster, self._models_dir).model_id
        except (ConfigError, OSError) as exc:  # serve it anyway; a restart will refit
            logger.warning("could not save %s to the registry: %s", forecaster.alias, exc)
            return f"{forecaster.alias}-unsaved-{id(forecaster):x}"

    def _fit_job(self, series_id: str, spec: ModelSpec) -> None:
        state = self.series_state(series_id)  # the watermark before the data is read
        with self._cursor() as cur:
            panel = cur.load_panel([series_id])
        clock = time.perf_counter()
        forecaster = get_forecaster(spec.alias, **dict(spec.params)).fit(panel)
        self._timed("fit", spec.alias, time.perf_counter() - clock)
        model_id = self._save(forecaster)
        logger.info("fitted %s for %s as %s", spec.key, series_id, model_id)
        self._publish(_Loaded(model_id, spec, forecaster, time.time(),
                              {series_id: state.watermark}))

    def _load_job(self, record: registry.ModelRecord, spec: ModelSpec) -> None:
        clock = time.perf_counter()
        forecaster, record = registry.load_model(self._models_dir, record.model_id)
        fitted_at = datetime.fromisoformat(record.created).timestamp()
        loaded = _Loaded(record.model_id, spec, forecaster, fitted_at, {})
        self._timed("load", spec.alias, time.perf_counter() - clock)
        self._sync(loaded)

    def _sync_job(self, model_id: str) -> None:
        with self._lock:
            loaded = self._models.get(model_id)
        if loaded is not None:
            self._sync(loaded)

    def _sync(self, loaded: _Loaded) -> None:
        """Bring a model up to the stored data (update; refit when the grid changed)."""
        catalogue = self.catalogue()  # watermarks before the data is read
        forecaster = loaded.forecaster
        sids = [s for s in forecaster.series_ids_ if s in catalogue]
        stale = [s for s in sids if loaded.synced.get(s) != catalogue[s].watermark]
        if not stale:
            if loaded.model_id not in self._models:
                self._publish(loaded)
            return
        with self._cursor() as cur:
            panel = cur.load_panel(stale)
        new_points = []
        for sid, group in panel.groupby(SERIES_ID, sort=True):
            sid = str(sid)
            history = forecaster.history_[sid]
            values = group[VALUE].to_numpy(dtype=np.float64)
            start = pd.Timestamp(group[TS].iloc[0])
            if (start != forecaster.first_ts_[sid] or len(values) < len(history)
                    or catalogue[sid].freq_s != forecaster.freq_s_):
                logger.info("%s changed before its end in %s; refitting", sid, loaded.model_id)
                self._refit(loaded)
                return
            same = min(len(history), len(values))
            differ = np.flatnonzero(history[:same] != values[:same])
            first = int(differ[0]) if len(differ) else same
            if first < len(values):
                new_points.append(group.iloc[first:])
        updated = forecaster
        if new_points:
            clock = time.perf_counter()
            updated = forecaster.copy()
            try:
                updated.update(pd.concat(new_points, ignore_index=True))
            except DataContractError as exc:
                logger.info("cannot update %s (%s); refitting", loaded.model_id, exc)
                self._refit(loaded)
                return
            self._timed("update", loaded.spec.alias, time.perf_counter() - clock)
        synced = {**loaded.synced, **{s: catalogue[s].watermark for s in stale}}
        self._publish(replace(loaded, forecaster=updated, synced=synced))

    def _refit(self, loaded: _Loaded) -> None:
        catalogue = self.catalogue()
        sids = [s for s in loaded.forecaster.series_ids_ if s in catalogue]
        if not sids:
            with self._lock:
                self._models.pop(loaded.model_id, None)
            return
        with self._cursor() as cur:
            panel = cur.load_panel(sids)
        clock = time.perf_counter()
        forecaster = clone(loaded.forecaster).fit(panel)
        self._timed("refit", loaded.spec.alias, time.perf_counter() - clock)
        model_id = self._save(forecaster)
        logger.info("refitted %s as %s", loaded.model_id, model_id)
        self._publish(_Loaded(model_id, loaded.spec, forecaster, time.time(),
                              {s: catalogue[s].watermark for s in sids}),
                      replaces=loaded.model_id)

    def _refit_job(self, model_id: str) -> None:
        with self._lock:
            loaded = self._models.get(model_id)
        if loaded is not None:
            self._refit(loaded)

    def _refit_schedule(self) -> None:
        assert self._refit_s is not None
        tick = min(60.0, self._refit_s / 4)
        while not self._stop.wait(tick):
            with self._lock:
                due = [m.model_id for m in self._models.values()
                       if time.time() - m.fitted_at >= self._refit_s]
            for model_id in due:
                try:
                    self._submit(("refit", model_id), self._refit_job, model_id)
                except ModelNotReady:
                    break


class _CursorContext:
    """``with server._cursor() as cur``: a store on its own cursor, closed afterwards."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cursor: Store | None = None

    def __enter__(self) -> Store:
        self._cursor = self._store.cursor()
        return self._cursor

    def __exit__(self, *exc: object) -> None:
        if self._cursor is not None:
            self._cursor.close()


# -- helpers -----------------------------------------------------------------------------------
def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | set):
        return list(value)
    return str(value)


def _spec_key(alias: str, params: Mapping[str, Any]) -> str:
    """``alias`` or ``alias[name=value,...]`` with the hyperparameters that differ from the
    defaults (JSON values, so that registry metadata and live objects give the same key).

    Raises:
        ConfigError: for an unknown alias.
    """
    defaults = _jsonable(get_forecaster(alias).get_params())
    given = _jsonable(dict(params))
    changed = {k: v for k, v in sorted(given.items()) if defaults.get(k) != v}
    if not changed:
        return alias
    return alias + "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in changed.items()) + "]"
