"""The forecast hub behind the REST API: models per series, one forecast cache, background work.

A :class:`ForecastHub` sits on one :class:`~prism.store.Store` and answers "forecast series
S with model M over horizon H at quantiles Q" quickly and consistently:

- **Models** (:mod:`prism.hub.jobs`). The model of ``(series, model)`` is, in order: one
  already in memory; the newest model of the same alias and hyperparameters in the registry
  (``models/``) that was fitted on the series (one fitted by ``prism forecast --all --save``
  serves all its series; ``prism refit`` saves one per chunk of series); or a new one, fitted
  on demand on the series alone and saved to the registry, so a restart reuses it (a model
  of a request's ad-hoc hyperparameters is saved only when the request asks: it serves from
  memory otherwise).
  ``model`` is an alias plus hyperparameters; its key reads ``prism`` for the defaults, or
  ``prism[use_rnn=false]``.
- **Data watermark** (:mod:`prism.hub.catalogue`). Each series' watermark is its last
  timestamp and a checksum of all its values (:meth:`Store.series_watermarks`): it changes
  when a point is added or revised, and only then. A model serves a series only when it has
  absorbed the data up to the series' current watermark (``update``, without refitting).
- **Cache** (:mod:`prism.hub.cache`, the one forecast cache). Forecasts are cached in DuckDB
  (``forecast_cache``), keyed by series, model, model version (``<model id>.v<version>``),
  data watermark, horizon steps and quantiles, with an LRU of recent answers (and their API
  rendering) in memory in front of it. A request that hits either does no model work.
  Answers are written to DuckDB behind the request, by one writer thread.
- **Ingest.** :meth:`ForecastHub.ingest` runs the CLI's ingestion (same adapters, one
  transaction) under the one write lock; afterwards the cached forecasts of every series whose
  watermark changed are dropped, their last served forecasts are scored against the points
  that arrived (:mod:`prism.hub.scoring`: rolling forecast error, in ``forecast_errors``), and
  the models serving them are updated in the background.
- **Background work** (:mod:`prism.hub.jobs`). Fits, loads, updates and refits run on a
  bounded thread pool (``fit_workers`` jobs at once, at most ``fit_queue`` waiting), never on
  a request thread. A request that needs one waits at most ``fit_budget_s`` and then gets
  :class:`~prism.errors.ModelNotReady` (HTTP 503 with ``Retry-After``, from an estimate of the
  job's remaining time). A fit still running then moves to an overtime lane of as many slots,
  so that it holds up no other series' fit. Each fit runs in a child process
  (:mod:`prism.hub.fitting`) and is killed past ``fit_timeout_s`` per series (the series then
  answers 422 for a while); closing the hub kills running fits. A refit schedule
  (``refit_every``) refits models whose parameters are older than that.
- **Metrics** (:mod:`prism.hub.metrics`): cache answers, job times, data freshness and the
  rolling forecast error, for ``/metrics``.

Concurrency: reads run on their own cursors (DuckDB's MVCC gives each a consistent snapshot);
every write (ingest, cache rows, errors) takes one lock, so concurrent ingests are serialised
instead of conflicting, and no lock is held while waiting for another.
"""

from prism.hub.core import MAX_HORIZON_STEPS, ForecastHub
from prism.hub.types import IngestOutcome, ModelSpec, SeriesState, ServedForecast

__all__ = ["MAX_HORIZON_STEPS", "ForecastHub", "IngestOutcome", "ModelSpec", "SeriesState",
           "ServedForecast"]
