"""The work of one series, run in the workers: forecast, backtest or refit it under its
time budget, and fall back to the seasonal naive forecaster when it raises or overruns.

Here is what travels between the calling process and the workers (the job, the series, their
outcomes: pickled by the local backend and by Ray, so unpickled by these classes' paths in
``prism.batch.work``) and what the workers run (:func:`run_chunk`). The budget's ``SIGALRM``
timer (:func:`_alarm`) can only be set in a process' main thread, where a local worker runs its
chunks; in any other thread it sets nothing and the calling process' hard deadline is the only
one.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from prism.errors import DataContractError
from prism.evaluation.backtest import CUTOFF, MIN_TRAIN, cutoff_positions
from prism.forecasters.base import BaseForecaster, FloatArray, clone, horizon_steps
from prism.forecasters.baselines import NaiveForecaster, SeasonalNaiveForecaster
from prism.forecasters.panel_fast import forecast_block, panel_rule, supports_panel
from prism.schema import SERIES_ID, TS, VALUE

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
class _Block:
    """The panel path's forecasts of a group of series, as arrays (``steps`` per series).

    Its series' outcomes share it: a chunk's pickle holds it once, and the sink turns it
    into rows once (:func:`forecast_rows`), with no frame per series.
    """

    series_ids: tuple[str, ...]
    last_ts: IntArray
    freq_s: int
    alias: str
    mean: FloatArray
    bands: FloatArray

    def rows(self, keep: Sequence[str] | None = None) -> pa.Table:
        """Its ``batch_forecasts`` rows (of the series in ``keep`` only, when given)."""
        table = forecast_rows(self.series_ids, self.last_ts, self.freq_s, self.alias,
                              self.mean, self.bands)
        if keep is None or len(keep) == len(self.series_ids):
            return table
        wanted = set(keep)
        steps = self.mean.shape[1]
        rows = [r * steps + k for r, sid in enumerate(self.series_ids) if sid in wanted
                for k in range(steps)]
        return table.take(pa.array(rows, pa.int64()))


@dataclass(frozen=True)
class _Outcome:
    """What became of one series (``model``: its fitted model, when the job keeps them; the
    models of a chunk travel back in one pickle, so a global model's shared parts once).
    Its forecast is a ``frame``, or from the panel path its group's ``block``."""

    series_id: str
    status: str  # ok | fallback | skipped | failed
    reason: str | None
    seconds: float
    frame: pd.DataFrame | None
    model: BaseForecaster | None = None
    block: _Block | None = None

    @property
    def n_rows(self) -> int:
        """The forecast's rows."""
        if self.block is not None:
            return int(self.block.mean.shape[1])
        return 0 if self.frame is None else len(self.frame)

    def table(self) -> pa.Table | None:
        """The forecast as ``batch_forecasts`` rows (``None``: none)."""
        if self.block is not None:
            return self.block.rows([self.series_id])
        return None if self.frame is None else frame_rows(self.frame)


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
def run_chunk(job: _Job, items: Sequence[_Series], *, threads: int | None = 1
              ) -> list[_Outcome]:
    """Forecast (or backtest) each series of a chunk; the unit of work of every backend.

    Each series gets its own time budget and falls back on failure, so this never raises
    for a series' sake. ``threads`` caps the native thread pools meanwhile (``None``: as
    they are, for a chunk run in the calling process).
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads) if threads else contextlib.nullcontext():
        if panel_job(job):
            return _run_panel(job, items)
        return [_run_series(job, item) for item in items]


def panel_job(job: _Job) -> bool:
    """Whether the job's series go through the vectorised panel path (a forecast of a cheap
    baseline whose fitted models are not kept; :mod:`prism.forecasters.panel_fast`)."""
    return job.task == "forecast" and not job.keep_models and supports_panel(job.model)


def _run_panel(job: _Job, items: Sequence[_Series]) -> list[_Outcome]:
    """A chunk's forecasts, vectorised over its series of one step and length at a time.

    Only what the per-series path would forecast plainly goes this way: a series with fewer
    than the model's points, a missing value, or an irregular or unsorted grid, and any group
    that raises or overruns its budget (``budget_s`` per series in it), is run by
    :func:`_run_series`, with its checks, messages and fallback. Each series' ``seconds``
    is its share of its group's time.
    """
    out: dict[int, _Outcome] = {}
    groups: dict[tuple[int, int], list[int]] = {}
    for i, item in enumerate(items):
        key = _panel_key(item)
        if key is None:
            out[i] = _run_series(job, item)
        else:
            groups.setdefault(key, []).append(i)
    for (freq_s, n), members in groups.items():
        started = time.perf_counter()
        try:
            rule = panel_rule(job.model, freq_s)
            if n < rule._min_points():
                raise DataContractError("shorter than the model needs")  # one by one
            steps = horizon_steps(job.horizon, freq_s)
            values = np.stack([items[i].values for i in members])
            with _alarm(None if job.budget_s is None else job.budget_s * len(members)):
                mean, bands = forecast_block(rule, values, steps, job.quantiles)
        except (Exception, _BudgetExceeded):  # the per-series path says what went wrong
            for i in members:
                out[i] = _run_series(job, items[i])
            continue
        last = np.array([items[i].ts[-1] for i in members], dtype=np.int64)
        block = _Block(tuple(items[i].series_id for i in members), last, freq_s,
                       job.model.alias, mean, bands)
        share = (time.perf_counter() - started) / len(members)
        for i in members:
            out[i] = _Outcome(items[i].series_id, "ok", None, share, None, block=block)
    return [out[i] for i in range(len(items))]


def forecast_rows(series_ids: Sequence[str], last_ts: IntArray, freq_s: int, alias: str,
                  mean: FloatArray, bands: FloatArray) -> pa.Table:
    """``batch_forecasts`` rows of ``(series, steps)`` means and ``(series, steps, n_q)``
    bands after each series' last timestamp (ns since the epoch): the numbers of
    :func:`~prism.forecasters.panel_fast.forecast_frame`, without the frame."""
    n_series, steps = mean.shape
    ts = (np.asarray(last_ts, dtype=np.int64)[:, None] + np.int64(freq_s) * 1_000_000_000
          * np.arange(1, steps + 1, dtype=np.int64)[None, :])
    ids = pa.array(list(series_ids), pa.string())
    return _rows_table(ids.take(np.repeat(np.arange(n_series), steps)), None,
                       ts.ravel().view("datetime64[ns]"),
                       pa.array(np.full(n_series * steps, alias, dtype=object), pa.string()),
                       mean.ravel(), bands.reshape(n_series * steps, bands.shape[2]), None)


def frame_rows(frame: pd.DataFrame) -> pa.Table:
    """A forecast (or backtest) frame as ``batch_forecasts`` rows, quantiles in a list."""
    qcols = [c for c in frame.columns if c.startswith("p") and c[1:2].isdigit()]
    return _rows_table(
        pa.array(frame[SERIES_ID].astype(str).to_numpy(), pa.string()),
        frame[CUTOFF].to_numpy("datetime64[ns]") if CUTOFF in frame else None,
        frame[TS].to_numpy("datetime64[ns]"),
        pa.array(frame["model"].astype(str).to_numpy(), pa.string()),
        frame["mean"].to_numpy(dtype=np.float64),
        frame[qcols].to_numpy(dtype=np.float64).reshape(len(frame), len(qcols)),
        frame[VALUE].to_numpy(dtype=np.float64) if VALUE in frame else None)


def _rows_table(series_id: pa.Array, cutoff: npt.NDArray[np.datetime64] | None,
                ts: npt.NDArray[np.datetime64], model: pa.Array, mean: FloatArray,
                quantiles: FloatArray, value: FloatArray | None) -> pa.Table:
    """The one layout of ``batch_forecasts`` rows in Arrow (``None``: a column of nulls)."""
    n, k = quantiles.shape
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * np.int32(k))
    return pa.table({
        SERIES_ID: series_id,
        CUTOFF: pa.nulls(n, pa.timestamp("ns")) if cutoff is None else pa.array(cutoff),
        TS: pa.array(ts),
        "model": model,
        "mean": pa.array(mean),
        "quantiles": pa.ListArray.from_arrays(offsets, pa.array(quantiles.ravel(), pa.float64())),
        VALUE: pa.nulls(n, pa.float64()) if value is None else pa.array(value),
    })


def _panel_key(item: _Series) -> tuple[int, int] | None:
    """``(step in seconds, length)`` of a series the panel path takes as it is, else
    ``None`` (the per-series path checks it and says what is wrong)."""
    n = len(item.values)
    if n < 2 or not np.isfinite(item.values).all():
        return None
    diffs = np.diff(item.ts)
    step = int(diffs[0])
    if step <= 0 or step % 1_000_000_000 or (diffs != step).any():
        return None
    return step // 1_000_000_000, n


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
