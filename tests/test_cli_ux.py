"""The CLI's user experience (#19): ``--output -``, ``--db`` after the command, help texts and
defaults, a fast ``prism --help``, progress on a terminal only, UTC times with ``Z`` in JSON,
and ``prism ingest -`` reading stdin."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.cli import build_parser, main
from prism.cli import parser as cli_parser

SID = "lab/all/gpus_in_use"
SACCT = (
    "JobID|User|Account|Partition|AllocTRES|Submit|Start|End|State\n"
    "7|u1|vision|gpu|cpu=8,gres/gpu=2|2026-01-05T00:00:00|2026-01-05T00:00:00|"
    "2026-01-05T02:00:00|COMPLETED\n"
    "7.batch||vision||cpu=8,gres/gpu=2|2026-01-05T00:00:00|2026-01-05T00:00:00|"
    "2026-01-05T02:00:00|COMPLETED\n"
    "8|u2|nlp|gpu|cpu=4,gres/gpu=1|2026-01-05T00:20:00|2026-01-05T00:30:00|"
    "2026-01-05T01:00:00|COMPLETED\n"
)


def _jobs(path: Path) -> Path:
    """Six days of 300 random jobs on two VCs of cluster ``lab``."""
    rng = np.random.default_rng(0)
    start = pd.Timestamp("2026-01-01") + pd.to_timedelta(rng.integers(0, 6 * 1440, 300), "min")
    frame = pd.DataFrame({
        "job_id": [f"j{i}" for i in range(300)], "cluster": "lab",
        "scope": [f"vc{i % 2 + 1}" for i in range(300)], "gpu_type": "A100",
        "num_gpus": rng.integers(1, 5, 300), "num_cpus": 8, "submit_ts": start,
        "start_ts": start, "end_ts": start + pd.to_timedelta(rng.integers(20, 600, 300), "min"),
        "status": "COMPLETED"})
    frame.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    return path


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A store with the jobs of :func:`_jobs` ingested (``--db`` after the command)."""
    store = str(tmp_path / "s.duckdb")
    assert main(["ingest", str(_jobs(tmp_path / "jobs.csv")), "--format", "jobs-csv", "-q",
                 "--db", store]) == 0
    return store


def _prism(*argv: str, stdin: bytes | None = None, cwd: Path | None = None
           ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "prism.cli", *argv], input=stdin,
                          capture_output=True, timeout=300, cwd=cwd,
                          env={**os.environ, "COLUMNS": "120"})


def _parsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _parsers(child)
    return found


# -- help ------------------------------------------------------------------------------------
def test_every_option_has_help_and_shows_its_default() -> None:
    parsers = _parsers(build_parser())
    assert len(parsers) > 20
    for prog, parser in parsers:
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{prog} {action.option_strings[0]} has no help"
            if action.default not in (None, False, argparse.SUPPRESS):
                shown = formatter._expand_help(action)
                assert "default" in shown.lower() and str(action.default).split(",")[0] in (
                    shown), f"{prog} {action.option_strings[0]}: {shown!r} hides its default"
    help_text = dict(parsers)["prism forecast"].format_help()
    assert "(default: 0.5,0.9,0.99)" in help_text.replace("\n", " ").replace("  ", " ")


def test_copied_constants_agree_with_their_sources() -> None:
    from prism.schema import FILL_POLICIES
    from prism.usecases.files import FRAME_FORMATS

    assert cli_parser.FILL_POLICIES == FILL_POLICIES
    assert cli_parser.FRAME_FORMATS == FRAME_FORMATS


def test_help_imports_no_heavy_module() -> None:
    # what `python -m prism.cli --help` imports, from -X importtime (no timing asserted)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "prism.cli", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage: prism" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "prism.cli.app" in imported
    heavy = {"pandas", "numpy", "torch", "duckdb", "sklearn", "rich.progress", "pyarrow"}
    assert not heavy & imported
    for command in (["forecast", "--help"], ["series", "export", "--help"],
                    ["capacity", "--help"]):
        shown = _prism(*command)
        assert shown.returncode == 0 and b"--output" in shown.stdout


