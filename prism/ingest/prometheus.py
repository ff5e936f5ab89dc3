"""``prometheus``: the JSON body of a Prometheus range query onto the ``samples`` table.

Save the response of ``GET /api/v1/query_range`` (``/api/v1/query`` works too) as it comes::

    curl -s 'http://prometheus:9090/api/v1/query_range' --data-urlencode \\
         'query=DCGM_FI_DEV_GPU_UTIL' -d start=2026-01-05T00:00:00Z \\
         -d end=2026-01-06T00:00:00Z -d step=60 > util.json

The body is ``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric":
{labels}, "values": [[unix_seconds, "value"], ...]}, ...]}}`` (``"vector"`` results, one
``"value"`` per series, are accepted too). ``"status": "error"`` fails the ingest, quoting
Prometheus' ``errorType`` and ``error``; ``warnings`` are logged. Timestamps are Unix seconds
(UTC; ``--tz`` does not apply), kept to the millisecond as Prometheus does.

Each result becomes samples of the series ``{cluster}/{scope}/{metric}``:

* ``cluster`` = ``--cluster``, else the result's ``cluster`` label, else ``prometheus``.
* ``scope`` = ``--scope`` for the whole file, else the value of the label named by
  ``--option scope_label=LABEL``, else of the first of ``vc``, ``namespace``, ``tenant`` that any
  result of the file has (``all`` when none has one). Results without the label get the scope
  ``unassigned`` (an idle GPU carries no workload labels; it must not pose as the whole
  cluster). In Kubernetes, DCGM exporter's ``namespace`` is the exporter's own; the workload's
  is ``exported_namespace``: pass ``--option scope_label=exported_namespace``.
* ``metric`` = ``--option metric=NAME``, else the well-known name of ``__name__``
  (``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` -> ``gpu_util``), else
  ``__name__`` in lower case with characters a series id cannot hold replaced by ``_``.
  Aggregations (``sum by (vc) (...)``) drop ``__name__``: name the metric with ``--option``.
* values are multiplied by ``--option scale=X``, else by the well-known scale
  (``DCGM_FI_DEV_GPU_UTIL`` is a percentage: 0.01), else by 1. ``gpu_util`` is a fraction 0-1;
  a value outside it is rejected (the query returned percent: pass ``--option scale=0.01``; a
  value still above 1 after a scale is a sum over GPUs: aggregate with ``avg by``).

Combining series: the other labels (``gpu``, ``UUID``, ``Hostname``, ``pod``, ...) are dropped,
so several results (the 8 GPUs of a node, the nodes of a VC) can map to one series. Their
samples at the same timestamp are combined into one: by the **mean** for ratios (``gpu_util``:
the fraction of GPU capacity busy; metrics whose unit is ``ratio`` or whose name ends in
``_util``, ``_utilization``, ``_ratio``, ``_fraction`` or ``_percent``) and by the **sum** for
everything else (counts and gauges such as GPUs in use: the total over the results). A
timestamp where some results have no sample combines those that have one.
``--option combine=mean|sum|max|min`` overrides the rule. The combined row's ``_line`` is the
smallest among its inputs.

Locations: JSON has no lines that mean anything here, so ``_line`` (and the line of errors and
rejects) is the result's position in ``data.result`` counted from 1; errors also name the
field (``data.result[2].values[5][1]``) and the result's label set. A sample whose value is
``NaN``, ``+Inf``, ``-Inf`` or not a number is rejected (or fails the ingest).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from prism.errors import ConfigError, DataContractError, IngestError
from prism.ingest.base import (
    LINE,
    SAMPLE_COLUMNS,
    Adapter,
    Batch,
    IngestOptions,
    Reject,
    read_bytes,
    register,
)
from prism.schema import ALL_SCOPE, UNASSIGNED_SCOPE, make_series_id, metric_info

logger = logging.getLogger(__name__)

_DEFAULT_CLUSTER = "prometheus"
_SCOPE_LABELS = ("vc", "namespace", "tenant")
#: ``__name__`` -> (PRISM metric, scale onto its unit).
_KNOWN: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", 0.01),  # percent
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gpu_util", 1.0),  # already a ratio
}
_COMBINE = ("mean", "sum", "max", "min")
_MEAN_SUFFIXES = ("_util", "_utilization", "_ratio", "_fraction", "_percent")
_NOT_SEGMENT = re.compile(r"[^A-Za-z0-9_.:=+@-]+")
# Unix seconds that fit datetime64[ns] (1677-09-22 .. 2262-04-11).
_MAX_SECONDS = 9.2e9
_FETCH = (
    "save the body of GET /api/v1/query_range as it comes, e.g. curl -s "
    "'http://prometheus:9090/api/v1/query_range?query=...&start=...&end=...&step=60' > FILE.json"
)


@dataclass
class _Problems:
    """Fails at the first problem (``on_error=fail``) or collects rejects (``skip``)."""

    path: Path
    on_error: str
    rejects: list[Reject] = field(default_factory=list)
    #: the fix of the first reject (for a response whose every sample is rejected)
    first_fix: str = ""

    def add(self, line: int | None, column: str, reason: str, raw: object, fix: str) -> None:
        """Record one bad result or sample; raises unless rejects are kept."""
        if self.on_error != "skip":
            raise IngestError(
                reason, path=str(self.path), line=line, column=column,
                fix=f"{fix}, or pass --on-error skip to store such samples in `rejects`",
            )
        text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
        self.rejects.append(Reject(line, column, reason, _shorten(text)))
        self.first_fix = self.first_fix or fix


@dataclass(frozen=True)
class _Naming:
    """How the results of one file are named and scaled (from the options and the labels)."""

    cluster: str | None
    scope: str | None
    scope_label: str | None
    metric: str | None
    scale: float | None
    combine: str | None


@register
class PrometheusAdapter(Adapter):
    """Prometheus ``query_range`` (or instant ``query``) JSON responses."""

    name = "prometheus"
    kind = "samples"
    description = "JSON body of the Prometheus HTTP API /api/v1/query_range (matrix or vector)"
    option_keys = ("metric", "scale", "combine", "scope_label")

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read one saved response; see the module docstring for naming and combining.

        Args:
            path: the JSON body (plain or ``.gz``).
            options: ``cluster``, ``scope``, ``on_error`` and ``extra`` keys ``scope_label``,
                ``metric``, ``scale`` and ``combine``.

        Returns:
            A ``samples`` batch: ``cluster, series_id, ts, value, _line``, one row per series
            and timestamp, sorted.

        Raises:
            IngestError: for a body that is not JSON or not a Prometheus response, an error
                response, a result type without series, or (unless ``on_error`` is ``skip``)
                the first bad result or sample.
            ConfigError: for option values PRISM cannot use.
        """
        naming = _naming(options)
        body = _load_json(path)
        result, vector = _results(path, body)
        problems = _Problems(path, options.on_error)
        scope_label = _scope_label(naming, result)

        ids: list[str] = []
        clusters: list[str] = []
        modes: list[str] = []
        parts: list[tuple[int, np.ndarray, np.ndarray]] = []
        for index, item in enumerate(result):
            line = index + 1
            labels = _labels(item)
            where = f"data.result[{index}]"
            if labels is None:
                problems.add(line, where, f"result {line} is not an object with a 'metric' "
                             "object of labels", item, _FETCH)
                continue
            shown = _label_set(labels)
            assert isinstance(item, dict)  # _labels checked it
            if vector:
                samples: object = [item["value"]] if "value" in item else None
                field_name = "value"
            else:
                samples = item.get("values")
                field_name = "values"
            if not isinstance(samples, list):
                histogram = "histograms" in item or "histogram" in item
                problems.add(
                    line, f"{where}.{field_name}",
                    f"result {line} {shown} has "
                    + ("native histogram samples, not floats" if histogram
                       else f"no '{field_name}' list"),
                    item.get(field_name),
                    "query floats, e.g. histogram_quantile(0.9, ...) or histogram_count(...)"
                    if histogram else _FETCH,
                )
                continue
            named = _name_series(naming, labels, scope_label)
            if isinstance(named, str):
                problems.add(line, f"{where}.metric", f"result {line} {shown}: {named}",
                             labels, _NAMING_FIX)
                continue
            series_id, cluster, metric, scale = named
            scaled_by = (f"--option scale={options.extra['scale']}" if naming.scale is not None
                         else f"the scale of {labels.get('__name__')}" if scale != 1 else "")
            ts, values = _parse_samples(
                problems, samples, line, f"{where}.{field_name}", shown, vector, scale,
                metric == "gpu_util", scaled_by,
            )
            if len(ts):
                ids.append(series_id)
                clusters.append(cluster)
                modes.append(naming.combine or _combine_rule(metric))
                parts.append((line, ts, values))
        frame = _combine(ids, clusters, modes, parts)
        if frame.empty:
            _refuse_empty(path, result, problems)
        return Batch(kind="samples", frame=frame, source=self.name,
                     rejects=sorted(problems.rejects, key=lambda r: r.line or 0))


