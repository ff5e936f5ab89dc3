"""Synthetic GPU-cluster job traces with the shape of real ones (Helios, Philly, Alibaba PAI).

:func:`generate_trace` writes ``jobs.csv`` (or ``jobs.parquet``) with the canonical job columns
that the ``jobs-csv`` ingest reads, and ``capacity.csv`` with the GPUs of every virtual cluster
(VC). The model, per cluster:

- **VCs.** 4-8 VCs per cluster (scopes ``vc-xxx``, unique over the whole trace), each tied to one
  GPU type drawn from a per-cluster mix of 1-3 types, with an uneven share of the arrivals.
- **Arrivals.** A non-homogeneous Poisson process per VC, piecewise constant over 5-minute bins:
  a diurnal cycle peaking in local working hours (each cluster has a time zone, each VC its own
  amplitude and phase), a weekend dip, a slow trend, day-to-day log-AR(1) noise and *deadline
  surges*: a few multi-day ramps where one VC's rate rises 2-4-fold up to a deadline and then
  drops to half for a day. Each arrival submits a batch (a sweep) of 1-16 jobs (P(k) ~ k^-2.6)
  a few seconds apart, sharing their GPU count; jobs of 16 GPUs or more come alone or in pairs.
- **Jobs.** GPU counts 1..64, mostly powers of two and about half single-GPU; larger VCs run
  larger jobs, and a job is capped at half its VC. Run times are log-normal (median minutes,
  growing with the GPU count, similar within a sweep) with a Pareto tail of jobs running hours to
  days (capped at 7 days). About 10% fail (usually early) and 8% are cancelled while running.
  Every job has a patience (log-normal, median 4 h): a job still queued after it leaves the queue
  and is ``CANCELLED`` with no start and that moment as its end.
- **Capacity and queueing.** A VC's capacity is its offered load (GPU-seconds per second over the
  trace) divided by a target utilisation of 70-90%, rounded up to whole 8-GPU nodes (16 GPUs at
  least). Each VC runs an exact event-driven simulation of a FIFO scheduler with EASY
  backfilling (the head job holds a reservation; the next 32 queued jobs may start early if they
  do not delay it; run times are known exactly). GPUs in use never exceed capacity; demand above
  it shows up as queueing at daily peaks and in surges, as in Helios, where running GPUs sit near
  capacity and the pending GPUs carry the excess.

The clusters start empty at ``start``: GPUs in use ramp up over the first day or two as long jobs
accumulate. Jobs still queued at the end have no ``start_ts``/``end_ts`` (``PENDING``), jobs still
running have no ``end_ts`` (``RUNNING``). Times are whole seconds, UTC.

The same seed gives the same bytes; each cluster draws from its own child seed, so cluster ``k``
of a trace does not depend on how many clusters follow it, and its VCs (names, GPU types, cycles)
do not depend on ``jobs_per_day``. The scheduler is a Python heap loop (about 4 microseconds a
job: 10M jobs take about a minute); everything else is vectorised numpy/pyarrow.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from prism.errors import ConfigError
from prism.schema import ALL_SCOPE

logger = logging.getLogger(__name__)

#: The columns of ``jobs.csv``, in order.
JOB_CSV_COLUMNS = (
    "job_id",
    "cluster",
    "scope",
    "gpu_type",
    "num_gpus",
    "num_cpus",
    "submit_ts",
    "start_ts",
    "end_ts",
    "status",
)
#: The columns of ``capacity.csv``, in order.
CAPACITY_CSV_COLUMNS = ("cluster", "scope", "gpus")
#: Job states, indexed by the internal status code.
STATUSES = ("COMPLETED", "FAILED", "CANCELLED", "RUNNING", "PENDING")
_COMPLETED, _FAILED, _CANCELLED, _RUNNING, _PENDING = range(5)

_DAY = 86_400
_BIN = 300  # arrival intensity is piecewise constant over 5-minute bins
_MAX_RUN = 7 * _DAY  # wall-time limit, as on most clusters
_NO_PATIENCE = np.iinfo(np.int64).max // 4
_GPU_BITS = 7  # heap keys pack (end << 7) | gpus; job sizes are capped at 64 GPUs
_GPU_MASK = (1 << _GPU_BITS) - 1
_MAX_JOBS = 2_000_000_000
_PATIENCE_MEDIAN = 4 * 3600  # how long users wait before cancelling a queued job
_BACKFILL_DEPTH = 32  # queued jobs a backfill pass looks at (Slurm: bf_max_job_test)

#: GPU types with how likely a cluster is to have them (older clusters: V100/A100; newer: H100).
_GPU_TYPES = ("A100", "H100", "V100", "L40S", "H200")
_GPU_TYPE_WEIGHTS = np.array([0.35, 0.25, 0.2, 0.12, 0.08])
#: UTC offsets (hours) clusters may sit in; working hours and weekends follow local time.
_TZ_OFFSETS = (8, 8, 0, 1, -5, -8, 9, 5.5)
#: Base probabilities of 1, 2, 4, ..., 64 GPUs (Helios: median 1, mean about 2-4).
_SIZE_PMF = np.array([0.50, 0.12, 0.11, 0.15, 0.07, 0.035, 0.015])
#: Batch (sweep) sizes 1..16 with P(k) proportional to k^-2.6: mostly single submissions.
_BATCH_PMF = np.arange(1, 17, dtype=np.float64) ** -2.6
_BATCH_PMF /= _BATCH_PMF.sum()
_BATCH_MEAN = float((np.arange(1, 17) * _BATCH_PMF).sum())
#: Jobs of 16 GPUs or more are submitted alone, or now and then as a pair.
_BIG_LEVEL = 4
_BIG_PAIR = 0.15
_SCOPE_ALPHABET = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))


@dataclass(frozen=True)
class GeneratedTrace:
    """What :func:`generate_trace` wrote.

    Attributes:
        jobs_path: ``jobs.csv`` or ``jobs.parquet``.
        capacity_path: ``capacity.csv``.
        n_jobs: rows in the jobs file.
        clusters: cluster names, ``cluster-0``, ``cluster-1``, ...
    """

    jobs_path: Path
    capacity_path: Path
    n_jobs: int
    clusters: list[str]


@dataclass(frozen=True)
class _VcModel:
    """The parameters of one VC's workload."""

    name: str
    gpu_type: str
    share: float  # share of the cluster's arrivals
    diurnal_amp: float  # log-amplitude of the 24 h harmonic
    peak_hour: float  # local hour of peak arrivals
    semi_amp: float  # log-amplitude of the 12 h harmonic (lunch/evening shape)
    semi_phase: float
    weekend: float  # weekend rate multiplier
    trend: float  # log growth of the rate over 28 days
    median_run: float  # median run time of a 1-GPU job, seconds
    size_tilt: float  # > 0 favours larger jobs
    tail_prob: float  # share of jobs in the Pareto tail of run times
    tail_alpha: float
    fail_prob: float
    cancel_prob: float
    cpus_per_gpu: int
    utilisation: float  # target mean GPU allocation

    def size_pmf(self) -> np.ndarray:
        """Probabilities of 1, 2, 4, ..., 64 GPUs (before odd sizes and the capacity cap)."""
        pmf = _SIZE_PMF * np.exp(self.size_tilt * np.arange(len(_SIZE_PMF)))
        return np.asarray(pmf / pmf.sum())

    def batch_mean(self) -> float:
        """Expected jobs per submission: large jobs come alone, small ones in sweeps."""
        big = float(self.size_pmf()[_BIG_LEVEL:].sum())
        return (1.0 - big) * _BATCH_MEAN + big * (1.0 + _BIG_PAIR)


