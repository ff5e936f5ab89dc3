"""Stored series: the catalogue, the values of one, the panel, re-derivation, decompositions.

``prism series list|show|export|rederive`` and ``prism decompose``; ``GET /v1/series``,
``/v1/series/values`` and ``/v1/decomposition``.
"""

from __future__ import annotations

import difflib
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from prism.errors import ConfigError
from prism.schema import (
    FILL_POLICIES,
    PANEL_COLUMNS,
    SERIES_ID,
    format_freq,
    freq_seconds,
    split_series_id,
)
from prism.usecases.files import output_path

if TYPE_CHECKING:
    from prism.primitives.decompose import SeriesDecomposition
    from prism.store import Store

logger = logging.getLogger(__name__)

#: At most this many series of one cluster and metric teach a primitive dictionary.
DICTIONARY_SERIES = 64


def list_series(
    store: Store, *, cluster: str | None = None, scope: str | None = None,
    metric: str | None = None,
) -> pd.DataFrame:
    """The series catalogue (``series_id, cluster, scope, metric, freq, ...``), filtered by
    cluster, scope and metric."""
    return store.list_series(cluster=cluster, scope=scope, metric=metric)


def series_values(
    store: Store,
    series_id: str,
    *,
    start: str | None = None,
    end: str | None = None,
    tail: int | None = None,
) -> pd.DataFrame:
    """Values of one series (``ts, value, filled``) in ``[start, end)``, the last ``tail``.

    Raises:
        SeriesNotFound: for an unknown series, with the closest ids.
        DataContractError: for an id that is not ``cluster/scope/metric``.
        ConfigError: for a ``start`` or ``end`` that is not a time, or a ``start`` not
            before ``end``.
    """
    split_series_id(series_id)
    lo, hi = _time_arg(start, "start"), _time_arg(end, "end")
    if lo is not None and hi is not None and lo >= hi:
        raise ConfigError(f"start {start!r} is not before end {end!r}: the window [start, end) "
                          "holds nothing; swap them, or leave one out")
    store.require_series([series_id])
    frame = store.fetch_df(
        """SELECT ts, value, filled FROM series_values WHERE series_id = ?
           AND (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)
           ORDER BY ts""",
        [series_id, lo, lo, hi, hi],
    )
    frame["ts"] = frame["ts"].astype("datetime64[ns]")
    return frame.tail(tail).reset_index(drop=True) if tail else frame


def _time_arg(text: str | None, name: str) -> pd.Timestamp | None:
    if text is None:
        return None
    try:
        ts = pd.Timestamp(text)
    except ValueError as exc:
        raise ConfigError(f"{name} {text!r} is not a time; write e.g. 2020-05-03T10:00") from exc
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo else ts


