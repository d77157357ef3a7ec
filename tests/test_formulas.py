"""The formulas of docs/design.md, "Formulas", checked against hand-computed values."""

import math

import numpy as np
import pytest

from otcp.planning import formulas, inventory
from otcp.planning.fabric import PairRtt
from otcp.planning.planner import Plan
from otcp.wire.paramset import RouteParams
from support.inventories import star


def plan_of(document):
    inv = inventory.parse(document)
    return Plan(inv.fabric(), formulas.Bounds(mss_bytes=inv.mss_bytes))


def pair(plan, src, dst):
    for record in plan.records():
        if (record["src"], record["dst"]) == (src, dst):
            return record
    raise AssertionError(f"no pair {src}->{dst}")


def test_worked_example_star_16_to_1():
    # RTT 4 x 25 us; queues switch->receiver and switch->sender: 2 x 85000 / 12.5e6 = 13.6 ms.
    # Bottleneck N = 16: iw = 12.5e6 / 16 x 100e-6 = 78 B; max = (1250 + 85000) / 16 = 5390 B.
    record = pair(plan_of(star(16)), "h2", "h1")
    assert record["min_rto_us"] == pytest.approx(13700.0)
    assert record["rto_min_ms"] == 14
    assert record["initcwnd"] == 1
    assert record["cwnd_clamp"] == 3
    assert record["quickack"] is True
    assert record["hops"] == ["h2", "s1", "h1"]
    assert record["dst_ip"] == "10.0.0.1"


def test_multi_switch_path():
    # h1 - s1 - s2 - s3 - h2, 100 Mb/s, 25 us, 85000 B. RTT = 8 x 25 us = 200 us.
    # Queues: 6 switch egresses on the round trip x 6.8 ms = 40.8 ms -> minRTO 41.0 ms exactly.
    # iw = 12.5e6 x 200e-6 = 2500 B -> 1; max = 12.5e6 x 200e-6 + 85000 = 87500 B -> 60 segments.
    link = {"capacity_mbps": 100, "delay_us": 25, "buffer_bytes": 85000}
    document = {
        "switches": ["s1", "s2", "s3"],
        "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}},
        "links": [
            {"a": "h1", "b": "s1", **link},
            {"a": "s1", "b": "s2", **link},
            {"a": "s2", "b": "s3", **link},
            {"a": "s3", "b": "h2", **link},
        ],
    }
    plan = plan_of(document)
    forward, backward = pair(plan, "h1", "h2"), pair(plan, "h2", "h1")
    assert forward["hops"] == ["h1", "s1", "s2", "s3", "h2"]
    assert backward["hops"] == ["h2", "s3", "s2", "s1", "h1"]
    for record in (forward, backward):
        assert record["min_rto_us"] == pytest.approx(41000.0)
        assert record["rto_min_ms"] == 41
        assert record["initcwnd"] == 1
        assert record["cwnd_clamp"] == 60


def test_links_of_different_capacities():
    # h1 =1000= s1 -100- s2 =1000= h2; 10 us per link; buffer 100000 B on s1-s2, 50000 B on host links.
    # RTT 60 us. Queues: 2 x 100000/12.5e6 + 2 x 50000/125e6 = 16.8 ms -> minRTO 16.86 ms -> 17.
    # iw = 12.5e6 x 60e-6 = 750 B -> 1 (clamped up).
    # max = min(12.5e6 x 60e-6 + 100000, 125e6 x 60e-6 + 50000) = min(100750, 57500) = 57500 -> 39.
    document = {
        "switches": ["s1", "s2"],
        "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}},
        "defaults": {"delay_us": 10},
        "links": [
            {"a": "h1", "b": "s1", "capacity_mbps": 1000, "buffer_bytes": 50000},
            {"a": "s1", "b": "s2", "capacity_mbps": 100, "buffer_bytes": 100000},
            {"a": "s2", "b": "h2", "capacity_mbps": 1000, "buffer_bytes": 50000},
        ],
    }
    record = pair(plan_of(document), "h1", "h2")
    assert record["min_rto_us"] == pytest.approx(16860.0)
    assert record["rto_min_ms"] == 17
    assert record["initcwnd"] == 1
    assert record["cwnd_clamp"] == 39


def flows_document(flows):
    # h1 -100- s1, h3 =1000= s1, s1 =1000= s2, s2 =1000= h2; 100 us per link, 100000 B buffers.
    return {
        "switches": ["s1", "s2"],
        "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}, "h3": {"ip": "10.0.0.3"}},
        "defaults": {"delay_us": 100, "buffer_bytes": 100000, "capacity_mbps": 1000},
        "links": [
            {"a": "h1", "b": "s1", "capacity_mbps": 100},
            {"a": "h3", "b": "s1"},
            {"a": "s1", "b": "s2"},
            {"a": "s2", "b": "h2"},
        ],
        "flows": flows,
    }


