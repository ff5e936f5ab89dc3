"""Synthetic per-application GPU allocations of an inference fleet.

:func:`generate_deployments` returns a regular panel (``series_id, ts, value``) with one series
``deploy/<app>/gpus_in_use`` per application: the GPUs allocated to the app at each step. Real
serving fleets look like this: allocations move in deployment steps and then hold, with an
autoscaler's daily cycle on some apps and short excursions on top. The model, per app:

- **Size.** GPUs per replica are 1, 2, 4 or 8 (large apps favour 8). The base allocation is
  heavy-tailed: about 15% of the apps are large (log-normal, median 150 GPUs, mostly 50-500),
  the rest small (median 10 GPUs, mostly 2-50). Allocations are whole replicas.
- **Deployment steps that hold.** Steps come as a Poisson process (each app its own mean gap,
  1-7 days; a fifth of the apps change rarely, every 14-60 days), with an intensity that follows
  the app team's working hours: weekdays 09-18 local time carry about 80% of the steps, nights
  and weekends the rest. At a step the level is multiplied by a factor in [0.3, 2.0]
  (log-normal, pulled back towards the base level so levels do not drift away) and rounded to
  at least one replica more or fewer; it then holds until the next step.
- **Diurnal autoscaling** (about a third of the apps): replicas follow a daily traffic cycle
  (a 24 h harmonic peaking in the local afternoon or evening, a small 12 h harmonic, a weekend
  dip and slow AR(1) traffic noise), scaled so the mean is the deployment level and rounded to
  whole replicas, at least one. Autoscaled apps run smaller replicas, so the cycle shows.
- **Transient bursts** (a quarter of the apps, one every 2-8 days): extra replicas for 1-6
  hours, 40%-200% of the level. Half are load tests (working hours; the extra holds, then drops
  back), half traffic spikes (any time; the extra decays back).
- **Restarts.** Now and then (every 2-10 days) one replica, rarely two, is down for 10 or 20
  minutes.
- **Launch and retirement** (7% of the apps each): the app starts at 0 and launches (in working
  hours) somewhere in the first 10-70% of the trace, or retires to 0 for good somewhere in
  30-95% of it.
- **Idle apps** (10%): experiments. Zero most of the time; now and then (every 1.5-5 days)
  one or two replicas for 1-12 hours.

Values are whole GPUs (floats holding integers), never negative. :func:`simulate_deployments`
also returns what was drawn (the deployment levels between steps, the bursts, restarts and
experiments, and each app's parameters), for tests and for scoring step detectors.

The same seed gives the same panel; app ``k`` draws from the ``k``-th child of
``np.random.SeedSequence(seed)``, so it does not depend on how many apps follow it. Durations
are drawn in seconds and rounded to the step, so a finer ``freq`` gives the same fleet at a
finer grain. Everything is vectorised per app (Python loops run over events only).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
from scipy.signal import lfilter

from prism.errors import ConfigError
from prism.generate import parse_start
from prism.schema import SERIES_ID, TS, VALUE, freq_seconds, make_series_id

logger = logging.getLogger(__name__)

#: The cluster part of every series id, and the metric.
CLUSTER = "deploy"
METRIC = "gpus_in_use"
#: The columns of the events frame of :class:`DeploymentFleet`.
EVENT_COLUMNS = ("series_id", "kind", "start", "end", "gpus")
#: Event kinds: ``level`` (the deployment level that holds over ``[start, end)``), ``burst``
#: (extra GPUs at the peak), ``dip`` (GPUs down in a restart), ``experiment`` (an idle app's
#: allocation).
EVENT_KINDS = ("level", "burst", "dip", "experiment")
#: The file :func:`write_deployments` writes, and its header.
DEPLOYMENTS_CSV = "deployments.csv"
DEPLOYMENTS_CSV_COLUMNS = (SERIES_ID, TS, VALUE)

_DAY = 86_400
_HOUR = 3_600
_MAX_ROWS = 50_000_000
#: UTC offsets (hours) of the teams that deploy; working hours and weekends follow local time.
_TZ_OFFSETS = (8, 8, 0, 1, -5, -8, 9, 5.5)
#: Step intensity relative to weekday working hours (09-18 local).
_OFF_HOURS_WEIGHT = 0.08
_WEEKEND_WEIGHT = 0.03
_GPUS_PER_REPLICA = np.array([1, 2, 4, 8])
_GPR_PMF_SMALL = np.array([0.35, 0.25, 0.25, 0.15])
_GPR_PMF_LARGE = np.array([0.05, 0.15, 0.3, 0.5])
_GPR_PMF_IDLE = np.array([0.4, 0.3, 0.2, 0.1])
_P_IDLE = 0.10
_P_LARGE = 0.15
_P_AUTOSCALED = 0.35
_P_BURSTY = 0.25
_P_RARE = 0.20
_P_LAUNCH = 0.07
_P_RETIRE = 0.07
_MIN_FACTOR, _MAX_FACTOR = 0.3, 2.0
_STEP_SIGMA = 0.45  # log-sd of a step's factor
_REVERSION = 0.35  # share of the log-distance to the base level a step takes back
_MIN_AUTOSCALED_REPLICAS = 6  # autoscaled apps run at least this many replicas at base level
#: Words app names are made of: ``chat-api-003``.
_PRODUCTS = (
    "chat", "embed", "rerank", "asr", "tts", "vision", "search", "codegen", "translate",
    "summarize", "moderation", "ocr", "recsys", "agent", "copilot", "retrieval", "ads", "voice",
)
_ROLES = ("api", "svc", "serving", "online", "gateway", "worker", "infer")


@dataclass(frozen=True)
class DeploymentFleet:
    """A simulated fleet: the panel and what was drawn to make it.

    Attributes:
        panel: ``series_id, ts, value`` (see :func:`generate_deployments`).
        events: ``series_id, kind, start, end, gpus`` sorted by series and start; ``end`` is
            exclusive. ``level`` rows cover every app's whole trace (0 before a launch, after a
            retirement and for idle apps); a new ``level`` row is a deployment step.
        apps: one row per series: ``series_id, gpus_per_replica, base_gpus,
            mean_days_between_steps`` (NaN for idle apps), ``utc_offset_hours`` (the team's
            zone), ``idle, autoscaled, bursty`` (bools) and ``lifecycle`` (``steady``,
            ``launch`` or ``retire``).
    """

    panel: pd.DataFrame
    events: pd.DataFrame
    apps: pd.DataFrame


@dataclass(frozen=True)
class GeneratedDeployments:
    """What :func:`write_deployments` wrote.

    Attributes:
        path: ``deployments.csv``.
        n_series: series (apps) in the file.
        n_rows: rows in the file, header not counted.
    """

    path: Path
    n_series: int
    n_rows: int


@dataclass(frozen=True)
class _Grid:
    """The time grid: ``n`` steps of ``step`` seconds from ``t0`` (seconds since the epoch)."""

    t0: int
    step: int
    n: int

    @property
    def days(self) -> float:
        return self.n * self.step / _DAY

    def local_time(self, offset_hours: float) -> tuple[np.ndarray, np.ndarray]:
        """Local hour of day (float) and a weekend mask at each step, in a zone UTC+offset."""
        local = self.t0 + offset_hours * _HOUR + np.arange(self.n, dtype=np.float64) * self.step
        hour = (local % _DAY) / _HOUR
        weekday = (np.floor(local / _DAY).astype(np.int64) + 3) % 7  # the epoch was a Thursday
        return hour, weekday >= 5

    def steps(self, seconds: float) -> int:
        """A duration in whole steps, at least one."""
        return max(1, round(seconds / self.step))


@dataclass
class _AppTrace:
    """One simulated app."""

    name: str
    values: np.ndarray  # GPUs per step
    events: list[tuple[str, int, int, float]]  # kind, start step, end step (exclusive), gpus
    info: dict[str, object]


def generate_deployments(
    *,
    apps: int = 24,
    days: int = 35,
    freq: str = "10min",
    seed: int = 0,
    start: str = "2026-01-05",
) -> pd.DataFrame:
    """Simulate the GPUs allocated to the apps of an inference fleet.

    Args:
        apps: number of applications (series).
        days: length of the trace in days.
        freq: the step, a duration that divides a day (``10min``, ``1h``).
        seed: random seed; the same seed gives the same panel, and app ``k`` does not depend
            on ``apps``.
        start: first step, ISO 8601 on the ``freq`` grid; a zone suffix is converted to UTC.

    Returns:
        The panel ``series_id, ts, value``: ids ``deploy/<app>/gpus_in_use``, ``ts``
        UTC-naive ``datetime64[ns]``, ``value`` float64 whole GPUs; ``days * steps_per_day``
        rows per series, sorted by series and time.

    Raises:
        ConfigError: when an argument is out of range, ``freq`` is not a duration dividing a
            day or ``start`` is not a time on the grid.
    """
    return simulate_deployments(apps=apps, days=days, freq=freq, seed=seed, start=start).panel


def simulate_deployments(
    *,
    apps: int = 24,
    days: int = 35,
    freq: str = "10min",
    seed: int = 0,
    start: str = "2026-01-05",
) -> DeploymentFleet:
    """Simulate a fleet as :func:`generate_deployments` does, with the events drawn.

    Args:
        apps: number of applications (series).
        days: length of the trace in days.
        freq: the step, a duration that divides a day.
        seed: random seed.
        start: first step, ISO 8601 on the ``freq`` grid.

    Returns:
        The panel, the events (deployment levels, bursts, restarts, experiments) and the
        apps' parameters; see :class:`DeploymentFleet`.

    Raises:
        ConfigError: as :func:`generate_deployments`.
    """
    grid = _check_arguments(apps, days, freq, start)
    seqs = np.random.SeedSequence(seed).spawn(apps)
    traces = [_simulate_app(np.random.default_rng(seqs[k]), k, grid) for k in range(apps)]
    traces.sort(key=lambda trace: trace.name)
    ids = [make_series_id(CLUSTER, trace.name, METRIC) for trace in traces]

    ts = (grid.t0 + np.arange(grid.n, dtype=np.int64) * grid.step) * 1_000_000_000
    stamps = ts.astype("datetime64[ns]")
    panel = pd.DataFrame({
        SERIES_ID: np.repeat(np.array(ids, dtype=object), grid.n),
        TS: np.tile(stamps, len(traces)),
        VALUE: np.concatenate([trace.values for trace in traces]).astype(np.float64),
    })

    end_stamp = np.datetime64(int((grid.t0 + grid.n * grid.step) * 1_000_000_000), "ns")
    bounds = np.append(stamps, end_stamp)
    rows = [
        (sid, kind, bounds[lo], bounds[hi], float(gpus))
        for sid, trace in zip(ids, traces, strict=True)
        for kind, lo, hi, gpus in trace.events
    ]
    events = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    events["start"] = events["start"].astype("datetime64[ns]")
    events["end"] = events["end"].astype("datetime64[ns]")
    events["gpus"] = events["gpus"].astype(np.float64)
    events = events.sort_values(["series_id", "start", "kind"], kind="stable").reset_index(
        drop=True)
    info = pd.DataFrame([{SERIES_ID: sid, **trace.info} for sid, trace in zip(ids, traces,
                                                                            strict=True)])
    logger.debug("simulated %d apps x %d steps", len(traces), grid.n)
    return DeploymentFleet(panel=panel, events=events, apps=info)


def write_deployments(
    output: Path | str,
    *,
    apps: int = 24,
    days: int = 35,
    freq: str = "10min",
    seed: int = 0,
    start: str = "2026-01-05",
) -> GeneratedDeployments:
    """Write :func:`generate_deployments`'s panel to ``output/deployments.csv``.

    The file is the ``long-csv`` ingest format: header ``series_id,ts,value``, times ISO 8601
    UTC (``2026-01-05T00:10:00``), values whole numbers.

    Args:
        output: folder to write into; created if missing. An existing file is replaced.
        apps: number of applications.
        days: length of the trace in days.
        freq: the step, a duration that divides a day.
        seed: random seed; the same seed gives the same bytes.
        start: first step, ISO 8601 on the ``freq`` grid.

    Returns:
        The path, the number of series and of rows.

    Raises:
        ConfigError: for a bad argument or a folder that cannot be created.
    """
    panel = generate_deployments(apps=apps, days=days, freq=freq, seed=seed, start=start)
    out_dir = Path(output)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create output folder {str(out_dir)!r}: {exc.strerror}; "
            "pass --output a folder you can write to"
        ) from exc
    path = out_dir / DEPLOYMENTS_CSV
    times = np.datetime_as_string(panel[TS].to_numpy(dtype="datetime64[ns]"), unit="s")
    table = pa.table({
        SERIES_ID: pa.array(panel[SERIES_ID].to_numpy(dtype=object), type=pa.string()),
        TS: pa.array(times, type=pa.string()),
        VALUE: pa.array(panel[VALUE].to_numpy().astype(np.int64)),
    })
    with pa.OSFile(str(path), "wb") as sink:
        sink.write((",".join(DEPLOYMENTS_CSV_COLUMNS) + "\n").encode())
        # Ids, times and numbers hold no commas or quotes.
        pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False,
                                                        quoting_style="none"))
    n_series = int(panel[SERIES_ID].nunique())
    logger.info("wrote %d rows of %d series to %s", len(panel), n_series, path)
    return GeneratedDeployments(path=path, n_series=n_series, n_rows=len(panel))


def _check_arguments(apps: int, days: int, freq: str, start: str) -> _Grid:
    """Validate the arguments; return the time grid."""
    for name, value, example in (("apps", apps, "24"), ("days", days, "35")):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ConfigError(
                f"{name} must be a whole number >= 1 (got {value!r}); e.g. --{name} {example}"
            )
    step = freq_seconds(freq)
    if _DAY % step != 0:
        raise ConfigError(
            f"freq {freq!r} does not divide a day into whole steps; use e.g. 1min, 5min, 10min, "
            "15min, 30min or 1h"
        )
    n = int(days) * (_DAY // step)
    if n * int(apps) > _MAX_ROWS:
        raise ConfigError(
            f"{apps} apps x {n:,} steps is more than {_MAX_ROWS:,} rows; lower apps or days, "
            "or use a coarser freq"
        )
    ts = parse_start(start)
    t0_ns = int(ts.as_unit("ns").value)
    if t0_ns % (step * 1_000_000_000) != 0:
        raise ConfigError(
            f"start {start!r} is not on the {freq} grid; start at a multiple of {freq}, "
            "e.g. 2026-01-05T00:00"
        )
    return _Grid(t0=t0_ns // 1_000_000_000, step=step, n=n)


def _simulate_app(rng: np.random.Generator, index: int, grid: _Grid) -> _AppTrace:
    """Draw one app's parameters and simulate its GPUs at every step."""
    name = f"{rng.choice(_PRODUCTS)}-{rng.choice(_ROLES)}-{index:03d}"
    offset = float(rng.choice(_TZ_OFFSETS))
    hour, weekend = grid.local_time(offset)
    working = (hour >= 9.0) & (hour < 18.0) & ~weekend
    work = np.where(working, 1.0, np.where(weekend, _WEEKEND_WEIGHT, _OFF_HOURS_WEIGHT))
    work /= work.sum()
    role = rng.random(6)
    if role[0] < _P_IDLE:
        return _idle_app(rng, name, offset, grid, work)
    large = bool(role[1] < _P_LARGE)
    autoscaled = bool(role[2] < _P_AUTOSCALED)
    bursty = bool(role[3] < _P_BURSTY)
    rare = bool(role[4] < _P_RARE)
    lifecycle = ("launch" if role[5] < _P_LAUNCH
                 else "retire" if role[5] < _P_LAUNCH + _P_RETIRE else "steady")

    median, sigma = (150.0, 0.6) if large else (10.0, 0.8)
    base_gpus = float(np.clip(np.exp(rng.normal(np.log(median), sigma)), 1.0, 4000.0))
    gpr = int(rng.choice(_GPUS_PER_REPLICA, p=_GPR_PMF_LARGE if large else _GPR_PMF_SMALL))
    while gpr > 1 and base_gpus < gpr * (_MIN_AUTOSCALED_REPLICAS if autoscaled else 1):
        gpr //= 2
    base = max(1, round(base_gpus / gpr))

    low, high = (14.0, 60.0) if rare else (1.0, 7.0)
    mean_gap = float(np.exp(rng.uniform(np.log(low), np.log(high))))
    level = _deployment_levels(rng, grid, work, base, mean_gap)
    if lifecycle == "launch":
        level[: _draw_step(rng, work, 0.1, 0.7)] = 0
    elif lifecycle == "retire":
        level[_draw_step(rng, work, 0.3, 0.95):] = 0

    replicas = level.astype(np.float64)
    if autoscaled:
        replicas = _autoscale(rng, grid, hour, weekend, level)
    events: list[tuple[str, int, int, float]] = []
    if bursty:
        events += _bursts(rng, grid, work, level, replicas, gpr)
    events += _restarts(rng, grid, replicas, gpr)
    events += _level_segments(level * gpr)
    info: dict[str, object] = {
        "gpus_per_replica": gpr,
        "base_gpus": base * gpr,
        "mean_days_between_steps": mean_gap,
        "utc_offset_hours": offset,
        "idle": False,
        "autoscaled": autoscaled,
        "bursty": bursty,
        "lifecycle": lifecycle,
    }
    return _AppTrace(name=name, values=replicas * gpr, events=events, info=info)


