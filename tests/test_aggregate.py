"""Aggregated parameter sets (`otcp.planning.aggregate`, Plan.route_sets): at most one
route per edge switch; longest-prefix match over them gives every destination
exactly its own parameters (Plan.routes_for is the oracle) where the exact
aggregation fits in that budget, and never less safe ones where it does not."""

import copy
import ipaddress
import math
import random

import numpy as np
import pytest

from otcp.planning import formulas, inventory
from otcp.planning.aggregate import Aggregation, PrefixTrie, _leaf_masks
from otcp.planning.fabric import Fabric
from otcp.planning.planner import EXACT_AGAIN_SHARE, Plan
from support.fabrics import fat_tree_fabric, random_fabric
from support.inventories import random_inventory
from support.routes import lookup


def routes_of(aggregation):
    """[(prefix, label)] of each source of aggregation, most general first."""
    sources = aggregation.labels.shape[0]
    position, node, label = aggregation.emitted(np.arange(sources))
    routes = list(zip([aggregation.trie.prefixes[i] for i in node.tolist()], label.tolist()))
    bounds = np.searchsorted(position, np.arange(sources + 1)).tolist()
    return [routes[start:end] for start, end in zip(bounds[:-1], bounds[1:])]


def aggregate(trie, labels):
    """ORTC's routes [(prefix, label)] for each row of labels (sources x addresses, -1: don't care)."""
    return routes_of(Aggregation(trie, labels, words=max(1, -(-(int(labels.max()) + 1) // 64))))


def address_of(route):
    return ipaddress.ip_network(route.dst).network_address


def assert_same_as_host_routes(plan):
    sets = plan.route_sets()
    for host in plan.hosts:
        for route in plan.routes_for(host):
            chosen = lookup(sets[host], address_of(route))
            assert chosen is not None and chosen.parameters() == route.parameters(), (host, route, chosen)
        assert len({r.dst for r in sets[host]}) == len(sets[host])  # no duplicate prefixes
    return sets


def unbounded(value):
    """A route field for comparing sides: null (no clamp, the kernel's MSS, not paced) is the largest."""
    return math.inf if value is None else value


def never_less_safe(chosen, wanted):
    """Whether the route chosen for a destination is at least as safe as its own route: a minRTO
    no shorter, quickack on where its own has it, and no larger initial window, clamp, advertised
    MSS or pacing rate."""
    return chosen.rto_min_ms >= wanted.rto_min_ms and chosen.quickack >= wanted.quickack and all(
        unbounded(getattr(chosen, name)) <= unbounded(getattr(wanted, name))
        for name in ("initcwnd", "cwnd_clamp", "advmss", "pacing_rate")) and long_path_side(chosen, wanted)


def long_path_side(chosen, wanted):
    """The long-path fields go all together: none, or the destination's congestion control with
    an ssthresh and increase no larger than its own."""
    if chosen.congctl is None:
        return chosen.ssthresh is None and chosen.increase is None
    return chosen.congctl == wanted.congctl and all(
        getattr(wanted, name) is not None and getattr(chosen, name) <= getattr(wanted, name)
        for name in ("ssthresh",) + (("increase",) if chosen.increase is not None else ()))


def exact_route_count(plan, wanted, family_hosts):
    """How many routes the exact aggregation of one host's own routes takes (the ORTC of
    its routes_for, labelled by their parameters), over the hosts of one family."""
    addresses = list(family_hosts)
    numbers: dict = {}
    by_address = {address_of(r): r for r in wanted}
    labels = np.array([[numbers.setdefault(by_address[a].parameters(), len(numbers)) if a in by_address else -1
                        for a in map(ipaddress.ip_address, addresses)]])
    return len(aggregate(PrefixTrie.build(addresses), labels)[0])


def assert_safe_within_budget(plan, coarse_before=frozenset()):
    """Every host's set, per address family: at most one route per edge switch with hosts of
    that family; exactly every destination's own parameters where the exact aggregation fits
    in that (for a host of coarse_before, in EXACT_AGAIN_SHARE of it), else never less safe
    ones. Returns the sets and how many were not exact."""
    sets = plan.route_sets()
    not_exact = 0
    for host in plan.hosts:
        assert len({r.dst for r in sets[host]}) == len(sets[host])  # no duplicate prefixes
        for version in (4, 6):
            family_hosts = [h for h in plan.hosts if ipaddress.ip_address(h).version == version]
            budget = len({plan.attachment[h] for h in family_hosts})
            routes = [r for r in sets[host] if ipaddress.ip_network(r.dst).version == version]
            wanted = [r for r in plan.routes_for(host) if ipaddress.ip_network(r.dst).version == version]
            assert len(routes) <= budget, (host, version, len(routes), budget)
            fits = int(budget * EXACT_AGAIN_SHARE) if host in coarse_before else budget
            exact = exact_route_count(plan, wanted, family_hosts) <= fits if wanted else True
            not_exact += not exact
            for route in wanted:
                chosen = lookup(routes, address_of(route))
                assert chosen is not None, (host, route)
                if exact:
                    assert chosen.parameters() == route.parameters(), (host, route, chosen)
                else:
                    assert never_less_safe(chosen, route), (host, route, chosen)
    return sets, not_exact


def test_a_homogeneous_fat_tree_needs_a_handful_of_routes_per_host():
    plan = Plan(fat_tree_fabric(8))
    sets = assert_same_as_host_routes(plan)
    assert max(len(routes) for routes in sets.values()) <= 32  # at most one per edge switch
    assert max(len(routes) for routes in sets.values()) < 10  # pods alike: far fewer


@pytest.mark.parametrize("seed", range(12))
def test_random_fabrics_with_flows_and_mixed_families_are_safe_within_one_route_per_edge_switch(seed):
    """The property, on fabrics whose addresses do not follow the edge switches, with every
    formula set: exact where the exact aggregation fits, never less safe where it does not."""
    rng = random.Random(seed)
    lossless = formulas.Lossless() if seed % 3 == 1 else None
    pacing = formulas.Pacing(0.05) if seed % 3 == 2 else None
    plan = Plan(random_fabric(rng, hosts=40, switches=8, ipv6=seed % 2 == 1), formulas.Bounds(), lossless, pacing)
    assert_safe_within_budget(plan)


@pytest.mark.parametrize("flows", [8, 16])
def test_some_sets_exact_and_some_on_the_safe_side(flows):
    """A k=4 fat-tree with a few flows: the hosts whose exact sets fit keep them, the others
    take the safe side; both kinds appear."""
    fabric = fat_tree_fabric(4)
    rng = random.Random(flows)
    fabric.flows = {tuple(rng.sample(sorted(fabric.hosts), 2)): 1 for _ in range(flows)}
    _, not_exact = assert_safe_within_budget(Plan(fabric))
    assert 0 < not_exact < len(fabric.hosts)


@pytest.mark.parametrize("seed", range(25))
def test_islands_and_unreachable_destinations_keep_the_property(seed):
    """The planner-reference inventories: some fabrics in islands (unreachable destinations are
    "don't care"), mixed capacities, delays, buffers and flows; every formula set."""
    fabric = inventory.parse(random_inventory(seed)).fabric()
    for lossless, pacing in ((None, None), (formulas.Lossless(), formulas.Pacing())):
        assert_safe_within_budget(Plan(fabric, formulas.Bounds(), lossless, pacing))


@pytest.mark.parametrize("seed", range(25))
def test_long_paths_keep_the_property(seed):
    """Wide-area delays on some links: routes with and without the long-path fields, GridDT's
    increase on and off; a route over several destinations carries them only where all have them."""
    fabric = inventory.parse(random_inventory(seed, long_delays=True)).fabric()
    assert_safe_within_budget(Plan(fabric, long_paths=formulas.LongPaths(bdp_threshold_bytes=12_500,
                                                                         griddt=seed % 2 == 0)))


def test_a_set_on_the_safe_side_stays_there_until_its_exact_set_fits_in_three_quarters_of_the_budget():
    """The hysteresis: every host on the safe side before, on a fat-tree whose exact sets
    range from a handful of routes to over the budget. Those whose exact sets fit in 3/4
    of the budget go exact again; those between 3/4 and the whole budget, which a fresh plan
    makes exact, stay on the safe side; the plan after it carries the same hosts on. One
    path per switch pair: the hosts behind one edge switch alike, so that the exact sets
    range that widely (with multipath nearly every host's is over the budget here)."""
    fabric = fat_tree_fabric(6)
    rng = random.Random(7)
    names = sorted(fabric.hosts)
    fabric.flows = {(h, d): 1 for h in names for d in rng.sample(names, 4) if d != h}
    fresh = Plan(fabric, multipath=False)
    fresh.route_sets()
    everyone = frozenset(names)
    sticky = Plan(fabric, coarse_before=everyone, multipath=False)
    sets, not_exact = assert_safe_within_budget(sticky, coarse_before=everyone)
    assert not_exact > len(fresh.coarse_hosts) and len(sticky.coarse_hosts) == not_exact
    assert fresh.coarse_hosts < sticky.coarse_hosts < everyone
    changed = {host for host in names if sets[host] != fresh.route_sets()[host]}
    assert changed == sticky.coarse_hosts - fresh.coarse_hosts
    after = Plan(fabric, previous=sticky, multipath=False)
    assert after.route_sets() == sets and after.coarse_hosts == sticky.coarse_hosts


def test_a_fat_tree_with_flows_stays_within_one_route_per_edge_switch():
    """Mininet numbers hosts 10.0.0.1 upward, so an edge switch's hosts are one address off
    its own prefix: routes then cover the hosts of two edge switches, on their safe side."""
    fabric = fat_tree_fabric(6)
    rng = random.Random(7)
    names = sorted(fabric.hosts)
    fabric.flows = {(h, d): 1 for h in names for d in rng.sample(names, 4) if d != h}
    sets, not_exact = assert_safe_within_budget(Plan(fabric))
    assert not_exact and max(len(routes) for routes in sets.values()) <= 18


def test_addresses_by_edge_switch_give_each_edge_switch_its_own_safe_route():
    """Where each edge switch's hosts have a prefix of their own, an over-budget set has one
    route per edge switch (or fewer), each the safe side of that switch's hosts alone."""
    numbered = fat_tree_fabric(6)
    by_switch: dict = {}
    for host, switch in sorted(numbered.attachments().items()):
        by_switch.setdefault(switch, []).append(host)
    address = {host: f"10.1.{rack}.{number}" for rack, hosts in enumerate(by_switch.values())
               for number, host in enumerate(hosts, start=1)}
    fabric = Fabric(switches=numbered.switches, hosts={address[ip]: name for ip, name in numbered.hosts.items()},
                    links={(address.get(u, u), address.get(v, v)): facts for (u, v), facts in numbered.links.items()})
    by_switch = {switch: [address[host] for host in hosts] for switch, hosts in by_switch.items()}
    rng = random.Random(8)
    names = sorted(fabric.hosts)
    fabric.flows = {(h, d): 1 for h in names for d in rng.sample(names, 4) if d != h}
    plan = Plan(fabric)
    sets, not_exact = assert_safe_within_budget(plan)
    assert not_exact
    rack_of = {host: switch for switch, hosts in by_switch.items() for host in hosts}
    for host in plan.hosts:
        wanted = {address_of(r).compressed: r for r in plan.routes_for(host)}
        if all(lookup(sets[host], address).parameters() == route.parameters() for address, route in wanted.items()):
            continue  # exact
        for address in wanted:
            rack = [route for peer, route in wanted.items() if rack_of[peer] == rack_of[address]]
            safe = {"rto_min_ms": max(r.rto_min_ms for r in rack), "quickack": True,
                    **{name: min(unbounded(getattr(r, name)) for r in rack)
                       for name in ("initcwnd", "cwnd_clamp", "advmss", "pacing_rate")},
                    "congctl": math.inf, "ssthresh": math.inf, "increase": math.inf}  # no long path here
            chosen = lookup(sets[host], address).model_dump(exclude={"dst"})
            assert {name: unbounded(value) for name, value in chosen.items()} == safe


@pytest.mark.parametrize("seed", range(6))
def test_pacing_rates_are_kept_apart_by_aggregation(seed):
    """With otcp-paced, routes alike in every window but the pacing rate are not merged, and
    every destination keeps its rate (the rate is part of what aggregation compares) where the set
    is exact, else a rate never larger than its own; with flows and without."""
    rng = random.Random(100 + seed)
    fabric = random_fabric(rng, hosts=40, switches=8, ipv6=seed % 2 == 1)
    idle = copy.deepcopy(fabric)
    idle.flows = {}
    for planned in (fabric, idle):
        plan = Plan(planned, formulas.Bounds(), formulas.Lossless() if seed % 2 else None, formulas.Pacing(0.05))
        sets, _ = assert_safe_within_budget(plan)
        rates = {r.pacing_rate for routes in sets.values() for r in routes}
        assert None not in rates and len(rates) > 1


def test_coarsened_tries_follow_the_groups_and_cover_every_address():
    rng = np.random.default_rng(5)
    addresses = [str(ipaddress.IPv4Address(0x0A000000 + int(n))) for n in rng.choice(4000, 200, replace=False)]
    trie = PrefixTrie.build(addresses)
    for groups, budget in ((rng.integers(0, 12, len(addresses)).tolist(), 12), ([0] * len(addresses), 1),
                           (list(range(len(addresses))), len(addresses))):
        coarse, covering = trie.coarsened(groups, budget)
        leaves = [coarse.prefixes[i] for i in np.nonzero(coarse.leaf_host >= 0)[0]]
        assert len(leaves) <= budget and sorted(coarse.leaf_host[coarse.leaf_host >= 0]) == list(range(len(leaves)))
        for address, leaf in zip(addresses, covering):
            # Longest-prefix match over the coarse leaves finds the one covering the address.
            table = [{"dst": prefix, "leaf": i} for i, prefix in zip(coarse.leaf_host[coarse.leaf_host >= 0], leaves)]
            assert lookup(table, address)["leaf"] == leaf
    # Aligned groups (each a /28 of its own): the coarse leaves are exactly their prefixes.
    aligned = [str(ipaddress.IPv4Address(0x0A000000 + 16 * g + h)) for g in range(10) for h in (1, 5, 9)]
    coarse, covering = PrefixTrie.build(aligned).coarsened([i // 3 for i in range(len(aligned))], 10)
    assert covering.tolist() == [i // 3 for i in range(len(aligned))]
    assert [coarse.prefixes[i] for i in np.nonzero(coarse.leaf_host >= 0)[0]] == [
        f"10.0.0.{16 * g}/28" for g in range(10)]


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


@pytest.mark.parametrize("seed", range(6))
def test_an_updated_aggregation_is_the_aggregation_of_its_new_labels(seed):
    """Aggregation.update redoes only what a few changed labels reach: its state and routes
    equal a fresh Aggregation's of the new labels, whatever changed (a label, to or from
    don't care, many of one source, every source), change after change."""
    rng = np.random.default_rng(seed)
    ipv6 = seed % 2 == 1
    base = 0x20010DB8 << 96 if ipv6 else 0x0A000000
    kind = ipaddress.IPv6Address if ipv6 else ipaddress.IPv4Address
    addresses = [str(kind(base + int(n))) for n in rng.choice(4096, 200, replace=False)]
    trie = PrefixTrie.build(addresses)
    few = 3 if seed < 3 else 130  # one word of labels, or three
    labels = rng.integers(-1, few, size=(12, len(addresses)))
    kept = Aggregation(trie, labels.copy(), words=-(-few // 64))  # its own labels, which update changes
    for step in range(8):
        count = [1, 5, 40, 600][step % 4]
        rows, columns = rng.integers(0, 12, count), rng.integers(0, len(addresses), count)
        if step == 5:
            rows = np.full(count, 4)
        new = rng.integers(-1, few, count)
        labels[rows, columns] = new
        last = {}
        for i, (r, c) in enumerate(zip(rows.tolist(), columns.tolist())):
            last[(r, c)] = i  # a cell given twice keeps its last label, as in labels
        keep = np.array(sorted(last.values()))
        kept.update(rows[keep], columns[keep], new[keep])
        fresh = Aggregation(trie, labels.copy(), words=kept.masks.shape[-1])
        assert np.array_equal(kept.labels, labels)
        assert np.array_equal(kept.masks, fresh.masks)
        assert np.array_equal(kept.chosen, fresh.chosen) and np.array_equal(kept.emit, fresh.emit)
        assert routes_of(kept) == routes_of(fresh) == aggregate(trie, labels)
        assert kept.route_counts(np.arange(12)).tolist() == [len(r) for r in routes_of(fresh)]


@pytest.mark.parametrize("words", [1, 2, 3])
def test_a_leaf_mask_is_its_labels_bit_or_every_bit_for_dont_care(words):
    rng = np.random.default_rng(words)
    labels = rng.integers(-1, 64 * words, size=(40, 30))
    masks = _leaf_masks(labels, words)
    assert masks.shape == (40, 30, words) and masks.dtype == np.uint64
    for label, mask in zip(labels.reshape(-1).tolist(), masks.reshape(-1, words).tolist()):
        bits = sum(word << (64 * w) for w, word in enumerate(mask))
        assert bits == ((1 << 64 * words) - 1 if label < 0 else 1 << label)
