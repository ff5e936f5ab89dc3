"""The backends that run chunks of series: ``local`` worker processes and ``ray`` tasks.

Both run :func:`prism.batch.work.run_chunk`; the engine (:func:`prism.batch.engine._drive`)
is the same for each. A local worker is spawned (it starts clean whatever the caller has
loaded) and unpickles :func:`_local_worker` and the job by their module paths, as a Ray worker
does :func:`_ray_chunk` and the job: so these stay importable functions and classes of
``prism.batch.backends`` and ``prism.batch.work``, never closures or ``__main__`` names.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from typing import Any, Protocol

from prism.batch.work import _Crash, _Job, _Outcome, _Series, run_chunk
from prism.errors import ConfigError, PrismError

logger = logging.getLogger(__name__)


class _Backend(Protocol):
    """Runs chunks; the engine (:func:`prism.batch.engine._drive`) is the same for every
    backend."""

    name: str
    slots: int

    def submit(self, key: int, items: list[_Series]) -> None:
        """Start (or queue) a chunk."""

    def started(self, key: int) -> float | None:
        """When the chunk started running (``time.monotonic``), ``None`` while queued."""

    def wait(self, timeout: float | None) -> list[tuple[int, list[_Outcome] | _Crash]]:
        """Finished chunks, waiting at most ``timeout`` seconds for the first."""

    def abandon(self, key: int) -> None:
        """Stop a chunk that overran its deadline; its worker is replaced."""

    def close(self, force: bool = False) -> None:
        """Stop the workers (and a Ray runtime this backend started); ``force``: at once."""


def _local_worker(conn: Connection, blob: bytes) -> None:
    """A local worker process: load the job once, then run chunks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        job = pickle.loads(blob)
    except BaseException as exc:
        conn.send(("init_failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        key, items = message
        try:
            result: list[_Outcome] | _Crash = run_chunk(job, items)
        except BaseException as exc:
            result = _Crash(f"the chunk failed: {type(exc).__name__}: {exc}")
        conn.send((key, result))


#: Thread pools a worker sizes from the environment when it starts (one core per worker, as
#: Ray gives its tasks). Without them torch's pool has a thread per core and the RNN's
#: per-call switch to one thread and back rebuilds it on every forecast (twice as slow here).
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                     "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


@contextlib.contextmanager
def _one_thread_environment() -> Iterator[None]:
    """``*_NUM_THREADS=1`` for a process started inside (the caller's environment after)."""
    saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(_THREAD_VARIABLES, "1"))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class _Worker:
    process: Any  # multiprocessing.Process of the spawn context
    conn: Connection
    ready: bool = False
    key: int | None = None


class _LocalBackend:
    """``workers`` spawned processes, one chunk at a time each."""

    name = "local"

    def __init__(self, job: _Job, workers: int) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        self.slots = workers
        self._workers: list[_Worker] = []
        self._queue: deque[tuple[int, list[_Series]]] = deque()
        self._started: dict[int, float] = {}
        for _ in range(workers):
            self._spawn()

    def _spawn(self) -> None:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=_local_worker, args=(theirs, self._blob),
                                        daemon=True, name="prism-batch-worker")
        with _one_thread_environment():
            process.start()
        theirs.close()
        self._workers.append(_Worker(process, ours))

    def submit(self, key: int, items: list[_Series]) -> None:
        self._queue.append((key, items))
        self._dispatch()

    def _dispatch(self) -> None:
        for worker in self._workers:
            if worker.ready and worker.key is None and self._queue:
                key, items = self._queue.popleft()
                worker.conn.send((key, items))
                worker.key = key
                self._started[key] = time.monotonic()

    def started(self, key: int) -> float | None:
        return self._started.get(key)

    def wait(self, timeout: float | None) -> list[tuple[int, list[_Outcome] | _Crash]]:
        handles: list[Any] = [w.conn for w in self._workers]
        handles += [w.process.sentinel for w in self._workers]
        ready = set(wait_ready(handles, timeout))
        out: list[tuple[int, list[_Outcome] | _Crash]] = []
        for worker in list(self._workers):
            if worker.conn in ready:
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is not None:
                    self._receive(worker, message, out)
                    continue
            if worker.conn in ready or worker.process.sentinel in ready:
                worker.process.join(timeout=5)
                if worker.process.is_alive():
                    continue  # the pipe said something odd but the process lives on
                self._replace(worker, out, f"its worker process exited with code "
                                           f"{worker.process.exitcode}")
        self._dispatch()
        return out

    def _receive(self, worker: _Worker, message: tuple[Any, Any],
                 out: list[tuple[int, list[_Outcome] | _Crash]]) -> None:
        tag, payload = message
        if tag == "ready":
            worker.ready = True
        elif tag == "init_failed":
            self.close()
            raise PrismError(f"batch workers cannot load the model: {payload}")
        else:
            self._started.pop(tag, None)
            worker.key = None
            out.append((tag, payload))

    def _replace(self, worker: _Worker, out: list[tuple[int, list[_Outcome] | _Crash]],
                 reason: str) -> None:
        self._workers.remove(worker)
        worker.conn.close()
        if worker.key is not None:
            self._started.pop(worker.key, None)
            out.append((worker.key, _Crash(reason)))
        elif not worker.ready:
            self.close()
            raise PrismError(f"a batch worker died while starting ({reason}); run with -v "
                             "for its log")
        self._spawn()

    def abandon(self, key: int) -> None:
        for worker in self._workers:
            if worker.key == key:
                worker.process.kill()
                worker.process.join(timeout=10)
                worker.key = None
                self._workers.remove(worker)
                worker.conn.close()
                self._started.pop(key, None)
                self._spawn()
                return
        self._queue = deque((k, items) for k, items in self._queue if k != key)

    def close(self, force: bool = False) -> None:
        for worker in self._workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(None)
            if force:
                worker.process.kill()
        deadline = time.monotonic() + 10
        for worker in self._workers:
            worker.process.join(timeout=max(0.1, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=5)
            worker.conn.close()
        self._workers = []


#: The job a Ray worker process has loaded: (object ref hex, job).
_RAY_JOB: tuple[str, _Job] | None = None


def _ray_chunk(job_ref: list[Any], items: list[_Series]) -> list[_Outcome]:
    """The Ray task: fetch the job once per worker process (cached), run the chunk.

    The job's reference comes inside a list so that Ray does not fetch it for every task.
    """
    import ray

    global _RAY_JOB
    key = job_ref[0].hex()
    if _RAY_JOB is None or _RAY_JOB[0] != key:
        _RAY_JOB = (key, ray.get(job_ref[0]))
    return run_chunk(_RAY_JOB[1], items)


class _RayBackend:
    """Ray tasks of one CPU each, at most ``slots`` in flight."""

    name = "ray"

    def __init__(self, job: _Job, *, address: str | None, workers: int | None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ConfigError(
                "the ray backend needs Ray: pip install 'prism-forecast[distributed]' "
                "(make test installs it), or use --backend local"
            ) from exc
        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {exc}; check "
                                  "--ray-address (e.g. ray://head:10001 or auto)") from exc
        elif address:
            logger.info("Ray is already initialised in this process; --ray-address %s is "
                        "not used", address)
        # no more tasks in flight than CPUs: a task queued in Ray would spend its time budget
        # waiting
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.slots = min(int(workers), cpus) if workers else cpus
        self._job = ray.put(job)
        self._task = ray.remote(num_cpus=1, max_retries=0)(_ray_chunk)
        self._refs: dict[int, Any] = {}
        self._started: dict[int, float] = {}

    def submit(self, key: int, items: list[_Series]) -> None:
        self._refs[key] = self._task.remote([self._job], items)
        self._started[key] = time.monotonic()

    def started(self, key: int) -> float | None:
        return self._started.get(key)

    def wait(self, timeout: float | None) -> list[tuple[int, list[_Outcome] | _Crash]]:
        ray = self._ray
        keys = {ref: key for key, ref in self._refs.items()}
        if not keys:
            return []
        first, _ = ray.wait(list(keys), num_returns=1, timeout=timeout)
        if not first:
            return []
        done, _ = ray.wait(list(keys), num_returns=len(keys), timeout=0)
        out: list[tuple[int, list[_Outcome] | _Crash]] = []
        for ref in {*first, *done}:
            key = keys[ref]
            del self._refs[key]
            self._started.pop(key, None)
            try:
                out.append((key, ray.get(ref)))
            except ray.exceptions.RayError as exc:
                out.append((key, _Crash(f"the Ray task failed: {type(exc).__name__}: "
                                        f"{str(exc)[:300]}")))
        return out

    def abandon(self, key: int) -> None:
        ref = self._refs.pop(key, None)
        self._started.pop(key, None)
        if ref is not None:
            self._ray.cancel(ref, force=True)

    def close(self, force: bool = False) -> None:
        for ref in self._refs.values():
            with contextlib.suppress(Exception):
                self._ray.cancel(ref, force=True)
        self._refs = {}
        if self._owned:
            self._ray.shutdown()


def _make_backend(name: str, job: _Job, *, workers: int | None,
                  ray_address: str | None) -> _Backend:
    if name == "local":
        return _LocalBackend(job, workers or 1)
    return _RayBackend(job, address=ray_address, workers=workers)

