"""Inputs that hold still (ryu_app/stability.py), and the controller core
producing no generation under steady load while a real change still re-plans."""

from collections import deque

import pytest
from controller_fakes import H1, H2, H3, arp_frame, connected_core
from os_ken.lib.packet import arp as arp_packet

from ryu_app import formulas
from ryu_app.stability import HeldFlows, StableDelays


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
                          lossless=formulas.Lossless())
    learn(core, 0.0)
    packets = 0
    generations = []
    for second in range(1, 61):
        now = float(second)
        if second % 4:  # h3 -> h2 sends three seconds in four
            packets += 10
        core.flow_counter.update(1, [(H3[0], H2[0], packets)])
        # The control path's jitter: the probe samples of s1 -> s2 wander between 100 and 140 us.
        core.delays._samples[(1, 1, 2, 1)] = deque([100e-6 + (second % 3) * 20e-6])
        actions = core.replan(now)
        if actions.generation is not None:
            generations.append((second, actions.generation.number))
    assert [number for _, number in generations] == [1], generations  # the first plan, then nothing


def test_a_new_flow_still_replans_at_the_next_poll():
    core = connected_core(stability={"delay_step_us": 20, "delay_tolerance": 0.5, "flow_hold_s": 5.0})
    learn(core, 0.0)
    assert core.replan(3.0).generation.number == 1
    core.flow_counter.update(1, [(H3[0], H2[0], 1)])
    core.flow_counter.update(1, [(H3[0], H2[0], 9)])  # active in this poll
    changed = core.replan(4.0)
    assert changed.generation is not None and changed.generation.flows == {(H3[0], H2[0]): 1}
