"""``otcp-experiment shell``: a Mininet network with OTCP in place, then Mininet's CLI.

    otcp-experiment shell --topo leafspine,2,2,4 [--script FILE] [--controllers N]

Builds any topology of ```otcp.topo.fabrics``` from an ``mn``-style spec (name,
then its arguments: ``star,16``, ``fattree,4``, ``leafspine,2,2,4,bw=100``),
starts the real controller and an agent in every host
(``otcp.experiments.runner``), has every host speak so the controller learns it,
waits until every host holds its OTCP routes, and hands over to Mininet's
CLI (``mininet.cli.CLI``): ``pingall``, ``iperf h1 h4``, ``h1 ip route show
proto 79`` and the user's own traffic run with OTCP's parameters in place.
With ``--script``, the CLI runs the file's commands instead of reading the
terminal, as ``mn``'s CLI ``source`` does. On leaving the CLI the agents
revert their routes and the network and controller are torn down; the
working directory (controller configuration, database and logs) is kept.
With ``--controllers N`` (2 or more), N instances of the controller drive the
fabric (ranks 0..N-1 of their ``cluster`` section, docs/controller.md): every
switch connects to each of them, and every agent too.

The CLI's ``iperf`` runs iperf3: Mininet 2.3.0's own waits for two reports
from the iperf 2 server, and Debian 12's iperf 2.1 prints none for the
connection Mininet opens to see that the server listens, so it never returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from typing import Any

from mininet.cli import CLI
from mininet.log import error, output

from otcp.experiments.runner.agents import Agents
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.controller import ControllerInstances
from otcp.experiments.runner.emulation import Emulation, EmulationError, emulate
from otcp.experiments.runner.network import start_network

#: How long every host gets to be reachable (paths install on first packets), then to get its routes.
CONNECT_TIMEOUT_S = 60.0
IPERF_PORT = 5201
IPERF_SECONDS = 5


@dataclasses.dataclass(kw_only=True)
class ShellConfig(ExperimentConfig):
    """One shell: the base's network (its output directory holds the controller's files),
    the topology built (a FabricTopo) and the file of CLI commands to run, if any."""

    topo: Any
    script: str | None = None
    controllers: int = 1


class ShellCLI(CLI):
    """Mininet's CLI on an Emulation, with an ``iperf`` that returns (see the module docstring)."""

    def __init__(self, emulation: Emulation, script: str | None = None) -> None:
        self.emulation = emulation  # before CLI.__init__, which runs a script at once
        super().__init__(emulation.net, script=script)

    def do_iperf(self, line: str) -> None:
        """iperf [CLIENT SERVER]: TCP throughput from CLIENT to SERVER for 5 s with iperf3
        (default: the first and the last host); prints [server, client] rates as Mininet does."""
        names = line.split()
        hosts = [host.name for host in self.emulation.hosts]
        if len(names) not in (0, 2) or any(name not in hosts for name in names):
            error(f"usage: iperf [CLIENT SERVER], two of {' '.join(hosts)}\n")
            return
        client, server = names or (hosts[0], hosts[-1])
        output(f"*** Iperf: testing TCP bandwidth between {client} and {server}\n")
        listener = self.emulation.start(server, ["iperf3", "-s", "-1", "-p", str(IPERF_PORT)])
        try:
            self.emulation.wait_listening(server, IPERF_PORT)
            report = json.loads(self.emulation.run(client, [
                "iperf3", "-J", "-t", str(IPERF_SECONDS), "-p", str(IPERF_PORT),
                "-c", self.emulation.host(server).IP()]))
        except (EmulationError, ValueError) as failure:
            error(f"iperf: {failure}\n")
            return
        finally:
            self.emulation.stop(listener)
        rates = [report["end"][side]["bits_per_second"] / 1e6 for side in ("sum_received", "sum_sent")]
        output(f"*** Results: {[f'{rate:.1f} Mbits/sec' for rate in rates]}\n")


def run(config: ShellConfig) -> int:
    """Start the topology with OTCP, run the CLI (interactive, or the script's commands); returns 0."""
    if config.controllers == 1:
        with start_network(config, config.topo, config.out, with_agents=True, log_level="output") as network:
            return _serve(network.emulation, [network.require_controller().config_path], config)
    os.makedirs(config.out, exist_ok=True)
    inventory = config.topo.write_inventory(os.path.join(config.out, "inventory.yaml"))
    instances = ControllerInstances(config.out, inventory, count=config.controllers)
    with emulate(config.topo, controller=instances, management=True, log_level="output") as emulation:
        return _serve(emulation, instances.config_paths(), config)


def _serve(emulation: Emulation, controller_configs: list[str], config: ShellConfig) -> int:
    """Agents in every host connected to every controller, every host reachable and holding its
    routes, then the CLI; returns 0."""
    data_ips = {host.name: host.IP() for host in emulation.hosts}
    with Agents(emulation, list(data_ips), controller_configs, f"{config.out}/agents",
                timeout=CONNECT_TIMEOUT_S) as agents:
        _wait_reachable(emulation)
        agents.wait_for_routes(data_ips)
        print(f"*** OTCP is in place: {len(data_ips)} hosts with their routes (proto 79); "
              f"controller configuration, database and logs in {config.out} (kept)")
        for path in controller_configs:
            print(f"*** live view: otcp-controller status --config {path}")
        ShellCLI(emulation, script=config.script)
    return 0


def shell_config(topo: Any, script: str | None, command: list[str], controllers: int = 1) -> ShellConfig:
    """A ShellConfig for topo in a new working directory of its own (kept afterwards)."""
    return ShellConfig(out=tempfile.mkdtemp(prefix="otcp-shell-"), topo=topo, script=script, command=command,
                       controllers=controllers)


def _wait_reachable(emulation: Emulation) -> None:
    """pingAll until nothing is lost: the controller has learned every host and installed the paths."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while emulation.net.pingAll(timeout=1) != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"hosts could not all reach each other within {CONNECT_TIMEOUT_S:.0f} s")
