"""Store.load_jobs: the jobs of a cluster or scope, as known at a time."""

from __future__ import annotations

import pandas as pd

from prism.store import Store

COLUMNS = ["cluster", "scope", "job_id", "gpu_type", "num_gpus", "submit_ts", "start_ts",
           "end_ts"]


def _insert(store: Store) -> None:
    ts = pd.Timestamp
    rows = [
        # cluster, scope, job, gpu type, gpus, submit, start, end
        ("c", "vc1", "a", "A100", 8.0, ts("2026-01-01 00:00"), ts("2026-01-01 00:10"),
         ts("2026-01-01 02:00")),
        ("c", "vc1", "b", "V100", 1.0, ts("2026-01-01 00:30"), ts("2026-01-01 01:00"), None),
        ("c", "vc 2", "c", None, 0.5, ts("2026-01-01 00:40"), ts("2026-01-01 03:00"),
         ts("2026-01-01 04:00")),
        ("c", None, "d", "A100", 2.0, ts("2026-01-01 05:00"), None, None),
        ("other", "vc1", "e", "A100", 4.0, ts("2026-01-01 00:00"), ts("2026-01-01 00:00"),
         ts("2026-01-01 01:00")),
    ]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("submit_ts", "start_ts", "end_ts"):
        frame[col] = pd.to_datetime(frame[col])
    store.insert_frame("jobs", frame, COLUMNS)


def test_load_jobs_filters_by_cluster_and_scope(store: Store) -> None:
    _insert(store)
    every = store.load_jobs("c")
    assert list(every.columns) == COLUMNS
    # sorted by start, jobs that never started last
    assert list(every["job_id"]) == ["a", "b", "c", "d"]
    assert list(store.load_jobs("c", "all")["job_id"]) == ["a", "b", "c", "d"]
    assert list(store.load_jobs("c", "vc1")["job_id"]) == ["a", "b"]
    # a scope as its series id writes it ("vc 2" -> "vc_2") or as stored
    assert list(store.load_jobs("c", "vc_2")["job_id"]) == ["c"]
    assert list(store.load_jobs("c", "vc 2")["job_id"]) == ["c"]
    assert list(store.load_jobs("c", "unassigned")["job_id"]) == ["d"]
    assert list(store.load_jobs("c", "gpu:A100")["job_id"]) == ["a", "d"]
    assert list(store.load_jobs("c", "gpu:unknown")["job_id"]) == ["c"]
    assert store.load_jobs("c", "vc9").empty
    assert store.load_jobs("nowhere").empty
    assert str(every["start_ts"].dtype) == "datetime64[ns]"
    assert str(every["num_gpus"].dtype) == "float64"
    assert pd.isna(every.set_index("job_id").loc["b", "end_ts"])


def test_load_jobs_until_hides_what_was_not_known_then(store: Store) -> None:
    _insert(store)
    then = store.load_jobs("c", until=pd.Timestamp("2026-01-01 01:30")).set_index("job_id")
    # d was submitted later: absent; a runs (its end is later), c waits (its start is later)
    assert sorted(then.index) == ["a", "b", "c"]
    assert pd.isna(then.loc["a", "end_ts"])
    assert then.loc["a", "start_ts"] == pd.Timestamp("2026-01-01 00:10")
    assert pd.isna(then.loc["c", "start_ts"]) and pd.isna(then.loc["c", "end_ts"])
    # an end at the instant itself is known
    at_end = store.load_jobs("c", "vc1", until=pd.Timestamp("2026-01-01 02:00"))
    assert at_end.set_index("job_id").loc["a", "end_ts"] == pd.Timestamp("2026-01-01 02:00")
