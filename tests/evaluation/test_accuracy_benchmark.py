"""The accuracy benchmark: a smoke run end to end, the PRISM variants, the targets' verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pytest

from evaluation.benchmarks import accuracy
from prism.errors import ConfigError


def test_quick_run_writes_the_tables_with_naive_as_the_exact_baseline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    assert accuracy.main(["--quick", "--datasets", "philly", "--models", "seasonal_naive",
                          "--jobs", "2", "--output", str(out)]) == 0
    table = pd.read_csv(out / "accuracy.csv")
    assert list(table.columns) == ["dataset", "horizon", "model", *accuracy.TABLE_COLUMNS]
    assert set(table["horizon"]) == {"1h", "6h", "1d", "1d-daily"}
    assert table["model"].tolist()[:2] == ["naive", "seasonal_naive"]  # naive always runs
    naive = table[table["model"] == "naive"]
    assert (naive[["avg_rel_mae", "lo", "hi"]] == 1.0).all().all()
    assert (naive["catastrophes"] == 0.0).all()
    assert (table["seconds_per_window"] > 0).all()
    by_horizon = table.drop_duplicates("horizon").set_index("horizon")["windows"]
    assert by_horizon["1d"] == accuracy.QUICK_WINDOWS and by_horizon["1d-daily"] == 1
    windows = pd.read_csv(out / "accuracy_windows.csv")
    # the horizons are the first 6, 36 and 144 steps of the same day-ahead forecasts
    assert windows.groupby("horizon")["n"].unique().map(list).to_dict() == {
        "1h": [6], "6h": [36], "1d": [144], "1d-daily": [144]}
    assert (windows.loc[windows["model"] == "naive", "rel_mae"] == 1.0).all()
    assert windows["cutoff"].nunique() == accuracy.QUICK_WINDOWS
    assert pd.read_csv(out / "accuracy_ablations.csv").empty  # prism did not run
    report = (out / "accuracy.md").read_text()
    assert "## AvgRelMAE [lo, hi] by panel and horizon" in report
    assert "| model | philly 1h | philly 6h | philly 1d | philly 1d-daily |" in report
    assert "## Targets" in report and "**SKIP** (1)" in report
    assert "## philly" in report
    printed = capsys.readouterr().out
    assert "philly         naive" in printed  # a progress line per task
    assert "1.000 [1.00, 1.00]" in printed  # the headline table


def test_before_runs_the_same_protocol_on_an_earlier_week(tmp_path: Path) -> None:
    latest, earlier = tmp_path / "latest", tmp_path / "earlier"
    for out, extra in ((latest, []), (earlier, ["--before", "7d"])):
        assert accuracy.main(["--quick", "--datasets", "philly", "--models", "naive",
                              "--jobs", "1", "--output", str(out), *extra]) == 0
    cutoffs = [pd.to_datetime(pd.read_csv(out / "accuracy_windows.csv")["cutoff"]).unique()
               for out in (latest, earlier)]
    assert len(cutoffs[1]) == accuracy.QUICK_WINDOWS
    assert sorted(cutoffs[0] - pd.Timedelta(days=7)) == sorted(cutoffs[1])
    assert "--before 7d" in (earlier / "accuracy.md").read_text()
    with pytest.raises(SystemExit):  # argparse's error: exit status 2 and the message
        accuracy.main(["--quick", "--datasets", "philly", "--before", "a week",
                       "--output", str(tmp_path / "bad")])


def test_end_before_drops_each_series_own_tail() -> None:
    ts = pd.date_range("2026-01-01", periods=10, freq="1h")
    panel = pd.concat([pd.DataFrame({"series_id": "a", "ts": ts, "value": 1.0}),
                       pd.DataFrame({"series_id": "b", "ts": ts[:6], "value": 2.0})])
    kept = accuracy.end_before(panel, pd.Timedelta("2h"))
    assert kept.groupby("series_id")["ts"].max().to_dict() == {"a": ts[7], "b": ts[3]}
    assert len(kept) == 8 + 4


class _Stand:
    """A stand-in for PRISM's forecaster: two switches and a combiner."""

    def __init__(self, *, use_rnn: bool = True, use_extra: bool = False,
                 combiner: Literal["stacked", "recent", "mean"] = "stacked",
                 n_atoms: int = 8) -> None:
        self.use_rnn, self.use_extra, self.combiner, self.n_atoms = (
            use_rnn, use_extra, combiner, n_atoms)

    def get_params(self) -> dict[str, Any]:
        return {"use_rnn": self.use_rnn, "use_extra": self.use_extra,
                "combiner": self.combiner, "n_atoms": self.n_atoms}


