"""Inputs that hold still (`otcp.controller.delay` and `flowcount`), and the controller core
producing no generation under steady load while a real change still re-plans."""

import pytest
from os_ken.lib.packet import arp as arp_packet

from otcp.controller.delay import StableDelays
from otcp.controller.flowcount import HeldFlows
from otcp.wire.messages import RoundTrip
from support.controller_fakes import H1, H2, H3, arp_frame, connected_core


def test_delays_are_quantised_up_and_move_only_past_the_tolerance():
    stable = StableDelays(step_s=20e-6, tolerance=0.5)

    def held(delay):
        return stable.update({"l": delay})["l"]

    assert held(101e-6) == pytest.approx(120e-6)
    assert held(150e-6) == pytest.approx(120e-6)  # 160 us is within 50 % of 120 us
    assert held(190e-6) == pytest.approx(200e-6)  # past it: moves
    assert held(1e-6) == pytest.approx(20e-6)  # a real drop moves too
    assert stable.update({}) == {}
    assert held(30e-6) == pytest.approx(40e-6)  # a link that went is forgotten


def test_a_zero_step_passes_delays_through():
    assert StableDelays(step_s=0, tolerance=0).update({"l": 3.3e-6}) == {"l": 3.3e-6}


def test_new_flows_count_at_once_idle_ones_only_after_the_hold():
    held = HeldFlows(hold_s=5.0)
    assert held.update(0.0, {("a", "b"): 1}) == {("a", "b"): 1}
    assert held.update(1.0, {}) == {("a", "b"): 1}  # a pause between rounds
    assert held.update(1.0, {("c", "b"): 1}) == {("a", "b"): 1, ("c", "b"): 1}  # a new one at once
    assert held.update(5.5, {}) == {("c", "b"): 1}
    assert held.update(7.0, {}) == {}


def learn(core, now):
    for (ip, mac), dpid, port in ((H1, 1, 2), (H2, 2, 2), (H3, 1, 3)):
        core.packet_in(now, dpid, port, arp_frame(arp_packet.ARP_REQUEST, (ip, mac), ip))


def test_steady_load_with_pauses_and_jitter_makes_no_new_generation():
    core = connected_core(stability={"delay_step_us": 20, "delay_tolerance": 0.5, "flow_hold_s": 5.0},
                          parameters={"formulas": "lossless"})
    learn(core, 0.0)
    packets = 0
    generations = []
    for second in range(1, 61):
        now = float(second)
        if second % 4:  # h3 -> h2 sends three seconds in four
            packets += 10
        core.flow_counter.update(1, [(H3[0], H2[0], packets, packets * 1514)])
        # The control path's jitter: the probe samples of s1 -> s2 wander between 100 and 140 us.
        core.delays.forget_link((1, 1), (2, 1))
        core.delays.record((1, 1, 2, 1), 100e-6 + (second % 3) * 20e-6)
        actions = core.replan(now)
        if actions.generation is not None:
            generations.append((second, actions.generation.number))
    assert [number for _, number in generations] == [1], generations  # the first plan, then nothing


def test_a_new_flow_still_replans_at_the_next_poll():
    core = connected_core(stability={"delay_step_us": 20, "delay_tolerance": 0.5, "flow_hold_s": 5.0})
    learn(core, 0.0)
    assert core.replan(3.0).generation.number == 1
    core.flow_counter.update(1, [(H3[0], H2[0], 1, 1 * 1514)])
    core.flow_counter.update(1, [(H3[0], H2[0], 9, 9 * 1514)])  # active in this poll
    changed = core.replan(4.0)
    assert changed.generation is not None and changed.generation.flows == {(H3[0], H2[0]): 1}


def rtt_report(core, now, src, dst, low_us, spread_us):
    core.rtt_report(now, src[0], [RoundTrip(dst[0], low_us * 1e-6, spread_us * 1e-6, 9, "probe")])


def test_jittery_round_trips_make_at_most_one_generation_a_refresh_period():
    core = connected_core(stability={"delay_step_us": 20, "delay_tolerance": 0.5, "flow_hold_s": 5.0,
                                     "refresh_s": 60.0}, parameters={"formulas": "lossless"})
    learn(core, 0.0)
    pairs = ((H1, H2), (H2, H3), (H3, H1))
    generations = []
    for second in range(1, 241):
        if second % 5 == 0:  # every agent reports every 5 s; a loaded host's minimum and spread wander widely
            for k, (src, dst) in enumerate(pairs):
                wander = (second * 7 + k * 13) % 11
                rtt_report(core, float(second), src, dst, 150.0 + 60.0 * wander, 400.0 * wander)
        actions = core.replan(float(second))
        if actions.generation is not None:
            generations.append(second)
    assert generations[0] < 10  # the first plan, with the first reports taken as they come
    per_minute = [sum(1 for s in generations if start <= s < start + 60) for start in range(60, 240, 60)]
    assert max(per_minute) <= 1, generations
    # Without the refresh the same reports churn: the test can tell the two apart.
    churning = connected_core(stability={"delay_step_us": 20, "delay_tolerance": 0.5, "flow_hold_s": 5.0},
                              parameters={"formulas": "lossless"})
    learn(churning, 0.0)
    made = 0
    for second in range(1, 241):
        if second % 5 == 0:
            for k, (src, dst) in enumerate(pairs):
                wander = (second * 7 + k * 13) % 11
                rtt_report(churning, float(second), src, dst, 150.0 + 60.0 * wander, 400.0 * wander)
        made += churning.replan(float(second)).generation is not None
    assert made > 4


def test_a_pair_measured_for_the_first_time_is_taken_at_once():
    core = connected_core(stability={"delay_step_us": 20, "delay_tolerance": 0.5, "flow_hold_s": 5.0,
                                     "refresh_s": 60.0})
    learn(core, 0.0)
    assert core.replan(3.0).generation is not None
    rtt_report(core, 4.0, H1, H2, 800.0, 100.0)
    record = next(r for r in core.replan(4.0).generation.records if (r["src"], r["dst"]) == (H1[0], H2[0]))
    assert record["rtt_source"] == "host" and record["rtt_prop_us"] == pytest.approx(800.0)
    # A later report of the same pair waits for the period; then it is taken.
    rtt_report(core, 5.0, H1, H2, 3000.0, 100.0)
    rtt_report(core, 5.0, H2, H1, 3000.0, 9000.0)
    assert core.replan(5.0).generation is None
    later = core.replan(63.0).generation
    assert later is not None
    taken = next(r for r in later.records if (r["src"], r["dst"]) == (H1[0], H2[0]))
    assert taken["rtt_prop_us"] == pytest.approx(800.0)  # the windowed minimum: 800 us is still in the window
    assert taken["rtt_spread_us"] >= 9000.0  # the top rose with the busy report
