"""Every ingest format against every kind of bad row it can meet, through ``prism ingest``'s
pipeline: the error names the file, the line and the field and says how to fix it, and nothing
is stored; with ``--on-error skip`` the good rows are stored as a clean file's would be and the
bad one is recorded in ``rejects``. Tests of one format's own rules stay in its file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from prism.errors import IngestError
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import ingest
from prism.store import Store

#: Every table an ingest writes to.
TABLES = ("ingests", "jobs", "samples", "capacity", "rejects", "clusters", "series",
          "series_values")


@dataclass(frozen=True)
class Format:
    """How to write a small file of one format: a header (or none) and two good rows."""

    name: str
    file: str
    header: str | None
    good: tuple[str, str]
    options: dict[str, Any] = field(default_factory=dict)

    def write(self, folder: Path, rows: list[str]) -> Path:
        path = folder / self.file
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = ([self.header] if self.header is not None else []) + rows
        path.write_text("\n".join(lines) + "\n")
        return path

    def line(self, row: int) -> int:
        """The 1-based line number of data row ``row`` (0-based)."""
        return row + (2 if self.header is not None else 1)

    def ingest(self, store: Store, path: Path,
               on_error: Literal["fail", "skip"] = "fail") -> Any:
        return ingest(store, [path], self.name, IngestOptions(on_error=on_error, **self.options))


JOBS_CSV = Format(
    "jobs-csv", "jobs.csv",
    "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status",
    ("j1,c,vc1,A100,2,8,2026-01-05T00:00:00,2026-01-05T00:01:00,2026-01-05T03:00:00,COMPLETED",
     "j2,c,vc2,A100,1,4,2026-01-05T00:30:00,2026-01-05T00:31:00,2026-01-05T02:00:00,COMPLETED"))


def _job(submit: str = "2026-01-05T00:00:00", start: str = "2026-01-05T00:01:00",
         end: str = "2026-01-05T01:00:00", gpus: str = "2", job_id: str = "j9") -> str:
    return f"{job_id},c,vc1,A100,{gpus},8,{submit},{start},{end},DONE"


ALIBABA_PAI = Format(  # the v2020 task table has no header
    "alibaba-pai", "pai_task_table.csv", None,
    ("4b3f04b66a525d2df903eb16,tensorflow,1.0,Terminated,4550900.0,4551416.0,600.0,29.296875,"
     "50.0,MISC",
     "a1b2c3d4e5f60718293a4b5c,worker,2.0,Terminated,4551000.0,4554600.0,400.0,29.296875,"
     "50.0,V100"))


def _task(start: str = "4550900.0", end: str = "4551416.0", inst: str = "1.0",
          plan_gpu: str = "50.0", plan_cpu: str = "600.0", job: str = "b" * 24,
          task: str = "worker") -> str:
    """A task row (memory 29.3 GB, status Terminated, GPU type P100)."""
    return f"{job},{task},{inst},Terminated,{start},{end},{plan_cpu},29.296875,{plan_gpu},P100"


HELIOS_JOBS = Format(
    "helios-jobs", "cluster_log.csv",
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,"
    "queue",
    ("1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,"
     "2020-06-10 04:55:09,36848,0",
     "1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,"
     "2020-06-09 18:45:36,249,0"))

_S, _A, _E = "2020-06-09 18:41:01", "2020-06-09 18:41:01", "2020-06-10 04:55:09"


def _helios(job_id: str = "1425599", gpus: str = "1", cpus: str = "1", submit: str = _S,
            start: str = _A, end: str = _E) -> str:
    """A cluster_log row with the given fields (user u, vc vc1, state COMPLETED)."""
    return f"{job_id},u,vc1,{gpus},{cpus},1,COMPLETED,{submit},{start},{end},0,0"


PHILLY_NODES = Format("philly-nodes", "philly_node_sequence.csv", "time,active,total",
                      ("2017-10-03 00:00:00,312,420", "2017-10-03 00:01:00,309,420"))

_TRES = "billing=4,cpu=4,gres/gpu=1,mem=32G,node=1"
SLURM_SACCT = Format(
    "slurm-sacct", "sacct.txt", "JobID|User|Account|Partition|AllocTRES|Submit|Start|End|State",
    (f"2001|u01|vision|gpu|{_TRES}|2026-01-05T08:00:00|2026-01-05T08:05:00|2026-01-05T09:00:00"
     "|COMPLETED",
     "2003|u02|nlp|gpu|billing=4,cpu=4,gres/gpu=2,mem=32G,node=1|2026-01-05T08:10:00|"
     "2026-01-05T08:15:00|2026-01-05T09:00:00|COMPLETED"))


def _sacct(tres: str = _TRES, submit: str = "2026-01-05T08:00:00",
           start: str = "2026-01-05T08:05:00", end: str = "2026-01-05T09:00:00",
           state: str = "COMPLETED") -> str:
    return f"2002|u01|vision|gpu|{tres}|{submit}|{start}|{end}|{state}"


LONG_CSV = Format("long-csv", "samples.csv", "series_id,ts,value",
                  ("c/all/gpus_in_use,2026-01-05T00:00:00,1",
                   "c/all/gpus_in_use,2026-01-05T00:10:00,2"))
WIDE_CSV = Format("wide-csv", "wide.csv", "time,gpus_in_use,gpu_util",
                  ("2026-01-05T00:00:00,1,0.5", "2026-01-05T00:10:00,2,0.5"), {"cluster": "c"})
CAPACITY_CSV = Format("capacity-csv", "capacity.csv", "cluster,scope,gpu_type,gpus,valid_from",
                      ("c,vc1,A100,8,", "c,vc2,A100,4,2026-01-01"))
HELIOS_VC = Format("helios-vc", "earth_vc1_1min.csv",
                   "time,running_gpu_num,pending_gpu_num,total_gpu_num",
                   ("2020-05-01 00:00:00,162,0,208", "2020-05-01 00:01:00,160,2,208"))
ALIBABA_PODS = Format(
    "alibaba-pods", "pods.csv",
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time",
    ("p0,12000,16384,1,1000,,LS,Running,10000000,12537496,10000000",
     "p1,6000,12288,1,460,,LS,Running,10427061,12902960,10427061"))


def _pod(name: str = "p2", num_gpu: str = "1", gpu_milli: str = "460",
         created: str = "10427061", deleted: str = "12902960", scheduled: str = "10427061") -> str:
    return f"{name},6000,12288,{num_gpu},{gpu_milli},,LS,Running,{created},{deleted},{scheduled}"


#: (format, bad row, the field it names, words the message has): one case per kind of bad row.
CASES: list[tuple[Format, str, str, tuple[str, ...]]] = [
    (JOBS_CSV, _job(submit="yesterday"), "submit_ts", ("not a time",)),
    (JOBS_CSV, _job(start="2026-01-05T02:00:00"), "end_ts", ("end time is before start time",)),
    (JOBS_CSV, _job(gpus="-2"), "num_gpus", ("negative",)),
    (JOBS_CSV, _job(gpus="two"), "num_gpus", ("not a number",)),
    (JOBS_CSV, _job(job_id="j1"), "job_id", ("more than once",)),
    (ALIBABA_PAI, _task(start="soon"), "start_time", ("start_time is not a number",)),
    (ALIBABA_PAI, _task(start="4551416.0", end="4550900.0"), "end_time",
     ("end_time is before start_time",)),
    (ALIBABA_PAI, _task(plan_gpu="-50.0"), "plan_gpu", ("plan_gpu is negative",)),
    (ALIBABA_PAI, _task(plan_gpu="half"), "plan_gpu", ("plan_gpu is not a number",)),
    (ALIBABA_PAI, _task(plan_cpu="-1"), "plan_cpu", ("plan_cpu is negative",)),
    (ALIBABA_PAI, _task(inst="-1.0"), "inst_num", ("inst_num is negative",)),
    (ALIBABA_PAI, _task(inst=""), "inst_num", ("inst_num is empty",)),
    (ALIBABA_PAI, _task(inst="1.5"), "inst_num", ("not a whole number",)),
    (ALIBABA_PAI, _task(job=""), "job_name", ("job_name is empty",)),
    (ALIBABA_PAI, _task(job="4b3f04b66a525d2df903eb16", task="tensorflow"), "task_name",
     ("repeats",)),
    (ALIBABA_PAI, _task(start="1e300"), "start_time", ("out of range",)),
    (HELIOS_JOBS, _helios(submit="yesterday"), "submit_time", ("submit_time is not a time",)),
    (HELIOS_JOBS, _helios(end="2020-13-45 00:00:00"), "end_time", ("end_time is not a time",)),
    (HELIOS_JOBS, _helios(start="2020-06-09 20:00:00", end="2020-06-09 19:00:00"), "end_time",
     ("end_time is before start_time",)),
    (HELIOS_JOBS, _helios(start="2020-06-09 18:00:00", end="2020-06-09 19:00:00"),
     "start_time", ("start_time is before submit_time",)),
    (HELIOS_JOBS, _helios(gpus="-2"), "gpu_num", ("gpu_num is negative",)),
    (HELIOS_JOBS, _helios(gpus="two"), "gpu_num", ("gpu_num is not a number",)),
    (HELIOS_JOBS, _helios(gpus="1.5"), "gpu_num", ("not a whole number",)),
    (HELIOS_JOBS, _helios(gpus=""), "gpu_num", ("gpu_num is empty",)),
    (HELIOS_JOBS, _helios(cpus="-1"), "cpu_num", ("cpu_num is negative",)),
    (HELIOS_JOBS, _helios(submit=""), "submit_time", ("submit_time is empty",)),
    (HELIOS_JOBS, _helios(job_id=""), "job_id", ("job_id is empty",)),
    (HELIOS_JOBS, _helios(job_id="1425511"), "job_id", ("repeats an earlier row",)),
    (HELIOS_JOBS, _helios(submit="9999-01-01 00:00:00"), "submit_time",
     ("submit_time is out of range", "1970..2099")),
    (PHILLY_NODES, "10/03/2017 00:03,300,420", "time", ("time is not a time",)),
    (PHILLY_NODES, "2017-10-03 25:00:00,300,420", "time", ("time is not a time",)),
    (PHILLY_NODES, ",300,420", "time", ("time is empty",)),
    (PHILLY_NODES, "2017-10-03 00:00:00,300,420", "time", ("time repeats an earlier row",)),
    (PHILLY_NODES, "2017-10-03 00:03:00,-1,420", "active", ("active is negative",)),
    (PHILLY_NODES, "2017-10-03 00:03:00,many,420", "active", ("active is not a number",)),
    (PHILLY_NODES, "2017-10-03 00:03:00,,420", "active", ("active is empty",)),
    (PHILLY_NODES, "2017-10-03 00:03:00,300.5,420", "active", ("not a whole number",)),
    (PHILLY_NODES, "2017-10-03 00:03:00,500,420", "active", ("active is larger than total",)),
    (PHILLY_NODES, "2017-10-03 00:03:00,300,-420", "total", ("total is negative",)),
    (PHILLY_NODES, "2017-10-03 00:03:00,300,inf", "total", ("total is not a number",)),
    (SLURM_SACCT, _sacct(start="yesterday 8am"), "Start",
     ("Start is not a time", "'yesterday 8am'", "2026-01-05T08:30:00")),
    (SLURM_SACCT, _sacct(start="2026-01-05T10:00:00"), "End",
     ("end time is before start time",)),
    (SLURM_SACCT, _sacct(tres="billing=4,cpu=4,gres/gpu=-2,mem=32G,node=1"), "AllocTRES",
     ("a GPU or CPU count in AllocTRES is negative", "gres/gpu=-2")),
    (SLURM_SACCT, _sacct(tres="billing=4,cpu=4,gres/gpu=two,mem=32G,node=1"), "AllocTRES",
     ("a GPU or CPU count in AllocTRES is not a whole number",)),
    (SLURM_SACCT, _sacct(submit="Unknown", start="Unknown", end="Unknown", state="PENDING"),
     "Submit", ("submit time is empty",)),
    (LONG_CSV, "c/all/gpus_in_use,yesterday,1", "ts", ("time is missing or does not parse",)),
    (LONG_CSV, "c/all/gpus_in_use,,1", "ts", ("time is missing or does not parse",)),
    (LONG_CSV, "c/all/gpus_in_use,2026-01-05T00:20:00,two", "value",
     ("value is missing or not a number", "'two'")),
    (LONG_CSV, "c/all/gpus_in_use,2026-01-05T00:20:00,", "value",
     ("value is missing or not a number",)),
    (LONG_CSV, "c/all/gpus_in_use,2026-01-05T00:20:00,inf", "value",
     ("value is missing or not a number",)),
    (LONG_CSV, "bad id,2026-01-05T00:20:00,1", "series_id",
     ("series id is not 'cluster/scope/metric'",)),
    (WIDE_CSV, "yesterday,1,0.5", "time", ("time does not parse",)),
    (WIDE_CSV, ",1,0.5", "time", ("time is empty",)),
    (WIDE_CSV, "2026-01-05T00:20:00,two,0.5", "gpus_in_use", ("value is not a number",)),
    (WIDE_CSV, "2026-01-05T00:20:00,inf,0.5", "gpus_in_use", ("value is not a number",)),
    (CAPACITY_CSV, "c,vc3,A100,-1,", "gpus", ("GPU count is negative",)),
    (CAPACITY_CSV, "c,vc3,A100,many,", "gpus", ("GPU count is missing or not a number",)),
    (CAPACITY_CSV, "c,vc3,A100,,", "gpus", ("GPU count is missing or not a number",)),
    (CAPACITY_CSV, "c,vc3,A100,8,someday", "valid_from", ("time does not parse",)),
    (CAPACITY_CSV, "c,,A100,8,", "scope", ("scope is empty",)),
    (CAPACITY_CSV, ",vc3,A100,8,", "cluster", ("cluster is empty",)),
    (HELIOS_VC, "yesterday,1,0,208", "time", ("time does not parse",)),
    (HELIOS_VC, ",1,0,208", "time", ("time is empty",)),
    (HELIOS_VC, "2020-05-01 00:02:00,many,0,208", "running_gpu_num", ("value is not a number",)),
    (ALIBABA_PODS, _pod(num_gpu="-1"), "num_gpus", ("GPU count is negative",)),
    (ALIBABA_PODS, _pod(num_gpu="two"), "num_gpu", ("num_gpu is not a number",)),
    (ALIBABA_PODS, _pod(gpu_milli="1460"), "gpu_milli", ("GPU share out of range",)),
    (ALIBABA_PODS, _pod(created="soon"), "creation_time",
     ("creation_time is not a number of seconds",)),
    (ALIBABA_PODS, _pod(deleted="10000000"), "end_ts", ("end time is before start time",)),
    (ALIBABA_PODS, _pod(scheduled="10000000"), "start_ts",
     ("start time is before submit time",)),
    (ALIBABA_PODS, _pod(name=""), "job_id", ("job id is empty",)),
    (ALIBABA_PODS, _pod(name="p0"), "job_id", ("job id appears more than once",)),
]


def _id(case: tuple[Format, str, str, tuple[str, ...]]) -> str:
    fmt, _, column, words = case
    return f"{fmt.name}:{column}:{words[0].replace(' ', '-')}"


def _counts(store: Store) -> dict[str, int]:
    return {t: store.fetch_one(f"SELECT count(*) FROM {t}")[0]  # type: ignore[index]
            for t in TABLES}


def _stored(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """What an ingest stored, less its bookkeeping (ids, the rejects, the ingests)."""
    return {t: store.fetch_all(f"SELECT * EXCLUDE (ingest_id) FROM {t} ORDER BY ALL")
            for t in ("jobs", "samples", "capacity")} | {
        t: store.fetch_all(f"SELECT * FROM {t} ORDER BY ALL") for t in ("series_values",)}


_CLEAN: dict[str, dict[str, list[tuple[Any, ...]]]] = {}


def _clean(fmt: Format, folder: Path) -> dict[str, list[tuple[Any, ...]]]:
    """What the format's two good rows alone store (computed once per format)."""
    if fmt.name not in _CLEAN:
        with Store.open(":memory:") as clean:
            fmt.ingest(clean, fmt.write(folder / "clean", list(fmt.good)))
            _CLEAN[fmt.name] = _stored(clean)
    return _CLEAN[fmt.name]


