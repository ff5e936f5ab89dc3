"""``capacity-csv``: GPUs per cluster and scope, for the capacity planner.

Columns ``cluster, scope, gpus`` (what ``prism generate`` writes as ``capacity.csv``), optional
``gpu_type`` and ``valid_from`` (capacity from that time on; empty = always). Scope ``all`` is the
cluster total. One row per ``cluster, scope, gpu_type, valid_from``: a repeated key is refused,
naming both rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from prism.ingest.base import (
    CAPACITY_COLUMNS,
    LINE,
    Adapter,
    Batch,
    IngestOptions,
    read_table,
    register,
)
from prism.ingest.checks import (
    JOB_YEARS,
    RowChecker,
    check_times,
    parse_numbers,
    parse_times,
    reject_unknown_columns,
)


@register
class CapacityCsvAdapter(Adapter):
    """GPU capacity per cluster and scope."""

    name = "capacity-csv"
    kind = "capacity"
    description = "cluster, scope, gpus [, gpu_type, valid_from]: installed GPUs"

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read a capacity table."""
        required = ["scope", "gpus"] + ([] if options.cluster else ["cluster"])
        frame = read_table(path, required=required)
        reject_unknown_columns(path, frame, CAPACITY_COLUMNS,
                               fix=f"a capacity file has columns {list(CAPACITY_COLUMNS)}")
        checker = RowChecker(path, frame, options.on_error)
        gpus, bad = parse_numbers(frame["gpus"])
        checker.check(bad | np.isnan(gpus.to_numpy()), "gpus", "GPU count is missing or not a "
                      "number", "write the number of GPUs")
        checker.check((gpus < 0).to_numpy(), "gpus", "GPU count is negative",
                      "GPU counts must be >= 0")
        if "valid_from" in frame.columns:
            valid_from, bad, dst = parse_times(frame["valid_from"], tz=options.tz)
            check_times(checker, frame["valid_from"], bad, "valid_from", "valid_from",
                        "write ISO 8601 times", reason="time does not parse", years=JOB_YEARS,
                        times=valid_from, dst=dst, tz=options.tz)
        else:
            valid_from = pd.Series(pd.NaT, index=frame.index, dtype="datetime64[ns]")
        out = pd.DataFrame({
            "cluster": options.cluster if options.cluster else frame["cluster"].astype(object),
            "scope": frame["scope"].astype(object),
            "gpu_type": frame["gpu_type"].astype(object) if "gpu_type" in frame.columns
            else None,
            "valid_from": valid_from.astype("datetime64[ns]"),
            "gpus": gpus,
            LINE: frame[LINE],
        })
        checker.frame = out
        checker.check(out["cluster"].isna().to_numpy(), "cluster", "cluster is empty",
                      "fill the cluster column or pass --cluster")
        checker.check(out["scope"].isna().to_numpy(), "scope", "scope is empty",
                      "use 'all' for the cluster total")
        _check_repeats(checker, out)
        good, rejects = checker.finish()
        return Batch(kind="capacity", frame=good, source=self.name, rejects=rejects)


#: What one capacity row is about: the planner takes one row per key (``Store.capacity_at``).
_KEY = ("cluster", "scope", "gpu_type", "valid_from")


def _check_repeats(checker: RowChecker, out: pd.DataFrame) -> None:
    """Mark each row whose key an earlier row of the file has, naming that row: which of two
    values is the capacity would otherwise be left to chance. Rows that failed another check
    take no part."""
    ok = ~checker.failed
    keys = out.loc[ok, list(_KEY)].astype(object)
    keys = keys.where(keys.notna(), "").astype(str)  # empty gpu_types (valid_froms) match
    repeated = keys.duplicated(keep="first").to_numpy()
    if not repeated.any():
        return
    lines = out.loc[ok, LINE].to_numpy()
    first = pd.Series(lines, index=keys.index).groupby(
        [keys[c] for c in _KEY], sort=False).transform("min").to_numpy()
    for line in sorted(set(first[repeated].tolist())):
        bad = np.zeros(len(out), dtype=bool)
        bad[np.flatnonzero(ok)[repeated & (first == line)]] = True
        checker.check(bad, "scope",
                      f"this row repeats line {line}: same cluster, scope, gpu_type and "
                      "valid_from",
                      "keep one row per cluster, scope, gpu_type and valid_from (add the "
                      "GPUs up, or give the later one its own valid_from)")
