"""Finding the ``prism serve`` that holds a store, so other processes can go through its API.

DuckDB lets one process open a database file for writing; while ``prism serve`` runs on a
store, the CLI, a notebook or a dashboard cannot open the same file. The server therefore
announces itself in a small JSON file beside the store (``<store>.server.json``: its URL,
process id and store path), written when it starts listening and removed when it stops.
:func:`find_server` reads it back (or takes ``PRISM_API_URL``), checks that the process is
alive and that ``/healthz`` answers, and returns the URL to talk to.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prism.errors import ConfigError

logger = logging.getLogger(__name__)

#: The environment variable that names a PRISM API to use instead of the store file.
API_URL_ENV = "PRISM_API_URL"
#: Seconds the health check of an announced server may take.
HEALTH_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ServerInfo:
    """A running PRISM API: where it listens and, when announced, which process serves it."""

    url: str
    pid: int | None = None
    db: str | None = None
    source: str = "file"  # "file" (announced beside the store) or "env" (PRISM_API_URL)


def server_file(db: str | Path) -> Path:
    """The file ``prism serve`` writes beside the store ``db``."""
    path = Path(db).expanduser().resolve()
    return path.with_name(path.name + ".server.json")


def check_exposure(host: str, token: str | None, insecure: bool = False) -> str | None:
    """Whether serving on ``host`` with (or without) ``token`` is allowed; a warning if risky.

    Without a token every ``/v1`` route (ingest included) is open to whoever reaches the port:
    on a loopback address that is this machine's users (a warning); on any other address it is
    the network, so it is refused unless ``insecure`` (``--insecure-no-auth``) says so.

    Raises:
        ConfigError: for a non-loopback host without a token and without ``insecure``.
    """
    if token:
        return None
    loopback = _loopback(host)
    if not loopback and not insecure:
        raise ConfigError(
            f"refusing to serve on {host!r} without a token: anyone who reaches the port could "
            "ingest and read. Set PRISM_API_TOKEN (clients send `Authorization: Bearer "
            "<token>`), serve on 127.0.0.1, or pass --insecure-no-auth on a trusted network")
    where = "every address of this machine" if not loopback else "this machine"
    return (f"warning: no PRISM_API_TOKEN: the API, ingest included, is open to {where}; set "
            "PRISM_API_TOKEN to require a bearer token")


def served_hosts(host: str, configured: list[str]) -> list[str]:
    """The Host headers a server bound to ``host`` answers.

    A server on a loopback address answers only the loopback names unless ``configured``
    (``PRISM_ALLOWED_HOSTS``) says otherwise: a web page that rebinds its own domain to
    127.0.0.1 (DNS rebinding) then gets 400 instead of the data. Any other bind keeps
    ``configured`` (``*``: any host; the token guards it).
    """
    loopback = _loopback(host)
    if configured == ["*"] and loopback:
        return sorted({"127.0.0.1", "localhost", "::1", "[::1]", host})
    return list(configured)


def client_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a server bound to ``host:port`` (a server
    bound to every interface is reached on the loopback)."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


@contextmanager
def announce_server(db: str | Path, url: str) -> Iterator[Path | None]:
    """Write the server file of ``db`` for the duration of the block (none for ``:memory:``).

    The file is written atomically (a temporary file renamed) and removed on exit, unless
    another server has announced itself there since.
    """
    if str(db) == ":memory:":
        yield None
        return
    path = server_file(db)
    record = {"url": url, "pid": os.getpid(), "db": str(Path(db).expanduser().resolve())}
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    tmp.replace(path)
    try:
        yield path
    finally:
        try:
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass


def serving_process(db: str | Path) -> ServerInfo | None:
    """The live ``prism serve`` process whose server file is beside ``db``, if any (whether
    or not it answers yet: it may be starting); ``PRISM_API_URL`` plays no part."""
    if str(db) == ":memory:":
        return None
    try:
        record = json.loads(server_file(db).read_text(encoding="utf-8"))
        info = ServerInfo(url=str(record["url"]).rstrip("/"), pid=int(record["pid"]),
                          db=str(record.get("db")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if info.pid is None or info.pid == os.getpid() or not _alive(info.pid):
        return None
    return info


def find_server(db: str | Path) -> ServerInfo | None:
    """The PRISM API to use for the store ``db``, if any.

    ``PRISM_API_URL`` wins when set (the caller asked for that server). Otherwise the server
    file beside ``db`` names one; it counts only while its process is alive and ``/healthz``
    answers (a file left by a killed server is ignored and removed).
    """
    env = os.environ.get(API_URL_ENV, "").strip()
    if env:
        return ServerInfo(url=env.rstrip("/"), source="env")
    if str(db) == ":memory:":
        return None
    path = server_file(db)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        info = ServerInfo(url=str(record["url"]).rstrip("/"), pid=int(record["pid"]),
                          db=str(record.get("db")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring the unreadable server file %s (%s)", path, exc)
        return None
    if info.pid is not None and not _alive(info.pid):
        logger.info("the server file %s names process %d, which is gone; removing it",
                    path, info.pid)
        path.unlink(missing_ok=True)
        return None
    if not _healthy(info.url):
        logger.info("the server at %s (from %s) does not answer /healthz", info.url, path)
        return None
    return info


def _loopback(host: str) -> bool:
    """Whether ``host`` is this machine only."""
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/healthz", timeout=HEALTH_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False