def _deployment_levels(
    rng: np.random.Generator, grid: _Grid, work: np.ndarray, base: int, mean_gap: float
) -> np.ndarray:
    """Replicas deployed at each step: Poisson steps in working hours that hold."""
    n_steps = int(rng.poisson(grid.days / mean_gap))
    at = np.unique(rng.choice(grid.n, size=n_steps, p=work))
    at = at[at > 0]
    levels = np.empty(len(at) + 1, dtype=np.int64)
    levels[0] = base
    for i in range(len(at)):
        current = int(levels[i])
        log_factor = _REVERSION * np.log(base / current) + rng.normal(0.0, _STEP_SIGMA)
        factor = float(np.exp(np.clip(log_factor, np.log(_MIN_FACTOR), np.log(_MAX_FACTOR))))
        new = max(1, round(current * factor))
        if new == current:  # a deployment changes something: at least one replica
            new = current + 1 if factor >= 1.0 or current == 1 else current - 1
        levels[i + 1] = new
    return levels[np.searchsorted(at, np.arange(grid.n), side="right")]


def _draw_step(rng: np.random.Generator, work: np.ndarray, low: float, high: float) -> int:
    """A step in ``[low, high)`` of the trace (fractions), drawn with the working-hours
    weights."""
    n = len(work)
    lo = min(int(low * n), n - 1)
    hi = max(int(high * n), lo + 1)
    weights = work[lo:hi] / work[lo:hi].sum()
    return lo + int(rng.choice(hi - lo, p=weights))


