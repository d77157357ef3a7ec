"""Multipath forwarding (otcp.planning.paths.HostPaths): each destination host's tree takes
one of the equal-cost paths, deterministically, so that the spines or cores of a Clos
fabric carry balanced load; the planner's pairs follow the paths their packets take."""

import collections
import random

import numpy as np
import pytest

from otcp.planning import formulas, inventory
from otcp.planning.paths import UNREACHABLE, HostPaths, SwitchPaths
from otcp.planning.planner import Plan
from otcp.topo.fabrics import FatTreeTopo, LeafSpineTopo
from support.fabrics import random_fabric
from support.reference import ReferencePlanner


def topo_fabric(topo):
    """The fabric of one of otcp.topo's topologies, as its inventory describes it."""
    return inventory.parse(topo.inventory(), type(topo).__name__).fabric()


def host_paths(fabric, multipath=True, links=None):
    switch_links = fabric.switch_links() if links is None else links
    return HostPaths(SwitchPaths(fabric.switches, switch_links), fabric.attachments(), multipath)


def pairs_per_switch_link(fabric, paths):
    """{(u, v): ordered host pairs whose data path crosses the switch link u -> v}."""
    load = collections.Counter()
    attachment = fabric.attachments()
    for src in fabric.hosts:
        for dst in fabric.hosts:
            if src != dst:
                path = paths.path(attachment[src], dst)
                load.update(zip(path, path[1:]))
    return load


CLOS = [LeafSpineTopo(leaves=2, spines=2, hosts_per_leaf=4), LeafSpineTopo(leaves=3, spines=2, hosts_per_leaf=4),
        LeafSpineTopo(leaves=4, spines=4, hosts_per_leaf=4), FatTreeTopo(k=4), FatTreeTopo(k=6)]


@pytest.mark.parametrize("topo", CLOS, ids=lambda topo: f"{type(topo).__name__}-{len(topo.hosts())}")
def test_every_switch_link_of_a_clos_fabric_carries_an_equal_share(topo):
    """All-to-all, every link between two tiers carries the same number of pairs, give or
    take the share of one switch's hosts; with one path per switch pair some carry none."""
    fabric = topo_fabric(topo)
    load = pairs_per_switch_link(fabric, host_paths(fabric))
    switch_links = fabric.switch_links()
    assert set(load) == set(switch_links)  # every link carries pairs
    for tier in {(u[0], v[0]) for u, v in switch_links}:  # leaf->spine, a->c, c->a, ...
        counts = [load[link] for link in switch_links if (link[0][0], link[1][0]) == tier]
        assert max(counts) - min(counts) <= 2 * len(fabric.hosts) // len(fabric.switches), (tier, counts)
        if tier in (("l", "s"), ("s", "l"), ("a", "c"), ("c", "a")):
            assert max(counts) == min(counts), (tier, counts)
    single = pairs_per_switch_link(fabric, host_paths(fabric, multipath=False))
    assert set(single) < set(switch_links)


def test_leaf_spine_spreads_each_leafs_hosts_over_the_spines():
    """The hosts of one leaf take the spines in turn: h5..h8 on leaf2 alternate."""
    fabric = topo_fabric(LeafSpineTopo(leaves=2, spines=2, hosts_per_leaf=4))
    paths = host_paths(fabric)
    address = {name: ip for ip, name in fabric.hosts.items()}
    spines = [paths.path("leaf1", address[f"h{i}"])[1] for i in range(5, 9)]
    assert spines in (["spine1", "spine2"] * 2, ["spine2", "spine1"] * 2)


@pytest.mark.parametrize("seed", range(12))
def test_paths_are_shortest_trees_and_deterministic(seed):
    """Whatever the fabric: every step goes one hop closer to the destination's switch (a tree of
    fewest-hop paths, loop-free), and the same fabric gives the same paths whatever order its
    links come in."""
    rng = random.Random(seed)
    fabric = random_fabric(rng, hosts=rng.randint(2, 30), switches=rng.randint(1, 12))
    paths = host_paths(fabric)
    sp = paths.switch_paths
    for d, target in enumerate(paths.attach):
        for i in range(len(sp.switches)):
            hop = paths.next_hop[d, i]
            if sp.hops[i, target] in (UNREACHABLE, 0):
                assert hop == UNREACHABLE
            else:
                assert sp.hops[hop, target] == sp.hops[i, target] - 1
                assert (sp.switches[i], sp.switches[hop]) in fabric.links
    shuffled = fabric.switch_links()
    rng.shuffle(shuffled)
    assert np.array_equal(host_paths(fabric, links=shuffled).next_hop, paths.next_hop)
    assert np.array_equal(host_paths(fabric).next_hop, paths.next_hop)


