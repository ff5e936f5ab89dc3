"""Live pulls (``prism ingest --prometheus-url``) against a local server that speaks the
Prometheus HTTP API: chunking under the 11,000-point limit, exact values, all-or-nothing
errors that name the URL and the chunk, bearer tokens, and re-pulls that add nothing."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prism.cli import main
from prism.config import get_settings
from prism.errors import ConfigError
from prism.ingest.prometheus_pull import MAX_POINTS, plan_chunks, range_query
from prism.store import Store
from tests.prometheus_server import (
    DAY,
    QUERY,
    RESOLUTION_ERROR,
    T0,
    VCS,
    FakePrometheus,
    prometheus_fixture,  # noqa: F401 - the fixture prometheus
    value,
)
from tests.prometheus_server import error_body as _error


def _pull(db: Path, url: str, *extra: str, start: int = T0, end: int = T0 + 2 * DAY,
          step: str = "10s", query: str = QUERY) -> int:
    return main(["ingest", "--prometheus-url", url, "--query", query,
                 "--start", pd.Timestamp(start, unit="s").strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "--end", str(end), "--step", step, "--option", "metric=gpus_busy", "-q",
                 "--db", str(db), *extra])


def _samples(db: Path) -> pd.DataFrame:
    with Store.open(db) as store:
        return store.fetch_df("SELECT series_id, ts, value FROM samples "
                              "ORDER BY series_id, ts")


def _count(db: Path, table: str) -> int:
    with Store.open(db) as store:
        row = store.fetch_one(f"SELECT count(*) FROM {table}")
    return int(row[0]) if row else 0


def _expected(start: int, end: int, step_s: int, query: str = QUERY) -> pd.DataFrame:
    times = range(start * 1000, end * 1000 + 1, step_s * 1000)
    rows = [(f"prometheus/{vc}/gpus_busy", pd.Timestamp(t, unit="ms"), value(query, vc, t))
            for vc in VCS for t in times]
    return pd.DataFrame(rows, columns=["series_id", "ts", "value"])


def _assert_contiguous(requests: list[dict[str, str]], start: int, end: int,
                       step_s: int) -> None:
    """The chunks cover [start, end] on the step's grid, without a gap or an overlap."""
    spans = [(round(float(r["start"]) * 1000), round(float(r["end"]) * 1000)) for r in requests]
    assert spans[0][0] == start * 1000 and spans[-1][1] == end * 1000
    for (_, last), (first, _) in zip(spans, spans[1:], strict=False):
        assert first == last + step_s * 1000
    for lo, hi in spans:
        assert (hi - lo) // (step_s * 1000) + 1 <= MAX_POINTS
        assert float(requests[0]["step"]) == step_s


def test_two_day_pull_at_10s_is_chunked_and_stored_exactly(
    tmp_path: Path, prometheus: FakePrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url) == 0
    # 17,281 points per series: more than one request may hold
    assert len(prometheus.requests) >= 2
    _assert_contiguous(prometheus.requests, T0, T0 + 2 * DAY, 10)
    assert all(r["query"] == QUERY and r["authorization"] == "" for r in prometheus.requests)
    stored = _samples(db)
    assert not stored.duplicated(["series_id", "ts"]).any()  # none twice at chunk edges
    pd.testing.assert_frame_equal(stored, _expected(T0, T0 + 2 * DAY, 10), check_dtype=False)
    out = capsys.readouterr().out
    assert f"{len(stored):,} rows added" in out and "query_range?query=" in out
    with Store.open(db) as store:  # derived series, and the pull recorded as its request
        series = store.fetch_all("SELECT series_id FROM series ORDER BY 1")
        (path, fmt), = store.fetch_all("SELECT path, format FROM ingests")
    assert series == [("prometheus/a/gpus_busy",), ("prometheus/b/gpus_busy",)]
    assert fmt == "prometheus" and path.startswith(prometheus.url + "/api/v1/query_range?")


def test_a_repull_adds_nothing(
    tmp_path: Path, prometheus: FakePrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url) == 0
    before, ingests = _samples(db), _count(db, "ingests")
    capsys.readouterr()
    assert _pull(db, prometheus.url) == 0
    assert "unchanged" in capsys.readouterr().out
    pd.testing.assert_frame_equal(_samples(db), before)
    assert _count(db, "ingests") == ingests


