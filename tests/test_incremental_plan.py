"""Re-planning only what changed (Plan(fabric, previous=...)): every pair's
parameters and every host's route set equal a full plan's, whatever changed."""

import copy
import random

import numpy as np
import pytest

from otcp.planning import formulas
from otcp.planning.fabric import Fabric, LinkFacts, PairRtt
from otcp.planning.planner import _PAIR_ARRAYS, RELABEL_SHARE, Plan
from support.fabrics import fat_tree_fabric, random_fabric
from support.routes import lookup


def assert_same(incremental, full):
    for name in _PAIR_ARRAYS:
        new, old = getattr(incremental, name), getattr(full, name)
        if new.dtype.kind == "f":  # numpy may sum a block's columns in another order: last-bit differences
            assert np.allclose(new, old, rtol=1e-12, atol=0), name
        else:
            assert np.array_equal(new, old), name
    assert_same_routing(incremental, full)
    assert incremental.unreachable == full.unreachable
    assert incremental.coarse_hosts == full.coarse_hosts


def assert_same_routing(incremental, full):
    """Route sets alike in all that counts: each host has as many routes, and longest-prefix
    match gives it the same parameters toward every other host it reaches. (Of ORTC's equally
    small tables, which one a plan picks depends on how its labels are numbered, and a plan
    made from a previous one keeps the numbers that one's labels had.)"""
    incremental_sets, full_sets = incremental.route_sets(), full.route_sets()
    assert incremental_sets.keys() == full_sets.keys()
    unreachable = set(full.unreachable)
    for host, routes in full_sets.items():
        assert len(incremental_sets[host]) == len(routes), host
        for other in full.fabric.hosts:
            if other != host and (host, other) not in unreachable:
                chosen = lookup(incremental_sets[host], other)
                assert chosen.parameters() == lookup(routes, other).parameters(), (host, other)


def slower(fabric, link, factor):
    facts = fabric.links[link]
    fabric.links[link] = LinkFacts(facts.capacity_bytes_per_s, facts.delay_s * factor, facts.buffer_bytes,
                                   facts.delay_source, facts.delay_spread_s)


def without(fabric, a, b):
    del fabric.links[(a, b)], fabric.links[(b, a)]


@pytest.mark.parametrize("seed", range(10))
def test_random_changes_replan_like_a_full_plan(seed):
    rng = random.Random(seed)
    fabric = random_fabric(rng, hosts=30, switches=8, ipv6=seed % 3 == 0)
    before = Plan(fabric)
    before.route_sets()
    after = copy.deepcopy(fabric)
    switch_links = sorted(after.switch_links())
    change = seed % 5
    if change == 0:
        slower(after, rng.choice(switch_links), 3.0)
    elif change == 1:
        without(after, *rng.choice(switch_links))
    elif change == 2:
        after.flows = {tuple(rng.sample(sorted(after.hosts), 2)): 1 for _ in range(10)}
    elif change == 3:
        a, b = rng.sample(sorted(after.hosts), 2)
        after.host_rtts = {(a, b): PairRtt(2e-4, 3e-4, "tcp")}
    else:  # a host's own link: only that host's terms change
        host = rng.choice(sorted(after.hosts))
        slower(after, next(link for link in after.links if host in link), 5.0)
    incremental = Plan(after, previous=before)
    assert_same(incremental, Plan(after, coarse_before=before.coarse_hosts))
    # The switch paths are the previous plan's while the switches and their links are the same.
    assert (incremental.switch_paths is before.switch_paths) == (change != 1)


@pytest.mark.parametrize("seed", range(4))
def test_flows_coming_and_going_replan_the_pacing_rates_like_a_full_plan(seed):
    """otcp-paced: a flow's arrival or departure moves the rates of the pairs sharing its links."""
    rng = random.Random(50 + seed)
    fabric = random_fabric(rng, hosts=30, switches=8, ipv6=seed % 2 == 1)
    pacing, lossless = formulas.Pacing(0.05), formulas.Lossless()
    before = Plan(fabric, formulas.Bounds(), lossless, pacing)
    before.route_sets()
    after = copy.deepcopy(fabric)
    after.flows = {tuple(rng.sample(sorted(after.hosts), 2)): rng.randint(1, 4) for _ in range(12)}
    incremental = Plan(after, formulas.Bounds(), lossless, pacing, previous=before)
    assert_same(incremental, Plan(after, formulas.Bounds(), lossless, pacing, coarse_before=before.coarse_hosts))
    assert not np.array_equal(incremental.pacing_rate, before.pacing_rate)
    # Another headroom is another plan altogether, never a copy of the previous one's rates.
    other = Plan(after, formulas.Bounds(), lossless, formulas.Pacing(0.1), previous=incremental)
    assert_same(other, Plan(after, formulas.Bounds(), lossless, formulas.Pacing(0.1),
                            coarse_before=incremental.coarse_hosts))