def load_panel(store: Store, series_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """The stored panel of the named series (all when ``None``).

    Raises:
        SeriesNotFound: for an unknown series.
        ConfigError: when the store holds no series.
    """
    panel = store.load_panel(list(series_ids) if series_ids else None)
    if panel.empty:
        raise ConfigError("no series in the store: ingest data first (prism ingest)")
    return panel


@dataclass(frozen=True)
class ExportResult:
    """Where a panel export went."""

    path: Path
    rows: int
    series: int


def export_panel(
    store: Store, output: str | Path, *, series_ids: Sequence[str] | None = None
) -> ExportResult:
    """Write the panel (``series_id, ts, value``) to ``output`` (``.csv`` or ``.parquet``).

    Raises:
        ConfigError: for another file extension or a missing folder.
        SeriesNotFound: for a named series that is not in the store.
    """
    path = output_path(output, (".csv", ".parquet"))
    data, rows, series = panel_bytes(store, path.suffix.lstrip("."), series_ids=series_ids)
    path.write_bytes(data)
    return ExportResult(path, rows, series)


def panel_bytes(store: Store, fmt: str, *, series_ids: Sequence[str] | None = None
                ) -> tuple[bytes, int, int]:
    """The panel (``series_id, ts, value``) encoded as ``csv`` or ``parquet``, with its row
    and series counts (what ``prism series export`` writes, and what the API sends).

    Raises:
        ConfigError: for another format.
        SeriesNotFound: for a named series that is not in the store.
    """
    if fmt not in ("csv", "parquet"):
        raise ConfigError(f"an export is csv or parquet, not {fmt!r}")
    panel = store.load_panel(list(series_ids) if series_ids else None)
    panel = panel[list(PANEL_COLUMNS)]
    if fmt == "csv":
        data = panel.to_csv(index=False, date_format="%Y-%m-%dT%H:%M:%S").encode("utf-8")
    else:
        buffer = io.BytesIO()
        panel.to_parquet(buffer, index=False)
        data = buffer.getvalue()
    return data, len(panel), int(panel[SERIES_ID].nunique())


# -- re-derivation ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RederiveResult:
    """What :func:`rederive_cluster` did: the settings before and after, and the series."""

    cluster: str
    freq: str
    fill: str
    previous_freq: str
    previous_fill: str
    series: int
    points: int


def rederive_cluster(
    store: Store, cluster: str, *, freq: str | None = None, fill: str | None = None,
) -> RederiveResult:
    """Derive every series of ``cluster`` again, from the jobs and samples the store holds,
    at another bucket size (``freq``) or gap policy (``fill``), kept for later ingests.

    One transaction: all the cluster's series are replaced, or (on an error) none; the cached
    forecasts of its series are dropped with them. Re-ingesting the files cannot do this: a
    file ingested before is skipped, whatever ``--freq`` says.

    Args:
        store: the store.
        cluster: the cluster (``prism series list`` shows them).
        freq: the new bucket size, e.g. ``1h`` (``None``: keep the cluster's).
        fill: the new gap policy of sampled series (``None``: keep the cluster's).

    Returns:
        The cluster's settings before and after, its series and points.

    Raises:
        ConfigError: for an unknown cluster (with the closest names), a bad frequency (or one
            finer than 1min) or fill policy, or a ``freq`` that would leave the cluster's jobs
            no whole bucket or drop series it has (naming the window and a ``freq`` that
            fits; :func:`prism.derive.derive_clusters`); the store is left as it was.
        IngestError: when a time of the cluster's data spans more buckets of ``freq`` than
            PRISM derives, naming its file and job or series.
    """
    from prism.derive import derive_clusters, set_cluster_config
    from prism.ingest.spans import check_spans

    if freq is not None:
        freq_seconds(freq)
    if fill is not None and fill not in FILL_POLICIES:
        raise ConfigError(f"--fill {fill!r} is not a fill policy; use one of "
                          f"{', '.join(FILL_POLICIES)}")
    row = store.fetch_one("SELECT freq_s, fill FROM clusters WHERE cluster = ?", [cluster])
    if row is None:
        known = [r[0] for r in store.fetch_all("SELECT cluster FROM clusters ORDER BY cluster")]
        close = difflib.get_close_matches(cluster, known, n=3)
        hint = (f"did you mean {', '.join(close)}?" if close else
                f"the store has {', '.join(known[:10])}" if known else
                "the store has none: ingest data first (prism ingest)")
        raise ConfigError(f"--cluster {cluster!r} is not a cluster of the store; {hint}")
    before = store.fetch_all("SELECT series_id FROM series WHERE cluster = ?", [cluster])
    with store.transaction():
        set_cluster_config(store, cluster, freq=freq, fill=fill)
        check_spans(store, [cluster])
        series = derive_clusters(store, [cluster])
        after = store.fetch_all("SELECT series_id FROM series WHERE cluster = ?", [cluster])
        store.drop_cached_forecasts(sorted({r[0] for r in before + after}))
        now = store.fetch_one(
            """SELECT c.freq_s, c.fill, (SELECT count(*) FROM series_values v
                                          WHERE v.cluster = c.cluster)
               FROM clusters c WHERE c.cluster = ?""", [cluster])
    assert now is not None
    result = RederiveResult(cluster, format_freq(int(now[0])), str(now[1]),
                            format_freq(int(row[0])), str(row[1]), series, int(now[2]))
    logger.info("cluster %s: %d series re-derived at freq %s, fill %s (were %s, %s)",
                cluster, series, result.freq, result.fill, result.previous_freq,
                result.previous_fill)
    return result


# -- decomposition ------------------------------------------------------------------------------
def dictionary_series(store: Store, cluster: str, metric: str,
                      wanted: Sequence[str]) -> list[str]:
    """The series whose shapes teach the primitive dictionary of ``wanted`` (series of
    ``cluster`` and ``metric``): those, then their siblings (same cluster and metric), at most
    :data:`DICTIONARY_SERIES` in all unless ``wanted`` alone is more."""
    siblings = store.list_series(cluster=cluster, metric=metric)[SERIES_ID].tolist()
    chosen = list(dict.fromkeys(wanted))
    chosen += [s for s in siblings if s not in chosen]
    return chosen[:max(DICTIONARY_SERIES, len(wanted))]


def decompose_series(store: Store, series_id: str) -> SeriesDecomposition:
    """Decompose one stored series into primitives and structural parts.

    The primitive dictionary is learned from the series and its siblings
    (:func:`dictionary_series`), so that the atoms are shapes that recur across the cluster.

    Raises:
        SeriesNotFound: for an unknown series, with the closest ids.
        DataContractError: for a bad id, or a series too short to decompose.
    """
    from prism.primitives.decompose import decompose

    cluster, _, metric = split_series_id(series_id)
    store.require_series([series_id])
    panel = store.load_panel(dictionary_series(store, cluster, metric, [series_id]))
    return decompose(panel, series_ids=[series_id]).series[series_id]


def plot_decomposition(decomposition: SeriesDecomposition, output: str | Path) -> Path:
    """Draw the series, its components and its top atoms to a PNG/SVG/PDF file.

    Raises:
        ConfigError: for a missing folder or an unsupported extension.
    """
    from prism.primitives.plot import plot_decomposition as draw

    path = output_path(output, (".png", ".svg", ".pdf"), verb="draw", ignore_case=True)
    draw(decomposition, path)
    return path
