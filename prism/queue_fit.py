"""What a scope's queue can start: the share of its queued GPUs in jobs that fit the scope.

A capacity plan adds a *queue allowance* to each scope's GPUs in use (:mod:`prism.capacity`):
the GPUs its queued jobs would hold if they could start. A queued job larger than all the GPUs
a scope has installed cannot start there however many of its GPUs sit idle: it waits for the
scope to grow past its size (an operator's decision, not a queue to size for) or is cancelled.
Counting its GPUs in the allowance provisions GPUs nothing can use.

Where the store holds the cluster's jobs, :func:`queued_by_size` reads, per scope and job size,
the GPU-seconds that jobs spent queued over a recent window (as :mod:`prism.derive` counts
``gpus_pending``: from submit to start, to the end for jobs that never started), and
:func:`queue_fits` turns them into each scope's :class:`QueueFit`: the share of that queued
GPU-time in jobs no larger than the scope's capacity. The plan scales the queued-GPU forecast by
it and says so. Clusters without jobs (sampled series only) have no fit: their allowance is the
forecast as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from prism.schema import (
    ALL_SCOPE,
    GPU_TYPE_PREFIX,
    SCOPE_BAD_CHARS,
    SERIES_ID,
    UNASSIGNED_SCOPE,
    split_series_id,
)

if TYPE_CHECKING:
    from prism.store import Store

_EPS = 1e-9

_QUEUED_SQL = f"""
WITH q AS (
    SELECT coalesce(regexp_replace(scope, '{SCOPE_BAD_CHARS}', '_', 'g'),
                    '{UNASSIGNED_SCOPE}') AS vc,
           coalesce(regexp_replace(gpu_type, '{SCOPE_BAD_CHARS}', '_', 'g'), 'unknown') AS gpu,
           num_gpus,
           greatest(submit_ts, ?::TIMESTAMP) AS q0,
           least(coalesce(CASE WHEN start_ts <= ? THEN start_ts END,
                          CASE WHEN end_ts <= ? THEN end_ts END, ?::TIMESTAMP),
                 ?::TIMESTAMP) AS q1
    FROM jobs
    WHERE cluster = ? AND num_gpus > 0 AND submit_ts IS NOT NULL AND submit_ts < ?
)
SELECT vc, gpu, num_gpus,
       sum(num_gpus * epoch(q1 - q0)) AS gpu_seconds,
       count(*) FILTER (WHERE q1 >= ?::TIMESTAMP) AS queued_at_end
