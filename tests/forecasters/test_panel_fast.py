"""The vectorised panel path of the cheap baselines gives the per-series path's numbers."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pandas as pd
import pytest

from prism import batch
from prism.batch.engine import _read_chunks
from prism.batch.work import _Job, _run_series, _Series, run_chunk
from prism.errors import ConfigError, DataContractError
from prism.forecasters import get_forecaster
from prism.forecasters.panel_fast import (
    PANEL_MODELS,
    _sorted_quantiles,
    forecast_panel,
    supports_panel,
)
from prism.store import Store
from tests.test_batch import fill_store

QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.975, 0.99)
CASES = [pytest.param(cls.alias, params, id=f"{cls.alias}-{i}")
         for cls in PANEL_MODELS for i, params in enumerate([*cls.test_params(), {}])]


def mixed_panel(n: int = 50, seed: int = 7) -> pd.DataFrame:
    """``n`` seeded 10-minute series of several lengths (1 to 9 days, one of 100 points)
    and levels (0.5 to 500); one idle (all zeros) and one with a step of its level."""
    rng = np.random.default_rng(seed)
    lengths = (150, 288, 432, 700, 1296, 100)
    frames = []
    for i in range(n):
        steps = lengths[i % len(lengths)] if i else 1296
        t = np.arange(steps)
        level = float(rng.lognormal(2.5, 1.5))
        value = (level + 0.3 * level * np.sin(2 * np.pi * t / 144 + i)
                 + rng.normal(0, 0.05 * level, steps))
        if i == 0:
            value = np.zeros(steps)  # idle
        if i == 1:
            value[steps // 2:] += 3 * level  # a step
        frames.append(pd.DataFrame({
            "series_id": f"c{i % 3}/vc{i:03d}/gpus_in_use",
            "ts": pd.date_range("2026-01-05", periods=steps, freq="10min"),
            "value": np.maximum(0.0, value).round(3)}))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize(("alias", "params"), CASES)
def test_panel_path_equals_per_series_fit_and_predict(alias: str, params: dict[str, Any]) -> None:
    # too short to calibrate out of sample (40 points, one of 10): bands from their changes
    short = mixed_panel(6, seed=3).groupby("series_id").head(40)
    tiny = short[short["series_id"] == "c1/vc001/gpus_in_use"].head(10)
    short = pd.concat([short, tiny.assign(series_id="c1/vc010/gpus_in_use")])
    short["series_id"] = "s" + short["series_id"]
    panel = pd.concat([mixed_panel(), short], ignore_index=True)
    if alias == "seasonal_naive" and not params:
        panel = panel[panel.groupby("series_id")["ts"].transform("size") >= 144]
    want = get_forecaster(alias, **params).fit(panel).predict("1d", QUANTILES)
    got = forecast_panel(get_forecaster(alias, **params), panel, "1d", QUANTILES)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    spread = want["p99"] - want["p1"]
    assert (spread[want["series_id"] == "sc1/vc010/gpus_in_use"] > 0).all()


def test_panel_path_keeps_the_frame_style_and_the_errors_of_fit() -> None:
    panel = mixed_panel(6)
    nixtla = panel.rename(columns={"series_id": "unique_id", "ts": "ds", "value": "y"})
    model = get_forecaster("naive")
    pd.testing.assert_frame_equal(forecast_panel(model, nixtla, 6, (0.5,)),
                                  get_forecaster("naive").fit(nixtla).predict(6, (0.5,)),
                                  check_exact=True)
    pd.testing.assert_frame_equal(forecast_panel(model, panel, 3, ()),
                                  get_forecaster("naive").fit(panel).predict(3, ()),
                                  check_exact=True)
    with pytest.raises(DataContractError, match="shorter than one season") as fit_error:
        get_forecaster("seasonal_naive", season="1d").fit(panel)
    with pytest.raises(DataContractError, match="shorter than one season") as fast_error:
        forecast_panel(get_forecaster("seasonal_naive", season="1d"), panel, 6)
    assert str(fast_error.value) == str(fit_error.value)
    assert not supports_panel(get_forecaster("time_of_day_quantile"))
    with pytest.raises(ConfigError, match="no vectorised panel path"):
        forecast_panel(get_forecaster("time_of_day_quantile"), panel, 6)


@pytest.mark.parametrize("size", [24, 25, 96, 1_000, 7_777])
def test_sorted_quantiles_are_numpys_bit_for_bit(size: int) -> None:
    rng = np.random.default_rng(size)
    rows = np.sort(rng.normal(0, 10, (5, size)).round(1), axis=1)  # ties, as real errors have
    rows[0] = 0.0
    levels = np.array([0.005, 0.01, 0.1, 0.5, 0.9, 0.9047619, 0.93, 0.99, 0.995])
    assert np.array_equal(_sorted_quantiles(rows, levels), np.quantile(rows, levels, axis=1))


# -- the batch engine routes cheap models through the panel path ----------------------------------
@pytest.mark.parametrize("workers", [1, 2])
def test_batch_of_a_cheap_model_forecasts_what_fit_does(workers: int) -> None:
    panel = mixed_panel(12)  # two of 100 points: shorter than a day, forecast by naive
    store = Store.open(":memory:")
    fill_store(store, panel)
    report = batch.run_batch(store, get_forecaster("seasonal_naive"), horizon="3h",
                             quantiles=(0.1, 0.5, 0.9), workers=workers, chunk_size=4)
    short = {"c2/vc005/gpus_in_use", "c2/vc011/gpus_in_use"}
    assert (report.ok, report.fallback, report.workers) == (10, 2, workers)
    frames = []
    for sid, group in panel.groupby("series_id"):
        model = get_forecaster("naive" if sid in short else "seasonal_naive")
        frames.append(model.fit(group).predict("3h", (0.1, 0.5, 0.9)))
    want = pd.concat(frames, ignore_index=True).assign(model="seasonal_naive")
    pd.testing.assert_frame_equal(batch.run_frame(store, report.run_id), want,
                                  check_exact=True)
    store.close()


def test_a_chunk_sends_what_the_panel_path_cannot_take_one_by_one() -> None:
    panel = mixed_panel(4)
    items = []
    for sid, group in panel.groupby("series_id"):
        ts = group["ts"].to_numpy("datetime64[ns]").view(np.int64)
        items.append(_Series(str(sid), ts, group["value"].to_numpy(dtype=np.float64)))
    broken = items[1].values.copy()
    broken[5] = np.nan
    items[1] = _Series(items[1].series_id, items[1].ts, broken)
    gap = np.r_[items[2].ts[:10], items[2].ts[11:]]
    items[2] = _Series(items[2].series_id, gap, items[2].values[1:])
    job = _Job(task="forecast", model=get_forecaster("window_average"), shared=(),
               horizon=6, quantiles=(0.5, 0.9), windows=1, step=None, budget_s=None,
               fallback_season="1d")
    got = run_chunk(job, items)
    want = [_run_series(job, item) for item in items]
    assert [o.status for o in got] == [o.status for o in want] == ["ok", "failed", "failed", "ok"]
    assert [o.reason for o in got] == [o.reason for o in want]
    for g, w in zip(got, want, strict=True):
        assert g.n_rows == w.n_rows
        if w.frame is not None:  # the panel path's rows are the per-series frame's, exactly
            assert g.block is not None and g.frame is None
            got_rows, want_rows = g.table(), w.table()
            assert got_rows is not None and want_rows is not None
            assert got_rows.equals(want_rows)


def test_batch_reads_rows_stored_in_any_order_and_writes_them_exactly() -> None:
    panel = mixed_panel(9)
    panel = panel[panel.groupby("series_id")["ts"].transform("size") >= 144]
    shuffled = panel.sample(frac=1.0, random_state=3)  # DuckDB returns them in no order
    store = Store.open(":memory:")
    fill_store(store, shuffled)
    ids = sorted(panel["series_id"].unique())
    chunks = list(_read_chunks(store, [*ids, "c0/absent/gpus_in_use"], 4))
    items = [item for chunk in chunks for item in chunk]
    assert [len(c) for c in chunks] == [4, 4, 1]  # 8 series of a day or more, 1 absent
    assert items[-1].series_id == "c0/absent/gpus_in_use" and len(items[-1].values) == 0
    for item in items[:-1]:
        want = store.load_panel_block([item.series_id])
        assert np.array_equal(item.ts, want["ts"].to_numpy("datetime64[ns]").view(np.int64))
        assert np.array_equal(item.values, want["value"].to_numpy())
    for quantiles in [(0.1, 0.5, 0.9), ()]:
        report = batch.run_batch(store, get_forecaster("seasonal_naive"), horizon="3h",
                                 quantiles=quantiles, workers=1)
        want_frame = get_forecaster("seasonal_naive").fit(panel).predict("3h", quantiles)
        pd.testing.assert_frame_equal(batch.run_frame(store, report.run_id), want_frame,
                                      check_exact=True)
        assert report.rows == len(want_frame)
    store.close()


def test_a_chunks_outcomes_carry_their_groups_forecasts_once() -> None:
    panel = mixed_panel(12)
    items = [_Series(str(sid), group["ts"].to_numpy("datetime64[ns]").view(np.int64),
                     group["value"].to_numpy(dtype=np.float64))
             for sid, group in panel.groupby("series_id")]
    job = _Job(task="forecast", model=get_forecaster("naive"), shared=(), horizon=6,
               quantiles=(0.5, 0.9), windows=1, step=None, budget_s=None,
               fallback_season="1d")
    got = run_chunk(job, items)
    blocks = {id(o.block): o.block for o in got if o.block is not None}
    assert len(blocks) == len(set(len(item.values) for item in items))  # a group per length
    # what a worker sends back holds each group once, not once per series
    assert len(pickle.dumps(got)) < 1.5 * len(pickle.dumps(list(blocks.values())))
    assert all(o.n_rows == 6 for o in got)