def _refuse_empty(path: Path, result: list[object], problems: _Problems) -> None:
    """Refuse a response that stores nothing: it holds no samples, or (``--on-error skip``)
    every sample is rejected, as a CSV file whose rows are all rejected is refused.

    Raises:
        IngestError: saying which, with the first reject.
    """
    rejects = problems.rejects
    if not rejects:
        raise IngestError(
            "no samples to ingest: the response holds no samples ("
            + (f"its {len(result)} result(s) have no values" if result
               else "data.result is empty: no series matched") + ")",
            path=str(path), fix="check the query's label matchers and its time range")
    first = rejects[0]
    raise IngestError(
        f"no samples to ingest: all {len(rejects):,} samples or results are rejected, so "
        f"--on-error skip would store nothing; the first: {first.reason}", path=str(path),
        line=first.line, column=first.column, fix=problems.first_fix)


_NAMING_FIX = (
    "name the series with --option metric=NAME (aggregations drop __name__), "
    "--option scope_label=LABEL or --cluster NAME"
)


def series_ids(result: list[object], options: IngestOptions) -> list[str | None]:
    """The series id :meth:`PrometheusAdapter.read` gives each result of a response's
    ``data.result`` (``None`` for a result it cannot name), so that a caller can match the
    results with the samples a store holds (:mod:`prism.ingest.prometheus_pull`).

    Raises:
        ConfigError: for option values PRISM cannot use.
    """
    naming = _naming(options)
    scope_label = _scope_label(naming, result)
    ids: list[str | None] = []
    for item in result:
        labels = _labels(item)
        named = None if labels is None else _name_series(naming, labels, scope_label)
        ids.append(named[0] if isinstance(named, tuple) else None)
    return ids