class _Documented(_Stand):
    """Stand-in whose combiner values are only documented.

    Args:
        combiner: ``"stacked"`` (the default) or ``"recent"``
            (the earlier one, for the ablation).
        n_atoms: not ``"this"``.
    """

    def __init__(self, *, combiner: str = "stacked") -> None:
        super().__init__()
        self.combiner = combiner  # type: ignore[assignment]


def test_prism_variants_flip_each_switch_and_try_each_other_combiner() -> None:
    assert accuracy.prism_variants(_Stand) == {
        "prism": {},
        "prism-rnn": {"use_rnn": False},
        "prism+extra": {"use_extra": True},
        "prism@recent": {"combiner": "recent"},
        "prism@mean": {"combiner": "mean"},
    }
    assert accuracy.prism_variants(_Documented)["prism@recent"] == {"combiner": "recent"}
    assert "prism@this" not in accuracy.prism_variants(_Documented)
    specs = accuracy.model_specs(["prism-rnn", "ets"], accuracy.prism_variants(_Stand))
    assert specs == {"naive": ("naive", {}), "prism-rnn": ("prism", {"use_rnn": False}),
                     "ets": ("ets", {})}
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        accuracy.model_specs(["nope"], {"prism": {}})


def _row(dataset: str, horizon: str, model: str, value: float, hi: float,
         catastrophes: float = 0.0, coverage: float = 0.9) -> dict[str, Any]:
    return {"dataset": dataset, "horizon": horizon, "model": model, "avg_rel_mae": value,
            "lo": value - 0.05, "hi": hi, "catastrophes": catastrophes,
            "coverage_90": coverage}


def test_targets_pass_and_fail_on_a_hand_made_table() -> None:
    rows = []
    for horizon in ("1h", "6h", "1d"):
        rows += [_row("philly", horizon, "naive", 1.0, 1.0),
                 _row("philly", horizon, "prism", 0.9, 0.97),
                 _row("helios_in_use", horizon, "naive", 1.0, 1.0),
                 _row("helios_in_use", horizon, "prism", 0.95, 1.02)]
    rows.append(_row("philly", "1d-daily", "prism", 1.5, 2.0, 0.5, 0.1))  # a view: not judged
    verdicts = [v for _, v, _ in accuracy.check_targets(pd.DataFrame(rows))]
    assert verdicts == ["PASS", "PASS", "PASS", "PASS", "PASS"]
    rows += [_row("philly", "6h", "ets", 0.85, 0.9),        # beats prism by more than 1 %
             _row("helios_in_use", "1d", "gbm", 0.945, 0.99)]  # within 1 %: still fine
    rows[3] = _row("helios_in_use", "1h", "prism", 1.01, 1.1, catastrophes=0.03,
                   coverage=0.85)
    rows[5] = _row("philly", "6h", "prism", 0.9, 0.97)
    rows[9] = _row("philly", "1d", "prism", 0.99, 1.01)  # mean a day ahead 0.97, hi >= 1
    result = accuracy.check_targets(pd.DataFrame(rows))
    assert [v for _, v, _ in result] == ["FAIL", "FAIL", "FAIL", "FAIL", "FAIL"]
    assert "helios_in_use 1h: 1.010" in result[0][2]
    assert "philly 6h: 0.900, best ets" in result[2][2]
    assert "helios_in_use 1d" not in result[2][2]
    no_prism = pd.DataFrame([_row("philly", "1h", "naive", 1.0, 1.0)])
    assert {v for _, v, _ in accuracy.check_targets(no_prism)} == {"SKIP"}
