"""The vectorised planner agrees with the one-pair-at-a-time reference on
random fabrics: mixed capacities, delays, buffers, flows and islands."""

import dataclasses
import ipaddress
import random

import pytest

from otcp.planning import formulas, inventory
from otcp.planning.fabric import Fabric, PairRtt
from otcp.planning.planner import Plan
from support.inventories import random_inventory
from support.reference import ReferencePlanner


def by_addresses(plan):
    """The plan's records by (source address, destination address): records name their hosts."""
    address = {name: ip for ip, name in plan.fabric.hosts.items()}
    return {(address[r["src"]], r["dst_ip"]): r for r in plan.records()}


def peer_of(route):
    """The host a host route leads to."""
    return route.dst.split("/")[0]


@pytest.mark.parametrize("seed", range(25))
def test_planner_matches_reference(seed):
    inv = inventory.parse(random_inventory(seed))
    bounds = formulas.Bounds(mss_bytes=1448)
    fabric = inv.fabric()
    plan, reference = Plan(fabric, bounds), ReferencePlanner(fabric, bounds)
    planned = by_addresses(plan)
    for src in fabric.hosts:
        for dst in fabric.hosts:
            if src == dst:
                continue
            expected = reference.pair(src, dst)
            if expected is None:
                assert (src, dst) not in planned
                assert (src, dst) in plan.unreachable
                continue
            got = planned[(src, dst)]
            assert got["min_rto_us"] == pytest.approx(expected[0] * 1e6, abs=1e-3)
            assert (got["rto_min_ms"], got["initcwnd"], got["cwnd_clamp"] or 0) == expected[1:]


@pytest.mark.parametrize("seed", range(25))
def test_long_paths_match_reference(seed):
    """Fabrics with wide-area delays on some links: every pair's congestion control, ssthresh and
    increase, in the records and the host routes, are the reference's; with every formula set and
    a threshold from a rack's BDP to a continent's; every other field is the plan's without them."""
    inv = inventory.parse(random_inventory(seed, long_delays=True))
    bounds = formulas.Bounds(mss_bytes=1448)
    long_paths = formulas.LongPaths(bdp_threshold_bytes=[12_500, 1e6, 5e6][seed % 3], griddt=seed % 2 == 0,
                                    reference_rtt_s=[0.1, 0.02][seed % 2], reference_increase=[2, 1, 3][seed % 3])
    lossless = formulas.Lossless() if seed % 4 == 1 else None
    pacing = formulas.Pacing() if seed % 4 == 2 else None
    fabric = inv.fabric()
    plan = Plan(fabric, bounds, lossless, pacing, long_paths=long_paths)
    reference = ReferencePlanner(fabric, bounds, long_paths=long_paths)
    planned = by_addresses(plan)
    for (src, dst), got in planned.items():
        assert (got["congctl"], got["ssthresh"], got["increase"]) == reference.long_path(src, dst)
    for host in fabric.hosts:
        for route in plan.routes_for(host):
            assert (route.congctl, route.ssthresh, route.increase) == reference.long_path(host, peer_of(route))
    without = by_addresses(Plan(fabric, bounds, lossless, pacing, long_paths=None))
    assert {k: {**r, "congctl": None, "ssthresh": None, "increase": None} for k, r in planned.items()} == without


def test_the_random_long_fabrics_have_long_and_short_paths():
    """The comparison above sees both kinds of path, and GridDT increases above 1."""
    kinds, increases = set(), set()
    for seed in range(25):
        fabric = inventory.parse(random_inventory(seed, long_delays=True)).fabric()
        plan = Plan(fabric, long_paths=formulas.LongPaths(griddt=True))
        kinds |= {r["congctl"] for r in plan.records()}
        increases |= {r["increase"] for r in plan.records()}
    assert kinds == {None, "otcp_scalable"} and max(i or 0 for i in increases) > 1


def test_short_paths_keep_every_value_of_a_plan_without_long_paths():
    """On the random fabrics with data-centre delays, every path at or below the threshold has the
    record of the plan without the long-path setting, and a host none of whose paths is long the
    same route set (most paths and hosts: a 40 Gb/s path over 600 us is long by its BDP)."""
    short_records = short_hosts = 0
    for seed in range(25):
        fabric = inventory.parse(random_inventory(seed)).fabric()
        plan, without = Plan(fabric), Plan(fabric, long_paths=None)
        long_sources = set()
        for got, expected in zip(plan.records(), without.records(), strict=True):
            if got["congctl"] is None:
                assert got == {**expected, "congctl": None, "ssthresh": None, "increase": None}
                short_records += 1
            else:
                long_sources.add(got["src"])
        for host, routes in plan.route_sets().items():
            if fabric.hosts[host] not in long_sources:
                assert routes == without.route_sets()[host]
                short_hosts += 1
    assert short_records > 500 and short_hosts > 100


