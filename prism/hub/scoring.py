"""Forecast errors as data arrives: the last forecast served per series and model is kept, and
scored against the points an ingest brings (``forecast_errors``; rolling error in
``/metrics``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from prism.schema import TS, VALUE
from prism.store import Store


@dataclass
class _Served:
    """The points of a served forecast not scored yet."""

    model_version: str
    ts: np.ndarray  # int64 nanoseconds
    mean: np.ndarray


class ServedLog:
    """The latest forecast served per ``(series, model key)``, each point scored once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._served: dict[tuple[str, str], _Served] = {}

    def note(self, series_id: str, model_key: str, version: str,
             ts: np.ndarray, mean: np.ndarray) -> None:
        """Keep a forecast just served, unless a later or longer one is kept already.

        Args:
            ts: the forecast's timestamps as int64 nanoseconds.
            mean: its point forecasts.
        """
        with self._lock:
            old = self._served.get((series_id, model_key))
            if old is None or ts[0] > old.ts[0] or (ts[0] == old.ts[0] and len(ts) > len(old.ts)):
                self._served[(series_id, model_key)] = _Served(version, ts, np.asarray(mean))

    def score(self, cur: Store, series_ids: Sequence[str]) -> int:
        """Score the kept forecasts of these series against the values now stored.

        Returns:
            The number of forecast points scored (added to ``forecast_errors``).
        """
        wanted = set(series_ids)
        with self._lock:
            todo = {k: v for k, v in self._served.items() if k[0] in wanted}
        frames = []
        for (sid, model_key), served in todo.items():
            start = pd.Timestamp(int(served.ts[0]))
            end = pd.Timestamp(int(served.ts[-1])) + pd.Timedelta(seconds=1)
            actual = cur.load_panel([sid], start=start, end=end)
            if actual.empty:
                continue
            at = actual[TS].to_numpy().astype("datetime64[ns]").astype(np.int64)
            pos = np.searchsorted(served.ts, at)
            ok = (pos < len(served.ts)) & (served.ts[np.minimum(pos, len(served.ts) - 1)] == at)
            if not ok.any():
                continue
            frames.append(pd.DataFrame({
                "series_id": sid, "model": model_key, "model_version": served.model_version,
                "origin_ts": start, "ts": actual[TS].to_numpy()[ok], "step": pos[ok] + 1,
                "forecast": served.mean[pos[ok]], "actual": actual[VALUE].to_numpy()[ok],
                "scored_at": pd.Timestamp.now("UTC").tz_localize(None),
            }))
            with self._lock:  # each point is scored once: keep only what is still ahead
                keep = served.ts > at.max()
                if keep.any():
                    self._served[(sid, model_key)] = _Served(
                        served.model_version, served.ts[keep], served.mean[keep])
                else:
                    self._served.pop((sid, model_key), None)
        if not frames:
            return 0
        return cur.add_forecast_errors(pd.concat(frames, ignore_index=True))
