"""Ingestion: the formats, files into the store, uploads through the running hub.

``prism formats`` and ``prism ingest``; ``POST /v1/ingest``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from prism.errors import ConfigError, DataContractError, IngestError, PrismError
from prism.ingest import adapters
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import IngestReport, Progress, ingest

if TYPE_CHECKING:
    from prism.hub import ForecastHub, IngestOutcome
    from prism.store import Store

logger = logging.getLogger(__name__)

#: Upload file names keep letters, digits and ``._-`` (adapters read the VC, the format and
#: the compression from the name: ``earth_vc6YE_1min.csv.gz``).
_UPLOAD_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def list_formats() -> list[tuple[str, str, str]]:
    """``(name, kind, description)`` of every ingestion format."""
    return [(a.name, a.kind, a.description) for _, a in sorted(adapters().items())]


def ingest_files(
    store: Store,
    paths: Sequence[str | Path],
    fmt: str,
    options: IngestOptions,
    *,
    freq: str | None = None,
    fill: str | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest files into the store (one transaction) and re-derive their series."""
    return ingest(store, paths, fmt, options, freq=freq, fill=fill, progress=progress)


def ingest_prometheus(
    store: Store,
    url: str,
    query: str,
    *,
    start: str,
    end: str,
    step: str = "1m",
    options: IngestOptions | None = None,
    token: str | None = None,
    freq: str | None = None,
    fill: str | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Pull a PromQL range query over the Prometheus HTTP API and ingest it (format
    ``prometheus``, one transaction; samples the store holds already are kept, so a re-pull
    adds nothing). See :mod:`prism.ingest.prometheus_pull`.

    Args:
        store: the store.
        url: the server's base URL, e.g. ``http://prometheus:9090``.
        query: the PromQL expression.
        start: the first time (ISO 8601, Unix seconds, ``now`` or ``now-2d``).
        end: the last time, written alike.
        step: the resolution, e.g. ``10s`` or ``1m``.
        options: adapter options; ``--option`` keys ``token``, ``timeout`` and ``max_points``
            are the pull's own (never part of the content hash or ``ingests.options``).
        token: the bearer token when ``--option token`` gives none (``PRISM_PROMETHEUS_TOKEN``).
        freq: bucket size of the derived series.
        fill: gap policy.
        progress: called with (stage, done, total); stage ``pull`` counts chunks.

    Returns:
        The ingest report; its one file is the request as a URL (without the token).

    Raises:
        ConfigError: for bad arguments or options (before any request).
        IngestError: for a failed request (naming the URL and the chunk's time range) or bad
            samples; nothing is stored then.
    """
    from prism.ingest.prometheus_pull import pull, range_query, split_options

    own, adapter_options = split_options(options or IngestOptions())
    request = range_query(url, query, start=start, end=end, step=step,
                          token=own.get("token") or token, timeout=own.get("timeout"),
                          max_points=own.get("max_points"))
    return pull(store, request, adapter_options, freq=freq, fill=fill, progress=progress)


def ingest_upload(
    hub: ForecastHub,
    fmt: str,
    *,
    files: Sequence[tuple[str, bytes]] = (),
    records: Sequence[dict[str, Any]] | None = None,
    options: IngestOptions | None = None,
    freq: str | None = None,
    fill: str | None = None,
) -> IngestOutcome:
    """Ingest uploaded files, or JSON records, as ``prism ingest`` would (one transaction),
    through the hub (which drops the stale cached forecasts and scores the served ones).

    Files keep their (sanitised) names, which some formats read; records become one CSV file
    with the records' keys as columns, so the same records are the same content: ingesting
    them again is a no-op.

    Args:
        hub: the running forecast hub (it holds the store).
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
            outcome = hub.ingest(paths, fmt, options or IngestOptions(), freq=freq, fill=fill)
        except IngestError as exc:  # name the upload, not the server's temporary file
            raise IngestError(
                _uploaded(exc.message, names, tmp), path=names.get(exc.path or "", exc.path),
                line=exc.line, column=exc.column,
                fix=exc.fix and _uploaded(exc.fix, names, tmp)) from exc
        except (ConfigError, DataContractError) as exc:
            if tmp not in str(exc):
                raise
            raise type(exc)(_uploaded(str(exc), names, tmp)) from exc
        except PrismError:
            raise
        except Exception as exc:  # an adapter tripped on input it does not expect
            logger.exception("ingest of an upload as %s failed", fmt)
            raise IngestError(
                _uploaded(f"cannot read the upload as {fmt}: {type(exc).__name__}: {exc}",
                          names, tmp),
                fix=f"check that the content is in the {fmt} format (`prism formats` lists "
                "them)") from exc
    files_out = [replace(f, path=names.get(f.path, f.path)) for f in outcome.report.files]
    return replace(outcome, report=replace(outcome.report, files=files_out))


def _uploaded(text: str, names: dict[str, str], tmp: str) -> str:
    """``text`` with the temporary paths of the uploads replaced by their uploaded names (a
    reader's own message, e.g. pyarrow's, quotes the path it opened)."""
    for path in sorted(names, key=len, reverse=True):
        text = text.replace(path, names[path])
    return text.replace(tmp, "upload")


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
