"""Recurrent forecasters on PyTorch (the only module of PRISM that imports torch).

Two layers:

- :class:`SequenceRegressor`, a torch-hiding component on plain arrays (no pandas): a global
  GRU or LSTM over windows pooled from many series, each window scaled by its own context
  (instance normalisation), a quantile head trained with the pinball loss, early stopping on
  a time-ordered validation split. The PRISM hybrid uses it on the residual of its other
  parts; ``lstm`` and ``gru`` use it on the series themselves.
- :class:`LstmForecaster` (``lstm``) and :class:`GruForecaster` (``gru``), the forecaster
  protocol of :mod:`prism.forecasters.base` on top of it, with native quantiles.

Design choices, for speed on a 2-core CPU (a 31-day 10-minute series trains in about half a
second of one core with the defaults; torch itself is imported only on first fit or load):

- The lookback is averaged into coarse blocks (``block`` steps each, an hour at 10 minutes):
  the recurrence runs over 24 blocks instead of 144 steps. Each block gives two inputs, its
  mean and its last value (so the last observation reaches the network exactly), plus the
  time of day and weekday as sines and cosines at the block's end when timestamps are given.
- A linear skip from the block inputs to the outputs sits beside the recurrent head: the
  network learns seasonal copies and levels linearly and spends its hidden state on the
  nonlinear part (bursts, regime changes).
- The whole horizon comes out at once (direct multi-step); longer horizons roll forward on
  the median.
- The point forecast ("mean") is the median output: the pinball loss at 0.5 is half the
  absolute error, so it is the forecast that minimises MAE (what MASE scores), and a separate
  head trained with squared error would cost time and chase rare bursts.
- Quantiles never cross by construction: the median is free, the other levels are the
  median plus (minus) cumulative softplus gaps.
- Each epoch draws ``max_windows`` fresh training windows from the pool of all windows, so
  the cost per epoch does not grow with the data while every window can be seen.

Determinism: the weights are initialised under ``torch.manual_seed(random_state)`` inside a
forked RNG (the caller's global torch RNG is left as it was), windows are drawn by a numpy
generator of the same seed, and deterministic algorithms are on while fitting (on CUDA,
``CUBLAS_WORKSPACE_CONFIG`` is set to ``:4096:8`` unless the caller set it). The torch
thread count (``num_threads``, 1 by default: a small recurrence gains nothing from more) and
the deterministic flag are set for the duration of ``fit``/``predict`` and restored after;
they are process-wide, so fit recurrent models from one thread at a time (processes are fine).

Pickling keeps the weights as numpy arrays and rebuilds the network on first use, so a
loaded model forecasts bit for bit as the saved one did (on the same device).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.forecasters.base import BaseForecaster, FloatArray, Paths
from prism.schema import parse_duration

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

Ends = npt.NDArray[np.int64]

#: Quantile levels the recurrent forecasters output (their ``native_levels``).
RNN_LEVELS = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
_DAY_S = 86_400.0
_WEEK_S = 7 * _DAY_S
#: A context's scale is at least this share of its mean absolute value ...
_REL_FLOOR = 0.05
#: ... and at least this share of the standard deviation of all training values.
_GLOBAL_FLOOR = 0.01


@contextmanager
def _torch_settings(num_threads: int | None, deterministic: bool) -> Iterator[None]:
    """Set torch's thread count and deterministic mode for a block; restore them after."""
    import torch

    threads = torch.get_num_threads()
    det = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn_det = torch.backends.cudnn.deterministic
    try:
        if num_threads is not None and num_threads != threads:
            torch.set_num_threads(num_threads)
        if deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.backends.cudnn.deterministic = True
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        torch.backends.cudnn.deterministic = cudnn_det