def test_flow_counts_move_the_bottleneck():
    # RTT 600 us. Queues: s1->s2, s2->h2, s2->s1 at 0.8 ms and s1->h1 at 8 ms: minRTO 11.0 ms either way.
    idle = pair(plan_of(flows_document([])), "h1", "h2")
    # Idle: bottleneck is h1's 100 Mb/s link: iw = 12.5e6 x 600e-6 = 7500 B -> 5;
    # max = 125e6 x 600e-6 + 100000 = 175000 B -> 120.
    assert (idle["rto_min_ms"], idle["initcwnd"], idle["cwnd_clamp"]) == (11, 5, 120)
    busy_plan = plan_of(flows_document([{"src": "h3", "dst": "h2", "count": 20}]))
    busy = pair(busy_plan, "h1", "h2")
    # 20 flows on s1->s2 and s2->h2: N = 21 there; 125e6 / 21 = 5.95e6 B/s beats 12.5e6.
    # iw = 5.952e6 x 600e-6 = 3571 B -> 2; max = 175000 / 21 = 8333 B -> 5.
    assert (busy["rto_min_ms"], busy["initcwnd"], busy["cwnd_clamp"]) == (11, 2, 5)
    # The active pair itself counts once: N = F = 20. iw = 125e6/20 x 600e-6 = 3750 -> 2;
    # max = 175000 / 20 = 8750 B -> 6.
    own = pair(busy_plan, "h3", "h2")
    assert (own["initcwnd"], own["cwnd_clamp"]) == (2, 6)
    assert busy_plan.link_flows() == {("10.0.0.3", "s1"): 20, ("s1", "s2"): 20, ("s2", "10.0.0.2"): 20}


def test_clamps_and_rounding():
    bounds = formulas.Bounds()
    assert formulas.rto_min_ms(0.0002, bounds) == 1
    assert formulas.rto_min_ms(0.0137, bounds) == 14
    assert formulas.rto_min_ms(0.014, bounds) == 14
    assert formulas.rto_min_ms(5.0, bounds) == 200
    assert formulas.initcwnd_segments(10 * 1448, bounds) == 10
    assert formulas.initcwnd_segments(10 * 1448 - 1, bounds) == 9
    assert formulas.initcwnd_segments(1e9, bounds) == 64
    assert formulas.cwnd_clamp_segments(1e12, bounds) == 65535
    assert formulas.cwnd_clamp_segments(math.inf, bounds) == 0
    assert formulas.capacity_bytes_per_s(100) == 12.5e6
    custom = formulas.Bounds(mss_bytes=1000, rto_min_ms_low=5, rto_min_ms_high=50, initcwnd_high=4)
    assert formulas.rto_min_ms(0.001, custom) == 5
    assert formulas.initcwnd_segments(10_000, custom) == 4


def test_bounds_reject_nonsense():
    with pytest.raises(ValueError, match="mss_bytes"):
        formulas.Bounds(mss_bytes=0)
    with pytest.raises(ValueError, match="initcwnd"):
        formulas.Bounds(initcwnd_low=10, initcwnd_high=5)


def test_mss_from_inventory_changes_windows():
    document = star(16)
    document["mss_bytes"] = 1000
    # max = 5390 B / 1000 = 5 segments.
    assert pair(plan_of(document), "h2", "h1")["cwnd_clamp"] == 5


def test_routes_for_one_host():
    plan = plan_of(star(2))
    routes = plan.routes_for("10.0.0.2")  # h2's
    assert [r.dst for r in routes] == ["10.0.0.1/32", "10.0.0.3/32"]
    record = pair(plan, "h2", "h1")  # the route carries the pair's parameters
    assert routes[0] == RouteParams(dst="10.0.0.1/32", rto_min_ms=record["rto_min_ms"], initcwnd=record["initcwnd"],
                                    cwnd_clamp=record["cwnd_clamp"], quickack=True)
    assert routes[0].advmss is None  # the published formulas keep the configured MSS


# -- otcp-lossless ------------------------------------------------------------------------


def lossless_plan_of(document, fraction=0.25, floor=256, fan_in=1.0):
    inv = inventory.parse(document)
    return Plan(inv.fabric(), formulas.Bounds(mss_bytes=inv.mss_bytes), formulas.Lossless(fraction, floor, fan_in))


def test_lossless_16_senders_shrink_the_segment_to_fit_one_frame_each():
    # Without the fan-in rule (fan_in_queue_fraction 0):
    # Target queue 85000 x 0.25 = 21250 B; BDP at s1->h1 = 12.5e6 x 100e-6 = 1250 B.
    # N = 16: window = (1250 + 21250) / 16 = 1406.25 B of frames -> segment 1406 - 66 = 1340 B, 1 frame.
    plan = lossless_plan_of(star(16), fan_in=0)
    record = pair(plan, "h2", "h1")
    assert (record["segment_bytes"], record["cwnd_clamp"], record["initcwnd"], record["rto_min_ms"]) == (1340, 1, 1, 14)
    # The receiver advertises it: h1's route toward h2 carries advmss 1340 + 12 (timestamps).
    toward_h2 = next(r for r in plan.routes_for("10.0.0.1") if r.dst == "10.0.0.2/32")
    assert toward_h2.advmss == 1352
    # One frame in flight: a delayed ACK would hold it, so h1 acknowledges h2's segments at once.
    assert toward_h2.quickack is True
    # h2's route toward h1 sets what h1 sends to h2, a path no other flow shares: window 22 500 B is
    # 14.9 full frames, so 15 frames of 1500 B: segment 1434 B, advmss 1446.
    assert next(r for r in plan.routes_for("10.0.0.2") if r.dst == "10.0.0.1/32").advmss == 1446


