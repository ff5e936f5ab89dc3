"""Batch refit (prism.batch with a registry): the workers' fitted models are saved by the
calling process, one registry model per chunk, and forecast afterwards (loaded, served, or
through ``prism forecast --from-model``) exactly what the batch computed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from prism import batch, registry
from prism.cli import main
from prism.errors import ConfigError, DataContractError
from prism.forecasters import get_forecaster
from prism.forecasters.base import clone
from prism.forecasters.compose import SeriesModels
from prism.hub import ForecastHub
from prism.store import Store
from prism.usecases.batch import run_batch_job
from prism.usecases.forecast import forecast_series
from tests.test_batch import (
    PRISM_SMALL,
    QUANTILES,
    TroubleForecaster,
    _trouble_store,
    fill_store,
    panel_store,
    synthetic_panel,
)


@pytest.fixture
def small() -> Iterator[tuple[Store, pd.DataFrame]]:
    """An in-memory store with 7 series of 3 days."""
    with panel_store(7) as out:
        yield out


def _json_params(model: Any) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in model.get_params().items()}


def _saved_forecasts(root: Path, model_ids: tuple[str, ...], horizon: str) -> pd.DataFrame:
    frames = []
    for model_id in model_ids:
        loaded, _ = registry.load_model(root, model_id)
        assert isinstance(loaded, SeriesModels)
        frames.append(loaded.predict(horizon, QUANTILES))
    return pd.concat(frames).sort_values(["series_id", "ts"], kind="stable").reset_index(
        drop=True)


# -- the engine ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("alias", "params"), [
    ("seasonal_naive", {"season": "1h"}),
    pytest.param("prism", {**PRISM_SMALL, "use_rnn": False},  # with its RNN: the Ray test
                 marks=pytest.mark.slow),
])
def test_a_batch_forecast_with_save_keeps_one_model_per_chunk_forecasting_the_same(
    small: tuple[Store, pd.DataFrame], tmp_path: Path, alias: str, params: dict[str, Any]
) -> None:
    store, panel = small
    model = get_forecaster(alias, **params)
    report = batch.run_batch(store, model, horizon="3h", quantiles=QUANTILES, workers=2,
                             chunk_size=3, models_dir=tmp_path)
    assert (report.ok, report.saved, len(report.model_ids)) == (7, 7, 3)  # chunks 3 + 3 + 1
    assert report.models_dir == str(tmp_path)
    records = registry.list_models(tmp_path)
    assert sorted(r.model_id for r in records) == sorted(report.model_ids)
    ids = sorted(panel["series_id"].unique())
    assert sorted(len(r.series_ids) for r in records) == [1, 3, 3]
    assert sorted(s for r in records for s in r.series_ids) == ids  # each series once
    for record in records:
        assert record.alias == alias and record.params == _json_params(model)
        assert record.freq_s == 600 and record.version == 1
    # loaded back, the chunk models forecast what the batch wrote, and (the sample being every
    # series) what one model fitted in memory on the whole panel forecasts
    batch_rows = batch.run_frame(store, report.run_id)
    saved = _saved_forecasts(tmp_path, report.model_ids, "3h")
    pd.testing.assert_frame_equal(saved, batch_rows, check_exact=True)
    in_memory = get_forecaster(alias, **params).fit(panel).predict("3h", QUANTILES)
    pd.testing.assert_frame_equal(saved, in_memory, check_exact=True)


def test_a_refit_task_saves_forecasts_nothing_and_a_failing_series_is_not_saved(
    tmp_path: Path
) -> None:
    names = ["a/boom/gpus_in_use", "a/fine1/gpus_in_use", "a/fine2/gpus_in_use",
             "a/fine3/gpus_in_use"]
    store, panel = _trouble_store(names)
    for task, status in (("forecast", "fallback"), ("refit", "failed")):
        root = tmp_path / task
        report = batch.run_batch(store, TroubleForecaster(), task=task, horizon="1h",
                                 quantiles=QUANTILES, workers=1, chunk_size=2,
                                 models_dir=root)
        outcomes = store.batch_series(report.run_id).set_index("series_id")
        reason = str(outcomes.loc["a/boom/gpus_in_use", "fallback_reason"])
        assert outcomes.loc["a/boom/gpus_in_use", "status"] == status
        assert "cannot fit a/boom" in reason
        assert (report.ok, report.saved, len(report.model_ids)) == (3, 3, 2)
        held = registry.newest_for_series(root, "trouble")
        assert sorted(held) == names[1:]  # the fallback's seasonal naive is not saved
        with pytest.raises(ConfigError, match="was not fitted on 'a/boom/gpus_in_use'"):
            forecast_series(store, ["a/boom/gpus_in_use"], horizon="1h", quantiles=QUANTILES,
                            model="trouble", from_model="trouble", models_dir=root)
    assert reason.endswith("; not saved")
    assert report.rows == 0 and store.fetch_one(
        "SELECT count(*) FROM batch_forecasts WHERE run_id = ?", [report.run_id]) == (0,)
    assert store.batch_runs(report.run_id)["task"].iloc[0] == "refit"
    loaded, _ = registry.load_model(tmp_path / "refit", report.model_ids[0])
    fine = panel[panel["series_id"].isin(loaded.series_ids_)]
    pd.testing.assert_frame_equal(loaded.predict("1h", QUANTILES),
                                  TroubleForecaster().fit(fine).predict("1h", QUANTILES),
                                  check_exact=True)
    store.close()


def test_refit_settings_that_cannot_work_are_refused(small: tuple[Store, pd.DataFrame],
                                                     tmp_path: Path) -> None:
    store, _ = small
    naive = get_forecaster("naive")
    with pytest.raises(ConfigError, match="--models-dir"):
        batch.run_batch(store, naive, task="refit")
    with pytest.raises(ConfigError, match="saves none; drop --save"):
        batch.run_batch(store, naive, task="backtest", models_dir=tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot write to the model registry"):
        batch.run_batch(store, naive, task="refit", models_dir=blocker / "models")
    assert store.batch_runs().empty  # refused before a run was recorded


# -- the container ------------------------------------------------------------------------------
def test_series_models_forecast_update_and_refit_as_the_models_they_hold() -> None:
    panel = synthetic_panel(3, days=4)
    old = panel[panel["ts"] < "2026-01-08T12:00"]
    new = panel[panel["ts"] >= "2026-01-08T12:00"]
    ids = sorted(panel["series_id"].unique())
    params = {**PRISM_SMALL, "use_rnn": False}
    # one model holds the first two series, another the third
    one = get_forecaster("prism", **params).fit(old[old["series_id"] != ids[2]])
    alone = get_forecaster("prism", **params).fit(old[old["series_id"] == ids[2]])
    held = SeriesModels.join({ids[0]: one, ids[1]: one, ids[2]: alone})
    assert held.alias == "prism" and held.series_ids_ == ids and held.version_ == 1
    want = pd.concat([one.predict("2h", QUANTILES),
                      alone.predict("2h", QUANTILES)], ignore_index=True)
    pd.testing.assert_frame_equal(held.predict("2h", QUANTILES), want, check_exact=True)

    updated = held.copy().update(new)  # a copy: the held models stay as they were
    assert updated.version_ == 2 and held.version_ == 1
    assert updated.last_ts_[ids[0]] == pd.Timestamp("2026-01-08T23:50")
    one.update(new[new["series_id"] != ids[2]])
    alone.update(new[new["series_id"] == ids[2]])
    want = pd.concat([one.predict("2h", QUANTILES),
                      alone.predict("2h", QUANTILES)], ignore_index=True)
    pd.testing.assert_frame_equal(updated.predict("2h", QUANTILES), want, check_exact=True)
    held_model = updated.models_[ids[2]]
    assert updated.calibration_[ids[2]] is held_model.calibration_[ids[2]]
    # the update's fallback check (the rolling error) is the held models', gathered
    assert updated.fallback_ == {**one.fallback_, **alone.fallback_} and held.fallback_ == {}

    # what serving's refit does: clone, fit (each series on its own, shared parts once)
    refitted = clone(held).fit(old)
    assert isinstance(refitted, SeriesModels) and refitted.series_ids_ == ids
    shared = get_forecaster("prism", **params).fit_shared(old)
    want = pd.concat([shared.fit_local(g).predict("2h", QUANTILES)
                      for _, g in old.groupby("series_id")], ignore_index=True)
    pd.testing.assert_frame_equal(refitted.predict("2h", QUANTILES), want, check_exact=True)

    with pytest.raises(DataContractError, match="was not fitted"):
        held.update(new[new["series_id"] == ids[0]].assign(series_id="c9/other/gpus_in_use"))
    with pytest.raises(ConfigError, match="different aliases"):
        SeriesModels.join({ids[0]: one, ids[2]: get_forecaster("naive").fit(old)})
    with pytest.raises(DataContractError, match="was not fitted on it"):
        SeriesModels.join({ids[2]: one})


# -- serving and the CLI ------------------------------------------------------------------------
@pytest.fixture
def db(tmp_path: Path) -> tuple[str, pd.DataFrame]:
    """A store file with 6 series."""
    path = str(tmp_path / "prism.duckdb")
    panel = synthetic_panel(6)
    with Store.open(path) as store:
        fill_store(store, panel)
    return path, panel


@pytest.mark.slow
def test_cli_refit_then_forecast_from_the_saved_models(
    tmp_path: Path, db: tuple[str, pd.DataFrame], capsys: pytest.CaptureFixture[str]
) -> None:
    path, panel = db
    models = str(tmp_path / "models")
    assert main(["--db", path, "refit", "--all", "--model", "seasonal_naive", "--param",
                 "season=1h", "--workers", "2", "--models-dir", models, "-q"]) == 0
    printed = capsys.readouterr().out
    assert "seasonal_naive refit of 6 series" in printed and "0 rows in batch_forecasts" in printed
    assert f"6 saved as 1 registry models in {models}" in printed  # 6 series: one chunk
    # the alias finds the newest model of every series, as the in-memory fit forecasts
    out = tmp_path / "from_model.parquet"
    assert main(["--db", path, "forecast", "--from-model", "seasonal_naive", "--models-dir",
                 models, "--horizon", "2h", "--quantiles", "0.1,0.5,0.9", "--output",
                 str(out)]) == 0
    want = get_forecaster("seasonal_naive", season="1h").fit(panel).predict("2h", QUANTILES)
    pd.testing.assert_frame_equal(pd.read_parquet(out), want, check_exact=True)

    # a batch forecast with --save: its rows and its saved model agree
    saved = tmp_path / "saved.parquet"
    assert main(["--db", path, "forecast", "--all", "--model", "naive", "--horizon", "2h",
                 "--quantiles", "0.1,0.5,0.9", "--workers", "2", "--save", "--models-dir",
                 models, "--output", str(saved), "-q"]) == 0
    assert "6 saved as 1 registry models" in capsys.readouterr().out
    ids = sorted(panel["series_id"].unique())
    two = tmp_path / "two.parquet"
    batch_rows = pd.read_parquet(saved)
    assert main(["--db", path, "forecast", ids[0], ids[5], "--from-model", "naive",
                 "--models-dir", models, "--horizon", "2h", "--quantiles", "0.1,0.5,0.9",
                 "--output", str(two)]) == 0
    pd.testing.assert_frame_equal(
        pd.read_parquet(two),
        batch_rows[batch_rows["series_id"].isin([ids[0], ids[5]])].reset_index(drop=True),
        check_exact=True)


def test_cli_batch_save_spreads_series_over_models_and_from_model_joins_them(
    tmp_path: Path, db: tuple[str, pd.DataFrame], capsys: pytest.CaptureFixture[str]
) -> None:
    path, panel = db
    models = tmp_path / "models"
    with Store.open(path) as store:
        result = run_batch_job(store, None, models=["naive"], task="refit", workers=1,
                               models_dir=models)
    report = result.reports[0]
    assert (report.saved, len(report.model_ids)) == (6, 1)
    with Store.open(path) as store:  # smaller chunks: one model per 2 series
        small_chunks = batch.run_batch(store, get_forecaster("window_average", window="1h"),
                                       task="refit", chunk_size=2, models_dir=models)
    assert len(small_chunks.model_ids) == 3
    ids = sorted(panel["series_id"].unique())
    with Store.open(path) as store:
        got = forecast_series(store, [ids[5], ids[0]], horizon="1h", quantiles=QUANTILES,
                              model="window_average", from_model="window_average",
                              models_dir=models)
    assert got.model_id is None and len(got.model_ids) == 2
    want = get_forecaster("window_average", window="1h").fit(
        panel[panel["series_id"].isin([ids[0], ids[5]])]).predict("1h", QUANTILES)
    pd.testing.assert_frame_equal(got.frame, want, check_exact=True)
    assert main(["--db", path, "refit", "--models-dir", str(models)]) == 1
    assert "name one or more series ids, or pass --all" in capsys.readouterr().err
    assert main(["--db", path, "forecast", "--all", "--workers", "2", "--from-model",
                 "naive"]) == 1
    assert "drop them to run a batch" in capsys.readouterr().err


def test_serving_finds_the_chunk_model_of_a_series(
    tmp_path: Path, db: tuple[str, pd.DataFrame]
) -> None:
    path, panel = db
    models = tmp_path / "models"
    params = {"season": "1h"}
    with Store.open(path) as store:
        report = batch.run_batch(store, get_forecaster("seasonal_naive", **params),
                                 horizon="2h", quantiles=QUANTILES, chunk_size=4,
                                 models_dir=models)
        rows = batch.run_frame(store, report.run_id)
    assert len(report.model_ids) == 2
    held = registry.newest_for_series(models, "seasonal_naive")
    with Store.open(path) as store:
        server = ForecastHub(store, models_dir=models, default_model="naive",
                             fit_budget_s=30).start()
        try:
            assert server.status()["models_in_registry"] == 2
            spec = server.spec("seasonal_naive", params)
            for sid in (sorted(held)[0], sorted(held)[-1]):
                served = server.forecast(sid, horizon="2h", quantiles=QUANTILES, spec=spec)
                assert served.model_id == held[sid].model_id  # loaded, not fitted
                assert served.model == 'seasonal_naive[season="1h"]'
                want = rows[rows["series_id"] == sid]
                np.testing.assert_array_equal(served.mean, want["mean"].round(4))
                np.testing.assert_array_equal(served.bands["p90"], want["p90"].round(4))
        finally:
            server.close()
    assert {r.model_id for r in registry.list_models(models)} == set(report.model_ids)


@pytest.mark.slow
def test_ray_saves_models_that_forecast_as_the_local_ones(tmp_path: Path,
                                                         ray_runtime: Any) -> None:
    store = Store.open(str(tmp_path / "prism.duckdb"))
    fill_store(store, synthetic_panel(12, days=2.5))
    model = get_forecaster("prism", **PRISM_SMALL)
    local = batch.run_batch(store, model, task="refit", workers=2, chunk_size=5,
                            models_dir=tmp_path / "local")
    remote = batch.run_batch(store, model, task="refit", backend="ray", chunk_size=5,
                             models_dir=tmp_path / "ray")
    assert (remote.backend, remote.saved, len(remote.model_ids)) == ("ray", 12, 3)
    assert local.saved == 12
    pd.testing.assert_frame_equal(
        _saved_forecasts(tmp_path / "ray", remote.model_ids, "3h"),
        _saved_forecasts(tmp_path / "local", local.model_ids, "3h"), check_exact=True)
    store.close()
