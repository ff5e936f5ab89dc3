"""Use cases shared by the CLI and the REST API: each opens what it needs and calls the core.

Functions here take plain values (paths, names, options) and return frames or small result
objects; they print nothing and know nothing of HTTP or argparse.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from prism.errors import ConfigError, IngestError, PrismError, SeriesNotFound
from prism.ingest import adapters
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import IngestReport, Progress, ingest
from prism.schema import PANEL_COLUMNS, SERIES_ID, split_series_id
from prism.store import Store

if TYPE_CHECKING:
    from prism.batch import BatchReport
    from prism.capacity import CapacityPlan, Reservation, Watts
    from prism.config import Settings
    from prism.datasets import DownloadResult
    from prism.forecasters.base import BaseForecaster
    from prism.generate import GeneratedTrace
    from prism.primitives.decompose import SeriesDecomposition
    from prism.reports.capacity import ReportData, ScopeSection
    from prism.serving import ForecastServer, IngestOutcome, ServedForecast

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
        model_id: the registry id of the model (saved now, or loaded), if one model made it.
        fallback: series id -> why it was forecast by the fallback.
        model_ids: every registry model it was made with (several when ``from_model`` is an
            alias whose series are spread over models, as a batch refit saves them).
    """

    frame: pd.DataFrame
    model_id: str | None
    fallback: dict[str, str]
    model_ids: tuple[str, ...] = ()


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
        from_model: a registry model id to forecast with, or an alias: each series is then
            forecast by the newest model of that alias fitted on it (the series of those
            models that are in the store when no series are named). The models are updated
            with the stored points that arrived after they were fitted.
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
    model_ids: tuple[str, ...] = ()
    if from_model:
        forecaster, wanted, model_ids = _saved_models(db, root, from_model, series_ids)
        model_id = model_ids[0] if len(model_ids) == 1 else None
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
            model_ids = (model_id,)
    if reconcile:
        frame = reconcile_frame(frame, method=reconcile,
                                residuals=one_step_residuals(forecaster))
    return ForecastResult(frame, model_id, dict(forecaster.fallback_), model_ids)


def _saved_models(db: str | Path, root: Path, name: str, series_ids: Sequence[str] | None
                  ) -> tuple[BaseForecaster, list[str], tuple[str, ...]]:
    """The saved model(s) that forecast the series: ``(forecaster, series, model ids)``.

    ``name`` is a model id (that model), or an alias (for each series, the newest model of
    the alias fitted on it, held together as one :class:`~prism.registry.SeriesModels` when
    they are several).

    Raises:
        ConfigError: for an unknown model, or a series no model named by ``name`` holds.
    """
    from prism import registry

    by_id = [r for r in registry.list_models(root) if r.model_id == name]
    if by_id:
        records = dict.fromkeys(by_id[0].series_ids, by_id[0])
    else:
        records = registry.newest_for_series(root, name)
        if not records:
            registry.find_model(root, name)  # raises, naming the models there are
    if series_ids:
        wanted = list(dict.fromkeys(series_ids))
    elif by_id:
        wanted = list(records)
    else:  # an alias: its series that are still in the store
        with open_store(db, must_exist=True) as store:
            stored = set(store.list_series()[SERIES_ID].astype(str))
        wanted = sorted(s for s in records if s in stored)
        if not wanted:
            raise ConfigError(f"none of the series of the {name} models in {str(root)!r} is "
                              "in the store; name the series, or fit new models")
    unknown = [s for s in wanted if s not in records]
    if unknown:
        what = f"model {name}" if by_id else f"no {name} model in {str(root)!r}"
        raise ConfigError(f"{what} was not fitted on {unknown[0]!r}; fit a model on it "
                          "(prism forecast --model ... --save, or prism refit)")
    needed = {records[s].model_id: records[s] for s in wanted}
    loaded = {mid: registry.load_model(root, mid)[0] for mid in needed}
    if len(loaded) == 1:
        return next(iter(loaded.values())), wanted, tuple(loaded)
    held = registry.SeriesModels.join({s: loaded[records[s].model_id] for s in wanted})
    return held, wanted, tuple(sorted(loaded))


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


@dataclass(frozen=True)
class BatchResult:
    """What a batch forecast or backtest did (one run per model).

    Attributes:
        reports: each run's :class:`prism.batch.BatchReport`, in the order of the models.
        output: the file the runs were written to, if any.
    """

    reports: tuple[BatchReport, ...]
    output: Path | None


