"""The progress callback long use cases take, so the CLI can draw bars and the service log."""

from __future__ import annotations

from collections.abc import Callable

#: ``progress(stage, done, total)``: a stage's name, how much of it is done and its total.
Progress = Callable[[str, int, int], None]
