"""What two ingests may not both say (:mod:`prism.ingest.conflicts`), the way a user meets it:
``prism ingest`` twice, then ``prism series show``.

- a sample is its ``(series_id, ts)``: the newest ingest's value counts, so the same samples in
  other bytes change nothing and a correcting export corrects;
- one series, one source: samples of a series the jobs of the cluster derive are refused, in
  either order;
- job scopes that would merge in series ids are refused, renamings are reported;
- a new file with another ``--freq`` re-derives the cluster, and says so.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from prism.cli import main
from prism.derive import derive_clusters
from prism.errors import DataContractError
from prism.store import Store
from tests.ingest.cli_checks import ingest as _ingest
from tests.ingest.cli_checks import refused as _refused

COUNTS = ("series_id,ts,value\n"
          "c2/all/jobs_submitted,2026-01-01T00:00:00Z,5\n"
          "c2/all/jobs_submitted,2026-01-01T00:10:00Z,6\n"
          "c2/all/jobs_submitted,2026-01-01T00:20:00Z,7\n")

JOBS = ("job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"
        "1,j1,{a},A100,2,1,2026-01-01T00:00:00,2026-01-01T00:00:00,2026-01-01T02:00:00,done\n"
        "2,j1,{b},A100,4,1,2026-01-01T00:00:00,2026-01-01T00:00:00,2026-01-01T02:00:00,done\n")


def _values(db: Path, series_id: str, capsys: pytest.CaptureFixture[str]) -> list[float]:
    capsys.readouterr()
    assert main(["--db", str(db), "series", "show", series_id, "--json"]) == 0
    return [row["value"] for row in json.loads(capsys.readouterr().out)]


# -- B2: a sample is identified by (series_id, ts)
def test_the_same_samples_in_other_bytes_change_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "b.duckdb"
    plain = tmp_path / "cnt.csv"
    plain.write_text(COUNTS)
    crlf = tmp_path / "cnt_crlf.csv"
    crlf.write_bytes(COUNTS.replace("\n", "\r\n").encode())
    packed = tmp_path / "cnt.csv.gz"
    packed.write_bytes(gzip.compress(COUNTS.encode()))
    assert _ingest(db, plain, "long-csv") == 0
    for copy in (crlf, packed):
        capsys.readouterr()
        assert _ingest(db, copy, "long-csv") == 0
        assert f"{copy}: 3 rows (3 already stored with the same value)" in capsys.readouterr().out
        assert _values(db, "c2/all/jobs_submitted", capsys) == [5.0, 6.0, 7.0]  # not 10, 12, 14
    with Store.open(db) as store:
        assert store.fetch_one("SELECT count(*) FROM samples") == (3,)


def test_an_overlapping_export_replaces_what_it_corrects(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "b.duckdb"
    first = tmp_path / "first.csv"
    first.write_text(COUNTS)
    later = tmp_path / "later.csv"  # 00:10 corrected, 00:20 again, 00:30 new
    later.write_text("series_id,ts,value\n"
                     "c2/all/jobs_submitted,2026-01-01T00:10:00Z,60\n"
                     "c2/all/jobs_submitted,2026-01-01T00:20:00Z,7\n"
                     "c2/all/jobs_submitted,2026-01-01T00:30:00Z,8\n")
    assert _ingest(db, first, "long-csv") == 0
    capsys.readouterr()
    assert _ingest(db, later, "long-csv") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"{later}: 3 rows (1 replaced stored values at the same series and time; 1 already "
            "stored with the same value)") in out
    # the run's total says the same, not "3 rows added" alone
    assert "3 rows added (1 of them replaced stored values; 1 were stored already)" in out
    assert _values(db, "c2/all/jobs_submitted", capsys) == [5.0, 60.0, 7.0, 8.0]


def test_a_corrected_gauge_value_replaces_the_old_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "g.duckdb"
    for name, value in (("old.csv", 6), ("new.csv", 100)):
        path = tmp_path / name
        path.write_text(f"time,gpus_in_use\n2026-01-01T00:00:00,{value}\n"
                        "2026-01-01T00:10:00,4\n")
        assert _ingest(db, path, "wide-csv", "--cluster", "g") == 0
    assert _values(db, "g/all/gpus_in_use", capsys) == [100.0, 4.0]  # not (6 + 100) / 2


def test_rows_of_one_file_at_one_time_are_aggregated_as_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two rows of one file at the same (series_id, ts) both count (summed for counts), and
    ingesting that file again in other bytes still changes nothing."""
    db = tmp_path / "d.duckdb"
    text = COUNTS + "c2/all/jobs_submitted,2026-01-01T00:20:00Z,1\n"
    path = tmp_path / "twice.csv"
    path.write_text(text)
    assert _ingest(db, path, "long-csv") == 0
    assert _values(db, "c2/all/jobs_submitted", capsys) == [5.0, 6.0, 8.0]
    crlf = tmp_path / "twice_crlf.csv"
    crlf.write_bytes(text.replace("\n", "\r\n").encode())
    assert _ingest(db, crlf, "long-csv") == 0
    assert _values(db, "c2/all/jobs_submitted", capsys) == [5.0, 6.0, 8.0]


