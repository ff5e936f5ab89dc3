"""The capacity plan of a cluster: forecast its demand series, load capacities, plan.

``prism capacity`` and ``GET /v1/capacity`` call :func:`plan_cluster_capacity` with their
forecast source (:mod:`prism.usecases.forecast`); loading capacities, reservations and
history is here, the planning itself in :mod:`prism.capacity`, and the report
(:mod:`prism.usecases.report`) plans each cluster with the same function.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

from prism.errors import ConfigError, IngestError, SeriesNotFound
from prism.schema import SERIES_ID

if TYPE_CHECKING:
    from prism.capacity import CapacityPlan, Reservation, Watts
    from prism.store import Store
    from prism.usecases.forecast import ForecastSource

logger = logging.getLogger(__name__)

#: Demand metrics a capacity plan forecasts per scope, preferred first.
DEMAND_METRICS = ("gpu_demand", "gpus_in_use")
#: The history behind release-vs-lend advice.
_RECENT = pd.Timedelta(days=7)
#: Plans are capped at capacity only for GPUs in use (allocations cannot exceed what is
#: installed; demand with a queue can).
ALLOCATED = "/gpus_in_use"


def demand_series(store: Store, cluster: str, *, scope: str | None = None) -> dict[str, str]:
    """Scope -> the demand series a capacity plan forecasts (``gpu_demand``, else
    ``gpus_in_use``) of a cluster.

    Raises:
        SeriesNotFound: for a cluster (or scope) without such series, naming the ones there are.
    """
    frame = store.list_series(cluster=cluster)
    if frame.empty:
        known = sorted(store.list_series()["cluster"].unique())
        raise SeriesNotFound(f"no series for cluster {cluster!r}; the store has "
                             f"{', '.join(map(str, known)) or 'no cluster'} "
                             "(`GET /v1/series` or `prism series list` lists them)")
    out: dict[str, str] = {}
    for metric in reversed(DEMAND_METRICS):  # the preferred metric overwrites
        for row in frame[frame["metric"] == metric].itertuples():
            if scope is None or row.scope == scope:
                out[str(row.scope)] = str(row.series_id)
    if not out:
        where = f"cluster {cluster!r}" + (f" scope {scope!r}" if scope else "")
        scopes = sorted(frame.loc[frame["metric"].isin(DEMAND_METRICS), "scope"].unique())
        hint = (f"; its scopes are {', '.join(map(str, scopes))}" if scopes else
                "; `GET /v1/series` lists the series there are")
        raise SeriesNotFound(f"no gpu_demand or gpus_in_use series for {where}{hint}")
    return dict(sorted(out.items()))


def capacities_at(store: Store, cluster: str, scopes: Sequence[str], at: pd.Timestamp,
                  table: pd.DataFrame | None = None
                  ) -> tuple[dict[str, float], dict[str, str]]:
    """Scope -> GPUs installed at ``at`` and where that came from: a ``--capacity`` table
    (:func:`prism.capacity.read_capacity_table`), else the store's ``capacity`` rows
    (capacity-csv), else the ``gpu_capacity`` samples."""
    gpus: dict[str, float] = {}
    source: dict[str, str] = {}
    sampled = set(store.list_series(cluster=cluster, metric="gpu_capacity")[SERIES_ID])
    for scope in scopes:
        value = store.capacity_at(cluster, scope, at)
        if value is not None:
            gpus[scope], source[scope] = value, "store"
            continue
        sid = f"{cluster}/{scope}/gpu_capacity"
        if sid in sampled:
            values = store.load_panel([sid], end=at)
            if values.empty:
                values = store.load_panel([sid])
            if not values.empty:
                gpus[scope], source[scope] = float(values["value"].iloc[-1]), "samples"
    if table is not None:
        mine = table[table["cluster"].isna() | (table["cluster"] == cluster)]
        for name, value in zip(mine["scope"].astype(str), mine["gpus"].astype(float),
                               strict=True):
            if name in scopes:
                gpus[name], source[name] = float(value), "file"
        other = sorted(set(mine["scope"]) - set(scopes))
        if other:
            logger.warning("capacity table: scope(s) %s have no demand series in %s",
                           ", ".join(map(str, other)), cluster)
    return gpus, source


def _check_reservations(store: Store, cluster: str,
                        reservations: Sequence[Reservation]) -> None:
    """Every reservation of the cluster names one of its scopes (or ``all``).

    Raises:
        IngestError: for one read from a file, naming the file, the line and the scope.
        ConfigError: for another (the API's ``reservation=`` values).
    """
    scopes = set(store.list_series(cluster=cluster)["scope"]) | {"all"}
    for r in reservations:
        if r.cluster not in (None, cluster) or r.scope in scopes:
            continue
        known = ", ".join(sorted(map(str, scopes)))
        if r.source is None:
            raise ConfigError(f"reservation of scope {r.scope!r}: cluster {cluster!r} has no "
                              f"such scope; its scopes: {known}")
        raise IngestError(f"cluster {cluster!r} has no scope {r.scope!r}", path=r.source,
                          line=r.line, column="scope", fix=f"use one of: {known}")


def plan_cluster_capacity(
    store: Store,
    cluster: str,
    source: ForecastSource,
    *,
    scope: str | None = None,
    horizon: str = "1d",
    quantile: float = 0.95,
    capacity_table: pd.DataFrame | None = None,
    reservations: Sequence[Reservation] = (),
    growth: float = 1.0,
    watts: Watts | None = None,
) -> CapacityPlan:
    """Plan a cluster's capacity: forecast its demand series with ``source``, load their
    capacities and recent peaks, and plan (:func:`prism.capacity.plan_capacity`).

    Args:
        store: the store (series, capacities, history).
        cluster: the cluster.
        source: the forecasts (a model fitted now, or the hub's models).
        scope: one scope only (default: every scope with a demand series).
        horizon: the window (a duration or steps).
        quantile: the planning quantile.
        capacity_table: ``cluster, scope, gpus`` rows that override stored capacities
            (:func:`prism.capacity.read_capacity_table`).
        reservations: known future jobs added on top of the forecast (read from a file with
            :func:`prism.capacity.read_reservations`, or parsed with
            :func:`prism.capacity.parse_reservation`).
        growth: demand growth factor.
        watts: idle and busy draw per GPU.

    Returns:
        The :class:`~prism.capacity.CapacityPlan`.

    Raises:
        SeriesNotFound: for an unknown cluster or scope.
        IngestError: for a reservation from a file whose scope the cluster lacks (file and
            line named).
        ConfigError / ModelNotReady: for a bad model, horizon, quantile, growth or
            reservation, or while the hub fits a model.
    """
    from prism.capacity import DISTRIBUTION_LEVELS, plan_capacity

    if not 0 < quantile < 1:
        raise ConfigError(f"--quantile {quantile!r} must be between 0 and 1, e.g. 0.95")
    ids = demand_series(store, cluster, scope=scope)
    _check_reservations(store, cluster, reservations)
    levels = sorted({*DISTRIBUTION_LEVELS, float(quantile)})
    frame, freq_s = source.forecast(store, sorted(ids.values()), horizon, levels)
    at = pd.Timestamp(frame["ts"].min())
    gpus, where = capacities_at(store, cluster, list(ids), at, capacity_table)
    recent = store.load_panel(list(ids.values()), start=at - _RECENT, end=at)
    peaks = recent.groupby("series_id")["value"].max()
    recent_peak = {scope_: float(peaks[sid]) for scope_, sid in ids.items() if sid in peaks}
    return plan_capacity(frame, gpus, quantile=float(quantile), freq_s=freq_s, watts=watts,
                         growth=growth, reservations=reservations, recent_peak=recent_peak,
                         capacity_source=where)
