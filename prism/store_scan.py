"""How :meth:`prism.store.Store.insert_file` reads the columns of a file: SQL expressions per
file format and column type (the store formats ``{0}`` with the column), and the progress of
that scan (:func:`polling`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import duckdb

# How FileScan columns become canonical values. CSV columns are read as text and parsed with
# try_ functions, so that a value that does not parse does not abort the transaction: it becomes
# NaN (numbers) or year 1 (times), which the ingest's checks catch. Times in the usual ISO form
# take strptime (the fast path); others, with a zone suffix or fractions, go through TIMESTAMPTZ
# (the session is UTC: naive times are UTC). A bare TIMESTAMP cast would drop a +02:00 suffix;
# an offset with seconds (+00:00:00), which the checked reader refuses, becomes year 1 too.
# A field spelled as a missing value (NA, N/A, null...) is NULL, as in the checked reader
# (pyarrow's CSV null values: prism.ingest.base.MISSING_VALUES, which a test compares with
# these); numbers and times look it up only when they do not parse (but the spellings of NaN,
# which parse), text first checks the length (cheap).
MISSING_VALUES = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
                  "1.#QNAN", "N/A", "NA", "NULL", "NaN", "n/a", "nan", "null")
_MISSING = ("{0} IS NULL OR (length({0}) <= " + str(max(map(len, MISSING_VALUES)))
            + " AND {0} IN (" + ", ".join(f"'{v}'" for v in MISSING_VALUES) + "))")
_NANS = ", ".join(f"'{v}'" for v in MISSING_VALUES if v.lstrip("-").lower() == "nan")
SCAN_EXPR: dict[str, dict[str, str]] = {
    "csv": {
        "text": f"CASE WHEN {_MISSING} THEN NULL ELSE {{0}} END",
        "number": f"CASE WHEN {{0}} IN ({_NANS}) THEN NULL "
                  "ELSE coalesce(try_cast({0} AS DOUBLE), "
                  f"CASE WHEN {_MISSING} THEN NULL ELSE 'nan'::DOUBLE END) END",
        "time": "coalesce(try_strptime({0}, '%Y-%m-%dT%H:%M:%S'), "
                f"CASE WHEN {_MISSING} THEN NULL "
                "WHEN regexp_matches({0}, '[+-][0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}$') "
                "THEN '0001-01-01'::TIMESTAMP "
                "ELSE coalesce(timezone('UTC', try_cast({0} AS TIMESTAMPTZ)), "
                "'0001-01-01'::TIMESTAMP) END)",
    },
    "parquet": {  # typed columns: a cast that fails aborts (the ingest then reads it again)
        "text": "nullif(CAST({0} AS VARCHAR), '')",
        "number": "CAST({0} AS DOUBLE)",
        "time": "timezone('UTC', CAST({0} AS TIMESTAMPTZ))",
        "utc_time": "CAST({0} AS TIMESTAMP)",  # no zone conversion: 0.16 s per 1M values
    },
}


@contextlib.contextmanager
def polling(
    conn: duckdb.DuckDBPyConnection, progress: Callable[[float], None] | None
) -> Iterator[None]:
    """Report the progress of the query run inside, from a thread that polls DuckDB."""
    if progress is None:
        yield
        return
    conn.execute("SET enable_progress_bar = true")
    conn.execute("SET enable_progress_bar_print = false")
    conn.execute("SET progress_bar_time = 0")
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.2):
            value = conn.query_progress()
            if value >= 0:
                progress(min(value, 100.0) / 100.0)

    thread = threading.Thread(target=poll, name="prism-scan-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        with contextlib.suppress(duckdb.Error):  # an aborted transaction refuses SET
            conn.execute("RESET enable_progress_bar")
            conn.execute("RESET enable_progress_bar_print")
            conn.execute("RESET progress_bar_time")
