"""Batch forecasts and backtests over thousands of series, on local processes or a Ray cluster.

:func:`run_batch` fans the work of a run out over workers, a chunk of series per task, and
streams each finished chunk into the store (``batch_forecasts`` and ``batch_series``, keyed by
the run id; the run itself is a row of ``batch_runs``), so the memory of the calling process
stays flat however many series there are: it holds one block of input series read from DuckDB
and the chunks in flight, never the whole panel nor all the forecasts. :func:`export_run`
writes a run to a file afterwards, block by block, in a fixed order.

**Global models** (``global_model``: ``prism``, ``gru``, ``lstm``, ``gbm``) learn their shared
parts once, in the calling process, from all series or a stratified sample of them
(:func:`stratified_sample`: at most ``global_sample`` series, spread over the
``cluster/metric`` strata in proportion to their sizes) with
:meth:`~prism.forecasters.base.BaseForecaster.fit_shared`; every worker gets that fitted model
once (pickled: the RNN's weights travel as numpy arrays) and fits each series against it with
:meth:`~prism.forecasters.base.BaseForecaster.fit_local` (the hybrid's periods and sinusoids,
and the conformal calibration of every model). When the sample is all the series, a batch
forecasts exactly what ``model.fit(panel).predict(...)`` does. Other models are fitted on each
series in the workers. A backtest learns the shared parts once per window, on the sample cut
at each series' cutoff, so nothing after a cutoff reaches a forecast from it.

**Backends.** ``local`` runs ``workers`` processes (spawned, so a worker starts clean whatever
the caller has loaded); ``ray`` runs the same chunk function as Ray tasks, on the cluster at
``ray_address`` or on a local one (Ray is the optional extra ``distributed``; it is imported
only by this backend). Each worker uses one core, as Ray gives its tasks: local workers start
with ``OMP_NUM_THREADS=1`` (and the BLAS equivalents), and every chunk runs under a
threadpoolctl limit of one thread. A series' result depends only on the shared model, its own
data and the settings, never on the worker that computed it: the same seeds give identical
results with 1 or N local workers and on Ray.

**Time budget and fallback.** A series whose work raises, or exceeds ``budget_s`` seconds, is
forecast by the seasonal naive fallback (the naive one when it is shorter than a season), its
reason logged and kept in ``batch_series.fallback_reason``; the batch goes on. The budget is
enforced twice: inside the worker a ``SIGALRM`` timer interrupts the series' Python code at
the budget (cheap, and the worker carries on with the next series); and the calling process
gives each chunk ``budget_s`` per series plus ``hard_grace_s``, after which it abandons the
task (kills the local worker process, or cancels the Ray task with ``force=True``), reruns the
chunk's series one per task, and falls back for the one that is stuck (code that holds the
interpreter in C for longer than the budget, which the timer cannot interrupt). A worker
that dies is handled the same way. Near the budget, whether a series falls back can depend on
the machine's load: a budget is a guard against runaway series, not part of the model.

**Tasks.** ``forecast``: fit on each series' whole history, forecast ``horizon``.
``backtest``: the rolling-origin backtest of :mod:`prism.evaluation.backtest` (cutoffs as
statsforecast's ``cross_validation`` places them, a refit at every cutoff), series too short
for it skipped with the reason. ``refit``: fit on each series' whole history and save the
models, forecasting nothing. Every batch forecast refits its models from the stored data.

**Saving the models** (``refit``, or ``forecast`` with ``models_dir``). The workers never write
to the registry (a Ray worker may run on another machine): each returns its fitted models
with its chunk's results, and the calling process saves them, one registry model per chunk
(a :class:`~prism.registry.SeriesModels` holding the chunk's per-series models, under the
run's alias and hyperparameters), as the chunk finishes. ``prism serve`` and ``prism forecast
--from-model ALIAS`` then find the newest model of each series without refitting, and its
forecasts are bit for bit those the batch computed. Only series whose fit succeeded are saved:
a series that fell back (it raised or overran its budget) keeps its reason in
``batch_series`` and is not saved, not even its seasonal naive fallback (a saved model stands
for the run's model; serving fits one on demand for a series without). In a ``refit`` such a
series is ``failed``, as nothing was forecast for it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import pickle
import signal
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from prism.errors import ConfigError, DataContractError, PrismError
from prism.evaluation.backtest import CUTOFF, MIN_TRAIN, cutoff_positions
from prism.forecasters.base import (
    BaseForecaster,
    FloatArray,
    check_quantiles,
    clone,
    horizon_steps,
    quantile_column,
)
from prism.forecasters.baselines import NaiveForecaster, SeasonalNaiveForecaster
from prism.registry import SeriesModels, save_model
from prism.schema import SERIES_ID, TS, VALUE, panel_freq

if TYPE_CHECKING:
    from prism.store import Store

logger = logging.getLogger(__name__)

TASKS = ("forecast", "backtest", "refit")
BACKENDS = ("local", "ray")
#: At most this many series teach a global model its shared parts.
DEFAULT_GLOBAL_SAMPLE = 256
#: Series per task: large enough to amortise a task's overhead, small enough to balance.
DEFAULT_CHUNK_SIZE = 16
#: Seconds a chunk may overrun its budget before its worker is abandoned.
DEFAULT_HARD_GRACE_S = 30.0
#: Series read from DuckDB at a time.
_READ_BLOCK = 256
#: Fewest training points at a backtest's earliest cutoff (as in prism.evaluation.backtest).

Progress = Callable[[int, int], None]
IntArray = npt.NDArray[np.int64]


# -- what travels to the workers ----------------------------------------------------------------
@dataclass(frozen=True)
class _Series:
    """One series as arrays: timestamps (ns since the epoch) and values."""

    series_id: str
    ts: IntArray
    values: FloatArray

    def panel(self, stop: int | None = None) -> pd.DataFrame:
        """The panel of the first ``stop`` points (all by default)."""
        n = len(self.values) if stop is None else stop
        return pd.DataFrame({SERIES_ID: self.series_id,
                             TS: self.ts[:n].astype("datetime64[ns]"),
                             VALUE: self.values[:n]})


@dataclass(frozen=True)
class _Job:
    """What every worker needs for a run; shipped once per worker.

    Attributes:
        task: ``forecast``, ``backtest`` or ``refit``.
        model: the unfitted forecaster (fitted per series when ``shared`` is empty).
        shared: a global model's shared parts, fitted: one for a forecast, one per window
            for a backtest.
        horizon, quantiles, windows, step: the run's settings.
        budget_s: the per-series time budget (``None``: none).
        fallback_season: the season of the seasonal naive fallback.
        keep_models: return each series' fitted model with its outcome (to be saved).
    """

    task: str
    model: BaseForecaster
    shared: tuple[BaseForecaster, ...]
    horizon: int | str
    quantiles: tuple[float, ...]
    windows: int
    step: int | str | None
    budget_s: float | None
    fallback_season: str
    keep_models: bool = False


@dataclass(frozen=True)
class _Outcome:
    """What became of one series (``model``: its fitted model, when the job keeps them; the
    models of a chunk travel back in one pickle, so a global model's shared parts once)."""

    series_id: str
    status: str  # ok | fallback | skipped | failed
    reason: str | None
    seconds: float
    frame: pd.DataFrame | None
    model: BaseForecaster | None = None


@dataclass(frozen=True)
class _Crash:
    """A task that returned nothing: its worker died or the task failed as a whole."""

    reason: str


class _BudgetExceeded(BaseException):  # noqa: N818 - a signal, like KeyboardInterrupt
    """Raised by the SIGALRM timer; a BaseException so that ``except Exception`` in model
    code cannot swallow it."""


class _Skip(Exception):  # noqa: N818
    """A series the task does not apply to (too short for the backtest)."""


# -- the work of one series (runs in the workers) -----------------------------------------------
def run_chunk(job: _Job, items: Sequence[_Series]) -> list[_Outcome]:
    """Forecast (or backtest) each series of a chunk; the unit of work of every backend.

    Each series gets its own time budget and falls back on failure, so this never raises
    for a series' sake.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return [_run_series(job, item) for item in items]


def _run_series(job: _Job, item: _Series) -> _Outcome:
    started = time.perf_counter()
    reason: str | None
    try:
        with _alarm(job.budget_s):
            frame, fitted = _work(job, item, job.model, job.shared)
        return _Outcome(item.series_id, "ok", None, time.perf_counter() - started, frame,
                        fitted if job.keep_models else None)
    except _Skip as exc:
        return _Outcome(item.series_id, "skipped", str(exc), time.perf_counter() - started, None)
    except _BudgetExceeded:
        reason = f"exceeded its time budget of {job.budget_s:g} s"
    except Exception as exc:  # any failure of a model on one series must not stop the batch
        reason = f"{job.model.alias} failed: {type(exc).__name__}: {exc}"
    return _fallback(job, item, reason, started)


def _fallback(job: _Job, item: _Series, reason: str, started: float) -> _Outcome:
    """The seasonal naive fallback's result for a series, with the reason (a refit forecasts
    nothing: the series is ``failed`` and not saved)."""
    if job.task == "refit":
        return _Outcome(item.series_id, "failed", f"{reason}; not saved",
                        time.perf_counter() - started, None)
    fallback: BaseForecaster = SeasonalNaiveForecaster(season=job.fallback_season)
    try:
        try:
            frame, _ = _work(job, item, fallback, ())
        except DataContractError:  # shorter than a season
            fallback = NaiveForecaster()
            frame, _ = _work(job, item, fallback, ())
    except _Skip as exc:
        return _Outcome(item.series_id, "skipped", str(exc), time.perf_counter() - started, None)
    except Exception as exc:
        return _Outcome(item.series_id, "failed",
                        f"{reason}; the fallback failed too: {type(exc).__name__}: {exc}",
                        time.perf_counter() - started, None)
    assert frame is not None  # a forecast or a backtest
    frame["model"] = job.model.alias  # the run's model, as the forecasters' own fallback does
    return _Outcome(item.series_id, "fallback", f"{reason}; forecast by {fallback.alias}",
                    time.perf_counter() - started, frame)


def _fitted(model: BaseForecaster, shared: tuple[BaseForecaster, ...], window: int,
            panel: pd.DataFrame) -> BaseForecaster:
    if shared:
        return shared[window].fit_local(panel)
    return clone(model).fit(panel)


def _work(job: _Job, item: _Series, model: BaseForecaster, shared: tuple[BaseForecaster, ...]
          ) -> tuple[pd.DataFrame | None, BaseForecaster | None]:
    """A series' rows (none for a refit) and its fitted model (none for a backtest)."""
    if job.task in ("forecast", "refit"):
        fitted = _fitted(model, shared, 0, item.panel())
        if job.task == "refit":
            return None, fitted
        return fitted.predict(job.horizon, job.quantiles), fitted
    n = len(item.values)
    if n < 2:
        raise DataContractError(f"series {item.series_id!r} has fewer than two points")
    freq_s = int((item.ts[1] - item.ts[0]) // 1_000_000_000)
    cuts = backtest_positions(n, freq_s, horizon=job.horizon, windows=job.windows,
                              step=job.step)
    if cuts is None:
        h, s = _horizon_and_step(freq_s, job.horizon, job.step)
        raise _Skip(f"series {item.series_id!r} has {n} points but a backtest of "
                    f"{job.windows} window(s) of {h} step(s), {s} step(s) apart, needs at "
                    f"least {h + (job.windows - 1) * s + MIN_TRAIN}")
    h, _ = _horizon_and_step(freq_s, job.horizon, job.step)
    frames = []
    for w, cut in enumerate(cuts):
        fc = _fitted(model, shared, w, item.panel(cut + 1)).predict(h, job.quantiles)
        fc.insert(2, CUTOFF, item.ts[cut].astype("datetime64[ns]"))
        fc[VALUE] = item.values[cut + 1:cut + 1 + h]
        frames.append(fc)
    return pd.concat(frames, ignore_index=True), None


def _horizon_and_step(freq_s: int, horizon: int | str, step: int | str | None) -> tuple[int, int]:
    h = horizon_steps(horizon, freq_s)
    return h, h if step is None else horizon_steps(step, freq_s)


def backtest_positions(n: int, freq_s: int, *, horizon: int | str, windows: int,
                       step: int | str | None) -> list[int] | None:
    """Positions of a series' backtest cutoffs (``None`` when it is too short), by the one
    rule of :func:`prism.evaluation.backtest.cutoff_positions`."""
    h, s = _horizon_and_step(freq_s, horizon, step)
    return cutoff_positions(n, h, s, windows) or None


@contextlib.contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """Raise :class:`_BudgetExceeded` in this block after ``seconds`` (main thread only)."""
    if (not seconds or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
        yield  # the caller's hard deadline still applies
        return

    def ring(signum: int, frame: object) -> None:
        raise _BudgetExceeded

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- backends -----------------------------------------------------------------------------------
class _Backend(Protocol):
    """Runs chunks; the engine (:func:`_drive`) is the same for every backend."""

    name: str
    slots: int

    def submit(self, key: int, items: list[_Series]) -> None:
        """Start (or queue) a chunk."""

    def started(self, key: int) -> float | None:
        """When the chunk started running (``time.monotonic``), ``None`` while queued."""

    def wait(self, timeout: float | None) -> list[tuple[int, list[_Outcome] | _Crash]]:
        """Finished chunks, waiting at most ``timeout`` seconds for the first."""

    def abandon(self, key: int) -> None:
        """Stop a chunk that overran its deadline; its worker is replaced."""

    def close(self, force: bool = False) -> None:
        """Stop the workers (and a Ray runtime this backend started); ``force``: at once."""


def _local_worker(conn: Connection, blob: bytes) -> None:
    """A local worker process: load the job once, then run chunks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        job = pickle.loads(blob)
    except BaseException as exc:
        conn.send(("init_failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        key, items = message
        try:
            result: list[_Outcome] | _Crash = run_chunk(job, items)
        except BaseException as exc:
            result = _Crash(f"the chunk failed: {type(exc).__name__}: {exc}")
        conn.send((key, result))


#: Thread pools a worker sizes from the environment when it starts (one core per worker, as
#: Ray gives its tasks). Without them torch's pool has a thread per core and the RNN's
#: per-call switch to one thread and back rebuilds it on every forecast (twice as slow here).
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                     "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


@contextlib.contextmanager
def _one_thread_environment() -> Iterator[None]:
    """``*_NUM_THREADS=1`` for a process started inside (the caller's environment after)."""
    saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(_THREAD_VARIABLES, "1"))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class _Worker:
    process: Any  # multiprocessing.Process of the spawn context
    conn: Connection
    ready: bool = False
    key: int | None = None


class _LocalBackend:
    """``workers`` spawned processes, one chunk at a time each."""

    name = "local"

    def __init__(self, job: _Job, workers: int) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        self.slots = workers
        self._workers: list[_Worker] = []
        self._queue: deque[tuple[int, list[_Series]]] = deque()
        self._started: dict[int, float] = {}
        for _ in range(workers):
            self._spawn()

    def _spawn(self) -> None:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=_local_worker, args=(theirs, self._blob),
                                        daemon=True, name="prism-batch-worker")
        with _one_thread_environment():
            process.start()
        theirs.close()
        self._workers.append(_Worker(process, ours))

    def submit(self, key: int, items: list[_Series]) -> None:
        self._queue.append((key, items))
        self._dispatch()

    def _dispatch(self) -> None:
        for worker in self._workers:
            if worker.ready and worker.key is None and self._queue:
                key, items = self._queue.popleft()
                worker.conn.send((key, items))
                worker.key = key
                self._started[key] = time.monotonic()

    def started(self, key: int) -> float | None:
        return self._started.get(key)

    def wait(self, timeout: float | None) -> list[tuple[int, list[_Outcome] | _Crash]]:
        handles: list[Any] = [w.conn for w in self._workers]
        handles += [w.process.sentinel for w in self._workers]
        ready = set(wait_ready(handles, timeout))
        out: list[tuple[int, list[_Outcome] | _Crash]] = []
        for worker in list(self._workers):
            if worker.conn in ready:
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is not None:
                    self._receive(worker, message, out)
                    continue
            if worker.conn in ready or worker.process.sentinel in ready:
                worker.process.join(timeout=5)
                if worker.process.is_alive():
                    continue  # the pipe said something odd but the process lives on
                self._replace(worker, out, f"its worker process exited with code "
                                           f"{worker.process.exitcode}")
        self._dispatch()
        return out

    def _receive(self, worker: _Worker, message: tuple[Any, Any],
                 out: list[tuple[int, list[_Outcome] | _Crash]]) -> None:
        tag, payload = message
        if tag == "ready":
            worker.ready = True
        elif tag == "init_failed":
            self.close()
            raise PrismError(f"batch workers cannot load the model: {payload}")
        else:
            self._started.pop(tag, None)
            worker.key = None
            out.append((tag, payload))

    def _replace(self, worker: _Worker, out: list[tuple[int, list[_Outcome] | _Crash]],
                 reason: str) -> None:
        self._workers.remove(worker)
        worker.conn.close()
        if worker.key is not None:
            self._started.pop(worker.key, None)
            out.append((worker.key, _Crash(reason)))
        elif not worker.ready:
            self.close()
            raise PrismError(f"a batch worker died while starting ({reason}); run with -v "
                             "for its log")
        self._spawn()

    def abandon(self, key: int) -> None:
        for worker in self._workers:
            if worker.key == key:
                worker.process.kill()
                worker.process.join(timeout=10)
                worker.key = None
                self._workers.remove(worker)
                worker.conn.close()
                self._started.pop(key, None)
                self._spawn()
                return
        self._queue = deque((k, items) for k, items in self._queue if k != key)

    def close(self, force: bool = False) -> None:
        for worker in self._workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(None)
            if force:
                worker.process.kill()
        deadline = time.monotonic() + 10
        for worker in self._workers:
            worker.process.join(timeout=max(0.1, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=5)
            worker.conn.close()
        self._workers = []


#: The job a Ray worker process has loaded: (object ref hex, job).
_RAY_JOB: tuple[str, _Job] | None = None


def _ray_chunk(job_ref: list[Any], items: list[_Series]) -> list[_Outcome]:
    """The Ray task: fetch the job once per worker process (cached), run the chunk.

    The job's reference comes inside a list so that Ray does not fetch it for every task.
    """
    import ray

    global _RAY_JOB
    key = job_ref[0].hex()
    if _RAY_JOB is None or _RAY_JOB[0] != key:
        _RAY_JOB = (key, ray.get(job_ref[0]))
    return run_chunk(_RAY_JOB[1], items)


class _RayBackend:
    """Ray tasks of one CPU each, at most ``slots`` in flight."""

    name = "ray"

    def __init__(self, job: _Job, *, address: str | None, workers: int | None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ConfigError(
                "the ray backend needs Ray: pip install 'prism-forecast[distributed]' "
                "(make test installs it), or use --backend local"
            ) from exc
        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {exc}; check "
                                  "--ray-address (e.g. ray://head:10001 or auto)") from exc
        elif address:
            logger.info("Ray is already initialised in this process; --ray-address %s is "
                        "not used", address)
        # no more tasks in flight than CPUs: a task queued in Ray would spend its time budget
        # waiting
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.slots = min(int(workers), cpus) if workers else cpus
        self._job = ray.put(job)
        self._task = ray.remote(num_cpus=1, max_retries=0)(_ray_chunk)
        self._refs: dict[int, Any] = {}
        self._started: dict[int, float] = {}

    def submit(self, key: int, items: list[_Series]) -> None:
        self._refs[key] = self._task.remote([self._job], items)
        self._started[key] = time.monotonic()

    def started(self, key: int) -> float | None:
        return self._started.get(key)

    def wait(self, timeout: float | None) -> list[tuple[int, list[_Outcome] | _Crash]]:
        ray = self._ray
        keys = {ref: key for key, ref in self._refs.items()}
        if not keys:
            return []
        first, _ = ray.wait(list(keys), num_returns=1, timeout=timeout)
        if not first:
            return []
        done, _ = ray.wait(list(keys), num_returns=len(keys), timeout=0)
        out: list[tuple[int, list[_Outcome] | _Crash]] = []
        for ref in {*first, *done}:
            key = keys[ref]
            del self._refs[key]
            self._started.pop(key, None)
            try:
                out.append((key, ray.get(ref)))
            except ray.exceptions.RayError as exc:
                out.append((key, _Crash(f"the Ray task failed: {type(exc).__name__}: "
                                        f"{str(exc)[:300]}")))
        return out

    def abandon(self, key: int) -> None:
        ref = self._refs.pop(key, None)
        self._started.pop(key, None)
        if ref is not None:
            self._ray.cancel(ref, force=True)

    def close(self, force: bool = False) -> None:
        for ref in self._refs.values():
            with contextlib.suppress(Exception):
                self._ray.cancel(ref, force=True)
        self._refs = {}
        if self._owned:
            self._ray.shutdown()


def _make_backend(name: str, job: _Job, *, workers: int | None,
                  ray_address: str | None) -> _Backend:
    if name == "local":
        return _LocalBackend(job, workers or 1)
    return _RayBackend(job, address=ray_address, workers=workers)


# -- the engine ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchReport:
    """What a batch run did.

    Attributes:
        run_id: the run's key in ``batch_runs``, ``batch_series`` and ``batch_forecasts``.
        task: ``forecast``, ``backtest`` or ``refit``.
        model: the forecaster's alias.
        backend: ``local`` or ``ray``.
        workers: worker processes (local) or tasks in flight (Ray).
        n_series: series in the run.
        ok / fallback / skipped / failed: series by outcome.
        rows: forecast rows written.
        seconds: wall time of the run.
        shared_seconds: time spent learning a global model's shared parts (0 otherwise).
        shared_series: series those were learned from.
        notes: ``(series_id, status, reason)`` of the first series that did not succeed.
        saved: series whose fitted model was saved to the registry.
        model_ids: the registry models they were saved as (one per chunk).
        models_dir: the registry they were saved to (``None``: models were not kept).
    """

    run_id: str
    task: str
    model: str
    backend: str
    workers: int
    n_series: int
    ok: int
    fallback: int
    skipped: int
    failed: int
    rows: int
    seconds: float
    shared_seconds: float
    shared_series: int
    notes: tuple[tuple[str, str, str], ...]
    saved: int = 0
    model_ids: tuple[str, ...] = ()
    models_dir: str | None = None


class _Sink:
    """Writes finished chunks to the store, one transaction each, and keeps the counts;
    saves a chunk's fitted models as one registry model (with ``models_dir``)."""

    def __init__(self, store: Store, run_id: str, alias: str,
                 models_dir: Path | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.alias = alias
        self.models_dir = models_dir
        self.counts = {"ok": 0, "fallback": 0, "skipped": 0, "failed": 0}
        self.rows = 0
        self.notes: list[tuple[str, str, str]] = []
        self.saved = 0
        self.model_ids: list[str] = []

    def write(self, outcomes: Sequence[_Outcome]) -> None:
        fitted = {o.series_id: o.model for o in outcomes
                  if o.status == "ok" and o.model is not None}
        if self.models_dir is not None and fitted:
            # saved before the results are written: a run whose rows say "ok" has its models
            record = save_model(SeriesModels.join(fitted), self.models_dir)
            self.model_ids.append(record.model_id)
            self.saved += len(fitted)
        frames = [o.frame for o in outcomes if o.frame is not None and len(o.frame)]
        table = _to_arrow(pd.concat(frames, ignore_index=True)) if frames else None
        series = pd.DataFrame({
            SERIES_ID: [o.series_id for o in outcomes],
            "status": [o.status for o in outcomes],
            "fallback_reason": [o.reason for o in outcomes],
            "seconds": [o.seconds for o in outcomes],
            "n_rows": [0 if o.frame is None else len(o.frame) for o in outcomes],
        })
        self.store.add_batch_results(self.run_id, table, series)
        for o in outcomes:
            self.counts[o.status] += 1
            if o.status != "ok":
                level = logging.INFO if o.status == "skipped" else logging.WARNING
                logger.log(level, "%s (%s): %s: %s", o.series_id, self.alias, o.status, o.reason)
                if len(self.notes) < 20:
                    self.notes.append((o.series_id, o.status, o.reason or ""))
        self.rows += 0 if table is None else table.num_rows


def _to_arrow(frame: pd.DataFrame) -> pa.Table:
    """A forecast (or backtest) frame as ``batch_forecasts`` rows, quantiles in a list."""
    qcols = [c for c in frame.columns if c.startswith("p") and c[1:2].isdigit()]
    n, k = len(frame), len(qcols)
    flat = frame[qcols].to_numpy(dtype=np.float64).ravel()
    offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
    null_ts = pa.nulls(n, pa.timestamp("ns"))
    return pa.table({
        SERIES_ID: pa.array(frame[SERIES_ID].astype(str).to_numpy()),
        CUTOFF: pa.array(frame[CUTOFF].to_numpy("datetime64[ns]")) if CUTOFF in frame
        else null_ts,
        TS: pa.array(frame[TS].to_numpy("datetime64[ns]")),
        "model": pa.array(frame["model"].astype(str).to_numpy()),
        "mean": pa.array(frame["mean"].to_numpy(dtype=np.float64)),
        "quantiles": pa.ListArray.from_arrays(offsets, pa.array(flat, pa.float64())),
        VALUE: pa.array(frame[VALUE].to_numpy(dtype=np.float64)) if VALUE in frame
        else pa.nulls(n, pa.float64()),
    })


def _read_chunks(store: Store, series_ids: Sequence[str],
                 chunk_size: int) -> Iterator[list[_Series]]:
    """The series as chunks, read from DuckDB a block at a time (memory stays flat)."""
    for lo in range(0, len(series_ids), _READ_BLOCK):
        block = list(series_ids[lo:lo + _READ_BLOCK])
        panel = store.load_panel_block(block)
        ids = panel[SERIES_ID].to_numpy()
        ts = panel[TS].to_numpy("datetime64[ns]").view(np.int64)
        values = panel[VALUE].to_numpy(dtype=np.float64)
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else (
            np.zeros(0, dtype=np.int64))
        stops = np.r_[starts[1:], len(ids)]
        found = {str(ids[a]): (a, b) for a, b in zip(starts, stops, strict=True)}
        items = []
        for sid in block:
            a, b = found.get(sid, (0, 0))
            items.append(_Series(sid, ts[a:b].copy(), values[a:b].copy()))
        del panel, ids, ts, values
        for c in range(0, len(items), chunk_size):
            yield items[c:c + chunk_size]


def _drive(backend: _Backend, chunks: Iterator[list[_Series]], job: _Job, sink: _Sink,
           total: int, *, hard_grace_s: float, progress: Progress | None) -> None:
    """Keep every slot busy, collect results, abandon chunks past their deadline."""
    inflight: dict[int, list[_Series]] = {}
    retry: deque[list[_Series]] = deque()
    exhausted = False
    key = 0
    done = 0
    if progress is not None:
        progress(0, total)
    while True:
        while len(inflight) < backend.slots:
            if retry:
                chunk = retry.popleft()
            elif not exhausted:
                chunk = next(chunks, None)  # type: ignore[arg-type]
                if chunk is None:
                    exhausted = True
                    continue
            else:
                break
            backend.submit(key, chunk)
            inflight[key] = chunk
            key += 1
        if not inflight:
            break
        for k, result in backend.wait(_timeout(backend, inflight, job, hard_grace_s)):
            items = inflight.pop(k)
            if isinstance(result, _Crash):
                done += _give_up(items, job, result.reason, retry, sink)
            else:
                sink.write(result)
                done += len(result)
        if job.budget_s:
            now = time.monotonic()
            for k in list(inflight):
                started = backend.started(k)
                if started is not None and now > started + _allowed(inflight[k], job,
                                                                     hard_grace_s):
                    items = inflight.pop(k)
                    backend.abandon(k)
                    reason = (f"exceeded its time budget of {job.budget_s:g} s and did not stop "
                              f"(its worker was stopped after {now - started:.0f} s)")
                    done += _give_up(items, job, reason, retry, sink)
        if progress is not None:
            progress(done, total)


def _allowed(items: Sequence[_Series], job: _Job, hard_grace_s: float) -> float:
    return float(job.budget_s or 0) * len(items) + hard_grace_s


def _timeout(backend: _Backend, inflight: dict[int, list[_Series]], job: _Job,
             hard_grace_s: float) -> float | None:
    """Seconds until the first deadline in flight (``None``: wait for a result)."""
    if not job.budget_s:
        return None
    now = time.monotonic()
    waits = [started + _allowed(items, job, hard_grace_s) - now
             for k, items in inflight.items()
             if (started := backend.started(k)) is not None]
    return max(0.05, min(waits)) if waits else 0.5


def _give_up(items: list[_Series], job: _Job, reason: str, retry: deque[list[_Series]],
             sink: _Sink) -> int:
    """A chunk that returned nothing: rerun its series one per task to find the culprit;
    a single series falls back here, in the calling process. Returns the series finished."""
    if len(items) > 1:
        logger.warning("a chunk of %d series returned nothing (%s); rerunning them one by one",
                       len(items), reason)
        retry.extend([item] for item in items)
        return 0
    sink.write([_fallback(job, items[0], reason, time.perf_counter())])
    return 1


def stratified_sample(series_ids: Sequence[str], size: int) -> list[str]:
    """At most ``size`` series for a global model to learn from, deterministic.

    Strata are ``cluster/metric`` (the first and last parts of a series id); each stratum
    gets one series while ``size`` allows, the rest in proportion to the strata's sizes
    (largest remainders), spread evenly over each stratum's sorted ids.

    Returns:
        The chosen ids, sorted (all of them when there are at most ``size``).
    """
    ids = sorted(set(series_ids))
    if len(ids) <= size:
        return ids
    strata: dict[str, list[str]] = {}
    for sid in ids:
        parts = sid.split("/")
        strata.setdefault(f"{parts[0]}/{parts[-1]}", []).append(sid)
    keys = sorted(strata, key=lambda k: (-len(strata[k]), k))
    if len(keys) >= size:
        picked = [keys[int(i)] for i in np.linspace(0, len(keys) - 1, size).round()]
        return sorted(strata[k][len(strata[k]) // 2] for k in dict.fromkeys(picked))
    quota = {k: 1 for k in keys}
    spare, rest = size - len(keys), len(ids) - len(keys)
    exact = {k: spare * (len(strata[k]) - 1) / rest for k in keys}
    for k in keys:
        quota[k] += int(exact[k])
    left = size - sum(quota.values())
    for k in sorted(keys, key=lambda k: (-(exact[k] - int(exact[k])), k))[:left]:
        quota[k] += 1
    chosen = []
    for k in keys:
        members = strata[k]
        at = np.unique(np.linspace(0, len(members) - 1, min(quota[k], len(members))).round())
        chosen += [members[int(i)] for i in at]
    return sorted(chosen)


def _shared_parts(model: BaseForecaster, panel: pd.DataFrame, task: str, *,
                  horizon: int | str, windows: int,
                  step: int | str | None) -> tuple[BaseForecaster, ...]:
    """A global model's shared parts: once for a forecast, per window for a backtest."""
    finite = pd.Series(np.isfinite(panel[VALUE].to_numpy()), index=panel.index)
    good = finite.groupby(panel[SERIES_ID]).agg(["size", "all"])
    usable = good.index[(good["size"] >= 2) & good["all"]]
    panel = panel[panel[SERIES_ID].isin(usable)]  # a broken series falls back in its worker
    if panel.empty:
        raise DataContractError(f"no series of the sample can teach {model.alias} (each needs "
                                "two or more finite points)")
    if task != "backtest":
        return (clone(model).fit_shared(panel),)
    groups = {str(sid): g for sid, g in panel.groupby(SERIES_ID, sort=True)}
    cuts: dict[str, list[int]] = {}
    for sid, g in groups.items():
        if len(g) < 2:
            continue
        freq_s = panel_freq(g, purpose="be backtested")
        positions = backtest_positions(len(g), freq_s, horizon=horizon, windows=windows,
                                       step=step)
        if positions is not None:
            cuts[sid] = positions
    if not cuts:
        raise DataContractError(
            f"no series of the sample is long enough for {windows} backtest window(s) of "
            f"{horizon}; pass fewer windows or a shorter horizon")
    out = []
    for w in range(windows):
        part = pd.concat([groups[sid].iloc[:c[w] + 1] for sid, c in cuts.items()],
                         ignore_index=True)
        out.append(clone(model).fit_shared(part))
    return tuple(out)


def run_batch(
    store: Store,
    model: BaseForecaster,
    series_ids: Sequence[str] | None = None,
    *,
    task: str = "forecast",
    horizon: int | str = "1d",
    quantiles: Sequence[float] = (0.5, 0.9, 0.99),
    windows: int = 7,
    step: int | str | None = None,
    backend: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    budget_s: float | None = None,
    hard_grace_s: float = DEFAULT_HARD_GRACE_S,
    global_sample: int = DEFAULT_GLOBAL_SAMPLE,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    fallback_season: str = "1d",
    models_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> BatchReport:
    """Forecast, backtest or refit many stored series on worker processes or Ray; see the
    module docstring. Results stream into ``batch_forecasts``/``batch_series`` under a new run
    id; fitted models (``refit``, or ``forecast`` with ``models_dir``) into the registry.

    Args:
        store: the store holding the series (results are written to it).
        model: an unfitted forecaster (its settings; it is never fitted itself).
        series_ids: the series (all when ``None``).
        task: ``forecast``, ``backtest`` or ``refit`` (fit and save, forecast nothing).
        horizon: steps or a duration (``1d``; not used by a refit).
        quantiles: quantile levels.
        windows: backtest cutoffs per series.
        step: between backtest cutoffs (default: the horizon).
        backend: ``local`` (processes) or ``ray``.
        workers: local worker processes (default 1), or Ray tasks in flight (default: the
            cluster's CPUs).
        ray_address: the Ray cluster (default: a local one; ignored when Ray is already
            initialised in this process).
        budget_s: per-series time budget in seconds (``None``: none).
        hard_grace_s: how long a chunk may overrun its budget before its worker is stopped.
        global_sample: at most this many series teach a global model its shared parts.
        chunk_size: series per task.
        fallback_season: the season of the seasonal naive fallback.
        models_dir: the model registry to save the fitted models to, one model per chunk
            (required by ``refit``; with ``forecast``: forecast and save).
        progress: called as ``progress(done, total)`` as series finish.

    Returns:
        The :class:`BatchReport`.

    Raises:
        ConfigError: for a bad setting (task, backend, workers, budget, horizon, quantile),
            a refit without a registry, a backtest with one, a registry that cannot be
            written, or when Ray is missing or unreachable.
        SeriesNotFound: for an unknown series.
        DataContractError: when a global model cannot learn its shared parts from the sample.
    """
    if task not in TASKS:
        raise ConfigError(f"unknown batch task {task!r}; use one of {', '.join(TASKS)}")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; use --backend local or ray")
    for name, value in (("workers", workers), ("chunk_size", chunk_size),
                        ("global_sample", global_sample), ("windows", windows)):
        if value is not None and (isinstance(value, bool) or int(value) < 1):
            raise ConfigError(f"{name} must be a whole number >= 1; got {value!r}")
    if budget_s is not None and not budget_s > 0:
        raise ConfigError(f"the time budget must be a positive number of seconds; got "
                          f"{budget_s!r}")
    registry_root = _registry_root(task, models_dir)
    qs = tuple(check_quantiles(quantiles))
    if series_ids:
        store.require_series(list(series_ids))
        ids = sorted(set(series_ids))
    else:
        ids = sorted(store.list_series()[SERIES_ID].astype(str))
    if not ids:
        raise ConfigError("no series in the store: ingest data first (prism ingest)")

    started = time.perf_counter()
    shared: tuple[BaseForecaster, ...] = ()
    sample: list[str] = []
    probe = store.load_panel_block(ids[:1])
    if len(probe) > 1 and task != "refit":  # a bad horizon fails here, not once per series
        freq_s = int((probe[TS].iloc[1] - probe[TS].iloc[0]).total_seconds())
        _horizon_and_step(freq_s, horizon, step)
    if model.global_model:
        sample = stratified_sample(ids, int(global_sample))
        shared = _shared_parts(model, store.load_panel(sample), task, horizon=horizon,
                               windows=int(windows), step=step)
        logger.info("%s: shared parts learned from %d series in %.1f s", model.alias,
                    len(sample), time.perf_counter() - started)
    shared_seconds = time.perf_counter() - started if shared else 0.0
    job = _Job(task=task, model=clone(model), shared=shared, horizon=horizon, quantiles=qs,
               windows=int(windows), step=step, budget_s=budget_s,
               fallback_season=fallback_season, keep_models=registry_root is not None)

    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    runner = _make_backend(backend, job, workers=workers, ray_address=ray_address)
    store.start_batch_run(
        run_id, task=task, model=model.alias, params=json.dumps(model.get_params(),
                                                                default=str),
        horizon=str(horizon), quantiles=qs, windows=int(windows) if task == "backtest" else None,
        backend=backend, workers=runner.slots, n_series=len(ids))
    sink = _Sink(store, run_id, model.alias, registry_root)
    status = "failed"
    try:
        _drive(runner, _read_chunks(store, ids, int(chunk_size)), job, sink, len(ids),
               hard_grace_s=hard_grace_s, progress=progress)
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        runner.close(force=status != "done")
        store.finish_batch_run(run_id, status=status, seconds=time.perf_counter() - started)
    seconds = time.perf_counter() - started
    logger.info("batch %s: %d series in %.1f s (%s)", run_id, len(ids), seconds, sink.counts)
    if registry_root is not None:
        logger.info("batch %s: %d series saved as %d registry models in %s", run_id,
                    sink.saved, len(sink.model_ids), registry_root)
    return BatchReport(
        run_id=run_id, task=task, model=model.alias, backend=backend, workers=runner.slots,
        n_series=len(ids), ok=sink.counts["ok"], fallback=sink.counts["fallback"],
        skipped=sink.counts["skipped"], failed=sink.counts["failed"], rows=sink.rows,
        seconds=seconds, shared_seconds=shared_seconds, shared_series=len(sample),
        notes=tuple(sink.notes), saved=sink.saved, model_ids=tuple(sink.model_ids),
        models_dir=None if registry_root is None else str(registry_root))


def _registry_root(task: str, models_dir: str | Path | None) -> Path | None:
    """The registry a run saves its models to (``None``: it keeps none), checked writable
    before any work is done."""
    if models_dir is None:
        if task == "refit":
            raise ConfigError("a refit saves the fitted models: pass the registry folder "
                              "(--models-dir or PRISM_MODELS_DIR)")
        return None
    if task == "backtest":
        raise ConfigError("a backtest fits a model per cutoff and saves none; drop --save")
    root = Path(models_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write to the model registry {str(root)!r}: {exc}; pass a "
                          "writable --models-dir (or PRISM_MODELS_DIR)") from exc
    return root


# -- reading runs back --------------------------------------------------------------------------
def iter_run_frames(store: Store, run_id: str, *, rows: int = 200_000) -> Iterator[pd.DataFrame]:
    """A run's forecasts as the forecast contract (backtests: with ``cutoff`` and
    ``value``), ``rows`` at a time, sorted by series, cutoff and time.

    Raises:
        ConfigError: for an unknown run id.
    """
    runs = store.batch_runs(run_id)
    if runs.empty:
        raise ConfigError(f"no batch run {run_id!r} in the store")
    levels = [float(q) for q in runs["quantiles"].iloc[0]]
    backtest = runs["task"].iloc[0] == "backtest"
    qcols = [quantile_column(q) for q in levels]
    for table in store.iter_batch_forecasts(run_id, rows=rows):
        flat = table.column("quantiles").combine_chunks().flatten().to_numpy(
            zero_copy_only=False)
        frame = pd.DataFrame({
            SERIES_ID: table.column(SERIES_ID).to_numpy(zero_copy_only=False),
            TS: table.column(TS).to_pandas().astype("datetime64[ns]").to_numpy(),
        })
        if backtest:
            frame[CUTOFF] = table.column(CUTOFF).to_pandas().astype("datetime64[ns]").to_numpy()
        frame["model"] = table.column("model").to_numpy(zero_copy_only=False)
        frame["mean"] = table.column("mean").to_numpy(zero_copy_only=False)
        values = flat.reshape(len(frame), len(qcols)) if len(qcols) else np.zeros((len(frame), 0))
        for j, col in enumerate(qcols):
            frame[col] = values[:, j]
        if backtest:
            frame[VALUE] = table.column(VALUE).to_numpy(zero_copy_only=False)
        yield frame


def run_frame(store: Store, run_id: str) -> pd.DataFrame:
    """A whole run in memory (for tests and small runs; :func:`export_run` streams)."""
    frames = list(iter_run_frames(store, run_id))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def export_run(store: Store, run_ids: str | Sequence[str], output: str | Path) -> Path:
    """Write runs to ``.csv``, ``.parquet`` or ``.json`` (records), block by block.

    Rows come in a fixed order (run, series, cutoff, time), so two runs that computed the
    same forecasts write the same bytes.

    Raises:
        ConfigError: for another extension, a missing folder or an unknown run.
    """
    path = Path(output)
    if path.suffix not in (".csv", ".parquet", ".json"):
        raise ConfigError(f"cannot write {str(path)!r}: use a .csv, .parquet or .json file name")
    if not path.parent.exists():
        raise ConfigError(f"folder {str(path.parent)!r} does not exist; create it first")
    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    unknown = [r for r in ids if store.batch_runs(r).empty]
    if unknown:
        raise ConfigError(f"no batch run {unknown[0]!r} in the store")
    writer: pq.ParquetWriter | None = None
    first = True
    with path.open("w" if path.suffix != ".parquet" else "wb") as handle:
        if path.suffix == ".json":
            handle.write("[")
        for run_id in ids:
            for frame in iter_run_frames(store, run_id):
                if path.suffix == ".csv":
                    frame.to_csv(handle, index=False, header=first,
                                 date_format="%Y-%m-%dT%H:%M:%S")
                elif path.suffix == ".json":
                    text = frame.to_json(orient="records", date_format="iso", indent=1)
                    body = text.strip()[1:-1].strip()
                    if body:
                        handle.write(("" if first else ",") + "\n " + body)
                else:
                    table = pa.Table.from_pandas(frame, preserve_index=False)
                    if writer is None:
                        writer = pq.ParquetWriter(handle, table.schema)
                    writer.write_table(table.cast(writer.schema))
                first = False
        if path.suffix == ".json":
            handle.write("\n]\n")
        if writer is not None:
            writer.close()
    if path.suffix == ".parquet" and writer is None:  # an empty run: an empty file that reads
        pd.DataFrame().to_parquet(path, index=False)
    return path
