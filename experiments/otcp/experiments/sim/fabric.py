"""The fabrics a simulation runs on: otcp.topo's star, leaf-spine and fat-tree, or an inventory.

A fabric here is what the scenario program builds and the planner plans: hosts, switches and
undirected links, each with its rate, one-way delay and the egress buffer of its switch ends. The
wiring and the names are otcp.topo's (``StarTopo``, ``LeafSpineTopo``, ``FatTreeTopo``: the same
topologies Mininet runs), or an inventory's as the controller reads it (otcp.planning.inventory);
the rates, delays and buffers are given per tier (host links, switch-to-switch links), since a
simulated fabric is not held to what HTB can shape. A list of uplink delays is dealt out over the
edge switches' uplinks (and over the pods' aggregation-to-core links), so paths between different
racks differ.

Addresses: the hosts of edge switch number e (in the order of the switches hosts hang off) get
10.e.x.y, one /30 per host link, so every other switch reaches them with one route (10.e.0.0/16);
switch-to-switch links are numbered in 172.16.0.0/12. Every switch's route toward an edge switch's
prefix goes to the next switch of the planner's switch path (otcp.planning.paths, the paths the
controller installs with multipath off), so the simulated packets take the paths the planner plans
(the simulation's plans have multipath off).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence
from typing import Any

from otcp.bpf.marker import default_k_bytes
from otcp.planning import inventory as inventory_module
from otcp.planning.fabric import Fabric
from otcp.planning.paths import UNREACHABLE, SwitchPaths
from otcp.topo import fabrics

HOST_PREFIX_BITS = 16
LINK_PREFIX_BITS = 30
MAX_EDGE_SWITCHES = 256
MAX_HOSTS_PER_EDGE = 16384
SWITCH_LINK_BASE = int(ipaddress.IPv4Address("172.16.0.0"))
SWITCH_LINK_SPACE = 1 << 18  # 172.16.0.0/12 in /30s


class FabricError(ValueError):
    """A fabric that cannot be built: names the option or the entry and what is wrong."""


@dataclasses.dataclass(frozen=True)
class Tier:
    """The facts of one tier's links: rate (bits/s), one-way delays (s, dealt out in turn) and the
    egress buffer of their switch ends (bytes)."""

    rate_bps: float
    delays_s: tuple[float, ...]
    buffer_bytes: int

    def delay(self, index: int) -> float:
        """The delay of the index-th link of the tier that takes one from the list."""
        return self.delays_s[index % len(self.delays_s)]


@dataclasses.dataclass(frozen=True)
class Link:
    """One undirected link: its ends, rate, delay and the egress buffer of each switch end (0 at a host)."""

    a: str
    b: str
    rate_bps: float
    delay_s: float
    a_buffer_bytes: int
    b_buffer_bytes: int


@dataclasses.dataclass
class SimFabric:
    """A fabric with its addresses and routes: hosts in order, switches, links, each host's edge switch."""

    hosts: list[str]
    switches: list[str]
    links: list[Link]
    description: str

    def __post_init__(self) -> None:
        self.edge = {}
        for link in self.links:
            for host, switch in ((link.a, link.b), (link.b, link.a)):
                if host in self.hosts:
                    self.edge[host] = switch
        missing = [host for host in self.hosts if host not in self.edge]
        if missing:
            raise FabricError(f"host {missing[0]} has no link")
        self.edges = list(dict.fromkeys(self.edge[host] for host in self.hosts))
        if len(self.edges) > MAX_EDGE_SWITCHES:
            raise FabricError(f"{len(self.edges)} switches with hosts: at most {MAX_EDGE_SWITCHES}")
        self.address = self._host_addresses()
        self.paths = SwitchPaths(self.switches, [(link.a, link.b) for link in self.links
                                                 if link.a in self.switches and link.b in self.switches])

    def _host_addresses(self) -> dict[str, str]:
        address = {}
        placed = {edge: 0 for edge in self.edges}
        for host in self.hosts:
            edge = self.edge[host]
            number = placed[edge]
            placed[edge] += 1
            if number >= MAX_HOSTS_PER_EDGE:
                raise FabricError(f"switch {edge} has more than {MAX_HOSTS_PER_EDGE} hosts")
            base = (10 << 24) | (self.edges.index(edge) << 16) | (number << 2)
            address[host] = str(ipaddress.IPv4Address(base | 1))
        return address

    def rack(self, host: str) -> list[str]:
        """The hosts of host's edge switch, in order."""
        return [h for h in self.hosts if self.edge[h] == self.edge[host]]

    def path_links(self, a: str, b: str) -> list[Link]:
        """The links between two hosts along the planner's path, from a to b."""
        switches = self.paths.path(self.edge[a], self.edge[b])
        if switches is None:
            raise FabricError(f"no path between {a} and {b}")
        path = [a, *switches, b]
        links = {frozenset((link.a, link.b)): link for link in self.links}
        return [links[frozenset(pair)] for pair in zip(path, path[1:])]

    def round_trip_s(self, a: str, b: str) -> float:
        """The propagation round trip between two hosts along the planner's path."""
        return 2 * sum(link.delay_s for link in self.path_links(a, b))

    def bottleneck_rate_bps(self, host: str) -> float:
        """The rate of host's own link (its downlink's: the incast bottleneck)."""
        return next(link.rate_bps for link in self.links if host in (link.a, link.b))

    def downlink_buffer_bytes(self, host: str) -> int:
        """The egress buffer toward host at its edge switch (its downlink's: the incast bottleneck's)."""
        link = next(link for link in self.links if host in (link.a, link.b))
        return link.b_buffer_bytes if link.a == host else link.a_buffer_bytes

    def scenario(self) -> dict[str, Any]:
        """The scenario program's part: switches, hosts, links with addresses, routes."""
        links, switch_links = [], 0
        for link in self.links:
            if link.a in self.edge or link.b in self.edge:
                host = link.a if link.a in self.edge else link.b
                host_address = int(ipaddress.IPv4Address(self.address[host]))
                addresses = {host: host_address, self.edge[host]: host_address + 1}
            else:
                if switch_links >= SWITCH_LINK_SPACE:
                    raise FabricError("too many switch-to-switch links to number")
                base = SWITCH_LINK_BASE + 4 * switch_links
                switch_links += 1
                addresses = {link.a: base + 1, link.b: base + 2}
            links.append({"a": link.a, "b": link.b, "rate_bps": int(link.rate_bps), "delay_s": link.delay_s,
                          "a_address": str(ipaddress.IPv4Address(addresses[link.a])),
                          "b_address": str(ipaddress.IPv4Address(addresses[link.b])),
                          "prefix_len": LINK_PREFIX_BITS,
                          "a_buffer_bytes": link.a_buffer_bytes, "b_buffer_bytes": link.b_buffer_bytes})
        return {"switches": self.switches, "hosts": self.hosts, "links": links, "routes": self.routes()}

    def routes(self) -> dict[str, list[dict[str, Any]]]:
        """Per switch, a route toward every other edge switch's prefix via the next switch of its path."""
        next_hops = self.paths.next_hops()
        routes: dict[str, list[dict[str, Any]]] = {}
        for switch in self.switches:
            entries = []
            for number, edge in enumerate(self.edges):
                if edge == switch:
                    continue
                hop = next_hops[self.paths.index[switch], self.paths.index[edge]]
                if hop == UNREACHABLE:
                    raise FabricError(f"switch {switch} has no path to {edge}")
                entries.append({"prefix": f"10.{number}.0.0", "prefix_len": HOST_PREFIX_BITS,
                                "next": self.paths.switches[hop]})
            routes[switch] = entries
        return routes

    def inventory_document(self) -> dict[str, Any]:
        """The fabric as an OTCP inventory (docs/controller.md): what the controller would read."""
        links = []
        for link in self.links:
            buffer = max(link.a_buffer_bytes, link.b_buffer_bytes)
            links.append({"a": link.a, "b": link.b, "capacity_mbps": link.rate_bps / 1e6, "buffer_bytes": buffer,
                          "delay_us": link.delay_s * 1e6})
        return {"switches": {name: {"dpid": i + 1} for i, name in enumerate(self.switches)},
                "hosts": {name: {"ip": self.address[name]} for name in self.hosts}, "links": links}

    def planner_fabric(self) -> Fabric:
        """The planner's Fabric of this fabric (through the inventory's validation)."""
        return inventory_module.parse(self.inventory_document(), self.description).fabric()