def _scope_label(naming: _Naming, result: list[object]) -> str | None:
    """The label that names the scope: ``--option scope_label``, else (without ``--scope``)
    the first of ``vc``, ``namespace``, ``tenant`` that any result has."""
    if naming.scope is None and naming.scope_label is None:
        return _default_scope_label(result)
    return naming.scope_label


def _naming(options: IngestOptions) -> _Naming:
    """Check the options that name and scale series.

    Raises:
        ConfigError: for a name that cannot be part of a series id, or a bad scale/combine.
    """
    extra = options.extra
    for option, value in (("--cluster", options.cluster), ("--scope", options.scope),
                          ("--option metric", extra.get("metric"))):
        if value is not None:
            try:
                make_series_id(value if option == "--cluster" else "c",
                               value if option == "--scope" else "s",
                               value if option == "--option metric" else "m")
            except DataContractError as exc:
                raise ConfigError(f"{option}={value!r}: {exc}") from exc
    scale: float | None = None
    if "scale" in extra:
        try:
            scale = float(extra["scale"])
        except ValueError:
            scale = math.nan
        if not math.isfinite(scale):
            raise ConfigError(
                f"--option scale={extra['scale']!r} is not a number; write e.g. scale=0.01 to "
                "turn percent into a fraction"
            )
    combine = extra.get("combine")
    if combine is not None and combine not in _COMBINE:
        raise ConfigError(
            f"--option combine={combine!r} is not a rule; use one of {', '.join(_COMBINE)}"
        )
    label = extra.get("scope_label")
    return _Naming(options.cluster, options.scope, label.strip() if label else None,
                   extra.get("metric"), scale, combine)


