"""``/v1/metrics/forecasts``: the latest forecast of each series and the latest capacity plan
of each scope as Prometheus gauges, for KEDA's Prometheus scaler, the HPA through
prometheus-adapter, and Grafana.

Behind the token, as ``/v1/metrics``: the labels name every cluster, VC and tenant. A scrape
reads what the hub kept of the forecasts and plans it served (a few numbers per series): it
fits and forecasts nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from prism.hub import ForecastHub
from service.deps import ServerDep

router = APIRouter(prefix="/v1/metrics", tags=["health"])


class _Forecasts(Collector):
    """The hub's forecast and capacity gauges, read at the scrape."""

    def __init__(self, hub: ForecastHub) -> None:
        self._hub = hub

    def collect(self) -> Iterator[Metric]:
        yield from self._hub.collect_forecasts()


@router.get("/forecasts", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
                             "description": "Prometheus text format"}})
def forecast_metrics(server: ServerDep) -> Response:
    """The latest served forecast of each series at 1h, 6h and 1d ahead
    (``prism_forecast_gpus{series_id,quantile,horizon}``, ``prism_forecast_mean_gpus``, and
    ``_ratio``/``_jobs``/``_nodes`` for series in those units) and the latest capacity plan of
    each scope (``prism_capacity_needed_gpus{cluster,scope}``); scrape with the bearer token."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Forecasts(server))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
