"""``helios-vc``: Helios per-minute virtual-cluster counters (SenseTime Earth, SC '21 artifact).

Files: ``earth_<vc>_1min.csv.gz`` as bundled in ``../shared/data/traces/helios_earth_vc``, or the
artifact's original layout ``Earth_vcs/<vc>/cluster_sequence_vc.csv``. The VC is ``--scope``, or
else comes from the file name (``earth_vc6YE_1min.csv.gz`` -> ``vc6YE``) or the folder of a
``cluster_sequence_vc.csv``. The cluster is ``--cluster`` (default ``earth``).

Series (each minute is a snapshot of the VC):
- ``gpus_in_use`` <- ``running_gpu_num``
- ``gpus_pending`` <- ``pending_gpu_num`` (GPUs asked for by queued jobs)
- ``gpu_demand`` <- ``running_gpu_num + pending_gpu_num``
- ``gpu_capacity`` <- ``total_gpu_num`` (kept for the capacity planner)

Times are naive local times (the cluster is in China); they are stored as they are unless
``--tz Asia/Shanghai`` asks to convert them to UTC.
"""

from __future__ import annotations

import re
from pathlib import Path

from prism.errors import IngestError
from prism.ingest.base import Adapter, Batch, IngestOptions, read_table, register
from prism.ingest.wide_csv import samples_from_columns, series_id_for

_COLUMNS = {
    "running_gpu_num": "gpus_in_use",
    "pending_gpu_num": "gpus_pending",
    "total_gpu_num": "gpu_capacity",
}
_NAME = re.compile(r"^[A-Za-z]+_(?P<vc>[A-Za-z0-9]+)_1min\.csv(\.gz)?$")


def scope_of(path: Path, options: IngestOptions) -> str:
    """The VC of a Helios per-VC file: ``--scope``, else from its name or folder.

    Raises:
        IngestError: when neither tells.
    """
    if options.scope:
        return options.scope
    match = _NAME.match(path.name)
    if match:
        return match.group("vc")
    if path.name.startswith("cluster_sequence_vc.csv") and path.parent.name:
        return path.parent.name
    raise IngestError(
        "cannot tell the VC from the file name", path=str(path),
        fix="pass --scope VC, or name the file earth_<vc>_1min.csv.gz",
    )


@register
class HeliosVcAdapter(Adapter):
    """Helios per-minute VC sequences."""

    name = "helios-vc"
    time_columns = {"ts": "time"}
    kind = "samples"
    description = "Helios per-minute VC counters (earth_<vc>_1min.csv.gz)"

    def identity(self, path: Path, options: IngestOptions) -> str:
        """The VC, which may come from the file name."""
        return scope_of(path, options)

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read one VC file into samples of four series."""
        cluster = options.cluster or "earth"
        scope = scope_of(path, options)
        frame = read_table(path, required=["time", *_COLUMNS])
        series = {col: series_id_for(path, cluster, scope, metric)
                  for col, metric in _COLUMNS.items()}
        demand = series_id_for(path, cluster, scope, "gpu_demand")
        samples, rejects = samples_from_columns(
            path, frame, time_col="time", series=series, cluster=cluster, options=options,
            derived={demand: ("running_gpu_num", "pending_gpu_num")},
        )
        return Batch(kind="samples", frame=samples, source=self.name, rejects=rejects)
