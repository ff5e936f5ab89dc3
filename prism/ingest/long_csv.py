"""``long-csv``: the panel contract itself, ``series_id, ts, value`` (one row per sample).

Columns can be mapped: ``--map series_id=name --map ts=time --map value=v``; other columns are
read past (the summary names them). Series ids have the form ``cluster/scope/metric``; the
cluster is their first part. CSV, ``.csv.gz`` or Parquet.
Times are ISO 8601 (a zone suffix is honoured, naive times are in ``--tz``, default UTC) or, with
``--option time_unit=s`` (or ``ms``), numbers since the Unix epoch.
Values must fit their metric (``prism.schema.METRICS``): counts of GPUs, jobs or nodes are
>= 0, ratios such as ``gpu_util`` are 0..1; metrics PRISM does not know take any number.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from prism.ingest.base import (
    LINE,
    SAMPLE_COLUMNS,
    Adapter,
    Batch,
    IngestOptions,
    read_table,
    register,
)
from prism.ingest.checks import (
    JOB_YEARS,
    RowChecker,
    check_range,
    check_times,
    parse_numbers,
    parse_times,
)
from prism.ingest.jobs_csv import mapped_columns

_ID = re.compile(r"^[A-Za-z0-9_.:=+@-]+/[A-Za-z0-9_.:=+@-]+/[A-Za-z0-9_.:=+@-]+$")


@register
class LongCsvAdapter(Adapter):
    """Samples in the long panel format."""

    name = "long-csv"
    kind = "samples"
    description = "series_id, ts, value rows (mappable with --map)"
    option_keys = ("time_unit",)

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read long-format samples."""
        columns = mapped_columns(options, ("series_id", "ts", "value"))
        frame = read_table(path, required=list(columns.values()), literal=True)
        extra = [c for c in frame.columns if c != LINE and c not in columns.values()]
        checker = RowChecker(path, frame, options.on_error)
        ids = frame[columns["series_id"]].astype("string").str.strip()
        valid = ids.str.match(_ID.pattern).fillna(False).to_numpy(dtype=bool)
        checker.check(~valid, columns["series_id"], "series id is not 'cluster/scope/metric'",
                      "write ids such as earth/vc6YE/gpus_in_use")
        unit = options.extra.get("time_unit")
        times, bad, dst = parse_times(frame[columns["ts"]], tz=options.tz, unit=unit)
        check_times(checker, frame[columns["ts"]], bad | (times.isna().to_numpy() & ~dst),
                    columns["ts"], "time", "write ISO 8601 times such as 2026-01-05T08:30:00 "
                    "(or numbers with --option time_unit=s)",
                    reason="time is missing or does not parse", years=JOB_YEARS, times=times,
                    dst=dst, tz=options.tz, numeric=unit is not None, unit_hint=True)
        for column in extra:  # a stray quote closed lines later swallows the rows between
            text = frame[column].astype("string")
            checker.check(text.str.contains("\n", regex=False).fillna(False).to_numpy(
                dtype=bool), column, "a quoted field of an ignored column runs over several "
                "lines, so the rows inside it would be lost",
                "close the quote on its own line (or remove the line break)")
        values, bad = parse_numbers(frame[columns["value"]])
        checker.check(bad | np.isnan(values.to_numpy()), columns["value"],
                      "value is missing or not a number", "write plain numbers")
        metrics = ids.str.rsplit("/", n=1).str[-1].where(valid)
        numbers = values.to_numpy(dtype="float64", na_value=np.nan)
        for metric in metrics.dropna().unique():
            check_range(checker, numbers, columns["value"], str(metric),
                        rows=(metrics == metric).fillna(False).to_numpy(dtype=bool))
        good, rejects = checker.finish()
        keep = frame[LINE].isin(good[LINE]).to_numpy()
        sid = ids[keep].astype(object).to_numpy()
        out = pd.DataFrame({
            "cluster": [s.split("/", 1)[0] for s in sid],
            "series_id": sid,
            "ts": times.to_numpy()[keep],
            "value": values.to_numpy()[keep],
            LINE: frame[LINE].to_numpy()[keep],
        })
        if options.cluster:
            out["series_id"] = options.cluster + "/" + out["series_id"].str.split(
                "/", n=1).str[1]
            out["cluster"] = options.cluster
        out["ts"] = out["ts"].astype("datetime64[ns]")
        note = (f"column(s) {', '.join(map(repr, extra))} ignored: a long file's samples are "
                f"{columns['series_id']}, {columns['ts']}, {columns['value']}") if extra else ""
        return Batch(kind="samples", frame=out[[*SAMPLE_COLUMNS, LINE]], source=self.name,
                     rejects=rejects, note=note)
