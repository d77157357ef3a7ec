"""Putting a scheme on a network's hosts, and taking it off again.

What a scheme changes in a host is data first: ``scheme_commands(scheme,
facts)`` is a pure function from the scheme and what the hosts hold now
(``HostFacts``: the data interface, its MTU, the kernel's routes on it, the
sysctls the scheme sets) to the commands per host, as argument lists, that
apply it and that undo it (as Mininet's ``TCIntf.bwCmds`` returns the tc
commands of a link). ``applied_commands`` is the one place that runs them
and undoes them.

``apply_scheme`` puts a whole scheme in place for one run: the OTCP
controller's formula set and the agents for the OTCP schemes, the commands,
and for the ECN schemes the marker on the bottleneck's egress, or on every egress a
workload marks (a BPF program each:
loaded, attached and unpinned by ``otcp.bpf``). What it put in place comes
back as an ``AppliedScheme`` with named fields.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from otcp.bpf import attach_marker, ecn_sysctls
from otcp.experiments.runner.agents import Agents
from otcp.experiments.runner.schemes import Scheme

if TYPE_CHECKING:
    from otcp.bpf import Marker
    from otcp.experiments.runner.emulation import Emulation
    from otcp.experiments.runner.network import Network

# The burst the marker models: the binding bucket of `otcp.topo.fabrics`'s HTB class (cburst, docs/dctcp.md).
HTB_CBURST_BYTES = 1600

Argv = list[str]


@dataclasses.dataclass(frozen=True)
class KernelRoute:
    """One of the kernel's own routes on a host's data interface (the connected subnet), as
    ``ip -j route show dev INTF proto kernel`` gives it."""

    dst: str
    scope: str | None = None
    prefsrc: str | None = None

    def replace_argv(self, interface: str) -> Argv:
        """`ip route replace` arguments that recreate the route on interface (attributes go after)."""
        argv = ["ip", "route", "replace", self.dst, "dev", interface, "proto", "kernel"]
        if self.scope:
            argv += ["scope", self.scope]
        if self.prefsrc:
            argv += ["src", self.prefsrc]
        return argv


@dataclasses.dataclass(frozen=True)
class HostFacts:
    """What a scheme's commands depend on in one host: its data interface, that interface's
    MTU, the kernel's routes on it, and the values now of the sysctls the scheme sets."""

    interface: str
    mtu: int
    routes: tuple[KernelRoute, ...]
    sysctls: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class HostCommands:
    """The commands that put a scheme on one host (apply, in order) and take it off (undo, in order)."""

    apply: list[Argv]
    undo: list[Argv]


def scheme_sysctls(scheme: Scheme) -> dict[str, str]:
    """The sysctls a scheme sets in every host, and to what: ECN's for the ECN schemes."""
    return ecn_sysctls() if scheme.ecn else {}


def scheme_commands(scheme: Scheme, facts: Mapping[str, HostFacts]) -> dict[str, HostCommands]:
    """The commands that apply scheme to each host of facts and undo it, from what the hosts hold.

    Route-attribute schemes set the data interface's MTU and rto_min on the kernel's routes;
    undoing puts the routes and the MTU found back. Every scheme with ECN sets its sysctls and
    undoing puts the values found back. What the agents do (the OTCP schemes) is theirs, not
    here. A host the scheme changes nothing in gets no commands.
    """
    sysctls = scheme_sysctls(scheme)
    commands = {}
    for host, found in facts.items():
        apply: list[Argv] = []
        undo: list[Argv] = []
        if scheme.kind == "routes":
            if scheme.mtu is not None:
                apply.append(["ip", "link", "set", "dev", found.interface, "mtu", str(scheme.mtu)])
            if scheme.rto_min_ms is not None:
                apply += [route.replace_argv(found.interface) + ["rto_min", f"{scheme.rto_min_ms}ms"]
                          for route in found.routes]
                undo += [route.replace_argv(found.interface) for route in found.routes]
            if scheme.mtu is not None:
                undo.append(["ip", "link", "set", "dev", found.interface, "mtu", str(found.mtu)])
        apply += [["sysctl", "-q", "-w", f"{key}={value}"] for key, value in sysctls.items()]
        undo = [["sysctl", "-q", "-w", f"{key}={found.sysctls[key]}"] for key in sysctls] + undo
        if apply:
            commands[host] = HostCommands(apply=apply, undo=undo)
    return commands


def data_interface(emulation: Emulation, host: str) -> str:
    """The host's data-plane interface (its first, facing the fabric)."""
    return emulation.host(host).defaultIntf().name