def _autoscale(
    rng: np.random.Generator, grid: _Grid, hour: np.ndarray, weekend: np.ndarray,
    level: np.ndarray,
) -> np.ndarray:
    """Replicas an autoscaler runs: the level times a daily traffic cycle, whole replicas."""
    amp = rng.uniform(0.25, 0.6)
    peak = rng.uniform(13.0, 20.0)
    semi_amp = rng.uniform(0.0, 0.15)
    semi_phase = rng.uniform(0.0, 12.0)
    weekend_dip = rng.uniform(0.6, 0.9)
    # Traffic noise: AR(1) with a one-hour memory, stationary log-sd 0.06.
    phi = float(np.exp(-grid.step / _HOUR))
    shocks = rng.normal(0.0, 0.06, grid.n)
    shocks[1:] *= np.sqrt(1.0 - phi * phi)
    noise = lfilter([1.0], [1.0, -phi], shocks)
    log_traffic = (amp * np.cos(2 * np.pi * (hour - peak) / 24.0)
                   + semi_amp * np.cos(2 * np.pi * (hour - semi_phase) / 12.0)
                   + np.where(weekend, np.log(weekend_dip), 0.0) + noise)
    traffic = np.exp(log_traffic)
    traffic /= traffic.mean()
    scaled = np.maximum(1.0, np.round(level * traffic))
    return np.asarray(np.where(level > 0, scaled, 0.0), dtype=np.float64)