def test_options_are_not_abbreviated_and_a_misspelt_one_names_the_close_ones(
        db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # backtest's --models on forecast was read as a prefix of --models-dir: PRISM forecast
    # from a registry named "naive", with no word said
    models_dir = tmp_path / "naive"
    with pytest.raises(SystemExit) as stop:
        main(["--db", db, "forecast", SID, "--models", "naive", "--save"])
    assert stop.value.code == 2 and not models_dir.exists()
    err = capsys.readouterr().err
    assert "prism forecast: error: unrecognized arguments: --models naive" in err
    assert "did you mean --model or --models-dir?" in err
    for argv, hint in ((["backtest", "--model", "naive"], "did you mean --models"),
                       (["capacity", "--cluster", "lab", "--quant", "0.9"],
                        "did you mean --quantile"),
                       (["series", "list", "--clust", "lab"], "did you mean --cluster?")):
        with pytest.raises(SystemExit) as stop:
            main(["--db", db, *argv])
        assert stop.value.code == 2 and hint in capsys.readouterr().err
    # spelt out, the same options work; an unknown word with nothing close gets no hint
    assert main(["--db", db, "series", "list", "--cluster", "lab", "--json"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["--db", db, "series", "list", "--zzz"])
    assert "did you mean" not in capsys.readouterr().err


# -- --db ------------------------------------------------------------------------------------
def test_db_after_the_command_wins(tmp_path: Path, db: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["series", "list", "--json", "--db", db]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 20
    missing = str(tmp_path / "missing.duckdb")
    assert main(["--db", missing, "series", "list", "--json", "--db", db]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 20
    assert main(["--db", db, "series", "list", "--db", missing]) == 1
    assert "no store at" in capsys.readouterr().err and not Path(missing).exists()
    assert main(["--db", db, "series", "show", SID, "--tail", "1"]) == 0  # before: as ever


def test_quiet_before_or_after_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from prism.cli import common

    monkeypatch.setattr(common.err, "_force_terminal", True)  # bars are a terminal's only
    nodes = tmp_path / "nodes.csv"
    store = str(tmp_path / "q.duckdb")
    for i, argv in enumerate((["--db", store, "-q", "ingest"], ["--db", store, "ingest"])):
        nodes.write_text(f"node,gpus,gpu_type\nn{i},8,A100\n")  # new content each time
        assert main([*argv, str(nodes), "--format", "node-list", "--cluster", "lab",
                     *([] if i == 0 else ["-q"])]) == 0
        assert "━" not in capsys.readouterr().err
    nodes.write_text("node,gpus,gpu_type\nn9,8,A100\n")
    assert main(["--db", store, "ingest", str(nodes), "--format", "node-list",
                 "--cluster", "lab"]) == 0
    assert "━" in capsys.readouterr().err  # the bar, where neither asked for quiet


# -- --output - ------------------------------------------------------------------------------
def test_forecast_to_stdout_as_csv_and_json(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["forecast", SID, "--model", "seasonal_naive", "--horizon", "2h", "--quantiles",
            "0.5,0.9", "-q", "--db", db, "--output", "-"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    frame = pd.read_csv(io.StringIO(captured.out), parse_dates=["ts"])
    assert list(frame.columns) == ["series_id", "ts", "model", "mean", "p50", "p90"]
    assert len(frame) == 12 and "wrote 12 rows" in captured.err and "to stdout" in captured.err

    assert main([*argv, "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 12 and records[0]["ts"].endswith(":00Z")
    assert pd.Timestamp(records[0]["ts"]).tz is not None  # parses as a UTC time
    assert [pd.Timestamp(r["ts"]).tz_localize(None) for r in records] == frame["ts"].tolist()

    assert main([*argv[:-2], "--format", "json"]) == 1  # --format needs --output
    assert "--format json needs --output" in capsys.readouterr().err
    assert main([*argv[:-1], "x.csv", "--format", "json"]) == 1
    assert "ends in '.csv'" in capsys.readouterr().err


def test_series_export_and_backtest_to_stdout(db: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["series", "export", "--series", SID, "--output", "-", "--db", db]) == 0
    captured = capsys.readouterr()
    panel = pd.read_csv(io.StringIO(captured.out))
    assert list(panel.columns) == ["series_id", "ts", "value"] and len(panel) > 700
    assert "to stdout" in captured.err
    assert main(["series", "export", "--series", SID, "--output", "-", "--format", "json",
                 "--db", db]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == len(panel) and records[0]["ts"] == panel["ts"][0] + "Z"

    file_csv = tmp_path / "panel.csv"  # a file, as before, with a --format that agrees
    assert main(["series", "export", "--series", SID, "--output", str(file_csv), "--format",
                 "csv", "--db", db]) == 0
    assert file_csv.read_text() == panel.to_csv(index=False)
    assert f"to {file_csv}" in capsys.readouterr().out  # the message: stdout, as before

    assert main(["backtest", "--series", SID, "--models", "naive,seasonal_naive",
                 "--horizon", "1h", "--windows", "2", "-q", "--summary", "--output", "-",
                 "--db", db]) == 0
    captured = capsys.readouterr()
    frame = pd.read_csv(io.StringIO(captured.out))
    assert set(frame["model"]) == {"naive", "seasonal_naive"} and len(frame) == 2 * 2 * 6
    assert "backtest: horizon 1h" in captured.err  # the summary table goes to stderr


def test_parquet_on_stdout_is_the_panel(db: str) -> None:
    done = _prism("series", "export", "--series", SID, "--output", "-", "--format", "parquet",
                  "--db", db)
    assert done.returncode == 0, done.stderr
    assert done.stdout[:4] == b"PAR1" and b"to stdout" in done.stderr
    panel = pd.read_parquet(io.BytesIO(done.stdout))
    assert panel["series_id"].unique().tolist() == [SID] and len(panel) > 700


def test_a_reader_that_stops_early_gets_no_traceback(db: str) -> None:
    """``prism series export --output - | head``: a pipe closed before the data is written
    raised BrokenPipeError, with a traceback and exit 1. (``true`` reads nothing: the pipe
    is closed by the time PRISM has started.)"""
    done = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m prism.cli series export --output - --format csv"
                       f" --db {db} | true; echo rc=${{PIPESTATUS[0]}}"],
        capture_output=True, timeout=300)
    assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr, done.stderr
    assert done.stdout.strip() == b"rc=0", done.stdout


def test_capacity_steps_to_stdout_and_json_times(db: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    models = str(tmp_path / "models")
    argv = ["capacity", "--cluster", "lab", "--model", "seasonal_naive", "--models-dir",
            models, "--db", db]
    assert main([*argv, "--output", "-"]) == 0
    captured = capsys.readouterr()
    steps = pd.read_csv(io.StringIO(captured.out))
    assert {"series_id", "ts", "needed"} <= set(steps.columns) and len(steps) == 4 * 144
    assert "to stdout" in captured.err and "why:" not in captured.out
    assert "clusters" not in captured.err  # no progress bar: stderr is not a terminal
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["rows"][0]["start"].endswith("Z") and plan["rows"][0]["end"].endswith("Z")
    assert main([*argv, "--json", "--output", "-"]) == 1
    assert "both write to stdout" in capsys.readouterr().err


def test_series_show_json_times_are_utc_with_z(db: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["series", "show", SID, "--tail", "2", "--json", "--db", db]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert len(shown) == 2
    for row in shown:  # 2026-01-07T04:10:00Z
        assert row["ts"].endswith(":00Z") and len(row["ts"]) == 20, row
        assert pd.Timestamp(row["ts"]).tz is not None
    assert main(["series", "list", "--json", "--db", db]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {r["first_ts"] for r in listed} == {"2026-01-01T00:30:00Z"}  # the first job



def _is_utc_z(text: str) -> bool:
    """``2026-01-07T04:10:00Z``: ISO 8601 in UTC with ``Z``, no offset (a fraction of a second
    where the time has one: a model's ``created``)."""
    return re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", text) is not None


def test_decompose_json_times_are_utc_with_z(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # a flat series with two bursts and a level shift at known times
    rng = np.random.default_rng(1)
    value = 10 + rng.normal(0, 0.5, 576)
    value[300:] += 20
    value[100:106] += 40
    value[450:455] += 40
    path, db = tmp_path / "vc1.csv", str(tmp_path / "d.duckdb")
    pd.DataFrame({"series_id": "lab/vc1/gpus_in_use", "value": value.round(2),
                  "ts": pd.date_range("2026-01-05", periods=576, freq="10min")}).to_csv(
        path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv", "-q"]) == 0
    capsys.readouterr()
    assert main(["--db", db, "decompose", "lab/vc1/gpus_in_use", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [s["at"] for s in summary["level_shifts"]] == ["2026-01-07T02:00:00Z"]
    assert len(summary["bursts"]) == 2
    for burst in summary["bursts"]:
        assert all(_is_utc_z(burst[k]) for k in ("start", "end", "peak")), burst
    assert summary["bursts"][0]["start"] <= "2026-01-05T16:40:00Z" < summary["bursts"][0]["end"]


def test_models_list_and_prune_json_times_are_utc_with_z(
        db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = str(tmp_path / "models")
    for _ in range(2):
        assert main(["forecast", SID, "--model", "naive", "--horizon", "1h", "--save",
                     "--models-dir", models, "-q", "--db", db, "--output", "-"]) == 0
    capsys.readouterr()
    assert main(["models", "list", "--models-dir", models, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 2
    for record in listed:
        assert all(_is_utc_z(record[k]) for k in ("data_start", "data_end", "created")), record
        assert record["data_start"] == "2026-01-01T00:30:00Z"  # the first job
    assert main(["models", "list", "--models-dir", models]) == 0
    assert "+00:00" not in capsys.readouterr().out
    assert main(["models", "prune", "--models-dir", models, "--dry-run", "--json"]) == 0
    pruned = json.loads(capsys.readouterr().out)
    assert [r["model_id"] for r in pruned] == [listed[1]["model_id"]]
    assert pruned[0]["created"] == listed[1]["created"]


def test_batch_json_times_are_those_of_an_in_memory_forecast(
        db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batch, memory = tmp_path / "batch.json", tmp_path / "memory.json"
    argv = ["forecast", SID, "--model", "naive", "--horizon", "1h", "-q", "--db", db]
    assert main([*argv, "--workers", "1", "--output", str(batch)]) == 0
    assert main([*argv, "--output", str(memory)]) == 0
    got, want = json.loads(batch.read_text()), json.loads(memory.read_text())
    assert [r["ts"] for r in got] == [r["ts"] for r in want] and len(got) == 6
    assert all(_is_utc_z(r["ts"]) for r in got)


# -- progress --------------------------------------------------------------------------------
@pytest.mark.slow
def test_report_progress_on_a_terminal_only(db: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from prism.cli import common

    argv = ["report", "--cluster", "lab", "--model", "seasonal_naive", "--models-dir",
            str(tmp_path / "models"), "--output", str(tmp_path / "r.html"), "--db", db]
    assert main(argv) == 0
    assert "clusters" not in capsys.readouterr().err  # not a terminal: no bar
    monkeypatch.setattr(common.err, "_force_terminal", True)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "clusters" in err and "1/1" in err
    assert main([*argv, "-q"]) == 0
    assert "clusters" not in capsys.readouterr().err


def _bar(stage: str, err: str) -> str | None:
    """The last ``done/total`` of the progress bar of ``stage`` in ``err``."""
    found = re.findall(rf"{stage} +\S+ (\d+/\d+) ", err)
    return found[-1] if found else None


def test_forecast_all_progress_on_a_terminal_only_and_the_same_forecast(
        db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from prism.cli import common

    models = str(tmp_path / "models")
    argv = ["forecast", "--all", "--model", "seasonal_naive", "--horizon", "2h",
            "--models-dir", models, "--db", db]
    plain, shown, saved = (tmp_path / f"{name}.csv" for name in ("plain", "shown", "saved"))
    assert main([*argv, "--save", "--output", str(plain)]) == 0
    err = capsys.readouterr().err
    assert "fit" not in err and "20/20" not in err  # not a terminal: no bar
    monkeypatch.setattr(common.err, "_force_terminal", True)
    assert main([*argv, "--output", str(shown)]) == 0
    err = capsys.readouterr().err
    assert _bar("fit", err) == _bar("forecast", err) == "20/20"
    assert shown.read_bytes() == plain.read_bytes()
    # from the saved model: a bar per stage too, and the same forecast (bit for bit)
    assert main([*argv, "--from-model", "seasonal_naive", "--output", str(saved)]) == 0
    err = capsys.readouterr().err
    assert _bar("load", err) == _bar("forecast", err) == "20/20" and _bar("fit", err) is None
    assert saved.read_bytes() == plain.read_bytes()
    assert main([*argv, "--output", str(shown), "-q"]) == 0
    assert "20/20" not in capsys.readouterr().err
    assert shown.read_bytes() == plain.read_bytes()


# -- stdin -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_ingest_reads_stdin(tmp_path: Path) -> None:
    store = str(tmp_path / "s.duckdb")
    done = _prism("ingest", "-", "--format", "slurm-sacct", "-q", "--db", store,
                  stdin=SACCT.encode())
    assert done.returncode == 0, done.stderr
    assert b"<stdin>: 2 rows" in done.stdout and b"2 rows added" in done.stdout
    again = _prism("ingest", "-", "--format", "slurm-sacct", "-q", "--db", store,
                   stdin=SACCT.encode())
    assert b"<stdin>: unchanged" in again.stdout
    shown = json.loads(_prism("series", "show", "slurm/all/gpus_in_use", "--json", "--db",
                              store).stdout)
    # a sacct export may leave out jobs that ended before its -S: the series start at its
    # earliest End (01:00), where job 7 (2 GPUs) runs alone
    assert shown[0]["ts"] == "2026-01-05T01:00:00Z"
    assert [r["value"] for r in shown][:4] == [2.0, 2.0, 2.0, 2.0]

    bad = SACCT.replace("2026-01-05T01:00:00|COMPLETED", "2026-01-05T00:10:00|COMPLETED")
    failed = _prism("ingest", "-", "--format", "slurm-sacct", "-q", "--db", store,
                    stdin=bad.encode())
    assert failed.returncode == 1 and failed.stdout == b""
    assert b"error: <stdin>, line 4, column 'End'" in failed.stderr
    assert b"prism-stdin" not in failed.stderr

    csv = (tmp_path / "jobs.csv")
    _jobs(csv)
    other = _prism("ingest", "-", "--format", "jobs-csv", "-q", "--db", store,
                   stdin=csv.read_bytes())
    assert other.returncode == 0 and b"<stdin>: 300 rows" in other.stdout


def test_ingest_dash_twice_or_from_a_terminal_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s.duckdb")
    assert main(["ingest", "-", "-", "--format", "slurm-sacct", "--db", store]) == 1
    assert "name it once" in capsys.readouterr().err

    class _Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", _Terminal())
    assert main(["ingest", "-", "--format", "slurm-sacct", "--db", store]) == 1
    assert "stdin, which is a terminal" in capsys.readouterr().err
