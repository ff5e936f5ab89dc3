"""The PRISM hybrid: demand primitives, jumps, cycles and an RNN, stacked on the last value.

PRISM (DAC '26, arXiv 2603.25378) forecasts GPU demand as a composition of recurring shapes
with an adaptive spectral refinement. This forecaster builds each forecast from candidate
forecasts, each the work of the model that suits one part of the demand, and combines them
with a meta-learner trained out of sample across the panel, with the last value as its prior:

- **naive**: the last value. GPU demand moves in steps (jobs hold GPUs for hours, deployments
  hold for days), so it is the reference every other candidate has to beat;
- **jump** (``use_jumps``): the latest jump of the series (:mod:`prism.primitives.jumps`),
  classed by direction (away from or back toward the week's level) and age, keeps what jumps
  of that class have kept in the history of the panel and of the series: a level shift holds,
  a burst decays, at the rate past bursts decayed. No candidate reverts to a level the series
  has left for good: the reversion candidate reverts to the median *since* the latest jump,
  and a move one point old, from a level held for 6 h in a series without a cycle, is a jump
  of age 0 (``use_fresh_jumps``);
- **revert**: the last value reverting to the median since the latest jump (at most a day
  back), with a half-life of 6 h (queues drain, bursts decay);
- **mean**: the mean of the last 6 h (a level that ignores the noise of counts);
- **season**: the last cycle of the period whose last cycle predicted the next best, among
  a day and those spectral analysis finds in the series
  (:func:`~prism.primitives.spectral.find_periods`); a week (``use_week``) where it predicted
  clearly better than those (weekday plateaus), and **profile**: the mean of the last 7
  cycles (a week of days), shifted to the last hour's level;
- **primitives** (``use_primitives``): the lookback window before the origin is encoded as a
  sparse activation vector over a learned dictionary of demand shapes
  (:class:`~prism.primitives.dictionary.PrimitiveDictionary`, learned from the windows of all
  series of the panel), and the atoms' future parts continue it, anchored at the last value;
- **spectral** (``use_spectral``): sinusoids that stand out of the spectrum of the detrended
  series (:class:`~prism.primitives.spectral.SpectralRefiner`, adaptive threshold over the
  local noise floor), continued and added to the reverting level;
- **rnn** (``use_rnn``): a global GRU over all series (:mod:`prism.forecasters.rnn`), on
  instance-normalised windows, for the nonlinear and burst dynamics the linear parts miss.

**Combiner** (``combiner="stacked"``, the default). A
:class:`~prism.forecasters.stacking.NaiveAnchoredStacker`: per block of horizon steps (up to
1 h, 3 h, 6 h, 12 h, 1 d, 2 d, beyond) and per regime of the origin (no jump in the last day, a
recent jump away from the week's level, a recent jump back toward it, each apart for the
periodic series; a jump the series undid and stayed off for 6 h is over; a last value of 0 is
a regime of its own, and so is a periodic series whose last season repeated the one before;
with ``use_redirect`` a jump regime may send its origins to the weights they would have
without the jump, per block past 6 h, where those did surely better on them out of sample),
convex weights over the
candidates' changes from the last value, fitted by least absolute relative error on
rolling-origin forecasts of all series. Those forecasts are out of sample: the dictionary and
the RNN are learned on each series but its last ``stack_window``, whose origins train the
weights (the backtest's test windows and the conformal tail come later still). A block keeps
weights only where they beat the last value on later origins they were not fitted on;
elsewhere it forecasts the last value. ``combiner="recent"`` is the earlier combiner, kept for
the ablation: per series, weights ``MAE ** -combiner_power`` from the candidates' errors over
the last ``combiner_window`` (a candidate more than ``combiner_trim`` times worse than the best
drops out up to ``combiner_trim_horizon``).

The switches ``use_primitives``, ``use_spectral``, ``use_rnn`` and ``use_jumps`` drop
candidates for ablations, and ``use_redirect`` turns on the redirects above; the parts that
did not earn their keep on the accuracy benchmark are off by default (see the README).
Where a series' values move in steps of one size (whole GPUs, replicas, counts), a
forecast less than half a step from the last value is the last value (``use_snap``), and
a value that held exactly still is held through the horizon blocks its like held through
(``use_hold_gate``, :mod:`prism.forecasters.hold`).
Everything is learned on the series but its calibration tail (see
:mod:`prism.forecasters.base`), so the combiner and the conformal quantiles are out of sample.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from prism.errors import ConfigError, DataContractError
from prism.forecasters.base import BaseForecaster, FloatArray
from prism.forecasters.hold import hold_steps
from prism.forecasters.paths import (
    cycled,
    primitive_paths,
    profile_paths,
    repeat_last,
    series_quantum,
    sinusoid_sum,
    still,
)
from prism.forecasters.recent import recent_weights
from prism.forecasters.regimes import N_REGIMES, PARENTS, Regime
from prism.forecasters.season import choose_season
from prism.forecasters.stacking import FLOOR_ONE_STEP, NaiveAnchoredStacker, StackingData
from prism.primitives.decompose import learn_dictionary
from prism.primitives.jumps import (
    TOWARD,
    JumpEvents,
    JumpPersistence,
    JumpState,
    jump_events,
    jump_paths,
    jump_state,
)
from prism.primitives.spectral import SpectralRefiner, find_periods
from prism.primitives.structure import robust_trend

if TYPE_CHECKING:
    from prism.forecasters.gbm import GbmForecaster
    from prism.forecasters.rnn import SequenceRegressor
    from prism.primitives.dictionary import PrimitiveDictionary

logger = logging.getLogger(__name__)

Ends = npt.NDArray[np.int64]
#: Upper edges of the combiner's blocks of horizon steps, as durations.
_BLOCKS = ("1h", "3h", "6h", "12h", "1d", "2d")
#: ``use_fresh_jumps``: a one-point move is a jump only from a value that held exactly still
#: this long (at least two points) before it.
_FRESH_HOLD = "6h"
#: At most this many combiner origins inside ``combiner_window`` (the "recent" combiner).
_COMBINER_ORIGINS = 48
#: Stacking origins per series (spread over its ``stack_window``): at least this many...
_STACK_ORIGINS = 48
#: ...and more for small panels, up to about this many over the whole panel.
_STACK_PANEL_ORIGINS = 768
#: A series' own jumps count as this many pseudo-jumps against the panel's table.
_JUMP_PRIOR = 10.0
_COMBINERS = ("stacked", "recent")
#: At most this many series' jumps remembered (``_events``); the memo starts over beyond.
_EVENTS_MEMO = 4096


@dataclass
class _SeriesState:
    """What the hybrid learned of one series."""

    season: int
    sinusoids: tuple[FloatArray, FloatArray, FloatArray]  # frequencies, amplitudes, phases
    floor: float  # z-normalisation scale floor of its windows
    jumps: FloatArray | None = None  # its jump persistence table, shrunk to the panel's
    periodic: bool = True  # its season matches a period of its spectrum (else it never cycles)
    quantum: float = 0.0  # the step its values move in (0: none; see ``paths.series_quantum``)
    repeats: bool = True  # its last season predicted the next better than half a season did

    @property
    def has_cycle(self) -> bool:
        """A season its spectrum confirms, or a last season that repeated: the cycle
        candidates' series, where neither a fresh move is a jump nor a held value is held."""
        return self.periodic or self.repeats

    @property
    def cycle(self) -> int:
        """The season an origin must repeat to be cycling (0: the series never cycles). A
        state saved before ``periodic`` existed reads the field's default, True."""
        return self.season if self.periodic else 0


