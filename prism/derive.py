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
    """Re-derive every series of ``clusters`` from their jobs and samples (call it inside a
    transaction to replace the old series atomically).

    Returns:
        The number of series these clusters have afterwards.
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
    store.execute("DELETE FROM series_values WHERE list_contains(?, cluster)", [names])
    store.execute("DELETE FROM series WHERE list_contains(?, cluster)", [names])
    _derive_jobs(store, names, freq_s)
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
    n = store.fetch_one("SELECT count(*) FROM series WHERE list_contains(?, cluster)", [names])
    return int(n[0]) if n else 0


def _derive_jobs(store: Store, clusters: list[str], freq_s: dict[str, int]) -> None:
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
    params: dict[str, list[object]] = {k: [] for k in ("c", "f", "w0", "w1", "bs", "bt")}
    for cluster, n, n_scope, n_type, first, last, o0, o1 in stats:
        f_us = freq_s[cluster] * 1_000_000
        start = o0 if o0 is not None else first
        end = o1 if o1 is not None else last
        w0 = -(-int(start) // f_us) * f_us  # the first bucket wholly inside the window
        w1 = (int(end) // f_us) * f_us
        if w1 <= w0:
            logger.warning("cluster %s: observation window shorter than one bucket", cluster)
            continue
        _check_buckets(cluster, (w1 - w0) // f_us, freq_s[cluster])
        for key, value in zip(params, (cluster, f_us, w0, w1, n_scope > 0, n_type > 0),
                              strict=True):
            params[key].append(value)
        logger.info("cluster %s: deriving job series over %d buckets from %d jobs",
                    cluster, (w1 - w0) // f_us, n)
    if params["c"]:
        store.execute("INSERT INTO series_values (cluster, series_id, ts, value, filled) "
                      + _JOB_SERIES_SQL, list(params.values()))


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
