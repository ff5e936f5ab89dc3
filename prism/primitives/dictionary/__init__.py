"""Demand primitives: a dictionary of recurring window shapes and the sparse codes of windows.

PRISM (DAC '26, arXiv 2603.25378) models GPU demand as a sum of recurring shapes. This package
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

Modules: ``matching`` (windows, z-normalisation, sparse codes by OMP), ``learning`` (K-SVD and
the other learners), ``shapes`` (the fixed trend and Fourier atoms, shape labels) and ``model``
(:class:`PrimitiveDictionary`: fit, encode, reconstruct, evolve, save and load).
"""

from prism.primitives.dictionary.learning import DUPLICATE_COS, KSVD_TOL, LEARNERS
from prism.primitives.dictionary.matching import omp_gram, windows, znorm
from prism.primitives.dictionary.model import (
    FIT_SCALE_FLOOR,
    FORMAT,
    FORMAT_VERSION,
    MAX_FIT_WINDOWS,
    MAX_NEW_ATOMS,
    MAX_PENDING,
    MIN_NEW_SHARE,
    MIN_USE_SHARE,
    WINDOWS_PER_NEW_ATOM,
    AtomEvent,
    Codes,
    Part,
    PrimitiveDictionary,
)
from prism.primitives.dictionary.shapes import KINDS, describe_atom

__all__ = [
    "DUPLICATE_COS",
    "FIT_SCALE_FLOOR",
    "FORMAT",
    "FORMAT_VERSION",
    "KINDS",
    "KSVD_TOL",
    "LEARNERS",
    "MAX_FIT_WINDOWS",
    "MAX_NEW_ATOMS",
    "MAX_PENDING",
    "MIN_NEW_SHARE",
    "MIN_USE_SHARE",
    "WINDOWS_PER_NEW_ATOM",
    "AtomEvent",
    "Codes",
    "Part",
    "PrimitiveDictionary",
    "describe_atom",
    "omp_gram",
    "windows",
    "znorm",
]
