"""``slurm-sacct``: Slurm accounting records (``sacct --parsable2``) onto the ``jobs`` table.

Produce the file with::

    sacct --allusers --parsable2 --starttime 2026-01-01 --endtime 2026-02-01 \\
          --format=JobID,User,Account,Partition,AllocTRES,Submit,Start,End,State > jobs.txt

The first non-blank line is the header (sacct without ``--noheader``); fields are separated by
``|`` with no trailing ``|`` (output of ``--parsable``, which adds one, is accepted too). Lines
equal to the header further down (several exports concatenated) are skipped, as are blank lines.
Required columns: ``JobID, AllocTRES, Submit, Start, End, State`` and ``Account`` (``Partition``
with ``--option scope=partition``); other columns are ignored.

Mapping onto the canonical job rows:

* ``job_id`` = ``JobID``. Job steps (an id with a ``.``: ``123.batch``, ``123.extern``,
  ``123.0``, ``123_4.batch``) are skipped: they repeat their job's allocation. Array tasks
  (``123_4``) and heterogeneous components (``123+0``) are jobs. A pending array line stands
  for each task it lists, in Slurm's range syntax (``123_[5-9]``, ``123_[1,3,5-7]``, a step
  ``123_[0-15:4]``, a throttle ``123_[3-5%2]``, which limits how many run at once, not how
  many there are): it becomes one job per task (``123_5``, ..., ``123_9``), each with the
  line's request.
* ``scope`` = ``Account`` (the tenant), or ``Partition`` where the account is empty. With
  ``--option scope=partition`` the partition is the scope (the first one listed for a job
  pending on several, ``gpu,debug``). ``--scope NAME`` puts every job of the file in one scope.
* ``num_gpus`` = ``gres/gpu=N`` of ``AllocTRES`` (the sum of the typed ``gres/gpu:TYPE=N`` where
  the untyped total is missing; 0 without GPU TRES). ``gpu_type`` = ``TYPE`` of the typed
  entries (types joined with ``+`` in the rare job holding several; NULL when untyped).
  ``gres/gpumem`` and ``gres/gpuutil`` are other TRES and are not GPU counts.
  ``num_cpus`` = ``cpu=N`` (NULL without it).
  A pending job has no allocation yet, so its ``AllocTRES`` is empty: add ``ReqTRES`` to
  ``--format`` and its request is used instead (otherwise it counts 0 GPUs and a warning is
  logged).
* ``submit_ts, start_ts, end_ts`` = ``Submit, Start, End``. sacct prints local wall-clock time
  (``2026-01-05T08:30:00``): ``--tz`` names the zone (default UTC), stored times are UTC. In the
  hour repeated when the clock falls back, a time is read as the first (daylight-saving) pass; a
  time in the hour skipped when it springs forward is rejected (it cannot come from that zone,
  check ``--tz``). Times with an offset (``SLURM_TIME_FORMAT=%Y-%m-%dT%H:%M:%S%z``) are exact
  and ignore ``--tz``. ``Unknown``, ``None`` and empty are NULL: a pending job has no start, a
  running one no end.
* ``status`` = the first word of ``State``, upper case (``CANCELLED by 1001`` -> ``CANCELLED``).
* ``cluster`` = ``--cluster``, else a ``Cluster`` column when the export has one
  (``sacct --clusters``), else ``slurm``.

Requeued jobs (``sacct --duplicates``): each time Slurm requeues a job it records a new
attempt under the same ``JobID`` with a new ``Submit`` (the requeue time; slurmdbd keys its
records by ``JobID`` and ``Submit``). Every attempt held its GPUs, so every one is kept: the last
(latest ``Submit``) keeps the ``JobID``, the earlier ones become jobs ``JobID#1``, ``JobID#2``,
... (in ``Submit`` order), and the ingest summary says how many attempts were kept that way.
Each attempt counts in ``jobs_submitted`` at its own ``Submit`` (a requeue puts the job back in
the queue). Two lines with the same ``JobID`` and the same ``Submit`` are the same record twice
(e.g. two exports concatenated) and are refused as a repeated job id; ingest the exports as
files of their own (in one run or several, oldest first): a later file's row of a job replaces
the earlier one.

Observation window: ``sacct --starttime`` (``-S``) exports every job that was pending or
running at or after ``-S``, so a job that ended before ``-S`` is left out, while jobs running
since long before are in. From the earliest ``End`` in the export onward, the export is
complete (every job that ended at or after ``-S``, and so at or after that ``End``, is in it);
before it, jobs may be missing. So when some job of the export started before its earliest
``End``, the series start there rather than at the first ``Submit`` (the ingest summary says
so), unless that ``End`` is the export's last time (nothing would be left to derive).
``--option window_start=TIME`` sets the start instead (e.g. the ``-S`` of the export, or the
first ``Submit`` for an export of the cluster's whole history); it is read like the file's times
(``--tz``, or an offset). The series end at the last time in the export. A cluster's series
span the windows of all its ingests: the first ingest's start holds when later daily exports
start later.
"""