def run_batch(
    db: str | Path,
    series_ids: Sequence[str] | None,
    *,
    models: Sequence[str],
    task: str = "forecast",
    params: dict[str, str] | None = None,
    horizon: str = "1d",
    quantiles: Sequence[float] = (0.5, 0.9, 0.99),
    windows: int = 7,
    step: str | None = None,
    backend: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    budget_s: float | None = None,
    global_sample: int | None = None,
    output: str | Path | None = None,
    save: bool = False,
    models_dir: str | Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> BatchResult:
    """Forecast, backtest or refit stored series on worker processes or a Ray cluster.

    Each model is one run of :func:`prism.batch.run_batch`: results stream into the store's
    ``batch_forecasts`` and ``batch_series`` tables under the run's id, then (with
    ``output``) into the file, block by block, so memory stays flat however many series. A
    refit (or a forecast with ``save``) saves the fitted models in the registry, one model
    per chunk of series, where ``prism serve`` and ``--from-model ALIAS`` find them.

    Args:
        db: the store.
        series_ids: series to work on (all when ``None``).
        models: forecaster aliases (one run each).
        task: ``forecast``, ``backtest`` or ``refit`` (fit and save, forecast nothing).
        params: hyperparameters as text (``season=1w``), for a single model.
        horizon, quantiles, windows, step: as for ``prism forecast`` / ``prism backtest``.
        backend: ``local`` or ``ray``.
        workers: local processes, or Ray tasks in flight.
        ray_address: the Ray cluster (default: a local one).
        budget_s: per-series time budget in seconds; past it (or on an error) a series is
            forecast by the seasonal naive fallback, with the reason recorded.
        global_sample: at most this many series teach a global model its shared parts.
        output: ``.csv``, ``.parquet`` or ``.json`` file for all runs.
        save: save the fitted models of a forecast in the registry (a refit always does).
        models_dir: the registry (default ``PRISM_MODELS_DIR`` or ``./models``).
        progress: called as ``progress(model, done, total)``.

    Returns:
        The :class:`BatchResult`.

    Raises:
        ConfigError: for an unknown model or setting, or an unwritable output.
        SeriesNotFound: for an unknown series.
    """
    from prism import batch
    from prism.config import get_settings
    from prism.forecasters import get_forecaster

    if not models:
        raise ConfigError("name at least one model, e.g. --models prism,seasonal_naive")
    if params and len(models) > 1:
        raise ConfigError("--param applies to a single model; run the models one at a time")
    path = Path(output) if output is not None else None
    if path is not None and (path.suffix not in (".csv", ".parquet", ".json")
                             or not path.parent.exists()):
        write_frame(pd.DataFrame(), path)  # raises the error that names the fix
    forecasters = [get_forecaster(m, **_typed_params(m, params or {})) for m in models]
    root: Path | None = None
    if save or task == "refit":
        root = Path(models_dir) if models_dir is not None else get_settings().models_dir
    reports = []
    with open_store(db, must_exist=True) as store:
        for forecaster in forecasters:
            reports.append(batch.run_batch(
                store, forecaster, series_ids, task=task, horizon=horizon,
                quantiles=quantiles, windows=windows, step=step, backend=backend,
                workers=workers, ray_address=ray_address, budget_s=budget_s,
                global_sample=global_sample or batch.DEFAULT_GLOBAL_SAMPLE, models_dir=root,
                progress=_stage(progress, forecaster.alias),
            ))
        if path is not None:
            batch.export_run(store, [r.run_id for r in reports], path)
    return BatchResult(tuple(reports), path)


def _stage(progress: Callable[[str, int, int], None] | None,
           stage: str) -> Callable[[int, int], None] | None:
    if progress is None:
        return None
    return lambda done, total: progress(stage, done, total)


def batch_frame(db: str | Path, run_ids: Sequence[str]) -> pd.DataFrame:
    """The rows of batch runs in memory (for summaries of small runs).

    Raises:
        ConfigError: for an unknown run.
    """
    from prism import batch

    with open_store(db, must_exist=True) as store:
        frames = [batch.run_frame(store, r) for r in run_ids]
    return pd.concat(frames, ignore_index=True)


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


# -- REST API (issue #6): use cases on the service's open store and forecast server ----------
# The API holds one Store and one ForecastServer for its whole life; these functions take them
# (or a cursor of the store) instead of a path, and return plain values or dataclasses.

#: Upload file names keep letters, digits and ``._-`` (adapters read the VC, the format and
#: the compression from the name: ``earth_vc6YE_1min.csv.gz``).
_UPLOAD_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def start_forecast_server(store: Store, settings: Settings) -> ForecastServer:
    """A started :class:`~prism.serving.ForecastServer` on ``store`` with the settings'
    registry, default model, fit budget, workers, refit schedule and cache size.

    Raises:
        ConfigError: for a bad ``refit_every`` duration.
    """
    from prism.serving import ForecastServer

    return ForecastServer(
        store, models_dir=settings.models_dir, default_model=settings.default_model,
        fit_budget_s=settings.fit_budget_s, fit_workers=settings.fit_workers,
        fit_queue=settings.fit_queue, refit_every=settings.refit_every,
        cache_entries=settings.forecast_cache_entries, drift_window=settings.drift_window,
    ).start()


def series_records(
    store: Store, *, cluster: str | None = None, scope: str | None = None,
    metric: str | None = None,
) -> list[dict[str, Any]]:
    """The series catalogue as records (``series_id, cluster, scope, metric, freq, ...``)."""
    frame = store.list_series(cluster=cluster, scope=scope, metric=metric)
    frame = frame.astype(object).where(frame.notna(), None)
    return [{str(k): v for k, v in row.items()} for row in frame.to_dict("records")]


def series_points(
    store: Store, series_id: str, *, start: str | None = None, end: str | None = None,
    tail: int | None = None,
) -> list[dict[str, Any]]:
    """Values of one series (``ts, value, filled`` records) in ``[start, end)``.

    Raises:
        SeriesNotFound: for an unknown series.
        DataContractError: for an id that is not ``cluster/scope/metric``.
        ConfigError: for a ``start`` or ``end`` that is not a time.
    """
    split_series_id(series_id)
    lo, hi = _time_arg(start, "start"), _time_arg(end, "end")
    store.require_series([series_id])
    frame = store.fetch_df(
        """SELECT ts, value, filled FROM series_values WHERE series_id = ?
           AND (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)
           ORDER BY ts""",
        [series_id, lo, lo, hi, hi],
    )
    if tail:
        frame = frame.tail(tail)
    return [{"ts": pd.Timestamp(ts).to_pydatetime(), "value": float(v), "filled": bool(f)}
            for ts, v, f in zip(frame["ts"], frame["value"], frame["filled"], strict=True)]


def ingest_upload(
    server: ForecastServer,
    fmt: str,
    *,
    files: Sequence[tuple[str, bytes]] = (),
    records: Sequence[dict[str, Any]] | None = None,
    options: IngestOptions | None = None,
    freq: str | None = None,
    fill: str | None = None,
) -> IngestOutcome:
    """Ingest uploaded files, or JSON records, as ``prism ingest`` would (one transaction).

    Files keep their (sanitised) names, which some formats read; records become one CSV file
    with the records' keys as columns, so the same records are the same content: ingesting
    them again is a no-op.

    Args:
        server: the forecast server (its ingest drops stale cached forecasts).
        fmt: the ingest format.
        files: ``(name, bytes)`` of each uploaded file.
        records: rows as objects, for the CSV-like formats.
        options: adapter options.
        freq: bucket size of the derived series.
        fill: gap policy.

    Raises:
        ConfigError: for nothing to ingest, or a bad format, frequency or fill.
        IngestError: for bad content, naming the uploaded file, line and column.
    """
    import tempfile

    if not files and not records:
        raise ConfigError("nothing to ingest: upload a file (multipart field 'file' or a raw "
                          "CSV/Parquet body) or send JSON {\"records\": [...]}")
    with tempfile.TemporaryDirectory(prefix="prism-upload-") as tmp:
        paths: list[Path] = []
        names: dict[str, str] = {}
        for i, (name, data) in enumerate(files):
            clean = _upload_name(name, data, i)
            path = Path(tmp) / f"{i}" / clean
            path.parent.mkdir()
            path.write_bytes(data)
            paths.append(path)
            names[str(path)] = name or clean
        if records:
            frame = pd.DataFrame.from_records(list(records))
            path = Path(tmp) / "records.csv"
            frame.to_csv(path, index=False)
            paths.append(path)
            names[str(path)] = "records"
        try:
            outcome = server.ingest(paths, fmt, options or IngestOptions(), freq=freq,
                                    fill=fill)
        except IngestError as exc:
            if exc.path in names:  # name the upload, not the temporary file
                raise IngestError(exc.message, path=names[exc.path], line=exc.line,
                                  column=exc.column, fix=exc.fix) from exc
            raise
        except PrismError:
            raise
        except Exception as exc:  # an adapter tripped on input it does not expect
            logger.exception("ingest of an upload as %s failed", fmt)
            raise IngestError(f"cannot read the upload as {fmt}: {type(exc).__name__}: {exc}",
                              fix=f"check that the content is in the {fmt} format "
                              "(`prism formats` lists them)") from exc
    files_out = [replace(f, path=names.get(f.path, f.path)) for f in outcome.report.files]
    return replace(outcome, report=replace(outcome.report, files=files_out))


def _upload_name(name: str, data: bytes, index: int) -> str:
    clean = _UPLOAD_NAME.sub("_", Path(name or "").name).strip("._")
    if not clean:
        clean = f"upload{index}"
    if data[:4] == b"PAR1" and not clean.endswith((".parquet", ".pq")):
        clean += ".parquet"
    elif data[:2] == b"\x1f\x8b" and not clean.endswith(".gz"):
        clean += ".csv.gz" if not clean.endswith(".csv") else ".gz"
    elif "." not in clean:
        clean += ".csv"
    return clean


def serve_forecasts(
    server: ForecastServer,
    series_ids: Sequence[str],
    *,
    horizon: str,
    quantiles: Sequence[float],
    model: str | None = None,
    params: dict[str, str] | None = None,
) -> list[ServedForecast]:
    """Forecasts of stored series from the server (cached, or fitted on demand).

    Args:
        server: the forecast server.
        series_ids: one or more series.
        horizon: a duration or a number of steps.
        quantiles: quantile levels.
        model: a forecaster alias (default: the server's default model).
        params: hyperparameters as text (``use_rnn=false``), typed as their defaults.

    Raises:
        SeriesNotFound: for an unknown series.
        ConfigError: for a bad horizon, quantile, model or parameter.
        ModelNotReady: when a model is still being fitted or updated.
    """
    alias = model or server.spec().alias
    spec = server.spec(alias, _typed_params(alias, params or {}))
    if len(series_ids) == 1:
        return [server.forecast(series_ids[0], horizon=horizon, quantiles=quantiles,
                                spec=spec)]
    return server.forecast_many(series_ids, horizon=horizon, quantiles=quantiles, spec=spec)


def cached_forecast(
    server: ForecastServer,
    series_id: str,
    *,
    horizon: str,
    quantiles: Sequence[float],
    model: str | None = None,
    params: dict[str, str] | None = None,
) -> ServedForecast | None:
    """The forecast from the server's memory cache, or ``None``; never waits.

    For the API's event loop: a hit is answered there without a trip through the thread
    pool; a miss goes to :func:`serve_forecasts` on a worker thread. ``None`` also for any
    request :func:`serve_forecasts` would refuse (it then says why).
    """
    try:
        alias = model or server.spec().alias
        spec = server.spec(alias, _typed_params(alias, params or {}) if params else None)
    except PrismError:
        return None
    return server.cached(series_id, horizon=horizon, quantiles=quantiles, spec=spec)


def decomposition_summary(store: Store, series_id: str, *, top: int = 5) -> dict[str, Any]:
    """The decomposition summary of a stored series (periods, primitives, bursts, shifts).

    Raises:
        SeriesNotFound: for an unknown series.
        DataContractError: when the series is too short to decompose.
    """
    from prism.primitives.decompose import decompose

    cluster, _, metric = split_series_id(series_id)
    store.require_series([series_id])
    siblings = store.list_series(cluster=cluster, metric=metric)["series_id"].tolist()
    chosen = [series_id] + [s for s in siblings if s != series_id][: _DICTIONARY_SERIES - 1]
    result = decompose(store.load_panel(chosen), series_ids=[series_id])
    return result.series[series_id].summary(top=top)


# -- capacity planning and the capacity report (issue #7) ---------------------------------------
# One core for the CLI (a model fitted in memory on the store) and the API (the forecast
# server's cached models): each passes a function that forecasts the demand series; loading
# capacities, reservations and history, planning (prism.capacity) and rendering
# (prism.reports.capacity) are shared.

#: Demand metrics a capacity plan forecasts per scope, preferred first.
DEMAND_METRICS = ("gpu_demand", "gpus_in_use")
#: The history behind release-vs-lend advice and the report's charts.
_RECENT = pd.Timedelta(days=7)
#: Plans are capped at capacity only for GPUs in use (allocations cannot exceed what is
#: installed; demand with a queue can).
_ALLOCATED = "/gpus_in_use"
#: Models the report's planning backtest runs itself (cheap); others come from
#: ``prism backtest --planning``.
_REPORT_PLANNING_MODELS = ("naive", "seasonal_naive")

ForecastFn = Callable[[list[str], str, list[float]], tuple[pd.DataFrame, int]]


def demand_series(store: Store, cluster: str, *, scope: str | None = None) -> dict[str, str]:
    """Scope -> the demand series a capacity plan forecasts (``gpu_demand``, else
    ``gpus_in_use``) of a cluster.

    Raises:
        SeriesNotFound: for a cluster (or scope) without such series, naming the ones there are.
    """
    frame = store.list_series(cluster=cluster)
    if frame.empty:
        known = sorted(store.list_series()["cluster"].unique())
        raise SeriesNotFound(f"no series for cluster {cluster!r}; the store has "
                             f"{', '.join(map(str, known)) or 'no cluster'} "
                             "(`GET /v1/series` or `prism series list` lists them)")
    out: dict[str, str] = {}
    for metric in reversed(DEMAND_METRICS):  # the preferred metric overwrites
        for row in frame[frame["metric"] == metric].itertuples():
            if scope is None or row.scope == scope:
                out[str(row.scope)] = str(row.series_id)
    if not out:
        where = f"cluster {cluster!r}" + (f" scope {scope!r}" if scope else "")
        scopes = sorted(frame.loc[frame["metric"].isin(DEMAND_METRICS), "scope"].unique())
        hint = (f"; its scopes are {', '.join(map(str, scopes))}" if scopes else
                "; `GET /v1/series` lists the series there are")
        raise SeriesNotFound(f"no gpu_demand or gpus_in_use series for {where}{hint}")
    return dict(sorted(out.items()))


def _fitted_forecasts(store: Store, model: str, params: dict[str, str] | None) -> ForecastFn:
    """Forecasts by a model fitted now on the series (the CLI)."""
    from prism.forecasters import get_forecaster

    def run(series_ids: list[str], horizon: str, levels: list[float]
            ) -> tuple[pd.DataFrame, int]:
        forecaster = get_forecaster(model, **_typed_params(model, params or {}))
        forecaster.fit(store.load_panel(series_ids))
        return forecaster.predict(horizon, levels), int(forecaster.freq_s_)

    return run


def _served_forecasts(server: ForecastServer, model: str | None,
                      params: dict[str, str] | None) -> ForecastFn:
    """Forecasts by the forecast server's models (cached; the API)."""
    alias = model or server.spec().alias
    spec = server.spec(alias, _typed_params(alias, params or {}))

    def run(series_ids: list[str], horizon: str, levels: list[float]
            ) -> tuple[pd.DataFrame, int]:
        served = server.forecast_many(series_ids, horizon=horizon, quantiles=levels, spec=spec)
        return pd.concat([f.frame() for f in served], ignore_index=True), served[0].freq_s

    return run


def _capacities(store: Store, cluster: str, scopes: Sequence[str], at: pd.Timestamp,
                table: pd.DataFrame | None) -> tuple[dict[str, float], dict[str, str]]:
    """Scope -> GPUs installed at ``at`` and where that came from: a ``--capacity`` table,
    else the store's ``capacity`` rows (capacity-csv), else the ``gpu_capacity`` samples."""
    gpus: dict[str, float] = {}
    source: dict[str, str] = {}
    sampled = set(store.list_series(cluster=cluster, metric="gpu_capacity")["series_id"])
    for scope in scopes:
        value = store.capacity_at(cluster, scope, at)
        if value is not None:
            gpus[scope], source[scope] = value, "store"
            continue
        sid = f"{cluster}/{scope}/gpu_capacity"
        if sid in sampled:
            values = store.load_panel([sid], end=at)
            if values.empty:
                values = store.load_panel([sid])
            if not values.empty:
                gpus[scope], source[scope] = float(values["value"].iloc[-1]), "samples"
    if table is not None:
        mine = table[table["cluster"].isna() | (table["cluster"] == cluster)]
        for name, value in zip(mine["scope"].astype(str), mine["gpus"].astype(float),
                               strict=True):
            if name in scopes:
                gpus[name], source[name] = float(value), "file"
        other = sorted(set(mine["scope"]) - set(scopes))
        if other:
            logger.warning("capacity table: scope(s) %s have no demand series in %s",
                           ", ".join(map(str, other)), cluster)
    return gpus, source


def _check_reservations(store: Store, cluster: str, reservations: Sequence[Reservation],
                        path: str | None) -> None:
    """Every reservation of the cluster names one of its scopes (or ``all``).

    Raises:
        IngestError: naming the file, the line and the scope.
    """
    scopes = set(store.list_series(cluster=cluster)["scope"]) | {"all"}
    for r in reservations:
        if r.cluster not in (None, cluster) or r.scope in scopes:
            continue
        known = ", ".join(sorted(map(str, scopes)))
        if path is None:
            raise ConfigError(f"reservation of scope {r.scope!r}: cluster {cluster!r} has no "
                              f"such scope; its scopes: {known}")
        raise IngestError(f"cluster {cluster!r} has no scope {r.scope!r}", path=path,
                          line=r.line, column="scope", fix=f"use one of: {known}")


def _plan(
    store: Store,
    cluster: str,
    forecast: ForecastFn,
    *,
    scope: str | None,
    horizon: str,
    quantile: float,
    capacity_table: pd.DataFrame | None = None,
    reservations: Sequence[Reservation] = (),
    reservations_path: str | None = None,
    growth: float = 1.0,
    watts: Watts | None = None,
) -> CapacityPlan:
    """The one capacity use case: forecast the demand series, load capacities, plan."""
    from prism.capacity import DISTRIBUTION_LEVELS, plan_capacity

    if not 0 < quantile < 1:
        raise ConfigError(f"--quantile {quantile!r} must be between 0 and 1, e.g. 0.95")
    ids = demand_series(store, cluster, scope=scope)
    _check_reservations(store, cluster, reservations, reservations_path)
    levels = sorted({*DISTRIBUTION_LEVELS, float(quantile)})
    frame, freq_s = forecast(sorted(ids.values()), horizon, levels)
    at = pd.Timestamp(frame["ts"].min())
    gpus, source = _capacities(store, cluster, list(ids), at, capacity_table)
    recent = store.load_panel(list(ids.values()), start=at - _RECENT, end=at)
    peaks = recent.groupby("series_id")["value"].max()
    recent_peak = {scope_: float(peaks[sid]) for scope_, sid in ids.items() if sid in peaks}
    return plan_capacity(frame, gpus, quantile=float(quantile), freq_s=freq_s, watts=watts,
                         growth=growth, reservations=reservations, recent_peak=recent_peak,
                         capacity_source=source)


def plan_cluster_capacity(
    db: str | Path,
    cluster: str,
    *,
    scope: str | None = None,
    horizon: str = "1d",
    quantile: float = 0.95,
    model: str = "prism",
    params: dict[str, str] | None = None,
    capacity_file: str | Path | None = None,
    reservations_file: str | Path | None = None,
    growth: float = 1.0,
    watts: Watts | None = None,
) -> CapacityPlan:
    """Plan a cluster's capacity with a model fitted now on its demand series (the CLI).

    Args:
        db: the store.
        cluster: the cluster.
        scope: one scope only (default: every scope with a demand series).
        horizon: the window (a duration or steps).
        quantile: the planning quantile.
        model / params: the forecaster and its hyperparameters as text.
        capacity_file: a CSV ``scope, gpus [, cluster]`` that overrides stored capacities.
        reservations_file: a CSV of known future jobs ``start, end, gpus, scope``.
        growth: demand growth factor.
        watts: idle and busy draw per GPU.

    Returns:
        The :class:`~prism.capacity.CapacityPlan`.

    Raises:
        SeriesNotFound: for an unknown cluster or scope.
        IngestError: for a bad capacity or reservations file (file, line, field named).
        ConfigError: for a bad model, horizon, quantile or growth.
    """
    from prism.capacity import read_capacity_table, read_reservations

    table = read_capacity_table(capacity_file) if capacity_file else None
    reservations = read_reservations(reservations_file) if reservations_file else []
    with open_store(db, must_exist=True) as store:
        return _plan(store, cluster, _fitted_forecasts(store, model, params), scope=scope,
                     horizon=horizon, quantile=quantile, capacity_table=table,
                     reservations=reservations,
                     reservations_path=str(reservations_file) if reservations_file else None,
                     growth=growth, watts=watts)


def capacity_plan(
    server: ForecastServer,
    store: Store,
    cluster: str,
    *,
    scope: str | None = None,
    horizon: str = "1d",
    quantile: float = 0.95,
    model: str | None = None,
    params: dict[str, str] | None = None,
    reservations: Sequence[str] = (),
    growth: float = 1.0,
    watts: Watts | None = None,
) -> CapacityPlan:
    """Plan a cluster's capacity with the forecast server's models (the API).

    Args:
        server: the forecast server.
        store: a store cursor (capacities, history).
        cluster / scope / horizon / quantile / model / params / growth / watts: as
            :func:`plan_cluster_capacity`.
        reservations: known future jobs as ``SCOPE,START,END,GPUS`` texts.

    Raises:
        SeriesNotFound: for an unknown cluster or scope.
        ConfigError / ModelNotReady: for a bad input, or while a model is fitted.
    """
    from prism.capacity import parse_reservation

    parsed = [parse_reservation(r) for r in reservations]
    return _plan(store, cluster, _served_forecasts(server, model, params), scope=scope,
                 horizon=horizon, quantile=quantile, reservations=parsed, growth=growth,
                 watts=watts)


@dataclass(frozen=True)
class ReportResult:
    """Where the capacity report went.

    Attributes:
        html: the HTML file.
        pdf: the PDF file, if one was printed.
        clusters: the clusters in it.
    """

    html: Path
    pdf: Path | None
    clusters: tuple[str, ...]


def write_capacity_report(
    db: str | Path,
    output: str | Path,
    *,
    clusters: Sequence[str] | None = None,
    horizon: str = "1d",
    quantile: float = 0.95,
    model: str = "prism",
    params: dict[str, str] | None = None,
    capacity_file: str | Path | None = None,
    watts: Watts | None = None,
    pdf: bool = False,
) -> ReportResult:
    """Write the capacity report (one self-contained HTML file, and a PDF with ``pdf``).

    Args:
        db: the store.
        output: the ``.html`` file.
        clusters: clusters to report (default: every cluster with a demand series).
        horizon / quantile / model / params / capacity_file / watts: as
            :func:`plan_cluster_capacity`.
        pdf: also print ``output`` with a ``.pdf`` suffix (needs Chromium).

    Raises:
        ConfigError: for a bad output name or folder, or no Chromium with ``pdf``.
        SeriesNotFound / IngestError: as :func:`plan_cluster_capacity`.
    """
    from prism.capacity import read_capacity_table
    from prism.reports.capacity import render_html, write_pdf

    path = Path(output)
    if path.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"cannot write {str(path)!r}: use a .html file name")
    if not path.parent.exists():
        raise ConfigError(f"folder {str(path.parent)!r} does not exist; create it first")
    table = read_capacity_table(capacity_file) if capacity_file else None
    with open_store(db, must_exist=True) as store:
        data = _report_data(store, clusters, _fitted_forecasts(store, model, params),
                            horizon=horizon, quantile=quantile, model=model,
                            capacity_table=table, watts=watts)
    html = render_html(data)
    path.write_text(html, encoding="utf-8")
    printed = write_pdf(html, path.with_suffix(".pdf")) if pdf else None
    return ReportResult(path, printed, tuple(c.cluster for c in data.clusters))


