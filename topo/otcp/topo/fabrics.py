"""Mininet topologies for OTCP experiments: star, leaf-spine and fat-tree.

Every topology here is an ordinary Mininet ``Topo`` that can also describe
itself as an OTCP inventory (docs/controller.md), so the controller and
the offline planner read the same capacities and buffers that the emulation
enforces.

Use one from the command line (Debian's ``mn`` execs this file, so it must
stay importable without the rest of the project)::

    mn --custom `otcp.topo.fabrics` --topo star,16 \\
       --controller remote --switch ovs,datapath=user,protocols=OpenFlow13

Each link carries its own link class (``BufferedLink``): rate, offloads and
buffers are set even under plain ``mn``. The switch's egress buffer toward a
host is not a qdisc on the switch port but a bfifo on an IFB in the host's
namespace, fed by the host interface's ingress (``shaping_commands`` says
why: Open vSwitch's userspace datapath loses, uncounted, what a port qdisc
refuses). Under plain ``mn`` OVS's shared send socket keeps its default
buffer, which caps what the whole switch can have queued at about 93
packets; ``otcp.experiments.runner.emulation`` raises it while a network runs
(``otcp.experiments.runner.ovs_sockets``). Ports between two switches keep their
buffer on the port, which OVS's userspace datapath resets when it adds the
port, so ``otcp.experiments.runner.emulation`` applies it again after the switches start
(``BufferedIntf.reshape``).
Note that ``mn`` runs its global cleanup (``mn -c``: it kills every Mininet
on the machine) whenever it hits an error; on a shared machine prefer
``otcp.experiments.runner.emulation``.

Link options, in every topology:

- ``bw``: link rate in Mb/s (HTB, up to 1000), default 100 (the OTCP evaluation's rate);
- ``buffer_bytes``: the egress buffer of each switch port in bytes, a bfifo
  for IPv4 under the HTB class (ARP, LLDP and IPv6 queue apart); default
  ``SHALLOW_BUFFER`` (85 000 B), ``DEEP_BUFFER`` is 512 000 B;
- ``delay_us``: one-way propagation delay per link. It needs sch_netem; where
  the kernel lacks it (the machines this project runs on) the delay is not
  enforced, the link says so once, and the inventory leaves it out.
"""

import glob
import inspect
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Annotated, Any

from mininet.link import Intf, Link, TCIntf
from mininet.log import error
from mininet.node import Switch
from mininet.topo import Topo
from mininet.util import ipAdd


def _find_project() -> None:
    """Debian's `mn --custom` execs this file in the system python3, which does
    not see the project: put the checkout and its .venv (made from that same
    python3) on the path so the shared validation module imports."""
    here = os.path.abspath(inspect.getsourcefile(_find_project) or __file__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))  # topo/otcp/topo/fabrics.py
    sys.path[:0] = [root, *sorted(glob.glob(os.path.join(root, ".venv", "lib", "python3*", "site-packages")))]


try:
    from otcp.wire import validation
except ImportError:
    _find_project()
    from otcp.wire import validation
# pydantic comes with the project's environment, found just above.
from pydantic import AfterValidator, Field  # noqa: E402

DEFAULT_BW_MBPS = 100
SHALLOW_BUFFER = 85000
DEEP_BUFFER = 512000
# Largest rate Mininet's TCIntf accepts for HTB.
MAX_BW_MBPS = TCIntf.bwParamMax
# Data-plane addresses: Mininet's default 10.0.0.0/8, hosts numbered from 1.
DATA_IP_BASE = 0x0A000000
DATA_PREFIX_LEN = 8


Command = tuple[list[str], str]  # (argv, what it does, for the error message)
Node = Any  # a Mininet node (Mininet has no type information)


@dataclass(frozen=True)
class Shaping:
    """How one veth end is shaped: rate (Mb/s), switch egress buffer (bytes) and one-way
    delay (µs), each None where not set, and whether the other end is a switch port."""

    bw: float | None
    buffer_bytes: float | None
    delay_us: float | None
    peer_is_switch: bool


