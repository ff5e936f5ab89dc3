"""Forecasts and capacity plans as Prometheus gauges (``/v1/metrics/forecasts``), the Grafana
dashboard and the KEDA ScaledObject that read them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from prism.config import Settings
from prism.hub import ServedForecast
from prism.hub.metrics import FORECAST_HORIZONS, HubMetrics, unit_suffix
from prism.hub.types import SeriesState
from service.app import create_app
from tests.service.conftest import SERIES, started

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "prism-dashboard.json"
SCALED_OBJECT = ROOT / "deploy" / "keda" / "scaledobject.yaml"
TOKEN = "s3cret-token"
#: Steps of 10 minutes at each exported horizon.
STEPS = {"1h": 6, "6h": 36, "1d": 144}


def samples(text: str, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of one family of a Prometheus text exposition, by their sorted labels."""
    return {tuple(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) if f.name == family
            for s in f.samples}


def sample_names(text: str) -> set[str]:
    """Every sample name of an exposition (``_total``, ``_bucket`` included)."""
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def by_level(text: str, family: str, series_id: str) -> dict[tuple[str, str], float]:
    """``(quantile, horizon) -> value`` of one series in a ``prism_forecast_*`` family."""
    out = {}
    for labels, value in samples(text, family).items():
        found = dict(labels)
        if found["series_id"] == series_id:
            out[(found["quantile"], found["horizon"])] = value
    return out


def served(series_id: str, *, freq_s: int, steps: int, quantiles: tuple[float, ...],
           model: str = "naive", start: datetime | None = None,
           offset: float = 0.0) -> ServedForecast:
    """A hand-made forecast: the mean at step ``i`` is ``i + offset``, quantile ``q``'s band
    ``i + offset + q``."""
    start = start or datetime(2026, 1, 12, tzinfo=UTC)
    mean = [i + offset for i in range(1, steps + 1)]
    return ServedForecast(
        series_id=series_id, model=model, model_id="m1", model_version="m1.v1",
        watermark="w", freq_s=freq_s, horizon_steps=steps, quantiles=quantiles,
        ts=[start + timedelta(seconds=freq_s * i) for i in range(steps)], mean=mean,
        bands={f"p{round(q * 100, 6):g}": [m + q for m in mean] for q in quantiles})


def state(series_id: str) -> SeriesState:
    return SeriesState(series_id, series_id.split("/")[0], 600, pd.Timestamp("2026-01-01"),
                       pd.Timestamp("2026-01-11"), 10, "w")


def exposition(metrics: HubMetrics, *series_ids: str) -> str:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    class _Fixed(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            return metrics.collect_forecasts({s: state(s) for s in series_ids})

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed())
    return generate_latest(registry).decode()


# -- the gauges, on hand-made forecasts ----------------------------------------------------------
def test_units_name_the_family() -> None:
    assert unit_suffix("c/all/gpus_in_use") == "_gpus"
    assert unit_suffix("c/all/gpu_util") == "_ratio"
    assert unit_suffix("c/all/jobs_submitted") == "_jobs"
    assert unit_suffix("c/all/power_watts") == ""  # a metric PRISM has no unit for
    assert [h for h, _ in FORECAST_HORIZONS] == ["1h", "6h", "1d"]


def test_values_are_those_of_the_step_each_horizon_ahead() -> None:
    metrics = HubMetrics()
    metrics.forecast_served(served("c/all/gpus_in_use", freq_s=600, steps=144,
                                   quantiles=(0.1, 0.9)))
    metrics.forecast_served(served("c/all/gpu_util", freq_s=600, steps=36, quantiles=(0.5,)))
    metrics.forecast_served(served("c/all/gpu_demand", freq_s=86_400, steps=3,
                                   quantiles=(0.5,)))
    text = exposition(metrics, "c/all/gpus_in_use", "c/all/gpu_util", "c/all/gpu_demand")
    assert by_level(text, "prism_forecast_gpus", "c/all/gpus_in_use") == {
        (q, h): steps + float(q) for h, steps in STEPS.items() for q in ("0.1", "0.9")}
    # a 6 h forecast has no 1 d value; a ratio is in its own family
    assert by_level(text, "prism_forecast_ratio", "c/all/gpu_util") == {
        ("0.5", "1h"): 6.5, ("0.5", "6h"): 36.5}
    # a daily series has no 1 h or 6 h step: its 1 d value is step 1
    assert by_level(text, "prism_forecast_gpus", "c/all/gpu_demand") == {("0.5", "1d"): 1.5}
    assert samples(text, "prism_forecast_mean_gpus")[
        (("horizon", "6h"), ("series_id", "c/all/gpus_in_use"))] == 36.0
    start = samples(text, "prism_forecast_start_timestamp_seconds")
    assert start[(("model", "naive"), ("series_id", "c/all/gpus_in_use"))] == (
        datetime(2026, 1, 12, tzinfo=UTC).timestamp())
    # a series that left the store is left out
    assert "c/all/gpu_util" not in exposition(metrics, "c/all/gpus_in_use")


