"""Periods of a series and the adaptive spectral refinement of a residual.

Two tools of the PRISM decomposition live here:

* :func:`find_periods` finds the significant periods of a series (a day, a week, a shift
  pattern, ...) without being told which to look for.
* :class:`SpectralRefiner` models what a decomposition leaves over with the few sinusoids that
  stand out of its spectrum, and continues them past the end of the series.

Method of :func:`find_periods`, in order:

1. *Robustify.* NaN or infinite values are gaps. A run of one repeated value far longer than
   the series' usual runs (an outage at 0 GPUs, a stuck counter) is a gap too; the long idle
   stretches of an idle cluster are its usual runs and stay values. Gaps are filled by linear
   interpolation. Bursts are winsorised: deviations from a running median (half-width
   ``n / 100`` steps) are clipped at 5 robust standard deviations (1.4826 MAD, or the standard
   deviation when more than half of them are equal). A least-squares line is removed.
2. *Periodogram.* Hann taper (its sidelobes fall fast, so the large low-frequency power of a
   workload does not leak onto the lines) and zero padding to twice the length.
3. *Local background.* Workloads have red spectra: the slow wander of the load has far more
   power than a faint daily cycle, and shuffled surrogates are white, so against them every
   slow wiggle would be significant. The periodogram is divided by a robust local background:
   the median power within +-25 % in frequency (at least +-16 bins), where a line fills too few
   bins to move it. At the lowest frequencies such a window would be lopsided (it cannot reach
   below the first bin) and would sit under the steep red spectrum; a resistant power-law fit
   over the first bins replaces it there.
4. *Surrogate threshold.* ``n_surrogates`` random permutations of the robustified series
   destroy any periodicity but keep the distribution of values (zeros and clipped bursts
   included). They are normalised exactly like the series, one ``rfft`` over a 2-D array.
   Periods of every scale being a priori alike, the error rate is shared between the octaves
   of period (2-4 steps, 4-8 steps, ...): in each, the largest normalised ordinate of every
   surrogate is recorded, a Gumbel law is fitted to these maxima (location per octave, scale
   common to all) and its ``1 - alpha / octaves`` quantile is the threshold. The whole search
   is thus a family-wise test at ``alpha``: white or red noise yields no period with
   probability about ``1 - alpha``.
5. *Candidates.* Local maxima of the normalised periodogram above the threshold, with periods
   of 2 to ``n / min_cycles`` steps. The frequency is refined by parabolic interpolation of the
   log power (near exact on the Gaussian-like Hann main lobe) at the line and at each of its
   overtones that is significant on its own, combined as the weighted least-squares fit of
   ``f_k = k f``: a week spans only four or five bins of a month, its seventh harmonic (the
   day) pins it down seven times better.
6. *Confirmation.* From the shortest candidate up, each on the series less the mean profiles
   of the shorter periods already confirmed (so that a strong short cycle does not put its own
   autocorrelation peaks next to a longer lag, and a week must repeat beyond its days): the
   autocorrelation at ``round(period)`` of that series less a centred moving average over one
   period (which keeps the cycle but not the slow wander that makes a raw ACF decay
   monotonically) must exceed ``2 / sqrt(n)`` and the autocorrelation at half the period.
7. *Strength.* The share of the variance of the robustified series less a moving average over
   one period (as in a classical decomposition, so the slow wander, which no cycle explains,
   does not dilute it) that the mean profile of a fold at the (fractional) period explains,
   with ``round(period)`` phases, corrected for the share that phase means of pure noise
   explain (the epsilon-squared of a one-way ANOVA). This is the seasonal strength of Wang,
   Smith and Hyndman (2006) with the profile as the seasonal part; it is in ``0..1``.
8. *Harmonics.* A period ``P / k`` of another found period ``P`` is an overtone of ``P``'s shape
   (the 12 hours of a peaked daily profile) when its line is the weaker of the two and it
   explains less than half of ``P``'s profile; it is dropped. A day inside a week explains most
   of the weekly profile, and a day whose line is stronger than that of a longer multiple is a
   fundamental of its own: both stay. A period of strength 0 (a line whose profile explains no
   more than noise would) is dropped too.

Summing the power of several harmonics of each trial frequency (as pulsar searches do) was
tried and left out: on the Helios traces it raised the thresholds more than it raised the
lines, which are close to sinusoidal there.

:class:`SpectralRefiner` divides the residual's (Hann-tapered, padded) periodogram by the same
robust local background, the noise floor. It then repeatedly takes the highest peak above the
threshold, refits all kept sinusoids by linear least squares and removes them (a CLEAN-like
greedy search), and finally refines all frequencies, amplitudes and phases jointly by
non-linear least squares (the Gaussian maximum-likelihood fit), which keeps long
extrapolations in phase.

Modules: ``robust`` (step 1), ``periodogram`` (the periodogram, its background and the
surrogates: steps 2-4 and the refiner's noise floor), ``periods`` (:func:`find_periods`) and
``refiner`` (:class:`SpectralRefiner`).
"""

from prism.primitives.spectral.periods import find_periods, whole_ratio
from prism.primitives.spectral.refiner import SpectralRefiner

__all__ = ["SpectralRefiner", "find_periods", "whole_ratio"]
