"""The PRISM REST API: ``create_app()`` builds it; ``lifespan`` opens the one store.

Run it with ``prism serve --host 127.0.0.1 --port 8000`` (uvicorn, one process: the DuckDB
file is opened by one process; requests run on their own cursors of its connection).
"""

from __future__ import annotations

import base64
import copy
import gc
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from prometheus_client import CollectorRegistry, ProcessCollector, disable_created_metrics
from prometheus_client.registry import Collector
from starlette.middleware.trustedhost import TrustedHostMiddleware

from prism import __version__
from prism.config import Settings, get_settings
from prism.errors import PrismError
from prism.hub import ForecastHub
from prism.usecases import open_store
from prism.usecases.forecast import start_hub
from service.deps import SingleQueryValues
from service.errors import handle_prism_error, handle_validation_error
from service.middleware import (
    AllowedMethods,
    BearerToken,
    BodyLimit,
    CrossSiteWrites,
    HttpMetrics,
    ServerErrors,
)
from service.routers import (
    capacity,
    decomposition,
    forecast,
    health,
    ingest,
    models,
    prometheus,
    series,
)
from service.schemas import ErrorOut

#: The assets of ``/docs`` and ``/redoc``, served at ``/static`` (versions and licences:
#: ``static/NOTICE``), so that the docs work without a network.
STATIC_DIR = Path(__file__).parent / "static"
#: What an operation id looks like: the route function's name (``get_forecast``).
OPERATION_ID = re.compile(r"^[a-z][a-z0-9_]*$")


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
        docs_url=None, redoc_url=None,  # _add_docs: served from the bundled assets
        generate_unique_id_function=_operation_id,
        description="GPU-cluster workload forecasts for schedulers and capacity tools. "
        "Every /v1 route needs `Authorization: Bearer <PRISM_API_TOKEN>` when the server "
        "sets a token. Errors are `{\"detail\": ...}`.",
    )
    app.state.settings = settings
    # /metrics (open): process, HTTP, cache and fit metrics; /v1/metrics (behind the token)
    # adds the gauges labelled by series id, which name every cluster, VC and tenant
    app.state.metrics = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=app.state.metrics)  # process CPU, memory, file descriptors
    app.state.metrics.register(_HubMetrics(app, per_series=False))
    app.state.series_metrics = CollectorRegistry(auto_describe=True)
    app.state.series_metrics.register(_HubMetrics(app, per_series=True))
    app.add_exception_handler(PrismError, handle_prism_error)
    app.add_exception_handler(RequestValidationError, handle_validation_error)
    app.include_router(health.router)
    guarded: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorOut, "description": "no or wrong bearer token",
              # JSON on every route, the HTML report's too (whose default is text/html)
              "content": {"application/json": {"schema": {
                  "$ref": "#/components/schemas/ErrorOut"}}}}}
    for module in (forecast, series, ingest, decomposition, capacity, models):
        # a scalar query parameter given twice is a 422 (it served the last one silently);
        # GET /v1/forecast checks its own query (parse_query), POST routes take a body
        app.include_router(module.router, responses=guarded,
                           dependencies=[] if module in (forecast, models)
                           else [SingleQueryValues])
    app.include_router(health.guarded_router, responses=guarded)
    app.include_router(prometheus.router, responses=guarded)
    # the last added runs first: metrics, Host check, CORS (answers preflights), token,
    # cross-site writes, body limit
    app.add_middleware(AllowedMethods)  # innermost: OPTIONS on /v1 still needs the token
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
    app.add_middleware(ServerErrors)  # a JSON 500/507, never a dropped connection
    app.add_middleware(HttpMetrics, registry=app.state.metrics)  # counts 401s and 413s too
    _add_docs(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _operation_id(route: APIRoute) -> str:
    """An operation's id: the name of its route function (``get_forecast``, not FastAPI's
    ``get_forecast_v1_forecast_get``), which client generators make into method names."""
    return route.name


def _check_operation_ids(schema: dict[str, Any]) -> None:
    """Raise when two operations of the schema share an id, or one is not snake_case (the
    ids are route function names: two routers may hold functions of one name).

    Raises:
        RuntimeError: naming the operations whose route functions to rename.
    """
    seen: dict[str, str] = {}
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            ident = str(operation.get("operationId", ""))
            if not OPERATION_ID.match(ident):
                raise RuntimeError(f"operation id {ident!r} of {where} is not snake_case: "
                                   "rename its route function")
            if ident in seen:
                raise RuntimeError(f"operation id {ident!r} of {where} is already that of "
                                   f"{seen[ident]}: rename one of the route functions")
            seen[ident] = where


def _add_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` on the bundled assets of ``/static``: no CDN,
    so they work offline. Like ``/openapi.json`` they are outside ``/v1``, so open; trying a
    ``/v1`` route from ``/docs`` needs the token (its Authorize button)."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")  # behind a proxy's prefix
        return _same_origin_only(get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json", title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}/static/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/static/swagger-ui/swagger-ui.css",
            swagger_favicon_url=f"{root}/static/favicon.svg",
            # no badge from validator.swagger.io
            swagger_ui_parameters={"validatorUrl": None}))

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return _same_origin_only(get_redoc_html(
            openapi_url=f"{root}/openapi.json", title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}/static/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{root}/static/favicon.svg", with_google_fonts=False))


def _same_origin_only(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a Content-Security-Policy that lets it load and call this server only.

    The bundles hold addresses of their vendors (ReDoc's footer shows a logo from its CDN):
    the browser must not fetch them, which would tell a third party who reads the docs, and
    fails offline anyway. Inline scripts run only if they are the page's own (by hash).
    """
    html = bytes(page.body).decode()
    sources = ["'self'"] + [
        f"'sha256-{base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()}'"
        for code in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)]
    page.headers["Content-Security-Policy"] = (
        f"default-src 'self'; script-src {' '.join(sources)}; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
        "worker-src 'self' blob:; connect-src 'self'; base-uri 'self'; form-action 'self'; "
        "frame-ancestors 'none'")
    return page


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, with 422 answers that may also carry a message (domain errors).

    Raises:
        RuntimeError: when two operations share an id (:func:`_check_operation_ids`).
    """
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes)
        _check_operation_ids(schema)
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
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                if "requestBody" in operation:
                    operation["responses"].setdefault("400", {
                        "description": "the body is not valid JSON, or a malformed or "
                                       "truncated multipart body",
                        "content": {"application/json": {"schema": {
                            "$ref": "#/components/schemas/ErrorOut"}}}})
        app.openapi_schema = schema
    return app.openapi_schema
