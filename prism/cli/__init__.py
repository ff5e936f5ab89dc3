"""The ``prism`` command line (``prism = "prism.cli:main"``).

- :mod:`prism.cli.app`: one function per command; each opens the store, calls one use case
  of :mod:`prism.usecases` and prints. :mod:`prism.cli.parser` is the parser (no heavy
  import: ``prism --help`` stays fast), :mod:`prism.cli.common` what the commands share
  (``--output -``, JSON with UTC times, progress bars), :mod:`prism.cli.stdin` ``ingest -``.
- :mod:`prism.cli.remote`: the same commands through the REST API, for when ``prism serve``
  holds the store (DuckDB lets one process write a file): found from the file the server
  writes beside the store (:mod:`prism.remote`), or ``PRISM_API_URL``.
"""

from prism.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