def test_an_overlapping_pull_adds_only_the_new_timestamps(
    tmp_path: Path, prometheus: FakePrometheus
) -> None:
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url, end=T0 + DAY) == 0
    assert _pull(db, prometheus.url, start=T0 + DAY // 2, end=T0 + 2 * DAY) == 0
    stored = _samples(db)
    assert not stored.duplicated(["series_id", "ts"]).any()
    pd.testing.assert_frame_equal(stored, _expected(T0, T0 + 2 * DAY, 10), check_dtype=False)


def test_start_and_end_are_put_on_the_steps_grid(
    tmp_path: Path, prometheus: FakePrometheus
) -> None:
    """Pulls of overlapping ranges at one step ask for the same timestamps."""
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url, start=T0 + 7, end=T0 + 3600 + 59, step="1m") == 0
    (request,) = prometheus.requests
    assert (request["start"], request["end"]) == (str(T0 + 60), str(T0 + 3600))


def test_a_server_error_midway_stores_nothing(
    tmp_path: Path, prometheus: FakePrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.duckdb"
    prometheus.fail_at = 2
    assert _pull(db, prometheus.url) == 1
    err = capsys.readouterr().err
    assert f"{prometheus.url}/api/v1/query_range" in err
    assert "chunk 2/2 (2026-01-06T06:33:20Z .. 2026-01-07T00:00:00Z)" in err
    assert "503 timeout: query timed out in expression evaluation" in err
    assert "nothing was stored" in err and "--option max_points" in err
    assert _count(db, "samples") == 0 and _count(db, "ingests") == 0
    assert _count(db, "series") == 0


def test_an_error_after_stored_pulls_leaves_them_as_they_were(
    tmp_path: Path, prometheus: FakePrometheus
) -> None:
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url, end=T0 + DAY) == 0
    before = _samples(db)
    prometheus.fail_at = len(prometheus.requests) + 2
    assert _pull(db, prometheus.url, start=T0 + DAY, end=T0 + 3 * DAY) == 1
    pd.testing.assert_frame_equal(_samples(db), before)


def test_a_bad_query_quotes_prometheus(
    tmp_path: Path, prometheus: FakePrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _pull(tmp_path / "s.duckdb", prometheus.url, query="sum(gpus_busy") == 1
    err = capsys.readouterr().err
    assert "HTTP 400 bad_data" in err and "unclosed left parenthesis" in err
    assert "PromQL syntax" in err and "chunk 1/2" in err


def test_the_resolution_limit_is_never_hit_and_max_points_makes_smaller_chunks(
    tmp_path: Path, prometheus: FakePrometheus
) -> None:
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url, "--option", "max_points=5000") == 0
    assert len(prometheus.requests) == 4  # 17,281 points
    _assert_contiguous(prometheus.requests, T0, T0 + 2 * DAY, 10)
    pd.testing.assert_frame_equal(_samples(db), _expected(T0, T0 + 2 * DAY, 10),
                                  check_dtype=False)


def test_the_fake_server_refuses_what_prometheus_refuses(prometheus: FakePrometheus) -> None:
    """The limit the chunking avoids is real in the fake: 11,001 points are refused."""
    code, body = prometheus.answer("/api/v1/query_range", {
        "query": QUERY, "start": str(T0), "end": str(T0 + 11_000 * 10), "step": "10"}, "")
    assert (code, body) == (400, _error("bad_data", RESOLUTION_ERROR))


