"""Fits in child processes, each under a time budget: one past it is killed, not waited for.

A fit holds the interpreter in numpy, scikit-learn or torch for as long as it takes, and a
thread cannot be stopped; so the hub fits in a child process and kills it past its budget, as
the batch engine abandons a worker past its hard deadline (:mod:`prism.batch.backends`). The
children are forked by a fork server that has imported PRISM's forecasters once: a fit costs
~15 ms more than in a thread, not the seconds of a fresh interpreter, and starts clean of the
server's threads and DuckDB connection (where there is no fork server, children are spawned).

The fitted model comes back pickled, as a batch worker's does; an error comes back as itself
(a :class:`~prism.errors.DataContractError` for a series too short, say).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from typing import Any

import pandas as pd

from prism.errors import ConfigError, ModelNotReady, PrismError
from prism.forecasters.base import BaseForecaster

logger = logging.getLogger(__name__)

#: What the fork server imports once, so that a child does not.
_PRELOAD = ["prism.forecasters", "prism.forecasters.params"]
#: How often a fit past its first phase asks again for a slot of the overtime lane.
_POLL_S = 0.25


class FitTimedOut(ConfigError):
    """A fit that ran past its time budget and was killed (HTTP 422: the request asked for
    more than the server fits; a cheaper model or the CLI can do it)."""


def _fit_child(conn: Connection, forecaster: BaseForecaster, panel: pd.DataFrame) -> None:
    """A child process: fit, send the fitted model (or the error) back, exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are the server's
    try:
        payload: tuple[str, Any] = ("ok", pickle.dumps(forecaster.fit(panel),
                                                       protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException as exc:
        try:
            pickle.loads(pickle.dumps(exc))
            payload = ("error", exc)
        except Exception:  # an error that does not travel: its text does
            payload = ("error", PrismError(f"{type(exc).__name__}: {exc}"))
    conn.send(payload)
    conn.close()


class FitProcesses:
    """Fits forecasters in child processes, killing those past their budget (module doc)."""

    def __init__(self) -> None:
        methods = multiprocessing.get_all_start_methods()
        self._context: Any = multiprocessing.get_context(
            "forkserver" if "forkserver" in methods else "spawn")
        self._lock = threading.Lock()
        self._children: set[Any] = set()  # multiprocessing.Process of the context
        self._closed = False

    def start(self) -> None:
        """Start the fork server (its imports take a second or two), off the request path."""
        if self._context.get_start_method() != "forkserver":
            return
        from multiprocessing import forkserver

        self._context.set_forkserver_preload(_PRELOAD)  # no-op once the server runs
        forkserver.ensure_running()

    def fit(self, forecaster: BaseForecaster, panel: pd.DataFrame, *, budget_s: float,
            what: str, overtime_after_s: float = 0.0,
            overtime: Callable[[], bool] | None = None) -> BaseForecaster:
        """``forecaster.fit(panel)`` in a child process, killed past ``budget_s`` seconds.

        Args:
            forecaster: an unfitted forecaster.
            panel: the data to fit it on.
            budget_s: the fit's time budget.
            what: the fit in words, for messages (``gbm[max_iter=900] for 'a/b/c'``).
            overtime_after_s: when to call ``overtime``.
            overtime: called (again and again, until it returns ``True``) once the fit has
                run ``overtime_after_s``: the caller's scheduler may then give the fit's slot
                to another job.

        Returns:
            The fitted forecaster.

        Raises:
            FitTimedOut: when the fit ran past its budget (it was killed).
            ModelNotReady: when the hub is closing (the fit was killed).
            PrismError: whatever the fit raised (a ``DataContractError`` for a short series).
        """
        ours, theirs = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_fit_child, args=(theirs, forecaster, panel),
                                        daemon=True, name="prism-fit")
        with self._lock:
            if self._closed:
                raise ModelNotReady("the server is shutting down", retry_after=5)
            process.start()
            self._children.add(process)
        theirs.close()
        started = time.monotonic()
        try:
            message = self._wait(process, ours, started, budget_s, overtime_after_s,
                                 overtime)
        finally:
            ours.close()
            with self._lock:
                self._children.discard(process)
            if process.is_alive():
                process.kill()
            process.join(timeout=5)
        if message is None:
            if self._closed:
                raise ModelNotReady("the server is shutting down", retry_after=5)
            if time.monotonic() - started >= budget_s:
                raise FitTimedOut(f"the fit of {what} exceeded its time budget of "
                                  f"{budget_s:g} s and was cancelled; ask for a cheaper model "
                                  "(smaller hyperparameters), or fit it with the CLI")
            raise PrismError(f"the fit of {what} died (exit code {process.exitcode})")
        tag, payload = message
        if tag == "error":
            raise payload
        fitted = pickle.loads(payload)
        if not isinstance(fitted, BaseForecaster):  # pragma: no cover - our own child
            raise PrismError(f"the fit of {what} returned no forecaster")
        return fitted

    def _wait(self, process: Any, conn: Connection, started: float, budget_s: float,
              overtime_after_s: float, overtime: Callable[[], bool] | None
              ) -> tuple[str, Any] | None:
        """The child's message, or ``None`` when it died or ran past its budget."""
        promoted = overtime is None
        while True:
            now = time.monotonic()
            timeout = started + budget_s - now
            if timeout <= 0:
                logger.warning("killing a fit after %.0f s (its budget)", now - started)
                return None
            if not promoted:
                if now - started >= overtime_after_s:
                    assert overtime is not None
                    promoted = overtime()
                    if not promoted:
                        timeout = min(timeout, _POLL_S)
                else:
                    timeout = min(timeout, started + overtime_after_s - now)
            ready = wait_ready([conn, process.sentinel], timeout)
            if conn in ready:
                try:
                    message: tuple[str, Any] = conn.recv()
                except (EOFError, OSError):
                    return None
                return message
            if ready:  # the child exited without a word (killed, or it crashed)
                return None

    def close(self) -> None:
        """Kill the running fits (their callers get :class:`ModelNotReady`); no new ones."""
        with self._lock:
            self._closed = True
            children = list(self._children)
        for process in children:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                process.kill()