def test_lossless_senders_to_one_receiver_share_its_segment_and_count_frames_of_it():
    # h2 and h3 send to h1, h4 is idle; links of 375 us make a round trip of 1.5 ms, except where
    # h2's host measured 4 us. Queue target 85000 x 0.0352 = 2992 B; N = 2 on h1's downlink (3 for h4).
    # h2: window (12.5e6 x 4e-6 + 2992) / 2 = 1521 B, just over one full frame: 2 frames of 760 B, segment 694 B.
    # h3: window (12.5e6 x 1.5e-3 + 2992) / 2 = 10871 B, 7.2 full frames: alone, 8 frames of 1358 B.
    # h4: window (18750 + 2992) / 3 = 7247 B: alone, 5 frames of 1449 B.
    document = star(3, delay_us=375)
    document["flows"] = [{"src": "h2", "dst": "h1"}, {"src": "h3", "dst": "h1"}]
    inv = inventory.parse(document)
    fabric = inv.fabric()
    h1, h2 = inv.hosts["h1"], inv.hosts["h2"]
    fabric.host_rtts[(h2, h1)] = fabric.host_rtts[(h1, h2)] = PairRtt(4e-6, 4e-6, "tcp")
    plan = Plan(fabric, formulas.Bounds(mss_bytes=inv.mss_bytes), formulas.Lossless(0.0352, 256))

    def segment_and_clamp(src, dst):
        return pair(plan, src, dst)["segment_bytes"], pair(plan, src, dst)["cwnd_clamp"]

    # h1 advertises one segment, the smallest its senders need (one aggregated route carries no
    # other), and every clamp counts frames of it: h3 has 10871 / 760 = 14 frames, 10 640 B. Counted in
    # its own 1 292 B segment it would be 8 frames, only 6 080 B once it sends 694 B segments.
    assert segment_and_clamp("h2", "h1") == (694, 2)
    assert segment_and_clamp("h3", "h1") == (694, 14) and pair(plan, "h3", "h1")["initcwnd"] == 14
    assert segment_and_clamp("h4", "h1") == (694, 9)  # idle: 7247 / 760 frames
    assert {r.advmss for r in plan.routes_for("10.0.0.1")} == {694 + 12}
    # Nothing sends to h2: each path into it keeps its own segment. h3's window there is
    # (18750 + 2992) / 1 = 21742 B, 14.4 full frames: 15 frames of 1449 B, segment 1383 B.
    assert segment_and_clamp("h3", "h2") == (1383, 15)


def test_lossless_pairs_into_a_host_take_the_smallest_round_trip_measured_on_its_active_pairs():
    # h2 and h3 send to h1, h4 is idle. The links' delays are defaults, so the hosts' minimums count:
    # 1.0 ms on h2's path, 3.0 ms on h3's, 0.4 ms on h4's. Both are upper bounds of the round trip into
    # h1, so the active pairs' windows take the smaller: (12.5e6 x 1e-3 + 21250) / 2 = 16875 B each,
    # 12 frames of 1406 B (segment 1340 B). Per pair, h3's would have been (37500 + 21250) / 2 = 29375 B.
    # h4's own 0.4 ms is smaller still: (5000 + 21250) / 3 = 8750 B, 6 frames of h1's 1406 B. Nothing
    # measured h5's path, and its links' delays are guesses: it takes 1.0 ms too, (12500 + 21250) / 3 =
    # 11250 B, 8 frames.
    document = star(4, delay_us=375)
    document["flows"] = [{"src": "h2", "dst": "h1"}, {"src": "h3", "dst": "h1"}]
    inv = inventory.parse(document)
    fabric = inv.fabric()
    for link, facts in fabric.links.items():
        fabric.links[link] = facts._replace(delay_source="default")
    h1 = inv.hosts["h1"]
    for host, low in ((inv.hosts["h2"], 1e-3), (inv.hosts["h3"], 3e-3), (inv.hosts["h4"], 0.4e-3)):
        fabric.host_rtts[(host, h1)] = fabric.host_rtts[(h1, host)] = PairRtt(low, low + 0.5e-3, "tcp")
    plan = Plan(fabric, formulas.Bounds(mss_bytes=inv.mss_bytes), formulas.Lossless(0.25, 256))
    fields = ("rtt_prop_us", "segment_bytes", "cwnd_clamp", "initcwnd")
    assert [pair(plan, "h2", "h1")[f] for f in fields] == [1000, 1340, 12, 12]
    assert [pair(plan, "h3", "h1")[f] for f in fields] == [1000, 1340, 12, 12]
    assert [pair(plan, "h4", "h1")[f] for f in fields] == [400, 1340, 6, 6]
    assert [pair(plan, "h5", "h1")[f] for f in fields] == [1000, 1340, 8, 8]
    assert pair(plan, "h5", "h1")["rtt_source"] == "host"
    # minRTO still takes each pair's own top: h3's is 2 ms above h2's.
    assert pair(plan, "h3", "h1")["min_rto_us"] - pair(plan, "h2", "h1")["min_rto_us"] == pytest.approx(2000)
    # The published formulas keep each pair's own round trip.
    published = Plan(fabric, formulas.Bounds(mss_bytes=inv.mss_bytes))
    assert [pair(published, h, "h1")["rtt_prop_us"] for h in ("h2", "h3", "h4")] == [1000, 3000, 400]


def test_lossless_4_senders_send_their_whole_share_at_once():
    # window = 22500 / 4 = 5625 B: 3.7 full frames of 1448 + 66 = 1514 B, so 4 frames of 5625 / 4 = 1406 B:
    # segment 1406 - 66 = 1340 B fills 5624 B of it (3 full frames would leave 1083 B unused).
    plan = lossless_plan_of(star(4))
    record = pair(plan, "h2", "h1")
    assert (record["segment_bytes"], record["cwnd_clamp"], record["initcwnd"]) == (1340, 4, 4)
    # 4 frames in flight: Linux acknowledges every second one at once, so h1's route toward h2 leaves
    # quickack off (it would only double the ACKs); h2's route toward h1 has it off too (15 frames).
    assert next(r for r in plan.routes_for("10.0.0.1") if r.dst == "10.0.0.2/32").quickack is False
    assert pair(plan, "h1", "h2")["quickack"] is False


