"""Capacity decisions an operator can act on: one sizing (GPUs in use at the quantile plus a
capped queue allowance), moves between VCs before anything is bought, advice that adds up, and
one set of numbers from the CLI, the API and the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from prism import usecases
from prism.capacity import advise, plan_capacity
from prism.cli import main
from prism.config import Settings
from prism.schema import SERIES_ID
from prism.usecases.capacity import plan_cluster_capacity
from service.app import create_app
from tests.factories import HandForecasts, write_series_store

START = pd.Timestamp("2026-01-05")
STEPS = 144 * 2  # two days of 10-minute points


def _write_store(folder: Path, series: dict[str, np.ndarray], capacity: str) -> Path:
    """A store of hand-made 10-minute series (long-csv) and a capacity table."""
    return write_series_store(folder, series, capacity, start=START)



def test_sizing_is_the_in_use_quantile_plus_a_capped_queue_allowance(tmp_path: Path) -> None:
    flat = np.full(STEPS, 20.0)
    pending = np.full(STEPS, 2.0)
    pending[-30] = 12.0  # the queue's peak over the last 7 days
    small = pending.copy()
    small[-30] = 5.0
    demand = flat + 3.0
    demand[-30] = 33.0  # a queue of 13 GPUs over the last 7 days
    db = _write_store(tmp_path, {
        "lab/vc1/gpus_in_use": flat, "lab/vc1/gpus_pending": pending,
        "lab/vc1/gpu_demand": flat + pending,
        "lab/vc2/gpus_in_use": flat, "lab/vc2/gpus_pending": small,
        "lab/vc3/gpus_in_use": flat, "lab/vc3/gpu_demand": demand,  # no pending series
    }, "cluster,scope,gpus\nlab,vc1,40\nlab,vc2,40\nlab,vc3,40\n")
    in_use = ([20.0, 30.0, 25.0], 10.0)  # p95 peaks at 30 + 0.45 * 10 = 34.5
    source = HandForecasts({
        "lab/vc1/gpus_in_use": in_use, "lab/vc2/gpus_in_use": in_use,
        "lab/vc3/gpus_in_use": in_use,
        "lab/vc1/gpus_pending": ([4.0, 10.0, 7.0], 40.0),  # mean 7 over the window
        "lab/vc2/gpus_pending": ([4.0, 10.0, 7.0], 40.0),
        "lab/vc1/gpu_demand": ([24.0, 40.0, 32.0], 200.0),  # p95 peaks at 130
        "lab/vc3/gpu_demand": ([26.0, 36.0, 31.0], 200.0),  # minus in use: mean 6
    })
    with usecases.open_store(db) as store:
        plan = plan_cluster_capacity(store, "lab", source, horizon="3", quantile=0.95)
    rows = {r.scope: r for r in plan.rows}
    vc1, vc2, vc3 = rows["vc1"], rows["vc2"], rows["vc3"]
    assert vc1.series_id == "lab/vc1/gpus_in_use"
    assert vc1.in_use_needed == pytest.approx(34.5)
    assert vc1.queue_allowance == pytest.approx(7.0)  # the mean, not p95 (up to 28)
    assert vc1.gpus_needed == pytest.approx(41.5)  # not the p95 of demand (130)
    assert vc1.headroom == pytest.approx(40 - 41.5)
    assert "p95 of GPUs in use peaks at 34.5" in vc1.reason
    assert "queue allowance 7.0" in vc1.reason and "headroom -1.5" in vc1.reason
    # the queue never peaked above 5 GPUs over the last 7 days: the allowance stops there
    assert vc2.queue_allowance == pytest.approx(5.0) and "capped" in vc2.reason
    assert vc3.queue_allowance == pytest.approx(6.0)  # gpu_demand - gpus_in_use
    assert [s for s in plan.steps.loc[plan.steps["scope"] == "vc1", "needed"]] == \
        pytest.approx([20 + 4.5 + 7, 30 + 4.5 + 7, 25 + 4.5 + 7])


def test_moves_come_before_buys() -> None:
    ts = pd.date_range("2026-01-12", periods=144, freq="10min")

    def fc(scope: str, value: float) -> pd.DataFrame:
        return pd.DataFrame({SERIES_ID: f"c/{scope}/gpus_in_use", "ts": ts, "model": "hand",
                             "mean": value, "p95": value})

    forecast = pd.concat([fc("all", 60.0), fc("vc-27a", 50.0), fc("vc-he9", 10.0)])
    plan = plan_capacity(forecast, {"all": 80.0, "vc-27a": 40.0, "vc-he9": 40.0},
                         quantile=0.95, freq_s=600,
                         recent_peak={"vc-27a": 40.0, "vc-he9": 40.0})
    rows = {r.scope: r for r in plan.rows}
    [move] = plan.moves
    assert (move.from_scope, move.to_scope, move.gpus, move.hours) == ("vc-he9", "vc-27a", 10,
                                                                       24.0)
    assert move.text == "lend 10 GPUs from vc-he9 to vc-27a for the next 24 h"
    assert rows["all"].action == "keep" and rows["all"].add_gpus == 0
    assert (rows["vc-27a"].action, rows["vc-27a"].borrow_gpus, rows["vc-27a"].net_gpus) == \
        ("borrow", 10, 10)
    assert (rows["vc-he9"].action, rows["vc-he9"].lend_gpus, rows["vc-he9"].net_gpus) == \
        ("lend", 10, -10)
    assert plan.move_records()[0]["text"] == move.text
    # a second short VC the spare one cannot cover: the rest is the cluster's add
    more = pd.concat([forecast, fc("vc-pzx", 70.0)])
    plan = plan_capacity(more, {"all": 120.0, "vc-27a": 40.0, "vc-he9": 40.0, "vc-pzx": 40.0},
                         quantile=0.95, freq_s=600)
    rows = {r.scope: r for r in plan.rows}
    assert sum(m.gpus for m in plan.moves) == 30  # all vc-he9 can spare, the largest first
    assert plan.moves[0].to_scope == "vc-pzx"
    assert (rows["all"].action, rows["all"].add_gpus) == ("add", 10)
    assert sum(rows[s].net_gpus for s in ("vc-27a", "vc-he9", "vc-pzx")) == 10


def test_vcs_that_share_gpus_are_planned_each_on_its_own() -> None:
    """Slurm partitions over the same nodes: their capacities add up to more than the
    cluster's, so lending between them or adding up their plans would be fiction."""
    from prism.reports.tables import capacity_totals

    ts = pd.date_range("2026-01-12", periods=144, freq="10min")

    def fc(scope: str, value: float) -> pd.DataFrame:
        return pd.DataFrame({SERIES_ID: f"c/{scope}/gpus_in_use", "ts": ts, "model": "hand",
                             "mean": value, "p95": value})

    # train and debug both hold the same 16 GPUs of a 24-GPU cluster (8 more in infer)
    forecast = pd.concat([fc("all", 20.0), fc("train", 20.0), fc("debug", 2.0),
                          fc("infer", 4.0)])
    capacity = {"all": 24.0, "train": 16.0, "debug": 16.0, "infer": 8.0}
    plan = plan_capacity(forecast, capacity, quantile=0.95, freq_s=600,
                         recent_peak={"train": 16.0, "debug": 16.0, "infer": 8.0})
    rows = {r.scope: r for r in plan.rows}
    assert plan.moves == ()  # debug's "spare" GPUs are train's own
    assert (rows["train"].action, rows["train"].add_gpus) == ("add", 4)
    assert rows["debug"].borrow_gpus == rows["debug"].lend_gpus == 0
    assert rows["all"].action == "keep"  # 20 of its 24 GPUs: its own plan, not the VCs' sum
    assert "add up to 40 GPUs, more than the cluster's 24: they share GPUs" in rows["all"].reason
    assert "planned on its own" in rows["train"].reason
    part, totals = capacity_totals(plan.rows)
    assert (part.kind, part.scopes, part.shared) == ("all", ("all",), True)
    assert totals["capacity"] == 24.0  # not 40


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 500), st.integers(0, 500), st.floats(0, 500)),
                min_size=1, max_size=6))
