"""Fixtures and checks shared by every test.

Tests that need root (namespaces, veths, BPF programs, Open vSwitch, Mininet,
route writes outside loopback) carry the ``root`` marker, per module
(``pytestmark``) or per test; ``pytest -m "not root"`` runs the others as
any user. Nothing skips: a root-marked test run without root fails with the
reason, and a test that uses a fixture declared with
``support.privileges.needs_root`` but lacks the marker fails the collection.
"""

import pytest

from otcp import bpf as otcp_bpf
from support.namespaces import Namespace
from support.privileges import fixture_needs_root, needs_root, running_as_root


@pytest.fixture
@needs_root
def ns():
    """A throwaway network namespace (support.namespaces), deleted after the test."""
    namespace = Namespace()
    yield namespace
    namespace.delete()


@pytest.fixture
def cleanup():
    """Things to stop at the end of a test, whatever happens: each has stop()."""
    items = []
    yield items
    for item in reversed(items):
        item.stop()


@pytest.fixture(scope="session")
def built():
    """The BPF programs, built once (otcp.bpf.build: what is missing or out of date)."""
    otcp_bpf.build()


def unmarked_root_fixtures(item):
    """The fixtures of a test declared as needing root, when the test has no ``root`` marker."""
    if item.get_closest_marker("root") is not None:
        return []
    definitions = getattr(item, "_fixtureinfo", None)
    if definitions is None:
        return []
    return sorted(name for name, fixtures in definitions.name2fixturedefs.items()
                  if name in item.fixturenames and fixtures and fixture_needs_root(fixtures[-1].func))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Refuse to run when a test uses a fixture that needs root without saying so."""
    unmarked = {item.nodeid: fixtures for item in items if (fixtures := unmarked_root_fixtures(item))}
    if unmarked:
        lines = "\n".join(f"  {nodeid}: {', '.join(fixtures)}" for nodeid, fixtures in unmarked.items())
        raise pytest.UsageError(f"tests that use fixtures needing root lack the root marker (add "
                                f"pytestmark = pytest.mark.root or @pytest.mark.root):\n{lines}")


def pytest_runtest_setup(item):
    """Fail, not skip, a root-marked test when this process is not root."""
    if item.get_closest_marker("root") is not None and not running_as_root():
        pytest.fail(f"{item.nodeid} needs root (network namespaces, BPF, Open vSwitch or Mininet): run it as "
                    f"root, or leave the tests that need root out with -m \"not root\"", pytrace=False)