def capacity_report_html(
    server: ForecastServer,
    store: Store,
    *,
    cluster: str | None = None,
    horizon: str = "1d",
    quantile: float = 0.95,
    model: str | None = None,
) -> str:
    """The capacity report as one HTML page, from the forecast server's models (the API).

    Raises:
        SeriesNotFound / ConfigError / ModelNotReady: as :func:`capacity_plan`.
    """
    from prism.reports.capacity import render_html

    data = _report_data(store, [cluster] if cluster else None,
                        _served_forecasts(server, model, None), horizon=horizon,
                        quantile=quantile, model=model or server.spec().key)
    return render_html(data)


def _report_data(
    store: Store,
    clusters: Sequence[str] | None,
    forecast: ForecastFn,
    *,
    horizon: str,
    quantile: float,
    model: str,
    capacity_table: pd.DataFrame | None = None,
    watts: Watts | None = None,
) -> ReportData:
    """Gather the report: per cluster the plan, histories, decompositions, planning."""
    from datetime import UTC, datetime

    from prism.reports.capacity import ClusterSection, ReportData

    if clusters is None:
        every = store.list_series()
        clusters = sorted(every.loc[every["metric"].isin(DEMAND_METRICS), "cluster"].unique())
    sections = []
    for cluster in clusters:
        plan = _plan(store, cluster, forecast, scope=None, horizon=horizon, quantile=quantile,
                     capacity_table=capacity_table, watts=watts)
        scopes = _scope_sections(store, plan)
        planning, by_series, note = _report_planning(store, plan)
        sections.append(ClusterSection(cluster=cluster, plan=plan, scopes=scopes,
                                       planning=planning, planning_by_series=by_series,
                                       planning_note=note))
    accuracy, accuracy_note = None, ""
    saved = store.latest_evaluation("accuracy")
    if saved is not None:
        run_id, created, params, accuracy = saved
        accuracy_note = f"{run_id}, saved {created:%Y-%m-%d %H:%M} UTC: {_describe(params)}"
    return ReportData(horizon=horizon, quantile=float(quantile), model=model,
                      generated_at=datetime.now(UTC).replace(tzinfo=None),
                      clusters=sections, accuracy=accuracy, accuracy_note=accuracy_note)


