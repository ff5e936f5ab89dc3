"""Plans sized from series at a step coarser than an hour: GPUs in use is the mean over each
step, so a burst within a day does not show in a 1d series and the plan under-sizes. The plan
is still made, and the CLI (table and JSON), the use case the API calls and the report carry
one plain warning that says how to fix it; at an hour or finer there is none."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism import usecases
from prism.cli import main
from prism.usecases.capacity import plan_cluster_procurement
from tests.factories import write_series_store

START = pd.Timestamp("2026-01-05")
CAPACITY = "cluster,scope,gpus\nlab,vc-a,40\nlab,vc-b,40\nlab,all,80\n"
WARNING = "lab's series are at a 1d step, coarser than 1h: each value is the mean over its 1d"
FIX = "prism series rederive --cluster lab --freq 10min"


def _store(folder: Path, *, freq: str, steps: int) -> Path:
    """Two VCs and their cluster at ``freq``: a slow rise, no burst needed (the warning is
    about the step, not the values)."""
    folder.mkdir(parents=True, exist_ok=True)
    ramp = 20 + 0.5 * np.arange(steps) / max(steps / 40, 1)
    return write_series_store(folder, {
        "lab/vc-a/gpus_in_use": ramp, "lab/vc-b/gpus_in_use": ramp + 5,
        "lab/all/gpus_in_use": 2 * ramp + 5}, CAPACITY, start=START, freq=freq)


def _capacity(db: Path, models: Path, *extra: str) -> list[str]:
    return ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(models), "--no-record", *extra]


def test_a_daily_series_plan_warns_that_it_sees_means_not_peaks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path / "daily", freq="1D", steps=40)
    models = tmp_path / "models"
    capsys.readouterr()
    assert main(_capacity(db, models, "--procurement", "30d", "--pool", "--json")) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    # the plan is made, and every row of each plan says why it may be too small
    assert {r["scope"] for r in data["rows"]} == {"all", "vc-a", "vc-b"}
    for row in [*data["rows"], *data["procurement"]["rows"]]:
        assert WARNING in row["reason"] and FIX in row["reason"], row["scope"]
    assert WARNING in data["pool"]["text"]
    assert captured.err.count(f"warning: {WARNING}") == 1  # said once on stderr
    # one scope's plans carry it too (the use case GET /v1/capacity?procurement= calls)
    with usecases.open_store(db) as store:
        [bought] = plan_cluster_procurement(store, "lab", horizon="30d", scope="vc-a").rows
    assert FIX in bought.reason
    # the table: the plan, and the warning on stderr
    assert main(_capacity(db, models)) == 0
    captured = capsys.readouterr()
    assert "lab: " in captured.out and f"warning: {WARNING}" in captured.err
    report = tmp_path / "report.html"
    assert main(["--db", str(db), "report", "--cluster", "lab", "--model", "naive",
                 "--models-dir", str(models), "--no-record", "--output", str(report)]) == 0
    html = report.read_text()
    assert "<p class='warning' data-kind='coarse-step'>" in html
    assert FIX in html


def test_an_hourly_series_plan_has_no_step_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path, freq="1h", steps=10 * 24)
    capsys.readouterr()
    assert main(_capacity(db, tmp_path / "models", "--procurement", "30d", "--json")) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["rows"] and data["procurement"]["rows"]
    for row in [*data["rows"], *data["procurement"]["rows"]]:
        assert "coarser than" not in row["reason"]
    assert "coarser than" not in captured.err
