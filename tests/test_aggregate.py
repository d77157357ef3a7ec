"""Aggregated parameter sets (ryu_app/aggregate.py, Plan.route_sets): longest-prefix
match over the aggregated routes gives every destination exactly its own
parameters (Plan.routes_for is the oracle), with far fewer routes."""

import ipaddress
import random

import numpy as np
import pytest

from benchmarks.plan_scale import fat_tree_fabric
from ryu_app import formulas
from ryu_app.aggregate import PrefixTrie, aggregate
from ryu_app.fabric import Fabric
from ryu_app.planner import Plan


def lookup(routes, address):
    """The route longest-prefix match picks for address, or None."""
    address = ipaddress.ip_address(address)
    matching = [r for r in routes if address in ipaddress.ip_network(r["dst"])]
    return max(matching, key=lambda r: ipaddress.ip_network(r["dst"]).prefixlen, default=None)


def assert_same_as_host_routes(plan):
    sets = plan.route_sets()
    for host in plan.hosts:
        for route in plan.routes_for(host):
            chosen = lookup(sets[host], ipaddress.ip_network(route["dst"]).network_address)
            assert chosen is not None and {**chosen, "dst": route["dst"]} == route, (host, route, chosen)
        assert len({r["dst"] for r in sets[host]}) == len(sets[host])  # no duplicate prefixes
    return sets


def test_a_homogeneous_fat_tree_needs_a_handful_of_routes_per_host():
    plan = Plan(fat_tree_fabric(8))
    sets = assert_same_as_host_routes(plan)
    assert max(len(routes) for routes in sets.values()) <= 32  # at most one per edge switch
    assert max(len(routes) for routes in sets.values()) < 10  # pods alike: far fewer


def random_fabric(rng, hosts, switches, ipv6=False):
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
        name = f"h{i}"
        fabric.hosts[name] = f"fd00::{number:x}" if ipv6 and i % 2 else str(ipaddress.IPv4Address(0x0A000000 + number))
        fabric.add_link(name, rng.choice(names), rng.choice([1.25e6, 1.25e7]), rng.uniform(1e-6, 5e-5), 85000)
    fabric.flows = {tuple(rng.sample(sorted(fabric.hosts), 2)): 1 for _ in range(hosts)}
    return fabric


@pytest.mark.parametrize("seed", range(6))
def test_random_fabrics_with_flows_and_mixed_families_keep_every_destinations_parameters(seed):
    rng = random.Random(seed)
    plan = Plan(random_fabric(rng, hosts=40, switches=8, ipv6=seed % 2 == 1))
    assert_same_as_host_routes(plan)


@pytest.mark.parametrize("seed", range(6))
def test_pacing_rates_are_kept_apart_by_aggregation(seed):
    """With otcp-paced, routes alike in every window but the pacing rate are not merged, and
    every destination keeps its rate (the key is no longer one packed integer)."""
    rng = random.Random(100 + seed)
    fabric = random_fabric(rng, hosts=40, switches=8, ipv6=seed % 2 == 1)
    plan = Plan(fabric, formulas.Bounds(), formulas.Lossless() if seed % 2 else None, formulas.Pacing(0.05))
    sets = assert_same_as_host_routes(plan)
    rates = {r["pacing_rate"] for routes in sets.values() for r in routes}
    assert None not in rates and len(rates) > 1
    # The same windows without pacing need no more routes than with it.
    unpaced = Plan(fabric, formulas.Bounds(), formulas.Lossless() if seed % 2 else None).route_sets()
    assert sum(map(len, unpaced.values())) <= sum(map(len, sets.values()))


def test_more_than_64_labels_and_dont_care_addresses():
    """Labels past one 64-bit word; -1 (the source itself, unreachable) takes whatever covers it."""
    rng = np.random.default_rng(3)
    addresses = [str(ipaddress.IPv4Address(0x0A000000 + int(n))) for n in rng.choice(5000, 300, replace=False)]
    trie = PrefixTrie.build(addresses)
    labels = rng.integers(-1, 150, size=(5, len(addresses)))
    labels[4, :] = 7  # one source for which everything is alike: one route
    labels[4, 10] = -1
    for row, routes in zip(labels, aggregate(trie, labels)):
        table = [{"dst": prefix, "label": label} for prefix, label in routes]
        for address, label in zip(addresses, row):
            if label >= 0:
                assert lookup(table, address)["label"] == label
    assert len(aggregate(trie, labels[4:])[0]) == 1
    assert aggregate(trie, np.full((2, len(addresses)), -1)) == [[], []]  # nothing to route
