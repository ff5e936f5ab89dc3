"""The accuracy benchmark: a smoke run end to end, the PRISM variants, the targets' verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pytest

from evaluation.benchmarks import accuracy
from prism.errors import ConfigError


@pytest.mark.slow
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


def test_reuse_takes_the_models_a_run_leaves_out_from_an_earlier_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A change to one model need not rerun the others: a run of naive alone that reuses a
    # run of seasonal naive and window average scores them exactly as that run did.
    first, again = tmp_path / "first", tmp_path / "again"
    quick = ["--quick", "--datasets", "philly", "--jobs", "1"]
    assert accuracy.main([*quick, "--models", "seasonal_naive,window_average",
                          "--output", str(first)]) == 0
    assert accuracy.main([*quick, "--models", "window_average", "--reuse", str(first),
                          "--output", str(again)]) == 0
    old, new = (pd.read_csv(d / "accuracy.csv") for d in (first, again))
    assert new["model"].tolist() == old["model"].tolist()  # naive, seasonal_naive, window_...
    numbers = [c for c in accuracy.TABLE_COLUMNS if c != "seconds_per_window"]
    pd.testing.assert_frame_equal(new[numbers], old[numbers], rtol=1e-5)
    reused = new["model"] == "seasonal_naive"  # its seconds come with it; window_average ran
    assert (new.loc[reused, "seconds_per_window"] == old.loc[reused, "seconds_per_window"]).all()
    assert "reusing seasonal_naive from" in (again / "accuracy.md").read_text()
    # a run on other cutoffs cannot be mixed in: the run stops and says why
    capsys.readouterr()
    with pytest.raises(SystemExit):
        accuracy.main([*quick, "--before", "1d", "--models", "naive", "--reuse", str(first),
                       "--output", str(tmp_path / "mixed")])
    err = capsys.readouterr().err
    assert "seasonal_naive on philly" in err and "other series or cutoffs" in err
    with pytest.raises(SystemExit):
        accuracy.main([*quick, "--reuse", str(tmp_path / "nowhere")])
    assert "accuracy_windows.csv" in capsys.readouterr().err


def test_reuse_takes_prism_variants_only_with_their_prism(tmp_path: Path) -> None:
    for name, models in (("a", ["prism", "prism-jumps", "gbm"]), ("b", ["prism-gbm", "ets"])):
        (tmp_path / name).mkdir()
        frame = pd.DataFrame({"dataset": "philly", "horizon": "1h", "model": models,
                              "series_id": "s", "cutoff": "2026-01-01", "mae": 1.0,
                              "rel_mae": 1.0})
        frame.to_csv(tmp_path / name / "accuracy_windows.csv", index=False)
        frame.assign(seconds_per_window=2.0).to_csv(tmp_path / name / "accuracy.csv",
                                                    index=False)
    dirs = [tmp_path / "a", tmp_path / "b"]
    rows, seconds = accuracy.reuse(dirs, ["naive"])
    assert set(rows["model"]) == {"prism", "prism-jumps", "gbm", "ets"}  # b's variant: no
    assert seconds[("philly", "ets")] == 2.0 and "rel_mae" not in rows
    rows, _ = accuracy.reuse(dirs, ["naive", "prism"])  # prism reruns: none of its variants
    assert set(rows["model"]) == {"gbm", "ets"}
    rows, _ = accuracy.reuse(dirs[::-1], ["naive", "gbm"])  # the first directory comes first
    assert set(rows["model"]) == {"ets", "prism", "prism-jumps"}
