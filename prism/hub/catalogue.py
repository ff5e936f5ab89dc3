"""The series the hub serves, each with its data watermark (read from the store)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pandas as pd

from prism.errors import SeriesNotFound
from prism.hub.types import SeriesState
from prism.schema import freq_seconds, split_series_id
from prism.store import Store


class Catalogue:
    """Every series' :class:`SeriesState`, refreshed cluster by cluster after an ingest.

    The mapping is replaced whole on each refresh, so :meth:`get` reads it without a lock
    (from the event loop too).

    Args:
        store: the open store (read on cursors of its own).
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._states: dict[str, SeriesState] = {}

    def __len__(self) -> int:
        return len(self._states)

    def get(self, series_id: str) -> SeriesState | None:
        """The series' state if it is known, without touching the store."""
        return self._states.get(series_id)

    def state(self, series_id: str) -> SeriesState:
        """The series' state, read from the store when it is not known yet.

        Raises:
            DataContractError: for an id that is not ``cluster/scope/metric``.
            SeriesNotFound: for an unknown series (with the closest ids).
        """
        state = self._states.get(series_id)
        if state is not None:
            return state
        cluster = split_series_id(series_id)[0]
        with self._store.cursor() as cur:
            cur.require_series([series_id])  # raises with the closest ids
            self.refresh(cur, [cluster])
        state = self._states.get(series_id)
        if state is None:  # pragma: no cover - the store has it but the catalogue not
            raise SeriesNotFound(f"series {series_id!r} is not in the store")
        return state

    def snapshot(self) -> dict[str, SeriesState]:
        """Every series' state (a copy)."""
        with self._lock:
            return dict(self._states)

    def refresh(self, cur: Store, clusters: Sequence[str] | None = None) -> list[str]:
        """Read the states of these clusters (all when ``None``) from ``cur``.

        Returns:
            The series of those clusters that appeared, disappeared or whose watermark
            changed, sorted.
        """
        states = {}
        for row in cur.series_watermarks(clusters).to_dict("records"):
            last = pd.Timestamp(row["last_ts"])
            states[str(row["series_id"])] = SeriesState(
                series_id=str(row["series_id"]), cluster=str(row["cluster"]),
                freq_s=freq_seconds(str(row["freq"])), first_ts=pd.Timestamp(row["first_ts"]),
                last_ts=last, n_points=int(row["n_points"]),
                watermark=f"{last.isoformat()}#{int(row['checksum']):016x}")
        with self._lock:
            if clusters is None:
                before = self._states
                self._states = states
            else:
                before = {k: v for k, v in self._states.items() if v.cluster in clusters}
                keep = {k: v for k, v in self._states.items() if v.cluster not in clusters}
                self._states = {**keep, **states}
        return sorted(sid for sid in set(before) | set(states)
                      if sid not in before or sid not in states
                      or before[sid].watermark != states[sid].watermark)
