"""Watching Prometheus: pull new telemetry on a schedule and refit the models it changes.

``prism watch``: :func:`watch_tick` runs one tick, :func:`schedule` paces the ticks. A tick
does, for each query of the :class:`WatchPlan`:

1. **Pull** ``[start, now]`` at ``step`` with the pull of ``prism ingest --prometheus-url``
   (:func:`prism.usecases.ingest.ingest_prometheus`: chunked, one transaction per query, all
   or nothing). ``start`` is one step after the newest sample the store holds of the query's
   series, or ``now - since`` when it holds none. The query's series are those of the samples
   that earlier pulls of the same query from the same server stored (the ``ingests`` table
   records each pull as its request URL), so a watch that is stopped and started again goes
   on where it stopped, and a query's own series are never mixed with other sources'. A
   failed pull (a server that cannot be reached, an error answer, bad samples) stores nothing;
   the tick reports it, naming the server and the query, and goes on with the next query.

2. **Refit, incrementally**: only series that got new samples in this tick are considered,
   and of those only the ones whose derived series now holds at least ``refit_every`` points
   after the end of the data of their latest saved model of the plan's alias (or that have no
   saved model yet: a watch fits the models of new series). The others wait; their new points
   add up over the next ticks. The chosen series are refit from their whole stored history
   and saved with the batch refit of ``prism refit`` (:func:`prism.usecases.batch.run_batch_job`,
   task ``refit``: one registry model per chunk of series; ``prism forecast --from-model
   ALIAS``, ``prism capacity`` and ``prism serve`` then use the newest model of each series).
   Counting derived points (at the cluster's ``--freq``), not raw samples, ties the threshold
   to what a model is fitted on: with ``--freq 10min`` and ``refit_every=6`` a series is refit
   once an hour of new data has arrived, however fine the pull's ``step``.

A tick uses the store only while it runs: the caller opens it per tick, so other commands can
use the store between ticks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import pandas as pd

from prism.errors import ConfigError, PrismError
from prism.forecasters.params import typed_params
from prism.ingest.base import IngestOptions
from prism.ingest.prometheus_pull import (
    FORMAT,
    RangeQuery,
    check_pull_options,
    range_query,
    split_options,
)
from prism.schema import SERIES_ID, freq_seconds, parse_duration

if TYPE_CHECKING:
    from prism.store import Store

logger = logging.getLogger(__name__)

#: What ``schedule`` sleeps with (tests replace it).
_sleep: Callable[[float], None] = time.sleep
_clock: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class WatchPlan:
    """What a watch pulls and refits (:func:`make_plan` checks one).

    Attributes:
        url: the Prometheus server's base URL.
        queries: the PromQL expressions pulled at each tick.
        step: the pull's resolution (``1m``).
        since: how far back the first pull of a query reaches (``7d``).
        options: the pull's and the ``prometheus`` adapter's options (``cluster``,
            ``scope``, ``--option`` keys such as ``metric``, ``token``, ``timeout``).
        token: the bearer token when ``options`` gives none (``PRISM_PROMETHEUS_TOKEN``).
        freq: bucket size of the derived series (kept per cluster).
        fill: gap policy of the derived series.
        model: the forecaster alias refit.
        params: its hyperparameters as text.
        models_dir: the registry (``None``: ``PRISM_MODELS_DIR`` or ``./models``).
        refit_every: the fewest new derived points that make a series be refit (>= 1).
        keep: after a refit, prune the alias' models to this many per series (0: keep all).
    """

    url: str
    queries: tuple[str, ...]
    step: str = "1m"
    since: str = "7d"
    options: IngestOptions = field(default_factory=IngestOptions)
    token: str | None = field(default=None, repr=False)
    freq: str | None = None
    fill: str | None = None
    model: str = "prism"
    params: dict[str, str] = field(default_factory=dict)
    models_dir: Path | None = None
    refit_every: int = 1
    keep: int = 0

    @property
    def step_ms(self) -> int:
        """The step in milliseconds."""
        return round(parse_duration(self.step).total_seconds() * 1000)

    def endpoint(self) -> str:
        """The server's ``/api/v1/query_range`` without credentials (as messages name it)."""
        return RangeQuery(self.url.strip(), "", 0, 0, 1).shown_endpoint


