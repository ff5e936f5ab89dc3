"""``/healthz``, ``/readyz`` and ``/metrics``: open even when a token is set; and
``/v1/metrics``, the per-series metrics, behind it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from prism.usecases.forecast import hub_status
from service.deps import ServerDep
from service.schemas import ErrorOut, HealthOut, ReadyOut

router = APIRouter(tags=["health"])
#: Routes under ``/v1``: behind the token.
guarded_router = APIRouter(prefix="/v1", tags=["health"])


@router.get("/healthz", response_model=HealthOut)
async def healthz() -> HealthOut:
    """The process is up."""
    return HealthOut()


@router.get("/readyz", response_model=ReadyOut, responses={503: {"model": ErrorOut}})
async def readyz(server: ServerDep) -> ReadyOut | JSONResponse:
    """The store is open, the default model is warm and the forecast hub is serving."""
    status = hub_status(server)
    if status is None:
        return JSONResponse({"detail": "starting (warming up the default model) or stopping"},
                            status_code=503, headers={"Retry-After": "1"})
    return ReadyOut.model_validate(status)


# probes (a load balancer's or Kubernetes' HEAD check) may ask with HEAD: the same status,
# no body; left out of the schema, which lists each operation once
@router.head("/healthz", include_in_schema=False)
async def healthz_head() -> Response:
    """HEAD /healthz."""
    return Response(status_code=200)


@router.head("/readyz", include_in_schema=False)
async def readyz_head(server: ServerDep) -> Response:
    """HEAD /readyz: 200 when ready, else 503 with Retry-After."""
    if hub_status(server) is None:
        return Response(status_code=503, headers={"Retry-After": "1"})
    return Response(status_code=200)


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
                             "description": "Prometheus text format"}})
def metrics(request: Request) -> Response:
    """Prometheus metrics: requests, latency, cache hits, fit times, freshness, drift."""
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)


@guarded_router.get("/metrics", response_class=Response,
                    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {
                        "type": "string"}}}, "description": "Prometheus text format"}})
def series_metrics(request: Request) -> Response:
    """The metrics of ``/metrics`` and the gauges per series: data age, last bucket, rolling
    forecast error (scrape with the bearer token)."""
    text = (generate_latest(request.app.state.metrics)
            + generate_latest(request.app.state.series_metrics))
    return Response(text, media_type=CONTENT_TYPE_LATEST)
