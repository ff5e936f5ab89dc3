"""The ``prism`` command line (``prism = "prism.cli:main"``).

- :mod:`prism.cli.app`: the parser and one function per command; each opens the store, calls
  one use case of :mod:`prism.usecases` and prints.
- :mod:`prism.cli.remote`: the same commands through the REST API, for when ``prism serve``
  holds the store (DuckDB lets one process write a file): found from the file the server
  writes beside the store (:mod:`prism.remote`), or ``PRISM_API_URL``.
"""

from prism.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
