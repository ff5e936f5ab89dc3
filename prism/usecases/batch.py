"""Batch jobs: forecast, backtest or refit many stored series on processes or Ray.

``prism forecast|backtest|refit`` with a batch option (``--backend``, ``--workers``,
``--budget``, ...): :func:`run_batch_job` runs one batch run of the engine
(:func:`prism.batch.run_batch`) per model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prism.errors import ConfigError
from prism.forecasters.params import typed_params
from prism.progress import Progress
from prism.usecases.files import FRAME_SUFFIXES, output_path

if TYPE_CHECKING:
    from prism.batch import BatchReport
    from prism.store import Store


@dataclass(frozen=True)
class BatchJob:
    """What a batch forecast, backtest or refit did (one run per model).

    Attributes:
        reports: each run's :class:`prism.batch.BatchReport`, in the order of the models.
        output: the file the runs were written to, if any.
    """

    reports: tuple[BatchReport, ...]
    output: Path | None

    @property
    def run_ids(self) -> list[str]:
        """The runs' ids, in the order of the models."""
        return [r.run_id for r in self.reports]


def run_batch_job(
    store: Store,
    series_ids: Sequence[str] | None,
    *,
    models: Sequence[str],
    task: str = "forecast",
    params: dict[str, str] | None = None,
    model_params: Mapping[str, Mapping[str, str]] | None = None,
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
    progress: Progress | None = None,
) -> BatchJob:
    """Forecast, backtest or refit stored series on worker processes or a Ray cluster.

    Each model is one run of :func:`prism.batch.run_batch`: results stream into the store's
    ``batch_forecasts`` and ``batch_series`` tables under the run's id, then (with
    ``output``) into the file, block by block, so memory stays flat however many series. A
    refit (or a forecast with ``save``) saves the fitted models in the registry, one model
    per chunk of series, where ``prism serve`` and ``--from-model ALIAS`` find them.

    Args:
        store: the store (the results are written to it).
        series_ids: series to work on (all when ``None``).
        models: forecaster aliases (one run each).
        task: ``forecast``, ``backtest`` or ``refit`` (fit and save, forecast nothing).
        params: hyperparameters as text (``season=1w``), for a single model.
        model_params: hyperparameters as text per model alias, for any of ``models``
            (``prism backtest --param seasonal_naive.season=1w``).
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
        The :class:`BatchJob`.

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
    path = output_path(output, FRAME_SUFFIXES) if output is not None else None
    given = model_params or {}
    unknown = sorted(set(given) - set(models))
    if unknown:
        raise ConfigError(f"parameters for {', '.join(unknown)}, which is not among the models "
                          f"({', '.join(models)})")
    forecasters = [get_forecaster(m, **typed_params(m, {**(params or {}), **given.get(m, {})}))
                   for m in models]
    root: Path | None = None
    if save or task == "refit":
        root = Path(models_dir) if models_dir is not None else get_settings().models_dir
    reports = []
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
    return BatchJob(tuple(reports), path)


def _stage(progress: Progress | None,
           stage: str) -> Callable[[int, int], None] | None:
    if progress is None:
        return None
    return lambda done, total: progress(stage, done, total)