def _topo_structure(spec: str, probe: bool = True) -> tuple[Any, str]:
    """otcp.topo's Topo of an mn-style spec (star[,N], leafspine,L,S,H, fattree,K) and its kind; a
    star is built with its probe host (StarTopo's) when probe is set."""
    kind, *arguments = spec.split(",")
    if kind not in fabrics.topos:
        raise FabricError(f"--topo: unknown topology {kind!r}; known: {', '.join(fabrics.topos)}")
    try:
        values = [int(argument) for argument in arguments]
    except ValueError:
        raise FabricError(f"--topo: {spec!r}: arguments must be integers") from None
    try:
        if kind == "star":
            if len(values) != 1:
                raise FabricError("--topo: star,N (N senders)")
            return fabrics.StarTopo(senders=values[0], probe=probe), kind
        if kind == "leafspine":
            if len(values) != 3:
                raise FabricError("--topo: leafspine,LEAVES,SPINES,HOSTS_PER_LEAF")
            return fabrics.LeafSpineTopo(leaves=values[0], spines=values[1], hosts_per_leaf=values[2]), kind
        if len(values) != 1:
            raise FabricError("--topo: fattree,K")
        return fabrics.FatTreeTopo(k=values[0]), kind
    except (ValueError, TypeError) as exc:
        if isinstance(exc, FabricError):
            raise
        raise FabricError(f"--topo: {spec}: {exc}") from None


