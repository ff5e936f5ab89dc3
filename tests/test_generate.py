"""Tests of the synthetic trace generator: contract, determinism, invariants and realism."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prism.errors import ConfigError
from prism.generate import (
    CAPACITY_CSV_COLUMNS,
    JOB_CSV_COLUMNS,
    STATUSES,
    GeneratedTrace,
    _schedule_backfill,
    generate_trace,
)

HEADER = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status"
START = pd.Timestamp("2026-01-05T00:00:00")  # a Monday
DAYS = 7
END = START + pd.Timedelta(days=DAYS)
TIME_COLUMNS = ["submit_ts", "start_ts", "end_ts"]
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_jobs(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, parse_dates=TIME_COLUMNS, dtype={"job_id": str})


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> GeneratedTrace:
    """A 7-day, 2-cluster trace with the default rates."""
    return generate_trace(tmp_path_factory.mktemp("trace"), days=DAYS, clusters=2, seed=0)


@pytest.fixture(scope="module")
def jobs(trace: GeneratedTrace) -> pd.DataFrame:
    return _read_jobs(trace.jobs_path)


@pytest.fixture(scope="module")
def capacity(trace: GeneratedTrace) -> pd.DataFrame:
    return pd.read_csv(trace.capacity_path)


def test_result_describes_the_files(trace: GeneratedTrace, jobs: pd.DataFrame) -> None:
    assert trace.jobs_path.name == "jobs.csv"
    assert trace.capacity_path.name == "capacity.csv"
    assert trace.clusters == ["cluster-0", "cluster-1"]
    assert trace.n_jobs == len(jobs)
    # The realistic default: roughly 300-3000 jobs per cluster per day.
    per_day = jobs.groupby("cluster").size() / DAYS
    assert per_day.between(300, 3000).all(), per_day


def test_headers_are_exact(trace: GeneratedTrace) -> None:
    assert trace.jobs_path.read_text().splitlines()[0] == HEADER
    assert ",".join(JOB_CSV_COLUMNS) == HEADER
    assert trace.capacity_path.read_text().splitlines()[0] == "cluster,scope,gpus"
    assert CAPACITY_CSV_COLUMNS == ("cluster", "scope", "gpus")


def test_same_seed_same_bytes(trace: GeneratedTrace, tmp_path: Path) -> None:
    again = generate_trace(tmp_path, days=DAYS, clusters=2, seed=0)
    assert _digest(again.jobs_path) == _digest(trace.jobs_path)
    assert _digest(again.capacity_path) == _digest(trace.capacity_path)


def test_different_seed_differs(trace: GeneratedTrace, tmp_path: Path) -> None:
    other = generate_trace(tmp_path, days=DAYS, clusters=2, seed=1)
    assert _digest(other.jobs_path) != _digest(trace.jobs_path)
    assert _digest(other.capacity_path) != _digest(trace.capacity_path)


def test_times_are_iso_seconds_without_zone(trace: GeneratedTrace) -> None:
    raw = pd.read_csv(trace.jobs_path, dtype=str, keep_default_na=False)
    for column in TIME_COLUMNS:
        values = raw[column][raw[column] != ""]
        assert values.str.match(ISO).all(), column
    assert (raw["submit_ts"] != "").all()


def test_names_and_ids(jobs: pd.DataFrame) -> None:
    assert set(jobs["cluster"]) == {"cluster-0", "cluster-1"}
    assert jobs["scope"].str.fullmatch(r"vc-[a-z0-9]{3}").all()
    scopes = jobs.groupby("cluster")["scope"].nunique()
    assert scopes.between(4, 8).all(), scopes
    assert jobs.groupby("scope")["cluster"].nunique().eq(1).all()  # scopes are unique names
    assert not jobs.duplicated(["cluster", "job_id"]).any()
    prefix = "c" + jobs["cluster"].str.removeprefix("cluster-") + "-"
    assert (jobs["job_id"].str.slice(0, 3) == prefix).all()
    assert jobs["job_id"].str.fullmatch(r"c\d+-\d{6,}").all()
    assert jobs.groupby("scope")["gpu_type"].nunique().eq(1).all()  # a VC has one GPU type
    assert set(jobs["gpu_type"]) <= {"A100", "H100", "V100", "L40S", "H200"}


def test_sorted_by_submit_then_job_id(jobs: pd.DataFrame) -> None:
    expected = jobs.sort_values(["submit_ts", "job_id"], kind="stable")
    assert expected.index.equals(jobs.index)


def test_time_order_and_sizes(jobs: pd.DataFrame) -> None:
    submit, start, end = jobs["submit_ts"], jobs["start_ts"], jobs["end_ts"]
    assert submit.between(START, END, inclusive="left").all()
    assert (start.dropna() >= submit[start.notna()]).all()
    both = end.notna() & start.notna()
    assert (end[both] >= start[both]).all()
    assert (end.dropna() > submit[end.notna()]).all()
    assert start.dropna().lt(END).all() and end.dropna().le(END).all()
    assert jobs["num_gpus"].between(1, 64).all()
    assert jobs["num_cpus"].ge(1).all()
    assert pd.api.types.is_integer_dtype(jobs["num_gpus"])


def test_status_matches_times(jobs: pd.DataFrame) -> None:
    assert set(jobs["status"]) <= set(STATUSES)
    assert set(jobs["status"]) >= {"COMPLETED", "FAILED", "CANCELLED"}
    has_start, has_end = jobs["start_ts"].notna(), jobs["end_ts"].notna()
    by = jobs["status"]
    assert (has_start & has_end)[by.isin(["COMPLETED", "FAILED"])].all()
    assert (has_start & ~has_end)[by == "RUNNING"].all()
    assert (~has_start & ~has_end)[by == "PENDING"].all()
    cancelled = by == "CANCELLED"
    assert has_end[cancelled].all()  # cancelled while running, or gave up waiting (no start)
    assert (~has_start & cancelled).any() and (has_start & cancelled).any()
    assert (has_start | ~has_end | cancelled).all()  # an end without a start: gave up queueing
    shares = by.value_counts(normalize=True)
    assert 0.6 < shares["COMPLETED"] < 0.9 and 0.03 < shares["FAILED"] < 0.2


def test_capacity_all_is_sum_of_vcs(capacity: pd.DataFrame, jobs: pd.DataFrame) -> None:
    assert capacity["gpus"].gt(0).all()
    total = capacity[capacity["scope"] == "all"].set_index("cluster")["gpus"]
    vcs = capacity[capacity["scope"] != "all"]
    assert vcs.groupby("cluster")["gpus"].sum().equals(total)
    assert set(vcs["scope"]) == set(jobs["scope"])
    assert (vcs["gpus"] % 8 == 0).all()


def test_gpus_in_use_never_exceed_capacity(jobs: pd.DataFrame, capacity: pd.DataFrame) -> None:
    ran = jobs[jobs["start_ts"].notna()]
    ends = ran["end_ts"].fillna(END + pd.Timedelta(days=365))  # still running: holds its GPUs
    events = pd.concat(
        [
            pd.DataFrame({"scope": ran["scope"], "ts": ran["start_ts"], "delta": ran["num_gpus"]}),
            pd.DataFrame({"scope": ran["scope"], "ts": ends, "delta": -ran["num_gpus"]}),
        ]
    )
    # Intervals are half-open: at one instant, ends free GPUs before starts take them.
    events = events.sort_values(["scope", "ts", "delta"], kind="stable")
    in_use = events.groupby("scope")["delta"].cumsum()
    peak = in_use.groupby(events["scope"]).max()
    cap = capacity[capacity["scope"] != "all"].set_index("scope")["gpus"]
    assert (peak <= cap.reindex(peak.index)).all(), (peak - cap).max()
    # Capacity binds at times: queueing happens.
    assert (peak >= 0.9 * cap.reindex(peak.index)).any()
    assert (ran["start_ts"] > ran["submit_ts"]).mean() > 0.02


def test_diurnal_cycle(jobs: pd.DataFrame) -> None:
    for cluster, group in jobs.groupby("cluster"):
        by_hour = group["submit_ts"].dt.hour.value_counts().reindex(range(24), fill_value=0)
        assert by_hour.max() / max(by_hour.min(), 1) > 1.5, cluster


def test_weekly_cycle(jobs: pd.DataFrame) -> None:
    daily = jobs.groupby(jobs["submit_ts"].dt.floor("D")).size()
    weekend = pd.DatetimeIndex(daily.index).day_of_week >= 5
    assert weekend.sum() == 2
    assert daily[~weekend].mean() > daily[weekend].mean()


def test_heavy_tails(jobs: pd.DataFrame) -> None:
    done = jobs[jobs["end_ts"].notna()]
    duration = (done["end_ts"] - done["start_ts"]).dt.total_seconds()
    assert duration.max() / duration.median() > 20
    assert duration.min() < 600 and duration.max() > 86_400  # minutes to days
    gpus = jobs["num_gpus"]
    assert 0.3 < (gpus == 1).mean() < 0.7
    power_of_two = (gpus & (gpus - 1)) == 0
    assert power_of_two.mean() > 0.9
    assert gpus.max() >= 32


def test_parquet_has_the_same_rows(
    trace: GeneratedTrace, jobs: pd.DataFrame, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    out = generate_trace(tmp_path, days=DAYS, clusters=2, seed=0, format="parquet")
    assert out.jobs_path.name == "jobs.parquet"
    assert out.n_jobs == trace.n_jobs
    table = pq.read_table(out.jobs_path)
    assert table.column_names == list(JOB_CSV_COLUMNS)
    for column in TIME_COLUMNS:
        # Written as timestamp[s]; Parquet stores milliseconds at the coarsest.
        assert str(table.schema.field(column).type) in ("timestamp[s]", "timestamp[ms]")
    frame = table.to_pandas()
    for column in TIME_COLUMNS:
        frame[column] = frame[column].astype(jobs[column].dtype)
    pd.testing.assert_frame_equal(frame, jobs, check_dtype=False)
    assert _digest(out.capacity_path) == _digest(trace.capacity_path)


def test_jobs_per_day_scales_the_trace(tmp_path: Path) -> None:
    out = generate_trace(tmp_path, days=2, clusters=1, seed=3, jobs_per_day=20_000)
    assert 0.9 * 40_000 < out.n_jobs < 1.1 * 40_000
    cap = pd.read_csv(out.capacity_path)
    assert cap.loc[cap["scope"] == "all", "gpus"].item() > 1000  # capacity follows the load


def test_clusters_give_about_fifty_scopes_and_are_stable(tmp_path: Path) -> None:
    eight = generate_trace(tmp_path / "eight", days=1, clusters=8, seed=5, jobs_per_day=300)
    cap = pd.read_csv(eight.capacity_path)
    vcs = cap[cap["scope"] != "all"]
    assert 32 <= len(vcs) <= 64 and vcs["scope"].is_unique
    # Cluster k does not depend on how many clusters follow it.
    one = generate_trace(tmp_path / "one", days=1, clusters=1, seed=5, jobs_per_day=300)
    first = _read_jobs(one.jobs_path)
    same = _read_jobs(eight.jobs_path).query("cluster == 'cluster-0'").reset_index(drop=True)
    pd.testing.assert_frame_equal(first, same)


def test_output_folder_is_created_and_progress_reported(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    out = generate_trace(
        tmp_path / "a" / "b",
        days=1,
        clusters=2,
        jobs_per_day=200,
        progress=lambda done, total: calls.append((done, total)),
    )
    assert out.jobs_path.exists() and out.capacity_path.exists()
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_start_sets_the_window(tmp_path: Path) -> None:
    out = generate_trace(
        tmp_path, days=1, clusters=1, jobs_per_day=500, start="2025-06-01T12:00:00+02:00"
    )
    submit = _read_jobs(out.jobs_path)["submit_ts"]
    assert submit.min() >= pd.Timestamp("2025-06-01T10:00:00")
    assert submit.max() < pd.Timestamp("2025-06-02T10:00:00")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"days": 0}, "days must be .* >= 1"),
        ({"clusters": 0}, "clusters must be .* >= 1"),
        ({"jobs_per_day": -5.0}, "jobs_per_day must be a positive number"),
        ({"start": "yesterday-ish"}, "is not a time"),
        ({"format": "xlsx"}, "format must be 'csv' or 'parquet'"),
    ],
)
def test_bad_arguments_raise_config_error(
    tmp_path: Path, kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        generate_trace(tmp_path, **kwargs)  # type: ignore[arg-type]


def _a(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


NEVER = 10**12


def test_backfill_oracle() -> None:
    # 4 GPUs. A takes 2 until 10; B needs all 4, so it waits for A and reserves t=10.
    # C (2 GPUs, ends at 7) backfills at once; D (1 GPU, runs 100) would delay B, so it waits
    # for B to end at 15.
    submit, run, gpus = _a(0, 1, 2, 3), _a(10, 5, 5, 100), _a(2, 4, 2, 1)
    assert _schedule_backfill(submit, run, gpus, _a(NEVER, NEVER, NEVER, NEVER), 4).tolist() == [
        0,
        10,
        2,
        15,
    ]
    # B gives up at 1 + 3 = 4: then D is the head and starts when C ends at 7.
    assert _schedule_backfill(submit, run, gpus, _a(NEVER, 3, NEVER, NEVER), 4).tolist() == [
        0,
        -1,
        2,
        7,
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 40), st.integers(1, 8), st.integers(0, 60)),
        min_size=1,
        max_size=40,
    ),
    st.integers(8, 12),
)
def test_backfill_invariants(jobs: list[tuple[int, int, int, int]], capacity: int) -> None:
    gaps, run, gpus, patience = (np.array(x, dtype=np.int64) for x in zip(*jobs, strict=True))
    submit = np.cumsum(gaps)
    start = _schedule_backfill(submit, run, gpus, patience, capacity)
    ran = start >= 0
    assert (start[ran] >= submit[ran]).all()
    assert (start[ran] - submit[ran] <= patience[ran]).all()
    end = start + run
    for t in np.unique(start[ran]):
        busy = ran & (start <= t) & (end > t)
        assert gpus[busy].sum() <= capacity
    # The first job always starts at once on an empty VC.
    assert start[0] == submit[0]
