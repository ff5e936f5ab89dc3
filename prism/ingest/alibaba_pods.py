"""``alibaba-pods``: Alibaba cluster-trace-gpu-v2023 pod list (Weng et al., ATC '23).

Columns ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
creation_time, deletion_time, scheduled_time``; times are seconds from the trace origin, which the
trace does not publish: ``--origin`` sets it (default ``2023-01-01T00:00:00`` UTC, so that the
series have plausible dates; only differences matter).

One pod becomes one canonical job: ``job_id=name``, ``scope=qos`` (the trace has no tenant),
``gpu_type=gpu_spec``, submit/start/end = creation/scheduled/deletion time, ``status=pod_phase``.
A pod holds ``num_gpu`` GPUs, or ``gpu_milli / 1000`` of one GPU when ``num_gpu == 1`` (GPU
sharing), from ``scheduled_time`` to ``deletion_time``. Pods without a ``scheduled_time``
(Pending) never hold GPUs; they count as pending until deleted. Resource requests (``num_gpu``,
``gpu_milli``, ``cpu_milli``, ``memory_mib``) must be >= 0.

Observation window: every deletion falls between about 9.96M and 12.90M s while creation times go
back to 0 (long-running pods), so the series start at ``--option window_start=SECONDS`` (default
10,000,800 s) and end at the last deletion. Before that, the trace does not see pods that ended.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from prism.errors import ConfigError
from prism.ingest.base import LINE, Adapter, Batch, IngestOptions, read_table, register
from prism.ingest.checks import (
    JOB_YEARS,
    RowChecker,
    check_jobs,
    check_times,
    job_frame,
    parse_numbers,
    parse_times,
)

DEFAULT_ORIGIN = "2023-01-01T00:00:00"
DEFAULT_WINDOW_START = 10_000_800
_REQUIRED = ("name", "num_gpu", "gpu_milli", "qos", "pod_phase", "creation_time",
             "deletion_time", "scheduled_time")
_TYPES: dict[str, pa.DataType] = {
    "name": pa.string(), "cpu_milli": pa.float64(), "memory_mib": pa.float64(),
    "num_gpu": pa.float64(), "gpu_milli": pa.float64(), "gpu_spec": pa.string(),
    "qos": pa.string(), "pod_phase": pa.string(), "creation_time": pa.float64(),
    "deletion_time": pa.float64(), "scheduled_time": pa.float64(),
}


def pod_gpus(num_gpu: np.ndarray, gpu_milli: np.ndarray) -> np.ndarray:
    """GPUs a pod holds: ``gpu_milli/1000`` of one GPU when shared, else ``num_gpu``."""
    share = np.where(np.isnan(gpu_milli), 1000.0, gpu_milli) / 1000.0
    return np.where(num_gpu == 1, share, num_gpu)


@register
class AlibabaPodsAdapter(Adapter):
    """Alibaba GPU v2023 pod list."""

    name = "alibaba-pods"
    time_columns = {"submit_ts": "creation_time", "start_ts": "scheduled_time",
                    "end_ts": "deletion_time"}
    kind = "jobs"
    description = "Alibaba cluster-trace-gpu-v2023 pod list (fractional shared GPUs)"
    option_keys = ("window_start",)

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read a pod list into canonical jobs."""
        try:
            origin = pd.Timestamp(options.origin or DEFAULT_ORIGIN)
            window_start = float(options.extra.get("window_start", DEFAULT_WINDOW_START))
        except ValueError as exc:
            raise ConfigError(f"bad --origin or window_start: {exc}; write --origin "
                              "2023-01-01T00:00:00 and --option window_start=10000800") from exc
        if origin.tzinfo is not None:
            origin = origin.tz_convert("UTC").tz_localize(None)
        frame = read_table(path, required=_REQUIRED, column_types=_TYPES)
        checker = RowChecker(path, frame, options.on_error)
        num = {}
        for col in ("num_gpu", "gpu_milli", "cpu_milli", "memory_mib"):
            if col in frame.columns:
                num[col], bad = parse_numbers(frame[col])
                checker.check(bad, col, f"{col} is not a number", "write a plain number")
                if col != "num_gpu":  # a negative num_gpu fails check_jobs' num_gpus check
                    checker.check((num[col] < 0).to_numpy(dtype=bool, na_value=False), col,
                                  f"{col} is negative (valid range: >= 0)",
                                  f"{col} is a resource request: write a value >= 0")
        times = {}
        for col in ("creation_time", "scheduled_time", "deletion_time"):
            times[col], bad, _ = parse_times(frame[col], unit="s", origin=origin)
            check_times(checker, frame[col], bad, col, col, "write seconds since the trace "
                        "origin", years=JOB_YEARS, numeric=True,
                        reason=f"{col} is not a number of seconds")
        gpus = pod_gpus(num["num_gpu"].to_numpy(), num["gpu_milli"].to_numpy())
        gpu_milli = num["gpu_milli"].to_numpy()
        checker.check((num["num_gpu"].to_numpy() == 1) & ((gpu_milli < 0) | (gpu_milli > 1000)),
                      "gpu_milli", "GPU share out of range", "gpu_milli is 0..1000")
        cpus = num["cpu_milli"] / 1000 if "cpu_milli" in num else None
        jobs = job_frame(
            {
                "source": self.name,
                "cluster": options.cluster or "alibaba-v2023",
                "scope": frame["qos"].astype("string").astype(object),
                "job_id": frame["name"].astype("string").astype(object),
                "gpu_type": frame["gpu_spec"].astype("string").astype(object)
                if "gpu_spec" in frame.columns else None,
                "num_gpus": gpus,
                "num_cpus": cpus,
                "submit_ts": times["creation_time"],
                "start_ts": times["scheduled_time"],
                "end_ts": times["deletion_time"],
                "status": frame["pod_phase"].astype("string").astype(object),
            },
            frame[LINE].to_numpy(),
        )
        checker.frame = jobs
        check_jobs(checker, jobs)
        good, rejects = checker.finish()
        obs_end = good["end_ts"].max() if len(good) else None
        return Batch(
            kind="jobs", frame=good, source=self.name, rejects=rejects,
            obs_start=origin + pd.Timedelta(seconds=window_start),
            obs_end=None if obs_end is None or pd.isna(obs_end) else pd.Timestamp(obs_end),
        )
