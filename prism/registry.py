"""The model registry: fitted forecasters saved with their metadata, loaded back bit for bit.

Layout under the registry root (``--models-dir`` / ``PRISM_MODELS_DIR``, default ``./models``)::

    <root>/<alias>/<model_id>/model.pkl     the fitted forecaster (pickle)
    <root>/<alias>/<model_id>/meta.json     alias, params, data range, training metrics,
                                            library versions, sha256 of model.pkl

A model id is ``<alias>-<UTC time>-<8 hex digits>``; ``load_model(root, "prism")`` loads the
newest model of an alias, and :func:`newest_for_series` finds the newest model of an alias
fitted on each series (a batch refit saves one model per chunk of series).

**Per-series models.** A :class:`~prism.forecasters.compose.SeriesModels` (forecasters fitted
on separate series, held as one) is saved and served like any model: its ``meta.json`` names
the alias and hyperparameters of the models it holds.

**Pruning.** :func:`prune_models` removes the models that newer ones replace: each series
keeps the ``keep`` newest models of each alias fitted on it (the registry's notion of "the
model of a series": :func:`newest_for_series`), so the newest is never removed.

Loading checks the sha256 of ``model.pkl`` against ``meta.json``, so a truncated or altered
file is refused. Pickle runs code when it loads: load models only from a registry you trust
(the checksum guards against corruption, not against an attacker who can write both files).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import platform
import secrets
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from prism import __version__
from prism.errors import ConfigError
from prism.forecasters.base import BaseForecaster

# SeriesModels is named here too: batch refits pickled before it moved to compose.py refer to
# prism.registry.SeriesModels.
from prism.forecasters.compose import SeriesModels

logger = logging.getLogger(__name__)

FORMAT = "prism.model"
FORMAT_VERSION = 1
_LIBRARIES = ("numpy", "pandas", "scipy", "scikit-learn", "statsmodels", "torch", "duckdb")


@dataclass(frozen=True)
class ModelRecord:
    """What the registry knows of one saved model (``meta.json``).

    Attributes:
        model_id: ``<alias>-<time>-<hex>``.
        alias: the forecaster's alias.
        params: its hyperparameters.
        series_ids: the series it was fitted on.
        freq_s: their step in seconds.
        data_start / data_end: first and last timestamp of the data (ISO 8601).
        n_points: values it was fitted on, all series.
        version: the model's ``version_`` (1 after fit, +1 per update).
        created: when it was saved (ISO 8601, UTC).
        metrics: training metrics (calibration-tail errors; see :func:`training_metrics`).
        libraries: versions of Python, PRISM and the numeric libraries.
        sha256: checksum of ``model.pkl``.
        path: the model's folder.
    """

    model_id: str
    alias: str
    params: dict[str, Any]
    series_ids: list[str]
    freq_s: int
    data_start: str
    data_end: str
    n_points: int
    version: int
    created: str
    metrics: dict[str, float]
    libraries: dict[str, str]
    sha256: str
    path: str = field(default="", compare=False)


def _spec_of(model: BaseForecaster) -> BaseForecaster:
    """The forecaster whose alias and hyperparameters a saved model is known by."""
    return model.model if isinstance(model, SeriesModels) else model


def training_metrics(model: BaseForecaster) -> dict[str, float]:
    """Errors on the calibration tail (out of sample: the parameters never saw it).

    Returns:
        ``calibration_mae_1step`` (mean absolute one-step error over series and origins),
        ``series_calibrated`` and ``series_in_fallback``.
    """
    errors = [np.abs(c.one_step) for c in model.calibration_.values() if len(c.one_step)]
    pooled = np.concatenate(errors) if errors else np.zeros(0)
    return {
        "calibration_mae_1step": float(pooled.mean()) if len(pooled) else float("nan"),
        "series_calibrated": float(len(model.calibration_)),
        "series_in_fallback": float(len(model.fallback_)),
    }


def _libraries() -> dict[str, str]:
    out = {"python": platform.python_version(), "prism": __version__}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_model(model: BaseForecaster, root: str | Path) -> ModelRecord:
    """Save a fitted forecaster and its metadata under ``root``.

    Raises:
        NotFittedError: for a model that was never fitted.
        ConfigError: when ``root`` cannot be written.
    """
    model._check_fitted()
    root = Path(root)
    created = datetime.now(UTC)
    model_id = f"{model.alias}-{created:%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"
    folder = root / model.alias / model_id
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise ConfigError(f"cannot create {str(folder)!r} in the model registry: {exc}; "
                          "pass --models-dir or PRISM_MODELS_DIR") from exc
    _atomic_write(folder / "model.pkl", pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))
    starts = [model.first_ts_[s] for s in model.series_ids_]
    ends = [model.last_ts_[s] for s in model.series_ids_]
    record = ModelRecord(
        model_id=model_id,
        alias=model.alias,
        params={k: _jsonable(v) for k, v in _spec_of(model).get_params().items()},
        series_ids=list(model.series_ids_),
        freq_s=int(model.freq_s_),
        data_start=min(starts).isoformat(),
        data_end=max(ends).isoformat(),
        n_points=int(sum(len(v) for v in model.history_.values())),
        version=int(model.version_),
        # to the microsecond: two models saved within one second (a refit just after a fit)
        # must still sort newest first
        created=created.isoformat(timespec="microseconds"),
        metrics=training_metrics(model),
        libraries=_libraries(),
        sha256=_sha256(folder / "model.pkl"),
    )
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, **asdict(record)}
    meta.pop("path")
    _atomic_write(folder / "meta.json", (json.dumps(meta, indent=2) + "\n").encode())
    logger.info("saved %s (%d series) to %s", model_id, len(model.series_ids_), folder)
    return ModelRecord(**{**asdict(record), "path": str(folder)})


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _read_meta(folder: Path) -> ModelRecord:
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model {folder.name!r} has no readable meta.json ({exc}); "
                          "save it again") from exc
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"{folder / 'meta.json'} is not a PRISM model of format version "
                          f"{FORMAT_VERSION}; save the model again with this version")
    given = {k: v for k, v in meta.items() if k not in ("format", "format_version", "path")}
    known = {f.name for f in fields(ModelRecord)}
    odd = sorted(set(given) - known)
    missing = sorted(known - set(given) - {"path"})
    if odd or missing:
        raise ConfigError(f"{folder / 'meta.json'} does not describe a PRISM model (unexpected "
                          f"keys: {odd or 'none'}; missing: {missing or 'none'}); save the "
                          "model again or remove its folder")
    return ModelRecord(**given, path=str(folder))


def list_models(root: str | Path, *, alias: str | None = None) -> list[ModelRecord]:
    """Every model in the registry (of one alias), newest first; unreadable ones skipped."""
    root = Path(root)
    if not root.exists():
        return []
    records = []
    for meta in root.glob("*/*/meta.json"):
        if alias and meta.parent.parent.name != alias:
            continue
        try:
            records.append(_read_meta(meta.parent))
        except ConfigError as exc:
            logger.warning("skipping %s: %s", meta.parent, exc)
    return sorted(records, key=lambda r: (_when(r.created), r.model_id), reverse=True)


def _when(created: str) -> datetime:
    """A record's ``created`` as a time (saved to the second before, to the microsecond now:
    compared as text, ``...:14+00:00`` and ``...:14.5+00:00`` sort the wrong way)."""
    try:
        return datetime.fromisoformat(created)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def find_model(root: str | Path, name: str) -> ModelRecord:
    """The model with id ``name``, or the newest model of alias ``name``.

    Raises:
        ConfigError: when nothing matches (listing what there is).
    """
    records = list_models(root)
    for record in records:
        if record.model_id == name:
            return record
    newest = [r for r in records if r.alias == name]
    if newest:
        return newest[0]
    known = ", ".join(r.model_id for r in records[:5]) or "none"
    raise ConfigError(f"no model {name!r} in the registry at {str(root)!r} (newest: {known}); "
                      "fit and save one with `prism forecast ... --save`")


def newest_for_series(root: str | Path, alias: str) -> dict[str, ModelRecord]:
    """Series id -> the newest model of ``alias`` fitted on it (any hyperparameters)."""
    out: dict[str, ModelRecord] = {}
    for record in list_models(root, alias=alias):  # newest first
        for sid in record.series_ids:
            out.setdefault(sid, record)
    return out


def load_model(root: str | Path, name: str) -> tuple[BaseForecaster, ModelRecord]:
    """Load a saved model (by id, or the newest of an alias) after checking its checksum.

    Raises:
        ConfigError: for an unknown model, or a file whose checksum does not match.
    """
    record = find_model(root, name)
    path = Path(record.path) / "model.pkl"
    if not path.exists() or _sha256(path) != record.sha256:
        raise ConfigError(f"{path} is missing or does not match the sha256 in meta.json "
                          "(truncated or altered); save the model again")
    with path.open("rb") as fh:
        model = pickle.load(fh)  # noqa: S301 - trusted registry, checksum verified above
    if not isinstance(model, BaseForecaster):
        raise ConfigError(f"{path} does not hold a PRISM forecaster")
    return model, record


def prune_models(root: str | Path, *, keep: int = 1, dry_run: bool = False
                 ) -> list[ModelRecord]:
    """Remove the models that newer models of the same alias replace on all their series.

    A model stays while it is one of the ``keep`` newest models of its alias (any
    hyperparameters) fitted on any one of its series; the newest model of each series and
    alias always stays. Folders that are not readable models are left alone.

    Args:
        root: the registry.
        keep: models kept per series and alias.
        dry_run: remove nothing, only say what would be removed.

    Returns:
        The models removed (or that would be), newest first.

    Raises:
        ConfigError: for ``keep`` below 1, or a model folder that cannot be removed.
    """
    if keep < 1:
        raise ConfigError(f"keep={keep}: keep at least the newest model of each series "
                          "(keep=1)")
    kept: dict[tuple[str, str], int] = {}
    removed: list[ModelRecord] = []
    for record in list_models(root):  # newest first
        counts = [kept.get((record.alias, sid), 0) for sid in record.series_ids]
        if counts and min(counts) >= keep:
            removed.append(record)
            continue
        for sid in record.series_ids:
            kept[(record.alias, sid)] = kept.get((record.alias, sid), 0) + 1
    if not dry_run:
        for record in removed:
            _remove(Path(root), record)
    return removed


def _remove(root: Path, record: ModelRecord) -> None:
    """Delete a model's folder: renamed away first, so that no reader sees half of it."""
    folder = Path(record.path)
    if folder.resolve().parent.parent != root.resolve():
        raise ConfigError(f"{folder} is not a model folder of the registry at {str(root)!r}")
    doomed = folder.with_name(f".pruned-{folder.name}")
    try:
        os.replace(folder, doomed)
        shutil.rmtree(doomed)
    except OSError as exc:
        raise ConfigError(f"cannot remove {str(folder)!r} from the model registry: {exc}; "
                          "check its permissions") from exc
    logger.info("pruned %s (%s)", record.model_id, folder)