# -- B1: one series, one source
@pytest.mark.parametrize("jobs_first", [True, False])
def test_samples_of_a_series_the_jobs_derive_are_refused_either_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs_first: bool) -> None:
    db = tmp_path / "s.duckdb"
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(JOBS.format(a="vc1", b="vc1"))
    samples = tmp_path / "samples.csv"
    samples.write_text("series_id,ts,value\nj1/all/other,2026-01-01T00:00:00Z,1\n"
                       "j1/all/gpus_in_use,2026-01-01T00:00:00Z,5\n")
    first, second = (jobs, samples) if jobs_first else (samples, jobs)
    assert _ingest(db, first, "jobs-csv" if jobs_first else "long-csv") == 0
    err = _refused(db, second, "long-csv" if jobs_first else "jobs-csv", capsys)
    assert "series 'j1/all/gpus_in_use'" in err and "two sources" in err
    if jobs_first:
        assert err.startswith(f"error: {samples}, line 3: ")
        assert f"(ingested from {jobs})" in err
        assert "another metric name (e.g. gpus_in_use_sampled" in err
    else:
        assert err.startswith(f"error: {jobs}: ")
        assert f"the samples of {samples} already hold" in err
        assert "--cluster j1-jobs" in err
    if jobs_first:  # the series keeps one row per time: forecasting it works
        assert main(["--db", str(db), "forecast", "j1/all/gpus_in_use", "--horizon", "30min",
                     "--model", "naive"]) == 0


def test_a_store_with_two_sources_for_a_series_is_not_derived(tmp_path: Path) -> None:
    """A store an older PRISM wrote with a sampled series the jobs also derive: deriving it
    fails with what to do, rather than a panel with two rows per time."""
    db = tmp_path / "old.duckdb"
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(JOBS.format(a="vc1", b="vc1"))
    assert _ingest(db, jobs, "jobs-csv") == 0
    with Store.open(db) as store:
        store.execute("INSERT INTO samples VALUES (99, 'j1', 'j1/all/gpus_in_use', "
                      "'2026-01-01 00:00:00', 5)")
        with pytest.raises(DataContractError, match="would get two values at"):
            derive_clusters(store, ["j1"])


# -- B4: job scopes that would merge
def test_two_scopes_that_would_merge_are_refused_naming_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "j.duckdb"
    seed = tmp_path / "seed.csv"
    seed.write_text(JOBS.format(a="vc1", b="vc1").replace("j1", "other"))
    assert _ingest(db, seed, "jobs-csv") == 0
    path = tmp_path / "jobs.csv"
    path.write_text(JOBS.format(a="team a", b="team_a"))
    err = _refused(db, path, "jobs-csv", capsys)
    assert err.startswith(f"error: {path}, column 'scope': scope 'team a' ({path}, line 2) and "
                          f"scope 'team_a' ({path}, line 3) of cluster 'j1' would both be "
                          "named 'team_a' in series ids")
    assert "rename one" in err


def test_a_scope_that_merges_with_an_earlier_ingest_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "j.duckdb"
    first = tmp_path / "first.csv"
    first.write_text(JOBS.format(a="team a", b="team a"))
    assert _ingest(db, first, "jobs-csv") == 0
    later = tmp_path / "later.csv"
    later.write_text(JOBS.format(a="team_a", b="team_a").replace("\n1,", "\n11,")
                     .replace("\n2,", "\n12,"))
    err = _refused(db, later, "jobs-csv", capsys)
    assert f"scope 'team a' ({first}) and scope 'team_a' ({later}, line 2)" in err


def test_a_scope_named_like_the_cluster_total_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "j.duckdb"
    seed = tmp_path / "seed.csv"
    seed.write_text(JOBS.format(a="vc1", b="vc1").replace("j1", "other"))
    assert _ingest(db, seed, "jobs-csv") == 0
    path = tmp_path / "jobs.csv"
    path.write_text(JOBS.format(a="vc1", b="all"))
    err = _refused(db, path, "jobs-csv", capsys)
    assert err.startswith(f"error: {path}, line 3, column 'scope': scope 'all' of cluster 'j1' "
                          "takes the name PRISM gives the whole cluster")


def test_renamed_scopes_are_reported_in_the_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "j.duckdb"
    path = tmp_path / "jobs.csv"
    path.write_text(JOBS.format(a="équipe", b="vc 1/a"))
    capsys.readouterr()
    assert _ingest(db, path, "jobs-csv") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("note: cluster 'j1': 2 scope or GPU type name(s) hold characters series ids do "
            "not allow and are renamed in series ids: 'équipe' -> _quipe, 'vc 1/a' -> vc_1_a"
            ) in err
    with Store.open(db) as store:
        scopes = {r[0] for r in store.fetch_all("SELECT DISTINCT scope FROM series")}
    assert scopes == {"all", "gpu:A100", "_quipe", "vc_1_a"}


# -- B7: a new file with another --freq ----------------------------------------------------------
def test_a_new_file_with_another_freq_says_the_cluster_was_derived_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "f.duckdb"
    first = tmp_path / "first.csv"
    first.write_text(COUNTS)
    assert _ingest(db, first, "long-csv") == 0
    later = tmp_path / "later.csv"
    later.write_text(COUNTS.replace("c2/all/jobs_submitted", "c2/all/gpus_submitted"))
    capsys.readouterr()
    assert _ingest(db, later, "long-csv", "--freq", "1h") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("note: cluster 'c2': freq 10min -> 1h, so all its series (from every earlier "
            "ingest too) were derived again") in err
    assert "prism series rederive" in err
    assert _values(db, "c2/all/jobs_submitted", capsys) == [18.0]
    third = tmp_path / "third.csv"  # without --freq: the cluster keeps 1h, nothing to say
    third.write_text(COUNTS.replace("c2/all/jobs_submitted", "c2/all/nodes_in_use"))
    capsys.readouterr()
    assert _ingest(db, third, "long-csv") == 0
    assert "note:" not in capsys.readouterr().err
    assert _values(db, "c2/all/nodes_in_use", capsys) == [6.0]