@dataclass
class _ClusterJobs:
    """One cluster's jobs in submit order; times in seconds from the trace start."""

    vc: np.ndarray  # index into the cluster's VCs
    gpus: np.ndarray
    cpus: np.ndarray
    submit: np.ndarray
    start: np.ndarray  # -1 where the job never started
    end: np.ndarray  # -1 where the job has not ended (or never started)
    status: np.ndarray
    vcs: list[_VcModel]
    capacity: list[int]


def generate_trace(
    output: Path | str,
    *,
    days: int = 28,
    clusters: int = 2,
    seed: int = 0,
    start: str = "2026-01-05T00:00:00",
    jobs_per_day: float | None = None,
    format: Literal["csv", "parquet"] = "csv",
    progress: Callable[[int, int], None] | None = None,
) -> GeneratedTrace:
    """Write a synthetic job trace and the VC capacities to ``output``.

    Args:
        output: folder to write into; created if missing. Existing files of the same name are
            replaced.
        days: length of the submission window in days.
        clusters: number of clusters (``cluster-0`` ...), each with 4-8 VCs.
        seed: random seed; the same seed gives byte-identical files.
        start: first instant of the trace, ISO 8601; a zone suffix is converted to UTC.
        jobs_per_day: expected jobs per cluster per day (averaged over the trace, surges
            included). ``None`` draws a realistic rate per cluster, 400-2500 jobs a day; set it
            to make large traces for benchmarks (capacities scale with the load).
        format: ``csv`` writes ``jobs.csv``; ``parquet`` writes ``jobs.parquet`` with the same
            columns and rows, times as timestamps of whole seconds (Parquet's coarsest unit is
            the millisecond, so they read back as ``timestamp[ms]``).
        progress: called as ``progress(done, total)`` after each cluster and after writing.

    Returns:
        The paths written, the number of jobs and the cluster names.

    Raises:
        ConfigError: when an argument is out of range or ``start`` is not a time.
    """
    t0 = _check_arguments(days, clusters, start, jobs_per_day, format)
    out_dir = Path(output)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create output folder {str(out_dir)!r}: {exc.strerror}; "
            "pass --output a folder you can write to"
        ) from exc

    total_steps = clusters + 1
    seqs = np.random.SeedSequence(seed).spawn(clusters + 1)
    names_rng = np.random.default_rng(seqs[0])
    used_names: set[str] = set()
    cluster_names = [f"cluster-{k}" for k in range(clusters)]
    results: list[_ClusterJobs] = []
    for k in range(clusters):
        rng = np.random.default_rng(seqs[k + 1])
        # Drawn even when jobs_per_day is given, so that a cluster's VCs do not depend on it.
        rate = float(np.exp(rng.uniform(np.log(400.0), np.log(2500.0))))
        if jobs_per_day is not None:
            rate = float(jobs_per_day)
        jobs = _generate_cluster(rng, names_rng, used_names, t0=t0, days=days, jobs_per_day=rate)
        logger.debug("cluster-%d: %d jobs, %d VCs", k, len(jobs.submit), len(jobs.vcs))
        results.append(jobs)
        if progress is not None:
            progress(k + 1, total_steps)

    table = _jobs_table(results, cluster_names, t0)
    jobs_path = out_dir / ("jobs.parquet" if format == "parquet" else "jobs.csv")
    if format == "parquet":
        pq.write_table(table, jobs_path, compression="zstd")
    else:
        _write_csv(table, jobs_path)
    capacity_path = out_dir / "capacity.csv"
    _write_capacity(results, cluster_names, capacity_path)
    if progress is not None:
        progress(total_steps, total_steps)
    logger.info("wrote %d jobs of %d clusters to %s", table.num_rows, clusters, jobs_path)
    return GeneratedTrace(
        jobs_path=jobs_path,
        capacity_path=capacity_path,
        n_jobs=table.num_rows,
        clusters=cluster_names,
    )


