"""The CLI beside a running ``prism serve``: commands go through its API (prism.cli.remote)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest

from prism.cli import main
from prism.generate import generate_trace
from prism.remote import find_server, server_file

CLUSTER = "cluster-0"
SERIES = f"{CLUSTER}/all/gpus_in_use"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A store with a generated trace, held by a real ``prism serve`` process."""
    root = tmp_path_factory.mktemp("remote")
    trace = generate_trace(root / "trace", days=8, clusters=1, seed=3)
    db = str(root / "prism.duckdb")
    assert main(["--db", db, "ingest", str(trace.jobs_path), "--format", "jobs-csv", "-q"]) == 0
    assert main(["--db", db, "ingest", str(trace.capacity_path), "--format", "capacity-csv",
                 "-q"]) == 0
    # saved models for the server to serve, as `make run` leaves them: it fits a series it
    # has none for in a child process per series (the hub's tests cover that), which here
    # cost half a minute of retried 503s for nothing this module checks
    assert main(["--db", db, "refit", "--all", "--model", "naive", "--models-dir",
                 str(root / "models"), "-q"]) == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PRISM_DEFAULT_MODEL": "naive", "PRISM_API_TOKEN": ""}
    env.pop("PRISM_API_URL", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "prism.cli", "--db", db, "serve", "--host", "127.0.0.1",
         "--port", str(port), "--models-dir", str(root / "models")],
        env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and find_server(db) is None:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            time.sleep(0.2)
        assert find_server(db) is not None, "the server never announced itself"
        yield db, root
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0, err.decode()
    assert not server_file(db).exists()  # the server takes its announcement away


@pytest.mark.slow
def test_the_store_is_locked_while_the_server_runs(served: tuple[str, Path]) -> None:
    import duckdb

    db, _ = served
    with pytest.raises(duckdb.IOException, match="[Ll]ock"):
        duckdb.connect(db)  # why the CLI must go through the API


