"""Fixtures shared by the integration tests (the test helpers themselves live in tests/helpers/)."""
from tests.helpers.otlp import collector, start_collector  # noqa: F401 - the collector fixtures
