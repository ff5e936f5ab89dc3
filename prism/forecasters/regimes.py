"""The stacker's regimes: which weights a forecast origin takes.

:class:`~prism.forecasters.stacking.NaiveAnchoredStacker` learns weights per horizon block and
per regime of the origin; :meth:`PrismForecaster._regimes
<prism.forecasters.hybrid.PrismForecaster._regimes>` assigns them.

- No jump in the last day: ``FLAT`` when the last 6 h held exactly still, else ``QUIET``.
- A recent jump away from the week's level (``AWAY``) or back toward it (``BACK``); each
  twice, as the series has moved in the last hour or held exactly still since
  (``AWAY_HELD``, ``BACK_HELD``: a new level that holds).
- ``IDLE``: the last value is 0 (an idle series, an app scaled to 0), whatever came before.
  Its last value is exact for as long as the series stays idle, so a candidate that moves
  loses without bound there, and the other regimes should not have to pay for it.
- ``CYCLING``: an origin that moved in the last 6 h without a jump, whose last season
  repeated the one before more closely than it held the value before it. On the generated
  deployments a day that repeated predicts the next (the season candidate's day-ahead MAE
  was 0.65x the last value's after such a day, 8x after one that did not, geometric means
  over origins that moved), and the quiet regime's weights had bet on the season for both.
  Only a series whose season its spectrum confirms (``season.SEASON_MATCH``) cycles: a
  random walk's last day stays closer to the day before than to where it started one time
  in five by chance, and in the cycling regime it took the weights its panel's daily cycles
  earned.
- ``PERIODIC_AWAY``, ``PERIODIC_BACK``: a jump in a periodic series (it learns with the jump
  regimes when it has too few origins). After a step, an autoscaled app's cycle goes on
  around the new level, which the cycle candidates (``profile``, shifted to the last hour)
  follow, whereas the jump regimes' weights, learned mostly on series without a cycle, hold
  the last value. On the generated deployments (7 of 24 apps periodic), paired against the
  PRISM before, a day ahead 0.885 [0.852, 0.915] and 0.889 [0.851, 0.931] on the two weeks
  of the accuracy benchmark; a cycled origin taking the cycling regime instead, whatever its
  jump, doubled the error of autoscaled apps whose steps hold on a stress panel.
- ``QUIET_HELD`` (``use_quiet_held``): a quiet origin that has held exactly still for the
  last hour, apart from one that keeps moving.
"""

from __future__ import annotations

from enum import IntEnum


class Regime(IntEnum):
    """A forecast origin's regime (the stacker's weights are per regime); see the module."""

    FLAT = 0
    QUIET = 1
    AWAY = 2
    BACK = 3
    AWAY_HELD = 4
    BACK_HELD = 5
    IDLE = 6
    CYCLING = 7
    PERIODIC_AWAY = 8
    PERIODIC_BACK = 9
    QUIET_HELD = 10


N_REGIMES = len(Regime)
#: The regime each was split from (a regime with too few origins learns with its parent).
PARENTS: list[int] = [Regime.FLAT, Regime.QUIET, Regime.AWAY, Regime.BACK, Regime.AWAY,
                      Regime.BACK, Regime.IDLE, Regime.QUIET, Regime.AWAY, Regime.BACK,
                      Regime.QUIET]
