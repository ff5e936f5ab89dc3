"""Hostile and clumsy input from the hardening audit: huge durations, a data file as the store,
an open server on the network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prism.cli import main
from prism.errors import ConfigError
from prism.remote import check_exposure
from prism.schema import MAX_DURATION_S, parse_duration
from prism.store import Store


def _store_with_a_series(db: Path, folder: Path) -> None:
    points = folder / "points.csv"
    points.write_text("series_id,ts,value\n" + "".join(
        f"c/all/gpus_in_use,2026-01-05T00:{10 * k:02d},{k}\n" for k in range(6)),
        encoding="utf-8")
    assert main(["--db", str(db), "ingest", str(points), "--format", "long-csv", "-q"]) == 0


@pytest.mark.parametrize("text", ["99999999999999d", "3000000w", "9" * 400 + "d"])
def test_a_huge_duration_is_a_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="longer than the 36,500 days"):
        parse_duration(text)


def test_the_longest_duration_is_accepted() -> None:
    assert parse_duration(f"{MAX_DURATION_S}s").total_seconds() == MAX_DURATION_S


def test_the_cli_names_a_huge_horizon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "prism.duckdb"
    _store_with_a_series(db, tmp_path)
    code = main(["--db", str(db), "forecast", "c/all/gpus_in_use", "--model", "naive",
                 "--horizon", "99999999999999d"])
    assert code == 1
    assert "longer than the 36,500 days" in capsys.readouterr().err


def test_the_api_answers_422_for_a_huge_horizon(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from prism.config import Settings
    from service.app import create_app

    db = tmp_path / "prism.duckdb"
    _store_with_a_series(db, tmp_path)
    settings = Settings(db=str(db), models_dir=str(tmp_path / "models"), api_token=None,
                        default_model="naive")
    with TestClient(create_app(settings)) as client:
        for _ in range(2):  # the connection survives the error
            got = client.get("/v1/forecast", params={"series_id": "c/all/gpus_in_use",
                                                     "horizon": "99999999999999d"})
            assert got.status_code == 422, got.text
            assert "longer than" in str(got.json()["detail"])


@pytest.mark.parametrize("name", ["jobs.csv", "panel.parquet", "trace.csv.gz"])
def test_a_data_file_as_the_store_is_refused_and_kept(
        tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / name
    data.write_bytes(b"series_id,ts,value\nc/all/gpus_in_use,2026-01-05T00:00,1\n")
    before = data.read_bytes()
    assert main(["--db", str(data), "ingest", str(data), "--format", "long-csv"]) == 1
    err = capsys.readouterr().err
    assert "looks like a data file, not a store" in err and str(data) in err
    assert data.read_bytes() == before


def test_a_file_that_is_not_duckdb_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "prism.duckdb"
    fake.write_bytes(b"not a database at all, just text")
    with pytest.raises(ConfigError, match="is not a DuckDB store"):
        Store.open(fake)
    real = tmp_path / "real.duckdb"
    with Store.open(real):
        pass
    with Store.open(real) as store:  # a real store still opens
        assert store.schema_version >= 1


def test_an_open_server_on_the_network_is_refused() -> None:
    with pytest.raises(ConfigError, match="without a token"):
        check_exposure("0.0.0.0", None)
    assert check_exposure("0.0.0.0", None, insecure=True) is not None  # allowed, warned
    assert "warning" in (check_exposure("127.0.0.1", None) or "")
    assert check_exposure("0.0.0.0", "s3cret") is None


def test_prism_serve_refuses_the_network_without_a_token(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "prism.cli", "--db", str(tmp_path / "s.duckdb"), "serve",
         "--host", "0.0.0.0", "--port", "1"], env=env, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 1
    assert "refusing to serve on '0.0.0.0' without a token" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_malformed_meta_json_is_skipped_and_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from prism import registry
    from prism.forecasters import get_forecaster
    from tests.factories import make_panel

    models = tmp_path / "models"
    good = registry.save_model(get_forecaster("naive").fit(make_panel(series=1)), models)
    bad = registry.save_model(get_forecaster("naive").fit(make_panel(series=1, seed=5)), models)
    meta_path = Path(bad.path) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["surprise"] = 1
    meta_path.write_text(json.dumps(meta))
    with caplog.at_level("WARNING", logger="prism.registry"):
        found = registry.list_models(models)
    assert [r.model_id for r in found] == [good.model_id]
    assert "unexpected keys: ['surprise']" in caplog.text
    assert main(["models", "list", "--models-dir", str(models)]) == 0
    assert good.model_id in capsys.readouterr().out


def test_a_folder_as_the_ingest_path_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    assert main(["--db", str(tmp_path / "s.duckdb"), "ingest", str(folder), "--format",
                 "jobs-csv"]) == 1
    err = capsys.readouterr().err
    assert "is a folder, not a file" in err and "Traceback" not in err


def test_a_second_level_freq_is_refused(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,cluster,scope,num_gpus,submit_ts,start_ts,end_ts\n"
                    "j1,c,vc,2,2026-01-05T00:00,2026-01-05T00:00,2026-01-05T03:00\n",
                    encoding="utf-8")
    db = tmp_path / "s.duckdb"
    assert main(["--db", str(db), "ingest", str(jobs), "--format", "jobs-csv",
                 "--freq", "1s"]) == 1
    assert "finer than the 1min" in capsys.readouterr().err
    with Store.open(db) as store:  # nothing stored
        assert store.fetch_one("SELECT count(*) FROM jobs") == (0,)
    assert main(["--db", str(db), "ingest", str(jobs), "--format", "jobs-csv",
                 "--freq", "1min", "-q"]) == 0


def _app_settings(tmp_path: Path, **extra: object) -> object:
    from prism.config import Settings

    db = tmp_path / "prism.duckdb"
    if not db.exists():
        _store_with_a_series(db, tmp_path)
    return Settings(db=str(db), models_dir=str(tmp_path / "models"), api_token=None,
                    default_model="naive", **extra)


CSV = "series_id,ts,value\nweb/all/gpus_in_use,2026-01-05T00:00,1\n"


def test_ingest_refuses_the_content_types_browsers_send_cross_site(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(_app_settings(tmp_path))) as client:  # type: ignore[arg-type]
        for kind in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": kind} if kind else {}
            got = client.post("/v1/ingest", params={"format": "long-csv"}, content=CSV,
                              headers=headers)
            assert got.status_code == 415, got.text
            assert "multipart/form-data" in got.json()["detail"]
        assert client.get("/v1/series", params={"cluster": "web"}).json()["count"] == 0
        ok = client.post("/v1/ingest", params={"format": "long-csv"}, content=CSV,
                         headers={"Content-Type": "text/csv"})
        assert ok.status_code == 200 and ok.json()["rows"] == 1


def test_a_cross_site_form_cannot_write(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app

    settings = _app_settings(tmp_path, cors_origins=["https://dash.example"])
    upload = {"file": ("a.csv", CSV.encode())}
    with TestClient(create_app(settings)) as client:  # type: ignore[arg-type]
        for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                        {"Origin": "null"}):
            got = client.post("/v1/ingest", params={"format": "long-csv"}, files=upload,
                              headers=headers)
            assert got.status_code == 403, got.text
            assert "PRISM_CORS_ORIGINS" in got.json()["detail"]
        assert client.get("/v1/series", params={"cluster": "web"}).json()["count"] == 0
        # reads stay open to pages (CORS decides what they may see), programs send no Origin
        assert client.get("/v1/series", headers={"Origin": "https://evil.example"}
                          ).status_code == 200
        allowed = client.post("/v1/ingest", params={"format": "long-csv"}, files=upload,
                              headers={"Origin": "https://dash.example"})
        assert allowed.status_code == 200, allowed.text


def test_a_loopback_server_answers_only_loopback_hosts(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from prism.remote import served_hosts
    from service.app import create_app

    hosts = served_hosts("127.0.0.1", ["*"])
    assert "localhost" in hosts and "*" not in hosts
    assert served_hosts("0.0.0.0", ["*"]) == ["*"]
    assert served_hosts("127.0.0.1", ["prism.lab"]) == ["prism.lab"]
    settings = _app_settings(tmp_path, allowed_hosts=hosts)
    with TestClient(create_app(settings)) as client:  # type: ignore[arg-type]
        rebound = client.get("/v1/series", headers={"Host": "attacker.example"})
        assert rebound.status_code == 400
        assert client.get("/v1/series", headers={"Host": "127.0.0.1:8000"}).status_code == 200


def test_an_unknown_option_is_named_with_the_ones_the_format_reads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,cluster,scope,num_gpus,submit_ts,start_ts,end_ts\n"
                    "j1,c,vc,2,0,0,3600\n", encoding="utf-8")
    db = str(tmp_path / "s.duckdb")
    assert main(["--db", db, "ingest", str(jobs), "--format", "jobs-csv",
                 "--option", "time_units=s"]) == 1
    err = capsys.readouterr().err
    assert "--option time_units: jobs-csv does not read it" in err
    assert "time_unit, ignore" in err
    assert main(["--db", db, "ingest", str(jobs), "--format", "jobs-csv",
                 "--option", "time_unit=parsecs"]) == 1
    err = capsys.readouterr().err
    assert "time_unit='parsecs'" in err and "Traceback" not in err and "KeyError" not in err
    assert main(["--db", db, "ingest", str(jobs), "--format", "jobs-csv",
                 "--option", "time_unit=s", "-q"]) == 0


@pytest.mark.parametrize("cluster", ["bad clu/ster", "x';DROP TABLE jobs--", "é"])
def test_a_cluster_name_that_cannot_name_series_is_refused(
        tmp_path: Path, cluster: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    _store_with_a_series(db, tmp_path)  # what the store held before
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,scope,num_gpus,submit_ts,start_ts,end_ts\n"
                    "j1,vc,2,2026-01-05T00:00,2026-01-05T00:00,2026-01-05T03:00\n",
                    encoding="utf-8")
    assert main(["--db", str(db), "ingest", str(jobs), "--format", "jobs-csv",
                 "--cluster", cluster]) == 1
    assert "cannot name series" in capsys.readouterr().err
    with Store.open(db) as store:  # the failed ingest left the store as it was
        assert store.fetch_one("SELECT count(*) FROM jobs") == (0,)
        assert store.list_series()["series_id"].tolist() == ["c/all/gpus_in_use"]
