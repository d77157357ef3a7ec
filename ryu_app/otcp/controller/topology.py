"""What the live controller knows of the network, and the Fabric it implies.

Switches come from their OpenFlow connection and port description, links
from the controller's own probes (otcp.controller.core), hosts from the first packets
they send on confirmed edge ports. A port that carries a discovered link is a
link port; any other port is an edge (host-facing) port. LLDP arriving on a
port where a host lives is ignored, so a host cannot invent links.
"""

from dataclasses import dataclass

from otcp.controller.config import DefaultsSection
from otcp.planning import formulas
from otcp.planning.fabric import Fabric, LinkFacts, Pair, PairRtt
from otcp.planning.inventory import Inventory, LinkSpec

SwitchPort = tuple[int, int]  # (dpid, port number)


@dataclass(frozen=True)
class Host:
    """A host learned from its traffic: where it is attached."""

    ip: str
    mac: str
    dpid: int
    port: int


class Topology:
    """Switches, links and hosts as discovered, keyed by dpid and port.

    Lookups made per packet (is this a host's port, a link's port) are
    indexed, and the indexes are kept in step by every change method.
    """

    def __init__(self, inventory: Inventory | None = None) -> None:
        self.inventory: Inventory | None = None
        self.switches: dict[int, dict[int, float]] = {}  # dpid -> {port_no: speed in bytes/s (0 if unknown)}
        self.links: dict[SwitchPort, SwitchPort] = {}  # source end -> destination end
        self.hosts: dict[str, Host] = {}  # ip -> Host, learned from its traffic
        # ip -> where a host was before a restart or before its switch disconnected, until it is seen again
        self.hints: dict[str, Host] = {}
        self._link_ports: dict[SwitchPort, int] = {}  # either end of a link -> how many links use it
        self._hosts_at: dict[SwitchPort, set[str]] = {}  # (dpid, port) -> ips of the hosts there
        self._names: dict[int, str] = {}
        self._host_names: dict[str, str] = {}
        self.set_inventory(inventory)

    def set_inventory(self, inventory: Inventory | None) -> None:
        """Take inventory's declarations (names, capacities, buffers, delays) from now on."""
        self.inventory = inventory
        self._names = inventory.switch_by_dpid() if inventory else {}
        self._host_names = inventory.host_by_ip() if inventory else {}

    # -- naming --------------------------------------------------------------

    def switch_name(self, dpid: int) -> str:
        """The inventory's name for a switch, else s<dpid> as Mininet names it."""
        return self._names.get(dpid, f"s{dpid}")

    def host_name(self, ip: str) -> str:
        """The inventory's name for a host, else its address."""
        return self._host_names.get(ip, ip)

    # -- changes (each returns True if something changed) ----------------------

    def add_switch(self, dpid: int, port_speeds: dict[int, float]) -> bool:
        """Record a switch and its ports' speeds (again after a port change)."""
        changed = self.switches.get(dpid) != port_speeds
        self.switches[dpid] = dict(port_speeds)
        return changed

    def remove_switch(self, dpid: int) -> bool:
        """Forget a switch with its links; the hosts attached to it become hints.

        A switch that reconnects (its controller connection dropped: a loaded
        controller missing the switch's inactivity probe) has its hosts where
        they were, and hosts whose agents wait for their first set send no
        traffic to be learned from again: as hints they are located as soon
        as the switch describes their ports.
        """
        if dpid not in self.switches:
            return False
        del self.switches[dpid]
        for src, dst in list(self.links.items()):
            if dpid in (src[0], dst[0]):
                self.remove_link(src, dst)
        for ip in [ip for ip, host in self.hosts.items() if host.dpid == dpid]:
            host = self.hosts.pop(ip)
            self._unplace(host)
            self.hints[ip] = host
        return True

    def host_port(self, dpid: int, port: int) -> bool:
        """True if a learned host is attached to (dpid, port)."""
        return (dpid, port) in self._hosts_at

    def add_link(self, src: SwitchPort, dst: SwitchPort) -> bool:
        """Accept a discovered link unless either end is a learned host's port.

        A stored hint at either end gives way: the fabric may have changed
        while the controller was down.
        """
        if self.host_port(*src) or self.host_port(*dst) or self.links.get(src) == dst:
            return False
        self.hints = {ip: hint for ip, hint in self.hints.items() if (hint.dpid, hint.port) not in (src, dst)}
        if src in self.links:
            self.remove_link(src, self.links[src])
        self.links[src] = dst
        for end in (src, dst):
            self._link_ports[end] = self._link_ports.get(end, 0) + 1
        return True

    def remove_link(self, src: SwitchPort, dst: SwitchPort) -> bool:
        """Forget the link src -> dst; False if it was not known."""
        if self.links.get(src) != dst:
            return False
        del self.links[src]
        for end in (src, dst):
            self._link_ports[end] -= 1
            if not self._link_ports[end]:
                del self._link_ports[end]
        return True

    def is_link_port(self, dpid: int, port: int) -> bool:
        """True if (dpid, port) is an end of a discovered link."""
        return (dpid, port) in self._link_ports

    def learn_host(self, ip: str, mac: str, dpid: int, port: int) -> bool:
        """Record a host seen on an edge port; returns True if new or moved.

        A host's packets reach a link port only along installed paths, which
        exist only once that link is known: nothing is flooded, so an
        undiscovered link port never shows a host's traffic.
        """
        if dpid not in self.switches or self.is_link_port(dpid, port):
            return False
        host = Host(ip, mac, dpid, port)
        self.hints.pop(ip, None)
        if self.hosts.get(ip) == host:
            return False
        self._place(host)
        return True

    def add_hint(self, host: Host) -> None:
        """Remember where a host was before a restart. A hint is only a hint:
        it is used while its port is an edge port of a connected switch and
        no learned host is there, and seeing the host anywhere replaces it."""
        if host.ip not in self.hosts:
            self.hints[host.ip] = host

    def host(self, ip: str) -> Host | None:
        """Where a host is: learned, else a usable hint; None if unknown."""
        learned = self.hosts.get(ip)
        if learned is not None:
            return learned
        hint = self.hints.get(ip)
        return hint if hint is not None and self._usable(hint) else None

    def located_hosts(self) -> dict[str, Host]:
        """Every host with a place to forward to: the learned ones and the usable hints."""
        usable = {ip: hint for ip, hint in self.hints.items() if ip not in self.hosts and self._usable(hint)}
        return {**usable, **self.hosts}

    def _usable(self, hint: Host) -> bool:
        ports = self.switches.get(hint.dpid)
        return (ports is not None and hint.port in ports and not self.is_link_port(hint.dpid, hint.port)
                and not self.host_port(hint.dpid, hint.port))

    def _place(self, host: Host) -> None:
        """Put a learned host where it was seen."""
        previous = self.hosts.get(host.ip)
        if previous is not None:
            self._unplace(previous)
        self.hosts[host.ip] = host
        self._hosts_at.setdefault((host.dpid, host.port), set()).add(host.ip)

    def _unplace(self, host: Host) -> None:
        """Take a host out of the port index."""
        here = self._hosts_at[(host.dpid, host.port)]
        here.discard(host.ip)
        if not here:
            del self._hosts_at[(host.dpid, host.port)]

    def edge_ports(self) -> list[SwitchPort]:
        """(dpid, port) pairs that carry no link."""
        return [
            (dpid, port) for dpid, ports in self.switches.items() for port in ports if not self.is_link_port(dpid, port)
        ]

    # -- the fabric for the formulas -------------------------------------------

    def fabric(
        self, link_delays: dict[SwitchPort, float], active_pairs: dict[Pair, int], defaults: DefaultsSection,
        delay_spreads: dict[SwitchPort, float] | None = None, host_rtts: dict[Pair, PairRtt] | None = None,
    ) -> tuple[Fabric, dict[tuple[str, str], str]]:
        """Build the Fabric: capacities and buffers from the inventory, else
        port speed and the default buffer; delays measured unless pinned.
        Every directed link leaving a switch carries its egress (dpid, port).
        Hosts are their addresses, as everywhere in the controller.

        link_delays: {(src_dpid, src_port): delay_s} for switch links, and
        delay_spreads their spreads; active_pairs: {(src_ip, dst_ip): count};
        defaults: the configuration's; host_rtts: {(ip, ip): PairRtt} the
        agents measured.
        Returns (fabric, delay_sources) where delay_sources maps each
        directed link to "inventory", "measured" or "default".
        """
        attached = {ip: h for ip, h in self.located_hosts().items() if h.dpid in self.switches}
        switch_names = {dpid: self.switch_name(dpid) for dpid in self.switches}
        fabric = Fabric(switches=list(switch_names.values()), hosts={ip: self.host_name(ip) for ip in attached})
        facts = _LinkFactsOf(self.inventory, defaults, delay_spreads or {})
        # Of parallel links between two switches, the lowest source port is the one used.
        for (src_dpid, src_port), (dst_dpid, _) in sorted(self.links.items(), reverse=True):
            if src_dpid in switch_names and dst_dpid in switch_names:
                speed = self.switches[src_dpid].get(src_port, 0)
                facts.add(fabric, switch_names[src_dpid], switch_names[dst_dpid], speed,
                          link_delays.get((src_dpid, src_port)), (src_dpid, src_port))
        for ip, host in attached.items():
            switch = switch_names[host.dpid]
            speed = self.switches[host.dpid].get(host.port, 0)
            facts.add(fabric, switch, ip, speed, None, (host.dpid, host.port))
            facts.add(fabric, ip, switch, speed, None, None)
        fabric.host_rtts = {pair: rtt for pair, rtt in (host_rtts or {}).items()
                            if pair[0] in attached and pair[1] in attached}
        fabric.flows = {pair: n for pair, n in active_pairs.items() if pair[0] in attached and pair[1] in attached}
        return fabric, facts.sources


