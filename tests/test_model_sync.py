"""A saved model against the store it forecasts: updated where the store only added or revised
its tail, refitted where it was fitted on other data (prism.forecasters.sync), the same in
the CLI, the capacity plan and the API's hub."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism import registry
from prism.cli import main
from prism.forecasters import get_forecaster
from prism.forecasters.sync import store_sync
from prism.hub import ForecastHub
from prism.store import Store
from tests.factories import panel_of, write_series_store

START = pd.Timestamp("2026-01-05")
SID = "lab/vc-a/gpus_in_use"
OTHER = "lab/vc-b/gpus_in_use"
CAPACITY = "cluster,scope,gpus\nlab,all,200\nlab,vc-a,100\nlab,vc-b,100\n"


def _series(seed: int, steps: int = 144 * 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {SID: rng.integers(10, 90, steps).astype(float),
            OTHER: rng.integers(10, 90, steps).astype(float)}


def test_the_sync_updates_a_revised_tail_and_refits_a_changed_fit() -> None:
    values = np.arange(300, dtype=float) % 17
    model = get_forecaster("naive").fit(panel_of({SID: values}))
    fit_len = model.fit_len_[SID]
    assert 0 < fit_len < 300  # a calibration tail the revisions below can fall in

    same = store_sync(model, panel_of({SID: values}))
    assert same.refit is None and same.points.empty

    grown = np.concatenate([values, [5.0, 6.0]])
    newer = store_sync(model, panel_of({SID: grown}))
    assert newer.refit is None and newer.points["value"].tolist() == [5.0, 6.0]

    revised = grown.copy()
    revised[fit_len + 3] += 1.0  # a late revision in the calibration tail: updated from it
    late = store_sync(model, panel_of({SID: revised}))
    assert late.refit is None and len(late.points) == 302 - (fit_len + 3)
    assert late.points["ts"].iloc[0] == START + pd.Timedelta(minutes=10 * (fit_len + 3))

    changed = grown.copy()
    changed[7] += 1.0  # a value the parameters were learned from
    assert "first at 2026-01-05 01:10" in str(store_sync(model, panel_of({SID: changed})).refit)
    assert "fewer than the 300" in str(store_sync(model, panel_of({SID: values[:-1]})).refit)
    later = panel_of({SID: values}, start=START + pd.Timedelta("10min"))
    assert "now starts at" in str(store_sync(model, later).refit)
    assert "every 3600 s" in str(store_sync(model, panel_of({SID: values}), {SID: 3600}).refit)


def _store(folder: Path, seed: int) -> Path:
    folder.mkdir()
    return write_series_store(folder, _series(seed), CAPACITY, start=START)


def test_a_registry_shared_by_two_stores_forecasts_each_stores_own_series(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _store(tmp_path / "a", 1), _store(tmp_path / "b", 2)
    models = str(tmp_path / "models")
    assert main(["--db", str(first), "forecast", SID, "--model", "window_average",
                 "--horizon", "1h", "--save", "--models-dir", models, "-q"]) == 0
    capsys.readouterr()

    out = tmp_path / "f.csv"
    assert main(["--db", str(second), "forecast", SID, "--from-model", "window_average",
                 "--models-dir", models, "--horizon", "1h", "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "fitted on other data" in err and "first at 2026-01-05 00:00" in err
    fresh = get_forecaster("window_average").fit(
        panel_of({SID: _series(2)[SID]})).predict("1h", [0.5, 0.9])
    served = pd.read_csv(out)
    np.testing.assert_allclose(served["mean"], fresh["mean"], rtol=1e-9)
    np.testing.assert_allclose(served["p90"], fresh["p90"], rtol=1e-9)
    # without --save nothing new is kept: the first store's model still serves the first store
    assert len(registry.list_models(models)) == 1
    assert main(["--db", str(first), "forecast", SID, "--from-model", "window_average",
                 "--models-dir", models, "--horizon", "1h", "-q"]) == 0
    assert "other data" not in capsys.readouterr().err


def test_capacity_and_the_api_plan_on_this_stores_series_with_a_shared_registry(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _store(tmp_path / "a", 1), _store(tmp_path / "b", 2)
    shared, own = str(tmp_path / "models"), str(tmp_path / "own")
    plan = ["capacity", "--cluster", "lab", "--model", "naive", "--horizon", "6h",
            "--no-record", "--json"]
    assert main(["--db", str(first), *plan, "--models-dir", shared]) == 0
    capsys.readouterr()
    assert main(["--db", str(second), *plan, "--models-dir", shared]) == 0
    captured = capsys.readouterr()
    assert "fitted on other data" in captured.err
    served = {r["scope"]: r for r in json.loads(captured.out)["rows"]}
    assert main(["--db", str(second), *plan, "--models-dir", own]) == 0
    alone = {r["scope"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    for scope, row in alone.items():
        for field in ("gpus_needed", "in_use_needed", "idle_gpu_hours", "net_gpus"):
            assert served[scope][field] == pytest.approx(row[field], abs=1e-6), (scope, field)
    # the refit was saved: the next plan on the second store takes it as it is
    assert main(["--db", str(second), *plan, "--models-dir", shared]) == 0
    assert "other data" not in capsys.readouterr().err

    # the API's hub on the first store, with the registry the second store's refit went to
    with Store.open(first) as store:
        hub = ForecastHub(store, models_dir=shared, default_model="naive",
                          fit_budget_s=30).start()
        try:
            served_api = hub.forecast(SID, horizon="30min", quantiles=[0.5])
        finally:
            hub.close()
    assert served_api.mean == [float(_series(1)[SID][-1])] * 3
