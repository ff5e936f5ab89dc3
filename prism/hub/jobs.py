"""The models the hub serves, and the background jobs that make them ready.

The model of ``(series, spec)`` is, in order: one already in memory; the newest registry model
of the same alias and hyperparameters fitted on the series; or a new one, fitted on the series
alone and saved to the registry. It serves the series only once it has absorbed the series'
current data (an ``update``; a refit when the data changed before its end).

Fits, loads, updates (``sync``) and refits run on a bounded thread pool, never on a request
thread. A request waits until its deadline and then gets :class:`ModelNotReady`, with an
estimate of the job's remaining time from past job times.

**Budgets.** The model work of a fit or refit runs in a child process
(:mod:`prism.hub.fitting`) that is killed past ``fit_timeout_s`` per series; the series then
answers 422 for a while (``_FAILED_FOR_S``) instead of starting the same fit again. Jobs run
in two lanes of ``workers`` slots each: a job starts in the first; a fit still running when
requests stop waiting for it (``overtime_after_s``, the request budget) moves to the second,
so that one slow or runaway fit cannot keep another series' fit waiting. Closing kills the
running fits and waits a few seconds at most.

**Saving.** A fit is saved to the registry unless its job is asked not to (the API does not
save models of ad-hoc hyperparameters unless the request says ``save``); an unsaved model
serves from memory and is saved when a later request asks for it with ``save``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prism import registry
from prism.errors import ConfigError, DataContractError, ModelNotReady, PrismError
from prism.forecasters import get_forecaster
from prism.forecasters.base import BaseForecaster, clone
from prism.forecasters.sync import store_sync
from prism.hub.catalogue import Catalogue
from prism.hub.fitting import FitProcesses, FitTimedOut
from prism.hub.metrics import HubMetrics
from prism.hub.types import LoadedModel, ModelSpec, spec_key
from prism.schema import SERIES_ID, TS, VALUE
from prism.store import Store

logger = logging.getLogger(__name__)

#: What a job is expected to take before any was timed (seconds), for ``Retry-After``.
_FIRST_GUESS = {"fit": 5.0, "load": 2.0, "sync": 1.0, "refit": 5.0, "save": 1.0}
#: How long a series answers 422 after a fit of it ran past its budget (seconds).
_FAILED_FOR_S = 600.0
#: How long closing waits for the jobs that run in threads (loads, updates).
_CLOSE_GRACE_S = 3.0
#: The warm-up's fit in a child process (the fork server's imports included).
_WARM_UP_BUDGET_S = 120.0

JobKey = tuple[str, ...]


class _Slot:
    """A running job's place in the two lanes (see the module docstring)."""

    def __init__(self, first: threading.Semaphore, overtime: threading.Semaphore) -> None:
        self._first = first
        self._overtime = overtime
        self._lock = threading.Lock()
        self.in_overtime = False

    def promote(self) -> bool:
        """Move to the overtime lane when it has room (freeing a slot of the first lane);
        whether the job is now there."""
        with self._lock:
            if not self.in_overtime and self._overtime.acquire(blocking=False):
                self.in_overtime = True
                self._first.release()
            return self.in_overtime

    def release(self) -> None:
        with self._lock:
            (self._overtime if self.in_overtime else self._first).release()


