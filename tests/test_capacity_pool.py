"""The shared-pool alternative of a capacity plan (``prism capacity --pool``,
``GET /v1/capacity?pool=true``): quotas and a pool that add up, chosen on the history before
the plan, one set of numbers from the CLI and the API, and clear refusals."""

from __future__ import annotations

import json
import math
import re
from html import escape
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from prism import usecases
from prism.cli import main
from prism.client import PrismClient
from prism.config import Settings
from prism.track_record import POOL_SCOPE
from service.app import create_app
from tests.factories import write_series_store
from tests.service.conftest import LiveServer

START = pd.Timestamp("2026-01-05")
DAY = 144


def _shifted_vcs(days: int) -> dict[str, np.ndarray]:
    """Three VCs whose peaks do not coincide: vc-a busy in the mornings, vc-b in the
    evenings, vc-c steady."""
    rng = np.random.default_rng(0)
    half = np.r_[np.ones(DAY // 2), np.zeros(DAY // 2)]
    morning = np.tile(half, days)
    return {"lab/vc-a/gpus_in_use": 10 + 20 * morning + rng.integers(0, 3, days * DAY),
            "lab/vc-b/gpus_in_use": 10 + 20 * (1 - morning) + rng.integers(0, 3, days * DAY),
            "lab/vc-c/gpus_in_use": 18 + rng.integers(0, 5, days * DAY)}


def _store(folder: Path, days: int = 9, vcs: dict[str, np.ndarray] | None = None) -> Path:
    series = vcs if vcs is not None else _shifted_vcs(days)
    folder.mkdir(parents=True, exist_ok=True)
    caps = "".join(f"lab,{sid.split('/')[1]},40\n" for sid in series)
    return write_series_store(folder, series, "cluster,scope,gpus\n" + caps, start=START)


def test_the_cli_and_the_api_give_one_pool_that_adds_up(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path)
    models = tmp_path / "models"
    args = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(models), "--no-record", "--pool"]
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["pool"]
    config = Settings(db=str(db), models_dir=models, default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    with LiveServer(create_app(config)) as live:  # over HTTP, a real server
        answer = httpx.get(f"{live.url}/v1/capacity", timeout=60, params={
            "cluster": "lab", "model": "naive", "pool": "true", "record": "false"})
        plain = httpx.get(f"{live.url}/v1/capacity", timeout=60, params={
            "cluster": "lab", "model": "naive", "record": "false"})
        with PrismClient(live.url, token="") as prism:
            by_client = prism.pool("lab", model="naive")
            assert prism.pool("lab", model="naive", record=False) == by_client
    assert answer.status_code == 200, answer.text
    api = answer.json()["pool"]
    assert plain.json()["pool"] is None  # only when asked
    assert by_client == api
    # one set of numbers (the API rounds its floats to 4 decimals)
    assert cli.keys() == api.keys()
    for key, value in api.items():
        if key == "vcs":
            assert [(v["scope"], v["quota"]) for v in cli[key]] == \
                [(v["scope"], v["quota"]) for v in value]
            assert [v["needed"] for v in cli[key]] == \
                pytest.approx([v["needed"] for v in value], abs=1e-3)
        elif isinstance(value, float):
            assert cli[key] == pytest.approx(value, abs=1e-4), key
        else:
            assert cli[key] == value, key
    # the quotas and the pool add up, as shares of what each VC's plan needs
    needed = {vc["scope"]: vc["needed"] for vc in api["vcs"]}
    assert set(needed) == {"vc-a", "vc-b", "vc-c"}
    rows = {r["scope"]: r for r in answer.json()["rows"]}
    for vc in api["vcs"]:
        assert vc["needed"] == pytest.approx(rows[vc["scope"]]["gpus_needed"])
        assert vc["quota"] == math.ceil(api["quota_share"] * vc["needed"] - 1e-9)
    assert api["pool_gpus"] == math.ceil(api["pool_share"] * sum(needed.values()) - 1e-9)
    assert api["pooled_gpus"] == sum(vc["quota"] for vc in api["vcs"]) + api["pool_gpus"]
    assert api["per_vc_gpus"] == sum(math.ceil(n - 1e-9) for n in needed.values())
    assert api["capacity"] == 120.0 and api["days"] == 7
    assert api["net_gpus"] == api["pooled_gpus"] - 120
    assert "the VCs have 120 GPUs installed: " in api["text"]
    # peaks that do not coincide: the pool holds fewer GPUs and left less idle on the replay
    assert api["pooled_gpus"] < api["per_vc_gpus"]
    assert api["saved_share"] > api["per_vc_saved_share"]
    assert api["unmet_share"] <= 0.003
    # the table's words say the same
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "shared pool" in printed
    assert f"pool: {api['pool_gpus']} GPUs; in all {api['pooled_gpus']} GPUs against " \
           f"{api['per_vc_gpus']} sized VC by VC and the VCs' 120 installed" \
           in " ".join(printed.split())
    with usecases.open_store(db) as store:  # --no-record, record=false: what-ifs, not kept;
        kept = store.capacity_plans("lab")  # the client's request (record by default) is
    assert set(kept["served_by"]) == {"api"}
    assert set(kept["model"]) == {"naive", "naive pool"}


def test_a_served_pool_is_kept_and_scored_once_its_window_has_passed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vcs = _shifted_vcs(9)
    db = _store(tmp_path, vcs=vcs)
    models = tmp_path / "models"
    capsys.readouterr()
    assert main(["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
                 "--models-dir", str(models), "--pool", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["pool"]
    with usecases.open_store(db) as store:
        plans = store.capacity_plans("lab")
    kept = plans[plans["model"] == "naive pool"].set_index("scope")
    assert dict(kept["gpus_planned"]) == {**{v["scope"]: v["quota"] for v in cli["vcs"]},
                                          POOL_SCOPE: cli["pool_gpus"]}
    assert kept["series_id"].fillna("none").to_dict() == {
        "vc-a": "lab/vc-a/gpus_in_use", "vc-b": "lab/vc-b/gpus_in_use",
        "vc-c": "lab/vc-c/gpus_in_use", POOL_SCOPE: "none"}  # the pool: no series
    assert set(kept["served_by"]) == {"cli"}
    assert len(plans[plans["model"] == "naive"]) == 3  # the plan VC by VC beside it
    config = Settings(db=str(db), models_dir=models, default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    with TestClient(create_app(config)) as client:  # the API keeps the same pool, once
        api = client.get("/v1/capacity", params={"cluster": "lab", "model": "naive",
                                                  "pool": "true"}).json()["pool"]
        with usecases.open_store(db) as store:
            again = store.capacity_plans("lab")
        assert len(again) == len(plans)
        assert set(again.loc[again["model"] == "naive pool", "served_by"]) == {"api"}
        assert api["pool_gpus"] == cli["pool_gpus"]
        # the window has not passed: nothing scored yet
        pending = client.get("/v1/capacity/track-record", params={"cluster": "lab"}).json()
        assert pending["plans_recorded"] == 4 and pending["plans_scored"] == 0
    # a day later (the stored window moved back a day onto the last stored day)
    with usecases.open_store(db) as store:
        store.execute("DELETE FROM capacity_plans")
        day = pd.Timedelta(days=1)
        store.add_capacity_plans(again.assign(made_at=again["made_at"] - day,
                                              valid_from=again["valid_from"] - day,
                                              valid_to=again["valid_to"] - day
                                              ).drop(columns="created_at"))
    assert main(["--db", str(db), "track-record", "--cluster", "lab", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    pooled = [r for r in record["summary"] if r["model"] == "naive pool"]
    assert [r["scope"] for r in pooled] == ["total"] and pooled[0]["pooled"]
    # by hand: the last day, each VC above its quota served from the pool as far as it goes
    y = np.stack([vcs[f"lab/{v['scope']}/gpus_in_use"][-DAY:] for v in cli["vcs"]])
    quota = np.array([[v["quota"]] for v in cli["vcs"]], dtype=float)
    over = np.clip(y - quota, 0, None).sum(axis=0)
    unmet = np.clip(over - cli["pool_gpus"], 0, None)
    idle = quota.sum() + cli["pool_gpus"] - (y.sum(axis=0) - unmet)
    rule = np.stack([vcs[f"lab/{v['scope']}/gpus_in_use"][-2 * DAY:-DAY].max(keepdims=True)
                     for v in cli["vcs"]])
    row = pooled[0]
    assert row["plans"] == 1
    assert row["in_use_gpu_hours"] == pytest.approx(y.sum() / 6)
    assert row["unmet_gpu_hours"] == pytest.approx(unmet.sum() / 6)
    assert row["idle_gpu_hours"] == pytest.approx(idle.sum() / 6)
    assert row["coverage"] == float(unmet.max() == 0)
    assert row["rule_unmet_gpu_hours"] == pytest.approx(np.clip(y - rule, 0, None).sum() / 6)
    assert row["rule_idle_gpu_hours"] == pytest.approx(np.clip(rule - y, 0, None).sum() / 6)
    # the pool held fewer GPUs than the VCs sized apart, and idled less than their rule
    plain = [r for r in record["summary"] if r["model"] == "naive" and r["scope"] == "total"]
    assert row["idle_gpu_hours"] < plain[0]["idle_gpu_hours"]
    with TestClient(create_app(config)) as client:  # the API's record says the same
        served = client.get("/v1/capacity/track-record",
                            params={"cluster": "lab", "plans": "true"}).json()
    (by_api,) = [r for r in served["summary"] if r["model"] == "naive pool"]
    assert by_api.keys() == row.keys()
    for key, value in row.items():
        if isinstance(value, float):
            assert by_api[key] == pytest.approx(value, abs=1e-3), key
        else:
            assert by_api[key] == value, key
    scored = [p for p in served["plans"] if p["model"] == "naive pool"]
    assert [(p["scope"], p["series_id"]) for p in scored] == [(POOL_SCOPE, None)]


@pytest.mark.slow
def test_the_report_shows_the_pool_the_api_serves(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path)
    models = tmp_path / "models"
    config = Settings(db=str(db), models_dir=models, default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    query = {"cluster": "lab", "model": "naive", "pool": "true", "record": "false"}
    with TestClient(create_app(config)) as client:
        api = client.get("/v1/capacity", params=query).json()["pool"]
        page = client.get("/v1/reports/capacity", params=query)
    assert page.status_code == 200, page.text
    report = tmp_path / "report.html"
    assert main(["--db", str(db), "report", "--cluster", "lab", "--model", "naive",
                 "--models-dir", str(models), "--pool", "--output", str(report)]) == 0
    capsys.readouterr()
    with usecases.open_store(db) as store:  # the report keeps the pool it showed (the API's
        kept = store.capacity_plans("lab")  # record=false kept nothing)
    pooled = kept[kept["model"] == "naive pool"].set_index("scope")["gpus_planned"]
    assert dict(pooled) == {**{vc["scope"]: vc["quota"] for vc in api["vcs"]},
                            POOL_SCOPE: api["pool_gpus"]}
    assert set(kept["served_by"]) == {"report"}
    # the API's page and the CLI's file show the API's quotas and totals
    for html in (page.text, report.read_text()):
        table = html[html.index("<table class='pool'>"):]
        table = table[:table.index("</table>")]
        quotas = dict(re.findall(r"<tr data-scope='([\w-]+)'>.*?data-field='quota' "
                                 r"data-value='(\d+)'", table))
        assert quotas == {**{vc["scope"]: str(vc["quota"]) for vc in api["vcs"]},
                          "pool": str(api["pool_gpus"]), "total": str(api["pooled_gpus"])}
        assert escape(api["text"]) in html
    # without --pool, no pool section
    plain = tmp_path / "plain.html"
    assert main(["--db", str(db), "report", "--cluster", "lab", "--model", "naive",
                 "--models-dir", str(models), "--no-record", "--output", str(plain)]) == 0
    assert "<table class='pool'>" not in plain.read_text()


def test_a_pool_is_refused_with_what_to_do(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    db = _store(tmp_path / "full")
    base = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(tmp_path / "models"), "--no-record", "--pool"]
    capsys.readouterr()
    assert main([*base, "--scope", "vc-a"]) != 0
    assert "drop --scope" in capsys.readouterr().err
    config = Settings(db=str(db), models_dir=tmp_path / "models", default_model="naive",
                      fit_budget_s=60.0, api_token=None, refit_every=None, cors_origins=[])
    with TestClient(create_app(config)) as client:
        answer = client.get("/v1/capacity", params={"cluster": "lab", "scope": "vc-a",
                                                     "model": "naive", "pool": "true"})
    assert answer.status_code == 422 and "drop scope" in answer.text
    # one VC: nothing to pool
    one = _store(tmp_path / "one", vcs={"lab/vc-a/gpus_in_use": _shifted_vcs(9)[
        "lab/vc-a/gpus_in_use"]})
    assert main(["--db", str(one), *base[2:]]) != 0
    assert "at least two VCs" in " ".join(capsys.readouterr().err.split())
    # VCs whose capacities add up to more than the cluster's share GPUs already
    vcs = _shifted_vcs(9)
    (tmp_path / "shared").mkdir()
    shared = write_series_store(tmp_path / "shared", {
        **vcs, "lab/all/gpus_in_use": sum(vcs.values())},
        "cluster,scope,gpus\nlab,all,60\nlab,vc-a,40\nlab,vc-b,40\nlab,vc-c,40\n",
        start=START)
    capsys.readouterr()
    assert main(["--db", str(shared), *base[2:]]) != 0
    assert "they share GPUs already" in " ".join(capsys.readouterr().err.split())
    # three days of history: the shares are chosen on the two whole days before the plan
    three = _store(tmp_path / "three", days=3)
    capsys.readouterr()
    assert main(["--db", str(three), *base[2:], "--json"]) == 0
    pool = json.loads(capsys.readouterr().out)["pool"]
    assert pool["days"] == 2 and "over the last 2 days" in pool["text"]
    # too short a history to choose the shares on
    short = _store(tmp_path / "short", days=1)
    assert main(["--db", str(short), *base[2:]]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "ingest more history or plan without --pool" in err


def test_a_pool_that_needs_more_gpus_says_it_does_not_pay_off(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """VCs that grow every day: yesterday's peak leaves demand unmet on each replayed day,
    so the shares that meet the target keep all each VC needs plus a pool on top. That is
    more GPUs than sizing each VC apart, and the advice says so instead of offering a
    saving, nor says a VC takes "the rest from the pool" when it keeps all it needs."""
    rng = np.random.default_rng(0)
    steps = np.arange(9 * DAY)
    db = _store(tmp_path, vcs={f"lab/vc-{c}/gpus_in_use": 10 + 3 * steps / DAY
                               + rng.integers(0, 3, len(steps)) for c in "abc"})
    args = ["--db", str(db), "capacity", "--cluster", "lab", "--model", "naive",
            "--models-dir", str(tmp_path / "models"), "--no-record", "--pool"]
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    pool = json.loads(capsys.readouterr().out)["pool"]
    extra = pool["pooled_gpus"] - pool["per_vc_gpus"]
    assert extra > 0 and pool["quota_share"] == 1.0  # the day-kind plan fell short there
    assert pool["per_vc_unmet_share"] > pool["max_unmet"]
    assert pool["text"].startswith(f"the pool does not pay off here: it needs {extra} GPUs "
                                   f"more than sizing each VC apart ({pool['pooled_gpus']} "
                                   f"against {pool['per_vc_gpus']}")
    assert "instead of" not in pool["text"] and "saved" not in pool["text"].split(";")[0]
    assert main(args) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "the rest from the pool" not in shown
    for vc in pool["vcs"]:
        assert f"{vc['scope']}: keeps {vc['quota']} GPUs: all it needs" in shown
    assert (f"in all {pool['pooled_gpus']} GPUs, {extra} more than the "
            f"{pool['per_vc_gpus']} sized VC by VC: the pool does not pay off here") in shown
    report = tmp_path / "report.html"
    assert main(["--db", str(db), "report", "--cluster", "lab", "--model", "naive",
                 "--models-dir", str(tmp_path / "models"), "--no-record", "--pool",
                 "--output", str(report)]) == 0
    assert (f"<p class='warning' data-kind='pool'>The pool does not pay off here: it needs "
            f"{extra} GPUs more than sizing each VC apart") in report.read_text()