def _load_json(path: Path) -> object:
    """Parse the file as JSON.

    Raises:
        IngestError: for an empty file or a body that is not JSON (naming line and column).
    """
    data = read_bytes(path)
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        start = data.lstrip()[:40].decode("utf-8", errors="replace")
        raise IngestError(
            f"not JSON: {exc.msg} at character {exc.colno} (the file starts with {start!r})",
            path=str(path), line=exc.lineno,
            fix=f"the prometheus format reads the JSON body of the HTTP API; {_FETCH}",
        ) from exc
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise IngestError(
            f"not JSON text ({type(exc).__name__}: {_shorten(str(exc))})", path=str(path),
            fix=f"the prometheus format reads the JSON body of the HTTP API; {_FETCH}",
        ) from exc


def _results(path: Path, body: object) -> tuple[list[object], bool]:
    """``data.result`` of a successful response, and whether it is a vector.

    Raises:
        IngestError: for an error response or a body that is not a query response.
    """
    if not isinstance(body, dict) or "status" not in body:
        raise IngestError(
            "the JSON is not a Prometheus API response (an object with 'status' and 'data')",
            path=str(path), fix=_FETCH,
        )
    status = body.get("status")
    if status == "error":
        raise IngestError(
            f"Prometheus answered with an error: {body.get('errorType', '?')}: "
            f"{_shorten(str(body.get('error', '')))}",
            path=str(path), column="status",
            fix="fix the query (or shorten the range or raise the step for a timeout) and save "
            "the response again",
        )
    if status != "success":
        raise IngestError(f"status is {_shorten(repr(status))}, expected 'success'",
                          path=str(path), column="status", fix=_FETCH)
    warnings = body.get("warnings")
    if isinstance(warnings, list):
        for warning in warnings:
            logger.warning("%s: Prometheus warned: %s", path, _shorten(str(warning)))
    data = body.get("data")
    if not isinstance(data, dict):
        raise IngestError("'data' is not an object", path=str(path), column="data", fix=_FETCH)
    kind = data.get("resultType")
    if kind not in ("matrix", "vector"):
        raise IngestError(
            f"resultType is {_shorten(repr(kind))}; only 'matrix' (query_range) and 'vector' "
            "(query) results hold series",
            path=str(path), column="data.resultType",
            fix="query an instant vector expression, e.g. DCGM_FI_DEV_GPU_UTIL or "
            "sum by (namespace) (...), not a scalar or a string",
        )
    result = data.get("result")
    if not isinstance(result, list):
        raise IngestError("data.result is not a list", path=str(path), column="data.result",
                          fix=_FETCH)
    return result, kind == "vector"


def _labels(item: object) -> dict[str, str] | None:
    """The label set of one result, or None when the result is malformed."""
    if not isinstance(item, dict):
        return None
    metric = item.get("metric", {})
    if not isinstance(metric, dict):
        return None
    return {str(k): str(v) for k, v in metric.items()}


