"""Bad input gets its 4xx with a detail that says what is wrong and how to fix it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from prism.cli import main
from service.app import create_app
from tests.service.conftest import SERIES, LiveServer, Trace, make_settings, started

FIFTY_MB = 50 * 1024 * 1024


def test_malformed_csv_upload_names_file_line_and_column(client: TestClient) -> None:
    bad = ("job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"
           "j1,lab,vc,V100,2,4,2026-01-05T00:00,2026-01-05T00:01,2026-01-05T01:00,DONE\n"
           "j2,lab,vc,V100,two,4,2026-01-05T00:00,2026-01-05T00:01,2026-01-05T01:00,DONE\n")
    response = client.post("/v1/ingest", params={"format": "jobs-csv"},
                           files={"file": ("my jobs.csv", bad.encode())})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail.startswith("my jobs.csv, line 3, column 'num_gpus'")
    assert "Fix:" in detail
    assert client.get("/v1/series", params={"cluster": "lab"}).json()["count"] == 0


def test_garbage_and_empty_uploads_are_422(client: TestClient) -> None:
    binary = client.post("/v1/ingest", params={"format": "jobs-csv"},
                         content=b"\x00\xff\x10PK\x03\x04" * 100,
                         headers={"Content-Type": "application/octet-stream"})
    assert binary.status_code == 422 and binary.json()["detail"]
    empty = client.post("/v1/ingest", params={"format": "jobs-csv"}, content=b"",
                        headers={"Content-Type": "text/csv"})
    assert empty.status_code == 422 and "nothing to ingest" in empty.json()["detail"]
    unknown = client.post("/v1/ingest", params={"format": "jobs-xml"},
                          files={"file": ("a.csv", b"a,b\n1,2\n")})
    assert unknown.status_code == 422 and "jobs-csv" in unknown.json()["detail"]
    records = client.post("/v1/ingest", params={"format": "long-csv"},
                          json={"records": "not a list"})
    assert records.status_code == 422
    assert records.json()["detail"][0]["loc"] == ["body", "records"]


def test_unknown_series_is_404_with_the_closest_ids(client: TestClient) -> None:
    for path in ("/v1/forecast", "/v1/series/values", "/v1/decomposition"):
        response = client.get(path, params={"series_id": "cluster-0/all/gpu_demnd"})
        assert response.status_code == 404
        assert "did you mean cluster-0/all/gpu_demand" in response.json()["detail"]
    capacity = client.get("/v1/capacity", params={"cluster": "nowhere"})
    assert capacity.status_code == 404 and "GET /v1/series" in capacity.json()["detail"]


def test_negative_horizon_and_quantile_above_one_name_the_field(client: TestClient) -> None:
    horizon = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "-1h"})
    assert horizon.status_code == 422
    [error] = horizon.json()["detail"]
    assert error["loc"] == ["query", "horizon"]
    assert "'-1h' is not a positive duration" in error["msg"] and "6h" in error["msg"]
    quantile = client.get("/v1/forecast", params={"series_id": SERIES,
                                                  "quantiles": "0.5,1.5"})
    assert quantile.status_code == 422
    [error] = quantile.json()["detail"]
    assert error["loc"] == ["query", "quantiles"]
    assert "between 0 and 1" in error["msg"] and "1.5" in error["msg"]
    posted = client.post("/v1/forecast", json={"series_ids": [SERIES], "quantiles": [1.5]})
    assert posted.status_code == 422
    assert posted.json()["detail"][0]["loc"] == ["body", "quantiles", 0]
    zero = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "0h"})
    assert zero.status_code == 422


def test_a_query_parameter_the_route_does_not_take_is_422_naming_the_close_ones(
        client: TestClient) -> None:
    # ignored, these asked for p90 and got p95, asked for one cluster and got them all
    for path, params, name, close in (
            ("/v1/forecast", {"series_id": SERIES, "quantile": "0.9"}, "quantile",
             "'quantiles'"),
            ("/v1/capacity", {"cluster": "cluster-0", "quantiles": "0.9"}, "quantiles",
             "'quantile'"),
            ("/v1/series", {"clusters": "cluster-0"}, "clusters", "'cluster'"),
            ("/v1/series/values", {"series_id": SERIES, "tial": "2"}, "tial", "'tail'")):
        response = client.get(path, params=params)
        assert response.status_code == 422, path
        [error] = response.json()["detail"]
        assert error["loc"] == ["query", name] and error["type"] == "extra_forbidden"
        assert error["msg"].startswith(f"unknown query parameter {name!r}: did you mean {close}?")
        assert "(this route takes " in error["msg"]
    upload = client.post("/v1/ingest", params={"format": "long-csv", "clustr": "lab"},
                         files={"file": ("a.csv", b"series_id,ts,value\n")})
    assert upload.status_code == 422
    assert "did you mean 'cluster'?" in upload.json()["detail"][0]["msg"]
    assert client.get("/v1/series", params={"cluster": "lab"}).json()["count"] == 0
    # a JSON body's unknown field alike (it was refused, but without a hint)
    posted = client.post("/v1/forecast", json={"series_ids": [SERIES], "horizn": "1h"})
    assert posted.status_code == 422
    [error] = posted.json()["detail"]
    assert error["loc"] == ["body", "horizn"]
    assert error["msg"].startswith("unknown field 'horizn': did you mean 'horizon'?")
    # the route's own parameters are as before
    assert client.get("/v1/series/values", params={"series_id": SERIES, "tail": 2}
                      ).status_code == 200


def test_unknown_model_and_parameter_say_what_there_is(client: TestClient) -> None:
    model = client.get("/v1/forecast", params={"series_id": SERIES, "model": "magic"})
    assert model.status_code == 422 and "seasonal_naive" in model.json()["detail"]
    param = client.get("/v1/forecast", params={"series_id": SERIES, "model": "seasonal_naive",
                                               "param": "seasn=1d"})
    assert param.status_code == 422 and "season" in param.json()["detail"]


def test_fifty_megabyte_body_is_413(client: TestClient) -> None:
    response = client.post("/v1/ingest", params={"format": "jobs-csv"},
                           content=b"x" * FIFTY_MB, headers={"Content-Type": "text/csv"})
    assert response.status_code == 413
    assert "over the limit of 33,554,432 bytes" in response.json()["detail"]
    assert "PRISM_MAX_BODY_BYTES" in response.json()["detail"]


def test_chunked_body_over_the_limit_is_413(trace: Trace, tmp_path: Path) -> None:
    settings = make_settings(trace, tmp_path, max_body_bytes=64 * 1024)

    def chunks() -> object:
        for _ in range(40):
            yield b"y" * 4096  # no Content-Length: counted as it arrives

    with started(create_app(settings)) as client:
        response = client.post("/v1/ingest", params={"format": "jobs-csv"},
                               content=chunks(), headers={"Content-Type": "text/csv"})
    assert response.status_code == 413


def test_fifty_megabyte_body_over_real_http_is_413(live: LiveServer) -> None:
    response = httpx.post(f"{live.url}/v1/ingest", params={"format": "jobs-csv"},
                          content=b"x" * FIFTY_MB, headers={"Content-Type": "text/csv"},
                          timeout=30)
    assert response.status_code == 413
    assert "over the limit" in response.json()["detail"]
    assert httpx.get(f"{live.url}/healthz").status_code == 200


def test_a_model_being_fitted_is_503_with_retry_after(trace: Trace, tmp_path: Path) -> None:
    settings = make_settings(trace, tmp_path, fit_budget_s=0.0)
    params = {"series_id": SERIES, "horizon": "1h", "model": "prism", "param": "use_jumps=false"}
    with started(create_app(settings)) as client:
        response = client.get("/v1/forecast", params=params)
        assert response.status_code == 503
        assert int(response.headers["Retry-After"]) >= 1
        assert "prism[use_jumps=false]" in response.json()["detail"]
        assert "being fitted" in response.json()["detail"]
        deadline = time.monotonic() + 60
        while response.status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
            response = client.get("/v1/forecast", params=params)
        assert response.status_code == 200
        assert response.json()["model"] == "prism[use_jumps=false]"


def test_a_value_that_reads_like_a_full_disk_is_still_the_clients_error(
        client: TestClient) -> None:
    # found by schemathesis: the 507 check matched the echoed value inside a 4xx message
    for text in ("Disk quota exceeded", "No space left on device"):
        response = client.get("/v1/series/values", params={"series_id": SERIES, "end": text})
        assert response.status_code in (400, 422), response.text
        assert text in response.json()["detail"] and "disk is full" not in response.text


def test_a_window_that_ends_before_it_starts_is_422_over_http_and_1_in_the_cli(
        client: TestClient, trace: Trace, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # it was an empty 200: a scheduler could not tell it from a series with no data there
    window = {"start": "2026-02-01", "end": "2026-01-01"}
    response = client.get("/v1/series/values", params={"series_id": SERIES, **window})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("start '2026-02-01' is not before end")
    assert "swap them" in response.json()["detail"]
    bad = client.get("/v1/series/values", params={"series_id": SERIES, "start": "yesterday"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("start 'yesterday'")
    db = tmp_path / "copy.duckdb"  # the template store stays untouched
    shutil.copy(trace.db, db)
    assert main(["--db", str(db), "series", "show", SERIES, "--start", "2026-02-01",
                 "--end", "2026-01-01"]) == 1
    assert "is not before end" in capsys.readouterr().err
    ok = client.get("/v1/series/values", params={"series_id": SERIES, "start": "2026-01-01",
                                                 "end": "2026-02-01"})
    assert ok.status_code == 200


def test_a_forecast_longer_than_the_history_carries_a_note(client: TestClient) -> None:
    # the API's twin of the CLI's note: the test store holds 7 days
    long = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "9d",
                                              "model": "naive"})
    assert long.status_code == 200, long.text
    note = long.json()["note"]
    assert note.startswith(f"the horizon ({long.json()['horizon_steps']:,} steps) is longer "
                           "than the stored history")
    again = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "9d",
                                               "model": "naive"})
    assert again.json()["cached"] and again.json()["note"] == note  # kept with the answer
    short = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "6h",
                                               "model": "naive"})
    assert short.status_code == 200 and short.json()["note"] is None


def test_a_json_ingest_with_a_field_it_does_not_take_is_refused_whole(
        client: TestClient) -> None:
    row = {"series_id": "lab/all/gpus_in_use", "ts": "2026-01-05T00:30:00Z", "value": 5}
    for extra in ({"other": 1}, {"on_error": "skip"}):
        answer = client.post("/v1/ingest", params={"format": "long-csv"},
                             json={"records": [row], **extra})
        assert answer.status_code == 422, answer.text
        [error] = answer.json()["detail"]
        assert error["loc"] == ["body", next(iter(extra))] and "unknown field" in error["msg"]
    assert client.get("/v1/series", params={"cluster": "lab"}).json()["count"] == 0
    answer = client.post("/v1/ingest", params={"format": "prometheus"},
                         json={"status": "success", "data": {"resultType": "matrix",
                                                             "result": []}})
    assert answer.status_code == 415
    assert "multipart/form-data (field `file`)" in answer.json()["detail"]


def test_a_bad_horizon_is_named_in_the_detail(client: TestClient) -> None:
    for horizon in ("1y", "6000w"):
        answer = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": horizon})
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"].startswith("horizon: "), answer.text


def test_error_details_name_the_api_parameters_not_the_cli_flags(
        client: TestClient, trace: Trace, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # the use cases are the CLI's: their details told API clients to pass --on-error skip
    bad = b"series_id,ts,value\nlab/all/gpus_in_use,2026-03-01T00:00,abc\n"
    row = client.post("/v1/ingest", params={"format": "long-csv"},
                      files={"file": ("bad.csv", bad)})
    assert row.status_code == 422
    assert "pass on_error=skip to store such rows" in row.json()["detail"]
    for response, says in (
            (client.post("/v1/ingest", params={"format": "jobs-xml"},
                         files={"file": ("a.csv", b"a,b\n1,2\n")}), "pass format with one of"),
            (client.post("/v1/ingest", params={"format": "wide-csv"},
                         files={"file": ("a.csv", b"ts,a\n2026-01-01T00:00,1\n")}),
             "pass cluster=NAME"),
            (client.post("/v1/ingest", params={"format": "long-csv", "option": "colour=red"},
                         files={"file": ("a.csv", bad)}), "option=colour: long-csv does not"),
            (client.post("/v1/ingest", params={"format": "long-csv"},
                         files={"file": ("a.csv", b"sid,ts,value\nx,2026-01-01,1\n")}),
             "map them with map=CANONICAL=COLUMN"),
            (client.get("/v1/forecast", params={"series_id": SERIES, "model": "magic"}),
             "pass model with one of"),
            (client.post("/v1/forecast", json={"series_ids": [SERIES], "model": "magic"}),
             "pass model with one of")):
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert says in detail and "--" not in detail, detail
    assert client.get("/v1/series", params={"cluster": "lab"}).json()["count"] == 0
    # the CLI's own messages keep naming its flags
    db = tmp_path / "copy.duckdb"
    shutil.copy(trace.db, db)
    path = tmp_path / "bad.csv"
    path.write_bytes(bad)
    assert main(["--db", str(db), "ingest", str(path), "--format", "long-csv"]) == 1
    assert "--on-error skip" in capsys.readouterr().err


def test_a_query_parameter_that_takes_one_value_given_twice_is_422(
        client: TestClient) -> None:
    # each served the last value without a word: a scheduler asking 1h got a day
    for path, params, name in (
            ("/v1/forecast", [("series_id", SERIES), ("horizon", "1h"), ("horizon", "1d")],
             "horizon"),
            ("/v1/capacity", [("cluster", "cluster-0"), ("quantile", "0.5"),
                              ("quantile", "0.9")], "quantile"),
            ("/v1/series", [("cluster", "cluster-0"), ("cluster", "lab")], "cluster"),
            ("/v1/series/values", [("series_id", SERIES), ("series_id", SERIES)],
             "series_id")):
        response = client.get(path, params=params)
        assert response.status_code == 422, (path, response.text)
        [error] = response.json()["detail"]
        assert error["loc"] == ["query", name]
        assert f"query parameter {name!r} is given 2 times" in error["msg"]
        assert error["msg"].endswith("pass it once")
    upload = client.post("/v1/ingest", params=[("format", "long-csv"), ("cluster", "lab"),
                                               ("cluster", "lab2")],
                         files={"file": ("a.csv", b"series_id,ts,value\n")})
    assert upload.status_code == 422
    assert upload.json()["detail"][0]["loc"] == ["query", "cluster"]
    # the parameters made to repeat still do
    quantiles = client.get("/v1/forecast", params=[("series_id", SERIES),
                                                   ("quantiles", "0.5"), ("quantiles", "0.9")])
    assert quantiles.status_code == 200 and quantiles.json()["quantiles"] == [0.5, 0.9]
    export = client.get("/v1/series/export", params=[("series_id", SERIES),
                                                     ("series_id", "cluster-0/all/gpus_in_use"),
                                                     ("format", "csv")])
    assert export.status_code == 200 and export.headers["X-Prism-Series"] == "2"


def test_a_forecast_of_a_series_too_short_to_calibrate_says_where_its_bands_come_from(
        client: TestClient) -> None:
    # the API's twin of the CLI's note: 30 points, no out-of-sample calibration
    rows = "".join(f"tiny/vc/gpus_in_use,2026-03-01T{h:02d}:{m:02d}:00,{40 + (h * 7 + m) % 9}\n"
                   for h in range(5) for m in range(0, 60, 10))
    upload = client.post("/v1/ingest", params={"format": "long-csv"},
                         files={"file": ("t.csv", f"series_id,ts,value\n{rows}".encode())})
    assert upload.status_code == 200, upload.text
    answer = client.get("/v1/forecast", params={"series_id": "tiny/vc/gpus_in_use",
                                                "horizon": "1h", "quantiles": "0.05,0.95"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert "too few points to calibrate the bands out of sample" in body["note"]
    assert all(hi > lo for lo, hi in zip(body["bands"]["p5"], body["bands"]["p95"], strict=True))
