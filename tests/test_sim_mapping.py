"""The simulator's pure parts: the planner's route parameters as per-connection settings, the fabrics
(addresses, routes along the planner's paths, tiers, placement), the ideal round, and the closed loop's
use of the controller's flow counting and the real planner."""

import math

import pytest

from otcp.experiments.sim import fabric as sim_fabric
from otcp.experiments.sim import mapping
from otcp.experiments.sim.incast import ideal_round_s
from otcp.experiments.sim.loop import ClosedLoop
from otcp.experiments.sim.schemes import catalogue
from otcp.planning import formulas
from otcp.planning.fabric import Fabric
from otcp.planning.planner import Plan
from otcp.wire.paramset import RouteParams


def star(senders=4, gbps=1.0, buffer_bytes=85000, delay_us=5.0):
    host, uplink = sim_fabric.tiers_from(gbps, None, [delay_us], None, buffer_bytes, None)
    return sim_fabric.from_topo(f"star,{senders}", host, uplink)


def test_a_route_becomes_the_settings_linux_takes_from_it():
    toward = RouteParams(dst="10.0.0.1/32", rto_min_ms=14, initcwnd=4, cwnd_clamp=3, advmss=None,
                         pacing_rate=820312, quickack=True)
    back = RouteParams(dst="10.0.0.5/32", rto_min_ms=14, initcwnd=1, cwnd_clamp=None, advmss=1352,
                       pacing_rate=None, quickack=False)
    routes_only = mapping.planned(toward, back, bpf=False)
    assert routes_only == mapping.ConnSettings(rto_min_us=14000, initcwnd=4, clamp_segments=3, segment_bytes=1340,
                                               pacing_bps=820312 * 8, quickack=True)
    with_bpf = mapping.planned(toward, back, bpf=True)
    assert with_bpf.clamp_sets_ssthresh and with_bpf.follows
    # No clamp, the kernel's MSS (no advmss on the way back), not paced.
    plain = mapping.planned(toward.model_copy(update={"cwnd_clamp": None, "pacing_rate": None}), None,
                            bpf=False)
    assert (plain.clamp_segments, plain.segment_bytes, plain.pacing_bps) == (0, 1448, 0)


def test_static_settings_are_linux_defaults_with_the_schemes_rto_min():
    schemes = catalogue(fine_rto_ms=3)
    assert mapping.static(schemes["default"].rto_min_ms) == mapping.ConnSettings(rto_min_us=200000)
    assert mapping.static(schemes["fine-rto"].rto_min_ms).rto_min_us == 3000
    assert schemes["dctcp"].congestion_control == "ns3::TcpDctcp" and schemes["dctcp"].ecn
    assert schemes["otcp"].formulas == "published" and not schemes["otcp"].follows
    assert schemes["otcp-paced"].formulas == "lossless" and schemes["otcp-paced"].pacing
    assert schemes["otcp-paced"].follows and not schemes["static-rwnd"].planned


def test_the_static_receive_window_is_the_fair_share_in_whole_segments():
    # (1 Gb/s = 125e6 B/s x 20 us + 85 000 B) / 16 = 5 468.75 B: three segments.
    assert mapping.static_rwnd_bytes(1e9, 20e-6, 85000, 16) == 3 * 1448
    # Never below one segment.
    assert mapping.static_rwnd_bytes(1e9, 20e-6, 85000, 1000) == 1448


def test_longest_prefix_match_picks_the_most_specific_route():
    routes = [RouteParams(dst=dst, rto_min_ms=5, initcwnd=initcwnd, quickack=False)
              for dst, initcwnd in (("10.0.0.0/8", 1), ("10.1.0.0/16", 2), ("10.1.0.5/32", 3))]

    def initcwnd(address: str) -> int | None:
        route = mapping.longest_match(routes, address)
        return None if route is None else route.initcwnd

    assert [initcwnd(a) for a in ("10.1.0.5", "10.1.0.9", "10.2.0.1", "192.168.0.1")] == [3, 2, 1, None]


