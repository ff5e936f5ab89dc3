"""``alibaba-pai``: Alibaba PAI cluster-trace-gpu-v2020 task table (Weng et al., NSDI '22).

Source: github.com/alibaba/clusterdata, ``cluster-trace-gpu-v2020/README.md`` and the
``data/*.header`` files (the data is CC BY 4.0). The CSV files have **no header line**; the
column order is the one in ``pai_task_table.header`` / ``pai_job_table.header``:

- ``pai_task_table.csv`` (what this adapter reads):
  ``job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type``,
  e.g. ``4f057009a5d481acec67b088,tensorflow,1.0,Terminated,1739162.0,1739200.0,600.0,
  29.296875,50.0,MISC``.
- ``pai_job_table.csv`` (optional, ``--option job_table=PATH``):
  ``job_name,inst_id,user,status,start_time,end_time``; its ``start_time`` is the job's
  submission time.

A file that starts with the header line anyway (e.g. the ``.header`` file prepended) is accepted.

One canonical job per task: ``job_id = job_name + "/" + task_name``; ``num_gpus = inst_num *
plan_gpu / 100`` (``plan_gpu`` is a percentage of one GPU per instance, so 50 is half a GPU:
fractional counts are kept); ``num_cpus = inst_num * plan_cpu / 100`` (600 is 6 vCPUs);
``gpu_type`` (``MISC`` = older generations, T4, P100, V100...), ``status`` (``Running``,
``Terminated``, ``Failed``, ``Waiting``) as written. An empty ``plan_gpu`` counts as 0 GPUs
(CPU-only tasks, as the trace's own analysis code sums ``plan_gpu / 100`` skipping NaN); an
empty ``plan_cpu`` leaves ``num_cpus`` NULL.

Times: seconds, "deducted by a constant number for desensitization" (README, "Note of time"):
the true origin is unpublished. The README guarantees that read as Unix time and shown in
UTC+8 (``Asia/Shanghai``) they keep the original time of day and day of week (fake dates).
``--origin`` sets the instant that second 0 maps to; the default ``2020-01-02T00:00:00`` (UTC)
is 2609 whole weeks after the Unix epoch, so it keeps that guarantee (weekday and time of day
in UTC+8) while giving dates in 2020. An origin with an offset (``...+08:00``) is converted to
UTC; ``--tz`` does not apply (the numbers are offsets, not local times). A time of ``0`` (or
empty) means "none", as in the trace's analysis code: a task with ``start_time`` 0 has not
started (its end time is then ignored), an ``end_time`` 0 means still running.

Submit time: the task table has none. Without a job table, ``submit_ts = start_ts`` (the task's
launch; queueing is invisible and tasks that never started are rejected). With
``--option job_table=pai_job_table.csv`` the job's ``start_time`` is the submit time and its
``user`` the scope; otherwise ``scope`` is NULL (the derivation puts such jobs in
``unassigned``). A relative job table path is tried from the current folder, then from the task
table's folder. Cluster: ``--cluster`` or ``alibaba-v2020``.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from prism.errors import ConfigError, IngestError
from prism.ingest.base import LINE, Adapter, Batch, IngestOptions, Reject, read_bytes, register
from prism.ingest.checks import RowChecker, check_jobs, job_frame, parse_numbers
from prism.ingest.timeparse import is_fractional, locate_malformed_row

logger = logging.getLogger(__name__)

TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time",
                "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")
JOB_TABLE_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
DEFAULT_ORIGIN = "2020-01-02T00:00:00"
DEFAULT_CLUSTER = "alibaba-v2020"
_NUMERIC = ("inst_num", "start_time", "end_time", "plan_cpu", "plan_mem", "plan_gpu")
_SECONDS_FIX = "write seconds since the trace origin, e.g. 1739162.0"
# Offsets that keep origin + seconds inside datetime64[ns] (about +-292 years).
_NS_MIN = pd.Timestamp("1678-01-02").value
_NS_MAX = pd.Timestamp("2262-04-10").value


def parse_origin(origin: str | None) -> pd.Timestamp:
    """The UTC-naive instant that second 0 of the trace maps to (default ``DEFAULT_ORIGIN``).

    Raises:
        ConfigError: when ``origin`` is not a timestamp.
    """
    text = origin or DEFAULT_ORIGIN
    try:
        stamp = pd.Timestamp(text)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ConfigError(
            f"--origin {text!r} is not a timestamp ({exc}); write e.g. --origin "
            f"{DEFAULT_ORIGIN}"
        ) from exc
    if stamp is pd.NaT:
        raise ConfigError(f"--origin {text!r} is not a timestamp; write e.g. {DEFAULT_ORIGIN}")
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    if not pd.Timestamp("1678-01-02") <= stamp <= pd.Timestamp("2262-04-10"):
        raise ConfigError(f"--origin {text!r} is out of range; pick a date in 1700..2200")
    return pd.Timestamp(stamp).as_unit("ns")


def read_headerless(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    """Read a header-less CSV (plain or ``.gz``) with the given column names, as strings.

    ``_line`` is the 1-based line of each row in the file (blank lines are skipped but
    counted). A first line equal to the column names is taken as a header.

    Raises:
        IngestError: for a missing, empty or truncated file, or a row with the wrong number
            of fields or non-UTF-8 text (naming the line).
    """
    data = read_bytes(path)
    first = data.split(b"\n", 1)[0].strip().decode("utf-8", "replace")
    has_header = [c.strip() for c in first.split(",")] == list(columns)
    read_options = pacsv.ReadOptions(column_names=list(columns), skip_rows=int(has_header))
    convert = pacsv.ConvertOptions(column_types={c: pa.string() for c in columns},
                                   strings_can_be_null=True)
    try:
        table = pacsv.read_csv(io.BytesIO(data), read_options=read_options,
                               convert_options=convert)
    except pa.ArrowInvalid as exc:
        line, what = locate_malformed_row(data, len(columns), first_line=1 + int(has_header))
        raise IngestError(
            f"malformed row: {what or str(exc).splitlines()[0]}; this format has "
            f"{len(columns)} fields ({','.join(columns)}) and no header",
            path=str(path), line=line,
            fix="check that the file is the right table of the trace and is not cut short",
        ) from exc
    frame = table.to_pandas()
    frame[LINE] = _row_lines(data, len(frame), skip=int(has_header))
    return frame


def _row_lines(data: bytes, n_rows: int, *, skip: int) -> np.ndarray:
    """1-based line numbers of the non-blank lines (the rows pyarrow returns)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines = lines[:-1]
    numbers = np.array([i + 1 for i, text in enumerate(lines) if text.rstrip(b"\r")],
                       dtype=np.int64)[skip:]
    if len(numbers) != n_rows:  # e.g. bare-CR line ends: fall back to counting rows
        return np.arange(1 + skip, n_rows + 1 + skip, dtype=np.int64)
    return numbers


