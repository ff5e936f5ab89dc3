"""A local server that speaks the Prometheus HTTP API (``/api/v1/query_range``), for the tests
of live pulls (``prism ingest --prometheus-url``) and of ``prism watch``.

:class:`FakePrometheus` answers from :func:`value` (exact whole numbers) and records every
request; :func:`serve` runs it on 127.0.0.1 in a thread; the ``prometheus`` fixture yields a
running one (import ``prometheus_fixture``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from prism.ingest.prometheus_pull import MAX_POINTS

T0 = 1767571200  # 2026-01-05T00:00:00Z
DAY = 86_400
QUERY = "sum by (vc) (gpus_busy)"
VCS = ("a", "b")
#: Prometheus' answer to a request of more than 11,000 points per series (web/api/v1/api.go).
RESOLUTION_ERROR = ("exceeded maximum resolution of 11,000 points per timeseries. Try "
                    "decreasing the query resolution (?step=XX)")


def value(query: str, vc: str, ms: int) -> float:
    """What the fake server answers for ``query``'s series ``vc`` at ``ms``: a whole number
    0..12 that changes every 10 s (exact in JSON and in DuckDB)."""
    return float((ms // 10_000 * 7 + (3 if vc == "b" else 0) + len(query)) % 13)


@dataclass
class FakePrometheus:
    """``/api/v1/query_range`` from :func:`value`; records every request.

    Attributes:
        fail_at: answer this request (1-based) with a 503 ``timeout`` error.
        token: refuse requests without ``Authorization: Bearer <token>`` (401).
        hang: hold every request until this event is set (a server that does not answer).
        until_ms: the newest sample each series has (Unix ms), by ``"{query}/{vc}"`` or
            for all series under ``"*"``; series not named have every sample (a server
            whose data grows: raise it between pulls).
    """

    url: str = ""
    requests: list[dict[str, str]] = field(default_factory=list)
    fail_at: int | None = None
    token: str | None = None
    hang: threading.Event | None = None
    until_ms: dict[str, int] = field(default_factory=dict)

    def answer(self, path: str, params: dict[str, str], auth: str) -> tuple[int, object]:
        self.requests.append({**params, "authorization": auth})
        if path != "/api/v1/query_range":
            return 404, "404 page not found"
        if self.hang is not None:
            self.hang.wait(30)
        if self.token is not None and auth != f"Bearer {self.token}":
            return 401, "Unauthorized"
        if self.fail_at == len(self.requests):
            return 503, error_body("timeout", "query timed out in expression evaluation")
        query = params["query"]
        if query.count("(") != query.count(")"):
            return 400, error_body("bad_data", f'invalid parameter "query": 1:{len(query)}: '
                                   "parse error: unclosed left parenthesis")
        start, end, step = (round(float(params[k]) * 1000) for k in ("start", "end", "step"))
        times = range(start, end + 1, step)
        if len(times) > MAX_POINTS:
            return 400, error_body("bad_data", RESOLUTION_ERROR)
        result = []
        for vc in VCS:
            last = self.until_ms.get(f"{query}/{vc}", self.until_ms.get("*"))
            values = [[t / 1000, f"{value(query, vc, t):g}"] for t in times
                      if last is None or t <= last]
            if values:  # Prometheus leaves out a series without samples in the range
                result.append({"metric": {"vc": vc}, "values": values})
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}


def error_body(kind: str, message: str) -> dict[str, str]:
    """A Prometheus error answer."""
    return {"status": "error", "errorType": kind, "error": message}


@contextmanager
def serve(fake: FakePrometheus) -> Iterator[FakePrometheus]:
    """Run ``fake`` on 127.0.0.1 (a free port) in a thread; sets ``fake.url``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            parts = urlsplit(self.path)
            params = {k: v[0] for k, v in parse_qs(parts.query).items()}
            code, body = fake.answer(parts.path, params, self.headers.get("Authorization", ""))
            data = (json.dumps(body) if not isinstance(body, str) else body).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json" if not isinstance(
                    body, str) else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (the timeout test)
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        if fake.hang is not None:
            fake.hang.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(name="prometheus")
def prometheus_fixture() -> Iterator[FakePrometheus]:
    """The fixture ``prometheus``: the fake server on 127.0.0.1 (a free port), in a thread.
    Import it into a test module to use it there."""
    with serve(FakePrometheus()) as fake:
        yield fake
