"""The catalogue of public GPU-cluster traces, and their verified download.

The catalogue is ``data/catalogue.json`` (packaged with the wheel): one entry per file, with its
origin, licence, citation, SHA-256 where it is known, and the ``prism ingest`` options that read
it. :func:`download` fetches a file into the cache (``PRISM_CACHE_DIR``), checks its checksum
and says which ``prism ingest`` command to run next::

    result = download("helios-earth-vc6YE")
    result.ingest_command
    # 'prism ingest ~/.cache/prism/helios-earth-vc6YE/earth_vc6YE_1min.csv --format helios-vc ...'

``PRISM_CATALOGUE_URL`` (or ``base_url=``) replaces every origin with a mirror that serves each
file as ``<base_url>/<filename>``.
"""

from __future__ import annotations

import difflib
import hashlib
import http.client
import json
import logging
import os
import shlex
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prism import __version__
from prism.config import get_settings
from prism.errors import ConfigError, PrismError

logger = logging.getLogger(__name__)

#: The ``prism ingest --format`` names a catalogue entry may name (``prism.ingest`` registers
#: the adapters; importing it here would pull pandas and pyarrow into ``prism datasets list``).
INGEST_FORMATS = frozenset({
    "helios-vc", "philly-nodes", "helios-jobs", "alibaba-pods", "alibaba-pai", "slurm-sacct",
    "prometheus", "jobs-csv", "long-csv", "wide-csv", "capacity-csv", "node-list",
})

_CHUNK = 1 << 20
_SHA256 = r"^[0-9a-f]{64}$"
_SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

Progress = Callable[[int, int | None], None]


class DownloadError(PrismError):
    """A catalogue file could not be fetched, or what was fetched is not the catalogued file."""


class IngestArgs(BaseModel):
    """The ``prism ingest`` options that read one catalogue file (see ``prism ingest --help``).

    Attributes:
        cluster, scope, tz, origin, time_col: ``--cluster``, ``--scope``, ``--tz``, ``--origin``,
            ``--time-col``.
        map: canonical field -> column in the file (``--map FIELD=COLUMN``).
        option: adapter-specific settings (``--option KEY=VALUE``).
        on_error: ``--on-error`` (``skip`` keeps the good rows of a file with known bad ones).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str | None = None
    scope: str | None = None
    tz: str | None = None
    origin: str | None = None
    time_col: str | None = None
    map: dict[str, str] = Field(default_factory=dict)
    option: dict[str, str] = Field(default_factory=dict)
    on_error: Literal["fail", "skip"] | None = None

    def cli_args(self) -> list[str]:
        """These options as ``prism ingest`` arguments, in a stable order."""
        args: list[str] = []
        for flag, value in (("--cluster", self.cluster), ("--scope", self.scope),
                            ("--tz", self.tz), ("--origin", self.origin),
                            ("--time-col", self.time_col)):
            if value is not None:
                args += [flag, value]
        for field, column in self.map.items():
            args += ["--map", f"{field}={column}"]
        for key, value in self.option.items():
            args += ["--option", f"{key}={value}"]
        if self.on_error is not None:
            args += ["--on-error", self.on_error]
        return args


class Dataset(BaseModel):
    """One catalogue entry: a public trace file, where it comes from and how PRISM reads it.

    Attributes:
        name: catalogue id (``helios-earth-vc6YE``); also the cache folder's name.
        title: one line on what the file holds.
        homepage: the repository or page that publishes it.
        origin_url: the original raw download URL.
        licence: its licence or terms of use.
        citation: the paper to cite.
        format: the ``prism ingest --format`` that reads it; ``None`` where no PRISM format
            does yet (download only).
        ingest_options: the other ``prism ingest`` options it needs.
        filename: the name it is saved under, and its name on a mirror.
        sha256: SHA-256 of the downloaded file; ``None`` where it is not known, in which case
            :func:`download` needs ``verify=False``.
        size: its size in bytes, where known.
        member: for an archive (zip, tar), the file inside it that ``prism ingest`` reads;
            matched exactly or as the end of a member's path (``Earth/cluster_log.csv``).
        member_sha256: SHA-256 of that member, where published.
        checksum_source: where ``sha256`` comes from.
        note: caveats (renamed or recompressed copies, known gaps, how the trace is sampled).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_SAFE_NAME)
    title: str
    homepage: str
    origin_url: str
    licence: str = Field(min_length=1)
    citation: str = Field(min_length=1)
    format: str | None
    ingest_options: IngestArgs = Field(default_factory=IngestArgs)
    filename: str = Field(pattern=_SAFE_NAME)
    sha256: str | None = Field(default=None, pattern=_SHA256)
    size: int | None = Field(default=None, ge=0)
    member: str | None = None
    member_sha256: str | None = Field(default=None, pattern=_SHA256)
    checksum_source: str | None = None
    note: str | None = None

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str | None) -> str | None:
        if value is not None and value not in INGEST_FORMATS:
            raise ValueError(f"unknown format {value!r}; use one of {sorted(INGEST_FORMATS)}")
        return value

    @field_validator("origin_url", "homepage")
    @classmethod
    def _https(cls, value: str) -> str:
        if urllib.parse.urlsplit(value).scheme not in ("https", "http"):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @field_validator("member")
    @classmethod
    def _relative_member(cls, value: str | None) -> str | None:
        if value is not None:
            path = PurePosixPath(value)
            if path.is_absolute() or ".." in path.parts or not path.name:
                raise ValueError(f"member {value!r} must be a relative path inside the archive")
        return value


