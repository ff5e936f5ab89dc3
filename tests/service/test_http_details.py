"""HTTP details (issue #18, item 15): a chunked body over the limit is 413 whatever parses
it, a body that is not JSON is a documented 400 naming where it breaks, a multipart body cut
short is 400 (not an empty or partial upload), and ``OPTIONS`` lists a route's methods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from prism.config import Settings
from service.app import create_app
from tests.service.conftest import SERIES, LiveServer, Trace, make_settings, started

LIMIT = 64 * 1024
CSV = b"series_id,ts,value\nlab/all/gpus_in_use,2026-03-01T00:00,1\n" \
      b"lab/all/gpus_in_use,2026-03-01T00:10,2\n"


@pytest.fixture
def small(trace: Trace, tmp_path: Path) -> Iterator[TestClient]:
    """The app with a 64 KiB body limit."""
    with started(create_app(make_settings(trace, tmp_path, max_body_bytes=LIMIT))) as client:
        yield client


def _chunks(data: bytes, size: int = 4096) -> Iterator[bytes]:
    """``data`` as a stream: httpx sends it chunked, without a Content-Length."""
    for start in range(0, len(data), size):
        yield data[start:start + size]


def _big_json() -> bytes:
    return b'{"series_ids": ["' + b"x" * (2 * LIMIT) + b'"], "horizon": "1h"}'


def _multipart(*parts: tuple[str, bytes], boundary: str = "BND") -> bytes:
    body = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        f"Content-Type: text/csv\r\n\r\n".encode() + data + b"\r\n" for name, data in parts)
    return body + f"--{boundary}--\r\n".encode()


def _lab_rows(client: TestClient) -> int:
    return int(client.get("/v1/series", params={"cluster": "lab"}).json()["count"])


# -- a chunked body over the limit is 413 -------------------------------------------------------
def test_chunked_json_over_the_limit_is_413_not_400(small: TestClient) -> None:
    for path in ("/v1/forecast", "/v1/models/refit", "/v1/ingest?format=long-csv"):
        response = small.post(path, content=_chunks(_big_json()),
                              headers={"Content-Type": "application/json"})
        assert response.status_code == 413, (path, response.text)
        detail = response.json()["detail"]
        assert "over the limit of 65,536 bytes" in detail and "PRISM_MAX_BODY_BYTES" in detail
    multipart = small.post("/v1/ingest", params={"format": "long-csv"},
                           content=_chunks(_multipart(("big.csv", CSV + b"x" * LIMIT))),
                           headers={"Content-Type": "multipart/form-data; boundary=BND"})
    assert multipart.status_code == 413, multipart.text
    assert _lab_rows(small) == 0
    # a chunked body under the limit is served as before
    fine = small.post("/v1/forecast", content=_chunks(
        b'{"series_ids": ["' + SERIES.encode() + b'"], "horizon": "1h"}', size=7),
        headers={"Content-Type": "application/json"})
    assert fine.status_code == 200, fine.text
    metrics = small.get("/metrics").text
    assert 'route="/v1/forecast",status="413"} 1.0' in metrics  # counted as the 413 it is


def test_chunked_json_over_the_limit_is_413_over_real_http(trace: Trace,
                                                            tmp_path: Path) -> None:
    settings = make_settings(trace, tmp_path, max_body_bytes=LIMIT)
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url,
                                                                timeout=60) as http:
        response = http.post("/v1/forecast", content=_chunks(_big_json()),
                             headers={"Content-Type": "application/json"})
        assert response.status_code == 413, response.text
        assert "over the limit" in response.json()["detail"]
        assert http.get("/healthz").status_code == 200  # the server carries on


# -- a body that is not JSON is 400, naming where ------------------------------------------------
def test_a_body_that_is_not_json_is_400_naming_the_position(client: TestClient) -> None:
    broken = client.post("/v1/forecast", content=b'{"series_ids": [x]}',
                         headers={"Content-Type": "application/json"})
    assert broken.status_code == 400
    detail = broken.json()["detail"]
    assert isinstance(detail, str) and detail.startswith("the request body is not valid JSON")
    assert "Expecting value at line 1 column 17 (char 16)" in detail
    lines = client.post("/v1/models/refit", content=b'{\n  "series_ids": null,\n  "model": }',
                        headers={"Content-Type": "application/json"})
    assert lines.status_code == 400 and "at line 3 column 12" in lines.json()["detail"]
    ingest = client.post("/v1/ingest", params={"format": "long-csv"},
                         content=b'{"records": [1,', headers={"Content-Type": "application/json"})
    assert ingest.status_code == 400, ingest.text
    assert "not valid JSON" in ingest.json()["detail"]
    assert "line 1 column 15" in ingest.json()["detail"]
    # JSON that parses but does not fit the schema keeps its 422 naming the field
    fields = client.post("/v1/forecast", json={"series_ids": "not a list"})
    assert fields.status_code == 422
    assert fields.json()["detail"][0]["loc"] == ["body", "series_ids"]


def test_the_400_of_a_body_is_in_the_openapi_schema(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path, method in (("/v1/forecast", "post"), ("/v1/ingest", "post"),
                         ("/v1/models/refit", "post")):
        answer = paths[path][method]["responses"].get("400")
        assert answer is not None, f"{method.upper()} {path} does not document its 400"
        schema = answer["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorOut"}


# -- a multipart body cut short is 400 -------------------------------------------------------------
def test_a_truncated_multipart_body_is_400_and_stores_nothing(client: TestClient) -> None:
    whole = _multipart(("a.csv", CSV), ("b.csv", CSV.replace(b"lab/", b"lab2/")))
    cut = whole[: whole.index(b"lab2/") + 20]  # the second file cut in the middle
    for body in (cut, whole[:-len(b"--BND--\r\n")], whole[:30]):
        response = client.post("/v1/ingest", params={"format": "long-csv"}, content=body,
                               headers={"Content-Type": "multipart/form-data; boundary=BND"})
        assert response.status_code == 400, response.text
        detail = response.json()["detail"]
        assert f"ends after {len(body):,} bytes without its closing boundary '--BND--'" in detail
        assert "cut short" in detail
    assert _lab_rows(client) == 0  # not even the first, whole, file
    ok = client.post("/v1/ingest", params={"format": "long-csv"}, content=whole,
                     headers={"Content-Type": 'multipart/form-data; boundary="BND"'})
    assert ok.status_code == 200, ok.text
    assert ok.json()["rows"] == 4 and _lab_rows(client) == 1


def test_a_multipart_body_in_many_chunks_over_real_http(live: LiveServer) -> None:
    rows = b"".join(b"lab/all/gpus_in_use,2026-03-01T%02d:00,%d\n" % (h, h) for h in range(24))
    whole = _multipart(("a.csv", b"series_id,ts,value\n" + rows))
    with httpx.Client(base_url=live.url, timeout=60) as http:
        for size in (1, 5, 64):  # the closing boundary split across chunks
            cut = http.post("/v1/ingest", params={"format": "long-csv"},
                            content=_chunks(whole[:-4], size=size),
                            headers={"Content-Type": "multipart/form-data; boundary=BND"})
            assert cut.status_code == 400, cut.text
            ok = http.post("/v1/ingest", params={"format": "long-csv"},
                           content=_chunks(whole, size=size),
                           headers={"Content-Type": "multipart/form-data; boundary=BND"})
            assert ok.status_code == 200, ok.text


# -- OPTIONS lists the methods ------------------------------------------------------------------
def test_options_lists_the_allowed_methods(client: TestClient) -> None:
    for path, allowed in (("/v1/forecast", "GET, OPTIONS, POST"),
                          ("/v1/ingest", "OPTIONS, POST"),
                          ("/healthz", "GET, HEAD, OPTIONS")):
        response = client.options(path)
        assert response.status_code == 204, (path, response.text)
        assert response.headers["allow"] == allowed
        assert response.content == b""
    assert client.options("/v1/nothing").status_code == 404
    cross = client.options("/v1/forecast", headers={  # a preflight without CORS: no grant
        "Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"})
    assert cross.status_code == 204 and "access-control-allow-origin" not in cross.headers


def test_options_with_cors_and_token(settings: Settings) -> None:
    configured = settings.model_copy(update={"api_token": "t0ken",
                                             "cors_origins": ["https://ops.example"]})
    with started(create_app(configured)) as client:
        preflight = client.options("/v1/forecast", headers={
            "Origin": "https://ops.example", "Access-Control-Request-Method": "POST"})
        assert preflight.status_code == 200  # CORS answers its preflight, as before
        assert preflight.headers["access-control-allow-origin"] == "https://ops.example"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert client.options("/v1/forecast").status_code == 401  # /v1 needs the token
        plain = client.options("/v1/forecast", headers={"Authorization": "Bearer t0ken"})
        assert plain.status_code == 204 and "POST" in plain.headers["allow"]


# -- an oversized line of a multipart body is a JSON 400 naming it --------------------------------
def test_an_oversized_part_header_line_is_a_json_400_naming_line_and_limit(
        client: TestClient, live: LiveServer) -> None:
    # it was 400 "Invalid multipart data.": no line, no limit, no way to fix it
    body = _multipart(("a.csv", CSV), ("b" * 5000 + ".csv", CSV))
    line = body[:body.index(b"bbbb")].count(b"\n") + 1  # the second part's disposition
    headers = {"Content-Type": "multipart/form-data; boundary=BND"}
    answers = [client.post("/v1/ingest", params={"format": "long-csv"}, content=body,
                           headers=headers),
               httpx.post(f"{live.url}/v1/ingest", params={"format": "long-csv"},
                          content=_chunks(body, size=1000), headers=headers, timeout=60)]
    for response in answers:
        assert response.status_code == 400, response.text
        assert response.headers["content-type"] == "application/json"
        detail = response.json()["detail"]
        assert detail.startswith(f"line {line} of the multipart body is a part header over "
                                 "the limit of 4,224 bytes"), detail
        assert "rename the file" in detail
    assert _lab_rows(client) == 0
