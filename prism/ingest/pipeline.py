"""Write files to the store: read with an adapter, then one transaction for all of them.

The transaction holds the ``ingests`` rows, the canonical rows, the rejects and the re-derived
series of every affected cluster, so a failed run (bad row, duplicate job id, crash, SIGKILL)
leaves the store as it was. A file whose content (bytes + format + options that change the
result) was ingested before is skipped: re-ingesting is a no-op. A job (``cluster, job_id``) or
sample (``series_id, ts``) that an earlier ingest stored is replaced by the newer ingest's row
(:mod:`prism.ingest.conflicts`); of the files of one run, the later on the command line wins
(daily exports ingested in one go, oldest first). A job id twice in one file is refused.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from prism.derive import derive_clusters, set_cluster_config
from prism.errors import ConfigError, FileScanError, IngestError
from prism.ingest import get_adapter
from prism.ingest.base import (
    CAPACITY_COLUMNS,
    LINE,
    SAMPLE_COLUMNS,
    Batch,
    IngestOptions,
    Reject,
    SlowPath,
)
from prism.ingest.checks import MAX_PROBLEMS
from prism.ingest.conflicts import (
    Replaced,
    check_scopes,
    check_sources,
    replace_jobs,
    replace_samples,
)
from prism.ingest.spans import Reread, check_spans
from prism.progress import Progress
from prism.schema import (
    EARLIEST_TS,
    FILL_POLICIES,
    JOB_COLUMNS,
    LATEST_TS,
    FileScan,
    format_freq,
    freq_seconds,
)
from prism.store import Store

logger = logging.getLogger(__name__)

# progress(stage, done, total): stages "read", "write", "derive" (files), and "rows" (rows
# inserted of a streamed file; total is an estimate, 0 when unknown).


@dataclass(frozen=True)
class FileReport:
    """What happened to one file."""

    path: str
    status: str  # "ingested" or "unchanged"
    rows: int
    rejected: int
    ingest_id: int | None
    rejects: tuple[Reject, ...] = ()
    #: how the rows were read: ``duckdb`` (DuckDB's own reader, then checks in SQL),
    #: ``arrow`` (streamed Arrow chunks) or ``checked`` (row by row checks that name lines)
    reader: str = ""
    #: what the rows stand for, where it is not one per input row (:attr:`Batch.note`), and
    #: what the file's samples did to those stored before
    note: str = ""
    #: samples at a (series_id, ts), or jobs of a (cluster, job_id), stored before with another
    #: value, which this file replaced
    replaced: int = 0
    #: samples or jobs stored before with the same value (nothing changed)
    same: int = 0


@dataclass
class IngestReport:
    """What one ingest run did."""

    files: list[FileReport] = field(default_factory=list)
    clusters: list[str] = field(default_factory=list)
    series: int = 0
    #: seconds spent per stage: read (parse and check), write (insert), derive (series)
    timings: dict[str, float] = field(default_factory=dict)
    #: what the user should know about the result (a capacity for a cluster without series)
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Rows added by the run."""
        return sum(f.rows for f in self.files)

    @property
    def rejected(self) -> int:
        """Rows rejected by the run."""
        return sum(f.rejected for f in self.files)

    @property
    def replaced(self) -> int:
        """Stored samples (same series and time) and jobs (same cluster and job id) whose value
        the run replaced (newest wins)."""
        return sum(f.replaced for f in self.files)

    @property
    def same(self) -> int:
        """Samples the run read that the store held already with the same value."""
        return sum(f.same for f in self.files)


def _clusters_without_series(known: Mapping[str, int], clusters: Sequence[str]) -> list[str]:
    """A note per ingested cluster that has no series (only a capacity, so far), naming the
    store's clusters with series (``known``: cluster -> series) that its name is close to: a
    misspelt --cluster otherwise leaves a capacity no plan reads."""
    notes = []
    for cluster in clusters:
        if known.get(cluster):
            continue
        others = sorted(known)
        close = difflib.get_close_matches(cluster, others, n=2, cutoff=0.6)
        notes.append(
            f"cluster {cluster!r} has no series yet: its capacity waits for its jobs or samples"
            + (f"; did you mean {' or '.join(map(repr, close))}? (ingest again with that "
               "--cluster)" if close else
               f"; the store's clusters with series: {', '.join(others)}" if others else ""))
    return notes


