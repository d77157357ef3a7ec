"""``otcp-experiment shell``: a Mininet network with OTCP in place, then Mininet's CLI.

    otcp-experiment shell --topo leafspine,2,2,4 [--script FILE]

Builds any topology of ```otcp.topo.fabrics``` from an ``mn``-style spec (name,
then its arguments: ``star,16``, ``fattree,4``, ``leafspine,2,2,4,bw=100``),
starts the real controller and an agent in every host
(``otcp.experiments.otcp``), has every host speak so the controller learns it,
waits until every host holds its OTCP routes, and hands over to Mininet's
CLI (``mininet.cli.CLI``): ``pingall``, ``iperf h1 h4``, ``h1 ip route show
proto 79`` and the user's own traffic run with OTCP's parameters in place.
With ``--script``, the CLI runs the file's commands instead of reading the
terminal, as ``mn``'s CLI ``source`` does. On leaving the CLI the agents
revert their routes and the network and controller are torn down; the
working directory (controller configuration, database and logs) is kept.

The CLI's ``iperf`` runs iperf3: Mininet 2.3.0's own waits for two reports
from the iperf 2 server, and Debian 12's iperf 2.1 prints none for the
connection Mininet opens to see that the server listens, so it never returns.
"""

import ipaddress
import json
import tempfile
import time

from mininet.cli import CLI
from mininet.log import error, output
from mininet.util import buildTopo

from otcp.agent.routes import OTCP_PROTO
from otcp.experiments import otcp
from otcp.experiments.emulation import EmulationError, emulate
from otcp.topo import fabrics

#: How long every host gets to be reachable (paths install on first packets), then to get its routes.
CONNECT_TIMEOUT_S = 60.0
IPERF_PORT = 5201
IPERF_SECONDS = 5


class ShellCLI(CLI):
    """Mininet's CLI on an Emulation, with an ``iperf`` that returns (see the module docstring)."""

    def __init__(self, emulation, script=None):
        self.emulation = emulation  # before CLI.__init__, which runs a script at once
        super().__init__(emulation.net, script=script)

    def do_iperf(self, line):
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


def build_topology(spec):
    """The FabricTopo an mn-style spec names; ValueError naming --topo and the problem."""
    name = spec.split(",", 1)[0]
    if name not in fabrics.topos:
        raise ValueError(f"--topo: {name!r} is not a topology of `otcp.topo.fabrics` ({', '.join(fabrics.topos)})")
    try:
        return buildTopo(fabrics.topos, spec)
    except (ValueError, TypeError) as error:
        raise ValueError(f"--topo {spec}: {error}") from None


def run(topo, script=None):
    """Start topo with OTCP, run the CLI (interactive, or script's commands); returns 0."""
    workdir = tempfile.mkdtemp(prefix="otcp-shell-")
    inventory = topo.write_inventory(f"{workdir}/inventory.yaml")
    starter = otcp.Controller(workdir, inventory, with_agents=True)
    with emulate(topo, controller=starter, management=True, log_level="output") as emulation:
        data_ips = {host.name: host.IP() for host in emulation.hosts}
        with otcp.Agents(emulation, list(data_ips), f"{workdir}/controller.yaml", f"{workdir}/agents"):
            _wait_reachable(emulation)
            _wait_covered(emulation, data_ips)
            print(f"*** OTCP is in place: {len(data_ips)} hosts with their routes (proto 79); "
                  f"controller configuration, database and logs in {workdir} (kept)")
            print(f"*** live view: otcp-controller status --config {workdir}/controller.yaml")
            ShellCLI(emulation, script=script)
    return 0


def _wait_reachable(emulation):
    """pingAll until nothing is lost: the controller has learned every host and installed the paths."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while emulation.net.pingAll(timeout=1) != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"hosts could not all reach each other within {CONNECT_TIMEOUT_S:.0f} s")


def _wait_covered(emulation, data_ips):
    """Until every host holds OTCP routes (proto 79) covering every other host, one route per
    destination or one per prefix, as the controller publishes them."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        missing = {}
        for host in data_ips:
            routes = json.loads(emulation.run(host, ["ip", "-j", "route", "show", "proto", str(OTCP_PROTO)]) or "[]")
            networks = [ipaddress.ip_network(route["dst"], strict=False) for route in routes]
            uncovered = [ip for name, ip in data_ips.items()
                         if name != host and not any(ipaddress.ip_address(ip) in net for net in networks)]
            if uncovered:
                missing[host] = uncovered
        if not missing:
            return
        if time.monotonic() > deadline:
            sample = ", ".join(f"{host} lacks {ips[0]}" for host, ips in list(missing.items())[:3])
            raise TimeoutError(f"the agents did not install routes within {CONNECT_TIMEOUT_S:.0f} s ({sample})")
        time.sleep(0.5)
