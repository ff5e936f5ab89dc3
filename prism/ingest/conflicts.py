"""What the rows of two ingests may not both say, checked in the store before series are derived.

- **A sample is identified by** ``(series_id, ts)``: :func:`replace_samples` drops the samples
  that earlier ingests stored at the times a new file has, so the newest ingest's value counts
  (re-ingesting the same samples in other bytes changes nothing, a corrected export replaces
  what it corrects). Rows of one file at the same ``(series_id, ts)`` all stay: they are
  aggregated into their bucket like any samples of one bucket (mean, or sum for counts).
- **A job is identified by** ``(cluster, job_id)``: :func:`replace_jobs` drops the rows that
  earlier ingests (not of this run) stored for the job ids a new file has, so the newest
  ingest's row of a job counts (a daily export that sees a job finish corrects the RUNNING row
  of the day before; re-ingesting the same rows in other bytes changes nothing); of the files
  of one run, the later on the command line wins. A job id twice in one file is refused
  (:mod:`prism.ingest.pipeline`).
- **One series, one source**: :func:`check_sources` refuses samples of a series id that the
  jobs of the same cluster derive (``C/all/gpus_in_use`` from a ``long-csv`` and from a
  ``jobs-csv`` of cluster ``C``), in either order; the series would get two rows per bucket.
- **Job scopes name series**: the derivation writes VC and GPU-type names with the characters
  series ids do not allow replaced by ``_`` (:data:`prism.schema.SCOPE_BAD_CHARS`).
  :func:`check_scopes` refuses two names that would become one (``team a`` and ``team_a``)
  and the names the derivation keeps for itself (``all``, ``gpu:...``), and returns the
  renamings to report.

Each check names the file (and, for a file of this run, the line) and says how to fix it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prism.errors import IngestError
from prism.ingest.base import LINE
from prism.ingest.spans import Reread
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX, JOB_COLUMNS, SCOPE_BAD_CHARS
from prism.store import Store

logger = logging.getLogger(__name__)

#: The metrics :mod:`prism.derive` derives from jobs, for every scope of a cluster with jobs.
JOB_METRICS = ("gpus_in_use", "gpus_pending", "gpu_demand", "jobs_submitted", "gpus_submitted")

#: The files of this run by ingest id, with a reader that finds a row's line.
Run = Mapping[int, tuple[Path, Reread]]


@dataclass(frozen=True)
class Replaced:
    """What a file's samples (counted by ``(series_id, ts)``) or jobs (by ``(cluster,
    job_id)``) did to those stored before."""

    #: stored with another value: the file's value replaced it
    changed: int = 0
    #: stored with the same value: nothing changed
    same: int = 0
    #: what was counted: ``samples`` or ``jobs``
    kind: str = "samples"

    def note(self) -> str:
        """The words of the ingest summary (empty when nothing was stored before)."""
        parts = []
        if self.kind == "jobs":
            if self.changed:
                parts.append(f"{self.changed:,} job(s) replaced the row an earlier ingest "
                             "stored for the same job id (the newest ingest wins)")
            if self.same:
                parts.append(f"{self.same:,} job(s) already stored with the same row")
            return "; ".join(parts)
        if self.changed:
            parts.append(f"{self.changed:,} replaced stored values at the same series and time")
        if self.same:
            parts.append(f"{self.same:,} already stored with the same value")
        return "; ".join(parts)


#: The job columns two rows of one job are compared on (besides the key).
_JOB_FIELDS = tuple(c for c in JOB_COLUMNS if c not in ("cluster", "job_id"))


def replace_jobs(store: Store, ingest_id: int, clusters: Sequence[str]) -> Replaced:
    """Make the jobs of ``ingest_id`` the only rows of their ``(cluster, job_id)``: delete the
    rows other ingests stored for them (earlier runs', and earlier files' of this run: the
    later file wins), and count how many of those differed.

    The series are derived again over the cluster's whole observation window afterwards
    (:func:`prism.derive.derive_clusters`), which holds the old row's span too, so nothing of
    the replaced row is left in them.

    Args:
        store: the store (inside the ingest's transaction).
        ingest_id: the ingest just written.
        clusters: its clusters (the other rows are only looked for there).

    Returns:
        How many job ids of the file changed a stored row, and how many were stored with the
        same row.
    """
    params = [ingest_id, list(clusters)]
    if store.fetch_one(
            """SELECT 1 FROM jobs WHERE ingest_id <> ? AND list_contains(?, cluster)
               LIMIT 1""", params) is None:
        return Replaced(kind="jobs")  # the usual first ingest of a cluster
    same_row = " AND ".join(f"o.{c} IS NOT DISTINCT FROM n.{c}" for c in _JOB_FIELDS)
    row = store.fetch_one(
        f"""WITH n AS (SELECT * FROM jobs WHERE ingest_id = ?),
           o AS (SELECT * FROM jobs WHERE ingest_id <> ? AND list_contains(?, cluster))
           SELECT count(DISTINCT (o.cluster, o.job_id)) FILTER (WHERE NOT ({same_row})),
                  count(DISTINCT (o.cluster, o.job_id)) FILTER (WHERE {same_row})
           FROM o JOIN n ON o.cluster = n.cluster AND o.job_id = n.job_id""",
        [ingest_id, *params])
    changed, same = (int(row[0]), int(row[1])) if row else (0, 0)
    if changed or same:
        store.execute(
            """DELETE FROM jobs USING (
                   SELECT DISTINCT cluster, job_id FROM jobs WHERE ingest_id = ?) AS n
               WHERE jobs.cluster = n.cluster AND jobs.job_id = n.job_id
                 AND jobs.ingest_id <> ?""",
            [ingest_id, ingest_id])
    return Replaced(changed, same, "jobs")


def replace_samples(store: Store, ingest_id: int, clusters: Sequence[str]) -> Replaced:
    """Make the samples of ``ingest_id`` the only ones at their ``(series_id, ts)``: delete the
    rows earlier ingests stored there, and count how many of those held another value.

    Args:
        store: the store (inside the ingest's transaction).
        ingest_id: the ingest just written.
        clusters: its clusters (the other rows are only looked for there).

    Returns:
        How many ``(series_id, ts)`` of the file changed a stored value, and how many were
        stored with the same value(s).
    """
    if store.fetch_one("""SELECT 1 FROM samples WHERE ingest_id <> ? AND list_contains(?, cluster)
                          LIMIT 1""", [ingest_id, list(clusters)]) is None:
        return Replaced()  # the usual first ingest of a cluster: nothing to compare
    row = store.fetch_one(
        """WITH new AS (
               SELECT series_id, ts, list_sort(list(value)) AS v FROM samples
               WHERE ingest_id = ? GROUP BY ALL),
           old AS (
               SELECT s.series_id, s.ts, list_sort(list(s.value)) AS v FROM samples s
               SEMI JOIN new ON s.series_id = new.series_id AND s.ts = new.ts
               WHERE s.ingest_id <> ? AND list_contains(?, s.cluster) GROUP BY ALL)
           SELECT count(*) FILTER (WHERE new.v <> old.v), count(*) FILTER (WHERE new.v = old.v)
           FROM new JOIN old USING (series_id, ts)""",
        [ingest_id, ingest_id, list(clusters)])
    changed, same = (int(row[0]), int(row[1])) if row else (0, 0)
    if changed or same:
        store.execute(
            """DELETE FROM samples USING (
                   SELECT DISTINCT series_id, ts FROM samples WHERE ingest_id = ?) AS new
               WHERE samples.series_id = new.series_id AND samples.ts = new.ts
                 AND samples.ingest_id <> ? AND list_contains(?, samples.cluster)""",
            [ingest_id, ingest_id, list(clusters)])
    return Replaced(changed, same)


# The series ids the jobs of each cluster derive (prism.derive: scope ``all``, each VC scope
# (``unassigned`` for jobs without one when others have one) and each ``gpu:<type>``) that
# samples of the same cluster also hold, with the first ingest of each side.
# Parameters: clusters, bad characters (twice), job metrics.
_SOURCES_SQL = """
    WITH c AS (
        SELECT cluster, bool_or(scope IS NOT NULL) AS by_scope,
               bool_or(gpu_type IS NOT NULL) AS by_type, min(ingest_id) AS jobs_ingest
        FROM jobs WHERE list_contains(?, cluster) GROUP BY cluster),
    scopes AS (
        SELECT cluster, 'all' AS scope FROM c
        UNION
        SELECT DISTINCT j.cluster, coalesce(regexp_replace(j.scope, ?, '_', 'g'), 'unassigned')
        FROM jobs j JOIN c USING (cluster) WHERE c.by_scope
        UNION
        SELECT DISTINCT j.cluster,
               'gpu:' || coalesce(regexp_replace(j.gpu_type, ?, '_', 'g'), 'unknown')
        FROM jobs j JOIN c USING (cluster) WHERE c.by_type)
    SELECT s.series_id, s.cluster, min(s.ingest_id), any_value(c.jobs_ingest)
    FROM samples s JOIN scopes USING (cluster) JOIN c USING (cluster)
    WHERE split_part(s.series_id, '/', 2) = scopes.scope
      AND list_contains(?, split_part(s.series_id, '/', 3))
    GROUP BY s.series_id, s.cluster ORDER BY s.series_id"""


def check_sources(store: Store, clusters: Sequence[str], run: Run) -> None:
    """Refuse a series id that samples hold and the jobs of the same cluster derive.

    Raises:
        IngestError: naming the series, the file of this run that brings the second source
            (with the line, for samples), the other source's file, and how to fix it.
    """
    if not clusters:
        return
    rows = store.fetch_all(_SOURCES_SQL, [list(clusters), SCOPE_BAD_CHARS, SCOPE_BAD_CHARS,
                                          list(JOB_METRICS)])
    if not rows:
        return
    series_id, cluster, samples_ingest, jobs_ingest = rows[0]
    more = f" ({len(rows)} series in all)" if len(rows) > 1 else ""
    metric = str(series_id).rsplit("/", 1)[-1]
    samples_path, jobs_path = _path(store, samples_ingest), _path(store, jobs_ingest)
    renames = (f"ingest the samples under another metric name (e.g. {metric}_sampled: rename "
               f"the column, or the ids' last part) or another cluster (--cluster "
               f"{cluster}-metrics)")
    if samples_ingest in run:  # the samples are new: name their line
        path, reread = run[samples_ingest]
        raise IngestError(
            f"series {series_id!r} is also derived from the jobs of cluster {cluster!r} "
            f"(ingested from {jobs_path}){more}: one series cannot come from two sources",
            path=str(path), line=_sample_line(path, reread, str(series_id)),
            fix=f"{renames}; the jobs of a cluster derive {', '.join(JOB_METRICS)} for scope "
            "all, each VC and each gpu:<type>")
    path = run[jobs_ingest][0] if jobs_ingest in run else Path(jobs_path)
    raise IngestError(
        f"the jobs of cluster {cluster!r} derive series {series_id!r}, which the samples of "
        f"{samples_path} already hold{more}: one series cannot come from two sources",
        path=str(path),
        fix=f"ingest the jobs under another --cluster (e.g. --cluster {cluster}-jobs), or "
        "ingest everything into a new store (--db NEW.duckdb) with the samples renamed: "
        f"{renames}")


def _path(store: Store, ingest_id: int) -> str:
    row = store.fetch_one("SELECT path FROM ingests WHERE ingest_id = ?", [ingest_id])
    return str(row[0]) if row and row[0] else f"ingest {ingest_id}"


def _sample_line(path: Path, reread: Reread, series_id: str) -> int | None:
    """The first line of ``path`` with a sample of ``series_id`` (``None`` when unknown)."""
    try:
        rows = reread(path).rows()
    except Exception:  # noqa: BLE001 - the line is a courtesy; the error stands without it
        logger.debug("cannot read %s again to find a series' line", path, exc_info=True)
        return None
    hit = rows.loc[rows["series_id"] == series_id, LINE]
    return int(hit.min()) if len(hit) else None


# Each VC scope and GPU type of the clusters' jobs as stored, with the name it gets in series
# ids and the first ingest that has it. Parameters: clusters, bad characters (twice).
_NAMES_SQL = """
    SELECT cluster, 'scope' AS field, scope AS raw, regexp_replace(scope, ?, '_', 'g') AS name,
           min(ingest_id) AS ingest_id
    FROM jobs WHERE list_contains(?, cluster) AND scope IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT cluster, 'gpu_type', gpu_type, regexp_replace(gpu_type, ?, '_', 'g'), min(ingest_id)
    FROM jobs WHERE list_contains(?, cluster) AND gpu_type IS NOT NULL GROUP BY ALL
    ORDER BY 1, 2, 4, 5, 3"""


def check_scopes(store: Store, clusters: Sequence[str], run: Run) -> list[str]:
    """Refuse job scopes (and GPU types) whose names would merge in series ids, and VC scopes
    that take a name the derivation gives other series; describe the renamings.

    Returns:
        One line per cluster whose names were renamed (``'team a' -> team_a``), for the
        ingest summary.

    Raises:
        IngestError: naming both names and the file (and line, for a file of this run) of each.
    """
    if not clusters:
        return []
    rows = store.fetch_all(_NAMES_SQL, [SCOPE_BAD_CHARS, list(clusters), SCOPE_BAD_CHARS,
                                        list(clusters)])
    groups: dict[tuple[str, str, str], list[tuple[str, int]]] = {}
    for cluster, field, raw, name, ingest_id in rows:
        groups.setdefault((cluster, field, name), []).append((str(raw), int(ingest_id)))
    for (cluster, field, name), raws in groups.items():
        column = "scope" if field == "scope" else "gpu_type"
        if field == "scope" and (name == ALL_SCOPE or name.startswith(GPU_TYPE_PREFIX)):
            raw, ingest_id = raws[0]
            path, line = _where(store, run, ingest_id, cluster, column, raw)
            what = "the whole cluster" if name == ALL_SCOPE else "a GPU type's series"
            raise IngestError(
                f"scope {raw!r} of cluster {cluster!r} takes the name PRISM gives {what} "
                f"({cluster}/{name}/...)", path=path, line=line, column=column,
                fix="rename that scope in the file (e.g. to 'vc-" + name.replace(":", "-")
                + "'); scope names 'all' and 'gpu:...' are taken")
        if len(raws) > 1:
            (a, ia), (b, ib) = raws[0], raws[1]
            path_a, line_a = _where(store, run, ia, cluster, column, a)
            path_b, line_b = _where(store, run, ib, cluster, column, b)
            here = path_b if ib in run else path_a
            raise IngestError(
                f"{field} {a!r} ({_at(path_a, line_a)}) and {field} {b!r} "
                f"({_at(path_b, line_b)}) of cluster {cluster!r} would both be named {name!r} "
                "in series ids (characters other than letters, digits and '_.:=+@-' become "
                "'_'), and their GPUs would be added up", path=here, column=column,
                fix=f"write one name for both if they are the same {field}; if not, rename one "
                "so that they differ in letters or digits")
    notes = []
    renamed: dict[str, list[str]] = {}
    for (cluster, _field, name), raws in groups.items():
        raw, ingest_id = raws[0]
        if raw != name and ingest_id in run:  # said once: by the run that brings the name
            renamed.setdefault(cluster, []).append(f"{raw!r} -> {name}")
    for cluster, pairs in renamed.items():
        shown = ", ".join(pairs[:5]) + (f" and {len(pairs) - 5} more" if len(pairs) > 5 else "")
        notes.append(f"cluster {cluster!r}: {len(pairs)} scope or GPU type name(s) hold "
                     f"characters series ids do not allow and are renamed in series ids: "
                     f"{shown}")
    return notes


def _at(path: str, line: int | None) -> str:
    return f"{path}, line {line}" if line else path


def _where(store: Store, run: Run, ingest_id: int, cluster: str, column: str,
           raw: str) -> tuple[str, int | None]:
    """The file of ``ingest_id`` and, for a file of this run, the first line whose ``column``
    is ``raw`` (in ``cluster``)."""
    if ingest_id not in run:
        return _path(store, ingest_id), None
    path, reread = run[ingest_id]
    try:
        rows = reread(path).rows()
    except Exception:  # noqa: BLE001 - the line is a courtesy; the error stands without it
        logger.debug("cannot read %s again to find a scope's line", path, exc_info=True)
        return str(path), None
    hit = rows.loc[(rows["cluster"] == cluster) & (rows[column] == raw), LINE]
    return str(path), int(hit.min()) if len(hit) else None
