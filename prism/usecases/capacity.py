"""The capacity plan of a cluster: forecast its series, load capacities, plan.

``prism capacity`` and ``GET /v1/capacity`` call :func:`plan_cluster_capacity` with their
forecast source: :class:`SavedModels` (the CLI: the newest saved model of each series, refit
only when asked or when there is none) or :class:`~prism.usecases.forecast.HubModels` (the
API: the same registry models, served by the hub). Loading capacities, reservations and history
is here, the planning itself in :mod:`prism.capacity`, and the report
(:mod:`prism.usecases.report`) plans each cluster with the same function.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from prism.errors import ConfigError, IngestError, SeriesNotFound
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX, SERIES_ID, freq_seconds

if TYPE_CHECKING:
    from prism.capacity import CapacityPlan, Reservation, Watts
    from prism.store import Store
    from prism.usecases.forecast import ForecastSource

logger = logging.getLogger(__name__)

#: Series a capacity plan sizes each scope on, preferred first (``gpu_demand`` only for a
#: scope without GPUs in use).
DEMAND_METRICS = ("gpus_in_use", "gpu_demand")
#: The history behind the release guard and the cap of the queue allowance.
_RECENT = pd.Timedelta(days=7)
#: Plans are capped at capacity only for GPUs in use (allocations cannot exceed what is
#: installed; demand with a queue can).
ALLOCATED = "/gpus_in_use"


@dataclass(frozen=True)
class PlannedSeries:
    """The series a cluster's plan forecasts.

    Attributes:
        sizing: scope -> its GPUs in use series (else its demand series).
        queue: scope -> ``(pending, None)`` with its queued GPUs series, or ``(demand, in
            use)``: queued GPUs as demand minus in use; absent: no queue series.
    """

    sizing: dict[str, str]
    queue: dict[str, tuple[str, str | None]]

    def all_ids(self) -> list[str]:
        """Every series to forecast."""
        ids = set(self.sizing.values())
        for first, second in self.queue.values():
            ids.update(s for s in (first, second) if s)
        return sorted(ids)


def demand_series(store: Store, cluster: str, *, scope: str | None = None) -> dict[str, str]:
    """Scope -> the series a capacity plan sizes it on (``gpus_in_use``, else ``gpu_demand``).

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
        raise SeriesNotFound(f"no gpus_in_use or gpu_demand series for {where}{hint}")
    return dict(sorted(out.items()))


def planned_series(store: Store, cluster: str) -> PlannedSeries:
    """The series of a cluster's plan: per scope what it is sized on and its queue.

    Raises:
        SeriesNotFound: as :func:`demand_series`.
    """
    sizing = demand_series(store, cluster)
    frame = store.list_series(cluster=cluster)
    ids = {(str(r.scope), str(r.metric)): str(r.series_id) for r in frame.itertuples()}
    queue: dict[str, tuple[str, str | None]] = {}
    for scope, sid in sizing.items():
        if not sid.endswith(ALLOCATED):
            continue  # sized on demand: the queue is in it already
        if (scope, "gpus_pending") in ids:
            queue[scope] = (ids[scope, "gpus_pending"], None)
        elif (scope, "gpu_demand") in ids:
            queue[scope] = (ids[scope, "gpu_demand"], sid)
    return PlannedSeries(sizing, queue)


