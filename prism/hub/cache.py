"""The one forecast cache: an in-memory LRU in front of DuckDB's ``forecast_cache``.

A forecast is cached under :func:`cache_key` (series, model key, model version, data
watermark, horizon steps, quantiles): the key names its content, so a stale entry is never
served, only evicted or dropped (an ingest drops those of the series it changed).

- **Memory.** The last ``entries`` answers, each with its API rendering once something asked
  for it (:meth:`ForecastCache.rendered`). A hit answers on the event loop, without DuckDB,
  pydantic or a thread: rendering a one-day forecast of three quantiles costs ~95 µs, a third
  of a cached ``GET /v1/forecast`` (p50 0.30 ms), so it is kept with the answer instead of
  redone per request.
- **DuckDB.** Every answer, written behind the requests by one writer thread (a burst of
  answers is one insert), so a restart or an evicted entry costs a read, not a forecast.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace

from prism.hub.catalogue import Catalogue
from prism.hub.metrics import HubMetrics
from prism.hub.types import ServedForecast
from prism.store import Store

logger = logging.getLogger(__name__)

#: ``(series, model key, model version, watermark, horizon steps, quantiles)``, as the
#: columns of ``forecast_cache`` hold it.
CacheKey = tuple[str, str, str, str, int, str]
_Row = tuple[str, str, str, str, int, str, str]


def cache_key(series_id: str, model: str, model_version: str, watermark: str,
              horizon_steps: int, quantiles: Sequence[float]) -> CacheKey:
    """What a forecast is cached under, in memory and in ``forecast_cache``."""
    return (series_id, model, model_version, watermark, horizon_steps,
            ",".join(repr(float(q)) for q in quantiles))  # exact: :g kept 6 digits


class _Entry:
    """A cached answer and, once asked for, its API rendering."""

    __slots__ = ("served", "body")

    def __init__(self, served: ServedForecast) -> None:
        self.served = served
        self.body: bytes | None = None


class ForecastCache:
    """Forecast answers in memory and in DuckDB (see the module docstring).

    Args:
        store: the open store (read and written on cursors of its own).
        entries: answers kept in memory (0: DuckDB only).
        write_lock: the lock every write to the store takes.
        catalogue: the current watermarks: rows of data since replaced are not written.
        metrics: where hits and misses are counted.
    """

    def __init__(self, store: Store, *, entries: int, write_lock: threading.Lock,
                 catalogue: Catalogue, metrics: HubMetrics) -> None:
        self._store = store
        self._cap = int(entries)
        self._write_lock = write_lock
        self._catalogue = catalogue
        self._metrics = metrics
        self._lock = threading.Lock()  # guards the LRU; never held while waiting
        self._memory: OrderedDict[CacheKey, _Entry] = OrderedDict()
        self._pending: queue.Queue[_Row | None] = queue.Queue()

    def __len__(self) -> int:
        return len(self._memory)

    # -- reads ---------------------------------------------------------------------------------
    def in_memory(self, key: CacheKey, alias: str) -> ServedForecast | None:
        """The answer under ``key`` in memory (marked recently used), counted; never blocks
        on the store: for the event loop."""
        with self._lock:
            entry = self._memory.get(key)
            if entry is not None:
                self._memory.move_to_end(key)
        if entry is None:
            return None
        self._metrics.cache_answer(alias, "hit_memory")
        return entry.served

    def get(self, key: CacheKey, alias: str) -> ServedForecast | None:
        """The answer under ``key`` from memory, else from DuckDB (then kept in memory)."""
        hit = self.in_memory(key, alias)
        if hit is not None:
            return hit
        with self._store.cursor() as cur:
            payload = cur.cached_forecast(*key)
        if payload is None:
            return None
        served = replace(ServedForecast.from_json(payload), cached=True)
        self._remember(key, served)
        self._metrics.cache_answer(alias, "hit_store")
        return served

    def rendered(self, served: ServedForecast,
                 render: Callable[[ServedForecast], bytes]) -> bytes:
        """``render(served)``, done once per memory entry.

        Args:
            served: an answer of :meth:`in_memory` or :meth:`get` (another is rendered, not
                kept).
            render: the API's rendering; the same function on every call (one rendering is
                kept per entry).
        """
        key = cache_key(served.series_id, served.model, served.model_version,
                        served.watermark, served.horizon_steps, served.quantiles)
        with self._lock:
            entry = self._memory.get(key)
        if entry is None or entry.served is not served:
            return render(served)
        body = entry.body
        if body is None:  # two threads may both render it: same bytes, one is kept
            body = entry.body = render(served)
        return body

    # -- writes --------------------------------------------------------------------------------
    def add(self, key: CacheKey, fresh: ServedForecast, alias: str) -> None:
        """Keep a newly computed answer (counted as a miss); DuckDB gets it behind."""
        self._metrics.cache_answer(alias, "miss")
        self._pending.put((*key, fresh.to_json()))
        self._remember(key, replace(fresh, cached=True))

    def drop(self, cur: Store, series_ids: Sequence[str]) -> None:
        """Forget the answers of these series, in memory and in DuckDB (on ``cur``, which
        holds the write lock)."""
        gone = set(series_ids)
        with self._lock:
            for key in [k for k in self._memory if k[0] in gone]:
                del self._memory[key]
        cur.drop_cached_forecasts(list(series_ids))

    def write_rows(self) -> None:
        """The one thread that writes answers to DuckDB; returns after :meth:`stop`."""
        while True:
            item = self._pending.get()
            rows = [] if item is None else [item]
            while True:  # take what else is waiting: one insert for a burst of answers
                try:
                    more = self._pending.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    item = None
                else:
                    rows.append(more)
            current = self._catalogue.snapshot()
            rows = [r for r in rows if r[0] in current and current[r[0]].watermark == r[3]]
            if rows:
                try:
                    with self._write_lock, self._store.cursor() as cur:
                        cur.cache_forecasts(rows)
                except Exception:  # the cache is an optimisation: log, never stop serving
                    logger.exception("could not write %d forecasts to the cache", len(rows))
            if item is None:
                return

    def stop(self) -> None:
        """Make :meth:`write_rows` write what is waiting and return."""
        self._pending.put(None)

    def _remember(self, key: CacheKey, served: ServedForecast) -> None:
        if self._cap <= 0:
            return
        with self._lock:
            self._memory[key] = _Entry(served)
            self._memory.move_to_end(key)
            while len(self._memory) > self._cap:
                self._memory.popitem(last=False)
