"""``helios-jobs``: the SenseTime Helios job log ``cluster_log.csv`` (Hu et al., SC '21).

Source: github.com/S-Lab-System-Group/HeliosData (README, "Schema and Description"), data
licensed CC BY 4.0; the same layout is what github.com/S-Lab-System-Group/HeliosArtifact's
``analysis/trace_parser.py`` reads (``parse_dates=['submit_time', 'start_time', 'end_time']``).

Format: CSV with a header, one row per Slurm job::

    job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
    1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,
        2020-06-09 18:45:36,249,0

(the row is one line in the file; wrapped here).

- ``job_id``: Slurm id (unique within a cluster, in submission order); ``vc``: hashed virtual
  cluster; ``gpu_num``/``cpu_num``: GPUs/CPUs requested; ``state``: ``COMPLETED``,
  ``CANCELLED``, ``FAILED``, ``TIMEOUT`` or ``NODE_FAIL`` (``SUSPENDED`` once, in Uranus), kept
  as written; ``duration``/``queue`` (seconds) are derived upstream from the times and not read.
- Required columns: ``job_id, vc, gpu_num, state, submit_time, start_time, end_time``;
  ``cpu_num`` is read when present; other columns (``user``, ``node_num``, a ``jobname`` some
  derived copies carry) are ignored. Helios publishes no job names.

Canonical rows: ``scope=vc``, ``num_gpus=gpu_num`` (a whole number >= 0), ``num_cpus=cpu_num``,
``submit_ts/start_ts/end_ts`` from the three times (an empty start or end time is NULL: never
started / still running), ``status=state``, ``gpu_type`` NULL (the log has none).

Times: the README does not state a time zone; the timestamps are naive local wall-clock times
of clusters in China (presumably UTC+8). Like ``helios-vc``, they are stored as written (taken
as UTC) unless ``--tz`` names their zone, e.g. ``--tz Asia/Shanghai`` stores true UTC instants.
Times with an explicit offset (``...+08:00`` or ``Z``) are converted to UTC whatever ``--tz``.

Cluster: ``--cluster``; else a ``cluster`` column (HeliosArtifact's ``all_cluster_log.csv``)
lowercased; else the file's folder when it is one of the Helios clusters (``Earth``,
``Saturn``, ``Uranus``, ``Venus``, or ``Philly`` for the artifact's Philly log in the same
layout): ``data/Venus/cluster_log.csv`` -> ``venus``; else ``helios``.

This module also holds two helpers the other trace adapters share: :func:`parse_local_times`
(robust time parsing with ``--tz``) and :func:`locate_malformed_row`.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from prism.errors import IngestError
from prism.ingest.base import LINE, Adapter, Batch, IngestOptions, read_bytes, read_table, register
from prism.ingest.checks import (
    JOB_YEARS,
    RowChecker,
    check_jobs,
    check_times,
    job_frame,
    parse_numbers,
)
from prism.ingest.timeparse import (
    check_tz,
    is_fractional,
    locate_malformed_row,
    parse_local_times,
)

logger = logging.getLogger(__name__)

#: Helios cluster folders (HeliosData ``data/<Cluster>/``, plus the artifact's Philly log).
HELIOS_CLUSTERS = ("Earth", "Saturn", "Uranus", "Venus", "Philly")
DEFAULT_CLUSTER = "helios"
TIME_COLUMNS = ("submit_time", "start_time", "end_time")
_REQUIRED = ("job_id", "vc", "gpu_num", "state", *TIME_COLUMNS)
_TYPES: dict[str, pa.DataType] = {
    "job_id": pa.string(), "user": pa.string(), "vc": pa.string(), "jobname": pa.string(),
    "gpu_num": pa.float64(), "cpu_num": pa.float64(), "node_num": pa.string(),
    "state": pa.string(), "submit_time": pa.string(), "start_time": pa.string(),
    "end_time": pa.string(), "duration": pa.string(), "queue": pa.string(),
    "cluster": pa.string(),
}
_TIME_FIX = "write times as ISO 8601, e.g. 2020-06-09 18:41:01"

def _read_log(path: Path) -> pd.DataFrame:
    """``read_table`` with the line of a malformed row filled in where pyarrow omits it."""
    try:
        return read_table(path, required=_REQUIRED, column_types=_TYPES)
    except IngestError as exc:
        if exc.line is not None or not exc.message.startswith("malformed CSV"):
            raise
        data = read_bytes(path)
        first = data.splitlines()[0] if data.strip() else b""  # a lone \r ends a line too
        try:
            header = next(csv.reader([first.decode("utf-8", "replace")]), [])
        except csv.Error:
            header = []
        if not header:  # no header to count fields by: pyarrow's own message
            raise
        line, what = locate_malformed_row(data, len(header), first_line=2)
        if line is None:
            raise
        raise IngestError(
            f"malformed CSV row: {what} (the header has {len(header)})", path=str(path),
            line=line, fix="every row needs as many fields as the header; quote fields holding "
            "a comma",
        ) from exc


def cluster_of(path: Path, options: IngestOptions) -> str:
    """The cluster a Helios log belongs to when the file has no ``cluster`` column.

    ``--cluster``, else the Helios folder the file sits in (lowercased), else ``helios``.
    """
    if options.cluster:
        return options.cluster
    folder = path.absolute().parent.name
    for name in HELIOS_CLUSTERS:
        if folder.lower() == name.lower():
            return name.lower()
    return DEFAULT_CLUSTER


def _text(values: pd.Series) -> pd.Series:
    text = values.astype("string").str.strip()
    return text.where(text != "").astype(object)


@register
class HeliosJobsAdapter(Adapter):
    """HeliosData ``cluster_log.csv`` job logs (Earth, Saturn, Uranus, Venus)."""

    name = "helios-jobs"
    time_columns = {"submit_ts": "submit_time", "start_ts": "start_time", "end_ts": "end_time"}
    kind = "jobs"
    description = "HeliosData cluster_log.csv (Slurm job log: vc, gpu_num, state, times)"

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read one ``cluster_log.csv`` into canonical jobs (see the module docstring).

        Raises:
            IngestError: for a missing, empty, truncated or malformed file, a missing column,
                or (unless ``on_error="skip"``) a bad row, naming file, line and column.
            ConfigError: for an unknown ``--tz``.
        """
        check_tz(options.tz)
        frame = _read_log(path)
        duplicated = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
        if duplicated:
            raise IngestError(f"column(s) {duplicated} appear more than once", path=str(path),
                              line=1, column=duplicated[0], fix="give every column one name")
        checker = RowChecker(path, frame, options.on_error)

        job_id = _text(frame["job_id"])
        checker.check(job_id.isna().to_numpy(), "job_id", "job_id is empty",
                      "give every job its Slurm id")

        gpus, bad = parse_numbers(frame["gpu_num"])
        checker.check(bad, "gpu_num", "gpu_num is not a number", "write a whole number of GPUs")
        g = gpus.to_numpy(dtype="float64", na_value=np.nan)
        checker.check(np.isnan(g), "gpu_num", "gpu_num is empty",
                      "write the number of GPUs (0 for CPU-only jobs)")
        checker.check(g < 0, "gpu_num", "gpu_num is negative", "GPU counts must be >= 0")
        checker.check(is_fractional(g), "gpu_num",
                      "gpu_num is not a whole number", "Slurm allocates whole GPUs")
        cpus: pd.Series | None = None
        if "cpu_num" in frame.columns:
            cpus, bad = parse_numbers(frame["cpu_num"])
            checker.check(bad, "cpu_num", "cpu_num is not a number", "write a number of CPUs")
            checker.check((cpus < 0).fillna(False).to_numpy(dtype=bool), "cpu_num",
                          "cpu_num is negative", "CPU counts must be >= 0")

        times: dict[str, pd.Series] = {}
        for col in TIME_COLUMNS:
            times[col], bad, tz_bad = parse_local_times(frame[col], options.tz)
            check_times(checker, frame[col], bad, col, col, _TIME_FIX, years=JOB_YEARS,
                        dst=tz_bad, tz=options.tz)
        submit, start, end = (times[c] for c in TIME_COLUMNS)
        checker.check(_text(frame["submit_time"]).isna().to_numpy(), "submit_time",
                      "submit_time is empty", "every job needs a submit time")
        checker.check((end < start).fillna(False).to_numpy(dtype=bool), "end_time",
                      "end_time is before start_time", "check the row's start and end times")
        checker.check((start < submit).fillna(False).to_numpy(dtype=bool), "start_time",
                      "start_time is before submit_time", "check the row's submit and start times")
        checker.check((end < submit).fillna(False).to_numpy(dtype=bool) & start.isna().to_numpy(),
                      "end_time", "end_time is before submit_time",
                      "check the row's submit and end times")

        if options.cluster:
            cluster: pd.Series | str = options.cluster
        elif "cluster" in frame.columns:
            named = _text(frame["cluster"])
            cluster = named.str.lower().where(named.notna(), cluster_of(path, options))
        else:
            cluster = cluster_of(path, options)
        jobs = job_frame(
            {
                "source": self.name,
                "cluster": cluster,
                "scope": _text(frame["vc"]),
                "job_id": job_id,
                "num_gpus": gpus,
                "num_cpus": cpus,
                "submit_ts": submit,
                "start_ts": start,
                "end_ts": end,
                "status": _text(frame["state"]),
            },
            frame[LINE].to_numpy(),
        )
        repeated = (jobs.duplicated(["cluster", "job_id"]).to_numpy()
                    & jobs["job_id"].notna().to_numpy())
        checker.check(repeated, "job_id", "job_id repeats an earlier row of the same cluster",
                      "drop the duplicate row")
        check_jobs(checker, jobs)  # the shared rules, as a net under the checks above
        good, rejects = checker.finish()
        keep = jobs[LINE].isin(good[LINE]).to_numpy()
        out = jobs[keep].reset_index(drop=True)
        if rejects:
            logger.info("%s: %d row(s) rejected", path, len(rejects))
        return Batch(kind="jobs", frame=out, source=self.name, rejects=rejects)
