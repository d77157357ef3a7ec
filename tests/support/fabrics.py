"""Fabrics (otcp.planning.fabric.Fabric) for the planner's tests and benchmarks:
a fat-tree of otcp.topo's, and random ones."""

import ipaddress

from otcp.planning import inventory
from otcp.planning.fabric import Fabric
from otcp.topo.fabrics import FatTreeTopo


def fat_tree_fabric(k):
    """The fabric of otcp.topo's k-ary fat-tree, as its inventory describes it."""
    document = FatTreeTopo(k=k).inventory()
    return inventory.parse(document, f"fat-tree k={k}").fabric()


def random_fabric(rng, hosts, switches, ipv6=False):
    """A random tree of switches plus a few extra links, hosts at random addresses (every other one IPv6
    when asked) on random switches, and one flow per host."""
    names = [f"s{i}" for i in range(switches)]
    fabric = Fabric(switches=names, hosts={})
    for i in range(1, switches):  # a random tree plus a few extra links
        fabric.add_link(names[i], names[rng.randrange(i)], rng.choice([1e6, 1.25e7]), rng.uniform(1e-6, 1e-4),
                        rng.choice([0, 20000, 85000]))
    for _ in range(switches // 2):
        a, b = rng.sample(names, 2)
        fabric.add_link(a, b, 1.25e7, rng.uniform(1e-6, 1e-4), 85000)
    addresses = rng.sample(range(1, 4000), hosts)
    for i, number in enumerate(addresses):
        address = f"fd00::{number:x}" if ipv6 and i % 2 else str(ipaddress.IPv4Address(0x0A000000 + number))
        fabric.hosts[address] = f"h{i}"
        fabric.add_link(address, rng.choice(names), rng.choice([1.25e6, 1.25e7]), rng.uniform(1e-6, 5e-5), 85000)
    fabric.flows = {tuple(rng.sample(sorted(fabric.hosts), 2)): 1 for _ in range(hosts)}
    return fabric
