"""The parts a decomposition is made of, as plain frozen dataclasses (indices are steps)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Period:
    """A significant period of a series.

    Attributes:
        steps: the period in steps of the series (may be fractional).
        seconds: the period in seconds (``steps * freq_s``).
        strength: share of the (detrended) variance that this period's harmonics explain, 0..1.
        power_ratio: periodogram power at the peak over the surrogate significance threshold
            (> 1 means significant).
        acf: autocorrelation of the series at lag ``round(steps)`` (the confirmation).
    """

    steps: float
    seconds: float
    strength: float
    power_ratio: float
    acf: float


@dataclass(frozen=True)
class Burst:
    """A burst: a run of steps far above the robust baseline.

    Attributes:
        start: first step of the burst.
        end: one past its last step.
        peak: the step of its highest value.
        height: the peak's excess over the baseline, in the series' unit.
    """

    start: int
    end: int
    peak: int
    height: float


@dataclass(frozen=True)
class LevelShift:
    """A change point where the level of the series moves and stays.

    Attributes:
        at: first step of the new level.
        delta: new level minus old level, in the series' unit.
    """

    at: int
    delta: float