def test_lossless_quickack_only_where_the_window_back_is_one_segment():
    assert formulas.lossless_quickack([0, 1, 2, 5]).tolist() == [False, True, False, False]  # 0: no clamp
    # The published formulas keep quickack on every route, whatever the window.
    assert all(r.quickack for host in ("10.0.0.1", "10.0.0.2") for r in plan_of(star(4)).routes_for(host))


def test_lossless_64_senders_and_the_floor():
    # Without the fan-in rule: 64: window = 22500 / 64 = 351.6 B -> segment 285 B, one frame each.
    record = pair(lossless_plan_of(star(64), fan_in=0), "h2", "h1")
    assert (record["segment_bytes"], record["cwnd_clamp"]) == (285, 1)
    # 128: window = 175.8 B; the floor (256 B) wins, one frame each: 128 x 322 B exceeds the target
    # but still fits the buffer, which the formulas cannot do better than.
    record = pair(lossless_plan_of(star(128), fan_in=0), "h2", "h1")
    assert (record["segment_bytes"], record["cwnd_clamp"], record["initcwnd"]) == (256, 1, 1)


def segment_clamp_initcwnd(plan):
    record = pair(plan, "h2", "h1")
    return record["segment_bytes"], record["cwnd_clamp"], record["initcwnd"]


@pytest.mark.parametrize(("senders", "expected"), [
    # Budget 1250 + 21250 = 22500 B. 14 x 1514 B fit it: 22500 / 14 = 1607 B, 2 frames of 803 B (737 B
    # payload), the same with or without the rule.
    (14, (737, 2, 2)),
    # 15 x 1514 = 22710 B do not: the rule takes over, and each sender keeps one full frame (the queue
    # stands at up to 15 x 1514 - 1250 = 21460 B, inside the buffer).
    (15, (1448, 1, 1)),
    (16, (1448, 1, 1)),
    # The budget is the buffer less one full frame kept free (a ping, handshakes, FINs): 85000 - 1514 =
    # 83486 B, and each sender's frame comes behind its 66 B ACK of the request. 52 x (1514 + 66) =
    # 82160 B fit it: still full frames. 53 (83740 B) do not: 83486 / 53 - 66 = 1509.2 B -> 1443 B.
    (52, (1448, 1, 1)),
    (53, (1443, 1, 1)),
    # 83486 / 64 - 66 = 1238.5 B -> 1172 B; 83486 / 96 - 66 = 803.6 B -> 737 B; 83486 / 128 - 66 =
    # 586.2 B -> 520 B.
    (64, (1172, 1, 1)),
    (96, (737, 1, 1)),
    (128, (520, 1, 1)),
])
def test_lossless_fan_in_keeps_full_frames_while_the_buffer_holds_them(senders, expected):
    assert segment_clamp_initcwnd(lossless_plan_of(star(senders))) == expected


def test_admitted_flows_on_their_own():
    bounds = formulas.Bounds()
    admitting = formulas.Lossless(fan_in_admission=True)
    # (85000 - 1514) / (1514 + 66) = 83486 / 1580 = 52.8: 52 full frames, each behind its ACK, fit the budget.
    assert formulas.admitted_flows(85000, bounds, admitting).tolist() == 52
    # Half the buffer: (42500 - 1514) / 1580 = 25.9 -> 25; 500 000 B: 498486 / 1580 = 315.5 -> 315.
    assert formulas.admitted_flows([42500, 500000], bounds, admitting).tolist() == [25, 315]
    # g = 0.5 of 85000: (42500 - 1514) / 1580 -> 25, as above.
    assert formulas.admitted_flows(85000, bounds, formulas.Lossless(0.25, 256, 0.5, True)).tolist() == 25
    # Exactly two: 1514 + 2 x 1580 = 4674 B; one byte less admits one; a buffer smaller than the kept
    # frame still admits one sender (the receiver cannot ask for less).
    assert formulas.admitted_flows([4674, 4673, 1000], bounds, admitting).tolist() == [2, 1, 1]
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="fan_in_admission"):
            formulas.Lossless(fan_in_admission=bad)


@pytest.mark.parametrize(("senders", "expected"), [
    # At most 52 admitted at once (above): where they are fewer, admission changes nothing.
    (14, (737, 2, 2)),
    (52, (1448, 1, 1)),
    # Above 52, the receiver's downlink counts 52 flows: (1250 + 21250) / 52 = 432.7 B, under a full
    # frame; the fan-in share 83486 / 52 - 66 = 1539.5 B is above one, so one full frame each, at any fan-in.
    (53, (1448, 1, 1)),
    (64, (1448, 1, 1)),
    (128, (1448, 1, 1)),
    (200, (1448, 1, 1)),
])
def test_admission_keeps_full_frames_at_any_fan_in(senders, expected):
    inv = inventory.parse(star(senders))
    plan = Plan(inv.fabric(), formulas.Bounds(mss_bytes=inv.mss_bytes),
                formulas.Lossless(fan_in_admission=True))
    assert segment_clamp_initcwnd(plan) == expected
    # The 52 admitted senders' frames and ACKs fit the budget.
    segment, clamp, _ = expected
    assert min(senders, 52) * (clamp * (segment + 66) + 66) <= 85000 - 1514


