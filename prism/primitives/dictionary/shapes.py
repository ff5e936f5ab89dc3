"""The shape library: the fixed trend and Fourier atoms, and labels of any atom's shape."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numpy.polynomial import legendre

from prism.primitives.dictionary.matching import unit_rows

FloatArray = npt.NDArray[np.float64]

#: Atom kinds, in the order they appear in ``atoms_`` after ``fit``.
KINDS = ("trend", "fourier", "learned")


def fixed_atoms(
    length: int, *, n_trend: int, periods: Sequence[float], n_harmonics: int
) -> tuple[FloatArray, list[str], list[str], list[str]]:
    """Trend and Fourier atoms ``length`` samples long: (atoms, ids, kinds, reasons).

    Args:
        length: samples per atom.
        n_trend: Legendre trend atoms (degrees ``0 .. n_trend - 1``).
        periods: periods in steps of the Fourier atoms.
        n_harmonics: harmonics per period; harmonics shorter than 2 steps and frequencies
            already present are skipped.

    Returns:
        ``(n_fixed, length)`` unit-norm atoms, and an id, a kind and a reason per atom.
    """
    n = length
    rows: list[FloatArray] = []
    ids: list[str] = []
    kinds: list[str] = []
    reasons: list[str] = []
    x = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(n)
    for degree in range(int(n_trend)):
        atom = np.asarray(legendre.legval(x, [0.0] * degree + [1.0]), dtype=np.float64)
        if np.linalg.norm(atom) > 0.0:
            rows.append(atom)
            ids.append(f"trend_{degree}")
            kinds.append("trend")
            reasons.append(f"fit: fixed Legendre trend of degree {degree}")
    t = np.arange(n, dtype=np.float64)
    seen: list[float] = []
    for period in periods:
        for h in range(1, int(n_harmonics) + 1):
            step = float(period) / h
            # Below 2 steps a harmonic aliases onto a lower frequency; an equal frequency
            # from another period would duplicate an atom.
            if step < 2.0 or any(abs(step - s) <= 1e-9 * s for s in seen):
                continue
            seen.append(step)
            for name, wave in (("sin", np.sin), ("cos", np.cos)):
                atom = np.asarray(wave(2.0 * np.pi * t / step), dtype=np.float64)
                if np.linalg.norm(atom) <= 1e-9 * np.sqrt(n):
                    continue
                rows.append(atom)
                ids.append(f"fourier_p{float(period):g}_h{h}_{name}")
                kinds.append("fourier")
                reasons.append(f"fit: fixed Fourier {name} of period {step:g} steps")
    atoms = unit_rows(np.array(rows).reshape(len(rows), n))
    return atoms, ids, kinds, reasons


def describe_atom(atom: npt.ArrayLike) -> str:
    """A heuristic label of an atom's shape, for inspection (not used by the model).

    The atom is centred and flipped so that its largest deviation is positive, then tested in
    this order:

    - ``"plateau"``: flat (constant) or a flat top: two-level fit (inside / outside one
      contiguous stretch that is raised) explains >= 85 % of the variance and the stretch is
      10-80 % of the window, not touching both ends.
    - ``"periodic"``: at least 1.5 cycles of one frequency; that frequency (+-1 FFT bin)
      carries >= 60 % of the energy.
    - ``"step"``: one jump; a two-level split at one point explains >= 85 % of the variance.
    - ``"ramp"``: a monotone trend; a straight line explains >= 85 % of the variance.
    - ``"burst-decay"``: a sharp peak then a decay: the samples above half the peak form a
      short stretch (< 25 % of the window), the peak is reached within 2 samples or half the
      decay time, and the tail after it does not rise again (means of its quarters).
    - ``"irregular"``: none of the above.

    Args:
        atom: a 1-D shape.

    Returns:
        One of the labels above.
    """
    x = np.asarray(atom, dtype=np.float64).ravel()
    n = x.size
    x = x - x.mean()
    energy = float((x**2).sum())
    if n < 4 or energy <= 1e-12 * max(1.0, float(np.abs(np.asarray(atom)).max()) ** 2):
        return "plateau"
    if x.max() < -x.min():
        x = -x

    def two_level_r2(mask: npt.NDArray[np.bool_]) -> float:
        inside, outside = x[mask], x[~mask]
        if inside.size == 0 or outside.size == 0:
            return 0.0
        fit = np.where(mask, inside.mean(), outside.mean())
        return 1.0 - float(((x - fit) ** 2).sum()) / energy

    # Step: best split point of the cumulative sums (two-level fit), all splits at once.
    csum = np.cumsum(x)[:-1]
    k = np.arange(1, n)
    step_r2 = float((csum**2 / k + csum**2 / (n - k)).max() / energy)
    # Plateau: the contiguous stretch above half the maximum, as a two-level fit.
    high = x > 0.5 * x.max()
    starts = np.flatnonzero(np.diff(np.concatenate([[0], high.astype(int)])) == 1)
    ends = np.flatnonzero(np.diff(np.concatenate([high.astype(int), [0]])) == -1) + 1
    spans = ends - starts
    top = int(spans.argmax()) if spans.size else 0
    stretch = np.zeros(n, dtype=bool)
    if spans.size:
        stretch[starts[top] : ends[top]] = True
    plateau_r2 = two_level_r2(stretch)
    width = stretch.mean()
    # A raised stretch that touches an end of the window is a step, not a plateau.
    if plateau_r2 >= 0.85 and 0.1 <= width <= 0.8 and not (stretch[0] or stretch[-1]):
        return "plateau"
    power = np.abs(np.fft.rfft(x)) ** 2
    power[0] = 0.0
    if power.size > 2:
        f = int(power.argmax())
        band = power[max(f - 1, 1) : f + 2].sum() / power.sum()
        if f >= 1.5 and band >= 0.6:
            return "periodic"
    if step_r2 >= 0.85:
        return "step"
    t = np.arange(n) - (n - 1) / 2.0
    ramp_r2 = float((x @ t) ** 2 / (t @ t) / energy)
    if ramp_r2 >= 0.85:
        return "ramp"
    if spans.size and width < 0.25:
        peak = int(x.argmax())
        rise = peak - int(starts[top])
        decay = int(ends[top]) - 1 - peak
        # Chunk means of the tail rather than sample steps, so that noise does not hide a decay.
        tail = np.array([c.mean() for c in np.array_split(x[peak:], 4) if c.size])
        decays = bool(np.all(np.diff(tail) <= 0.05 * x.max()))
        if rise <= max(2, decay // 2) and decays:
            return "burst-decay"
    return "irregular"
