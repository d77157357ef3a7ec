"""What the live controller knows of the network, and the Fabric it implies.

Switches come from their OpenFlow connection and port description, links
from the controller's own probes (otcp.controller.core), hosts from the first packets
they send on confirmed edge ports. A port that carries a discovered link is a
link port; any other port is an edge (host-facing) port. LLDP arriving on a
port where a host lives is ignored, so a host cannot invent links.
"""

from dataclasses import dataclass
from typing import Any

from otcp.planning import formulas
from otcp.planning.fabric import Fabric, LinkFacts

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

    def __init__(self, inventory: Any = None) -> None:
        self.inventory = inventory
        self.switches: dict[int, dict[int, float]] = {}  # dpid -> {port_no: speed in bytes/s (0 if unknown)}
        self.links: dict[SwitchPort, SwitchPort] = {}  # source end -> destination end
        self.hosts: dict[str, Host] = {}  # ip -> Host, learned from its traffic
        self.hints: dict[str, Host] = {}  # ip -> where a host was before a restart, until it is seen again
        self._link_ports: dict[SwitchPort, int] = {}  # either end of a link -> how many links use it
        self._hosts_at: dict[SwitchPort, set[str]] = {}  # (dpid, port) -> ips of the hosts there
        self._names: dict[int, str] = inventory.switch_by_dpid() if inventory else {}
        self._host_names: dict[str, str] = inventory.host_by_ip() if inventory else {}

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
        """Forget a switch with its links and the hosts attached to it."""
        if dpid not in self.switches:
            return False
        del self.switches[dpid]
        for src, dst in list(self.links.items()):
            if dpid in (src[0], dst[0]):
                self.remove_link(src, dst)
        for ip in [ip for ip, host in self.hosts.items() if host.dpid == dpid]:
            self._unplace(self.hosts.pop(ip))
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
        self, link_delays: dict[SwitchPort, float], active_pairs: dict[tuple[str, str], int], defaults: dict,
        delay_spreads: dict[SwitchPort, float] | None = None, host_rtts: dict | None = None,
    ) -> tuple[Fabric, dict[tuple[str, str], str]]:
        """Build the Fabric: capacities and buffers from the inventory, else
        port speed and the default buffer; delays measured unless pinned.
        Every directed link leaving a switch carries its egress (dpid, port).

        link_delays: {(src_dpid, src_port): delay_s} for switch links, and
        delay_spreads their spreads; active_pairs: {(src_ip, dst_ip): count};
        defaults: config 'defaults'; host_rtts: {(ip, ip): rtt.PairRtt} the
        agents measured.
        Returns (fabric, delay_sources) where delay_sources maps each
        directed named link to "inventory", "measured" or "default".
        """
        inventory_links = {}
        if self.inventory:
            for spec in self.inventory.links:
                inventory_links[frozenset((spec.a, spec.b))] = spec
        attached = {ip: h for ip, h in self.located_hosts().items() if h.dpid in self.switches}
        host_names = {ip: self.host_name(ip) for ip in attached}
        switch_names = {dpid: self.switch_name(dpid) for dpid in self.switches}
        hosts = {name: ip for ip, name in host_names.items()}
        fabric = Fabric(switches=list(switch_names.values()), hosts=hosts)
        sources = {}
        default_capacity = formulas.capacity_bytes_per_s(defaults["capacity_mbps"])
        default_delay = defaults["host_link_delay_us"] * 1e-6
        spreads = delay_spreads or {}

        def add(u: str, v: str, speed: float, measured_delay: float | None, egress: SwitchPort | None) -> None:
            spec = inventory_links.get(frozenset((u, v))) if inventory_links else None
            if spec is not None:
                capacity, buffer = formulas.capacity_bytes_per_s(spec.capacity_mbps), spec.buffer_bytes
            else:
                capacity, buffer = speed or default_capacity, defaults["buffer_bytes"]
            if spec is not None and frozenset((u, v)) in self.inventory.pinned_delays:
                delay, source = spec.delay_us * 1e-6, "inventory"
            elif measured_delay is not None:
                delay, source = measured_delay, "measured"
            else:
                delay, source = default_delay, "default"
            spread = spreads.get(egress, 0.0) if source == "measured" and egress else 0.0
            link = (u, v)
            fabric.links[link] = LinkFacts(capacity, delay, 0.0 if u in hosts else buffer, source, spread)
            if egress is not None:
                fabric.egress[link] = egress
            sources[link] = source

        # Of parallel links between two switches, the lowest source port is the one used.
        for (src_dpid, src_port), (dst_dpid, _) in sorted(self.links.items(), reverse=True):
            if src_dpid in switch_names and dst_dpid in switch_names:
                speed = self.switches[src_dpid].get(src_port, 0)
                add(switch_names[src_dpid], switch_names[dst_dpid], speed, link_delays.get((src_dpid, src_port)),
                    (src_dpid, src_port))
        for ip, host in attached.items():
            name, switch = host_names[ip], switch_names[host.dpid]
            speed = self.switches[host.dpid].get(host.port, 0)
            add(switch, name, speed, None, (host.dpid, host.port))
            add(name, switch, speed, None, None)
        fabric.host_rtts = {
            (host_names[a], host_names[b]): rtt
            for (a, b), rtt in (host_rtts or {}).items()
            if a in attached and b in attached
        }
        fabric.flows = {
            (host_names[s], host_names[d]): n
            for (s, d), n in active_pairs.items()
            if s in attached and d in attached
        }
        return fabric, sources
