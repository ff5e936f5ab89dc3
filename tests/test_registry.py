"""The model registry: save, list, load bit for bit, refuse altered files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.errors import ConfigError
from prism.forecasters import get_forecaster
from prism.registry import list_models, load_model, save_model


@pytest.fixture
def panel() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    ts = pd.date_range("2026-03-02", periods=144 * 6, freq="10min")
    return pd.concat([pd.DataFrame({"series_id": f"c/vc{i}/gpus_in_use", "ts": ts,
                                    "value": 30 + 5 * i + rng.normal(0, 2, len(ts))})
                      for i in range(2)], ignore_index=True)


@pytest.mark.parametrize("alias", ["seasonal_naive", "prism", "ets"])
def test_a_loaded_model_forecasts_bit_for_bit(tmp_path: Path, panel: pd.DataFrame,
                                              alias: str) -> None:
    params = {"use_rnn": False} if alias == "prism" else {}
    model = get_forecaster(alias, **params).fit(panel)
    before = model.predict("6h", (0.1, 0.5, 0.9))
    record = save_model(model, tmp_path)
    loaded, again = load_model(tmp_path, record.model_id)
    pd.testing.assert_frame_equal(loaded.predict("6h", (0.1, 0.5, 0.9)), before, check_exact=True)
    assert again.model_id == record.model_id and again.alias == alias
    assert again.series_ids == ["c/vc0/gpus_in_use", "c/vc1/gpus_in_use"]
    assert again.data_start == "2026-03-02T00:00:00" and again.freq_s == 600
    assert again.params == {k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in model.get_params().items()}
    assert again.metrics["calibration_mae_1step"] > 0
    assert {"python", "prism", "numpy", "pandas"} <= set(again.libraries)


def test_newest_of_an_alias_and_listing(tmp_path: Path, panel: pd.DataFrame) -> None:
    first = save_model(get_forecaster("naive").fit(panel), tmp_path)
    second = save_model(get_forecaster("naive").fit(panel.iloc[:-10]), tmp_path)
    save_model(get_forecaster("window_average").fit(panel), tmp_path)
    assert [r.alias for r in list_models(tmp_path)].count("naive") == 2
    _, record = load_model(tmp_path, "naive")
    assert record.model_id in (first.model_id, second.model_id)
    assert record.created >= first.created
    assert [r.model_id for r in list_models(tmp_path, alias="window_average")]


def test_altered_or_unknown_models_are_refused(tmp_path: Path, panel: pd.DataFrame) -> None:
    record = save_model(get_forecaster("naive").fit(panel), tmp_path)
    pkl = Path(record.path) / "model.pkl"
    pkl.write_bytes(pkl.read_bytes()[:-5])
    with pytest.raises(ConfigError, match="sha256"):
        load_model(tmp_path, record.model_id)
    with pytest.raises(ConfigError, match="no model 'prophet'"):
        load_model(tmp_path, "prophet")
    meta = Path(record.path) / "meta.json"
    meta.write_text(json.dumps({"format": "other"}))
    assert list_models(tmp_path) == []  # unreadable entries are skipped, not fatal