def seconds_to_times(
    seconds: pd.Series, origin: pd.Timestamp
) -> tuple[pd.Series, np.ndarray]:
    """``origin + seconds`` as UTC-naive ``datetime64[ns]``; 0 and NaN become NaT.

    Returns:
        The times and a mask of finite values whose time falls outside 1678..2262.
    """
    s = seconds.to_numpy(dtype="float64", na_value=np.nan)
    usable = np.isfinite(s) & (s != 0)
    low, high = (_NS_MIN - origin.value) / 1e9, (_NS_MAX - origin.value) / 1e9
    inside = usable & (s >= low) & (s <= high)  # compared in seconds: no overflow
    values = np.round(np.where(inside, s, 0.0) * 1e9).astype(np.int64)
    out = pd.Series(pd.to_datetime(values + origin.value, unit="ns"), index=seconds.index)
    return out.where(inside).astype("datetime64[ns]"), usable & ~inside


def _text(values: pd.Series) -> pd.Series:
    text = values.astype("string").str.strip()
    return text.where(text != "").astype(object)


def _numbers(checker: RowChecker, frame: pd.DataFrame, column: str) -> pd.Series:
    numbers, bad = parse_numbers(frame[column])
    checker.check(bad, column, f"{column} is not a number", "write a plain number, e.g. 100.0")
    return numbers.where(~bad)  # inf and the like: rejected above, NaN from here on