def test_without_multipath_each_host_takes_its_switchs_path():
    fabric = topo_fabric(FatTreeTopo(k=4))
    paths = host_paths(fabric, multipath=False)
    for host, switch in fabric.attachments().items():
        for source in fabric.switches:
            assert paths.path(source, host) == paths.switch_paths.path(source, switch)


@pytest.mark.parametrize("multipath", [True, False])
def test_the_plan_follows_the_data_and_ack_paths_packets_take(multipath):
    """Every pair's record names its destination's tree; its round trip is the data path and the
    ACK path (the source's tree), as the reference evaluates it: on a leaf-spine whose two spines
    differ in delay, a pair whose ACKs come back over the other spine has the mixed round trip."""
    topo = LeafSpineTopo(leaves=2, spines=2, hosts_per_leaf=2)
    document = topo.inventory()
    for link in document["links"]:
        link["delay_us"] = 500 if "spine2" in (link["a"], link["b"]) else 10
    fabric = inventory.parse(document, "leaf-spine").fabric()
    plan = Plan(fabric, multipath=multipath)
    reference = ReferencePlanner(fabric, formulas.Bounds(), multipath=multipath)
    paths = plan.host_paths
    rtts = set()
    for k in range(len(plan)):
        src, dst = plan.hosts[plan.src[k]], plan.hosts[plan.dst[k]]
        assert plan.hops(k)[1:-1] == paths.path(plan.attachment[src], dst) == reference.host_path(src, dst)[1:-1]
        assert plan.min_rto_s[k] == pytest.approx(reference.pair(src, dst)[0])
        rtts.add(round(float(plan.rtt_prop_s[k]) * 1e6))
    # Cross-leaf round trips: both ways on spine1, both on spine2, or one each (multipath only).
    cross = rtts - {40}
    assert cross == ({80, 1060, 2040} if multipath else {80} if 80 in cross else {2040})


@pytest.mark.parametrize("topo", [FatTreeTopo(k=4), FatTreeTopo(k=6),
                                  LeafSpineTopo(leaves=4, spines=4, hosts_per_leaf=4)],
                         ids=lambda topo: f"{type(topo).__name__}-{len(topo.hosts())}")
def test_after_a_link_fails_only_the_trees_that_crossed_it_move(topo):
    """With the forwarding before, a failure moves only the destinations whose tree crossed the
    failed link; the trees are still of fewest-hop paths; when the link comes back, all is the
    rule's again (balanced)."""
    fabric = topo_fabric(topo)
    before = host_paths(fabric)
    sp = before.switch_paths
    for failed in sorted({tuple(sorted(link)) for link in fabric.switch_links()}):
        links = [link for link in fabric.switch_links() if tuple(sorted(link)) != failed]
        after = HostPaths(SwitchPaths(fabric.switches, links, previous=sp), fabric.attachments(), previous=before)
        a, b = sp.index[failed[0]], sp.index[failed[1]]
        # crossed[d, i]: switch i forwarded toward host d over the failed link.
        crossed = ((np.arange(len(sp.switches))[None, :] == a) & (before.next_hop == b)
                   | (np.arange(len(sp.switches))[None, :] == b) & (before.next_hop == a))
        moved = (after.next_hop != before.next_hop).any(axis=1)
        assert moved.any() and not (moved & ~crossed.any(axis=1)).any(), failed
        for d, target in enumerate(after.attach):
            for i in range(len(sp.switches)):
                hop = after.next_hop[d, i]
                if after.switch_paths.hops[i, target] > 0:
                    assert after.switch_paths.hops[hop, target] == after.switch_paths.hops[i, target] - 1
                    assert tuple(sorted((sp.switches[i], sp.switches[hop]))) != failed
        back = HostPaths(SwitchPaths(fabric.switches, fabric.switch_links()), fabric.attachments(), previous=after)
        assert np.array_equal(back.next_hop, before.next_hop)
