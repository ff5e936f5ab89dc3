"""The API's documentation and query conventions: ``/docs`` and ``/redoc`` on bundled assets
(no CDN: they work offline, and a real Chromium renders every operation fetching only from
the server), readable operation ids, and ``quantiles`` repeated or comma-separated.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient

from prism.config import Settings
from service import app as service_app
from service.app import OPERATION_ID, STATIC_DIR, create_app
from tests import chromium
from tests.service.conftest import SERIES, LiveServer, started

#: What each docs page loads from the server.
ASSETS = {
    "/docs": {"/openapi.json", "/static/swagger-ui/swagger-ui-bundle.js",
              "/static/swagger-ui/swagger-ui.css", "/static/favicon.svg"},
    "/redoc": {"/openapi.json", "/static/redoc/redoc.standalone.js", "/static/favicon.svg"},
}
#: A JavaScript promise: whether ``CONDITION`` holds within 30 s (polled every 100 ms).
WAIT = ("new Promise(done => {{ const t0 = Date.now(); (function poll() {{ "
        "if ({condition}) done(true); else if (Date.now() - t0 > 30000) done(false); "
        "else setTimeout(poll, 100); }})(); }})")


@pytest.fixture
def guarded(settings: Settings) -> Iterator[TestClient]:
    """The app with a token: /v1 needs it, the docs do not."""
    with started(create_app(settings.model_copy(update={"api_token": "t0ken"}))) as client:
        yield client


def _operations(client: TestClient) -> dict[tuple[str, str], dict[str, Any]]:
    paths = client.get("/openapi.json").json()["paths"]
    return {(method.upper(), path): op for path, item in paths.items()
            for method, op in item.items()}


# -- the pages and their assets -----------------------------------------------------------------
@pytest.mark.parametrize("page", sorted(ASSETS))
def test_docs_pages_load_only_bundled_assets_of_the_server(guarded: TestClient,
                                                           page: str) -> None:
    response = guarded.get(page)  # no token: the docs are open
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert re.findall(r"\w+://", html) == []  # no http(s):// (CDN, fonts, validator) host
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "connect-src 'self'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    referenced = set(re.findall(r"""(?:src|href|url|spec-url)\s*[=:]\s*["']([^"']+)""", html))
    assert referenced == ASSETS[page], referenced
    for asset in referenced:
        got = guarded.get(asset)
        assert got.status_code == 200, asset
        assert len(got.content) > 100, asset
    assert guarded.get("/v1/series").status_code == 401  # while /v1 needs the token


def test_static_assets_are_the_upstream_files_named_in_the_notice() -> None:
    notice = (STATIC_DIR / "NOTICE").read_text()
    checksums = dict(re.findall(r"^\s+(\S+)\s+sha256 ([0-9a-f]{64})$", notice, re.MULTILINE))
    assert set(checksums) == {"swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"}
    for folder in ("swagger-ui", "redoc"):
        assert (STATIC_DIR / folder / "LICENSE").stat().st_size > 1000
        for name, digest in checksums.items():
            path = STATIC_DIR / folder / name
            if path.exists():
                assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, name
                assert (path.parent / f"{path.name}.LICENSE.txt").exists() or name.endswith(
                    ".css")
    assert "SmartBear" in (STATIC_DIR / "swagger-ui" / "NOTICE").read_text()


def test_unknown_static_paths_are_404_and_do_not_leave_the_folder(client: TestClient) -> None:
    assert client.get("/static/nothing.js").status_code == 404
    assert client.get("/static/../app.py").status_code == 404
    assert client.get("/static/%2e%2e/app.py").status_code == 404


def test_the_docs_routes_are_not_operations(client: TestClient) -> None:
    paths = {path for _, path in _operations(client)}
    assert not paths & {"/docs", "/redoc", "/static"}


# -- operation ids ------------------------------------------------------------------------------
def test_operation_ids_are_snake_case_names_and_unique(client: TestClient) -> None:
    operations = _operations(client)
    ids = [op["operationId"] for op in operations.values()]
    assert all(OPERATION_ID.match(i) for i in ids), ids
    assert len(set(ids)) == len(ids), ids
    assert operations["GET", "/v1/forecast"]["operationId"] == "get_forecast"
    assert operations["POST", "/v1/forecast"]["operationId"] == "post_forecast"
    assert operations["GET", "/v1/capacity"]["operationId"] == "get_capacity"
    assert operations["POST", "/v1/models/refit"]["operationId"] == "refit_models"


def test_two_routes_with_one_function_name_are_refused() -> None:
    app = FastAPI(generate_unique_id_function=service_app._operation_id)
    for prefix in ("/a", "/b"):
        router = APIRouter(prefix=prefix)

        @router.get("")
        def read() -> int:
            return 1

        app.include_router(router)
    with warnings.catch_warnings():  # FastAPI warns of it too
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="'read' of GET /b is already that of GET /a"):
            service_app._openapi(app)