@pytest.mark.parametrize("seed", range(25))
def test_lossless_planner_matches_reference(seed):
    lossless_matches_reference(seed)


def lossless_matches_reference(seed):
    """Every otcp-lossless record and route of a random fabric against the reference; the quickack values seen."""
    inv = inventory.parse(random_inventory(seed))
    bounds = formulas.Bounds(mss_bytes=1448)
    lossless = formulas.Lossless(queue_target_fraction=[0.1, 0.25, 0.5, 1.0][seed % 4], mss_floor_bytes=200,
                                 fan_in_admission=seed % 3 == 2)
    fabric = inv.fabric()
    plan, reference = Plan(fabric, bounds, lossless), ReferencePlanner(fabric, bounds, lossless)
    planned = by_addresses(plan)
    for (src, dst), got in planned.items():
        expected = reference.lossless_pair(src, dst)
        assert (got["initcwnd"], got["cwnd_clamp"] or 0, got["segment_bytes"]) == expected
        assert got["rto_min_ms"] == reference.pair(src, dst)[1]
        assert got["quickack"] == reference.lossless_quickack(src, dst)
    quickacks = set()
    for host in fabric.hosts:
        for route in plan.routes_for(host):
            peer = peer_of(route)
            segment = reference.lossless_pair(peer, host)[2]
            assert route.advmss == (None if segment == 1448 else segment + 12)
            assert route.quickack == reference.lossless_quickack(host, peer)
            quickacks.add(route.quickack)
    return quickacks


def test_lossless_quickack_is_both_on_and_off_in_the_random_fabrics():
    """The reference comparison above sees routes with quickack on and off (else it tests little)."""
    seen = set()
    for seed in range(25):
        seen |= lossless_matches_reference(seed)
    assert seen == {True, False}


@pytest.mark.parametrize("seed", range(25))
def test_pacing_rates_match_reference(seed):
    """otcp-paced: every pair's rate, in the records and in the host's routes, is the reference's."""
    inv = inventory.parse(random_inventory(seed))
    bounds = formulas.Bounds(mss_bytes=1448)
    pacing = formulas.Pacing(headroom=[0.0, 0.05, 0.2, 1.0][seed % 4])
    lossless = formulas.Lossless() if seed % 2 else None
    fabric = inv.fabric()
    plan, reference = Plan(fabric, bounds, lossless, pacing), ReferencePlanner(fabric, bounds, pacing=pacing)
    planned = by_addresses(plan)
    for src in fabric.hosts:
        for dst in fabric.hosts:
            if src != dst:
                expected = reference.pacing_rate(src, dst)
                assert (planned[(src, dst)]["pacing_rate"] if (src, dst) in planned else None) == expected
    for host in fabric.hosts:
        for route in plan.routes_for(host):
            assert route.pacing_rate == reference.pacing_rate(host, peer_of(route))
    # The windows are those of the same formulas without pacing.
    unpaced = by_addresses(Plan(fabric, bounds, lossless))
    assert {k: {**r, "pacing_rate": None} for k, r in planned.items()} == unpaced


@pytest.mark.parametrize("seed", range(24))
def test_planner_matches_reference_with_host_measured_round_trips(seed):
    """Some pairs measured by their hosts (in one order or both), some links with a spread, some
    with a default delay."""
    rng = random.Random(1000 + seed)
    inv = inventory.parse(random_inventory(seed))
    fabric = inv.fabric()
    for link, facts in list(fabric.links.items()):
        draw = rng.random()
        if draw < 0.3:
            fabric.links[link] = facts._replace(delay_source="measured", delay_spread_s=rng.random() * 1e-4)
        elif draw < 0.5:
            fabric.links[link] = facts._replace(delay_source="default")
    names = list(fabric.hosts)
    for _ in range(rng.randint(1, 6)):
        a, b = rng.sample(names, 2)
        low = rng.random() * 1e-3
        rtt = PairRtt(low, low + rng.random() * 1e-4, "tcp")
        fabric.host_rtts[(a, b)] = fabric.host_rtts[(b, a)] = rtt
        if rng.random() < 0.5:  # a flow with a measured round trip, for the lossless windows' shared ones
            fabric.flows[(a, b)] = rng.randint(1, 5)
    bounds = formulas.Bounds(mss_bytes=1448)
    lossless = formulas.Lossless() if seed % 2 else None
    plan, reference = Plan(fabric, bounds, lossless), ReferencePlanner(fabric, bounds)
    for (src, dst), record in by_addresses(plan).items():
        expected = reference.pair(src, dst)
        assert record["min_rto_us"] == pytest.approx(expected[0] * 1e6, abs=1e-3)
        if (src, dst) in fabric.host_rtts:
            # The windows take the smaller of the hosts' minimum and the links' sum; otcp-lossless's,
            # the smallest of those measured on the pair and on the active pairs into its destination.
            round_trip = reference._links_of(src, dst)[1]
            window_rtt = (reference.round_trip(src, dst, round_trip)[0] if lossless is None
                          else reference.lossless_round_trip(src, dst, round_trip))
            host_lows = {rtt.low_s for rtt in fabric.host_rtts.values()}
            assert record["rtt_source"] == ("host" if window_rtt in host_lows else record["rtt_source"])
            assert record["rtt_prop_us"] == pytest.approx(window_rtt * 1e6, abs=1e-3)
        if lossless is None:
            assert (record["rto_min_ms"], record["initcwnd"], record["cwnd_clamp"] or 0) == expected[1:]
        else:
            assert (record["initcwnd"], record["cwnd_clamp"] or 0, record["segment_bytes"]) == \
                reference.lossless_pair(src, dst)


