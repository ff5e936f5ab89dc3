"""``prism watch`` (#19) against a local server that speaks the Prometheus HTTP API: ticks pull
only what is new (the store gets each sample once), refit only the series that got data (and
only past ``--refit-every``), and a failed pull is reported, naming the server, while the
loop goes on."""

from __future__ import annotations

import socket
from pathlib import Path

import pandas as pd
import pytest

from prism import registry
from prism.cli import main
from prism.store import Store
from prism.usecases import watch as watch_uc
from tests.prometheus_server import (
    QUERY,
    FakePrometheus,
    prometheus_fixture,  # noqa: F401 - the fixture prometheus
    value,
)

MINUTE_MS = 60_000
A, B = "prometheus/a/gpus_busy", "prometheus/b/gpus_busy"


def _watch(prometheus: FakePrometheus, tmp_path: Path, *extra: str) -> int:
    return main(["watch", "--prometheus-url", prometheus.url, "--query", QUERY,
                 "--option", "metric=gpus_busy", "--step", "1m", "--since", "2h",
                 "--freq", "1m", "--model", "naive", "--models-dir", str(tmp_path / "models"),
                 "--every", "1s", "--db", str(tmp_path / "s.duckdb"), *extra])


def _samples(tmp_path: Path) -> pd.DataFrame:
    with Store.open(tmp_path / "s.duckdb") as store:
        return store.fetch_df("SELECT series_id, ts, value FROM samples ORDER BY series_id, ts")


def _models(tmp_path: Path) -> list[registry.ModelRecord]:
    return registry.list_models(tmp_path / "models", alias="naive")


def _base() -> int:
    """A whole minute 90 minutes ago (Unix ms): where the server's data ends at first."""
    now = pd.Timestamp.now(tz="UTC").value // 1_000_000
    return now // MINUTE_MS * MINUTE_MS - 90 * MINUTE_MS


def _ts(ms: int) -> pd.Timestamp:
    return pd.Timestamp(ms, unit="ms")