def _bursts(
    rng: np.random.Generator, grid: _Grid, work: np.ndarray, level: np.ndarray,
    replicas: np.ndarray, gpr: int,
) -> list[tuple[str, int, int, float]]:
    """Add load tests and traffic spikes to ``replicas`` in place; return the events."""
    events = []
    for _ in range(int(rng.poisson(grid.days / rng.uniform(2.0, 8.0)))):
        load_test = bool(rng.random() < 0.5)
        start = int(rng.choice(grid.n, p=work)) if load_test else int(rng.integers(grid.n))
        length = grid.steps(_HOUR * float(np.exp(rng.uniform(0.0, np.log(6.0)))))
        magnitude = float(np.exp(rng.uniform(np.log(1.4), np.log(3.0))))
        end = min(grid.n, start + length)
        # A load test holds its replicas and stops; a spike's extra decays as traffic does.
        shape = (np.ones(end - start) if load_test
                 else np.exp(-3.0 * np.arange(end - start) / length))
        extra = np.round(level[start:end] * (magnitude - 1.0) * shape)
        if extra.max(initial=0.0) <= 0.0:
            continue
        replicas[start:end] += extra
        events.append(("burst", start, end, float(extra.max()) * gpr))
    return events


def _restarts(
    rng: np.random.Generator, grid: _Grid, replicas: np.ndarray, gpr: int
) -> list[tuple[str, int, int, float]]:
    """Take one replica (rarely two) down for 10-20 minutes now and then, in place."""
    events = []
    for _ in range(int(rng.poisson(grid.days / rng.uniform(2.0, 10.0)))):
        start = int(rng.integers(grid.n))
        end = min(grid.n, start + grid.steps(60.0 * float(rng.choice([10, 20]))))
        down = 1 if rng.random() < 0.85 else 2
        if replicas[start:end].max() <= 0.0:
            continue
        replicas[start:end] = np.maximum(replicas[start:end] - down, 0.0)
        events.append(("dip", start, end, float(down * gpr)))
    return events


