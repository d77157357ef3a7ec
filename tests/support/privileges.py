"""What needs root in the tests, and whether this process has it.

A fixture that makes namespaces, veths, BPF programs, Open vSwitch bridges or
Mininet networks is declared with :func:`needs_root` (under ``@pytest.fixture``);
tests/conftest.py then requires the ``root`` marker on every test that uses it.
"""

import os


def needs_root(fixture_function):
    """Declare that a fixture needs root: every test using it must be marked ``root``."""
    fixture_function.needs_root = True
    return fixture_function


def fixture_needs_root(fixture_function):
    """Whether a fixture's function was declared with :func:`needs_root`."""
    return getattr(fixture_function, "needs_root", False)


def running_as_root():
    """Whether this process can do what root-marked tests do (effective user 0)."""
    return os.geteuid() == 0