@dataclass(frozen=True)
class DownloadResult:
    """What :func:`download` did.

    Attributes:
        path: the downloaded file in the cache.
        sha256: its SHA-256.
        cached: True when the file was already in the cache and nothing was fetched.
        ingest_command: the ``prism ingest`` command that reads it (``None`` for a file no
            PRISM format reads yet).
        ingest_path: the file that command reads: ``path``, or the member extracted from it.
        url: where it was (or would have been) fetched from.
        verified: True when ``sha256`` matched the catalogue.
    """

    path: Path
    sha256: str
    cached: bool
    ingest_command: str | None
    ingest_path: Path
    url: str
    verified: bool


# --------------------------------------------------------------------------- catalogue


@lru_cache(maxsize=1)
def _catalogue() -> tuple[Dataset, ...]:
    source = resources.files("prism") / "catalogue.json"
    try:
        document = json.loads(source.read_text(encoding="utf-8"))
        entries = tuple(Dataset.model_validate(entry) for entry in document["datasets"])
    except (OSError, KeyError, TypeError, json.JSONDecodeError, ValidationError) as exc:
        raise ConfigError(f"the dataset catalogue {source} is unreadable: {exc}") from exc
    names = [d.name for d in entries]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"the dataset catalogue {source} repeats the names {duplicates}")
    return entries


def list_datasets() -> list[Dataset]:
    """All catalogue entries, in catalogue order.

    Raises:
        ConfigError: if the packaged catalogue is unreadable.
    """
    return list(_catalogue())


def get_dataset(name: str) -> Dataset:
    """The catalogue entry called ``name``.

    Raises:
        ConfigError: for an unknown name, listing the closest ones.
    """
    by_name = {d.name: d for d in _catalogue()}
    if name in by_name:
        return by_name[name]
    folded = {n.lower(): n for n in by_name}
    similar = difflib.get_close_matches(name.lower(), folded, n=3, cutoff=0.6)
    containing = [n for n in folded if name.lower() in n] if name else []
    close = [folded[n] for n in dict.fromkeys([*similar, *containing])][:5]
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    raise ConfigError(
        f"unknown dataset {name!r}; {hint}`prism datasets list` shows all {len(by_name)}"
    )


# --------------------------------------------------------------------------- download


def download(
    dataset: str | Dataset,
    *,
    cache_dir: Path | None = None,
    base_url: str | None = None,
    verify: bool = True,
    progress: Progress | None = None,
    timeout: float = 60,
) -> DownloadResult:
    """Fetch a catalogue file into the cache, check it, and say how to ingest it.

    The file lands in ``cache_dir/<name>/<filename>`` through a temporary file and an atomic
    rename, so an interrupted download never leaves a partial file under the final name. A file
    already there whose checksum matches is kept (``cached=True``) and nothing is fetched.

    Args:
        dataset: a catalogue name, or a :class:`Dataset` (an entry not in the catalogue).
        cache_dir: the cache folder; default ``Settings.cache_dir`` (``PRISM_CACHE_DIR``).
        base_url: a mirror serving ``<base_url>/<filename>``; default
            ``Settings.catalogue_url`` (``PRISM_CATALOGUE_URL``), else the entry's origin.
        verify: require the catalogue checksum to match. ``False`` (``--no-verify``) keeps a
            file whose checksum is unknown or different, logging a warning.
        progress: called as ``progress(bytes_done, bytes_total)`` while fetching; the total is
            ``None`` when neither the server nor the catalogue says it.
        timeout: seconds to wait for the server to connect or send more data.

    Returns:
        The file's path and checksum, whether it came from the cache, and the ``prism ingest``
        command to run next.

    Raises:
        ConfigError: ``verify`` is set but the catalogue has no checksum for the file, or the
            name is unknown.
        DownloadError: the URL failed (unreachable, HTTP error, timeout, cut short), the
            checksum differs (the file is deleted), or the archive lacks its member.
    """
    entry = get_dataset(dataset) if isinstance(dataset, str) else dataset
    if verify and entry.sha256 is None:
        raise ConfigError(
            f"the catalogue has no checksum for dataset {entry.name!r} ({entry.origin_url}), "
            "so its download cannot be verified. Download it unverified with "
            f"`prism datasets download {entry.name} --no-verify` (download(..., verify=False)); "
            "the SHA-256 of what arrives is reported so that you can check it against the "
            "publisher"
        )
    if cache_dir is None or base_url is None:
        settings = get_settings()
        cache_dir = settings.cache_dir if cache_dir is None else cache_dir
        base_url = settings.catalogue_url if base_url is None else base_url
    url = _source_url(entry, base_url)
    folder = Path(cache_dir).expanduser() / entry.name
    target = folder / entry.filename

    digest = _cached_digest(entry, target)
    cached = digest is not None
    if digest is None:
        folder.mkdir(parents=True, exist_ok=True)
        digest = _fetch(entry, url, target, verify=verify, progress=progress, timeout=timeout)
    verified = entry.sha256 is not None and digest == entry.sha256
    ingest_path = _extract_member(entry, target, refresh=not cached) if entry.member else target
    return DownloadResult(
        path=target, sha256=digest, cached=cached,
        ingest_command=ingest_command(entry, ingest_path), ingest_path=ingest_path, url=url,
        verified=verified,
    )


