"""``node-list``: a cluster's nodes and their GPUs, stored as the planner's capacity.

One row per node: ``node`` (its name), ``gpus`` (GPUs on it) and ``gpu_type`` (their model),
with optional ``scope`` (the VC or partition the node serves) and ``cluster`` (else
``--cluster``). Other columns (CPU, memory, ...) are read past: an inventory has many. Names
that differ map with ``--map FIELD=COLUMN``; known ones are read as they are:

- Alibaba's cluster-trace-gpu-v2023 node list (``sn, cpu_milli, memory_mib, gpu, model``):
  ``sn`` is the node, ``gpu`` the GPUs, ``model`` the type;
- Slurm's ``sinfo -N -o "%N|%P|%G"`` (header ``NODELIST|PARTITION|GRES``; ``|``-separated,
  as a file separated by ``;``, tabs or ``|`` is read): the partition is the scope (the
  default partition's ``*`` dropped) and a ``gres`` column such as ``gpu:a100:8(S:0-1)`` gives
  the GPUs and their type (``gpu:8``: no type; ``(null)``: none; several ``gpu`` entries of
  one node: one row per type). ``sinfo`` without ``-N`` lists node ranges (``gpu[01-04]``),
  which are refused: their GPUs would count once;
- Kubernetes' ``kubectl get nodes -o custom-columns=NODE:...,GPUS:...,GPU_TYPE:...,POOL:...``
  (fields separated by runs of spaces; ``<none>``, a node without the field, is no GPUs in the
  count and empty elsewhere; ``pool`` or ``nodepool`` is the scope).

Stored as capacity rows (what ``capacity-csv`` stores), the GPUs summed per GPU type: for the
cluster (scope ``all``, one row per type, which the planner adds up), for each type's scope
(``gpu:<type>``, named as in series ids; nodes without a type count as ``gpu:unknown``) and,
with a ``scope`` column, for each scope. A node may serve several scopes (a row each, as
``sinfo -N`` lists it): it counts once for the cluster and its type, and in each of its scopes.
Nodes without GPUs are left out. A node listed twice in one scope would count twice, and one
whose rows disagree on its GPUs is ambiguous: both are refused, naming the lines. A node list
is a snapshot of the whole cluster: a later one replaces it, so a GPU type or scope it no
longer lists has no capacity left from it (:meth:`prism.store.Store.capacity_at`).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from prism.errors import IngestError
from prism.ingest.base import (
    LINE,
    Adapter,
    Batch,
    IngestOptions,
    read_bytes,
    read_table,
    register,
)
from prism.ingest.checks import RowChecker, parse_numbers
from prism.ingest.jobs_csv import mapped_columns
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX, SCOPE_BAD_CHARS

_FIELDS = ("node", "gpus", "gpu_type", "scope", "cluster", "gres")
#: Column names other inventories use (matched without case), read when the canonical one is
#: absent and not mapped.
_ALIASES = {"node": ("sn", "name", "hostname", "nodelist", "nodename"),
            "gpus": ("gpu", "num_gpus"),
            "gpu_type": ("model", "gpu_model", "type", "product", "gpu_product"),
            "scope": ("partition", "pool", "nodepool"), "gres": ("gres",)}
#: One ``gpu`` entry of a Slurm GRES string: ``gpu:8``, ``gpu:a100:8``, ``gpu:a100:8(S:0-1)``.
_GRES_GPU = re.compile(r"(?:^|,)\s*gpu(?::([^:(),]+))?:(\d+)\s*(?:\([^)]*\))?")
_GRES_ENTRY = re.compile(r"[^,(]+(?:\([^)]*\))?")


@register
class NodeListAdapter(Adapter):
    """A node inventory: GPUs per node, summed into capacity."""

    name = "node-list"
    kind = "capacity"
    description = ("one row per node: node, gpus, gpu_type [, scope, cluster]: installed GPUs "
                   "(Alibaba v2023 node list, Slurm sinfo -N -o \"%N|%P|%G\", kubectl get "
                   "nodes -o custom-columns)")

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read a node list; see the module docstring."""
        frame = _read(path)
        columns = _columns(options, list(frame.columns))
        frame = _no_value(frame, columns)
        _require(path, frame, columns, options)
        checker = RowChecker(path, frame, options.on_error)
        node = frame[columns["node"]].astype(object)
        checker.check(node.isna().to_numpy(), columns["node"], "node name is empty",
                      "name every node (a node listed twice would count twice)")
        checker.check(node.astype(str).str.contains(r"\[").to_numpy() & node.notna().to_numpy(),
                      columns["node"], "a range of nodes, not one node",
                      "list one node per row (sinfo -N)")
        if columns["gpus"] in frame.columns:
            nodes = _counted(checker, frame, columns)
        else:
            nodes = _from_gres(checker, frame, columns)
        if options.cluster:
            nodes["cluster"] = options.cluster
        else:
            nodes["cluster"] = frame.loc[nodes.index, columns["cluster"]].to_numpy()
            checker.check(frame[columns["cluster"]].isna().to_numpy(), columns["cluster"],
                          "cluster is empty", "fill the cluster column or pass --cluster")
        _check_repeats(checker, nodes, columns)
        good, rejects = checker.finish()
        nodes = nodes[nodes[LINE].isin(set(good[LINE].tolist()))]
        installed = nodes[nodes["gpus"] > 0].drop_duplicates(["node", "gpu_type"])
        note = (f"capacity per GPU type from {nodes['node'].nunique():,} nodes, "
                f"{installed['node'].nunique():,} with GPUs: {installed['gpus'].sum():,.0f} "
                f"GPUs of {installed['gpu_type'].fillna('unknown').nunique()} type(s)")
        return Batch(kind="capacity", frame=_capacity(nodes), source=self.name,
                     rejects=rejects, note=note)