def test_lossless_fan_in_down_to_the_floor():
    # A 42 500 B buffer, a budget of 42500 - 1514 = 40986 B: 40986 / 105 - 66 = 324.3 B -> 258 B; at
    # 106 senders 320.7 B -> 254 B: below the floor, which wins (256 B), and 106 floor-sized frames
    # with their ACKs (106 x 388 = 41 128 B) no longer fit the budget: one frame each, as without the rule.
    assert segment_clamp_initcwnd(lossless_plan_of(star(105, buffer_bytes=42500))) == (258, 1, 1)
    assert segment_clamp_initcwnd(lossless_plan_of(star(106, buffer_bytes=42500))) == (256, 1, 1)


@pytest.mark.parametrize(("senders", "expected"), [
    # Data-center scale, 500 000 B (a star's addresses stop at 253 senders: the formulas alone):
    # (500000 - 1514) / 500 - 66 = 931.0 B -> 864 B; / 1000 - 66 = 432.5 B -> 366 B.
    (500, 864),
    (1000, 366),
])
def test_lossless_fan_in_at_hundreds_of_senders(senders, expected):
    share = formulas.fan_in_share_bytes(500000, senders)
    # The target's window at 10 Gb/s: (10e9 / 8 x 20 us + 125000) / N, under one full frame either way.
    target = (10e9 / 8 * 20e-6 + 125000) / senders
    window = formulas.fan_in_window_bytes(target, share)
    assert window.tolist() == pytest.approx(share.tolist())
    assert formulas.segment_bytes(window).tolist() == expected


def test_lossless_fan_in_leaves_short_fan_in_byte_identical():
    # Where N full frames fit the budget (N <= 14 here), every route is what it was without the rule.
    for senders in (1, 2, 4, 8, 14):
        with_rule, without = lossless_plan_of(star(senders)), lossless_plan_of(star(senders), fan_in=0)
        for host in with_rule.hosts:
            assert with_rule.routes_for(host) == without.routes_for(host)
    # With it, where the rule takes over, the bottleneck's buffer holds every sender's window and its
    # ACK of the request at once, with a full frame to spare.
    header = formulas.FRAME_OVERHEAD_BYTES
    for senders in (15, 32, 53, 57, 64, 96, 128, 200):
        segment, clamp, _ = segment_clamp_initcwnd(lossless_plan_of(star(senders)))
        assert senders * (clamp * (segment + header) + header) <= 85000 - 1514


def test_fan_in_share_on_its_own():
    bounds, half = formulas.Bounds(), formulas.Lossless(0.25, 256, 0.5)
    # (g x buf - one full frame) / N - one 66 B header-only frame: (0.5 x 85000 - 1514) / 64 - 66 =
    # 40986 / 64 - 66 = 574.4 B.
    assert formulas.fan_in_share_bytes(85000, 64, bounds, half).tolist() == pytest.approx(574.40625)
    # The whole buffer, 65 flows (64 senders and a ping): (85000 - 1514) / 65 - 66 = 1218.4 B, and 65
    # frames of it, each behind a 66 B ACK, leave 1514 B free where 85000 / 65 left 40 B.
    assert formulas.fan_in_share_bytes(85000, 65, bounds).tolist() == pytest.approx(1218.4, abs=0.05)
    # No room beyond the kept frame, none beyond the ACKs, or g = 0: no share, the rule changes nothing.
    assert formulas.fan_in_share_bytes(2000, 2, bounds, half).tolist() == 0.0
    assert formulas.fan_in_share_bytes(1514 + 2 * 66, 2, bounds).tolist() == 0.0
    assert formulas.fan_in_share_bytes(85000, 8, bounds, formulas.Lossless(0.25, 256, 0.0)).tolist() == 0.0
    # Arrays of links, as the planner passes them.
    assert formulas.fan_in_share_bytes([85000, 42500], [64, 1], bounds).tolist() == pytest.approx([1238.47, 40920],
                                                                                                    abs=0.01)


def test_fan_in_window_on_its_own():
    bounds = formulas.Bounds()
    # W >= a full frame: W stands, whatever the share.
    assert formulas.fan_in_window_bytes(1514.0, 10.0, bounds).tolist() == 1514.0
    # W below it: the share, 640.4 B (above), is above W = 351.6 B, so 640.4 B.
    assert formulas.fan_in_window_bytes(351.5625, 640.40625, bounds).tolist() == pytest.approx(640.40625)
    # ... never below W, never above a full frame.
    assert formulas.fan_in_window_bytes(1000.0, 100.0, bounds).tolist() == 1000.0
    assert formulas.fan_in_window_bytes(1000.0, 21250.0, bounds).tolist() == 1514.0
    assert formulas.fan_in_window_bytes(math.inf, math.inf, bounds).tolist() == math.inf
    for bad in (-0.1, 1.5, True, math.nan):
        with pytest.raises(ValueError, match="fan_in_queue_fraction"):
            formulas.Lossless(fan_in_queue_fraction=bad)


def test_lossless_queue_target_is_a_share_of_the_buffer():
    # Target the whole buffer: window = (1250 + 85000) / 16 = 5390.6 B -> 3.56 full frames, so 4 of
    # 1347 B: segment 1281 B.
    record = pair(lossless_plan_of(star(16), fraction=1.0), "h2", "h1")
    assert (record["segment_bytes"], record["cwnd_clamp"]) == (1281, 4)
    with pytest.raises(ValueError, match="queue_target_fraction"):
        formulas.Lossless(queue_target_fraction=0.0)
    with pytest.raises(ValueError, match="mss_floor_bytes"):
        formulas.Lossless(mss_floor_bytes=10)


