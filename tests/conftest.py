"""Fixtures shared by the unit tests."""

import pytest
from test_agent_routes import Namespace


@pytest.fixture
def ns():
    """A throwaway network namespace, deleted after the test."""
    namespace = Namespace()
    yield namespace
    namespace.delete()