def interface_mtu(emulation: Emulation, host: str, interface: str) -> int:
    """The MTU of interface in host's namespace."""
    return json.loads(emulation.run(host, ["ip", "-j", "link", "show", "dev", interface]))[0]["mtu"]


def kernel_routes(emulation: Emulation, host: str, interface: str) -> tuple[KernelRoute, ...]:
    """The kernel's own routes on interface (the connected data subnet)."""
    routes = json.loads(emulation.run(host, ["ip", "-j", "route", "show", "dev", interface, "proto", "kernel"])
                        or "[]")
    return tuple(KernelRoute(route["dst"], route.get("scope"), route.get("prefsrc")) for route in routes)


def read_facts(emulation: Emulation, hosts: Iterable[str], sysctls: Iterable[str] = ()) -> dict[str, HostFacts]:
    """HostFacts of every host now, with the values of the sysctls named."""
    facts = {}
    for host in hosts:
        interface = data_interface(emulation, host)
        facts[host] = HostFacts(interface, interface_mtu(emulation, host, interface),
                                kernel_routes(emulation, host, interface),
                                {key: emulation.run(host, ["sysctl", "-n", key]).strip() for key in sysctls})
    return facts


@contextlib.contextmanager
def applied_commands(emulation: Emulation, commands: Mapping[str, HostCommands]) -> Iterator[None]:
    """Run every host's apply commands; on exit, or when applying fails half-way, run the undo
    commands of every host whose apply commands had begun."""
    begun: list[str] = []
    try:
        for host, host_commands in commands.items():
            begun.append(host)
            for argv in host_commands.apply:
                emulation.run(host, argv)
        yield
    finally:
        undo_commands(emulation, {host: commands[host] for host in begun})


def undo_commands(emulation: Emulation, commands: Mapping[str, HostCommands]) -> None:
    """Run every host's undo commands."""
    for host, host_commands in commands.items():
        for argv in host_commands.undo:
            emulation.run(host, argv)


@dataclasses.dataclass(frozen=True)
class AppliedScheme:
    """A scheme in place on a network's hosts: the commands run in each host, the agents (the
    OTCP schemes; None for the others) and the ECN markers on the switch's egresses, the
    bottleneck's first (none without ECN)."""

    scheme: Scheme
    commands: dict[str, HostCommands]
    agents: Agents | None = None
    markers: tuple[Marker, ...] = ()

    def quiet(self) -> AbstractContextManager[Any]:
        """What the network's counters are read under: the agents paused (Agents.paused), if any."""
        return self.agents.paused() if self.agents is not None else contextlib.nullcontext()


@contextlib.contextmanager
def apply_scheme(network: Network[Any], scheme: Scheme, hosts: Iterable[str], bottleneck: str,
                 buffer_bytes: int, marked: Iterable[str] = ()) -> Iterator[AppliedScheme]:
    """Put scheme on hosts of network for one run; take it off on exit (also when a step fails).

    OTCP schemes: the controller restarted with the scheme's formulas, pacing and admission where it
    runs with others (then every host made to reach the bottleneck again: the switches
    reconnect), and an agent in every host (their working directory under the network's,
    per scheme). Then the scheme's commands (scheme_commands), then, with ECN, a marker on
    the egress of the switch's buffer toward bottleneck (the IFB in its namespace) at the
    link rate, with buffer_bytes as its limit, and one toward each other host of marked (a
    workload whose every host link is a bottleneck).
    """
    hosts = list(hosts)
    emulation, config = network.emulation, network.config
    with contextlib.ExitStack() as stack:
        agents = None
        if scheme.kind == "otcp":
            controller = network.require_controller()
            if controller.use(scheme.formulas, scheme.pacing, scheme.admission):
                network.ensure_connectivity([h for h in hosts if h != bottleneck], network.data_ips[bottleneck],
                                            timeout=60.0)
            agents = stack.enter_context(Agents(emulation, hosts, controller.config_path,
                                                os.path.join(network.workdir, "agents", scheme.name),
                                                timeout=config.agent_timeout_s, enforce=scheme.enforce))
        commands = scheme_commands(scheme, read_facts(emulation, hosts, scheme_sysctls(scheme)))
        stack.enter_context(applied_commands(emulation, commands))
        markers = []
        for host in dict.fromkeys([bottleneck, *marked]) if scheme.ecn else ():
            node = emulation.host(host)
            markers.append(stack.enter_context(attach_marker(
                node.defaultIntf().buffer_device, config.bw_mbps * 1e6, limit_bytes=buffer_bytes,
                netns=f"/proc/{node.pid}/ns/net", burst_bytes=HTB_CBURST_BYTES)))
        yield AppliedScheme(scheme, commands, agents, tuple(markers))