def _resolve_device(device: str) -> str:
    """``"auto"`` is ``cuda`` when a CUDA device is present, else ``cpu``.

    Raises:
        ConfigError: for an unknown device, or ``cuda`` on a machine without one.
    """
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.split(":")[0] not in ("cpu", "cuda"):
        raise ConfigError(f"device {device!r} is not one of 'auto', 'cpu', 'cuda', 'cuda:N'")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device {device!r} was asked for but torch sees no CUDA device; pass "
                "device='cpu' or 'auto'"
            )
        # cuBLAS is only deterministic with a fixed workspace, read when CUDA first starts
        # in the process (a value the caller set is kept)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return device


@functools.cache
def _net_class() -> type[torch.nn.Module]:
    """The network class, built on first use so that importing PRISM does not import torch
    (1-2 s) unless a recurrent model is fitted or loaded."""
    import torch
    from torch import nn

    class _Net(nn.Module):
        """Recurrence over the blocks + a linear skip -> monotone quantiles (m, H, levels)."""

        def __init__(self, cell: str, n_features: int, n_blocks: int, hidden_size: int,
                     num_layers: int, horizon: int, n_levels: int, mid: int) -> None:
            super().__init__()
            rnn_cls = nn.LSTM if cell == "lstm" else nn.GRU
            self.rnn = rnn_cls(n_features, hidden_size, num_layers=num_layers,
                               batch_first=True)
            self.head = nn.Linear(hidden_size, horizon * n_levels)
            self.skip = nn.Linear(n_blocks * 2, horizon * n_levels)  # block means, last values
            self.horizon = horizon
            self.n_levels = n_levels
            self.mid = mid

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out, _ = self.rnn(x)
            raw = self.head(out[:, -1]) + self.skip(x[:, :, :2].reshape(len(x), -1))
            raw = raw.view(len(x), self.horizon, self.n_levels)
            median = raw[:, :, self.mid:self.mid + 1]
            gaps = nn.functional.softplus(raw)
            up = median + torch.cumsum(gaps[:, :, self.mid + 1:], dim=2)
            below = torch.flip(torch.cumsum(torch.flip(gaps[:, :, :self.mid], [2]), dim=2), [2])
            return torch.cat([median - below, median, up], dim=2)

    return _Net