def _default_scope_label(result: list[object]) -> str | None:
    """The first of ``vc``, ``namespace``, ``tenant`` that any result has."""
    present: set[str] = set()
    for item in result:
        labels = _labels(item)
        if labels:
            present.update(k for k, v in labels.items() if v)
    return next((label for label in _SCOPE_LABELS if label in present), None)


def _segment(value: str) -> str:
    """A label value as a series-id part (characters it cannot hold become ``_``)."""
    return _NOT_SEGMENT.sub("_", value.strip()).strip("_")


def _name_series(
    naming: _Naming, labels: Mapping[str, str], scope_label: str | None
) -> tuple[str, str, str, float] | str:
    """``(series_id, cluster, metric, scale)`` of one result, or why it cannot be named."""
    cluster = naming.cluster or _segment(labels.get("cluster", "")) or _DEFAULT_CLUSTER
    if naming.scope is not None:
        scope = naming.scope
    elif scope_label is None:
        scope = ALL_SCOPE
    else:
        scope = _segment(labels.get(scope_label, "")) or UNASSIGNED_SCOPE
    source_name = labels.get("__name__", "")
    known = _KNOWN.get(source_name)
    if naming.metric is not None:
        metric = naming.metric
    elif known is not None:
        metric = known[0]
    elif source_name:
        metric = _segment(source_name).lower()
    else:
        return "it has no __name__ label, so it has no metric name"
    if not metric:
        return f"__name__ {source_name!r} cannot be a metric name"
    scale = naming.scale if naming.scale is not None else (known[1] if known else 1.0)
    try:
        return make_series_id(cluster, scope, metric), cluster, metric, scale
    except DataContractError as exc:  # options were checked; labels were sanitised
        return str(exc)


def _parse_samples(
    problems: _Problems, samples: list[object], line: int, where: str, shown: str,
    vector: bool, scale: float, fraction: bool, scaled_by: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps (ns since the epoch) and scaled values of one result's good samples.

    ``scaled_by`` names the scale the values were multiplied by (``--option scale=0.01``),
    empty when none: a fraction still above 1 after it is a sum over GPUs, not percent.
    """
    seconds_out: list[float] = []
    values: list[float] = []

    def at(position: int) -> str:
        return where if vector else f"{where}[{position}]"

    def what(position: int) -> str:
        return f"sample {position + 1} of result {line} {shown}"

    for position, sample in enumerate(samples):
        if not isinstance(sample, list) or len(sample) != 2:
            problems.add(line, at(position), f"{what(position)} is not a [unix_seconds, "
                         "\"value\"] pair", sample, _FETCH)
            continue
        stamp, text = sample
        seconds = _number(stamp)
        if seconds is None or not abs(seconds) < _MAX_SECONDS:
            problems.add(line, f"{at(position)}[0]", f"{what(position)}: timestamp "
                         f"{_shorten(repr(stamp))} is not Unix seconds between 1678 and 2262",
                         stamp, _FETCH)
            continue
        value = _number(text)
        if value is not None:
            value *= scale
        if value is None or not math.isfinite(value):
            kind = "not a finite number" if value is not None else "not a number"
            problems.add(line, f"{at(position)}[1]", f"{what(position)}: value "
                         f"{_shorten(repr(text))} at {_render_time(seconds)} is {kind}", text,
                         "Prometheus writes NaN for undefined points (0/0) and +Inf/-Inf for "
                         "divisions by zero; filter them in the query, e.g. "
                         "(EXPR) < +Inf > -Inf, or drop the samples")
            continue
        if fraction and not 0.0 <= value <= 1.0:
            problems.add(line, f"{at(position)}[1]", f"{what(position)}: gpu_util must be a "
                         f"fraction 0-1 but is {value:g} at {_render_time(seconds)}"
                         + (f" ({_shorten(str(text))} times {scaled_by})" if scaled_by else ""),
                         text, _fraction_fix(value, scaled_by))
            continue
        seconds_out.append(seconds)
        values.append(value)
    # Prometheus timestamps are milliseconds; rounding there drops float noise (.781 -> 781 ms).
    ms = np.round(np.asarray(seconds_out, dtype="float64") * 1000).astype(np.int64)
    return ms * 1_000_000, np.asarray(values, dtype="float64")


def _fraction_fix(value: float, scaled_by: str) -> str:
    """How to fix a ``gpu_util`` value outside 0..1: percent wants a scale, but a value still
    above 1 after one is a sum over several GPUs (``sum by (namespace) (...)``)."""
    if value < 0:
        return "a utilisation cannot be negative: check the query"
    if not scaled_by:
        return "the query returns percent: pass --option scale=0.01"
    return ("the scaled value is over 1: a utilisation is a fraction per GPU, so a sum over "
            "several GPUs goes past 1; aggregate with avg by (...) rather than sum by (...), or "
            "ingest the sum as another metric (e.g. --option metric=gpu_util_sum)")


def _number(value: object) -> float | None:
    """A JSON number or numeric string as a float (None for anything else)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):
        return None


