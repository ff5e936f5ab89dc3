"""Tests of the REST API, its forecast serving core and its client."""
