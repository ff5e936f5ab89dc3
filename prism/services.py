"""Use cases shared by the CLI and the REST API: each opens what it needs and calls the core.

Functions here take plain values (paths, names, options) and return frames or small result
objects; they print nothing and know nothing of HTTP or argparse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from prism.errors import ConfigError
from prism.ingest import adapters
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import IngestReport, Progress, ingest
from prism.schema import PANEL_COLUMNS, SERIES_ID, split_series_id
from prism.store import Store

if TYPE_CHECKING:
    from prism.datasets import DownloadResult
    from prism.generate import GeneratedTrace
    from prism.primitives.decompose import SeriesDecomposition

logger = logging.getLogger(__name__)


def open_store(db: str | Path, *, must_exist: bool = False) -> Store:
    """Open the store at ``db``.

    Args:
        db: a DuckDB file or ``:memory:``.
        must_exist: fail instead of creating an empty store (for read-only commands).

    Raises:
        ConfigError: when the file is missing (with ``must_exist``) or cannot be opened.
    """
    if must_exist and str(db) != ":memory:" and not Path(db).exists():
        raise ConfigError(
            f"no store at {str(db)!r}: run `prism ingest` first, or pass --db / PRISM_DB"
        )
    return Store.open(db)


def list_formats() -> list[tuple[str, str, str]]:
    """``(name, kind, description)`` of every ingestion format."""
    return [(a.name, a.kind, a.description) for _, a in sorted(adapters().items())]


def ingest_files(
    db: str | Path,
    paths: Sequence[str | Path],
    fmt: str,
    options: IngestOptions,
    *,
    freq: str | None = None,
    fill: str | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest files into the store at ``db`` (one transaction) and re-derive their series."""
    with open_store(db) as store:
        return ingest(store, paths, fmt, options, freq=freq, fill=fill, progress=progress)


def list_series(
    db: str | Path, *, cluster: str | None = None, scope: str | None = None,
    metric: str | None = None,
) -> pd.DataFrame:
    """The series catalogue, filtered by cluster, scope and metric."""
    with open_store(db, must_exist=True) as store:
        return store.list_series(cluster=cluster, scope=scope, metric=metric)


def series_values(
    db: str | Path,
    series_id: str,
    *,
    start: str | None = None,
    end: str | None = None,
    tail: int | None = None,
) -> pd.DataFrame:
    """Values of one series (``ts, value, filled``) between ``start`` and ``end``.

    Raises:
        SeriesNotFound: for an unknown series, with the closest ids.
        ConfigError: for a bad ``start``/``end``.
    """
    split_series_id(series_id)
    lo, hi = _time_arg(start, "start"), _time_arg(end, "end")
    with open_store(db, must_exist=True) as store:
        store.require_series([series_id])
        frame = store.fetch_df(
            """SELECT ts, value, filled FROM series_values WHERE series_id = ?
               AND (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)
               ORDER BY ts""",
            [series_id, lo, lo, hi, hi],
        )
    frame["ts"] = frame["ts"].astype("datetime64[ns]")
    return frame.tail(tail).reset_index(drop=True) if tail else frame


@dataclass(frozen=True)
class ExportResult:
    """Where a panel export went."""

    path: Path
    rows: int
    series: int


def export_panel(
    db: str | Path, output: str | Path, *, series_ids: Sequence[str] | None = None
) -> ExportResult:
    """Write the panel (``series_id, ts, value``) to ``output`` (``.csv`` or ``.parquet``).

    Raises:
        ConfigError: for another file extension or a missing folder.
        SeriesNotFound: for a named series that is not in the store.
    """
    path = Path(output)
    if path.suffix not in (".csv", ".parquet"):
        raise ConfigError(f"cannot write {str(path)!r}: use a .csv or .parquet file name")
    if not path.parent.exists():
        raise ConfigError(f"folder {str(path.parent)!r} does not exist; create it first")
    with open_store(db, must_exist=True) as store:
        panel = store.load_panel(list(series_ids) if series_ids else None)
    panel = panel[list(PANEL_COLUMNS)]
    if path.suffix == ".csv":
        panel.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    else:
        panel.to_parquet(path, index=False)
    return ExportResult(path, len(panel), int(panel[SERIES_ID].nunique()))


def _time_arg(text: str | None, name: str) -> pd.Timestamp | None:
    if text is None:
        return None
    try:
        ts = pd.Timestamp(text)
    except ValueError as exc:
        raise ConfigError(f"--{name} {text!r} is not a time; write e.g. 2020-05-03T10:00") from exc
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo else ts