def _job_table_path(task_path: Path, value: str) -> Path:
    given = Path(value)
    if given.is_absolute() or given.exists():
        return given
    beside = task_path.parent / given
    return beside if beside.exists() else given


def read_job_table(
    path: Path, origin: pd.Timestamp, on_error: str
) -> tuple[pd.DataFrame, list[Reject]]:
    """Read ``pai_job_table.csv`` into ``job_name -> submit_ts, user``.

    Returns:
        One row per job name (``job_name, submit_ts, user``) and the rejected rows (their
        reasons name the job table, since rejects are stored against the task table).

    Raises:
        IngestError: for an unreadable file or, with ``on_error="fail"``, a bad row.
    """
    frame = read_headerless(path, JOB_TABLE_COLUMNS)
    checker = RowChecker(path, frame, on_error)
    name = _text(frame["job_name"])
    checker.check(name.isna().to_numpy(), "job_name", "job_name is empty",
                  "every job needs its name")
    seconds = _numbers(checker, frame, "start_time")
    submit, out_of_range = seconds_to_times(seconds, origin)
    checker.check(out_of_range, "start_time", "start_time is out of range", _SECONDS_FIX)
    repeated = name.duplicated().to_numpy() & name.notna().to_numpy()
    checker.check(repeated, "job_name", "job_name repeats an earlier row of the job table",
                  "keep one row per job")
    good, rejects = checker.finish()
    keep = frame[LINE].isin(good[LINE]).to_numpy()
    jobs = pd.DataFrame({"job_name": name[keep].to_numpy(), "submit_ts": submit[keep].to_numpy(),
                         "user": _text(frame["user"])[keep].to_numpy()})
    noted = [Reject(r.line, r.column, f"job table {path.name} line {r.line}: {r.reason}", r.raw)
             for r in rejects]
    return jobs, noted