def test_series_list_and_show_go_through_the_api(
        served: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served
    assert main(["--db", db, "series", "list", "--json"]) == 0
    captured = capsys.readouterr()
    assert "going through its API at http://127.0.0.1:" in captured.err
    ids = {row["series_id"] for row in json.loads(captured.out)}
    assert SERIES in ids
    assert main(["--db", db, "series", "show", SERIES, "--tail", "3", "--json"]) == 0
    points = json.loads(capsys.readouterr().out)
    assert len(points) == 3 and all({"ts", "value"} <= set(p) for p in points)


def _samples(path: Path, series_id: str, values: list[float],
             columns: tuple[str, str, str] = ("series_id", "ts", "value")) -> Path:
    """A long-csv file of ``values`` every 10 minutes from 2026-01-05, under ``columns``."""
    ts = pd.date_range("2026-01-05", periods=len(values), freq="10min").astype(str)
    pd.DataFrame(dict(zip(columns, ([series_id] * len(values), ts, values), strict=True))
                 ).to_csv(path, index=False)
    return path


def _stored(db: str, series_id: str) -> list[float]:
    """The values of ``series_id``, read through the running server's API."""
    with httpx.Client(base_url=find_server(db).url) as http:  # type: ignore[union-attr]
        got = http.get("/v1/series/values", params={"series_id": series_id}).json()
    return [p["value"] for p in got["points"]]


def test_ingest_beside_the_server_adds_rows_once(
        served: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served
    extra = _samples(tmp_path / "extra.csv", "remote/all/gpus_in_use", [1.0, 2.0, 3.0, 4.0])
    assert main(["--db", db, "ingest", str(extra), "--format", "long-csv"]) == 0
    assert "4 rows added" in capsys.readouterr().out
    assert main(["--db", db, "ingest", str(extra), "--format", "long-csv"]) == 0
    assert "unchanged" in capsys.readouterr().out  # idempotent through the API too
    assert _stored(db, "remote/all/gpus_in_use") == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.slow
def test_ingest_with_map_and_option_goes_through_the_api(
        served: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --map and --option were refused beside a server ("not sent through the API yet")
    db, _ = served
    own = _samples(tmp_path / "own.csv", "mapped/all/gpus_in_use", [5.0, 6.0, 7.0],
                   columns=("id", "time", "gpus"))
    assert main(["--db", db, "ingest", str(own), "--format", "long-csv", "--map",
                 "series_id=id", "--map", "ts=time", "--map", "value=gpus"]) == 0
    assert "3 rows added" in capsys.readouterr().out
    assert _stored(db, "mapped/all/gpus_in_use") == [5.0, 6.0, 7.0]
    # a misspelt option of the Python client is named, not ignored
    from prism.client import PrismAPIError, PrismClient

    with (PrismClient(find_server(db).url) as client,  # type: ignore[union-attr]
          pytest.raises(PrismAPIError) as bad):
        client.ingest_file(own, format="long-csv", on_eror="skip")
    assert bad.value.status == 422 and "did you mean 'on_error'?" in str(bad.value)


def test_a_node_list_goes_through_the_api_with_its_notes(
        served: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served
    nodes = tmp_path / "sinfo.txt"
    nodes.write_text("NODELIST|PARTITION|GRES\nn1|gpu*|gpu:v100:8(S:0-1)\n")
    assert main(["--db", db, "ingest", str(nodes), "--format", "node-list", "--cluster",
                 "cluster-O"]) == 0
    shown = capsys.readouterr()
    assert "(capacity per GPU type from 1 nodes, 1 with GPUs: 8 GPUs of 1 type(s))" in shown.out
    assert "note: cluster 'cluster-O' has no series yet" in shown.err
    assert "did you mean 'cluster-0'?" in shown.err


@pytest.mark.slow
def test_capacity_forecast_refit_report_and_export(
        served: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served
    # naive: this checks the remote path, not PRISM's fits (the server fits each series)
    assert main(["--db", db, "capacity", "--cluster", CLUSTER, "--horizon", "6h",
                 "--model", "naive", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = plan["rows"]
    # every field the local --json has (the client's rows had dropped a third of them)
    assert {"watts_idle", "watts_busy", "quantile"} <= set(plan)
    assert {"model", "demand_gpu_hours", "reserved_gpu_hours", "queue_hours",
            "capacity_source", "growth"} <= set(rows[0])
    assert {r["scope"] for r in rows} >= {"all"}
    assert all(r["gpus_needed"] >= 0 for r in rows)
    vcs = [r for r in rows if r["scope"].startswith("vc-")]
    assert sum(r["net_gpus"] for r in vcs) == next(
        r["net_gpus"] for r in rows if r["scope"] == "all")
    assert all(m["gpus"] > 0 for m in plan["moves"])
    assert main(["--db", db, "capacity", "--cluster", CLUSTER, "--horizon", "6h",
                 "--model", "naive"]) == 0
    text = capsys.readouterr().out
    assert "why:" in text and "queue allowance" in text
    assert main(["--db", db, "capacity", "--cluster", CLUSTER, "--refit"]) != 0
    assert "through the server" in capsys.readouterr().err

    out = tmp_path / "fc.csv"
    assert main(["--db", db, "forecast", SERIES, "--horizon", "1h", "--quantiles", "0.5,0.9",
                 "--output", str(out)]) == 0
    frame = pd.read_csv(out)
    assert len(frame) == 6 and {"mean", "p50", "p90"} <= set(frame.columns)
    assert (frame["p90"] >= frame["p50"]).all()

    assert main(["--db", db, "refit", SERIES, "--model", "naive"]) == 0
    assert "refits" in capsys.readouterr().out

    page = tmp_path / "report.html"
    assert main(["--db", db, "report", "--cluster", CLUSTER, "--model", "naive",
                 "--output", str(page)]) == 0
    assert page.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")

    panel = tmp_path / "panel.parquet"
    assert main(["--db", db, "series", "export", "--output", str(panel)]) == 0
    exported = pd.read_parquet(panel)
    assert list(exported.columns) == ["series_id", "ts", "value"]
    assert SERIES in set(exported["series_id"])


def test_a_command_that_needs_the_store_says_what_to_do(
        served: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served
    assert main(["--db", db, "backtest", "--models", "naive", "--series", SERIES,
                 "--windows", "1", "--horizon", "1h"]) == 1
    err = capsys.readouterr().err
    assert "needs the store itself" in err and "stop the server" in err
    # a batch refit too: its --workers would be lost on the server's own refit
    assert main(["--db", db, "refit", "--all", "--model", "naive", "--workers", "2"]) == 1
    err = capsys.readouterr().err
    assert "refit (batch)" in err and "needs the store itself" in err


def test_a_forecast_through_the_api_keeps_its_note(
        served: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served  # 8 days stored: a 10-day forecast runs past the history, as locally
    assert main(["--db", db, "forecast", SERIES, "--horizon", "10d", "--output", "-"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"note: {SERIES}: the horizon (1,440 steps) is longer than the stored history" in err


def test_the_track_record_goes_through_the_api(
        served: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served  # the store is locked by the server: this answer came from its API
    assert main(["--db", db, "track-record", "--cluster", CLUSTER, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cluster"] == CLUSTER


def test_decompose_goes_through_the_api_but_its_plot_is_refused(
        served: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # it needed the store itself; GET /v1/decomposition has the same summary
    db, _ = served
    assert main(["--db", db, "decompose", SERIES, "--json"]) == 0
    captured = capsys.readouterr()
    assert "going through its API" in captured.err
    summary = json.loads(captured.out)
    assert summary["series_id"] == SERIES and {"periods", "primitives", "bursts",
                                               "variance_share", "note"} <= set(summary)
    assert main(["--db", db, "decompose", SERIES]) == 0
    shown = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "variance share" in shown and "need not add up to 100 %" in shown
    plot = tmp_path / "d.png"
    assert main(["--db", db, "decompose", SERIES, "--plot", str(plot)]) == 1
    assert "drop --plot" in capsys.readouterr().err and not plot.exists()


def test_a_stale_server_file_is_ignored(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "prism.duckdb"
    points = tmp_path / "points.csv"
    points.write_text("series_id,ts,value\nlocal/all/gpus_in_use,2026-01-05T00:00,1\n"
                      "local/all/gpus_in_use,2026-01-05T00:10,2\n", encoding="utf-8")
    assert main(["--db", str(db), "ingest", str(points), "--format", "long-csv", "-q"]) == 0
    # a server killed without cleaning up: its pid is gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    server_file(db).write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": dead.pid,
                                           "db": str(db)}), encoding="utf-8")
    assert find_server(db) is None
    assert not server_file(db).exists()
    assert main(["--db", str(db), "series", "list"]) == 0  # opens the store itself
    assert "going through" not in capsys.readouterr().err


def test_a_prometheus_pull_is_refused_while_a_server_holds_the_store(
        served: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served
    assert main(["--db", db, "ingest", "--prometheus-url", "http://127.0.0.1:9",
                 "--query", "up", "--start", "now-1h"]) == 1
    assert "stop it to pull from Prometheus" in capsys.readouterr().err


def test_planning_options_go_through_or_are_refused_by_name(
        served: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = served
    # --max-unmet goes to GET /v1/capacity, which checks it (the choice itself: CLI = API in
    # tests/test_capacity_max_unmet.py)
    assert main(["--db", db, "capacity", "--cluster", CLUSTER, "--max-unmet", "-1"]) != 0
    err = capsys.readouterr().err
    assert "max_unmet" in err and "through the server" not in err
    # what the API does not take is refused, not silently dropped
    refused = [
        ["capacity", "--cluster", CLUSTER, "--procurement", "30d"],
        ["report", "--cluster", CLUSTER, "--max-unmet", "1%", "--output",
         str(tmp_path / "r.html")],
        ["forecast", SERIES, "--cluster", CLUSTER, "--horizon", "1h"],
    ]
    for argv in refused:
        assert main(["--db", db, *argv]) != 0, argv
        assert "through the server" in capsys.readouterr().err, argv
    assert not (tmp_path / "r.html").exists()