from __future__ import annotations

import logging
import re
import zoneinfo
from pathlib import Path

import numpy as np
import pandas as pd

from prism.errors import ConfigError, IngestError
from prism.ingest.base import LINE, Adapter, Batch, IngestOptions, read_bytes, register
from prism.ingest.checks import JOB_YEARS, RowChecker, check_jobs, check_times, job_frame
from prism.schema import JOB_COLUMNS

logger = logging.getLogger(__name__)

_DEFAULT_CLUSTER = "slurm"
_NULL_TIMES = frozenset({"", "unknown", "none", "n/a"})
_TIME_FORMAT = "2026-01-05T08:30:00"
_OFFSET = re.compile(r"(?:Z|[+-]\d{2}:?\d{2})$")
# Earliest and latest times a datetime64[ns] holds (with a day of margin for time zones).
_MIN_TIME = pd.Timestamp("1678-01-02")
_MAX_TIME = pd.Timestamp("2262-04-10")
_COUNT = re.compile(r"^[+-]?\d+$")
#: A pending job array line, ``123_[1,3,5-7%2]``, and one item of its list.
_ARRAY = re.compile(r"^(\S+?)_\[([^\]]+)\]$")
_ARRAY_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
_MAX_TASKS = 4_000_001

#: Canonical column -> the sacct column named in errors about it.
_SACCT_COLUMN = {
    "job_id": "JobID",
    "num_gpus": "AllocTRES",
    "submit_ts": "Submit",
    "start_ts": "Start",
    "end_ts": "End",
}


class _SacctChecker(RowChecker):
    """A :class:`RowChecker` whose errors name sacct's columns (``End``, not ``end_ts``).

    The frame it checks holds the canonical columns and the raw sacct text, so that an error
    shows the value as it is written in the file.
    """

    def check(self, bad: np.ndarray | pd.Series, column: str | None, reason: str, fix: str) -> None:
        """Mark rows where ``bad`` is true as failing ``reason`` (about ``column``)."""
        raw = _SACCT_COLUMN.get(column or "", column)
        super().check(bad, raw if raw in self.frame.columns else column, reason, fix)