def test_segment_and_window_functions_on_their_edges():
    bounds = formulas.Bounds()
    assert formulas.segment_bytes(math.inf, bounds).tolist() == 1448
    assert formulas.lossless_cwnd_segments(math.inf, 1448, bounds).tolist() == 0
    assert formulas.lossless_initcwnd_segments(0, 7, bounds).tolist() == 7  # nothing clamps: published iw
    assert formulas.lossless_initcwnd_segments(100, 7, bounds).tolist() == 64  # bounded by initcwnd_high
    assert formulas.advmss_bytes([1448, 1500, 500], bounds).tolist() == [0, 0, 512]  # 0: not set
    # Whole full frames keep the MSS; past cwnd_high frames the MSS stands (the clamp binds instead).
    assert formulas.segment_bytes(3 * 1514, bounds).tolist() == 1448
    assert formulas.segment_bytes(10 * bounds.cwnd_high * 1514, bounds).tolist() == 1448


# -- otcp-paced: the fair-share pacing rate ----------------------------------------------


def paced_plan_of(document, headroom=0.05, lossless=True):
    inv = inventory.parse(document)
    return Plan(inv.fabric(), formulas.Bounds(mss_bytes=inv.mss_bytes), formulas.Lossless() if lossless else None,
                formulas.Pacing(headroom))


def test_pacing_rate_is_the_fair_share_at_the_bottleneck_plus_headroom():
    # Star, 100 Mb/s = 12.5e6 B/s everywhere. 4 senders -> h1: s1 -> h1 carries N = 4 flows, each sender's own
    # uplink 1: the bottleneck share is 12.5e6 / 4 = 3 125 000 B/s; x 1.05 = 3 281 250 B/s.
    plan = paced_plan_of(star(4))
    assert pair(plan, "h2", "h1")["pacing_rate"] == 3_281_250
    # 16 senders: 12.5e6 / 16 = 781 250; x 1.05 = 820 312.5 -> 820 312 (rounded down).
    assert pair(paced_plan_of(star(16)), "h2", "h1")["pacing_rate"] == 820_312
    # Headroom 0: exactly the share; the published formulas pace the same way.
    assert pair(paced_plan_of(star(16), headroom=0, lossless=False), "h2", "h1")["pacing_rate"] == 781_250
    # h1 -> h2 is not active: N = 0 + 1 on both its links, the whole link: 12.5e6 x 1.05.
    assert pair(plan, "h1", "h2")["pacing_rate"] == 13_125_000
    # Three senders: 12.5e6 / 3 x 1.05 = 4 375 000 exactly, not a hair below.
    assert pair(paced_plan_of(star(3)), "h2", "h1")["pacing_rate"] == 4_375_000


def test_pacing_rate_takes_the_tightest_link_of_the_path():
    # h1 -1000-> s1 -100-> s2 -1000-> h2 with 2 flows h3 -> h2 on s1 -> s2 too: s1 -> s2 has N = 3,
    # 12.5e6 / 3 = 4 166 666.67 beats 125e6 / 3 on s2 -> h2 and 125e6 / 1 on h1 -> s1; x 1.1 = 4 583 333.
    fast = {"capacity_mbps": 1000, "delay_us": 10, "buffer_bytes": 85000}
    document = {
        "switches": ["s1", "s2"],
        "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}, "h3": {"ip": "10.0.0.3"}},
        "links": [{"a": "h1", "b": "s1", **fast}, {"a": "h3", "b": "s1", **fast},
                  {"a": "s1", "b": "s2", **fast, "capacity_mbps": 100}, {"a": "s2", "b": "h2", **fast}],
        "flows": [{"src": "h3", "dst": "h2", "count": 2}],
    }
    plan = paced_plan_of(document, headroom=0.1)
    assert pair(plan, "h1", "h2")["pacing_rate"] == 4_583_333
    # The route toward h2 carries it; without pacing the field is null.
    assert next(r for r in plan.routes_for("10.0.0.1") if r.dst == "10.0.0.2/32").pacing_rate == 4_583_333
    assert all(r.pacing_rate is None for r in plan_of(document).routes_for("10.0.0.1"))
    assert pair(plan_of(document), "h1", "h2")["pacing_rate"] is None


def test_pacing_rate_function_rounds_down_and_caps():
    rates = formulas.pacing_rate_bytes_per_s(np.array([1e6, 1e6 / 3, 0.1, 5e9, math.inf]), formulas.Pacing(0.5))
    assert rates.tolist() == [1_500_000, 500_000, 1, 2**32 - 2, 2**32 - 2]
    assert formulas.pacing_rate_bytes_per_s(12.5e6 / 4).tolist() == 3_281_250  # the default headroom is 5 %
    assert formulas.MAX_PACING_RATE_BYTES_PER_S == 2**32 - 2


@pytest.mark.parametrize("headroom", [-0.01, 1.01, math.nan, math.inf, True, "0.1"])
def test_pacing_headroom_is_a_number_in_0_1(headroom):
    with pytest.raises(ValueError, match="pacing headroom"):
        formulas.Pacing(headroom)


# -- long fat paths: AIMD's responsiveness, Scalable TCP, GridDT --------------------------


