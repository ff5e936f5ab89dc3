"""ASGI middleware: the bearer token, cross-site writes, the request body's limit and
completeness, the methods a route allows (``OPTIONS``), JSON answers to unexpected errors
and the HTTP metrics.

All are plain ASGI (no ``BaseHTTPMiddleware``, which costs a task per request).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Sequence
from typing import Any, NoReturn
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import (
    PayloadTooLarge,
    error_response,
    is_disk_full,
    unexpected_error_response,
)

logger = logging.getLogger(__name__)

#: Request latency buckets (seconds): fine below 25 ms, where cached forecasts answer.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0)


class BodyLimit:
    """Answer 413 to a request whose body is over ``max_bytes``, and 400 to a multipart body
    cut short (no closing boundary).

    A declared ``Content-Length`` over the limit is refused before the body is read; a body
    without one (chunked) is counted as it arrives. Either refusal of a body being read is
    answered here, not by the app: the app's body parsers would turn any error of the stream
    into their own answer (FastAPI's JSON body gives 400 "error parsing the body"), and a
    multipart parser drops a part cut short without a word (the upload would look empty, or
    lose its last file). The app is then stopped (its next read raises
    :class:`BodyRefused`) and whatever it answers after that is dropped.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        headers = Headers(scope=scope)
        try:
            declared = int(headers.get("content-length", "0"))
        except ValueError:
            declared = 0
        if declared > limit:
            await error_response(_too_large(declared, limit))(scope, receive, send)
            return
        closing = _closing_delimiter(headers.get("content-type", ""))
        received = 0
        tail = b""  # the last bytes read, to find a closing delimiter across messages
        closed = closing is None
        answered = False  # the app has started its response
        refused: Response | None = None

        async def refuse(response: Response, exc: Exception) -> NoReturn:
            nonlocal refused
            if answered:  # too late to answer here: the app's error handling takes it
                raise exc
            refused = response
            await response(scope, receive, send)
            raise BodyRefused(str(exc))

        async def limited() -> Message:
            nonlocal received, tail, closed
            if refused is not None:
                raise BodyRefused("the request body was refused")
            message = await receive()
            if message["type"] != "http.request":
                return message
            body = message.get("body", b"")
            received += len(body)
            if received > limit:
                error = _too_large(received, limit)
                await refuse(error_response(error), error)
            if not closed:
                assert closing is not None
                seen = tail + body
                closed = closing in seen
                tail = seen[-len(closing):]
                if not closed and not message.get("more_body", False):
                    detail = (f"the multipart body ends after {received:,} bytes without its "
                              f"closing boundary {closing.decode('latin-1')!r}: the upload was "
                              "cut short; send it again whole")
                    await refuse(JSONResponse({"detail": detail}, status_code=400),
                                 BodyRefused(detail))
            return message

        async def watched(message: Message) -> None:
            nonlocal answered
            if refused is not None:
                return  # the app's own answer to the refused body: ours went out
            if message["type"] == "http.response.start":
                answered = True
            await send(message)

        try:
            await self.app(scope, limited, watched)
        except Exception:
            if refused is None:
                raise


class BodyRefused(Exception):  # noqa: N818 - a signal to the app, not a failure of ours
    """Raised into the app when :class:`BodyLimit` has answered a body it refuses."""


def _closing_delimiter(content_type: str) -> bytes | None:
    """``--boundary--`` of a multipart content type, or ``None`` for any other type."""
    kind, _, params = content_type.partition(";")
    if not kind.strip().lower().startswith("multipart/"):
        return None
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary" and value.strip().strip('"'):
            return b"--" + value.strip().strip('"').encode("latin-1") + b"--"
    return None  # no boundary: the app's parser says what is wrong


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


#: The methods ``OPTIONS`` asks each route about (routes may be nested routers: each is asked
#: whether it serves the path with that method, as the router would).
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class AllowedMethods:
    """Answer ``OPTIONS`` on a route with 204 and ``Allow`` listing the methods it takes.

    Without it the router answers 405 (and names only the methods of the first route on the
    path: ``GET`` for ``/v1/forecast``, which also takes ``POST``). A CORS preflight never gets
    here when CORS is on: :class:`~starlette.middleware.cors.CORSMiddleware`, outside, answers
    it. A path no route serves, or a mounted app's (``/static``), goes on to the router.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "OPTIONS":
            await self.app(scope, receive, send)
            return
        routes = [r for r in getattr(scope.get("app"), "routes", ()) if not isinstance(r, Mount)]
        methods = {method for method in _METHODS
                   if any(r.matches({**scope, "method": method})[0] == Match.FULL
                          for r in routes)}
        if not methods:
            await self.app(scope, receive, send)
            return
        allow = ", ".join(sorted(methods | {"OPTIONS"}))
        await Response(status_code=204, headers={"Allow": allow})(scope, receive, send)


class ServerErrors:
    """Answer an exception that no handler took with JSON (500, or 507 for a full disk) and
    log its traceback; the exception stops here.

    Starlette's own last resort answers a text 500 and raises the exception again, and uvicorn
    then closes the connection: a client saw a reset, not an answer (a fit that raised, a
    disk that filled up under an upload). An exception after the response started cannot be
    answered: it goes on to uvicorn.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started:
                raise
            if not is_disk_full(exc):  # a full disk is logged (once, no traceback) as 507
                logger.exception("500: %s %s failed", scope["method"], scope["path"])
            await unexpected_error_response(exc)(scope, receive, send)
