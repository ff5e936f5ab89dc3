"""The CLI's commands through the REST API, for when ``prism serve`` holds the store.

DuckDB lets one process write a database file, so while a server runs on a store the CLI
cannot open it. :func:`server_for` finds the server (:func:`prism.remote.find_server`: the
file ``prism serve`` writes beside the store, or ``PRISM_API_URL``); each ``run_*`` function
here does what its local twin in :mod:`prism.cli.app` does, by calling the server's API with
:class:`~prism.client.PrismClient` (the use cases run inside the server, on the same code),
and prints the same way. Commands without an API twin (``backtest``, ``decompose --plot``,
batch runs) say how to proceed instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pandas as pd

from prism.cli.common import err, messages, out, pairs, print_forecast, quantile_list, table
from prism.errors import ConfigError

if TYPE_CHECKING:
    from prism.client import PrismClient
    from prism.remote import ServerInfo

#: Seconds one API call may take (forecasts may wait for a fit on the server).
TIMEOUT_S = 120.0


def server_for(args: argparse.Namespace) -> ServerInfo | None:
    """The server that holds ``args.db`` (or ``PRISM_API_URL``), announced on stderr; None
    when the CLI can open the store itself."""
    from prism.remote import find_server

    info = find_server(args.db)
    if info is not None:
        held = (f"prism serve (pid {info.pid}) holds {args.db}" if info.source == "file"
                else "PRISM_API_URL is set")
        err.print(f"{held}: going through its API at {info.url}", markup=False)
    return info


def refuse(args: argparse.Namespace, info: ServerInfo, what: str) -> NoReturn:
    """Say why a command cannot run beside the server, and what to do instead."""
    raise ConfigError(
        f"`prism {what}` needs the store itself, and the server at {info.url} holds "
        f"{args.db}: stop the server (Ctrl-C), or work on the data the API gives (e.g. "
        "`prism series export --output panel.parquet` goes through it)")


def _client(info: ServerInfo) -> PrismClient:
    from prism.client import PrismClient

    return PrismClient(info.url, timeout=TIMEOUT_S)


def run_series_list(args: argparse.Namespace, info: ServerInfo) -> int:
    with _client(info) as client:
        rows = client.series(cluster=args.cluster, scope=args.scope, metric=args.metric)
    frame = pd.DataFrame(rows)
    if args.json:
        out.print_json(json.dumps(rows))
        return 0
    if frame.empty:
        out.print("no series (ingest something first: prism ingest PATH --format FORMAT)")
        return 0
    cols = [c for c in ("series_id", "freq", "first_ts", "last_ts", "n_points", "n_filled",
                        "unit", "source") if c in frame.columns]
    out.print(table(frame[cols], title=f"{len(frame)} series"))
    return 0


def run_series_show(args: argparse.Namespace, info: ServerInfo) -> int:
    with _client(info) as client:
        points = client.series_values(args.series_id, start=args.start, end=args.end,
                                      tail=args.tail)
    if args.json:
        out.print_json(json.dumps(points))
    else:
        out.print(table(pd.DataFrame(points, columns=["ts", "value", "filled"]),
                        title=args.series_id))
    return 0


def run_series_export(args: argparse.Namespace, info: ServerInfo) -> int:
    from prism.cli.common import STDOUT, write_stdout
    from prism.usecases.files import output_format, output_path

    suffixes = (".csv", ".parquet")
    fmt = output_format(args.output, args.format, suffixes)
    path = None if args.output == STDOUT else output_path(args.output, suffixes)
    with _client(info) as client:
        data = client.export_panel(series_ids=args.series, format=fmt)
    if path is None:
        write_stdout(data)
    else:
        path.write_bytes(data)
    messages(args.output).print(f"wrote {len(data):,} bytes of the panel to "
                                f"{path or 'stdout'} (from {info.url})", markup=False)
    return 0


def run_ingest(args: argparse.Namespace, info: ServerInfo) -> int:
    if getattr(args, "prometheus_url", None):
        raise ConfigError(f"a server ({info.url}) holds the store: stop it to pull from "
                          "Prometheus, or pull into another --db")
    options: dict[str, object] = {
        "cluster": args.cluster, "scope": args.scope, "tz": args.tz, "origin": args.origin,
        "time_col": args.time_col, "freq": args.freq, "fill": args.fill,
        "on_error": args.on_error, "map": args.map, "option": args.option}
    from prism.cli.stdin import spooled

    rows = rejected = 0
    clusters: list[str] = []
    with spooled(args.paths) as spool, _client(info) as client:
        for name in spool.paths:
            path = Path(name)
            if not path.is_file():
                raise ConfigError(f"{path}: no such file")
            result = client.ingest_file(path, format=args.format, **options)
            rows += result.rows
            rejected += result.rejected
            what = "".join(f" ({f['note']})" for f in result.files if f.get("note"))
            note = "unchanged (already ingested)" if result.status == "unchanged" else (
                f"{result.rows:,} rows{what}" + (f", {result.rejected:,} rejected"
                                                 if result.rejected else ""))
            out.print(f"{spool.name(str(path))}: {note}", markup=False)
            for text in result.notes:
                err.print(f"note: {text}", markup=False)
            clusters = sorted({*clusters, *result.clusters})
    out.print(f"{rows:,} rows added, {rejected:,} rejected; "
              f"{', '.join(clusters) or 'no changed cluster'} (through {info.url})")
    return 0


def run_forecast(args: argparse.Namespace, info: ServerInfo) -> int:
    if (args.all or not args.series_ids or args.save or args.from_model or args.reconcile
            or getattr(args, "cluster", None)):
        raise ConfigError(
            "through the server, `prism forecast` takes series ids and serves them from the "
            "server's models (no --all, --cluster, --save, --from-model or --reconcile): name "
            "the series, or stop the server")
    with _client(info) as client:
        forecasts = client.forecast_many(
            args.series_ids, horizon=args.horizon,
            quantiles=quantile_list(args.quantiles), model=args.model,
            params=dict(pairs(args.param, "--param")))
    for note in dict.fromkeys(f"{f.series_id}: {f.note}" for f in forecasts if f.note):
        err.print(f"note: {note}", markup=False)  # as the local forecast says it
    print_forecast(pd.concat([f.to_frame() for f in forecasts], ignore_index=True),
                   args.output, source=info.url, fmt=args.format)
    return 0


def run_refit(args: argparse.Namespace, info: ServerInfo) -> int:
    if not args.series_ids and not args.all:
        raise ConfigError("name one or more series ids, or pass --all")
    with _client(info) as client:
        queued = client.refit(None if args.all else args.series_ids, model=args.model,
                              params=dict(pairs(args.param, "--param")))
    out.print(f"the server refits {queued['refits']} model(s) and fits {queued['fits']} "
              "series in the background; each new model is saved to its registry")
    return 0


def run_capacity(args: argparse.Namespace, info: ServerInfo) -> int:
    if (args.capacity or args.reservations or args.output or args.growth != 1.0 or args.param
            or getattr(args, "refit", False) or getattr(args, "models_dir", None)
            or getattr(args, "procurement", None) or getattr(args, "pool", False)):
        raise ConfigError("through the server, `prism capacity` takes --scope, --horizon, "
                          "--quantile, --max-unmet, --no-record, --no-day-floor and --model "
                          "(the server's own saved models); stop the server for the other "
                          "options (the procurement plan: GET /v1/capacity?procurement=30d;"
                          " the shared pool: GET /v1/capacity?pool=true)")
    asked = dict(scope=args.scope, horizon=args.horizon, quantile=args.quantile,
                 model=args.model, max_unmet=getattr(args, "max_unmet", None),
                 record=not getattr(args, "no_record", False),
                 day_floor=not getattr(args, "no_day_floor", False))
    with _client(info) as client:
        if args.json:  # GET /v1/capacity's JSON as it came: every field the local one has
            out.print_json(json.dumps(client.capacity_body(args.cluster, **asked)))
            return 0
        rows, moves = client.capacity_plan(args.cluster, **asked)
    frame = pd.DataFrame([vars(r) for r in rows])
    q = f"p{args.quantile * 100:g}"
    cols = ["scope", "in_use_needed", "queue_allowance", "gpus_needed", "capacity", "net_gpus",
            "shortfall_gpu_hours", "queue_risk", "idle_gpu_hours", "recommendation"]
    shown = frame[cols].rename(columns={
        "in_use_needed": f"in use {q}", "queue_allowance": "queue", "gpus_needed": f"needed {q}",
        "net_gpus": "net", "shortfall_gpu_hours": "short GPU-h", "idle_gpu_hours": "idle GPU-h"})
    start, end = rows[0].start, rows[0].end
    out.print(table(shown, title=f"{args.cluster}: {start:%Y-%m-%d %H:%M} to "
                    f"{end:%Y-%m-%d %H:%M} UTC (from {info.url})"))
    if moves:
        out.print("moves between VCs (before anything is added):")
        for move in moves:
            out.print(f"  {move.text}")
    out.print("why:")
    for row in rows:
        out.print(f"  {row.scope}: {row.reason}")
    return 0


def run_report(args: argparse.Namespace, info: ServerInfo) -> int:
    from prism.usecases.files import output_path

    if (args.pdf or args.capacity or args.param or (args.cluster and len(args.cluster) > 1)
            or getattr(args, "refit", False) or getattr(args, "models_dir", None)
            or getattr(args, "max_unmet", None) is not None or getattr(args, "pool", False)):
        raise ConfigError("through the server, `prism report` takes one --cluster, --horizon,"
                          " --quantile, --no-record, --no-day-floor and --model; stop the "
                          "server for the other options")
    path = output_path(args.output, (".html", ".htm"))
    with _client(info) as client:
        page = client.capacity_report(cluster=args.cluster[0] if args.cluster else None,
                                      horizon=args.horizon, quantile=args.quantile,
                                      model=args.model,
                                      record=not getattr(args, "no_record", False),
                                      day_floor=not getattr(args, "no_day_floor", False))
    path.write_text(page, encoding="utf-8")
    out.print(f"wrote {path} (from {info.url})")
    return 0


def run_track_record(args: argparse.Namespace, info: ServerInfo) -> int:
    from prism.cli.planning import print_track_record

    with _client(info) as client:
        data = client.track_record(args.cluster, plans=args.plans)
    if args.json:
        out.print_json(json.dumps(data))  # the server's JSON as it came
    else:
        print_track_record(data)
    return 0


def run_decompose(args: argparse.Namespace, info: ServerInfo) -> int:
    from prism.cli.app import print_decomposition

    if args.plot:
        raise ConfigError(f"a server ({info.url}) holds the store, and --plot draws every "
                          "component, which its API does not send: drop --plot for the tables "
                          "(or --json), or stop the server to draw it")
    with _client(info) as client:
        summary = client.decomposition(args.series_id, top=args.top)
    print_decomposition(summary, args)
    return 0


#: The commands that can go through the API, by the function of their local twin's name.
REMOTE: dict[str, Callable[[argparse.Namespace, ServerInfo], int]] = {
    "_cmd_series_list": run_series_list,
    "_cmd_series_show": run_series_show,
    "_cmd_series_export": run_series_export,
    "_cmd_ingest": run_ingest,
    "_cmd_forecast": run_forecast,
    "_cmd_refit": run_refit,
    "_cmd_capacity": run_capacity,
    "_cmd_report": run_report,
    "_cmd_track_record": run_track_record,
    "_cmd_decompose": run_decompose,
}
#: Commands that need the store itself (they say so while a server holds it).
LOCAL_ONLY = {"_cmd_backtest": "backtest"}
