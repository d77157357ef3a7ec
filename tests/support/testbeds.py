"""Kernel testbeds (otcp.experiments.kernel.testbed) for the tests that need root: made, handed
to the test, deleted, and checked gone."""

import contextlib
import subprocess

from otcp.experiments.kernel.testbed import Testbed


@contextlib.contextmanager
def deleted_after(rate_mbit, buffer_bytes, **options):
    """A Testbed(rate_mbit, buffer_bytes, **options), deleted at the end; then neither of its
    namespaces may be left."""
    testbed = Testbed(rate_mbit, buffer_bytes, **options)
    try:
        yield testbed
    finally:
        testbed.delete()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert testbed.sender not in names and testbed.receiver not in names