def ingest_command(dataset: Dataset, path: Path) -> str | None:
    """The shell command that ingests ``path`` as ``dataset`` (``None`` without a format)."""
    if dataset.format is None:
        return None
    argv = ["prism", "ingest", str(path), "--format", dataset.format,
            *dataset.ingest_options.cli_args()]
    return shlex.join(argv)


def _source_url(entry: Dataset, base_url: str | None) -> str:
    if not base_url:
        return entry.origin_url
    return f"{base_url.rstrip('/')}/{urllib.parse.quote(entry.filename)}"


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _cached_digest(entry: Dataset, target: Path) -> str | None:
    """The checksum of a usable cached copy of ``entry``, or ``None`` to fetch it again."""
    if not target.is_file():
        return None
    if entry.sha256 is None:
        # Only reached with verify=False (download refuses otherwise): an earlier unverified
        # download, complete because it was renamed into place.
        logger.warning("using the unverified cached %s (no catalogue checksum)", target)
        return _sha256_of(target)
    if entry.size is not None and target.stat().st_size != entry.size:
        logger.info("cached %s has the wrong size; fetching it again", target)
        return None
    digest = _sha256_of(target)
    if digest != entry.sha256:
        logger.info("cached %s does not match the catalogue checksum; fetching it again", target)
        return None
    return digest


#: Bytes a download may run past the catalogue's size before it is stopped.
_SIZE_MARGIN = 64 * 1024