def test_aimd_responsiveness_matches_the_figures_of_kelly_ravot_and_martin_flatin():
    # RTT 200 ms, MSS 1460 B, one segment per round trip: r = C x RTT^2 / (2 x MSS).
    # 100 Mb/s: 12.5e6 x 0.04 / 2920 = 171.2 s ("3 min").
    assert formulas.responsiveness_seconds(12.5e6, 0.2, 1460) == pytest.approx(500_000 / 2920)
    assert round(float(formulas.responsiveness_seconds(12.5e6, 0.2, 1460)) / 60) == 3
    # 2.5 Gb/s: 312.5e6 x 0.04 / 2920 = 4 280.8 s = 1 h 11 min ("1 h 10 min").
    r = float(formulas.responsiveness_seconds(312.5e6, 0.2, 1460))
    assert r == pytest.approx(12.5e6 / 2920)
    assert 70 * 60 <= r <= 72 * 60
    # 10 Gb/s: 1.25e9 x 0.04 / 2920 = 17 123 s = 4 h 45.4 min ("4 h 45 min").
    r = float(formulas.responsiveness_seconds(1.25e9, 0.2, 1460))
    assert r == pytest.approx(50e6 / 2920)
    assert divmod(round(r / 60), 60) == (4, 45)
    # A larger increase divides it: A = 7 regains the window 7 times sooner.
    assert formulas.responsiveness_seconds(1.25e9, 0.2, 1460, 7) == pytest.approx(r / 7)
    # Arrays alike: the square of the round trip.
    assert formulas.responsiveness_seconds(12.5e6, np.array([0.1, 0.2]), 1460).tolist() == pytest.approx(
        [125_000 / 2920, 500_000 / 2920])


def test_scalable_recovery_is_about_13_round_trips_whatever_the_capacity():
    # log(1 / 0.875) / log(1.01) = 0.133531 / 0.00995033 = 13.4198 round trips.
    assert formulas.scalable_recovery_rtts() == pytest.approx(13.4198, abs=1e-4)
    # At 200 ms: 2.68 s ("3 s").
    assert formulas.scalable_recovery_seconds(0.2) == pytest.approx(2.68396, abs=1e-4)
    assert round(float(formulas.scalable_recovery_seconds(0.2))) == 3
    # A window that doubles per round trip regains a halving in one: (1 - 1/2)(1 + 1)^1 = 1.
    assert formulas.scalable_recovery_rtts(1.0, 0.5) == pytest.approx(1.0)
    assert (formulas.SCALABLE_A, formulas.SCALABLE_B, formulas.SCALABLE_LWND_SEGMENTS) == (0.01, 0.125, 16)


def test_griddt_increase_grows_with_the_square_of_the_round_trip():
    # Kelly, Ravot and Martin-Flatin: A = 3 at 117 ms beside A = 7 at 181 ms; 3 x (181/117)^2 = 7.18 -> 7.
    assert formulas.griddt_increase(0.181, 0.117, reference_increase=3).tolist() == 7
    assert formulas.griddt_increase(0.117, 0.117, reference_increase=3).tolist() == 3
    # The reference itself gets 1; twice its round trip 4; 1.5 times 2.25 -> 2; 2.5^2 = 6.25 -> 6.
    assert formulas.griddt_increase(np.array([0.01, 0.02, 0.015, 0.025]), 0.01).tolist() == [1, 4, 2, 6]
    # Halves round up: (sqrt(2.5))^2 = 2.5 -> 3.
    assert formulas.griddt_increase(math.sqrt(2.5) * 0.01, 0.01).tolist() == 3
    # Shorter than the reference: never below 1. Far longer: bounded.
    assert formulas.griddt_increase(0.001, 0.1).tolist() == 1
    assert formulas.griddt_increase(1.0, 0.01).tolist() == formulas.GRIDDT_INCREASE_HIGH == 64
    assert formulas.griddt_increase(1.0, 0.01, high=10).tolist() == 10


def test_initial_ssthresh_is_the_share_of_the_bdp_in_segments():
    # 100 Mb/s shared by 4: 3.125e6 B/s x 200 ms = 625 000 B / 1448 = 431.6 -> 431 segments.
    assert formulas.initial_ssthresh_segments(12.5e6 / 4, 0.2, 1448).tolist() == 431
    # 1 Gb/s alone over 10 ms: 1.25e6 B / 1448 = 863.3 -> 863; exactly 100 segments stays 100.
    assert formulas.initial_ssthresh_segments(125e6, 0.01).tolist() == 863
    assert formulas.initial_ssthresh_segments(1448 * 100 / 0.01, 0.01, 1448).tolist() == 100
    # A data-centre share: 12.5e6 / 16 x 100 us = 78 B: the floor of 2 segments.
    assert formulas.initial_ssthresh_segments(12.5e6 / 16, 100e-6).tolist() == 2
    # 100 Gb/s over 1 s: 8.6 million segments, bounded by the map's 2^20 - 1, or by the caller.
    assert formulas.initial_ssthresh_segments(12.5e9, 1.0).tolist() == 2**20 - 1
    assert formulas.initial_ssthresh_segments(12.5e9, 1.0, high=5000).tolist() == 5000
    with pytest.raises(ValueError, match="ssthresh bounds"):
        formulas.initial_ssthresh_segments(12.5e6, 0.1, low=1)
    with pytest.raises(ValueError, match="ssthresh bounds"):
        formulas.initial_ssthresh_segments(12.5e6, 0.1, low=10, high=5)


def test_long_fat_path_is_a_bdp_above_the_threshold():
    # RFC 1072's 10^5 bits: 12 500 B. 100 Mb/s x 1 ms = 12 500 B is not above it; 2 ms is.
    assert formulas.is_long_fat_path(12.5e6 * 1e-3, 12_500).tolist() is False
    assert formulas.is_long_fat_path(12.5e6 * 2e-3, 12_500).tolist() is True
    assert formulas.is_long_fat_path(np.array([0.0, 12_500, 12_501]), 12_500).tolist() == [False, False, True]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 0, True, "0.2"])
