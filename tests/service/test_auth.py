"""With PRISM_API_TOKEN set, every /v1 route needs the bearer token; health stays open."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from prism.config import Settings
from service.app import create_app
from tests.service.conftest import SERIES, started

TOKEN = "s3cret-token"

#: A valid request for every /v1 route: (method, path) -> keyword arguments of the call.
VALID: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", "/v1/series"): {"params": {"cluster": "cluster-0"}},
    ("GET", "/v1/series/values"): {"params": {"series_id": SERIES, "tail": 3}},
    ("POST", "/v1/ingest"): {"params": {"format": "long-csv"}, "json": {"records": [
        {"series_id": "auth/all/gpus_in_use", "ts": "2026-03-01T00:00", "value": 1}]}},
    ("GET", "/v1/forecast"): {"params": {"series_id": SERIES, "horizon": "1h"}},
    ("POST", "/v1/forecast"): {"json": {"series_ids": [SERIES], "horizon": "1h"}},
    ("GET", "/v1/decomposition"): {"params": {"series_id": SERIES}},
    ("GET", "/v1/capacity"): {"params": {"cluster": "cluster-0", "scope": "vc-27a",
                                         "horizon": "1h"}},
    ("GET", "/v1/reports/capacity"): {"params": {"horizon": "1h"}},
    ("GET", "/v1/capacity/track-record"): {"params": {"cluster": "cluster-0"}},
    ("GET", "/v1/series/export"): {"params": {"series_id": SERIES, "format": "csv"}},
    ("POST", "/v1/models/refit"): {"json": {"series_ids": [SERIES], "model": "naive"}},
    ("GET", "/v1/metrics"): {},
    ("GET", "/v1/metrics/forecasts"): {},
}


@pytest.fixture
def guarded(settings: Settings) -> Iterator[TestClient]:
    with started(create_app(settings.model_copy(update={"api_token": TOKEN}))) as client:
        yield client


def _v1_routes(client: TestClient) -> set[tuple[str, str]]:
    paths = client.get("/openapi.json").json()["paths"]
    return {(method.upper(), path) for path, item in paths.items() if path.startswith("/v1")
            for method in item}


def test_every_v1_route_has_a_case(guarded: TestClient) -> None:
    assert _v1_routes(guarded) == set(VALID)


@pytest.mark.parametrize("route", [pytest.param(r, marks=pytest.mark.slow)
                                   if r == ("GET", "/v1/reports/capacity") else r
                                   for r in sorted(VALID)])  # the report fits PRISM: slow
def test_v1_route_needs_the_token(guarded: TestClient, route: tuple[str, str]) -> None:
    method, path = route
    kwargs = VALID[route]
    missing = guarded.request(method, path, **kwargs)
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    assert "PRISM_API_TOKEN" in missing.json()["detail"]
    wrong = guarded.request(method, path, headers={"Authorization": f"Bearer {TOKEN}x"},
                            **kwargs)
    assert wrong.status_code == 401
    basic = guarded.request(method, path, headers={"Authorization": f"Basic {TOKEN}"},
                            **kwargs)
    assert basic.status_code == 401
    for _ in range(120):  # a model being fitted on a loaded machine: wait, as a client would
        ok = guarded.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"},
                             **kwargs)
        if ok.status_code != 503:
            break
        time.sleep(min(float(ok.headers.get("Retry-After", "1")), 2.0))
    assert ok.status_code in (200, 202), ok.text  # 202: the refit runs in the background


def test_the_schema_declares_the_bearer_scheme_on_v1(guarded: TestClient) -> None:
    schema = guarded.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, item in schema["paths"].items():
        for operation in item.values():
            assert (operation.get("security") == [{"bearer": []}]) == path.startswith("/v1")


def test_cors_preflight_needs_no_token(settings: Settings) -> None:
    configured = settings.model_copy(update={"api_token": TOKEN,
                                             "cors_origins": ["https://ops.example"]})
    with started(create_app(configured)) as client:
        pre = client.options("/v1/forecast", headers={
            "Origin": "https://ops.example", "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization"})
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "https://ops.example"
        assert client.get("/v1/series", headers={"Origin": "https://ops.example"}
                          ).status_code == 401


def test_health_and_metrics_stay_open(guarded: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert guarded.get(path).status_code == 200
    unauthorised = guarded.get("/v1/series")
    assert unauthorised.status_code == 401
    text = guarded.get("/metrics").text
    # refused before routing: counted, under the route label of unmatched requests
    assert 'prism_http_requests_total{method="GET",route="unmatched",status="401"} 1.0' in text


def test_the_bearer_scheme_is_case_insensitive(guarded: TestClient) -> None:
    for header in (f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer   {TOKEN}"):
        got = guarded.get("/v1/series", headers={"Authorization": header})
        assert got.status_code == 200, header
    for header in (f"Bearer{TOKEN}", "Bearer", f"Bearer {TOKEN[:-1]}", f"Token {TOKEN}"):
        assert guarded.get("/v1/series", headers={"Authorization": header}
                           ).status_code == 401, header
