"""The PRISM REST API: ``create_app()`` builds it; ``lifespan`` opens the one store.

Run it with ``prism serve --host 127.0.0.1 --port 8000`` (uvicorn, one process: the DuckDB
file is opened by one process; requests run on their own cursors of its connection).
"""

from __future__ import annotations

import copy
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client.registry import Collector
from starlette.middleware.trustedhost import TrustedHostMiddleware

from prism import __version__
from prism.config import Settings, get_settings
from prism.errors import PrismError
from prism.hub import ForecastHub
from prism.usecases import open_store
from prism.usecases.forecast import start_hub
from service.errors import handle_prism_error
from service.middleware import BearerToken, BodyLimit, CrossSiteWrites, HttpMetrics
from service.routers import (
    capacity,
    decomposition,
    forecast,
    health,
    ingest,
    models,
    series,
)
from service.schemas import ErrorOut


class _HubMetrics(Collector):
    """The forecast hub's metrics, read at each scrape (the hub starts with the lifespan)."""

    def __init__(self, app: FastAPI, *, per_series: bool) -> None:
        self._app = app
        self._per_series = per_series  # only the per-series gauges, or only the others

    def collect(self) -> Any:
        hub: ForecastHub | None = getattr(self._app.state, "hub", None)
        if hub is not None:
            yield from hub.collect(shared=not self._per_series, per_series=self._per_series)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The FastAPI app on the store and registry that ``settings`` name.

    Args:
        settings: default :func:`prism.config.get_settings` (``PRISM_*`` variables).

    Returns:
        The app; its lifespan opens the store and starts the forecast hub.
    """
    settings = settings or get_settings()
    disable_created_metrics()  # no *_created series: they double every counter's output

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = open_store(settings.db)
        try:
            app.state.store = store
            app.state.hub = start_hub(store, settings)
            # what is loaded now (torch, pandas, the catalogue) lives as long as the process:
            # keep the garbage collector from walking it again and again (long pauses)
            gc.collect()
            gc.freeze()
            try:
                yield
            finally:
                app.state.hub.close()
        finally:
            store.close()

    app = FastAPI(
        title="PRISM", version=__version__, lifespan=lifespan,
        description="GPU-cluster workload forecasts for schedulers and capacity tools. "
        "Every /v1 route needs `Authorization: Bearer <PRISM_API_TOKEN>` when the server "
        "sets a token. Errors are `{\"detail\": ...}`.",
    )
    app.state.settings = settings
    # /metrics (open): process, HTTP, cache and fit metrics; /v1/metrics (behind the token)
    # adds the gauges labelled by series id, which name every cluster, VC and tenant
    app.state.metrics = CollectorRegistry(auto_describe=True)
    app.state.metrics.register(_HubMetrics(app, per_series=False))
    app.state.series_metrics = CollectorRegistry(auto_describe=True)
    app.state.series_metrics.register(_HubMetrics(app, per_series=True))
    app.add_exception_handler(PrismError, handle_prism_error)
    app.include_router(health.router)
    guarded: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorOut, "description": "no or wrong bearer token"}}
    for module in (forecast, series, ingest, decomposition, capacity, models):
        app.include_router(module.router, responses=guarded)
    app.include_router(health.guarded_router, responses=guarded)
    # the last added runs first: metrics, Host check, CORS (answers preflights), token,
    # cross-site writes, body limit
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(CrossSiteWrites, prefix="/v1", allowed=settings.cors_origins)
    if settings.api_token:
        app.add_middleware(BearerToken, token=settings.api_token, prefix="/v1")
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    if settings.allowed_hosts != ["*"]:  # checked first: a foreign Host gets 400
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.allowed_hosts)
    app.add_middleware(HttpMetrics, registry=app.state.metrics)  # counts 401s and 413s too
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, with 422 answers that may also carry a message (domain errors)."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes)
        schemas = schema.get("components", {}).get("schemas", {})
        if "HTTPValidationError" in schemas:
            fixed = copy.deepcopy(schemas["HTTPValidationError"])
            detail = fixed["properties"]["detail"]
            fixed["properties"]["detail"] = {"anyOf": [detail, {"type": "string"}],
                                             "title": "Detail"}
            schemas["HTTPValidationError"] = fixed
        # the token (checked by the BearerToken middleware) as the /v1 security scheme
        schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
            "type": "http", "scheme": "bearer",
            "description": "PRISM_API_TOKEN, when the server sets one"}
        for path, item in schema.get("paths", {}).items():
            if path.startswith("/v1"):
                for operation in item.values():
                    operation["security"] = [{"bearer": []}]
        app.openapi_schema = schema
    return app.openapi_schema
