"""Forecasting, saved models, reconciliation and backtests through the CLI, as a user runs them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.cli import main
from prism.forecasters import get_forecaster

SID = "lab/all/gpus_in_use"


def _samples(days: int, start: str = "2026-01-05") -> pd.DataFrame:
    rng = np.random.default_rng(4)
    n = 144 * days
    t = np.arange(n)
    value = np.round(30 + 10 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 2, n), 3)
    return pd.DataFrame({"series_id": SID, "ts": pd.date_range(start, periods=n, freq="10min"),
                         "value": value})


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, pd.DataFrame]:
    """A store holding 10 days of one series (as long-csv samples), and the samples."""
    db = str(tmp_path / "prism.duckdb")
    samples = _samples(12)
    first = tmp_path / "first.csv"
    samples.iloc[:144 * 10].to_csv(first, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    assert main(["--db", db, "ingest", str(first), "--format", "long-csv", "-q"]) == 0
    return db, samples


def test_save_list_and_forecast_from_a_saved_model_with_new_data(
    tmp_path: Path, store: tuple[str, pd.DataFrame], capsys: pytest.CaptureFixture[str]
) -> None:
    db, samples = store
    models = str(tmp_path / "models")
    fitted = tmp_path / "fitted.csv"
    assert main(["--db", db, "forecast", SID, "--model", "window_average", "--param",
                 "window=6h", "--horizon", "2h", "--save", "--models-dir", models,
                 "--output", str(fitted)]) == 0
    out = capsys.readouterr().out
    assert "saved" in out
    model_id = out.split("model ")[-1].split()[0]
    assert main(["models", "list", "--models-dir", models, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["model_id"] for r in listed] == [model_id] and listed[0]["series"] == 1

    # the saved model forecasts the same as when it was fitted, bit for bit
    again = tmp_path / "again.csv"
    assert main(["--db", db, "forecast", "--from-model", model_id, "--models-dir", models,
                 "--horizon", "2h", "--output", str(again)]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(again), pd.read_csv(fitted))

    # two more days arrive: the saved model (by its alias) absorbs them without a refit
    newer = tmp_path / "newer.csv"
    samples.iloc[144 * 10:].to_csv(newer, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    assert main(["--db", db, "ingest", str(newer), "--format", "long-csv", "-q"]) == 0
    updated = tmp_path / "updated.csv"
    assert main(["--db", db, "forecast", "--from-model", "window_average", "--models-dir",
                 models, "--horizon", "2h", "--output", str(updated)]) == 0
    got = pd.read_csv(updated, parse_dates=["ts"])
    assert got["ts"].min() == pd.Timestamp("2026-01-17T00:00:00")
    # the same as fitting the model on 10 days and updating it in Python
    model = get_forecaster("window_average", window="6h").fit(samples.iloc[:1440])
    want = model.update(samples.iloc[1440:]).predict("2h", (0.5, 0.9, 0.99))
    np.testing.assert_allclose(got["mean"], want["mean"])
    np.testing.assert_allclose(got["p90"], want["p90"])


def test_forecast_errors_name_the_fix(
    tmp_path: Path, store: tuple[str, pd.DataFrame], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = store
    models = str(tmp_path / "models")
    assert main(["--db", db, "forecast", SID, "--from-model", "prism", "--models-dir",
                 models]) == 1
    assert "no model 'prism'" in capsys.readouterr().err
    assert main(["--db", db, "forecast", SID, "--model", "naive", "--param", "season=1d"]) == 1
    assert "naive has no parameter 'season'" in capsys.readouterr().err
    assert main(["--db", db, "forecast", SID, "--model", "prism", "--param",
                 "n_atoms=many"]) == 1
    assert "expected a whole number" in capsys.readouterr().err
    assert main(["--db", db, "backtest", "--models", "naive", "--series", SID,
                 "--windows", "40", "--summary"]) == 1
    assert "needs" in capsys.readouterr().err


def test_prism_forecast_with_typed_parameters(
    tmp_path: Path, store: tuple[str, pd.DataFrame]
) -> None:
    db, _ = store
    out = tmp_path / "prism.json"
    assert main(["--db", db, "forecast", SID, "--param", "use_rnn=false", "--param",
                 "combiner_power=2", "--param", "use_redirect=true", "--horizon", "6h",
                 "--output", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert len(rows) == 36 and {r["model"] for r in rows} == {"prism"}
    assert all(r["p50"] <= r["p90"] <= r["p99"] for r in rows)


def test_backtest_summary_and_output(
    tmp_path: Path, store: tuple[str, pd.DataFrame], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = store
    out = tmp_path / "bt.csv"
    assert main(["--db", db, "backtest", "--models", "naive,seasonal_naive", "--series", SID,
                 "--horizon", "6h", "--windows", "3", "--summary", "--output", str(out),
                 "-q"]) == 0
    text = capsys.readouterr().out
    assert "seasonal_naive" in text and "mase" in text
    frame = pd.read_csv(out, parse_dates=["ts", "cutoff"])
    assert set(frame["model"]) == {"naive", "seasonal_naive"}
    assert frame.groupby("model")["cutoff"].nunique().tolist() == [3, 3]
    assert len(frame) == 2 * 3 * 36
    assert (frame["ts"] > frame["cutoff"]).all()
    # on a daily sine the seasonal naive is the better of the two
    errors = (frame["mean"] - frame["value"]).abs().groupby(frame["model"]).mean()
    assert errors["seasonal_naive"] < errors["naive"]


def test_backtest_prints_the_summary_when_no_output_is_asked_for(
    store: tuple[str, pd.DataFrame], capsys: pytest.CaptureFixture[str]
) -> None:
    # the command a new user types first: no --summary, --output or --planning
    db, _ = store
    assert main(["--db", db, "backtest", "--models", "naive,seasonal_naive", "--series", SID,
                 "--horizon", "6h", "--windows", "2", "-q"]) == 0
    text = capsys.readouterr().out
    assert "backtest: horizon 6h, 2 windows" in text
    assert "seasonal_naive" in text and "mase" in text and "coverage_90" in text
    # with naive among the models: each other model against the last value, with an interval
    assert "against the last value (naive)" in text
    row = next(line for line in text.splitlines()
               if "seasonal_naive" in line and "[" in line and "]" in line)
    ratio, lo, hi = (float(x) for x in re.findall(r"\d+\.\d+", row)[:3])
    assert lo <= ratio <= hi
    # on a daily sine the seasonal naive beats the last value: its ratio is below 1
    assert ratio < 1.0
    assert main(["--db", db, "backtest", "--models", "seasonal_naive", "--series", SID,
                 "--horizon", "6h", "--windows", "2", "-q"]) == 0
    assert "add naive to --models" in capsys.readouterr().out


def test_backtest_of_series_every_model_gets_exactly_right_says_so_not_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # an idle VC and a held reservation: every window is exact for both models, and the
    # AvgRelMAE table was one row of nan over 0 windows
    path = tmp_path / "flat.csv"
    ts = pd.date_range("2026-01-05", periods=3 * 144, freq="10min")
    pd.concat([pd.DataFrame({"series_id": sid, "ts": ts, "value": value})
               for sid, value in (("idle/vc1/gpus_in_use", 0.0), ("idle/vc2/gpus_in_use", 8.0))]
              ).to_csv(path, index=False)
    db = str(tmp_path / "s.duckdb")
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv", "-q"]) == 0
    capsys.readouterr()
    assert main(["--db", db, "backtest", "--models", "seasonal_naive,naive", "--cluster", "idle",
                 "--windows", "2", "-q"]) == 0
    text = capsys.readouterr().out
    assert "no window to compare; in every window both naive and the other models were exact" \
        in text
    assert "nan" not in text.split("against the last value")[1]


def test_backtest_picks_a_clusters_series_of_one_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "two.duckdb")
    t = np.arange(8 * 144)
    rows = []
    for cluster, metric, level in [("a", "gpus_in_use", 40.0), ("a", "jobs_submitted", 15.0),
                                   ("b", "gpus_in_use", 80.0)]:
        rows.append(pd.DataFrame({
            "series_id": f"{cluster}/all/{metric}",
            "ts": pd.date_range("2026-01-05", periods=len(t), freq="10min"),
            "value": np.round(level + 10 * np.sin(2 * np.pi * t / 144))}))
    # a VC that started an hour ago: too short for any window, skipped when picked by cluster
    rows.append(pd.DataFrame({"series_id": "a/vc-new/gpus_in_use",
                              "ts": pd.date_range("2026-01-12 23:00", periods=6, freq="10min"),
                              "value": 8.0}))
    samples = tmp_path / "s.csv"
    pd.concat(rows).to_csv(samples, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    assert main(["--db", db, "ingest", str(samples), "--format", "long-csv", "-q"]) == 0
    capsys.readouterr()
    out = tmp_path / "bt.csv"
    assert main(["--db", db, "backtest", "--models", "naive", "--cluster", "a", "--metric",
                 "gpus_in_use", "--horizon", "1h", "--windows", "2", "-q",
                 "--output", str(out)]) == 0
    assert set(pd.read_csv(out)["series_id"]) == {"a/all/gpus_in_use"}
    assert "skipped 1 series too short for 2 windows of 1h: a/vc-new/gpus_in_use" in (
        capsys.readouterr().err)
    # named with --series, the same short series is refused with what to do
    assert main(["--db", db, "backtest", "--models", "naive", "--series",
                 "a/vc-new/gpus_in_use", "--horizon", "1h", "--windows", "2", "-q"]) == 1
    assert "pass fewer windows" in capsys.readouterr().err
    assert main(["--db", db, "backtest", "--models", "naive", "--metric", "gpus_in_use",
                 "--horizon", "1h", "--windows", "2", "-q", "--output", str(out)]) == 0
    assert set(pd.read_csv(out)["series_id"]) == {"a/all/gpus_in_use", "b/all/gpus_in_use"}
    capsys.readouterr()
    assert main(["--db", db, "backtest", "--models", "naive", "--cluster", "b", "--metric",
                 "jobs_submitted", "--windows", "2", "-q"]) == 1
    err = capsys.readouterr().err
    assert "no 'jobs_submitted' series in cluster 'b'" in err and "gpus_in_use" in err
    assert main(["--db", db, "backtest", "--models", "naive", "--cluster", "c",
                 "--windows", "2", "-q"]) == 1
    assert "clusters: a, b" in capsys.readouterr().err


def test_reconciled_forecast_adds_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "gen.duckdb")
    trace = tmp_path / "trace"
    assert main(["generate", "--output", str(trace), "--days", "8", "--clusters", "1",
                 "-q"]) == 0
    assert main(["--db", db, "ingest", str(trace / "jobs.csv"), "--format", "jobs-csv",
                 "-q"]) == 0
    out = tmp_path / "fc.parquet"
    assert main(["--db", db, "forecast", "--all", "--model", "window_average", "--horizon",
                 "3h", "--reconcile", "mint_shrink", "--output", str(out)]) == 0
    frame = pd.read_parquet(out)
    demand = frame[frame["series_id"].str.endswith("/gpu_demand")]
    wide = demand.pivot(index="ts", columns="series_id", values="mean")
    vcs = [c for c in wide.columns if "/vc-" in c]
    assert len(vcs) >= 2
    np.testing.assert_allclose(wide[vcs].sum(axis=1), wide["cluster-0/all/gpu_demand"])


def test_forecast_the_series_of_a_cluster(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "two.duckdb")
    ids = ["lab/all/gpus_in_use", "lab/vc1/gpus_in_use", "far/all/gpus_in_use"]
    one = _samples(2)
    csv = tmp_path / "two.csv"
    pd.concat([one.assign(series_id=sid) for sid in ids]).to_csv(
        csv, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    assert main(["--db", db, "ingest", str(csv), "--format", "long-csv", "-q"]) == 0
    out = tmp_path / "fc.csv"
    argv = ["--db", db, "forecast", "--model", "naive", "--horizon", "1h", "-q",
            "--output", str(out)]

    def forecast(*extra: str) -> list[str]:
        assert main([*argv, *extra]) == 0
        return sorted(pd.read_csv(out)["series_id"].unique())

    assert forecast("--cluster", "lab") == sorted(ids[:2])
    assert forecast("--cluster", "far", "--cluster", "lab") == sorted(ids)
    assert forecast("lab/vc1/gpus_in_use", "--cluster", "far") == sorted(ids[1:])
    assert forecast("--cluster", "far", "--workers", "1") == [ids[2]]  # a batch too
    capsys.readouterr()
    assert main([*argv, "--cluster", "nope"]) == 1
    assert "no series of cluster 'nope' in the store (clusters: far, lab)" in (
        capsys.readouterr().err)
    assert main([*argv, "--all", "--cluster", "lab"]) == 1
    assert "drop it" in capsys.readouterr().err


def test_backtest_a_variant_beside_the_default_under_its_own_label(
    tmp_path: Path, store: tuple[str, pd.DataFrame], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = store
    out = tmp_path / "bt.csv"
    assert main(["--db", db, "backtest", "--models", "seasonal_naive,halfday=seasonal_naive",
                 "--param", "halfday.season=12h", "--series", SID, "--horizon", "6h",
                 "--windows", "3", "--summary", "--output", str(out), "-q"]) == 0
    assert "halfday" in capsys.readouterr().out
    # the capacity report's accuracy section says what the label was
    page = tmp_path / "report.html"
    assert main(["--db", db, "report", "--cluster", "lab", "--model", "naive", "--output",
                 str(page)]) == 0
    assert "halfday is seasonal_naive with season=12h" in page.read_text(encoding="utf-8")
    frame = pd.read_csv(out)
    assert set(frame["model"]) == {"seasonal_naive", "halfday"}
    # a half-day season on a daily sine forecasts the cycle upside down: the parameter took
    errors = (frame["mean"] - frame["value"]).abs().groupby(frame["model"]).mean()
    assert errors["halfday"] > 3 * errors["seasonal_naive"]
    # one model: the parameter needs no label
    assert main(["--db", db, "backtest", "--models", "seasonal_naive", "--param", "season=12h",
                 "--series", SID, "--horizon", "6h", "--windows", "3", "--output", str(out),
                 "-q"]) == 0
    alone = pd.read_csv(out)
    np.testing.assert_allclose(alone["mean"], frame.loc[frame["model"] == "halfday", "mean"])


@pytest.mark.parametrize(("argv", "says"), [
    (["--models", "naive,seasonal_naive", "--param", "season=12h"],
     "say whose, e.g. --param naive.season=12h"),
    (["--models", "naive,seasonal_naive", "--param", "weekly.season=1w"],
     "no model labelled 'weekly' in --models (naive, seasonal_naive)"),
    (["--models", "naive,naive"], "--models names 'naive' twice"),
    (["--models", "naive,fast=prophet"], "unknown model 'prophet'"),
    (["--models", "naive", "--param", "naive.seasn=1d"], "naive has no parameter 'seasn'"),
    (["--models", "seasonal_naive,a.b=seasonal_naive"], "a label is letters, digits"),
    (["--models", "naive,last=naive", "--workers", "2"], "a batch labels each run by its"),
    (["--models", "naive=seasonal_naive"], "'naive' is another model's alias"),
])
def test_backtest_names_the_bad_model_or_parameter(
    tmp_path: Path, store: tuple[str, pd.DataFrame], capsys: pytest.CaptureFixture[str],
    argv: list[str], says: str,
) -> None:
    db, _ = store
    assert main(["--db", db, "backtest", *argv, "--series", SID, "--horizon", "6h",
                 "--windows", "2", "--summary", "-q"]) == 1
    assert says in capsys.readouterr().err


def test_a_horizon_longer_than_the_history_gets_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "day.csv"
    ts = pd.date_range("2026-01-05", periods=144, freq="10min")  # one day of history
    pd.DataFrame({"series_id": "lab/vc1/gpus_in_use", "ts": ts,
                  "value": np.arange(144) % 7}).to_csv(path, index=False)
    db = str(tmp_path / "s.duckdb")
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv", "-q"]) == 0
    capsys.readouterr()
    assert main(["--db", db, "forecast", "lab/vc1/gpus_in_use", "--model", "naive",
                 "--horizon", "2d", "--output", str(tmp_path / "f.csv"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "note: the horizon (288 steps) is longer than the stored history of 1 series" in err
    assert "lab/vc1/gpus_in_use, holds 144 points" in err
    assert len(pd.read_csv(tmp_path / "f.csv")) == 288  # the forecast is still made
    assert main(["--db", db, "forecast", "lab/vc1/gpus_in_use", "--model", "naive",
                 "--horizon", "6h", "--output", str(tmp_path / "g.csv"), "-q"]) == 0
    assert "longer than the stored history" not in capsys.readouterr().err


def test_forecast_all_fits_one_model_per_stored_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, models = str(tmp_path / "p.duckdb"), str(tmp_path / "models")
    for cluster, freq, periods in (("ten", "10min", 300), ("one", "1min", 600)):
        path = tmp_path / f"{cluster}.csv"
        pd.DataFrame({"series_id": f"{cluster}/all/gpus_in_use",
                      "ts": pd.date_range("2026-01-05", periods=periods, freq=freq),
                      "value": np.arange(periods) % 7 + (1 if cluster == "ten" else 50)}
                     ).to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
        assert main(["--db", db, "ingest", str(path), "--format", "long-csv", "--freq", freq,
                     "-q"]) == 0
    out = tmp_path / "f.csv"
    assert main(["--db", db, "forecast", "--all", "--model", "naive", "--horizon", "1h",
                 "--save", "--models-dir", models, "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert "stored at 2 steps (60 s, 600 s): one naive model was fitted per step" \
        in captured.err
    assert "2 models" in captured.out + captured.err
    frame = pd.read_csv(out)
    rows = frame.groupby("series_id")["mean"].agg(["size", "first"])
    assert rows.loc["ten/all/gpus_in_use"].tolist() == [6, 299 % 7 + 1]
    assert rows.loc["one/all/gpus_in_use"].tolist() == [60, 599 % 7 + 50]
    # both saved models serve their series again
    assert main(["--db", db, "forecast", "--from-model", "naive", "--models-dir", models,
                 "--horizon", "1h", "-q"]) == 0


def _hierarchy_store(tmp_path: Path, short: str | None = None) -> str:
    """A store of cluster ``lab``: two VCs and two GPU types whose GPUs in use add up to
    ``lab/all``, two days of 10-minute samples (``short``: that series one day only)."""
    rng = np.random.default_rng(7)
    n = 288
    ts = pd.date_range("2026-01-05", periods=n, freq="10min")
    vc1, vc2 = rng.integers(0, 40, n).astype(float), rng.integers(0, 40, n).astype(float)
    a100 = np.minimum(vc1, 30.0)
    series = {"lab/all/gpus_in_use": vc1 + vc2, "lab/vc1/gpus_in_use": vc1,
              "lab/vc2/gpus_in_use": vc2, "lab/gpu:A100/gpus_in_use": a100,
              "lab/gpu:V100/gpus_in_use": vc1 + vc2 - a100}
    frame = pd.concat([pd.DataFrame({"series_id": sid, "ts": ts, "value": v})
                       .iloc[:n // 2 if sid == short else n] for sid, v in series.items()])
    path = tmp_path / "lab.csv"
    frame.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    db = str(tmp_path / "lab.duckdb")
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv", "-q"]) == 0
    return db


def test_reconcile_refuses_a_total_with_only_some_of_its_scopes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, models = _hierarchy_store(tmp_path), str(tmp_path / "models")
    out = tmp_path / "fc.csv"
    argv = ["--db", db, "forecast", "--model", "naive", "--horizon", "1h", "-q",
            "--reconcile", "bottom_up", "--output", str(out)]
    capsys.readouterr()
    for named, missing in (
            (["lab/vc1/gpus_in_use"], "VC series: 'lab/vc2/gpus_in_use' is missing"),
            (["lab/vc1/gpus_in_use", "lab/gpu:V100/gpus_in_use"],
             "VC and GPU-type series: 'lab/gpu:A100/gpus_in_use', 'lab/vc2/gpus_in_use' are"),
            (["lab/gpu:V100/gpus_in_use"], "GPU-type series: 'lab/gpu:A100/gpus_in_use' is")):
        assert main([*argv, "lab/all/gpus_in_use", *named]) == 1, named
        err = capsys.readouterr().err
        assert f"cannot reconcile 'lab/all/gpus_in_use' with only some of its {missing}" in err
        assert "Name them too, or forecast the whole cluster with --cluster lab" in err
        assert not out.exists()  # nothing was written

    # the whole VC grouping (the GPU types not forecast), or the whole cluster: they add up
    assert main([*argv, "lab/all/gpus_in_use", "lab/vc1/gpus_in_use",
                 "lab/vc2/gpus_in_use"]) == 0
    wide = pd.read_csv(out).pivot(index="ts", columns="series_id", values="mean")
    np.testing.assert_allclose(wide["lab/vc1/gpus_in_use"] + wide["lab/vc2/gpus_in_use"],
                               wide["lab/all/gpus_in_use"])
    for method in ("bottom_up", "mint_shrink"):
        assert main([*argv[:-4], "--reconcile", method, "--output", str(out), "--cluster",
                     "lab"]) == 0
        wide = pd.read_csv(out).pivot(index="ts", columns="series_id", values="mean")
        total = wide["lab/all/gpus_in_use"]
        np.testing.assert_allclose(wide["lab/vc1/gpus_in_use"] + wide["lab/vc2/gpus_in_use"],
                                   total)
        np.testing.assert_allclose(wide["lab/gpu:A100/gpus_in_use"]
                                   + wide["lab/gpu:V100/gpus_in_use"], total)

    # a saved model of part of the hierarchy: refused once its series are known
    assert main(["--db", db, "forecast", "lab/all/gpus_in_use", "lab/vc1/gpus_in_use",
                 "--model", "naive", "--horizon", "1h", "-q", "--save", "--models-dir",
                 models]) == 0
    capsys.readouterr()
    assert main([*argv, "--from-model", "naive", "--models-dir", models]) == 1
    assert "'lab/vc2/gpus_in_use' is missing" in capsys.readouterr().err


def test_reconcile_of_series_that_end_apart_names_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _hierarchy_store(tmp_path, short="lab/vc2/gpus_in_use")
    capsys.readouterr()
    assert main(["--db", db, "forecast", "--cluster", "lab", "--model", "naive", "--horizon",
                 "1h", "-q", "--reconcile", "mint_shrink", "--output", "-"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("the forecast of 'lab/vc2/gpus_in_use' covers 2026-01-06 00:00 to 2026-01-06 00:50 "
            "but that of its total 'lab/all/gpus_in_use' covers 2026-01-07 00:00 to "
            "2026-01-07 00:50: their stored series end at different times") in captured.err
    assert "Ingest the missing points" in captured.err


def test_a_bad_output_fails_before_any_model_is_fitted_or_saved(
        tmp_path: Path, store: tuple[str, pd.DataFrame],
        capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = store
    models = tmp_path / "models"
    (tmp_path / "a_file").write_text("")
    (tmp_path / "folder.csv").mkdir()
    for output, says in (
            (str(tmp_path / "nodir" / "x.csv"), "does not exist; create it first"),
            (str(tmp_path / "x.xlsx"), "use a .csv, .parquet or .json file name"),
            (str(tmp_path / "a_file" / "x.csv"), "is not a folder"),
            (str(tmp_path / "folder.csv"), "it is a folder; name a file in it")):
        assert main(["--db", db, "forecast", SID, "--model", "naive", "--horizon", "1h", "-q",
                     "--save", "--models-dir", str(models), "--output", output]) == 1, output
        assert says in capsys.readouterr().err
        assert not models.exists(), output  # no model fitted and saved


def test_a_daily_store_is_forecast_and_backtested_with_bands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store of daily samples (capacity planning keeps days): PRISM's windows are written
    in hours (``lookback="12h"``) and refused it as "not a whole number of 86400-second
    steps"; the 7-day calibration tail was 7 steps, so every model's bands had zero width.
    Windows now round to whole steps and the tail holds at least 48 steps."""
    db = str(tmp_path / "prism.duckdb")
    rng = np.random.default_rng(8)
    n = 150
    weekly = 60 + 20 * (np.arange(n) % 7 < 5) + rng.normal(0, 4, n)  # weekdays busier
    path = tmp_path / "daily.csv"
    pd.DataFrame({"series_id": SID, "ts": pd.date_range("2026-01-05", periods=n, freq="1D"),
                  "value": weekly.round(1)}).to_csv(path, index=False)
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv", "--freq", "1d",
                 "-q"]) == 0
    out = tmp_path / "forecast.csv"
    assert main(["--db", db, "forecast", SID, "--horizon", "14d", "--quantiles", "0.05,0.95",
                 "--output", str(out), "-q"]) == 0
    frame = pd.read_csv(out)
    assert len(frame) == 14 and (frame["p95"] - frame["p5"] > 5).all()
    assert frame["mean"].between(40, 100).all()
    capsys.readouterr()
    assert main(["--db", db, "backtest", "--series", SID, "--models", "prism,naive",
                 "--horizon", "7d", "--windows", "4", "--summary", "-q"]) == 0
    assert "prism" in capsys.readouterr().out