@pytest.mark.slow
def test_ticks_pull_new_points_once_and_refit_only_the_series_that_got_them(
    tmp_path: Path, prometheus: FakePrometheus, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = _base()
    prometheus.until_ms = {"*": base}

    def time_passes(seconds: float) -> None:  # between ticks 1 and 2: vc a gets 20 minutes
        prometheus.until_ms[f"{QUERY}/a"] = base + 20 * MINUTE_MS

    monkeypatch.setattr(watch_uc, "_sleep", time_passes)
    assert _watch(prometheus, tmp_path, "--ticks", "2") == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" at ")[0] for line in out] == ["tick 1", "tick 2"]
    assert "2 series" in out[0] and f"refit naive on 2 series: {A}, {B}" in out[0]
    assert "20 new samples in 1 series" in out[1] and f"refit naive on 1 series: {A} " in out[1]

    # tick 2 asked from one step after the newest stored sample; each sample is stored once
    assert len(prometheus.requests) == 2
    assert round(float(prometheus.requests[1]["start"]) * 1000) == base + MINUTE_MS
    stored = _samples(tmp_path)
    assert not stored.duplicated(["series_id", "ts"]).any()
    last = stored.groupby("series_id")["ts"].max()
    assert last[A] == _ts(base + 20 * MINUTE_MS) and last[B] == _ts(base)
    first = stored["ts"].min()
    counts = stored.groupby("series_id").size()
    assert counts[B] == (base - first.value // 1_000_000) // MINUTE_MS + 1
    assert counts[A] == counts[B] + 20
    expected = [value(QUERY, sid.split("/")[1], t.value // 1_000_000)
                for sid, t in zip(stored["series_id"], stored["ts"], strict=True)]
    assert stored["value"].tolist() == expected

    # tick 1 fitted both series; tick 2 saved a newer model of a only, on the new data
    models = _models(tmp_path)
    assert sorted(s for m in models for s in m.series_ids) == [A, A, B]
    (newer,) = [m for m in models if pd.Timestamp(m.data_end) > _ts(base)]
    assert newer.series_ids == [A] and pd.Timestamp(newer.data_end) == _ts(base + 20 * MINUTE_MS)

    # --refit-every 30: 20 new points of a wait; 20 more make 40 since its model: refit
    prometheus.until_ms[f"{QUERY}/a"] = base + 40 * MINUTE_MS
    assert _watch(prometheus, tmp_path, "--once", "--refit-every", "30") == 0
    line = capsys.readouterr().out
    assert "no refit" in line and f"1 series wait for --refit-every 30: {A}" in line
    assert len(_models(tmp_path)) == len(models)
    prometheus.until_ms[f"{QUERY}/a"] = base + 60 * MINUTE_MS
    assert _watch(prometheus, tmp_path, "--once", "--refit-every", "30") == 0
    assert f"refit naive on 1 series: {A} " in capsys.readouterr().out
    newest = [m for m in _models(tmp_path) if m not in models]
    assert [(m.series_ids, m.data_end) for m in newest] == [
        ([A], _ts(base + 60 * MINUTE_MS).isoformat())]

    # nothing new: the pull adds nothing, nothing is refit
    before = _samples(tmp_path)
    assert _watch(prometheus, tmp_path, "--once") == 0
    assert "0 new samples in 0 series; no refit" in capsys.readouterr().out
    pd.testing.assert_frame_equal(_samples(tmp_path), before)
    assert len(_models(tmp_path)) == len(models) + 1


def test_a_failed_pull_names_the_server_and_the_loop_goes_on(
    tmp_path: Path, prometheus: FakePrometheus, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prometheus.until_ms = {"*": _base()}
    prometheus.fail_at = 1  # the first request: a 503
    assert _watch(prometheus, tmp_path, "--once") == 1
    err = capsys.readouterr().err
    assert f"tick 1: pull of {QUERY!r} from {prometheus.url}/api/v1/query_range failed" in err
    assert "503 timeout" in err and "nothing was stored" in err
    assert _samples(tmp_path).empty and not _models(tmp_path)

    # the next tick pulls again (from --since back: nothing was stored) and succeeds
    prometheus.fail_at = 3  # the second tick's request
    monkeypatch.setattr(watch_uc, "_sleep", lambda seconds: None)
    assert _watch(prometheus, tmp_path, "--ticks", "3") == 1  # one of the ticks failed
    captured = capsys.readouterr()
    assert "1 of 3 ticks failed" in captured.err and "tick 2: pull of" in captured.err
    assert "refit naive on 2 series" in captured.out
    assert len(prometheus.requests) == 4 and len(_samples(tmp_path)) > 0

    # a server that cannot be reached: reported with its URL (without credentials)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    assert main(["watch", "--prometheus-url", f"http://user:pw@127.0.0.1:{port}", "--query",
                 QUERY, "--once", "--db", str(tmp_path / "s.duckdb")]) == 1
    err = capsys.readouterr().err
    assert f"http://127.0.0.1:{port}/api/v1/query_range" in err and "cannot reach" in err
    assert "pw" not in err


def test_ctrl_c_between_ticks_stops_cleanly(
    tmp_path: Path, prometheus: FakePrometheus, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prometheus.until_ms = {"*": _base()}

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(watch_uc, "_sleep", interrupted)
    assert _watch(prometheus, tmp_path) == 0  # no --ticks: until Ctrl-C
    captured = capsys.readouterr()
    assert captured.out.startswith("tick 1 at ") and "stopped after 1 tick (Ctrl-C)" in (
        captured.err)
    assert len(_samples(tmp_path)) > 0


@pytest.mark.parametrize(("extra", "message"), [
    (["--option", "nope=1"], "--option nope"),
    (["--model", "nope"], "unknown model 'nope'"),
    (["--every", "soon"], "is not a duration"),
    (["--refit-every", "0"], "--refit-every 0"),
    (["--ticks", "0"], "--ticks 0"),
    (["--step", "0s"], "must be positive"),
])
def test_bad_arguments_fail_before_any_request(
    tmp_path: Path, prometheus: FakePrometheus, extra: list[str], message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _watch(prometheus, tmp_path, *extra) == 1
    assert message in capsys.readouterr().err
    assert prometheus.requests == []


def test_ticks_keep_to_their_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ticks start every --every from the first; one that overruns skips the times missed."""
    now, slept = [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(watch_uc, "_clock", lambda: now[0])
    monkeypatch.setattr(watch_uc, "_sleep", sleep)
    starts, durations = [], iter([5.0, 70.0, 1.0, 0.0])
    for _ in watch_uc.schedule("60s", 4):
        starts.append(now[0])
        now[0] += next(durations)
    assert starts == [0.0, 60.0, 180.0, 240.0] and slept == [55.0, 50.0, 59.0]
