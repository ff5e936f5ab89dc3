"""Synthetic panels for tests: one seeded generator instead of a copy in every file.

A panel is PRISM's long frame ``series_id, ts, value`` (see ``prism.schema``). Series ``i`` is

    level[i] + trend * t + amplitude * sin(2 pi t / period + i) + noise * N(0, 1)

at steps ``t = 0, 1, ...``, with the noise of series 0, 1, ... drawn in that order from
``numpy.random.default_rng(seed)``: the same arguments give the same panel, bit for bit.
Tests whose assertions depend on a special shape (a hand-made series, a hierarchy that adds up,
injected bursts) keep building their own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

#: Where the panels start unless told: a Monday.
START = pd.Timestamp("2026-01-05")


def make_panel(
    series: int = 2,
    length: int | Sequence[int] = 432,
    *,
    freq: str = "10min",
    start: str | pd.Timestamp = START,
    end: str | pd.Timestamp | None = None,
    ids: Sequence[str] | None = None,
    level: float | Sequence[float] = 50.0,
    trend: float = 0.0,
    amplitude: float = 20.0,
    period: int | None = None,
    noise: float = 3.0,
    floor: float | None = None,
    decimals: int | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """A seeded panel of ``series`` series with a level, a daily cycle and Gaussian noise.

    The default is two 10-minute series of three days (432 steps) from :data:`START`, ids
    ``c/vc0/gpus_in_use`` and ``c/vc1/gpus_in_use``, around 50 GPUs with a daily swing of 20
    and noise of standard deviation 3.

    Args:
        series: how many series (ignored when ``ids`` is given).
        length: steps per series; one per series to give them different lengths.
        freq: the step (a pandas offset alias).
        start: the first time of every series.
        end: the last time of every series instead (series of different lengths then end
            together and the longer ones start earlier).
        ids: the series ids (default ``c/vc{i}/gpus_in_use``).
        level: the mean of every series, or one per series.
        trend: added per step.
        amplitude: of the daily cycle (0: none).
        period: steps per cycle (default: one day of ``freq``).
        noise: standard deviation of the Gaussian noise (0: none, nothing drawn).
        floor: clip values below it (e.g. 0: GPU counts are never negative).
        decimals: round values to this many decimals (what a CSV round trip keeps).
        seed: of the noise.

    Returns:
        ``series_id, ts, value`` sorted by series (in ``ids`` order), then time.
    """
    names = list(ids) if ids is not None else [f"c/vc{i}/gpus_in_use" for i in range(series)]
    lengths = [length] * len(names) if isinstance(length, int) else list(length)
    levels = [level] * len(names) if isinstance(level, int | float) else list(level)
    if len(lengths) != len(names) or len(levels) != len(names):
        raise ValueError("make_panel: give one length and one level per series, or one for all")
    two = pd.date_range(START, periods=2, freq=freq)
    cycle = period if period is not None else int(pd.Timedelta("1D") / (two[1] - two[0]))
    rng = np.random.default_rng(seed)
    frames = []
    for i, (sid, n, mean) in enumerate(zip(names, lengths, levels, strict=True)):
        t = np.arange(n, dtype=np.float64)
        value = mean + trend * t + amplitude * np.sin(2 * np.pi * t / cycle + i)
        if noise:
            value = value + rng.normal(0, noise, n)
        if floor is not None:
            value = np.maximum(value, floor)
        if decimals is not None:
            value = value.round(decimals)
        ts = (pd.date_range(end=pd.Timestamp(end), periods=n, freq=freq) if end is not None
              else pd.date_range(pd.Timestamp(start), periods=n, freq=freq))
        frames.append(pd.DataFrame({"series_id": sid, "ts": ts, "value": value}))
    return pd.concat(frames, ignore_index=True)


def panel_of(values: Mapping[str, Sequence[float] | np.ndarray], *, freq: str = "10min",
             start: str | pd.Timestamp = START) -> pd.DataFrame:
    """The panel of given values: ``{series_id: values}``, each series from ``start``."""
    return pd.concat(
        [pd.DataFrame({"series_id": sid, "ts": pd.date_range(pd.Timestamp(start),
                                                             periods=len(v), freq=freq),
                       "value": np.asarray(v, dtype=np.float64)})
         for sid, v in values.items()], ignore_index=True)


class HandForecasts:
    """A forecast source of hand-made forecasts: quantile ``u`` of a series is
    ``mean + width * (u - 0.5)`` at each of its steps."""

    label = "hand"

    def __init__(self, spec: dict[str, tuple[list[float], float]]) -> None:
        self.spec = spec

    def forecast(self, store: Any, series_ids: list[str], horizon: str,
                 levels: list[float]) -> tuple[pd.DataFrame, int]:
        frames = []
        for sid in series_ids:
            mean, width = self.spec[sid]
            last = store.load_panel([sid])["ts"].max()
            frame = pd.DataFrame({"series_id": sid, "model": "hand", "mean": mean,
                                  "ts": pd.date_range(last + pd.Timedelta("10min"),
                                                      periods=len(mean), freq="10min")})
            for u in levels:
                frame[f"p{round(u * 100, 6):g}"] = np.asarray(mean) + width * (u - 0.5)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True), 600


def write_series_store(folder: Path, series: Mapping[str, Any], capacity: str, *,
                       start: pd.Timestamp, freq: str = "10min", decimals: int = 3) -> Path:
    """A store at ``folder/prism.duckdb`` of hand-made series, ingested through the CLI as a
    user would: ``series`` (``{series_id: values}`` from ``start`` every ``freq``) as a
    long-csv, ``capacity`` (the text of a capacity-csv) as a capacity table."""
    from prism.cli import main

    samples = folder / "samples.csv"
    pd.concat([pd.DataFrame({"series_id": sid,
                             "ts": pd.date_range(start, periods=len(v), freq=freq),
                             "value": np.round(np.asarray(v, dtype=np.float64), decimals)})
               for sid, v in series.items()]
              ).to_csv(samples, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    table = folder / "capacity.csv"
    table.write_text(capacity)
    db = folder / "prism.duckdb"
    assert main(["--db", str(db), "ingest", str(samples), "--format", "long-csv", "--freq",
                 freq, "-q"]) == 0
    assert main(["--db", str(db), "ingest", str(table), "--format", "capacity-csv", "-q"]) == 0
    return db


def table_cells(row_html: str) -> dict[str, str]:
    """``data-field`` -> ``data-value`` (else the text) of one row of a report's table."""
    out = {}
    for name, attrs, text in re.findall(r"<td[^>]*data-field='(\w+)'([^>]*)>(.*?)</td>",
                                        row_html):
        value = re.search(r"data-value='([^']+)'", attrs)
        out[name] = value.group(1) if value else unescape(text)
    return out


def get_when_fitted(url: str, params: dict[str, str], *, tries: int = 60) -> httpx.Response:
    """GET, waiting out 503s (a model being fitted on a busy machine) as a client would;
    the answer must then be 200."""
    for _ in range(tries):
        response = httpx.get(url, params=params, timeout=120)
        if response.status_code != 503:
            break
        time.sleep(float(response.headers.get("Retry-After", "1")))
    assert response.status_code == 200, response.text[:500]
    return response
