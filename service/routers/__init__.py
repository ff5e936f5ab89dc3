"""The API's routers: each route parses a schema, calls one ``prism.services`` function and
returns a schema."""