# -- quantiles ----------------------------------------------------------------------------------
def test_quantiles_repeated_comma_separated_or_mixed_give_the_same_bands(
        client: TestClient) -> None:
    base = [("series_id", SERIES), ("horizon", "2h")]
    ways = {
        "comma": [("quantiles", "0.5,0.9,0.99")],
        "repeated": [("quantiles", "0.5"), ("quantiles", "0.9"), ("quantiles", "0.99")],
        "mixed": [("quantiles", "0.5, 0.9"), ("quantiles", "0.99")],
    }
    answers = {}
    for way, params in ways.items():
        response = client.get("/v1/forecast", params=base + params)
        assert response.status_code == 200, (way, response.text[:300])
        answers[way] = response.json()
    for way, answer in answers.items():
        assert answer["quantiles"] == [0.5, 0.9, 0.99], way
        assert set(answer["bands"]) == {"p50", "p90", "p99"}, way
        assert answer["bands"] == answers["comma"]["bands"], way
        assert answer["mean"] == answers["comma"]["mean"], way
    assert answers["repeated"]["cached"]  # one cache entry: the same levels


@pytest.mark.parametrize(("params", "message"), [
    ([("quantiles", "0.5"), ("quantiles", "1.5")], "between 0 and 1"),
    ([("quantiles", "0.5"), ("quantiles", "x")], "'x' is not a number"),
    ([("quantiles", "")], "at least one quantile"),
    ([("quantiles", "0.5")] * 50 + [("quantiles", "0.1,0.2")] * 25, "at most 99 quantiles"),
])
def test_bad_quantiles_are_a_422_naming_the_field(client: TestClient,
                                                  params: list[tuple[str, str]],
                                                  message: str) -> None:
    response = client.get("/v1/forecast", params=[("series_id", SERIES), *params])
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["query", "quantiles"]
    assert message in error["msg"]


def test_the_schema_documents_quantiles_as_repeatable(client: TestClient) -> None:
    operation = _operations(client)["GET", "/v1/forecast"]
    [parameter] = [p for p in operation["parameters"] if p["name"] == "quantiles"]
    assert parameter["schema"]["type"] == "array"
    assert parameter["schema"]["maxItems"] == 99
    assert "repeated" in parameter["description"] and "comma" in parameter["description"]


# -- in a real browser --------------------------------------------------------------------------
@pytest.fixture
def browser() -> chromium.Chromium:
    chromium.require()
    return chromium.Chromium()


def _fetched(b: chromium.Chromium) -> list[tuple[str, int]]:
    """The page's resources: address and HTTP status (0: not fetched, e.g. blocked)."""
    entries = b.evaluate("performance.getEntriesByType('resource').map(e => "
                         "[e.name, e.responseStatus])")
    return [(str(url), int(status)) for url, status in entries]


@pytest.mark.slow
def test_swagger_ui_and_redoc_render_every_operation_offline(
        settings: Settings, browser: chromium.Chromium) -> None:
    with LiveServer(create_app(settings)) as live:
        operations = set(_operations_of(live.url))
        with browser as b:
            b.open(f"{live.url}/docs")
            assert b.evaluate(WAIT.format(condition="document.querySelectorAll("
                                          f"'.opblock-summary-path').length >= "
                                          f"{len(operations)}")), (
                b.evaluate("document.body.innerText")[:1000])
            shown = b.evaluate(
                "Array.from(document.querySelectorAll('.opblock')).map(o => ["
                "o.querySelector('.opblock-summary-method').textContent,"
                "o.querySelector('.opblock-summary-path').getAttribute('data-path')])")
            swagger_fetched = _fetched(b)
            swagger_errors = b.console_errors()
            b.open(f"{live.url}/redoc")
            assert b.evaluate(WAIT.format(
                condition="document.body.innerText.includes('/v1/forecast')")), (
                b.evaluate("document.body.innerText")[:1000])
            redoc_text = b.evaluate("document.body.innerText")
            redoc_fetched = _fetched(b)
            redoc_errors = b.console_errors()[len(swagger_errors):]
    assert {(method.upper(), path) for method, path in shown} == operations
    assert "GPU-cluster workload forecasts" in redoc_text
    for path in ("/v1/forecast", "/v1/capacity", "/v1/models/refit"):
        assert path in redoc_text, path
    assert swagger_errors == []
    # ReDoc's footer shows a logo from its vendor's CDN: the page's Content-Security-Policy
    # stops the browser from fetching it, and that block is the only message
    blocked = [e for e in redoc_errors if "Content Security Policy" in e and "blocked" in e]
    assert blocked == redoc_errors, redoc_errors
    for fetched, page_errors in ((swagger_fetched, swagger_errors),
                                 (redoc_fetched, redoc_errors)):
        assert {u for u, _ in fetched} >= {f"{live.url}/openapi.json"}
        for url, status in fetched:  # from the server, or blocked before any request
            assert url.startswith(f"{live.url}/") or (
                status == 0 and any(url in e for e in page_errors)), (url, status)


def _operations_of(url: str) -> list[tuple[str, str]]:
    paths = httpx.get(f"{url}/openapi.json", timeout=30).json()["paths"]
    return [(method.upper(), path) for path, item in paths.items() for method in item]