def test_levels_merge_for_the_same_model_and_data_and_a_newer_forecast_replaces() -> None:
    metrics = HubMetrics()
    sid = "c/all/gpus_in_use"
    metrics.forecast_served(served(sid, freq_s=600, steps=144, quantiles=(0.9,)))
    metrics.forecast_served(served(sid, freq_s=600, steps=6, quantiles=(0.5,), offset=100))
    assert by_level(exposition(metrics, sid), "prism_forecast_gpus", sid) == {
        ("0.9", "1h"): 6.9, ("0.9", "6h"): 36.9, ("0.9", "1d"): 144.9, ("0.5", "1h"): 106.5}
    later = datetime(2026, 1, 12, 0, 10, tzinfo=UTC)
    metrics.forecast_served(served(sid, freq_s=600, steps=6, quantiles=(0.5,), start=later))
    assert by_level(exposition(metrics, sid), "prism_forecast_gpus", sid) == {
        ("0.5", "1h"): 6.5}
    metrics.forecast_served(served(sid, freq_s=600, steps=6, quantiles=(0.9,), start=later,
                                   model="prism"))
    assert by_level(exposition(metrics, sid), "prism_forecast_gpus", sid) == {
        ("0.9", "1h"): 6.9}


def test_levels_kept_per_series_are_bounded() -> None:
    metrics = HubMetrics()
    sid = "c/all/gpus_in_use"
    for i in range(1, 40):
        metrics.forecast_served(served(sid, freq_s=600, steps=6, quantiles=(i / 100,)))
    levels = {q for q, _ in by_level(exposition(metrics, sid), "prism_forecast_gpus", sid)}
    assert 1 <= len(levels) <= 32 and "0.39" in levels


# -- through the API -----------------------------------------------------------------------------
def test_forecast_gauges_equal_the_forecast_served(client: TestClient) -> None:
    fc = client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "1d",
                                            "quantiles": "0.1,0.5,0.9",
                                            "model": "seasonal_naive"}).json()
    response = client.get("/v1/metrics/forecasts")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    got = by_level(response.text, "prism_forecast_gpus", SERIES)
    want = {(q, h): fc["bands"][f"p{round(float(q) * 100):d}"][steps - 1]
            for h, steps in STEPS.items() for q in ("0.1", "0.5", "0.9")}
    assert got == pytest.approx(want)
    assert len({v for (q, _), v in got.items() if q == "0.9"}) > 1  # the horizons differ
    means = samples(response.text, "prism_forecast_mean_gpus")
    assert {h: means[(("horizon", h), ("series_id", SERIES))] for h in STEPS} == (
        pytest.approx({h: fc["mean"][steps - 1] for h, steps in STEPS.items()}))
    start = samples(response.text, "prism_forecast_start_timestamp_seconds")
    assert start[(("model", "seasonal_naive"), ("series_id", SERIES))] == (
        datetime.fromisoformat(fc["ts"][0]).timestamp())
    assert "series_id=" not in client.get("/metrics").text  # none of it on the open route


@pytest.mark.slow
def test_capacity_gauges_equal_the_plan_served(client: TestClient) -> None:
    plan = client.get("/v1/capacity", params={"cluster": "cluster-0", "horizon": "6h"})
    assert plan.status_code == 200, plan.text
    rows = plan.json()["rows"]
    text = client.get("/v1/metrics/forecasts").text
    needed = samples(text, "prism_capacity_needed_gpus")
    assert needed == pytest.approx({(("cluster", "cluster-0"), ("scope", r["scope"])):
                                    r["gpus_needed"] for r in rows})
    installed = samples(text, "prism_capacity_installed_gpus")
    assert installed == pytest.approx({(("cluster", "cluster-0"), ("scope", r["scope"])):
                                       r["capacity"] for r in rows
                                       if r["capacity"] is not None})