def test_long_path_formulas_refuse_bad_input_by_name(bad):
    with pytest.raises(ValueError, match="rtt_s"):
        formulas.responsiveness_seconds(12.5e6, bad, 1460)
    with pytest.raises(ValueError, match="rtt_s"):
        formulas.griddt_increase(bad, 0.1)
    with pytest.raises(ValueError, match="reference_rtt_s"):
        formulas.griddt_increase(0.1, bad)
    with pytest.raises(ValueError, match="rtt_s"):
        formulas.initial_ssthresh_segments(12.5e6, bad)
    with pytest.raises(ValueError, match="rtt_s"):
        formulas.scalable_recovery_seconds(bad)
    with pytest.raises(ValueError, match="threshold_bytes"):
        formulas.is_long_fat_path(1000, bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, True])
def test_long_path_formulas_refuse_bad_windows_and_shares(bad):
    with pytest.raises(ValueError, match="bdp_bytes"):
        formulas.is_long_fat_path(bad, 12_500)
    with pytest.raises(ValueError, match="capacity_bytes_per_s"):
        formulas.responsiveness_seconds(bad, 0.2)
    with pytest.raises(ValueError, match="fair_share_bytes_per_s"):
        formulas.initial_ssthresh_segments(bad, 0.2)
    with pytest.raises(ValueError, match=r"\bb\b"):
        formulas.scalable_recovery_rtts(0.01, bad)


def test_scalable_recovery_needs_a_cut_below_the_whole_window():
    with pytest.raises(ValueError, match=r"\bb\b"):
        formulas.scalable_recovery_rtts(0.01, 1.0)


def test_long_path_settings_by_hand():
    """Three paths with MSS 1448 and the default setting (threshold 1 250 000 B, GridDT's A =
    2 x (rtt / 100 ms)^2 when on):
    - 100 Mb/s x 120 ms = 1 500 000 B > threshold: long; alone, ssthresh = floor(1 500 000 / 1448)
      = 1035; A = 2 x 1.2^2 = 2.88 -> 3;
    - 100 Gb/s x 100 us = 1 250 000 B, not above: short, nothing set;
    - 1 Gb/s x 181 ms shared by two = 62.5 MB/s x 0.181 s = 11 312 500 B -> 7812 segments;
      A = 2 x 1.81^2 = 6.55 -> 7 (and 117 ms: 2 x 1.17^2 = 2.74 -> 3, the paper's pair)."""
    bottleneck = np.array([12.5e6, 12.5e9, 125e6, 125e6])
    share = np.array([12.5e6, 12.5e9, 62.5e6, 62.5e6])
    rtt = np.array([0.12, 100e-6, 0.181, 0.117])
    long, ssthresh, increase = formulas.long_path_settings(bottleneck, share, rtt, formulas.LongPaths(griddt=True),
                                                           1448)
    assert long.tolist() == [True, False, True, True]
    assert ssthresh.tolist() == [1035, 0, 7812, 5050]
    assert increase.tolist() == [3, 0, 7, 3]
    _, _, without = formulas.long_path_settings(bottleneck, share, rtt, formulas.LongPaths(), 1448)
    assert without.tolist() == [0, 0, 0, 0]  # Scalable TCP proper: no GridDT increase


def test_long_path_settings_with_no_delay_or_an_infinite_link_are_short():
    long, ssthresh, increase = formulas.long_path_settings(np.array([np.inf, 1e9]), np.array([1e9, 1e9]),
                                                           np.array([0.1, 0.0]), formulas.LongPaths(griddt=True))
    assert long.tolist() == [False, False] and ssthresh.tolist() == [0, 0] and increase.tolist() == [0, 0]
    assert ssthresh.dtype == increase.dtype == np.int64 and ssthresh is not increase


@pytest.mark.parametrize("griddt", [False, True])
def test_long_path_settings_where_none_is_long_are_the_ones_where_some_are(griddt):
    """Where no path is long nothing is evaluated past the test, and the answer is what the same
    paths get beside a long one; a bad MSS is refused either way."""
    settings = formulas.LongPaths(griddt=griddt)
    bottleneck, share, rtt = np.array([12.5e6, 125e6, 1e9]), np.array([6e6, 125e6, 1e9]), np.array([1e-3, 2e-4, 0.0])
    alone = formulas.long_path_settings(bottleneck, share, rtt, settings, 1448)
    beside = formulas.long_path_settings(np.append(bottleneck, 12.5e6), np.append(share, 12.5e6),
                                         np.append(rtt, 0.12), settings, 1448)
    assert not alone[0].any() and beside[0].tolist() == [False, False, False, True]
    for mine, theirs in zip(alone, beside):
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs[:3])
    scalar = formulas.long_path_settings(12.5e6, 6e6, 1e-3, settings, 1448)
    assert [value.shape for value in scalar] == [(), (), ()] and int(scalar[1]) == int(scalar[2]) == 0
    for bad_mss in (0, math.nan):
        with pytest.raises(ValueError, match="mss_bytes"):
            formulas.long_path_settings(bottleneck, share, rtt, settings, bad_mss)


@pytest.mark.parametrize("bad", [dict(bdp_threshold_bytes=0), dict(bdp_threshold_bytes=math.nan),
                                 dict(bdp_threshold_bytes=True), dict(reference_rtt_s=-1),
                                 dict(reference_increase=math.inf), dict(congctl="Scalable"),
                                 dict(congctl="x" * 16), dict(griddt=1)])
def test_long_paths_setting_refuses_bad_values_by_name(bad):
    with pytest.raises(ValueError, match="long paths: " + next(iter(bad))):
        formulas.LongPaths(**bad)
