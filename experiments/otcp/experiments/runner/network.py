"""One topology running for an experiment: the emulated network, its controller, and what runs ask of them.

``start_network(config, topo, workdir, ...)`` writes the topology's
inventory, starts the OTCP controller that forwards its traffic (or, with
``forwarding: standalone``, none: learning bridges), builds the network
(``otcp.experiments.runner.emulation.emulate``) and yields a ``Network``:
the emulation, the controller, every host's data address and the notes on
what this machine could not enforce. Its methods are the steps every
experiment takes on it: make hosts reach each other, flush the hosts' TCP
metrics cache, record the routes the kernels hold, read the segment a
receiver advertises, name the switch ports that face hosts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from mininet.util import buildTopo, splitArgs

from otcp.experiments.analysis import results
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.controller import Controller
from otcp.experiments.runner.emulation import Emulation, delay_report, emulate
from otcp.experiments.runner.settings import data_interface, interface_mtu
from otcp.topo import fabrics

#: The configuration a Network runs under: an experiment's, extending ExperimentConfig.
C = TypeVar("C", bound=ExperimentConfig)


class RunError(RuntimeError):
    """One run failed; the experiment records it and goes on."""


def topology_from_spec(spec: str, **link: Any) -> Any:
    """The FabricTopo an mn-style spec names ("leafspine,2,2,4", "star,16,bw=100");
    ValueError naming --topo and the problem. link: link options (bw, buffer_bytes,
    delay_us) an experiment sets from its own flags, which the spec may then not set."""
    name, args, kwargs = splitArgs(spec)
    if name not in fabrics.topos:
        raise ValueError(f"--topo: {name!r} is not a topology of `otcp.topo.fabrics` ({', '.join(fabrics.topos)})")
    both = sorted(set(kwargs) & set(link))
    if both:
        raise ValueError(f"--topo {spec}: {', '.join(both)} comes from its own option here, not the spec")
    try:
        return fabrics.topos[name](*args, **kwargs, **link) if link else buildTopo(fabrics.topos, spec)
    except (ValueError, TypeError) as error:
        raise ValueError(f"--topo {spec}: {error}") from None


@dataclasses.dataclass
class Network(Generic[C]):
    """One topology running: the emulation, its controller (None: standalone bridges), every
    host's data address, the working directory (inventory, controller and agent files), and
    the notes on what the emulation could not enforce here."""

    config: C
    topo: Any
    workdir: str
    emulation: Emulation
    controller: Controller | None
    data_ips: dict[str, str]
    notes: list[str]

    def require_controller(self) -> Controller:
        """The controller (RunError without one: standalone bridges)."""
        if self.controller is None:
            raise RunError("this network runs without the OTCP controller (--forwarding standalone)")
        return self.controller

    def ensure_connectivity(self, hosts: Iterable[str], target_ip: str, timeout: float = 30.0) -> None:
        """Ping target_ip from every host until each gets an answer (the controller learns
        hosts and installs paths on first packets)."""
        deadline = time.monotonic() + timeout
        pending = list(hosts)
        while pending:
            pending = [h for h in pending
                       if "1 received" not in self.emulation.run(h, ["ping", "-n", "-c", "1", "-W", "1", target_ip],
                                                                 check=False)]
            if pending and time.monotonic() > deadline:
                raise RunError(f"{', '.join(pending)} cannot reach {target_ip} after {timeout:.0f} s")

    def flush_tcp_metrics(self, hosts: Iterable[str]) -> None:
        """Empty the TCP metrics cache of every host (``ip tcp_metrics flush``).

        Linux applies a route's ``cwnd N lock`` only through this cache: a
        connection reads it from the cache entry for its destination, which is
        created, with the route's values at that moment, when an earlier
        connection to that destination closes, and then kept for an hour
        whatever the route says later (docs/experiments.md, "Why packets are
        lost even under a window clamp"). Flushed, no scheme inherits another's
        (ssthresh, and the locked cwnd of a route).
        """
        for host in hosts:
            self.emulation.run(host, ["ip", "tcp_metrics", "flush", "all"])

    def record_routes(self, scheme: str, hosts: Iterable[str], heading: str) -> None:
        """Write what the kernel of every host holds: routes and data-interface MTU (OUT/routes/)."""
        for host in hosts:
            routes = self.emulation.run(host, ["ip", "route", "show"])
            intf = data_interface(self.emulation, host)
            mtu = interface_mtu(self.emulation, host, intf)
            results.write_routes(self.config.out, scheme, host, heading, f"{routes.rstrip()}\n# {intf} mtu {mtu}")

    def receiver_advmss(self, receiver: str, senders: Iterable[str]) -> int | None:
        """The advmss on the receiver's routes to the senders (the most common
        one; the star's paths are alike), or None when they carry none."""
        routes = json.loads(self.emulation.run(receiver, ["ip", "-j", "route", "show"]) or "[]")
        found = []
        for sender in senders:
            address = ipaddress.ip_address(self.data_ips[sender])
            matching = [r for r in routes if r.get("dst") not in (None, "default")
                        and address in ipaddress.ip_network(r["dst"], strict=False)]
            if matching:
                best = max(matching, key=lambda r: ipaddress.ip_network(r["dst"], strict=False).prefixlen)
                metrics = {key: value for entry in best.get("metrics", []) for key, value in entry.items()}
                found.append(metrics.get("advmss"))
        values = [v for v in found if v is not None]
        return max(set(values), key=values.count) if values else None

    def switch_ports(self, hosts: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """(switch, interface) of every switch port that faces one of hosts (default: every host)."""
        return [self.topo.switch_port(host) for host in (self.topo.hosts() if hosts is None else hosts)]

    def switch_port_indexes(self, hosts: Iterable[str] | None = None) -> list[int]:
        """Root-namespace ifindexes of the switch ports that face hosts, where the userspace switch takes frames in."""
        return [socket.if_nametoindex(interface) for _, interface in self.switch_ports(hosts)]

    def data_path(self, hosts: Iterable[str]) -> list[tuple[str, str]]:
        """(node, device) of every interface a packet between hosts crosses: the switch ports facing
        them, their data interfaces and the IFBs that hold the switch's buffers toward them."""
        hosts = list(hosts)
        return self.switch_ports(hosts) + [(h, data_interface(self.emulation, h)) for h in hosts] \
            + [(h, self.emulation.host(h).defaultIntf().buffer_device) for h in hosts]


@contextlib.contextmanager
def start_network(config: C, topo: Any, workdir: str, with_agents: bool = False,
                  intervals: dict[str, float] | None = None, log_level: str = "warning",
                  raise_ovs_buffers: bool = True, lease_s: float | None = None) -> Iterator[Network[C]]:
    """Run topo for an experiment (see the module docstring); tear it all down on exit.

    with_agents: a management network and the controller's agent channel, for
    the OTCP schemes' agents; intervals: the controller's measurement
    intervals, where an experiment needs others than its defaults;
    raise_ovs_buffers: emulate's (False only to show what happens without);
    lease_s: the agents' lease (the controller's ``agents.lease_s``; its default unless given).
    """
    os.makedirs(workdir, exist_ok=True)
    inventory = topo.write_inventory(os.path.join(workdir, "inventory.yaml"))
    controller = None
    if config.forwarding == "controller":
        controller = Controller(workdir, inventory, with_agents, intervals=intervals,
                                parameters={"queue_target_fraction": config.queue_target_fraction,
                                            "fan_in_queue_fraction": config.fan_in_queue_fraction},
                                lease_s=lease_s)
    with emulate(topo, controller=controller, management=with_agents, log_level=log_level,
                 raise_ovs_buffers=raise_ovs_buffers, datapath=config.switch_datapath()) as emulation:
        enforced, delay_note = delay_report(topo)
        if enforced:
            topo.write_inventory(inventory, delay_enforced=True)
        placed = emulation.placement.note if emulation.placement is not None else None
        notes = [note for note in (emulation.congestion_control_note, delay_note, emulation.datapath.note, placed)
                 if note]
        yield Network(config, topo, workdir, emulation, controller, {h.name: h.IP() for h in emulation.hosts}, notes)
