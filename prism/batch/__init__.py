"""Batch forecasts and backtests over thousands of series, on local processes or a Ray cluster.

:func:`run_batch` fans the work of a run out over workers, a chunk of series per task, and
streams each finished chunk into the store (``batch_forecasts`` and ``batch_series``, keyed by
the run id; the run itself is a row of ``batch_runs``), so the memory of the calling process
stays flat however many series there are: it holds one block of input series read from DuckDB
and the chunks in flight, never the whole panel nor all the forecasts. :func:`export_run`
writes a run to a file afterwards, block by block, in a fixed order.

**Global models** (``global_model``: ``prism``, ``gru``, ``lstm``, ``gbm``) learn their shared
parts once, in the calling process, from all series or a stratified sample of them
(:func:`stratified_sample`: at most ``global_sample`` series, spread over the
``cluster/metric`` strata in proportion to their sizes) with
:meth:`~prism.forecasters.base.BaseForecaster.fit_shared`; every worker gets that fitted model
once (pickled: the RNN's weights travel as numpy arrays) and fits each series against it with
:meth:`~prism.forecasters.base.BaseForecaster.fit_local` (the hybrid's periods and sinusoids,
and the conformal calibration of every model). When the sample is all the series, a batch
forecasts exactly what ``model.fit(panel).predict(...)`` does. Other models are fitted on each
series in the workers. A backtest learns the shared parts once per window, on the sample cut
at each series' cutoff, so nothing after a cutoff reaches a forecast from it.

**Backends.** ``local`` runs ``workers`` processes (spawned, so a worker starts clean whatever
the caller has loaded); ``ray`` runs the same chunk function as Ray tasks, on the cluster at
``ray_address`` or on a local one (Ray is the optional extra ``distributed``; it is imported
only by this backend). Each worker uses one core, as Ray gives its tasks: local workers start
with ``OMP_NUM_THREADS=1`` (and the BLAS equivalents), and every chunk runs under a
threadpoolctl limit of one thread. A series' result depends only on the shared model, its own
data and the settings, never on the worker that computed it: the same seeds give identical
results with 1 or N local workers and on Ray.

**Time budget and fallback.** A series whose work raises, or exceeds ``budget_s`` seconds, is
forecast by the seasonal naive fallback (the naive one when it is shorter than a season), its
reason logged and kept in ``batch_series.fallback_reason``; the batch goes on. The budget is
enforced twice: inside the worker a ``SIGALRM`` timer interrupts the series' Python code at
the budget (cheap, and the worker carries on with the next series); and the calling process
gives each chunk ``budget_s`` per series plus ``hard_grace_s``, after which it abandons the
task (kills the local worker process, or cancels the Ray task with ``force=True``), reruns the
chunk's series one per task, and falls back for the one that is stuck (code that holds the
interpreter in C for longer than the budget, which the timer cannot interrupt). A worker
that dies is handled the same way. Near the budget, whether a series falls back can depend on
the machine's load: a budget is a guard against runaway series, not part of the model.

**Tasks.** ``forecast``: fit on each series' whole history, forecast ``horizon``.
``backtest``: the rolling-origin backtest of :mod:`prism.evaluation.backtest` (cutoffs as
statsforecast's ``cross_validation`` places them, a refit at every cutoff), series too short
for it skipped with the reason. ``refit``: fit on each series' whole history and save the
models, forecasting nothing. Every batch forecast refits its models from the stored data.

**Saving the models** (``refit``, or ``forecast`` with ``models_dir``). The workers never write
to the registry (a Ray worker may run on another machine): each returns its fitted models
with its chunk's results, and the calling process saves them, one registry model per chunk
(a :class:`~prism.forecasters.compose.SeriesModels` holding the chunk's per-series models, under the
run's alias and hyperparameters), as the chunk finishes. ``prism serve`` and ``prism forecast
--from-model ALIAS`` then find the newest model of each series without refitting, and its
forecasts are bit for bit those the batch computed. Only series whose fit succeeded are saved:
a series that fell back (it raised or overran its budget) keeps its reason in
``batch_series`` and is not saved, not even its seasonal naive fallback (a saved model stands
for the run's model; serving fits one on demand for a series without). In a ``refit`` such a
series is ``failed``, as nothing was forecast for it.
**Layout.** :mod:`prism.batch.engine` drives a run (:func:`run_batch`, the sample and the
shared parts, deadlines); :mod:`prism.batch.backends` runs chunks on local processes or Ray;
:mod:`prism.batch.work` is the work of one series in a worker (budget, fallback) and what
travels to and from the workers; :mod:`prism.batch.results` writes finished chunks to the
store and the registry and reads runs back (:func:`run_frame`, :func:`export_run`).
"""

from __future__ import annotations

from prism.batch.engine import (
    BACKENDS,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_GLOBAL_SAMPLE,
    DEFAULT_HARD_GRACE_S,
    TASKS,
    BatchReport,
    Progress,
    run_batch,
    stratified_sample,
)
from prism.batch.results import export_run, iter_run_frames, run_frame
from prism.batch.work import backtest_positions, run_chunk

__all__ = [
    "BACKENDS",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_GLOBAL_SAMPLE",
    "DEFAULT_HARD_GRACE_S",
    "TASKS",
    "BatchReport",
    "Progress",
    "backtest_positions",
    "export_run",
    "iter_run_frames",
    "run_batch",
    "run_chunk",
    "run_frame",
    "stratified_sample",
]
