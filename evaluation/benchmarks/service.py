"""REST API speed over loopback: cached forecasts, ingest, and an on-demand fit.

    python -m evaluation.benchmarks.service [--duration 5] [--series 16] [--days 14]

Starts ``prism serve`` in its own process on a free 127.0.0.1 port (with a bearer token, so
the check is part of every request), on a new store in a temporary folder, then:

1. **ingest over HTTP**: the job trace of ``prism generate`` (one cluster, ``--days`` days) as
   one multipart upload, and JSON records (``long-csv``: 16 batches of 1,000 points, 4 at a
   time);
2. **on-demand fit**: the first forecast of a series with the default model ``prism`` (the
   hybrid, RNN included) and with ``naive``: the time of the request that fits, saves and
   answers;
3. **cached forecast GETs**: ``--series`` series are forecast once (1 day, quantiles 0.5, 0.9,
   0.99), then clients on keep-alive connections repeat those GETs for ``--duration`` seconds
   at concurrency 1, 8 and 32 (an asyncio client that writes raw HTTP/1.1, so that the client
   costs little of the CPU it shares with the server): p50, p99 and requests/s.

Every request is bounded in time and the run stops by itself; traffic goes to 127.0.0.1 only.
Writes ``evaluation/results/service.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "evaluation" / "results"
HOST = "127.0.0.1"
TOKEN = "benchmark-token"
_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _start_server(folder: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PRISM_API_TOKEN": TOKEN, "PRISM_FIT_BUDGET_S": "300"}
    server = subprocess.Popen(
        [sys.executable, "-m", "prism.cli", "--db", str(folder / "prism.duckdb"), "serve",
         "--host", HOST, "--port", str(port), "--models-dir", str(folder / "models")],
        env=env, stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "wb"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://{HOST}:{port}/readyz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if server.poll() is not None:
            raise RuntimeError(f"the server exited: {(folder / 'server.log').read_text()}")
        time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not become ready in 120 s")


def _stop_server(server: subprocess.Popen[bytes]) -> None:
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


async def _client(port: int, paths: list[bytes], stop_at: float, warm_until: float,
                  latencies: list[float], errors: list[str], offset: int) -> int:
    reader, writer = await asyncio.open_connection(HOST, port)
    done, i = 0, offset
    try:
        while True:
            now = time.perf_counter()
            if now >= stop_at:
                break
            writer.write(paths[i % len(paths)])
            i += 1
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            match = _LENGTH.search(head)
            body = await reader.readexactly(int(match.group(1)) if match else 0)
            elapsed = time.perf_counter() - now
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(head.split(b"\r\n", 1)[0].decode() + body[:200].decode())
            elif now >= warm_until:
                latencies.append(elapsed)
                done += 1
    finally:
        writer.close()
    return done


async def _load(port: int, paths: list[bytes], concurrency: int, duration: float
                ) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    warm_until = start + min(0.5, duration / 4)
    stop_at = warm_until + duration
    await asyncio.gather(*(_client(port, paths, stop_at, warm_until, latencies, errors, k)
                           for k in range(concurrency)))
    latencies.sort()
    n = len(latencies)
    return {"concurrency": concurrency, "requests": n, "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "rps": n / duration, "p50_ms": 1000 * latencies[n // 2] if n else None,
            "p99_ms": 1000 * latencies[min(n - 1, int(n * 0.99))] if n else None,
            "max_ms": 1000 * latencies[-1] if n else None}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results."""
    from prism.usecases.catalogue import generate_trace

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per concurrency")
    parser.add_argument("--series", type=int, default=16, help="series in the cached GETs")
    parser.add_argument("--days", type=int, default=14, help="days of the generated trace")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="prism-bench-") as tmp:
        folder = Path(tmp)
        trace = generate_trace(folder / "trace", days=args.days, clusters=1, seed=0)
        port = _free_port()
        server = _start_server(folder, port)
        base = f"http://{HOST}:{port}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        try:
            with httpx.Client(base_url=base, headers=headers, timeout=300) as http:
                # 1. ingest over HTTP
                data = Path(trace.jobs_path).read_bytes()
                clock = time.perf_counter()
                r = http.post("/v1/ingest", params={"format": "jobs-csv"},
                              files={"file": ("jobs.csv", data)})
                r.raise_for_status()
                seconds = time.perf_counter() - clock
                results["ingest_file"] = {"rows": r.json()["rows"], "bytes": len(data),
                                          "seconds": seconds,
                                          "rows_per_s": r.json()["rows"] / seconds}
                http.post("/v1/ingest", params={"format": "capacity-csv"}, files={
                    "file": ("capacity.csv", Path(trace.capacity_path).read_bytes())
                }).raise_for_status()
                results["ingest_records"] = asyncio.run(_ingest_records(base, headers))
                # 2. on-demand fits
                fits = {}
                for model in ("prism", "naive"):
                    clock = time.perf_counter()
                    r = http.get("/v1/forecast", params={
                        "series_id": "cluster-0/all/gpu_demand", "horizon": "1d",
                        "model": model})
                    r.raise_for_status()
                    fits[model] = time.perf_counter() - clock
                results["on_demand_fit_s"] = fits
                # 3. cached GETs
                listed = http.get("/v1/series", params={"cluster": "cluster-0"}).json()
                ids = [s["series_id"] for s in listed["series"]][: args.series]
                paths = []
                for sid in ids:
                    query = urlencode({"series_id": sid, "horizon": "1d",
                                       "quantiles": "0.5,0.9,0.99", "model": "naive"})
                    http.get(f"/v1/forecast?{query}").raise_for_status()  # fit and cache
                    paths.append(f"GET /v1/forecast?{query} HTTP/1.1\r\nHost: {HOST}\r\n"
                                 f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())
                size = len(http.get(f"/v1/forecast?{query}").content)
            results["response_bytes"] = size
            results["cached_get"] = [asyncio.run(_load(port, paths, c, args.duration))
                                     for c in (1, 8, 32)]
        finally:
            _stop_server(server)
    _print(results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "service.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


async def _ingest_records(base: str, headers: dict[str, str]) -> dict[str, Any]:
    """16 batches of 1,000 long-csv points (one series each), 4 clients at a time."""
    batches = []
    for b in range(16):
        records = [{"series_id": f"bench/s{b:02d}/gpus_in_use",
                    "ts": f"2026-02-{1 + i // 144:02d}T{(i % 144) // 6:02d}:{(i % 6) * 10:02d}",
                    "value": float((i * 7 + b) % 50)} for i in range(1000)]
        batches.append({"records": records})
    gate = asyncio.Semaphore(4)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120) as http:
        async def send(body: dict[str, Any]) -> int:
            async with gate:
                r = await http.post("/v1/ingest", params={"format": "long-csv"}, json=body)
                r.raise_for_status()
                return int(r.json()["rows"])
        clock = time.perf_counter()
        rows = sum(await asyncio.gather(*(send(b) for b in batches)))
        seconds = time.perf_counter() - clock
    return {"rows": rows, "batches": len(batches), "seconds": seconds,
            "rows_per_s": rows / seconds}


def _print(results: dict[str, Any]) -> None:
    f, r = results["ingest_file"], results["ingest_records"]
    print(f"ingest jobs.csv upload: {f['rows']:,} rows ({f['bytes'] / 1e6:.1f} MB) in "
          f"{f['seconds']:.2f} s = {f['rows_per_s']:,.0f} rows/s")
    print(f"ingest JSON records: {r['rows']:,} rows in {r['batches']} batches in "
          f"{r['seconds']:.2f} s = {r['rows_per_s']:,.0f} rows/s")
    for model, seconds in results["on_demand_fit_s"].items():
        print(f"on-demand fit + forecast, {model}: {seconds:.2f} s")
    print(f"cached forecast GET ({results['response_bytes']:,} bytes):")
    print(f"{'concurrency':>11} {'requests':>9} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'max ms':>7} {'errors':>6}")
    for row in results["cached_get"]:
        print(f"{row['concurrency']:>11} {row['requests']:>9} {row['rps']:>8.0f} "
              f"{row['p50_ms'] or 0:>7.2f} {row['p99_ms'] or 0:>7.2f} {row['max_ms'] or 0:>7.1f} "
              f"{row['errors']:>6}")


if __name__ == "__main__":
    sys.exit(main())
