"""``philly-nodes``: Microsoft Philly nodes in use, once a minute (Jeon et al., ATC '19).

Source: github.com/S-Lab-System-Group/HeliosArtifact, ``framework/CES Service/data/
philly_node_sequence.csv`` (MIT; derived by the Helios authors from the CC BY 4.0 Philly trace,
github.com/msr-fiddle/philly-traces), bundled as
``../shared/data/traces/helios_earth_vc/philly_node_sequence_1min.csv.gz``. The artifact's
``CES_Philly.py`` reads it with ``pd.read_csv(..., parse_dates=["time"], index_col="time")``.

Format: CSV (plain or ``.gz``) with a header::

    time,active,total
    2017-10-03 00:00:00,312,420

``active`` is the number of nodes running jobs and ``total`` the number of nodes, both whole
numbers >= 0 with ``active <= total``; one row per minute from 2017-10-03 to 2017-12-15
(105,644 rows, one 10-hour gap on 2017-10-26). Extra columns are ignored; an empty value, a
negative or fractional count, ``active > total``, a time that does not parse and a time that
repeats an earlier row are rejected (``--on-error skip`` keeps the other rows).

Samples: ``{cluster}/all/nodes_in_use`` from ``active`` and ``{cluster}/all/nodes_total`` from
``total``, cluster ``--cluster`` or ``philly``.

Times: naive, and neither source states a zone. The upstream Philly utilisation logs are
stamped in US Pacific time (``2017-10-03 00:08:00 PDT``), which the derived file presumably
dropped; times are stored as written (taken as UTC) unless ``--tz`` names their zone
(``--tz America/Los_Angeles``). With a daylight-saving zone the repeated hour of the autumn
change (2017-11-05 01:00-01:59) is ambiguous and rejected.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from prism.errors import ConfigError, DataContractError, IngestError
from prism.ingest.base import (
    LINE,
    SAMPLE_COLUMNS,
    Adapter,
    Batch,
    IngestOptions,
    read_table,
    register,
)
from prism.ingest.checks import RowChecker, check_times, parse_numbers
from prism.ingest.timeparse import check_tz, is_fractional, parse_local_times
from prism.schema import ALL_SCOPE, make_series_id

DEFAULT_CLUSTER = "philly"
#: File column -> metric.
METRICS = {"active": "nodes_in_use", "total": "nodes_total"}
_TYPES: dict[str, pa.DataType] = {"time": pa.string(), "active": pa.float64(),
                                  "total": pa.float64()}


def _series_ids(cluster: str) -> dict[str, str]:
    try:
        return {col: make_series_id(cluster, ALL_SCOPE, metric) for col, metric in METRICS.items()}
    except DataContractError as exc:
        raise ConfigError(f"{exc}; pass another --cluster") from exc


@register
class PhillyNodesAdapter(Adapter):
    """Philly per-minute node counts (Helios artifact's ``philly_node_sequence.csv``)."""

    name = "philly-nodes"
    time_columns = {"ts": "time"}
    kind = "samples"
    description = "Philly nodes in use / total per minute (philly_node_sequence.csv[.gz])"

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read the node sequence into samples of two series (see the module docstring).

        Raises:
            IngestError: for a missing, empty or truncated file, a missing column or, unless
                ``on_error="skip"``, a bad row, naming file, line and column.
            ConfigError: for an unknown ``--tz`` or a ``--cluster`` unfit for series ids.
        """
        check_tz(options.tz)
        series = _series_ids(options.cluster or DEFAULT_CLUSTER)
        frame = read_table(path, required=("time", *METRICS), column_types=_TYPES)
        duplicated = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
        if duplicated:
            raise IngestError(f"column(s) {duplicated} appear more than once", path=str(path),
                              line=1, column=duplicated[0], fix="give every column one name")
        checker = RowChecker(path, frame, options.on_error)

        times, bad, tz_bad = parse_local_times(frame["time"], options.tz)
        checker.check(times.isna().to_numpy() & ~bad & ~tz_bad, "time", "time is empty",
                      "every row needs a time")
        check_times(checker, frame["time"], bad, "time", "time",
                    "write times as ISO 8601, e.g. 2017-10-03 00:00:00", dst=tz_bad,
                    tz=options.tz)
        values: dict[str, np.ndarray] = {}
        for col in METRICS:
            numbers, bad = parse_numbers(frame[col])
            v = numbers.to_numpy(dtype="float64", na_value=np.nan)
            checker.check(bad, col, f"{col} is not a number", "write a whole number of nodes")
            checker.check(np.isnan(v) & ~bad, col, f"{col} is empty",
                          "write a whole number of nodes")
            checker.check(v < 0, col, f"{col} is negative", "node counts are >= 0")
            checker.check(is_fractional(v), col,
                          f"{col} is not a whole number", "node counts are whole numbers")
            values[col] = v
        checker.check(values["active"] > values["total"], "active",
                      "active is larger than total", "nodes in use cannot exceed the nodes")
        repeated = times.duplicated().to_numpy() & times.notna().to_numpy()
        checker.check(repeated, "time", "time repeats an earlier row",
                      "keep one row per minute")

        good, rejects = checker.finish()
        keep = frame[LINE].isin(good[LINE]).to_numpy()
        cluster = options.cluster or DEFAULT_CLUSTER
        ts = times.to_numpy()[keep]
        lines = frame[LINE].to_numpy()[keep]
        parts = [
            pd.DataFrame({"cluster": cluster, "series_id": series_id, "ts": ts,
                          "value": values[col][keep], LINE: lines})
            for col, series_id in series.items()
        ]
        samples = pd.concat(parts, ignore_index=True)
        samples["ts"] = samples["ts"].astype("datetime64[ns]")
        samples["value"] = samples["value"].astype("float64")
        samples["cluster"] = samples["cluster"].astype(object)
        samples["series_id"] = samples["series_id"].astype(object)
        return Batch(kind="samples", frame=samples[[*SAMPLE_COLUMNS, LINE]], source=self.name,
                     rejects=rejects)