class PrismForecaster(BaseForecaster):
    """The PRISM hybrid forecaster (see the module docstring).

    Args:
        lookback: history each primitive window encodes (a duration or steps).
        horizon: future part of the atoms and of the jump table; longer forecasts continue by
            re-encoding (primitives) or repeat the last step (jumps).
        n_atoms: learned atoms of the dictionary (besides trend and Fourier atoms).
        sparsity: active atoms per window.
        use_primitives: the primitive candidate.
        use_spectral: the spectral refinement candidate (off by default: on 7 panels x 28
            cutoffs it moved AvgRelMAE by under 1 %, an interval touching 1 everywhere).
        use_rnn: the RNN candidate.
        use_jumps: the jump candidate (level shift or burst, learned persistence) and the
            stacker's regimes; off, every origin is one regime.
        use_gbm: the global gradient-boosting candidate (changes from the last value, learned
            across the panel: :class:`~prism.forecasters.gbm.GbmForecaster`).
        use_redirect: let the stacker send the origins of a jump regime, in the horizon blocks
            past 6 h, to the weights of the regime they would have without the jump, where
            those did surely better on them out of sample (off by default: with the periodic
            jump regimes, turning it on gives the generated deployments a day ahead 1.007
            [0.996, 1.019] and 1.005 [0.989, 1.021] of PRISM's MAE on the two weeks of the
            accuracy benchmark, everything else 0.995-1.001; see `evaluation/README.md`).
        use_week: a week may be the season of a series that holds two, when its last week
            predicted the next clearly better than any shorter period
            (:data:`~prism.forecasters.season.WEEK_MARGIN`).
        use_snap: in a series whose values move in steps of one size (GPUs, replicas,
            counts; :func:`~prism.forecasters.paths.series_quantum`), a forecast less than
            half a step from the last value is the last value: the median of values on that
            lattice is on it, and where the series holds still the last value is exact while
            any small move loses without bound against it.
        use_cycle_gate: the cycle candidates (``season``, ``profile``) forecast only a series
            with a period in its spectrum, or whose last season predicted the next far better
            than half a season did (:data:`~prism.forecasters.season.REPEAT_SHARE`); in any
            other, they repeat yesterday's one-off step, with the weights the stacker learned
            for them on the panel's cycles (on the generated deployments a day ahead, 0.964
            [0.935, 0.986] and 0.963 [0.940, 0.981] of the ungated PRISM's MAE on the two
            weeks of the accuracy benchmark, the other panels within their intervals of 1; see
            `evaluation/README.md`).
        use_fresh_jumps: in a series whose earlier one-point moves mostly held, a last value
            that alone moved as far as a jump does (the rolling median flags a jump one point
            later), from a value that held exactly still for the 6 h before (``_FRESH_HOLD``:
            an app resized by hand, not a busy VC or a gang), in a series without a cycle (not
            one scaled up every morning), is a jump of age 0 from the level before it
            (:func:`~prism.primitives.jumps.jump_state`): the forecast takes the weights of
            its jump's regime, and the reversion candidate's target is the new level, not the
            day's median it left; the stacker's weights are learned as without it. On by
            default: it takes the hand-sized apps' catastrophe away and moves no point
            forecast of the accuracy panels (see `evaluation/README.md`).
        use_short_floor: the stacker's loss unit of a horizon block of few steps (an hourly
            series an hour ahead) is floored at a larger share of the series' mean error
            (:data:`~prism.forecasters.stacking.FLOOR_ONE_STEP`); without it, windows where
            the last value was right by chance shrink every weight towards it (see
            `evaluation/README.md`).
        use_hold_gate: in a series without a cycle whose last value has held exactly still,
            the forecast holds it through the last horizon block that at least 15 % of the
            series' past runs as long went on holding (:mod:`~prism.forecasters.hold`).
        use_hold_tail: the hold gate reads a run older than all but two of the series'
            comparable past runs from the three longest (``tail`` of
            :func:`~prism.forecasters.hold.hold_steps`); without it, such a run is not held.
            On by default: on a generated fleet scaled by hand it takes catastrophes away a
            day ahead and moves no point forecast of the accuracy panels.
        use_quiet_held: an origin that moved in the last 6 h without a jump and has held
            exactly still for the last hour is a regime of its own (a series of whole steps
            at a new level), apart from one that keeps moving (noise around a level).
        use_series_veto: a series whose own past windows lost to the last value under the
            stacker's weights, out of fold (the mean log ratio of its windows in a horizon
            block above 0: ``group_logs_`` of
            :class:`~prism.forecasters.stacking.NaiveAnchoredStacker`), keeps the last value
            in that block, unless it has a cycle: the panel's evidence moves a series only
            where the series' own evidence does not say the move loses there. On by default:
            on a generated fleet scaled by hand it takes the last catastrophes away a day
            ahead, and on the accuracy panels it moves 3 windows' MAE (see
            `evaluation/README.md`).
        combiner: ``"stacked"`` (meta-learner across the panel, the last value as prior) or
            ``"recent"`` (per-series weights from the last ``combiner_window``).
        stack_window: the tail of each series whose origins train the stacker (at most a
            third of the series); the parts learned from data are learned before it.
        combiner_window: how far back the "recent" combiner scores the candidates.
        combiner_power: "recent" weights are ``MAE ** -combiner_power``.
        combiner_trim: in the blocks up to ``combiner_trim_horizon``, a candidate whose MAE is
            more than ``combiner_trim`` times the best's gets no weight (``inf``: no trimming).
        combiner_trim_horizon: how far the trimming reaches (a duration or steps).
        rnn_cell: ``"gru"`` or ``"lstm"``.
        rnn_hidden_size: hidden units of the RNN.
        rnn_epochs: at most this many training epochs (early stopping may end sooner).
        device: where the RNN trains: ``"cpu"`` (default), ``"cuda"`` or ``"auto"``.
        random_state: seed of the dictionary, the surrogates, the stacker and the RNN.
    """

    alias = "prism"
    global_model = True

    def __init__(
        self,
        *,
        lookback: str = "12h",
        horizon: str = "1d",
        n_atoms: int = 8,
        sparsity: int = 1,
        use_primitives: bool = True,
        use_spectral: bool = False,
        use_rnn: bool = False,
        use_jumps: bool = True,
        use_gbm: bool = True,
        use_redirect: bool = False,
        use_week: bool = True,
        use_snap: bool = True,
        use_cycle_gate: bool = True,
        use_fresh_jumps: bool = True,
        use_short_floor: bool = True,
        use_hold_gate: bool = True,
        use_quiet_held: bool = False,
        use_hold_tail: bool = True,
        use_series_veto: bool = True,
        combiner: str = "stacked",
        stack_window: str = "4d",
        combiner_window: str = "4d",
        combiner_power: float = 1.0,
        combiner_trim: float = 1.1,
        combiner_trim_horizon: str = "6h",
        rnn_cell: str = "gru",
        rnn_hidden_size: int = 32,
        rnn_epochs: int = 15,
        device: str = "cpu",
        random_state: int | None = 0,
    ) -> None:
        self.lookback = lookback
        self.horizon = horizon
        self.n_atoms = n_atoms
        self.sparsity = sparsity
        self.use_primitives = use_primitives
        self.use_spectral = use_spectral
        self.use_rnn = use_rnn
        self.use_jumps = use_jumps
        self.use_gbm = use_gbm
        self.use_redirect = use_redirect
        self.use_week = use_week
        self.use_snap = use_snap
        self.use_cycle_gate = use_cycle_gate
        self.use_fresh_jumps = use_fresh_jumps
        self.use_short_floor = use_short_floor
        self.use_hold_gate = use_hold_gate
        self.use_quiet_held = use_quiet_held
        self.use_hold_tail = use_hold_tail
        self.use_series_veto = use_series_veto
        self.combiner = combiner
        self.stack_window = stack_window
        self.combiner_window = combiner_window
        self.combiner_power = combiner_power
        self.combiner_trim = combiner_trim
        self.combiner_trim_horizon = combiner_trim_horizon
        self.rnn_cell = rnn_cell
        self.rnn_hidden_size = rnn_hidden_size
        self.rnn_epochs = rnn_epochs
        self.device = device
        self.random_state = random_state

    #: Parameters added after models were saved: a pickle from before them reads these
    #: values, which say what it does (it was fitted without them).
    _ADDED_PARAMS: dict[str, Any] = {"use_redirect": False, "use_week": False,
                                     "use_snap": False, "use_cycle_gate": False,
                                     "use_fresh_jumps": False, "use_short_floor": False,
                                     "use_hold_gate": False, "use_quiet_held": False,
                                     "use_hold_tail": False, "use_series_veto": False}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({**self._ADDED_PARAMS, **state})

    def __getstate__(self) -> dict[str, Any]:
        """The model without its memo of jumps (a cache, not something it learned)."""
        return {k: v for k, v in self.__dict__.items() if k != "_events_memo"}

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Cheap settings for the conformance suite (the RNN tiny)."""
        small = {"lookback": "2h", "horizon": "2h", "n_atoms": 2, "combiner_window": "6h",
                 "stack_window": "6h"}
        return [
            {**small, "use_rnn": False},
            {**small, "use_primitives": False, "use_rnn": False, "combiner": "recent"},
            {**small, "rnn_hidden_size": 4, "rnn_epochs": 2},
        ]

    # -- fit ----------------------------------------------------------------------------------
    def _fit(self, values: dict[str, FloatArray]) -> None:
        self._fit_shared(values)
        self._fit_local(values)

    def _check_params(self) -> None:
        if self.combiner not in _COMBINERS:
            raise ConfigError(f"combiner={self.combiner!r} must be one of {list(_COMBINERS)}")
        if self.combiner_power <= 0:
            raise ConfigError(f"combiner_power={self.combiner_power!r} must be positive")
        if not self.combiner_trim >= 1:
            raise ConfigError(f"combiner_trim={self.combiner_trim!r} must be at least 1 (the "
                              "best candidate always keeps its weight); inf turns it off")

    def _fit_shared(self, values: dict[str, FloatArray]) -> None:
        """The dictionary, the RNN, the panel's jump table and the stacker, from all series.

        The dictionary and the RNN are learned on each series but its stacking tail, so the
        candidate forecasts the stacker is trained on are out of sample.
        """
        self._check_params()
        self.lookback_steps_ = self._steps_of(self.lookback)
        self.horizon_steps_ = self._steps_of(self.horizon)
        self.combiner_steps_ = self._steps_of(self.combiner_window)
        self.combiner_trim_steps_ = self._steps_of(self.combiner_trim_horizon)
        stacked = self.combiner == "stacked"
        tails = {sid: self._stack_tail(len(v)) if stacked else 0 for sid, v in values.items()}
        inner = {sid: v[:len(v) - tails[sid]] for sid, v in values.items()}
        self.dictionary_: PrimitiveDictionary | None = None
        if self.use_primitives:
            self.dictionary_ = self._learn_dictionary(inner)
        self.rnn_: SequenceRegressor | None = None
        if self.use_rnn:
            self.rnn_ = self._learn_rnn(inner)
        self.gbm_: GbmForecaster | None = None
        if self.use_gbm:
            self.gbm_ = self._learn_gbm(inner)
        self.stacker_: NaiveAnchoredStacker | None = None
        if stacked:
            self.jump_table_ = self._jump_table(inner)
            self.stacker_ = self._learn_stacker(values, inner, tails)
        self.jump_table_ = self._jump_table(values)

    def _fit_local(self, values: dict[str, FloatArray]) -> None:
        """Each series' season, sinusoids, scale floor and jump table."""
        self.state_ = {sid: self._learn_series(sid, v) for sid, v in values.items()}

    def _stack_tail(self, n: int) -> int:
        try:
            window = self._steps_of(self.stack_window)
        except ConfigError:
            window = 1
        return int(min(window, n // 3))

    def _jump_params(self) -> dict[str, int]:
        return {"smooth": max(1, self._steps_of("30min") if self.freq_s_ <= 1800 else 1),
                "base_window": max(2, self._steps_of("6h") if self.freq_s_ <= 21600 else 2),
                "week": max(2, self._steps_of("7d") if self.freq_s_ <= 7 * 86400 else 2)}

    def _max_jump_age(self) -> int:
        return max(1, self._steps_of("1d") if self.freq_s_ <= 86400 else 1)

    def _six_hours(self) -> int:
        """Six hours in steps (at least one): the span of the last value's regimes, of the
        ``mean`` candidate and of the reversion's half-life, the points a jump must have been
        undone for to be over, and the first step of the blocks that may redirect."""
        return max(1, self._steps_of("6h") if self.freq_s_ <= 21600 else 1)

    def _persistence(self) -> JumpPersistence:
        return JumpPersistence(steps=self.horizon_steps_, step_s=self.freq_s_,
                               max_age=self._max_jump_age())

    def _events(self, y: FloatArray) -> JumpEvents:
        """The jumps of ``y``, remembered by its bytes: a fit asks for those of each whole
        series five times (the jump table, the series' state, the stacker's origins, the
        calibration and the forecast), and they are a rolling median over the whole series."""
        params = self._jump_params()
        key = (hashlib.blake2b(np.ascontiguousarray(y, dtype=np.float64).tobytes(),
                               digest_size=16).digest(), tuple(sorted(params.items())))
        memo: dict[Any, JumpEvents] = self.__dict__.setdefault("_events_memo", {})
        events = memo.get(key)
        if events is None:  # (a local: another thread may clear the memo meanwhile)
            events = jump_events(y, **params)
            if len(memo) >= _EVENTS_MEMO:
                memo.clear()
            memo[key] = events
        return events

    def _jump_table(self, values: dict[str, FloatArray]) -> JumpPersistence | None:
        if not self.use_jumps:
            return None
        return self._persistence().fit([(v, self._events(v)) for v in values.values()])

    def _learn_dictionary(self, values: dict[str, FloatArray]) -> PrimitiveDictionary | None:
        try:
            return learn_dictionary(
                list(values.values()), freq_s=self.freq_s_, n_atoms=int(self.n_atoms),
                sparsity=int(self.sparsity), lookback=self.lookback_steps_,
                horizon=self.horizon_steps_, random_state=self.random_state,
                # no linear atom: a slope fitted on the lookback and extrapolated over the
                # horizon scored far worse than the level on Helios (step-like demand)
                n_trend=1,
            )
        except DataContractError as exc:
            logger.info("no primitives for this fit: %s", exc)
            return None

    def _learn_series(self, series_id: str, y: FloatArray) -> _SeriesState:
        day = max(2, 86_400 // self.freq_s_)
        periods = find_periods(y, freq_s=self.freq_s_, random_state=self.random_state) if (
            len(y) >= 8) else []
        season = choose_season(y, periods, day, use_week=self.use_week)
        floor = 0.05 * float(np.std(y))
        empty = (np.zeros(0), np.zeros(0), np.zeros(0))
        sinusoids = empty
        if self.use_spectral and len(y) >= 16:
            rest = y - robust_trend(y, window=max(3, min(len(y) // 3, self._steps_of("1d"))))
            refiner = SpectralRefiner(random_state=self.random_state).fit(rest)
            sinusoids = (refiner.frequencies_, refiner.amplitudes_, refiner.phases_)
        jumps = None
        panel_table = getattr(self, "jump_table_", None)
        if panel_table is not None:
            own = self._persistence().fit([(y, self._events(y))])
            jumps = panel_table.shrunk(own, _JUMP_PRIOR)
        return _SeriesState(season=season.steps, sinusoids=sinusoids, floor=floor,
                            jumps=jumps, periodic=season.periodic, repeats=season.repeats,
                            quantum=series_quantum(y) if self.use_snap else 0.0)

    def _learn_rnn(self, values: dict[str, FloatArray]) -> SequenceRegressor | None:
        from prism.forecasters.rnn import SequenceRegressor

        series = [v for v in values.values() if len(v) >= 2 * self.lookback_steps_]
        if not series:
            logger.info("no RNN for this fit: no series has two lookbacks of history")
            return None
        seconds = [self.epoch_seconds(sid, np.arange(len(v))) for sid, v in values.items()
                   if len(v) >= 2 * self.lookback_steps_]
        rnn = SequenceRegressor(
            cell=self.rnn_cell, hidden_size=int(self.rnn_hidden_size),
            lookback=self.lookback_steps_, horizon=self.horizon_steps_,
            epochs=int(self.rnn_epochs), device=self.device, random_state=self.random_state,
        )
        return rnn.fit(series, seconds=seconds, freq_s=self.freq_s_)

    def _new_gbm(self) -> GbmForecaster:
        """The unfitted boosted-trees model :meth:`_learn_gbm` learns (a subclass may give
        it other features)."""
        from prism.forecasters.gbm import GbmForecaster

        return GbmForecaster(max_horizon=self.horizon, random_state=self.random_state)

    def _learn_gbm(self, values: dict[str, FloatArray]) -> GbmForecaster | None:
        """The boosted-trees candidate: a GbmForecaster's parameters, learned on ``values``.

        Only its learned parameters are used (its own calibration is not run): the hybrid
        calls its forecast hook with the hybrid's own series state.
        """
        gbm = self._new_gbm()
        gbm.freq_s_ = self.freq_s_
        gbm.first_ts_ = self.first_ts_
        try:
            gbm._fit(values)
        except DataContractError as exc:
            logger.info("no gbm candidate for this fit: %s", exc)
            return None
        return gbm

    def _gbm_paths(self, series_id: str, history: FloatArray, origins: Ends,
                   steps: int) -> FloatArray:
        assert self.gbm_ is not None
        self.gbm_.first_ts_ = self.first_ts_  # its calendar features: the hybrid's series
        return np.asarray(self.gbm_._forecast_many(series_id, history, origins, steps),
                          dtype=np.float64)

    def _learn_stacker(self, values: dict[str, FloatArray], inner: dict[str, FloatArray],
                       tails: dict[str, int]) -> NaiveAnchoredStacker:
        """The meta-learner, from forecasts at origins in each series' stacking tail.

        At those origins every candidate uses the points before the origin and parameters
        learned before the tail (the series' own state is learned on ``inner`` here).
        """
        steps = self.horizon_steps_
        per_series = max(_STACK_ORIGINS, _STACK_PANEL_ORIGINS // max(1, len(values)))
        deltas, targets, groups, orders, regimes, levels, alts = [], [], [], [], [], [], []
        # series ``g`` of the stacker's groups; a series whose own windows lost to the last
        # value under its weights, out of fold, keeps the last value there (``vetoed_``)
        self.vetoed_: dict[str, npt.NDArray[np.bool_]] = {}
        series = sorted(values)
        for g, sid in enumerate(series):
            v = values[sid]
            tail = tails[sid]
            if tail < 1:
                continue
            n_inner = len(inner[sid])
            origins = np.unique(np.linspace(n_inner, len(v) - 1, min(per_series, tail))
                                .round().astype(np.int64))
            origins = origins[origins >= 2]
            if len(origins) == 0:
                continue
            state = self._learn_series(sid, inner[sid])
            events = self._events(v)
            # the weights are learned as before ``use_fresh_jumps``: a move one point old
            # takes, in the forecast, the weights its jump gets one point later
            paths = self._candidates(sid, v, origins, steps, state=state, events=events,
                                     fresh=False)
            last = v[origins - 1]
            names = self._stack_names(paths)
            deltas.append(np.stack([paths[n] - last[:, None] for n in names]))
            target = origins[:, None] + np.arange(steps)[None, :]
            actual = np.where(target < len(v), v[np.minimum(target, len(v) - 1)], np.nan)
            targets.append(actual - last[:, None])
            groups.append(np.full(len(origins), g, dtype=np.int64))
            orders.append((origins - n_inner) / max(tail, 1))
            regime, alternative = self._regimes(v, origins, events, state.cycle, fresh=False)
            regimes.append(regime)
            alts.append(alternative)
            levels.append(np.abs(last))
        stacker = NaiveAnchoredStacker(edges=self._block_edges(steps), n_regimes=N_REGIMES,
                                       parents=PARENTS, redirect_after=self._six_hours(),
                                       floor_one_step=FLOOR_ONE_STEP if self.use_short_floor
                                       else 0.0, random_state=self.random_state)
        if not deltas:
            logger.info("no stacking origins: PRISM forecasts the last value")
            n = len(self._stack_names(self._candidate_names()))
            stacker.weights_ = np.zeros((len(stacker.edges), N_REGIMES, n))
            stacker.gain_ = np.zeros((len(stacker.edges), N_REGIMES))
            stacker.group_logs_ = np.zeros((0, len(stacker.edges)))
            return stacker
        data = StackingData(
            deltas=np.nan_to_num(np.concatenate(deltas, axis=1), nan=0.0),
            target=np.concatenate(targets), group=np.concatenate(groups),
            order=np.concatenate(orders), regime=np.concatenate(regimes),
            level=np.concatenate(levels),
            alternative=np.concatenate(alts) if self.use_redirect else None)
        stacker.fit(data)
        self.vetoed_ = {series[g]: logs > 0 for g, logs in enumerate(stacker.group_logs_)}
        return stacker

    def _candidate_names(self) -> list[str]:
        """The candidates this fitted configuration forecasts with."""
        names = ["naive", "revert", "mean", "season", "profile"]
        if self.use_jumps:
            names.append("jump")
        if self.dictionary_ is not None:
            names.append("primitives")
        if self.use_spectral:
            names.append("spectral")
        if self.rnn_ is not None:
            names.append("rnn")
        if self.gbm_ is not None:
            names.append("gbm")
        return names

    @staticmethod
    def _stack_names(paths: Iterable[str]) -> list[str]:
        """The stacked candidates, in a fixed order (naive is the anchor, not a candidate)."""
        order = ["revert", "mean", "season", "profile", "jump", "primitives", "spectral", "rnn",
                 "gbm"]
        present = set(paths)
        return [n for n in order if n in present]

    def _jump_state(self, events: JumpEvents, history: FloatArray, origins: Ends,
                    fresh: bool | None) -> JumpState:
        """The latest jump at each origin (``fresh``: a move one point old is one; default
        ``use_fresh_jumps``), as the regimes and the candidates both read it."""
        return jump_state(events, history, origins, max_age=self._max_jump_age(),
                          settle=self._six_hours(),
                          fresh=self.use_fresh_jumps if fresh is None else fresh,
                          hold=max(2, self._steps_of(_FRESH_HOLD) if self.freq_s_ <= 3600
                                   else 0))

    def _regimes(self, history: FloatArray, origins: Ends, events: JumpEvents,
                 season: int, *, fresh: bool | None = None
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Each origin's regime, and the regime it has were its recent jump ignored (the
        stacker may send a jump regime's origins to those weights; see ``redirect_``).
        ``fresh``: a move one point old is a jump (default ``use_fresh_jumps``)."""
        six = self._six_hours()
        regime = np.where(still(history, origins, six), Regime.FLAT,
                          np.where(cycled(history, origins, season), Regime.CYCLING,
                                   Regime.QUIET))
        # held exactly still for the last hour (at least two points)
        held = still(history, origins, max(2, self._steps_of("1h") if self.freq_s_ <= 3600
                                           else 2))
        if self.use_quiet_held:
            regime = np.where((regime == Regime.QUIET) & held, Regime.QUIET_HELD, regime)
        alternative = regime
        if self.use_jumps:
            state = self._jump_state(events, history, origins, fresh)
            away: npt.NDArray[np.int64]
            back: npt.NDArray[np.int64]
            if season >= 2:  # a periodic series (``cycle``; 0 for the others)
                away = np.full(len(origins), Regime.PERIODIC_AWAY)
                back = np.full(len(origins), Regime.PERIODIC_BACK)
            else:
                away = np.where(held, Regime.AWAY_HELD, Regime.AWAY)
                back = np.where(held, Regime.BACK_HELD, Regime.BACK)
            regime = np.where(state.direction < 0, regime,
                              np.where(state.direction == TOWARD, back, away))
        idle = history[origins - 1] == 0
        return (np.where(idle, Regime.IDLE, regime).astype(np.int64),
                np.where(idle, Regime.IDLE, alternative).astype(np.int64))

    # -- candidates ---------------------------------------------------------------------------
    def _candidates(self, series_id: str, history: FloatArray, origins: Ends, steps: int,
                    state: _SeriesState | None = None,
                    events: JumpEvents | None = None,
                    fresh: bool | None = None) -> dict[str, FloatArray]:
        """Each candidate's ``(len(origins), steps)`` forecasts (NaN where it has none).

        ``events`` are the jumps of ``history`` when the caller has them already; ``fresh``:
        a move one point old is a jump (default ``use_fresh_jumps``).
        """
        state = state if state is not None else self.state_[series_id]
        k = np.arange(1, steps + 1, dtype=np.float64)
        last = history[origins - 1]
        out: dict[str, FloatArray] = {"naive": np.repeat(last[:, None], steps, axis=1)}
        day = self._steps_of("1d") if self.freq_s_ <= 86400 else 1
        events = events if events is not None else self._events(history)
        jumps = self._jump_state(events, history, origins, fresh)
        # the reversion target: the median since the latest jump (a level the series has
        # left is never the target), at most a day back
        since = np.where(np.isfinite(jumps.age), jumps.age + 1, day).astype(np.int64)
        lo = np.maximum(origins - np.clip(since, 1, day), 0)
        median = np.array([np.median(history[a:b]) for a, b in zip(lo, origins, strict=True)])
        decay = 0.5 ** (k / self._six_hours())
        out["revert"] = median[:, None] + (last - median)[:, None] * decay[None, :]
        six = self._six_hours()
        mean_lo = np.maximum(origins - six, 0)
        csum = np.concatenate([[0.0], np.cumsum(history)])
        recent = (csum[origins] - csum[mean_lo]) / np.maximum(origins - mean_lo, 1)
        out["mean"] = np.repeat(recent[:, None], steps, axis=1)
        if state.has_cycle or not self.use_cycle_gate:
            out["season"] = repeat_last(history, origins, steps, state.season)
            out["profile"] = profile_paths(history, origins, steps, state.season,
                                           max(1, self._steps_of("1h") if self.freq_s_ <= 3600
                                               else 1))
        else:  # no cycle: no cycle candidate (the stacker reads NaN as no move)
            out["season"] = out["profile"] = np.full((len(origins), steps), np.nan)
        if self.use_jumps and state.jumps is not None:
            out["jump"] = jump_paths(history, origins, steps, jumps, state.jumps, self.freq_s_)
        if self.dictionary_ is not None:
            prim, prim_end = primitive_paths(self.dictionary_, history, origins, steps,
                                             state.floor)
            # anchored at the last value: the shape's change from the origin on (anchored at
            # the window's mean, as encoded, it scored 40 % worse on Helios)
            out["primitives"] = last[:, None] + prim - prim_end[:, None]
        if self.use_spectral:
            t = origins[:, None] + np.arange(steps)[None, :]
            wave = sinusoid_sum(state.sinusoids, t.astype(np.float64))
            out["spectral"] = out["revert"] + wave
        if self.rnn_ is not None:
            out["rnn"] = self._rnn_paths(series_id, history, origins, steps)
        if self.gbm_ is not None:
            out["gbm"] = self._gbm_paths(series_id, history, origins, steps)
        return out

    def _rnn_paths(self, series_id: str, history: FloatArray, origins: Ends,
                   steps: int) -> FloatArray:
        assert self.rnn_ is not None
        lb = self.lookback_steps_
        paths = np.full((len(origins), steps), np.nan)
        ok = origins >= lb
        if ok.any():
            contexts = np.stack([history[e - lb:e] for e in origins[ok]])
            end_seconds = self.epoch_seconds(series_id, origins[ok] - 1)
            mean, _ = self.rnn_.predict(contexts, end_seconds, steps=steps)
            paths[ok] = mean
        return paths

    # -- combine ------------------------------------------------------------------------------
    def _block_edges(self, steps: int) -> list[int]:
        edges = sorted({max(1, self._steps_of(b)) for b in _BLOCKS})
        edges = [e for e in edges if e < steps] + [steps]
        return edges

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Ends,
                       steps: int) -> FloatArray:
        if self.stacker_ is not None:
            events = self._events(history)
            state = self.state_[series_id]
            fresh = self._fresh_moves(state)
            paths = self._candidates(series_id, history, ends, steps, events=events,
                                     fresh=fresh)
            last = history[ends - 1]
            deltas = np.stack([paths[n] - last[:, None] for n in self._stack_names(paths)])
            regimes, alternative = self._regimes(history, ends, events, state.cycle,
                                                 fresh=fresh)
            # a model saved before a regime was split has its parent's weights for it
            known = self.stacker_.weights_.shape[1]
            regimes = np.where(regimes < known, regimes, np.asarray(PARENTS)[regimes])
            moved = self.stacker_.combine(deltas, regimes, alternative)
            # a move of less than half the series' step is no move (``use_snap``); a state
            # saved before the quantum existed reads 0: no snapping
            half = 0.5 * getattr(self.state_[series_id], "quantum", 0.0)
            moved = np.where(np.abs(moved) < half, 0.0, moved)
            vetoed = getattr(self, "vetoed_", {}).get(series_id)
            if self.use_series_veto and vetoed is not None and not state.has_cycle:
                moved = np.where(self.stacker_.step_mask(vetoed, steps)[None, :], 0.0, moved)
            if self.use_hold_gate and not state.has_cycle:
                hold = hold_steps(history, ends, steps, edges=self._block_edges(steps),
                                  tail=self.use_hold_tail)
                moved = np.where(np.arange(steps)[None, :] < hold[:, None], 0.0, moved)
            return np.asarray(last[:, None] + moved, dtype=np.float64)
        return self._recent_combination(series_id, history, ends, steps)

    def _fresh_moves(self, state: _SeriesState) -> bool:
        """Whether a fresh move is a jump in this series (``use_fresh_jumps``): only in one
        without a cycle (an autoscaler's steps move at once and come back)."""
        return self.use_fresh_jumps and not state.has_cycle

    def _recent_combination(self, series_id: str, history: FloatArray, ends: Ends,
                            steps: int) -> FloatArray:
        """The "recent" combiner: per-series weights from the candidates' recent errors."""
        window = self.combiner_steps_
        stride = max(1, window // _COMBINER_ORIGINS)
        first = max(int(ends.min()) - window, 1)
        grid = np.arange(first, int(ends.max()), stride, dtype=np.int64)
        origins = np.union1d(grid, ends)
        paths = self._candidates(series_id, history, origins, steps,
                                 fresh=self._fresh_moves(self.state_[series_id]))
        names = list(paths)
        stacked = np.stack([paths[n] for n in names])  # (candidates, origins, steps)
        target = origins[:, None] + np.arange(steps)[None, :]
        actual = history[np.minimum(target, len(history) - 1)]
        errors = np.abs(stacked - actual[None, :, :])  # valid where target < the origin e
        weights = self._weights(errors, origins, ends, self._block_edges(steps))  # (E, C, S)
        here = stacked[:, np.searchsorted(origins, ends), :].transpose(1, 0, 2)  # (E, C, S)
        available = np.isfinite(here)
        w = np.where(available, weights, 0.0)
        total = w.sum(axis=1)
        combined = (w * np.where(available, here, 0.0)).sum(axis=1)
        fallback = here[:, names.index("naive"), :]
        return np.asarray(np.where(total > 0, combined / np.where(total > 0, total, 1.0),
                                   fallback), dtype=np.float64)

    def _weights(self, errors: FloatArray, origins: Ends, ends: Ends,
                 edges: list[int]) -> FloatArray:
        """``(ends, candidates, steps)`` weights of the "recent" combiner at each end
        (:func:`~prism.forecasters.recent.recent_weights`)."""
        return recent_weights(errors, origins, ends, edges, window=self.combiner_steps_,
                              power=self.combiner_power, trim=self.combiner_trim,
                              trim_steps=self.combiner_trim_steps_)
