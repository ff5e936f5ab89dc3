"""The short-history bands benchmark (evaluation/benchmarks/short_history.py), run as a user
runs it, on its smallest setting."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evaluation.benchmarks import short_history as sh
from prism.forecasters import conformal


def test_cut_leaves_the_days_asked_before_the_first_cutoff() -> None:
    ts = pd.date_range("2026-01-05", periods=28 * 144, freq="10min")
    panel = pd.DataFrame({"series_id": "a/b/gpus_in_use", "ts": ts, "value": 1.0})
    out = sh.cut(panel, 3)
    # 3 days, then the 3 steps of 6 h between the cutoffs, then a day ahead of the last
    assert len(out) == 3 * 144 + 3 * 36 + 144


def test_run_writes_both_variants_per_horizon(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert sh.main(["--days", "2", "--seeds", "1", "--models", "naive",
                    "--output", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "short_history.csv")
    assert set(table["horizon"]) == {"1h", "6h", "1d"}
    assert set(table["variant"]) == {"gate", "no gate"}
    assert ((table["coverage_90"] >= 0) & (table["coverage_90"] <= 1)).all()
    assert (table["windows"] == 18 * sh.WINDOWS).all()  # 6 shapes x 3 series, 4 cutoffs
    # the rule is restored after the run
    assert conformal.MIN_BLOCK_WINDOWS == 6
    assert "| 1d | `naive` | gate |" in (tmp_path / "short_history.md").read_text()
    assert "2 d" in capsys.readouterr().out


def test_bad_days_are_refused_by_name() -> None:
    with pytest.raises(SystemExit):
        sh.main(["--days", "1"])
    with pytest.raises(SystemExit):
        sh.main(["--days", "three"])