def from_topo(spec: str, host_tier: Tier, uplink_tier: Tier, probe: bool = True) -> SimFabric:
    """The fabric of an mn-style topology spec, with host links of host_tier and switch-to-switch
    links of uplink_tier (its delays dealt out over the switches nearest the hosts, in order); a star
    without its probe host unless probe (the workload's star is the Mininet workload's)."""
    topo, _ = _topo_structure(spec, probe)
    hosts = sorted(topo.hosts(), key=lambda name: int(name[1:]))
    switches = list(topo.switches())
    host_set = set(hosts)
    pairs = list(topo.links(sort=True))
    with_hosts = {b if a in host_set else a for a, b in pairs if a in host_set or b in host_set}
    lower_order: dict[str, int] = {}
    links = []
    for a, b in pairs:
        if a in host_set or b in host_set:
            host, switch = (a, b) if a in host_set else (b, a)
            links.append(Link(host, switch, host_tier.rate_bps, host_tier.delay(0), 0, host_tier.buffer_bytes))
            continue
        lower = (a if a in with_hosts else b) if (a in with_hosts) != (b in with_hosts) else min(a, b)
        index = lower_order.setdefault(lower, len(lower_order))
        links.append(Link(a, b, uplink_tier.rate_bps, uplink_tier.delay(index), uplink_tier.buffer_bytes,
                          uplink_tier.buffer_bytes))
    return SimFabric(hosts, switches, links, f"--topo {spec}")