def test_the_token_is_sent_and_never_shown(
    tmp_path: Path, prometheus: FakePrometheus, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = tmp_path / "s.duckdb"
    prometheus.token = "s3cret"
    assert _pull(db, prometheus.url, "--option", "token=s3cret", end=T0 + DAY) == 0
    assert {r["authorization"] for r in prometheus.requests} == {"Bearer s3cret"}
    monkeypatch.setenv("PRISM_PROMETHEUS_TOKEN", "s3cret")  # the environment's token
    get_settings.cache_clear()  # settings are read once per process
    assert _pull(db, prometheus.url, end=T0 + 2 * DAY) == 0
    assert prometheus.requests[-1]["authorization"] == "Bearer s3cret"
    monkeypatch.delenv("PRISM_PROMETHEUS_TOKEN")
    get_settings.cache_clear()
    assert _pull(db, prometheus.url, "--option", "token=wrong", start=T0 + 3 * DAY,
                 end=T0 + 4 * DAY) == 1
    captured = capsys.readouterr()
    assert "401" in captured.err and "--option token=TOKEN" in captured.err
    assert "s3cret" not in captured.out + captured.err and "wrong" not in captured.err
    with Store.open(db) as store:
        recorded = store.fetch_all("SELECT path, options FROM ingests")
    assert recorded and "s3cret" not in json.dumps(recorded)


def test_a_server_that_does_not_answer_times_out(
    tmp_path: Path, prometheus: FakePrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prometheus.hang = threading.Event()
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url, "--option", "timeout=0.2s", end=T0 + 600) == 1
    err = capsys.readouterr().err
    assert "no answer within" in err and "chunk 1/1" in err and "--option timeout" in err
    assert prometheus.requests[0]["timeout"] == "0.2"
    assert _count(db, "samples") == 0


def test_an_unreachable_server_and_a_wrong_path_say_how_to_fix_them(
    tmp_path: Path, prometheus: FakePrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url + "/nope", end=T0 + 600) == 1
    assert "HTTP 404" in capsys.readouterr().err
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()  # nothing listens there now
    assert _pull(db, f"http://user:pw@127.0.0.1:{port}", end=T0 + 600) == 1
    err = capsys.readouterr().err
    assert "cannot reach the server" in err and "pw" not in err


_URL = ["--prometheus-url", "http://p:9090", "--query", QUERY]


@pytest.mark.parametrize(("argv", "message"), [
    (["x.csv", "--format", "jobs-csv", "--query", QUERY], "--query belongs to a pull"),
    (["--prometheus-url", "http://p:9090", "--start", "2026-01-05"], "needs --query"),
    ([*_URL, "--start", "yesterday"], "is not a time"),
    (["--prometheus-url", "p:9090", "--query", QUERY, "--start", "2026-01-05"],
     "is not an http(s) URL"),
    ([*_URL, "--start", "2026-01-05", "--end", "2026-01-04"], "is before --start"),
    ([*_URL, "--start", "2026-01-05", "--format", "jobs-csv"], "drop --format"),
    ([*_URL, "--start", "2026-01-05", "--option", "max_points=20000"], "max_points"),
    ([*_URL, "--start", "2026-01-05", "--option", "nope=1"], "--option nope"),
    ([*_URL, "--start", "2026-01-05", "--step", "soon"], "is not a duration"),
    ([*_URL, "--start", "now-400d", "--step", "1s"],  # 35 M points a series: killed for memory
     "points per series, over the 1,000,000 one pull takes"),
])
def test_bad_arguments_fail_before_any_request(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", *argv, "-q", "--db", str(tmp_path / "s.duckdb")]) == 1
    assert message in capsys.readouterr().err


def test_files_and_a_url_together_are_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["ingest", "x.csv", "--prometheus-url", "http://p:9090", "--query", QUERY])
    assert exit_info.value.code == 2


@given(start=st.integers(0, 10**6), points=st.integers(1, 50_000),
       step=st.integers(1, 10**5), max_points=st.integers(1, MAX_POINTS))
def test_chunks_cover_the_grid_exactly_once(start: int, points: int, step: int,
                                            max_points: int) -> None:
    end = start + (points - 1) * step + step // 2  # the end need not be on the grid
    spans = plan_chunks(start, end, step, max_points)
    times = [t for lo, hi in spans for t in range(lo, hi + 1, step)]
    assert times == list(range(start, end + 1, step))
    assert all((hi - lo) // step + 1 <= max_points for lo, hi in spans)


def test_range_query_reads_unix_seconds_offsets_and_now() -> None:
    q = range_query("http://p:9090/", QUERY, start=str(T0), end="2026-01-05T02:00:00+01:00",
                    step="1m", token="s3cret")
    assert (q.start_ms, q.end_ms, q.step_ms) == (T0 * 1000, (T0 + 3600) * 1000, 60_000)
    assert q.endpoint == "http://p:9090/api/v1/query_range" and "s3cret" not in repr(q)
    recent = range_query("http://p:9090", QUERY, start="now-1h", end="now", step="1m")
    assert recent.end_ms - recent.start_ms in (59 * 60_000, 60 * 60_000)
    with pytest.raises(ConfigError, match="no multiple of --step"):
        range_query("http://p:9090", QUERY, start=str(T0 + 1), end=str(T0 + 2), step="1m")


def test_a_pull_past_the_samples_one_pull_keeps_stops_and_stores_nothing(
    tmp_path: Path, prometheus: FakePrometheus, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import prism.ingest.prometheus_pull as pull

    monkeypatch.setattr(pull, "MAX_PULL_SAMPLES", 10_000)  # the fake server's two days at 10 s
    db = tmp_path / "s.duckdb"
    assert _pull(db, prometheus.url) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "over the 10,000 one pull keeps in memory (nothing was stored)" in err
    assert "a longer --step" in err
    assert _count(db, "samples") == 0 and _count(db, "ingests") == 0