def _check_arguments(
    days: int, clusters: int, start: str, jobs_per_day: float | None, format: str
) -> int:
    """Validate the arguments; return the start as seconds since the Unix epoch."""
    if isinstance(days, bool) or not isinstance(days, int | np.integer) or days < 1:
        raise ConfigError(f"days must be a whole number >= 1 (got {days!r}); e.g. --days 28")
    if isinstance(clusters, bool) or not isinstance(clusters, int | np.integer) or clusters < 1:
        raise ConfigError(
            f"clusters must be a whole number >= 1 (got {clusters!r}); e.g. --clusters 2"
        )
    if jobs_per_day is not None:
        if not np.isfinite(jobs_per_day) or jobs_per_day <= 0:
            raise ConfigError(
                f"jobs_per_day must be a positive number (got {jobs_per_day!r}); "
                "leave it unset for the realistic default of 400-2500 jobs per cluster per day"
            )
        if jobs_per_day * days * clusters > _MAX_JOBS:
            raise ConfigError(
                f"{jobs_per_day:g} jobs a day x {days} days x {clusters} clusters is more than "
                f"{_MAX_JOBS:,} jobs; lower jobs_per_day, days or clusters"
            )
    if format not in ("csv", "parquet"):
        raise ConfigError(f"format must be 'csv' or 'parquet' (got {format!r})")
    return int(parse_start(start).value // 1_000_000_000)


def parse_start(start: str) -> pd.Timestamp:
    """A generator's ``start`` as a UTC-naive timestamp (a zone, if given, converted to UTC).

    Raises:
        ConfigError: for a value that is not a time.
    """
    try:
        ts = pd.Timestamp(start)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"start {start!r} is not a time: write ISO 8601, e.g. 2026-01-05T00:00:00"
        ) from exc
    if ts is pd.NaT or pd.isna(ts):
        raise ConfigError(f"start {start!r} is not a time: write e.g. 2026-01-05T00:00:00")
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return ts