def make_plan(url: str, queries: Sequence[str], **settings: object) -> WatchPlan:
    """A :class:`WatchPlan`, checked before any request is made.

    Args:
        url: the server's base URL.
        queries: one or more PromQL expressions (repeats are dropped).
        **settings: the other fields of :class:`WatchPlan`.

    Raises:
        ConfigError: for a bad URL, query, step, duration, option, model or parameter,
            naming the option and how to write it.
    """
    from prism.forecasters import get_forecaster

    plan = WatchPlan(url.strip(), tuple(dict.fromkeys(queries)), **settings)  # type: ignore[arg-type]
    if not plan.queries:
        raise ConfigError("name at least one --query, e.g. --query "
                          "'sum by (namespace) (DCGM_FI_DEV_GPU_UTIL)'")
    own, rest = split_options(plan.options)
    check_pull_options(rest)
    for query in plan.queries:  # checks the URL, query, step and the pull's own options
        range_query(plan.url, query, start=f"now-{plan.since}", end="now", step=plan.step,
                    timeout=own.get("timeout"), max_points=own.get("max_points"))
    if plan.freq is not None:
        freq_seconds(plan.freq)
    if plan.refit_every < 1:
        raise ConfigError(f"--refit-every {plan.refit_every}: write a number of new points "
                          ">= 1")
    if plan.keep < 0:
        raise ConfigError(f"--keep {plan.keep}: write 0 (keep every model) or more")
    get_forecaster(plan.model, **typed_params(plan.model, plan.params))
    return plan


@dataclass(frozen=True)
class QueryPull:
    """What a tick pulled for one query.

    Attributes:
        query: the PromQL expression.
        start / end: the range asked for (naive UTC), ``None`` when nothing was due.
        rows: samples added to the store.
        changed: series id -> its samples added.
        error: why the pull failed (nothing was stored), else ``None``.
    """

    query: str
    start: pd.Timestamp | None
    end: pd.Timestamp | None
    rows: int = 0
    changed: dict[str, int] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class TickReport:
    """What one tick did.

    Attributes:
        now: the tick's time (naive UTC): the end of its pulls.
        pulls: one per query, in the plan's order.
        refit: the series refit and saved.
        model_ids: the registry models they were saved as.
        waiting: series id -> new derived points, of the series that got data but stay below
            ``refit_every``.
        refit_error: why the refit failed, else ``None``.
        refit_notes: ``(series_id, status, reason)`` of series whose refit failed (not saved).
        pruned: registry models removed (``keep``).
    """

    now: pd.Timestamp
    pulls: tuple[QueryPull, ...]
    refit: tuple[str, ...] = ()
    model_ids: tuple[str, ...] = ()
    waiting: dict[str, int] = field(default_factory=dict)
    refit_error: str | None = None
    refit_notes: tuple[tuple[str, str, str], ...] = ()
    pruned: int = 0

    @property
    def failed(self) -> bool:
        """Whether a pull or the refit failed."""
        return self.refit_error is not None or any(p.error for p in self.pulls)

    @property
    def rows(self) -> int:
        """Samples added, all queries."""
        return sum(p.rows for p in self.pulls)


def watch_tick(store: Store, plan: WatchPlan, *, now: pd.Timestamp | None = None
               ) -> TickReport:
    """Pull what is new for each query of ``plan``, then refit the series that changed
    enough (module docstring).

    Args:
        store: the store.
        plan: what to pull and refit (:func:`make_plan`).
        now: the end of the pulls (naive UTC; default: the current time).

    Returns:
        The :class:`TickReport`; failed pulls and a failed refit are reported in it, not
        raised.
    """
    from prism.usecases.ingest import ingest_prometheus

    now = now if now is not None else pd.Timestamp.now(tz="UTC").tz_localize(None)
    step = pd.Timedelta(milliseconds=plan.step_ms)
    last_grid = now.floor(step)
    pulls: list[QueryPull] = []
    for query in plan.queries:
        before = _pulled(store, plan, query)
        start = (max(last for last, _ in before.values()) + step if before
                 else now - parse_duration(plan.since))
        if start > last_grid:  # the newest sample is the newest step: nothing is due
            pulls.append(QueryPull(query, None, None))
            continue
        try:
            report = ingest_prometheus(
                store, plan.url, query, start=_unix(start), end=_unix(now), step=plan.step,
                options=plan.options, token=plan.token, freq=plan.freq, fill=plan.fill)
        except PrismError as exc:
            logger.info("pull of %r from %s failed: %s", query, plan.endpoint(), exc)
            pulls.append(QueryPull(query, start, now, error=str(exc)))
            continue
        after = _new_samples(before, _pulled(store, plan, query))
        pulls.append(QueryPull(query, start, now, report.rows, after))
    changed = sorted({sid for p in pulls for sid in p.changed})
    if not changed:
        return TickReport(now, tuple(pulls))
    due, waiting = _due(store, plan, changed)
    if not due:
        return TickReport(now, tuple(pulls), waiting=waiting)
    return _refit(store, plan, now, tuple(pulls), due, waiting)