def test_a_failed_core_link_reevaluates_only_the_pairs_it_touches_and_keeps_other_sets():
    fabric = fat_tree_fabric(4)
    address = {name: ip for ip, name in fabric.hosts.items()}
    fabric.flows = {(address["h1"], address["h16"]): 1, (address["h5"], address["h9"]): 1}
    before = Plan(fabric)
    before.route_sets()
    after = copy.deepcopy(fabric)
    without(after, "a1_1", "c1")
    incremental = Plan(after, previous=before)
    assert_same(incremental, Plan(after, coarse_before=before.coarse_hosts))
    assert 0 < len(incremental._previous_sets) < len(after.hosts)  # some sets kept, some made again
    unchanged = Plan(after, previous=incremental)
    incremental.route_sets()
    assert_same(unchanged, Plan(after, coarse_before=incremental.coarse_hosts))


def test_fabrics_without_switches_or_hosts_plan_and_replan():
    for fabric in (Fabric(switches=[], hosts={}), Fabric(switches=["s1", "s2"], hosts={})):
        first = Plan(fabric)
        assert len(first) == 0 and first.route_sets() == {}
        assert len(Plan(fabric, previous=first)) == 0


@pytest.mark.parametrize("seed", range(6))
def test_a_chain_of_small_changes_replans_like_full_plans_each_time(seed):
    """Plan after plan, each made from the one before (which updates the route sets' state
    kept from plan to plan, or makes it afresh where most pairs changed or the labels
    outgrew it): every one routes like a full plan of the same fabric."""
    rng = random.Random(100 + seed)
    lossless = formulas.Lossless(fan_in_admission=seed == 5) if seed % 2 else None
    fabric = random_fabric(rng, hosts=40, switches=8, ipv6=seed % 3 == 0)
    plan = Plan(fabric, formulas.Bounds(), lossless)
    plan.route_sets()
    hosts = sorted(fabric.hosts)
    for step in range(8):
        fabric = copy.deepcopy(fabric)
        if step % 4 == 3:  # a host's own link: its pairs, in both directions
            host = rng.choice(hosts)
            slower(fabric, next(link for link in fabric.links if host in link), rng.choice([0.2, 5.0]))
        else:  # a flow or two come and go
            flows = dict(fabric.flows)
            for pair in rng.sample(sorted(flows), 2):
                del flows[pair]
            flows.update({tuple(rng.sample(hosts, 2)): rng.randint(1, 3) for _ in range(2)})
            fabric.flows = flows
        previous_coarse = plan.coarse_hosts
        plan = Plan(fabric, formulas.Bounds(), lossless, previous=plan)
        assert_same(plan, Plan(fabric, formulas.Bounds(), lossless, coarse_before=previous_coarse))


@pytest.mark.parametrize("seed", range(4))
def test_changes_of_a_plan_whose_route_sets_were_never_made_are_not_lost(seed):
    """The controller makes no route sets while discovery settles: the plan after such a
    plan takes its route state with both plans' changes, and routes like a full plan (the
    link that came back up in tests/integration/test_controller_mininet.py made no generation)."""
    rng = random.Random(200 + seed)
    fabric = random_fabric(rng, hosts=30, switches=8, ipv6=seed % 2 == 1)
    first = Plan(fabric)
    first.route_sets()
    unpublished = copy.deepcopy(fabric)
    without(unpublished, *rng.choice(sorted(unpublished.switch_links())))
    if Plan(unpublished).unreachable:  # the same reachability keeps the plans incremental
        unpublished = copy.deepcopy(fabric)
        slower(unpublished, rng.choice(sorted(unpublished.switch_links())), 4.0)
    second = Plan(unpublished, previous=first)  # its route sets are never made
    third = Plan(copy.deepcopy(unpublished), previous=second)  # settled: nothing changed since second
    assert_same(third, Plan(unpublished, coarse_before=second.coarse_hosts))
    assert third.route_sets() != first.route_sets()