def _fetch(
    entry: Dataset, url: str, target: Path, *, verify: bool, progress: Progress | None,
    timeout: float,
) -> str:
    """Stream ``url`` into ``target`` (atomically) and return its SHA-256."""
    mirror_hint = (
        "check the network and retry, or set PRISM_CATALOGUE_URL to a mirror that serves "
        f"<mirror>/{entry.filename}"
    )
    request = urllib.request.Request(url, headers={"User-Agent": f"prism/{__version__}"})
    digest = hashlib.sha256()
    with _temporary_file(target) as (handle, temporary):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                announced = _content_length(response.headers.get("Content-Length"))
                total = announced if announced is not None else entry.size
                done = 0
                if progress is not None:
                    progress(done, total)
                cap = None if entry.size is None else entry.size + _SIZE_MARGIN
                while chunk := response.read(_CHUNK):
                    done += len(chunk)
                    if cap is not None and done > cap:
                        raise DownloadError(
                            f"downloading dataset {entry.name!r} stopped: {url} sent more "
                            f"than the catalogue's {entry.size:,} bytes (a wrong or hostile "
                            f"file; nothing kept); {mirror_hint}")
                    handle.write(chunk)
                    digest.update(chunk)
                    if progress is not None:
                        progress(done, total)
        except urllib.error.HTTPError as exc:
            raise DownloadError(
                f"downloading dataset {entry.name!r} failed: {url} answered HTTP {exc.code} "
                f"{exc.reason}; {mirror_hint}"
            ) from exc
        except urllib.error.URLError as exc:
            raise DownloadError(
                f"downloading dataset {entry.name!r} failed: cannot reach {url} ({exc.reason}); "
                f"{mirror_hint}"
            ) from exc
        except TimeoutError as exc:
            raise DownloadError(
                f"downloading dataset {entry.name!r} failed: {url} sent nothing for {timeout:g} s;"
                f" retry with a longer timeout, or {mirror_hint}"
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise DownloadError(
                f"downloading dataset {entry.name!r} failed: reading {url} broke off ({exc!r}); "
                f"{mirror_hint}"
            ) from exc
        if announced is not None and done != announced:
            raise DownloadError(
                f"downloading dataset {entry.name!r} failed: {url} sent {done} of {announced} "
                f"bytes; {mirror_hint}"
            )
        got = digest.hexdigest()
        if entry.sha256 is not None and got != entry.sha256:
            if verify:
                raise DownloadError(
                    f"checksum mismatch for dataset {entry.name!r} from {url}: expected sha256 "
                    f"{entry.sha256}, got {got} ({done} bytes). The file was deleted. The origin "
                    "may have changed or the mirror serves another file: retry, point "
                    "PRISM_CATALOGUE_URL at a mirror of the catalogued file, or keep this one "
                    "unchecked with --no-verify"
                )
            logger.warning("keeping %s although its sha256 %s differs from the catalogue's %s "
                           "(--no-verify)", target, got, entry.sha256)
        elif entry.sha256 is None:
            logger.warning("%s has no catalogue checksum; kept unverified with sha256 %s",
                           target, got)
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    logger.info("downloaded %s (%d bytes) to %s", url, done, target)
    return got


@contextmanager
def _temporary_file(target: Path) -> Iterator[tuple[IO[bytes], Path]]:
    """A temporary file next to ``target``, removed unless it was renamed onto ``target``."""
    handle = tempfile.NamedTemporaryFile(
        dir=target.parent, prefix=f".{target.name}.", suffix=".part", delete=False
    )
    temporary = Path(handle.name)
    try:
        yield handle, temporary
    finally:
        handle.close()
        temporary.unlink(missing_ok=True)


def _content_length(header: str | None) -> int | None:
    if header is not None and header.strip().isdigit():
        return int(header)
    return None


def _extract_member(entry: Dataset, archive: Path, *, refresh: bool) -> Path:
    """Extract ``entry.member`` from ``archive`` next to it (kept if already there)."""
    assert entry.member is not None
    out = archive.parent / PurePosixPath(entry.member).name
    if out.is_file() and not refresh:
        return out
    try:
        with _open_member(entry, archive) as source, _temporary_file(out) as (handle, temporary):
            digest = hashlib.sha256()
            while chunk := source.read(_CHUNK):
                handle.write(chunk)
                digest.update(chunk)
            got = digest.hexdigest()
            if entry.member_sha256 is not None and got != entry.member_sha256:
                raise DownloadError(
                    f"{entry.member} in {archive} has sha256 {got}, not the published "
                    f"{entry.member_sha256}; delete {archive.parent} and download again"
                )
            handle.close()
            os.chmod(temporary, 0o644)
            os.replace(temporary, out)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise DownloadError(
            f"{archive} is not a readable archive ({exc}); delete it and download again"
        ) from exc
    return out


@contextmanager
def _open_member(entry: Dataset, archive: Path) -> Iterator[IO[bytes]]:
    assert entry.member is not None
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as bundle:
            names = [i.filename for i in bundle.infolist() if not i.is_dir()]
            with bundle.open(_pick_member(entry, archive, names)) as source:
                yield source
        return
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as bundle:
            files = {m.name: m for m in bundle.getmembers() if m.isfile()}
            stream = bundle.extractfile(files[_pick_member(entry, archive, list(files))])
            assert stream is not None  # a regular file always has a stream
            with stream:
                yield stream
        return
    raise DownloadError(
        f"{archive} should be a zip or tar archive holding {entry.member}, but is neither; "
        "delete it and download again"
    )


def _pick_member(entry: Dataset, archive: Path, names: list[str]) -> str:
    """The archive member that is ``entry.member``: the same path, or one ending with it."""
    assert entry.member is not None
    wanted = PurePosixPath(entry.member).parts
    normal = {name: PurePosixPath(name.removeprefix("./")).parts for name in names}
    exact = [n for n, parts in normal.items() if parts == wanted]
    suffix = [n for n, parts in normal.items() if parts[-len(wanted):] == wanted]
    found = exact or suffix
    if len(found) == 1:
        return found[0]
    shown = ", ".join(sorted(names)[:10]) + (" ..." if len(names) > 10 else "")
    what = "several members match" if found else "no member matches"
    raise DownloadError(
        f"{archive}: {what} {entry.member!r} (members: {shown}); the archive's layout changed, "
        "so extract the file by hand and run prism ingest on it"
    )


__all__ = [
    "INGEST_FORMATS",
    "Dataset",
    "DownloadError",
    "DownloadResult",
    "IngestArgs",
    "download",
    "get_dataset",
    "ingest_command",
    "list_datasets",
]