def test_vc_advice_adds_up_to_the_cluster(vcs: list[tuple[float, int, float]]) -> None:
    needed = {f"vc{i}": n for i, (n, _, _) in enumerate(vcs)}
    capacity: dict[str, float | None] = {f"vc{i}": float(c) for i, (_, c, _) in enumerate(vcs)}
    peaks = {f"vc{i}": p for i, (_, _, p) in enumerate(vcs)}
    needed["all"], capacity["all"] = sum(needed.values()), sum(c or 0 for c in capacity.values())
    advice, moves = advise(needed, capacity, hours=24, recent_peak=peaks)
    cluster = advice["all"]
    vc_net = sum(advice[s].net_gpus for s in needed if s != "all")
    assert vc_net == cluster.net_gpus == cluster.add_gpus - cluster.release_gpus
    assert not (cluster.add_gpus and cluster.release_gpus)
    assert sum(advice[s].add_gpus for s in needed if s != "all") == cluster.add_gpus
    assert sum(advice[s].release_gpus for s in needed if s != "all") == cluster.release_gpus
    for s in needed:
        if s == "all":
            continue
        a = advice[s]
        assert a.borrow_gpus == sum(m.gpus for m in moves if m.to_scope == s)
        assert a.lend_gpus == sum(m.gpus for m in moves if m.from_scope == s)
        assert not (a.borrow_gpus and a.lend_gpus)
        cap = capacity[s] or 0.0
        # after the moves and its part of the cluster's add, a VC has what it needs
        assert cap + a.net_gpus >= needed[s] - 1e-6
    if cluster.add_gpus:  # buying only once no VC has anything left to lend
        spare = {s: int(np.floor((capacity[s] or 0) - needed[s] + 1e-9)) for s in needed
                 if s != "all" and needed[s] <= (capacity[s] or 0)}
        assert all(advice[s].lend_gpus == g for s, g in spare.items())