class ShapingError(RuntimeError):
    """A tc or ethtool command that shapes a link failed (names the device and the command)."""


def offload_commands(name: str) -> list[Command]:
    """ethtool: tx checksum, TSO, GSO and GRO off (TCP through the userspace
    OVS datapath fails with them on)."""
    return [(["ethtool", "-K", name, "tx", "off", "tso", "off", "gso", "off", "gro", "off"], "turn off offloads")]


def ifb_name(name: str) -> str:
    """The IFB device, in the host's namespace, that holds the switch's egress
    buffer toward the host interface name (interface names have 15 characters
    at most)."""
    return f"{name}-ifb" if len(name) <= 11 else f"ifb-{name[-11:]}"


def _htb_commands(device: str, bw: float, leaf_argv: list[str] | None,
                  netem_argv: list[str] | None = None) -> list[Command]:
    """HTB on device: class 5:1 shapes to bw Mb/s; under it IPv4 (5:10, leaf
    leaf_argv) and everything else (5:20: ARP, LLDP, IPv6, a pfifo of its
    own, served first). Returns the commands."""
    h = BufferedIntf
    rate = f"{float(bw)}mbit"
    common = ["burst", h.HTB_BURST, "quantum", "1514"]
    commands = [
        (["tc", "qdisc", "replace", "dev", device, "root", "handle", h.HTB_HANDLE, "htb", "default", "20"],
         f"add the HTB qdisc on {device}"),
        (["tc", "class", "replace", "dev", device, "parent", h.HTB_HANDLE, "classid", h.HTB_CLASS, "htb",
          "rate", rate, *common], f"shape {device} to {bw} Mb/s"),
        (["tc", "class", "replace", "dev", device, "parent", h.HTB_CLASS, "classid", h.DATA_CLASS, "htb",
          "rate", rate, "ceil", rate, *common, "prio", "1"], f"add the IPv4 class on {device}"),
        (["tc", "class", "replace", "dev", device, "parent", h.HTB_CLASS, "classid", h.CONTROL_CLASS, "htb",
          "rate", f"{float(bw) / 10}mbit", "ceil", rate, *common, "prio", "0"],
         f"add the control class on {device}"),
        (["tc", "qdisc", "replace", "dev", device, "parent", h.CONTROL_CLASS, "handle", h.CONTROL_HANDLE,
          "pfifo", "limit", str(h.CONTROL_LIMIT_PACKETS)], f"add the control queue on {device}"),
        (["tc", "filter", "replace", "dev", device, "parent", h.HTB_HANDLE, "protocol", "ip", "prio", "1",
          "u32", "match", "u32", "0", "0", "flowid", h.DATA_CLASS], f"send IPv4 to {h.DATA_CLASS} on {device}"),
    ]
    parent = ["parent", h.DATA_CLASS]
    if netem_argv:
        commands.append((["tc", "qdisc", "replace", "dev", device, *parent, "handle", h.NETEM_HANDLE, *netem_argv],
                         f"add the netem delay on {device}"))
        parent = ["parent", f"{h.NETEM_HANDLE}1"]
    if leaf_argv:
        commands.append((["tc", "qdisc", "replace", "dev", device, *parent, "handle", h.DATA_HANDLE, *leaf_argv],
                         f"add the IPv4 queue on {device}"))
    return commands