def generate_trace(
    output: str | Path,
    *,
    days: int = 28,
    clusters: int = 2,
    seed: int = 0,
    jobs_per_day: float | None = None,
    fmt: str = "csv",
    progress: Callable[[int, int], None] | None = None,
) -> GeneratedTrace:
    """Write a synthetic job trace and capacities to ``output`` (see :mod:`prism.generate`)."""
    from prism import generate  # imported on use: the CLI starts faster

    if fmt not in ("csv", "parquet"):
        raise ConfigError(f"unknown trace file format {fmt!r}; use csv or parquet")
    return generate.generate_trace(
        Path(output), days=days, clusters=clusters, seed=seed, jobs_per_day=jobs_per_day,
        format="parquet" if fmt == "parquet" else "csv", progress=progress,
    )


def list_datasets() -> pd.DataFrame:
    """The public trace catalogue as a table (name, format, licence, size, checksum known)."""
    from prism import datasets

    rows = [
        {"name": d.name, "format": d.format, "licence": d.licence,
         "size": d.size, "sha256": "yes" if d.sha256 else "unknown", "title": d.title}
        for d in datasets.list_datasets()
    ]
    return pd.DataFrame(rows, columns=["name", "format", "licence", "size", "sha256", "title"])


def download_dataset(
    name: str,
    *,
    cache_dir: Path | None = None,
    base_url: str | None = None,
    verify: bool = True,
    progress: Callable[[int, int | None], None] | None = None,
) -> DownloadResult:
    """Fetch a catalogue trace into the cache and verify its checksum."""
    from prism import datasets

    return datasets.download(name, cache_dir=cache_dir, base_url=base_url, verify=verify,
                             progress=progress)


#: At most this many sibling series (same cluster and metric) teach the dictionary.
_DICTIONARY_SERIES = 64


def decompose_series(db: str | Path, series_id: str) -> SeriesDecomposition:
    """Decompose one stored series into primitives and structural parts.

    The primitive dictionary is learned from the series and its siblings (same cluster and
    metric, at most 64), so that the atoms are shapes that recur across the cluster.

    Raises:
        SeriesNotFound: for an unknown series, with the closest ids.
        DataContractError: when the series is too short to decompose.
    """
    from prism.primitives.decompose import decompose

    cluster, _, metric = split_series_id(series_id)
    with open_store(db, must_exist=True) as store:
        store.require_series([series_id])
        siblings = store.list_series(cluster=cluster, metric=metric)["series_id"].tolist()
        chosen = [series_id] + [s for s in siblings if s != series_id][: _DICTIONARY_SERIES - 1]
        panel = store.load_panel(chosen)
    result = decompose(panel, series_ids=[series_id])
    return result.series[series_id]


def plot_decomposition(decomposition: SeriesDecomposition, output: str | Path) -> Path:
    """Draw the series, its components and its top atoms to a PNG/SVG/PDF file.

    Raises:
        ConfigError: for a missing folder or an unsupported extension.
    """
    from prism.primitives.plot import plot_decomposition as draw

    path = Path(output)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ConfigError(f"cannot draw {str(path)!r}: use a .png, .svg or .pdf file name")
    if not path.parent.exists():
        raise ConfigError(f"folder {str(path.parent)!r} does not exist; create it first")
    draw(decomposition, path)
    return path


