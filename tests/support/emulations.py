"""Mininet networks for the integration tests (root, Open vSwitch): the OTCP
controller alone, or with a real agent in every host, each yielded as a typed
handle and torn down afterwards; and the bridges Open vSwitch holds and the
processes naming a run's directory, to check that a run left none behind."""

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from otcp.experiments.runner.controller import ControllerProcess, free_port
from otcp.experiments.runner.emulation import Emulation, emulate

#: Probe, flow-statistics and re-planning rounds short enough for a test to see them happen.
FAST = {"probe_s": 0.5, "flow_stats_s": 0.5, "recompute_s": 0.5}
#: Where every host's agent serves its metrics, in the host's own namespace.
AGENT_METRICS_PORT = 9464


@dataclass(frozen=True)
class ControllerNetwork:
    """A running emulation whose switches the OTCP controller drives."""

    topo: object
    emulation: Emulation
    controller: ControllerProcess
    inventory_path: str | None  # the inventory the controller was given, if any


@dataclass(frozen=True)
class AgentsNetwork:
    """A running emulation with the controller and an agent in every host, both serving metrics."""

    emulation: Emulation
    controller: ControllerProcess
    workdir: Path
    agent_address: str  # where the agents reach the controller: management address:port
    metrics_port: int  # the controller's metrics, on the root namespace's loopback


def agent_command(workdir, host, address, secret_file):
    """`otcp-agent run` for one host: its state and log named after it in workdir."""
    return [
        sys.executable, "-m", "otcp.agent.cli", "--log-level", "debug", "run",
        "--controller", address, "--secret-file", secret_file, "--state", str(workdir / f"{host}-agent.db"),
    ]


@contextlib.contextmanager
def controller_network(topo, workdir, **controller_options) -> Iterator[ControllerNetwork]:
    """The topology in Mininet under a controller made with controller_options (ControllerProcess's)."""
    controller = ControllerProcess(workdir, **controller_options)

    @contextlib.contextmanager
    def start(_):
        with controller:
            yield controller.openflow_port

    with emulate(topo, controller=start) as emulation:
        yield ControllerNetwork(topo, emulation, controller, controller_options.get("inventory"))


@contextlib.contextmanager
def agents_network(topo, workdir) -> Iterator[AgentsNetwork]:
    """The topology in Mininet with a management network, the controller (topo's inventory, FAST
    rounds) and a real agent in every host, sharing a fresh secret; metrics on at both ends."""
    secret_file = workdir / "secret"
    secret_file.write_bytes(os.urandom(32).hex().encode())
    inventory_path = topo.write_inventory(str(workdir / "inventory.yaml"))
    agent_port, metrics_port = free_port(), free_port()
    processes = {}

    @contextlib.contextmanager
    def start_controller(management_ip):
        processes["controller"] = ControllerProcess(
            workdir, inventory=inventory_path, intervals=FAST, metrics={"host": "127.0.0.1", "port": metrics_port},
            agents={"host": management_ip, "port": agent_port, "secret_file": str(secret_file)},
        )
        with processes["controller"]:
            yield processes["controller"].openflow_port

    with emulate(topo, controller=start_controller, management=True) as emulation:
        address = f"{emulation.management_root_ip}:{agent_port}"
        for host in topo.hosts():
            command = agent_command(workdir, host, address, str(secret_file))
            command += ["--metrics", f"127.0.0.1:{AGENT_METRICS_PORT}"]
            with open(workdir / f"{host}-agent.log", "wb") as log:
                emulation.start(host, command, stdout=log, stderr=log)
        yield AgentsNetwork(emulation, processes["controller"], workdir, address, metrics_port)


def ovs_bridges():
    """The names of the bridges Open vSwitch holds now."""
    return set(subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True, text=True,
                              check=True).stdout.split())


def processes_mentioning(text: str) -> list[int]:
    """The pids of every process whose command line holds text (a run's output directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if text.encode() in handle.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found