def content_hash(path: Path, fmt: str, options: IngestOptions, identity: str = "") -> str:
    """sha256 over the file's bytes, the format, the options that change the result and the
    adapter's ``identity`` of the file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(f"\0{fmt}\0{options.content_key()}\0{identity}".encode())
    return digest.hexdigest()


def ingest(
    store: Store,
    paths: Sequence[str | Path],
    fmt: str,
    options: IngestOptions | None = None,
    *,
    freq: str | None = None,
    fill: str | None = None,
    progress: Progress | None = None,
    native: bool = True,
) -> IngestReport:
    """Ingest ``paths`` in format ``fmt`` into ``store`` and re-derive the affected series.

    A clean file goes the fastest way its adapter has: DuckDB's own reader straight into the
    table, checked in SQL afterwards (``native``), else Arrow chunks; a file with a bad value
    or row is read again by the checked reader, which names the line and column.

    Args:
        store: the store.
        paths: files to ingest (all in one transaction).
        fmt: the format name (``prism.ingest.adapters()``).
        options: adapter options.
        freq: bucket size of the derived series of the affected clusters (kept per cluster;
            default ``10min`` for a new cluster).
        fill: gap policy of sampled series (``auto``, ``hold``, ``zero``, ``linear``).
        progress: called with (stage, done, total).
        native: let DuckDB read files itself where the adapter allows it (off: Arrow and
            the checked reader only; the results are the same).

    Returns:
        A report per file, the clusters touched and their series count.

    Raises:
        IngestError: for bad input, naming file, line and column; nothing is written.
        ConfigError: for a bad format, frequency or fill policy.
    """
    options = options or IngestOptions()
    if freq is not None:
        freq_seconds(freq)  # fail on a bad --freq before reading anything
    if fill is not None and fill not in FILL_POLICIES:
        raise ConfigError(f"unknown fill policy {fill!r}; use one of {', '.join(FILL_POLICIES)}")
    files = [Path(p) for p in paths]
    if not files:
        raise ConfigError("no files to ingest: pass one or more paths")
    native = native and not store.in_transaction  # a DuckDB read error aborts the transaction
    # A job id twice in one file is looked for once, after all files (each file replaces the
    # rows earlier files hold of its jobs, so a repeat left at the end is within one file);
    # when there is one, the run is rolled back and written again with a check per file, which
    # names the rows.
    defer = len(files) > 1
    while True:
        try:
            return _ingest(store, files, fmt, options, freq, fill, progress, native, defer)
        except FileScanError as exc:  # rolled back: start again, checked
            logger.info("%s; reading the files again with the checked reader", exc)
            native = False
        except _RepeatedIds:
            logger.info("a job id repeats; writing the files again with a check per file")
            defer = False


class _RepeatedIds(Exception):  # noqa: N818 - a signal inside ingest(), never seen by users
    """A job id repeats in the files of a run whose check was deferred to its end."""


def _ingest(
    store: Store, files: list[Path], fmt: str, options: IngestOptions, freq: str | None,
    fill: str | None, progress: Progress | None, native: bool, defer: bool,
) -> IngestReport:
    adapter = get_adapter(fmt)
    adapter.check_options(options)
    report = IngestReport()
    # per new file: what DuckDB reads itself, the chunk stream of a clean job file (read while
    # writing), or a Batch read now
    pending: list[tuple[int, Path, str, FileScan | Batch | Iterator[pa.Table]]] = []
    done: dict[int, FileReport] = {}  # by position in ``files``: the report keeps their order
    clock = time.perf_counter()
    for i, path in enumerate(files):
        if not path.exists():
            raise IngestError("file not found", path=str(path), fix="check the path")
        if path.is_dir():
            raise IngestError("is a folder, not a file", path=str(path),
                              fix=f"pass the files inside it, e.g. {path}/*.csv")
        digest = content_hash(path, fmt, options, adapter.identity(path, options))
        seen = store.fetch_one(
            "SELECT ingest_id FROM ingests WHERE content_hash = ?", [digest]
        ) or next(((None,) for _, _, d, _ in pending if d == digest), None)
        if seen is not None:
            done[i] = FileReport(str(path), "unchanged", 0, 0, seen[0])
            logger.info("%s: already ingested (same content), skipped", path)
        else:
            scan = adapter.native(path, options) if native else None
            chunks = adapter.stream(path, options) if scan is None else None
            pending.append((i, path, digest, scan or chunks or adapter.read(path, options)))
        if progress:
            progress("read", i + 1, len(files))
    report.timings["read"] = time.perf_counter() - clock
    clock = time.perf_counter()
    touched: set[str] = set()

    def reread(path: Path) -> Batch:  # on an error path: a file of this run, with its lines
        return adapter.read(path, options)

    run: dict[int, tuple[Path, Reread]] = {}  # ingest id -> file of this run
    with store.transaction():
        for n, (i, path, digest, source) in enumerate(pending, 1):
            fast: tuple[int, int, list[str], Replaced] | None = None
            reader = ""
            if isinstance(source, FileScan):  # a row failing a check: the checked reader
                fast, reader = _write_native(store, path, fmt, digest, source, options,
                                             progress, not defer), "duckdb"
            elif not isinstance(source, Batch):
                fast, reader = _write_stream(store, path, fmt, digest, source, options,
                                             progress, not defer), "arrow"
            if fast is not None:
                ingest_id, rows, clusters, replaced = fast
                run[ingest_id] = (path, reread)
                touched.update(clusters)
                done[i] = FileReport(str(path), "ingested", rows, 0, ingest_id, reader=reader,
                                     note=replaced.note(), replaced=replaced.changed,
                                     same=replaced.same)
                if progress:
                    progress("write", n, len(pending))
                continue
            batch = source if isinstance(source, Batch) else adapter.read(path, options)
            if not len(batch.frame) and not batch.rejects:
                raise IngestError(
                    "no rows to ingest: the file has a header only, or only rows the format "
                    "leaves out" + (f" ({batch.note})" if batch.note else ""), path=str(path),
                    fix="pass a file with rows, or leave this one out of the ingest")
            ingest_id, rows, replaced = _write(store, path, fmt, digest, batch, options)
            run[ingest_id] = (path, reread)
            touched.update(batch.clusters or ([options.cluster] if options.cluster else []))
            note = "; ".join(n for n in (batch.note, replaced.note()) if n)
            done[i] = FileReport(str(path), "ingested", rows, len(batch.rejects), ingest_id,
                                 tuple(batch.rejects), reader="checked", note=note,
                                 replaced=replaced.changed, same=replaced.same)
            if progress:
                progress("write", n, len(pending))
        if defer and touched and _any_repeat(store, sorted(touched)):
            raise _RepeatedIds
        check_sources(store, sorted(touched), run)
        report.notes.extend(check_scopes(store, sorted(touched), run))
        for cluster in _clusters_named(store, options, touched) if (
                freq is not None or fill is not None) else ():
            touched.add(cluster)  # a new setting re-derives a named cluster
        for cluster in sorted(touched):
            change = set_cluster_config(store, cluster, freq=freq, fill=fill)
            if change:
                report.notes.append(
                    f"cluster {cluster!r}: {change}, so all its series (from every earlier "
                    "ingest too) were derived again; a cluster keeps its --freq and --fill for "
                    "later ingests (`prism series rederive` changes them without ingesting)")
        report.files = [done[i] for i in sorted(done)]
        report.timings["write"] = time.perf_counter() - clock
        clock = time.perf_counter()
        if touched:
            check_spans(store, sorted(touched), dict.fromkeys(map(str, files), reread),
                        options)
            derive_clusters(store, sorted(touched))
            if progress:
                progress("derive", 1, 1)
    report.timings["derive"] = time.perf_counter() - clock  # includes the commit
    logger.info("ingest: read %.2fs, write %.2fs, derive %.2fs", *report.timings.values())
    report.clusters = sorted(touched)
    if touched:
        counts = {str(c): int(n) for c, n in store.fetch_all(
            "SELECT cluster, count(*) FROM series GROUP BY cluster ORDER BY cluster")}
        report.series = sum(counts.get(c, 0) for c in report.clusters)
        report.notes.extend(_clusters_without_series(counts, report.clusters))
    _warn_unchanged(store, report, freq, fill)
    if touched:
        _warn_filled(store, report.clusters)
    return report


#: A sampled series with more of its buckets filled than this share gets a warning.
FILLED_SHARE = 0.5


def _warn_filled(store: Store, clusters: Sequence[str]) -> None:
    """Say so when most buckets of a sampled series had no sample: its samples come less
    often than the cluster's bucket (``--freq``), or a missing sample means 0 (``--fill``)."""
    rows = store.fetch_all(
        """WITH flagged AS (
               SELECT s.series_id, s.n_points, s.n_filled, s.fill, c.freq_s FROM series s
               JOIN clusters c USING (cluster)
               WHERE list_contains(?, s.cluster) AND s.n_points >= 10
                 AND s.n_filled > ? * s.n_points
                 AND s.series_id IN (SELECT DISTINCT series_id FROM samples
                                     WHERE list_contains(?, cluster))),
           gaps AS (
               SELECT series_id, epoch_us(ts) - lag(epoch_us(ts)) OVER (
                   PARTITION BY series_id ORDER BY ts) AS gap_us
               FROM samples WHERE series_id IN (SELECT series_id FROM flagged))
           SELECT f.series_id, f.n_filled / f.n_points, f.fill, f.freq_s,
                  (SELECT median(gap_us) FROM gaps g WHERE g.series_id = f.series_id)
           FROM flagged f ORDER BY f.series_id""",
        [list(clusters), FILLED_SHARE, list(clusters)])
    for series_id, share, policy, freq_s, gap_us in rows:
        every = int(round(float(gap_us) / 1e6)) if gap_us is not None else 0
        cluster = str(series_id).split("/", 1)[0]
        hints = []
        if every > int(freq_s):
            hints.append(f"its samples come every {format_freq(every)}: `prism series "
                         f"rederive --cluster {cluster} --freq {format_freq(every)}`")
        elif policy != "zero":  # samples at the bucket's pace, missing now and then
            hints.append(f"if a missing sample means 0 (a series absent while idle): `prism "
                         f"series rederive --cluster {cluster} --fill zero`")
        logger.warning("%s: %.0f %% of its %s buckets had no sample and were filled (%s)%s",
                       series_id, float(share) * 100, format_freq(int(freq_s)), policy,
                       "; " + "; ".join(hints) if hints else "")


