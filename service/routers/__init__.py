"""The API's routers: each route parses a schema, calls a use case of :mod:`prism.usecases`
(the same function as the CLI) and returns a schema."""
