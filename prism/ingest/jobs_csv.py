"""``jobs-csv``: a generic job trace, one row per job, onto the canonical ``jobs`` table.

The file (CSV, ``.csv.gz`` or Parquet) has the canonical columns ``job_id, cluster, scope,
gpu_type, num_gpus, num_cpus, submit_ts, start_ts, end_ts, status`` (what ``prism generate``
writes), or others mapped onto them with ``--map job_id=JobId --map submit_ts=queued_at``.
Required: ``job_id``, ``num_gpus``, ``submit_ts``; ``cluster`` unless ``--cluster`` names it.
Times are ISO 8601 (a zone suffix is honoured, naive times are in ``--tz``, default UTC) or, with
``--option time_unit=s`` (or ``ms``), numbers since the Unix epoch. An empty ``start_ts`` means
the job never started (queued at trace end); an empty ``end_ts`` means still running. A file
without an ``end_ts`` column is refused (every job would count as running for ever) unless
``--option open_jobs=running`` says that is what it means.
Columns the format does not know fail the ingest (a typo would otherwise be dropped silently);
list columns to drop with ``--option ignore=col1,col2``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from prism.errors import IngestError
from prism.ingest.base import (
    LINE,
    Adapter,
    Batch,
    IngestOptions,
    SlowPath,
    file_columns,
    read_table,
    register,
    stream_arrow,
)
from prism.ingest.checks import (
    JOB_YEARS,
    RowChecker,
    check_jobs,
    check_times,
    job_frame,
    parse_numbers,
    parse_times,
    reject_unknown_columns,
)
from prism.schema import EARLIEST_TS, JOB_COLUMNS, LATEST_TS, FileScan, ScanType

logger = logging.getLogger(__name__)

_FIELDS = tuple(c for c in JOB_COLUMNS if c != "source")
_TYPES: dict[str, pa.DataType] = {
    "job_id": pa.string(), "cluster": pa.string(), "scope": pa.string(),
    "gpu_type": pa.string(), "status": pa.string(), "num_gpus": pa.float64(),
    "num_cpus": pa.float64(), "submit_ts": pa.timestamp("s"), "start_ts": pa.timestamp("s"),
    "end_ts": pa.timestamp("s"),
}

_SCAN_TYPES: dict[str, ScanType] = {
    "num_gpus": "number", "num_cpus": "number",
    "submit_ts": "time", "start_ts": "time", "end_ts": "time",
}


def mapped_columns(options: IngestOptions, fields: tuple[str, ...]) -> dict[str, str]:
    """Canonical field -> file column, after ``--map``.

    Raises:
        IngestError: when ``--map`` names a field the format does not have.
    """
    unknown = [k for k in options.mapping if k not in fields]
    if unknown:
        raise IngestError(
            f"--map names unknown field(s) {unknown}",
            fix=f"map onto one of {list(fields)}, as --map FIELD=COLUMN",
        )
    return {f: options.mapping.get(f, f) for f in fields}


def _constant(value: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                          pa.array([value]))


@register
class JobsCsvAdapter(Adapter):
    """Generic job trace with a column mapping."""

    name = "jobs-csv"
    kind = "jobs"
    description = "one row per job: job_id, cluster, scope, gpu_type, num_gpus, times, status"
    option_keys = ("time_unit", "ignore", "open_jobs")
    option_choices = {"open_jobs": ("running",)}

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read a job CSV/Parquet file; see the module docstring for the columns."""
        columns = mapped_columns(options, _FIELDS)
        fast = self.stream(path, options)
        if fast is not None:
            try:
                chunks = list(fast)
            except SlowPath:
                pass
            else:
                frame = pa.concat_tables(chunks) if chunks else None
                if frame is not None:
                    first = 1 if path.suffix in (".parquet", ".pq") else 2  # CSV header: 1
                    lines = pa.array(np.arange(first, frame.num_rows + first, dtype=np.int64))
                    return Batch(kind="jobs", frame=frame.append_column(LINE, lines),
                                 source=self.name)
        unit = options.extra.get("time_unit")
        types = None if unit else {columns[f]: t for f, t in _TYPES.items()}
        if options.tz and types:
            types = {c: t for c, t in types.items() if not str(t).startswith("timestamp")}
        required = [columns["job_id"], columns["num_gpus"], columns["submit_ts"]]
        if options.cluster is None:
            required.append(columns["cluster"])
        frame = read_table(path, required=required, column_types=types)
        reject_unknown_columns(
            path, frame, [*columns.values(), *_ignored(options)],
            fix="rename it to a canonical column, map it with --map FIELD=COLUMN, or drop it "
            "with --option ignore=COLUMN",
        )
        if not _has_end_column(path, list(frame.columns), columns, options):
            logger.warning("%s: no end time column %r (--option open_jobs=running): every "
                           "job counts as running from its start to the end of the trace, so "
                           "GPUs in use include jobs that have ended", path, columns["end_ts"])
        checker = RowChecker(path, frame, options.on_error)
        out: dict[str, pd.Series | object] = {"source": self.name}
        for field in ("submit_ts", "start_ts", "end_ts"):
            col = columns[field]
            if col not in frame.columns:
                continue
            times, bad, dst = parse_times(frame[col], tz=options.tz, unit=unit)
            check_times(checker, frame[col], bad, col, field,
                        "write ISO 8601 times such as 2026-01-05T08:30:00 (or numbers with "
                        "--option time_unit=s)", years=JOB_YEARS, numeric=unit is not None,
                        dst=dst, tz=options.tz, unit_hint=True)
            out[field] = times
        for field in ("num_gpus", "num_cpus"):
            col = columns[field]
            if col in frame.columns:
                numbers, bad = parse_numbers(frame[col])
                checker.check(bad, col, f"{field} is not a number", "write a plain number")
                out[field] = numbers
        for field in ("job_id", "cluster", "scope", "gpu_type", "status"):
            col = columns[field]
            if col in frame.columns:
                text = frame[col].astype("string")
                out[field] = text.where(text != "").astype("object")
        if options.cluster is not None:
            out["cluster"] = options.cluster
        jobs = job_frame(out, frame[LINE].to_numpy())
        jobs["source"] = self.name
        checker.frame = jobs
        checker.check(jobs["cluster"].isna().to_numpy(), "cluster", "cluster is empty",
                      "fill the cluster column or pass --cluster NAME")
        check_jobs(checker, jobs)
        good, rejects = checker.finish()
        return Batch(kind="jobs", frame=good, source=self.name, rejects=rejects)

    def native(self, path: Path, options: IngestOptions) -> FileScan | None:
        """DuckDB reads the file itself when its columns are the known ones and the times need
        no option (``--tz``, ``time_unit``); whether every value parses and every row passes
        the checks is only known after the insert (the pipeline checks it in SQL)."""
        if options.tz or options.extra.get("time_unit"):
            return None
        opened = file_columns(path)
        if opened is None:
            return None
        file_format, names, hint, naive = opened
        columns = mapped_columns(options, _FIELDS)
        if len(set(names)) != len(names) or not _fast_columns(names, columns, options):
            return None  # the checked path names the column problem
        if not _has_end_column(path, names, columns, options):
            return None  # open_jobs=running: the checked path warns, once
        fields = {f: names.index(c) for f, c in columns.items() if c in names
                  and not (f == "cluster" and options.cluster is not None)}
        types: list[ScanType] = []
        for i in range(len(names)):
            wanted = {_SCAN_TYPES.get(f, "text") for f, j in fields.items() if j == i}
            if len(wanted) > 1:  # one column mapped onto a time and a text field
                return None
            kind = wanted.pop() if wanted else "text"
            types.append("utc_time" if kind == "time" and names[i] in naive else kind)
        constants = {"source": self.name}
        if options.cluster is not None:
            constants["cluster"] = options.cluster
        return FileScan(path, file_format, tuple(types), fields, constants, hint)

    def stream(self, path: Path, options: IngestOptions) -> Iterator[pa.Table] | None:
        """Arrow all the way (no pandas) for clean files: typed chunked read, vectorised checks.

        ``None`` when the file needs the slow path from the start (local or numeric times, a
        column problem); a chunk with a value that does not parse, or a row that fails a check,
        raises :class:`SlowPath` (the slow path then names the row).
        """
        if options.tz or options.extra.get("time_unit"):
            return None
        columns = mapped_columns(options, _FIELDS)
        opened = stream_arrow(path, {columns[f]: t for f, t in _TYPES.items()})
        if opened is None:
            return None
        names, chunks = opened
        if not _fast_columns(names, columns, options):
            return None  # the slow path reports the column problem
        if not _has_end_column(path, names, columns, options):
            return None  # open_jobs=running: the slow path warns, once

        def canonical() -> Iterator[pa.Table]:
            for table in chunks:
                jobs = self._canonical(table, columns, options)
                if not _clean(jobs):
                    raise SlowPath("a row fails a check")
                yield jobs

        return canonical()

    def _canonical(
        self, table: pa.Table, columns: dict[str, str], options: IngestOptions
    ) -> pa.Table:
        n = table.num_rows
        arrays: dict[str, pa.Array | pa.ChunkedArray] = {"source": _constant(self.name, n)}
        for field in _FIELDS:
            col = columns[field]
            if field == "cluster" and options.cluster is not None:
                arrays[field] = _constant(options.cluster, n)
            elif col in table.column_names:
                arrays[field] = table[col]
            else:
                arrays[field] = pa.nulls(n, type=_TYPES[field])
        return pa.table(arrays)