def test_the_ideal_round_hand_worked():
    # 8 senders x 10 segments of 1448 B, each 1448 + 52 + 2 = 1502 B on the wire, at 1 Gb/s:
    # 80 x 1502 x 8 / 1e9 = 961.28 us, and one round trip of 20 us for the request.
    assert ideal_round_s(8, 14480, 1448, 1e9, [20e-6] * 8, persistent=True) == pytest.approx(981.28e-6)
    # A new connection per round adds the handshake's round trip; a short last segment its own size.
    assert ideal_round_s(1, 2000, 1448, 1e9, [20e-6], persistent=False) == \
        pytest.approx(((1448 + 54) + (552 + 54)) * 8 / 1e9 + 40e-6)
    # Round trips that differ: the bottleneck starts with the nearest sender's bytes (20 us), unless the
    # farthest one's own block (12.016 us of 10 segments) arrives later than all of them.
    assert ideal_round_s(2, 14480, 1448, 1e9, [20e-6, 30e-6], persistent=True) == pytest.approx(20e-6 + 240.32e-6)
    assert ideal_round_s(2, 14480, 1448, 1e9, [20e-6, 1e-3], persistent=True) == pytest.approx(1e-3 + 120.16e-6)


def test_a_star_has_otcp_topos_hosts_and_one_prefix_per_edge_switch():
    fabric = star(senders=4)
    assert fabric.hosts == ["h1", "h2", "h3", "h4", "h5", "h6"]  # receiver, 4 senders, the probe
    assert fabric.switches == ["s1"] and fabric.edges == ["s1"]
    assert fabric.address["h1"] == "10.0.0.1" and fabric.address["h3"] == "10.0.0.9"
    links = fabric.scenario()["links"]
    first = next(link for link in links if link["a"] == "h1")
    assert (first["a_address"], first["b_address"], first["prefix_len"]) == ("10.0.0.1", "10.0.0.2", 30)
    assert (first["a_buffer_bytes"], first["b_buffer_bytes"]) == (0, 85000)  # only the switch end buffers
    assert fabric.routes() == {"s1": []}  # its hosts are on connected links
    placement = sim_fabric.place(fabric, 4, "next")
    assert placement == sim_fabric.Placement("h1", ["h2", "h3", "h4", "h5"], "h6")
    assert fabric.round_trip_s("h1", "h2") == pytest.approx(20e-6)


def test_a_leaf_spine_routes_along_the_planners_paths_with_tiers_of_its_own():
    host, uplink = sim_fabric.tiers_from(10, 100, [5], [250, 1000], 2_000_000, 1_000_000)
    fabric = sim_fabric.from_topo("leafspine,3,2,2", host, uplink)
    assert fabric.edges == ["leaf1", "leaf2", "leaf3"]
    for switch, routes in fabric.routes().items():
        for route in routes:
            edge = fabric.edges[int(route["prefix"].split(".")[1])]
            assert route["next"] == fabric.paths.path(switch, edge)[1]
    by_pair = {frozenset((link.a, link.b)): link for link in fabric.links}
    # Uplink delays dealt out per leaf: leaf1's 250 us, leaf2's 1000 us, leaf3's 250 us again.
    assert by_pair[frozenset(("leaf1", "spine1"))].delay_s == pytest.approx(250e-6)
    assert by_pair[frozenset(("leaf2", "spine2"))].delay_s == pytest.approx(1000e-6)
    assert by_pair[frozenset(("leaf3", "spine1"))].delay_s == pytest.approx(250e-6)
    assert by_pair[frozenset(("leaf1", "spine1"))].rate_bps == 100e9
    assert by_pair[frozenset(("leaf1", "spine1"))].a_buffer_bytes == 1_000_000
    assert by_pair[frozenset(("h1", "leaf1"))].rate_bps == 10e9
    # In a rack: two host links; across: and two uplinks each way.
    assert fabric.round_trip_s("h1", "h2") == pytest.approx(20e-6)
    assert fabric.round_trip_s("h1", "h3") == pytest.approx(2 * (5 + 250 + 1000 + 5) * 1e-6)
    assert sim_fabric.place(fabric, 1, "rack").senders == ["h2"]
    assert sim_fabric.place(fabric, 3, "remote").senders == ["h3", "h5", "h4"]
    with pytest.raises(sim_fabric.FabricError, match="need 2 hosts"):
        sim_fabric.place(fabric, 2, "rack")


