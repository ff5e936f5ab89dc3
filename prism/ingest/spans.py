"""Before series are derived: does a cluster's data span more buckets than PRISM derives?

A single stray time (an end in 2099 in a trace of 2026) stretches every series of its cluster
over decades; :func:`prism.derive.derive_clusters` refuses that, but it only knows the cluster.
:func:`check_spans` finds the row that stretches the span and names its file, line and column,
with the limit and the coarser ``--freq`` that would fit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from prism.errors import IngestError
from prism.ingest import adapters
from prism.ingest.base import LINE, Batch, IngestOptions
from prism.schema import MAX_BUCKETS, format_freq, freq_seconds
from prism.store import Store

logger = logging.getLogger(__name__)

#: The frequencies :func:`check_spans` suggests, finest first.
_COARSER = ("1min", "5min", "10min", "15min", "30min", "1h", "2h", "3h", "6h", "12h", "1d",
            "7d")

#: Reads a file of this run again (the checked reader), to find a row's line.
Reread = Callable[[Path], Batch]

# The cluster's job span as prism.derive takes it: the ingests' observation window where the
# adapter recorded one, else the first submit to the last event; with the median submit time.
_JOB_SPAN_SQL = """
    WITH s AS (
        SELECT min(epoch_us(submit_ts)) AS first,
               greatest(max(epoch_us(submit_ts)), max(epoch_us(start_ts)),
                        max(epoch_us(end_ts))) AS last,
               median(epoch_us(submit_ts))::BIGINT AS mid
        FROM jobs WHERE cluster = ?),
    w AS (SELECT min(epoch_us(obs_start)) AS o0, max(epoch_us(obs_end)) AS o1
          FROM ingests WHERE kind = 'jobs' AND cluster = ?)
    SELECT coalesce(o0, first), coalesce(o1, last), mid FROM s, w WHERE first IS NOT NULL"""

# The job time furthest out on one side (parameter: 1 for the latest, -1 for the earliest).
_FAR_JOB_SQL = """
    SELECT j.ingest_id, i.path, i.format, j.job_id, j.col, j.t FROM (
        SELECT ingest_id, job_id, unnest(['submit_ts', 'start_ts', 'end_ts']) AS col,
               unnest([submit_ts, start_ts, end_ts]) AS t
        FROM jobs WHERE cluster = ?) j LEFT JOIN ingests i USING (ingest_id)
    WHERE j.t IS NOT NULL ORDER BY epoch_us(j.t) * ? DESC, j.ingest_id, j.job_id LIMIT 1"""

_SAMPLE_SPAN_SQL = """
    SELECT min(epoch_us(ts)), max(epoch_us(ts)), median(epoch_us(ts))::BIGINT
    FROM samples WHERE cluster = ? HAVING count(*) > 0"""

_FAR_SAMPLE_SQL = """
    SELECT s.ingest_id, i.path, i.format, s.series_id, 'ts', s.ts
    FROM samples s LEFT JOIN ingests i USING (ingest_id)
    WHERE s.cluster = ? ORDER BY epoch_us(s.ts) * ? DESC, s.ingest_id, s.series_id LIMIT 1"""


def check_spans(
    store: Store, clusters: Sequence[str], run: Mapping[str, Reread] | None = None,
    options: IngestOptions | None = None,
) -> None:
    """Fail when the jobs or samples of a cluster span more than :data:`MAX_BUCKETS` buckets
    of its frequency (the one its ``clusters`` row holds), naming the row that stretches it.

    Args:
        store: the store (inside the ingest's transaction).
        clusters: the clusters about to be derived.
        run: path (as recorded in ``ingests``) -> how to read that file of this run again;
            the line is named for these files only (earlier files may have changed).
        options: the options of this run's files (``--map`` and ``--time-col`` name their
            columns).

    Raises:
        IngestError: naming the file, line and column of the far time, the span, the limit
            and a ``--freq`` that would fit.
    """
    for cluster in clusters:
        row = store.fetch_one("SELECT freq_s FROM clusters WHERE cluster = ?", [cluster])
        if row is None:
            continue
        freq_s = int(row[0])
        f_us = freq_s * 1_000_000
        jobs = store.fetch_one(_JOB_SPAN_SQL, [cluster, cluster])
        if jobs is not None and jobs[0] is not None and jobs[1] is not None:
            start, end = -(-int(jobs[0]) // f_us) * f_us, (int(jobs[1]) // f_us) * f_us
            if (end - start) // f_us > MAX_BUCKETS:
                _refuse(store, cluster, freq_s, (end - start) // f_us, jobs, _FAR_JOB_SQL,
                        run or {}, options)
        samples = store.fetch_one(_SAMPLE_SPAN_SQL, [cluster])
        if samples is not None and (samples[1] - samples[0]) // f_us > MAX_BUCKETS:
            _refuse(store, cluster, freq_s, (samples[1] - samples[0]) // f_us, samples,
                    _FAR_SAMPLE_SQL, run or {}, options)


def _refuse(
    store: Store, cluster: str, freq_s: int, buckets: int, span: tuple[int, int, int],
    far_sql: str, run: Mapping[str, Reread], options: IngestOptions | None,
) -> None:
    first, last, mid = (int(v) for v in span[:3])
    side = 1 if last - mid >= mid - first else -1  # the side further from the median
    row = store.fetch_one(far_sql, [cluster, side])
    if row is None:
        return  # prism.derive reports it, without a row to name
    ingest_id, path, fmt, key, field, when = row
    when = pd.Timestamp(when)
    reread = run.get(str(path))
    line = _line(reread, Path(str(path)), key, field, when)
    column = field
    if fmt in adapters():  # the file's name of the column, as its format reads it
        column = adapters()[fmt].file_column(
            field, options if reread is not None and options else IngestOptions())
    days = (last - first) / 86_400e6
    fit = next((f for f in _COARSER if (last - first) / 1e6 / freq_seconds(f) <= MAX_BUCKETS),
               None)
    coarser = f"derive at --freq {fit} or coarser" if fit else "drop the far-off rows"
    named = f"job {key!r}" if field != "ts" else f"series {key!r}"
    raise IngestError(
        f"{column} {when.isoformat()} ({named}) makes cluster {cluster!r} span {days:,.0f} days "
        f"({pd.Timestamp(first * 1000).date()} to {pd.Timestamp(last * 1000).date()}): "
        f"{buckets:,} buckets of {format_freq(freq_s)} per series, more than the "
        f"{MAX_BUCKETS:,} PRISM derives",
        path=str(path) if path is not None else f"ingest {ingest_id}", line=line,
        column=column,
        fix="check this time (a stray far-off time, e.g. a wrong year"
        + (": leave an unknown end empty" if field == "end_ts" else "") + f"), or {coarser}",
    )


def _line(reread: Reread | None, path: Path, key: str, field: str,
          when: pd.Timestamp) -> int | None:
    """The line of the row with ``key`` (job id or series id) and this time in ``field``."""
    if reread is None:
        return None
    try:
        rows = reread(path).rows()
    except Exception:  # noqa: BLE001 - the line is a courtesy; the error stands without it
        logger.debug("cannot read %s again to find the line of %s", path, key, exc_info=True)
        return None
    name = "series_id" if field == "ts" else "job_id"
    if name not in rows.columns or field not in rows.columns or LINE not in rows.columns:
        return None
    times = pd.to_datetime(rows[field], errors="coerce")
    hit = rows[(rows[name].astype(str) == str(key)) & (times == when)]
    return int(hit[LINE].iloc[0]) if len(hit) else None