def _read(path: Path) -> pd.DataFrame:
    """The file, separated by commas or, where its header has none, by ``|``, tabs or ``;``
    (``sinfo -o "%N|%P|%G"``; GRES strings hold commas), else by runs of spaces (``kubectl
    get nodes -o custom-columns=...``; :func:`_no_value` reads its ``<none>``)."""
    delimiter = ","
    if path.suffix.lower() not in (".parquet", ".pq"):
        data = read_bytes(path)
        header = data.split(b"\n", 1)[0].decode("utf-8", "replace").lstrip("\ufeff")
        if "," not in header:
            delimiter = next((d for d in ("|", "\t", ";") if d in header), ",")
            if delimiter == "," and len(header.split()) > 1:
                return _columns_by_spaces(path, data)
    frame = read_table(path, delimiter=delimiter)
    frame.columns = [c if c == LINE else str(c).strip() for c in frame.columns]
    return frame


def _columns_by_spaces(path: Path, data: bytes) -> pd.DataFrame:
    """A table whose fields are separated by runs of spaces, with ``_line``; a row with more or
    fewer fields than the header is named."""
    lines = data.decode("utf-8", "replace").lstrip("\ufeff").splitlines()
    header = lines[0].split()
    rows, numbers = [], []
    for number, text in enumerate(lines[1:], start=2):
        fields = text.split()
        if not fields:
            continue
        if len(fields) != len(header):
            raise IngestError(
                f"line {number}: {len(fields)} field(s) where the header has {len(header)}",
                path=str(path), fix="separate the fields by spaces, with no space inside a "
                "field (kubectl get nodes -o custom-columns=... writes them so)")
        rows.append(fields)
        numbers.append(number)
    frame = pd.DataFrame(rows, columns=header, dtype=object)
    frame[LINE] = np.asarray(numbers, dtype=np.int64)
    return frame


