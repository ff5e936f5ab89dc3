"""A process killed with SIGKILL in the middle of an ingest leaves all of the batch or none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.ingest.pipeline import ingest
from prism.store import Store


def _trace(path: Path, n: int, cluster: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    submit = pd.Timestamp("2026-01-05") + pd.to_timedelta(rng.integers(0, 28 * 86_400, n), "s")
    start = submit + pd.to_timedelta(rng.integers(0, 3_600, n), "s")
    end = start + pd.to_timedelta(rng.integers(60, 86_400, n), "s")
    pd.DataFrame({
        "job_id": np.char.add(f"{cluster}-", np.arange(n).astype(str)),
        "cluster": cluster, "scope": rng.choice([f"vc{i}" for i in range(40)], n),
        "gpu_type": rng.choice(["A100", "H100"], n), "num_gpus": rng.integers(1, 9, n),
        "num_cpus": 8, "submit_ts": submit, "start_ts": start, "end_ts": end,
        "status": "COMPLETED",
    }).to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")


def _counts(db: Path) -> tuple[int, int, int]:
    with Store.open(db) as store:
        jobs = store.fetch_one("SELECT count(*) FROM jobs")
        ingests = store.fetch_one("SELECT count(*) FROM ingests")
        values = store.fetch_one("SELECT count(*) FROM series_values")
    assert jobs and ingests and values
    return int(jobs[0]), int(ingests[0]), int(values[0])


@pytest.mark.slow
def test_sigkill_mid_ingest_leaves_all_or_nothing(tmp_path: Path) -> None:
    db = tmp_path / "prism.duckdb"
    small, big = tmp_path / "small.csv", tmp_path / "big.csv"
    _trace(small, 1_000, "keep", 1)
    _trace(big, 400_000, "big", 2)
    with Store.open(db) as store:  # in this process: only the killed run needs its own
        ingest(store, [small], "jobs-csv")
    before = _counts(db)
    prism = [sys.executable, "-m", "prism.cli", "--db", str(db), "-v"]

    proc = subprocess.Popen([*prism, "ingest", str(big), "--format", "jobs-csv", "-q"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # the rows are written; the series are being derived, uncommitted
        if "as ingest" in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    after = _counts(db)  # reopening replays the WAL: the killed transaction is not there
    assert after == before
    with Store.open(db) as store:
        assert store.fetch_all("SELECT DISTINCT cluster FROM jobs") == [("keep",)]

    with Store.open(db) as store:  # the same file ingests afterwards
        assert ingest(store, [big], "jobs-csv").rows == 400_000
    jobs, ingests, _ = _counts(db)
    assert (jobs, ingests) == (before[0] + 400_000, before[1] + 1)