def load_panel(db: str | Path, series_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """The stored panel of the named series (all when ``None``).

    Raises:
        SeriesNotFound: for an unknown series.
        ConfigError: when the store holds no series.
    """
    with open_store(db, must_exist=True) as store:
        panel = store.load_panel(list(series_ids) if series_ids else None)
    if panel.empty:
        raise ConfigError("no series in the store: ingest data first (prism ingest)")
    return panel


@dataclass(frozen=True)
class ForecastResult:
    """A forecast and the model behind it.

    Attributes:
        frame: the forecast contract (``series_id, ts, model, mean, p..``).
        model_id: the registry id of the model (saved now, or loaded), if any.
        fallback: series id -> why it was forecast by the fallback.
    """

    frame: pd.DataFrame
    model_id: str | None
    fallback: dict[str, str]


def forecast_series(
    db: str | Path,
    series_ids: Sequence[str] | None,
    *,
    horizon: str,
    quantiles: Sequence[float],
    model: str,
    params: dict[str, str] | None = None,
    save: bool = False,
    from_model: str | None = None,
    models_dir: str | Path | None = None,
    reconcile: str | None = None,
) -> ForecastResult:
    """Forecast stored series with a newly fitted model, or with a saved one.

    Args:
        db: the store.
        series_ids: series to forecast (all when ``None``).
        horizon: a duration or a number of steps.
        quantiles: quantile levels.
        model: the forecaster's alias (ignored with ``from_model``).
        params: its hyperparameters as text (``season=1w``), parsed to the types of their
            defaults.
        save: save the fitted model in the registry.
        from_model: a registry model id (or alias: the newest) to forecast with; it is
            updated with the stored points that arrived after it was fitted.
        models_dir: the registry (default ``PRISM_MODELS_DIR`` or ``./models``).
        reconcile: ``bottom_up`` or ``mint_shrink`` to make scope forecasts add up.

    Returns:
        The :class:`ForecastResult`.

    Raises:
        SeriesNotFound: for an unknown series.
        ConfigError: for an unknown model, a bad horizon, quantile or parameter.
    """
    from prism import registry
    from prism.config import get_settings
    from prism.forecasters import get_forecaster
    from prism.reconcile import one_step_residuals
    from prism.reconcile import reconcile as reconcile_frame

    root = Path(models_dir) if models_dir is not None else get_settings().models_dir
    model_id: str | None = None
    if from_model:
        forecaster, record = registry.load_model(root, from_model)
        model_id = record.model_id
        wanted = list(series_ids) if series_ids else forecaster.series_ids_
        unknown = [s for s in wanted if s not in forecaster.series_ids_]
        if unknown:
            raise ConfigError(f"model {model_id} was not fitted on {unknown[0]!r}; fit a new "
                              "model on it (prism forecast --model ... --save)")
        fresh = load_panel(db, wanted)
        newer = fresh[fresh["ts"] > fresh["series_id"].map(forecaster.last_ts_)]
        if not newer.empty:
            forecaster.update(newer)
        frame = forecaster.predict(horizon, quantiles)
        frame = frame[frame["series_id"].isin(wanted)].reset_index(drop=True)
    else:
        forecaster = get_forecaster(model, **_typed_params(model, params or {}))
        forecaster.fit(load_panel(db, series_ids))
        frame = forecaster.predict(horizon, quantiles)
        if save:
            model_id = registry.save_model(forecaster, root).model_id
    if reconcile:
        frame = reconcile_frame(frame, method=reconcile,
                                residuals=one_step_residuals(forecaster))
    return ForecastResult(frame, model_id, dict(forecaster.fallback_))


def _typed_params(alias: str, params: dict[str, str]) -> dict[str, object]:
    """Hyperparameters given as text, converted to the type of each one's default."""
    from prism.forecasters import FORECASTERS

    if alias not in FORECASTERS:
        return dict(params)  # get_forecaster names the known aliases
    defaults = FORECASTERS[alias]().get_params()
    out: dict[str, object] = {}
    for name, text in params.items():
        if name not in defaults:
            raise ConfigError(f"{alias} has no parameter {name!r}; it takes: "
                              f"{', '.join(sorted(defaults))}")
        default = defaults[name]
        try:
            if isinstance(default, bool):
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(text)
                out[name] = text.lower() in ("true", "1", "yes")
            elif isinstance(default, int) and not isinstance(default, bool):
                out[name] = int(text)
            elif isinstance(default, float):
                out[name] = float(text)
            elif default is None and text.lower() == "none":
                out[name] = None
            elif isinstance(default, tuple):
                out[name] = tuple(v.strip() for v in text.split(",") if v.strip())
            else:
                out[name] = text
        except ValueError as exc:
            raise ConfigError(f"--param {name}={text!r}: expected a "
                              f"{type(default).__name__} like {default!r}") from exc
    return out


def list_models(models_dir: str | Path | None = None) -> pd.DataFrame:
    """The saved models, newest first: id, alias, series, data range, metrics."""
    from prism import registry
    from prism.config import get_settings

    root = Path(models_dir) if models_dir is not None else get_settings().models_dir
    rows = [{"model_id": r.model_id, "alias": r.alias, "series": len(r.series_ids),
             "data_start": r.data_start, "data_end": r.data_end, "version": r.version,
             "created": r.created,
             "calibration_mae_1step": r.metrics.get("calibration_mae_1step")}
            for r in registry.list_models(root)]
    return pd.DataFrame(rows, columns=["model_id", "alias", "series", "data_start", "data_end",
                                       "version", "created", "calibration_mae_1step"])


def write_frame(frame: pd.DataFrame, output: str | Path) -> Path:
    """Write a frame to ``.csv``, ``.parquet`` or ``.json`` (records, ISO times).

    Raises:
        ConfigError: for another extension or a missing folder.
    """
    path = Path(output)
    if path.suffix not in (".csv", ".parquet", ".json"):
        raise ConfigError(f"cannot write {str(path)!r}: use a .csv, .parquet or .json file name")
    if not path.parent.exists():
        raise ConfigError(f"folder {str(path.parent)!r} does not exist; create it first")
    if path.suffix == ".csv":
        frame.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_json(path, orient="records", date_format="iso", indent=1)
    return path