def _idle_app(
    rng: np.random.Generator, name: str, offset: float, grid: _Grid, work: np.ndarray
) -> _AppTrace:
    """An app with no deployment: experiments of one or two replicas for a few hours."""
    gpr = int(rng.choice(_GPUS_PER_REPLICA, p=_GPR_PMF_IDLE))
    replicas = np.zeros(grid.n)
    events: list[tuple[str, int, int, float]] = []
    for _ in range(int(rng.poisson(grid.days / rng.uniform(1.5, 5.0)))):
        start = int(rng.choice(grid.n, p=work))
        end = min(grid.n, start + grid.steps(_HOUR * float(np.exp(rng.uniform(0.0,
                                                                             np.log(12.0))))))
        count = int(rng.integers(1, 3))
        replicas[start:end] = np.maximum(replicas[start:end], count)
        events.append(("experiment", start, end, float(count * gpr)))
    events += _level_segments(np.zeros(grid.n, dtype=np.int64))
    info: dict[str, object] = {
        "gpus_per_replica": gpr,
        "base_gpus": 0,
        "mean_days_between_steps": float("nan"),
        "utc_offset_hours": offset,
        "idle": True,
        "autoscaled": False,
        "bursty": False,
        "lifecycle": "steady",
    }
    return _AppTrace(name=name, values=replicas * gpr, events=events, info=info)


def _level_segments(gpus: np.ndarray) -> list[tuple[str, int, int, float]]:
    """Run-length ``level`` events of a step function."""
    starts = np.concatenate([[0], np.flatnonzero(np.diff(gpus)) + 1])
    ends = np.append(starts[1:], len(gpus))
    return [("level", int(lo), int(hi), float(gpus[lo])) for lo, hi in
            zip(starts, ends, strict=True)]