@pytest.mark.parametrize("seed", range(4))
def test_lossless_windows_follow_the_smallest_round_trip_into_a_host(seed):
    """otcp-lossless: the measured pairs into a host take the smallest minimum measured on its active
    pairs' paths. When that one falls, or a flow joins whose path measured less, every measured pair
    into the host changes, though only one pair's own measurement or flow did."""
    rng = random.Random(300 + seed)
    fabric = random_fabric(rng, hosts=30, switches=8, ipv6=seed % 2 == 1)
    for link, facts in fabric.links.items():  # links of default delays: the hosts' measurements count
        fabric.links[link] = facts._replace(delay_source="default")
    hosts = sorted(fabric.hosts)
    receiver, *senders = rng.sample(hosts, 9)
    lows = [rng.uniform(2e-3, 8e-3) for _ in senders]
    for sender, low in zip(senders, lows):
        fabric.host_rtts[(sender, receiver)] = fabric.host_rtts[(receiver, sender)] = PairRtt(low, low + 1e-3, "tcp")
    fabric.flows = {(sender, receiver): 1 for sender in senders[:5]}
    lossless = formulas.Lossless()
    before = Plan(fabric, formulas.Bounds(), lossless)
    before.route_sets()
    after = copy.deepcopy(fabric)
    if seed % 2:  # the smallest active minimum falls
        fastest = min(senders[:5], key=lambda sender: after.host_rtts[(sender, receiver)].low_s)
        after.host_rtts[(fastest, receiver)] = PairRtt(1e-3, 2e-3, "tcp")
    else:  # an idle pair whose path measured less than any active one starts a flow
        after.host_rtts[(senders[5], receiver)] = PairRtt(1e-3, 2e-3, "tcp")
        after.flows = {**after.flows, (senders[5], receiver): 1}
    incremental = Plan(after, formulas.Bounds(), lossless, previous=before)
    assert_same(incremental, Plan(after, formulas.Bounds(), lossless, coarse_before=before.coarse_hosts))
    into = [np.nonzero((incremental.src == incremental.host_index[s])
                       & (incremental.dst == incremental.host_index[receiver]))[0][0] for s in senders]
    assert np.allclose(incremental.rtt_prop_s[into], 1e-3)
    assert np.all(before.rtt_prop_s[into] > 1e-3)


def test_lossless_quickack_follows_the_window_back_when_flows_join():
    """otcp-lossless: a receiver's route toward a sender carries quickack while that sender's window
    toward it is one frame. h1 hangs off one switch, 20 hosts (10.0.1.0/27) off another, and 192 more
    off six others, all joined by a core switch (the others keep most pairs out of the change). 8 of the 20 send to h1, then 16: the first 8's
    windows go from 2 frames of 1 355 B to 1 frame of the same size. Only quickack, carried on h1's
    routes toward them (the reverse pairs), changes there; the re-plan relabels them like a full plan."""
    fabric = Fabric(switches=["sC", "sA", "sS"] + [f"s{j}" for j in range(2, 8)], hosts={})
    for switch in fabric.switches[1:]:
        fabric.add_link(switch, "sC", 1.25e7, 2e-5, 85000)
    h1 = "10.0.0.1"
    fabric.hosts[h1] = "h1"
    fabric.add_link(h1, "sA", 1.25e7, 1e-5, 85000)
    senders = [f"10.0.1.{i}" for i in range(20)]
    for i, address in enumerate(senders):
        fabric.hosts[address] = f"x{i}"
        fabric.add_link(address, "sS", 1.25e7, 1e-5, 85000)
    for j in range(2, 8):
        for i in range(32):
            fabric.hosts[f"10.0.{j}.{i}"] = f"o{j}_{i}"
            fabric.add_link(f"10.0.{j}.{i}", f"s{j}", 1.25e7, 1e-5, 85000)
    fabric.flows = {(src, h1): 1 for src in senders[:8]}
    bounds, lossless = formulas.Bounds(), formulas.Lossless()
    before = Plan(fabric, bounds, lossless)
    before.route_sets()
    after = copy.deepcopy(fabric)
    after.flows = {(src, h1): 1 for src in senders[:16]}
    incremental = Plan(after, bounds, lossless, previous=before)
    assert 0 < len(incremental._relabel) <= RELABEL_SHARE * len(incremental)  # the state is updated, not remade
    assert h1 not in incremental.coarse_hosts  # h1's set is exact: a route tells each sender apart
    assert_same(incremental, Plan(after, bounds, lossless, coarse_before=before.coarse_hosts))

    def toward_h1(plan, sender):
        pair = np.nonzero((plan.src == plan.host_index[sender]) & (plan.dst == plan.host_index[h1]))[0][0]
        return plan.cwnd_clamp[pair], plan.segment[pair]

    def quickack(plan, sender):
        return lookup(plan.route_sets()[h1], sender).quickack

    assert [toward_h1(before, s) for s in senders[:8]] == [(2, 1355)] * 8
    # 16 full frames do not fit the queue target: the fan-in rule keeps one full frame each.
    assert [toward_h1(incremental, s) for s in senders[:8]] == [(1, 1448)] * 8
    assert [quickack(before, s) for s in senders[:8]] == [False] * 8
    assert [quickack(incremental, s) for s in senders[:8]] == [True] * 8


