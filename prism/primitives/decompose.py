"""Decompose demand series into primitives and structural parts that add up exactly.

For each series ``y`` (regular, gaps already filled by the derivation):

1. **periods**: :func:`~prism.primitives.spectral.find_periods` (FFT periodogram against
   shuffled surrogates, confirmed by autocorrelation);
2. **level**: level shifts (change points), a piecewise-constant part that is 0 before the
   first shift (the periods are then looked for again without it);
3. **trend**: a robust smooth trend of ``y - level`` over the longest period (one day of steps
   when no period is found);
4. **primitives**: the detrended series cut into consecutive windows of the dictionary's atom
   length, each encoded as a sparse activation vector over the atoms (recomputed per window:
   the "dynamic" primitives) and rebuilt from it;
5. **bursts**: MAD-based bursts of what is left, the part above a robust baseline inside them;
6. **spectral**: the adaptive spectral refinement of what is left (sinusoids that stand out of
   its spectrum);
7. **residual**: ``y`` minus all the above, so the components sum to the series exactly.

The dictionary is learned from windows pooled across many series (:func:`fit_dictionary`), with
fixed Fourier atoms at the periods found and low-order trend atoms.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from prism.errors import DataContractError
from prism.primitives.dictionary import PrimitiveDictionary
from prism.primitives.spectral import SpectralRefiner, find_periods
from prism.primitives.structure import (
    burst_baseline,
    burst_component,
    find_bursts,
    find_level_shifts,
    robust_trend,
)
from prism.primitives.types import Burst, LevelShift, Period
from prism.schema import SERIES_ID, TS, VALUE, panel_freq, validate_panel

logger = logging.getLogger(__name__)

#: The components of a decomposition, in the order they are taken out.
COMPONENTS = ("level", "trend", "primitives", "bursts", "spectral", "residual")
DAY_S = 86_400
BURST_THRESHOLD = 6.0


@dataclass
class SeriesDecomposition:
    """The decomposition of one series.

    Attributes:
        series_id: the series.
        ts: its timestamps.
        values: its values.
        freq_s: its step in seconds.
        components: component name -> array, same length as ``values``; they add up to it.
        periods: significant periods, strongest first.
        bursts: bursts (indices into ``values``).
        level_shifts: level shifts (indices into ``values``).
        usage: one row per atom the series uses: ``atom_id, kind, label, share`` (share of the
            detrended windows' variance the atom explains), largest share first.
        note: why a part is missing (no primitives: no dictionary could be learned), or "".
    """

    series_id: str
    ts: pd.DatetimeIndex
    values: np.ndarray
    freq_s: int
    components: dict[str, np.ndarray]
    periods: list[Period]
    bursts: list[Burst]
    level_shifts: list[LevelShift]
    usage: pd.DataFrame
    top_atoms: dict[str, np.ndarray] = field(default_factory=dict)
    note: str = ""

    def summary(self, *, top: int = 5) -> dict[str, Any]:
        """A JSON-ready summary: periods, top primitives, bursts and level shifts."""
        def iso(i: int) -> str:
            return pd.Timestamp(self.ts[min(i, len(self.ts) - 1)]).isoformat()

        def end_iso(b: Burst) -> str:  # ``end`` is one past the last step: its bucket's start
            return (pd.Timestamp(self.ts[b.end - 1]) + pd.Timedelta(seconds=self.freq_s)
                    ).isoformat()

        return {
            "series_id": self.series_id,
            "freq_s": self.freq_s,
            "periods": [{"seconds": p.seconds, "steps": p.steps, "strength": p.strength}
                        for p in self.periods],
            "primitives": [
                {"id": r.atom_id, "kind": r.kind, "label": r.label, "share": r.share}
                for r in self.usage.head(top).itertuples()
            ],
            "bursts": [{"start": iso(b.start), "end": end_iso(b), "peak": iso(b.peak),
                        "height": b.height} for b in self.bursts],
            "level_shifts": [{"at": iso(s.at), "delta": s.delta} for s in self.level_shifts],
            "variance_share": self.variance_shares(),
            "note": self.note,
        }

    def variance_shares(self) -> dict[str, float]:
        """Each component's variance over the series' variance (they need not add to 1)."""
        total = float(np.var(self.values)) or 1.0
        return {name: float(np.var(part)) / total for name, part in self.components.items()}

    def frame(self) -> pd.DataFrame:
        """The components in long format: ``series_id, ts, component, value``."""
        n = len(self.values)
        return pd.DataFrame({
            SERIES_ID: self.series_id,
            TS: np.tile(self.ts.to_numpy(), len(self.components)),
            "component": np.repeat(list(self.components), n),
            VALUE: np.concatenate(list(self.components.values())),
        })


@dataclass
class Decomposition:
    """Decompositions of a panel.

    Attributes:
        series: series id -> its :class:`SeriesDecomposition`.
        dictionary: the primitive dictionary used.
    """

    series: dict[str, SeriesDecomposition] = field(default_factory=dict)
    dictionary: PrimitiveDictionary | None = None

    @property
    def components(self) -> pd.DataFrame:
        """All components in long format: ``series_id, ts, component, value``."""
        frames = [d.frame() for d in self.series.values()]
        if not frames:
            return pd.DataFrame(columns=[SERIES_ID, TS, "component", VALUE])
        return pd.concat(frames, ignore_index=True)

    @property
    def usage(self) -> pd.DataFrame:
        """Primitive usage per series: ``series_id, atom_id, kind, label, share``."""
        frames = [d.usage.assign(series_id=sid) for sid, d in self.series.items()]
        cols = [SERIES_ID, "atom_id", "kind", "label", "share"]
        if not frames:
            return pd.DataFrame(columns=cols)
        return pd.concat(frames, ignore_index=True)[cols]



def _series_arrays(panel: pd.DataFrame) -> dict[str, tuple[pd.DatetimeIndex, np.ndarray]]:
    out: dict[str, tuple[pd.DatetimeIndex, np.ndarray]] = {}
    for sid, group in panel.groupby(SERIES_ID, sort=True):
        out[str(sid)] = (pd.DatetimeIndex(group[TS]), group[VALUE].to_numpy(dtype=np.float64))
    return out


def fit_dictionary(
    panel: pd.DataFrame,
    *,
    n_atoms: int = 12,
    sparsity: int = 3,
    lookback: int | None = None,
    horizon: int | None = None,
    random_state: int | None = 0,
) -> PrimitiveDictionary:
    """Learn a primitive dictionary from all series of ``panel`` (windows pooled).

    See :func:`learn_dictionary`, which this calls on the panel's series.

    Raises:
        DataContractError: when the panel is not a regular panel or too short.
    """
    panel = validate_panel(panel)
    freq_s = panel_freq(panel, purpose="be decomposed")
    arrays = [values for _, values in _series_arrays(panel).values()]
    return learn_dictionary(arrays, freq_s=freq_s, n_atoms=n_atoms, sparsity=sparsity,
                            lookback=lookback, horizon=horizon, random_state=random_state)


def learn_dictionary(
    series: Sequence[np.ndarray],
    *,
    freq_s: int,
    n_atoms: int = 12,
    sparsity: int = 3,
    lookback: int | None = None,
    horizon: int | None = None,
    n_trend: int = 2,
    random_state: int | None = 0,
) -> PrimitiveDictionary:
    """Learn a primitive dictionary from regular series with step ``freq_s`` (windows pooled).

    Fourier atoms sit at the periods found in at least a quarter of the series (and at least
    one); atoms span ``lookback + horizon`` steps, one day each by default; ``n_trend``
    Legendre trend atoms (see :class:`PrimitiveDictionary`).

    Raises:
        DataContractError: when no series is long enough for one window.
    """
    day = max(2, DAY_S // freq_s)
    found: dict[int, int] = {}
    for values in series:
        for p in find_periods(values, freq_s=freq_s, random_state=random_state):
            key = int(round(p.steps))
            match = next((k for k in found if abs(k - key) <= 0.02 * k), key)
            found[match] = found.get(match, 0) + 1
    needed = max(1, len(series) // 4)
    periods = sorted(k for k, n in found.items() if n >= needed)
    lookback = lookback or day
    horizon = horizon if horizon is not None else day
    length = lookback + horizon
    usable = [v for v in series if len(v) >= length]
    if not usable:
        raise DataContractError(
            f"no series has {length} steps ({length * freq_s / 3600:g} h) for one window; "
            "pass a shorter lookback/horizon or derive more data"
        )
    periods = [p for p in periods if p <= length]
    dictionary = PrimitiveDictionary(
        n_atoms=n_atoms, lookback=lookback, horizon=horizon, sparsity=sparsity,
        periods=tuple(float(p) for p in periods), n_trend=n_trend, random_state=random_state,
    )
    return dictionary.fit(usable)


def decompose_values(
    series_id: str,
    ts: pd.DatetimeIndex,
    values: np.ndarray,
    *,
    freq_s: int,
    dictionary: PrimitiveDictionary | None,
    random_state: int | None = 0,
    note: str = "",
) -> SeriesDecomposition:
    """Decompose one regular series (see the module docstring for the steps); without a
    ``dictionary`` its primitives are 0 and ``note`` says why."""
    y = np.asarray(values, dtype=np.float64)
    if not np.isfinite(y).all():
        raise DataContractError(
            f"series {series_id!r} has missing or infinite values; derive it with a --fill "
            "policy first"
        )
    n = len(y)
    periods = find_periods(y, freq_s=freq_s, random_state=random_state) if n >= 8 else []
    longest = max((int(round(p.steps)) for p in periods), default=DAY_S // freq_s)
    span = int(max(3, min(longest, max(3, n // 3))))
    min_size = int(max(6, min(span // 2, max(6, n // 8))))
    shifts, level = find_level_shifts(y, min_size=min_size, period=span if n >= 2 * span
                                      else None) if n >= 2 * min_size else ([], np.zeros(n))
    if shifts:  # a level shift blurs the spectrum: look for the periods again without it
        # (keeping those of the series itself if that finds none: a cycle the whole series
        # shows is not undone by a shift)
        periods = find_periods(y - level, freq_s=freq_s, random_state=random_state) or periods
        longest = max((int(round(p.steps)) for p in periods), default=DAY_S // freq_s)
        span = int(max(3, min(longest, max(3, n // 3))))
    trend = robust_trend(y - level, window=span) if n else np.zeros(0)
    detrended = y - level - trend
    prim, usage = _primitives(detrended, dictionary)
    rest = detrended - prim
    baseline = burst_baseline(rest) if n else rest
    # 6 robust sigmas: measured on synthetic ground truth (precision 0.94-1.0, recall 1.0 over
    # 4 seeds; 4 sigmas gave precision 0.83-0.88 on what primitives leave)
    bursts = find_bursts(rest, baseline=baseline, threshold=BURST_THRESHOLD) if n else []
    burst = burst_component(rest, bursts, baseline) if bursts else np.zeros(n)
    rest = rest - burst
    spectral = SpectralRefiner(random_state=random_state).fit(rest).fitted() if n >= 16 else (
        np.zeros(n))
    residual = y - level - trend - prim - burst - spectral
    components = {"level": level, "trend": trend, "primitives": prim, "bursts": burst,
                  "spectral": spectral, "residual": residual}
    top: dict[str, np.ndarray] = {}
    if dictionary is not None:
        index = {aid: i for i, aid in enumerate(dictionary.atom_ids_)}
        top = {aid: np.asarray(dictionary.atoms_[index[aid]])
               for aid in usage["atom_id"].head(4)}
    return SeriesDecomposition(series_id, ts, y, freq_s, components, periods, bursts, shifts,
                               usage, top, note)


def _primitives(detrended: np.ndarray, dictionary: PrimitiveDictionary | None
                ) -> tuple[np.ndarray, pd.DataFrame]:
    """Encode half-overlapping windows (the last aligned to the end) and blend them.

    Each window is coded on its own (its own sparse activations); neighbouring windows are
    cross-faded with tapered weights, so that no seam appears at window edges (a seam would
    otherwise show up as a false burst).
    """
    cols = ["atom_id", "kind", "label", "share"]
    if dictionary is None:
        return np.zeros(len(detrended)), pd.DataFrame(columns=cols)
    n, length = len(detrended), dictionary.length
    if n < length:
        return np.zeros(n), pd.DataFrame(columns=cols)
    stride = max(1, length // 2)
    starts = list(range(0, n - length + 1, stride))
    if starts[-1] + length < n:
        starts.append(n - length)
    windows = np.stack([detrended[s:s + length] for s in starts])
    floor = 0.05 * float(np.std(detrended)) if n else 0.0
    codes = dictionary.encode(windows, min_scale=floor)
    rebuilt = dictionary.reconstruct(codes)
    taper = np.sin(np.pi * (np.arange(length) + 0.5) / length) ** 2 + 1e-3
    out, weight = np.zeros(n), np.zeros(n)
    for s, w in zip(starts, rebuilt, strict=True):
        out[s:s + length] += taper * w
        weight[s:s + length] += taper
    out /= weight
    share = dictionary.explained_share(windows, codes)
    usage = pd.DataFrame({
        "atom_id": dictionary.atom_ids_, "kind": dictionary.atom_kinds_,
        "label": dictionary.usage_["label"].to_numpy(), "share": share,
    })
    usage = usage[usage["share"] > 0].sort_values("share", ascending=False)
    return out, usage.reset_index(drop=True)[cols]


def decompose(
    panel: pd.DataFrame,
    *,
    dictionary: PrimitiveDictionary | None = None,
    series_ids: Sequence[str] | None = None,
    random_state: int | None = 0,
) -> Decomposition:
    """Decompose the series of a panel into components that sum exactly to each series.

    Args:
        panel: a regular panel (``series_id, ts, value``).
        dictionary: a fitted primitive dictionary; learned from the whole panel when ``None``.
        series_ids: decompose only these (the dictionary still learns from all).
        random_state: seed of the surrogates and of the dictionary.

    Returns:
        The :class:`Decomposition` (``components`` in long format, ``usage`` per series).

    Raises:
        DataContractError: for a panel that breaks the contract.
    """
    panel = validate_panel(panel)
    freq_s = panel_freq(panel, purpose="be decomposed")
    note = ""
    if dictionary is None:
        try:
            dictionary = fit_dictionary(panel, random_state=random_state)
        except DataContractError as exc:
            # an idle cluster, a series of a few hours: the other parts still hold
            note = f"no primitives: no dictionary could be learned from these series ({exc})"
            logger.info("%s", note)
    arrays = _series_arrays(panel)
    wanted = list(series_ids) if series_ids is not None else list(arrays)
    out = Decomposition(dictionary=dictionary)
    for sid in wanted:
        if sid not in arrays:
            raise DataContractError(f"series {sid!r} is not in the panel")
        ts, values = arrays[sid]
        out.series[sid] = decompose_values(sid, ts, values, freq_s=freq_s,
                                           dictionary=dictionary, random_state=random_state,
                                           note=note)
        logger.info("decomposed %s: %d periods, %d bursts, %d level shifts", sid,
                    len(out.series[sid].periods), len(out.series[sid].bursts),
                    len(out.series[sid].level_shifts))
    return out
