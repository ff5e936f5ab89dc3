"""The PRISM hybrid: demand primitives, spectral refinement and an RNN, combined per window.

PRISM (DAC '26, arXiv 2603.25378) forecasts GPU demand as a composition of recurring shapes
with an adaptive spectral refinement. This forecaster builds each forecast from candidate
forecasts, each the work of the model that suits one part of the demand, and combines them
with weights that are recomputed at every forecast origin from the candidates' recent errors:

- **level** candidates: the last value (GPU demand moves in steps: jobs hold GPUs for hours),
  and the last value reverting to the median of the last day with a half-life of a few hours
  or of a day (queues drain, bursts decay);
- **season**: the last cycle of the strongest period found in the series (spectral analysis,
  :func:`~prism.primitives.spectral.find_periods`; a day when none is significant);
- **primitives** (``use_primitives``): the lookback window before the origin is encoded as a
  sparse activation vector over a learned dictionary of demand shapes
  (:class:`~prism.primitives.dictionary.PrimitiveDictionary`, learned from the windows of all
  series of the panel), and the atoms' future parts continue it. Two variants: anchored at the
  window's mean (as encoded) and anchored at the last value (the shape's change only);
- **spectral** (``use_spectral``): sinusoids that stand out of the spectrum of what the
  primitives leave (:class:`~prism.primitives.spectral.SpectralRefiner`, adaptive threshold
  over the local noise floor), continued and added to the primitive forecast;
- **rnn** (``use_rnn``): a global GRU over all series (:mod:`prism.forecasters.rnn`), on
  instance-normalised windows, for the nonlinear and burst dynamics the linear parts miss.

**Combiner.** At an origin ``e``, every candidate's forecasts from the origins of the last
``combiner_window`` before ``e`` are scored against what happened up to ``e`` (never after),
per block of horizon steps (up to 1 h, 3 h, 6 h, 12 h, 1 d, 2 d, beyond). The weight of a
candidate in a block is proportional to ``MAE ** -combiner_power``: a candidate that has been
clearly better lately dominates, near-ties share. In the first hours
(``combiner_trim_horizon``) a candidate more than ``combiner_trim`` times worse than the best
drops out, while a day ahead every candidate is averaged. The evidence is thin: on the 16
Helios VCs with cutoffs 6 h apart over the last 42 h, MASE 0.36 trimmed against 0.46 averaged
6 h ahead; on the accuracy benchmark's daily cutoffs 0.791 against 0.806 6 h ahead and 1.290
against 1.277 a day ahead (trimming every block: 1.35). Blocks beyond what the window can score take
the weights of the last block it can. The weights therefore change with every window: after a
burst the decaying candidates win, on a quiet VC the level, on a cyclic one the season.

The switches ``use_primitives``, ``use_spectral`` and ``use_rnn`` drop candidates for
ablations. Everything is learned on the series but its calibration tail (see
:mod:`prism.forecasters.base`), so the combiner and the conformal quantiles are out of sample.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from prism.errors import ConfigError, DataContractError
from prism.forecasters.base import BaseForecaster, FloatArray
from prism.primitives.decompose import learn_dictionary
from prism.primitives.spectral import SpectralRefiner, find_periods
from prism.primitives.structure import robust_trend

if TYPE_CHECKING:
    from prism.forecasters.rnn import SequenceRegressor
    from prism.primitives.dictionary import PrimitiveDictionary

logger = logging.getLogger(__name__)

Ends = npt.NDArray[np.int64]
#: Upper edges of the combiner's blocks of horizon steps, as durations.
_BLOCKS = ("1h", "3h", "6h", "12h", "1d", "2d")
#: Half-lives of the level-reversion candidates, as durations.
_HALF_LIVES = {"revert_fast": "3h", "revert_slow": "1d"}
#: At most this many combiner origins inside ``combiner_window``.
_COMBINER_ORIGINS = 48


@dataclass
class _SeriesState:
    """What the hybrid learned of one series."""

    season: int
    sinusoids: tuple[FloatArray, FloatArray, FloatArray]  # frequencies, amplitudes, phases
    floor: float  # z-normalisation scale floor of its windows


class PrismForecaster(BaseForecaster):
    """The PRISM hybrid forecaster (see the module docstring).

    Args:
        lookback: history each primitive window encodes (a duration or steps).
        horizon: future part of the atoms; longer forecasts continue by re-encoding.
        n_atoms: learned atoms of the dictionary (besides trend and Fourier atoms).
        sparsity: active atoms per window.
        use_primitives: the primitive candidates.
        use_spectral: the spectral refinement candidate.
        use_rnn: the RNN candidate.
        combiner_window: how far back the combiner scores the candidates.
        combiner_power: weights are ``MAE ** -combiner_power``; larger trusts the best more.
        combiner_trim: in the blocks up to ``combiner_trim_horizon``, a candidate whose MAE is
            more than ``combiner_trim`` times the best's gets no weight (``inf``: no trimming).
        combiner_trim_horizon: how far the trimming reaches (a duration or steps).
        rnn_cell: ``"gru"`` or ``"lstm"``.
        rnn_hidden_size: hidden units of the RNN.
        rnn_epochs: at most this many training epochs (early stopping may end sooner).
        device: where the RNN trains: ``"cpu"`` (default), ``"cuda"`` or ``"auto"``.
        random_state: seed of the dictionary, the surrogates and the RNN.
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
        use_spectral: bool = True,
        use_rnn: bool = True,
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
        self.combiner_window = combiner_window
        self.combiner_power = combiner_power
        self.combiner_trim = combiner_trim
        self.combiner_trim_horizon = combiner_trim_horizon
        self.rnn_cell = rnn_cell
        self.rnn_hidden_size = rnn_hidden_size
        self.rnn_epochs = rnn_epochs
        self.device = device
        self.random_state = random_state

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Cheap settings for the conformance suite (the RNN tiny)."""
        small = {"lookback": "2h", "horizon": "2h", "n_atoms": 2, "combiner_window": "6h"}
        return [
            {**small, "use_rnn": False},
            {**small, "use_primitives": False, "use_rnn": False},
            {**small, "rnn_hidden_size": 4, "rnn_epochs": 2},
        ]

    # -- fit ----------------------------------------------------------------------------------
    def _fit(self, values: dict[str, FloatArray]) -> None:
        self._fit_shared(values)
        self._fit_local(values)

    def _fit_shared(self, values: dict[str, FloatArray]) -> None:
        """The dictionary and the RNN, learned from all series (or a sample, in batches)."""
        if self.combiner_power <= 0:
            raise ConfigError(f"combiner_power={self.combiner_power!r} must be positive")
        if not self.combiner_trim >= 1:
            raise ConfigError(f"combiner_trim={self.combiner_trim!r} must be at least 1 (the "
                              "best candidate always keeps its weight); inf turns it off")
        self.lookback_steps_ = self._steps_of(self.lookback)
        self.horizon_steps_ = self._steps_of(self.horizon)
        self.combiner_steps_ = self._steps_of(self.combiner_window)
        self.combiner_trim_steps_ = self._steps_of(self.combiner_trim_horizon)
        self.dictionary_: PrimitiveDictionary | None = None
        if self.use_primitives:
            self.dictionary_ = self._learn_dictionary(values)
        self.rnn_: SequenceRegressor | None = None
        if self.use_rnn:
            self.rnn_ = self._learn_rnn(values)

    def _fit_local(self, values: dict[str, FloatArray]) -> None:
        """Each series' season, sinusoids and scale floor."""
        self.state_ = {sid: self._learn_series(sid, v) for sid, v in values.items()}

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
        # the season candidate repeats the period whose last cycle has predicted the next one
        # best, among the spectral periods and a day (a period's harmonic can outscore it in
        # the spectrum of a square wave)
        choices = {int(round(p.steps)) for p in periods} | {day}
        choices = {c for c in choices if 2 <= c < len(y)} or {min(day, max(1, len(y) - 1))}
        season = min(sorted(choices), key=lambda c: float(np.mean(np.abs(y[c:] - y[:-c]))))
        floor = 0.05 * float(np.std(y))
        empty = (np.zeros(0), np.zeros(0), np.zeros(0))
        sinusoids = empty
        if self.use_spectral and len(y) >= 16:
            rest = y - robust_trend(y, window=max(3, min(len(y) // 3, self._steps_of("1d"))))
            refiner = SpectralRefiner(random_state=self.random_state).fit(rest)
            sinusoids = (refiner.frequencies_, refiner.amplitudes_, refiner.phases_)
        return _SeriesState(season=season, sinusoids=sinusoids, floor=floor)

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

    # -- candidates ---------------------------------------------------------------------------
    def _candidates(self, series_id: str, history: FloatArray, origins: Ends,
                    steps: int) -> dict[str, FloatArray]:
        """Each candidate's ``(len(origins), steps)`` forecasts (NaN where it has none)."""
        state = self.state_[series_id]
        k = np.arange(1, steps + 1, dtype=np.float64)
        last = history[origins - 1]
        out: dict[str, FloatArray] = {"naive": np.repeat(last[:, None], steps, axis=1)}
        day = self._steps_of("1d")
        lo = np.maximum(origins - day, 0)
        median = np.array([np.median(history[a:b]) for a, b in zip(lo, origins, strict=True)])
        for name, half_life in _HALF_LIVES.items():
            decay = 0.5 ** (k / self._steps_of(half_life))
            out[name] = median[:, None] + (last - median)[:, None] * decay[None, :]
        # bursts decay to the base load: the median of the last week
        week_lo = np.maximum(origins - 7 * day, 0)
        base = np.array([np.median(history[a:b]) for a, b in zip(week_lo, origins,
                                                                    strict=True)])
        decay = 0.5 ** (k / self._steps_of("6h"))
        out["burst_decay"] = base[:, None] + (last - base)[:, None] * decay[None, :]
        out["season"] = _repeat_last(history, origins, steps, state.season)
        prim = None
        if self.dictionary_ is not None:
            prim, prim_end = self._primitive_paths(history, origins, steps, state.floor)
            # anchored at the last value: the shape's change from the origin on (anchored at
            # the window's mean, as encoded, it scored 40 % worse on Helios)
            out["primitives"] = last[:, None] + prim - prim_end[:, None]
        if self.use_spectral and len(state.sinusoids[0]):
            t = origins[:, None] + np.arange(steps)[None, :]
            wave = _sinusoids(state.sinusoids, t.astype(np.float64))
            out["spectral"] = out["revert_slow"] + wave
        if self.rnn_ is not None:
            out["rnn"] = self._rnn_paths(series_id, history, origins, steps)
        return out

    def _primitive_paths(self, history: FloatArray, origins: Ends, steps: int,
                         floor: float) -> tuple[FloatArray, FloatArray]:
        """Atoms' continuation of each lookback window, and its value at the origin."""
        d = self.dictionary_
        assert d is not None
        lb = d.lookback
        paths = np.full((len(origins), steps), np.nan)
        at_end = np.full(len(origins), np.nan)
        ok = origins >= lb
        if not ok.any():
            return paths, at_end
        windows = np.stack([history[e - lb:e] for e in origins[ok]])
        codes = d.encode(windows, part="lookback", min_scale=floor)
        at_end[ok] = d.reconstruct(codes, part="lookback")[:, -1]
        chunks = []
        done = 0
        while done < steps:  # beyond the atoms' horizon: encode the path so far again
            future = d.reconstruct(codes, part="horizon") if d.horizon else (
                np.repeat(windows[:, -1:], 1, axis=1))
            chunks.append(future)
            done += future.shape[1]
            if done < steps:
                windows = np.concatenate([windows, future], axis=1)[:, -lb:]
                codes = d.encode(windows, part="lookback", min_scale=floor)
        paths[ok] = np.concatenate(chunks, axis=1)[:, :steps]
        return paths, at_end

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
        window = self.combiner_steps_
        stride = max(1, window // _COMBINER_ORIGINS)
        first = max(int(ends.min()) - window, 1)
        grid = np.arange(first, int(ends.max()), stride, dtype=np.int64)
        origins = np.union1d(grid, ends)
        paths = self._candidates(series_id, history, origins, steps)
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
        """``(ends, candidates, steps)`` combination weights at each origin of ``ends``.

        ``errors`` is ``(candidates, origins, steps)``: the absolute error of each candidate's
        forecast from each origin at each step (NaN where a candidate has none). At an end
        ``e`` the forecasts from the origins in ``[e - combiner_window, e)`` are scored on the
        steps that happened before ``e`` (the first ``e - o`` steps of origin ``o``): one
        block's sums come from cumulative sums over the steps, for every end at once.
        """
        n_cand, n_orig, steps = errors.shape
        gaps = np.isnan(errors)
        sums = np.zeros((n_cand, n_orig, steps + 1))
        np.cumsum(np.where(gaps, 0.0, errors), axis=2, out=sums[:, :, 1:])
        holes = np.zeros((n_cand, n_orig, steps + 1), dtype=np.int64)
        np.cumsum(gaps, axis=2, out=holes[:, :, 1:])
        lag = ends[:, None] - origins[None, :]  # (E, O)
        inside = (lag > 0) & (lag <= self.combiner_steps_)
        seen = np.where(inside, np.minimum(lag, steps), 0)  # steps of o scored at e
        o_index = np.arange(n_orig)[None, :]
        weights = np.full((len(ends), n_cand, steps), 1.0 / n_cand)
        previous = np.full((len(ends), n_cand), np.nan)  # the last block's weights, per end
        lo = 0
        for hi in edges:
            stop = np.clip(seen, lo, hi)  # (E, O): steps lo..stop-1 of o are scored
            count = (stop - lo).sum(axis=1)  # (E,)
            total = (sums[:, o_index, stop] - sums[:, o_index, lo]).sum(axis=2)
            missing = (holes[:, o_index, stop] - holes[:, o_index, lo]).sum(axis=2)
            with np.errstate(invalid="ignore", divide="ignore"):
                mae = np.where(missing > 0, np.nan, total / np.maximum(count, 1)).T  # (E, C)
            finite = np.isfinite(mae) & (count > 0)[:, None]
            scored = finite.any(axis=1)
            best = np.min(np.where(finite, mae, np.inf), axis=1, keepdims=True)
            if hi <= self.combiner_trim_steps_ and np.isfinite(self.combiner_trim):
                finite &= np.where(finite, mae, np.inf) <= self.combiner_trim * best
            positive = best > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(finite, mae, 1.0) / np.where(positive, best, 1.0)
                w = np.where(positive, np.where(finite, ratio ** -self.combiner_power, 0.0),
                             (finite & (np.where(finite, mae, 1.0) == 0)).astype(np.float64))
            w = w / np.where(scored, w.sum(axis=1), 1.0)[:, None]
            previous = np.where(scored[:, None], w, previous)
            known = np.isfinite(previous[:, 0])
            weights[known, :, lo:hi] = previous[known][:, :, None]
            lo = hi
        return weights


def _repeat_last(history: FloatArray, origins: Ends, steps: int, season: int) -> FloatArray:
    out = np.empty((len(origins), steps))
    for i, e in enumerate(origins):
        out[i] = np.resize(history[e - season:e], steps) if e >= season else history[e - 1]
    return out


def _sinusoids(terms: tuple[FloatArray, FloatArray, FloatArray], t: FloatArray) -> FloatArray:
    freqs, amps, phases = terms
    out = np.zeros(t.shape)
    for f, a, p in zip(freqs, amps, phases, strict=True):
        out += a * np.cos(2.0 * np.pi * f * t + p)
    return out