class ModelJobs:
    """Models in memory, the registry index, and the pool that fits, loads and updates them.

    Args:
        store: the open store (read on cursors of its own).
        models_dir: the model registry.
        catalogue: the series and their current watermarks.
        metrics: where job times and refused jobs are recorded.
        stop: set when the hub closes (no new job; the refit schedule ends).
        workers: jobs that run at once in each lane (module docstring).
        queue_limit: the most jobs waiting at once.
        refit_s: refit models whose parameters are older than this (``None``: never).
        max_models: models kept in memory (least recently used leaves first).
        fit_timeout_s: a fit's time budget per series; past it the fit is killed.
        overtime_after_s: when a running fit moves to the overtime lane.
    """

    def __init__(self, store: Store, *, models_dir: Path, catalogue: Catalogue,
                 metrics: HubMetrics, stop: threading.Event, workers: int, queue_limit: int,
                 refit_s: float | None, max_models: int = 512, fit_timeout_s: float = 60.0,
                 overtime_after_s: float = 2.0) -> None:
        self._store = store
        self._models_dir = models_dir
        self._catalogue = catalogue
        self._metrics = metrics
        self._stop = stop
        self._queue_limit = int(queue_limit)
        self.refit_s = refit_s
        self._fit_timeout_s = float(fit_timeout_s)
        self._overtime_after_s = float(overtime_after_s)
        # a thread per slot of both lanes; a job waits for a slot of the first
        self._executor = ThreadPoolExecutor(max_workers=2 * workers,
                                            thread_name_prefix="prism-fit")
        self._first_lane = threading.Semaphore(workers)
        self._overtime_lane = threading.Semaphore(workers)
        self._local = threading.local()  # the slot of the job a pool thread runs
        self._fits = FitProcesses()
        #: Set once the warm-up has run (or failed): the hub is ready from then on.
        self.warm = threading.Event()
        self._failed: dict[tuple[str, str], tuple[float, str]] = {}  # timed-out fits
        self._lock = threading.Lock()  # guards the dicts below; never held while waiting
        self._models: dict[str, LoadedModel] = {}
        self._routes: dict[tuple[str, str], str] = {}  # (series, model key) -> model id
        self._index: dict[tuple[str, str], registry.ModelRecord] = {}  # registry, not loaded
        self._jobs: dict[JobKey, Future[None]] = {}
        self._job_started: dict[JobKey, float] = {}
        self._durations: dict[tuple[str, str], float] = {}  # (kind, alias) -> EMA seconds
        # models in memory, least recently used first: past ``max_models`` the oldest leaves
        # memory (its registry copy reloads it on the next request)
        self._max_models = max(1, int(max_models))
        self._used: OrderedDict[str, None] = OrderedDict()

    # -- life cycle ----------------------------------------------------------------------------
    def index_registry(self) -> None:
        """Read which registry model serves which ``(series, model key)`` (newest wins)."""
        index: dict[tuple[str, str], registry.ModelRecord] = {}
        for record in registry.list_models(self._models_dir):  # newest first
            try:
                key = spec_key(record.alias, record.params)
            except ConfigError:
                continue  # an alias this PRISM does not know
            for sid in record.series_ids:
                index.setdefault((sid, key), record)
        with self._lock:
            self._index = index

    def warm_up(self, alias: str) -> None:
        """Fit ``alias`` once on a small synthetic series, off the request path.

        The first fit in a process imports torch, scikit-learn and scipy and sets torch up
        (about 2 s here); without this the first request for a series without a saved model
        would pay that on top of its fit and exceed the fit budget. The fork server of the
        fits' child processes starts here too.
        """
        started = time.perf_counter()
        try:
            self._fits.start()
        except Exception as exc:  # the first fit will start it
            logger.warning("could not start the fit processes' server (%s: %s)",
                           type(exc).__name__, exc)
        try:
            steps = 144 * 4
            t = np.arange(steps)
            panel = pd.DataFrame({
                SERIES_ID: "warm-up/all/gpus_in_use",
                TS: pd.date_range("2026-01-05", periods=steps, freq="10min"),
                VALUE: 40.0 + 20.0 * np.sin(2 * np.pi * t / 144) + (t % 37 == 0) * 10.0,
            })
            get_forecaster(alias).fit(panel).predict(6, (0.5, 0.9))
            # once in a child too: the fork server's imports end before its first child
            # starts, and the first request's fit must not wait for them
            self._fits.fit(get_forecaster(alias), panel, budget_s=_WARM_UP_BUDGET_S,
                           what=f"the warm-up of {alias}")
        except Exception as exc:  # a warm-up must never take the hub down
            if self._stop.is_set():  # the server stopped before it was done: nothing wrong
                logger.info("warm-up of %s stopped with the server", alias)
            else:
                logger.warning("warm-up fit of %s failed (%s: %s); the first fit will be "
                               "slower", alias, type(exc).__name__, exc)
            return
        finally:
            self.warm.set()
        logger.info("warmed up %s in %.1f s", alias, time.perf_counter() - started)

    def refit_schedule(self) -> None:
        """Refit the models older than ``refit_s`` until the hub stops (a thread's target)."""
        assert self.refit_s is not None
        tick = min(60.0, self.refit_s / 4)
        while not self._stop.wait(tick):
            with self._lock:
                due = [m.model_id for m in self._models.values()
                       if time.time() - m.fitted_at >= self.refit_s]
            for model_id in due:
                try:
                    self._submit(("refit", model_id), self._refit_job, model_id)
                except ModelNotReady:
                    break

    def shutdown(self) -> None:
        """Drop the waiting jobs, kill the running fits, and wait at most a few seconds for
        the jobs that run in threads (loads, updates)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._fits.close()
        with self._lock:
            running = [f for f in self._jobs.values() if not f.done()]
        concurrent.futures.wait(running, timeout=_CLOSE_GRACE_S)

    def counts(self) -> dict[str, int]:
        """``models_loaded``, ``models_in_registry`` and ``jobs`` (waiting or running)."""
        with self._lock:
            return {"models_loaded": len(self._models),
                    "models_in_registry": len({r.model_id for r in self._index.values()}),
                    "jobs": sum(not f.done() for f in self._jobs.values())}

    # -- what requests ask -----------------------------------------------------------------------
    def ready(self, series_id: str, spec: ModelSpec) -> LoadedModel | None:
        """The model of ``(series, spec)`` if it has absorbed the series' current data."""
        state = self._catalogue.get(series_id) or self._catalogue.state(series_id)
        with self._lock:
            model_id = self._routes.get((series_id, spec.key))
            loaded = self._models.get(model_id) if model_id else None
            if loaded is not None:
                self._touch(loaded.model_id)
        if loaded is not None and loaded.synced.get(series_id) == state.watermark:
            return loaded
        return None

    def wait_ready(self, series_id: str, spec: ModelSpec, deadline: float, *,
                   save: bool = True) -> LoadedModel:
        """The model of ``(series, spec)`` with the series' current data absorbed, waiting
        for its job until ``deadline`` (``time.monotonic()``).

        Args:
            series_id: the series.
            spec: the model.
            deadline: when to give up waiting.
            save: save a model fitted now (or fitted unsaved before) to the registry.

        Raises:
            ModelNotReady: when the job is not done by the deadline, or the queue is full.
            DataContractError / ConfigError: when the series cannot be fitted (a
                :class:`~prism.hub.fitting.FitTimedOut` when its fit ran past its budget, for
                a while after).
        """
        while True:
            loaded = self.ready(series_id, spec)
            if loaded is not None and (loaded.saved or not save):
                return loaded
            self._check_failed(series_id, spec)
            key, future = self.job_for(series_id, spec, save=save)
            remaining = deadline - time.monotonic()
            try:
                future.result(timeout=max(0.0, remaining))
                if key[0] == "save":  # served even when it could not be saved
                    loaded = self.ready(series_id, spec)
                    if loaded is not None:
                        return loaded
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
                loaded = self.ready(series_id, spec)
                if loaded is not None:
                    return loaded
                raise ModelNotReady(f"model {spec.key} for {series_id!r} is catching up with "
                                    "new data", retry_after=self._eta(key, spec))

    def job_for(self, series_id: str, spec: ModelSpec, *, save: bool = True
                ) -> tuple[JobKey, Future[None]]:
        """Start (or join) the job that makes the model of ``(series, spec)`` ready (and
        saved, with ``save``).

        Raises:
            ModelNotReady: when the queue is full or the hub is closing.
        """
        with self._lock:
            model_id = self._routes.get((series_id, spec.key))
            record = self._index.get((series_id, spec.key))
            loaded = self._models.get(model_id) if model_id else None
        if model_id is not None:
            if save and loaded is not None and not loaded.saved:
                key: JobKey = ("save", model_id)
                return key, self._submit(key, self._save_job, model_id)
            key = ("sync", model_id)
            return key, self._submit(key, self._sync_job, model_id)
        if record is not None:
            key = ("load", record.model_id)
            return key, self._submit(key, self._load_job, record, spec)
        key = ("fit", series_id, spec.key)
        return key, self._submit(key, self._fit_job, series_id, spec, save)

    def refit_series(self, series_ids: Sequence[str], spec: ModelSpec) -> tuple[int, int]:
        """Queue the refit of the models of ``spec`` that serve ``series_ids`` (on their data
        now), and a fit of each of those series that has no such model yet.

        Returns:
            ``(refits, fits)`` queued (a refit covers every series its model serves).

        Raises:
            ConfigError: when the jobs would not fit in the queue even empty (name fewer
                series); nothing is queued then.
            ModelNotReady: when the queue has no room for them now (nothing is queued then;
                retry later) or the hub is closing.
        """
        wanted = set(series_ids)
        with self._lock:
            due = sorted({m for (sid, key), m in self._routes.items()
                          if sid in wanted and key == spec.key})
            covered = {sid for (sid, key) in self._routes if sid in wanted and key == spec.key}
            missing = [sid for sid in series_ids if sid not in covered]
            keys = [("refit", m) for m in due] + [("fit", sid, spec.key) for sid in missing]
            new = sum(key not in self._jobs or self._jobs[key].done() for key in keys)
            waiting = sum(not f.done() and k not in self._job_started
                          for k, f in self._jobs.items())
        if new > self._queue_limit:  # all or nothing: a retry would queue part of it again
            raise ConfigError(
                f"refitting these {len(series_ids):,} series takes {new:,} model jobs and the "
                f"queue holds {self._queue_limit:,}: ask for at most {self._queue_limit:,} "
                "series per request, or refit them all offline with `prism refit --all` (the "
                "batch engine) while the server is stopped")
        if waiting + new > self._queue_limit:
            self._metrics.job_rejected()
            raise ModelNotReady(f"{waiting} model jobs are waiting and these need {new} more "
                                f"(the queue holds {self._queue_limit}); retry later",
                                retry_after=_FIRST_GUESS["fit"])
        for model_id in due:
            self._submit(("refit", model_id), self._refit_job, model_id)
        for sid in missing:
            key = ("fit", sid, spec.key)
            self._submit(key, self._fit_job, sid, spec, True)
        return len(due), len(missing)

    def sync_series(self, series_ids: Sequence[str]) -> None:
        """Start updating the models that serve these series (after an ingest changed them);
        with the queue full, the next request for one schedules it."""
        wanted = set(series_ids)
        with self._lock:
            model_ids = sorted({mid for (sid, _), mid in self._routes.items() if sid in wanted})
        for model_id in model_ids:
            try:
                self._submit(("sync", model_id), self._sync_job, model_id)
            except ModelNotReady:
                pass

    # -- the pool ------------------------------------------------------------------------------
    def _submit(self, key: JobKey, fn: Callable[..., None], *args: Any) -> Future[None]:
        with self._lock:
            existing = self._jobs.get(key)
            if existing is not None and not existing.done():
                return existing
            waiting = sum(not f.done() and k not in self._job_started
                          for k, f in self._jobs.items())
            if waiting >= self._queue_limit:
                self._metrics.job_rejected()
                raise ModelNotReady(f"{waiting} model jobs are waiting; retry later",
                                    retry_after=_FIRST_GUESS["fit"])
            if self._stop.is_set():
                raise ModelNotReady("the server is shutting down", retry_after=5)

            def run() -> None:
                slot = self._take_slot()
                with self._lock:
                    self._job_started[key] = time.monotonic()
                self._local.slot = slot
                try:
                    fn(*args)
                finally:
                    self._local.slot = None
                    slot.release()
                    with self._lock:
                        self._job_started.pop(key, None)

            try:
                future: Future[None] = self._executor.submit(run)
            except RuntimeError:  # the pool closed since the check above
                raise ModelNotReady("the server is shutting down", retry_after=5) from None
            self._jobs[key] = future

        def forget(done: Future[None]) -> None:
            with self._lock:
                if self._jobs.get(key) is done:
                    del self._jobs[key]
            if not done.cancelled() and done.exception() is not None:
                logger.warning("job %s failed: %s", key, done.exception())

        future.add_done_callback(forget)
        return future

    def _take_slot(self) -> _Slot:
        """Wait for a slot of the first lane (a job's thread, before it runs).

        Raises:
            ModelNotReady: when the hub closes meanwhile.
        """
        while not self._first_lane.acquire(timeout=0.5):
            if self._stop.is_set():
                raise ModelNotReady("the server is shutting down", retry_after=5)
        slot = _Slot(self._first_lane, self._overtime_lane)
        if self._stop.is_set():
            slot.release()
            raise ModelNotReady("the server is shutting down", retry_after=5)
        return slot

    def _fit(self, forecaster: BaseForecaster, panel: pd.DataFrame, what: str,
             n_series: int) -> BaseForecaster:
        """``forecaster.fit(panel)`` in a child process, under ``fit_timeout_s`` per series;
        past the request budget the job moves to the overtime lane."""
        slot: _Slot | None = getattr(self._local, "slot", None)
        return self._fits.fit(forecaster, panel, what=what,
                              budget_s=self._fit_timeout_s * max(1, n_series),
                              overtime_after_s=self._overtime_after_s,
                              overtime=slot.promote if slot is not None else None)

    def _check_failed(self, series_id: str, spec: ModelSpec) -> None:
        """Raise again, for a while, the error of a fit of ``(series, spec)`` that ran past
        its budget, instead of starting it again."""
        with self._lock:
            failed = self._failed.get((series_id, spec.key))
            if failed is not None and failed[0] <= time.monotonic():
                del self._failed[(series_id, spec.key)]
                failed = None
        if failed is not None:
            raise FitTimedOut(failed[1])

    def _note_failed(self, series_ids: Sequence[str], key: str, exc: FitTimedOut) -> None:
        until = time.monotonic() + _FAILED_FOR_S
        with self._lock:
            for sid in series_ids:
                self._failed[(sid, key)] = (until, str(exc))

    def _eta(self, key: JobKey, spec: ModelSpec) -> float:
        """Seconds until the job ``key`` is likely done."""
        with self._lock:
            expected = self._durations.get((key[0], spec.alias), _FIRST_GUESS[key[0]])
            started = self._job_started.get(key)
            ahead = sum(not f.done() and k not in self._job_started
                        for k, f in self._jobs.items() if k != key)
        elapsed = time.monotonic() - started if started is not None else 0.0
        return max(1.0, expected - elapsed) + ahead * expected

    def _timed(self, kind: str, alias: str, seconds: float) -> None:
        self._metrics.job_timed(alias, kind, seconds)
        with self._lock:
            old = self._durations.get((kind, alias))
            self._durations[(kind, alias)] = seconds if old is None else 0.7 * old + 0.3 * seconds

    # -- the jobs ------------------------------------------------------------------------------
    def _publish(self, loaded: LoadedModel, *, replaces: str | None = None) -> None:
        with self._lock:
            self._models[loaded.model_id] = loaded
            for sid in loaded.forecaster.series_ids_:
                route = (sid, loaded.spec.key)
                if replaces is None or self._routes.get(route) in (None, replaces):
                    self._routes[route] = loaded.model_id
            if replaces is not None and replaces != loaded.model_id:
                self._models.pop(replaces, None)
                self._used.pop(replaces, None)
            self._touch(loaded.model_id)
            while len(self._models) > self._max_models:
                oldest = next(iter(self._used))
                self._used.pop(oldest)
                if self._models.pop(oldest, None) is not None:
                    self._routes = {r: m for r, m in self._routes.items() if m != oldest}
                    logger.info("model %s left memory (more than %d loaded); it reloads "
                                "from the registry when asked", oldest, self._max_models)

    def _touch(self, model_id: str) -> None:
        """Mark a model as just used (call with the lock held)."""
        self._used[model_id] = None
        self._used.move_to_end(model_id)

    def _save(self, forecaster: BaseForecaster, save: bool = True) -> tuple[str, bool]:
        """``(model id, saved)``: the registry id of the model saved now, or an id of its own
        for a model not saved (``save`` false, or the registry cannot be written)."""
        unsaved = f"{forecaster.alias}-unsaved-{secrets.token_hex(4)}"
        if not save:
            return unsaved, False
        try:
            record = registry.save_model(forecaster, self._models_dir)
        except (ConfigError, OSError) as exc:  # serve it anyway; a restart will refit
            logger.warning("could not save %s to the registry: %s", forecaster.alias, exc)
            return unsaved, False
        key = spec_key(record.alias, record.params)
        with self._lock:  # a model that leaves memory reloads from here
            for sid in record.series_ids:
                self._index[(sid, key)] = record
        return record.model_id, True

    def _fit_job(self, series_id: str, spec: ModelSpec, save: bool) -> None:
        state = self._catalogue.state(series_id)  # the watermark before the data is read
        with self._store.cursor() as cur:
            panel = cur.load_panel([series_id])
        clock = time.perf_counter()
        try:
            forecaster = self._fit(get_forecaster(spec.alias, **dict(spec.params)), panel,
                                   f"{spec.key} for {series_id!r}", 1)
        except FitTimedOut as exc:
            self._note_failed([series_id], spec.key, exc)
            raise
        self._timed("fit", spec.alias, time.perf_counter() - clock)
        model_id, saved = self._save(forecaster, save)
        logger.info("fitted %s for %s as %s", spec.key, series_id, model_id)
        self._publish(LoadedModel(model_id, spec, forecaster, time.time(),
                                  {series_id: state.watermark}, saved))

    def _save_job(self, model_id: str) -> None:
        """Save a model fitted unsaved (a request asked for it with ``save``)."""
        with self._lock:
            loaded = self._models.get(model_id)
        if loaded is None or loaded.saved:
            return
        new_id, saved = self._save(loaded.forecaster)
        if saved:
            logger.info("saved %s as %s", model_id, new_id)
            self._publish(replace(loaded, model_id=new_id, saved=True), replaces=model_id)

    def _load_job(self, record: registry.ModelRecord, spec: ModelSpec) -> None:
        clock = time.perf_counter()
        forecaster, record = registry.load_model(self._models_dir, record.model_id)
        fitted_at = datetime.fromisoformat(record.created).timestamp()
        loaded = LoadedModel(record.model_id, spec, forecaster, fitted_at, {})
        self._timed("load", spec.alias, time.perf_counter() - clock)
        self._sync(loaded)

    def _sync_job(self, model_id: str) -> None:
        with self._lock:
            loaded = self._models.get(model_id)
        if loaded is not None:
            self._sync(loaded)

    def _sync(self, loaded: LoadedModel) -> None:
        """Bring a model up to the stored data: update it, or refit it where it was fitted on
        other data (:mod:`prism.forecasters.sync`)."""
        catalogue = self._catalogue.snapshot()  # watermarks before the data is read
        forecaster = loaded.forecaster
        sids = [s for s in forecaster.series_ids_ if s in catalogue]
        stale = [s for s in sids if loaded.synced.get(s) != catalogue[s].watermark]
        if not stale:
            if loaded.model_id not in self._models:
                self._publish(loaded)
            return
        with self._store.cursor() as cur:
            panel = cur.load_panel(stale)
        sync = store_sync(forecaster, panel, {s: catalogue[s].freq_s for s in stale})
        if sync.refit is not None:
            logger.info("%s: %s; refitting", loaded.model_id, sync.refit)
            self._refit(loaded)
            return
        updated = forecaster
        if not sync.points.empty:
            clock = time.perf_counter()
            updated = forecaster.copy()
            try:
                updated.update(sync.points)
            except DataContractError as exc:
                logger.info("cannot update %s (%s); refitting", loaded.model_id, exc)
                self._refit(loaded)
                return
            self._timed("update", loaded.spec.alias, time.perf_counter() - clock)
        synced = {**loaded.synced, **{s: catalogue[s].watermark for s in stale}}
        self._publish(replace(loaded, forecaster=updated, synced=synced))

    def _refit(self, loaded: LoadedModel) -> None:
        catalogue = self._catalogue.snapshot()
        sids = [s for s in loaded.forecaster.series_ids_ if s in catalogue]
        if not sids:
            with self._lock:
                self._models.pop(loaded.model_id, None)
            return
        with self._store.cursor() as cur:
            panel = cur.load_panel(sids)
        clock = time.perf_counter()
        try:
            forecaster = self._fit(clone(loaded.forecaster), panel,
                                   f"{loaded.spec.key} ({loaded.model_id})", len(sids))
        except FitTimedOut as exc:
            self._note_failed(sids, loaded.spec.key, exc)
            raise
        self._timed("refit", loaded.spec.alias, time.perf_counter() - clock)
        model_id, saved = self._save(forecaster, loaded.saved)
        logger.info("refitted %s as %s", loaded.model_id, model_id)
        self._publish(LoadedModel(model_id, loaded.spec, forecaster, time.time(),
                                  {s: catalogue[s].watermark for s in sids}, saved),
                      replaces=loaded.model_id)

    def _refit_job(self, model_id: str) -> None:
        with self._lock:
            loaded = self._models.get(model_id)
        if loaded is not None:
            self._refit(loaded)
