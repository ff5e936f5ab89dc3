"""The forecast hub (prism.hub), without HTTP (the store: tests/test_store.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from prism import registry
from prism.errors import ConfigError, ModelNotReady
from prism.hub import MAX_HORIZON_STEPS, ForecastHub, ServedForecast
from prism.ingest.base import IngestOptions
from prism.store import Store
from tests.service.conftest import SERIES, Trace


def _samples(store_path: Path, rows: list[tuple[str, str, float]], name: str) -> Path:
    path = store_path.parent / f"{name}.csv"
    pd.DataFrame(rows, columns=["series_id", "ts", "value"]).to_csv(path, index=False)
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ForecastHub, Path]]:
    """A hub on a store holding one sampled series of two days (naive models)."""
    store = Store.open(tmp_path / "s.duckdb")
    hub = ForecastHub(store, models_dir=tmp_path / "models", default_model="naive",
                      fit_budget_s=10).start()
    t0 = pd.Timestamp("2026-03-01")
    rows = [("lab/all/gpus_in_use", (t0 + pd.Timedelta(minutes=10 * i)).isoformat(),
             float(i % 9)) for i in range(288)]
    hub.ingest([_samples(tmp_path / "s.duckdb", rows, "first")], "long-csv",
               IngestOptions())
    yield hub, tmp_path
    hub.close()
    store.close()


def test_model_keys_name_the_parameters_that_differ(served: tuple[ForecastHub, Path]
                                                    ) -> None:
    hub, _ = served
    assert hub.spec().key == "naive"
    assert hub.spec("prism").key == "prism"
    assert hub.spec("prism", {"use_rnn": True}).key == "prism[use_rnn=true]"
    assert hub.spec("prism", {"use_rnn": False}).key == "prism"  # the default
    assert hub.spec("seasonal_naive", {"season": "1w"}).key == 'seasonal_naive[season="1w"]'
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        hub.spec("nope")
    with pytest.raises(ConfigError, match="bad parameters"):
        hub.spec("naive", {"season": "1d"})


def test_revised_value_changes_the_watermark_and_is_absorbed(
        served: tuple[ForecastHub, Path]) -> None:
    hub, folder = served
    sid = "lab/all/gpus_in_use"
    first = hub.forecast(sid, horizon="30min", quantiles=[0.5])
    assert first.mean == [float(287 % 9)] * 3
    same = hub.ingest([_samples(folder / "s.duckdb", [(sid, "2026-03-01T00:00", 0.0)],
                                "same")], "long-csv", IngestOptions())
    assert same.changed == [] and hub.series_state(sid).watermark == first.watermark
    # a second sample in the last bucket: the bucket mean (the last value) changes
    revised = hub.ingest([_samples(folder / "s.duckdb",
                                   [(sid, "2026-03-02T23:55", 100.0)], "revise")],
                         "long-csv", IngestOptions())
    assert revised.changed == [sid]
    state = hub.series_state(sid)
    assert state.last_ts == pd.Timestamp("2026-03-02T23:50")  # same end, new content
    assert state.watermark != first.watermark
    second = hub.forecast(sid, horizon="30min", quantiles=[0.5])
    assert second.ts == first.ts and second.model_id == first.model_id
    assert second.mean == [(287 % 9 + 100.0) / 2] * 3
    assert second.model_version == f"{first.model_id}.v2"


def test_data_before_the_start_refits_the_model(served: tuple[ForecastHub, Path]) -> None:
    hub, folder = served
    sid = "lab/all/gpus_in_use"
    first = hub.forecast(sid, horizon="10min", quantiles=[0.5])
    hub.ingest([_samples(folder / "s.duckdb", [(sid, "2026-02-28T23:50", 5.0)], "early")],
                  "long-csv", IngestOptions())
    second = hub.forecast(sid, horizon="10min", quantiles=[0.5])
    assert second.model_id != first.model_id and second.model_version.endswith(".v1")
    assert {r.model_id for r in registry.list_models(folder / "models")} == {
        first.model_id, second.model_id}


def test_refit_schedule_replaces_old_models(tmp_path: Path, trace: Trace) -> None:
    db = tmp_path / "p.duckdb"
    db.write_bytes(trace.db.read_bytes())
    with Store.open(db) as store:
        # a minute for a request to wait for a fit, as make_settings gives: under load the
        # default 2 s ran out while a scheduled refit was being fitted in its child process
        hub = ForecastHub(store, models_dir=tmp_path / "models", default_model="naive",
                          refit_every="1s", fit_budget_s=60).start()
        try:
            first = hub.forecast(SERIES, horizon="1h", quantiles=[0.5])
            deadline = time.monotonic() + 15
            current = first
            while current.model_id == first.model_id and time.monotonic() < deadline:
                time.sleep(0.2)
                current = hub.forecast(SERIES, horizon="1h", quantiles=[0.5])
        finally:
            hub.close()
    assert current.model_id != first.model_id
    assert current.mean == first.mean  # same data, same naive forecast


def test_fit_queue_is_bounded(tmp_path: Path, trace: Trace) -> None:
    db = tmp_path / "p.duckdb"
    db.write_bytes(trace.db.read_bytes())
    with Store.open(db) as store:
        hub = ForecastHub(store, models_dir=tmp_path / "models", default_model="prism",
                          fit_budget_s=0, fit_queue=1).start()
        spec = hub.spec("prism", {"use_rnn": False})
        ids = ["cluster-0/vc-27a/gpu_demand", "cluster-0/vc-l10/gpu_demand",
               "cluster-0/vc-he9/gpu_demand", "cluster-0/vc-pzx/gpu_demand"]
        messages = []
        try:
            for sid in ids:
                with pytest.raises(ModelNotReady) as error:
                    hub.forecast(sid, horizon="1h", quantiles=[0.5], spec=spec)
                messages.append(str(error.value))
            rejected = [s.value for m in hub.collect() if m.name == "prism_fit_jobs_rejected"
                        for s in m.samples if s.name == "prism_fit_jobs_rejected_total"]
        finally:
            hub.close()
    refused = sum("model jobs are waiting" in m for m in messages)
    assert refused >= 1 and rejected == [float(refused)]


def test_horizon_is_capped(served: tuple[ForecastHub, Path]) -> None:
    hub, _ = served
    with pytest.raises(ConfigError, match=f"at most {MAX_HORIZON_STEPS:,} steps"):
        hub.forecast("lab/all/gpus_in_use", horizon="1000w", quantiles=[0.5])


def test_served_forecast_json_round_trip(served: tuple[ForecastHub, Path]) -> None:
    hub, _ = served
    fc = hub.forecast("lab/all/gpus_in_use", horizon="1h", quantiles=[0.5, 0.9])
    assert ServedForecast.from_json(fc.to_json()) == fc
    assert fc.ts[0].tzinfo is not None  # times leave the process with their zone
    naive = fc.to_json().replace("+00:00", "")  # a payload cached by an older version
    assert ServedForecast.from_json(naive).ts == fc.ts
    frame = fc.frame()
    assert list(frame.columns) == ["series_id", "ts", "model", "mean", "p50", "p90"]
    assert frame["ts"].dt.tz is None and frame["ts"].iloc[0] == pd.Timestamp("2026-03-03")


def _cache_results(hub: ForecastHub) -> dict[str, float]:
    return {s.labels["result"]: s.value for m in hub.collect()
            if m.name == "prism_forecast_cache_lookups"
            for s in m.samples if s.name == "prism_forecast_cache_lookups_total"}


def test_one_cache_keeps_the_rendering_and_drops_both_with_the_data(
        served: tuple[ForecastHub, Path]) -> None:
    hub, folder = served
    sid = "lab/all/gpus_in_use"
    fresh = hub.forecast(sid, horizon="1h", quantiles=[0.5])
    hit = hub.cached(sid, horizon="1h", quantiles=[0.5], spec=hub.spec())
    assert hit is not None and hit.cached and not fresh.cached
    assert replace(hit, cached=False) == fresh
    renders: list[ServedForecast] = []

    def render(forecast: ServedForecast) -> bytes:
        renders.append(forecast)
        return forecast.model_version.encode()

    first = hub.rendered(hit, render)
    assert hub.rendered(hit, render) is first and first == hit.model_version.encode()
    assert renders == [hit]  # rendered once, kept with the cached answer
    hub.rendered(fresh, render)  # not the cached answer: rendered, not kept
    assert len(renders) == 2 and hub.status()["cached_forecasts"] == 1
    assert _cache_results(hub) == {"miss": 1.0, "hit_memory": 1.0}
    changed = hub.ingest([_samples(folder / "s.duckdb", [(sid, "2026-03-03T00:00", 7.0)],
                                   "next")], "long-csv", IngestOptions())
    assert changed.changed == [sid] and hub.status()["cached_forecasts"] == 0
    hub.rendered(hit, render)  # its entry went with the data: rendered again
    assert len(renders) == 3
    assert hub.cached(sid, horizon="1h", quantiles=[0.5], spec=hub.spec()) is None


def test_answers_outlive_the_hub_in_duckdb(tmp_path: Path, trace: Trace) -> None:
    db = tmp_path / "p.duckdb"
    db.write_bytes(trace.db.read_bytes())
    with Store.open(db) as store:
        first = ForecastHub(store, models_dir=tmp_path / "models", default_model="naive",
                            fit_budget_s=30).start()
        try:
            fresh = first.forecast(SERIES, horizon="1h", quantiles=[0.5, 0.9])
        finally:
            first.close()  # the writer thread writes what is waiting before it ends
        second = ForecastHub(store, models_dir=tmp_path / "models", default_model="naive",
                             fit_budget_s=30, cache_entries=0).start()
        try:
            again = second.forecast(SERIES, horizon="1h", quantiles=[0.5, 0.9])
            results = _cache_results(second)
        finally:
            second.close()
    assert again.cached and replace(again, cached=False) == fresh
    assert results == {"hit_store": 1.0}


def _warm_up_thread(hub: ForecastHub) -> None:
    for thread in hub._threads:
        if thread.name == "prism-warm-up":
            thread.join(timeout=60)
            assert not thread.is_alive()


def test_start_warms_the_default_model_up_off_the_request_path(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The first fit in a process pays the imports; the hub does one on a synthetic series
    # when it starts, logs it, and a warm-up that fails only logs why.
    with caplog.at_level("INFO", logger="prism.hub"), Store.open(
            tmp_path / "s.duckdb") as store:
        hub = ForecastHub(store, models_dir=tmp_path / "models",
                          default_model="seasonal_naive").start()
        _warm_up_thread(hub)
        assert any("warmed up seasonal_naive" in r.getMessage() for r in caplog.records)
        hub.close()

        def broken(alias: str, **params: object) -> None:
            raise RuntimeError("no torch today")

        monkeypatch.setattr("prism.hub.jobs.get_forecaster", broken)
        hub = ForecastHub(store, models_dir=tmp_path / "models",
                          default_model="seasonal_naive").start()
        _warm_up_thread(hub)
        assert hub.ready
        assert any(r.levelname == "WARNING" and "no torch today" in r.getMessage()
                   for r in caplog.records)
        hub.close()


def test_models_past_the_limit_leave_memory_and_reload_from_the_registry(
        tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    hub = ForecastHub(store, models_dir=tmp_path / "models", default_model="naive",
                      fit_budget_s=30, max_models=2).start()
    try:
        t0 = pd.Timestamp("2026-03-01")
        ids = [f"lab/vc{k}/gpus_in_use" for k in range(4)]
        rows = [(sid, (t0 + pd.Timedelta(minutes=10 * i)).isoformat(), float(k + i % 5))
                for k, sid in enumerate(ids) for i in range(144)]
        hub.ingest([_samples(tmp_path / "s.duckdb", rows, "four")], "long-csv",
                   IngestOptions())
        first = {sid: hub.forecast(sid, horizon="1h", quantiles=(0.5,)).model_id
                 for sid in ids}
        assert len(set(first.values())) == 4  # one model fitted per series
        assert hub.status()["models_loaded"] <= 2
        again = hub.forecast(ids[0], horizon="2h", quantiles=(0.5,))  # not cached: a model
        assert again.model_id == first[ids[0]]  # reloaded from the registry, not refitted
        assert again.mean[:6] == hub.forecast(ids[0], horizon="1h", quantiles=(0.5,)).mean
        assert hub.status()["models_loaded"] <= 2
    finally:
        hub.close()
        store.close()


@pytest.mark.slow
def test_the_hub_imports_the_forecasting_libraries_before_its_threads(tmp_path: Path) -> None:
    # two threads importing scikit-learn at once (the warm-up fit, a request loading a saved
    # model) made Python raise _DeadlockError in one of them: start() imports them first, in
    # its own thread, before any thread of the hub runs. A fresh interpreter, so neither
    # scikit-learn nor torch is imported already.
    script = (
        "import sys, threading\n"
        "from prism.forecasters import LAZY_LIBRARIES\n"
        "from prism.hub import ForecastHub\n"
        "from prism.store import Store\n"
        "assert 'sklearn.ensemble' not in sys.modules and 'torch' not in sys.modules\n"
        "started = threading.Thread.start\n"
        "def start(self):\n"
        "    missing = [m for m in LAZY_LIBRARIES if m not in sys.modules]\n"
        "    assert not missing, f'thread {self.name} started before {missing}'\n"
        "    started(self)\n"
        "threading.Thread.start = start\n"
        f"store = Store.open({str(tmp_path / 's.duckdb')!r})\n"
        f"hub = ForecastHub(store, models_dir={str(tmp_path / 'models')!r},\n"
        "                  default_model='naive').start()\n"
        "hub.close(); store.close(); print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_lazy_libraries_lists_every_library_imported_inside_a_function() -> None:
    # import_libraries() protects only what it imports: a new lazy import of scikit-learn,
    # SciPy, statsmodels or torch must be listed (or be a module those import)
    lazy = re.compile(r"^\s+(?:from\s+((?:sklearn|scipy|statsmodels|torch)[\w.]*)\s+import"
                      r"|import\s+((?:sklearn|scipy|statsmodels|torch)[\w.]*))", re.M)
    root = Path(__file__).resolve().parents[2] / "prism"
    found = {m.group(1) or m.group(2) for path in root.rglob("*.py")
             for m in lazy.finditer(path.read_text())}
    assert found, "no lazy import found: the pattern is wrong"
    script = ("import sys\nfrom prism.forecasters import import_libraries\nimport_libraries()\n"
              f"print([m for m in {sorted(found)!r} if m not in sys.modules])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", f"import them in import_libraries: {done.stdout}"
