"""``/v1/capacity`` and ``/v1/reports/capacity``: the capacity plan and report
(:mod:`prism.usecases.capacity`, :mod:`prism.usecases.report`: the same use cases as
``prism capacity`` and ``prism report``, with the hub's models as the forecast source)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from prism.capacity import Watts, parse_reservation, tidy
from prism.errors import ConfigError
from prism.usecases import report as report_uc
from prism.usecases.capacity import (
    choose_cluster_quantiles,
    plan_cluster_capacity,
    plan_cluster_procurement,
    procurement_days,
)
from prism.usecases.forecast import HubModels
from prism.usecases.pool import plan_cluster_pool
from service.deps import ServerDep, StoreDep
from service.schemas import (
    CapacityOut,
    CapacityQuery,
    CapacityRowOut,
    ErrorOut,
    MoveOut,
    PoolOut,
    ProcurementOut,
    ProcurementRowOut,
    QuantileChoiceOut,
    ReportQuery,
    TrackRecordOut,
    TrackRecordQuery,
)

router = APIRouter(prefix="/v1", tags=["capacity"])

_ERRORS: dict[int | str, dict[str, object]] = {
    404: {"model": ErrorOut, "description": "no demand series for the cluster or scope"},
    422: {"model": ErrorOut, "description": "an input PRISM cannot use"},
    503: {"model": ErrorOut, "description": "models are being fitted; retry later"},
}


@router.get("/capacity", response_model=CapacityOut, responses=_ERRORS)
def get_capacity(q: Annotated[CapacityQuery, Query()], server: ServerDep,
                 store: StoreDep) -> CapacityOut:
    """GPUs each scope needs over the horizon (GPUs in use at the quantile plus a queue
    allowance), against its capacity: expected shortfall and idle GPU-hours, queueing risk,
    energy, the moves between VCs, and what to do and why. With ``max_unmet``, each scope's
    quantile is chosen from the planning backtest; with ``procurement=30d``, the plan for
    buying (each scope's daily peak projected from its trend) comes with it; with
    ``pool=true``, the shared-pool alternative (a quota per VC, one pool they borrow from)."""
    if q.procurement is not None:
        procurement_days(q.procurement, name="procurement")  # refused before any work
    if q.pool and q.scope:
        raise ConfigError("pool=true pools every VC of the cluster: drop scope")
    watts = Watts(idle=q.watts_idle, busy=q.watts_busy)
    source = HubModels(server, q.model, q.params)
    choice = (choose_cluster_quantiles(store, q.cluster, source, max_unmet=q.max_unmet,
                                       horizon=q.horizon, fallback=q.quantile,
                                       day_floor=q.day_floor)
              if q.max_unmet is not None else None)
    plan = plan_cluster_capacity(
        store, q.cluster, source, scope=q.scope, horizon=q.horizon, quantile=q.quantile,
        reservations=[parse_reservation(r) for r in q.reservation], growth=q.growth,
        watts=watts, choice=choice, record="api" if q.record else None, day_floor=q.day_floor)
    server.note_capacity(plan)  # for the capacity gauges of /v1/metrics/forecasts
    procurement = None
    if q.procurement is not None:
        bought = plan_cluster_procurement(
            store, q.cluster, scope=q.scope, horizon=q.procurement, weeks=q.trend_weeks,
            quantile=q.quantile, growth=q.growth)
        procurement = ProcurementOut(
            cluster=bought.cluster, horizon_days=bought.horizon_days, weeks=bought.weeks,
            rows=[ProcurementRowOut.model_validate(r) for r in bought.records(steps=q.steps)])
    pool = (PoolOut.model_validate(plan_cluster_pool(
        store, plan, max_unmet=q.max_unmet, record="api" if q.record else None,
        model=source.label, growth=q.growth).records()) if q.pool else None)
    return CapacityOut(cluster=q.cluster, horizon=q.horizon, quantile=q.quantile,
                       watts_idle=watts.idle, watts_busy=watts.busy,
                       rows=[CapacityRowOut.model_validate(r)
                             for r in plan.records(steps=q.steps)],
                       moves=[MoveOut.model_validate(m) for m in plan.move_records()],
                       max_unmet=q.max_unmet,
                       quantile_choice=[QuantileChoiceOut.model_validate(
                           {k: tidy(v) for k, v in c.items()})
                           for c in (choice.records() if choice else [])],
                       procurement=procurement, pool=pool)


@router.get("/capacity/track-record", response_model=TrackRecordOut,
            responses={404: _ERRORS[404], 422: _ERRORS[422]})
def get_track_record(q: Annotated[TrackRecordQuery, Query()],
                     store: StoreDep) -> TrackRecordOut:
    """The served capacity plans of a cluster whose window has ended, against the GPUs in use
    and against yesterday's peak on the same windows, per model and VC with a total, and
    plain-words warnings where they lost to it or covered less than their quantile (what
    ``prism track-record`` prints and the report's section shows)."""
    record = report_uc.track_record(store, q.cluster)
    return TrackRecordOut.model_validate(record.records(plans=q.plans))


#: The report answers HTML, its errors JSON: say so, or the errors would be documented as
#: text/html (the route's media type).
_JSON_ERRORS: dict[int | str, dict[str, object]] = {
    status: {"description": spec["description"], "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/ErrorOut"}}}}
    for status, spec in _ERRORS.items()}


@router.get("/reports/capacity", response_class=HTMLResponse,
            responses={**_JSON_ERRORS,
                       200: {"content": {"text/html": {"schema": {"type": "string"}}},
                             "description": "a self-contained HTML page"}})
def get_capacity_report(q: Annotated[ReportQuery, Query()], server: ServerDep,
                        store: StoreDep) -> HTMLResponse:
    """The capacity report (what ``prism report`` writes) as one self-contained HTML page."""
    page = report_uc.capacity_report(
        store, HubModels(server, q.model), clusters=[q.cluster] if q.cluster else None,
        horizon=q.horizon, quantile=q.quantile, record=q.record, day_floor=q.day_floor,
        pool=q.pool)
    return HTMLResponse(page.html)
