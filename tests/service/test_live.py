"""The real server: uvicorn on a free loopback port, called over HTTP (and by PrismClient)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest

from prism.client import PrismAPIError, PrismClient
from prism.config import Settings
from prism.remote import server_file
from prism.store import Store
from service.app import create_app
from tests.service.conftest import SERIES, LiveServer, Trace, make_settings


@pytest.mark.slow
def test_client_forecast_capacity_and_ingest(live: LiveServer, trace: Trace,
                                             tmp_path: Path) -> None:
    with PrismClient(live.url, token="") as prism:
        assert prism.health() and prism.ready()["series"] == 35
        fc = prism.forecast(SERIES, horizon="2h", quantiles=(0.5, 0.95))
        assert len(fc.ts) == 12 and fc.freq_s == 600 and not fc.cached
        assert fc.band(0.95) == fc.bands["p95"]
        frame = fc.to_frame()
        assert list(frame.columns) == ["series_id", "ts", "model", "mean", "p50", "p95"]
        again = prism.forecast(SERIES, horizon="2h", quantiles=(0.5, 0.95))
        assert again.cached and again.mean == fc.mean
        many = prism.forecast_many([SERIES, "cluster-0/vc-l10/gpu_demand"], horizon="2h",
                                   quantiles=(0.5, 0.95))
        assert [f.series_id for f in many] == [SERIES, "cluster-0/vc-l10/gpu_demand"]
        assert many[0].mean == fc.mean
        rows = prism.capacity("cluster-0", scope="vc-l10", horizon="6h", quantile=0.9)
        assert [r.scope for r in rows] == ["vc-l10"] and rows[0].capacity == 64.0
        assert rows[0].end - rows[0].start == pd.Timedelta("6h")
        path = tmp_path / "lab.csv"
        path.write_text("series_id,ts,value\nlab/all/gpus_in_use,2026-03-01T00:00,1\n"
                        "lab/all/gpus_in_use,2026-03-01T00:10,2\n")
        done = prism.ingest_file(path, format="long-csv")
        assert (done.status, done.rows, done.clusters) == ("ingested", 2, ["lab"])
        assert prism.ingest_file(path, format="long-csv").status == "unchanged"
        added = prism.ingest_records([{"series_id": "lab/all/gpus_in_use",
                                       "ts": "2026-03-01T00:20", "value": 3}],
                                     format="long-csv")
        assert added.rows == 1 and added.changed_series == 1
        with pytest.raises(PrismAPIError) as error:
            prism.forecast("cluster-0/all/nothing")
        assert error.value.status == 404 and "did you mean" in str(error.value.detail)


def test_client_retries_while_the_model_fits(trace: Trace, tmp_path: Path) -> None:
    settings = make_settings(trace, tmp_path, fit_budget_s=0.0)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(0.05)

    with LiveServer(create_app(settings)) as live, PrismClient(
            live.url, retries=400, max_backoff=0.05, sleep=sleep) as prism:
        fc = prism.forecast(SERIES, horizon="1h", model="prism", params={"use_jumps": False})
    assert fc.model == "prism[use_jumps=false]" and len(fc.mean) == 6
    assert waits and all(w == 0.05 for w in waits)  # Retry-After, capped at max_backoff


def test_client_reads_the_token_from_the_environment(trace: Trace, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings(trace, tmp_path, api_token="t0ken")
    with LiveServer(create_app(settings)) as live:
        monkeypatch.setenv("PRISM_API_TOKEN", "t0ken")
        with PrismClient(live.url) as prism:
            assert prism.series(cluster="cluster-0", metric="gpu_demand")[0]["series_id"]
        with PrismClient(live.url, token="wrong") as prism, pytest.raises(PrismAPIError) as err:
            prism.series()
        assert err.value.status == 401


def test_client_gives_up_on_an_unreachable_server() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    waits: list[float] = []
    with PrismClient(f"http://127.0.0.1:{port}", retries=2, backoff=0.01,
                     sleep=waits.append) as prism, pytest.raises(PrismAPIError) as error:
        prism.forecast(SERIES)
    assert error.value.status == 0 and len(waits) == 2 and waits[0] < waits[1] * 2


def test_client_arguments_of_the_wrong_shape_are_named_before_any_request() -> None:
    with pytest.raises(ValueError, match="needs its scheme, e.g. 'http://127.0.0.1:8000'"):
        PrismClient("127.0.0.1:8000")
    requests: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: requests.append(r) or httpx.Response(500))
    with PrismClient("http://prism", transport=transport, retries=0) as prism:
        with pytest.raises(TypeError, match=r"not the string 'a/b/c': write \['a/b/c'\]"):
            prism.forecast_many("a/b/c")  # a string is iterable: it went out letter by letter
        with pytest.raises(TypeError, match="series_ids takes a list"):
            prism.refit("a/b/c")
        with pytest.raises(TypeError, match="series_ids takes a list"):
            prism.export_panel(series_ids="a/b/c")
        with pytest.raises(TypeError, match=r"not the number 0.9: write \[0.9\]"):
            prism.forecast("a/b/c", quantiles=0.9)  # type: ignore[arg-type]
    assert requests == []


@pytest.mark.slow
def test_concurrent_ingests_and_forecasts_lose_nothing(settings: Settings) -> None:
    """8 clients ingest distinct batches while 8 query forecasts; every row lands once."""
    batches, points = 3, 48
    failures: list[str] = []
    ingested: list[int] = []
    start = pd.Timestamp("2026-03-01")

    def values(k: int, b: int) -> list[float]:
        return [float(k * 1000 + b * 100 + i) for i in range(points)]

    def ingester(k: int, url: str) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            for b in range(batches):
                records = [{"series_id": f"load/c{k}/gpus_in_use",
                            "ts": (start + pd.Timedelta(minutes=10 * (b * points + i))
                                   ).isoformat(), "value": v}
                           for i, v in enumerate(values(k, b))]
                r = http.post("/v1/ingest", params={"format": "long-csv"},
                              json={"records": records})
                if r.status_code != 200:
                    failures.append(f"ingest {k}/{b}: {r.status_code} {r.text}")
                else:
                    ingested.append(r.json()["rows"])

    stop = threading.Event()
    answered: list[int] = []

    def querier(k: int, url: str) -> None:
        ids = [SERIES, "cluster-0/vc-27a/gpu_demand", "cluster-0/vc-l10/gpus_in_use"]
        with httpx.Client(base_url=url, timeout=60) as http:
            i = 0
            while not stop.is_set() or i < 5:
                horizon = ("1h", "6h", "1d")[(k + i) % 3]
                r = http.get("/v1/forecast", params={"series_id": ids[i % 3],
                                                     "horizon": horizon})
                if r.status_code != 200:
                    failures.append(f"forecast {k}: {r.status_code} {r.text}")
                answered.append(1)
                i += 1

    with LiveServer(create_app(settings)) as live:
        threads = [threading.Thread(target=ingester, args=(k, live.url)) for k in range(8)]
        readers = [threading.Thread(target=querier, args=(k, live.url)) for k in range(8)]
        for t in readers + threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stop.set()
        for t in readers:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads + readers)
        assert not failures, failures[:3]
        assert sorted(ingested) == [points] * (8 * batches) and len(answered) >= 40
        with httpx.Client(base_url=live.url) as http:
            for k in range(8):
                got = http.get("/v1/series/values",
                               params={"series_id": f"load/c{k}/gpus_in_use"}).json()
                want = [v for b in range(batches) for v in values(k, b)]
                assert [p["value"] for p in got["points"]] == want
    with Store.open(settings.db, read_only=True) as store:
        total, distinct = store.fetch_one(
            "SELECT count(*), count(DISTINCT (series_id, ts)) FROM samples "
            "WHERE cluster = 'load'") or (0, 0)
        loads = store.fetch_one("SELECT count(*) FROM ingests WHERE cluster = 'load'")
    assert total == distinct == 8 * batches * points
    assert loads == (8 * batches,)


@pytest.mark.slow
def test_prism_serve_runs_the_api(trace: Trace, tmp_path: Path) -> None:
    settings = make_settings(trace, tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PRISM_DEFAULT_MODEL": "naive", "PRISM_API_TOKEN": ""}
    server = subprocess.Popen(
        [sys.executable, "-m", "prism.cli", "--db", settings.db, "serve", "--host",
         "127.0.0.1", "--port", str(port), "--models-dir", str(tmp_path / "models")],
        env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        fc = httpx.get(f"http://127.0.0.1:{port}/v1/forecast",
                       params={"series_id": SERIES, "horizon": "1h"}).json()
        assert fc["model"] == "naive" and len(fc["mean"]) == 6
        assert server_file(settings.db).exists()  # the CLI finds the server through it
        # a second server on the same store is refused, and leaves the first one's file
        second = subprocess.run(
            [sys.executable, "-m", "prism.cli", "--db", settings.db, "serve", "--port",
             str(port + 1)], env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second.stderr
        assert f"is already served by process {server.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert server_file(settings.db).exists()
    finally:
        server.send_signal(signal.SIGTERM)  # as systemd and Kubernetes stop a service
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err.decode()
    assert f"on http://127.0.0.1:{port}" in err.decode()
    assert (tmp_path / "models" / "naive").is_dir()  # the fitted model was saved
    assert not server_file(settings.db).exists()  # withdrawn on the way out
