"""The model registry: save, list, load bit for bit, refuse altered files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.errors import ConfigError
from prism.forecasters import get_forecaster
from prism.registry import ModelRecord, list_models, load_model, prune_models, save_model
from prism.usecases.forecast import prune_models as prune_registry


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
    # the one saved last, even within the same second (ids then sorted at random)
    assert record.model_id == second.model_id and record.created > first.created
    assert [r.model_id for r in list_models(tmp_path, alias="window_average")]
    for n in range(5):  # a refit saved just after a fit is the newest, every time
        folder = tmp_path / f"again{n}"
        save_model(get_forecaster("naive").fit(panel), folder)
        last = save_model(get_forecaster("naive").fit(panel.iloc[:-10]), folder)
        assert list_models(folder)[0].model_id == last.model_id


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


def _saved_at(model: object, root: Path, created: str) -> ModelRecord:
    """Save a model as if at ``created`` (saves within one second would tie)."""
    record = save_model(model, root)  # type: ignore[arg-type]
    meta = Path(record.path) / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "created": created}))
    return record


def test_prune_keeps_the_newest_models_of_each_series(tmp_path: Path,
                                                      panel: pd.DataFrame) -> None:
    one = panel[panel["series_id"] == "c/vc0/gpus_in_use"]
    naive, average = get_forecaster("naive"), get_forecaster("window_average")
    oldest = _saved_at(naive.fit(panel), tmp_path, "2026-03-01T00:00:00+00:00")
    both = _saved_at(naive.fit(panel), tmp_path, "2026-03-02T00:00:00+00:00")
    newest = _saved_at(naive.fit(one), tmp_path, "2026-03-03T00:00:00+00:00")
    other = _saved_at(average.fit(panel), tmp_path, "2026-03-01T00:00:00+00:00")
    everything = {r.model_id for r in list_models(tmp_path)}
    # keep 2: vc1 has only two naive models, so the oldest still serves it
    assert prune_models(tmp_path, keep=2) == []
    planned = prune_models(tmp_path, dry_run=True)
    assert [r.model_id for r in planned] == [oldest.model_id]
    assert {r.model_id for r in list_models(tmp_path)} == everything  # a dry run
    removed = prune_registry(tmp_path)
    assert list(removed["model_id"]) == [oldest.model_id]
    assert list(removed["path"]) == [oldest.path] and not Path(oldest.path).exists()
    assert {r.model_id for r in list_models(tmp_path)} == {both.model_id, newest.model_id,
                                                           other.model_id}
    assert prune_models(tmp_path) == []  # the newest of each series and alias stays
    _, again = load_model(tmp_path, "naive")
    assert again.model_id == newest.model_id
    with pytest.raises(ConfigError, match="keep at least the newest"):
        prune_models(tmp_path, keep=0)


def test_models_prune_command(tmp_path: Path, panel: pd.DataFrame,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from prism.cli import main

    naive = get_forecaster("naive")
    old = _saved_at(naive.fit(panel), tmp_path, "2026-03-01T00:00:00+00:00")
    new = _saved_at(naive.fit(panel), tmp_path, "2026-03-02T00:00:00+00:00")
    assert main(["models", "prune", "--models-dir", str(tmp_path), "--dry-run"]) == 0
    assert "would remove 1 models" in capsys.readouterr().out
    assert Path(old.path).exists()
    assert main(["models", "prune", "--models-dir", str(tmp_path), "--json"]) == 0
    assert [r["model_id"] for r in json.loads(capsys.readouterr().out)] == [old.model_id]
    assert not Path(old.path).exists() and Path(new.path).exists()
    assert main(["models", "prune", "--models-dir", str(tmp_path)]) == 0
    assert "nothing to prune" in capsys.readouterr().out
    assert main(["models", "prune", "--models-dir", str(tmp_path), "--keep", "0"]) != 0
    assert "keep at least the newest" in capsys.readouterr().err