def _draw_vcs(
    rng: np.random.Generator, names_rng: np.random.Generator, used_names: set[str]
) -> list[_VcModel]:
    """Draw a cluster's VCs: names, GPU types and workload parameters."""
    n_vcs = int(rng.integers(4, 9))
    n_types = int(rng.integers(1, 4))
    types = rng.choice(len(_GPU_TYPES), size=n_types, replace=False, p=_GPU_TYPE_WEIGHTS)
    type_mix = rng.dirichlet(np.full(n_types, 2.0))
    # Shares are uneven, as in Helios (8..208 GPUs per VC): one or two VCs dominate.
    shares = rng.dirichlet(np.full(n_vcs, 0.8)) * 0.9 + 0.1 / n_vcs
    peak_hour = rng.uniform(11.0, 15.5)  # the cluster's working-hours peak, local time
    vcs = []
    for i in range(n_vcs):
        name = _draw_scope_name(names_rng, used_names)
        vcs.append(
            _VcModel(
                name=name,
                gpu_type=_GPU_TYPES[int(types[rng.choice(n_types, p=type_mix)])],
                share=float(shares[i]),
                diurnal_amp=float(rng.uniform(0.45, 0.9)),
                peak_hour=float(peak_hour + rng.normal(0.0, 1.0)),
                semi_amp=float(rng.uniform(0.0, 0.25)),
                semi_phase=float(rng.uniform(0.0, 12.0)),
                weekend=float(rng.uniform(0.45, 0.75)),
                trend=float(rng.normal(0.03, 0.08)),
                median_run=float(np.exp(rng.uniform(np.log(150.0), np.log(900.0)))),
                # Small VCs run small jobs: a 16-GPU VC rarely sees 16-GPU jobs.
                size_tilt=float(rng.normal(0.0, 0.2) + 0.35 * np.log(shares[i] * n_vcs)),
                tail_prob=float(rng.uniform(0.04, 0.1)),
                tail_alpha=float(rng.uniform(1.1, 1.5)),
                fail_prob=float(rng.uniform(0.06, 0.14)),
                cancel_prob=float(rng.uniform(0.04, 0.12)),
                cpus_per_gpu=int(rng.choice([4, 6, 8, 12, 16])),
                utilisation=float(rng.uniform(0.7, 0.9)),
            )
        )
    return vcs


def _draw_scope_name(rng: np.random.Generator, used: set[str]) -> str:
    """A new ``vc-xxx`` name, unique over the trace."""
    while True:
        name = "vc-" + "".join(rng.choice(_SCOPE_ALPHABET, size=3))
        if name not in used:
            used.add(name)
            return name


def _intensity(rng: np.random.Generator, vcs: list[_VcModel], *, t0: int, days: int) -> np.ndarray:
    """Relative arrival intensity per VC and 5-minute bin, shape ``(n_vcs, n_bins)``."""
    n_bins = days * _DAY // _BIN
    centre = np.arange(n_bins, dtype=np.float64) * _BIN + _BIN / 2
    tz = float(rng.choice(_TZ_OFFSETS)) * 3600.0
    local = t0 + tz + centre  # local wall-clock seconds since the epoch
    hour = (local % _DAY) / 3600.0
    weekday = (np.floor(local / _DAY).astype(np.int64) + 3) % 7  # the epoch was a Thursday
    weekend = weekday >= 5
    day_index = np.floor((centre + (t0 + tz) % _DAY) / _DAY)
    n_days = int(day_index.max()) + 2
    log_rate = np.empty((len(vcs), n_bins))
    for i, vc in enumerate(vcs):
        diurnal = vc.diurnal_amp * np.cos(2 * np.pi * (hour - vc.peak_hour) / 24.0)
        diurnal += vc.semi_amp * np.cos(2 * np.pi * (hour - vc.semi_phase) / 12.0)
        # Day-to-day noise: log-AR(1), interpolated so the rate does not jump at midnight.
        noise = np.empty(n_days)
        noise[0] = rng.normal(0.0, 0.2)
        for d in range(1, n_days):
            noise[d] = 0.7 * noise[d - 1] + rng.normal(0.0, 0.14)
        daily = np.interp(day_index + (hour / 24.0), np.arange(n_days), noise)
        trend = vc.trend * centre / (28 * _DAY)
        log_rate[i] = diurnal + np.where(weekend, np.log(vc.weekend), 0.0) + daily + trend
    rate = np.exp(log_rate)
    rate *= np.array([vc.share for vc in vcs])[:, None] / rate.mean(axis=1, keepdims=True)
    rate *= _surges(rng, len(vcs), centre, days)
    return rate


