"""Integration tests run for real: as root, with Open vSwitch and Mininet.

Nothing here skips. A machine without them fails these tests, loudly, with
the reason: a skipped integration test would be a missing test.
"""

import os
import subprocess

import pytest

from topo.fabrics import FabricTopo


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


class TriangleTopo(FabricTopo):
    """Three switches in a triangle (s1, s2, s3) and four hosts: h1, h2 on s1,
    h3 on s2, h4 on s3. Taking s1-s3 down moves h1 -> h4 onto s1-s2-s3."""

    def build(self, bw=100, buffer_bytes=85000):
        options = self._link_options(bw, buffer_bytes, None)
        s1, s2, s3 = (self.add_switch(f"s{i}") for i in (1, 2, 3))
        for a, b in ((s1, s2), (s2, s3), (s1, s3)):
            self.addLink(a, b, **options)
        for name, switch in (("h1", s1), ("h2", s1), ("h3", s2), ("h4", s3)):
            self.addLink(self.add_host(name), switch, **options)