@pytest.mark.parametrize(("fmt", "bad_row", "column", "words"), CASES, ids=map(_id, CASES))
def test_a_bad_row_fails_naming_file_line_and_field_and_stores_nothing(
    tmp_path: Path, fmt: Format, bad_row: str, column: str, words: tuple[str, ...]
) -> None:
    with Store.open(":memory:") as store:
        before = _counts(store)
        path = fmt.write(tmp_path / "in", [*fmt.good, bad_row])
        with pytest.raises(IngestError) as info:
            fmt.ingest(store, path)
        error = info.value
        assert (error.path, error.line, error.column) == (str(path), fmt.line(2), column)
        message = str(error)
        assert message.startswith(f"{path}, line {fmt.line(2)}, column '{column}': ")
        for word in words:
            assert word in message
        assert error.fix and "Fix:" in message and "--on-error skip" in message  # how to fix it
        assert _counts(store) == before


@pytest.mark.parametrize(("fmt", "bad_row", "column", "words"), CASES, ids=map(_id, CASES))
def test_skip_stores_the_good_rows_and_records_the_bad_one(
    tmp_path: Path, fmt: Format, bad_row: str, column: str, words: tuple[str, ...]
) -> None:
    expected = _clean(fmt, tmp_path)
    with Store.open(":memory:") as store:
        path = fmt.write(tmp_path / "in", [fmt.good[0], bad_row, fmt.good[1]])
        report = fmt.ingest(store, path, on_error="skip")
        assert report.rejected == 1
        assert store.fetch_one("SELECT rejected FROM ingests") == (1,)
        rejects = store.fetch_df("SELECT path, line, column_name, reason FROM rejects")
        assert rejects[["path", "line", "column_name"]].values.tolist() == [
            [str(path), fmt.line(1), column]]
        assert words[0] in rejects["reason"].iloc[0]
        got = _stored(store)
    assert got == expected and sum(map(len, got.values())) > 0

