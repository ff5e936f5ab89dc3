"""Learning atoms: K-SVD with the fixed atoms held (default), k-means or mini-batch learning."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import numpy as np
import numpy.typing as npt

from prism.primitives.dictionary.matching import omp_codes, unit_rows

FloatArray = npt.NDArray[np.float64]

#: The learners of ``PrimitiveDictionary.fit`` (its ``learner``); measured in the package docs.
LEARNERS = ("ksvd", "kmeans", "mbdl")
#: K-SVD stops when the relative residual improves by less than this between iterations.
KSVD_TOL = 1e-4
#: Two atoms whose inner product exceeds this are duplicates (K-SVD replaces one of them).
DUPLICATE_COS = 0.99


def canonical_sign(atoms: FloatArray) -> FloatArray:
    """Flip atoms so that their largest-magnitude sample is positive (K-SVD signs are arbitrary;
    a fixed sign makes shapes comparable and
    :func:`~prism.primitives.dictionary.describe_atom` see peaks, not troughs)."""
    peak = atoms[np.arange(len(atoms)), np.abs(atoms).argmax(axis=1)]
    return cast(FloatArray, atoms * np.where(peak < 0.0, -1.0, 1.0)[:, None])


def _replacement(resid: FloatArray, spare: Iterator[np.intp], current: FloatArray) -> FloatArray:
    """The unit residual of the next worst window (``current`` when it is all zero)."""
    r = resid[next(spare, 0)]
    norm = float(np.linalg.norm(r))
    return r / norm if norm > 0.0 else current


def ksvd(
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
    learned = unit_rows(init.copy())
    nf = len(fixed)
    previous = np.inf
    for _ in range(max_iter):
        atoms = np.vstack([fixed, learned])
        coefs = omp_codes(atoms, z, sparsity)
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


def learn_atoms(
    z: FloatArray,
    fixed: FloatArray,
    n_learn: int,
    rng: np.random.Generator,
    *,
    learner: str,
    sparsity: int,
    max_iter: int,
    alpha: float,
    batch_size: int,
) -> FloatArray:
    """``n_learn`` atoms learned from z-windows ``z`` with the ``fixed`` atoms in the dictionary.

    Args:
        z: ``(n_windows, length)`` z-normalised windows.
        fixed: ``(n_fixed, length)`` atoms held as they are (K-SVD codes with them).
        n_learn: atoms to learn (at most ``len(z)``).
        rng: draws the learner's seed, then (K-SVD) the windows it starts from.
        learner: ``"ksvd"``, ``"kmeans"`` or ``"mbdl"`` (:mod:`prism.primitives.dictionary`).
        sparsity: non-zero activations per window (K-SVD's coding).
        max_iter: iterations of the learner.
        alpha / batch_size: sparsity penalty and mini-batch size of ``"mbdl"``.

    Returns:
        ``(n_learn, length)`` atoms, not normalised (K-SVD's are unit-norm).
    """
    seed = int(rng.integers(2**31 - 1))
    # scikit-learn is imported only by the learners that use it (it takes seconds).
    if learner == "kmeans":
        from sklearn.cluster import KMeans

        km = KMeans(n_learn, n_init=3, max_iter=int(max_iter), random_state=seed)
        return cast(FloatArray, km.fit(unit_rows(z)).cluster_centers_)
    if learner == "mbdl":
        from sklearn.decomposition import MiniBatchDictionaryLearning

        mbdl = MiniBatchDictionaryLearning(
            n_learn, alpha=float(alpha), batch_size=int(batch_size),
            max_iter=int(max_iter), fit_algorithm="cd", random_state=seed,
        )
        return cast(FloatArray, mbdl.fit(z).components_)
    # Random training windows start K-SVD better than k-means centroids (measured on Helios:
    # 0.348 vs 0.352 held-out after 10 sweeps), and cost nothing.
    init = z[rng.choice(len(z), n_learn, replace=False)]
    return ksvd(z, fixed, init, sparsity=int(sparsity), max_iter=int(max_iter))
