"""What the live controller knows of the network, and the Fabric it implies.

Switches and links come from os-ken's topology service, hosts from the first
packets they send on edge ports. A port that carries a discovered link is a
link port; any other port is an edge (host-facing) port. LLDP arriving on a
port where a host lives is ignored, so a host cannot invent links.
"""

from dataclasses import dataclass

from ryu_app import formulas
from ryu_app.fabric import Fabric, LinkFacts


@dataclass(frozen=True)
class Host:
    """A host learned from its traffic: where it is attached."""

    ip: str
    mac: str
    dpid: int
    port: int


class Topology:
    """Switches, links and hosts as discovered, keyed by dpid and port."""

    def __init__(self, inventory=None):
        self.inventory = inventory
        self.switches = {}  # dpid -> {port_no: speed in bytes/s (0 if unknown)}
        self.links = {}  # (src_dpid, src_port) -> (dst_dpid, dst_port)
        self.hosts = {}  # ip -> Host
        self._names = inventory.switch_by_dpid() if inventory else {}
        self._host_names = inventory.host_by_ip() if inventory else {}

    # -- naming --------------------------------------------------------------

    def switch_name(self, dpid):
        """The inventory's name for a switch, else s<dpid> as Mininet names it."""
        return self._names.get(dpid, f"s{dpid}")

    def host_name(self, ip):
        return self._host_names.get(ip, ip)

    # -- changes (each returns True if something changed) ----------------------

    def add_switch(self, dpid, port_speeds):
        changed = self.switches.get(dpid) != port_speeds
        self.switches[dpid] = dict(port_speeds)
        return changed

    def remove_switch(self, dpid):
        if dpid not in self.switches:
            return False
        del self.switches[dpid]
        self.links = {s: d for s, d in self.links.items() if s[0] != dpid and d[0] != dpid}
        self.hosts = {ip: h for ip, h in self.hosts.items() if h.dpid != dpid}
        return True

    def host_port(self, dpid, port):
        return any(h.dpid == dpid and h.port == port for h in self.hosts.values())

    def add_link(self, src, dst):
        """Accept a discovered link unless either end is a host's port."""
        if self.host_port(*src) or self.host_port(*dst) or self.links.get(src) == dst:
            return False
        self.links[src] = dst
        return True

    def remove_link(self, src, dst):
        if self.links.get(src) != dst:
            return False
        del self.links[src]
        return True

    def is_link_port(self, dpid, port):
        return (dpid, port) in self.links or (dpid, port) in self.links.values()

    def learn_host(self, ip, mac, dpid, port):
        """Record a host seen on an edge port; returns True if new or moved.

        A host's packets reach a link port only along installed paths, which
        exist only once that link is known: nothing is flooded, so an
        undiscovered link port never shows a host's traffic.
        """
        if dpid not in self.switches or self.is_link_port(dpid, port):
            return False
        host = Host(ip, mac, dpid, port)
        if self.hosts.get(ip) == host:
            return False
        self.hosts[ip] = host
        return True

    def edge_ports(self):
        """(dpid, port) pairs that carry no link."""
        return [
            (dpid, port) for dpid, ports in self.switches.items() for port in ports if not self.is_link_port(dpid, port)
        ]

    def port_toward(self, dpid, neighbour_dpid):
        """The port of switch dpid that links to neighbour_dpid."""
        for (src_dpid, src_port), (dst_dpid, _) in sorted(self.links.items()):
            if src_dpid == dpid and dst_dpid == neighbour_dpid:
                return src_port
        return None

    # -- the fabric for the formulas -------------------------------------------

    def fabric(self, link_delays, active_pairs, defaults):
        """Build the Fabric: capacities and buffers from the inventory, else
        port speed and the default buffer; delays measured unless pinned.

        link_delays: {(src_dpid, src_port): delay_s} for switch links;
        active_pairs: {(src_ip, dst_ip): count}; defaults: config 'defaults'.
        Returns (fabric, delay_sources) where delay_sources maps each
        directed named link to "inventory", "measured" or "default".
        """
        inventory_links = {}
        if self.inventory:
            for spec in self.inventory.links:
                inventory_links[frozenset((spec.a, spec.b))] = spec
        attached = {ip: h for ip, h in self.hosts.items() if h.dpid in self.switches}
        hosts = {self.host_name(ip): ip for ip in attached}
        fabric = Fabric(switches=[self.switch_name(d) for d in self.switches], hosts=hosts)
        sources = {}

        def add(u, v, speed, measured_delay):
            spec = inventory_links.get(frozenset((u, v)))
            pinned = spec is not None and frozenset((u, v)) in self.inventory.pinned_delays
            if spec is not None:
                capacity = formulas.capacity_bytes_per_s(spec.capacity_mbps)
                buffer = spec.buffer_bytes
            else:
                capacity = speed or formulas.capacity_bytes_per_s(defaults["capacity_mbps"])
                buffer = defaults["buffer_bytes"]
            if pinned:
                delay, source = spec.delay_us * 1e-6, "inventory"
            elif measured_delay is not None:
                delay, source = measured_delay, "measured"
            else:
                delay, source = defaults["host_link_delay_us"] * 1e-6, "default"
            buffer = 0.0 if u in hosts else buffer
            fabric.links[(u, v)] = LinkFacts(capacity, delay, buffer)
            sources[(u, v)] = source

        for (src_dpid, src_port), (dst_dpid, _) in self.links.items():
            if src_dpid in self.switches and dst_dpid in self.switches:
                speed = self.switches[src_dpid].get(src_port, 0)
                add(
                    self.switch_name(src_dpid),
                    self.switch_name(dst_dpid),
                    speed,
                    link_delays.get((src_dpid, src_port)),
                )
        for ip, host in attached.items():
            name, switch = self.host_name(ip), self.switch_name(host.dpid)
            speed = self.switches[host.dpid].get(host.port, 0)
            add(switch, name, speed, None)
            add(name, switch, speed, None)
        fabric.flows = {
            (self.host_name(s), self.host_name(d)): n for (s, d), n in active_pairs.items() if s in attached and d in attached
        }
        return fabric, sources