def test_forecast_gauges_need_the_token(settings: Settings) -> None:
    with started(create_app(settings.model_copy(update={"api_token": TOKEN}))) as client:
        assert client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "1h"},
                          headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        missing = client.get("/v1/metrics/forecasts")
        assert missing.status_code == 401
        assert missing.headers["WWW-Authenticate"] == "Bearer"
        assert client.get("/v1/metrics/forecasts", headers={
            "Authorization": f"Bearer {TOKEN}x"}).status_code == 401
        ok = client.get("/v1/metrics/forecasts", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert by_level(ok.text, "prism_forecast_gpus", SERIES)  # the default 0.5,0.9,0.99
        assert "prism_forecast_gpus" not in client.get("/metrics").text


def test_process_metrics_stay_on_the_open_route(client: TestClient) -> None:
    names = sample_names(client.get("/metrics").text)
    assert "prism_fit_jobs" in names and "prism_forecast_cache_entries" in names
    assert "prism_jobs" not in names and "prism_cached_forecasts" not in names


# -- the dashboard and the scaler ----------------------------------------------------------------
def _exprs(panels: list[dict[str, object]]) -> list[str]:
    out = []
    for panel in panels:
        out += [str(t["expr"]) for t in panel.get("targets", []) if "expr" in t]  # type: ignore[attr-defined]
        out += _exprs(panel.get("panels", []))  # type: ignore[arg-type]
    return out


@pytest.mark.slow
def test_dashboard_and_scaler_name_only_metrics_the_exposition_has(client: TestClient) -> None:
    lab = "lab/all/gpus_in_use"
    t0 = pd.Timestamp("2026-03-01")
    records = [{"series_id": lab, "ts": (t0 + pd.Timedelta(minutes=10 * i)).isoformat(),
                "value": float(10 + i % 7)} for i in range(150)]
    assert client.post("/v1/ingest", params={"format": "long-csv"},
                       json={"records": records[:144]}).status_code == 200
    assert client.get("/v1/forecast", params={"series_id": lab, "horizon": "1h"}
                      ).status_code == 200
    scored = client.post("/v1/ingest", params={"format": "long-csv"},
                         json={"records": records[144:]}).json()
    assert scored["scored_points"] == 6  # so the rolling error has samples
    assert client.get("/v1/forecast", params={"series_id": SERIES, "horizon": "1d",
                                              "quantiles": "0.1,0.5,0.9"}).status_code == 200
    assert client.get("/v1/capacity", params={"cluster": "cluster-0", "horizon": "6h"}
                      ).status_code == 200
    produced = set()
    for path in ("/metrics", "/v1/metrics", "/v1/metrics/forecasts"):
        produced |= sample_names(client.get(path).text)

    dashboard = json.loads(DASHBOARD.read_text())
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "label_values(" in json.dumps(variables["series_id"]["query"])
    exprs = _exprs(dashboard["panels"])
    exprs += [json.dumps(v.get("query", "")) for v in variables.values()
              if v["type"] == "query"]
    assert len(exprs) >= 6
    named = {name for e in exprs for name in re.findall(r"prism_[a-z_]+", e)}
    assert named and named <= produced, sorted(named - produced)
    for family in ("prism_forecast_gpus", "prism_capacity_needed_gpus",
                   "prism_forecast_rolling_mae_gpus"):
        assert family in named

    scaled = list(yaml.safe_load_all(SCALED_OBJECT.read_text()))
    kinds = {doc["kind"]: doc for doc in scaled}
    [trigger] = kinds["ScaledObject"]["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    assert set(re.findall(r"prism_[a-z_]+", query)) == {"prism_forecast_gpus"}
    assert 'quantile="0.9"' in query and 'horizon="1h"' in query
    assert trigger["metadata"]["authModes"] == "bearer"
    auth = kinds["TriggerAuthentication"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert [p["parameter"] for p in auth["spec"]["secretTargetRef"]] == ["bearerToken"]
