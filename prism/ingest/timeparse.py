"""Robust parsing of time text and malformed CSV rows, shared by the adapters.

Never raises on odd input: values that do not parse (or fall outside what ``datetime64[ns]``
holds) are reported in masks so that the adapters can name the row.
"""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd

from prism.errors import ConfigError

# Stored times are datetime64[ns]; keep a margin for time-zone shifts at the edges.
_EARLIEST = pd.Timestamp("1678-01-02")
_LATEST = pd.Timestamp("2262-04-10")
_AWARE = r"(?:[zZ]|UTC|GMT|[+-]\d{2}:?\d{2})$"


def check_tz(tz: str | None) -> None:
    """Fail early on a time zone name that zoneinfo does not know.

    Raises:
        ConfigError: naming the zone and giving examples.
    """
    if tz is None:
        return
    try:
        if not tz.strip():
            raise ValueError("an empty name")  # pandas raised IndexError on ''
        pd.Timestamp("2000-01-01").tz_localize(tz)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"unknown time zone {tz!r} ({exc}); pass --tz with an IANA name such as "
            "Asia/Shanghai, America/Los_Angeles or UTC"
        ) from exc


def _parse_text(text: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """ISO 8601 text -> UTC-naive or wall-clock datetimes, never raising on odd input.

    Returns:
        The times (NaT where unparseable or outside 1678..2262) and a mask of those that
        carried a zone (already converted to UTC); the others are wall-clock times.
    """
    try:
        parsed = pd.to_datetime(text, errors="coerce", format="ISO8601")
        if getattr(parsed.dt, "tz", None) is None:
            aware = np.zeros(len(text), dtype=bool)
        else:  # every value named a zone that the pattern above did not catch
            parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
            aware = parsed.notna().to_numpy(dtype=bool)
    except (ValueError, TypeError, OverflowError, AttributeError):
        # a mix of zones pandas will not put in one column (pandas 3 raises; pandas 2 gives
        # an object column without .dt): go one by one
        stamps: list[pd.Timestamp | None] = []
        flags: list[bool] = []
        for value in text:
            stamp: pd.Timestamp | None
            try:
                stamp = pd.Timestamp(value)
            except (ValueError, TypeError, OverflowError):
                stamp = None
            if stamp is pd.NaT:
                stamp = None
            zoned = stamp is not None and stamp.tzinfo is not None
            if stamp is not None and zoned:
                stamp = stamp.tz_convert("UTC").tz_localize(None)
            if stamp is not None and not _EARLIEST <= stamp <= _LATEST:
                stamp = None
            stamps.append(stamp)
            flags.append(zoned)
        parsed = pd.to_datetime(pd.Series(stamps, index=text.index, dtype=object))
        aware = np.array(flags, dtype=bool)
    parsed = pd.Series(parsed, index=text.index)
    inside = ((parsed >= _EARLIEST) & (parsed <= _LATEST)).to_numpy(dtype=bool)
    return parsed.where(inside).astype("datetime64[ns]"), aware & inside


def parse_local_times(
    values: pd.Series, tz: str | None
) -> tuple[pd.Series, np.ndarray, np.ndarray]:
    """Parse a column of time strings into UTC-naive ``datetime64[ns]``.

    Naive times are wall-clock times in ``tz`` (``None``: taken as UTC); times with an offset
    or ``Z`` are converted to UTC. Unlike :func:`prism.ingest.checks.parse_times` this never
    raises on a mix of offsets or on years outside what ``datetime64[ns]`` holds: such values
    are reported as not parsing.

    Args:
        values: the column as read (strings; numbers are read as their text).
        tz: IANA zone of the naive times, or ``None``.

    Returns:
        The times (NaT where empty or bad), a mask of values present that do not parse (or
        fall outside 1678..2262), and a mask of naive times that do not exist or are
        ambiguous in ``tz`` (daylight-saving changes).

    Raises:
        ConfigError: when ``tz`` is not a known zone.
    """
    check_tz(tz)
    n = len(values)
    text = values.astype("string").str.strip()
    text = text.where(text != "")
    present = text.notna().to_numpy(dtype=bool)
    aware = text.str.contains(_AWARE, regex=True).fillna(False).to_numpy(dtype=bool) & present
    naive = present & ~aware
    out = pd.Series(np.full(n, np.datetime64("NaT"), dtype="datetime64[ns]"), index=values.index)
    tz_bad = np.zeros(n, dtype=bool)
    if aware.any():
        zoned = pd.to_datetime(text[aware], errors="coerce", utc=True, format="ISO8601")
        zoned = pd.Series(zoned, index=text.index[aware]).dt.tz_localize(None)
        inside = (zoned >= _EARLIEST) & (zoned <= _LATEST)
        out[aware] = zoned.where(inside).astype("datetime64[ns]")
    if naive.any():
        parsed, had_zone = _parse_text(text[naive])
        if tz:
            local = parsed.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT")
            converted = local.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[ns]")
            converted = converted.where(~had_zone, parsed)  # zoned ones are UTC already
            lost = parsed.notna().to_numpy() & converted.isna().to_numpy()
            tz_bad[np.flatnonzero(naive)[lost]] = True
            parsed = converted
        out[naive] = parsed
    bad = present & out.isna().to_numpy() & ~tz_bad
    return out.astype("datetime64[ns]"), bad, tz_bad


#: The years a stored time can have (``datetime64[ns]``, with the margin above).
STORABLE_YEARS = (_EARLIEST.year, _LATEST.year - 1)
# A date's year as written: 9999-01-05, +10000-01-05, 9999/01/05 (the rest may not parse).
_YEAR = r"^\s*([+-]?\d{4,})[-/]\d{1,2}[-/]\d{1,2}"


def out_of_range(values: pd.Series, bad: np.ndarray, *, numeric: bool = False) -> np.ndarray:
    """Which of the ``bad`` values (those a time parser refused) are times in a year that
    cannot be stored (``9999-01-05``, a number of seconds too large), rather than text that is
    not a time, so that a message can say "out of range" and give the range.

    Args:
        values: the column as read.
        bad: the parser's mask of values that did not parse.
        numeric: the values are numbers of seconds (or milliseconds).

    Returns:
        A mask, true only where ``bad`` is.
    """
    out = np.zeros(len(values), dtype=bool)
    rows = np.flatnonzero(np.asarray(bad, dtype=bool))
    if not len(rows):
        return out
    some = values.iloc[rows]
    if pd.api.types.is_datetime64_any_dtype(some):  # a typed read: every bad one is too far
        out[rows] = some.notna().to_numpy(dtype=bool)
    elif numeric or pd.api.types.is_numeric_dtype(some):
        numbers = pd.to_numeric(some, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        out[rows] = np.isfinite(numbers)  # finite, yet refused: beyond what a time holds
    else:
        text = some.astype("string")
        years = pd.to_numeric(text.str.extract(_YEAR, expand=False), errors="coerce")
        far = (years < _EARLIEST.year) | (years > _LATEST.year)
        out[rows] = far.fillna(False).to_numpy(dtype=bool)
    return out


def is_fractional(values: np.ndarray) -> np.ndarray:
    """Mask of finite values that are not whole numbers (NaN and inf give ``False``)."""
    out = np.zeros(len(values), dtype=bool)
    finite = np.isfinite(values)
    out[finite] = np.mod(values[finite], 1) != 0
    return out


def locate_malformed_row(
    data: bytes, n_fields: int, *, first_line: int = 1, delimiter: str = ","
) -> tuple[int | None, str]:
    """Find the first line of CSV ``data`` that is not ``n_fields`` fields of UTF-8 text.

    pyarrow's CSV errors do not say which line is at fault; this scans the bytes again (only
    on the error path) so that the message can name it.

    Args:
        data: the decompressed file content.
        n_fields: the number of fields every row must have.
        first_line: the 1-based line number at which to start checking (2 to skip a header).
        delimiter: the field delimiter.

    Returns:
        The 1-based line number (``None`` when every line looks right) and what is wrong there.
    """
    line, what, _ = describe_malformed_row(data, n_fields, first_line=first_line,
                                           delimiter=delimiter)
    return line, what


#: How to fix each kind of malformed row (:func:`describe_malformed_row`).
MALFORMED_FIXES = {
    "utf8": "re-save the file as UTF-8 text (a spreadsheet: CSV UTF-8; from Latin-1: "
            "iconv -f latin1 -t utf-8 FILE > FILE.utf8.csv)",
    "quote": "close the quote, or write a quote inside a quoted field twice (\"\")",
    "fields": "every row needs as many fields as the header; quote fields holding the "
              "delimiter",
}


def describe_malformed_row(
    data: bytes, n_fields: int, *, first_line: int = 1, delimiter: str = ","
) -> tuple[int | None, str, str]:
    """:func:`locate_malformed_row` with the fix: ``(line, what is wrong, how to fix it)``.

    A line that is not UTF-8 is named with its first bad byte; a quoted field that the file
    never closes with the line and field that open it; a row of another length with its
    field count. A quoted field may run over several lines (it holds a line break).
    """
    row: list[str] = []  # the lines of a row whose quoted field runs on (with its first line)
    opened = (0, 0)
    for number, raw in enumerate(data.splitlines(), start=1):
        if number < first_line or (not row and not raw.strip(b"\r")):
            continue
        try:
            text = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as exc:
            return number, (f"the line is not UTF-8 text (byte {raw[exc.start]:#04x} at "
                            f"position {exc.start + 1} of the line)"), MALFORMED_FIXES["utf8"]
        start = opened[0] if row else number
        row.append(text)
        whole = "\n".join(row)
        field = _unclosed_quote(whole, delimiter) if '"' in text or len(row) > 1 else None
        if field is not None:
            opened = (start, field)
            continue  # the quoted field goes on over the next line
        row = []
        try:
            fields = next(csv.reader([whole], delimiter=delimiter), [])
        except csv.Error as exc:
            return start, f"the line cannot be split into fields ({exc})", MALFORMED_FIXES[
                "fields"]
        if len(fields) != n_fields:
            spans = f" (a quoted field runs from line {start} to {number})" if (
                number > start) else ""
            return start, f"expected {n_fields} fields, found {len(fields)}{spans}", (
                MALFORMED_FIXES["quote" if spans else "fields"])
    if row:
        return opened[0], (f"a quoted field is not closed: field {opened[1]} opens a quote "
                           "that no later quote closes"), MALFORMED_FIXES["quote"]
    return None, "", MALFORMED_FIXES["fields"]


def _unclosed_quote(text: str, delimiter: str) -> int | None:
    """The 1-based field of ``text`` (one CSV line) whose opening quote is never closed, or
    ``None``. A quote counts as opening only at the start of a field; ``""`` inside a quoted
    field is a quote."""
    field, quoted, start, i = 1, False, True, 0
    while i < len(text):
        char = text[i]
        if quoted:
            if char == '"':
                if text[i + 1:i + 2] == '"':
                    i += 1
                else:
                    quoted = False
        elif char == delimiter:
            field, start = field + 1, True
            i += 1
            continue
        elif char == '"' and start:
            quoted = True
        start = False
        i += 1
    return field if quoted else None