def _scope_sections(store: Store, plan: CapacityPlan) -> list[ScopeSection]:
    """History and decomposition of each planned scope (one dictionary per metric)."""
    from prism.errors import DataContractError
    from prism.primitives.decompose import decompose
    from prism.reports.capacity import ScopeSection

    start = pd.Timestamp(plan.forecast["ts"].min())
    span = max(3 * (plan.forecast.groupby("series_id").size().max() * plan.freq_s), 86_400 * 3)
    ids = [r.series_id for r in plan.rows]
    history = store.load_panel(ids, start=start - pd.Timedelta(seconds=span), end=start)
    decompositions: dict[str, Any] = {}
    notes: dict[str, str] = {}
    by_metric: dict[str, list[str]] = {}
    for sid in ids:
        by_metric.setdefault(split_series_id(sid)[2], []).append(sid)
    for metric, wanted in by_metric.items():
        siblings = store.list_series(cluster=plan.cluster, metric=metric)["series_id"].tolist()
        chosen = wanted + [s for s in siblings if s not in wanted]
        chosen = chosen[:max(_DICTIONARY_SERIES, len(wanted))]
        try:
            result = decompose(store.load_panel(chosen), series_ids=wanted)
            decompositions.update(result.series)
        except DataContractError as exc:
            for sid in wanted:
                notes[sid] = f"no primitive breakdown: {exc}"
    out = []
    for row in plan.rows:
        mine = history[history["series_id"] == row.series_id][["ts", "value"]]
        out.append(ScopeSection(scope=row.scope, series_id=row.series_id,
                                history=mine.reset_index(drop=True),
                                decomposition=decompositions.get(row.series_id),
                                note=notes.get(row.series_id, "")))
    return out


