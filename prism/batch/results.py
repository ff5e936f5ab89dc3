"""Where a run's results go, and how they come back.

:class:`_Sink` writes each finished chunk to the store (``batch_forecasts`` and
``batch_series``, one transaction per chunk) and, when the run keeps its models, saves the
chunk's fitted models to the registry as one model; :func:`iter_run_frames`,
:func:`run_frame` and :func:`export_run` read a run back, block by block.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from prism.batch.work import _Block, _Outcome, frame_rows
from prism.errors import ConfigError
from prism.evaluation.backtest import CUTOFF
from prism.forecasters.base import quantile_column
from prism.forecasters.compose import SeriesModels
from prism.registry import save_model
from prism.schema import SERIES_ID, TS, VALUE

if TYPE_CHECKING:
    from prism.store import Store

logger = logging.getLogger(__name__)


# -- writing finished chunks --------------------------------------------------------------------
class _Sink:
    """Writes finished chunks to the store, one transaction each, and keeps the counts;
    saves a chunk's fitted models as one registry model (with ``models_dir``)."""

    def __init__(self, store: Store, run_id: str, alias: str,
                 models_dir: Path | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.alias = alias
        self.models_dir = models_dir
        self.counts = {"ok": 0, "fallback": 0, "skipped": 0, "failed": 0}
        self.rows = 0
        self.notes: list[tuple[str, str, str]] = []
        self.saved = 0
        self.model_ids: list[str] = []

    def write(self, outcomes: Sequence[_Outcome]) -> None:
        fitted = {o.series_id: o.model for o in outcomes
                  if o.status == "ok" and o.model is not None}
        if self.models_dir is not None and fitted:
            # saved before the results are written: a run whose rows say "ok" has its models
            record = save_model(SeriesModels.join(fitted), self.models_dir)
            self.model_ids.append(record.model_id)
            self.saved += len(fitted)
        # one table per chunk: its frames concatenated once (the per-series path) and the
        # rows of its panel groups (each built once, from arrays)
        frames = [o.frame for o in outcomes if o.block is None and o.n_rows]
        members: dict[int, tuple[_Block, list[str]]] = {}
        for o in outcomes:
            if o.block is not None:
                members.setdefault(id(o.block), (o.block, []))[1].append(o.series_id)
        tables = [block.rows(keep) for block, keep in members.values()]
        if frames:
            tables.append(frame_rows(pd.concat(frames, ignore_index=True)))
        table = pa.concat_tables(tables) if tables else None
        series = pd.DataFrame({
            SERIES_ID: [o.series_id for o in outcomes],
            "status": [o.status for o in outcomes],
            "fallback_reason": [o.reason for o in outcomes],
            "seconds": [o.seconds for o in outcomes],
            "n_rows": [o.n_rows for o in outcomes],
        })
        self.store.add_batch_results(self.run_id, table, series)
        for o in outcomes:
            self.counts[o.status] += 1
            if o.status != "ok":
                level = logging.INFO if o.status == "skipped" else logging.WARNING
                logger.log(level, "%s (%s): %s: %s", o.series_id, self.alias, o.status, o.reason)
                if len(self.notes) < 20:
                    self.notes.append((o.series_id, o.status, o.reason or ""))
        self.rows += 0 if table is None else table.num_rows


# -- reading runs back --------------------------------------------------------------------------
def iter_run_frames(store: Store, run_id: str, *, rows: int = 200_000) -> Iterator[pd.DataFrame]:
    """A run's forecasts as the forecast contract (backtests: with ``cutoff`` and
    ``value``), ``rows`` at a time, sorted by series, cutoff and time.

    Raises:
        ConfigError: for an unknown run id.
    """
    runs = store.batch_runs(run_id)
    if runs.empty:
        raise ConfigError(f"no batch run {run_id!r} in the store")
    levels = [float(q) for q in runs["quantiles"].iloc[0]]
    backtest = runs["task"].iloc[0] == "backtest"
    qcols = [quantile_column(q) for q in levels]
    for table in store.iter_batch_forecasts(run_id, rows=rows):
        flat = table.column("quantiles").combine_chunks().flatten().to_numpy(
            zero_copy_only=False)
        frame = pd.DataFrame({
            SERIES_ID: table.column(SERIES_ID).to_numpy(zero_copy_only=False),
            TS: table.column(TS).to_pandas().astype("datetime64[ns]").to_numpy(),
        })
        if backtest:
            frame[CUTOFF] = table.column(CUTOFF).to_pandas().astype("datetime64[ns]").to_numpy()
        frame["model"] = table.column("model").to_numpy(zero_copy_only=False)
        frame["mean"] = table.column("mean").to_numpy(zero_copy_only=False)
        values = flat.reshape(len(frame), len(qcols)) if len(qcols) else np.zeros((len(frame), 0))
        for j, col in enumerate(qcols):
            frame[col] = values[:, j]
        if backtest:
            frame[VALUE] = table.column(VALUE).to_numpy(zero_copy_only=False)
        yield frame


def run_frame(store: Store, run_id: str) -> pd.DataFrame:
    """A whole run in memory (for tests and small runs; :func:`export_run` streams)."""
    frames = list(iter_run_frames(store, run_id))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def export_run(store: Store, run_ids: str | Sequence[str], output: str | Path) -> Path:
    """Write runs to ``.csv``, ``.parquet`` or ``.json`` (records), block by block.

    Rows come in a fixed order (run, series, cutoff, time), so two runs that computed the
    same forecasts write the same bytes. JSON times are UTC with ``Z``, as every JSON the CLI
    and the API write (:func:`prism.frames.json_records`).

    Raises:
        ConfigError: for another extension, a missing folder or an unknown run.
    """
    path = Path(output)
    if path.suffix not in (".csv", ".parquet", ".json"):
        raise ConfigError(f"cannot write {str(path)!r}: use a .csv, .parquet or .json file name")
    if not path.parent.exists():
        raise ConfigError(f"folder {str(path.parent)!r} does not exist; create it first")
    # the one writer of JSON times (a leaf module: stdlib and prism.errors only)
    from prism.frames import json_records

    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    unknown = [r for r in ids if store.batch_runs(r).empty]
    if unknown:
        raise ConfigError(f"no batch run {unknown[0]!r} in the store")
    writer: pq.ParquetWriter | None = None
    first = True
    with path.open("w" if path.suffix != ".parquet" else "wb") as handle:
        if path.suffix == ".json":
            handle.write("[")
        for run_id in ids:
            for frame in iter_run_frames(store, run_id):
                if path.suffix == ".csv":
                    frame.to_csv(handle, index=False, header=first,
                                 date_format="%Y-%m-%dT%H:%M:%S")
                elif path.suffix == ".json":
                    text = json_records(frame, indent=1)
                    body = text.strip()[1:-1].strip()
                    if body:
                        handle.write(("" if first else ",") + "\n " + body)
                else:
                    table = pa.Table.from_pandas(frame, preserve_index=False)
                    if writer is None:
                        writer = pq.ParquetWriter(handle, table.schema)
                    writer.write_table(table.cast(writer.schema))
                first = False
        if path.suffix == ".json":
            handle.write("\n]\n")
        if writer is not None:
            writer.close()
    if path.suffix == ".parquet" and writer is None:  # an empty run: an empty file that reads
        pd.DataFrame().to_parquet(path, index=False)
    return path
