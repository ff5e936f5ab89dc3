"""The driver of a batch run: :func:`run_batch` checks the settings, learns a global
model's shared parts (:func:`stratified_sample`, :func:`_shared_parts`), reads the series
from the store a block at a time, and keeps the backend's slots busy (:func:`_drive`),
abandoning a chunk past its deadline and rerunning its series one by one."""

from __future__ import annotations

import json
import logging
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from prism.batch.backends import _Backend, _make_backend
from prism.batch.results import _Sink
from prism.batch.work import (
    _Crash,
    _fallback,
    _horizon_and_step,
    _Job,
    _Outcome,
    _Series,
    backtest_positions,
    panel_job,
    run_chunk,
)
from prism.errors import ConfigError, DataContractError
from prism.forecasters.base import BaseForecaster, check_quantiles, clone
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

Progress = Callable[[int, int], None]


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


def _read_chunks(store: Store, series_ids: Sequence[str],
                 chunk_size: int) -> Iterator[list[_Series]]:
    """The series as chunks, read from DuckDB a block at a time (memory stays flat), straight
    into arrays: no frame, no string per row. A series' arrays are views of its block's."""
    for lo in range(0, len(series_ids), _READ_BLOCK):
        block = list(series_ids[lo:lo + _READ_BLOCK])
        names = sorted(set(block))
        columns = store.load_panel_arrays(names)
        # ordered by series then time (a NULL time last, as DuckDB orders it): two stable
        # sorts, by time then by the series' position (a radix sort), in a third of the time
        # of DuckDB's ORDER BY on this machine
        position = np.asarray(columns.pop("i"), dtype=np.int64)
        by_time = np.argsort(np.ma.filled(columns["ts"], np.iinfo(np.int64).max), kind="stable")
        small = np.uint16 if len(names) <= 1 << 16 else np.int64
        order = by_time[np.argsort(position[by_time].astype(small), kind="stable")]
        del by_time
        # a NULL reads as NaT (ts) or NaN (value), as from a frame; the checks then see it
        ts = np.asarray(np.ma.filled(columns.pop("ts"), np.iinfo(np.int64).min), np.int64)[order]
        values = np.asarray(np.ma.filled(columns.pop("value"), np.nan), np.float64)[order]
        counts = np.bincount(position, minlength=len(names))
        del columns, position, order
        stops = np.cumsum(counts).tolist()
        found = {sid: (b - int(n), b) for sid, n, b in zip(names, counts, stops, strict=True)}
        items = [_Series(sid, ts[a:b], values[a:b]) for sid in block for a, b in [found[sid]]]
        del ts, values  # the items hold their views; the block goes with its last chunk
        for c in range(0, len(items), chunk_size):
            yield items[c:c + chunk_size]
        del items


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
            del chunk  # not kept alive while the next one is read
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


class _InProcess:
    """A backend of one slot that runs each chunk in the calling process, when it is waited
    for: for the cheap baselines' vectorised forecasts (:func:`prism.batch.work.panel_job`),
    which take less time than starting a worker. The series' budgets hold as in a worker
    when this is the main thread; a chunk cannot be abandoned (none is running between
    calls)."""

    name = "local"
    slots = 1

    def __init__(self, job: _Job) -> None:
        self.job = job
        self.pending: deque[tuple[int, list[_Series], float]] = deque()

    def submit(self, key: int, items: list[_Series]) -> None:
        self.pending.append((key, items, time.monotonic()))

    def started(self, key: int) -> float | None:
        return next((t for k, _, t in self.pending if k == key), None)

    def wait(self, timeout: float | None) -> list[tuple[int, list[_Outcome] | _Crash]]:
        out: list[tuple[int, list[_Outcome] | _Crash]] = []
        while self.pending:
            key, items, _ = self.pending.popleft()
            try:
                out.append((key, run_chunk(self.job, items, threads=None)))
            except Exception as exc:
                out.append((key, _Crash(f"the chunk failed: {type(exc).__name__}: {exc}")))
        return out

    def abandon(self, key: int) -> None:
        self.pending = deque(p for p in self.pending if p[0] != key)

    def close(self, force: bool = False) -> None:
        self.pending.clear()


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
    """Forecast, backtest or refit many stored series on worker processes or Ray; see
    :mod:`prism.batch`. Results stream into ``batch_forecasts``/``batch_series`` under a new
    run id; fitted models (``refit``, or ``forecast`` with ``models_dir``) into the registry.

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
    runner: _Backend
    if backend == "local" and (workers or 1) == 1 and panel_job(job):
        # a cheap baseline, vectorised: a worker process would cost more than the work, and
        # without tasks to balance a chunk is a read block (fewer, larger transactions)
        runner = _InProcess(job)
        chunk_size = max(int(chunk_size), _READ_BLOCK)
        logger.info("%s: forecast vectorised in the calling process", model.alias)
    else:
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