def shaping_commands(name: str, on_switch: bool, peer_is_switch: bool, bw: float | None = None,
                     buffer_bytes: float | None = None, delay_us: float | None = None,
                     netem: bool = True) -> list[Command]:
    """The tc and ethtool commands that shape one veth end, as data:
    [(argv, what)], run in order in the end's namespace (Mininet's
    ``TCIntf.bwCmds`` does the same for its links).

    name: the interface; on_switch: it is a switch port; peer_is_switch:
    the other end is a switch port. netem: whether to put a delay in
    (False once the kernel is known to lack sch_netem).

    - Every end: offloads off.
    - A host's end (its link toward the switch): HTB at bw, IPv4 and
      control traffic in classes of their own (the IPv4 class's counters are
      what the host put on the wire, after its own queue).
    - The switch's egress buffer toward a host is not on the switch port:
      Open vSwitch's userspace datapath sends to a port with ``sendmmsg`` on
      an AF_PACKET socket and loses, uncounted, the rest of a batch when a
      port qdisc refuses a packet, and the socket's send buffer caps a
      port's queue at ~93 packets. So the switch port keeps no qdisc (a veth
      takes every packet: OVS's send never fails), and the host's end
      redirects what it receives into an IFB in the host's namespace, where
      HTB at bw and a bfifo of buffer_bytes for IPv4 play the switch port.
      Every packet lost between sender and receiver is then dropped and
      counted by that bfifo.
    - A port between two switches (leaf-spine, fat-tree) keeps HTB and the
      bfifo on its own egress: no host namespace to hold an IFB.
    """
    netem_argv = None
    if delay_us and netem:
        netem_argv = ["netem", "delay", f"{float(delay_us)}us", "limit", "100000"]
    commands = offload_commands(name)
    bfifo = ["bfifo", "limit", str(int(buffer_bytes))] if buffer_bytes is not None else None
    if on_switch and not peer_is_switch:
        return commands
    if on_switch:
        if bw is not None:
            commands += _htb_commands(name, bw, bfifo, netem_argv)
        elif bfifo:
            commands.append((["tc", "qdisc", "replace", "dev", name, "root", *bfifo], f"set the buffer of {name}"))
        return commands
    if bw is not None:
        commands += _htb_commands(name, bw, ["pfifo", "limit", str(BufferedIntf.HOST_LIMIT_PACKETS)], netem_argv)
    if peer_is_switch and buffer_bytes is not None:
        ifb = ifb_name(name)
        commands += [
            (["ip", "link", "add", "name", ifb, "type", "ifb"], f"create {ifb}"),
            (["ip", "link", "set", "dev", ifb, "up"], f"bring {ifb} up"),
        ]
        buffer = ["bfifo", "limit", str(int(buffer_bytes))]
        if bw is not None:
            commands += _htb_commands(ifb, bw, buffer, netem_argv)
        else:
            commands.append((["tc", "qdisc", "replace", "dev", ifb, "root", "handle", BufferedIntf.DATA_HANDLE,
                              *buffer], f"set the buffer on {ifb}"))
        commands += [
            (["tc", "qdisc", "replace", "dev", name, "clsact"], f"add the ingress hook of {name}"),
            (["tc", "filter", "replace", "dev", name, "ingress", "protocol", "all", "prio", "1", "u32",
              "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb],
             f"redirect what {name} receives into {ifb}"),
        ]
    return commands


class BufferedIntf(Intf):
    """A veth end configured the way OTCP experiments need it (see
    shaping_commands for what goes where and why).

    Rate: HTB (handle 5:, class 5:1 at bw Mb/s, Mininet's TCLink burst of
    15 kB so the results compare with Mininet's own links, a quantum of one
    packet). Under it, IPv4 in class 5:10 and everything else (ARP, LLDP,
    IPv6) in 5:20, so the counters of 5:10 count data packets only. The
    switch's egress buffer toward a host: a bfifo of buffer_bytes (handle
    10:) under 5:10 of an IFB in the host's namespace. With delay_us: a
    netem delay above the bfifo, where the kernel has sch_netem (it says
    once when it has not).
    """

    HTB_HANDLE = "5:"
    HTB_CLASS = "5:1"
    DATA_CLASS = "5:10"
    CONTROL_CLASS = "5:20"
    DATA_HANDLE = "10:"
    CONTROL_HANDLE = "20:"
    CONTROL_LIMIT_PACKETS = 100
    # The host's own IPv4 queue (a veth's default txqueuelen).
    HOST_LIMIT_PACKETS = 1000
    HTB_BURST = "15k"
    NETEM_HANDLE = "30:"
    # Set once a link has found that the kernel has no sch_netem.
    netem_missing = False

    def config(self, bw: float | None = None, buffer_bytes: float | None = None, delay_us: float | None = None,
               peer_is_switch: bool | None = None, **params: Any) -> Any:
        """Configure addresses (Mininet's Intf), offloads, rate, delay and buffer."""
        result = Intf.config(self, **params)
        self.shaping = Shaping(bw, buffer_bytes, delay_us, bool(peer_is_switch))
        self.shape()
        return result

    @property
    def on_switch(self) -> bool:
        """Whether this interface is a switch port (only those get an egress buffer)."""
        return isinstance(self.node, Switch)

    @property
    def buffer_device(self) -> str | None:
        """The IFB that holds the switch's egress buffer toward this host end
        (in this end's namespace), or None (a switch port, or no buffer)."""
        if self.on_switch or not self.shaping.peer_is_switch or self.shaping.buffer_bytes is None:
            return None
        return ifb_name(self.name)

    def commands(self) -> list[Command]:
        """This end's shaping commands (shaping_commands with its settings)."""
        shaping = self.shaping
        return shaping_commands(self.name, self.on_switch, shaping.peer_is_switch, shaping.bw, shaping.buffer_bytes,
                                shaping.delay_us, netem=not BufferedIntf.netem_missing)

    def reshape(self) -> None:
        """Apply a switch port's shaping again: Open vSwitch's userspace
        datapath resets a port's qdisc when it adds the port, so switch ports
        need this after the switch has started (a host's end needs nothing)."""
        if self.on_switch:
            self.shape()

    def shape(self) -> None:
        """Run this end's shaping commands in its namespace (a thin runner:
        the decisions are in shaping_commands)."""
        for argv, what in self.commands():
            _, err, code = self.node.pexec(argv)
            if code == 0:
                continue
            if "netem" in argv and not BufferedIntf.netem_missing:
                BufferedIntf.netem_missing = True
                error(f"*** link delay not enforced: this kernel has no sch_netem ({err.strip()})\n")
                return self.shape()
            raise ShapingError(f"{self.name}: could not {what}: {shlex.join(argv)}: {err.strip()}")
        return None

    @classmethod
    def delay_enforced(cls) -> bool:
        """Whether link delays asked for so far actually went into the kernel."""
        return not cls.netem_missing


class BufferedLink(Link):
    """A link whose two ends are BufferedIntf interfaces (Mininet's TCLink, with our interface)."""

    def __init__(self, node1: Node, node2: Node, port1: int | None = None, port2: int | None = None,
                 intfName1: str | None = None, intfName2: str | None = None,
                 addr1: str | None = None, addr2: str | None = None, **params: Any) -> None:
        Link.__init__(self, node1, node2, port1=port1, port2=port2, intfName1=intfName1, intfName2=intfName2,
                      cls1=BufferedIntf, cls2=BufferedIntf, addr1=addr1, addr2=addr2,
                      params1=dict(params, peer_is_switch=isinstance(node2, Switch)),
                      params2=dict(params, peer_is_switch=isinstance(node1, Switch)))


def data_ip(index: int) -> str:
    """The data-plane address of host number index (1-based): 10.0.0.index upward."""
    return ipAdd(index, prefixLen=DATA_PREFIX_LEN, ipBaseNum=DATA_IP_BASE)


Count = Annotated[int, validation.int_range(1, 100_000)]


def _even(k: int) -> int:
    if k % 2:
        raise ValueError(f"fat-tree k must be even, got {k}")
    return k


class LinkOptions(validation.Strict):
    """Rate (Mb/s), switch egress buffer (bytes) and one-way delay (µs) of a link."""

    bw: Annotated[float, Field(gt=0, le=MAX_BW_MBPS)]
    buffer_bytes: Annotated[float, Field(ge=1)]
    delay_us: Annotated[float, Field(ge=0)] | None = None


class StarArgs(validation.Strict):
    """StarTopo's own arguments."""

    senders: Count
    probe: bool


class LeafSpineArgs(validation.Strict):
    """LeafSpineTopo's own arguments."""

    leaves: Count
    spines: Count
    hosts_per_leaf: Count
    fabric_bw: Annotated[float, Field(gt=0, le=MAX_BW_MBPS)] | None


class FatTreeArgs(validation.Strict):
    """FatTreeTopo's own arguments."""

    k: Annotated[int, Field(ge=2), AfterValidator(_even)]


class FabricTopo(Topo):
    """Base of the OTCP topologies: hosts, switches with explicit dpids, and
    links that carry their rate, buffer and delay, plus the inventory."""

    def _link_options(self, bw: float, buffer_bytes: float, delay_us: float | None) -> dict[str, Any]:
        validation.check(LinkOptions, {"bw": bw, "buffer_bytes": buffer_bytes, "delay_us": delay_us})
        options: dict[str, Any] = {"cls": BufferedLink, "bw": bw, "buffer_bytes": int(buffer_bytes)}
        if delay_us:
            options["delay_us"] = delay_us
        return options

    def add_host(self, name: str) -> str:
        """Add the next host: addresses 10.0.0.1, .2, ... in the order added."""
        index = len(self.hosts()) + 1
        return self.addHost(name, ip=f"{data_ip(index)}/{DATA_PREFIX_LEN}",
                            mac=":".join(f"{(index >> shift) & 0xFF:02x}" for shift in (40, 32, 24, 16, 8, 0)))

    def add_switch(self, name: str) -> str:
        """Add the next switch with dpid 1, 2, ... in the order added."""
        dpid = len(self.switches()) + 1
        return self.addSwitch(name, dpid=f"{dpid:016x}")

    def inventory(self, delay_enforced: bool = False) -> dict[str, Any]:
        """The inventory (docs/controller.md) that describes this topology.

        delay_us is only written where the emulation really enforces it: with
        no sch_netem (this project's machines) the links have no added delay,
        and declaring one would make the controller plan for a fabric that is
        not there. Without it the controller measures switch-to-switch delays
        and uses its configured default for host links.
        """
        switches = {name: {"dpid": int(self.nodeInfo(name)["dpid"], 16)} for name in self.switches()}
        hosts = {name: {"ip": self.nodeInfo(name)["ip"].split("/")[0]} for name in self.hosts()}
        links = []
        for a, b, info in self.links(sort=True, withInfo=True):
            link = {"a": a, "b": b, "capacity_mbps": info["bw"], "buffer_bytes": info["buffer_bytes"]}
            if delay_enforced and info.get("delay_us"):
                link["delay_us"] = info["delay_us"]
            links.append(link)
        return {"switches": switches, "hosts": hosts, "links": links}

    def write_inventory(self, path: str, delay_enforced: bool = False,
                        flows: list[dict[str, Any]] | None = None) -> str:
        """Write inventory() as YAML to path (flows: optional list of {src, dst, count})."""
        import yaml  # only needed here; `mn --custom` need not have it

        document = self.inventory(delay_enforced=delay_enforced)
        if flows:
            document["flows"] = flows
        with open(path, "w", encoding="utf-8") as handle:
            yaml.safe_dump(document, handle, sort_keys=False)
        return path

    def switch_port(self, host: str) -> tuple[str, str]:
        """(switch, interface name) of the switch port that faces host."""
        (switch,) = [b if a == host else a for a, b in self.links() if host in (a, b)]
        return switch, f"{switch}-eth{self.port(host, switch)[1]}"

    def has_loop(self) -> bool:
        """True if the topology has a cycle (needs a controller, not learning bridges)."""
        nodes = self.nodes()
        links = self.links()
        # Connected graph: a tree has exactly len(nodes) - 1 links.
        return len(links) >= len(nodes)


class StarTopo(FabricTopo):
    """Incast star: one switch s1, the receiver h1 and senders h2..h(N+1).

    probe=True adds one more host, h(N+2), that sends no data: the latency
    probe pings the receiver from it, through the bottleneck, without
    queueing behind a sender's own data.
    """

    def build(self, senders: int = 4, bw: float = DEFAULT_BW_MBPS, buffer_bytes: float = SHALLOW_BUFFER,
              delay_us: float | None = None, probe: bool = False) -> None:
        """Mininet's hook: the switch, the receiver, the senders and the probe host."""
        validation.check(StarArgs, {"senders": senders, "probe": probe})
        options = self._link_options(bw, buffer_bytes, delay_us)
        switch = self.add_switch("s1")
        self.receiver = self.add_host("h1")
        self.addLink(self.receiver, switch, **options)
        self.senders = []
        for index in range(2, senders + 2):
            self.senders.append(self.add_host(f"h{index}"))
            self.addLink(self.senders[-1], switch, **options)
        self.probe = None
        if probe:
            self.probe = self.add_host(f"h{senders + 2}")
            self.addLink(self.probe, switch, **options)


class LeafSpineTopo(FabricTopo):
    """Two-tier Clos: every leaf links to every spine; hosts hang off leaves.

    Switches: leaf1..leafL then spine1..spineS; hosts h1.. leaf by leaf.
    fabric_bw (default bw) is the rate of leaf-spine links.
    """

    def build(self, leaves: int = 2, spines: int = 2, hosts_per_leaf: int = 2, bw: float = DEFAULT_BW_MBPS,
              buffer_bytes: float = SHALLOW_BUFFER, delay_us: float | None = None,
              fabric_bw: float | None = None) -> None:
        """Mininet's hook: leaves, spines, every leaf-spine link and the hosts."""
        validation.check(LeafSpineArgs, {"leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf,
                                         "fabric_bw": fabric_bw})
        host_options = self._link_options(bw, buffer_bytes, delay_us)
        fabric_options = self._link_options(fabric_bw or bw, buffer_bytes, delay_us)
        leaf_names = [self.add_switch(f"leaf{i}") for i in range(1, leaves + 1)]
        spine_names = [self.add_switch(f"spine{i}") for i in range(1, spines + 1)]
        for leaf in leaf_names:
            for spine in spine_names:
                self.addLink(leaf, spine, **fabric_options)
        host_number = 1
        for leaf in leaf_names:
            for _ in range(hosts_per_leaf):
                self.addLink(self.add_host(f"h{host_number}"), leaf, **host_options)
                host_number += 1


class FatTreeTopo(FabricTopo):
    """k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation
    switches, (k/2)^2 core switches, k/2 hosts per edge switch, k^3/4 hosts.

    Switches: core c1.., aggregation a<pod>_<i>, edge e<pod>_<i>; hosts h1..
    edge by edge.
    """

    def build(self, k: int = 4, bw: float = DEFAULT_BW_MBPS, buffer_bytes: float = SHALLOW_BUFFER,
              delay_us: float | None = None) -> None:
        """Mininet's hook: core, aggregation and edge switches, pods and hosts."""
        validation.check(FatTreeArgs, {"k": k})
        options = self._link_options(bw, buffer_bytes, delay_us)
        half = k // 2
        cores = [self.add_switch(f"c{i}") for i in range(1, half * half + 1)]
        host_number = 1
        for pod in range(1, k + 1):
            aggs = [self.add_switch(f"a{pod}_{i}") for i in range(1, half + 1)]
            edges = [self.add_switch(f"e{pod}_{i}") for i in range(1, half + 1)]
            for i, agg in enumerate(aggs):
                # Aggregation switch i of every pod reaches core switches i*half .. i*half+half-1.
                for core in cores[i * half:(i + 1) * half]:
                    self.addLink(agg, core, **options)
                for edge in edges:
                    self.addLink(edge, agg, **options)
            for edge in edges:
                for _ in range(half):
                    self.addLink(self.add_host(f"h{host_number}"), edge, **options)
                    host_number += 1


topos = {"star": StarTopo, "leafspine": LeafSpineTopo, "fattree": FatTreeTopo}
