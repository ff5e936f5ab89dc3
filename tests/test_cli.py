"""The CLI as a user runs it: ``main(argv)`` in-process and ``prism`` as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from prism.cli import main

HEADER = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"
ROWS = (
    "a,lab,vc1,A100,2,8,2026-01-05T00:00:00,2026-01-05T00:00:00,2026-01-05T02:00:00,COMPLETED\n"
    "b,lab,vc2,A100,4,8,2026-01-05T00:20:00,2026-01-05T00:30:00,2026-01-05T01:00:00,COMPLETED\n"
)


@pytest.fixture
def jobs_file(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + ROWS)
    return path


def test_ingest_list_show_export(tmp_path: Path, jobs_file: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "prism.duckdb")
    assert main(["--db", db, "ingest", str(jobs_file), "--format", "jobs-csv", "-q"]) == 0
    out = capsys.readouterr().out
    assert "2 rows added, 0 rejected" in out and "20 series in lab" in out
    assert main(["--db", db, "ingest", str(jobs_file), "--format", "jobs-csv", "-q"]) == 0
    assert "unchanged (already ingested)" in capsys.readouterr().out

    assert main(["--db", db, "series", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {r["series_id"] for r in listed} >= {"lab/all/gpus_in_use", "lab/vc2/gpu_demand"}

    assert main(["--db", db, "series", "show", "lab/all/gpus_in_use", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [r["value"] for r in shown][:6] == [2.0, 2.0, 2.0, 6.0, 6.0, 6.0]

    out_csv = tmp_path / "panel.csv"
    assert main(["--db", db, "series", "export", "--output", str(out_csv),
                 "--series", "lab/vc1/gpus_in_use"]) == 0
    panel = pd.read_csv(out_csv)
    assert list(panel.columns) == ["series_id", "ts", "value"]
    assert panel["series_id"].unique().tolist() == ["lab/vc1/gpus_in_use"]
    out_pq = tmp_path / "panel.parquet"
    assert main(["--db", db, "series", "export", "--output", str(out_pq)]) == 0
    assert pd.read_parquet(out_pq)["series_id"].nunique() == 20


def test_bad_input_exit_code_and_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + ROWS + "c,lab,vc1,A100,1,1,2026-01-05T03:00:00,"
                   "2026-01-05T04:00:00,2026-01-05T03:30:00,COMPLETED\n")
    db = str(tmp_path / "prism.duckdb")
    assert main(["--db", db, "ingest", str(bad), "--format", "jobs-csv", "-q"]) == 1
    err = capsys.readouterr().err
    assert f"error: {bad}, line 4, column 'end_ts': end time is before start time" in err
    assert main(["--db", db, "ingest", str(bad), "--format", "jobs-csv", "-q",
                 "--on-error", "skip"]) == 0
    out = capsys.readouterr().out
    assert "2 rows, 1 rejected" in out and "rejected line 4 column end_ts" in out


def test_errors_for_missing_store_series_and_format(tmp_path: Path, jobs_file: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "none.duckdb")
    assert main(["--db", db, "series", "list"]) == 1
    assert "no store at" in capsys.readouterr().err
    assert main(["--db", db, "ingest", str(jobs_file), "--format", "nope", "-q"]) == 1
    assert "unknown format 'nope'" in capsys.readouterr().err
    assert main(["--db", db, "ingest", str(jobs_file), "--format", "jobs-csv", "-q"]) == 0
    capsys.readouterr()
    assert main(["--db", db, "series", "show", "lab/all/gpus_in_us"]) == 1
    assert "did you mean lab/all/gpus_in_use" in capsys.readouterr().err
    assert main(["--db", db, "series", "export", "--output", str(tmp_path / "p.xlsx")]) == 1
    assert ".csv or .parquet" in capsys.readouterr().err
    assert main(["--db", db, "ingest", str(jobs_file), "--format", "jobs-csv", "--map", "x"]) == 1
    assert "is not KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["ingest"])
    assert exit_info.value.code == 2
    for bad in (["series", "show", "lab/all/gpus_in_use", "--tail", "0"],
                ["series", "show", "lab/all/gpus_in_use", "--tail", "-2"],
                ["decompose", "lab/all/gpus_in_use", "--top", "-1"]):
        with pytest.raises(SystemExit) as exit_info:  # not Python's slicing
            main(["--db", db, *bad])
        assert exit_info.value.code == 2
        assert "use a whole number of at least 1" in capsys.readouterr().err
    assert main(["--db", db, "series", "list", "--cluster", "nope"]) == 0
    assert "no series match --cluster nope" in capsys.readouterr().out


def test_prism_console_script_in_subprocess(tmp_path: Path, jobs_file: Path) -> None:
    env = {**os.environ, "PRISM_DB": str(tmp_path / "env.duckdb")}
    prism = Path(sys.executable).with_name("prism")
    ok = subprocess.run([str(prism), "ingest", str(jobs_file), "--format", "jobs-csv"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "env.duckdb").exists()  # PRISM_DB chose the store
    bad = subprocess.run([str(prism), "ingest", str(tmp_path / "missing.csv"), "--format",
                          "jobs-csv"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1
    assert "missing.csv: file not found" in bad.stderr
    assert bad.stdout == ""


def test_datasets_list_and_download_then_ingest(tmp_path: Path, traces: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import functools
    import gzip
    import http.server
    import shlex
    import threading

    assert main(["datasets", "list", "--json"]) == 0
    names = {d["name"] for d in json.loads(capsys.readouterr().out)}
    assert {"alibaba-v2023-pods", "helios-earth-vc6YE", "philly-node-sequence"} <= names
    assert main(["datasets", "list"]) == 0  # the table gives sizes in words
    table = capsys.readouterr().out
    assert " MB " in table and "e+0" not in table

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    pods = traces / "alibaba_gpu" / "v2023_openb_pod_list_default.csv.gz"
    (mirror / "openb_pod_list_default.csv").write_bytes(gzip.decompress(pods.read_bytes()))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(mirror))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cache = tmp_path / "cache"
        argv = ["datasets", "download", "alibaba-v2023-pods", "--base-url", url,
                "--cache-dir", str(cache), "-q"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "downloaded:" in out
        command = next(line for line in out.splitlines() if line.startswith("next: "))
        assert main(argv) == 0
        assert "already in the cache" in capsys.readouterr().out
    finally:
        server.shutdown()
    ingest_argv = shlex.split(command.removeprefix("next: "))
    assert ingest_argv[:2] == ["prism", "ingest"]
    db = str(tmp_path / "prism.duckdb")
    assert main(["--db", db, *ingest_argv[1:], "-q"]) == 0
    assert "8,152 rows added" in capsys.readouterr().out
    assert main(["--db", db, "series", "show", "alibaba-v2023/all/gpus_in_use", "--tail", "1"]) == 0
    assert main(["datasets", "download", "no-such-trace", "-q"]) == 1
    assert "no-such-trace" in capsys.readouterr().err


def test_ingest_shows_progress_on_stderr(tmp_path: Path, jobs_file: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from prism.cli import common

    db = str(tmp_path / "prism.duckdb")
    assert main(["--db", db, "ingest", str(jobs_file), "--format", "jobs-csv"]) == 0
    assert "read" not in capsys.readouterr().err  # stderr is no terminal: no bars
    db = str(tmp_path / "again.duckdb")
    monkeypatch.setattr(common.err, "_force_terminal", True)
    assert main(["--db", db, "ingest", str(jobs_file), "--format", "jobs-csv"]) == 0
    captured = capsys.readouterr()
    for stage in ("read", "rows", "write", "derive"):
        assert stage in captured.err
    assert "rows added" in captured.out and "derive" not in captured.out


@pytest.mark.slow
def test_forecast_command(tmp_path: Path, traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "prism.duckdb")
    vc = traces / "helios_earth_vc" / "earth_vc6YE_1min.csv.gz"
    assert main(["--db", db, "ingest", str(vc), "--format", "helios-vc", "-q"]) == 0
    out = tmp_path / "fc.csv"
    assert main(["--db", db, "forecast", "earth/vc6YE/gpus_in_use", "--horizon", "1d",
                 "--quantiles", "0.5,0.9", "--model", "seasonal_naive", "--output",
                 str(out)]) == 0
    frame = pd.read_csv(out, parse_dates=["ts"])
    assert list(frame.columns) == ["series_id", "ts", "model", "mean", "p50", "p90"]
    assert len(frame) == 144 and frame["ts"].min() == pd.Timestamp("2020-06-01")
    history = pd.read_csv(vc, parse_dates=["time"], index_col="time")["running_gpu_num"]
    last_day = history.resample("10min").mean().iloc[-144:].to_numpy()
    assert frame["mean"].round(9).tolist() == pd.Series(last_day).round(9).tolist()
    assert main(["--db", db, "forecast", "--all", "--horizon", "1h", "--model", "naive",
                 "--output", str(tmp_path / "all.json")]) == 0
    assert len(json.loads((tmp_path / "all.json").read_text())) == 4 * 6
    capsys.readouterr()
    assert main(["--db", db, "forecast", "earth/vc6YE/gpus_in_use", "--horizon=-1h"]) == 1
    assert "not a duration" in capsys.readouterr().err
    assert main(["--db", db, "forecast", "earth/vc6YE/gpus_in_use", "--quantiles", "1.5"]) == 1
    assert "between 0 and 1" in capsys.readouterr().err
    assert main(["--db", db, "forecast", "earth/vc6YE/gpus_in_use", "--model", "x"]) == 1
    assert "unknown model 'x'" in capsys.readouterr().err
