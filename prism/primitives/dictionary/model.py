"""The dictionary itself: :class:`PrimitiveDictionary` fits, encodes, evolves and is saved."""

from __future__ import annotations

import inspect
import json
import logging
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.primitives.dictionary.learning import LEARNERS, canonical_sign, ksvd, learn_atoms
from prism.primitives.dictionary.matching import (
    omp_codes,
    residual_share,
    unit_rows,
    windows,
    znorm,
)
from prism.primitives.dictionary.shapes import describe_atom, fixed_atoms

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
Part = Literal["full", "lookback", "horizon"]

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
#: Format tag written by :meth:`PrimitiveDictionary.save`.
FORMAT = "prism.primitive_dictionary"
FORMAT_VERSION = 1


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
        learner: ``"ksvd"`` (default, best measured: see the package docstring), ``"kmeans"`` or
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
        fixed, ids, kinds, reasons = fixed_atoms(self.length, n_trend=self.n_trend,
                                                 periods=self.periods,
                                                 n_harmonics=self.n_harmonics)
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
        learned = learn_atoms(
            z, fixed, n_learn, rng, learner=self.learner, sparsity=self.sparsity,
            max_iter=self.max_iter, alpha=self.alpha, batch_size=self.batch_size,
        ) if n_learn else np.empty((0, self.length))
        learned = canonical_sign(unit_rows(learned))
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
        coefs = omp_codes(self.atoms_, z, int(self.sparsity))
        _, self.train_residual_ = residual_share(z, coefs @ self.atoms_)
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
        coefs = omp_codes(self.atoms_[:, self._slice(part)], z, int(self.sparsity))
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
        coefs = omp_codes(self.atoms_, z, int(self.sparsity))
        per, pooled = residual_share(z, coefs @ self.atoms_)
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
        resid = z - omp_codes(self.atoms_, z, int(self.sparsity)) @ self.atoms_
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
            init = km.fit(unit_rows(resid)).cluster_centers_
        new = ksvd(z, self.atoms_, init, sparsity=int(self.sparsity),
                    max_iter=int(self.max_iter))
        new = canonical_sign(new)
        atoms = np.vstack([self.atoms_, new])
        shares = self._shares(z, omp_codes(atoms, z, int(self.sparsity)), atoms)[len(self.atoms_):]
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