def _has_end_column(
    path: Path, names: Sequence[str], columns: dict[str, str], options: IngestOptions
) -> bool:
    """Whether the file has its end time column; a file without one is refused unless
    ``--option open_jobs=running`` says that every job counts as running to the trace end
    (such a file takes the checked reader, which warns).

    Raises:
        IngestError: naming the file, the missing column and the two fixes.
    """
    column = columns["end_ts"]
    if column in names:
        return True
    if options.extra.get("open_jobs") == "running":
        return False
    raise IngestError(
        f"no end time column {column!r}: every job would count as running for ever, "
        "inflating GPUs in use", path=str(path),
        line=None if path.suffix in (".parquet", ".pq") else 1, column=column,
        fix=f"add the column {column!r} (empty for a job still running) or map yours with "
        "--map end_ts=COLUMN, or pass --option open_jobs=running to count every job as "
        "running until the end of the trace",
    )


def _ignored(options: IngestOptions) -> list[str]:
    """The columns ``--option ignore=a,b`` drops."""
    return [c.strip() for c in options.extra.get("ignore", "").split(",") if c.strip()]


def _fast_columns(names: list[str], columns: dict[str, str], options: IngestOptions) -> bool:
    """Whether a file with these columns can take a fast path: every column known (mapped or
    ignored) and the required ones there; else the checked path reports the problem."""
    known = {*columns.values(), *_ignored(options)}
    return all(c in known for c in names) and all(
        columns[f] in names for f in ("job_id", "num_gpus", "submit_ts")) and (
        options.cluster is not None or columns["cluster"] in names)


def _clean(jobs: pa.Table) -> bool:
    """Whether every row passes the job checks of ``checks.check_jobs`` but the duplicate ids."""
    if any(jobs[c].null_count for c in ("job_id", "cluster", "num_gpus", "submit_ts")):
        return False
    gpus = jobs["num_gpus"]
    if pc.any(pc.less(gpus, 0)).as_py() or not pc.all(pc.is_finite(gpus)).as_py():
        return False
    submit, start, end = jobs["submit_ts"], jobs["start_ts"], jobs["end_ts"]
    lo = pa.scalar(EARLIEST_TS.to_pydatetime(), type=pa.timestamp("s"))
    hi = pa.scalar(LATEST_TS.to_pydatetime(), type=pa.timestamp("s"))
    for when in (submit, start, end):
        when = pc.cast(when, pa.timestamp("s"))
        if pc.any(pc.or_(pc.less(when, lo), pc.greater_equal(when, hi))).as_py():
            return False
    for later, earlier in ((end, start), (start, submit), (end, submit)):
        if pc.any(pc.less(later, earlier)).as_py():
            return False
    return True  # duplicate job ids are found in SQL after the insert (pipeline)
