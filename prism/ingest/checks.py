"""Row checks every adapter shares: collect bad rows (vectorised), then fail naming the first
line and column of each problem, or reject them all (``--on-error skip``); parse and check
times, numbers, job rows and value ranges.

Split from :mod:`prism.ingest.base` (options, batches, adapters and file readers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from prism.errors import IngestError
from prism.ingest.base import LINE, Reject
from prism.ingest.timeparse import (
    STORABLE_YEARS,
    check_tz,
    out_of_range,
    parse_local_times,
)
from prism.schema import EARLIEST_TS, JOB_COLUMNS, LATEST_TS, metric_info

# -- row checks ----------------------------------------------------------------------------
#: In fail mode, how many distinct problems (checks that fail) an error lists, each with the
#: first line that has it, so that one run shows what to fix rather than only the first thing.
MAX_PROBLEMS = 5


@dataclass(frozen=True)
class _Problem:
    """One check that failed: the first line failing it, the value there, and how many rows."""

    line: int
    column: str | None
    reason: str
    value: str
    rows: int
    fix: str

    def where(self) -> str:
        return f"line {self.line}" + (f", column '{self.column}'" if self.column else "")

    def what(self) -> str:
        return self.reason + (f" (value {self.value!r})" if self.value else "")


class RowChecker:
    """Collects bad rows (vectorised) and either fails or rejects them all.

    Use :meth:`check` for each rule, then :meth:`finish` to get the good rows. In fail mode
    the error names the first bad row and lists up to :data:`MAX_PROBLEMS` distinct problems,
    each with its first line.
    """

    def __init__(self, path: Path, frame: pd.DataFrame, on_error: str) -> None:
        self.path = path
        self.frame = frame
        self.on_error = on_error
        self._bad = np.zeros(len(frame), dtype=bool)
        self._problems: dict[tuple[str | None, str], _Problem] = {}
        self.rejects: list[Reject] = []

    def check(self, bad: np.ndarray | pd.Series, column: str | None, reason: str, fix: str) -> None:
        """Mark rows where ``bad`` is true as failing ``reason`` (about ``column``)."""
        mask = np.asarray(bad, dtype=bool) & ~self._bad
        if not mask.any():
            return
        lines = self.frame[LINE].to_numpy()[mask]
        first = int(lines.min())
        value = ""
        if column is not None and column in self.frame.columns:
            value = _shown(self.frame[column].to_numpy()[mask][int(np.argmin(lines))])
        seen = self._problems.get((column, reason))
        rows = int(mask.sum()) + (seen.rows if seen else 0)
        if seen is not None and seen.line < first:
            first, value = seen.line, seen.value
        self._problems[(column, reason)] = _Problem(first, column, reason, value, rows, fix)
        raw = self.frame.loc[mask, column].astype(str).to_numpy() if (
            column is not None and column in self.frame.columns
        ) else np.full(int(mask.sum()), "")
        self.rejects.extend(
            Reject(int(line), column, reason, str(value))
            for line, value in zip(lines, raw, strict=True)
        )
        self._bad |= mask

    @property
    def failed(self) -> np.ndarray:
        """Which rows failed a check so far (a copy)."""
        return self._bad.copy()

    def error(self, *, all_bad: bool = False) -> IngestError | None:
        """The error of fail mode: the first bad row, then up to :data:`MAX_PROBLEMS` distinct
        problems in all (each with its first line); ``None`` when every row passed. With
        ``all_bad`` (every row failed under ``--on-error skip``) it says that nothing would
        be stored."""
        if not self._problems:
            return None
        problems = sorted(self._problems.values(), key=lambda p: (p.line, p.column or ""))
        first, shown = problems[0], problems[:MAX_PROBLEMS]
        message = f"{first.what()}; {first.rows} row(s) in all"
        if len(problems) > 1:
            message += f"; also {len(problems) - 1} other problem(s)" + (
                f" ({len(shown) - 1} shown)" if len(problems) > MAX_PROBLEMS else "") + ": "
            message += "; ".join(f"{p.where()}: {p.what()}, {p.rows} row(s)" for p in shown[1:])
        fixes = "; ".join(dict.fromkeys(p.fix for p in shown))
        if all_bad:
            return IngestError(
                f"no rows to ingest: all {len(self._bad):,} rows are rejected, so --on-error "
                f"skip would store nothing; the first: {message}", path=str(self.path),
                line=first.line, column=first.column, fix=fixes)
        return IngestError(message, path=str(self.path), line=first.line, column=first.column,
                           fix=f"{fixes}, or pass --on-error skip to store such rows in "
                           "`rejects`")

    def finish(self) -> tuple[pd.DataFrame, list[Reject]]:
        """The good rows, and the rejects (sorted by line).

        Raises:
            IngestError: in fail mode, for the bad rows (see :meth:`error`); under
                ``--on-error skip``, when every row is bad (a file that stores nothing is a
                mistake, like a file with a header only).
        """
        all_bad = self.on_error == "skip" and bool(self._bad.all())
        error = self.error(all_bad=all_bad)
        if error is not None and (self.on_error != "skip" or all_bad):
            raise error
        good = self.frame[~self._bad] if self._bad.any() else self.frame
        return good.reset_index(drop=True), sorted(self.rejects, key=lambda r: r.line or 0)


def _shown(value: object) -> str:
    """A value as the file most likely wrote it (a typed read makes ``-6000`` a float); empty
    for a missing value."""
    if value is None or value is pd.NA or value is pd.NaT or (
            isinstance(value, float | np.floating | np.datetime64) and np.isnan(value)):
        return ""
    if isinstance(value, float | np.floating) and np.isfinite(value) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, np.datetime64 | pd.Timestamp):  # a typed read: as ISO 8601
        return pd.Timestamp(value).isoformat()
    return str(value)


def parse_times(
    values: pd.Series, *, tz: str | None = None, unit: str | None = None,
    origin: pd.Timestamp | None = None,
) -> tuple[pd.Series, np.ndarray, np.ndarray]:
    """Parse a column of times into UTC-naive ``datetime64[ns]``.

    Args:
        values: strings, datetimes or numbers.
        tz: zone of naive times (converted to UTC); aware times are converted as they are.
        unit: for numbers, ``s``/``ms``; numbers are seconds since ``origin`` (default epoch).
        origin: origin of numeric times.

    Returns:
        The parsed times (NaT where empty or bad), a mask of values that were present but did
        not parse, and a mask of naive times that do not exist or are ambiguous in ``tz``
        (a daylight-saving change; :func:`check_times` tells which).
    """
    present = values.notna().to_numpy()
    check_tz(tz)
    if pd.api.types.is_datetime64_any_dtype(values):
        out = pd.Series(values)
        inside = ((out >= pd.Timestamp("1678-01-02")) & (out <= pd.Timestamp("2262-04-10"))
                  ).to_numpy(dtype=bool) if getattr(out.dt, "tz", None) is None else present
        out = out.where(inside)  # beyond what datetime64[ns] holds: reported as bad
        dst = np.zeros(len(out), dtype=bool)
        if getattr(out.dt, "tz", None) is not None:
            out = out.dt.tz_convert("UTC").dt.tz_localize(None)
        elif tz:
            wall = out.notna().to_numpy()
            out = out.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT").dt.tz_convert(
                "UTC").dt.tz_localize(None)
            dst = wall & out.isna().to_numpy()
        out = out.astype("datetime64[ns]")
        return out, present & (out.isna().to_numpy() | ~inside) & ~dst, dst
    if unit is not None or pd.api.types.is_numeric_dtype(values):
        numbers = pd.to_numeric(values, errors="coerce")
        base = origin if origin is not None else pd.Timestamp("1970-01-01")
        scale = {"s": 1e9, "ms": 1e6, None: 1e9}[unit]
        raw = numbers.to_numpy(dtype="float64", na_value=np.nan)
        # beyond about +-292 years from the origin, nanoseconds overflow int64
        finite = np.isfinite(raw) & (np.abs(raw * scale) < 9.2e18 - abs(base.value))
        ns = np.where(finite, raw, 0) * scale
        out = pd.Series(
            pd.to_datetime(np.round(ns).astype(np.int64) + base.value, unit="ns"),
            index=values.index,
        ).where(finite)
        return out.astype("datetime64[ns]"), present & ~finite, np.zeros(len(out), dtype=bool)
    return parse_local_times(values, tz)


#: The years a job time can have (:data:`prism.schema.EARLIEST_TS` .. ``LATEST_TS``).
JOB_YEARS = (EARLIEST_TS.year, LATEST_TS.year - 1)


def out_of_range_reason(what: str, years: tuple[int, int] = STORABLE_YEARS) -> str:
    """The reason of a time outside ``years`` (one wording for every format)."""
    return f"{what} is out of range (PRISM takes years {years[0]}..{years[1]})"


def check_times(
    checker: RowChecker, values: pd.Series, bad: np.ndarray, column: str, what: str, fix: str,
    *, years: tuple[int, int] = STORABLE_YEARS, numeric: bool = False,
    reason: str | None = None, times: pd.Series | None = None, dst: np.ndarray | None = None,
    tz: str | None = None, unit_hint: bool = False,
) -> None:
    """Report the times a parser refused: those in a year that cannot be stored (9999-01-05)
    as out of range, naming the range, the others as not a time; local times that a
    daylight-saving change makes ambiguous or skips; and parsed ``times`` outside ``years``.

    Args:
        checker: the file's checker.
        values: the column as read.
        bad: the parser's mask of values that did not parse.
        column: the file column.
        what: the name in the message (``submit_ts``).
        fix: how to write a time this format reads.
        years: the range the message gives (jobs: :data:`JOB_YEARS`).
        numeric: the values are numbers of seconds.
        reason: the reason of the others (default ``"<what> is not a time"``).
        times: the parsed times, checked against ``years`` (``None``: not checked).
        dst: the parser's mask of local times a daylight-saving change makes ambiguous or
            skips in ``tz``.
        tz: the zone of the local times.
        unit_hint: the format takes ``--option time_unit``: a time written as a plain number
            (``1709287200``) is reported with that option as the fix.
    """
    far = out_of_range(values, bad, numeric=numeric)
    checker.check(far, column, out_of_range_reason(what, years),
                  "check the number: seconds (or milliseconds, where the format takes "
                  "--option time_unit=ms) since the origin" if numeric else
                  "check the year: fix a typo, and leave a time empty rather than write a "
                  "placeholder such as 9999-12-31")
    reason = reason or f"{what} is not a time"
    rest = np.asarray(bad, dtype=bool) & ~far
    if unit_hint and not numeric and rest.any():
        digits = _epoch_numbers(values) & rest
        checker.check(digits, column, f"{reason}: a number, not an ISO 8601 time",
                      "for seconds since the Unix epoch pass --option time_unit=s, for "
                      "milliseconds --option time_unit=ms")
        rest &= ~digits
    checker.check(rest, column, reason, fix)
    if dst is not None and tz and np.asarray(dst).any():
        _check_dst(checker, values, np.asarray(dst, dtype=bool), column, what, tz)
    if times is not None:
        lo, hi = pd.Timestamp(f"{years[0]}-01-01"), pd.Timestamp(f"{years[1] + 1}-01-01")
        checker.check(((times < lo) | (times >= hi)).fillna(False).to_numpy(dtype=bool), column,
                      out_of_range_reason(what, years),
                      "check the year: fix a typo, and leave a time empty rather than write a "
                      "placeholder such as 9999-12-31")


def _epoch_numbers(values: pd.Series) -> np.ndarray:
    """Mask of values written as a plain number (``1709287200``, ``1709287200000.5``)."""
    text = values.astype("string").str.strip()
    return text.str.fullmatch(r"[+-]?\d+(?:\.\d*)?").fillna(False).to_numpy(dtype=bool)


def _check_dst(checker: RowChecker, values: pd.Series, dst: np.ndarray, column: str, what: str,
               tz: str) -> None:
    """Report the local times of ``dst`` as ambiguous (the clocks go back: the hour happens
    twice) or missing (the clocks skip it) in ``tz``, with the offsets that make them exact."""
    rows = np.flatnonzero(dst)
    wall = pd.Series(pd.to_datetime(values.iloc[rows].astype("string").str.strip(),
                                    errors="coerce", format="ISO8601"))
    if pd.api.types.is_datetime64_any_dtype(wall) and getattr(wall.dt, "tz", None) is not None:
        wall = wall.dt.tz_localize(None)
    summer = wall.dt.tz_localize(tz, ambiguous=np.ones(len(wall), dtype=bool),
                                 nonexistent="NaT")
    missing = np.zeros(len(dst), dtype=bool)
    missing[rows] = summer.isna().to_numpy() & wall.notna().to_numpy()
    ambiguous = dst & ~missing

    def offset(stamp: pd.Timestamp) -> str:
        minutes = int(stamp.utcoffset().total_seconds() // 60)  # type: ignore[union-attr]
        return f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"

    later = "; or write every time in UTC and ingest without --tz"
    if ambiguous.any():
        first = wall.iloc[int(np.flatnonzero(ambiguous[rows])[0])]
        early = offset(first.tz_localize(tz, ambiguous=True))
        late = offset(first.tz_localize(tz, ambiguous=False))
        checker.check(ambiguous, column,
                      f"{what} is ambiguous in time zone {tz}: the clocks go back at a "
                      "daylight-saving change, so this local time happens twice",
                      f"write it with its UTC offset: {first.isoformat()}{early} (the first "
                      f"time) or {first.isoformat()}{late} (the second){later}")
    if missing.any():
        first = wall.iloc[int(np.flatnonzero(missing[rows])[0])]
        before = offset(first.tz_localize(tz, nonexistent="shift_backward"))
        checker.check(missing, column,
                      f"{what} does not exist in time zone {tz}: the clocks skip it at a "
                      "daylight-saving change",
                      f"write it with the UTC offset its clock had, e.g. "
                      f"{first.isoformat()}{before}{later}")


def parse_numbers(values: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """Parse a column of numbers to float64; returns the numbers and a mask of bad values."""
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        out = values.astype("float64")
        return out, ~np.isfinite(out.to_numpy()) & out.notna().to_numpy()
    text = values.astype("string").str.strip()
    text = text.where(text != "")
    out = pd.to_numeric(text, errors="coerce").astype("float64")
    bad = text.notna().to_numpy() & ~np.isfinite(out.to_numpy(na_value=np.nan))
    return out, bad


def job_frame(
    columns: dict[str, pd.Series | np.ndarray | object], lines: np.ndarray
) -> pd.DataFrame:
    """Assemble a canonical jobs frame; missing columns become NULL."""
    n = len(lines)
    data: dict[str, object] = {}
    for name in JOB_COLUMNS:
        value = columns.get(name)
        if value is None:
            if name in ("num_gpus", "num_cpus"):
                data[name] = np.full(n, np.nan)
            elif name.endswith("_ts"):
                data[name] = pd.Series(pd.NaT, index=range(n), dtype="datetime64[ns]")
            else:
                data[name] = pd.Series([None] * n, dtype="object")
        elif isinstance(value, pd.Series):
            data[name] = value.to_numpy()
        else:
            data[name] = value
    data[LINE] = lines
    frame = pd.DataFrame(data)
    for name in ("source", "cluster", "scope", "job_id", "gpu_type", "status"):
        frame[name] = frame[name].astype("object").where(frame[name].notna(), None)
    return frame


def check_jobs(checker: RowChecker, frame: pd.DataFrame) -> None:
    """The checks every job-level source gets: ids, GPU counts and time order."""
    checker.check(frame["job_id"].isna().to_numpy(), "job_id", "job id is empty",
                  "give every job an id")
    gpus = frame["num_gpus"].to_numpy(dtype="float64", na_value=np.nan)
    checker.check(np.isnan(gpus), "num_gpus", "GPU count is empty",
                  "write the number of GPUs (0 for CPU-only jobs)")
    checker.check(gpus < 0, "num_gpus", "GPU count is negative", "GPU counts must be >= 0")
    checker.check(frame["submit_ts"].isna().to_numpy(), "submit_ts", "submit time is empty",
                  "every job needs a submit time")
    checker.check(frame.duplicated(["cluster", "job_id"], keep="first").to_numpy(), "job_id",
                  "job id appears more than once in this file",
                  "give every job of a cluster a unique id")
    start, end, submit = frame["start_ts"], frame["end_ts"], frame["submit_ts"]
    for name in ("submit_ts", "start_ts", "end_ts"):
        when = frame[name]
        checker.check(((when < EARLIEST_TS) | (when >= LATEST_TS)).fillna(False).to_numpy(),
                      name, out_of_range_reason(name, JOB_YEARS),
                      "check the year (and the --origin of traces in seconds)")
    checker.check((end < start).fillna(False).to_numpy(), "end_ts", "end time is before start time",
                  "check the row's start and end times")
    checker.check((start < submit).fillna(False).to_numpy(), "start_ts",
                  "start time is before submit time", "check the row's submit and start times")
    checker.check((end < submit).fillna(False).to_numpy() & start.isna().to_numpy(), "end_ts",
                  "end time is before submit time", "check the row's submit and end times")


def value_range(metric: str) -> tuple[float, float] | None:
    """The values a sample of ``metric`` can take, from its unit in ``prism.schema``.

    Returns:
        ``(0, 1)`` for ratios (``gpu_util``), ``(0, inf)`` for quantities (GPUs, jobs, nodes,
        ``*_count`` counters), ``None`` for metrics with no known unit (anything goes).
    """
    unit = metric_info(metric).unit
    if unit == "ratio":
        return 0.0, 1.0
    return (0.0, np.inf) if unit else None


def check_range(checker: RowChecker, values: np.ndarray, column: str, metric: str,
                rows: np.ndarray | None = None) -> None:
    """Mark the rows whose ``values`` of ``metric`` are outside :func:`value_range`.

    Args:
        checker: the file's checker (its frame holds ``column``, so the value is shown).
        values: the parsed numbers (NaN, an empty cell, passes).
        column: the file column the values come from.
        metric: the metric they are samples of.
        rows: which rows hold ``metric`` (default all), for files of several metrics.
    """
    bounds = value_range(metric)
    if bounds is None:
        return
    low, high = bounds
    inside = rows if rows is not None else np.ones(len(values), dtype=bool)
    with np.errstate(invalid="ignore"):
        if np.isinf(high):
            unit = metric_info(metric).unit
            checker.check(inside & (values < low), column,
                          f"{metric} is negative (valid range: >= 0)",
                          f"{metric} ({unit}) cannot be negative: write a value >= 0")
        else:
            checker.check(inside & ((values < low) | (values > high)), column,
                          f"{metric} is outside its valid range {low:g}..{high:g}",
                          f"{metric} is a ratio: write values from {low:g} to {high:g} "
                          "(divide percentages by 100)")


def reject_unknown_columns(
    path: Path, frame: pd.DataFrame, known: Iterable[str], fix: str
) -> None:
    """Fail on columns a strict format does not define (a typo would otherwise be dropped)."""
    unknown = [c for c in frame.columns if c != LINE and c not in set(known)]
    if unknown:
        raise IngestError(
            f"unknown column(s) {unknown}", path=str(path), line=1, column=unknown[0], fix=fix
        )


Parser = Callable[[pd.Series], tuple[pd.Series, np.ndarray]]