def _no_value(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """kubectl's ``<none>`` (a field the node lacks): no GPUs in the GPU count, empty
    elsewhere."""
    for name in frame.columns:
        if name == LINE or frame[name].dtype != object:
            continue
        none = frame[name].astype(str).str.strip().eq("<none>")
        if none.any():
            frame[name] = frame[name].where(~none, "0" if name == columns["gpus"] else None)
    return frame


def _columns(options: IngestOptions, present: list[str]) -> dict[str, str]:
    """Field -> the file's column: ``--map``, else the canonical name, else a known alias
    (without case)."""
    columns = mapped_columns(options, _FIELDS)
    lower = {c.lower(): c for c in present}
    for field, aliases in _ALIASES.items():
        if field in options.mapping or field in present:
            continue
        columns[field] = next((lower[a] for a in (field, *aliases) if a in lower), field)
    return columns


def _require(path: Path, frame: pd.DataFrame, columns: dict[str, str],
             options: IngestOptions) -> None:
    """Refuse a file without a node column, GPU counts (``gpus`` or ``gres``) or cluster."""
    missing = [columns["node"]] if columns["node"] not in frame.columns else []
    if columns["gpus"] not in frame.columns and columns["gres"] not in frame.columns:
        missing.append(columns["gpus"])
    if not options.cluster and columns["cluster"] not in frame.columns:
        missing.append(columns["cluster"])
    if not missing:
        return
    have = [c for c in frame.columns if c != LINE]
    fixes = (["name the columns node, gpus and gpu_type (or give Slurm's gres), or map yours "
              "with --map FIELD=COLUMN (e.g. --map gpus=gpu_count)"]
             if set(missing) - {columns["cluster"]} else [])
    if columns["cluster"] in missing:
        fixes.append("pass --cluster or add a cluster column")
    raise IngestError(f"missing column(s) {missing}; the file has {have}", path=str(path),
                      fix="; ".join(fixes))


def _counted(checker: RowChecker, frame: pd.DataFrame, columns: dict[str, str]
             ) -> pd.DataFrame:
    """Nodes of a file with a GPU count column (one row each, index = the file's row)."""
    gpus, bad = parse_numbers(frame[columns["gpus"]])
    values = gpus.to_numpy(dtype=np.float64)
    checker.check(bad | np.isnan(values), columns["gpus"], "GPU count is missing or not a "
                  "number", "write the number of GPUs on the node (0 for a CPU node)")
    checker.check(values < 0, columns["gpus"], "GPU count is negative",
                  "GPU counts must be >= 0")
    checker.check(np.isfinite(values) & (values != np.round(values)), columns["gpus"],
                  "GPU count is not a whole number", "count the node's physical GPUs")
    return pd.DataFrame({
        "node": frame[columns["node"]].astype(object),
        "gpus": values,
        "gpu_type": (frame[columns["gpu_type"]].astype(object)
                     if columns["gpu_type"] in frame.columns else None),
        "scope": _scopes(frame, columns), LINE: frame[LINE]}, index=frame.index)


def _from_gres(checker: RowChecker, frame: pd.DataFrame, columns: dict[str, str]
               ) -> pd.DataFrame:
    """Nodes of a file with Slurm GRES strings: a row per node and GPU type (index = the
    file's row, repeated for a node with several types)."""
    rows: list[tuple[int, float, str | None]] = []
    bad = np.zeros(len(frame), dtype=bool)
    for i, text in enumerate(frame[columns["gres"]].astype(object)):
        gres = "" if text is None or pd.isna(text) else str(text).strip()
        found = [(m.group(1), float(m.group(2))) for m in _GRES_GPU.finditer(gres)]
        entries = [e.strip() for e in _GRES_ENTRY.findall(gres) if e.strip()]
        gpu_entries = [e for e in entries if e == "gpu" or e.startswith("gpu:")]
        if len(found) != len(gpu_entries):
            bad[i] = True
        for gpu_type, count in found or [(None, 0.0)]:
            rows.append((i, count, gpu_type))
    checker.check(bad, columns["gres"], "a gpu entry without a count",
                  "write GRES as Slurm prints it: gpu:TYPE:COUNT or gpu:COUNT, e.g. "
                  "gpu:a100:8(S:0-1)")
    at = np.array([r[0] for r in rows], dtype=np.int64)
    index = frame.index[at]
    return pd.DataFrame({
        "node": frame[columns["node"]].astype(object).to_numpy()[at],
        "gpus": [r[1] for r in rows], "gpu_type": [r[2] for r in rows],
        "scope": _scopes(frame, columns).to_numpy()[at] if columns["scope"] in frame.columns
        else None, LINE: frame[LINE].to_numpy()[at]}, index=index)


def _scopes(frame: pd.DataFrame, columns: dict[str, str]) -> pd.Series:
    """The scope column without Slurm's default-partition ``*`` (``None``s without one)."""
    if columns["scope"] not in frame.columns:
        return pd.Series(None, index=frame.index, dtype=object)
    scope = frame[columns["scope"]].astype(object)
    return scope.where(scope.isna(), scope.astype(str).str.strip().str.rstrip("*"))


def _check_repeats(checker: RowChecker, nodes: pd.DataFrame, columns: dict[str, str]) -> None:
    """Refuse a node listed twice in one scope (it would count twice there), and a node whose
    scopes disagree on its GPUs; name the lines."""
    named = nodes[nodes["node"].notna()]
    if named.empty:
        return
    per = named.assign(key_scope=named["scope"].astype(object).fillna("").to_numpy(),
                       key_type=named["gpu_type"].astype(object).fillna("").to_numpy())
    keys = ["node", "key_scope", "key_type"]
    twice = per.duplicated(keys, keep="first").to_numpy()
    first = per.groupby(keys, sort=False)[LINE].transform("min").to_numpy()
    where = checker.frame.index.get_indexer(per.index)
    for line in sorted(set(first[twice].tolist())):
        rows = np.zeros(len(checker.frame), dtype=bool)
        rows[where[twice & (first == line)]] = True
        checker.check(rows, columns["node"],
                      f"this node is listed on line {line} too: it would count twice",
                      "list each node once per scope")
    gpus_column = columns["gpus"] if columns["gpus"] in checker.frame.columns else columns["gres"]
    for node, mine in per.groupby("node", sort=False):
        if mine["key_scope"].nunique() < 2:
            continue
        layouts = {tuple(sorted(zip(g["key_type"], g["gpus"], strict=True)))
                   for _, g in mine.groupby("key_scope", sort=False)}
        if len(layouts) > 1:
            rows = np.zeros(len(checker.frame), dtype=bool)
            rows[checker.frame.index.get_indexer(mine.index)] = True
            lines = ", ".join(map(str, sorted(set(mine[LINE].tolist()))))
            checker.check(rows, gpus_column, f"node {node!r} has different GPUs on lines {lines}",
                          "give the node the same GPUs in every scope it serves")


def _capacity(nodes: pd.DataFrame) -> pd.DataFrame:
    """Capacity rows (``CAPACITY_COLUMNS`` and ``_line``, the first node's line) from the
    checked nodes: per GPU type for ``all``, for ``gpu:<type>`` (each node once) and for each
    node scope."""
    nodes = nodes[nodes["gpus"] > 0].copy()
    nodes["gpu_type"] = nodes["gpu_type"].where(nodes["gpu_type"].notna(), "unknown")
    nodes["gpu_type"] = nodes["gpu_type"].astype(str)
    once = nodes.drop_duplicates(["cluster", "node", "gpu_type"])
    type_scope = GPU_TYPE_PREFIX + once["gpu_type"].map(lambda t: re.sub(SCOPE_BAD_CHARS, "_", t))
    parts = [once.assign(scope=ALL_SCOPE), once.assign(scope=type_scope)]
    if nodes["scope"].notna().any():
        parts.append(nodes[nodes["scope"].notna()])
    rows = (pd.concat(parts, ignore_index=True)
            .groupby(["cluster", "scope", "gpu_type"], as_index=False, sort=True)
            .agg(gpus=("gpus", "sum"), **{LINE: (LINE, "min")}))
    rows["valid_from"] = pd.Series(pd.NaT, index=rows.index, dtype="datetime64[ns]")
    rows["cluster"] = rows["cluster"].astype(object)
    return rows[["cluster", "scope", "gpu_type", "valid_from", "gpus", LINE]]