def _warn_unchanged(store: Store, report: IngestReport, freq: str | None,
                    fill: str | None) -> None:
    """Say so when ``--freq`` or ``--fill`` did nothing: the files were ingested before, so
    their clusters were not derived again (``prism series rederive`` does that)."""
    ids = [f.ingest_id for f in report.files if f.status == "unchanged" and f.ingest_id]
    if (freq is None and fill is None) or not ids:
        return
    rows = store.fetch_all(
        """SELECT c.cluster, c.freq_s, c.fill FROM clusters c WHERE c.cluster IN (
               SELECT DISTINCT unnest(string_split(cluster, ',')) FROM ingests
               WHERE list_contains(?, ingest_id) AND cluster IS NOT NULL)
           ORDER BY c.cluster""", [ids])
    for cluster, freq_s, policy in rows:
        if cluster in report.clusters:
            continue
        now, asked = [], []
        if freq is not None and freq_seconds(freq) != freq_s:
            now.append(f"freq {format_freq(int(freq_s))}")
            asked.append(f"--freq {freq}")
        if fill is not None and fill != policy:
            now.append(f"fill {policy}")
            asked.append(f"--fill {fill}")
        if asked:
            logger.warning(
                "series of cluster %s unchanged at %s: the files were ingested before, so %s "
                "did nothing; run `prism series rederive --cluster %s %s` to re-derive",
                cluster, " and ".join(now), " and ".join(a.split()[0] for a in asked), cluster,
                " ".join(asked))