def _one_store(folder: Path) -> Path:
    t = np.arange(STEPS)
    day = np.sin(2 * np.pi * t / 144)
    a = 30 + 6 * day
    b = 10 + 3 * day
    pending = np.clip(4 + 3 * day, 0, None)
    return _write_store(folder, {
        "lab/vc-a/gpus_in_use": a, "lab/vc-a/gpus_pending": pending,
        "lab/vc-b/gpus_in_use": b, "lab/vc-b/gpus_pending": np.zeros(STEPS),
        "lab/all/gpus_in_use": a + b, "lab/all/gpus_pending": pending,
    }, "cluster,scope,gpus\nlab,vc-a,24\nlab,vc-b,40\nlab,all,64\n")


def _report_cells(html: str) -> dict[str, dict[str, float]]:
    out = {}
    for scope, cells in re.findall(r"data-scope='([^']+)'>(.*?)</tr>", html):
        out[scope] = {f: float(v) for f, v in
                      re.findall(r"data-field='(\w+)' data-value='([^']+)'", cells)}
    return out


@pytest.mark.slow
def test_the_cli_the_api_and_the_report_give_one_set_of_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _one_store(tmp_path)
    capsys.readouterr()
    models = tmp_path / "models"
    config = Settings(db=str(db), models_dir=models, default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    query = {"cluster": "lab", "horizon": "6h", "quantile": 0.95}
    with TestClient(create_app(config)) as client:
        api = client.get("/v1/capacity", params=query)
        assert api.status_code == 200, api.text
        page = client.get("/v1/reports/capacity", params=query)
        assert page.status_code == 200
    body = api.json()
    cli = ["--db", str(db), "--models-dir", str(models), "--model", "naive", "--horizon", "6h",
           "--quantile", "0.95"]
    assert main([cli[0], cli[1], "capacity", "--cluster", "lab", *cli[2:], "--json"]) == 0
    captured = capsys.readouterr()
    assert "saved naive model" in captured.err and "fitted" not in captured.err
    printed = json.loads(captured.out)
    output = tmp_path / "report.html"
    assert main([cli[0], cli[1], "report", "--cluster", "lab", *cli[2:],
                 "--output", str(output)]) == 0
    capsys.readouterr()
    api_rows = {r["scope"]: r for r in body["rows"]}
    cli_rows = {r["scope"]: r for r in printed["rows"]}
    assert set(api_rows) == set(cli_rows) == {"all", "vc-a", "vc-b"}
    fields = ("gpus_needed", "in_use_needed", "queue_allowance", "capacity",
              "shortfall_gpu_hours", "idle_gpu_hours")
    for html in (page.text, output.read_text()):
        cells = _report_cells(html)
        for scope, row in api_rows.items():
            for field in fields:
                assert cli_rows[scope][field] == pytest.approx(row[field], abs=1e-3), field
                assert cells[scope][field] == pytest.approx(row[field], abs=1e-3), field
            assert cli_rows[scope]["net_gpus"] == row["net_gpus"] == cells[scope]["net_gpus"]
            assert cli_rows[scope]["recommendation"] == row["recommendation"]
        for move in body["moves"]:
            assert move["text"] in html
    assert printed["moves"] == body["moves"]
    # vc-a is short and vc-b has spare GPUs: a move, and the VCs' nets add up to the cluster's
    assert body["moves"] and body["moves"][0]["from_scope"] == "vc-b"
    assert api_rows["vc-a"]["net_gpus"] + api_rows["vc-b"]["net_gpus"] == \
        api_rows["all"]["net_gpus"]


def test_a_release_of_almost_every_gpu_asks_to_check_the_inputs() -> None:
    """Alibaba's pod list is a sample of its cluster's work; against the whole node list the
    plan releases 99 % of the GPUs, and says what to check first."""
    ts = pd.date_range("2026-01-12", periods=144, freq="10min")
    forecast = pd.DataFrame({SERIES_ID: "ali/all/gpus_in_use", "ts": ts, "model": "hand",
                             "mean": 50.0, "p95": 51.0})
    plan = plan_capacity(forecast, {"all": 6212.0}, quantile=0.95, freq_s=600,
                         recent_peak={"all": 51.0})
    [row] = plan.rows
    assert row.action == "release" and row.release_gpus == 6161
    assert "it used at most 0.8% of its GPUs over recent history" in row.reason
    busy = plan_capacity(forecast, {"all": 600.0}, quantile=0.95, freq_s=600,
                         recent_peak={"all": 51.0})
    assert busy.rows[0].action == "release" and "used at most" not in busy.rows[0].reason


def test_gpu_type_rows_say_they_do_not_add_up_to_the_clusters_advice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A node list of two GPU types: each type is planned on all its GPUs, the cluster on its
    VCs' plans (with moves between VCs of either type), so their adds differ; the type rows
    say so, with both figures, in the CLI's reasons and its JSON."""
    rng = np.random.default_rng(2)

    def busy(level: float) -> np.ndarray:
        return np.round(level + rng.normal(0, 0.5, STEPS), 1)

    h, l1, l2 = busy(20.0), busy(30.0), busy(8.0)
    db = _write_store(tmp_path, {
        "lab/vc-h/gpus_in_use": h, "lab/vc-l1/gpus_in_use": l1, "lab/vc-l2/gpus_in_use": l2,
        "lab/all/gpus_in_use": h + l1 + l2, "lab/gpu:H100/gpus_in_use": h,
        "lab/gpu:L40S/gpus_in_use": l1 + l2}, "cluster,scope,gpus\nlab,all,64\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("node,gpus,gpu_type,scope\n" + "".join(
        f"{kind.lower()}-{scope}-{i},8,{kind},{scope}\n"
        for kind, scope, n in (("H100", "vc-h", 2), ("L40S", "vc-l1", 3), ("L40S", "vc-l2", 3))
        for i in range(n)))
    assert main(["--db", str(db), "ingest", str(nodes), "--format", "node-list", "--cluster",
                 "lab", "-q"]) == 0
    argv = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(tmp_path / "models"), "--no-record", "--horizon", "6h"]
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    rows = {r["scope"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["gpu:H100"]["capacity"] == 16 and rows["gpu:L40S"]["capacity"] == 48
    types = rows["gpu:H100"]["net_gpus"] + rows["gpu:L40S"]["net_gpus"]
    cluster = rows["all"]["net_gpus"]
    assert types != cluster  # vc-l2's spare L40S GPUs lent to vc-h count for the cluster
    said = (f"the GPU types' net changes ({types:+d} in all) do not add up to the cluster's "
            f"({cluster:+d})")
    for scope in ("gpu:H100", "gpu:L40S"):
        assert said in rows[scope]["reason"] and "buy by type from these rows" in \
            rows[scope]["reason"]
    assert all(said not in rows[s]["reason"] for s in ("all", "vc-h", "vc-l1", "vc-l2"))
    assert main(argv) == 0
    assert f"gpu:H100: {rows['gpu:H100']['reason']}" in " ".join(
        capsys.readouterr().out.split())


def test_a_vc_whose_series_stopped_takes_part_in_no_move(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # team-old stopped 3 days before the others: its plan covers a window of the past, where
    # it lent its idle GPUs to team-a, which needs more than it has
    n = 144 * 10
    day = np.sin(2 * np.pi * np.arange(n) / 144)
    db = write_series_store(tmp_path, {
        "prom/team-a/gpus_in_use": 70 + 8 * day, "prom/team-b/gpus_in_use": 15 + 4 * day,
        "prom/team-old/gpus_in_use": 2 + day[:1000] ** 2},
        "cluster,scope,gpus\nprom,all,130\nprom,team-a,60\nprom,team-b,40\nprom,team-old,30\n",
        start=START)
    capsys.readouterr()
    assert main(["--db", str(db), "capacity", "--cluster", "prom", "--model", "naive",
                 "--models-dir", str(tmp_path / "models"), "--no-record", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = {r["scope"]: r for r in plan["rows"]}
    old = rows["team-old"]
    assert old["action"] == "stale" and old["net_gpus"] == 0
    assert "no current data" in old["recommendation"]
    assert all("team-old" not in (m["from_scope"], m["to_scope"]) for m in plan["moves"])
    assert rows["team-a"]["net_gpus"] > 0  # it still gets what it needs, from team-b or bought
    assert rows["team-a"]["net_gpus"] == rows["team-a"]["borrow_gpus"] + rows["team-a"][
        "add_gpus"]
