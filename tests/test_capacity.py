"""Capacity arithmetic on hand-made forecasts: exact shortfall, idle hours, energy, advice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prism.capacity import (
    Reservation,
    Watts,
    apply_what_if,
    exceed_probability,
    expected_above,
    expected_below,
    expected_value,
    parse_reservation,
    parse_watts,
    plan_capacity,
    quantile_at,
    read_capacity_table,
    read_reservations,
    recommend,
    reservation_load,
)
from prism.errors import ConfigError, DataContractError, IngestError

T0 = pd.Timestamp("2026-01-12 00:00")


def forecast(series_id: str, columns: dict[str, list[float]], *, freq: str = "1h",
             mean: list[float] | None = None) -> pd.DataFrame:
    """A forecast contract frame with the given quantile columns."""
    n = len(next(iter(columns.values())))
    frame = pd.DataFrame({"series_id": series_id,
                          "ts": pd.date_range(T0, periods=n, freq=freq), "model": "hand"})
    frame["mean"] = mean if mean is not None else next(iter(columns.values()))
    for name, values in columns.items():
        frame[name] = values
    return frame


def test_point_forecast_has_exact_shortfall_idle_and_energy() -> None:
    # one quantile column: a point forecast; 1-hour steps of 10, 20 and 30 GPUs against 25
    fc = forecast("c/vc1/gpu_demand", {"p95": [10.0, 20.0, 30.0]})
    plan = plan_capacity(fc, {"vc1": 25.0}, quantile=0.95, freq_s=3600,
                         watts=Watts(idle=50, busy=250), capacity_source={"vc1": "file"})
    [row] = plan.rows
    assert row.gpus_needed == 30 and row.mean_peak == 30
    assert row.shortfall_gpu_hours == pytest.approx(5.0)  # 30 - 25 in the last hour
    assert row.idle_gpu_hours == pytest.approx(15.0 + 5.0)  # 25 - 10, 25 - 20
    assert row.queue_risk == 1.0 and row.queue_hours == pytest.approx(1.0)
    assert row.demand_gpu_hours == pytest.approx(60.0)
    assert row.idle_energy_kwh == pytest.approx(20 * 50 / 1000)
    assert row.busy_energy_kwh == pytest.approx((60 - 5) * 250 / 1000)  # served: min(D, 25)
    # a lone VC: the cluster adds what it lacks, and the VC takes them
    assert (row.action, row.add_gpus, row.net_gpus) == ("add", 5, 5)
    assert row.recommendation == "take 5 of the GPUs the cluster adds"
    assert (row.in_use_needed, row.queue_allowance, row.headroom) == (30, 0, -5)
    assert "p95 of demand" in row.reason and "no queue series" in row.reason
    assert row.capacity_source == "file"
    assert row.end - row.start == pd.Timedelta("3h")
    assert plan.steps["needed"].tolist() == [10.0, 20.0, 30.0]
    assert plan.steps["p_exceed"].tolist() == [0.0, 0.0, 1.0]


def test_two_quantiles_give_the_exact_integral_of_the_linear_quantile_function() -> None:
    # Q(u) = 25 for u < 0.25, linear 25 -> 75 up to 0.75, 75 above: E[(D - 50)+] =
    # int_0.5^0.75 (Q - 50) du + 0.25 * 25 = 3.125 + 6.25 = 9.375, and the same idle by symmetry
    levels = [0.25, 0.75]
    values = np.array([[25.0, 75.0]])
    assert expected_above(levels, values, 50)[0] == pytest.approx(9.375)
    assert expected_below(levels, values, 50)[0] == pytest.approx(9.375)
    assert expected_value(levels, values)[0] == pytest.approx(50.0)
    assert exceed_probability(levels, values, 50)[0] == pytest.approx(0.5)
    # above 75 with probability 0.25 (the flat tail); above 74: 0.25 + 0.01
    assert exceed_probability(levels, values, 74)[0] == pytest.approx(0.26)
    assert exceed_probability(levels, values, 75)[0] == 0.0
    assert exceed_probability(levels, values, 24.9)[0] == 1.0
    fc = forecast("c/vc1/gpu_demand", {"p25": [25.0] * 6, "p75": [75.0] * 6}, freq="10min")
    [row] = plan_capacity(fc, {"vc1": 50.0}, quantile=0.75, freq_s=600).rows
    assert row.shortfall_gpu_hours == pytest.approx(6 * 9.375 / 6)  # six 10-minute steps
    assert row.idle_gpu_hours == pytest.approx(9.375)
    assert row.gpus_needed == 75.0
    # a quantile between the columns is interpolated: p50 of this forecast is 50
    assert plan_capacity(fc, {"vc1": 50.0}, quantile=0.5, freq_s=600).rows[0].gpus_needed == 50


def test_expectations_agree_with_a_fine_quadrature() -> None:
    levels = np.array([0.1, 0.5, 0.9, 0.99])
    values = np.array([[3.0, 10.0, 20.0, 40.0], [0.0, 0.0, 5.0, 5.0]])
    u = (np.arange(200_000) + 0.5) / 200_000
    for c in (0.0, 2.0, 5.0, 15.0, 30.0, 45.0):
        for i, row in enumerate(values):
            q = np.interp(u, levels, row)
            assert expected_above(levels, values, c)[i] == pytest.approx(
                np.maximum(q - c, 0).mean(), abs=1e-4)
            assert expected_below(levels, values, c)[i] == pytest.approx(
                np.maximum(c - q, 0).mean(), abs=1e-4)
            assert exceed_probability(levels, values, c)[i] == pytest.approx(
                (q > c).mean(), abs=1e-4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 500), min_size=1, max_size=6), st.floats(0, 600))
def test_shortfall_minus_idle_is_demand_minus_capacity(raw: list[float], c: float) -> None:
    values = np.sort(np.array([raw]), axis=1)
    levels = np.linspace(0.05, 0.95, values.shape[1])
    above, below = expected_above(levels, values, c)[0], expected_below(levels, values, c)[0]
    assert above >= 0 and below >= 0
    assert above - below == pytest.approx(expected_value(levels, values)[0] - c, abs=1e-6)
    assert 0 <= exceed_probability(levels, values, c)[0] <= 1
    assert expected_above(levels, values, c + 1)[0] <= above + 1e-9


def test_reservations_count_by_overlap_and_for_all() -> None:
    ts = pd.date_range(T0, periods=4, freq="10min")
    job = Reservation(scope="vc1", start=T0 + pd.Timedelta("5min"),
                      end=T0 + pd.Timedelta("25min"), gpus=8)
    other = Reservation(scope="vc1", start=T0, end=T0 + pd.Timedelta("1h"), gpus=100,
                        cluster="elsewhere")
    assert reservation_load([job, other], scope="vc1", ts=ts, freq_s=600,
                            cluster="c").tolist() == [4.0, 8.0, 4.0, 0.0]
    assert reservation_load([job], scope="all", ts=ts, freq_s=600).tolist() == [4, 8, 4, 0]
    assert reservation_load([job], scope="vc2", ts=ts, freq_s=600).tolist() == [0, 0, 0, 0]


def test_growth_and_reservations_move_every_quantile() -> None:
    fc = forecast("c/vc1/gpu_demand", {"p50": [10.0, 10.0], "p90": [20.0, 30.0]})
    job = Reservation(scope="vc1", start=T0, end=T0 + pd.Timedelta("30min"), gpus=4)
    out = apply_what_if(fc, freq_s=3600, growth=1.5, reservations=[job])
    assert out["p50"].tolist() == [17.0, 15.0] and out["p90"].tolist() == [32.0, 45.0]
    assert out["mean"].tolist() == [17.0, 15.0] and out["reserved"].tolist() == [2.0, 0.0]
    plan = plan_capacity(fc, {"vc1": 40.0}, quantile=0.9, freq_s=3600, growth=1.5,
                         reservations=[job])
    assert plan.rows[0].gpus_needed == 45.0 and plan.rows[0].reserved_gpu_hours == 2.0
    assert plan.rows[0].add_gpus == 5
    with pytest.raises(ConfigError, match="growth"):
        apply_what_if(fc, freq_s=3600, growth=0)


@pytest.mark.parametrize(("needed", "capacity", "recent", "expected"), [
    (30.2, 25.0, None, ("add", 6, 0, "add 6 GPUs")),
    (24.5, 25.0, None, ("keep", 0, 0, "keep")),
    (20.0, 30.0, None, ("keep", 0, 0, "keep")),  # spare, but no history to release on
    (20.0, 30.0, 30.0, ("keep", 0, 0, "keep")),  # used over the recent history
    (20.0, 30.0, 28.0, ("release", 0, 2, "release 2 GPUs")),
    (20.0, 30.0, 19.0, ("release", 0, 10, "release 10 GPUs")),
    (5.0, None, None, ("unknown", 0, 0, None)),
])
def test_recommendations_of_a_scope_on_its_own(
        needed: float, capacity: float | None, recent: float | None,
        expected: tuple[str, int, int, str | None]) -> None:
    advice = recommend(needed, capacity, recent_peak=recent)
    assert (advice.action, advice.add_gpus, advice.release_gpus) == expected[:3]
    assert advice.net_gpus == advice.add_gpus - advice.release_gpus
    if expected[3] is not None:
        assert advice.text == expected[3]
    else:
        assert "capacity unknown" in advice.text


def test_plan_without_capacity_and_with_bad_frames() -> None:
    fc = pd.concat([forecast("c/vc1/gpu_demand", {"p50": [1.0], "p90": [2.0]}),
                    forecast("c/all/gpu_demand", {"p50": [3.0], "p90": [4.0]})])
    plan = plan_capacity(fc, {"all": 10.0}, quantile=0.9, freq_s=3600)
    by_scope = {r.scope: r for r in plan.rows}
    assert [r.scope for r in plan.rows] == ["all", "vc1"]
    assert by_scope["vc1"].capacity is None and by_scope["vc1"].shortfall_gpu_hours is None
    assert by_scope["vc1"].action == "unknown"
    # E[D] = 0.5 * 3 + 0.4 * 3.5 + 0.1 * 4 = 3.3 (flat below p50 and above p90)
    assert by_scope["all"].idle_gpu_hours == pytest.approx(10 - 3.3)
    assert list(plan.table()["scope"]) == ["all", "vc1"]
    assert plan.records(steps=True)[0]["steps"][0]["needed"] == 4.0
    two = pd.concat([fc, forecast("d/vc1/gpu_demand", {"p50": [1.0]})])
    with pytest.raises(DataContractError, match="one cluster"):
        plan_capacity(two, {}, quantile=0.9, freq_s=3600)
    with pytest.raises(DataContractError, match="quantile columns"):
        plan_capacity(fc[["series_id", "ts", "model", "mean"]], {}, quantile=0.9, freq_s=3600)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        plan_capacity(fc, {}, quantile=1.5, freq_s=3600)


def test_quantile_at_interpolates_and_holds_the_ends() -> None:
    values = np.array([[10.0, 20.0]])
    assert quantile_at([0.5, 0.9], values, 0.7)[0] == pytest.approx(15.0)
    assert quantile_at([0.5, 0.9], values, 0.99)[0] == 20.0
    assert quantile_at([0.5, 0.9], values, 0.5)[0] == 10.0


def test_reservations_file_and_its_errors(tmp_path: Path) -> None:
    good = tmp_path / "jobs.csv"
    good.write_text("start,end,gpus,scope,name\n"
                    "2026-01-12T08:00,2026-01-12T20:00,8,vc1,training\n"
                    "2026-01-12T08:00+08:00,2026-01-12T09:00+08:00,0.5,all,\n")
    first, second = read_reservations(good)
    assert (first.scope, first.gpus, first.name, first.line) == ("vc1", 8.0, "training", 2)
    assert second.start == pd.Timestamp("2026-01-12T00:00")  # +08:00 converted to UTC
    cases = {
        "start,end,gpus,scope\n2026-01-12,2026-01-13,8,vc1\nyesterday,2026-01-13,8,vc1\n":
            ("line 3", "column 'start'", "not a time"),
        "start,end,gpus,scope\n2026-01-13,2026-01-12,8,vc1\n":
            ("line 2", "column 'end'", "not after start"),
        "start,end,gpus,scope\n2026-01-12,2026-01-13,-2,vc1\n":
            ("line 2", "column 'gpus'", "GPUs >= 0"),
        "start,end,gpus,scope\n2026-01-12,2026-01-13,8,\n": ("line 2", "column 'scope'", ""),
        "start,end,gpus\n": ("line 1", "column 'scope'", "missing"),
        "start,end,gpus,scope,owner\n": ("line 1", "column 'owner'", "unknown column"),
        "start,end,gpus,scope\n2026-01-12,2026-01-13,8\n": ("line 2", "", "3 fields"),
    }
    for i, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.csv"
        path.write_text(text)
        with pytest.raises(IngestError) as error:
            read_reservations(path)
        message = str(error.value)
        assert message.startswith(str(path)) and all(e in message for e in expected), message
    with pytest.raises(IngestError, match="no such file"):
        read_reservations(tmp_path / "missing.csv")


def test_capacity_table_and_parsers(tmp_path: Path) -> None:
    path = tmp_path / "capacity.csv"
    path.write_text("cluster,scope,gpu_type,gpus\nc,vc1,A100,8\nc,vc1,H100,4\n,vc2,,16\n")
    table = read_capacity_table(path)
    assert table.set_index("scope")["gpus"].to_dict() == {"vc1": 12.0, "vc2": 16.0}
    path.write_text("scope,gpus\nvc1,lots\n")
    with pytest.raises(IngestError, match="line 2, column 'gpus'"):
        read_capacity_table(path)
    assert parse_watts("60,300") == Watts(60, 300)
    assert parse_watts("busy=400, idle=70") == Watts(70, 400)
    for bad in ("300", "a,b", "idle=1", "-1,2", "idle=1,power=2"):
        with pytest.raises(ConfigError, match="watts-per-gpu"):
            parse_watts(bad)
    job = parse_reservation("vc1,2026-01-12T08:00,2026-01-12T10:00,4")
    assert (job.scope, job.gpus, job.end - job.start) == ("vc1", 4.0, pd.Timedelta("2h"))
    for bad in ("vc1,2026-01-12", "vc1,2026-01-12T10:00,2026-01-12T08:00,4",
                "vc1,2026-01-12,2026-01-13,x", ",2026-01-12,2026-01-13,1"):
        with pytest.raises(ConfigError, match="reservation"):
            parse_reservation(bad)


def test_the_cli_shows_a_need_just_over_capacity_and_warns_in_its_own_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """16.01 GPUs needed against 16 adds a GPU: the table and the reason show the decimals
    that make it so; a --capacity scope without series and a reservation outside the window
    are plain ``warning:`` lines, not log records; the JSON has no float noise."""
    import json

    from prism.cli import main
    from tests.factories import write_series_store

    db = write_series_store(tmp_path, {"lab/vc1/gpus_in_use": np.full(288, 16.01)},
                            "cluster,scope,gpus\nlab,vc1,16\n", start=T0)
    table = tmp_path / "caps.csv"
    table.write_text("scope,gpus\nvc1,16\nvc9,8\n")
    later = tmp_path / "later.csv"
    later.write_text("start,end,gpus,scope\n2027-01-01T00:00,2027-01-01T06:00,4,vc1\n")
    argv = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive", "--horizon",
            "6h", "--models-dir", str(tmp_path / "models"), "--no-record", "--capacity",
            str(table), "--reservations", str(later)]
    capsys.readouterr()
    assert main(argv) == 0
    shown = capsys.readouterr()
    row = next(line for line in shown.out.splitlines() if line.startswith("│ vc1"))
    assert "16.01" in row and "take 1 of the GPUs" in row
    said = " ".join(shown.out.split())
    assert "= 16.01 needed; capacity 16.0: headroom -0.01" in said
    err = " ".join(shown.err.split())
    assert "warning: capacity table: scope(s) vc9 have no demand series in lab" in err
    assert (f"warning: the reservation of 4 GPUs of vc1 ({later}, line 2) from 2027-01-01 "
            "00:00 to 2027-01-01 06:00 lies wholly outside the plan's window") in err
    assert "WARNING" not in shown.err
    assert main([*argv, "--json"]) == 0
    [vc1] = json.loads(capsys.readouterr().out)["rows"]
    assert vc1["gpus_needed"] == 16.01 and vc1["headroom"] == -0.01  # not -0.00999999...
    assert vc1["net_gpus"] == 1