def _surges(rng: np.random.Generator, n_vcs: int, centre: np.ndarray, days: int) -> np.ndarray:
    """Deadline surges: rate multipliers per VC and bin, 1 outside surges."""
    factor = np.ones((n_vcs, len(centre)))
    horizon = days * _DAY
    n_surges = 1 + int(rng.poisson(days / 14.0))
    for _ in range(n_surges):
        vc = int(rng.integers(n_vcs))
        deadline = rng.uniform(min(2.0, days * 0.6) * _DAY, horizon)
        ramp = rng.uniform(2.0, 5.0) * _DAY
        peak = rng.uniform(2.0, 4.0)
        # The rate accelerates towards the deadline, then falls below normal for about a day.
        into = (centre - (deadline - ramp)) / ramp
        rising = (into >= 0) & (into < 1)
        factor[vc, rising] *= 1.0 + (peak - 1.0) * into[rising] ** 2
        after = (centre >= deadline) & (centre < deadline + _DAY)
        factor[vc, after] *= 0.5
    return factor


def _generate_cluster(
    rng: np.random.Generator,
    names_rng: np.random.Generator,
    used_names: set[str],
    *,
    t0: int,
    days: int,
    jobs_per_day: float,
) -> _ClusterJobs:
    """Draw one cluster's VCs and jobs and run its schedulers."""
    vcs = _draw_vcs(rng, names_rng, used_names)
    horizon = days * _DAY
    rate = _intensity(rng, vcs, t0=t0, days=days)
    batch_mean = np.array([vc.batch_mean() for vc in vcs])
    counts = rng.poisson(rate * (jobs_per_day * days / rate.sum()) / batch_mean[:, None])
    n_vcs, n_bins = counts.shape
    flat = counts.ravel()
    n_events = int(flat.sum())

    # Submission events (one per batch), then the jobs of each batch a few seconds apart.
    ev_vc = np.repeat(np.repeat(np.arange(n_vcs), n_bins), flat)
    ev_time = np.repeat(np.tile(np.arange(n_bins, dtype=np.int64) * _BIN, n_vcs), flat)
    ev_time += rng.integers(0, _BIN, n_events)
    ev_level = _draw_levels(rng, vcs, ev_vc)
    ev_size = rng.choice(len(_BATCH_PMF), size=n_events, p=_BATCH_PMF) + 1
    big = ev_level >= _BIG_LEVEL
    ev_size[big] = 1 + (rng.random(int(big.sum())) < _BIG_PAIR)
    ev_gap = rng.integers(1, 30, n_events)
    ev_gpus = _odd_sizes(rng, 1 << ev_level)
    ev_shift = rng.normal(0.0, 1.0, n_events)  # jobs of one sweep run for similar times

    n_jobs = int(ev_size.sum())
    ev_of_job = np.repeat(np.arange(n_events), ev_size)
    first = np.cumsum(ev_size) - ev_size
    pos = np.arange(n_jobs) - np.repeat(first, ev_size)
    submit = ev_time[ev_of_job] + pos * ev_gap[ev_of_job]
    keep = submit < horizon
    ev_of_job, submit = ev_of_job[keep], submit[keep]
    vc = ev_vc[ev_of_job]
    gpus = ev_gpus[ev_of_job]
    n_jobs = len(submit)

    param = _per_vc(vcs)
    log_run = np.log(param["median_run"][vc]) + 0.3 * np.log(gpus)
    log_run += ev_shift[ev_of_job] + rng.normal(0.0, 1.5, n_jobs)
    run = np.exp(log_run)
    tail = rng.random(n_jobs) < param["tail_prob"][vc]
    run[tail] = 3600.0 * (1.0 + rng.pareto(param["tail_alpha"][vc][tail]))
    run = np.clip(run, 20.0, _MAX_RUN)

    outcome = rng.random(n_jobs)
    failed = outcome < param["fail_prob"][vc]
    cancelled = ~failed & (outcome < param["fail_prob"][vc] + param["cancel_prob"][vc])
    # Failures come early (crash at start-up, OOM); cancellations anywhere in the run.
    run[failed] *= rng.random(int(failed.sum())) ** 2
    run[cancelled] *= rng.random(int(cancelled.sum()))
    run = np.maximum(run, 5.0).astype(np.int64)
    label = np.where(failed, _FAILED, np.where(cancelled, _CANCELLED, _COMPLETED))
    # Users give up on a long queue: this feedback keeps backlogs to hours, not days.
    patience = np.exp(rng.normal(np.log(_PATIENCE_MEDIAN), 1.0, n_jobs)).astype(np.int64)

    # Capacity from the offered load; jobs are capped at half their VC so that every job can
    # start, which lowers the load, so repeat until the caps settle (they only ever shrink).
    in_window = np.minimum(run, horizon - submit)
    utilisation = np.array([spec.utilisation for spec in vcs])
    max_job = np.full(n_vcs, 64)
    while True:
        gpus = np.minimum(gpus, max_job[vc])
        load = np.bincount(vc, weights=gpus * in_window, minlength=n_vcs) / horizon
        capacity = [max(16, int(np.ceil(x / 8.0)) * 8) for x in load / utilisation]
        caps = np.array([min(64, 1 << int(np.log2(c // 2))) for c in capacity])
        if (caps == max_job).all():
            break
        max_job = np.minimum(max_job, caps)
    cpus = _draw_cpus(rng, gpus, param["cpus_per_gpu"][vc])

    order = np.lexsort((submit, vc))  # by VC, then submit time; ties keep generation order
    start = np.full(n_jobs, -1, dtype=np.int64)
    bounds = np.searchsorted(vc[order], np.arange(n_vcs + 1))
    for i in range(n_vcs):
        idx = order[bounds[i] : bounds[i + 1]]
        start[idx] = _schedule_backfill(
            submit[idx], run[idx], gpus[idx], patience[idx], capacity[i]
        )

    status = np.full(n_jobs, _PENDING, dtype=np.int8)
    started = (start >= 0) & (start < horizon)
    end = np.where(started, start + run, -1)
    running = started & (end > horizon)
    done = started & ~running
    status[done] = label[done]
    status[running] = _RUNNING
    end[running] = -1
    gave_up = (start < 0) & (submit + patience < horizon)
    status[gave_up] = _CANCELLED
    # A job that gives up leaves the queue then: its end time, so that it stops being pending.
    end[gave_up] = submit[gave_up] + patience[gave_up]
    start[~started] = -1

    by_submit = np.argsort(submit, kind="stable")
    return _ClusterJobs(
        vc=vc[by_submit].astype(np.int16),
        gpus=gpus[by_submit],
        cpus=cpus[by_submit],
        submit=submit[by_submit],
        start=start[by_submit],
        end=end[by_submit],
        status=status[by_submit],
        vcs=vcs,
        capacity=capacity,
    )


def _per_vc(vcs: list[_VcModel]) -> dict[str, np.ndarray]:
    """VC parameters as arrays indexed by VC, for fancy indexing by a job's VC."""
    fields = ("median_run", "tail_prob", "tail_alpha", "fail_prob", "cancel_prob", "cpus_per_gpu")
    return {f: np.array([getattr(vc, f) for vc in vcs]) for f in fields}


def _draw_levels(rng: np.random.Generator, vcs: list[_VcModel], vc: np.ndarray) -> np.ndarray:
    """log2 of the GPU count, 0..6, from each VC's size distribution."""
    levels = np.empty(len(vc), dtype=np.int64)
    for i, spec in enumerate(vcs):
        mine = np.flatnonzero(vc == i)
        levels[mine] = rng.choice(len(_SIZE_PMF), size=len(mine), p=spec.size_pmf())
    return levels


def _odd_sizes(rng: np.random.Generator, sizes: np.ndarray) -> np.ndarray:
    """Powers of two with a few odd sizes mixed in (3, 5-7, 9-15, ...)."""
    sizes = sizes.copy()
    odd = (rng.random(len(sizes)) < 0.06) & (sizes >= 4)
    # An odd size between the previous power of two and this one: 3, 5-7, 9-15, ...
    sizes[odd] = rng.integers(sizes[odd] // 2 + 1, sizes[odd])
    return sizes


def _draw_cpus(rng: np.random.Generator, gpus: np.ndarray, cpus_per_gpu: np.ndarray) -> np.ndarray:
    """CPU cores: a VC's cores per GPU, with half of the jobs asking for fewer."""
    fraction = rng.choice(np.array([0.25, 0.5, 1.0, 1.0]), size=len(gpus))
    return np.maximum(1, np.round(gpus * cpus_per_gpu * fraction)).astype(np.int64)


def _schedule_backfill(
    submit: np.ndarray,
    run: np.ndarray,
    gpus: np.ndarray,
    patience: np.ndarray,
    capacity: int,
    *,
    depth: int = _BACKFILL_DEPTH,
) -> np.ndarray:
    """Start times under a FIFO scheduler with EASY backfilling on ``capacity`` GPUs.

    The job at the head of the queue starts as soon as enough GPUs are free. While it waits it
    holds a reservation at its *shadow time* (when the running jobs will have freed enough GPUs);
    any of the next ``depth`` queued jobs may start early if it fits in the free GPUs and either
    ends by the shadow time or only uses GPUs the head will not need then. Run times are known
    exactly, so the head is never delayed by a backfilled job. A queued job whose wait would
    exceed its patience leaves the queue at ``submit + patience`` and gets start -1.
    Intervals are half-open: GPUs freed at ``t`` can be used by a job starting at ``t``.

    Args:
        submit: submit times, non-decreasing.
        run: run times, >= 1.
        gpus: GPUs per job, 1..min(capacity, 127).
        patience: longest wait each job accepts.
        capacity: GPUs of the VC.
        depth: how many queued jobs behind the head are considered for backfilling.

    Returns:
        Start times (-1 for jobs that gave up waiting).
    """
    sub = submit.tolist()
    rn = run.tolist()
    gp = gpus.tolist()
    dl = (submit + np.minimum(patience, _NO_PATIENCE)).tolist()
    n = len(sub)
    start = [-1] * n
    heap: list[int] = []  # running jobs as (end << 7) | gpus, so the heap holds plain ints
    push, pop = heapq.heappush, heapq.heappop
    queue: deque[int] = deque()
    free = capacity
    never = 1 << 62
    head, shadow, extra = -1, never, 0
    i = 0
    while i < n or queue:
        if not queue:  # fast path: an empty queue, so the next arrival starts if it fits
            t = sub[i]
            while heap and heap[0] >> _GPU_BITS <= t:
                free += pop(heap) & _GPU_MASK
            g = gp[i]
            if g <= free:
                free -= g
                push(heap, ((t + rn[i]) << _GPU_BITS) | g)
                start[i] = t
            else:
                queue.append(i)
            i += 1
            continue
        # The next event: an arrival, a job ending or the head of the queue giving up.
        t = sub[i] if i < n else never
        if heap and heap[0] >> _GPU_BITS < t:
            t = heap[0] >> _GPU_BITS
        if queue and dl[queue[0]] < t:
            t = dl[queue[0]]
        released = False
        while heap and heap[0] >> _GPU_BITS <= t:
            free += pop(heap) & _GPU_MASK
            released = True
        arrived = 0
        while i < n and sub[i] <= t:
            queue.append(i)
            i += 1
            arrived += 1
        while queue:
            j = queue[0]
            if dl[j] < t:  # gave up before reaching the head
                queue.popleft()
            elif gp[j] <= free:
                queue.popleft()
                free -= gp[j]
                push(heap, ((t + rn[j]) << _GPU_BITS) | gp[j])
                start[j] = t
            elif dl[j] == t:  # gives up at the head
                queue.popleft()
            else:
                break
        size = len(queue)
        if size < 2 or not free:  # no job to backfill, or no GPU to backfill it on
            continue
        if queue[0] != head:
            head = queue[0]
            shadow, extra = _reservation(heap, free, gp[head])
            k = 1
        elif released:
            k = 1
        else:  # nothing changed for the jobs already looked at: only the new arrivals
            k = max(1, size - arrived)
        last = min(size, depth + 1)
        while k < last:
            j = queue[k]
            g = gp[j]
            if dl[j] < t:
                del queue[k]
                size -= 1
                last = min(size, depth + 1)
                continue
            if g <= free:
                end = t + rn[j]
                if end <= shadow or g <= extra:
                    if end > shadow:
                        extra -= g
                    del queue[k]
                    size -= 1
                    last = min(size, depth + 1)
                    free -= g
                    push(heap, (end << _GPU_BITS) | g)
                    start[j] = t
                    if not free:
                        break
                    continue
            k += 1
    return np.array(start, dtype=np.int64)


def _reservation(heap: list[int], free: int, need: int) -> tuple[int, int]:
    """When ``need`` GPUs will be free (the shadow time) and how many spare GPUs there are then.

    Walks the running jobs in order of end time without sorting the whole heap.
    """
    frontier = [(heap[0], 0)]
    size = len(heap)
    while frontier:
        key, at = heapq.heappop(frontier)
        free += key & _GPU_MASK
        if free >= need:
            return key >> _GPU_BITS, free - need
        for child in (2 * at + 1, 2 * at + 2):
            if child < size:
                heapq.heappush(frontier, (heap[child], child))
    raise AssertionError("a job needs more GPUs than its VC has")  # pragma: no cover


def _timestamps(seconds: np.ndarray, t0: int) -> pa.Array:
    """Seconds from the trace start (-1 = none) as ``timestamp[s]`` with nulls."""
    return pa.array(seconds + t0, type=pa.timestamp("s"), mask=seconds < 0)


def _jobs_table(results: list[_ClusterJobs], cluster_names: list[str], t0: int) -> pa.Table:
    """All clusters' jobs as one table in the canonical column order, sorted by submit, job_id."""
    scope_names: list[str] = []
    gpu_types: list[str] = []
    offsets = []
    for res in results:
        offsets.append(len(scope_names))
        scope_names += [vc.name for vc in res.vcs]
        gpu_types += [vc.gpu_type for vc in res.vcs]
    cluster = np.concatenate(
        [np.full(len(r.submit), k, dtype=np.int32) for k, r in enumerate(results)]
    )
    seq = np.concatenate([np.arange(1, len(r.submit) + 1, dtype=np.int64) for r in results])
    scope = np.concatenate(
        [r.vc.astype(np.int32) + off for r, off in zip(results, offsets, strict=True)]
    )
    submit = np.concatenate([r.submit for r in results])
    # job_id order is string order: prefixes "c1-" < "c10-" < "c2-"; sequence numbers of one
    # cluster have one width, so they sort numerically.
    prefixes = [f"c{k}-" for k in range(len(results))]
    prefix_rank = np.argsort(np.argsort(np.array(prefixes)))
    order = np.lexsort((seq, prefix_rank[cluster], submit))

    def take(values: list[str], index: np.ndarray) -> pa.Array:
        return pa.array(values, type=pa.string()).take(pa.array(index[order]))

    widths = [max(6, len(str(len(r.submit)))) for r in results]
    digits = pa.concat_arrays(
        [
            pc.utf8_lpad(pa.array(np.arange(1, len(r.submit) + 1)).cast(pa.string()), w, "0")
            for r, w in zip(results, widths, strict=True)
        ]
    ).take(pa.array(order))
    job_id = pc.binary_join_element_wise(take(prefixes, cluster), digits, "")

    def column(name: str) -> np.ndarray:
        return np.concatenate([getattr(r, name) for r in results])[order]

    return pa.table(
        {
            "job_id": job_id,
            "cluster": take(cluster_names, cluster),
            "scope": take(scope_names, scope),
            "gpu_type": take(gpu_types, scope),
            "num_gpus": pa.array(column("gpus"), type=pa.int64()),
            "num_cpus": pa.array(column("cpus"), type=pa.int64()),
            "submit_ts": _timestamps(submit[order], t0),
            "start_ts": _timestamps(column("start"), t0),
            "end_ts": _timestamps(column("end"), t0),
            "status": pa.array(list(STATUSES), type=pa.string()).take(
                pa.array(column("status").astype(np.int64))
            ),
        }
    )


def _write_csv(table: pa.Table, path: Path) -> None:
    """Write the jobs as CSV: plain header, ISO times with ``T``, empty fields for nulls."""
    columns = []
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            col = pc.replace_substring(col.cast(pa.string()), " ", "T", max_replacements=1)
        columns.append(col)
    text = pa.table(columns, names=table.column_names)
    with pa.OSFile(str(path), "wb") as sink:
        sink.write((",".join(table.column_names) + "\n").encode())
        # Values need no quotes: names, ids, numbers and times contain no commas or quotes.
        options = pacsv.WriteOptions(include_header=False, quoting_style="none")
        pacsv.write_csv(text, sink, options)


def _write_capacity(results: list[_ClusterJobs], cluster_names: list[str], path: Path) -> None:
    """Write ``cluster,scope,gpus``: one row per VC and one ``all`` row per cluster."""
    lines = [",".join(CAPACITY_CSV_COLUMNS)]
    for name, res in zip(cluster_names, results, strict=True):
        lines += [f"{name},{vc.name},{cap}" for vc, cap in zip(res.vcs, res.capacity, strict=True)]
        lines.append(f"{name},{ALL_SCOPE},{sum(res.capacity)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
