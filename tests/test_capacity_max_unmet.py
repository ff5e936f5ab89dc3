"""Choosing the provisioning quantile per scope from the planning backtest (#16 item 4,
``--max-unmet``), and the progress of ``prism capacity``."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

from prism import usecases
from prism.cli import main
from prism.client import PrismClient
from prism.config import Settings
from prism.errors import ConfigError
from prism.schema import SERIES_ID
from prism.usecases.capacity import (
    CANDIDATE_QUANTILES,
    choose_cluster_quantiles,
    parse_max_unmet,
    plan_cluster_capacity,
)
from service.app import create_app
from tests.factories import HandForecasts, write_series_store
from tests.service.conftest import LiveServer

START = pd.Timestamp("2026-01-05")


def _write_store(folder: Path, days: int) -> Path:
    """``days`` days of 10-minute GPUs in use of ``lab`` (vc-a, vc-b, all) with a daily cycle
    and noise, and their capacities."""
    steps = 144 * days
    t = np.arange(steps)
    rng = np.random.default_rng(7)
    day = np.sin(2 * np.pi * t / 144)
    a = np.round(30 + 6 * day + rng.normal(0, 2, steps), 1)
    b = np.round(10 + 3 * day + rng.normal(0, 1, steps), 1)
    series = {"lab/vc-a/gpus_in_use": a, "lab/vc-b/gpus_in_use": b, "lab/all/gpus_in_use": a + b}
    return write_series_store(folder, series, "cluster,scope,gpus\nlab,vc-a,45\nlab,vc-b,40\n"
                              "lab,all,85\n", start=START)



def _planning_rows(rows: list[tuple[str, float, float, float]]) -> pd.DataFrame:
    """A saved per-series planning table of model ``hand``: ``(scope, quantile, unmet share,
    idle GPU-hours)``."""
    return pd.DataFrame([{SERIES_ID: f"lab/{s}/gpus_in_use", "plan": f"hand p{q * 100:g}",
                          "model": "hand", "quantile": q, "block": "1d", "series": 1,
                          "windows": 7, "idle_gpu_hours": idle, "saved_share": 1 - idle / 100,
                          "unmet_gpu_hours": unmet * 1000, "unmet_share": unmet,
                          "demand_gpu_hours": 1000.0, "static_idle_gpu_hours": 100.0}
                         for s, q, unmet, idle in rows])


@pytest.mark.parametrize(("text", "share"), [("0.3%", 0.003), ("0.003", 0.003), ("0", 0.0),
                                             (" 1.5 % ", 0.015), ("0.999", 0.999)])
def test_max_unmet_reads_a_share_or_a_percentage(text: str, share: float) -> None:
    assert parse_max_unmet(text) == pytest.approx(share)


@pytest.mark.parametrize("text", ["-0.1", "100%", "1", "abc", "nan", "", "%"])
def test_bad_max_unmet_names_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--max-unmet"):
        parse_max_unmet(text)


def test_the_cheapest_quantile_within_the_target_per_scope(tmp_path: Path) -> None:
    db = _write_store(tmp_path, days=2)
    with usecases.open_store(db) as store:
        store.save_evaluation("planning", _planning_rows([
            ("vc-a", 0.8, 0.010, 10.0), ("vc-a", 0.9, 0.002, 20.0), ("vc-a", 0.95, 0.001, 30.0),
            ("vc-a", 0.99, 0.0, 50.0),
            ("vc-b", 0.9, 0.020, 5.0), ("vc-b", 0.99, 0.010, 9.0),  # none within 0.3 %
            ("all", 0.5, 0.0, 5.0), ("all", 0.9, 0.0, 40.0)]))
        source = HandForecasts({"lab/vc-a/gpus_in_use": ([20.0, 30.0, 25.0], 10.0),
                                "lab/vc-b/gpus_in_use": ([10.0, 12.0, 11.0], 10.0),
                                "lab/all/gpus_in_use": ([30.0, 42.0, 36.0], 10.0)})
        # these rows stand for a backtest whose plans were the quantiles alone
        choice = choose_cluster_quantiles(store, "lab", source, max_unmet=0.003,
                                          day_floor=False)
        # plans sized at least at the day-kind floor do not take it (too short to replay)
        floored = choose_cluster_quantiles(store, "lab", source, max_unmet=0.003)
        plan = plan_cluster_capacity(store, "lab", source, horizon="1d", quantile=0.95,
                                     choice=choice, day_floor=False)
        # the same through max_unmet (the report's way)
        again = plan_cluster_capacity(store, "lab", source, horizon="1d", quantile=0.95,
                                      max_unmet=0.003, day_floor=False)
    chosen = {c.scope: c for c in choice.rows}
    assert {s: c.quantile for s, c in chosen.items()} == {"vc-a": 0.9, "vc-b": 0.99, "all": 0.5}
    assert chosen["vc-a"].meets_target and chosen["vc-a"].unmet_share == pytest.approx(0.002)
    assert chosen["vc-b"].meets_target is False
    assert "no quantile keeps the unmet share within 0.3 %" in chosen["vc-b"].text
    assert all(c.basis.startswith("saved run") for c in choice.rows)
    assert {c.basis for c in floored.rows} == {"none"}
    rows = {r.scope: r for r in plan.rows}
    assert rows["vc-a"].quantile == 0.9
    assert rows["vc-a"].in_use_needed == pytest.approx(30 + 10 * 0.4)
    assert rows["vc-b"].in_use_needed == pytest.approx(12 + 10 * 0.49)
    assert rows["all"].in_use_needed == pytest.approx(42.0)
    assert rows["vc-a"].reason.startswith("p90 of GPUs in use") and "p90 chosen" in \
        rows["vc-a"].reason
    assert "the highest, p99, is used" in rows["vc-b"].reason
    assert [r.in_use_needed for r in again.rows] == [r.in_use_needed for r in plan.rows]
    assert [r.reason for r in again.rows] == [r.reason for r in plan.rows]


def test_cli_and_api_choose_the_same_quantiles_by_replaying_the_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _write_store(tmp_path, days=5)  # three days replayed
    models = tmp_path / "models"
    config = Settings(db=str(db), models_dir=models, default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    query = {"cluster": "lab", "horizon": "1d", "quantile": "0.95", "max_unmet": "0.3%"}
    with LiveServer(create_app(config)) as live:  # over HTTP
        api = httpx.get(f"{live.url}/v1/capacity", params=query, timeout=120)
        assert api.status_code == 200, api.text
        for bad in ("-1", "100%", "lots"):
            refused = httpx.get(f"{live.url}/v1/capacity", params={**query, "max_unmet": bad},
                                timeout=60)
            assert refused.status_code == 422, refused.text
            assert "max_unmet" in refused.text
        with PrismClient(live.url, token="") as prism:
            rows = prism.capacity("lab", horizon="1d", max_unmet="0.3%")
    body = api.json()
    assert {r.scope: r.quantile for r in rows} == {r["scope"]: r["quantile"]
                                                   for r in body["rows"]}
    capsys.readouterr()
    argv = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(models), "--horizon", "1d", "--max-unmet", "0.3%"]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["max_unmet"] == body["max_unmet"] == pytest.approx(0.003)
    assert printed["quantile_choice"] == body["quantile_choice"]
    assert {c["scope"] for c in body["quantile_choice"]} == {"all", "vc-a", "vc-b"}
    for c in body["quantile_choice"]:
        assert c["basis"] == "replayed now" and c["windows"] == 3
        assert c["quantile"] in CANDIDATE_QUANTILES
        if c["meets_target"]:
            assert c["unmet_share"] <= 0.003 + 1e-12
        else:
            assert c["quantile"] == max(CANDIDATE_QUANTILES)
    api_rows = {r["scope"]: r for r in body["rows"]}
    for row in printed["rows"]:
        assert row["quantile"] == api_rows[row["scope"]]["quantile"]
        assert row["gpus_needed"] == pytest.approx(api_rows[row["scope"]]["gpus_needed"],
                                                  abs=1e-3)
    by_scope = {c["scope"]: c["quantile"] for c in body["quantile_choice"]}
    assert {r["scope"]: r["quantile"] for r in body["rows"]} == by_scope
    # the table says which quantile each scope got; bad values fail naming the flag
    assert main(argv) == 0
    assert "quantile per scope: the cheapest with at most 0.3 %" in capsys.readouterr().out
    for bad in ("-0.01", "100%", "abc"):
        assert main([*argv[:-1], bad]) == 1
        assert f"--max-unmet {bad!r}" in capsys.readouterr().err


def test_capacity_shows_progress_per_stage_on_a_terminal_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from prism.cli import common

    db = _write_store(tmp_path, days=4)
    argv = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(tmp_path / "models"), "--max-unmet", "1%"]
    capsys.readouterr()
    assert main(argv) == 0
    assert "forecast" not in capsys.readouterr().err  # not a terminal: no bar
    monkeypatch.setattr(common.err, "_force_terminal", True)
    assert main(argv) == 0
    err = capsys.readouterr().err
    for stage in ("backtest", "forecast", "plan"):
        assert stage in err, err
    assert "2/2" in err  # the replay: two windows (4 days, two before the replay)
    assert main([*argv, "-q"]) == 0
    assert "backtest" not in capsys.readouterr().err


def test_report_counts_its_stages_on_one_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from prism.cli import common

    db = _write_store(tmp_path, days=3)
    monkeypatch.setattr(common.err, "_force_terminal", True)
    capsys.readouterr()
    assert main(["--db", str(db), "report", "--cluster", "lab", "--model", "naive",
                 "--models-dir", str(tmp_path / "models"), "--output",
                 str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    counts = re.findall(r"report +\S+ (\d+)/(\d+) ", err)
    assert counts and counts[-1][0] == counts[-1][1] and int(counts[-1][1]) >= 2, err
    assert "clusters" in err and "1/1" in err