def _report_planning(store: Store, plan: CapacityPlan
                     ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """The planning backtest the report shows for a cluster: the references and the cheap
    baselines run now on the planned series, plus the last saved ``prism backtest
    --planning`` rows of the cluster's series."""
    from prism.evaluation.planning import aggregate_plans, planning_backtest
    from prism.forecasters import get_forecaster

    ids = [r.series_id for r in plan.rows]
    panel = store.load_panel(ids)
    day = 86_400
    days_there = int(panel.groupby("series_id").size().min() * plan.freq_s // day)
    days = min(7, days_there - 2)  # two days before the replay: the static peak, yesterday
    capacity = {r.series_id: r.capacity for r in plan.rows
                if r.capacity is not None and r.series_id.endswith(_ALLOCATED)}
    parts, notes = [], []
    if days >= 1 and day % plan.freq_s == 0:
        blocks = [b for b in ("1d", "1h") if 3600 % plan.freq_s == 0 or b == "1d"]
        forecasters = {m: get_forecaster(m) for m in _REPORT_PLANNING_MODELS}
        try:
            result = planning_backtest(forecasters, panel, days=days, horizon="1d",
                                       quantiles=(0.9, 0.95, 0.99), blocks=blocks,
                                       capacity=capacity)
            parts.append(result.by_series)
            notes.append(f"The last {days} day(s) replayed now on the planned series with "
                         f"{', '.join(_REPORT_PLANNING_MODELS)} (day-ahead, one level per "
                         "block; GPUs in use capped at capacity).")
        except PrismError as exc:
            notes.append(f"no planning backtest of the planned series: {exc}")
    else:
        notes.append("the series are too short (or not at a step dividing a day) for a "
                     "day-ahead planning backtest")
    saved = store.latest_evaluation("planning")
    if saved is not None:
        run_id, created, params, table = saved
        mine = table[table["series_id"].map(
            lambda s: str(s).split("/")[0] == plan.cluster)] if "series_id" in table else table
        if not mine.empty:
            parts.append(mine)
            notes.append(f"Plus {run_id} (prism backtest --planning, saved "
                         f"{created:%Y-%m-%d %H:%M} UTC: {_describe(params)}).")
    if not parts:
        return None, None, " ".join(notes)
    by_series = pd.concat(parts, ignore_index=True)
    by_series["metric"] = by_series["series_id"].map(lambda s: split_series_id(str(s))[2])
    by_series = by_series.drop_duplicates(["series_id", "plan", "block"], keep="last")
    table = aggregate_plans(by_series, keys=("metric", "plan", "model", "quantile", "block"))
    return table, by_series, " ".join(notes)


def _describe(params: str) -> str:
    import json

    try:
        values = json.loads(params)
    except ValueError:
        return params
    if not isinstance(values, dict):
        return str(values)
    return ", ".join(f"{k} {v}" for k, v in values.items())


def save_evaluation(db: str | Path, kind: str, table: pd.DataFrame,
                    params: dict[str, Any]) -> str:
    """Keep an evaluation table in the store for the capacity report (``accuracy``:
    ``prism backtest --summary``; ``planning``: ``prism backtest --planning``).

    Returns:
        The run id.
    """
    import json

    with open_store(db, must_exist=True) as store:
        return store.save_evaluation(kind, table, json.dumps(params, default=str))


def planning_from_backtest(
    db: str | Path,
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    horizon: str,
    quantiles: Sequence[float],
) -> tuple[pd.DataFrame, str]:
    """Score a backtest frame as a planning backtest (capped at the stored capacities) and
    save it for the report.

    Args:
        db: the store (capacities; the result is saved there).
        frame: the backtest frame.
        panel: the panel it ran on.
        horizon: its window.
        quantiles: provisioning quantiles (columns of the frame).

    Returns:
        ``(table, run_id)``: the totals per plan and block, and the saved run's id.

    Raises:
        DataContractError / ConfigError: as :func:`prism.evaluation.planning.planning_table`.
    """
    import json

    from prism.evaluation.planning import planning_table
    from prism.forecasters.base import horizon_steps
    from prism.schema import panel_freq

    freq_s = panel_freq(panel, purpose="be planned together")
    h = horizon_steps(horizon, freq_s)
    blocks = [b for b, s in (("1d", 86_400), ("1h", 3_600))
              if s % freq_s == 0 and h % (s // freq_s) == 0]
    if not blocks:
        blocks = [horizon]
    capacity: dict[str, float] = {}
    with open_store(db, must_exist=True) as store:
        at = pd.Timestamp(frame["cutoff"].min())
        for sid in sorted(frame["series_id"].unique()):
            cluster, scope, _ = split_series_id(str(sid))
            if not str(sid).endswith(_ALLOCATED):
                continue  # demand with a queue can exceed capacity: never capped
            gpus, _ = _capacities(store, cluster, [scope], at, None)
            if scope in gpus:
                capacity[str(sid)] = gpus[scope]
        table, by_series = planning_table(frame, panel, horizon=horizon, quantiles=quantiles,
                                          blocks=blocks, capacity=capacity)
        run_id = store.save_evaluation("planning", by_series, json.dumps({
            "models": ",".join(map(str, pd.unique(frame["model"]))), "horizon": horizon,
            "windows": int(frame["cutoff"].nunique()), "series": len(by_series["series_id"]
                                                                     .unique())}))
    return table, run_id


def server_status(server: ForecastServer) -> dict[str, int] | None:
    """What the forecast server holds (series, models, jobs, cache), or ``None`` when it is
    not serving (starting or stopping)."""
    return server.status() if server.ready else None
