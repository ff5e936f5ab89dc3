"""The queue allowance counts only what the queue can start: queued jobs larger than their
scope's GPUs wait for the scope to grow, and a plan does not provision GPUs for them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from prism import usecases
from prism.cli import main
from prism.queue_fit import queue_fits, queued_by_size
from prism.usecases.capacity import plan_cluster_capacity, plan_cluster_procurement
from tests.factories import HandForecasts

T0 = pd.Timestamp("2026-03-02")
HEADER = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"


def _jobs_store(folder: Path, capacity: str, days: int = 2) -> Path:
    """Two VCs over ``days`` days, each with an 8-GPU job running throughout. From day two vc1
    queues a 4-GPU job and a 32-GPU job (larger than its 16 GPUs) that never start; vc2
    (64 GPUs) queues the same two."""
    day, end = T0 + pd.Timedelta(days=1), T0 + pd.Timedelta(days=days)
    rows = []
    for vc in ("vc1", "vc2"):
        rows += [f"{vc}-run,lab,{vc},A100,8,8,{T0:%Y-%m-%dT%H:%M:%S},{T0:%Y-%m-%dT%H:%M:%S},"
                 f"{end:%Y-%m-%dT%H:%M:%S},COMPLETED",
                 f"{vc}-small,lab,{vc},A100,4,4,{day:%Y-%m-%dT%H:%M:%S},,,PENDING",
                 f"{vc}-big,lab,{vc},A100,32,32,{day:%Y-%m-%dT%H:%M:%S},,,PENDING"]
    (folder / "jobs.csv").write_text(HEADER + "\n".join(rows) + "\n")
    (folder / "capacity.csv").write_text(capacity)
    db = folder / "prism.duckdb"
    assert main(["--db", str(db), "ingest", str(folder / "jobs.csv"), "--format",
                 "jobs-csv"]) == 0
    assert main(["--db", str(db), "ingest", str(folder / "capacity.csv"), "--format",
                 "capacity-csv"]) == 0
    return db


def test_queued_gpu_time_per_size_is_read_as_known_at_the_window_end(tmp_path: Path) -> None:
    db = _jobs_store(tmp_path, "cluster,scope,gpus\nlab,all,80\nlab,vc1,16\nlab,vc2,64\n")
    end = T0 + pd.Timedelta(days=2)
    with usecases.open_store(db) as store:
        sizes = queued_by_size(store, "lab", end - pd.Timedelta(days=7), end)
        # read as known half-way through day two: 12 hours queued each
        half = queued_by_size(store, "lab", T0, T0 + pd.Timedelta(hours=36))
    vc1 = sizes[sizes["vc"] == "vc1"].set_index("num_gpus")
    assert vc1.loc[4.0, "gpu_seconds"] == pytest.approx(4 * 86_400)
    assert vc1.loc[32.0, "gpu_seconds"] == pytest.approx(32 * 86_400)
    assert 8.0 not in vc1.index  # the running job never queued
    assert set(sizes["queued_at_end"]) == {1} and set(sizes["gpu"]) == {"A100"}
    assert half.loc[half["vc"] == "vc2", "gpu_seconds"].sum() == pytest.approx(36 * 43_200)

    fits = queue_fits(sizes, {"all": 80.0, "vc1": 16.0, "vc2": 64.0, "gpu:A100": 2.0,
                              "vc9": 100.0, "gpu:H100": None}, days=7)
    assert fits["vc1"].share == pytest.approx(4 / 36) and fits["vc1"].too_big_now == 1
    assert fits["vc1"].largest_fit == 4.0
    assert fits["vc2"].share == 1.0 and fits["all"].share == 1.0
    assert fits["gpu:A100"].share == 0.0 and fits["gpu:A100"].too_big_now == 4
    assert "vc9" not in fits and "gpu:H100" not in fits  # no queue; no capacity


def test_the_allowance_leaves_out_jobs_larger_than_the_scope(tmp_path: Path) -> None:
    db = _jobs_store(tmp_path, "cluster,scope,gpus\nlab,all,80\nlab,vc1,16\nlab,vc2,64\n")
    in_use = ([8.0, 8.0, 8.0], 0.0)
    queued = ([36.0, 36.0, 36.0], 10.0)  # the two jobs' 36 GPUs stay queued
    source = HandForecasts({f"lab/{s}/{m}": in_use if m == "gpus_in_use" else queued
                            for s in ("all", "vc1", "vc2", "gpu:A100")
                            for m in ("gpus_in_use", "gpus_pending")})
    with usecases.open_store(db) as store:
        plan = plan_cluster_capacity(store, "lab", source, horizon="3", quantile=0.9)
    rows = {r.scope: r for r in plan.rows}
    vc1, vc2 = rows["vc1"], rows["vc2"]
    # vc1 can start the 4-GPU job only: 4 of its 36 queued GPUs
    assert vc1.queue_allowance == pytest.approx(4.0)
    assert vc1.gpus_needed == pytest.approx(12.0) and vc1.headroom == pytest.approx(4.0)
    assert "the mean 36.0 queued GPUs forecast over the window, times 11%" in vc1.reason
    assert "fit the scope's 16 GPUs" in vc1.reason and "1 such job(s) queued now" in vc1.reason
    # vc2 can start both: the allowance is the forecast, and the row says why
    assert vc2.queue_allowance == pytest.approx(36.0)
    assert "every job queued over the last 7 days fits the scope's 64 GPUs" in vc2.reason
    # nothing to borrow for a queue vc1 cannot start: its plan fits its own GPUs
    assert vc1.borrow_gpus == 0 and vc1.add_gpus == 0


def test_the_procurement_plan_counts_the_same_queue(tmp_path: Path) -> None:
    db = _jobs_store(tmp_path, "cluster,scope,gpus\nlab,all,80\nlab,vc1,16\nlab,vc2,64\n",
                     days=10)
    with usecases.open_store(db) as store:
        plan = plan_cluster_procurement(store, "lab", horizon="30d", weeks=1)
    rows = {r.scope: r for r in plan.rows}
    # vc1: 8 in use + 4 queued GPUs it can start (not 36): nothing to buy
    assert rows["vc1"].last_level == pytest.approx(12.0)
    assert rows["vc1"].needed_gpus == 0 and "times 11%" in rows["vc1"].reason
    assert rows["vc2"].last_level == pytest.approx(44.0) and "times" not in rows["vc2"].reason


def test_a_slurm_cluster_plans_only_the_queue_its_partitions_can_start(tmp_path: Path) -> None:
    """sacct jobs by partition and the sinfo node list, as a Slurm site ingests them: a job
    asking 16 GPUs of a partition of 8 is left out of that partition's allowance."""
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(
        "JobID|Account|Partition|AllocTRES|ReqTRES|Submit|Start|End|State\n"
        "1|lab|small|cpu=4,gres/gpu:a100=4|cpu=4,gres/gpu:a100=4|2026-03-02T00:00:00|"
        "2026-03-02T00:00:00|2026-03-04T00:00:00|COMPLETED\n"
        "2||small||cpu=4,gres/gpu:a100=4|2026-03-03T00:00:00|Unknown|Unknown|PENDING\n"
        "3||small||cpu=8,gres/gpu:a100=16|2026-03-03T00:00:00|Unknown|Unknown|PENDING\n")
    sinfo = tmp_path / "sinfo.txt"
    sinfo.write_text("NODELIST|PARTITION|GRES\nn1|small*|gpu:a100:8(S:0-1)\n"
                     "n2|big|gpu:a100:8(S:0-1)\nn3|big|gpu:a100:8(S:0-1)\n")
    db = tmp_path / "prism.duckdb"
    assert main(["--db", str(db), "ingest", str(sacct), "--format", "slurm-sacct",
                 "--cluster", "hpc", "--option", "scope=partition"]) == 0
    assert main(["--db", str(db), "ingest", str(sinfo), "--format", "node-list",
                 "--cluster", "hpc"]) == 0
    flat = ([4.0, 4.0, 4.0], 0.0)
    queued = ([20.0, 20.0, 20.0], 0.0)
    with usecases.open_store(db) as store:
        ids = set(store.list_series(cluster="hpc")["series_id"])
        source = HandForecasts({sid: queued if sid.endswith("/gpus_pending") else flat
                                for sid in ids})
        plan = plan_cluster_capacity(store, "hpc", source, horizon="3", quantile=0.9)
    rows = {r.scope: r for r in plan.rows}
    small = rows["small"]
    assert small.capacity == 8.0 and small.capacity_source == "store"
    assert small.queue_allowance == pytest.approx(4.0)  # 20 x 4 / 20: job 3 cannot start
    assert "times 20%" in small.reason and "1 such job(s) queued now" in small.reason
    # the cluster could start job 3 on its 24 GPUs; gpu:a100 is the cluster's one type
    assert rows["all"].queue_allowance == pytest.approx(20.0)
    assert rows["all"].capacity == 24.0 and rows["gpu:a100"].capacity == 24.0
