"""ASGI middleware: the bearer token, cross-site writes, the request body limit and the HTTP
metrics.

Both are plain ASGI (no ``BaseHTTPMiddleware``, which costs a task per request).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import PayloadTooLarge, error_response

#: Request latency buckets (seconds): fine below 25 ms, where cached forecasts answer.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0)


class BodyLimit:
    """Answer 413 to a request whose body is over ``max_bytes``.

    A declared ``Content-Length`` over the limit is refused before the body is read; a body
    without one (chunked) is counted as it arrives, and reading past the limit raises
    :class:`PayloadTooLarge` inside the app (mapped to 413 by the exception handler).
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await error_response(_too_large(declared, limit))(scope, receive, send)
                    return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _too_large(received, limit)
            return message

        await self.app(scope, limited, send)


def _too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body of {size:,} bytes is over the limit of {limit:,} bytes; split the "
        "upload into smaller files or raise PRISM_MAX_BODY_BYTES on the server")


class BearerToken:
    """Refuse (401) a request under ``prefix`` without ``Authorization: Bearer <token>``.

    The token is compared in constant time (:func:`hmac.compare_digest`); the scheme name is
    case-insensitive and may be followed by several spaces (RFC 7235). A middleware rather
    than a dependency: no route can miss it, and it costs a header lookup per request.
    """

    def __init__(self, app: ASGIApp, *, token: str, prefix: str = "/v1") -> None:
        self.app = app
        self._expected = token.encode()
        self._prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self._prefix):
            given = b""
            for name, value in scope.get("headers", ()):
                if name == b"authorization":
                    scheme, _, credentials = value.partition(b" ")
                    if scheme.lower() == b"bearer":
                        given = credentials.strip(b" ")
                    break
            if not hmac.compare_digest(given, self._expected):
                response = JSONResponse(
                    {"detail": "missing or wrong bearer token: send 'Authorization: Bearer "
                               "<token>' with the server's PRISM_API_TOKEN"},
                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class HttpMetrics:
    """Count requests and time them, by method, route template and status.

    Args:
        app: the ASGI app.
        registry: where the metrics are registered (one per app).
    """

    def __init__(self, app: ASGIApp, *, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter("prism_http_requests", "HTTP requests answered",
                                ["method", "route", "status"], registry=registry)
        self.latency = Histogram("prism_http_request_duration_seconds",
                                 "Time from the request to the end of the response",
                                 ["method", "route"], buckets=LATENCY_BUCKETS,
                                 registry=registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            route: Any = scope.get("route")
            name = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            self.requests.labels(method, name, str(status)).inc()
            self.latency.labels(method, name).observe(time.perf_counter() - start)


class CrossSiteWrites:
    """Refuse (403) a write under ``prefix`` that a browser sends from another site.

    A web page can make the browser POST a form (multipart) to any address without a CORS
    preflight; with no token set, that would write to the store. Browsers say where a request
    comes from (``Sec-Fetch-Site``, ``Origin``); programs (curl, the client) send neither, so
    they are not affected. Origins in ``allowed`` (``PRISM_CORS_ORIGINS``) may write.
    """

    def __init__(self, app: ASGIApp, *, prefix: str, allowed: Sequence[str]) -> None:
        self.app = app
        self.prefix = prefix
        self.allowed = set(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS")
                or not scope["path"].startswith(self.prefix)):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site", "")
        foreign = site in ("cross-site", "same-site") or (
            origin is not None and origin != "null"
            and urlsplit(origin).netloc != headers.get("host", ""))
        if (foreign or origin == "null") and origin not in self.allowed:
            response = JSONResponse(
                {"detail": f"a write from another site ({origin or site}) is refused; add the "
                           "origin to PRISM_CORS_ORIGINS to allow it"}, status_code=403)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