def _combine_rule(metric: str) -> str:
    """``mean`` for ratios, ``sum`` for counts and gauges (see the module docstring)."""
    if metric_info(metric).unit == "ratio" or metric.endswith(_MEAN_SUFFIXES):
        return "mean"
    return "sum"


def _combine(
    ids: list[str], clusters: list[str], modes: list[str],
    parts: list[tuple[int, np.ndarray, np.ndarray]],
) -> pd.DataFrame:
    """One row per (series_id, ts): the samples of results naming the same series combined."""
    if not parts:
        return _empty_frame()
    counts = [len(ts) for _, ts, _ in parts]
    frame = pd.DataFrame({
        "cluster": np.repeat(np.asarray(clusters, dtype=object), counts),
        "series_id": np.repeat(np.asarray(ids, dtype=object), counts),
        "ts": np.concatenate([ts for _, ts, _ in parts]),
        "value": np.concatenate([v for _, _, v in parts]),
        LINE: np.repeat(np.asarray([line for line, _, _ in parts], dtype=np.int64), counts),
        "_mode": np.repeat(np.asarray(modes, dtype=object), counts),
    })
    pieces = []
    for mode, group in frame.groupby("_mode", sort=True):
        pieces.append(
            group.groupby(["series_id", "ts"], sort=False)
            .agg(cluster=("cluster", "first"), value=("value", str(mode)), line=(LINE, "min"))
            .reset_index()
            .rename(columns={"line": LINE})
        )
    out = pd.concat(pieces, ignore_index=True).sort_values(["series_id", "ts"], kind="stable")
    out["ts"] = pd.to_datetime(out["ts"].to_numpy(dtype=np.int64), unit="ns").astype(
        "datetime64[ns]")
    out["value"] = out["value"].astype("float64")
    for name in ("cluster", "series_id"):
        out[name] = out[name].astype(object)
    out[LINE] = out[LINE].astype(np.int64)
    return out[[*SAMPLE_COLUMNS, LINE]].reset_index(drop=True)


def _empty_frame() -> pd.DataFrame:
    return pd.DataFrame({
        "cluster": pd.Series([], dtype=object),
        "series_id": pd.Series([], dtype=object),
        "ts": pd.Series([], dtype="datetime64[ns]"),
        "value": pd.Series([], dtype="float64"),
        LINE: pd.Series([], dtype=np.int64),
    })


def _label_set(labels: Mapping[str, str]) -> str:
    """Labels the way PromQL writes them: ``name{a="1",b="2"}`` (shortened)."""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return _shorten(f"{labels.get('__name__', '')}{{{inner}}}", 200)


def _render_time(seconds: float) -> str:
    return str(pd.Timestamp(round(seconds * 1000), unit="ms"))


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
