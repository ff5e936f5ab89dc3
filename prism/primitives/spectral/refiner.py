"""The spectral refiner: the sinusoids that stand out of a residual's spectrum, continued."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from prism.errors import ConfigError, NotFittedError
from prism.primitives.spectral.periodogram import (
    Background,
    padded_length,
    periodogram,
    refine_peak,
    surrogates,
)
from prism.primitives.spectral.robust import MIN_LENGTH, REL_EPS, as_1d, fill_gaps

FloatArray = NDArray[np.float64]

# The refiner keeps no sinusoid slower than this many cycles over the residual: slower, it is
# a trend, and a sinusoid fitted to a trend turns back soon after the end.
_REFINER_MIN_CYCLES = 2.0


class SpectralRefiner:
    """Sinusoids that stand out of a residual's spectrum, fitted and continued.

    The noise floor is the robust local background of the residual's periodogram (as in
    :func:`find_periods`), so a red residual does not pass its slow wander off as sinusoids.
    Only frequencies with at least two cycles over the residual are considered: anything
    slower is a trend, and a sinusoid fitted to a trend turns back soon after the end.

    Args:
        max_terms: at most this many sinusoids are kept (0 keeps none).
        threshold: ``"adaptive"``: a line must exceed the noise floor (a median) by the factor
            that one Gaussian-noise ordinate exceeds with probability ``0.05 / (n / 2)``, so
            about 0.05 false terms are expected on white noise; ``"surrogate"``: the largest
            normalised ordinate of 99 shuffled copies of the residual; a number: that factor
            over the noise floor.
        random_state: seed of the shuffles of ``threshold="surrogate"``.

    Attributes:
        frequencies_: kept frequencies in cycles per step, largest amplitude first.
        amplitudes_: their amplitudes, in the unit of the residual.
        phases_: their phases in radians: term ``j`` is
            ``amplitudes_[j] * cos(2 * pi * frequencies_[j] * t + phases_[j])`` at step ``t``
            (``t = 0`` is the first value passed to :meth:`fit`).
        n_: length of the fitted residual.
    """

    def __init__(
        self,
        *,
        max_terms: int = 8,
        threshold: str | float = "adaptive",
        random_state: int | None = 0,
    ) -> None:
        self.max_terms = max_terms
        self.threshold = threshold
        self.random_state = random_state

    # -- public API --------------------------------------------------------------------------

    def fit(self, residual: np.ndarray) -> SpectralRefiner:
        """Find and fit the significant sinusoids of ``residual``.

        Args:
            residual: a 1-D series (what a decomposition left over). NaN and infinite values are
                gaps, filled by linear interpolation for the fit.

        Returns:
            self, with ``frequencies_``, ``amplitudes_``, ``phases_`` and ``n_`` set (a refit
            replaces them).

        Raises:
            DataContractError: ``residual`` is not 1-D.
            ConfigError: ``max_terms`` or ``threshold`` is invalid.
        """
        arr = as_1d(residual, "residual")
        self._check_params()
        freqs, amps, phases = self._fit(arr)
        self.n_ = int(arr.size)
        self.frequencies_ = freqs
        self.amplitudes_ = amps
        self.phases_ = phases
        return self

    def fitted(self) -> np.ndarray:
        """The in-sample sum of the kept sinusoids at steps ``0 .. n_ - 1``.

        Returns:
            A float array of length ``n_`` (zeros when no term was kept).

        Raises:
            NotFittedError: before :meth:`fit`.
        """
        self._check_fitted()
        return self._evaluate(np.arange(self.n_, dtype=np.float64))

    def extrapolate(self, horizon: int) -> np.ndarray:
        """The kept sinusoids continued for ``horizon`` steps after the end of the residual.

        Args:
            horizon: number of steps, >= 0.

        Returns:
            A float array of length ``horizon`` (steps ``n_ .. n_ + horizon - 1``).

        Raises:
            NotFittedError: before :meth:`fit`.
            ConfigError: ``horizon`` is negative or not an integer.
        """
        self._check_fitted()
        if int(horizon) != horizon or horizon < 0:
            raise ConfigError(f"horizon must be an integer >= 0, got {horizon!r}")
        return self._evaluate(np.arange(self.n_, self.n_ + int(horizon), dtype=np.float64))

    # -- internals ---------------------------------------------------------------------------

    def _check_params(self) -> None:
        if int(self.max_terms) != self.max_terms or self.max_terms < 0:
            raise ConfigError(f"max_terms must be an integer >= 0, got {self.max_terms!r}")
        th = self.threshold
        valid = (
            th in ("adaptive", "surrogate")
            if isinstance(th, str)
            else (isinstance(th, int | float) and th > 0)
        )
        if not valid:
            raise ConfigError(
                f"threshold must be 'adaptive', 'surrogate' or a factor > 0, got {th!r}"
            )

    def _check_fitted(self) -> None:
        if not hasattr(self, "frequencies_"):
            raise NotFittedError("this SpectralRefiner is not fitted yet; call fit(residual)")

    def _evaluate(self, t: FloatArray) -> FloatArray:
        out = np.zeros(t.size, dtype=np.float64)
        for f, a, p in zip(self.frequencies_, self.amplitudes_, self.phases_, strict=True):
            out += a * np.cos(2.0 * np.pi * f * t + p)
        return out

    def _fit(self, arr: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        empty = np.zeros(0, dtype=np.float64)
        n = arr.size
        filled = fill_gaps(arr) if n else None
        if filled is None or n < MIN_LENGTH or self.max_terms == 0:
            return empty, empty, empty
        scale = float(np.max(np.abs(filled)))
        if scale <= 0.0:
            return empty, empty, empty
        # Scaled to [-1, 1] so that any finite input is safe to square; the mean is not a
        # sinusoid and would leak into the lowest bins.
        y = filled / scale
        y = y - float(np.mean(y))
        if float(np.std(y)) <= REL_EPS:
            return empty, empty, empty
        nfft = padded_length(n)
        t = np.arange(n, dtype=np.float64)
        background = Background.plan(n, nfft)
        # The floor comes from the residual as given: its median ignores the few lines, and
        # keeping it fixed stops it sinking as the lines are removed.
        floor = background.of(np.asarray(periodogram(y, nfft), dtype=np.float64))
        lowest = int(math.ceil(_REFINER_MIN_CYCLES * nfft / n))
        factor = self._factor(y, nfft, background, lowest)
        chosen: list[float] = []
        current = y
        for _ in range(int(self.max_terms)):
            p = np.asarray(periodogram(current, nfft), dtype=np.float64)
            ratio = p / floor
            ratio[:lowest] = 0.0
            k = int(np.argmax(ratio))
            if ratio[k] <= factor:
                break
            f = refine_peak(np.log(np.maximum(p, np.finfo(np.float64).tiny)), k) / nfft
            f = float(min(max(f, _REFINER_MIN_CYCLES / n), 0.5))
            if any(abs(f - g) < 0.5 / n for g in chosen):
                break  # the same line again: least squares could not remove it further
            chosen.append(f)
            coef = _linear_fit(y, t, np.array(chosen))
            current = y - _design(t, np.array(chosen)) @ coef
        if not chosen:
            return empty, empty, empty
        freqs, coef = _nonlinear_refine(y, t, np.array(chosen))
        a, b = coef[0::2], coef[1::2]
        amps = np.hypot(a, b) * scale
        # a cos(wt) + b sin(wt) = A cos(wt + phi) with A = hypot(a, b), phi = atan2(-b, a).
        phases = np.arctan2(-b, a)
        order = np.argsort(-amps)
        return (
            np.asarray(freqs[order], dtype=np.float64),
            np.asarray(amps[order], dtype=np.float64),
            np.asarray(phases[order], dtype=np.float64),
        )

    def _factor(self, y: FloatArray, nfft: int, background: Background, lowest: int) -> float:
        """The factor over the noise floor that a line must exceed (see ``threshold``)."""
        n = y.size
        th = self.threshold
        if th == "adaptive":
            # A Gaussian-noise periodogram ordinate is exponential with mean mu and median
            # mu ln 2, and the floor is a median: P(ratio > c) = exp(-c ln 2) = 0.05 / (n / 2).
            return float(-math.log(0.05 / max(n / 2.0, 1.0)) / math.log(2.0))
        if th == "surrogate":
            rng = np.random.default_rng(self.random_state)
            sp = np.asarray(periodogram(surrogates(y, 99, rng), nfft), dtype=np.float64)
            return float(np.max((sp / background.of(sp))[:, lowest:]))
        return float(th)


def _design(t: FloatArray, freqs: FloatArray) -> FloatArray:
    """Columns ``cos(2 pi f_0 t), sin(2 pi f_0 t), cos(2 pi f_1 t), ...``."""
    w = 2.0 * np.pi * np.outer(t, freqs)
    out = np.empty((t.size, 2 * freqs.size), dtype=np.float64)
    out[:, 0::2] = np.cos(w)
    out[:, 1::2] = np.sin(w)
    return out


def _linear_fit(y: FloatArray, t: FloatArray, freqs: FloatArray) -> FloatArray:
    coef, *_ = np.linalg.lstsq(_design(t, freqs), y, rcond=None)
    return np.asarray(coef, dtype=np.float64)


def _nonlinear_refine(
    y: FloatArray, t: FloatArray, freqs: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Joint least squares of frequencies and coefficients (the Gaussian MLE of the sinusoids).

    Starts from the greedy estimates (Levenberg-Marquardt). A frequency may move by at most one
    bin: if one wanders further (onto another line or into the noise), the greedy estimates are
    kept. Time is centred for the fit so that frequency and phase errors do not correlate;
    the coefficients are moved back to ``t = 0`` at the end.

    Returns:
        The frequencies and the coefficients ``(a_0, b_0, a_1, b_1, ...)`` at ``t = 0``.
    """
    n, m = t.size, freqs.size
    t0 = 0.5 * (n - 1)
    tc = t - t0
    start = np.concatenate([freqs, _linear_fit(y, tc, freqs)])

    def residuals(p: FloatArray) -> FloatArray:
        return np.asarray(_design(tc, p[:m]) @ p[m:] - y, dtype=np.float64)

    def jacobian(p: FloatArray) -> FloatArray:
        w = 2.0 * np.pi * np.outer(tc, p[:m])
        cos, sin = np.cos(w), np.sin(w)
        a, b = p[m::2], p[m + 1 :: 2]
        jac = np.empty((n, 3 * m), dtype=np.float64)
        jac[:, :m] = 2.0 * np.pi * tc[:, None] * (b * cos - a * sin)
        jac[:, m::2] = cos
        jac[:, m + 1 :: 2] = sin
        return jac

    sol = least_squares(residuals, start, jac=jacobian, method="lm")
    moved = np.abs(sol.x[:m] - freqs)
    best = (
        sol.x if sol.success and np.all(moved <= 1.0 / n) and np.all(np.isfinite(sol.x)) else start
    )
    if float(np.sum(residuals(best) ** 2)) > float(np.sum(residuals(start) ** 2)):
        best = start
    f = np.asarray(best[:m], dtype=np.float64)
    a, b = best[m::2], best[m + 1 :: 2]
    # a cos(w (t - t0)) + b sin(w (t - t0)) in terms of cos(wt), sin(wt):
    w0 = 2.0 * np.pi * f * t0
    coef = np.empty(2 * m, dtype=np.float64)
    coef[0::2] = a * np.cos(w0) - b * np.sin(w0)
    coef[1::2] = a * np.sin(w0) + b * np.cos(w0)
    return f, coef
