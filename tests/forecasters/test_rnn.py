"""The recurrent forecasters (lstm, gru) and their component, on CPU with tiny settings.

The conformance suite covers the protocol (both are registered); these tests cover what is
particular to them: learning, determinism, pickling, instance normalisation, the torch
settings they touch, and the GPU path where there is one.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.forecasters import FORECASTERS, get_forecaster
from prism.forecasters.rnn import RNN_LEVELS, GruForecaster, LstmForecaster, SequenceRegressor

TINY: dict[str, Any] = {"lookback": "6h", "horizon": "2h", "hidden_size": 8, "epochs": 4,
                        "max_windows": 128, "batch_size": 64}
START = 1_778_000_000  # Unix seconds of the first point (a whole multiple of 10 minutes)


def _sine(n: int, period: int = 36, level: float = 50.0, amplitude: float = 20.0,
          phase: float = 0.0) -> np.ndarray:
    t = np.arange(n)
    return level + amplitude * np.sin(2 * np.pi * t / period + phase)


def _panel(n: int = 720, series: int = 2, noise: float = 3.0) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    ts = pd.date_range("2026-01-05", periods=n, freq="10min")
    return pd.concat([
        pd.DataFrame({"series_id": f"c/vc{i}/gpus_in_use", "ts": ts,
                      "value": _sine(n, 144, phase=i) + rng.normal(0, noise, n)})
        for i in range(series)
    ], ignore_index=True)


def test_registered_as_global_models_with_native_quantiles() -> None:
    assert FORECASTERS["lstm"] is LstmForecaster and FORECASTERS["gru"] is GruForecaster
    for cls in (LstmForecaster, GruForecaster):
        assert cls.global_model and cls.native_levels == RNN_LEVELS


def test_importing_prism_does_not_import_torch() -> None:
    # torch costs 1-2 s to import: only fitting or loading a recurrent model may pay it
    code = "import sys, prism.forecasters, prism.forecasters.rnn; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_learns_a_noiseless_sine_on_cpu_within_seconds(cell: str) -> None:
    y = _sine(1200)
    started = time.perf_counter()
    model = SequenceRegressor(cell=cell, lookback=72, horizon=36, block=3, hidden_size=16,
                              epochs=30, patience=30, device="cpu", random_state=0)
    model.fit([y[:1000]], freq_s=600)
    assert time.perf_counter() - started < 15  # seconds on a loaded 2-core machine
    ends = np.arange(1000, 1164, 8)
    mean, quantiles = model.predict(np.stack([y[e - 72:e] for e in ends]), steps=36)
    truth = np.stack([y[e:e + 36] for e in ends])
    # amplitude 20: an error under 0.5 is 2.5 % of it (measured ~0.13; the naive forecast's
    # is ~16, the flat level's ~13)
    assert np.abs(mean - truth).mean() < 0.5
    assert mean.shape == (len(ends), 36) and quantiles.shape == (len(ends), 36, len(RNN_LEVELS))


def test_forecaster_learns_a_noiseless_daily_sine() -> None:
    ts = pd.date_range("2026-01-05", periods=1008 + 144, freq="10min")
    truth = _sine(len(ts), period=144)
    panel = pd.DataFrame({"series_id": "c/all/gpus_in_use", "ts": ts[:1008],
                          "value": truth[:1008]})
    model = get_forecaster("gru", epochs=30, patience=30, random_state=0).fit(panel)
    out = model.predict("1d", (0.1, 0.5, 0.9))
    # 5 % of the amplitude (measured 0.2-0.4 over seeds; the flat level's error is ~13)
    assert np.abs(out["mean"].to_numpy() - truth[1008:]).mean() < 1.0
    assert (out["p90"] >= out["p10"]).all()


def test_mean_is_the_median_and_quantiles_never_cross() -> None:
    rng = np.random.default_rng(1)
    y = _sine(600) + rng.normal(0, 5, 600)
    model = SequenceRegressor(lookback=36, horizon=12, hidden_size=8, epochs=3,
                              device="cpu").fit([y], freq_s=600)
    mean, quantiles = model.predict(np.stack([y[e - 36:e] for e in (100, 300, 600)]))
    np.testing.assert_array_equal(mean, quantiles[:, :, RNN_LEVELS.index(0.5)])
    assert (np.diff(quantiles, axis=2) >= 0).all()


def test_same_seed_same_forecast_other_seed_differs() -> None:
    panel = _panel()
    first = GruForecaster(**TINY, random_state=7).fit(panel).predict(12, (0.1, 0.9))
    again = GruForecaster(**TINY, random_state=7).fit(panel).predict(12, (0.1, 0.9))
    other = GruForecaster(**TINY, random_state=8).fit(panel).predict(12, (0.1, 0.9))
    pd.testing.assert_frame_equal(first, again, check_exact=True)
    assert not np.array_equal(first["mean"].to_numpy(), other["mean"].to_numpy())


@pytest.mark.parametrize("cls", [GruForecaster, LstmForecaster])
def test_pickle_round_trip_is_bit_identical(cls: type[GruForecaster]) -> None:
    panel = _panel()
    model = cls(**TINY).fit(panel)
    expected = model.predict("1d", (0.05, 0.5, 0.95))
    blob = pickle.dumps(model)
    loaded = pickle.loads(blob)
    assert "_net" not in vars(pickle.loads(pickle.dumps(model.regressor_)))  # weights only
    pd.testing.assert_frame_equal(loaded.predict("1d", (0.05, 0.5, 0.95)), expected,
                                  check_exact=True)
    copied = model.copy()
    pd.testing.assert_frame_equal(copied.predict("1d", (0.05, 0.5, 0.95)), expected,
                                  check_exact=True)


def test_torch_global_state_is_left_as_it_was() -> None:
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.manual_seed(1234)
    rng_before = torch.get_rng_state().clone()
    y = _sine(400)
    model = SequenceRegressor(lookback=36, horizon=12, hidden_size=4, epochs=2,
                              device="cpu", num_threads=1).fit([y], freq_s=600)
    model.predict(y[None, -36:])
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == deterministic
    assert torch.equal(torch.get_rng_state(), rng_before)  # seeding happened in a fork


def test_instance_normalisation_makes_forecasts_affine_in_the_context() -> None:
    rng = np.random.default_rng(2)
    y = _sine(800) + rng.normal(0, 4, 800)
    model = SequenceRegressor(lookback=36, horizon=12, hidden_size=8, epochs=3,
                              device="cpu").fit([y], freq_s=600)
    ctx = np.stack([y[e - 36:e] for e in (200, 500)])
    mean, quantiles = model.predict(ctx)
    mean2, quantiles2 = model.predict(3.0 * ctx + 100.0)
    np.testing.assert_allclose(mean2, 3.0 * mean + 100.0, rtol=1e-5)
    np.testing.assert_allclose(quantiles2, 3.0 * quantiles + 100.0, rtol=1e-5)
    # a flat context does not blow up: its forecast stays near its level
    flat_mean, flat_q = model.predict(np.full((1, 36), 42.0))
    assert np.isfinite(flat_q).all() and np.abs(flat_mean - 42.0).max() < 5.0


def test_longer_horizons_roll_forward_on_the_median() -> None:
    y = _sine(600)
    seconds = START + 600 * np.arange(600)
    model = SequenceRegressor(lookback=36, horizon=12, hidden_size=8, epochs=3,
                              device="cpu").fit([y], [seconds], freq_s=600)
    ctx, end = y[None, -36:], seconds[-1:]
    one, one_q = model.predict(ctx, end)
    long, long_q = model.predict(ctx, end, steps=30)
    assert long.shape == (1, 30) and long_q.shape == (1, 30, len(RNN_LEVELS))
    np.testing.assert_array_equal(long[:, :12], one)
    # the second chunk is the forecast from the context extended by the first median chunk
    ext = np.concatenate([ctx, one], axis=1)[:, -36:]
    two, _ = model.predict(ext, end + 12 * 600)
    np.testing.assert_allclose(long[:, 12:24], two, rtol=1e-12)


def test_short_contexts_are_padded_and_short_series_rejected() -> None:
    y = _sine(300)
    model = SequenceRegressor(lookback=36, horizon=12, hidden_size=4, epochs=2,
                              device="cpu").fit([y], freq_s=600)
    short, _ = model.predict(y[None, -5:])
    padded, _ = model.predict(np.concatenate([np.full(31, y[-5]), y[-5:]])[None, :])
    np.testing.assert_array_equal(short, padded)
    with pytest.raises(DataContractError, match="shorter horizon or more history"):
        SequenceRegressor(lookback=36, horizon=12, device="cpu").fit([y[:12]], freq_s=600)


def test_early_stopping_keeps_the_best_validation_epoch() -> None:
    rng = np.random.default_rng(3)
    y = rng.normal(50, 10, 1500)  # noise: validation stops improving early
    model = SequenceRegressor(lookback=36, horizon=12, hidden_size=16, epochs=40, patience=2,
                              learning_rate=3e-2, device="cpu").fit([y], freq_s=600)
    val = [v for _, v in model.history_]
    assert len(val) < 40
    assert model.best_epoch_ == int(np.argmin(val)) + 1
    assert len(val) - model.best_epoch_ == 3  # patience 2: stopped on the third stale epoch


def test_errors_say_what_is_wrong() -> None:
    y = _sine(300)
    with pytest.raises(NotFittedError):
        SequenceRegressor().predict(y[None, -36:])
    with pytest.raises(ConfigError, match="'gru' or 'lstm'"):
        SequenceRegressor(cell="rnn").fit([y], freq_s=600)
    with pytest.raises(ConfigError, match="include 0.5"):
        SequenceRegressor(levels=(0.1, 0.9)).fit([y], freq_s=600)
    with pytest.raises(DataContractError, match="finite"):
        SequenceRegressor(lookback=36, horizon=12).fit([np.array([1.0, np.nan, 2.0])],
                                                       freq_s=600)
    model = SequenceRegressor(lookback=36, horizon=12, hidden_size=4, epochs=1, device="cpu")
    model.fit([y], [START + 600 * np.arange(300)], freq_s=600)
    with pytest.raises(ConfigError, match="context_end_seconds"):
        model.predict(y[None, -36:])
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device"):
            SequenceRegressor(device="cuda").fit([y], freq_s=600)


def test_auto_device_resolves_in_fit() -> None:
    model = SequenceRegressor(lookback=36, horizon=12, hidden_size=4, epochs=1, device="auto")
    assert not hasattr(model, "device_")
    model.fit([_sine(300)], freq_s=600)
    assert model.device_ == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.gpu
def test_fits_and_forecasts_on_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here (torch.cuda.is_available() is False): the CUDA path "
                    "runs on a GPU machine with `pytest -m gpu`; the CPU path is tested above")
    panel = _panel()
    first = GruForecaster(**TINY, device="cuda").fit(panel)
    assert first.regressor_.device_ == "cuda"
    expected = first.predict(12, (0.1, 0.9))
    again = GruForecaster(**TINY, device="cuda").fit(panel).predict(12, (0.1, 0.9))
    pd.testing.assert_frame_equal(expected, again)
    loaded = pickle.loads(pickle.dumps(first))
    pd.testing.assert_frame_equal(loaded.predict(12, (0.1, 0.9)), expected, check_exact=True)
    values = panel["value"]
    low, high = values.min() - values.std(), values.max() + values.std()
    assert expected["mean"].between(low, high).all()  # a forecast in the data's range
