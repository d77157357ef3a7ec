"""The network as the formulas see it: hosts, switches, directed links, flows.

Both the offline planner (from an inventory) and the live controller (from
measurements) describe the network as a Fabric, then hand it to the planner.
"""

from dataclasses import dataclass, field
from typing import NamedTuple


class LinkFacts(NamedTuple):
    """What is known about one direction u -> v of a link.

    buffer_bytes is the egress buffer of u toward v; it is 0 when u is a host,
    because host queues are not counted (docs/design.md, "Formulas"). A named
    tuple: the live controller makes one per link at every re-plan.
    """

    capacity_bytes_per_s: float
    delay_s: float
    buffer_bytes: float
    delay_source: str = "inventory"  # "inventory", "measured" (LLDP) or "default"
    delay_spread_s: float = 0.0  # how far above delay_s the measured samples reach


@dataclass
class Fabric:
    """A network description: every host hangs off exactly one switch.

    links maps a directed (u, v) pair of node names to its LinkFacts;
    flows maps an ordered (src, dst) host pair to its number of active flows;
    egress maps a directed (u, v) leaving a switch to the (dpid, port) the
    switch sends out of toward v (known for a live network only, so the
    controller installs paths without turning names back into ports).
    """

    switches: list
    hosts: dict  # host name -> IP address string
    links: dict = field(default_factory=dict)
    flows: dict = field(default_factory=dict)
    egress: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # (src, dst) host pair -> rtt.PairRtt the hosts measured between them (live network only)
    host_rtts: dict = field(default_factory=dict)

    def add_link(self, a, b, capacity_bytes_per_s, delay_s, buffer_bytes):
        """Add both directions of a link; only switch ends get a buffer."""
        for u, v in ((a, b), (b, a)):
            self.links[(u, v)] = LinkFacts(
                capacity_bytes_per_s, delay_s, 0.0 if u in self.hosts else buffer_bytes
            )

    def attachments(self):
        """{host: the switch it is linked to} (hosts are single-homed)."""
        return {u: v for (u, v) in self.links if u in self.hosts}

    def switch_links(self):
        """Directed links whose both ends are switches."""
        return [(u, v) for (u, v) in self.links if u not in self.hosts and v not in self.hosts]