def _clusters_named(store: Store, options: IngestOptions, touched: set[str]) -> list[str]:
    if options.cluster and options.cluster not in touched:
        row = store.fetch_one("SELECT 1 FROM clusters WHERE cluster = ?", [options.cluster])
        return [options.cluster] if row else []
    return []


def _write_native(
    store: Store, path: Path, fmt: str, digest: str, scan: FileScan, options: IngestOptions,
    progress: Progress | None = None, check_repeats: bool = True,
) -> tuple[int, int, list[str], Replaced] | None:
    """Insert a file with DuckDB's own reader, then check its rows in SQL.

    Returns ``(ingest_id, rows, clusters, replaced)``, or ``None`` when a row fails a check or
    (with ``check_repeats``) a job id is twice in the file: its rows are deleted and the
    caller reads the file with a reader that names the row. Rows other ingests (of earlier
    runs, or earlier files of this one) hold of this file's job ids are replaced.

    Raises:
        FileScanError: when DuckDB cannot parse the file (the transaction is aborted).
    """
    ingest_id = _next_ingest_id(store)
    report = None
    if progress is not None:
        hint = scan.rows_hint

        def report(fraction: float) -> None:
            if hint:
                progress("rows", int(fraction * hint), hint)
            else:  # a gzip file: how much of it is read, in percent
                progress("read %", int(fraction * 100), 100)

    rows = store.insert_file("jobs", scan, JOB_COLUMNS, {"ingest_id": ingest_id}, report)
    bad, found, first, last = store.fetch_one(_NATIVE_CHECK_SQL, [
        EARLIEST_TS.to_pydatetime(), LATEST_TS.to_pydatetime(), ingest_id]) or (0, [], None, None)
    clusters = sorted(found)
    if rows == 0 or bad or (check_repeats and _duplicates(store, ingest_id, clusters)
                            is not None):
        logger.info("%s: %s; reading it with the checked reader", path,
                    "no rows" if rows == 0 else "a row fails a check")
        store.execute("DELETE FROM jobs WHERE ingest_id = ?", [ingest_id])
        return None
    if progress:
        progress("rows", rows, rows)
    replaced = replace_jobs(store, ingest_id, clusters)
    _record_ingest(store, ingest_id, digest, fmt, path, ",".join(clusters), "jobs", rows, 0,
                   first, last, options)
    logger.info("%s: %d rows (DuckDB reader) as ingest %d", path, rows, ingest_id)
    return ingest_id, rows, clusters, replaced


