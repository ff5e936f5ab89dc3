"""Candidate paths of the PRISM hybrid and the tests of its origins' regimes.

Plain array functions of one series' history (:mod:`prism.forecasters.hybrid` builds its
candidates and regimes from them): the last season repeated, the week's mean cycle, sinusoids,
the primitives' continuation of each lookback window, whether an origin held still or cycled,
and the step a series' values move in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from prism.primitives.jumps import trailing_extremes

if TYPE_CHECKING:
    from prism.primitives.dictionary import PrimitiveDictionary

FloatArray = npt.NDArray[np.float64]
Ends = npt.NDArray[np.int64]

#: :func:`series_quantum` tries the smallest change divided by up to this many (moves of 8
#: and 12 GPUs: a step of 4).
_QUANTUM_DIVISORS = 16


def still(history: FloatArray, origins: Ends, width: int) -> npt.NDArray[np.bool_]:
    """Whether the last ``width`` points before each origin (fewer at the start) are all equal:
    trailing extremes from one rolling pass, read at each origin's last point."""
    top, bottom = trailing_extremes(history, width)
    last = origins - 1
    return np.asarray(top[last] == bottom[last])


def cycled(history: FloatArray, origins: Ends, season: int) -> npt.NDArray[np.bool_]:
    """Whether the last ``season`` points before each origin repeated the ``season`` before
    them more closely than they held the value before them (strictly: a series that held
    still did both equally well). False where the history is shorter than two seasons."""
    out = np.zeros(len(origins), dtype=bool)
    if season < 2:
        return out
    for i, e in enumerate(origins):
        if e < 2 * season + 1:
            continue
        last = history[e - season:e]
        repeat = float(np.mean(np.abs(last - history[e - 2 * season:e - season])))
        held = float(np.mean(np.abs(last - history[e - season - 1])))
        out[i] = repeat < held
    return out


def series_quantum(y: FloatArray) -> float:
    """The step a series' values move in: the largest that every change is a whole multiple
    of (to 1e-6 of it), among the smallest change divided by 1 to ``_QUANTUM_DIVISORS``; 0
    when there is none (values that move continuously) or the series never moved.

    GPUs in use move in whole GPUs (or 8 at a time on a VC of 8-GPU jobs), replicas in whole
    replicas, counts by one.
    """
    finite = y[np.isfinite(y)]
    moves = np.abs(np.diff(finite))
    moves = moves[moves > 0]
    if not len(moves):
        return 0.0
    smallest = float(moves.min())
    for divisor in range(1, _QUANTUM_DIVISORS + 1):
        step = smallest / divisor
        if step <= 1e-9 * float(np.max(np.abs(finite))):
            break
        units = moves / step
        if bool(np.all(np.abs(units - np.round(units)) <= 1e-6 * units)):
            return step
    return 0.0


def repeat_last(history: FloatArray, origins: Ends, steps: int, season: int) -> FloatArray:
    out = np.empty((len(origins), steps))
    for i, e in enumerate(origins):
        out[i] = np.resize(history[e - season:e], steps) if e >= season else history[e - 1]
    return out


def profile_paths(history: FloatArray, origins: Ends, steps: int, season: int,
                   anchor: int) -> FloatArray:
    """The mean of the last 7 cycles (or fewer), shifted to the last hour's level.

    The cycle's value at each step ahead, plus the mean over the last ``anchor`` steps of the
    history minus the cycle's mean over the same positions: a smooth seasonal profile that
    follows the current level (for noisy counts whose last value is mostly noise).
    """
    out = np.full((len(origins), steps), np.nan)
    for i, e in enumerate(origins):
        cycles = min(7, int(e) // season) if season >= 2 else 0
        if cycles < 1:
            continue
        block = history[e - cycles * season:e].reshape(cycles, season)
        profile = block.mean(axis=0)  # position j is phase (e - season + j)
        a = min(anchor, season)
        level = float(np.mean(history[e - a:e])) - float(np.mean(profile[season - a:]))
        out[i] = np.resize(profile, steps) + level
    return out


def sinusoid_sum(terms: tuple[FloatArray, FloatArray, FloatArray], t: FloatArray) -> FloatArray:
    freqs, amps, phases = terms
    out = np.zeros(t.shape)
    for f, a, p in zip(freqs, amps, phases, strict=True):
        out += a * np.cos(2.0 * np.pi * f * t + p)
    return out


def primitive_paths(d: PrimitiveDictionary, history: FloatArray, origins: Ends, steps: int,
                    floor: float) -> tuple[FloatArray, FloatArray]:
    """The atoms' continuation of each lookback window of ``history`` (``(len(origins),
    steps)``, NaN before the first full window), and the window's value at the origin, as
    the dictionary rebuilds it; ``floor`` is the least scale a window is normalised by."""
    lb = d.lookback
    paths = np.full((len(origins), steps), np.nan)
    at_end = np.full(len(origins), np.nan)
    ok = origins >= lb
    if not ok.any():
        return paths, at_end
    windows = np.stack([history[e - lb:e] for e in origins[ok]])
    codes = d.encode(windows, part="lookback", min_scale=floor)
    at_end[ok] = d.reconstruct(codes, part="lookback")[:, -1]
    chunks = []
    done = 0
    while done < steps:  # beyond the atoms' horizon: encode the path so far again
        future = d.reconstruct(codes, part="horizon") if d.horizon else (
            np.repeat(windows[:, -1:], 1, axis=1))
        chunks.append(future)
        done += future.shape[1]
        if done < steps:
            windows = np.concatenate([windows, future], axis=1)[:, -lb:]
            codes = d.encode(windows, part="lookback", min_scale=floor)
    paths[ok] = np.concatenate(chunks, axis=1)[:, :steps]
    return paths, at_end
