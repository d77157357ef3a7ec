"""Integration tests run for real: as root, with Open vSwitch and Mininet.

Nothing here skips. A machine without them fails these tests, loudly, with
the reason: a skipped integration test would be a missing test.
"""

import os
import subprocess

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", autouse=True)
def real_network_stack():
    """Fail (not skip) when the integration tests cannot run for real."""
    assert os.geteuid() == 0, "integration tests need root (Mininet, OVS, routes)"
    result = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"Open vSwitch is not running: {result.stderr.strip()} (run scripts/bootstrap.sh)"
