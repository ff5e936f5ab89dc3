"""The API through TestClient: every endpoint, with exact answers where there are."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from prism.config import Settings
from prism.store import Store
from service.app import create_app
from tests.service.conftest import SERIES, Trace, make_settings, started

#: The quantile levels a capacity plan asks for (prism.capacity.DISTRIBUTION_LEVELS).
GRID = [0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.975, 0.99]


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of a Prometheus text exposition."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def lab_records(start: str, values: list[float], series: str = "lab/all/gpus_in_use"
                ) -> list[dict[str, object]]:
    """long-csv records of one series every 10 minutes from ``start``."""
    t0 = pd.Timestamp(start)
    return [{"series_id": series, "ts": (t0 + pd.Timedelta(minutes=10 * i)).isoformat(),
             "value": v} for i, v in enumerate(values)]


def test_health_ready_and_metrics_are_open(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["series"] == 35
    for probe in ("/healthz", "/readyz"):  # as a load balancer's HEAD check asks
        head = client.head(probe)
        assert head.status_code == 200 and head.content == b""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "series_id=" not in response.text  # the open metrics name no cluster, VC or tenant
    assert "prism_http_requests_total" in response.text
    assert "process_resident_memory_bytes" in response.text  # the process metrics too
    full = client.get("/v1/metrics")
    assert full.status_code == 200
    assert metric(full.text, "prism_series_last_timestamp_seconds",
                  series_id=SERIES) == pd.Timestamp("2026-01-11T23:40:00").timestamp()


def test_series_list_filters_and_values_window(client: TestClient, trace: Trace) -> None:
    listed = client.get("/v1/series", params={"cluster": "cluster-0", "metric": "gpu_demand"})
    body = listed.json()
    with Store.open(trace.db, read_only=True) as store:
        expected = store.list_series(cluster="cluster-0", metric="gpu_demand")
        values = store.load_panel([SERIES])
    assert [s["series_id"] for s in body["series"]] == expected["series_id"].tolist()
    assert body["count"] == len(expected) == 7
    window = client.get("/v1/series/values", params={
        "series_id": SERIES, "start": "2026-01-08T00:00", "end": "2026-01-08T01:00"}).json()
    want = values[(values["ts"] >= "2026-01-08") & (values["ts"] < "2026-01-08T01:00")]
    assert [p["value"] for p in window["points"]] == want["value"].tolist()
    assert len(window["points"]) == 6
    tail = client.get("/v1/series/values", params={"series_id": SERIES, "tail": 1}).json()
    assert tail["points"][0]["ts"] == "2026-01-11T23:40:00Z"


def test_naive_forecast_repeats_the_last_value_and_is_then_cached(client: TestClient) -> None:
    last = client.get("/v1/series/values", params={"series_id": SERIES, "tail": 1}
                      ).json()["points"][0]
    params = {"series_id": SERIES, "horizon": "1d", "quantiles": "0.5,0.9"}
    first = client.get("/v1/forecast", params=params)
    assert first.status_code == 200
    fc = first.json()
    assert fc["model"] == "naive" and fc["horizon_steps"] == 144 and fc["freq_s"] == 600
    assert fc["mean"] == [round(last["value"], 4)] * 144
    start = datetime.fromisoformat(last["ts"]) + timedelta(minutes=10)
    assert datetime.fromisoformat(fc["ts"][0]) == start and len(fc["ts"]) == 144
    assert fc["ts"][0].endswith("Z")
    assert set(fc["bands"]) == {"p50", "p90"}
    assert all(a <= b for a, b in zip(fc["bands"]["p50"], fc["bands"]["p90"], strict=True))
    assert fc["cached"] is False and fc["model_version"] == fc["model_id"] + ".v1"
    second = client.get("/v1/forecast", params=params).json()
    assert second["cached"] is True
    assert {**second, "cached": False} == fc
    text = client.get("/metrics").text
    assert metric(text, "prism_forecast_cache_lookups_total", model="naive", result="miss") == 1
    assert metric(text, "prism_forecast_cache_lookups_total", model="naive",
                  result="hit_memory") == 1
    assert metric(text, "prism_model_fit_duration_seconds_count", model="naive",
                  kind="fit") == 1
    assert metric(text, "prism_http_requests_total", method="GET", route="/v1/forecast",
                  status="200") == 2


def test_horizon_in_steps_and_a_horizon_off_the_grid(client: TestClient) -> None:
    by_steps = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "6"}).json()
    by_time = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "1h"}).json()
    assert by_steps["ts"] == by_time["ts"] and len(by_time["ts"]) == 6
    off = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "15min"})
    assert off.status_code == 422
    assert "whole number of 600-second steps" in off.json()["detail"]


def test_post_forecast_matches_the_gets(client: TestClient) -> None:
    ids = [SERIES, "cluster-0/vc-27a/gpu_demand"]
    many = client.post("/v1/forecast", json={"series_ids": ids, "horizon": "2h",
                                             "quantiles": [0.9]})
    assert many.status_code == 200
    got = many.json()["forecasts"]
    assert [f["series_id"] for f in got] == ids
    for fc in got:
        one = client.get("/v1/forecast", params={"series_id": fc["series_id"],
                                                 "horizon": "2h", "quantiles": "0.9"}).json()
        assert one["mean"] == fc["mean"] and one["bands"] == fc["bands"]
        assert one["cached"] is True


def test_model_parameters_make_another_model(client: TestClient) -> None:
    base = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "1h",
                                              "model": "seasonal_naive"}).json()
    week = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "1h",
                                              "model": "seasonal_naive",
                                              "param": "season=2h"}).json()
    assert base["model"] == "seasonal_naive"
    assert week["model"] == 'seasonal_naive[season="2h"]'
    assert base["model_id"] != week["model_id"]
    values = client.get("/v1/series/values", params={"series_id": SERIES, "tail": 12}
                        ).json()["points"]
    assert week["mean"] == [round(p["value"], 4) for p in values[:6]]  # the last 2 h, again


def test_ingest_scores_served_forecasts_and_updates_the_model(client: TestClient) -> None:
    history = [float(10 + (i % 7)) for i in range(432)]  # 3 days
    first = client.post("/v1/ingest", params={"format": "long-csv"},
                        json={"records": lab_records("2026-03-01", history)})
    assert first.status_code == 200, first.text
    assert first.json()["rows"] == 432 and first.json()["clusters"] == ["lab"]
    before = client.get("/v1/forecast", params={"series_id": "lab/all/gpus_in_use",
                                                "horizon": "1h"}).json()
    last = history[-1]
    assert before["mean"] == [last] * 6
    arrived = [12.0, 15.5, 9.25, 11.0, 30.0, 13.0]
    more = client.post("/v1/ingest", params={"format": "long-csv"}, json={
        "records": lab_records("2026-03-04", arrived)}).json()
    assert more["changed_series"] == 1 and more["scored_points"] == 6
    text = client.get("/v1/metrics").text
    mae = metric(text, "prism_forecast_rolling_mae_gpus", series_id="lab/all/gpus_in_use",
                 model="naive")
    assert mae == pytest.approx(np.mean(np.abs(np.array(arrived) - last)))
    assert metric(text, "prism_forecast_scored_points", series_id="lab/all/gpus_in_use",
                  model="naive") == 6
    after = client.get("/v1/forecast", params={"series_id": "lab/all/gpus_in_use",
                                               "horizon": "1h"}).json()
    assert after["cached"] is False
    assert after["model_id"] == before["model_id"]  # updated, not refitted
    assert after["model_version"] == before["model_id"] + ".v2"
    assert after["ts"][0] == "2026-03-04T01:00:00Z" and after["mean"] == [13.0] * 6
    assert after["watermark"] != before["watermark"]


def test_ingest_is_idempotent_for_files_records_and_raw_bodies(client: TestClient,
                                                               trace: Trace) -> None:
    again = client.post("/v1/ingest", params={"format": "jobs-csv"},
                        files={"file": ("jobs.csv", trace.jobs.read_bytes())})
    assert again.status_code == 200
    assert again.json()["status"] == "unchanged" and again.json()["rows"] == 0
    records = lab_records("2026-03-01", [1.0, 2.0, 3.0])
    one = client.post("/v1/ingest", params={"format": "long-csv"}, json={"records": records})
    two = client.post("/v1/ingest", params={"format": "long-csv"}, json={"records": records})
    assert (one.json()["rows"], two.json()["rows"]) == (3, 0)
    assert two.json()["status"] == "unchanged"
    csv = "series_id,ts,value\nraw/all/gpus_in_use,2026-03-01T00:00,4\n" \
          "raw/all/gpus_in_use,2026-03-01T00:10,5\n"
    raw = client.post("/v1/ingest", params={"format": "long-csv", "filename": "raw.csv"},
                      content=csv, headers={"Content-Type": "text/csv"})
    assert raw.json()["rows"] == 2 and raw.json()["files"][0]["name"] == "raw.csv"
    values = client.get("/v1/series/values", params={"series_id": "raw/all/gpus_in_use"})
    assert [p["value"] for p in values.json()["points"]] == [4.0, 5.0]


@pytest.mark.slow
def test_capacity_equals_the_arithmetic_on_the_forecast(client: TestClient,
                                                        trace: Trace) -> None:
    installed = pd.read_csv(trace.capacity)
    gpus = float(installed.loc[installed["scope"] == "vc-27a", "gpus"].iloc[0])
    plan = client.get("/v1/capacity", params={"cluster": "cluster-0", "scope": "vc-27a",
                                              "horizon": "6h", "quantile": 0.95,
                                              "steps": "true"})
    assert plan.status_code == 200
    [row] = plan.json()["rows"]
    levels = sorted({*GRID, 0.95})
    quantiles = ",".join(f"{q:g}" for q in levels)
    fc = client.get("/v1/forecast", params={
        "series_id": "cluster-0/vc-27a/gpus_in_use", "horizon": "6h",
        "quantiles": quantiles}).json()
    assert fc["cached"] is True  # the same forecast the plan used
    queued = client.get("/v1/forecast", params={
        "series_id": "cluster-0/vc-27a/gpus_pending", "horizon": "6h",
        "quantiles": quantiles}).json()
    first = pd.Timestamp(fc["ts"][0]).tz_convert(None)
    seen = client.get("/v1/series/values", params={
        "series_id": "cluster-0/vc-27a/gpus_pending",
        "start": f"{first - pd.Timedelta('7D')}Z", "end": f"{first}Z"}).json()
    # the queue allowance: the mean queued GPUs forecast over the window, at most the
    # queue's peak over the last 7 days (never an upper quantile of in use + queue)
    allowance = min(float(np.mean(np.clip(queued["mean"], 0, None))),
                    max(p["value"] for p in seen["points"]))
    assert row["series_id"] == "cluster-0/vc-27a/gpus_in_use"
    assert row["queue_allowance"] == pytest.approx(allowance, abs=1e-3)
    p95 = np.array(fc["bands"]["p95"])
    assert row["in_use_needed"] == pytest.approx(p95.max())
    assert row["gpus_needed"] == pytest.approx(p95.max() + row["queue_allowance"])
    assert [s["needed"] for s in row["steps"]] == pytest.approx(p95 + row["queue_allowance"])
    assert row["headroom"] == pytest.approx(gpus - row["gpus_needed"])
    assert "queue allowance" in row["reason"] and "p95 of GPUs in use" in row["reason"]
    # the distribution planned is the in-use quantile function shifted by the allowance
    bands = np.array([fc["bands"][f"p{q * 100:g}"] for q in levels]) + row["queue_allowance"]
    u = (np.arange(40_000) + 0.5) / 40_000
    draws = np.array([np.interp(u, levels, bands[:, t]) for t in range(bands.shape[1])])
    hours = 600 / 3600
    assert row["capacity"] == gpus and row["capacity_source"] == "store"
    assert row["mean_peak"] == pytest.approx(max(fc["mean"]))
    assert row["shortfall_gpu_hours"] == pytest.approx(
        np.maximum(draws - gpus, 0).mean(axis=1).sum() * hours, rel=1e-3, abs=1e-6)
    assert row["idle_gpu_hours"] == pytest.approx(
        np.maximum(gpus - draws, 0).mean(axis=1).sum() * hours, rel=1e-3)
    assert row["queue_risk"] == pytest.approx((draws > gpus).mean(axis=1).max(), abs=1e-3)
    assert row["idle_energy_kwh"] == pytest.approx(row["idle_gpu_hours"] * 60 / 1000)
    assert row["start"] == fc["ts"][0] and row["end"] == "2026-01-12T05:50:00Z"
    held = f"vc-27a,{first + pd.Timedelta('5min')},{first + pd.Timedelta('15min')},6"
    grown = client.get("/v1/capacity", params={
        "cluster": "cluster-0", "scope": "vc-27a", "horizon": "6h", "quantile": 0.95,
        "growth": 2, "reservation": held}).json()
    # 6 GPUs over half of each of the first two steps: 3 more GPUs in each, 1 GPU-hour
    grown_in_use = [2 * p95[0] + 3, 2 * p95[1] + 3] + [2 * v for v in p95[2:]]
    assert grown["rows"][0]["in_use_needed"] == pytest.approx(max(grown_in_use))
    assert grown["rows"][0]["reserved_gpu_hours"] == pytest.approx(6 * hours)
    every = client.get("/v1/capacity", params={"cluster": "cluster-0"}).json()
    rows = {r["scope"]: r for r in every["rows"]}
    assert set(rows) == {"gpu:V100", *installed["scope"]}
    # one GPU type: its capacity is the cluster's, and so is its advice
    assert rows["gpu:V100"]["capacity"] == rows["all"]["capacity"]
    assert rows["gpu:V100"]["capacity_source"] == "cluster"
    assert rows["gpu:V100"]["net_gpus"] == rows["all"]["net_gpus"]
    # moves first; the VCs' net changes add up to the cluster's add or release
    vcs = [r for s, r in rows.items() if s.startswith("vc-")]
    assert sum(r["net_gpus"] for r in vcs) == rows["all"]["net_gpus"]
    for move in every["moves"]:
        assert rows[move["from_scope"]]["lend_gpus"] > 0
        assert rows[move["to_scope"]]["borrow_gpus"] > 0
        assert move["hours"] == 24.0
    assert every["rows"][0]["action"] in ("add", "release", "keep")
    bad = client.get("/v1/capacity", params={"cluster": "cluster-0",
                                             "reservation": "vc-nope,2026-01-12,2026-01-13,4"})
    assert bad.status_code == 422 and "vc-nope" in bad.json()["detail"]
    report = client.get("/v1/reports/capacity", params={"horizon": "6h"})
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert "cluster-0" in report.text and "vc-27a" in report.text
    bad = client.get("/v1/capacity", params={"cluster": "cluster-0",
                                             "reservation": "vc-nope,2026-01-12,2026-01-13,4"})
    assert bad.status_code == 422 and "vc-nope" in bad.json()["detail"]
    report = client.get("/v1/reports/capacity", params={"horizon": "6h"})
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert "cluster-0" in report.text and "vc-27a" in report.text


def test_decomposition_finds_the_daily_cycle(client: TestClient) -> None:
    response = client.get("/v1/decomposition", params={"series_id": SERIES, "top": 3})
    assert response.status_code == 200
    body = response.json()
    assert body["freq_s"] == 600 and len(body["primitives"]) <= 3
    assert any(abs(p["seconds"] - 86400) < 0.1 * 86400 for p in body["periods"])
    assert set(body["variance_share"]) == {"level", "trend", "primitives", "bursts",
                                          "spectral", "residual"}


def test_a_restart_reuses_the_saved_model_and_the_duckdb_cache(settings: Settings) -> None:
    params = {"series_id": SERIES, "horizon": "1h"}
    with started(create_app(settings)) as first:
        fitted = first.get("/v1/forecast", params=params).json()
    with started(create_app(settings)) as second:
        again = second.get("/v1/forecast", params=params).json()
        text = second.get("/metrics").text
    assert again["model_id"] == fitted["model_id"] and again["cached"] is True
    assert again["mean"] == fitted["mean"]
    assert metric(text, "prism_model_fit_duration_seconds_count", model="naive",
                  kind="fit") is None
    assert metric(text, "prism_model_fit_duration_seconds_count", model="naive",
                  kind="load") == 1
    assert metric(text, "prism_forecast_cache_lookups_total", model="naive",
                  result="hit_store") == 1


def test_a_model_saved_by_the_cli_serves_every_series(trace: Trace, tmp_path: Path) -> None:
    from prism import usecases
    from prism.usecases.forecast import forecast_series

    settings = make_settings(trace, tmp_path)
    with usecases.open_store(settings.db, must_exist=True) as store:
        saved = forecast_series(store, None, horizon="1h", quantiles=[0.5], model="naive",
                                save=True, models_dir=settings.models_dir)
    with started(create_app(settings)) as client:
        for sid in (SERIES, "cluster-0/vc-l10/gpus_in_use"):
            fc = client.get("/v1/forecast", params={"series_id": sid, "horizon": "1h",
                                                    "quantiles": "0.5"}).json()
            assert fc["model_id"] == saved.model_id
            want = saved.frame[saved.frame["series_id"] == sid]
            assert fc["mean"] == pytest.approx(want["mean"].tolist(), abs=1e-4)
            assert fc["bands"]["p50"] == pytest.approx(want["p50"].tolist(), abs=1e-4)


def test_cors_is_off_by_default_and_on_when_configured(settings: Settings) -> None:
    headers = {"Origin": "https://scheduler.example", "Access-Control-Request-Method": "GET"}
    with started(create_app(settings)) as client:
        plain = client.get("/healthz", headers={"Origin": "https://scheduler.example"})
        assert "access-control-allow-origin" not in plain.headers
        pre = client.options("/v1/series", headers=headers)  # the methods, but no CORS grant
        assert pre.status_code == 204 and "GET" in pre.headers["allow"]
        assert "access-control-allow-origin" not in pre.headers
    allowed = settings.model_copy(update={"cors_origins": ["https://scheduler.example"]})
    with started(create_app(allowed)) as client:
        pre = client.options("/v1/series", headers=headers)
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "https://scheduler.example"


def test_a_node_list_is_ingested_as_capacity(client: TestClient) -> None:
    nodes = "sn,cpu_milli,gpu,model\nn1,64000,8,A100\nn2,64000,8,A100\nn3,32000,4,T4\n"
    done = client.post("/v1/ingest", params={"format": "node-list", "cluster": "lab"},
                       files={"file": ("nodes.csv", nodes.encode())})
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["rows"] == 4  # all (A100, T4), gpu:A100, gpu:T4
    assert "from 3 nodes, 3 with GPUs: 20 GPUs of 2 type(s)" in body["files"][0]["note"]
    # no series of lab yet: said, with the store's clusters that have some
    assert body["notes"] == ["cluster 'lab' has no series yet: its capacity waits for its jobs "
                             "or samples; the store's clusters with series: cluster-0"]
    near = client.post("/v1/ingest", params={"format": "node-list", "cluster": "cluster-O"},
                       files={"file": ("nodes.csv", nodes.encode())}).json()
    assert "did you mean 'cluster-0'?" in near["notes"][0]
    twice = client.post("/v1/ingest", params={"format": "node-list", "cluster": "lab2"},
                        files={"file": ("nodes.csv", (nodes + "n1,64000,8,A100\n").encode())})
    assert twice.status_code == 422
    assert "line 5" in twice.text and "listed on line 2 too" in twice.text