def test_short_series_bands_and_a_horizon_of_no_whole_steps_are_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Series too short to calibrate say where their bands come from (or that they have
    none); a horizon that is no whole number of the store's steps is refused before the fit,
    naming the horizons that are."""
    db = str(tmp_path / "prism.duckdb")
    rng = np.random.default_rng(2)
    frames = [pd.DataFrame({"series_id": sid, "value": 50 + rng.normal(0, 5, n).round(1),
                            "ts": pd.date_range("2026-01-05", periods=n, freq="7min")})
              for sid, n in (("lab/a/gpus_in_use", 30), ("lab/b/gpus_in_use", 3))]
    path = tmp_path / "short.csv"
    pd.concat(frames).to_csv(path, index=False)
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv", "--freq", "7min",
                 "-q"]) == 0
    capsys.readouterr()
    assert main(["--db", db, "forecast", "--cluster", "lab", "--horizon", "70min",
                 "--model", "naive", "--output", str(tmp_path / "f.csv"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "1 series (lab/a/gpus_in_use): too few points to calibrate the bands" in err
    assert "1 series (lab/b/gpus_in_use): too few points for bands (5 needed)" in err
    frame = pd.read_csv(tmp_path / "f.csv").set_index("series_id")
    assert (frame.loc["lab/a/gpus_in_use", "p90"] > frame.loc["lab/a/gpus_in_use", "p50"]).all()

    def no_fit(*_: object, **__: object) -> None:
        raise AssertionError("fitted before the horizon was checked")

    monkeypatch.setattr("prism.forecasters.hybrid.PrismForecaster.fit", no_fit)
    assert main(["--db", db, "forecast", "lab/a/gpus_in_use", "--horizon", "1d", "-q"]) == 1
    assert ("horizon '1d' is not a whole number of 420-second steps: use 1435min (205 steps) "
            "or 1442min (206 steps), or a number of steps") in capsys.readouterr().err