def test_the_planner_sees_the_fabric_the_simulator_builds():
    fabric = star(senders=2, gbps=10, buffer_bytes=2_000_000)
    planned = fabric.planner_fabric()
    h1 = fabric.address["h1"]
    facts = planned.links[("s1", h1)]
    assert facts.capacity_bytes_per_s == pytest.approx(10e9 / 8)
    assert facts.buffer_bytes == 2_000_000 and facts.delay_s == pytest.approx(5e-6)
    assert planned.links[(h1, "s1")].buffer_bytes == 0
    assert planned.hosts[fabric.address["h2"]] == "h2"


def test_a_bad_topology_is_named():
    host, uplink = sim_fabric.tiers_from(1, None, [5], None, 85000, None)
    with pytest.raises(sim_fabric.FabricError, match="unknown topology 'ring'"):
        sim_fabric.from_topo("ring,4", host, uplink)
    with pytest.raises(sim_fabric.FabricError, match="fat-tree k must be even"):
        sim_fabric.from_topo("fattree,3", host, uplink)


def counts(senders, receiver, packets):
    """What the simulator reports: every sender's packets (full-size frames) to the receiver and as many
    of the receiver's ACKs (66 B) back."""
    return [row for sender in senders
            for row in ((sender, receiver, packets, packets * 1514), (receiver, sender, packets, packets * 66))]


def test_the_loop_counts_flows_as_the_controller_does_and_plans_with_the_real_planner():
    fabric = star(senders=4)
    senders = ["h2", "h3", "h4", "h5"]
    pairs = [pair for sender in senders for pair in ((sender, "h1"), ("h1", sender))]
    lossless = formulas.Lossless()
    loop = ClosedLoop(fabric, pairs, formulas.Bounds(), lossless, formulas.Pacing(), bpf=True)
    idle = loop.poll(0.0, [])["settings"]  # the first poll primes the counters: the idle fabric's plan
    assert set(idle) == {"h1", *senders}
    loop.poll(1.0, counts(senders, "h1", 100))["settings"]
    # Every pair sent 100 packets since the last poll: 4 flows into h1; its ACKs back make no flow.
    flows = {(fabric.address[a], fabric.address["h1"]): 1 for a in senders}
    base = fabric.planner_fabric()
    expected = Plan(Fabric(base.switches, base.hosts, base.links, flows), formulas.Bounds(), lossless,
                    formulas.Pacing())
    sets = expected.route_sets()
    route = mapping.longest_match(sets[fabric.address["h2"]], fabric.address["h1"])
    back = mapping.longest_match(sets[fabric.address["h1"]], fabric.address["h2"])
    assert route is not None
    assert loop.settings[("h2", "h1")] == mapping.planned(route, back, bpf=True)
    record = next(r for r in expected.records() if (r["src"], r["dst"]) == ("h2", "h1"))
    assert loop.settings[("h2", "h1")].clamp_segments == record["cwnd_clamp"]
    assert loop.settings[("h2", "h1")].pacing_bps == record["pacing_rate"] * 8
    # Fewer than min_packets in a poll is no flow, but a flow is held for hold_s: nothing changes.
    assert loop.poll(2.0, counts(senders, "h1", 101))["settings"] == {}
    assert loop.polls[-1].active_pairs == 4
    # After the hold the flows are gone and the windows open again.
    reopened = loop.poll(7.5, counts(senders, "h1", 101))["settings"]
    assert reopened["h2"]["peers"]["h1"]["clamp_segments"] > record["cwnd_clamp"]
    assert loop.generations_between(0.5, 7.0) == 1 and loop.generations_between(0.0, 10.0) == 3


def test_the_loop_gives_the_published_formulas_without_pacing():
    fabric = star(senders=16, gbps=0.1, delay_us=25)
    senders = [f"h{i}" for i in range(2, 18)]
    loop = ClosedLoop(fabric, [(s, "h1") for s in senders], formulas.Bounds(), None, None, bpf=False)
    loop.poll(0.0, [])
    loop.poll(1.0, [(s, "h1", 50, 50 * 1514) for s in senders])
    settings = loop.settings[("h2", "h1")]
    # docs/design.md's worked example: 100 Mb/s, 25 us per link, 85 000 B, 16 senders: rto_min 14 ms
    # (13.7 ms of round trip and two full queues), initcwnd 1, cwnd lock 3.
    assert (settings.rto_min_us, settings.initcwnd, settings.clamp_segments) == (14000, 1, 3)
    assert settings.pacing_bps == 0 and not settings.follows and settings.segment_bytes == 1448
    assert math.isclose(fabric.round_trip_s("h1", "h2"), 100e-6)