def _pinball(pred: torch.Tensor, target: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Mean pinball loss of ``pred (m, H, L)`` at ``levels (L,)`` against ``target (m, H)``."""
    import torch

    diff = target[:, :, None] - pred
    return torch.mean(torch.maximum(levels * diff, (levels - 1.0) * diff))


class SequenceRegressor:
    """A global recurrent quantile regressor from a lookback window to the next horizon.

    Args:
        cell: ``"gru"`` or ``"lstm"``.
        hidden_size: units of the recurrent state.
        num_layers: stacked recurrent layers.
        lookback: context length in steps.
        horizon: steps forecast at once (longer forecasts roll forward on the median).
        block: steps averaged into one input step of the recurrence (the lookback is padded
            on the left to a whole number of blocks).
        levels: quantile levels of the head, sorted, strictly between 0 and 1, with 0.5.
        calendar: add time-of-day and weekday sines/cosines as inputs when ``seconds`` are
            given to ``fit``.
        epochs: at most this many epochs of ``max_windows`` windows each.
        batch_size: windows per optimiser step.
        learning_rate: Adam's step size.
        patience: stop after this many epochs without a better validation loss (the best
            weights are kept).
        max_windows: training windows drawn per epoch (validation: at most half as many).
        validation_share: the last share of each series whose windows validate.
        device: ``"auto"`` (cuda when present, resolved in ``fit``), ``"cpu"`` or ``"cuda"``.
        num_threads: torch threads while fitting and predicting (restored after); ``None``
            leaves torch's setting alone.
        random_state: the seed; ``None`` means 0 (fits are always reproducible).

    Attributes (after ``fit``):
        device_: the device resolved from ``device``.
        freq_s_: the step in seconds.
        calendar_: whether calendar inputs are used.
        floor_: the smallest scale of a context (see :meth:`_normalise`).
        state_: the network's weights as numpy arrays.
        history_: per epoch, ``(train_loss, validation_loss)``.
        best_epoch_: the epoch whose weights were kept (1-based).
        fit_seconds_: wall time of ``fit``.
    """

    def __init__(
        self,
        *,
        cell: str = "gru",
        hidden_size: int = 32,
        num_layers: int = 1,
        lookback: int = 144,
        horizon: int = 144,
        block: int = 6,
        levels: Sequence[float] = RNN_LEVELS,
        calendar: bool = True,
        epochs: int = 15,
        batch_size: int = 128,
        learning_rate: float = 5e-3,
        patience: int = 3,
        max_windows: int = 512,
        validation_share: float = 0.2,
        device: str = "auto",
        num_threads: int | None = 1,
        random_state: int | None = 0,
    ) -> None:
        self.cell = cell
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.lookback = lookback
        self.horizon = horizon
        self.block = block
        self.levels = levels
        self.calendar = calendar
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.patience = patience
        self.max_windows = max_windows
        self.validation_share = validation_share
        self.device = device
        self.num_threads = num_threads
        self.random_state = random_state

    # -- pickling: weights as numpy, the network rebuilt on first use -------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_net", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- checks -------------------------------------------------------------------------------
    def _check_params(self) -> None:
        if self.cell not in ("gru", "lstm"):
            raise ConfigError(f"cell {self.cell!r} is not 'gru' or 'lstm'")
        for name in ("hidden_size", "num_layers", "lookback", "horizon", "block", "epochs",
                     "batch_size", "max_windows"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive whole number; got {value!r}")
        if self.patience < 0:
            raise ConfigError(f"patience must be 0 or more; got {self.patience!r}")
        if not 0 < self.learning_rate:
            raise ConfigError(f"learning_rate must be positive; got {self.learning_rate!r}")
        if not 0 <= self.validation_share < 1:
            raise ConfigError(
                f"validation_share must be in [0, 1); got {self.validation_share!r}")
        levels = [float(q) for q in self.levels]
        if (levels != sorted(set(levels)) or not all(0 < q < 1 for q in levels)
                or 0.5 not in levels):
            raise ConfigError(
                f"levels must be sorted, unique, strictly between 0 and 1 and include 0.5; "
                f"got {list(self.levels)}"
            )

    def _check_fitted(self) -> None:
        if not hasattr(self, "state_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit(series) first")

    # -- features -----------------------------------------------------------------------------
    @property
    def _n_blocks(self) -> int:
        return math.ceil(self.lookback / self.block)

    def _normalise(self, contexts: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Each context's mean and scale: its std, floored at 5 % of its mean absolute value
        and at 1 % of the training data's std (a flat context must not blow up)."""
        mu = contexts.mean(axis=1)
        scale = np.maximum(contexts.std(axis=1), _REL_FLOOR * np.abs(contexts).mean(axis=1))
        return mu, np.maximum(scale, self.floor_)

    def _features(self, contexts: FloatArray, mu: FloatArray, scale: FloatArray,
                  end_seconds: FloatArray | None) -> npt.NDArray[np.float32]:
        """Inputs ``(m, n_blocks, 2 or 6)`` from contexts ``(m, lookback)``."""
        m = len(contexts)
        nb, b = self._n_blocks, self.block
        pad = nb * b - self.lookback
        if pad:
            contexts = np.concatenate([np.repeat(contexts[:, :1], pad, axis=1), contexts], 1)
        z = (contexts - mu[:, None]) / scale[:, None]
        blocks = z.reshape(m, nb, b)
        parts = [blocks.mean(axis=2), blocks[:, :, -1]]
        if self.calendar_:
            assert end_seconds is not None
            t = end_seconds[:, None] - (nb - 1 - np.arange(nb))[None, :] * b * self.freq_s_
            day = 2 * np.pi * (t % _DAY_S) / _DAY_S
            week = 2 * np.pi * (t % _WEEK_S) / _WEEK_S
            parts += [np.sin(day), np.cos(day), np.sin(week), np.cos(week)]
        return np.stack(parts, axis=2).astype(np.float32)

    # -- fit ----------------------------------------------------------------------------------
    def fit(self, series: Sequence[FloatArray], seconds: Sequence[npt.ArrayLike] | None = None,
            *, freq_s: int) -> SequenceRegressor:
        """Learn one network from windows pooled over all ``series``.

        Args:
            series: the series' values (each regular, finite).
            seconds: Unix seconds of each point of each series (for calendar inputs), or
                ``None``.
            freq_s: the step in seconds.

        Returns:
            self.

        Raises:
            ConfigError: for bad hyperparameters.
            DataContractError: for non-finite values, mismatched ``seconds``, or series too
                short to give one window of ``horizon`` steps.
        """
        self._check_params()
        started = time.perf_counter()
        for name in [n for n in vars(self) if n.endswith("_") and not n.startswith("_")]:
            delattr(self, name)  # refitting replaces all learned state
        self.__dict__.pop("_net", None)
        arrays = [np.asarray(s, dtype=np.float64) for s in series]
        if not arrays:
            raise DataContractError("fit needs at least one series")
        for i, y in enumerate(arrays):
            if y.ndim != 1 or not np.isfinite(y).all():
                raise DataContractError(
                    f"series {i} must be a 1-d array of finite values; fill its gaps first")
        if seconds is not None and [len(np.asarray(s)) for s in seconds] != [len(y)
                                                                           for y in arrays]:
            raise DataContractError("seconds must give one timestamp per point of each series")
        self.freq_s_ = int(freq_s)
        self.calendar_ = bool(self.calendar and seconds is not None)
        self.device_ = _resolve_device(self.device)
        seed = 0 if self.random_state is None else int(self.random_state)
        rng = np.random.default_rng(seed)

        flat = np.concatenate(arrays)
        self.floor_ = max(float(_GLOBAL_FLOOR * flat.std()), 1e-8)
        flat_s = (np.concatenate([np.asarray(s, dtype=np.float64) for s in seconds])
                  if seconds is not None else np.zeros(len(flat)))
        train, valid = self._window_ends(arrays)
        if len(train) == 0:
            raise DataContractError(
                f"no series is long enough for one training window of {self.horizon} steps "
                f"(+1 of context); pass a shorter horizon or more history (longest series: "
                f"{max(len(y) for y in arrays)} points)"
            )
        if len(valid) > self.max_windows // 2:
            valid = valid[np.sort(rng.choice(len(valid), self.max_windows // 2, replace=False))]
        with _torch_settings(self.num_threads, deterministic=True):
            self._train(flat, flat_s, train, valid, rng, seed)
        self.fit_seconds_ = time.perf_counter() - started
        logger.debug("%s fitted in %.3f s (%d train / %d validation windows, best epoch %d)",
                     self.cell, self.fit_seconds_, len(train), len(valid), self.best_epoch_)
        return self

    def _window_ends(self, arrays: list[FloatArray]) -> tuple[Ends, Ends]:
        """Window ends as flat indices: ``(train, validation)``, each ``(k, 3)`` rows of
        ``(series start, end, series stop)`` in the concatenated array."""
        train: list[Ends] = []
        valid: list[Ends] = []
        start = 0
        for y in arrays:
            n = len(y)
            last = n - self.horizon  # the last end with a whole target
            if last >= 1:
                # full contexts where the series allows, else half padded on the left
                ends = np.arange(max(1, min(self.lookback, last // 2)), last + 1)
                cut = n - int(round(self.validation_share * n))
                t_last = min(last, cut - self.horizon)  # training targets end before the cut
                if t_last >= ends[0]:
                    parts = [(train, ends[ends <= t_last]), (valid, ends[ends >= cut])]
                else:  # too short to split: train on all of it, no validation
                    parts = [(train, ends)]
                for out, e in parts:
                    out.append(np.stack([np.full(len(e), start), start + e,
                                         np.full(len(e), start + n)], axis=1))
            start += n
        empty = np.zeros((0, 3), dtype=np.int64)
        return (np.concatenate(train or [empty]).astype(np.int64),
                np.concatenate(valid or [empty]).astype(np.int64))

    def _batch(self, flat: FloatArray, flat_s: FloatArray,
               rows: Ends) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Inputs and normalised targets of the windows ``rows``."""
        starts, ends = rows[:, 0], rows[:, 1]
        idx = ends[:, None] + np.arange(-self.lookback, 0)[None, :]
        contexts = flat[np.maximum(idx, starts[:, None])]  # left padding with the first value
        targets = flat[ends[:, None] + np.arange(self.horizon)[None, :]]
        mu, scale = self._normalise(contexts)
        x = self._features(contexts, mu, scale, flat_s[ends - 1])
        y = ((targets - mu[:, None]) / scale[:, None]).astype(np.float32)
        return x, y

    def _new_net(self) -> torch.nn.Module:
        levels = [float(q) for q in self.levels]
        return _net_class()(self.cell, 6 if self.calendar_ else 2, self._n_blocks, self.hidden_size,
                    self.num_layers, self.horizon, len(levels), levels.index(0.5))

    def _train(self, flat: FloatArray, flat_s: FloatArray, train: Ends, valid: Ends,
               rng: np.random.Generator, seed: int) -> None:
        import torch
        from torch import nn

        device = torch.device(self.device_)
        forked = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=forked):
            torch.manual_seed(seed)
            net = self._new_net().to(device)
        levels = torch.tensor([float(q) for q in self.levels], dtype=torch.float32,
                              device=device)
        optimiser = torch.optim.Adam(net.parameters(), lr=self.learning_rate)
        if len(valid):
            vx, vy = (torch.from_numpy(a).to(device) for a in self._batch(flat, flat_s, valid))
        best = math.inf
        best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        self.best_epoch_ = 0
        self.history_: list[tuple[float, float]] = []
        stale = 0
        per_epoch = min(self.max_windows, len(train))
        for epoch in range(1, self.epochs + 1):
            pick = rng.choice(len(train), per_epoch, replace=False)
            x_all, y_all = self._batch(flat, flat_s, train[pick])
            net.train()
            total = 0.0
            for lo in range(0, per_epoch, self.batch_size):
                x = torch.from_numpy(x_all[lo:lo + self.batch_size]).to(device)
                y = torch.from_numpy(y_all[lo:lo + self.batch_size]).to(device)
                optimiser.zero_grad()
                loss = _pinball(net(x), y, levels)
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimiser.step()
                total += float(loss.detach()) * len(x)
            train_loss = total / per_epoch
            if len(valid):
                net.eval()
                with torch.no_grad():
                    val_loss = float(_pinball(net(vx), vy, levels))
            else:
                val_loss = train_loss
            self.history_.append((train_loss, val_loss))
            if val_loss < best - 1e-6:
                best, stale, self.best_epoch_ = val_loss, 0, epoch
                best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
            else:
                stale += 1
                if stale > self.patience:
                    break
        net.load_state_dict(best_state)
        net.eval()
        self.state_ = {k: v.detach().cpu().numpy().copy() for k, v in best_state.items()}
        self._net = net

    # -- predict ------------------------------------------------------------------------------
    def _network(self) -> tuple[torch.nn.Module, torch.device]:
        import torch

        device = torch.device(self.device_ if not self.device_.startswith("cuda")
                              or torch.cuda.is_available() else "cpu")
        net = self.__dict__.get("_net")
        if net is None:
            net = self._new_net()
            net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in self.state_.items()})
            net.to(device).eval()
            self._net = net
        return net, device

    def predict(
        self, contexts: npt.ArrayLike, context_end_seconds: npt.ArrayLike | None = None, *,
        steps: int | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """Forecast ``steps`` (default ``horizon``) steps after each context.

        Args:
            contexts: ``(m, width)`` the values before each origin; a wider context uses its
                last ``lookback`` values, a narrower one is padded with its first value.
            context_end_seconds: ``(m,)`` Unix seconds of each context's last point (needed
                when fitted with calendar inputs).
            steps: steps to forecast; beyond ``horizon`` the forecast rolls forward on the
                median.

        Returns:
            ``(mean (m, steps), quantiles (m, steps, n_levels))``; the mean is the median.

        Raises:
            NotFittedError: before ``fit``.
            ConfigError: without ``context_end_seconds`` when the fit used calendar inputs.
            DataContractError: for contexts that are not a finite 2-d array.
        """
        import torch

        self._check_fitted()
        ctx = np.asarray(contexts, dtype=np.float64)
        if ctx.ndim != 2 or ctx.shape[1] < 1 or not np.isfinite(ctx).all():
            raise DataContractError(
                f"contexts must be a finite (m, width) array with width >= 1; got shape "
                f"{ctx.shape}")
        if self.calendar_ and context_end_seconds is None:
            raise ConfigError(
                "this regressor was fitted with calendar inputs: pass context_end_seconds")
        end_s = (np.asarray(context_end_seconds, dtype=np.float64).reshape(len(ctx))
                 if self.calendar_ and context_end_seconds is not None else None)
        steps = self.horizon if steps is None else int(steps)
        m, n_levels = len(ctx), len(self.levels)
        if m == 0:
            return np.zeros((0, steps)), np.zeros((0, steps, n_levels))
        if ctx.shape[1] < self.lookback:
            ctx = np.concatenate(
                [np.repeat(ctx[:, :1], self.lookback - ctx.shape[1], axis=1), ctx], axis=1)
        ctx = ctx[:, -self.lookback:]
        out = np.empty((m, steps, n_levels))
        mid = [float(q) for q in self.levels].index(0.5)
        done = 0

        with _torch_settings(self.num_threads, deterministic=True):
            net, device = self._network()
            while done < steps:
                mu, scale = self._normalise(ctx)
                x = torch.from_numpy(self._features(ctx, mu, scale, end_s)).to(device)
                with torch.no_grad():
                    z = net(x).cpu().numpy().astype(np.float64)
                q = z * scale[:, None, None] + mu[:, None, None]
                take = min(self.horizon, steps - done)
                out[:, done:done + take] = q[:, :take]
                done += take
                if done < steps:  # roll forward on the median
                    ctx = np.concatenate([ctx, q[:, :, mid]], axis=1)[:, -self.lookback:]
                    if end_s is not None:
                        end_s = end_s + self.horizon * self.freq_s_
        return out[:, :, mid].copy(), out


# -- forecasters ------------------------------------------------------------------------------
class _RnnForecaster(BaseForecaster):
    """A global recurrent forecaster (see :class:`SequenceRegressor`); base of lstm/gru."""

    cell: ClassVar[str] = "gru"
    global_model = True
    native_levels = RNN_LEVELS

    def __init__(
        self,
        *,
        lookback: str | int = "1d",
        horizon: str | int = "1d",
        resolution: str | int = "1h",
        hidden_size: int = 32,
        num_layers: int = 1,
        calendar: bool = True,
        epochs: int = 15,
        batch_size: int = 128,
        learning_rate: float = 5e-3,
        patience: int = 3,
        max_windows: int = 512,
        device: str = "cpu",
        random_state: int | None = 0,
    ) -> None:
        self.lookback = lookback
        self.horizon = horizon
        self.resolution = resolution
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.calendar = calendar
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.patience = patience
        self.max_windows = max_windows
        self.device = device
        self.random_state = random_state

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Tiny settings for the conformance suite (CPU, well under a second)."""
        return [
            {"lookback": "6h", "horizon": "2h", "hidden_size": 8, "epochs": 3,
             "max_windows": 64, "batch_size": 32},
            {"lookback": 24, "horizon": 6, "resolution": 3, "hidden_size": 4, "epochs": 2,
             "max_windows": 32, "calendar": False, "random_state": 3},
        ]

    def _block_steps(self) -> int:
        """Steps per input block: the resolution in steps, at least 1."""
        if isinstance(self.resolution, int | np.integer) or str(self.resolution).isdigit():
            return max(1, int(self.resolution))
        seconds = parse_duration(str(self.resolution)).total_seconds()
        return max(1, int(seconds // self.freq_s_))

    def _fit(self, values: dict[str, FloatArray]) -> None:
        sids = sorted(values)
        self.regressor_ = SequenceRegressor(
            cell=self.cell, hidden_size=self.hidden_size, num_layers=self.num_layers,
            lookback=self._steps_of(str(self.lookback)),
            horizon=self._steps_of(str(self.horizon)), block=self._block_steps(),
            levels=self.native_levels, calendar=self.calendar, epochs=self.epochs,
            batch_size=self.batch_size, learning_rate=self.learning_rate,
            patience=self.patience, max_windows=self.max_windows, device=self.device,
            random_state=self.random_state,
        ).fit([values[s] for s in sids],
              [self.epoch_seconds(s, np.arange(len(values[s]))) for s in sids],
              freq_s=self.freq_s_)

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Ends,
                       steps: int) -> Paths:
        lookback = self.regressor_.lookback
        idx = ends[:, None] + np.arange(-lookback, 0)[None, :]
        contexts = history[np.maximum(idx, 0)]  # left padding with the first value
        mean, quantiles = self.regressor_.predict(
            contexts, self.epoch_seconds(series_id, ends - 1), steps=steps)
        return Paths(mean, quantiles)


class LstmForecaster(_RnnForecaster):
    """A global LSTM with a pinball-loss quantile head (see :class:`SequenceRegressor`).

    Args:
        lookback: context per forecast, a duration (``1d``) or steps.
        horizon: steps forecast at once, a duration or steps; longer forecasts roll forward
            on the median.
        resolution: the lookback is averaged into blocks of this duration (or steps) before
            the recurrence.
        hidden_size: units of the recurrent state.
        num_layers: stacked recurrent layers.
        calendar: time-of-day and weekday inputs.
        epochs: at most this many epochs (early stopping on the last 20 % of each series).
        batch_size: windows per optimiser step.
        learning_rate: Adam's step size.
        patience: epochs without a better validation loss before stopping.
        max_windows: training windows drawn per epoch.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (resolved in ``fit``).
        random_state: the seed (``None`` means 0).
    """

    alias = "lstm"
    cell: ClassVar[str] = "lstm"


class GruForecaster(_RnnForecaster):
    """A global GRU with a pinball-loss quantile head (see :class:`SequenceRegressor`).

    Args:
        lookback: context per forecast, a duration (``1d``) or steps.
        horizon: steps forecast at once, a duration or steps; longer forecasts roll forward
            on the median.
        resolution: the lookback is averaged into blocks of this duration (or steps) before
            the recurrence.
        hidden_size: units of the recurrent state.
        num_layers: stacked recurrent layers.
        calendar: time-of-day and weekday inputs.
        epochs: at most this many epochs (early stopping on the last 20 % of each series).
        batch_size: windows per optimiser step.
        learning_rate: Adam's step size.
        patience: epochs without a better validation loss before stopping.
        max_windows: training windows drawn per epoch.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (resolved in ``fit``).
        random_state: the seed (``None`` means 0).
    """

    alias = "gru"
    cell: ClassVar[str] = "gru"