# The checks of checks.check_jobs over one ingest's rows (NULL comparisons count as passing),
# and of the parsing of every number and time column (the DuckDB reader turns a value that does
# not parse into NaN or year 1), with the rows' clusters and time window.
# Parameters: earliest, latest, ingest_id.
_NATIVE_CHECK_SQL = """
    WITH bounds AS (SELECT ?::TIMESTAMP AS lo, ?::TIMESTAMP AS hi)
    SELECT count(*) FILTER (WHERE
               job_id IS NULL OR cluster IS NULL OR num_gpus IS NULL OR submit_ts IS NULL
               OR num_gpus < 0 OR NOT isfinite(num_gpus) OR NOT isfinite(num_cpus)
               OR submit_ts < lo OR submit_ts >= hi OR start_ts < lo OR start_ts >= hi
               OR end_ts < lo OR end_ts >= hi
               OR end_ts < start_ts OR start_ts < submit_ts OR end_ts < submit_ts),
           coalesce(list(DISTINCT cluster) FILTER (WHERE cluster IS NOT NULL), []),
           min(submit_ts), greatest(max(submit_ts), max(start_ts), max(end_ts))
    FROM jobs, bounds WHERE ingest_id = ?"""


def _duplicates(store: Store, ingest_id: int, clusters: list[str]) -> pd.DataFrame | None:
    """The (cluster, job_id) keys that are more than once in this ingest's rows (another
    ingest's rows of a job, of this run too, are replaced: :func:`replace_jobs`); ``None``
    when there are none."""
    if not _hashes_repeat(store, clusters):
        return None
    dupes = store.fetch_df(_DUPLICATES_SQL, [ingest_id, clusters])
    return None if dupes.empty else dupes


def _any_repeat(store: Store, clusters: list[str]) -> bool:
    """Whether any (cluster, job_id) of these clusters is in ``jobs`` more than once (after
    each file of the run replaced the rows of earlier runs: a repeat within the run)."""
    return _hashes_repeat(store, clusters) and store.fetch_one(
        """SELECT 1 FROM jobs WHERE list_contains(?, cluster) GROUP BY cluster, job_id
           HAVING count(*) > 1 LIMIT 1""", [clusters]) is not None


def _hashes_repeat(store: Store, clusters: list[str]) -> bool:
    """Whether the rows of these clusters have fewer distinct (cluster, job_id) hashes than
    rows: a repeated key, or (rarely) a hash collision, which the exact query then rules out.

    Counting distinct hashes settles the usual case (no repeat) about 3x faster than grouping
    by the strings.
    """
    row = store.fetch_one(
        """SELECT count(*) - count(DISTINCT hash(cluster, job_id)) FROM jobs
           WHERE list_contains(?, cluster)""", [clusters])
    return bool(row and row[0])