def fan_in_fabric(rng, senders):
    """A random tree of switches (a few extra links) with senders + 1 to + 6 hosts on random switches,
    buffers, capacities and delays drawn per link, and senders of them sending to one receiver;
    returns (fabric, receiver)."""
    names = [f"s{i}" for i in range(rng.randint(1, 6))]
    fabric = Fabric(switches=names, hosts={})

    def link(a, b):
        fabric.add_link(a, b, rng.choice([1.25e7, 1.25e8]), rng.uniform(1e-6, 1e-4), rng.choice([200000, 512000]))

    for i in range(1, len(names)):
        link(names[i], names[rng.randrange(i)])
    for _ in range(len(names) // 2):
        link(*rng.sample(names, 2))
    for i in range(senders + 1 + rng.randint(0, 5)):
        fabric.hosts[str(ipaddress.IPv4Address(0x0A000001 + i))] = f"h{i}"
        link(str(ipaddress.IPv4Address(0x0A000001 + i)), rng.choice(names))
    hosts = sorted(fabric.hosts)
    receiver = rng.choice(hosts)
    fabric.flows = {(host, receiver): 1 for host in rng.sample([h for h in hosts if h != receiver], senders)}
    return fabric, receiver


@pytest.mark.parametrize("seed", range(8))
def test_lossless_fan_in_matches_reference_with_many_senders_into_one_host(seed):
    """50-300 senders into one host of a random fabric, where their full frames do not fit the queue
    target: the planner's otcp-lossless values for pairs into it (a sample: the reference takes every
    sender's path for each) and its routes agree with the reference; and the fan-in rule did change
    them (against the same plan without it)."""
    rng = random.Random(seed)
    senders = rng.randint(50, 300)
    fabric, receiver = fan_in_fabric(rng, senders)
    bounds = formulas.Bounds(mss_bytes=1448)
    lossless = formulas.Lossless(queue_target_fraction=rng.choice([0.1, 0.25]), mss_floor_bytes=256,
                                 fan_in_queue_fraction=rng.choice([0.9, 1.0]))
    plan, reference = Plan(fabric, bounds, lossless), ReferencePlanner(fabric, bounds, lossless)
    planned = by_addresses(plan)
    into = [(src, dst) for (src, dst) in planned if dst == receiver]
    assert len(into) == len(fabric.hosts) - 1
    segments = set()
    for key in rng.sample(into, 8):
        got = planned[key]
        expected = reference.lossless_pair(*key)
        assert (got["initcwnd"], got["cwnd_clamp"] or 0, got["segment_bytes"]) == expected
        segments.add(expected[2])
    (segment,) = segments  # one segment per receiver
    assert {route.advmss for route in plan.routes_for(receiver)} == {None if segment == 1448 else segment + 12}
    shrunk = by_addresses(Plan(fabric, bounds, dataclasses.replace(lossless, fan_in_queue_fraction=0)))
    raised = [planned[key]["segment_bytes"] - shrunk[key]["segment_bytes"] for key in into]
    assert min(raised) >= 0 and max(raised) > 0, (senders, min(raised), max(raised))


@pytest.mark.parametrize("seed", range(8))
def test_admission_matches_reference_with_many_senders_into_one_host(seed):
    """50-300 senders into one host of a random fabric with admission: the planner's values for pairs
    into it agree with the reference, where the receiver's downlink counts at most the senders it
    admits at once; and no segment is smaller than without admission."""
    rng = random.Random(seed)
    senders = rng.randint(50, 300)
    fabric, receiver = fan_in_fabric(rng, senders)
    bounds = formulas.Bounds(mss_bytes=1448)
    lossless = formulas.Lossless(queue_target_fraction=rng.choice([0.1, 0.25]), mss_floor_bytes=256,
                                 fan_in_queue_fraction=rng.choice([0.9, 1.0]), fan_in_admission=True)
    plan, reference = Plan(fabric, bounds, lossless), ReferencePlanner(fabric, bounds, lossless)
    planned = by_addresses(plan)
    into = [(src, dst) for (src, dst) in planned if dst == receiver]
    for key in rng.sample(into, 8):
        got = planned[key]
        assert (got["initcwnd"], got["cwnd_clamp"] or 0, got["segment_bytes"]) == reference.lossless_pair(*key)
    shrinking = by_addresses(Plan(fabric, bounds, dataclasses.replace(lossless, fan_in_admission=False)))
    assert all(planned[key]["segment_bytes"] >= shrinking[key]["segment_bytes"] for key in into)


@pytest.mark.parametrize(("receivers", "segment"), [(1, 1448), (2, 670)])
def test_admission_counts_each_destinations_admitted_senders_on_every_link(receivers, segment):
    """Two leaves under one spine, 100 Mb/s, 25 us and 85 000 B per link; 100 senders on leaf b
    into each of `receivers` hosts on leaf a. Each receiver admits K = 52 (full frames with their
    ACKs in (85 000 - 1 514) / 1 580) at once, so the spine's link into leaf a, and leaf b's into
    the spine, count 52 per receiver, not 100.
    - One receiver: every switch egress counts 52, one full frame each fits: 1448 B.
    - Two: those two links count 104; their fan-in share is 83 486 / 104 - 66 = 736.75 B on the
      wire, one frame of 670 B payload (without the per-destination count, 200 flows: 285 B)."""
    fabric = Fabric(switches=["a", "b", "spine"], hosts={})
    for leaf in ("a", "b"):
        fabric.add_link(leaf, "spine", 1.25e7, 25e-6, 85000)
    targets = [f"10.0.0.{i + 1}" for i in range(receivers)]
    senders = [str(ipaddress.IPv4Address(0x0A000100 + i)) for i in range(100)]
    for i, host in enumerate(targets + senders):
        fabric.hosts[host] = f"h{i}"
        fabric.add_link(host, "a" if host in targets else "b", 1.25e7, 25e-6, 85000)
    fabric.flows = {(sender, target): 1 for sender in senders for target in targets}
    bounds = formulas.Bounds(mss_bytes=1448)
    lossless = formulas.Lossless(0.25, 200, 1.0, True)
    plan, reference = Plan(fabric, bounds, lossless), ReferencePlanner(fabric, bounds, lossless)
    planned = by_addresses(plan)
    for key in [(sender, target) for sender in senders[:5] for target in targets]:
        assert planned[key]["segment_bytes"] == segment
        assert (planned[key]["initcwnd"], planned[key]["cwnd_clamp"], segment) == reference.lossless_pair(*key)
    k = plan.pair_index(senders[0], targets[0])
    spine_to_leaf = next(link for link in plan.explain(k).data_path if (link.src, link.dst) == ("spine", "a"))
    assert (spine_to_leaf.flows, spine_to_leaf.admitted_flows) == (100 * receivers, 52 * receivers)
    without = by_addresses(Plan(fabric, bounds, dataclasses.replace(lossless, fan_in_admission=False)))
    assert without[(senders[0], targets[0])]["segment_bytes"] < segment


def test_every_host_is_told_the_senders_it_may_ask_at_once_from_its_own_downlink():
    """Plan.admissions, what the controller sends as each set's admit: K of the host's downlink,
    (85 000 - 1514) / 1580 -> 52 and (20 000 - 1514) / 1580 -> 11; a buffer whose K is past the
    wire's top gives the top, 65535 (asking fewer is the safe side); without admission, none."""
    fabric = Fabric(switches=["s"], hosts={"10.0.0.1": "h1", "10.0.0.2": "h2", "10.0.0.3": "h3"})
    for host, buffer in (("10.0.0.1", 85000), ("10.0.0.2", 20000), ("10.0.0.3", 2e9)):
        fabric.add_link(host, "s", 1.25e7, 25e-6, buffer)
    bounds = formulas.Bounds(mss_bytes=1448)
    lossless = formulas.Lossless(0.25, 200, 1.0, True)
    assert Plan(fabric, bounds, lossless).admissions() == {"10.0.0.1": 52, "10.0.0.2": 11, "10.0.0.3": 65535}
    assert Plan(fabric, bounds, dataclasses.replace(lossless, fan_in_admission=False)).admissions() == {}
    assert Plan(fabric, bounds).admissions() == {}
