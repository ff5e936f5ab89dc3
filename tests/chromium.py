"""A headless Chromium driven over the DevTools protocol (a websocket), for page tests.

Why this and not ``--dump-dom``/``--screenshot`` runs or Selenium/Playwright: one browser
process answers every question about the same loaded page (DOM values, whether each image
decoded, what was fetched, console messages and exceptions as events, a screenshot), and the
only client needed is the ``websockets`` package the API server already installs; Playwright
and Selenium would download their own browser or driver, which a closed network forbids.

Chromium is Debian's ``chromium`` (``make test`` installs it), started with
``--headless --no-sandbox --disable-gpu`` and no network services of its own.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-default-apps", "--hide-scrollbars", "--mute-audio")


def find() -> str | None:
    """The Chromium binary on PATH, or ``None``."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """``with Chromium() as browser: page = browser.open(url)``."""

    def __init__(self, *, width: int = 1280, height: int = 1600, timeout: float = 60) -> None:
        binary = find()
        if binary is None:
            raise RuntimeError("chromium is not installed (make test installs it: "
                               "apt-get install chromium)")
        self._binary = binary
        self._size = (width, height)
        self._timeout = timeout
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []
        self._dir = tempfile.TemporaryDirectory(prefix="prism-chromium-")
        self._process: subprocess.Popen[bytes] | None = None
        self._ws: ClientConnection | None = None
        self._session = ""

    def __enter__(self) -> Chromium:
        profile = Path(self._dir.name) / "profile"
        self._process = subprocess.Popen(
            [self._binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             f"--window-size={self._size[0]},{self._size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)  # its own group: its helpers are stopped with it
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + self._timeout
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if time.monotonic() > deadline or self._process.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self._ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=None,
                           open_timeout=self._timeout).__enter__()
        target = self._call("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self._call("Target.attachToTarget",
                              {"targetId": target["targetId"], "flatten": True}, session=False)
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self._call(f"{domain}.enable")
        self._call("Emulation.setDeviceMetricsOverride",
                   {"width": self._size[0], "height": self._size[1], "deviceScaleFactor": 1,
                    "mobile": False})
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            # helper processes (renderer, crashpad) can outlive the browser and still write
            # to the profile: stop the whole group before removing it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        for _ in range(50):
            try:
                self._dir.cleanup()
                return
            except OSError:  # a file appeared while the folder was being removed
                time.sleep(0.1)
        shutil.rmtree(self._dir.name, ignore_errors=True)

    # -- protocol ------------------------------------------------------------------------------
    def _call(self, method: str, params: dict[str, Any] | None = None, *,
              session: bool = True) -> dict[str, Any]:
        assert self._ws is not None
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + self._timeout
        while True:
            reply = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self._events.append(reply)

    def _wait_event(self, method: str) -> dict[str, Any]:
        assert self._ws is not None
        for i, event in enumerate(self._events):
            if event["method"] == method:
                return self._events.pop(i)
        deadline = time.monotonic() + self._timeout
        while True:
            event = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if event.get("method") == method:
                return event
            if "method" in event:
                self._events.append(event)

    # -- what tests use ------------------------------------------------------------------------
    def open(self, url: str) -> None:
        """Load ``url`` and wait for its load event (every image decoded or failed)."""
        self._call("Page.navigate", {"url": url})
        self._wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression on the page.

        Raises:
            RuntimeError: when the expression throws.
        """
        result = self._call("Runtime.evaluate", {"expression": expression,
                                                 "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, *, full_page: bool = False) -> bytes:
        """A PNG of the viewport (or of the whole page)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        return base64.b64decode(self._call("Page.captureScreenshot", params)["data"])

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen so far."""
        self.evaluate("0")  # drain the events that arrived
        out = []
        for event in self._events:
            params = event.get("params", {})
            if event["method"] == "Runtime.consoleAPICalled" and params.get("type") in (
                    "error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", "")))
                                    for a in params.get("args", [])))
            elif event["method"] == "Runtime.exceptionThrown":
                out.append(str(params.get("exceptionDetails", {}).get("text", params)))
            elif event["method"] == "Log.entryAdded" and params.get("entry", {}).get(
                    "level") == "error":
                out.append(str(params["entry"].get("text", params)))
        return out


def required() -> bool:
    """Whether a missing Chromium fails the test (CI, ``make test``) instead of skipping."""
    return bool(os.environ.get("CI") or os.environ.get("PRISM_REQUIRE_CHROMIUM"))


def require() -> None:
    """Fail (under ``make test`` and CI) or skip (a bare ``pytest``) when Chromium is missing."""
    if find() is not None:
        return
    if required():
        pytest.fail("chromium is missing: make test installs it (apt-get install chromium)")
    pytest.skip("chromium is not installed: this page test needs a real browser; `make test` "
                "installs it, and `make test SLOW=1` (what CI runs) runs this slow test, where a "
                "missing chromium fails it instead")
