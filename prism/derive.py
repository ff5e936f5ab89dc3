"""Demand series, derived in SQL from the canonical ``jobs`` and ``samples`` tables.

Each cluster has one bucket size (``--freq``, default ``10min``; buckets are aligned to the Unix
epoch, labelled by their start) and one fill policy for sampled series.

From ``jobs`` (per cluster, for scope ``all``, every VC/tenant/QoS scope and every GPU type
``gpu:<type>``; jobs without a scope count as ``unassigned`` when others have one, and jobs
without a GPU type as ``gpu:unknown``):

- ``gpus_in_use``: time-weighted mean of GPUs held in each bucket. A job holds ``num_gpus`` from
  ``start_ts`` to ``end_ts`` (to the end of the window while still running); a job running half
  a bucket counts half. Computed exactly: partial first and last buckets add their fraction,
  whole buckets in between come from a running sum of +g/-g events, so a job of any length costs
  four rows.
- ``gpus_pending``: the same for the time between ``submit_ts`` and ``start_ts`` (or the end, or
  the end of the window, for jobs that never started).
- ``gpu_demand``: in use + pending.
- ``jobs_submitted``, ``gpus_submitted``: counts in the bucket of ``submit_ts``.

The window is the buckets that lie wholly inside the observation window of the cluster's ingests
(an adapter may set it, e.g. ``alibaba-pods``; else from the first submit to the last event), so
no series starts or ends with a half-observed bucket. Buckets without jobs are explicit zeros.

From ``samples``: per series, the mean (gauges) or the sum (counts; ``metric_info``) of the
samples in each bucket, on a grid from the first to the last bucket with samples. Buckets with no
sample are gaps, filled by the policy (``auto`` takes the metric's default: ``hold`` for gauges,
``zero`` for counts; ``linear`` interpolates) and flagged ``filled`` in ``series_values``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.schema import (
    MAX_BUCKETS,
    METRICS,
    SCOPE_BAD_CHARS,
    format_freq,
    freq_seconds,
    make_series_id,
    metric_info,
)
from prism.store import Store

logger = logging.getLogger(__name__)

DEFAULT_FREQ = "10min"


# One statement for all clusters being derived: the per-cluster bucket size (f) and window
# [w0, w1) come in as parallel lists, in microseconds.
_JOB_SERIES_SQL = f"""
WITH params AS (
    SELECT unnest(?::VARCHAR[]) AS cluster, unnest(?::BIGINT[]) AS f,
           unnest(?::BIGINT[]) AS w0, unnest(?::BIGINT[]) AS w1,
           unnest(?::BOOLEAN[]) AS by_scope, unnest(?::BOOLEAN[]) AS by_type
),
j AS (  -- event times in microseconds, clipped to the window; interval validity
    SELECT cluster, scope, gpu_type, g, sub, sta, fin, w0, w1, f,
           us_c, ue_c, ps_c, pe_c, sta IS NOT NULL AND ue_c > us_c AS use_ok,
           pe_c > ps_c AS pend_ok
    FROM (
        SELECT p.cluster, scope, gpu_type, num_gpus AS g, w0, w1, f,
               epoch_us(submit_ts) AS sub, epoch_us(start_ts) AS sta, epoch_us(end_ts) AS fin,
               greatest(epoch_us(start_ts), w0) AS us_c,
               least(coalesce(epoch_us(end_ts), w1), w1) AS ue_c,
               greatest(epoch_us(submit_ts), w0) AS ps_c,
               least(coalesce(epoch_us(start_ts), epoch_us(end_ts), w1), w1) AS pe_c
        FROM jobs JOIN params p ON jobs.cluster = p.cluster WHERE num_gpus >= 0
    )
),
ev AS (  -- one row per event: steps of the running sums (du in use, dp pending) at time t
    SELECT cluster, scope, gpu_type, f, ps_c AS t,
           0.0 AS du, CASE WHEN pend_ok THEN g ELSE 0 END AS dp,
           CASE WHEN sub >= w0 AND sub < w1 THEN 1 ELSE 0 END AS ns,
           CASE WHEN sub >= w0 AND sub < w1 THEN g ELSE 0 END AS gs
    FROM j WHERE ps_c < w1 AND (pend_ok OR (sub >= w0 AND sub < w1))
    UNION ALL
    SELECT cluster, scope, gpu_type, f, us_c,
           CASE WHEN use_ok THEN g ELSE 0 END,
           CASE WHEN pend_ok AND sta < w1 THEN -g ELSE 0 END, 0, 0
    FROM j WHERE sta IS NOT NULL AND us_c < w1 AND (use_ok OR pend_ok)
    UNION ALL
    SELECT cluster, scope, gpu_type, f, fin,
           CASE WHEN use_ok THEN -g ELSE 0 END,
           CASE WHEN pend_ok AND sta IS NULL THEN -g ELSE 0 END, 0, 0
    FROM j WHERE fin < w1 AND fin >= w0 AND (use_ok OR (pend_ok AND sta IS NULL))
),
agg AS (  -- per bucket k: D = sum of steps, P = what the steps add within their own bucket
    SELECT cluster, scope, gpu_type, t // f AS k,
           sum(du) AS du, sum(du * ((t // f + 1) * f - t) / f) AS pu,
           sum(dp) AS dp, sum(dp * ((t // f + 1) * f - t) / f) AS pp,
           sum(ns) AS ns, sum(gs) AS gs
    FROM ev GROUP BY ALL
),
scoped AS (
    SELECT cluster, 'all' AS sscope, k, sum(du) AS du, sum(pu) AS pu, sum(dp) AS dp,
           sum(pp) AS pp, sum(ns) AS ns, sum(gs) AS gs
    FROM agg GROUP BY ALL
    UNION ALL
    SELECT a.cluster, coalesce(regexp_replace(scope, '{SCOPE_BAD_CHARS}', '_', 'g'), 'unassigned'),
           k, sum(du), sum(pu), sum(dp), sum(pp), sum(ns), sum(gs)
    FROM agg a JOIN params p ON a.cluster = p.cluster WHERE by_scope GROUP BY ALL
    UNION ALL
    SELECT a.cluster,
           'gpu:' || coalesce(regexp_replace(gpu_type, '{SCOPE_BAD_CHARS}', '_', 'g'), 'unknown'),
           k, sum(du), sum(pu), sum(dp), sum(pp), sum(ns), sum(gs)
    FROM agg a JOIN params p ON a.cluster = p.cluster WHERE by_type GROUP BY ALL
),
grid AS (
    SELECT cluster, sscope, f, unnest(range(w0 // f, w1 // f)) AS k
    FROM (SELECT DISTINCT cluster, sscope FROM scoped) JOIN params USING (cluster)
),
dense AS (
    SELECT g.cluster, g.sscope, g.k, g.f,
           sum(coalesce(s.du, 0)) OVER w - coalesce(s.du, 0) + coalesce(s.pu, 0) AS use,
           sum(coalesce(s.dp, 0)) OVER w - coalesce(s.dp, 0) + coalesce(s.pp, 0) AS pend,
           coalesce(s.ns, 0) AS ns, coalesce(s.gs, 0) AS gs
    FROM grid g LEFT JOIN scoped s USING (cluster, sscope, k)
    WINDOW w AS (PARTITION BY g.cluster, g.sscope ORDER BY g.k
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
out AS (
    UNPIVOT (SELECT cluster, sscope, k, f, round(use, 9) AS gpus_in_use,
                    round(pend, 9) AS gpus_pending, round(use + pend, 9) AS gpu_demand,
                    ns::DOUBLE AS jobs_submitted, round(gs, 9) AS gpus_submitted FROM dense)
    ON gpus_in_use, gpus_pending, gpu_demand, jobs_submitted, gpus_submitted
    INTO NAME metric VALUE value
)
SELECT cluster, cluster || '/' || sscope || '/' || metric AS series_id,
       make_timestamp(k * f) AS ts, value, false AS filled
FROM out
"""

_SAMPLE_SERIES_SQL = """
WITH params AS (
    SELECT unnest(?::VARCHAR[]) AS cluster, unnest(?::BIGINT[]) AS f,
           unnest(?::VARCHAR[]) AS fill
),
opts AS (SELECT ?::VARCHAR[] AS sums, ?::VARCHAR[] AS zero_default),
b AS (
    SELECT s.cluster, series_id, f, fill, epoch_us(ts) // f AS k,
           CASE WHEN list_contains((SELECT sums FROM opts), split_part(series_id, '/', 3))
                THEN sum(value) ELSE avg(value) END AS v
    FROM samples s JOIN params p ON s.cluster = p.cluster
    GROUP BY s.cluster, series_id, f, fill, k
),
span AS (SELECT cluster, series_id, f, fill, min(k) AS k0, max(k) AS k1 FROM b GROUP BY ALL),
grid AS (
    SELECT cluster, series_id, f, fill, unnest(range(k0, k1 + 1)) AS k FROM span
),
g AS (
    SELECT grid.cluster, grid.series_id, grid.f, grid.k, b.v,
           CASE WHEN grid.fill = 'auto'
                THEN CASE WHEN list_contains((SELECT zero_default FROM opts),
                                             split_part(grid.series_id, '/', 3))
                          THEN 'zero' ELSE 'hold' END
                ELSE grid.fill END AS policy
    FROM grid LEFT JOIN b USING (series_id, k)
),
w AS (
    SELECT *,
        last_value(v IGNORE NULLS) OVER (PARTITION BY series_id ORDER BY k
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS prev_v,
        last_value(CASE WHEN v IS NOT NULL THEN k END IGNORE NULLS) OVER (
            PARTITION BY series_id ORDER BY k
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS prev_k,
        first_value(v IGNORE NULLS) OVER (PARTITION BY series_id ORDER BY k
            ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS next_v,
        first_value(CASE WHEN v IS NOT NULL THEN k END IGNORE NULLS) OVER (
            PARTITION BY series_id ORDER BY k
            ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS next_k
    FROM g
)
SELECT cluster, series_id, make_timestamp(k * f) AS ts,
       round(CASE WHEN v IS NOT NULL THEN v
            WHEN policy = 'zero' THEN 0
            WHEN policy = 'hold' THEN prev_v
            ELSE prev_v + (next_v - prev_v) * (k - prev_k) / (next_k - prev_k) END, 9) AS value,
       v IS NULL AS filled
FROM w
"""

_CATALOGUE_SQL = """
WITH info AS (
    SELECT unnest(?::VARCHAR[]) AS metric, unnest(?::VARCHAR[]) AS unit,
           unnest(?::VARCHAR[]) AS aggregation, unnest(?::VARCHAR[]) AS default_fill
),
params AS (
    SELECT unnest(?::VARCHAR[]) AS cluster, unnest(?::VARCHAR[]) AS freq,
           unnest(?::VARCHAR[]) AS fill
),
sampled AS (
    SELECT DISTINCT series_id FROM samples WHERE cluster IN (SELECT cluster FROM params)
),
src AS (
    SELECT p.cluster,
           (SELECT string_agg(DISTINCT source, ',') FROM jobs WHERE jobs.cluster = p.cluster)
               AS jobs_source,
           (SELECT string_agg(DISTINCT format, ',') FROM ingests i
            WHERE i.cluster = p.cluster AND kind = 'samples') AS samples_source
    FROM params p
),
v AS (
    SELECT cluster, series_id, min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS n,
           count(*) FILTER (WHERE filled) AS n_filled
    FROM series_values WHERE cluster IN (SELECT cluster FROM params) GROUP BY ALL
)
INSERT INTO series (series_id, source, cluster, scope, metric, freq, first_ts, last_ts,
    n_points, n_filled, unit, aggregation, fill)
SELECT v.series_id,
       CASE WHEN s.series_id IS NULL THEN src.jobs_source ELSE src.samples_source END,
       v.cluster, split_part(v.series_id, '/', 2), i.metric, p.freq, first_ts, last_ts, n,
       n_filled, i.unit, i.aggregation,
       CASE WHEN s.series_id IS NULL THEN 'zero'
            WHEN p.fill = 'auto' THEN i.default_fill ELSE p.fill END
FROM v JOIN info i ON i.metric = split_part(v.series_id, '/', 3)
     JOIN params p ON p.cluster = v.cluster
     JOIN src ON src.cluster = v.cluster
     LEFT JOIN sampled s ON s.series_id = v.series_id
"""


#: The finest bucket a job-level source is derived at.
MIN_FREQ_S = 60


def set_cluster_config(store: Store, cluster: str, *, freq: str | None, fill: str | None) -> str:
    """Record the bucket size and fill policy of ``cluster`` (kept for later ingests).

    Returns:
        What changed for a cluster the store had (``"freq 10min -> 1h"``), else ``""``.

    Raises:
        ConfigError: for a ``freq`` finer than :data:`MIN_FREQ_S`.
    """
    row = store.fetch_one("SELECT freq_s, fill FROM clusters WHERE cluster = ?", [cluster])
    freq_s = freq_seconds(freq) if freq else (row[0] if row else freq_seconds(DEFAULT_FREQ))
    if freq and freq_s < MIN_FREQ_S:
        raise ConfigError(f"--freq {freq} is finer than the 1min PRISM derives series at (GPU "
                          "demand moves in minutes; a second-level grid only multiplies rows): "
                          "pass --freq 1min or coarser")
    policy = fill or (row[1] if row else "auto")
    store.execute(
        "INSERT OR REPLACE INTO clusters (cluster, freq_s, fill) VALUES (?, ?, ?)",
        [cluster, freq_s, policy],
    )
    if row is None:
        return ""
    changes = []
    if int(row[0]) != freq_s:
        changes.append(f"freq {format_freq(int(row[0]))} -> {format_freq(freq_s)}")
    if str(row[1]) != policy:
        changes.append(f"fill {row[1]} -> {policy}")
    return ", ".join(changes)


def derive_clusters(store: Store, clusters: Sequence[str]) -> int:
    """Re-derive every series of ``clusters`` from their jobs and samples, in one transaction
    (the caller's, when it holds one: an ingest or a re-derive, so that its other changes roll
    back with these).

    A derivation that would leave a cluster's jobs without a single whole bucket (a ``--freq``
    longer than their observation window; jobs spanning under a minute, which no ``--freq``
    fixes, only derive nothing yet), or drop a series the cluster has (a scope whose jobs lie
    only in the partial buckets at the window's ends), is refused: the store keeps its
    series.

    Returns:
        The number of series these clusters have afterwards.

    Raises:
        ConfigError: for a bucket size that leaves a cluster's jobs no whole bucket, or drops
            series, naming the cluster, its window and a ``--freq`` that fits.
        DataContractError: for a cluster name that cannot name series, or values that are not
            a panel.
    """
    names = sorted(set(clusters))
    if not names:
        return 0
    for name in names:  # series ids must be addressable (series show, the API)
        try:
            make_series_id(name, "all", "gpus_in_use")
        except DataContractError as exc:
            raise DataContractError(
                f"cluster name {name!r} cannot name series: use letters, digits and '_.:=+@-' "
                "only (no '/', spaces or quotes); pass --cluster NAME to set the cluster of "
                "every row") from exc
    config = {
        r[0]: (int(r[1]), str(r[2])) for r in store.fetch_all(
            "SELECT cluster, freq_s, fill FROM clusters WHERE list_contains(?, cluster)", [names])
    }
    freq_s = {c: config.get(c, (freq_seconds(DEFAULT_FREQ), "auto"))[0] for c in names}
    fill = {c: config.get(c, (0, "auto"))[1] for c in names}
    before = _catalogue(store, names)
    windows = _job_windows(store, names, freq_s)
    for window in windows:
        if window.w1 > window.w0:
            continue
        seconds = freq_s[window.cluster]
        if before.get(window.cluster) or _fitting_freq(window, seconds):
            raise ConfigError(_no_bucket_message(window, seconds,
                                                 before.get(window.cluster, {})))
        # no --freq helps (the jobs span under a minute) and no series is lost: the ingest
        # says the cluster has no series yet
        logger.warning("cluster %s: the jobs span under a minute (%s), no whole bucket: no "
                       "series from them yet", window.cluster, _window_text(window))
    with store.transaction():
        store.execute("DELETE FROM series_values WHERE list_contains(?, cluster)", [names])
        store.execute("DELETE FROM series WHERE list_contains(?, cluster)", [names])
        _derive_jobs(store, windows, freq_s)
        _derive_samples(store, names, freq_s, fill)
        _check_values(store, names)
        metrics = [r[0] for r in store.fetch_all(
            """SELECT DISTINCT split_part(series_id, '/', 3) FROM series_values
               WHERE list_contains(?, cluster)""", [names])]
        infos = [metric_info(m) for m in metrics]
        store.execute(_CATALOGUE_SQL, [
            metrics, [i.unit for i in infos], [i.aggregation for i in infos],
            [i.default_fill for i in infos],
            names, [format_freq(freq_s[c]) for c in names], [fill[c] for c in names],
        ])
        _check_kept(store, names, before, {w.cluster: w for w in windows}, freq_s)
    n = store.fetch_one("SELECT count(*) FROM series WHERE list_contains(?, cluster)", [names])
    return int(n[0]) if n else 0


@dataclass(frozen=True)
class _JobWindow:
    """A cluster's job observation window (``start``, ``end``) and the whole buckets in it
    (``[w0, w1)``), in microseconds since the epoch."""

    cluster: str
    jobs: int
    by_scope: bool
    by_type: bool
    start: int
    end: int
    w0: int
    w1: int


def _catalogue(store: Store, clusters: list[str]) -> dict[str, dict[str, str]]:
    """cluster -> {series_id: freq} of the series the store has now."""
    out: dict[str, dict[str, str]] = {}
    for cluster, series_id, freq in store.fetch_all(
            "SELECT cluster, series_id, freq FROM series WHERE list_contains(?, cluster)",
            [clusters]):
        out.setdefault(str(cluster), {})[str(series_id)] = str(freq)
    return out


def _job_windows(store: Store, clusters: list[str], freq_s: dict[str, int]) -> list[_JobWindow]:
    stats = store.fetch_all(
        """WITH s AS (
               SELECT cluster, count(*) AS n, count(scope) AS n_scope,
                      count(gpu_type) AS n_type, min(epoch_us(submit_ts)) AS first,
                      greatest(max(epoch_us(submit_ts)), max(epoch_us(start_ts)),
                               max(epoch_us(end_ts))) AS last
               FROM jobs WHERE list_contains(?, cluster) GROUP BY cluster
           ),
           w AS (
               SELECT cluster, min(epoch_us(obs_start)) AS o0, max(epoch_us(obs_end)) AS o1
               FROM ingests WHERE kind = 'jobs' AND list_contains(?, cluster) GROUP BY cluster
           )
           SELECT s.*, w.o0, w.o1 FROM s LEFT JOIN w USING (cluster) ORDER BY cluster""",
        [clusters, clusters],
    )
    windows = []
    for cluster, n, n_scope, n_type, first, last, o0, o1 in stats:
        start = int(o0 if o0 is not None else first)
        end = int(o1 if o1 is not None else last)
        w0, w1 = _whole_buckets(start, end, freq_s[cluster])
        windows.append(_JobWindow(str(cluster), int(n), n_scope > 0, n_type > 0, start, end,
                                  w0, w1))
    return windows


def _whole_buckets(start: int, end: int, seconds: int) -> tuple[int, int]:
    """``[w0, w1)``: the buckets of ``seconds`` (aligned to the epoch) wholly inside
    ``[start, end]`` (microseconds); empty when ``w1 <= w0``."""
    f_us = seconds * 1_000_000
    return -(-start // f_us) * f_us, (end // f_us) * f_us


def _derive_jobs(store: Store, windows: list[_JobWindow], freq_s: dict[str, int]) -> None:
    params: dict[str, list[object]] = {k: [] for k in ("c", "f", "w0", "w1", "bs", "bt")}
    for w in windows:
        if w.w1 <= w.w0:
            continue
        f_us = freq_s[w.cluster] * 1_000_000
        _check_buckets(w.cluster, (w.w1 - w.w0) // f_us, freq_s[w.cluster])
        for key, value in zip(params, (w.cluster, f_us, w.w0, w.w1, w.by_scope, w.by_type),
                              strict=True):
            params[key].append(value)
        logger.info("cluster %s: deriving job series over %d buckets from %d jobs",
                    w.cluster, (w.w1 - w.w0) // f_us, w.jobs)
    if params["c"]:
        store.execute("INSERT INTO series_values (cluster, series_id, ts, value, filled) "
                      + _JOB_SERIES_SQL, list(params.values()))


#: The bucket sizes a refusal suggests, coarsest first.
_SUGGESTED_FREQS = ("1d", "12h", "6h", "3h", "1h", "30min", "10min", "5min", "1min")


def _window_text(window: _JobWindow) -> str:
    def at(us: int) -> str:
        return pd.Timestamp(us, unit="us").strftime("%Y-%m-%d %H:%M")

    hours = (window.end - window.start) / 3.6e9
    span = (f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} hours" if hours >= 2
            else f"{hours * 60:.0f} minutes")
    return f"{at(window.start)} to {at(window.end)} UTC ({span})"


def _fitting_freq(window: _JobWindow, seconds: int) -> str | None:
    """The coarsest suggested bucket size, finer than ``seconds``, with a whole bucket in the
    window."""
    for freq in _SUGGESTED_FREQS:
        size = freq_seconds(freq)
        w0, w1 = _whole_buckets(window.start, window.end, size)
        if size < seconds and w1 > w0:
            return freq
    return None


def _no_bucket_message(window: _JobWindow, seconds: int, had: dict[str, str]) -> str:
    fit = _fitting_freq(window, seconds)
    now = f" (the cluster has {len(had)} now)" if had else ""
    return (f"cluster {window.cluster!r}: its jobs are observed from {_window_text(window)}, "
            f"which holds no whole bucket of {format_freq(seconds)} (buckets are aligned to "
            f"the Unix epoch and only whole ones are derived): its jobs would derive no "
            f"series{now}; nothing was changed. Fix: pass a shorter --freq"
            + (f" ({fit} fits)" if fit else "; the jobs span under a minute: ingest a longer "
               "trace"))


def _check_kept(
    store: Store, clusters: list[str], before: dict[str, dict[str, str]],
    windows: dict[str, _JobWindow], freq_s: dict[str, int],
) -> None:
    """Refuse a derivation that drops series a cluster had (its transaction rolls back)."""
    after = _catalogue(store, clusters)
    for cluster in clusters:
        had = before.get(cluster, {})
        lost = sorted(set(had) - set(after.get(cluster, {})))
        if not lost:
            continue
        freq = format_freq(freq_s[cluster])
        window = windows.get(cluster)
        why = (f"the jobs of their scopes lie only in the partial buckets at the ends of the "
               f"observation window ({_window_text(window)}), which are left out"
               if window is not None else "none of their data falls in a bucket")
        was = sorted(set(had.values()))
        raise ConfigError(
            f"cluster {cluster!r}: deriving it at {freq} would drop {len(lost)} of its "
            f"{len(had)} series ({', '.join(lost[:3])}{', ...' if len(lost) > 3 else ''}): "
            f"{why}; nothing was changed. Fix: pass a shorter --freq (its series are at "
            f"{', '.join(was)})")


def _derive_samples(
    store: Store, clusters: list[str], freq_s: dict[str, int], fill: dict[str, str]
) -> None:
    sums = [m for m, info in METRICS.items() if info.aggregation == "sum"]
    zero = [m for m, info in METRICS.items() if info.default_fill == "zero"]
    rows = store.fetch_all(
        """SELECT DISTINCT split_part(series_id, '/', 3) FROM samples
           WHERE list_contains(?, cluster)""", [clusters])
    if not rows:
        return
    for (metric,) in rows:  # metrics outside METRICS aggregate by their name's rule
        info = metric_info(metric)
        if info.aggregation == "sum" and metric not in sums:
            sums.append(metric)
        if info.default_fill == "zero" and metric not in zero:
            zero.append(metric)
    spans = store.fetch_all(
        """SELECT cluster, max(epoch(ts)) - min(epoch(ts)) FROM samples
           WHERE list_contains(?, cluster) GROUP BY cluster""", [clusters])
    for cluster, seconds in spans:
        _check_buckets(cluster, int(seconds // freq_s[cluster]), freq_s[cluster])
    store.execute(
        "INSERT INTO series_values (cluster, series_id, ts, value, filled) " + _SAMPLE_SERIES_SQL,
        [clusters, [freq_s[c] * 1_000_000 for c in clusters], [fill[c] for c in clusters],
         sums, zero],
    )


def _check_values(store: Store, clusters: list[str]) -> None:
    """The derived values are a panel: one finite value per ``(series_id, ts)``.

    Ingestion keeps one source per series (:mod:`prism.ingest.conflicts`), so a repeat here
    is a store written before that was checked; a non-finite value comes from samples whose
    bucket sum or mean overflows (two values of 1e308).

    Raises:
        DataContractError: naming the series, the bucket and how to fix it.
    """
    twice = store.fetch_one(
        """SELECT series_id, ts FROM series_values WHERE list_contains(?, cluster)
           GROUP BY series_id, ts HAVING count(*) > 1 ORDER BY series_id, ts LIMIT 1""",
        [clusters]) if store.fetch_one(
        """SELECT count(*) > count(DISTINCT hash(series_id, ts)) FROM series_values
           WHERE list_contains(?, cluster)""", [clusters]) == (True,) else None
    if twice is not None:
        series_id, ts = twice
        raise DataContractError(
            f"series {series_id!r} would get two values at {ts}: it is both sampled and derived "
            "from jobs (or two job scopes share one name in series ids); this store was "
            "written by an older PRISM that did not refuse that: ingest the files again into "
            "a new store (--db NEW.duckdb), which names the file to change")
    bad = store.fetch_one(
        """SELECT v.series_id, v.ts, v.value FROM series_values v
           WHERE list_contains(?, v.cluster) AND NOT isfinite(v.value)
           ORDER BY v.series_id, v.ts LIMIT 1""", [clusters])
    if bad is not None:
        series_id, ts, value = bad
        files = store.fetch_all(
            """SELECT DISTINCT i.path FROM samples s JOIN ingests i USING (ingest_id)
               WHERE s.series_id = ? AND s.ts >= ?::TIMESTAMP
                 AND s.ts < ?::TIMESTAMP + to_seconds((SELECT freq_s FROM clusters c
                                                      WHERE c.cluster = s.cluster))
               ORDER BY 1 LIMIT 3""", [series_id, ts, ts])
        raise DataContractError(
            f"series {series_id!r}: the values of the bucket at {ts} add up to {value} (too "
            f"large a number)" + (f", from {', '.join(str(f[0]) for f in files)}"
                                  if files else "")
            + ": check those values (a unit error, or a placeholder such as 1e308) and "
            "ingest them corrected")


def _check_buckets(cluster: str, n: int, freq_s: int) -> None:
    if n > MAX_BUCKETS:
        raise DataContractError(
            f"cluster {cluster!r} would get {n:,} buckets of {format_freq(freq_s)} per series "
            f"(more than {MAX_BUCKETS:,}): its data spans too long a time for that frequency; "
            "check for stray far-apart timestamps, or ingest with a coarser --freq"
        )