def _write_stream(
    store: Store, path: Path, fmt: str, digest: str, chunks: Iterator[pa.Table],
    options: IngestOptions, progress: Progress | None = None, check_repeats: bool = True,
) -> tuple[int, int, list[str], Replaced] | None:
    """Insert a file chunk by chunk from the adapter's stream (bounded memory).

    Returns ``(ingest_id, rows, clusters, replaced)``, or ``None`` when the file needs the slow
    path: a chunk failed to parse or to pass a check, or (with ``check_repeats``) a job id is
    twice in the file (the slow path names the row); what was inserted of it is deleted
    first. Rows other ingests hold of this file's job ids are replaced.
    """
    ingest_id = _next_ingest_id(store)
    rows, size, estimate = 0, path.stat().st_size, 0
    try:
        for chunk in chunks:
            rows += store.insert_frame("jobs", chunk, JOB_COLUMNS, {"ingest_id": ingest_id})
            if progress:  # rows so far, and the total guessed from the bytes per row so far
                if path.suffix == ".csv" and chunk.num_rows:
                    estimate = max(rows, int(size / max(1.0, chunk.nbytes / chunk.num_rows)))
                progress("rows", rows, estimate)
    except SlowPath:
        store.execute("DELETE FROM jobs WHERE ingest_id = ?", [ingest_id])
        return None
    if progress:
        progress("rows", rows, rows)
    clusters = [r[0] for r in store.fetch_all(
        "SELECT DISTINCT cluster FROM jobs WHERE ingest_id = ? ORDER BY cluster", [ingest_id])]
    if rows == 0 or (check_repeats and _duplicates(store, ingest_id, clusters)
                     is not None):
        store.execute("DELETE FROM jobs WHERE ingest_id = ?", [ingest_id])
        return None
    window = store.fetch_one(
        """SELECT min(submit_ts), greatest(max(submit_ts), max(start_ts), max(end_ts))
           FROM jobs WHERE ingest_id = ?""", [ingest_id])
    assert window is not None
    replaced = replace_jobs(store, ingest_id, clusters)
    _record_ingest(store, ingest_id, digest, fmt, path, ",".join(clusters), "jobs", rows, 0,
                   window[0], window[1], options)
    logger.info("%s: %d rows (streamed) as ingest %d", path, rows, ingest_id)
    return ingest_id, rows, clusters, replaced


# Parameters: this ingest, its clusters.
_DUPLICATES_SQL = """
    SELECT cluster, job_id FROM jobs WHERE ingest_id = ? AND list_contains(?, cluster)
    GROUP BY cluster, job_id HAVING count(*) > 1"""


def _write(
    store: Store, path: Path, fmt: str, digest: str, batch: Batch, options: IngestOptions,
) -> tuple[int, int, Replaced]:
    """Insert a checked batch and record its ingest.

    Returns:
        ``(ingest_id, rows, replaced)``: what samples of the batch replaced stored ones.
    """
    ingest_id = _next_ingest_id(store)
    frame = batch.frame
    clusters = batch.clusters
    if batch.kind == "jobs":
        columns: tuple[str, ...] = JOB_COLUMNS
        obs_start = batch.obs_start if batch.obs_start is not None else _min(frame, "submit_ts")
        obs_end = batch.obs_end if batch.obs_end is not None else _max(
            frame, "submit_ts", "start_ts", "end_ts")
    elif batch.kind == "samples":
        columns = SAMPLE_COLUMNS
        obs_start, obs_end = _min(frame, "ts"), _max(frame, "ts")
    else:
        columns = CAPACITY_COLUMNS
        obs_start = obs_end = None
    rows = store.insert_frame(batch.kind, frame, columns, {"ingest_id": ingest_id}) if len(
        frame) else 0
    replaced = Replaced()
    if batch.kind == "jobs" and rows:  # a job is its (cluster, job_id): the newest counts
        rows = _check_duplicate_jobs(store, path, ingest_id, batch, options, clusters)
        replaced = replace_jobs(store, ingest_id, clusters)
    if batch.kind == "samples" and rows:  # a sample is its (series_id, ts): the newest counts
        replaced = replace_samples(store, ingest_id, clusters)
    if batch.rejects:
        rejects = pd.DataFrame({
            "ingest_id": ingest_id,
            "path": str(path),
            "line": [r.line for r in batch.rejects],
            "column_name": [r.column for r in batch.rejects],
            "reason": [r.reason for r in batch.rejects],
            "raw": [r.raw for r in batch.rejects],
        })
        store.insert_frame("rejects", rejects, tuple(rejects.columns))
    _record_ingest(store, ingest_id, digest, fmt, path, ",".join(clusters) or options.cluster,
                   batch.kind, rows, len(batch.rejects), _ts(obs_start), _ts(obs_end), options)
    logger.info("%s: %d rows (%d rejected) as ingest %d", path, rows, len(batch.rejects),
                ingest_id)
    return ingest_id, rows, replaced


