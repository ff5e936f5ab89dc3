"""The DuckDB store: the only module that imports :mod:`duckdb`.

``Store.open(path)`` opens (or creates) a database file; ``Store(connection)`` wraps an existing
connection. Every statement goes through :meth:`Store.execute` with values bound as ``?``
parameters, never formatted into the SQL text. The DDL is idempotent and versioned.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from prism.config import get_settings
from prism.errors import ConfigError, FileScanError, PrismError, SeriesNotFound
from prism.schema import SCOPE_BAD_CHARS, FileScan
from prism.store_path import check_store_path
from prism.store_scan import SCAN_EXPR, polling

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 3

_DDL = (
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE SEQUENCE IF NOT EXISTS ingest_id_seq START 1",
    """CREATE TABLE IF NOT EXISTS ingests (
        ingest_id BIGINT PRIMARY KEY, content_hash VARCHAR NOT NULL UNIQUE, format VARCHAR,
        path VARCHAR, cluster VARCHAR, kind VARCHAR, rows BIGINT, rejected BIGINT,
        obs_start TIMESTAMP, obs_end TIMESTAMP, options VARCHAR, ingested_at TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS jobs (
        ingest_id BIGINT, source VARCHAR, cluster VARCHAR, scope VARCHAR, job_id VARCHAR,
        gpu_type VARCHAR, num_gpus DOUBLE, num_cpus DOUBLE, submit_ts TIMESTAMP,
        start_ts TIMESTAMP, end_ts TIMESTAMP, status VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS samples (
        ingest_id BIGINT, cluster VARCHAR, series_id VARCHAR, ts TIMESTAMP, value DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS capacity (
        ingest_id BIGINT, cluster VARCHAR, scope VARCHAR, gpu_type VARCHAR,
        valid_from TIMESTAMP, gpus DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS rejects (
        ingest_id BIGINT, path VARCHAR, line BIGINT, column_name VARCHAR, reason VARCHAR,
        raw VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS clusters (
        cluster VARCHAR PRIMARY KEY, freq_s INTEGER, fill VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS series (
        series_id VARCHAR PRIMARY KEY, source VARCHAR, cluster VARCHAR, scope VARCHAR,
        metric VARCHAR, freq VARCHAR, first_ts TIMESTAMP, last_ts TIMESTAMP, n_points BIGINT,
        n_filled BIGINT, unit VARCHAR, aggregation VARCHAR, fill VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS series_values (
        cluster VARCHAR, series_id VARCHAR, ts TIMESTAMP, value DOUBLE, filled BOOLEAN)""",
    # batch runs (prism.batch): one row per run, one per series and run, the forecasts
    """CREATE TABLE IF NOT EXISTS batch_runs (
        run_id VARCHAR PRIMARY KEY, task VARCHAR, model VARCHAR, params VARCHAR,
        horizon VARCHAR, quantiles DOUBLE[], windows INTEGER, backend VARCHAR,
        workers INTEGER, n_series BIGINT, status VARCHAR, started_at TIMESTAMP,
        finished_at TIMESTAMP, seconds DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS batch_series (
        run_id VARCHAR, series_id VARCHAR, status VARCHAR, fallback_reason VARCHAR,
        seconds DOUBLE, n_rows BIGINT)""",
    """CREATE TABLE IF NOT EXISTS batch_forecasts (
        run_id VARCHAR, series_id VARCHAR, cutoff TIMESTAMP, ts TIMESTAMP, model VARCHAR,
        mean DOUBLE, quantiles DOUBLE[], value DOUBLE)""",
    # schema 2: the REST API's forecast cache and the errors of served forecasts (drift)
    """CREATE TABLE IF NOT EXISTS forecast_cache (
        series_id VARCHAR, model VARCHAR, model_version VARCHAR, watermark VARCHAR,
        horizon_steps INTEGER, quantiles VARCHAR, payload VARCHAR, created_at TIMESTAMP,
        PRIMARY KEY (series_id, model, model_version, watermark, horizon_steps, quantiles))""",
    """CREATE TABLE IF NOT EXISTS forecast_errors (
        series_id VARCHAR, model VARCHAR, model_version VARCHAR, origin_ts TIMESTAMP,
        ts TIMESTAMP, step INTEGER, forecast DOUBLE, actual DOUBLE, scored_at TIMESTAMP)""",
    # evaluation tables the capacity report shows: the last `prism backtest --summary`
    # (kind 'accuracy') and planning backtest (kind 'planning'), as JSON records
    """CREATE TABLE IF NOT EXISTS evaluations (
        run_id VARCHAR PRIMARY KEY, kind VARCHAR, created_at TIMESTAMP, params VARCHAR,
        records VARCHAR)""",
    # schema 3: served capacity plans, one row per scope and window (prism.track_record)
    """CREATE TABLE IF NOT EXISTS capacity_plans (
        cluster VARCHAR, scope VARCHAR, series_id VARCHAR, made_at TIMESTAMP,
        valid_from TIMESTAMP, valid_to TIMESTAMP, gpus_planned DOUBLE, quantile DOUBLE,
        model VARCHAR, served_by VARCHAR, created_at TIMESTAMP,
        PRIMARY KEY (cluster, scope, valid_from, valid_to, quantile, model))""",
)


class Store:
    """A PRISM store on one DuckDB connection.

    Args:
        connection: an open DuckDB connection; the schema is created on it if missing.
        init_schema: create or check the schema (off for cursors of an already open store).
        read_only: the connection was opened read-only (writes that may be skipped are).

    Raises:
        PrismError: when the database was written by a newer PRISM schema.
    """

    def __init__(self, connection: duckdb.DuckDBPyConnection, *, init_schema: bool = True,
                 read_only: bool = False) -> None:
        self._conn = connection
        self.read_only = read_only
        self._lock = threading.RLock()
        self._in_transaction = False
        # Stored times are UTC: DuckDB reads naive times of a TIMESTAMPTZ column (FileScan) and
        # prints now() in the session's zone, which is the machine's unless set.
        try:
            self._conn.execute("SET TimeZone = 'UTC'")
            self._utc = True
        except duckdb.Error:  # no ICU extension: insert_file then declines files with times
            self._utc = False
        if init_schema:
            self._init_schema()

    @classmethod
    def open(
        cls, path: str | Path = ":memory:", *, read_only: bool = False,
        memory_limit: str | None = None,
    ) -> Store:
        """Open or create the store at ``path`` (``:memory:`` for a throw-away one).

        ``memory_limit`` (e.g. ``"1GB"``; default ``PRISM_MEMORY_LIMIT``, else DuckDB's 80 % of
        RAM) bounds DuckDB's memory: larger joins and aggregations spill to disk next to the
        file.

        Raises:
            ConfigError: when the file cannot be opened (locked by another process, not a
                DuckDB file, missing folder).
        """
        target = str(path)
        if target != ":memory:":
            parent = Path(target).expanduser().resolve().parent
            if not parent.exists():
                raise ConfigError(
                    f"cannot open store {target!r}: folder {str(parent)!r} does not exist; "
                    "create it or pass another --db"
                )
            check_store_path(Path(target).expanduser())
        try:
            # Rows carry their order in columns (ts, _line): DuckDB may insert in parallel.
            config: dict[str, str | bool | int | float | list[str]] = {
                "preserve_insertion_order": False}
            limit = memory_limit or get_settings().memory_limit
            if limit:
                config["memory_limit"] = limit
            conn = duckdb.connect(target, read_only=read_only, config=config)
        except duckdb.Error as exc:
            raise _open_error(target, exc) from exc
        return cls(conn, init_schema=not read_only, read_only=read_only)

    def cursor(self) -> Store:
        """A store on a new cursor of the same database, for use by another thread."""
        return Store(self._conn.cursor(), init_schema=False, read_only=self.read_only)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one way SQL runs -------------------------------------------------------------
    def execute(self, query: str, params: Sequence[Any] | None = None) -> duckdb.DuckDBPyConnection:
        """Run one SQL statement with ``?`` parameters bound from ``params``.

        Returns:
            The cursor, on which ``.df()``, ``.fetchall()``, ``.fetchone()``, ``.arrow()`` work.
        """
        with self._lock:
            return self._conn.execute(query, list(params) if params is not None else None)

    def fetch_df(self, query: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """Run a query and return its result as a pandas frame."""
        return self.execute(query, params).df()

    def fetch_all(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a query and return all rows."""
        return self.execute(query, params).fetchall()

    def fetch_one(self, query: str, params: Sequence[Any] | None = None) -> tuple[Any, ...] | None:
        """Run a query and return its first row (or ``None``)."""
        rows = self.execute(query, params).fetchall()
        return rows[0] if rows else None

    def insert_frame(
        self,
        table: str,
        frame: pd.DataFrame | pa.Table,
        columns: Sequence[str],
        constants: dict[str, Any] | None = None,
        *,
        replace: bool = False,
    ) -> int:
        """Append the named ``columns`` of ``frame`` (pandas or Arrow) to ``table``.

        Args:
            table: a canonical table.
            frame: the rows; columns matched by name.
            columns: the columns of ``frame`` to insert.
            constants: column -> value set on every row (bound as parameters).
            replace: a row whose primary key is there replaces that row.

        Returns:
            The number of rows inserted.
        """
        if table not in _INSERTABLE:
            raise PrismError(f"insert_frame into unknown table {table!r}")
        constants = constants or {}
        view = f"_prism_insert_{threading.get_ident()}"
        target = ", ".join(f'"{c}"' for c in [*constants, *columns])
        source = ", ".join(["?"] * len(constants) + [f'"{c}"' for c in columns])
        with self._lock:
            self._settle()
            self._conn.register(view, frame)
            try:
                self.execute(f'INSERT {"OR REPLACE " * replace}INTO {table} ({target}) '
                             f'SELECT {source} FROM "{view}"', list(constants.values()))
            finally:
                self._conn.unregister(view)
        return len(frame) if isinstance(frame, pd.DataFrame) else frame.num_rows

    def insert_file(
        self,
        table: str,
        scan: FileScan,
        columns: Sequence[str],
        constants: dict[str, Any] | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> int:
        """Append the rows of a file to ``table`` with DuckDB's own reader (parallel, no Python
        per row): the fast path of clean files.

        Args:
            table: a canonical table.
            scan: the file and how its columns map onto ``columns``.
            columns: the table's columns to fill; those ``scan`` does not name are NULL.
            constants: column -> value set on every row (bound as parameters).
            progress: called with the fraction of the file read, about 5 times a second.

        Returns:
            The number of rows inserted.

        Raises:
            FileScanError: when DuckDB cannot read the file as ``scan`` declares it. DuckDB has
                then aborted the open transaction: the caller must roll it back.
        """
        if table not in _INSERTABLE:
            raise PrismError(f"insert_file into unknown table {table!r}")
        if not self._utc and "time" in scan.column_types:
            raise FileScanError(f"{scan.path}: DuckDB cannot read times in UTC here (no ICU)")
        values = {**(constants or {}), **scan.constants}
        targets: list[str] = []
        exprs: list[str] = []
        params: list[Any] = []
        for name in dict.fromkeys([*(constants or {}), *columns]):
            if name in values:
                exprs.append("?")
                params.append(values[name])
            elif name in scan.fields:
                i = scan.fields[name]
                exprs.append(SCAN_EXPR[scan.file_format][scan.column_types[i]].format(f"c{i}"))
            else:
                continue
            targets.append(f'"{name}"')
        aliases = [f"c{i}" for i in range(len(scan.column_types))]
        if scan.file_format == "csv":
            source = ("read_csv(?, header = true, auto_detect = false, delim = ',', "
                      "quote = '\"', escape = '\"', columns = ?)")
            params += [str(scan.path), dict.fromkeys(aliases, "VARCHAR")]
        else:
            source = f"read_parquet(?) AS scan({', '.join(aliases)})"
            params.append(str(scan.path))
        sql = f"INSERT INTO {table} ({', '.join(targets)}) SELECT {', '.join(exprs)} FROM {source}"
        with self._lock, polling(self._conn, progress):
            try:
                row = self._conn.execute(sql, params).fetchone()
            except duckdb.Error as exc:
                raise FileScanError(f"{scan.path}: {str(exc).splitlines()[0]}") from exc
        return int(row[0]) if row else 0

    def _settle(self) -> None:
        # DuckDB refuses register() while a result of an earlier execute() is unread.
        self._conn.complete()

    @property
    def in_transaction(self) -> bool:
        """Whether a :meth:`transaction` is open on this store."""
        return self._in_transaction

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Store]:
        """All statements inside run in one transaction: committed together or not at all."""
        with self._lock:
            if self._in_transaction:
                yield self
                return
            self.execute("BEGIN TRANSACTION")
            self._in_transaction = True
            try:
                yield self
            except BaseException:
                self._in_transaction = False
                self.execute("ROLLBACK")
                raise
            self._in_transaction = False
            self.execute("COMMIT")

    # -- schema ---------------------------------------------------------------------------
    def _init_schema(self) -> None:
        with self.transaction():
            for statement in _DDL:
                self.execute(statement)
            row = self.fetch_one("SELECT value FROM meta WHERE key = 'schema_version'")
            if row is None:
                self.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
                )
            elif int(row[0]) > SCHEMA_VERSION:
                raise PrismError(
                    f"this store has schema version {row[0]}, newer than this PRISM "
                    f"({SCHEMA_VERSION}); upgrade PRISM or use another --db"
                )
            elif int(row[0]) < SCHEMA_VERSION:  # older: the DDL above added the new tables
                self.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                             [str(SCHEMA_VERSION)])

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the store."""
        row = self.fetch_one("SELECT value FROM meta WHERE key = 'schema_version'")
        return int(row[0]) if row else 0

    # -- reads used by the use cases ---------------------------------------------------------
    def list_series(
        self, *, cluster: str | None = None, scope: str | None = None, metric: str | None = None
    ) -> pd.DataFrame:
        """The series catalogue, optionally filtered by cluster, scope and metric."""
        return self.fetch_df(
            """SELECT series_id, source, cluster, scope, metric, freq, first_ts, last_ts,
                      n_points, n_filled, unit, aggregation, fill
               FROM series
               WHERE (?::VARCHAR IS NULL OR cluster = ?) AND (?::VARCHAR IS NULL OR scope = ?)
                 AND (?::VARCHAR IS NULL OR metric = ?)
               ORDER BY series_id""",
            [cluster, cluster, scope, scope, metric, metric],
        )

    def require_series(self, series_ids: Sequence[str]) -> None:
        """Check that every named series is in the store.

        Raises:
            SeriesNotFound: for the first missing one, with the closest ids there are.
        """
        ids = list(dict.fromkeys(series_ids))
        known = {r[0] for r in self.fetch_all(
            "SELECT series_id FROM series WHERE list_contains(?, series_id)", [ids])}
        missing = [s for s in ids if s not in known]
        if not missing:
            return
        every = [r[0] for r in self.fetch_all("SELECT series_id FROM series")]
        close = difflib.get_close_matches(missing[0], every, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else (
            "; `prism series list` shows the series there are")
        raise SeriesNotFound(f"series {missing[0]!r} is not in the store{hint}")

    def load_panel(self, series_ids: Sequence[str] | None = None, *,
                   start: pd.Timestamp | None = None, end: pd.Timestamp | None = None,
                   ) -> pd.DataFrame:
        """Return the panel (``series_id, ts, value``) of the named series, or of all series.

        Raises:
            SeriesNotFound: when a named series is not in the store.
        """
        if series_ids is not None:
            self.require_series(series_ids)
        frame = self.fetch_df(
            """SELECT series_id, ts, value FROM series_values
               WHERE (?::VARCHAR[] IS NULL OR list_contains(?::VARCHAR[], series_id))
                 AND (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)
               ORDER BY series_id, ts""",
            [series_ids and list(series_ids), series_ids and list(series_ids),
             start, start, end, end],
        )
        frame["ts"] = frame["ts"].astype("datetime64[ns]")
        frame["value"] = frame["value"].astype("float64")
        return frame

    # -- forecast serving (the REST API) ------------------------------------------------------
    def series_watermarks(self, clusters: Sequence[str] | None = None) -> pd.DataFrame:
        """Each series' catalogue entry and a checksum of its values.

        The checksum (``bit_xor`` of ``hash(ts, value)`` over the series) changes whenever a
        value is added, removed or revised, and is the same for the same data.

        Args:
            clusters: only these clusters (all when ``None``).

        Returns:
            ``series_id, cluster, freq, first_ts, last_ts, n_points, checksum``.
        """
        wanted = list(clusters) if clusters is not None else None
        frame = self.fetch_df(
            """SELECT s.series_id, s.cluster, s.freq, s.first_ts, s.last_ts, s.n_points,
                      coalesce(v.checksum, 0)::UBIGINT AS checksum
               FROM series s LEFT JOIN (
                   SELECT series_id, bit_xor(hash(ts, value)) AS checksum FROM series_values
                   WHERE ?::VARCHAR[] IS NULL OR list_contains(?::VARCHAR[], cluster)
                   GROUP BY series_id) v USING (series_id)
               WHERE ?::VARCHAR[] IS NULL OR list_contains(?::VARCHAR[], s.cluster)
               ORDER BY s.series_id""",
            [wanted, wanted, wanted, wanted],
        )
        for col in ("first_ts", "last_ts"):
            frame[col] = frame[col].astype("datetime64[ns]")
        return frame

    def cached_forecast(
        self, series_id: str, model: str, model_version: str, watermark: str,
        horizon_steps: int, quantiles: str,
    ) -> str | None:
        """The cached forecast payload under this key, or ``None``."""
        row = self.fetch_one(
            """SELECT payload FROM forecast_cache WHERE series_id = ? AND model = ?
               AND model_version = ? AND watermark = ? AND horizon_steps = ?
               AND quantiles = ?""",
            [series_id, model, model_version, watermark, horizon_steps, quantiles],
        )
        return None if row is None else str(row[0])

    def cache_forecasts(self, rows: Sequence[tuple[str, str, str, str, int, str, str]]) -> int:
        """Add forecast payloads to the cache; a key already there is kept as it is.

        Args:
            rows: ``(series_id, model, model_version, watermark, horizon_steps, quantiles,
                payload)`` tuples.

        Returns:
            The number of rows given.
        """
        if not rows:
            return 0
        frame = pd.DataFrame(list(rows), columns=["series_id", "model", "model_version",
                             "watermark", "horizon_steps", "quantiles", "payload"])
        view = f"_prism_cache_{threading.get_ident()}"
        with self._lock:
            self._settle()
            self._conn.register(view, frame)
            try:
                self.execute(
                    f"""INSERT OR IGNORE INTO forecast_cache
                        SELECT series_id, model, model_version, watermark,
                               horizon_steps::INTEGER, quantiles, payload,
                               now()::TIMESTAMP FROM "{view}" """)
            finally:
                self._conn.unregister(view)
        return len(rows)

    def drop_cached_forecasts(self, series_ids: Sequence[str] | None = None) -> int:
        """Delete the cached forecasts of these series (all when ``None``).

        Returns:
            The number of rows deleted.
        """
        row = self.fetch_one(
            """WITH gone AS (DELETE FROM forecast_cache
                   WHERE ?::VARCHAR[] IS NULL OR list_contains(?::VARCHAR[], series_id)
                   RETURNING 1)
               SELECT count(*) FROM gone""",
            [series_ids and list(series_ids), series_ids and list(series_ids)],
        )
        return int(row[0]) if row else 0

    def add_forecast_errors(self, frame: pd.DataFrame) -> int:
        """Append scored forecast points (``series_id, model, model_version, origin_ts, ts,
        step, forecast, actual``) to ``forecast_errors``."""
        if frame.empty:
            return 0
        return self.insert_frame(
            "forecast_errors", frame,
            ["series_id", "model", "model_version", "origin_ts", "ts", "step", "forecast",
             "actual", "scored_at"])

    def rolling_forecast_errors(self, window: int) -> pd.DataFrame:
        """The error of the last ``window`` scored points of each series and model.

        Returns:
            ``series_id, model, points, mae, wape`` (``wape``: sum of absolute errors over
            the sum of absolute actuals; NaN when the actuals are all 0).
        """
        return self.fetch_df(
            """SELECT series_id, model, count(*) AS points,
                      avg(abs(forecast - actual)) AS mae,
                      sum(abs(forecast - actual)) / nullif(sum(abs(actual)), 0) AS wape
               FROM (SELECT *, row_number() OVER (PARTITION BY series_id, model
                                                  ORDER BY ts DESC, scored_at DESC) AS rn
                     FROM forecast_errors)
               WHERE rn <= ? GROUP BY series_id, model ORDER BY series_id, model""",
            [int(window)])

    def capacity_at(self, cluster: str, scope: str, at: pd.Timestamp | None) -> float | None:
        """GPUs installed in a scope at time ``at`` (the latest row per GPU type in force).

        A node list (``node-list``) is a snapshot of the whole cluster: of its rows only the
        newest node list's count, so a GPU type or scope it no longer lists has none left.
        Where a scope has rows of both a node list and capacity tables, those of the source
        ingested last count (the two would otherwise add up the same GPUs).

        Returns:
            The sum over GPU types, or ``None`` when the store has no capacity for the scope.
        """
        row = self.fetch_one(
            """WITH nodes AS (
                   SELECT max(c.ingest_id) AS newest FROM capacity c JOIN ingests i
                   USING (ingest_id) WHERE i.format = 'node-list' AND c.cluster = ?),
               mine AS (
                   SELECT c.gpus, c.gpu_type, c.valid_from, c.ingest_id,
                          i.format = 'node-list' AS from_nodes
                   FROM capacity c JOIN ingests i USING (ingest_id), nodes
                   WHERE c.cluster = ? AND c.scope = ?
                     AND (i.format <> 'node-list' OR c.ingest_id = nodes.newest)
                     AND (c.valid_from IS NULL OR ?::TIMESTAMP IS NULL OR c.valid_from <= ?)),
               source AS (SELECT from_nodes FROM mine ORDER BY ingest_id DESC LIMIT 1)
               SELECT sum(gpus), count(*) FROM (
                   SELECT gpus FROM mine, source WHERE mine.from_nodes = source.from_nodes
                   QUALIFY row_number() OVER (PARTITION BY gpu_type
                                              ORDER BY valid_from DESC NULLS LAST,
                                                       ingest_id DESC) = 1)""",
            [cluster, cluster, scope, at, at],
        )
        return None if row is None or not row[1] else float(row[0])

    # -- evaluations (the capacity report) ------------------------------------------------------
    def save_evaluation(self, kind: str, table: pd.DataFrame, params: str = "{}") -> str:
        """Keep an evaluation table (``kind``: ``accuracy`` or ``planning``) for the report.

        Args:
            kind: what the table is.
            table: the table (stored as JSON records, times in ISO 8601).
            params: JSON text of the settings it was computed with.

        Returns:
            The new run id.
        """
        import uuid

        run_id = f"{kind}-{uuid.uuid4().hex[:12]}"
        records = table.to_json(orient="records", date_format="iso", double_precision=10)
        self.execute(
            """INSERT INTO evaluations (run_id, kind, created_at, params, records)
               VALUES (?, ?, now()::TIMESTAMP, ?, ?)""",
            [run_id, kind, params, records],
        )
        return run_id

    def latest_evaluation(self, kind: str) -> tuple[str, pd.Timestamp, str, pd.DataFrame] | None:
        """The newest evaluation of ``kind``: ``(run_id, created_at, params JSON, table)``."""
        import io

        row = self.fetch_one(
            """SELECT run_id, created_at, params, records FROM evaluations WHERE kind = ?
               ORDER BY created_at DESC, run_id DESC LIMIT 1""",
            [kind],
        )
        if row is None:
            return None
        table = pd.read_json(io.StringIO(str(row[3])), orient="records")
        return str(row[0]), pd.Timestamp(row[1]), str(row[2]), table

    # -- served capacity plans (the track record) -------------------------------------------
    def add_capacity_plans(self, frame: pd.DataFrame) -> int:
        """Keep served plan rows (:data:`PLAN_COLUMNS`) in one transaction; a row of the same
        ``cluster, scope, valid_from, valid_to, quantile, model`` replaces the one there.

        Raises:
            PrismError: when the store cannot take them (opened read-only, or another writer
                changed the same rows at the same time).
        """
        try:
            with self.transaction():
                return self.insert_frame("capacity_plans", frame, PLAN_COLUMNS, {
                    "created_at": pd.Timestamp.now("UTC").tz_localize(None)}, replace=True)
        except duckdb.Error as exc:
            raise PrismError(f"cannot record the plan: {str(exc).splitlines()[0]}") from exc

    def capacity_plans(self, cluster: str) -> pd.DataFrame:
        """A cluster's served plan rows (:data:`PLAN_COLUMNS` and ``created_at``) by window
        and scope; none in a read-only store of schema 2 (it lacks the table)."""
        if not self.fetch_all("SELECT 1 FROM duckdb_tables() WHERE table_name = ?",
                              ["capacity_plans"]):
            return pd.DataFrame(columns=[*PLAN_COLUMNS, "created_at"])
        return self.fetch_df("""SELECT * FROM capacity_plans WHERE cluster = ?
                                ORDER BY valid_from, valid_to, scope, model, quantile""",
                             [cluster])

    # -- batch runs (prism.batch) -----------------------------------------------------------
    def load_panel_block(self, series_ids: Sequence[str]) -> pd.DataFrame:
        """The panel of a block of series (ids absent from the store are simply absent).

        The block is read with a range filter on its sorted ids besides the membership test,
        so that DuckDB skips the row groups of other series: a batch reads thousands of
        series block by block without scanning the whole table each time.
        """
        ids = sorted(set(series_ids))
        if not ids:
            return pd.DataFrame({"series_id": pd.Series(dtype=object),
                                 "ts": pd.Series(dtype="datetime64[ns]"),
                                 "value": pd.Series(dtype="float64")})
        frame = self.fetch_df(
            """SELECT series_id, ts, value FROM series_values
               WHERE series_id BETWEEN ? AND ? AND list_contains(?::VARCHAR[], series_id)
               ORDER BY series_id, ts""",
            [ids[0], ids[-1], ids],
        )
        frame["ts"] = frame["ts"].astype("datetime64[ns]")
        frame["value"] = frame["value"].astype("float64")
        return frame

    def load_panel_arrays(self, series_ids: Sequence[str]) -> dict[str, Any]:
        """:meth:`load_panel_block` of sorted unique ids (one or more) as numpy arrays, in a
        third of its time: ``i`` (the row's series' position in the ids), ``ts`` (ns since the
        epoch) and ``value``, in no particular order (numpy sorts them faster than DuckDB)."""
        return self.execute(
            """SELECT k.i, epoch_ns(v.ts) AS ts, v.value FROM series_values v JOIN (SELECT
               unnest(l) AS series_id, generate_subscripts(l, 1) - 1 AS i
               FROM (SELECT ?::VARCHAR[] AS l)) k USING (series_id)
               WHERE series_id BETWEEN ? AND ?""",
            [list(series_ids), series_ids[0], series_ids[-1]]).fetchnumpy()

    def start_batch_run(
        self, run_id: str, *, task: str, model: str, params: str, horizon: str,
        quantiles: Sequence[float], windows: int | None, backend: str, workers: int,
        n_series: int,
    ) -> None:
        """Record a batch run as ``running`` (``params`` is JSON text)."""
        self.execute(
            """INSERT INTO batch_runs (run_id, task, model, params, horizon, quantiles, windows,
                                       backend, workers, n_series, status, started_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', now()::TIMESTAMP)""",
            [run_id, task, model, params, horizon, [float(q) for q in quantiles], windows,
             backend, workers, n_series],
        )

    def add_batch_results(self, run_id: str, forecasts: pa.Table | None,
                          series: pd.DataFrame) -> None:
        """Append the forecasts and per-series outcomes of a finished chunk (one transaction).

        Args:
            run_id: the run.
            forecasts: ``series_id, cutoff, ts, model, mean, quantiles (list), value`` rows.
            series: ``series_id, status, fallback_reason, seconds, n_rows`` rows.
        """
        with self.transaction():
            if forecasts is not None and forecasts.num_rows:
                self.insert_frame("batch_forecasts", forecasts, _BATCH_FORECAST_COLUMNS,
                                  {"run_id": run_id})
            self.insert_frame("batch_series", series, _BATCH_SERIES_COLUMNS, {"run_id": run_id})

    def finish_batch_run(self, run_id: str, *, status: str, seconds: float) -> None:
        """Mark a batch run ``done``, ``failed`` or ``interrupted``."""
        self.execute(
            """UPDATE batch_runs SET status = ?, seconds = ?, finished_at = now()::TIMESTAMP
               WHERE run_id = ?""", [status, seconds, run_id])

    def batch_runs(self, run_id: str | None = None) -> pd.DataFrame:
        """The batch runs (or one of them), newest first."""
        return self.fetch_df(
            """SELECT * FROM batch_runs WHERE (?::VARCHAR IS NULL OR run_id = ?)
               ORDER BY started_at DESC, run_id""", [run_id, run_id])

    def batch_series(self, run_id: str) -> pd.DataFrame:
        """Per-series outcomes of a run: ``series_id, status, fallback_reason, seconds,
        n_rows``, sorted by series."""
        return self.fetch_df(
            """SELECT series_id, status, fallback_reason, seconds, n_rows FROM batch_series
               WHERE run_id = ? ORDER BY series_id""", [run_id])

    def iter_batch_forecasts(self, run_id: str, *, rows: int = 200_000) -> Iterator[pa.Table]:
        """The forecasts of a run in order (series, cutoff, ts), ``rows`` at a time (Arrow).

        Columns: ``series_id, ts, cutoff, model, mean, quantiles (list, at the run's
        levels), value``. Streamed on a cursor of its own: memory stays flat however large
        the run.
        """
        cursor = self._conn.cursor()
        try:
            reader = cursor.sql(
                """SELECT series_id, ts, cutoff, model, mean, quantiles, value
                   FROM batch_forecasts WHERE run_id = ?
                   ORDER BY series_id, cutoff NULLS FIRST, ts""",
                params=[run_id],
            ).to_arrow_reader(rows)
            for batch in reader:
                yield pa.Table.from_batches([batch])
        finally:
            cursor.close()

    # -- job-level reads (prism.forecasters.release) -------------------------------------------
    def load_jobs(
        self, cluster: str, scope: str | None = None, until: pd.Timestamp | None = None,
    ) -> pd.DataFrame:
        """The jobs of a cluster, or of one of its scopes, as they were known at ``until``.

        Scopes are named as in series ids (:mod:`prism.derive`): ``all`` (or ``None``) is every
        job of the cluster, ``gpu:<type>`` the jobs of one GPU type (``gpu:unknown``: those
        without one), any other name a VC/tenant/QoS scope (``unassigned``: jobs without one).
        A scope matches the stored name or the name after the derivation replaced the
        characters that series ids do not allow by ``_``.

        Args:
            cluster: the cluster.
            scope: the scope, as in the series id (``None`` or ``all``: the whole cluster).
            until: read the jobs as known at this time (UTC, naive): only jobs submitted (or,
                without a submit time, started) at or before it, and a ``start_ts`` or
                ``end_ts`` after it reads as NULL (not started, still running), so that no
                caller can see the future by accident. ``None`` reads everything.

        Returns:
            ``cluster, scope, job_id, gpu_type, num_gpus, submit_ts, start_ts, end_ts``
            (times ``datetime64[ns]``, NaT when unknown), sorted by ``start_ts`` (NULLs last)
            and ``job_id``; empty when nothing matches.
        """
        bad = SCOPE_BAD_CHARS  # the derivation's rule for scope names in series ids
        everything = scope is None or scope == "all"
        gpu_type = scope[4:] if scope is not None and scope.startswith("gpu:") else None
        frame = self.fetch_df(
            """SELECT cluster, scope, job_id, gpu_type, num_gpus, submit_ts,
                      CASE WHEN ?::TIMESTAMP IS NULL OR start_ts <= ? THEN start_ts END
                          AS start_ts,
                      CASE WHEN ?::TIMESTAMP IS NULL OR end_ts <= ? THEN end_ts END AS end_ts
               FROM jobs
               WHERE cluster = ?
                 AND (? OR CASE WHEN ?::VARCHAR IS NOT NULL
                               THEN (gpu_type IS NULL AND ? = 'unknown') OR gpu_type = ?
                                    OR regexp_replace(gpu_type, ?, '_', 'g') = ?
                               ELSE (scope IS NULL AND ? = 'unassigned') OR scope = ?
                                    OR regexp_replace(scope, ?, '_', 'g') = ? END)
                 AND (?::TIMESTAMP IS NULL OR coalesce(submit_ts, start_ts) <= ?)
               ORDER BY start_ts NULLS LAST, job_id""",
            [until, until, until, until, cluster, everything, gpu_type, gpu_type, gpu_type,
             bad, gpu_type, scope, scope, bad, scope, until, until],
        )
        for col in ("submit_ts", "start_ts", "end_ts"):
            frame[col] = frame[col].astype("datetime64[ns]")
        frame["num_gpus"] = frame["num_gpus"].astype("float64")
        return frame


#: Columns of a served capacity plan row (``capacity_plans``, :mod:`prism.track_record`).
PLAN_COLUMNS = ("cluster", "scope", "series_id", "made_at", "valid_from", "valid_to",
                "gpus_planned", "quantile", "model", "served_by")
_BATCH_FORECAST_COLUMNS = ("series_id", "cutoff", "ts", "model", "mean", "quantiles", "value")
_BATCH_SERIES_COLUMNS = ("series_id", "status", "fallback_reason", "seconds", "n_rows")


_INSERTABLE = {"jobs", "samples", "capacity", "rejects", "series_values", "series", "ingests",
               "forecast_errors", "batch_forecasts", "batch_series", "capacity_plans"}


def _open_error(target: str, exc: duckdb.Error) -> ConfigError:
    """Tell a lock held by another process from a file that is not a store DuckDB can read."""
    text = (str(exc) or type(exc).__name__).splitlines()[0]
    what, fix = ("not a PRISM/DuckDB store, or a damaged one", "pass the store's file (a "
                 "damaged one cannot be repaired: restore a copy, or ingest again into a new --db)")
    if "Could not set lock" in text or "Conflicting lock" in text:
        what, fix = "another process holds it", ("close that process (with `prism serve` "
                                                  "running, the CLI goes through its API)")
    elif "version number" in text:
        what, fix = "another DuckDB version wrote it", "open it with the PRISM that wrote it"
    return ConfigError(f"cannot open store {target!r}: {what} ({text}). Fix: {fix}, or pass "
                       "another --db / PRISM_DB")
