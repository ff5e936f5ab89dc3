"""Demand primitives: a dictionary of recurring window shapes and the sparse codes of windows.

PRISM (DAC '26, arXiv 2603.25378) models GPU demand as a sum of recurring shapes. This module
learns those shapes ("atoms") from z-normalised windows pooled across many series and encodes
every window as a sparse activation vector over them::

    d = PrimitiveDictionary(periods=(144, 1008), random_state=0).fit(panels)
    codes = d.encode(windows(series, length=d.lookback + d.horizon, stride=36))
    d.reconstruct(codes)                           # back in the series' units
    hist = d.encode(last_lookback[None, :], part="lookback")
    d.reconstruct(hist, part="horizon")            # the horizon the atoms extrapolate

An atom is ``lookback + horizon`` samples long, so that activations fitted on a window's
lookback part extrapolate it through the atoms' horizon part. Atoms come in three kinds:

- ``"trend"``: Legendre polynomials of degree ``0 .. n_trend - 1`` (constant, linear, ...).
- ``"fourier"``: ``sin`` and ``cos`` at every period in ``periods`` (in steps) and its harmonics.
- ``"learned"``: learned from the data with the fixed atoms above held in the dictionary, so that
  they learn what trend and Fourier atoms do not already explain.

Codes are found by orthogonal matching pursuit (OMP) with at most ``sparsity`` non-zero
activations per window. The dictionary evolves (:meth:`PrimitiveDictionary.evolve`): it learns
new atoms when recent windows stop being reconstructed well and retires learned atoms that go
unused.

Design measurements (Helios Earth, 16 VCs x {running, running + pending}, 10-minute steps,
288-step windows at stride 36, fitted on the first 3 weeks and scored on the last 10 days,
relative squared error of held-out z-windows at sparsity 3, fixed atoms trend(2) +
fourier(144, 1008) x 2 harmonics):

==========================================================  ===========
learned atoms (16)                                          rel. error
==========================================================  ===========
K-SVD with the fixed atoms held in the coding (default)     0.35
k-means centroids of z-windows                              0.38
MiniBatchDictionaryLearning on z-windows (alpha 1)          0.39
MiniBatchDictionaryLearning on the residual after the
fixed atoms, orthogonalised against them                    0.48
(baselines) first 3 PCA components / Fourier atoms only     0.54 / 0.51
==========================================================  ===========

Learning on the residual loses because a window's best sparse code mixes fixed and learned
atoms: an atom forced orthogonal to the fixed span can no longer stand in for a fixed atom
plus its correction with a single activation. ``learner="kmeans"`` and ``learner="mbdl"`` stay
available to repeat these measurements.
"""

from __future__ import annotations

import inspect
import json
import logging
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view
from numpy.polynomial import legendre

from prism.errors import ConfigError, DataContractError, NotFittedError

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
Part = Literal["full", "lookback", "horizon"]

#: Atom kinds, in the order they appear in ``atoms_`` after ``fit``.
KINDS = ("trend", "fourier", "learned")
LEARNERS = ("ksvd", "kmeans", "mbdl")

#: A window whose std is below this fraction of its series' std counts as near-flat in ``fit``:
#: it keeps its (small) shape instead of being blown up to unit variance. 13.7 % of the Helios
#: Earth training windows are exactly flat and another 3.7 % are below 5 % of their series' std;
#: those are single-GPU blips on idle VCs, not shapes worth an atom.
FIT_SCALE_FLOOR = 0.05
#: At most this many windows are pooled in ``fit`` (a seeded subsample beyond it); K-SVD costs
#: grow linearly with it and 20,000 windows of many series hold every shape many times over.
MAX_FIT_WINDOWS = 20_000
#: Poorly reconstructed windows that ``evolve`` keeps (the newest) to learn new atoms from.
MAX_PENDING = 1_024
#: ``evolve`` adds at most this many atoms at once, and one per this many pending windows, so
#: that a handful of odd windows cannot fill the dictionary.
MAX_NEW_ATOMS = 4
WINDOWS_PER_NEW_ATOM = 4
#: A candidate atom from ``evolve`` is kept only if it explains this share of the pending
#: windows' energy; below it, it fits noise.
MIN_NEW_SHARE = 0.02
#: An activation counts as use (``usage_``, retirement) only if it explains at least this share
#: of its window's energy. On noisy daily sines (noise 2 % of the energy) the spare third
#: activation explains well under 1 %; real shapes explain several per cent.
MIN_USE_SHARE = 0.01
#: K-SVD stops when the relative residual improves by less than this between iterations.
KSVD_TOL = 1e-4
#: Two atoms whose inner product exceeds this are duplicates (K-SVD replaces one of them).
DUPLICATE_COS = 0.99
#: Format tag written by :meth:`PrimitiveDictionary.save`.
FORMAT = "prism.primitive_dictionary"
FORMAT_VERSION = 1


# --------------------------------------------------------------------------------------------
# Windows


def windows(values: npt.ArrayLike, *, length: int, stride: int) -> FloatArray:
    """Cut a 1-D series into overlapping windows, one per row, without copying.

    Args:
        values: the series, 1-D.
        length: samples per window (>= 1).
        stride: steps between the starts of consecutive windows (>= 1). The first window starts
            at step 0; a tail shorter than ``stride`` after the last window is dropped.

    Returns:
        A read-only ``(n_windows, length)`` view of ``values`` (of a float64 copy if it was
        not float64); ``n_windows`` is
        ``(len(values) - length) // stride + 1``, or 0 when the series is shorter than
        ``length``. Copy it before writing to it.

    Raises:
        ConfigError: ``length`` or ``stride`` is below 1.
        DataContractError: ``values`` is not 1-D.
    """
    if length < 1 or stride < 1:
        raise ConfigError(f"windows needs length >= 1 and stride >= 1; got {length}, {stride}")
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise DataContractError(
            f"windows cuts a 1-D series; got shape {x.shape}. Pass one series at a time"
        )
    if x.size < length:
        return np.empty((0, length))
    return sliding_window_view(x, length)[::stride]


