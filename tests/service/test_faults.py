"""Faults (issue #18): the server killed during an ingest, a fit that raises, a full disk.
Each leaves the store holding all of a write or none of it, and the client a JSON answer."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from prism.forecasters import FORECASTERS
from prism.forecasters.baselines import NaiveForecaster
from prism.store import Store
from service.app import create_app
from tests.service.conftest import SERIES, LiveServer, Trace, make_settings

OTHER = "cluster-0/vc-27a/gpu_demand"


# -- SIGKILL during an ingest ----------------------------------------------------------------------
class _Server:
    """``python -m prism.cli --db DB serve`` in a child process, ready once ``/readyz`` is."""

    def __init__(self, db: str, models: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PRISM_DEFAULT_MODEL": "naive", "PRISM_API_TOKEN": ""}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "prism.cli", "--db", db, "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--models-dir", str(models)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while True:
            assert self.process.poll() is None, "the server exited while starting"
            assert time.monotonic() < deadline, "the server never became ready"
            try:
                if httpx.get(f"{self.url}/readyz", timeout=10).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # SIGKILL: no shutdown, no checkpoint
        self.process.wait(timeout=60)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=60)


SERIES_N, POINTS = 100, 1000  # 100,000 rows, ~4.5 MB of long CSV


def _long_csv() -> bytes:
    lines = ["series_id,ts,value"]
    for s in range(SERIES_N):
        for i in range(POINTS):
            lines.append(f"crash/s{s:03d}/gpus_in_use,2026-03-{1 + i // 144:02d}T"
                         f"{(i % 144) // 6:02d}:{(i % 6) * 10:02d},{(s + i) % 17}")
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.slow
@pytest.mark.parametrize("when", ["mid-upload", "after-upload"])
def test_sigkill_during_an_ingest_leaves_all_or_none(trace: Trace, tmp_path: Path,
                                                     when: str) -> None:
    settings = make_settings(trace, tmp_path)
    body = _long_csv()
    chunk = 64 * 1024
    parts = [body[i:i + chunk] for i in range(0, len(body), chunk)]
    server = _Server(settings.db, tmp_path / "models")
    try:
        def slowly() -> Iterator[bytes]:
            for k, part in enumerate(parts):
                if when == "mid-upload" and k == len(parts) // 2:
                    server.kill()  # half the body sent
                yield part
                time.sleep(0.002)
            if when == "after-upload":  # the whole body sent: the ingest is under way
                threading.Timer(0.05, server.kill).start()

        try:
            answer = httpx.post(f"{server.url}/v1/ingest", params={"format": "long-csv"},
                                content=slowly(), headers={"Content-Type": "text/csv"},
                                timeout=120)
            # the ingest beat the kill: then it is all there
            assert answer.status_code == 200, answer.text
        except httpx.TransportError:
            pass  # the connection died with the server
        server.kill()
    finally:
        server.kill()
    restarted = _Server(settings.db, tmp_path / "models")  # opens the store, replays its WAL
    try:
        with httpx.Client(base_url=restarted.url, timeout=60) as http:
            listed = http.get("/v1/series", params={"cluster": "crash"}).json()["count"]
            assert listed in (0, SERIES_N), f"{listed} of {SERIES_N} series: a partial ingest"
            assert http.get("/v1/series", params={"cluster": "cluster-0"}).json()["count"] == 35
            if when == "mid-upload":
                assert listed == 0
            if listed:
                got = http.get("/v1/series/values",
                               params={"series_id": "crash/s007/gpus_in_use"}).json()
                assert len(got["points"]) == POINTS
    finally:
        restarted.stop()
    with Store.open(settings.db, read_only=True) as store:
        rows = store.fetch_one("SELECT count(*) FROM samples WHERE cluster = 'crash'")
        before = store.fetch_one("SELECT count(*) FROM samples WHERE cluster = 'cluster-0'")
    with Store.open(str(trace.db), read_only=True) as template:
        want = template.fetch_one("SELECT count(*) FROM samples WHERE cluster = 'cluster-0'")
    assert rows in ((0,), (SERIES_N * POINTS,)), rows
    assert before == want  # what the store held before the kill is all there


# -- a fit that raises ---------------------------------------------------------------------------
class FailingForecaster(NaiveForecaster):
    """The naive forecaster, except that its fit raises (a bug in a model, say). Defined at
    module level: the fit runs in a child process, which imports it from here."""

    alias = "failing_naive"

    def _fit(self, values: dict[str, object]) -> None:  # type: ignore[override]
        raise RuntimeError("the failing forecaster failed on purpose")


@pytest.fixture
def failing_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FORECASTERS, FailingForecaster.alias, FailingForecaster)


@pytest.mark.usefixtures("failing_registered")
def test_a_fit_that_raises_is_a_json_error_and_the_server_carries_on(
        trace: Trace, tmp_path: Path) -> None:
    settings = make_settings(trace, tmp_path)
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url,
                                                                timeout=60) as http:
        for _ in range(2):  # the failure is not remembered as a model
            failed = http.get("/v1/forecast", params={"series_id": SERIES, "horizon": "1h",
                                                      "model": FailingForecaster.alias})
            assert 400 <= failed.status_code < 600
            assert failed.headers["content-type"] == "application/json"
            assert "failed on purpose" in failed.json()["detail"]
        posted = http.post("/v1/forecast", json={"series_ids": [OTHER], "horizon": "1h",
                                                 "model": FailingForecaster.alias})
        assert 400 <= posted.status_code < 600 and "failed on purpose" in posted.json()["detail"]
        other = http.get("/v1/forecast", params={"series_id": OTHER, "horizon": "1h"})
        assert other.status_code == 200 and len(other.json()["mean"]) == 6
        same = http.get("/v1/forecast", params={"series_id": SERIES, "horizon": "1h"})
        assert same.status_code == 200 and same.json()["model"] == "naive"


# -- a full disk ----------------------------------------------------------------------------------
def _records(cluster: str, start: int, n: int) -> dict[str, Any]:
    return {"records": [{"series_id": f"{cluster}/all/gpus_in_use",
                         "ts": f"2026-03-01T{(start + i) // 6:02d}:{(start + i) % 6 * 10:02d}",
                         "value": start + i} for i in range(n)]}


def _values(client: TestClient, cluster: str) -> list[float]:
    got = client.get("/v1/series/values", params={"series_id": f"{cluster}/all/gpus_in_use"})
    return [p["value"] for p in got.json()["points"]] if got.status_code == 200 else []


def test_an_ingest_on_a_full_disk_is_507_and_loses_nothing(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    first = client.post("/v1/ingest", params={"format": "long-csv"},
                        json=_records("disk", 0, 12))
    assert first.status_code == 200 and first.json()["rows"] == 12

    def full(*args: object, **kwargs: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "prism.duckdb.wal")

    with monkeypatch.context() as patch:
        patch.setattr(Store, "insert_frame", full)
        patch.setattr(Store, "insert_file", full)
        for body in (_records("disk", 12, 12), _records("disk2", 0, 12)):
            refused = client.post("/v1/ingest", params={"format": "long-csv"}, json=body)
            assert refused.status_code == 507, refused.text
            detail = refused.json()["detail"]
            assert "disk is full" in detail and "nothing of this request was stored" in detail
    assert _values(client, "disk") == [float(v) for v in range(12)]  # the rows before
    assert _values(client, "disk2") == []
    again = client.post("/v1/ingest", params={"format": "long-csv"},
                        json=_records("disk", 12, 12))  # the store still takes writes
    assert again.status_code == 200 and again.json()["rows"] == 12
    assert _values(client, "disk") == [float(v) for v in range(24)]


def test_a_full_disk_outside_the_store_is_507(trace: Trace, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The upload's temporary file cannot be written: a 507 too, as JSON."""
    settings = make_settings(trace, tmp_path)

    def full(self: Path, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url,
                                                                timeout=60) as http:
        with monkeypatch.context() as patch:
            patch.setattr(Path, "write_bytes", full)
            refused = http.post("/v1/ingest", params={"format": "long-csv"},
                                files={"file": ("a.csv", b"series_id,ts,value\n"
                                                b"disk/all/gpus_in_use,2026-03-01T00:00,1\n")})
        assert refused.status_code == 507, refused.text
        assert "disk is full" in refused.json()["detail"]
        assert http.get("/v1/series", params={"cluster": "disk"}).json()["count"] == 0