@register
class AlibabaPaiAdapter(Adapter):
    """Alibaba PAI v2020 task table (optionally joined with the job table)."""

    name = "alibaba-pai"
    time_columns = {"start_ts": "start_time", "end_ts": "end_time"}
    kind = "jobs"
    description = ("Alibaba cluster-trace-gpu-v2020 pai_task_table.csv (header-less; "
                   "--option job_table=pai_job_table.csv for submit times and users)")
    option_keys = ("job_table",)

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read ``pai_task_table.csv`` into one canonical job per task (see the module doc).

        Raises:
            IngestError: for a missing, empty, truncated or malformed file or, unless
                ``on_error="skip"``, a bad row, naming file, line and column.
            ConfigError: for a bad ``--origin``.
        """
        origin = parse_origin(options.origin)
        job_table: pd.DataFrame | None = None
        job_rejects: list[Reject] = []
        if options.extra.get("job_table"):
            job_path = _job_table_path(path, options.extra["job_table"])
            job_table, job_rejects = read_job_table(job_path, origin, options.on_error)

        frame = read_headerless(path, TASK_COLUMNS)
        checker = RowChecker(path, frame, options.on_error)
        job_name, task_name = _text(frame["job_name"]), _text(frame["task_name"])
        checker.check(job_name.isna().to_numpy(), "job_name", "job_name is empty",
                      "every task needs its job's name")
        checker.check(task_name.isna().to_numpy(), "task_name", "task_name is empty",
                      "every task needs a name")
        num = {c: _numbers(checker, frame, c) for c in _NUMERIC}

        inst = num["inst_num"].to_numpy(dtype="float64", na_value=np.nan)
        checker.check(np.isnan(inst), "inst_num", "inst_num is empty",
                      "write the number of instances of the task")
        checker.check(inst < 0, "inst_num", "inst_num is negative", "instance counts are >= 0")
        checker.check(is_fractional(inst), "inst_num",
                      "inst_num is not a whole number", "instance counts are whole numbers")
        plan_gpu = num["plan_gpu"].to_numpy(dtype="float64", na_value=np.nan)
        checker.check(plan_gpu < 0, "plan_gpu", "plan_gpu is negative",
                      "plan_gpu is a percentage of one GPU, >= 0 (100 = one GPU)")
        plan_cpu = num["plan_cpu"].to_numpy(dtype="float64", na_value=np.nan)
        checker.check(plan_cpu < 0, "plan_cpu", "plan_cpu is negative",
                      "plan_cpu is a percentage of one vCPU, >= 0 (600 = six vCPUs)")

        start, bad = seconds_to_times(num["start_time"], origin)
        checker.check(bad, "start_time", "start_time is out of range", _SECONDS_FIX)
        end, bad = seconds_to_times(num["end_time"], origin)
        checker.check(bad, "end_time", "end_time is out of range", _SECONDS_FIX)
        end = end.where(start.notna())  # the trace's analysis drops end when start is 0
        checker.check((end < start).fillna(False).to_numpy(dtype=bool), "end_time",
                      "end_time is before start_time", "check the row's start and end times")

        with np.errstate(over="ignore", invalid="ignore"):
            gpus = inst * np.where(np.isnan(plan_gpu), 0.0, plan_gpu) / 100.0
            cpus = inst * plan_cpu / 100.0
        checker.check(np.isinf(gpus), "plan_gpu", "inst_num * plan_gpu is too large",
                      "plan_gpu is a percentage of one GPU per instance, e.g. 50.0")
        checker.check(np.isinf(cpus), "plan_cpu", "inst_num * plan_cpu is too large",
                      "plan_cpu is a percentage of one vCPU per instance, e.g. 600.0")

        scope: pd.Series | None = None
        if job_table is None:
            submit = start
            checker.check(start.isna().to_numpy(), "start_time",
                          "task has not started (start_time empty or 0) and no job table gives "
                          "its submit time",
                          "pass --option job_table=pai_job_table.csv")
        else:
            lookup = job_table.set_index("job_name")
            known = job_name.isin(lookup.index).to_numpy(dtype=bool)
            checker.check(~known & job_name.notna().to_numpy(), "job_name",
                          "job_name is not in the job table",
                          "pass the job table of the same trace")
            submit = pd.Series(job_name.map(lookup["submit_ts"]), index=frame.index)
            submit = submit.astype("datetime64[ns]")
            checker.check(known & submit.isna().to_numpy(), "job_name",
                          "the job table has no submit time (start_time) for this job",
                          "fill start_time in the job table")
            checker.check((start < submit).fillna(False).to_numpy(dtype=bool), "start_time",
                          "start_time is before the job's submit time in the job table",
                          "check the task's start_time and the job's start_time")
            scope = pd.Series(job_name.map(lookup["user"]), index=frame.index).astype(object)

        job_id = job_name.astype("string") + "/" + task_name.astype("string")
        jobs = job_frame(
            {
                "source": self.name,
                "cluster": options.cluster or DEFAULT_CLUSTER,
                "scope": scope,
                "job_id": job_id.astype(object),
                "gpu_type": _text(frame["gpu_type"]),
                "num_gpus": gpus,
                "num_cpus": cpus,
                "submit_ts": submit,
                "start_ts": start,
                "end_ts": end,
                "status": _text(frame["status"]),
            },
            frame[LINE].to_numpy(),
        )
        repeated = jobs["job_id"].duplicated().to_numpy() & jobs["job_id"].notna().to_numpy()
        checker.check(repeated, "task_name", "job_name/task_name repeats an earlier row",
                      "keep one row per task")
        check_jobs(checker, jobs)
        good, rejects = checker.finish()
        keep = jobs[LINE].isin(good[LINE]).to_numpy()
        out = jobs[keep].reset_index(drop=True)
        all_rejects = job_rejects + rejects
        if all_rejects:
            logger.info("%s: %d row(s) rejected", path, len(all_rejects))
        return Batch(kind="jobs", frame=out, source=self.name, rejects=all_rejects)
