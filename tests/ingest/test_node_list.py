"""``node-list``: a node inventory becomes the planner's capacity, per GPU type and scope, with
errors that name the line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism import usecases
from prism.cli import main
from prism.usecases.capacity import capacities_at

NODES = ("host,gpu_count,model,partition,cpus\n"
         "n1,8,A100,train,64\nn2,8,A100,train,64\nn3,4,T4,infer,32\nn4,0,,cpu,96\n"
         "n5,2,,infer,16\n")


def _ingest(db: Path, path: Path, *extra: str) -> int:
    return main(["--db", str(db), "ingest", str(path), "--format", "node-list", *extra])


def test_a_node_list_is_capacity_per_gpu_type_and_scope(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    path, db = tmp_path / "nodes.csv", tmp_path / "prism.duckdb"
    path.write_text(NODES)
    mapping = ["--cluster", "lab", "--map", "node=host", "--map", "gpus=gpu_count",
               "--map", "gpu_type=model", "--map", "scope=partition"]
    assert _ingest(db, path, *mapping) == 0
    out = capsys.readouterr().out
    assert "from 5 nodes, 4 with GPUs: 22 GPUs of 3 type(s)" in out
    with usecases.open_store(db) as store:
        scopes = ["all", "gpu:A100", "gpu:T4", "gpu:unknown", "train", "infer", "cpu"]
        gpus, source = capacities_at(store, "lab", scopes, None)
    assert gpus == {"all": 22.0, "gpu:A100": 16.0, "gpu:T4": 4.0, "gpu:unknown": 2.0,
                    "train": 16.0, "infer": 6.0}  # a CPU-only partition has no GPU capacity
    assert set(source.values()) == {"store"}
    # the same file again adds nothing
    assert _ingest(db, path, *mapping) == 0
    assert "unchanged (already ingested)" in capsys.readouterr().out


def test_bad_node_lists_are_named_by_line_and_field(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "prism.duckdb"
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    assert _ingest(db, nodes, "--cluster", "lab") == 1
    err = capsys.readouterr().err
    assert "missing column(s) ['node', 'gpus']" in err and "--map gpus=gpu_count" in err

    twice = tmp_path / "twice.csv"
    twice.write_text("node,gpus,gpu_type\nn1,8,A100\nn2,8,A100\nn1,8,A100\n")
    assert _ingest(db, twice, "--cluster", "lab") == 1
    err = capsys.readouterr().err
    assert "line 4, column 'node': this node is listed on line 2 too" in err

    odd = tmp_path / "odd.csv"
    odd.write_text("node,gpus,gpu_type\nn1,8,A100\nn2,2.5,A100\nn3,-1,T4\n")
    assert _ingest(db, odd, "--cluster", "lab") == 1
    err = capsys.readouterr().err
    assert "line 3, column 'gpus': GPU count is not a whole number" in err
    assert "line 4, column 'gpus': GPU count is negative" in err

    assert _ingest(db, odd) == 1
    err = capsys.readouterr().err
    assert "missing column(s) ['cluster']" in err and "pass --cluster" in err
    assert "--map" not in err
    # nothing was stored by the failed runs; --on-error skip keeps the good nodes
    with usecases.open_store(db) as store:
        assert capacities_at(store, "lab", ["all"], None)[0] == {}
    assert _ingest(db, odd, "--cluster", "lab", "--on-error", "skip") == 0
    with usecases.open_store(db) as store:
        assert capacities_at(store, "lab", ["all"], None)[0] == {"all": 8.0}


def test_alibaba_v2023_node_list_reads_as_it_is(traces: Path, tmp_path: Path) -> None:
    db = tmp_path / "prism.duckdb"
    assert main(["--db", str(db), "ingest",
                 str(traces / "alibaba_gpu" / "v2023_openb_pod_list_default.csv.gz"),
                 "--format", "alibaba-pods", "--cluster", "alibaba-v2023"]) == 0
    assert _ingest(db, traces / "alibaba_gpu" / "v2023_openb_node_list_gpu_node.csv",
                   "--cluster", "alibaba-v2023") == 0
    with usecases.open_store(db) as store:
        gpus, _ = capacities_at(store, "alibaba-v2023", ["all", "gpu:G2", "gpu:T4", "BE"], None)
    # the trace's README: 1,213 nodes, 6,212 GPUs; G2 is the largest model (549 nodes)
    assert gpus == {"all": 6212.0, "gpu:G2": 4392.0, "gpu:T4": 842.0}


def test_a_later_node_list_replaces_the_whole_snapshot(tmp_path: Path) -> None:
    db = tmp_path / "prism.duckdb"
    before, after = tmp_path / "before.csv", tmp_path / "after.csv"
    before.write_text("node,gpus,gpu_type,scope\nn1,8,A100,train\nn2,8,A100,train\n"
                      "n3,4,T4,infer\n")
    # the T4 node is retired, the infer partition gone, an A100 node added
    after.write_text("node,gpus,gpu_type,scope\nn1,8,A100,train\nn2,8,A100,train\n"
                     "n4,8,A100,train\n")
    table = tmp_path / "capacity.csv"
    table.write_text("cluster,scope,gpus\nlab,vc-x,32\n")
    assert _ingest(db, before, "--cluster", "lab") == 0
    assert main(["--db", str(db), "ingest", str(table), "--format", "capacity-csv"]) == 0
    assert _ingest(db, after, "--cluster", "lab") == 0
    scopes = ["all", "gpu:A100", "gpu:T4", "train", "infer", "vc-x"]
    with usecases.open_store(db) as store:
        gpus, _ = capacities_at(store, "lab", scopes, None)
    # nothing of the retired T4 is left; a capacity-csv row is not a node list's to replace
    assert gpus == {"all": 24.0, "gpu:A100": 24.0, "train": 24.0, "vc-x": 32.0}


SINFO = ("NODELIST|PARTITION|GRES\n"
         "gpu01|train*|gpu:a100:8(S:0-1)\ngpu01|debug|gpu:a100:8(S:0-1)\n"
         "gpu02|train*|gpu:a100:8(S:0-1)\ninf01|infer|gpu:t4:4,nvme:1\ncpu01|cpu|(null)\n"
         "mix01|infer|gpu:t4:2(S:0),gpu:a10:2(S:1)\nold01|infer|gpu:4\n")


def test_slurm_sinfo_reads_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, db = tmp_path / "sinfo.txt", tmp_path / "prism.duckdb"
    path.write_text(SINFO)
    assert _ingest(db, path, "--cluster", "hpc") == 0
    assert "from 6 nodes, 5 with GPUs: 28 GPUs of 4 type(s)" in capsys.readouterr().out
    scopes = ["all", "gpu:a100", "gpu:t4", "gpu:a10", "gpu:unknown", "train", "debug",
              "infer", "cpu"]
    with usecases.open_store(db) as store:
        gpus, _ = capacities_at(store, "hpc", scopes, None)
    # gpu01 serves train and debug: once for the cluster, in each of its partitions
    assert gpus == {"all": 28.0, "gpu:a100": 16.0, "gpu:t4": 6.0, "gpu:a10": 2.0,
                    "gpu:unknown": 4.0, "train": 16.0, "debug": 8.0, "infer": 12.0}


def test_bad_sinfo_rows_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "prism.duckdb"
    ranges = tmp_path / "ranges.txt"
    ranges.write_text("NODELIST|PARTITION|GRES\ngpu[01-04]|train*|gpu:a100:8\n")
    assert _ingest(db, ranges, "--cluster", "hpc") == 1
    err = capsys.readouterr().err
    assert "line 2, column 'NODELIST': a range of nodes, not one node" in err and "-N" in err
    differ = tmp_path / "differ.txt"
    differ.write_text("NODELIST|PARTITION|GRES\ngpu01|train|gpu:a100:8\ngpu01|debug|gpu:a100:4\n"
                      "gpu02|train|gpu:a100\n")
    assert _ingest(db, differ, "--cluster", "hpc") == 1
    err = capsys.readouterr().err
    assert "node 'gpu01' has different GPUs on lines 2, 3" in err
    assert "line 4, column 'GRES': a gpu entry without a count" in err


KUBECTL = ("NODE        GPUS     GPU_TYPE                 POOL\n"
           "gke-a-1     8        NVIDIA-H100-80GB-HBM3    train\n"
           "gke-a-2     8        NVIDIA-H100-80GB-HBM3    train\n"
           "gke-b-1     1        NVIDIA-L4                serve\n"
           "gke-cpu-1   <none>   <none>                   default\n")


def test_kubectl_custom_columns_read_as_they_are(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path, db = tmp_path / "nodes.txt", tmp_path / "prism.duckdb"
    path.write_text(KUBECTL)
    assert _ingest(db, path, "--cluster", "gke") == 0
    assert "from 4 nodes, 3 with GPUs: 17 GPUs of 2 type(s)" in capsys.readouterr().out
    scopes = ["all", "gpu:NVIDIA-H100-80GB-HBM3", "gpu:NVIDIA-L4", "train", "serve", "default"]
    with usecases.open_store(db) as store:
        gpus, _ = capacities_at(store, "gke", scopes, None)
    assert gpus == {"all": 17.0, "gpu:NVIDIA-H100-80GB-HBM3": 16.0, "gpu:NVIDIA-L4": 1.0,
                    "train": 16.0, "serve": 1.0}
    ragged = tmp_path / "ragged.txt"
    ragged.write_text(KUBECTL + "gke-c-1   2   NVIDIA L4   serve\n")
    assert _ingest(db, ragged, "--cluster", "gke") == 1
    assert "line 6: 5 field(s) where the header has 4" in capsys.readouterr().err


def test_a_node_list_for_a_misspelt_cluster_is_noted(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "prism.duckdb"
    samples = tmp_path / "samples.csv"
    samples.write_text("series_id,ts,value\nhpc/all/gpus_in_use,2026-03-01T00:00:00,4\n"
                       "hpc/all/gpus_in_use,2026-03-01T00:10:00,5\n")
    assert main(["--db", str(db), "ingest", str(samples), "--format", "long-csv"]) == 0
    nodes = tmp_path / "sinfo.txt"
    nodes.write_text(SINFO)
    assert _ingest(db, nodes, "--cluster", "hcp") == 0
    err = capsys.readouterr().err
    assert "note: cluster 'hcp' has no series yet" in err and "did you mean 'hpc'?" in err
    assert _ingest(db, nodes, "--cluster", "hpc") == 0
    assert "note:" not in capsys.readouterr().err


def test_a_node_list_and_a_capacity_table_do_not_add_up_the_same_gpus(tmp_path: Path) -> None:
    db = tmp_path / "prism.duckdb"
    table, nodes = tmp_path / "capacity.csv", tmp_path / "nodes.csv"
    table.write_text("cluster,scope,gpus\nlab,all,32\nlab,vc1,32\n")
    nodes.write_text("node,gpus,gpu_type\nn1,8,A100\nn2,8,A100\nn3,8,A100\n")
    assert main(["--db", str(db), "ingest", str(table), "--format", "capacity-csv"]) == 0
    assert _ingest(db, nodes, "--cluster", "lab") == 0
    with usecases.open_store(db) as store:
        gpus, _ = capacities_at(store, "lab", ["all", "vc1", "gpu:A100"], None)
    # the node list came last: all is its 24 GPUs, not 32 + 24; vc1 has only the table's row
    assert gpus == {"all": 24.0, "vc1": 32.0, "gpu:A100": 24.0}
    newer = tmp_path / "capacity2.csv"
    newer.write_text("cluster,scope,gpus\nlab,all,40\n")
    assert main(["--db", str(db), "ingest", str(newer), "--format", "capacity-csv"]) == 0
    with usecases.open_store(db) as store:
        assert capacities_at(store, "lab", ["all"], None)[0] == {"all": 40.0}