def znorm(
    windows: npt.ArrayLike, *, min_scale: float | npt.ArrayLike = 0.0
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Z-normalise windows row by row: ``z = (w - mean) / scale``.

    ``scale`` is the row's standard deviation, raised to ``min_scale`` where it is smaller, so
    that a near-flat window keeps a small shape instead of having its noise blown up to unit
    variance (pass e.g. ``0.05 * series.std()``). A flat row (std and ``min_scale`` both below
    ``1e-12 * (1 + |mean|)``, which absorbs float round-off) gets ``scale = 1`` and an all-zero
    ``z``, so that ``mean + scale * z`` always gives the window back.

    Args:
        windows: ``(n_windows, length)`` windows (a single 1-D window is taken as one row).
        min_scale: floor for ``scale``, a scalar or one value per row; 0 keeps the plain std.

    Returns:
        ``(z, mean, scale)``: ``z`` of the windows' shape, ``mean`` and ``scale`` of shape
        ``(n_windows,)``.

    Raises:
        DataContractError: the windows are not 1-D or 2-D, or hold NaN or infinite values.
    """
    w = np.asarray(windows, dtype=np.float64)
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim != 2:
        raise DataContractError(f"znorm takes (n_windows, length) windows; got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise DataContractError(
            "windows hold NaN or infinite values; fill the gaps of the series before cutting "
            "windows (e.g. with prism derive --fill zero or --fill hold)"
        )
    mean = w.mean(axis=1)
    std = w.std(axis=1)
    floor = np.broadcast_to(np.asarray(min_scale, dtype=np.float64), mean.shape)
    scale = np.maximum(std, floor)
    flat = scale <= 1e-12 * (1.0 + np.abs(mean))
    scale = np.where(flat, 1.0, scale)
    z = (w - mean[:, None]) / scale[:, None]
    z[flat] = 0.0
    return z, mean, scale


# --------------------------------------------------------------------------------------------
# Sparse coding


def omp_gram(gram: FloatArray, xy: FloatArray, n_nonzero: int) -> FloatArray:
    """Orthogonal matching pursuit for many signals at once, on a precomputed Gram matrix.

    The same algorithm as :func:`sklearn.linear_model.orthogonal_mp_gram` (a reference test
    checks equal codes), vectorised over signals: scikit-learn loops over signals in Python,
    about 0.17 ms each, which made K-SVD and encoding 10 times slower. Two differences: a
    candidate atom that is linearly dependent on the atoms already chosen is skipped (the next
    best is tried) instead of ending the signal's pursuit with a warning, and a signal whose
    residual is orthogonal to every atom (e.g. all zero) stops early with fewer non-zeros.

    Args:
        gram: ``(n_atoms, n_atoms)`` Gram matrix of unit-norm atoms (zero rows for atoms that
            must not be used).
        xy: ``(n_signals, n_atoms)`` inner products of the signals with the atoms.
        n_nonzero: maximum non-zero coefficients per signal.

    Returns:
        ``(n_signals, n_atoms)`` coefficients.
    """
    n, m = xy.shape
    coefs = np.zeros((n, m))
    k_max = min(n_nonzero, m)
    if n == 0 or k_max == 0:
        return coefs
    rows = np.arange(n)
    corr = xy.copy()
    excluded = np.zeros((n, m), dtype=bool)
    excluded[:, np.diag(gram) <= 1e-12] = True
    support = np.zeros((n, k_max), dtype=np.intp)
    # A residual this much smaller than the signal is orthogonal to the atoms for our purpose.
    tiny = 1e-9 * np.abs(xy).max(axis=1)
    active = np.abs(xy).max(axis=1) > 0.0
    for k in range(k_max):
        cand = np.zeros(n, dtype=np.intp)
        pending = rows[active]
        while pending.size:
            score = np.where(excluded[pending], -1.0, np.abs(corr[pending]))
            best = score.argmax(axis=1)
            ok = score[np.arange(pending.size), best] > tiny[pending]
            active[pending[~ok]] = False
            pending, best = pending[ok], best[ok]
            if k > 0 and pending.size:
                sup = support[pending, :k]
                gs = gram[sup[:, :, None], sup[:, None, :]]
                v = gram[sup, best[:, None]]
                w = np.linalg.solve(gs, v[:, :, None])[:, :, 0]
                schur = gram[best, best] - np.einsum("nk,nk->n", v, w)
                dependent = schur <= 1e-10
            else:
                dependent = np.zeros(pending.size, dtype=bool)
            cand[pending[~dependent]] = best[~dependent]
            excluded[pending[dependent], best[dependent]] = True
            pending = pending[dependent]
        sel = rows[active]
        if sel.size == 0:
            break
        support[sel, k] = cand[sel]
        excluded[sel, cand[sel]] = True
        sup = support[sel, : k + 1]
        gs = gram[sup[:, :, None], sup[:, None, :]]
        gamma = np.linalg.solve(gs, xy[sel[:, None], sup][:, :, None])[:, :, 0]
        coefs[sel] = 0.0
        coefs[sel[:, None], sup] = gamma
        corr[sel] = xy[sel] - np.einsum("nk,nkm->nm", gamma, gram[sup])
    return coefs


def _unit_rows(a: FloatArray) -> FloatArray:
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return cast(FloatArray, a / np.where(norms > 0.0, norms, 1.0))


def _code(atoms: FloatArray, z: FloatArray, sparsity: int) -> FloatArray:
    """OMP codes of ``z`` over ``atoms`` of any norm (atoms are normalised for the pursuit)."""
    norms = np.linalg.norm(atoms, axis=1)
    unit = _unit_rows(atoms)
    c = omp_gram(unit @ unit.T, z @ unit.T, sparsity)
    return cast(FloatArray, c / np.where(norms > 0.0, norms, 1.0))


def _residual_share(z: FloatArray, recon: FloatArray) -> tuple[FloatArray, float]:
    """Per-window and pooled ``||z - recon||^2 / ||z||^2`` (flat windows count 0)."""
    energy = (z**2).sum(axis=1)
    res = ((z - recon) ** 2).sum(axis=1)
    per = np.divide(res, energy, out=np.zeros_like(res), where=energy > 0.0)
    total = float(energy.sum())
    return per, (float(res.sum()) / total if total > 0.0 else 0.0)


def _canonical_sign(atoms: FloatArray) -> FloatArray:
    """Flip atoms so that their largest-magnitude sample is positive (K-SVD signs are arbitrary;
    a fixed sign makes shapes comparable and :func:`describe_atom` see peaks, not troughs)."""
    peak = atoms[np.arange(len(atoms)), np.abs(atoms).argmax(axis=1)]
    return cast(FloatArray, atoms * np.where(peak < 0.0, -1.0, 1.0)[:, None])


def _replacement(resid: FloatArray, spare: Iterator[np.intp], current: FloatArray) -> FloatArray:
    """The unit residual of the next worst window (``current`` when it is all zero)."""
    r = resid[next(spare, 0)]
    norm = float(np.linalg.norm(r))
    return r / norm if norm > 0.0 else current


def _ksvd(
    z: FloatArray,
    fixed: FloatArray,
    init: FloatArray,
    *,
    sparsity: int,
    max_iter: int,
) -> FloatArray:
    """Approximate K-SVD (Rubinstein et al. 2008) of the atoms in ``init``, ``fixed`` held.

    Each iteration codes ``z`` by OMP over ``fixed`` + learned atoms, then updates every learned
    atom in turn to the best rank-1 fit of the residual of the windows that use it. An unused
    atom, or one that duplicates another, is replaced by the worst-reconstructed window's
    residual (deterministic, so results depend only on ``init``).

    Returns:
        The learned atoms, unit-norm, shape of ``init``.
    """
    learned = _unit_rows(init.copy())
    nf = len(fixed)
    previous = np.inf
    for _ in range(max_iter):
        atoms = np.vstack([fixed, learned])
        coefs = _code(atoms, z, sparsity)
        resid = z - coefs @ atoms
        share = float((resid**2).sum() / max((z**2).sum(), 1e-300))
        if previous - share < KSVD_TOL * max(previous, 1e-12) and np.isfinite(previous):
            break
        previous = share
        # Worst-reconstructed windows first: their residuals replace dead or duplicate atoms.
        spare = iter(np.argsort(-(resid**2).sum(axis=1)))

        for j in range(len(learned)):
            c = coefs[:, nf + j]
            idx = np.flatnonzero(c)
            if idx.size == 0:
                learned[j] = _replacement(resid, spare, learned[j])
                continue
            rj = resid[idx] + np.outer(c[idx], learned[j])
            d = rj.T @ c[idx]
            norm = float(np.linalg.norm(d))
            if norm <= 0.0:
                continue
            d /= norm
            g = rj @ d
            resid[idx] = rj - np.outer(g, d)
            learned[j] = d
            coefs[idx, nf + j] = g
        # Duplicates (of a fixed atom or of an earlier learned one) waste a slot and make OMP's
        # Gram matrix singular: replace them.
        for j in range(len(learned)):
            others = np.vstack([fixed, learned[:j]])
            if len(others) and np.abs(others @ learned[j]).max() > DUPLICATE_COS:
                learned[j] = _replacement(resid, spare, learned[j])
    return learned


# --------------------------------------------------------------------------------------------
# Atom labels


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


# --------------------------------------------------------------------------------------------
# The dictionary


def _json_scalar(value: object) -> object:
    """JSON for numpy scalars passed as hyperparameters (``np.int64(16)``)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{value!r} ({type(value).__name__}) cannot be saved as JSON")


@dataclass(frozen=True, eq=False)
class Codes:
    """Sparse codes of windows and what is needed to take them back to the series' units.

    Attributes:
        coefs: ``(n_windows, n_atoms)`` activations, in units of the full (unit-norm) atoms,
            whatever part they were fitted on; at most ``sparsity`` non-zeros per row.
        mean: ``(n_windows,)`` mean of each encoded window (of its encoded part).
        scale: ``(n_windows,)`` z-normalisation scale of each encoded window.
        part: the part of the atoms the codes were fitted on, ``"full"`` or ``"lookback"``.
        version: the dictionary's ``version_`` when encoding; codes of another version do not
            match its atoms.
    """

    coefs: FloatArray
    mean: FloatArray
    scale: FloatArray
    part: str
    version: int

    @property
    def n_windows(self) -> int:
        """Number of encoded windows."""
        return int(self.coefs.shape[0])


@dataclass(frozen=True)
class AtomEvent:
    """One change of the dictionary, as kept in ``history_``.

    Attributes:
        version: the dictionary version the change produced.
        action: ``"added"`` or ``"retired"``.
        atom_id: the atom.
        kind: ``"trend"``, ``"fourier"`` or ``"learned"``.
        reason: why, in words.
    """

    version: int
    action: str
    atom_id: str
    kind: str
    reason: str


class PrimitiveDictionary:
    """A dictionary of demand primitives: fixed trend and Fourier atoms plus learned atoms.

    Args:
        n_atoms: learned atoms at ``fit`` (0 gives a dictionary of fixed atoms only).
        lookback: samples of history per window; atoms are ``lookback + horizon`` long.
        horizon: samples after the lookback part that the atoms extrapolate (may be 0).
        sparsity: non-zero activations per window (OMP's stopping point).
        periods: periods in steps for Fourier atoms (e.g. ``(144, 1008)``: a day and a week
            at 10-minute steps); none by default.
        n_harmonics: harmonics per period (1 = the period itself); harmonics shorter than 2
            steps and frequencies already present are skipped.
        n_trend: Legendre trend atoms (0 none, 1 constant, 2 + linear, ...).
        alpha: sparsity penalty of ``learner="mbdl"`` (MiniBatchDictionaryLearning).
        batch_size: mini-batch size of ``learner="mbdl"``.
        max_iter: iterations of the learner (K-SVD sweeps, k-means or MBDL epochs); ``evolve``
            uses the same budget for new atoms.
        residual_threshold: a call of :meth:`evolve` is *poor* when the pooled relative residual
            energy ``sum ||z - D a||^2 / sum ||z||^2`` of its windows exceeds this; windows above
            it are kept to learn new atoms from.
        patience: consecutive poor calls of :meth:`evolve` after which new atoms are learned.
        max_atoms: the dictionary never holds more atoms than this (all kinds).
        retire_after: a learned atom retires after this many windows seen by :meth:`evolve`
            without being used (an activation counts as use when it explains at least
            ``MIN_USE_SHARE`` of its window's energy).
        learner: ``"ksvd"`` (default, best measured: see the module docstring), ``"kmeans"`` or
            ``"mbdl"``.
        random_state: seed of the learner and of subsampling; same seed, same atoms.

    Attributes (after ``fit``):
        atoms_: ``(n_atoms_total, lookback + horizon)`` unit-norm atoms.
        atom_ids_: an id per atom (``trend_1``, ``fourier_p144_h1_sin``, ``learned_003``).
        atom_kinds_: a kind per atom (``trend``, ``fourier``, ``learned``).
        usage_: a frame indexed by atom id: ``kind``, ``label`` (:func:`describe_atom`),
            ``n_active`` (windows that used the atom, in fit and evolve; an activation that
            explains under ``MIN_USE_SHARE`` of its window only fits noise and does not count),
            ``active_rate``
            (``n_active`` over windows seen), ``share`` (share of the windows' energy it
            explains, see :meth:`explained_share`) and ``idle`` (windows seen by ``evolve`` since
            its last activation).
        version_: 1 after ``fit``, +1 on every call of ``evolve`` that changes the atoms.
        history_: the :class:`AtomEvent` list of every atom added or retired.
        train_residual_: pooled relative residual energy of the training windows.
    """

    def __init__(
        self,
        *,
        n_atoms: int = 16,
        lookback: int = 144,
        horizon: int = 144,
        sparsity: int = 3,
        periods: Sequence[float] = (),
        n_harmonics: int = 2,
        n_trend: int = 2,
        alpha: float = 1.0,
        batch_size: int = 256,
        max_iter: int = 50,
        residual_threshold: float = 0.35,
        patience: int = 3,
        max_atoms: int = 48,
        retire_after: int = 1_000,
        learner: str = "ksvd",
        random_state: int | None = 0,
    ) -> None:
        self.n_atoms = n_atoms
        self.lookback = lookback
        self.horizon = horizon
        self.sparsity = sparsity
        self.periods = periods
        self.n_harmonics = n_harmonics
        self.n_trend = n_trend
        self.alpha = alpha
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.residual_threshold = residual_threshold
        self.patience = patience
        self.max_atoms = max_atoms
        self.retire_after = retire_after
        self.learner = learner
        self.random_state = random_state

    # -- parameters -------------------------------------------------------------------------

    def get_params(self) -> dict[str, Any]:
        """The ``__init__`` arguments as stored (``type(d)(**d.get_params())`` clones ``d``).

        Returns:
            Parameter name -> value.
        """
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    @property
    def length(self) -> int:
        """Samples per atom and per full window: ``lookback + horizon``."""
        return int(self.lookback) + int(self.horizon)

    def _check_params(self) -> None:
        def bad(name: str, rule: str) -> ConfigError:
            return ConfigError(f"{name}={getattr(self, name)!r} is invalid: {rule}")

        for name in ("lookback", "sparsity", "batch_size", "max_iter", "patience", "max_atoms",
                     "retire_after"):
            if int(getattr(self, name)) < 1:
                raise bad(name, "use an integer >= 1")
        for name in ("n_atoms", "horizon", "n_trend"):
            if int(getattr(self, name)) < 0:
                raise bad(name, "use an integer >= 0")
        if int(self.n_harmonics) < 1:
            raise bad("n_harmonics", "use an integer >= 1")
        if any(not np.isfinite(p) or p < 2 for p in self.periods):
            raise bad("periods", "periods are in steps and must be >= 2")
        if not self.alpha > 0:
            raise bad("alpha", "use a positive penalty")
        if not 0.0 < self.residual_threshold < 1.0:
            raise bad("residual_threshold", "use a share between 0 and 1")
        if self.learner not in LEARNERS:
            raise bad("learner", f"choose one of {', '.join(LEARNERS)}")

    # -- fixed atoms ------------------------------------------------------------------------

    def _fixed_atoms(self) -> tuple[FloatArray, list[str], list[str], list[str]]:
        """Trend and Fourier atoms: (atoms, ids, kinds, reasons)."""
        n = self.length
        rows: list[FloatArray] = []
        ids: list[str] = []
        kinds: list[str] = []
        reasons: list[str] = []
        x = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(n)
        for degree in range(int(self.n_trend)):
            atom = np.asarray(legendre.legval(x, [0.0] * degree + [1.0]), dtype=np.float64)
            if np.linalg.norm(atom) > 0.0:
                rows.append(atom)
                ids.append(f"trend_{degree}")
                kinds.append("trend")
                reasons.append(f"fit: fixed Legendre trend of degree {degree}")
        t = np.arange(n, dtype=np.float64)
        seen: list[float] = []
        for period in self.periods:
            for h in range(1, int(self.n_harmonics) + 1):
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
        atoms = _unit_rows(np.array(rows).reshape(len(rows), n))
        return atoms, ids, kinds, reasons

    # -- fit --------------------------------------------------------------------------------

    def fit(self, panels: Sequence[npt.ArrayLike]) -> PrimitiveDictionary:
        """Learn the dictionary from windows pooled across many series.

        Every series is cut into windows of ``lookback + horizon`` samples at stride
        ``max(1, lookback // 4)``, z-normalised with a scale floor of ``FIT_SCALE_FLOOR`` times
        the series' std; flat windows are dropped; at most ``MAX_FIT_WINDOWS`` are kept (a
        seeded subsample). Learned atoms are fitted with the fixed atoms in the dictionary.
        Refitting replaces all learned state.

        Args:
            panels: 1-D series (e.g. one per series id, regular steps, no gaps).

        Returns:
            self.

        Raises:
            ConfigError: a hyperparameter is out of range.
            DataContractError: a series is not 1-D or holds NaN, or the series give fewer
                non-flat windows than ``n_atoms``.
        """
        self._check_params()
        rng = np.random.default_rng(self.random_state)
        z = self._pool(panels, rng)
        fixed, ids, kinds, reasons = self._fixed_atoms()
        n_learn = int(self.n_atoms)
        if len(fixed) + n_learn > int(self.max_atoms):
            raise ConfigError(
                f"max_atoms={self.max_atoms} is below the {len(fixed)} fixed + {n_learn} "
                "learned atoms of fit; raise max_atoms or lower n_atoms, periods or n_trend"
            )
        if len(fixed) + n_learn < 1:
            raise ConfigError("the dictionary would be empty; set n_atoms, periods or n_trend")
        if n_learn and len(z) < n_learn:
            raise DataContractError(
                f"fit found {len(z)} non-flat windows of {self.length} steps, fewer than "
                f"n_atoms={n_learn}; pass longer or more series, or lower n_atoms or lookback"
            )
        learned = self._learn(z, fixed, n_learn, rng) if n_learn else np.empty((0, self.length))
        learned = _canonical_sign(_unit_rows(learned))
        self.atoms_ = np.vstack([fixed, learned])
        self.atom_ids_ = ids + [f"learned_{j:03d}" for j in range(n_learn)]
        self.atom_kinds_ = kinds + ["learned"] * n_learn
        self.version_ = 1
        self.history_ = [
            AtomEvent(1, "added", i, k, r)
            for i, k, r in zip(ids, kinds, reasons, strict=True)
        ] + [
            AtomEvent(1, "added", f"learned_{j:03d}", "learned",
                      f"fit: {self.learner} on {len(z)} z-normalised windows")
            for j in range(n_learn)
        ]
        self._next_learned = n_learn
        self._streak = 0
        self._pending = np.empty((0, self.length))
        m = len(self.atoms_)
        self._n_active = np.zeros(m, dtype=np.int64)
        self._explained = np.zeros(m)
        self._idle = np.zeros(m, dtype=np.int64)
        self._n_seen = 0
        self._energy_seen = 0.0
        coefs = _code(self.atoms_, z, int(self.sparsity))
        _, self.train_residual_ = _residual_share(z, coefs @ self.atoms_)
        self._record_usage(z, coefs, idle=False)
        logger.info(
            "fitted %d atoms (%d learned by %s) on %d windows; training residual %.3f",
            m, n_learn, self.learner, len(z), self.train_residual_,
        )
        return self

    def _pool(self, panels: Sequence[npt.ArrayLike], rng: np.random.Generator) -> FloatArray:
        stride = max(1, int(self.lookback) // 4)
        parts: list[FloatArray] = []
        for i, series in enumerate(panels):
            x = np.asarray(series, dtype=np.float64)
            if x.ndim != 1:
                raise DataContractError(f"series {i} has shape {x.shape}; pass 1-D series")
            bad = np.flatnonzero(~np.isfinite(x))
            if bad.size:
                raise DataContractError(
                    f"series {i} holds NaN or infinite values (first at step {bad[0]}); fill "
                    "gaps before fitting (prism derive --fill zero or --fill hold)"
                )
            w = windows(x, length=self.length, stride=stride)
            if len(w):
                z, _, _ = znorm(w, min_scale=FIT_SCALE_FLOOR * float(x.std()))
                parts.append(z)
        z = np.vstack(parts) if parts else np.empty((0, self.length))
        z = z[(z**2).sum(axis=1) > 0.0]
        if len(z) > MAX_FIT_WINDOWS:
            z = z[np.sort(rng.choice(len(z), MAX_FIT_WINDOWS, replace=False))]
        return z

    def _learn(
        self, z: FloatArray, fixed: FloatArray, n_learn: int, rng: np.random.Generator
    ) -> FloatArray:
        seed = int(rng.integers(2**31 - 1))
        # scikit-learn is imported only by the learners that use it (it takes seconds).
        if self.learner == "kmeans":
            from sklearn.cluster import KMeans

            km = KMeans(n_learn, n_init=3, max_iter=int(self.max_iter), random_state=seed)
            return cast(FloatArray, km.fit(_unit_rows(z)).cluster_centers_)
        if self.learner == "mbdl":
            from sklearn.decomposition import MiniBatchDictionaryLearning

            mbdl = MiniBatchDictionaryLearning(
                n_learn, alpha=float(self.alpha), batch_size=int(self.batch_size),
                max_iter=int(self.max_iter), fit_algorithm="cd", random_state=seed,
            )
            return cast(FloatArray, mbdl.fit(z).components_)
        # Random training windows start K-SVD better than k-means centroids (measured on Helios:
        # 0.348 vs 0.352 held-out after 10 sweeps), and cost nothing.
        init = z[rng.choice(len(z), n_learn, replace=False)]
        return _ksvd(z, fixed, init, sparsity=int(self.sparsity), max_iter=int(self.max_iter))

    # -- encode / reconstruct ---------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "atoms_"):
            raise NotFittedError(
                "this PrimitiveDictionary is not fitted yet; call fit(panels) or "
                "PrimitiveDictionary.load(path) first"
            )

    def _slice(self, part: str) -> slice:
        if part == "full":
            return slice(0, self.length)
        if part == "lookback":
            return slice(0, int(self.lookback))
        if part == "horizon":
            return slice(int(self.lookback), self.length)
        raise ConfigError(f"part={part!r} is invalid; use 'full', 'lookback' or 'horizon'")

    def _windows_for(self, windows_: npt.ArrayLike, part: str) -> FloatArray:
        w = np.asarray(windows_, dtype=np.float64)
        if w.ndim == 1:
            w = w[None, :]
        sl = self._slice(part)
        expected = sl.stop - sl.start
        if w.ndim != 2 or w.shape[1] != expected:
            raise DataContractError(
                f"part={part!r} takes (n_windows, {expected}) windows; got shape {w.shape}. "
                f"Cut them with windows(series, length={expected}, stride=...)"
            )
        return w

    def encode(
        self,
        windows: npt.ArrayLike,
        *,
        part: Literal["full", "lookback"] = "full",
        min_scale: float | npt.ArrayLike = 0.0,
    ) -> Codes:
        """Sparse codes of windows: OMP with ``sparsity`` non-zeros on their z-normalised shape.

        Encoding reads the dictionary and never changes it (usage is only recorded by ``fit``
        and ``evolve``), so the same windows always give the same codes.

        Args:
            windows: ``(n_windows, lookback + horizon)`` windows for ``part="full"``, or
                ``(n_windows, lookback)`` history for ``part="lookback"``, in the series'
                units. A 1-D array is one window.
            part: ``"full"``, or ``"lookback"`` to fit the activations on the atoms' first
                ``lookback`` samples only (then ``reconstruct(codes, part="horizon")``
                extrapolates the window).
            min_scale: z-normalisation scale floor (see :func:`znorm`), e.g.
                ``0.05 * series.std()``.

        Returns:
            The :class:`Codes`.

        Raises:
            NotFittedError: before ``fit``.
            ConfigError: ``part`` is not ``"full"`` or ``"lookback"``.
            DataContractError: the windows have the wrong length or hold NaN.
        """
        self._check_fitted()
        if part not in ("full", "lookback"):
            raise ConfigError(f"encode part={part!r} is invalid; use 'full' or 'lookback'")
        w = self._windows_for(windows, part)
        z, mean, scale = znorm(w, min_scale=min_scale)
        coefs = _code(self.atoms_[:, self._slice(part)], z, int(self.sparsity))
        return Codes(coefs, mean, scale, part, int(self.version_))

    def _check_codes(self, codes: Codes) -> None:
        if codes.version != self.version_ or codes.coefs.shape[1] != len(self.atoms_):
            raise DataContractError(
                f"codes are of dictionary version {codes.version} with {codes.coefs.shape[1]} "
                f"atoms, the dictionary is at version {self.version_} with {len(self.atoms_)}; "
                "encode the windows again"
            )

    def reconstruct(self, codes: Codes, *, part: Part = "full") -> FloatArray:
        """Windows rebuilt from their codes, in the series' units: ``mean + scale * (a @ D)``.

        Args:
            codes: from :meth:`encode` of this dictionary at its current version.
            part: ``"full"``, ``"lookback"`` or ``"horizon"`` samples of the atoms to use.

        Returns:
            ``(n_windows, part length)`` windows.

        Raises:
            NotFittedError: before ``fit``.
            ConfigError: unknown ``part``.
            DataContractError: the codes are of another dictionary version.
        """
        self._check_fitted()
        self._check_codes(codes)
        shape = codes.coefs @ self.atoms_[:, self._slice(part)]
        return cast(FloatArray, codes.mean[:, None] + codes.scale[:, None] * shape)

    def explained_share(self, windows: npt.ArrayLike, codes: Codes) -> FloatArray:
        """Share of the windows' energy (z-space variance) that each atom explains.

        OMP's reconstruction ``r = sum_k a_k d_k`` is the projection of ``z`` on its chosen
        atoms, so ``||r||^2 = sum_k a_k <d_k, z>``: the terms split the explained energy
        exactly between atoms, and the shares add up to ``1 - residual share``. Each window
        weighs the same (its z-energy), whatever its size in GPUs.

        Args:
            windows: the windows ``codes`` were encoded from (same part, series' units).
            codes: their codes.

        Returns:
            ``(n_atoms,)`` shares, summing to at most 1 (up to round-off).

        Raises:
            NotFittedError: before ``fit``.
            DataContractError: windows and codes do not match.
        """
        self._check_fitted()
        self._check_codes(codes)
        w = self._windows_for(windows, codes.part)
        if len(w) != codes.n_windows:
            raise DataContractError(
                f"{len(w)} windows but codes of {codes.n_windows}; pass the encoded windows"
            )
        z = (w - codes.mean[:, None]) / codes.scale[:, None]
        return self._shares(z, codes.coefs, self.atoms_[:, self._slice(codes.part)])

    @staticmethod
    def _shares(z: FloatArray, coefs: FloatArray, atoms: FloatArray) -> FloatArray:
        total = float((z**2).sum())
        if total <= 0.0:
            return np.zeros(len(atoms))
        return cast(FloatArray, (coefs * (z @ atoms.T)).sum(axis=0) / total)

    # -- usage ------------------------------------------------------------------------------

    def _record_usage(self, z: FloatArray, coefs: FloatArray, *, idle: bool) -> None:
        contrib = coefs * (z @ self.atoms_.T)
        energy = (z**2).sum(axis=1, keepdims=True)
        # OMP always spends its `sparsity` activations; once the shape is explained, the last
        # ones fit noise. Counting those as use would keep dead atoms alive for ever.
        used = (coefs != 0.0) & (contrib >= MIN_USE_SHARE * energy)
        self._n_active += used.sum(axis=0)
        self._explained += contrib.sum(axis=0)
        if idle:
            # Windows since the last activation: rows after each atom's last use.
            n = len(z)
            any_use = used.any(axis=0)
            last = n - 1 - np.argmax(used[::-1], axis=0)
            self._idle = np.where(any_use, n - 1 - last, self._idle + n)
        self._n_seen += len(z)
        self._energy_seen += float((z**2).sum())
        self._refresh_usage()

    def _refresh_usage(self) -> None:
        seen = max(self._n_seen, 1)
        energy = self._energy_seen if self._energy_seen > 0 else 1.0
        self.usage_ = pd.DataFrame(
            {
                "kind": self.atom_kinds_,
                "label": [describe_atom(a) for a in self.atoms_],
                "n_active": self._n_active,
                "active_rate": self._n_active / seen,
                "share": self._explained / energy,
                "idle": self._idle,
            },
            index=pd.Index(self.atom_ids_, name="atom_id"),
        )

    # -- evolve -----------------------------------------------------------------------------

    def evolve(
        self, recent_windows: npt.ArrayLike, *, min_scale: float | npt.ArrayLike = 0.0
    ) -> list[str]:
        """Let the dictionary follow the data: add atoms for new shapes, retire unused ones.

        Each call encodes ``recent_windows`` (full windows, in time order) and:

        1. records usage; a learned atom with no activation in the last ``retire_after``
           windows seen by ``evolve`` retires (fixed atoms never do).
        2. is *poor* when the pooled relative residual energy ``sum ||z - D a||^2 /
           sum ||z||^2`` of its windows exceeds ``residual_threshold``; a poor call keeps its
           windows above the threshold (the newest ``MAX_PENDING``), a good call resets the
           streak and drops them. Pooling over the call makes one odd window not count, and
           ``patience`` calls in a row make one odd batch not count.
        3. after ``patience`` poor calls in a row learns up to ``min(MAX_NEW_ATOMS, pending /
           WINDOWS_PER_NEW_ATOM)`` new atoms from the kept windows by K-SVD with all current
           atoms held fixed (started from k-means of the residuals), keeps those that explain
           at least ``MIN_NEW_SHARE`` of the kept windows' energy, within ``max_atoms``.

        ``version_`` goes up by one when anything changed; ``history_`` says what and why.

        Args:
            recent_windows: ``(n_windows, lookback + horizon)`` recent windows, series' units.
            min_scale: z-normalisation scale floor (see :func:`znorm`).

        Returns:
            The ids of the atoms added and retired by this call (empty when nothing changed;
            ``history_`` tells added from retired).

        Raises:
            NotFittedError: before ``fit``.
            DataContractError: the windows have the wrong length or hold NaN.
        """
        self._check_fitted()
        w = self._windows_for(recent_windows, "full")
        z, _, _ = znorm(w, min_scale=min_scale)
        z = z[(z**2).sum(axis=1) > 0.0]
        if len(z) == 0:
            return []
        coefs = _code(self.atoms_, z, int(self.sparsity))
        per, pooled = _residual_share(z, coefs @ self.atoms_)
        self._record_usage(z, coefs, idle=True)
        version = int(self.version_) + 1
        added: list[str] = []
        if pooled > self.residual_threshold:
            self._streak += 1
            self._pending = np.vstack([self._pending, z[per > self.residual_threshold]])
            self._pending = self._pending[-MAX_PENDING:]
            logger.info("evolve: poor call %d of %d (residual %.3f > %.3f)",
                        self._streak, self.patience, pooled, self.residual_threshold)
        else:
            self._streak = 0
            self._pending = np.empty((0, self.length))
        if self._streak >= int(self.patience):
            added = self._grow(version, pooled)
            self._streak = 0
            self._pending = np.empty((0, self.length))
        retired = self._retire(version, exclude=set(added))
        if added or retired:
            self.version_ = version
            self._refresh_usage()
        return added + retired

    def _grow(self, version: int, pooled: float) -> list[str]:
        z = self._pending
        free = int(self.max_atoms) - len(self.atoms_)
        if free <= 0:
            logger.warning("evolve: %d atoms already (max_atoms); no new atom", len(self.atoms_))
            return []
        n_new = min(free, MAX_NEW_ATOMS, max(1, len(z) // WINDOWS_PER_NEW_ATOM))
        if len(z) < n_new:
            return []
        resid = z - _code(self.atoms_, z, int(self.sparsity)) @ self.atoms_
        # scikit-learn is imported where it is used: it takes seconds to import, and encoding
        # (what a service does most) never needs it.
        from sklearn.cluster import KMeans
        from sklearn.exceptions import ConvergenceWarning

        # Seeded by random_state and version: the same stream of calls gives the same atoms.
        seed = np.random.default_rng([int(self.random_state or 0), version]).integers(2**31 - 1)
        with warnings.catch_warnings():
            # Fewer distinct residuals than clusters is fine: duplicates are replaced by K-SVD.
            warnings.simplefilter("ignore", ConvergenceWarning)
            km = KMeans(n_new, n_init=1, max_iter=int(self.max_iter), random_state=int(seed))
            init = km.fit(_unit_rows(resid)).cluster_centers_
        new = _ksvd(z, self.atoms_, init, sparsity=int(self.sparsity),
                    max_iter=int(self.max_iter))
        new = _canonical_sign(new)
        atoms = np.vstack([self.atoms_, new])
        shares = self._shares(z, _code(atoms, z, int(self.sparsity)), atoms)[len(self.atoms_):]
        keep = shares >= MIN_NEW_SHARE
        if not keep.any():
            logger.info("evolve: no candidate atom explains %.0f%% of the poor windows",
                        100 * MIN_NEW_SHARE)
            return []
        ids = [f"learned_{self._next_learned + j:03d}" for j in range(int(keep.sum()))]
        self._next_learned += len(ids)
        m = int(keep.sum())
        self.atoms_ = np.vstack([self.atoms_, new[keep]])
        self.atom_ids_ = self.atom_ids_ + ids
        self.atom_kinds_ = self.atom_kinds_ + ["learned"] * m
        self._n_active = np.concatenate([self._n_active, np.zeros(m, dtype=np.int64)])
        self._explained = np.concatenate([self._explained, np.zeros(m)])
        self._idle = np.concatenate([self._idle, np.zeros(m, dtype=np.int64)])
        for atom_id, share in zip(ids, shares[keep], strict=True):
            self.history_.append(AtomEvent(
                version, "added", atom_id, "learned",
                f"evolve: relative residual above {self.residual_threshold:g} for "
                f"{self.patience} calls (last {pooled:.3f}); learned from {len(z)} poorly "
                f"reconstructed windows, explains {share:.1%} of them",
            ))
        logger.info("evolve: added %s", ", ".join(ids))
        return ids

    def _retire(self, version: int, *, exclude: set[str]) -> list[str]:
        kinds = np.array(self.atom_kinds_)
        ids = np.array(self.atom_ids_)
        out = (kinds == "learned") & (self._idle >= int(self.retire_after))
        out &= ~np.isin(ids, list(exclude))
        # Never retire the last atom: an empty dictionary could not encode anything.
        if len(self.atoms_) - out.sum() < 1:
            return []
        retired = [str(i) for i in ids[out]]
        for atom_id, idle in zip(retired, self._idle[out], strict=True):
            self.history_.append(AtomEvent(
                version, "retired", atom_id, "learned",
                f"evolve: unused in the last {int(idle)} windows "
                f"(retire_after={self.retire_after})",
            ))
        keep = ~out
        self.atoms_ = self.atoms_[keep]
        self.atom_ids_ = [i for i, k in zip(self.atom_ids_, keep, strict=True) if k]
        self.atom_kinds_ = [i for i, k in zip(self.atom_kinds_, keep, strict=True) if k]
        self._n_active = self._n_active[keep]
        self._explained = self._explained[keep]
        self._idle = self._idle[keep]
        if retired:
            logger.info("evolve: retired %s", ", ".join(retired))
        return retired

    # -- persistence ------------------------------------------------------------------------

    def save(self, path: Path | str) -> None:
        """Write the fitted dictionary to one ``.npz`` file (arrays + a JSON metadata entry).

        The arrays (atoms, usage counters, pending windows) are stored as they are; parameters,
        version, ids, kinds and history are JSON in the ``metadata`` entry, readable with
        ``json.loads(str(np.load(path)["metadata"]))``. No pickle is involved.

        Args:
            path: the file to write (numpy adds ``.npz`` if the name lacks it).

        Raises:
            NotFittedError: before ``fit``.
        """
        self._check_fitted()
        params = self.get_params()
        # JSON keeps ints and floats apart; numpy scalars are not JSON at all.
        params["periods"] = [p if isinstance(p, int) else float(p) for p in self.periods]
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "params": params,
            "version": int(self.version_),
            "atom_ids": list(self.atom_ids_),
            "atom_kinds": list(self.atom_kinds_),
            "history": [asdict(e) for e in self.history_],
            "next_learned": int(self._next_learned),
            "streak": int(self._streak),
            "n_seen": int(self._n_seen),
            "energy_seen": float(self._energy_seen),
            "train_residual": float(self.train_residual_),
        }
        np.savez(
            Path(path),
            metadata=np.array(json.dumps(meta, default=_json_scalar)),
            atoms=self.atoms_,
            n_active=self._n_active,
            explained=self._explained,
            idle=self._idle,
            pending=self._pending,
        )

    @classmethod
    def load(cls, path: Path | str) -> PrimitiveDictionary:
        """Read a dictionary written by :meth:`save`: same atoms, same codes, same evolution.

        Args:
            path: the ``.npz`` file.

        Returns:
            The fitted dictionary.

        Raises:
            ConfigError: the file is not a saved PrimitiveDictionary.
        """
        try:
            with np.load(Path(path), allow_pickle=False) as data:
                meta = json.loads(str(data["metadata"]))
                arrays = {k: np.array(data[k]) for k in
                          ("atoms", "n_active", "explained", "idle", "pending")}
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(
                f"{path} is not a saved PrimitiveDictionary ({exc}); write it with save()"
            ) from exc
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise ConfigError(
                f"{path} holds format {meta.get('format')!r} version "
                f"{meta.get('format_version')!r}; this PRISM reads {FORMAT!r} {FORMAT_VERSION}"
            )
        params = dict(meta["params"])
        params["periods"] = tuple(params["periods"])
        d = cls(**params)
        d.atoms_ = arrays["atoms"].astype(np.float64)
        d.atom_ids_ = [str(i) for i in meta["atom_ids"]]
        d.atom_kinds_ = [str(k) for k in meta["atom_kinds"]]
        d.version_ = int(meta["version"])
        d.history_ = [AtomEvent(**e) for e in meta["history"]]
        d.train_residual_ = float(meta["train_residual"])
        d._next_learned = int(meta["next_learned"])
        d._streak = int(meta["streak"])
        d._pending = arrays["pending"].reshape(-1, d.length).astype(np.float64)
        d._n_active = arrays["n_active"].astype(np.int64)
        d._explained = arrays["explained"].astype(np.float64)
        d._idle = arrays["idle"].astype(np.int64)
        d._n_seen = int(meta["n_seen"])
        d._energy_seen = float(meta["energy_seen"])
        d._refresh_usage()
        return d