FROM q WHERE q1 > q0
GROUP BY ALL
"""


@dataclass(frozen=True)
class QueueFit:
    """How much of a scope's recent queue could start in it.

    Attributes:
        share: the share of the queued GPU-seconds (over the window read) in jobs of at most
            ``capacity`` GPUs; the queue allowance is the queued-GPU forecast times it.
        capacity: the scope's installed GPUs the jobs were measured against.
        largest_fit: the largest queued job that fits, in GPUs (0 when none did).
        too_big_now: jobs larger than ``capacity`` still queued at the window's end.
        days: the window's length in days.
    """

    share: float
    capacity: float
    largest_fit: float
    too_big_now: int
    days: float

    def words(self) -> str:
        """What the fit did to the allowance, in words: after "the mean N queued GPUs
        forecast over the window" where it scaled it, at the reason's end where every job
        fit."""
        if self.share >= 1:
            return (f"; every job queued over the last {self.days:g} days fits the scope's "
                    f"{self.capacity:,.0f} GPUs")
        waiting = f"; {self.too_big_now} such job(s) queued now" if self.too_big_now else ""
        return (f", times {self.share:.0%}: the share of the last {self.days:g} days' queued "
                f"GPU-hours in jobs that fit the scope's {self.capacity:,.0f} GPUs (larger ones "
                f"start only if it grows past their size{waiting})")


def queued_by_size(store: Store, cluster: str, start: pd.Timestamp, end: pd.Timestamp
                   ) -> pd.DataFrame:
    """The GPU-seconds the cluster's jobs spent queued in ``[start, end)``, per VC (``vc``,
    named as in series ids; ``unassigned`` for jobs without one), GPU type (``gpu``;
    ``unknown``) and size (``num_gpus``), with ``queued_at_end``: how many of them were still
    queued at ``end``. Jobs are read as known at ``end``: a start or end after it reads as not
    yet happened. Empty when the cluster has no jobs (or none queued in the window)."""
    s, e = pd.Timestamp(start).to_pydatetime(), pd.Timestamp(end).to_pydatetime()
    frame = store.fetch_df(_QUEUED_SQL, [s, e, e, e, e, cluster, e, e])
    frame["num_gpus"] = frame["num_gpus"].astype("float64")
    frame["gpu_seconds"] = frame["gpu_seconds"].astype("float64")
    return frame


def queue_fits(sizes: pd.DataFrame, capacity: Mapping[str, float | None], *,
               days: float) -> dict[str, QueueFit]:
    """Each scope's :class:`QueueFit` from :func:`queued_by_size`: ``all`` counts every job,
    ``gpu:<type>`` the jobs of that type, any other scope the jobs of that VC. Scopes without
    a known capacity or without queued jobs in the window have none."""
    out: dict[str, QueueFit] = {}
    if sizes.empty:
        return out
    for scope, cap in capacity.items():
        if cap is None or not cap > 0:
            continue
        if scope == ALL_SCOPE:
            mine = sizes
        elif scope.startswith(GPU_TYPE_PREFIX):
            mine = sizes[sizes["gpu"] == scope[len(GPU_TYPE_PREFIX):]]
        else:
            mine = sizes[sizes["vc"] == scope]
        total = float(mine["gpu_seconds"].sum())
        if not total > 0:
            continue
        fits = mine["num_gpus"] <= float(cap) + _EPS
        out[scope] = QueueFit(
            share=float(mine.loc[fits, "gpu_seconds"].sum()) / total, capacity=float(cap),
            largest_fit=float(mine.loc[fits, "num_gpus"].max()) if fits.any() else 0.0,
            too_big_now=int(mine.loc[~fits, "queued_at_end"].sum()), days=float(days))
    return out


def fits_at(store: Store, cluster: str, capacity: Mapping[str, float | None],
            at: pd.Timestamp, window: pd.Timedelta) -> dict[str, QueueFit]:
    """:func:`queue_fits` over the ``window`` before ``at``."""
    sizes = queued_by_size(store, cluster, at - window, at)
    return queue_fits(sizes, capacity, days=round(window / pd.Timedelta(days=1), 1))


def queue_allowance(queue: pd.DataFrame | None, scope: str, growth: float,
                     peak: float | None, fit: QueueFit | None) -> tuple[float, str]:
    """The queue allowance of a scope and its reason (:func:`prism.capacity.plan_capacity`):
    the mean of ``queue``'s (``series_id, mean``) forecast of the scope's queued GPUs over the
    window, times ``growth``, times ``fit``'s share (jobs that fit the scope), at most
    ``peak`` (the queue's recent peak)."""
    if queue is None:
        return 0.0, "no queue series"
    mine = queue[queue[SERIES_ID].map(lambda s: split_series_id(str(s))[1] == scope)]
    if mine.empty:
        return 0.0, "no queue series"
    mean = float(np.clip(mine["mean"].to_numpy(dtype=np.float64), 0, None).mean() * growth)
    scaled = fit is not None and fit.share < 1
    fitted = mean * fit.share if fit is not None and scaled else mean
    what = (f"the mean {mean:,.1f} queued GPUs forecast over the window{fit.words()}"
            if fit is not None and scaled else "the mean queued GPUs forecast over the window")
    after = "" if fit is None or scaled else fit.words()
    if peak is not None and fitted > peak:
        return max(float(peak), 0.0), (f"queue allowance {max(peak, 0.0):,.1f} ({what}, "
                                       f"capped at the queue's recent peak{after})")
    return fitted, (f"queue allowance {fitted:,.1f} ({what}, at most the recent queue peak"
                    f"{'' if peak is None else f' {peak:,.1f}'}{after})")
