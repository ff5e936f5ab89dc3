"""The shapes benchmark: its generated shapes are what they say, and a smoke run end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evaluation.benchmarks import shapes


def test_the_generated_shapes_are_what_they_say() -> None:
    panels = shapes.make_panels(seed=7, per_shape=2)
    assert set(panels) == set(shapes.PANELS)
    assert set(shapes.shape_of(panels["10min-apps"]["series_id"])) == {"autoscaled", "manual"}
    ten = pd.concat([panels["10min"], panels["10min-apps"]], ignore_index=True)
    kinds = shapes.shape_of(ten["series_id"])
    assert set(kinds) == {"idle", "bursts", "weekly", "sawtooth", "autoscaled", "manual"}
    idle = ten.loc[kinds == "idle", "value"].to_numpy()
    assert (idle % 8 == 0).all() and (idle == 0).mean() > 0.5  # idle VCs with 8-GPU jobs
    weekly = ten[kinds == "weekly"].set_index("ts").groupby("series_id")["value"]
    for _, series in weekly:
        monday, sunday = series.loc["2026-01-12 13:00"], series.loc["2026-01-11 13:00"]
        assert monday - sunday > 100  # a weekday plateau, a weekend floor
    days = ten.assign(day=ten["ts"].dt.floor("1D"))
    for kind, cycles in (("autoscaled", True), ("manual", False)):
        apps = days[kinds == kind]
        # whole replicas; an autoscaled app moves within nearly every day (a daily cycle),
        # a hand-sized one holds still through most days
        assert (apps["value"] > 0).all() and (apps["value"] == np.round(apps["value"])).all()
        within = apps.groupby(["series_id", "day"])["value"].nunique()
        assert ((within > 1).mean() > 0.9) == cycles
    assert set(shapes.shape_of(panels["5min"]["series_id"])) == {"counts"}
    counts = panels["5min"]["value"].to_numpy()
    assert (counts == np.round(counts)).all() and (counts >= 0).all()
    steps = panels["1h"].groupby("series_id")["ts"].diff().dropna()
    assert (steps == pd.Timedelta("1h")).all()
    second = panels["10min-b"].assign(shape=shapes.shape_of(panels["10min-b"]["series_id"]))
    assert set(second["shape"]) == {"growth", "stairs", "drains"}
    for sid, series in second.groupby("series_id"):
        v, kind = series["value"].to_numpy(), series["shape"].iloc[0]
        first, last = v[:144].mean(), v[-144:].mean()
        if kind == "growth":  # grows 1-3 % a day, or shrinks half as fast: 13-110 % in 27 days
            assert abs(last / first - 1) > 0.1, sid
        elif kind == "stairs":  # whole GPUs held for hours, moving in steps
            moves = np.flatnonzero(np.diff(v))
            assert (v == np.round(v)).all() and 10 < len(moves) < 144, sid
        else:  # drains: near the quota, now and then far below it
            assert np.median(v) > 100 and (v < 0.65 * np.median(v)).mean() > 0.005, sid
    again = shapes.make_panels(seed=7, per_shape=2)
    pd.testing.assert_frame_equal(again["10min"], panels["10min"])  # seeded


def test_quick_run_scores_every_shape_against_the_last_value(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert shapes.main(["--quick", "--seeds", "1", "--models", "seasonal_naive",
                        "--output", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "shapes.csv")
    assert set(table["shape"]) == set(shapes.SHAPES)
    assert set(table["horizon"]) == set(shapes.HORIZONS)
    naive = table[(table["model"] == "naive") & table["avg_rel_mae"].notna()]
    assert len(naive) >= 15 and (naive["avg_rel_mae"] == 1.0).all()
    other = table[table["model"] == "seasonal_naive"]
    assert other["avg_rel_mae"].notna().sum() >= 15
    # the daily season of a weekday plateau is a catastrophe on Mondays' and Saturdays' eves
    weekly = other[(other["shape"] == "weekly") & (other["horizon"] == "1d")].iloc[0]
    assert weekly["avg_rel_mae"] > 1.0
    report = (tmp_path / "shapes.md").read_text()
    assert "| shape | horizon | `seasonal_naive` |" in report
    assert "seed 1 10min: 4 series" in capsys.readouterr().out  # a progress line per panel
    with pytest.raises(SystemExit):
        shapes.main(["--quick", "--seeds", "one", "--output", str(tmp_path)])
    assert shapes.main(["--quick", "--models", "prism-nothing", "--output", str(tmp_path)]) == 2
    assert "prism-week" in capsys.readouterr().err  # the variants it could have named
    with pytest.raises(SystemExit):
        shapes.main(["--quick", "--panels", "10min-c", "--output", str(tmp_path)])
    assert "choose among 10min, 10min-apps" in capsys.readouterr().err
    assert shapes.main(["--quick", "--seeds", "1", "--panels", "10min-b", "--models",
                        "seasonal_naive",
                        "--output", str(tmp_path / "b")]) == 0
    assert set(pd.read_csv(tmp_path / "b" / "shapes.csv")["shape"]) == {
        "growth", "stairs", "drains"}