def from_inventory(path: str) -> SimFabric:
    """The fabric an inventory file declares (InventoryError names what is wrong in it)."""
    declared = inventory_module.load(path)
    links = []
    for spec in declared.links:
        rate = spec.capacity_mbps * 1e6
        buffers = [0 if end in declared.hosts else int(spec.buffer_bytes) for end in (spec.a, spec.b)]
        links.append(Link(spec.a, spec.b, rate, spec.delay_us * 1e-6, buffers[0], buffers[1]))
    return SimFabric(list(declared.hosts), list(declared.switches), links, path)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Who talks in an incast: the receiver, the senders and the latency probe's host (None: no probe)."""

    receiver: str
    senders: list[str]
    probe: str | None


PLACEMENTS = ("next", "rack", "remote")


def place(fabric: SimFabric, senders: int, how: str) -> Placement:
    """The receiver (the first host) and senders: the hosts after it ("next"), those of its own edge
    switch ("rack"), or those of other edge switches, taken from each in turn ("remote"). The probe
    is the first host left over in the receiver's rack, else anywhere, else none."""
    receiver, others = fabric.hosts[0], fabric.hosts[1:]
    if how == "next":
        pool = others
    elif how == "rack":
        pool = [h for h in others if fabric.edge[h] == fabric.edge[receiver]]
    elif how == "remote":
        racks = [[h for h in others if fabric.edge[h] == edge] for edge in fabric.edges
                 if edge != fabric.edge[receiver]]
        pool = [rack[i] for i in range(max(map(len, racks), default=0)) for rack in racks if i < len(rack)]
    else:
        raise FabricError(f"--placement: {how!r}; known: {', '.join(PLACEMENTS)}")
    if senders > len(pool):
        raise FabricError(f"--senders: {senders} senders placed {how!r} need {senders} hosts; the fabric has "
                          f"{len(pool)}")
    chosen = pool[:senders]
    left = [h for h in others if h not in chosen]
    local = [h for h in left if fabric.edge[h] == fabric.edge[receiver]]
    probe = next(iter(local or left), None)
    return Placement(receiver, chosen, probe)


def tiers_from(rate_gbps: float, uplink_gbps: float | None, delays_us: Sequence[float],
               uplink_delays_us: Sequence[float] | None, buffer_bytes: int,
               uplink_buffer_bytes: int | None) -> tuple[Tier, Tier]:
    """The host and uplink tiers of the command line's values (uplink ones default to the host ones)."""
    host = Tier(rate_gbps * 1e9, tuple(d * 1e-6 for d in delays_us), buffer_bytes)
    uplink = Tier((uplink_gbps or rate_gbps) * 1e9, tuple(d * 1e-6 for d in (uplink_delays_us or delays_us)),
                  uplink_buffer_bytes or buffer_bytes)
    return host, uplink


@dataclasses.dataclass(kw_only=True)
class SimFabricSettings:
    """What every simulated experiment (simulate incast, simulate workload) takes for its fabric beside
    the topology: per-tier rates (Gb/s), one-way delays (µs, a list dealt out over the links) and the
    uplinks' buffers (None: as the host tier), the switches' marking threshold (None: DCTCP's for the
    rate), the controller's poll interval and the kernel's HZ."""

    bw_gbps: float = 10.0
    uplink_gbps: float | None = None
    link_delays_us: list[float] = dataclasses.field(default_factory=lambda: [5.0])
    uplink_delays_us: list[float] | None = None
    uplink_buffer_bytes: int | None = None
    ecn_k_bytes: float | None = None
    poll_interval_s: float = 1.0
    hz: int = 250

    def marking_threshold(self, rate_bps: float) -> float:
        """The switches' marking threshold K in bytes: given, or DCTCP's for a link of rate_bps."""
        return self.ecn_k_bytes if self.ecn_k_bytes is not None else float(default_k_bytes(rate_bps))

    def tiers(self, buffer_bytes: int) -> tuple[Tier, Tier]:
        """The host and uplink tiers with buffer_bytes at the host links' switch ends."""
        return tiers_from(self.bw_gbps, self.uplink_gbps, self.link_delays_us, self.uplink_delays_us, buffer_bytes,
                          self.uplink_buffer_bytes)
