"""Integration tests run for real: as root, with Open vSwitch and Mininet.

Every test here is marked ``integration`` and ``root``. Nothing here skips.
A machine without them fails these tests, loudly, with the reason: a skipped
integration test would be a missing test.
"""

import os
import subprocess

import pytest

from support.emulations import FAST, agents_network, controller_network
from support.privileges import needs_root
from support.topologies import TriangleTopo


def pytest_collection_modifyitems(items):
    """Mark every test of this directory: they all need root, Open vSwitch and Mininet."""
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.root)


@pytest.fixture(scope="session", autouse=True)
@needs_root
def real_network_stack():
    """Fail (not skip) when the integration tests cannot run for real."""
    assert os.geteuid() == 0, "integration tests need root (Mininet, OVS, routes)"
    result = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"Open vSwitch is not running: {result.stderr.strip()} (run scripts/bootstrap.sh)"


@pytest.fixture(scope="module")
@needs_root
def triangle_controller(tmp_path_factory):
    """The triangle (support.topologies) under the controller with its inventory and FAST rounds, once per module."""
    workdir = tmp_path_factory.mktemp("controller")
    topo = TriangleTopo()
    inventory_path = topo.write_inventory(str(workdir / "inventory.yaml"))
    with controller_network(topo, workdir, inventory=inventory_path, intervals=FAST) as network:
        yield network


@pytest.fixture(scope="module")
@needs_root
def triangle_agents(tmp_path_factory):
    """The triangle with the controller and a real agent in every host (support.emulations.agents_network),
    once per module."""
    with agents_network(TriangleTopo(), tmp_path_factory.mktemp("agents")) as network:
        yield network