def _next_ingest_id(store: Store) -> int:
    row = store.fetch_one("SELECT nextval('ingest_id_seq')")
    assert row is not None
    return int(row[0])


def _record_ingest(
    store: Store, ingest_id: int, digest: str, fmt: str, path: Path, cluster: str | None,
    kind: str, rows: int, rejected: int, obs_start: object, obs_end: object,
    options: IngestOptions,
) -> None:
    """The ``ingests`` row that makes a later ingest of the same content a no-op."""
    store.execute(
        """INSERT INTO ingests (ingest_id, content_hash, format, path, cluster, kind, rows,
               rejected, obs_start, obs_end, options, ingested_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now()::TIMESTAMP)""",
        [ingest_id, digest, fmt, str(path), cluster, kind, rows, rejected, obs_start, obs_end,
         options.content_key()],
    )


def _ts(value: object) -> object:
    if value is None or pd.isna(value):  # type: ignore[call-overload]
        return None
    return pd.Timestamp(value).to_pydatetime()  # type: ignore[arg-type]


def _min(frame: pd.DataFrame | pa.Table, column: str) -> object:
    if not len(frame):
        return None
    if isinstance(frame, pa.Table):
        return pc.min(frame[column]).as_py()
    return frame[column].min()


def _max(frame: pd.DataFrame | pa.Table, *columns: str) -> object:
    if not len(frame):
        return None
    if isinstance(frame, pa.Table):
        values = [pc.max(frame[c]).as_py() for c in columns]
    else:
        values = [frame[c].max() for c in columns]
    present = [v for v in values if v is not None and not pd.isna(v)]
    return max(present) if present else None


def _check_duplicate_jobs(
    store: Store, path: Path, ingest_id: int, batch: Batch, options: IngestOptions,
    clusters: list[str],
) -> int:
    """Fail on (or, under skip, reject) a job id twice in this file. Rows another ingest stored
    (an earlier run's, or an earlier file's of this run) are not repeats:
    :func:`replace_jobs` replaces them afterwards.

    The check runs in SQL after the insert (one aggregation, cheaper than a check in Arrow);
    only when it finds something are the rows located by line, in pandas.

    Returns:
        The number of this batch's rows left in ``jobs``.
    """
    dupes = _duplicates(store, ingest_id, clusters)
    if dupes is None:
        return len(batch.frame)
    rows = batch.rows()
    keys = rows[["cluster", "job_id", LINE]].merge(dupes, on=["cluster", "job_id"])
    twice = keys[keys.duplicated(["cluster", "job_id"], keep="first")]
    problems = sorted((int(r[LINE]), str(r["job_id"])) for _, r in twice.iterrows())
    reason = "job id appears more than once in this file"
    line, job_id = problems[0]
    if options.on_error != "skip":
        others = "".join(f"; line {ln}: {reason} (value {jid!r})"
                         for ln, jid in problems[1:MAX_PROBLEMS])
        raise IngestError(
            f"{reason} (value {job_id!r}); {len(problems)} row(s) in all{others}",
            path=str(path), line=line, column="job_id",
            fix="give every job of a cluster a unique id, or pass --on-error skip to store "
                "such rows in `rejects`",
        )
    batch.rejects.extend(Reject(ln, "job_id", reason, jid) for ln, jid in problems)
    bad = {ln for ln, _ in problems}
    keep = rows[~rows[LINE].isin(bad)]
    store.execute("DELETE FROM jobs WHERE ingest_id = ?", [ingest_id])
    return store.insert_frame("jobs", keep, JOB_COLUMNS, {"ingest_id": ingest_id}) if len(
        keep) else 0