def capacities_at(store: Store, cluster: str, scopes: Sequence[str], at: pd.Timestamp,
                  table: pd.DataFrame | None = None
                  ) -> tuple[dict[str, float], dict[str, str]]:
    """Scope -> GPUs installed at ``at`` and where that came from: a ``--capacity`` table
    (:func:`prism.capacity.read_capacity_table`), else the store's ``capacity`` rows
    (capacity-csv), else the ``gpu_capacity`` samples; a cluster whose series have one GPU
    type gives that type's scope the cluster's capacity (source ``cluster``)."""
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
    every = store.list_series(cluster=cluster)["scope"].astype(str)
    types = sorted({s for s in every if s.startswith(GPU_TYPE_PREFIX)})
    if len(types) == 1 and types[0] in scopes and types[0] not in gpus and ALL_SCOPE in gpus:
        gpus[types[0]], source[types[0]] = gpus[ALL_SCOPE], "cluster"
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
    """Plan a cluster's capacity: forecast each scope's GPUs in use and queued GPUs with
    ``source``, load capacities and recent peaks, and plan
    (:func:`prism.capacity.plan_capacity`: in-use quantile plus a queue allowance, moves
    between VCs, the cluster's net).

    Args:
        store: the store (series, capacities, history).
        cluster: the cluster.
        source: the forecasts (saved models, or the hub's models).
        scope: show one scope only (the whole cluster is planned: the moves need every VC).
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
    if scope is not None:
        demand_series(store, cluster, scope=scope)  # an unknown scope is named
    series = planned_series(store, cluster)
    _check_reservations(store, cluster, reservations)
    levels = sorted({*DISTRIBUTION_LEVELS, float(quantile)})
    frame, freq_s = source.forecast(store, series.all_ids(), horizon, levels)
    sizing = frame[frame[SERIES_ID].isin(set(series.sizing.values()))]
    at = pd.Timestamp(frame["ts"].min())
    gpus, where = capacities_at(store, cluster, list(series.sizing), at, capacity_table)
    recent = store.load_panel(series.all_ids(), start=at - _RECENT, end=at)
    peaks = recent.groupby(SERIES_ID)["value"].max()
    recent_peak = {s: float(peaks[sid]) for s, sid in series.sizing.items() if sid in peaks}
    queue, queue_peak = _queue(frame, recent, series)
    plan = plan_capacity(sizing, gpus, quantile=float(quantile), freq_s=freq_s, watts=watts,
                         growth=growth, reservations=reservations, recent_peak=recent_peak,
                         capacity_source=where, queue=queue, queue_peak=queue_peak)
    return plan.only(scope) if scope is not None else plan


def _queue(frame: pd.DataFrame, recent: pd.DataFrame, series: PlannedSeries
           ) -> tuple[pd.DataFrame, dict[str, float]]:
    """The mean forecast of each scope's queued GPUs (``series_id, mean``) and the queue's
    recent peak: ``gpus_pending``, or ``gpu_demand`` minus ``gpus_in_use`` (means add up)."""
    parts, peak = [], {}
    means = {str(sid): g["mean"].to_numpy(dtype=float)
             for sid, g in frame.sort_values("ts").groupby(SERIES_ID)}
    history = {str(sid): g.set_index("ts")["value"] for sid, g in recent.groupby(SERIES_ID)}
    for scope, (first, minus) in series.queue.items():
        if first not in means or (minus is not None and minus not in means):
            continue
        mean = means[first] - (means[minus] if minus is not None else 0.0)
        parts.append(pd.DataFrame({SERIES_ID: first, "mean": mean}))
        seen = history.get(first)
        if seen is not None and minus is not None:
            seen = (seen - history.get(minus, pd.Series(dtype=float))).dropna()
        if seen is not None and len(seen):
            peak[scope] = max(float(seen.max()), 0.0)
    queue = (pd.concat(parts, ignore_index=True) if parts
             else pd.DataFrame({SERIES_ID: pd.Series(dtype=str), "mean": pd.Series(dtype=float)}))
    return queue, peak


class SavedModels:
    """Forecasts by the newest saved model of each series (the CLI's default), as the API's
    hub serves them: the newest registry model of the alias and hyperparameters fitted on
    the series, updated with the points stored since. Series without one (or all, with
    ``refit``) are fitted now, together, and the model is saved, so that later runs and the
    server use it too. ``notes`` says what was done.

    Args:
        model: the forecaster's alias.
        params: its hyperparameters as text, typed as their defaults.
        models_dir: the registry (default ``PRISM_MODELS_DIR`` or ``./models``).
        refit: fit a new model on every series, even those with a saved one.

    Raises:
        ConfigError: for an unknown model or parameter.
    """

    def __init__(self, model: str = "prism", params: dict[str, str] | None = None, *,
                 models_dir: str | Path | None = None, refit: bool = False) -> None:
        from prism.forecasters.params import typed_params
        from prism.hub.types import spec_key

        self._model = model
        self._params = dict(params or {})
        self._key = spec_key(model, typed_params(model, self._params))
        self._models_dir = models_dir
        self._refit = refit
        self.notes: list[str] = []

    @property
    def label(self) -> str:
        """The model key (``prism``, or ``prism[use_rnn=false]``)."""
        return self._key

    def forecast(self, store: Store, series_ids: list[str], horizon: str,
                 levels: list[float]) -> tuple[pd.DataFrame, int]:
        """Forecast with the saved models; fit (and save) one for the series without."""
        from prism import registry
        from prism.config import get_settings
        from prism.hub.types import spec_key
        from prism.usecases.forecast import forecast_series

        root = (Path(self._models_dir) if self._models_dir is not None
                else get_settings().models_dir)
        newest: dict[str, str] = {}
        for record in registry.list_models(root, alias=self._model):  # newest first
            try:
                key = spec_key(record.alias, record.params)
            except ConfigError:
                continue
            if key == self._key:
                for sid in record.series_ids:
                    newest.setdefault(sid, record.model_id)
        by_model: dict[str, list[str]] = {}
        missing = list(series_ids) if self._refit else [s for s in series_ids if s not in newest]
        for sid in series_ids:
            if sid not in missing:
                by_model.setdefault(newest[sid], []).append(sid)
        frames = []
        for model_id, sids in sorted(by_model.items()):
            frames.append(forecast_series(store, sids, horizon=horizon, quantiles=levels,
                                          model=self._model, from_model=model_id,
                                          models_dir=root).frame)
        if by_model:
            self.notes.append(f"forecast by the saved {self._key} model(s) "
                              f"{', '.join(sorted(by_model))} in {root} (updated to the stored "
                              "data); --refit fits a new one")
        if missing:
            done = forecast_series(store, missing, horizon=horizon, quantiles=levels,
                                   model=self._model, params=self._params, save=True,
                                   models_dir=root)
            why = "--refit" if self._refit else "no saved model of them"
            self.notes.append(f"fitted {self._key} now on {len(missing)} series ({why}) and "
                              f"saved it as {done.model_id} in {root}")
            frames.append(done.frame)
        frame = pd.concat(frames, ignore_index=True)
        freq = store.list_series().set_index(SERIES_ID).loc[series_ids[0], "freq"]
        return frame, freq_seconds(str(freq))

