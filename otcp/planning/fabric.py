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


#: Where an input of the formulas came from (LinkOrigins, and the MSS): the inventory's entry,
#: the inventory's defaults section, OTCP's built-in default, or the controller's configuration.
INVENTORY, INVENTORY_DEFAULTS, DEFAULT, CONFIG = "inventory", "inventory defaults", "default", "config"


class LinkOrigins(NamedTuple):
    """Where a link's capacity, buffer and delay came from (INVENTORY, INVENTORY_DEFAULTS or DEFAULT), for
    explanations; the delay the planner trusts is LinkFacts.delay_source."""

    capacity: str = INVENTORY
    buffer: str = INVENTORY
    delay: str = INVENTORY


@dataclass(frozen=True)
class PairRtt:
    """What the hosts measured between two addresses: seconds, and the source of the minimum."""

    low_s: float  # the minimum: the round trip with nothing queued
    high_s: float  # the minimum plus the spread above it
    source: str  # "tcp" or "probe"


Node = str  # a switch's name, or a host's address
Pair = tuple[str, str]  # (source host's address, destination host's address)


@dataclass
class Fabric:
    """A network description: every host hangs off exactly one switch.

    A host is known by its address everywhere (links, flows, round trips,
    and the planner's route sets): the address is what agents report, what
    the switches see and what routes lead to. `hosts` gives each address the
    name people know the host by (the inventory's, else the address itself),
    for display only.

    links maps a directed (u, v) pair of nodes to its LinkFacts;
    flows maps an ordered host pair to its number of active flows;
    egress maps a directed (u, v) leaving a switch to the (dpid, port) the
    switch sends out of toward v (known for a live network only, so the
    controller installs paths without turning names back into ports);
    host_rtts maps an ordered host pair to what the hosts measured between them
    (live network only); origins maps a directed link to where its facts came
    from, where that is known (an inventory's fabric: otcp.planning.inventory).
    """

    switches: list[str]
    hosts: dict[str, str]  # host address -> its name, for display
    links: dict[tuple[Node, Node], LinkFacts] = field(default_factory=dict)
    flows: dict[Pair, int] = field(default_factory=dict)
    egress: dict[tuple[Node, Node], tuple[int, int]] = field(default_factory=dict)
    host_rtts: dict[Pair, PairRtt] = field(default_factory=dict)
    origins: dict[tuple[Node, Node], LinkOrigins] = field(default_factory=dict)

    def add_link(self, a: Node, b: Node, capacity_bytes_per_s: float, delay_s: float, buffer_bytes: float) -> None:
        """Add both directions of a link; only switch ends get a buffer."""
        for u, v in ((a, b), (b, a)):
            self.links[(u, v)] = LinkFacts(
                capacity_bytes_per_s, delay_s, 0.0 if u in self.hosts else buffer_bytes
            )

    def attachments(self) -> dict[str, str]:
        """{host address: the switch it is linked to} (hosts are single-homed)."""
        return {u: v for (u, v) in self.links if u in self.hosts}

    def switch_links(self) -> list[tuple[str, str]]:
        """Directed links whose both ends are switches."""
        return [(u, v) for (u, v) in self.links if u not in self.hosts and v not in self.hosts]

    def name(self, node: Node) -> str:
        """What people call a node: a switch's name, a host's name (display only)."""
        return self.hosts.get(node, node)
