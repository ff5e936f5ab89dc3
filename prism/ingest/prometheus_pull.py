"""Live pulls over the Prometheus HTTP API: ``prism ingest --prometheus-url URL --query Q``.

``GET {url}/api/v1/query_range`` with ``query``, ``start``, ``end``, ``step`` (and ``timeout``)
answers a ``matrix``: one list of ``[unix_seconds, "value"]`` per series, evaluated at
``start + k * step`` for every such time up to ``end``. Prometheus refuses a request whose
``(end - start) / step`` exceeds 11,000 points per series (400, ``bad_data``, "exceeded maximum
resolution of 11,000 points per timeseries"), so a pull is cut in time into chunks of at most
:data:`MAX_POINTS` points each (``--option max_points=N`` for servers in front of Prometheus
that allow fewer): chunk ``i`` holds the points ``i * N .. (i + 1) * N - 1`` of the grid, so
the chunks cover ``[start, end]`` without a gap and without a point twice.

``start`` is rounded up and ``end`` down to a multiple of ``step`` (as Grafana does), so pulls
of overlapping ranges at one step ask for the same timestamps.

Every chunk is fetched before anything is written; the results of all chunks are merged into
one response body (a series' values in time order), which the ``prometheus`` adapter reads as
it reads a saved body (naming, scaling, combining: :mod:`prism.ingest.prometheus`), and the
ingest pipeline writes in one transaction. An error on any chunk (a Prometheus error answer,
an HTTP error, a timeout, a server that cannot be reached) raises an :class:`IngestError`
that names the URL (never the token), the chunk's time range and how to fix it; nothing is
stored then.

Re-pulling: samples the store already holds for the same series and timestamp (from an
earlier pull or file) are kept and dropped from the pull, so a re-pull of the same range adds
nothing and a pull of an overlapping range adds only the new timestamps. The ``ingests`` row
of a pull records the request as a URL without the token.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
import pandas as pd

from prism.errors import ConfigError, IngestError
from prism.ingest import get_adapter
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import FileReport, IngestReport, Progress, ingest
from prism.ingest.prometheus import series_ids
from prism.schema import EARLIEST_TS, FILL_POLICIES, LATEST_TS, freq_seconds, parse_duration
from prism.store import Store

logger = logging.getLogger(__name__)

#: Prometheus' limit of points per series in one range query.
MAX_POINTS = 11_000
#: The most evaluation times per series one pull asks for (a year at 1 min, 11.6 days at 1 s):
#: `--start now-400d --step 1s` asked for 35 M per series and was killed for memory.
MAX_PULL_STEPS = 1_000_000
#: The most samples one pull holds in memory, all series together (about 1.2 KB each while
#: merged and checked): past it the pull stops before storing anything.
MAX_PULL_SAMPLES = 3_000_000
#: The ``--option`` keys the pull reads itself (the others go to the ``prometheus`` adapter).
PULL_OPTION_KEYS = ("token", "timeout", "max_points")
#: The format the pulled body is ingested as.
FORMAT = "prometheus"
_ENDPOINT = "/api/v1/query_range"
_CONNECT_TIMEOUT_S = 10.0
#: How much longer than the evaluation timeout the client waits (at most).
_MARGIN_S = 10.0
#: Prometheus' own default evaluation limit (``--query.timeout``) is 2 minutes.
_DEFAULT_TIMEOUT_S = 120.0
_TOKEN_FIX = ("pass a bearer token the server accepts with --option token=TOKEN or the "
              "environment variable PRISM_PROMETHEUS_TOKEN")


@dataclass(frozen=True)
class RangeQuery:
    """One pull: a PromQL query over ``[start, end]`` at ``step``, all times in Unix
    milliseconds, ``start`` and ``end`` on the step's grid (:func:`range_query` makes one).

    Attributes:
        url: the server's base URL (``http://prometheus:9090``, with a path prefix if any).
        query: the PromQL expression.
        start_ms: the first evaluation time.
        end_ms: the last evaluation time.
        step_ms: the step between evaluation times.
        token: the bearer token (never shown).
        timeout_s: the evaluation timeout sent to Prometheus (``timeout``); the HTTP client
            waits as long again, at most 10 s more. ``None``: the server's default, and 130 s
            for the client.
        max_points: the most points per series one request asks for.
    """

    url: str
    query: str
    start_ms: int
    end_ms: int
    step_ms: int
    token: str | None = field(default=None, repr=False)
    timeout_s: float | None = None
    max_points: int = MAX_POINTS

    @property
    def endpoint(self) -> str:
        """``{url}/api/v1/query_range``, as requested."""
        base = self.url.rstrip("/")
        return base if base.endswith(_ENDPOINT) else base + _ENDPOINT

    @property
    def shown_endpoint(self) -> str:
        """The endpoint without any user or password it holds (for messages)."""
        return _without_credentials(self.endpoint)

    @property
    def source(self) -> str:
        """The whole request as a URL without credentials: what ``ingests.path`` records."""
        params = {"query": self.query, "start": _seconds(self.start_ms),
                  "end": _seconds(self.end_ms), "step": _seconds(self.step_ms)}
        return f"{self.shown_endpoint}?{urlencode(params)}"

    def chunks(self) -> list[Chunk]:
        """The requests of the pull, in time order (:func:`plan_chunks`)."""
        spans = plan_chunks(self.start_ms, self.end_ms, self.step_ms, self.max_points)
        return [Chunk(i, len(spans), lo, hi) for i, (lo, hi) in enumerate(spans, 1)]


@dataclass(frozen=True)
class Chunk:
    """One request of a pull: the evaluation times ``start_ms .. end_ms`` (both included)."""

    index: int
    count: int
    start_ms: int
    end_ms: int

    def describe(self) -> str:
        """``chunk 2/3 (2026-01-05T08:00:00Z .. 2026-01-06T10:33:10Z)``."""
        return (f"chunk {self.index}/{self.count} ({_utc(self.start_ms)} .. "
                f"{_utc(self.end_ms)})")


def plan_chunks(start_ms: int, end_ms: int, step_ms: int,
                max_points: int = MAX_POINTS) -> list[tuple[int, int]]:
    """Cut the evaluation times ``start + k * step <= end`` into runs of ``max_points``.

    Args:
        start_ms: the first evaluation time (Unix milliseconds).
        end_ms: the last time a point may have (``>= start_ms``).
        step_ms: the step (``> 0``).
        max_points: the most points per run (``>= 1``).

    Returns:
        ``(first, last)`` evaluation time of each run: the first run starts at ``start_ms``,
        each next one a step after the previous one's last, and the last ends at the last
        grid time ``<= end_ms``; every run has at most ``max_points`` points.
    """
    if step_ms <= 0 or max_points < 1 or end_ms < start_ms:
        raise ValueError("need step_ms > 0, max_points >= 1 and end_ms >= start_ms")
    last = (end_ms - start_ms) // step_ms  # index of the last grid point
    return [(start_ms + k * step_ms, start_ms + min(k + max_points - 1, last) * step_ms)
            for k in range(0, last + 1, max_points)]


def split_options(options: IngestOptions) -> tuple[dict[str, str], IngestOptions]:
    """The ``--option`` keys of the pull (:data:`PULL_OPTION_KEYS`), and the options left for
    the adapter (the token must not reach the content hash or ``ingests.options``)."""
    pull = {k: v for k, v in options.extra.items() if k in PULL_OPTION_KEYS}
    rest = {k: v for k, v in options.extra.items() if k not in PULL_OPTION_KEYS}
    return pull, replace(options, extra=rest)


def range_query(
    url: str, query: str, *, start: str, end: str, step: str, token: str | None = None,
    timeout: str | None = None, max_points: str | int | None = None,
) -> RangeQuery:
    """Check a pull's arguments and put its times on the step's grid.

    Args:
        url: the server's base URL, ``http(s)://host:port[/prefix]``.
        query: the PromQL expression.
        start: the first time: RFC 3339 / ISO 8601 (UTC unless it has an offset), Unix
            seconds, ``now`` or ``now-DURATION`` (``now-2d``).
        end: the last time, written alike.
        step: the resolution, a duration (``10s``, ``1m``, ``1h``).
        token: the bearer token.
        timeout: the evaluation timeout, a duration (``30s``, ``2m``).
        max_points: the most points per series and request (default 11,000).

    Raises:
        ConfigError: naming the argument that is wrong and how to write it.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--prometheus-url {_without_credentials(url)!r} is not an http(s) "
                          "URL; write the server's base URL, e.g. http://prometheus:9090")
    if not query.strip():
        raise ConfigError("--query is empty; write a PromQL expression, e.g. "
                          "'sum by (namespace) (DCGM_FI_DEV_GPU_UTIL)'")
    step_ms = round(parse_duration(step).total_seconds() * 1000)
    if step_ms < 1:
        raise ConfigError(f"--step {step!r} is shorter than the millisecond Prometheus keeps")
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    lo, hi = _time_ms(start, "start", now), _time_ms(end, "end", now)
    if hi < lo:
        raise ConfigError(f"--end {end!r} is before --start {start!r}; swap them")
    first, last = -(-lo // step_ms) * step_ms, hi // step_ms * step_ms
    if last < first:
        raise ConfigError(f"no multiple of --step {step} lies between --start {start!r} and "
                          f"--end {end!r}; widen the range or shorten the step")
    steps = (last - first) // step_ms + 1
    if steps > MAX_PULL_STEPS:
        raise ConfigError(
            f"--start {start!r} to --end {end!r} every --step {step} is {steps:,} points per "
            f"series, over the {MAX_PULL_STEPS:,} one pull takes: pull a shorter range (pulls "
            "into one store add only new timestamps, so several shorter ones make the whole) "
            "or a longer --step")
    timeout_s = None
    if timeout is not None:
        timeout_s = parse_duration(timeout).total_seconds()
    points = MAX_POINTS
    if max_points is not None:
        try:
            points = int(max_points)
        except ValueError:
            points = 0
        if not 1 <= points <= MAX_POINTS:
            raise ConfigError(f"--option max_points={max_points!r}: write a whole number from 1 "
                              f"to {MAX_POINTS:,} (Prometheus' limit per request)")
    return RangeQuery(url.strip(), query, first, last, step_ms, token or None, timeout_s,
                      points)


def pull(
    store: Store, request: RangeQuery, options: IngestOptions | None = None, *,
    freq: str | None = None, fill: str | None = None, progress: Progress | None = None,
) -> IngestReport:
    """Fetch every chunk of ``request``, then ingest the samples the store lacks, as format
    ``prometheus``, in one transaction.

    Args:
        store: the store.
        request: the pull (:func:`range_query`).
        options: the adapter's options (``cluster``, ``scope``, ``on_error``, ``--option
            metric/scale/combine/scope_label``), without the pull's own keys
            (:func:`split_options`).
        freq: bucket size of the derived series (as ``prism ingest``).
        fill: gap policy of sampled series.
        progress: called with ``("pull", chunks done, chunks)``, then the pipeline's stages.

    Returns:
        The pipeline's report; its one file is ``request.source``, ``unchanged`` when the
        store held every pulled sample already.

    Raises:
        IngestError: for a chunk that fails (naming the URL and the chunk's range) or bad
            samples; nothing is stored.
        ConfigError: for bad options, frequency or fill policy (before any request).
    """
    options = options or IngestOptions()
    check_pull_options(options)
    series_ids([], options)  # bad naming options fail before any request
    if freq is not None:
        freq_seconds(freq)
    if fill is not None and fill not in FILL_POLICIES:
        raise ConfigError(f"unknown fill policy {fill!r}; use one of {', '.join(FILL_POLICIES)}")
    body = fetch(request, progress=progress)
    with store.transaction():
        total, dropped = _drop_stored(store, request, body, options)
        if total == 0:
            logger.warning("%s: the query returned no samples; check its label matchers and "
                           "the time range", request.source)
            return IngestReport(files=[FileReport(request.source, "ingested", 0, 0, None)])
        if dropped == total:
            logger.info("%s: the store holds all %d samples already", request.source, total)
            if freq is not None or fill is not None:
                logger.warning("nothing new was pulled, so --freq/--fill did nothing; run "
                               "`prism series rederive` to derive the series again")
            return IngestReport(files=[FileReport(request.source, "unchanged", 0, 0, None)])
        logger.info("%s: %d of %d samples are new", request.source, total - dropped, total)
        with tempfile.TemporaryDirectory(prefix="prism-pull-") as tmp:
            path = Path(tmp) / "query_range.json"
            path.write_text(json.dumps(body, separators=(",", ":")))
            try:
                report = ingest(store, [path], FORMAT, options, freq=freq, fill=fill,
                                progress=progress)
            except IngestError as exc:  # name the request, not the temporary file
                raise IngestError(
                    exc.message.replace(str(path), request.source), path=request.source,
                    line=exc.line, column=exc.column,
                    fix=exc.fix and exc.fix.replace(str(path), request.source)) from exc
        files = []
        for f in report.files:
            if f.ingest_id is not None and f.status == "ingested":
                store.execute("UPDATE ingests SET path = ? WHERE ingest_id = ?",
                              [request.source, f.ingest_id])
                store.execute("UPDATE rejects SET path = ? WHERE ingest_id = ?",
                              [request.source, f.ingest_id])
            files.append(replace(f, path=request.source))
        report.files = files
    return report


def fetch(request: RangeQuery, *, progress: Progress | None = None,
          client: httpx.Client | None = None) -> dict[str, object]:
    """GET every chunk of ``request`` and merge the results into one ``query_range`` body.

    Args:
        request: the pull.
        progress: called with ``("pull", chunks done, chunks)`` after each chunk.
        client: the HTTP client to use (default: a new one with the token and timeouts).

    Returns:
        ``{"status": "success", "data": {"resultType": "matrix", "result": [...]}}`` with one
        result per label set, its values in time order (and the chunks' ``warnings``).

    Raises:
        IngestError: for the first chunk that fails, naming the URL, the chunk's range and
            how to fix it.
    """
    chunks = request.chunks()
    merged = _Merged()
    # Prometheus' own timeout answer (503) should arrive before the client gives up
    timeout_s = request.timeout_s or _DEFAULT_TIMEOUT_S
    read_s = timeout_s + min(timeout_s, _MARGIN_S)
    headers = {"Accept": "application/json"}
    if request.token:
        headers["Authorization"] = f"Bearer {request.token}"
    own = client is None
    http = client or httpx.Client(headers=headers, follow_redirects=True,
                                  timeout=httpx.Timeout(read_s, connect=_CONNECT_TIMEOUT_S))
    try:
        if progress:
            progress("pull", 0, len(chunks))
        for chunk in chunks:
            result, warnings = _get(http, request, chunk, read_s)
            merged.add(result)
            merged.warnings.extend(warnings)
            if merged.samples > MAX_PULL_SAMPLES:
                raise _failed(request, chunk, f"the pull holds {merged.samples:,} samples of "
                              f"{len(merged.results):,} series after this chunk, over the "
                              f"{MAX_PULL_SAMPLES:,} one pull keeps in memory (nothing was "
                              "stored)", "pull a shorter range, fewer series (a narrower "
                              "--query) or a longer --step; pulls into one store add only new "
                              "timestamps")
            logger.info("%s: %s: %d series", request.shown_endpoint, chunk.describe(),
                        len(result))
            if progress:
                progress("pull", chunk.index, chunk.count)
    finally:
        if own:
            http.close()
    return merged.body()


def _get(http: httpx.Client, request: RangeQuery, chunk: Chunk,
         read_s: float) -> tuple[list[object], list[str]]:
    """The ``data.result`` and ``warnings`` of one chunk.

    Raises:
        IngestError: for a timeout, a connection error, an HTTP or Prometheus error, or a body
            that is not a range query's answer.
    """
    params = {"query": request.query, "start": _seconds(chunk.start_ms),
              "end": _seconds(chunk.end_ms), "step": _seconds(request.step_ms)}
    if request.timeout_s is not None:
        params["timeout"] = _seconds(round(request.timeout_s * 1000))
    try:
        response = http.get(request.endpoint, params=params)
    except httpx.TimeoutException as exc:
        raise _failed(request, chunk, f"no answer within {read_s:g} s "
                      f"({type(exc).__name__})", _SLOW_FIX) from exc
    except httpx.HTTPError as exc:  # refused, DNS, TLS, a broken connection
        raise _failed(request, chunk, f"cannot reach the server: {type(exc).__name__}: "
                      f"{_hide(request, str(exc))}",
                      "check --prometheus-url (scheme, host and port) and that the server "
                      "runs and can be reached from here") from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    code = response.status_code
    if isinstance(body, dict) and body.get("status") == "error":
        kind = str(body.get("errorType", "?"))
        raise _failed(request, chunk, f"Prometheus answered HTTP {code} {kind}: "
                      f"{_short(_hide(request, str(body.get('error', ''))))}",
                      _error_fix(kind, code))
    if code >= 400 or not isinstance(body, dict):
        text = _short(_hide(request, response.text.strip()), 200)
        what = f"HTTP {code} {response.reason_phrase}" if code >= 400 else "a body not JSON"
        raise _failed(request, chunk, f"the server answered {what}"
                      + (f": {text!r}" if text else ""), _status_fix(code))
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    shape = data.get("resultType") if isinstance(data, dict) else None
    if body.get("status") != "success" or shape != "matrix" or not isinstance(result, list):
        raise _failed(request, chunk, "the answer is not a range query's matrix (status "
                      f"{body.get('status')!r}, resultType {shape!r})",
                      "check that --prometheus-url is a Prometheus server (or one that "
                      "speaks its HTTP API) and that --query is an instant vector expression")
    warnings = body.get("warnings")
    return result, [str(w) for w in warnings] if isinstance(warnings, list) else []


_SLOW_FIX = ("pull a shorter range per request with --option max_points=N (e.g. 2000), give "
             "the query more time with --option timeout=5m, use a coarser --step, or "
             "aggregate in the query (sum by (namespace) (...))")


def _error_fix(kind: str, code: int) -> str:
    """How to fix a Prometheus ``errorType``."""
    if kind in ("timeout", "canceled") or code == 503:
        return _SLOW_FIX
    if kind == "execution" or code == 422:
        return ("fix the PromQL expression (try it in the Prometheus UI), or aggregate it so "
                "that it returns fewer series")
    if "resolution" in kind or kind == "bad_data":
        return ("check the PromQL syntax of --query; for 'exceeded maximum resolution', a "
                "server in front of Prometheus allows fewer points: lower --option max_points")
    return _status_fix(code)


def _status_fix(code: int) -> str:
    """How to fix an HTTP error without a Prometheus error body."""
    if code in (401, 403):
        return _TOKEN_FIX
    if code == 404:
        return ("give the server's base URL as --prometheus-url, e.g. http://prometheus:9090 "
                f"(PRISM appends {_ENDPOINT})")
    if code >= 500:
        return "the server failed: try again later, or ask its operators"
    return ("check that --prometheus-url is a Prometheus server (or one that speaks its HTTP "
            "API)")


def _failed(request: RangeQuery, chunk: Chunk, what: str, fix: str) -> IngestError:
    return IngestError(f"{chunk.describe()} of query {_short(request.query)!r}: {what}; "
                       "nothing was stored", path=request.shown_endpoint, fix=fix)


@dataclass
class _Merged:
    """The results of the chunks, one per label set, values in time order."""

    results: dict[str, dict[str, object]] = field(default_factory=dict)
    last_ms: dict[str, int] = field(default_factory=dict)
    other: list[object] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    samples: int = 0  # kept so far, all series

    def add(self, result: list[object]) -> None:
        """Append one chunk's results (the chunks come in time order)."""
        for item in result:
            metric = item.get("metric") if isinstance(item, dict) else None
            values = item.get("values") if isinstance(item, dict) else None
            if not isinstance(metric, dict) or not isinstance(values, list):
                self.other.append(item)  # the adapter names what is wrong with it
                continue
            key = json.dumps(metric, sort_keys=True)
            merged = self.results.setdefault(key, {"metric": metric, "values": []})
            out = merged["values"]
            assert isinstance(out, list)
            last = self.last_ms.get(key)
            for sample in values:
                ms = _sample_ms(sample)
                if ms is not None:
                    if last is not None and ms <= last:
                        continue  # a point a chunk before held already
                    last = ms
                out.append(sample)
                self.samples += 1
            if last is not None:
                self.last_ms[key] = last

    def body(self) -> dict[str, object]:
        body: dict[str, object] = {"status": "success", "data": {
            "resultType": "matrix", "result": [*self.results.values(), *self.other]}}
        if self.warnings:
            body["warnings"] = list(dict.fromkeys(self.warnings))
        return body


def _drop_stored(store: Store, request: RangeQuery, body: Mapping[str, object],
                 options: IngestOptions) -> tuple[int, int]:
    """Drop from ``body`` the samples whose series and timestamp the store holds already.

    Results keep their place (with fewer or no values): the adapter picks the scope label
    from all of them, so the names do not change. Returns ``(samples, dropped)``.
    """
    data = body["data"]
    assert isinstance(data, dict)
    result = data["result"]
    assert isinstance(result, list)
    ids = series_ids(result, options)
    total = sum(len(item["values"]) for item in result
                if isinstance(item, dict) and isinstance(item.get("values"), list))
    wanted = sorted({i for i in ids if i is not None})
    if not wanted:
        return total, 0
    rows = store.fetch_all(
        """SELECT series_id, list(epoch_ms(ts)) FROM samples
           WHERE list_contains(?, series_id) AND ts BETWEEN ? AND ? GROUP BY series_id""",
        [wanted, _naive(request.start_ms), _naive(request.end_ms)])
    stored = {sid: set(times) for sid, times in rows}
    dropped = 0
    for item, sid in zip(result, ids, strict=True):
        have = stored.get(sid) if sid is not None else None
        if not have or not isinstance(item, dict) or not isinstance(item.get("values"), list):
            continue
        values = item["values"]
        keep = [s for s in values if _sample_ms(s) not in have]
        dropped += len(values) - len(keep)
        item["values"] = keep
    return total, dropped


def _sample_ms(sample: object) -> int | None:
    """A ``[unix_seconds, "value"]`` pair's time in milliseconds (as the adapter rounds it),
    ``None`` for anything else (the adapter reports it)."""
    if not isinstance(sample, list) or len(sample) != 2:
        return None
    stamp = sample[0]
    if isinstance(stamp, bool) or not isinstance(stamp, int | float | str):
        return None
    try:
        seconds = float(stamp)
    except ValueError:
        return None
    return round(seconds * 1000) if math.isfinite(seconds) else None


def _time_ms(text: str, name: str, now: pd.Timestamp) -> int:
    """``--start``/``--end`` in Unix milliseconds.

    Raises:
        ConfigError: for text that is not a time, or a time PRISM cannot store.
    """
    value = text.strip()
    when: pd.Timestamp | None = None
    if value.lower() == "now":
        when = now
    elif value.lower().startswith("now-"):
        when = now - parse_duration(value[4:])
    else:
        try:
            when = _parse_time(value)
        except (ValueError, OverflowError, pd.errors.OutOfBoundsDatetime):
            when = None
    if when is None or pd.isna(when):
        raise ConfigError(f"--{name} {text!r} is not a time; write e.g. 2026-01-05T00:00:00Z, "
                          "Unix seconds (1767571200), now or now-2d")
    if not EARLIEST_TS <= when < LATEST_TS:
        raise ConfigError(f"--{name} {text!r} is out of range (PRISM takes years "
                          f"{EARLIEST_TS.year}..{LATEST_TS.year - 1})")
    return int(when.value // 1_000_000)


def _parse_time(value: str) -> pd.Timestamp:
    """Unix seconds, or an ISO 8601 time (UTC unless it has an offset), as a naive UTC time.

    Raises:
        ValueError: for text that is neither (or an out of bounds time).
    """
    try:
        seconds = float(value)
    except ValueError:
        parsed = pd.Timestamp(value)
        return parsed.tz_convert("UTC").tz_localize(None) if parsed.tzinfo else parsed
    return pd.Timestamp(round(seconds * 1000), unit="ms")


def _seconds(ms: int) -> str:
    """Milliseconds as the seconds Prometheus reads: ``1767600000`` or ``1767600000.5``."""
    whole, frac = divmod(ms, 1000)
    return str(whole) if not frac else f"{whole}.{frac:03d}".rstrip("0")


def _utc(ms: int) -> str:
    stamp = pd.Timestamp(ms, unit="ms")
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def _naive(ms: int) -> object:
    return pd.Timestamp(ms, unit="ms").to_pydatetime()


def _without_credentials(url: str) -> str:
    """``url`` without the ``user:password@`` part."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _hide(request: RangeQuery, text: str) -> str:
    """``text`` with the token and the URL's credentials taken out."""
    if request.token:
        text = text.replace(request.token, "***")
    return text.replace(request.url, _without_credentials(request.url))


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_pull_options(options: IngestOptions) -> None:
    """Refuse ``--option`` keys the pulled body's adapter does not read, and bad values.

    Raises:
        ConfigError: naming the unknown keys and the ones a pull takes.
    """
    adapter = get_adapter(FORMAT)
    unknown = sorted(set(options.extra) - set(adapter.option_keys))
    if unknown:
        takes = ", ".join((*adapter.option_keys, *PULL_OPTION_KEYS))
        raise ConfigError(f"--option {', '.join(unknown)}: a Prometheus pull does not read "
                          f"{'it' if len(unknown) == 1 else 'them'} (its options: {takes})")
    adapter.check_options(options)
