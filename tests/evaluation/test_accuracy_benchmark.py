"""The accuracy benchmark's merge and gain table (the backtests themselves are in test_backtest)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evaluation.benchmarks import accuracy


def _run(folder: Path, horizon: str, scores: dict[str, float]) -> None:
    folder.mkdir()
    table = pd.DataFrame([
        {"dataset": "helios_in_use", "horizon": horizon, "model": model, "mase": mase,
         "smape": 10.0, "burst_mse": 2 * mase, "crps": mase / 2, "coverage_90": 0.9,
         "seconds_per_series": 0.1}
        for model, mase in scores.items()])
    table.to_csv(folder / "accuracy.csv", index=False)
    table.assign(window=0).to_csv(folder / "accuracy_windows.csv", index=False)


def test_merge_writes_one_table_and_prisms_gain_over_the_best_other(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path / "6h", "6h", {"prism": 0.8, "naive": 1.0, "ets": 1.25})
    _run(tmp_path / "1d", "1d", {"prism": 1.5, "prism-no_rnn": 0.5, "naive": 1.2})
    out = tmp_path / "merged"
    assert accuracy.main(["--merge", str(tmp_path / "6h"), str(tmp_path / "1d"),
                          "--output", str(out)]) == 0
    table = pd.read_csv(out / "accuracy.csv")
    assert sorted(table["horizon"].unique()) == ["1d", "6h"] and len(table) == 6
    assert len(pd.read_csv(out / "accuracy_windows.csv")) == 6
    gains = accuracy._gain_table(table).set_index("horizon")
    # 6h: best other is naive (1.0), PRISM 0.8 -> 20 % better; 1d: naive 1.2 vs 1.5 -> -25 %;
    # PRISM's own ablations never count as "the best other model".
    assert gains.loc["6h", "best_mase_model"] == "naive"
    assert gains.loc["6h", "mase_gain_%"] == pytest.approx(20.0)
    assert gains.loc["1d", "mase_gain_%"] == pytest.approx(-25.0)
    # a rerun of one model (here PRISM at 6h) replaces its rows, the others stay
    _run(tmp_path / "rerun", "6h", {"prism": 0.5})
    assert accuracy.main(["--merge", str(out), str(tmp_path / "rerun"),
                          "--output", str(tmp_path / "again")]) == 0
    again = pd.read_csv(tmp_path / "again" / "accuracy.csv").set_index(["horizon", "model"])
    assert len(again) == 6 and again.loc[("6h", "prism"), "mase"] == 0.5
    assert again.loc[("6h", "ets"), "mase"] == 1.25
    assert len(pd.read_csv(tmp_path / "again" / "accuracy_windows.csv")) == 6
    report = (out / "accuracy.md").read_text()
    assert "## helios_in_use, horizon 6h" in report and "## helios_in_use, horizon 1d" in report
    assert "2 runs merged" in report
    assert "| model | helios_in_use 6h | helios_in_use 1d |" in report  # the MASE pivot
    assert "-25.0" in capsys.readouterr().out