def _refit(store: Store, plan: WatchPlan, now: pd.Timestamp, pulls: tuple[QueryPull, ...],
           due: list[str], waiting: dict[str, int]) -> TickReport:
    """Refit and save ``due`` with the batch refit; prune with ``plan.keep``."""
    from prism.usecases.batch import run_batch_job
    from prism.usecases.forecast import prune_models

    try:
        job = run_batch_job(store, due, models=[plan.model], task="refit",
                            params=plan.params or None, models_dir=plan.models_dir)
    except PrismError as exc:
        logger.info("refit of %d series failed: %s", len(due), exc)
        return TickReport(now, pulls, waiting=waiting, refit_error=str(exc))
    report = job.reports[0]
    failed = {sid for sid, status, _ in report.notes if status != "ok"}
    pruned = 0
    if plan.keep:
        pruned = len(prune_models(plan.models_dir, keep=plan.keep))
    return TickReport(now, pulls, tuple(s for s in due if s not in failed),
                      report.model_ids, waiting, None, report.notes, pruned)


def _due(store: Store, plan: WatchPlan, changed: list[str]) -> tuple[list[str], dict[str, int]]:
    """Split ``changed`` into the series to refit now and those that wait (with their new
    derived points): new points are counted after the latest data end of any saved model of
    the plan's alias fitted on the series (not "the newest model": two saved in the same
    second are not ordered)."""
    from prism import registry
    from prism.config import get_settings

    root = plan.models_dir if plan.models_dir is not None else get_settings().models_dir
    ends: dict[str, pd.Timestamp] = {}
    for record in registry.list_models(root, alias=plan.model):
        end = pd.Timestamp(record.data_end)
        for sid in record.series_ids:
            if sid not in ends or end > ends[sid]:
                ends[sid] = end
    catalogue = store.list_series()
    last = dict(zip(catalogue[SERIES_ID].astype(str), catalogue["last_ts"], strict=True))
    freq = dict(zip(catalogue[SERIES_ID].astype(str), catalogue["freq"], strict=True))
    due: list[str] = []
    waiting: dict[str, int] = {}
    for sid in changed:
        if sid not in last:  # samples that derive no series of that id
            continue
        if sid not in ends:
            due.append(sid)
            continue
        new = int((pd.Timestamp(last[sid]) - ends[sid]).total_seconds()
                  // freq_seconds(str(freq[sid])))
        if new >= plan.refit_every:
            due.append(sid)
        elif new > 0:
            waiting[sid] = new
    return due, waiting


def _new_samples(before: dict[str, tuple[pd.Timestamp, int]],
                 after: dict[str, tuple[pd.Timestamp, int]]) -> dict[str, int]:
    """Series id -> samples a pull added, of the series that got some (pulls never store a
    sample twice, so the count's growth is what is new)."""
    return {sid: n - before.get(sid, (last, 0))[1] for sid, (last, n) in after.items()
            if n > before.get(sid, (last, 0))[1]}


def _pulled(store: Store, plan: WatchPlan, query: str
            ) -> dict[str, tuple[pd.Timestamp, int]]:
    """Series id -> (newest sample, samples) stored by pulls of ``query`` from the plan's
    server (``ingests.path`` is the request: endpoint, then ``query=...&start=...``)."""
    prefix = plan.endpoint() + "?"
    rows = store.fetch_all(
        """SELECT i.path, s.series_id, max(s.ts), count(*)
           FROM samples s JOIN ingests i ON s.ingest_id = i.ingest_id
           WHERE i.format = ? AND starts_with(i.path, ?)
           GROUP BY i.path, s.series_id""", [FORMAT, prefix])
    found: dict[str, tuple[pd.Timestamp, int]] = {}
    for path, sid, last, n in rows:
        if parse_qs(urlsplit(path).query).get("query") != [query]:
            continue
        seen = found.get(sid)
        stamp = pd.Timestamp(last)
        found[sid] = (max(stamp, seen[0]), seen[1] + int(n)) if seen else (stamp, int(n))
    return found


def _unix(stamp: pd.Timestamp) -> str:
    """A naive UTC time as the Unix seconds ``--start``/``--end`` read (to the ms)."""
    ms = stamp.value // 1_000_000
    return f"{ms // 1000}.{ms % 1000:03d}"


def schedule(every: str, ticks: int | None = None) -> Iterator[int]:
    """The ticks of a watch: yields 1, 2, ... at once, then every ``every`` (the times are
    fixed from the start, so a tick's own duration does not shift the next; a tick that runs
    past its successor's time is followed at once, the missed times are skipped).

    Args:
        every: the time between ticks, a duration (``60s``, ``5min``).
        ticks: stop after this many (``None``: never).

    Raises:
        ConfigError: for a bad duration or a number of ticks below 1.
    """
    period = parse_duration(every).total_seconds()
    if ticks is not None and ticks < 1:
        raise ConfigError(f"--ticks {ticks}: write a number of ticks >= 1")
    started = _clock()
    n = 0
    while ticks is None or n < ticks:
        n += 1
        yield n
        if ticks is not None and n >= ticks:
            return
        elapsed = _clock() - started
        slot = int(elapsed // period) + 1  # the next time on the grid, missed ones skipped
        _sleep(max(0.0, slot * period - elapsed))
