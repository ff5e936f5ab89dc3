"""Job-aware forecast of GPUs in use: the release of the running jobs plus new arrivals.

GPUs in use at ``t + x`` are the GPUs of the jobs running at ``t`` that still run at ``t + x``,
plus the GPUs of the jobs that start in ``(t, t + x]`` and still run at ``t + x``:

- **release**: a job of ``g`` GPUs running at ``t`` for ``a`` seconds (its age) still holds
  them at ``t + x`` with probability ``S(a + x) / S(a)``, ``S`` the survival function of job
  durations (:func:`kaplan_meier`) of its scope and size class, shrunk towards the cluster's;
- **arrivals**: the GPUs started per bucket, from the history of starts before ``t`` (the
  same time of day over the last days, or the recent rate), each surviving ``x - s`` seconds
  after its start ``s`` with the size class's ``S``; or, where jobs wait for room at ``t``
  (a VC that runs full), the queue: the waiting jobs and new submissions start as the
  releases make room under the capacity (the most GPUs the scope ever held at once).

The point forecast is by default the median of simulated futures, not their mean: the series
is scored by absolute error, and on a scope of few jobs the most likely next hours bring no
change, which the median keeps and the mean does not.

Everything is computed per origin ``t`` from what was known at ``t``: a job enters once it has
started (``start_ts <= t``), its end counts only once it is past (``end_ts <= t``; a later end
is unknown, the job is running and censored at its age), starts after ``t`` are unknown, and
the queue is the jobs submitted by ``t`` and not started by ``t``. So
:meth:`JobReleaseModel.fit` only takes the jobs in; each forecast estimates its survival
curves, rates and queue anew from the jobs as they were at its origin.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.linalg import toeplitz

from prism.errors import ConfigError, DataContractError, NotFittedError

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
Arrivals = Literal["auto", "daily", "recent", "queue", "none"]
Point = Literal["mean", "end"]
Estimate = Literal["mean", "median"]

DAY_S = 86_400.0
_JOB_COLUMNS = ("num_gpus", "start_ts", "end_ts")


@dataclass(frozen=True)
class SurvivalCurve:
    """A Kaplan–Meier survival curve, ``S(x) = P(duration > x)``, right-continuous.

    Attributes:
        times: the distinct durations at which at least one job ended, ascending (seconds).
        survival: ``S`` just after each of ``times`` (non-increasing, in [0, 1]).
        n: how many jobs (ended or censored) it was estimated from.
    """

    times: FloatArray
    survival: FloatArray
    n: int

    def __call__(self, x: npt.ArrayLike) -> FloatArray:
        """``S(x)`` at durations ``x`` (any shape): 1 before the first end, flat after the last
        observed time (the curve says nothing beyond it, so it holds its last value)."""
        idx = np.searchsorted(self.times, np.asarray(x, dtype=np.float64), side="right")
        return np.concatenate(([1.0], self.survival))[idx]


def kaplan_meier(durations: npt.ArrayLike, observed: npt.ArrayLike) -> SurvivalCurve:
    """The Kaplan–Meier estimate of the survival function of durations.

    ``S(x) = prod over end times t_i <= x of (1 - d_i / n_i)``, ``d_i`` the jobs that ended at
    ``t_i`` and ``n_i`` those with a duration (ended or censored) of at least ``t_i``: a job
    censored at ``t_i`` is still at risk at ``t_i`` (ends come before censoring at ties).

    Args:
        durations: seconds each job ran (until its end, or until it was last seen running).
        observed: ``True`` where the job's end was seen, ``False`` where it is censored.

    Returns:
        The curve (``S = 1`` everywhere when nothing ended).

    Raises:
        DataContractError: for arrays of different lengths, or a negative or non-finite
            duration.
    """
    d = np.asarray(durations, dtype=np.float64).ravel()
    e = np.asarray(observed, dtype=bool).ravel()
    if d.shape != e.shape:
        raise DataContractError(
            f"kaplan_meier needs one observed flag per duration; got {d.size} durations and "
            f"{e.size} flags"
        )
    if d.size and (not np.isfinite(d).all() or d.min() < 0):
        raise DataContractError(
            "kaplan_meier durations must be finite and >= 0; drop jobs without a start or "
            "with an end before their start"
        )
    if not e.any():
        return SurvivalCurve(np.empty(0), np.empty(0), int(d.size))
    order = np.argsort(d, kind="stable")
    d, e = d[order], e[order]
    times, first = np.unique(d, return_index=True)
    at_risk = (d.size - first).astype(np.float64)
    ended = np.add.reduceat(e.astype(np.float64), first)
    keep = ended > 0
    survival = np.cumprod(1.0 - ended[keep] / at_risk[keep]).astype(np.float64)
    return SurvivalCurve(times[keep], survival, int(d.size))


@dataclass(frozen=True)
class ShrunkSurvival:
    """A survival curve shrunk towards its parents: ``S(x) = sum w_i S_i(x)``.

    Attributes:
        weights: the weight of each curve (they sum to 1).
        curves: the curves, from the most specific (scope and size) to the most general.
    """

    weights: tuple[float, ...]
    curves: tuple[SurvivalCurve, ...]

    def __call__(self, x: npt.ArrayLike) -> FloatArray:
        """``S(x)`` at durations ``x`` (any shape)."""
        xs = np.asarray(x, dtype=np.float64)
        out = np.zeros(xs.shape)
        for w, curve in zip(self.weights, self.curves, strict=True):
            if w > 0:
                out += w * curve(xs)
        return out

    def inverse(self, levels: npt.ArrayLike) -> FloatArray:
        """The smallest duration ``x`` with ``S(x) <= level`` (``inf`` where ``S`` stays above
        it): a duration drawn with ``S(D) = U``, ``U`` uniform, is ``inverse(U)``."""
        grid = np.unique(np.concatenate(
            [c.times for w, c in zip(self.weights, self.curves, strict=True) if w > 0]
            + [np.empty(0)]))
        q = np.asarray(levels, dtype=np.float64)
        # S is non-increasing on the grid of every component's end times: -S is sorted
        idx = np.searchsorted(-self(grid), -q, side="left")
        return np.concatenate((grid, [np.inf]))[idx]


@dataclass(frozen=True)
class _Jobs:
    """The jobs the model uses, as arrays of seconds since the epoch (NaN: unknown)."""

    gpus: FloatArray
    start: FloatArray
    end: FloatArray
    size: npt.NDArray[np.int64]  # size class index
    submit: FloatArray

    def known_at(self, t: float) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """``(started, running)`` masks at ``t``: started by ``t``, and not ended by ``t``."""
        started = self.start <= t  # NaN compares False: never started
        ended = started & (self.end <= t)
        return started, started & ~ended


class JobReleaseModel:
    """Forecast GPUs in use from the jobs: survival of the running ones plus arrivals.

    Args:
        size_edges: upper GPU counts of the size classes but the last: ``(1, 8)`` makes
            ``<= 1`` (fractional GPUs too), ``(1, 8]`` and ``> 8``. Durations differ most
            between small and large jobs, so each class has its own survival curve.
        shrinkage: pseudo-jobs of the parent curve mixed into a curve of ``n`` jobs
            (``n S + m S_parent) / (n + m)``: a class of a few jobs takes the cluster's curve
            of the class, which takes the cluster's curve of all sizes. 0 turns it off.
        arrivals: ``daily`` (the GPUs started in the same bucket of the day over the last
            ``arrival_days`` days), ``recent`` (the mean per bucket over the last
            ``recent_window``), ``queue`` (the jobs waiting at the origin and those submitted
            after it, at the daily rate of submissions, start as soon as the GPUs the running
            jobs release leave room under the capacity: for VCs that run full), ``none``
            (release only) or ``auto`` (``queue`` at an origin where jobs wait for room,
            ``daily`` elsewhere).
        arrival_days: days averaged by ``daily``.
        recent_window: seconds averaged by ``recent`` (also ``daily``'s fallback when no whole
            earlier day was observed).
        point: ``mean`` forecasts each bucket's time-weighted mean (what ``gpus_in_use``
            measures), ``end`` the GPUs in use at each bucket's end.
        sub_steps: instants averaged per bucket by ``point="mean"`` (at their midpoints).
        lookback: seconds of job history the survival curves use (``None``: all of it);
            shorter follows changes of the workload, longer is steadier.
        estimate: ``mean``, the expected GPUs in use (exact, from the curves and rates), or
            ``median``, the median over ``n_samples`` simulated futures. The median is what
            minimises the absolute error: on a scope of a few jobs, where the next hour most
            likely brings no end and no start, it stays at the running GPUs while the mean
            already slides towards the expected releases.
        n_samples: futures simulated by ``median`` and :meth:`forecast_quantiles`.
        random_state: seed of the simulation (each origin draws from its own stream, so a
            forecast does not depend on which other origins are asked for).
        cap: never forecast more GPUs than the scope held at once before the origin (its
            capacity, as far as the jobs show; each simulated future is capped likewise).

    Attributes:
        freq_s_: bucket length in seconds, from :meth:`fit`.
        observed_from_: the first instant the job history covers (arrivals look no earlier).
    """

    def __init__(
        self,
        *,
        size_edges: Sequence[float] = (1.0, 8.0),
        shrinkage: float = 50.0,
        arrivals: Arrivals = "auto",
        arrival_days: int = 7,
        recent_window: float = 6 * 3600.0,
        point: Point = "mean",
        sub_steps: int = 4,
        lookback: float | None = None,
        estimate: Estimate = "median",
        n_samples: int = 200,
        random_state: int | None = 0,
        cap: bool = True,
    ) -> None:
        self.size_edges = size_edges
        self.shrinkage = shrinkage
        self.arrivals = arrivals
        self.arrival_days = arrival_days
        self.recent_window = recent_window
        self.point = point
        self.sub_steps = sub_steps
        self.lookback = lookback
        self.estimate = estimate
        self.n_samples = n_samples
        self.random_state = random_state
        self.cap = cap

    # -- public -------------------------------------------------------------------------------
    def fit(
        self,
        jobs: pd.DataFrame,
        freq_s: float,
        *,
        reference: pd.DataFrame | None = None,
        observed_from: pd.Timestamp | None = None,
    ) -> JobReleaseModel:
        """Take in the jobs of the scope forecast (and of the cluster, to shrink towards).

        Nothing is estimated here: survival curves and arrival rates depend on the origin and
        are estimated from the jobs known at each origin by :meth:`forecast`. Jobs that never
        started, or ended at or before their start, never hold a GPU and are dropped.

        Args:
            jobs: ``num_gpus, start_ts, end_ts`` and, for the queue, ``submit_ts`` (e.g.
                :meth:`prism.store.Store.load_jobs`); ``end_ts`` NaT for a job still running,
                ``start_ts`` NaT for one that has not started.
            freq_s: bucket length in seconds (the series' step).
            reference: the cluster's jobs (same columns), whose curves the scope's shrink
                towards; ``None`` shrinks towards the scope's own curve of all sizes.
            observed_from: the first instant the history covers (UTC, naive); ``None``
                takes the first start. Arrival rates never average days before it.

        Returns:
            The model.

        Raises:
            DataContractError: for missing columns (``submit_ts`` with ``arrivals="queue"``)
                or negative GPU counts.
            ConfigError: for a bad hyperparameter or ``freq_s``.
        """
        self._check_params()
        if not freq_s > 0:
            raise ConfigError(f"freq_s must be a positive number of seconds, got {freq_s!r}")
        self.freq_s_ = float(freq_s)
        self.jobs_ = self._prepare(jobs, "jobs")
        self.reference_ = self._prepare(reference, "reference") if reference is not None else None
        if self.arrivals == "queue" and "submit_ts" not in jobs.columns:
            raise DataContractError("arrivals='queue' needs the jobs' submit_ts")
        self.queue_ = self._prepare(jobs, "jobs", queue=True)
        if observed_from is not None:
            self.observed_from_ = _seconds(pd.Series([observed_from]))[0]
        else:
            starts = self.jobs_.start
            self.observed_from_ = float(starts.min()) if starts.size else 0.0
        return self

    def nowcast(self, origins: Sequence[pd.Timestamp] | pd.Series) -> FloatArray:
        """GPUs held at each origin by the jobs running then (known exactly at the origin).

        Args:
            origins: the instants (UTC, naive).

        Returns:
            One value per origin.
        """
        jobs = self._fitted()
        out = np.empty(len(origins))
        for i, t in enumerate(_seconds(pd.Series(origins))):
            _, running = jobs.known_at(t)
            out[i] = jobs.gpus[running].sum()
        return out

    def forecast(self, origins: Sequence[pd.Timestamp] | pd.Series, steps: int) -> FloatArray:
        """GPUs in use over the ``steps`` buckets after each origin (the median of the
        simulated futures, or with ``estimate="mean"`` their expectation).

        Bucket ``k`` (1-based) spans ``(t + (k - 1) f, t + k f]``; with ``point="mean"`` its
        value is the bucket's mean, with ``"end"`` the value at its end.

        Args:
            origins: the instants forecast from (UTC, naive); only what was known at each is
                used. For a series cutoff ``c`` (the label of the last bucket seen), the origin
                is ``c + f``, the end of that bucket.
            steps: buckets ahead.

        Returns:
            ``(len(origins), steps)`` array: release plus arrivals.
        """
        if self.estimate == "median":
            return self.forecast_quantiles(origins, steps, [0.5])[:, :, 0]
        jobs = self._fitted()
        steps = _check_steps(steps)
        offsets = self._offsets(steps)
        times = _seconds(pd.Series(origins))
        out = np.zeros((len(times), steps))
        for i, t in enumerate(times):
            release, arrivals = self._expected(jobs, self._curves(t), t, offsets)
            out[i] = self._to_buckets(self._capped(jobs, t, release + arrivals), steps)
        return out

    def forecast_quantiles(
        self, origins: Sequence[pd.Timestamp] | pd.Series, steps: int,
        levels: Sequence[float],
    ) -> FloatArray:
        """Quantiles of the GPUs in use over the ``steps`` buckets after each origin, from
        ``n_samples`` simulated futures: each running job ends after a remaining time drawn
        from its conditional survival, and jobs start in each bucket as a Poisson count at
        the arrival rate of their size class, with sizes drawn from the class's starts of
        the last ``arrival_days`` days and durations from its curve (with ``arrivals="queue"``,
        the queue's fluid drains into each future's room instead).

        Args:
            origins: as in :meth:`forecast`.
            steps: buckets ahead.
            levels: quantile levels in (0, 1).

        Returns:
            ``(len(origins), steps, len(levels))`` array.

        Raises:
            ConfigError: for ``steps < 1`` or a level outside (0, 1).
        """
        jobs = self._fitted()
        steps = _check_steps(steps)
        qs = np.asarray([float(q) for q in levels])
        if qs.size == 0 or not ((qs > 0) & (qs < 1)).all():
            raise ConfigError(f"levels must be in (0, 1), got {list(levels)!r}")
        offsets = self._offsets(steps)
        times = _seconds(pd.Series(origins))
        out = np.zeros((len(times), steps, qs.size))
        for i, t in enumerate(times):
            seed = None if self.random_state is None else [int(self.random_state),
                                                           int(np.floor(t))]
            paths = self._simulate(jobs, self._curves(t), t, offsets,
                                   np.random.default_rng(seed))
            buckets = self._to_buckets(self._capped(jobs, t, paths), steps)
            out[i] = np.quantile(buckets, qs, axis=0).T
        return out

    def forecast_parts(
        self, origins: Sequence[pd.Timestamp] | pd.Series, steps: int
    ) -> tuple[FloatArray, FloatArray]:
        """The two parts of the expected GPUs in use (:meth:`forecast` with
        ``estimate="mean"``): the GPUs of the jobs running at each origin that are still held,
        and those of jobs started after it.

        Returns:
            ``(release, arrivals)``, each ``(len(origins), steps)``.

        Raises:
            ConfigError: for ``steps < 1``.
        """
        jobs = self._fitted()
        steps = _check_steps(steps)
        offsets = self._offsets(steps)
        times = _seconds(pd.Series(origins))
        release = np.zeros((len(times), steps))
        arrivals = np.zeros((len(times), steps))
        for i, t in enumerate(times):
            curves = self._curves(t)
            r, a = self._expected(jobs, curves, t, offsets)
            release[i] = self._to_buckets(r, steps)
            arrivals[i] = self._to_buckets(a, steps)
        return release, arrivals

    def survival_at(self, origin: pd.Timestamp) -> list[ShrunkSurvival]:
        """The (shrunk) survival curve of each size class, as estimated at ``origin``."""
        self._fitted()
        return self._curves(_seconds(pd.Series([origin]))[0])

    # -- internals ----------------------------------------------------------------------------
    def _check_params(self) -> None:
        edges = [float(e) for e in self.size_edges]
        if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ConfigError(f"size_edges must increase, got {self.size_edges!r}")
        if self.shrinkage < 0:
            raise ConfigError(f"shrinkage must be >= 0, got {self.shrinkage!r}")
        if self.arrivals not in ("auto", "daily", "recent", "queue", "none"):
            raise ConfigError(f"arrivals must be 'auto', 'daily', 'recent', 'queue' or "
                              f"'none', got {self.arrivals!r}")
        if self.point not in ("mean", "end"):
            raise ConfigError(f"point must be 'mean' or 'end', got {self.point!r}")
        if self.arrival_days < 1 or self.sub_steps < 1 or not self.recent_window > 0:
            raise ConfigError("arrival_days and sub_steps must be >= 1 and recent_window > 0")
        if self.estimate not in ("mean", "median"):
            raise ConfigError(f"estimate must be 'mean' or 'median', got {self.estimate!r}")
        if self.n_samples < 1:
            raise ConfigError(f"n_samples must be >= 1, got {self.n_samples!r}")
        if self.lookback is not None and not self.lookback > 0:
            raise ConfigError(f"lookback must be > 0 seconds or None, got {self.lookback!r}")

    def _prepare(self, frame: pd.DataFrame, name: str, *, queue: bool = False) -> _Jobs:
        missing = [c for c in _JOB_COLUMNS if c not in frame.columns]
        if missing:
            raise DataContractError(
                f"{name} needs columns {list(_JOB_COLUMNS)}; missing {missing} (read them with "
                "Store.load_jobs)"
            )
        gpus = frame["num_gpus"].to_numpy(np.float64)
        if np.nanmin(gpus, initial=0.0) < 0:
            raise DataContractError(f"{name} has negative num_gpus; fix the jobs table")
        start = _seconds(frame["start_ts"])
        end = _seconds(frame["end_ts"])
        submit = (_seconds(frame["submit_ts"]) if "submit_ts" in frame.columns
                  else np.full(len(frame), np.nan))
        edges = np.asarray([float(e) for e in self.size_edges])
        size = np.searchsorted(edges, gpus, side="left").astype(np.int64)
        if queue:  # every job that was submitted: it may still be waiting
            keep = ~np.isnan(submit) & ~np.isnan(gpus)
        else:  # a job that never started, or ended by its start, holds nothing
            keep = ~np.isnan(start) & ~np.isnan(gpus) & ~(end <= start)
        # one order for the same jobs however the frame was sorted or masked (Store.load_jobs
        # with `until`): sums and random draws then repeat exactly
        idx = np.flatnonzero(keep)
        idx = idx[np.lexsort((gpus[idx], (submit if queue else start)[idx]))]
        return _Jobs(gpus[idx], start[idx], end[idx], size[idx], submit[idx])

    def _fitted(self) -> _Jobs:
        if not hasattr(self, "jobs_"):
            raise NotFittedError("JobReleaseModel: call fit(jobs, freq_s) before forecasting")
        return self.jobs_

    def _offsets(self, steps: int) -> FloatArray:
        """Seconds after the origin at which the expectation is evaluated, per bucket."""
        f = self.freq_s_
        k = np.arange(steps, dtype=np.float64)
        if self.point == "end":
            return (k + 1) * f
        within = (np.arange(self.sub_steps) + 0.5) / self.sub_steps
        return ((k[:, None] + within[None, :]) * f).ravel()

    def _to_buckets(self, values: FloatArray, steps: int) -> FloatArray:
        """Values at the offsets (last axis) -> one per bucket."""
        if self.point == "end":
            return values
        return values.reshape(*values.shape[:-1], steps, self.sub_steps).mean(axis=-1)

    def _capped(self, jobs: _Jobs, t: float, values: FloatArray) -> FloatArray:
        """``values`` capped at the most GPUs the scope held at once up to ``t`` (its
        capacity as far as the jobs show): a full VC queues new jobs instead of running them,
        which the arrival rates alone do not know."""
        if not self.cap:
            return values
        started, running = jobs.known_at(t)
        ended = started & ~running
        when = np.concatenate((jobs.start[started], jobs.end[ended]))
        step = np.concatenate((jobs.gpus[started], -jobs.gpus[ended]))
        # at equal times the end comes first: a job holds its GPUs over [start, end)
        order = np.lexsort((step, when))
        peak = float(np.max(np.cumsum(step[order]), initial=0.0))
        return np.minimum(values, peak)

    def _durations(self, jobs: _Jobs, t: float) -> tuple[FloatArray, FloatArray,
                                                        npt.NDArray[np.bool_],
                                                        npt.NDArray[np.int64]]:
        """``(durations, GPUs, observed, size)`` of the jobs known at ``t`` (censored at their
        age when still running), within the lookback."""
        started, running = jobs.known_at(t)
        if self.lookback is not None:
            started &= jobs.start >= t - self.lookback
        ended = started & ~running
        dur = np.where(ended, jobs.end, t) - jobs.start
        return dur[started], jobs.gpus[started], ended[started], jobs.size[started]

    def _curves(self, t: float) -> list[ShrunkSurvival]:
        """Each size class's survival curve at ``t``, shrunk: scope class -> parent class ->
        parent of all sizes (parent: the reference when given, else the scope itself)."""
        jobs = self._fitted()
        dur, _, obs, size = self._durations(jobs, t)
        parent = self.reference_ if self.reference_ is not None else jobs
        pdur, _, pobs, psize = self._durations(parent, t)
        pooled = kaplan_meier(pdur, pobs)
        m = float(self.shrinkage)
        out = []
        for c in range(len(self.size_edges) + 1):
            pc = psize == c
            parent_c = kaplan_meier(pdur[pc], pobs[pc]) if self.reference_ is not None else None
            own = kaplan_meier(dur[size == c], obs[size == c])
            # the parent of the class: the cluster's class curve shrunk to its pooled curve
            chain = [own] + ([parent_c] if parent_c is not None else []) + [pooled]
            out.append(_shrink(chain, m))
        return out

    def _expected(
        self, jobs: _Jobs, curves: list[ShrunkSurvival], t: float, offsets: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """Expected GPUs at ``t + offsets``: of the jobs running at ``t``, and of arrivals."""
        _, running = jobs.known_at(t)
        mode = self._mode(jobs, t)
        release = np.zeros(offsets.size)
        arrivals = np.zeros(offsets.size)
        for c, curve in enumerate(curves):
            mine = running & (jobs.size == c)
            if mine.any():
                age = t - jobs.start[mine]
                now = curve(age)
                later = curve(age[:, None] + offsets[None, :])
                # a job older than every observed duration of its curve (possible with a
                # lookback) has no estimate: it holds, as the last value would
                ratio = np.divide(later, now[:, None], out=np.ones_like(later),
                                  where=now[:, None] > 0)
                release += jobs.gpus[mine] @ np.minimum(ratio, 1.0)
            if mode in ("daily", "recent"):
                rates = self._rates(jobs, c, t, int(np.ceil(offsets.max() / self.freq_s_)))
                arrivals += self._arrived(rates, curve, offsets)
        if mode == "queue":
            arrivals = self._queued(jobs, curves, t, offsets, release)
        return release, arrivals

    def _waiting(self, jobs: _Jobs, t: float) -> tuple[float, float]:
        """``(GPUs waiting for room at t, capacity)``: the capacity is the peak held so far
        (``inf`` without ``cap``)."""
        queue = self.queue_
        capacity = float(self._capped(jobs, t, np.array([np.inf]))[0]) if self.cap else np.inf
        submitted = queue.submit <= t
        started = queue.start <= t
        waits = queue.start[started & submitted] - queue.submit[started & submitted]
        # a job waiting longer than nearly every job ever waited is stuck (unschedulable,
        # forgotten): it will not start when room appears
        stale = float(np.quantile(waits, 0.99)) if waits.size else 0.0
        waiting = submitted & ~started & ~(queue.end <= t) & (t - queue.submit <= stale)
        # GPUs waiting although the room at t could take them wait for something else (a GPU
        # model, a node that fits, a quota) that room will not cure: only those beyond the
        # room wait for room
        room_now = capacity - float(jobs.gpus[jobs.known_at(t)[1]].sum())
        return max(0.0, float(queue.gpus[waiting].sum()) - max(room_now, 0.0)), capacity

    def _mode(self, jobs: _Jobs, t: float) -> str:
        """The arrivals model at ``t``: ``auto`` is ``queue`` while jobs wait for room (the
        scope runs full), else ``daily``."""
        if self.arrivals != "auto":
            return str(self.arrivals)
        return "queue" if self._waiting(jobs, t)[0] > 0 else "daily"

    def _queued(self, jobs: _Jobs, curves: list[ShrunkSurvival], t: float,
                offsets: FloatArray, release: FloatArray,
                rng: np.random.Generator | None = None) -> FloatArray:
        """GPUs at the offsets of the jobs that start after ``t`` when they start
        as soon as there is room: a fluid queue, fed by the jobs waiting at ``t`` and new
        submissions, drained into the room the releases leave under the capacity (the peak
        held so far). The started GPUs survive with the size classes' curves, mixed by the
        classes' share of the GPUs submitted over the last ``arrival_days`` days."""
        queue = self.queue_
        f = self.freq_s_
        pending, capacity = self._waiting(jobs, t)
        submitted = queue.submit <= t
        recent = submitted & (queue.submit > t - self.arrival_days * DAY_S)
        n = int(np.ceil(offsets.max() / f))
        if rng is None:  # the expected GPUs submitted per bucket
            per_bucket = self._profile(queue.submit[submitted], queue.gpus[submitted], t, n,
                                       False)
        else:  # each future draws its submissions: a Poisson count of recent sizes
            lam = self._profile(queue.submit[submitted], np.ones(int(submitted.sum())), t, n,
                                False)
            n_s = release.shape[0]
            counts = rng.poisson(lam[None, :], size=(n_s, n)).ravel()
            sizes = queue.gpus[recent] if recent.any() else queue.gpus[submitted]
            drawn = rng.choice(sizes, int(counts.sum())) if sizes.size else np.zeros(0)
            cell = np.repeat(np.arange(n_s * n), counts)
            per_bucket = np.bincount(cell, weights=drawn, minlength=n_s * n).astype(
                np.float64).reshape(n_s, n)
        # the submissions up to each offset, spread evenly over their bucket
        lo = np.arange(n, dtype=np.float64) * f
        share = np.clip(np.minimum(lo[None, :] + f, offsets[:, None]) - lo[None, :], 0.0, f) / f
        supply = pending + per_bucket @ share.T
        by_class = np.bincount(queue.size[recent], weights=queue.gpus[recent],
                               minlength=len(curves))
        mix = by_class / by_class.sum() if by_class.sum() > 0 else np.full(
            len(curves), 1.0 / len(curves))
        alive = _alive_after(offsets, mix, curves)
        # vectorised over the leading axes of `release` (the simulated futures, if any)
        starts = np.zeros(release.shape)
        held = np.zeros(release.shape)
        so_far = np.zeros(release.shape[:-1])  # GPUs started before offset j
        for j in range(offsets.size):
            still = starts[..., :j] @ alive[j, :j]
            room = capacity - release[..., j] - still
            starts[..., j] = np.maximum(0.0, np.minimum(room, supply[..., j] - so_far))
            so_far = so_far + starts[..., j]
            held[..., j] = still + starts[..., j]
        return held

    def _rates(self, jobs: _Jobs, c: int, t: float, n: int, *, count: bool = False
               ) -> FloatArray:
        """GPUs (or with ``count``, jobs) of class ``c`` expected to start in each of the ``n``
        buckets after ``t``."""
        mine = (jobs.size == c) & (jobs.start <= t)
        weight = np.ones(int(mine.sum())) if count else jobs.gpus[mine]
        return self._profile(jobs.start[mine], weight, t, n, self.arrivals == "recent")

    def _profile(self, times: FloatArray, weight: FloatArray, t: float, n: int,
                 recent_only: bool) -> FloatArray:
        """The sum of ``weight`` expected per bucket in the ``n`` buckets after ``t``, from
        the events at ``times`` (all ``<= t``): the same bucket of the day averaged over the
        last ``arrival_days`` days, or (``recent_only``) the rate of the recent window."""
        f = self.freq_s_
        order = np.argsort(times, kind="stable")
        starts = times[order]
        cum = np.concatenate(([0.0], np.cumsum(weight[order])))

        def started(a: FloatArray, b: FloatArray) -> FloatArray:
            """The weight of the events in ``(a, b]``."""
            return cum[np.searchsorted(starts, b, side="right")] - cum[
                np.searchsorted(starts, a, side="right")]

        window = min(self.recent_window, t - self.observed_from_)
        recent = float(started(np.array([t - window]), np.array([t]))[0]) * f / window \
            if window > 0 else 0.0
        if recent_only:
            return np.full(n, recent)
        # bucket u of the same time of day on the arrival_days latest whole days whose bucket
        # is past (u f <= d DAY) and observed (after observed_from_)
        u = np.arange(1, n + 1, dtype=np.float64)
        first_day = np.maximum(1.0, np.ceil(u * f / DAY_S))
        days = first_day[:, None] + np.arange(self.arrival_days)[None, :]
        lo = t - days * DAY_S + (u[:, None] - 1) * f
        valid = lo >= self.observed_from_
        amount = np.where(valid, started(lo, lo + f), 0.0)
        count = valid.sum(axis=1)
        return np.where(count > 0, amount.sum(axis=1) / np.maximum(count, 1), recent)

    def _arrived(self, rates: FloatArray, curve: ShrunkSurvival, offsets: FloatArray) -> FloatArray:
        """Expected GPUs at each offset of jobs started after the origin at ``rates`` per
        bucket, spread evenly over each bucket (the share of a bucket before the offset, at its
        midpoint)."""
        f = self.freq_s_
        lo = np.arange(rates.size, dtype=np.float64) * f
        length = np.clip(np.minimum(lo[None, :] + f, offsets[:, None]) - lo[None, :], 0.0, f)
        age = offsets[:, None] - (lo[None, :] + length / 2)
        alive = np.where(length > 0, curve(np.maximum(age, 0.0)), 0.0)
        return (alive * (length / f)) @ rates


    def _simulate(
        self, jobs: _Jobs, curves: list[ShrunkSurvival], t: float, offsets: FloatArray,
        rng: np.random.Generator,
    ) -> FloatArray:
        """``(n_samples, offsets)`` simulated GPUs in use at ``t + offsets``."""
        n_s, f, horizon = int(self.n_samples), self.freq_s_, float(offsets.max())
        _, running = jobs.known_at(t)
        mode = self._mode(jobs, t)
        sample: list[npt.NDArray[np.int64]] = []
        when: list[FloatArray] = []
        delta: list[FloatArray] = []

        def add(s: npt.NDArray[np.int64], x: FloatArray, d: FloatArray) -> None:
            keep = x <= horizon  # events after the last offset change nothing
            sample.append(s[keep])
            when.append(x[keep])
            delta.append(d[keep])

        for c, curve in enumerate(curves):
            mine = running & (jobs.size == c)
            if mine.any():
                age, g = t - jobs.start[mine], jobs.gpus[mine]
                now = curve(age)
                # the end, drawn given that the job has run `age`: S(D) = U S(age)
                dur = curve.inverse(rng.random((n_s, age.size)) * now[None, :])
                rest = np.where(now[None, :] > 0, dur - age[None, :], np.inf)
                add(np.repeat(np.arange(n_s), age.size), rest.ravel(),
                    -np.tile(g, n_s))
            if mode in ("none", "queue"):
                continue
            recent = (jobs.size == c) & (jobs.start <= t) & (
                jobs.start > t - self.arrival_days * DAY_S)
            sizes = jobs.gpus[recent] if recent.any() else jobs.gpus[
                (jobs.size == c) & (jobs.start <= t)]
            if sizes.size == 0:
                continue
            lam = self._rates(jobs, c, t, int(np.ceil(horizon / f)), count=True)
            counts = rng.poisson(lam[None, :], size=(n_s, lam.size)).ravel()
            who = np.repeat(np.repeat(np.arange(n_s), lam.size), counts)
            start = (np.repeat(np.tile(np.arange(lam.size), n_s), counts)
                     + rng.random(who.size)) * f
            size = rng.choice(sizes, who.size)
            end = start + curve.inverse(rng.random(who.size))
            add(who, start, size)
            add(who, end, -size)
        base = float(jobs.gpus[running].sum())
        if not sample:
            paths = np.full((n_s, offsets.size), base)
            return paths + self._queued(jobs, curves, t, offsets, paths, rng) if (
                mode == "queue") else paths
        # all samples' events on one line, sample s at [s span, (s + 1) span): one sort and one
        # cumulative sum give every sample's running total
        span = horizon + f
        key = np.concatenate(sample) * span + np.concatenate(when)
        order = np.argsort(key, kind="stable")
        key = key[order]
        cum = np.concatenate(([0.0], np.cumsum(np.concatenate(delta)[order])))
        first = np.searchsorted(key, np.arange(n_s) * span, side="left")
        upto = np.searchsorted(key, np.arange(n_s)[:, None] * span + offsets[None, :],
                               side="right")
        paths = base + cum[upto] - cum[first][:, None]
        if mode == "queue":  # each future's releases make room for the queue
            paths = paths + self._queued(jobs, curves, t, offsets, paths, rng)
        return paths


def _check_steps(steps: int) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
        raise ConfigError(f"steps must be a whole number >= 1, got {steps!r}")
    return int(steps)


def _alive_after(offsets: FloatArray, mix: FloatArray,
                 curves: list[ShrunkSurvival]) -> FloatArray:
    """``(offsets, offsets)``: row ``i``, column ``j <= i``: the share of the GPUs started at
    offset ``j`` still running at offset ``i`` (the size classes' curves mixed by ``mix``);
    0 above the diagonal.

    The offsets are evenly spaced (:meth:`JobReleaseModel._offsets`), so an entry depends on
    ``i - j`` alone: the curves are read once per lag, not once per entry (on a generated trace's
    VCs, 576 offsets a day ahead, that was 330,000 reads per class and call and 80 % of a
    stacked fit's time). Uneven offsets take every entry."""
    def mixed(age: FloatArray) -> FloatArray:
        return np.asarray(sum(w * curve(age) for w, curve in zip(mix, curves, strict=True)),
                          dtype=np.float64)

    gaps = np.diff(offsets)
    if offsets.size > 1 and np.all(gaps == gaps[0]):
        per_lag = mixed(offsets - offsets[0])
        first_row = np.zeros(offsets.size)
        first_row[0] = per_lag[0]
        return np.asarray(toeplitz(per_lag, first_row), dtype=np.float64)
    return np.tril(mixed(np.maximum(offsets[:, None] - offsets[None, :], 0.0)))


def _shrink(chain: list[SurvivalCurve], m: float) -> ShrunkSurvival:
    """Shrink each curve of ``chain`` (specific to general) towards the next one:
    ``S = (n S_own + m S_parent) / (n + m)``, the last curve unshrunk."""
    weights = [0.0] * len(chain)
    carry = 1.0
    for i, curve in enumerate(chain):
        last = i == len(chain) - 1
        # a curve of no jobs says nothing (S = 1): all its weight goes to the parent
        own = 1.0 if last else (curve.n / (curve.n + m) if curve.n > 0 else 0.0)
        weights[i] = carry * own
        carry *= 1.0 - own
    return ShrunkSurvival(tuple(weights), tuple(chain))


def _seconds(values: pd.Series) -> FloatArray:
    """Seconds since the epoch of naive UTC times (NaN for NaT)."""
    ts = pd.to_datetime(values).astype("datetime64[ns]")
    out = ts.to_numpy().astype("datetime64[ns]").astype(np.int64).astype(np.float64) / 1e9
    out[ts.isna().to_numpy()] = np.nan
    return out
