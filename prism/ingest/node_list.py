"""``node-list``: a cluster's nodes and their GPUs, stored as the planner's capacity.

One row per node: ``node`` (its name), ``gpus`` (GPUs on it) and ``gpu_type`` (their model),
with optional ``scope`` (the VC or partition the node serves) and ``cluster`` (else
``--cluster``). Other columns (CPU, memory, ...) are read past: an inventory has many. Names
that differ map with ``--map FIELD=COLUMN``. Alibaba's cluster-trace-gpu-v2023 node list
(``sn, cpu_milli, memory_mib, gpu, model``) reads as it is: ``sn`` is the node, ``gpu`` the
GPUs, ``model`` the type.

Stored as capacity rows (what ``capacity-csv`` stores), the GPUs summed per GPU type: for the
cluster (scope ``all``, one row per type, which the planner adds up), for each type's scope
(``gpu:<type>``, named as in series ids; nodes without a type count as ``gpu:unknown``) and,
with a ``scope`` column, for each scope. Nodes without GPUs are left out. A node listed twice
would count twice: that is refused, naming both lines. A node list is a snapshot of the whole
cluster: a later one replaces it, so a GPU type or scope it no longer lists has no capacity
left from it (:meth:`prism.store.Store.capacity_at`).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from prism.errors import IngestError
from prism.ingest.base import LINE, Adapter, Batch, IngestOptions, read_table, register
from prism.ingest.checks import RowChecker, parse_numbers
from prism.ingest.jobs_csv import mapped_columns
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX, SCOPE_BAD_CHARS

_FIELDS = ("node", "gpus", "gpu_type", "scope", "cluster")
#: Column names other inventories use, read when the canonical one is absent and not mapped.
_ALIASES = {"node": ("sn", "name", "hostname"), "gpus": ("gpu", "num_gpus"),
            "gpu_type": ("model", "gpu_model")}


@register
class NodeListAdapter(Adapter):
    """A node inventory: GPUs per node, summed into capacity."""

    name = "node-list"
    kind = "capacity"
    description = ("one row per node: node, gpus, gpu_type [, scope, cluster]: installed GPUs "
                   "(Alibaba v2023 node list as it is)")

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read a node list; see the module docstring."""
        frame = read_table(path)
        columns = _columns(options, list(frame.columns))
        required = ["node", "gpus"] + ([] if options.cluster else ["cluster"])
        missing = [f for f in required if columns[f] not in frame.columns]
        if missing:
            have = [c for c in frame.columns if c != LINE]
            fixes = (["name the columns node, gpus and gpu_type, or map yours with --map "
                      "FIELD=COLUMN (e.g. --map gpus=gpu_count)"]
                     if set(missing) - {"cluster"} else [])
            fixes += ["pass --cluster or add a cluster column"] if "cluster" in missing else []
            raise IngestError(
                f"missing column(s) {[columns[f] for f in missing]}; the file has {have}",
                path=str(path), fix="; ".join(fixes))
        checker = RowChecker(path, frame, options.on_error)
        gpus, bad = parse_numbers(frame[columns["gpus"]])
        values = gpus.to_numpy(dtype=np.float64)
        checker.check(bad | np.isnan(values), columns["gpus"], "GPU count is missing or not a "
                      "number", "write the number of GPUs on the node (0 for a CPU node)")
        checker.check(values < 0, columns["gpus"], "GPU count is negative",
                      "GPU counts must be >= 0")
        checker.check(np.isfinite(values) & (values != np.round(values)), columns["gpus"],
                      "GPU count is not a whole number", "count the node's physical GPUs")
        node = frame[columns["node"]].astype(object)
        checker.check(node.isna().to_numpy(), columns["node"], "node name is empty",
                      "name every node (a node listed twice would count twice)")
        _check_repeats(checker, node, frame[LINE].to_numpy(), columns["node"])
        out = pd.DataFrame({
            "cluster": options.cluster if options.cluster else frame[columns["cluster"]],
            "gpu_type": (frame[columns["gpu_type"]].astype(object)
                         if columns["gpu_type"] in frame.columns else None),
            "scope": (frame[columns["scope"]].astype(object)
                      if columns["scope"] in frame.columns else None),
            "gpus": values, LINE: frame[LINE]})
        checker.frame = out
        checker.check(out["cluster"].isna().to_numpy(), columns["cluster"], "cluster is empty",
                      "fill the cluster column or pass --cluster")
        good, rejects = checker.finish()
        rows = _capacity(good)
        installed = good[good["gpus"] > 0]
        note = (f"capacity per GPU type from {len(good):,} nodes, {len(installed):,} with GPUs: "
                f"{installed['gpus'].sum():,.0f} GPUs of "
                f"{installed['gpu_type'].fillna('unknown').nunique()} type(s)")
        return Batch(kind="capacity", frame=rows, source=self.name, rejects=rejects, note=note)


def _columns(options: IngestOptions, present: list[str]) -> dict[str, str]:
    """Field -> the file's column: ``--map``, else the canonical name, else a known alias."""
    columns = mapped_columns(options, _FIELDS)
    for field, aliases in _ALIASES.items():
        if field in options.mapping or field in present:
            continue
        columns[field] = next((a for a in aliases if a in present), field)
    return columns


def _check_repeats(checker: RowChecker, node: pd.Series, lines: np.ndarray, column: str
                   ) -> None:
    """Mark each row naming a node an earlier row named, with that row's line."""
    named = node.notna().to_numpy()
    repeated = node.duplicated(keep="first").to_numpy() & named
    if not repeated.any():
        return
    first = pd.Series(lines).groupby(node.astype(str).to_numpy(), sort=False).transform("min")
    for line in sorted(set(first.to_numpy()[repeated].tolist())):
        checker.check(repeated & (first.to_numpy() == line), column,
                      f"this node is listed on line {line} too: it would count twice",
                      "list each node once")


def _capacity(nodes: pd.DataFrame) -> pd.DataFrame:
    """Capacity rows (``CAPACITY_COLUMNS`` and ``_line``, the first node's line) from the
    checked nodes: per GPU type for ``all``, for ``gpu:<type>`` and for each node scope."""
    nodes = nodes[nodes["gpus"] > 0].copy()
    nodes["gpu_type"] = nodes["gpu_type"].where(nodes["gpu_type"].notna(), "unknown")
    nodes["gpu_type"] = nodes["gpu_type"].astype(str)
    type_scope = GPU_TYPE_PREFIX + nodes["gpu_type"].map(
        lambda t: re.sub(SCOPE_BAD_CHARS, "_", t))
    parts = [nodes.assign(scope=ALL_SCOPE), nodes.assign(scope=type_scope)]
    if nodes["scope"].notna().any():
        parts.append(nodes[nodes["scope"].notna()])
    rows = (pd.concat(parts, ignore_index=True)
            .groupby(["cluster", "scope", "gpu_type"], as_index=False, sort=True)
            .agg(gpus=("gpus", "sum"), **{LINE: (LINE, "min")}))
    rows["valid_from"] = pd.Series(pd.NaT, index=rows.index, dtype="datetime64[ns]")
    rows["cluster"] = rows["cluster"].astype(object)
    return rows[["cluster", "scope", "gpu_type", "valid_from", "gpus", LINE]]
