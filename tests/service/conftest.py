"""Fixtures of the API tests: a small store, the app (TestClient) and a real uvicorn server.

The store is a 7-day synthetic trace of one cluster (``prism generate``, 10-minute series of
1,006 points), ingested once per session into a template file that each test copies. Models
are cheap (``naive`` by default) so that fits take milliseconds.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from prism import usecases
from prism.config import Settings
from prism.ingest.base import IngestOptions
from prism.usecases.catalogue import generate_trace
from prism.usecases.ingest import ingest_files
from service.app import create_app

SERIES = "cluster-0/all/gpu_demand"


@dataclass(frozen=True)
class Trace:
    """The generated trace and the store it was ingested into."""

    db: Path
    jobs: Path
    capacity: Path


@pytest.fixture(scope="session")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """A 7-day, one-cluster trace and a template store holding it."""
    folder = tmp_path_factory.mktemp("trace")
    generated = generate_trace(folder, days=7, clusters=1, seed=0)
    db = folder / "template.duckdb"
    with usecases.open_store(db) as store:
        ingest_files(store, [generated.jobs_path], "jobs-csv", IngestOptions())
        ingest_files(store, [generated.capacity_path], "capacity-csv", IngestOptions())
    return Trace(db, Path(generated.jobs_path), Path(generated.capacity_path))


def make_settings(trace: Trace, folder: Path, **overrides: object) -> Settings:
    """Settings on a fresh copy of the template store, with a registry in ``folder``. A
    request waits up to a minute for the fits it needs (``fit_budget_s``): on a loaded machine
    10 s were too few for a cold capacity plan's queue series, and the 503 that a client would
    wait out failed tests that are about something else (those about the 503 set their own)."""
    db = folder / "prism.duckdb"
    if not db.exists():
        shutil.copy(trace.db, db)
    values: dict[str, object] = {
        "db": str(db), "models_dir": folder / "models", "default_model": "naive",
        "fit_budget_s": 60.0, "api_token": None, "refit_every": None,
        "cors_origins": [], "max_body_bytes": 32 * 1024 * 1024,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
def settings(trace: Trace, tmp_path: Path) -> Settings:
    """Default test settings on a copy of the template store."""
    return make_settings(trace, tmp_path)


@contextmanager
def started(app: FastAPI) -> Iterator[TestClient]:
    """The app (lifespan run) behind a TestClient, once ``/readyz`` would say ready (the
    default model's warm-up fit has run), as a load balancer would send requests."""
    with TestClient(app) as test_client:
        hub = test_client.app.state.hub  # type: ignore[attr-defined]
        assert hub.wait_ready(120), "the hub never became ready"
        yield test_client


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The app (lifespan run) behind a TestClient."""
    with started(create_app(settings)) as test_client:
        yield test_client


class LiveServer:
    """uvicorn serving an app on a free 127.0.0.1 port, in a thread of this process."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = int(self._socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    """A real uvicorn server on a free loopback port, stopped after the test, once the default
    model's warm-up fit has run (as :func:`started` waits: on a loaded machine the warm-up
    outlasted a client's retries of ``/readyz``'s 503)."""
    with LiveServer(create_app(settings)) as server:
        assert server.app.state.hub.wait_ready(120), "the hub never became ready"
        yield server