@register
class SlurmSacctAdapter(Adapter):
    """Slurm accounting records from ``sacct --parsable2``."""

    name = "slurm-sacct"
    time_columns = {"submit_ts": "Submit", "start_ts": "Start", "end_ts": "End"}
    kind = "jobs"
    description = (
        "sacct --parsable2 --format=JobID,User,Account,Partition,AllocTRES,Submit,Start,End,State"
    )
    option_keys = ("scope", "window_start")

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read one sacct export; see the module docstring for the mapping.

        Args:
            path: the export (plain text or ``.gz``).
            options: ``cluster``, ``scope``, ``tz``, ``on_error``, ``extra["scope"]``
                (``account``, the default, or ``partition``) and ``extra["window_start"]``
                (where the series start, in the file's time zone).

        Returns:
            A ``jobs`` batch, one row per job (steps skipped).

        Raises:
            IngestError: for an empty file, a missing column or, unless ``on_error`` is
                ``skip``, the first bad row (file, line, column and how to fix it).
            ConfigError: for an unknown ``--tz`` zone, ``--option scope`` value or a
                ``--option window_start`` that is not a time.
        """
        scope_by = options.extra.get("scope", "account").strip().lower()
        if scope_by not in ("account", "partition"):
            raise ConfigError(
                f"--option scope={options.extra['scope']!r} is not a slurm-sacct scope; "
                "use --option scope=account (default) or --option scope=partition"
            )
        tz = _check_zone(options.tz)
        window_start = _window_start(options.extra.get("window_start"), tz)
        raw = _read_sacct(path, scope_by)
        checker = _SacctChecker(path, raw, options.on_error)
        checker.check(raw["_fields_ok"].to_numpy() == 0, None,
                      "row does not have as many '|'-separated fields as the header",
                      "export with sacct --parsable2 and leave out fields that may hold '|' "
                      "(JobName, Comment)")
        num_gpus, gpu_type, num_cpus = _parse_tres(checker, raw["AllocTRES"], "AllocTRES")
        if "ReqTRES" in raw.columns:
            pending = raw["AllocTRES"].str.strip().eq("").to_numpy(dtype=bool)
            if pending.any():
                req_gpus, req_type, req_cpus = _parse_tres(
                    checker, raw["ReqTRES"].where(pending, ""), "ReqTRES"
                )
                num_gpus = np.where(pending, req_gpus, num_gpus)
                gpu_type = np.where(pending, req_type, gpu_type)
                num_cpus = np.where(pending, req_cpus, num_cpus)
        else:
            unallocated = raw["AllocTRES"].str.strip().eq("") & raw["State"].str.upper().str.match(
                r"\s*PENDING"
            )
            if unallocated.any():
                logger.warning(
                    "%s: %d pending job(s) have an empty AllocTRES and count 0 GPUs; add "
                    "ReqTRES to sacct --format to count the GPUs they asked for",
                    path, int(unallocated.sum()),
                )
        times: dict[str, pd.Series] = {}
        for field, column in (("submit_ts", "Submit"), ("start_ts", "Start"), ("end_ts", "End")):
            parsed, bad, gap = _parse_times(raw[column], tz)
            check_times(checker, raw[column], bad, column, column,
                        f"sacct prints times as {_TIME_FORMAT}; write that form, or Unknown "
                        "where there is none", years=JOB_YEARS)
            checker.check(gap, column, f"{column} does not exist in time zone {tz} (the clock "
                          "skips that hour)", "pass the zone the times were printed in with --tz")
            times[field] = parsed

        state = pd.Series([_state(text) for text in raw["State"].to_numpy()], dtype=object)
        if options.scope is not None:
            scope: pd.Series | str = options.scope
        else:
            # _read_sacct made sure the primary column is there; Partition is an optional fallback.
            partition = (
                raw["Partition"].str.strip().str.split(",").str[0].fillna("")
                if "Partition" in raw.columns else None
            )
            if scope_by == "partition" and partition is not None:
                primary, fallback = partition, None
            else:
                primary, fallback = raw["Account"].str.strip(), partition
            scope = primary.where(primary != "")
            if fallback is not None:
                scope = scope.fillna(fallback.where(fallback != ""))
        if options.cluster is not None:
            cluster: pd.Series | str = options.cluster
        elif "Cluster" in raw.columns:
            cluster = raw["Cluster"].str.strip().replace("", _DEFAULT_CLUSTER)
        else:
            cluster = _DEFAULT_CLUSTER

        job_id = raw["JobID"].str.strip()
        columns: dict[str, pd.Series | np.ndarray | object] = {
            "source": self.name,
            "cluster": _broadcast(cluster, len(raw)),
            "scope": _broadcast(scope, len(raw)),
            "job_id": job_id.where(job_id != "").astype("object"),
            "gpu_type": gpu_type,
            "num_gpus": num_gpus,
            "num_cpus": num_cpus,
            "status": state,
            **times,
        }
        jobs = job_frame(columns, raw[LINE].to_numpy())
        for name in _SACCT_COLUMN.values():  # raw text, for the errors to quote
            jobs[name] = raw[name].to_numpy()
        requeued = _number_attempts(jobs)
        checker.frame = jobs
        check_jobs(checker, jobs)
        good, rejects = checker.finish()
        notes = []
        if requeued:
            notes.append(f"{requeued:,} earlier attempt(s) of requeued jobs (the same JobID "
                         "with an earlier Submit) kept as jobs JobID#1, #2, ...: each held its "
                         "GPUs")
        obs_start = window_start
        if obs_start is None:
            obs_start, why = _complete_from(good, tz)
            if why:
                notes.append(why)
        return Batch(kind="jobs", frame=good[[*JOB_COLUMNS, LINE]].copy(), source=self.name,
                     rejects=rejects, obs_start=obs_start, note="; ".join(notes))


def _number_attempts(jobs: pd.DataFrame) -> int:
    """Give the earlier attempts of a requeued job (the same cluster and ``JobID``, another
    ``Submit``) the ids ``JobID#1``, ``JobID#2``, ... in ``Submit`` order; the attempt with the
    latest ``Submit`` keeps the ``JobID``. Rows with the same ``Submit`` keep their id (the
    repeat check refuses them).

    Returns:
        How many rows were renamed.
    """
    keys = ["cluster", "job_id"]
    valid = jobs["job_id"].notna() & jobs["submit_ts"].notna()
    repeated = valid & jobs.duplicated(keys, keep=False)
    if not repeated.any():
        return 0
    rows = jobs.loc[repeated, [*keys, "submit_ts"]]
    groups = rows.groupby(keys, sort=False)["submit_ts"]
    rank = groups.rank(method="dense", ascending=False)  # 1: the latest Submit
    attempt = groups.transform("nunique") - rank + 1
    earlier = rank > 1
    if not earlier.any():
        return 0
    index = rows.index[earlier.to_numpy()]
    jobs.loc[index, "job_id"] = [
        f"{job_id}#{int(n)}" for job_id, n in zip(rows.loc[index, "job_id"],
                                                   attempt[earlier], strict=True)]
    return len(index)


def _complete_from(good: pd.DataFrame, tz: str) -> tuple[pd.Timestamp | None, str]:
    """Where the export is complete (see the module docstring): its earliest ``End``, when
    some job started before it and the export goes on after it; else ``None`` (the series
    start at the first ``Submit``).

    Returns:
        The start of the observation window and the note that says why (empty for ``None``).
    """
    ends = good["end_ts"].dropna()
    if ends.empty:
        return None, ""
    first_end = pd.Timestamp(ends.min())
    first_submit = pd.Timestamp(good["submit_ts"].min())
    last = max(pd.Timestamp(good[c].max()) for c in ("submit_ts", "start_ts", "end_ts")
               if good[c].notna().any())
    if not (good["start_ts"] < first_end).any() or not first_submit < first_end < last:
        return None, ""
    local = first_submit.tz_localize("UTC").tz_convert(tz).strftime("%Y-%m-%dT%H:%M:%S")
    return first_end, (
        f"the series start at {first_end:%Y-%m-%d %H:%M} UTC, the earliest End in the export, "
        f"not at its first Submit ({first_submit:%Y-%m-%d %H:%M} UTC): an export made with "
        "sacct -S leaves out the jobs that ended before -S, so before its earliest End it may "
        "miss jobs; if the export holds every job from its first Submit on, pass --option "
        f"window_start={local} (or the -S of the export) to start there")


def _window_start(text: str | None, tz: str) -> pd.Timestamp | None:
    """``--option window_start``, read like sacct's times (naive ones in ``tz``), in UTC."""
    if text is None:
        return None
    parsed, bad, gap = _parse_times(pd.Series([text.strip()], dtype="string"), tz)
    if bad[0] or gap[0] or pd.isna(parsed.iloc[0]):
        raise ConfigError(
            f"--option window_start={text!r} is not a time: write it as sacct prints times, "
            f"e.g. --option window_start={_TIME_FORMAT} (the -S of the export; naive times are "
            "in --tz, default UTC)")
    return pd.Timestamp(parsed.iloc[0])


def _state(text: object) -> str | None:
    """``CANCELLED by 1001`` -> ``CANCELLED`` (the first word, upper case; None when empty)."""
    words = str(text).split(None, 1)
    state = words[0].upper().rstrip("+") if words else ""
    return state or None


def _check_zone(tz: str | None) -> str:
    """The ``--tz`` zone, checked (UTC when none is given)."""
    if tz is None:
        return "UTC"
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(
            f"--tz {tz!r} is not a time zone; pass an IANA zone name such as Europe/Berlin, "
            "America/Chicago or UTC (the zone of the cluster's slurmdbd)"
        ) from exc
    return tz


def _read_sacct(path: Path, scope_by: str) -> pd.DataFrame:
    """Split the export into a frame of strings with ``_line`` and ``_fields_ok``; steps dropped.

    Raises:
        IngestError: for an empty file or a header without the required columns.
    """
    data = read_bytes(path)
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    lines = text.split("\n")
    header_at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        raise IngestError("file holds only blank characters", path=str(path),
                          fix="pass a file with the sacct header and rows")
    header_line = lines[header_at].rstrip("\r")
    trailing = header_line.endswith("|")  # sacct --parsable ends every line with '|'
    header = [h.strip() for h in (header_line[:-1] if trailing else header_line).split("|")]
    known = {h.lower(): i for i, h in reversed(list(enumerate(header)))}
    required = ["JobID", "AllocTRES", "Submit", "Start", "End", "State",
                "Partition" if scope_by == "partition" else "Account"]
    missing = [c for c in required if c.lower() not in known]
    if missing and "|" not in header_line:
        shape = ("comma-separated" if header_line.count(",") >= 3 else
                 "fixed-width (sacct's default)" if len(header_line.split()) >= 3 else "other")
        raise IngestError(
            f"the file is not '|'-separated sacct output: its header {header_line.strip()!r} "
            f"has no '|' ({shape} columns, which PRISM cannot split reliably: TRES lists hold "
            "commas and sacct truncates wide fields)",
            path=str(path), line=header_at + 1,
            fix="export with sacct -P (--parsable2) --format=JobID,User,Account,Partition,"
            "AllocTRES,ReqTRES,Submit,Start,End,State (and without --noheader)",
        )
    if missing:
        raise IngestError(
            f"missing column(s) {missing} in the header; it has {header}",
            path=str(path), line=header_at + 1, column=missing[0],
            fix="export with sacct --parsable2 --format=JobID,User,Account,Partition,AllocTRES,"
            "Submit,Start,End,State (and without --noheader)",
        )
    wanted = {c: known[c.lower()] for c in
              ("JobID", "Account", "Partition", "AllocTRES", "ReqTRES", "Submit", "Start",
               "End", "State", "Cluster") if c.lower() in known}
    width = len(header)
    id_at = list(wanted).index("JobID")
    rows: list[list[str]] = []
    numbers: list[int] = []
    fields_ok: list[int] = []
    for number, line in enumerate(lines[header_at + 1:], start=header_at + 2):
        line = line.rstrip("\r")
        if not line.strip() or line == header_line:
            continue
        if trailing and line.endswith("|"):
            line = line[:-1]
        fields = line.split("|")
        job_id = fields[wanted["JobID"]] if wanted["JobID"] < len(fields) else ""
        if "." in job_id:
            continue  # a job step: its job's row already holds the allocation
        ok = len(fields) == width
        fields = (fields + [""] * width)[:width]
        row = [fields[i] for i in wanted.values()]
        tasks = _array_tasks(job_id.strip())
        for task in tasks if tasks is not None else [row[id_at]]:
            rows.append([*row[:id_at], task, *row[id_at + 1:]])
            numbers.append(number)
            fields_ok.append(int(ok))
    frame = pd.DataFrame(rows, columns=list(wanted), dtype="object")
    frame = frame.astype("string")
    frame[LINE] = np.asarray(numbers, dtype=np.int64)
    frame["_fields_ok"] = np.asarray(fields_ok, dtype=np.int64)
    return frame


def _array_tasks(job_id: str) -> list[str] | None:
    """The task ids of a pending array line (``500_[3-5%2]`` -> ``500_3, 500_4, 500_5``), in
    Slurm's syntax: values and ranges separated by commas, a range with an optional ``:step``,
    an optional ``%N`` throttle (how many run at once). ``None`` for other ids and for a list
    that does not read as one (or expands beyond Slurm's largest array, 4,000,001 tasks): the
    line stays one job."""
    match = _ARRAY.match(job_id)
    if match is None:
        return None
    base, spec = match.group(1), match.group(2).split("%", 1)[0]
    tasks: list[int] = []
    for part in spec.split(","):
        item = _ARRAY_ITEM.match(part.strip())
        if item is None:
            return None
        first = int(item.group(1))
        last = int(item.group(2)) if item.group(2) else first
        step = int(item.group(3)) if item.group(3) else 1
        if last < first or step < 1 or len(tasks) + (last - first) // step >= _MAX_TASKS:
            return None
        tasks.extend(range(first, last + 1, step))
    return [f"{base}_{task}" for task in dict.fromkeys(tasks)]


def _parse_tres(
    checker: RowChecker, values: pd.Series, column: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU count, GPU type and CPU count of each TRES string (``cpu=8,gres/gpu:a100=2,...``).

    Rows whose GPU or CPU count is not a whole number >= 0 are marked bad in ``checker``.
    """
    n = len(values)
    gpus = np.zeros(n, dtype="float64")
    cpus = np.full(n, np.nan)
    types = np.full(n, None, dtype=object)
    garbled = np.zeros(n, dtype=bool)
    negative = np.zeros(n, dtype=bool)
    for i, text in enumerate(values.fillna("").to_numpy()):
        total: int | None = None
        typed: dict[str, int] = {}
        for item in str(text).split(","):
            name, sep, count = item.strip().partition("=")
            name = name.strip()
            if not sep or not (name == "cpu" or name == "gres/gpu"
                               or name.startswith("gres/gpu:")):
                continue  # other TRES (mem, billing, node, gres/gpumem, license/...)
            count = count.strip()
            if not _COUNT.match(count):
                garbled[i] = True
                continue
            value = int(count)
            if value < 0:
                negative[i] = True
            elif name == "cpu":
                cpus[i] = value
            elif name == "gres/gpu":
                total = value
            elif value > 0:
                kind = name.split(":", 1)[1].strip()
                typed[kind] = typed.get(kind, 0) + value
        gpus[i] = total if total is not None else sum(typed.values())
        if typed:
            types[i] = "+".join(sorted(typed))
    checker.check(garbled, column, f"a GPU or CPU count in {column} is not a whole number",
                  "sacct writes counts such as cpu=8,gres/gpu:a100=2,gres/gpu=2")
    checker.check(negative, column, f"a GPU or CPU count in {column} is negative",
                  "counts must be >= 0 (cpu=8,gres/gpu=2)")
    return gpus, types, cpus


def _parse_times(values: pd.Series, tz: str) -> tuple[pd.Series, np.ndarray, np.ndarray]:
    """Parse sacct times into UTC-naive ``datetime64[ns]``.

    Returns:
        The times (NaT for ``Unknown``/``None``/empty and bad values), a mask of values that do
        not parse (or lie outside 1678-2262), and a mask of local times that do not exist in
        ``tz`` (skipped by a daylight-saving change).
    """
    text = values.fillna("").astype("string").str.strip()
    present = ~text.str.lower().isin(_NULL_TIMES).to_numpy(dtype=bool)
    aware = text.str.contains(_OFFSET).to_numpy(dtype=bool) & present
    naive = present & ~aware
    out = pd.Series(pd.NaT, index=values.index, dtype="datetime64[ns]")
    bad = np.zeros(len(values), dtype=bool)
    gap = np.zeros(len(values), dtype=bool)
    if aware.any():
        parsed = pd.to_datetime(text[aware], format="ISO8601", errors="coerce", utc=True)
        parsed = parsed.dt.tz_localize(None)
        ok = _in_range(parsed)
        out[aware] = parsed.where(ok).astype("datetime64[ns]")
        bad[aware] = ~ok
    if naive.any():
        parsed = pd.to_datetime(text[naive], format="ISO8601", errors="coerce")
        if getattr(parsed.dt, "tz", None) is not None:  # pragma: no cover - offsets caught above
            parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
        ok = _in_range(parsed)
        parsed = parsed.where(ok)
        # Ambiguous wall-clock times (the repeated hour) are read as the first, DST, pass.
        local = parsed.dt.tz_localize(
            tz, ambiguous=np.ones(len(parsed), dtype=bool), nonexistent="NaT"
        )
        utc = local.dt.tz_convert("UTC").dt.tz_localize(None)
        out[naive] = utc.astype("datetime64[ns]")
        bad[naive] = ~ok
        gap[naive] = ok & utc.isna().to_numpy()
    return out, bad, gap


def _in_range(parsed: pd.Series) -> np.ndarray:
    """True where a parsed time exists and fits ``datetime64[ns]``."""
    inside = (parsed >= _MIN_TIME) & (parsed <= _MAX_TIME)
    return np.asarray(parsed.notna().to_numpy() & inside.fillna(False).to_numpy(), dtype=bool)


def _broadcast(value: pd.Series | str, n: int) -> np.ndarray:
    """A column of ``n`` objects (None for missing) from a series or a constant."""
    if isinstance(value, str):
        return np.full(n, value, dtype=object)
    return value.astype("object").where(value.notna(), None).to_numpy()
