"""Series derivation: an oracle by hand, properties over random traces, samples and gaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism.errors import ConfigError
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import ingest
from prism.store import Store

HEADER = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"
ORACLE = HEADER + (
    "A,oracle,vc-a,A100,2,8,2026-01-05T00:00:00,2026-01-05T00:00:00,2026-01-05T00:30:00,COMPLETED\n"
    # B starts mid-bucket (00:05) and ends mid-bucket (00:25)
    "B,oracle,vc-b,H100,4,8,2026-01-05T00:02:00,2026-01-05T00:05:00,2026-01-05T00:25:00,COMPLETED\n"
    "C,oracle,vc-a,,1,2,2026-01-05T00:10:00,2026-01-05T00:35:00,2026-01-05T00:55:00,FAILED\n"
    # D is still running at the end of the trace
    "D,oracle,vc-b,,1,2,2026-01-05T00:40:00,2026-01-05T00:45:00,,RUNNING\n"
)


def _values(store: Store, series_id: str) -> list[float]:
    return store.load_panel([series_id])["value"].round(9).tolist()


def test_oracle_three_jobs_by_hand(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(ORACLE)
    ingest(store, [path], "jobs-csv")
    # Window: first submit 00:00 .. last event 00:55 -> buckets 00:00 ... 00:40 (five).
    ts = store.load_panel(["oracle/all/gpus_in_use"])["ts"]
    assert list(ts) == list(pd.date_range("2026-01-05 00:00", periods=5, freq="10min"))
    # A: 2 GPUs in 00, 10, 20 (ends exactly at the 00:30 edge: nothing after).
    # B: 4 GPUs from 00:05: half of bucket 00 (2), all of 10 (4), half of 20 (2).
    # C: 1 GPU from 00:35 to 00:55: half of 30, all of 40. D: 1 GPU from 00:45: half of 40.
    assert _values(store, "oracle/all/gpus_in_use") == [4.0, 6.0, 4.0, 0.5, 1.5]
    assert _values(store, "oracle/vc-a/gpus_in_use") == [2.0, 2.0, 2.0, 0.5, 1.0]
    assert _values(store, "oracle/vc-b/gpus_in_use") == [2.0, 4.0, 2.0, 0.0, 0.5]
    assert _values(store, "oracle/gpu:A100/gpus_in_use") == [2.0, 2.0, 2.0, 0.0, 0.0]
    assert _values(store, "oracle/gpu:unknown/gpus_in_use") == [0.0, 0.0, 0.0, 0.5, 1.5]
    # Pending: B 00:02-00:05 (4 x 0.3), C 00:10-00:35, D 00:40-00:45.
    assert _values(store, "oracle/all/gpus_pending") == [1.2, 1.0, 1.0, 0.5, 0.5]
    assert _values(store, "oracle/all/gpu_demand") == [5.2, 7.0, 5.0, 1.0, 2.0]
    assert _values(store, "oracle/all/jobs_submitted") == [2.0, 1.0, 0.0, 0.0, 1.0]
    assert _values(store, "oracle/all/gpus_submitted") == [6.0, 1.0, 0.0, 0.0, 1.0]
    info = store.list_series(cluster="oracle").set_index("series_id")
    assert info.loc["oracle/all/gpus_in_use", "n_points"] == 5
    assert info.loc["oracle/all/gpus_in_use", "freq"] == "10min"
    assert info.loc["oracle/all/jobs_submitted", "aggregation"] == "sum"


def test_oracle_at_another_freq(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(ORACLE)
    ingest(store, [path], "jobs-csv", freq="20min")
    # Buckets 00:00 and 00:20 (00:40 is not wholly observed: the window ends at 00:55).
    assert _values(store, "oracle/all/gpus_in_use") == [5.0, 2.25]
    assert store.list_series(cluster="oracle")["freq"].unique().tolist() == ["20min"]


def _random_trace(seed: int, n: int, tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2026-01-05")
    submit = t0 + pd.to_timedelta(rng.integers(0, 86_400, n), unit="s")
    wait = pd.to_timedelta(rng.integers(0, 7_200, n), unit="s")
    run = pd.to_timedelta(rng.integers(1, 20_000, n), unit="s")
    started = rng.random(n) < 0.9
    ended = rng.random(n) < 0.9
    start = pd.Series(submit + wait).where(started)
    end = pd.Series(submit + wait + run).where(started & ended)
    frame = pd.DataFrame({
        "job_id": [f"j{i}" for i in range(n)],
        "cluster": "prop",
        "scope": rng.choice(["vc1", "vc2", "vc3", ""], n),
        "gpu_type": rng.choice(["A100", "H100"], n),
        "num_gpus": rng.choice([0, 0.5, 1, 2, 8, 64], n),
        "num_cpus": 4,
        "submit_ts": submit,
        "start_ts": start,
        "end_ts": end,
        "status": "COMPLETED",
    })
    path = tmp_path / f"trace{seed}.csv"
    frame.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    return path, frame


def _ingested(store: Store, path: Path) -> bool:
    """Ingest a random trace; ``False`` when its window holds no whole bucket of 10min: the
    ingest is refused (the store stays empty), or, for jobs spanning under a minute, which no
    --freq fixes, the cluster gets no series yet."""
    try:
        ingest(store, [path], "jobs-csv")
    except ConfigError as exc:
        assert "holds no whole bucket of 10min" in str(exc) and "--freq" in str(exc)
        assert store.load_panel().empty
        assert store.fetch_all("SELECT count(*) FROM jobs") == [(0,)]
        return False
    return not store.load_panel().empty


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60))
def test_scopes_sum_to_cluster_and_never_negative(tmp_path: Path, seed: int, n: int) -> None:
    path, _ = _random_trace(seed, n, tmp_path)
    with Store.open(":memory:") as store:
        if not _ingested(store, path):
            return
        panel = store.load_panel()
        parts = panel["series_id"].str.split("/", expand=True)
        panel["scope"], panel["metric"] = parts[1], parts[2]
        assert (panel["value"] >= -1e-9).all()
        wide = panel.pivot_table(index=["metric", "ts"], columns="scope", values="value")
        vcs = [c for c in wide.columns if c != "all" and not c.startswith("gpu:")]
        types = [c for c in wide.columns if c.startswith("gpu:")]
        if vcs:  # VC series exist when some job has a VC; jobs without one are 'unassigned'
            np.testing.assert_allclose(wide[vcs].sum(axis=1), wide["all"], atol=1e-6)
        np.testing.assert_allclose(wide[types].sum(axis=1), wide["all"], atol=1e-6)
        demand = wide.loc["gpu_demand", "all"].to_numpy()
        in_use = wide.loc["gpus_in_use", "all"].to_numpy()
        pending = wide.loc["gpus_pending", "all"].to_numpy()
        np.testing.assert_allclose(demand, in_use + pending, atol=1e-6)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40))
def test_ingest_twice_equals_ingest_once(tmp_path: Path, seed: int, n: int) -> None:
    path, _ = _random_trace(seed, n, tmp_path)
    with Store.open(":memory:") as once, Store.open(":memory:") as twice:
        if not _ingested(once, path):
            return
        ingest(twice, [path], "jobs-csv")
        second = ingest(twice, [path], "jobs-csv")
        assert [f.status for f in second.files] == ["unchanged"]
        assert second.rows == 0
        pd.testing.assert_frame_equal(once.load_panel(), twice.load_panel())
        count = "SELECT count(*) FROM jobs"
        assert once.fetch_one(count) == twice.fetch_one(count)


def test_in_use_gpu_seconds_match_pandas(store: Store, tmp_path: Path) -> None:
    path, frame = _random_trace(7, 300, tmp_path)
    ingest(store, [path], "jobs-csv", freq="5min")
    series = store.load_panel(["prop/all/gpus_in_use"])
    lo, hi = series["ts"].min(), series["ts"].max() + pd.Timedelta("5min")
    start = frame["start_ts"].clip(lower=lo)
    end = frame["end_ts"].fillna(hi).clip(upper=hi)
    held = ((end - start).dt.total_seconds().clip(lower=0) * frame["num_gpus"]).sum()
    assert series["value"].sum() * 300 == pytest.approx(held, rel=1e-9)


def _samples_file(tmp_path: Path, rows: list[tuple[str, float]], metric: str) -> Path:
    path = tmp_path / f"{metric}.csv"
    pd.DataFrame(rows, columns=["time", metric]).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    ("fill", "expected"),
    [("hold", [2.0, 2.0, 6.0]), ("zero", [2.0, 0.0, 6.0]), ("linear", [2.0, 4.0, 6.0])],
)
def test_sample_gaps_filled_by_policy(
    store: Store, tmp_path: Path, fill: str, expected: list[float]
) -> None:
    # Two samples in the first 10-min bucket (mean 2), none in the second, one in the third.
    path = _samples_file(tmp_path, [("2026-01-05 00:00", 1), ("2026-01-05 00:05", 3),
                                    ("2026-01-05 00:20", 6)], "gpus_in_use")
    ingest(store, [path], "wide-csv", IngestOptions(cluster="c"), fill=fill)
    frame = store.fetch_df("SELECT value, filled FROM series_values ORDER BY ts")
    assert frame["value"].tolist() == expected
    assert frame["filled"].tolist() == [False, True, False]
    assert store.list_series().loc[0, "n_filled"] == 1


def test_counts_are_summed_and_gauges_averaged(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_text("time,jobs_submitted,gpus_in_use\n2026-01-05 00:00,2,10\n"
                    "2026-01-05 00:01,3,20\n2026-01-05 00:10,1,30\n")
    ingest(store, [path], "wide-csv", IngestOptions(cluster="c"))
    panel = store.load_panel()
    got = panel.groupby("series_id")["value"].apply(list).to_dict()
    assert got == {"c/all/gpus_in_use": [15.0, 30.0], "c/all/jobs_submitted": [5.0, 1.0]}


def test_absurd_span_is_refused_before_it_fills_memory(store: Store, tmp_path: Path) -> None:
    from prism.errors import IngestError

    path = tmp_path / "wide.csv"
    path.write_text("time,gpus_in_use\n1971-01-01 00:00,1\n2099-01-01 00:00,2\n")
    with pytest.raises(IngestError, match=r"line 3, column 'time': .* 6,732,288 buckets of 10min"):
        ingest(store, [path], "wide-csv", IngestOptions(cluster="c"))
    assert store.fetch_one("SELECT count(*) FROM samples") == (0,)
    ingest(store, [path], "wide-csv", IngestOptions(cluster="c"), freq="1d")
    # daily from 1971-01-01 to 2099-01-01
    assert store.fetch_one("SELECT n_points FROM series") == (46_753,)
