"""A sampled series whose buckets are mostly filled gets a warning that says why and how to
fix it: samples coarser than the bucket (``--freq``), or absent while idle (``--fill zero``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism import usecases
from prism.cli import main


def _write(folder: Path) -> Path:
    """Three series of cluster ``lab`` over 3 days: hourly samples, 10-minute samples present
    only while a job runs (a Prometheus series absent while idle), and 10-minute samples."""
    ten = pd.date_range("2026-01-05", periods=432, freq="10min")
    hourly = pd.date_range("2026-01-05", periods=72, freq="1h")
    busy = (np.arange(len(ten)) % 36) < 6  # one hour in six
    frames = [
        pd.DataFrame({"series_id": "lab/vc-h/gpus_in_use", "ts": hourly, "value": 8.0}),
        pd.DataFrame({"series_id": "lab/vc-s/gpus_in_use", "ts": ten[busy], "value": 16.0}),
        pd.DataFrame({"series_id": "lab/vc-t/gpus_in_use", "ts": ten, "value": 4.0}),
    ]
    path = folder / "samples.csv"
    pd.concat(frames).to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    return path


def test_mostly_filled_series_are_named_with_their_fix(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path, db = _write(tmp_path), tmp_path / "s.duckdb"
    with caplog.at_level("WARNING", logger="prism.ingest.pipeline"):
        assert main(["--db", str(db), "ingest", str(path), "--format", "long-csv", "-q"]) == 0
    warned = {r.getMessage().split(":", 1)[0]: r.getMessage() for r in caplog.records}
    assert set(warned) == {"lab/vc-h/gpus_in_use", "lab/vc-s/gpus_in_use"}
    hourly, sparse = warned["lab/vc-h/gpus_in_use"], warned["lab/vc-s/gpus_in_use"]
    assert "83 % of its 10min buckets had no sample and were filled (hold)" in hourly
    assert "every 1h: `prism series rederive --cluster lab --freq 1h`" in hourly
    assert "--fill zero" not in hourly
    assert "`prism series rederive --cluster lab --fill zero`" in sparse
    # the fix it names works: at --fill zero the sparse series is 0 between its jobs
    caplog.clear()
    assert main(["--db", str(db), "series", "rederive", "--cluster", "lab", "--fill",
                 "zero"]) == 0
    with usecases.open_store(db) as store:
        values = store.load_panel(["lab/vc-s/gpus_in_use"])["value"]
    assert set(values.unique()) == {0.0, 16.0}
    # ingested at the samples' own pace, the hourly series fills nothing: no warning
    caplog.clear()
    with caplog.at_level("WARNING", logger="prism.ingest.pipeline"):
        assert main(["--db", str(tmp_path / "h.duckdb"), "ingest", str(path), "--format",
                     "long-csv", "--freq", "1h", "-q"]) == 0
    assert not [r for r in caplog.records if "vc-h" in r.getMessage()]