class _LinkFactsOf:
    """What Topology.fabric knows of each link: the inventory's declaration (its links named
    by the fabric's nodes: switch names and host addresses), else the port speed and the
    defaults; a delay pinned by the inventory, else measured, else the default."""

    def __init__(self, inventory: Inventory | None, defaults: DefaultsSection,
                 spreads: dict[SwitchPort, float]) -> None:
        self.defaults = defaults
        self.spreads = spreads
        self.specs: dict[frozenset[str], LinkSpec] = {}
        self.pinned: set[frozenset[str]] = set()
        if inventory is not None:
            node = {**{name: name for name in inventory.switches}, **inventory.hosts}
            for spec in inventory.links:
                ends = frozenset((node[spec.a], node[spec.b]))
                self.specs[ends] = spec
                if frozenset((spec.a, spec.b)) in inventory.pinned_delays:
                    self.pinned.add(ends)
        self.sources: dict[tuple[str, str], str] = {}  # directed link -> where its delay came from

    def add(self, fabric: Fabric, u: str, v: str, speed: float, measured_delay: float | None,
            egress: SwitchPort | None) -> None:
        """Add the directed link u -> v to fabric."""
        ends = frozenset((u, v))
        spec = self.specs.get(ends)
        if spec is not None:
            capacity, buffer = formulas.capacity_bytes_per_s(spec.capacity_mbps), spec.buffer_bytes
        else:
            capacity, buffer = speed or self.defaults.capacity_bytes_per_s, self.defaults.buffer_bytes
        if spec is not None and ends in self.pinned:
            delay, source = spec.delay_us * 1e-6, "inventory"
        elif measured_delay is not None:
            delay, source = measured_delay, "measured"
        else:
            delay, source = self.defaults.host_link_delay_s, "default"
        spread = self.spreads.get(egress, 0.0) if source == "measured" and egress else 0.0
        fabric.links[(u, v)] = LinkFacts(capacity, delay, 0.0 if u in fabric.hosts else buffer, source, spread)
        if egress is not None:
            fabric.egress[(u, v)] = egress
        self.sources[(u, v)] = source