def test_a_set_that_goes_to_the_safe_side_takes_the_changes_made_while_it_was_exact():
    """The coarse state of a host whose set is exact waits (its changed leaves pending) until the
    host goes to the safe side. One host's downlink buffer shrinks while every set is exact; then
    six hosts' at a time, each in an edge switch of its own, until the sets outgrow one route per
    edge switch. The first host's edge switch is never touched again: its safe route must still
    carry the smaller window, as a full plan's does."""
    fabric = fat_tree_fabric(6)
    edge_of = {host: switch for (host, switch) in fabric.links if host in fabric.hosts}
    by_edge: dict = {}
    for host in sorted(fabric.hosts, key=lambda ip: int(fabric.hosts[ip][1:])):  # h1, h2, ...
        by_edge.setdefault(edge_of[host], []).append(host)
    first, *others = [hosts[0] for hosts in by_edge.values()]
    plan = Plan(fabric)
    plan.route_sets()
    for step, shrunk in enumerate([[first], others[:6], others[6:12], others[12:]]):
        fabric = copy.deepcopy(fabric)
        for i, host in enumerate(shrunk):
            facts = fabric.links[(edge_of[host], host)]
            fabric.links[(edge_of[host], host)] = LinkFacts(
                facts.capacity_bytes_per_s, facts.delay_s, int(facts.buffer_bytes * (0.1 + 0.03 * i)),
                facts.delay_source, facts.delay_spread_s)
        coarse_before = plan.coarse_hosts
        plan = Plan(fabric, previous=plan)
        assert 0 < len(plan._relabel) <= RELABEL_SHARE * len(plan)  # the state is updated, not remade
        assert_same(plan, Plan(fabric, coarse_before=coarse_before))
        assert bool(plan.coarse_hosts) == (step == 3), step


@pytest.mark.parametrize("seed", range(6))
def test_long_paths_replan_like_a_full_plan(seed):
    """Wide-area delays on some links, GridDT on and off, a threshold low enough that many
    paths are long: flows coming and going move the initial ssthresh, a slower link moves the
    increase and can make a path long or short; the incremental plan is the full one."""
    from otcp.planning import inventory
    from support.inventories import random_inventory

    fabric = inventory.parse(random_inventory(seed, long_delays=True)).fabric()
    long_paths = formulas.LongPaths(bdp_threshold_bytes=100_000, griddt=seed % 2 == 0)
    before = Plan(fabric, long_paths=long_paths)
    before.route_sets()
    after = copy.deepcopy(fabric)
    hosts = sorted(after.hosts)
    rng = random.Random(seed)
    after.flows = {tuple(rng.sample(hosts, 2)): rng.randint(1, 5) for _ in range(4)}
    links = sorted(after.links)
    slower(after, links[rng.randrange(len(links))], 40)
    incremental = Plan(after, long_paths=long_paths, previous=before)
    assert_same(incremental, Plan(after, long_paths=long_paths))
    assert incremental.congctl.any()
