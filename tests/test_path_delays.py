"""Path delays the formulas can trust: host-measured round trips
preferred, control-plane time refused, and the safe side of an unsure
estimate for each parameter. Synthetic samples, no switch."""


from dataclasses import replace

import pytest
from os_ken.lib.packet import arp as arp_packet

from otcp.controller.delay import HostRtts
from otcp.planning.fabric import PairRtt
from otcp.wire.messages import RoundTrip
from support.controller_fakes import H1, H2, H3, arp_frame, connected_core


def learned_core(**options):
    core = connected_core(**options)
    for (ip, mac), dpid, port in ((H1, 1, 2), (H2, 2, 2), (H3, 1, 3)):
        core.packet_in(0.0, dpid, port, arp_frame(arp_packet.ARP_REQUEST, (ip, mac), ip))
    return core


def lldp_sample(core, now, delay_s, echo_s=0.001):
    """One probe round over s1:1 -> s2:1 whose probe took delay_s more than the control legs."""
    for dpid in (1, 2):
        core.delays.echo_sent(dpid, now)
        core.delays.echo_received(dpid, now + echo_s)
    sequence = core.delays.next_probe(1, 1, now)
    core.delays.probe_received((1, 1, sequence), 2, 1, now + echo_s + delay_s)


def record(actions, src, dst):
    return next(r for r in actions.generation.records if (r["src"], r["dst"]) == (src, dst))


def test_both_directions_combine_and_reports_expire():
    rtts = HostRtts(max_age_s=60, min_samples=3)
    rtts.report(0.0, "10.0.0.1", [RoundTrip("10.0.0.2", 700e-6, 50e-6, 9, "tcp")])
    rtts.report(10.0, "10.0.0.2", [RoundTrip("10.0.0.1", 650e-6, 300e-6, 3, "probe")])
    both = rtts.estimates(10.0)
    assert both[("10.0.0.1", "10.0.0.2")] == both[("10.0.0.2", "10.0.0.1")]
    assert both[("10.0.0.1", "10.0.0.2")] == PairRtt(pytest.approx(650e-6), pytest.approx(950e-6), "probe")
    assert set(rtts.estimates(65.0)) == {("10.0.0.1", "10.0.0.2"), ("10.0.0.2", "10.0.0.1")}  # one report left
    assert rtts.estimates(71.0) == {}


def test_a_report_is_taken_once_its_window_holds_enough_samples():
    """One SYN probe is often its pair's first packet through the userspace switch (an
    upcall at every hop): a report of fewer than min_samples samples is not taken."""
    rtts = HostRtts(max_age_s=60, min_samples=3)
    first = RoundTrip("10.0.0.4", 3564e-6, 0.0, 1, "probe")
    rtts.report(0.0, "10.0.0.1", [first, replace(first, dst="10.0.0.3", count=2)])
    assert rtts.estimates(0.0) == {}
    rtts.report(10.0, "10.0.0.1", [replace(first, min_s=204e-6, spread_s=3360e-6, count=3)])
    assert rtts.estimates(10.0) == {pair: PairRtt(pytest.approx(204e-6), pytest.approx(3564e-6), "probe")
                                    for pair in (("10.0.0.1", "10.0.0.4"), ("10.0.0.4", "10.0.0.1"))}


def test_a_report_of_the_kernels_minimum_is_taken_at_once():
    """tcpi_min_rtt is a connection's minimum over all its ACKs: one such sample is a minimum,
    and the short connections of an incast seldom give an agent's window more than one or two."""
    rtts = HostRtts(max_age_s=60, min_samples=3)
    rtts.report(0.0, "10.0.0.2", [RoundTrip("10.0.0.1", 480e-6, 0.0, 1, "tcp"),
                                  RoundTrip("10.0.0.3", 250e-6, 300e-6, 2, "probe")])
    assert rtts.estimates(0.0) == {pair: PairRtt(pytest.approx(480e-6), pytest.approx(480e-6), "tcp")
                                   for pair in (("10.0.0.2", "10.0.0.1"), ("10.0.0.1", "10.0.0.2"))}


def test_the_minimum_and_the_top_are_both_windowed():
    rtts = HostRtts(max_age_s=60, min_samples=3)
    rtts.report(0.0, "10.0.0.1", [RoundTrip("10.0.0.2", 700e-6, 50e-6, 9, "probe")])
    # A busy period's report (queueing in its minimum) does not raise the minimum while the quiet one counts.
    rtts.report(10.0, "10.0.0.1", [RoundTrip("10.0.0.2", 3900e-6, 800e-6, 40, "tcp")])
    assert rtts.estimates(10.0)[("10.0.0.1", "10.0.0.2")] == PairRtt(pytest.approx(700e-6),
                                                                     pytest.approx(4700e-6), "probe")
    # A quiet report after it does not lower the top while the busy one counts.
    rtts.report(20.0, "10.0.0.1", [RoundTrip("10.0.0.2", 720e-6, 30e-6, 9, "probe")])
    assert rtts.estimates(20.0)[("10.0.0.1", "10.0.0.2")] == PairRtt(pytest.approx(700e-6),
                                                                     pytest.approx(4700e-6), "probe")
    assert rtts.estimates(65.0)[("10.0.0.1", "10.0.0.2")] == PairRtt(pytest.approx(720e-6),
                                                                     pytest.approx(4700e-6), "probe")
    assert rtts.estimates(75.0)[("10.0.0.1", "10.0.0.2")] == PairRtt(pytest.approx(720e-6),
                                                                     pytest.approx(750e-6), "probe")
    assert rtts.estimates(81.0) == {}


def test_the_hosts_measurement_is_preferred_and_each_parameter_takes_its_safe_side():
    core = learned_core(measurement={"max_link_delay_us": 100})
    core.rtt_report(1.0, H1[0], [RoundTrip(H2[0], 800e-6, 400e-6, 20, "tcp")])
    actions = core.replan(3.0)
    h1_h2, h1_h3 = record(actions, H1[0], H2[0]), record(actions, H1[0], H3[0])
    assert h1_h3["rtt_source"] == "default"  # nobody measured it: the per-link view
    assert h1_h2["rtt_source"] == "host" and h1_h2["rtt_prop_us"] == pytest.approx(800.0)
    assert h1_h2["rtt_spread_us"] >= 400.0  # the top is held on a 1 ms grid
    # minRTO takes the top of the estimate (minimum + spread); the windows the minimum.
    sure = learned_core(measurement={"max_link_delay_us": 100})
    sure.rtt_report(1.0, H1[0], [RoundTrip(H2[0], 800e-6, 0.0, 20, "tcp")])
    certain = record(sure.replan(3.0), H1[0], H2[0])
    # (the top is held on a 1 ms grid: minRTO is whole milliseconds anyway)
    assert h1_h2["min_rto_us"] - certain["min_rto_us"] >= 400.0
    assert (h1_h2["initcwnd"], h1_h2["cwnd_clamp"]) == (certain["initcwnd"], certain["cwnd_clamp"])


def test_control_plane_noise_cannot_pass_for_propagation():
    """Jittery LLDP samples of 0-13.5 ms on s1 -> s2: all beyond the physical bound, refused;
    the link keeps the configured default, and the windows stay what a small round trip gives."""
    quiet = learned_core(measurement={"max_link_delay_us": 100})
    noisy = learned_core(measurement={"max_link_delay_us": 100})
    for k in range(10):
        lldp_sample(noisy, float(k), delay_s=(k * 1.5e-3) % 13.5e-3 + 0.5e-3)
    assert noisy.delays.delays() == {} and noisy.delays.refused["beyond_bound"] == 10
    quiet_record, noisy_record = (record(core.replan(20.0), H1[0], H2[0]) for core in (quiet, noisy))
    assert noisy_record["initcwnd"] == quiet_record["initcwnd"]
    assert noisy_record["cwnd_clamp"] == quiet_record["cwnd_clamp"]
    assert noisy_record["rtt_source"] == "default"


def test_without_the_bound_noise_would_open_the_windows():
    """The same noise with no physical bound (one far above it): the estimate is the window's
    minimum, 0.5 ms, and the initial window grows with it. This is what the bound prevents."""
    unbounded = learned_core(measurement={"max_link_delay_us": 1e6})
    bounded = learned_core(measurement={"max_link_delay_us": 100})
    for core in (unbounded, bounded):
        for k in range(10):
            lldp_sample(core, float(k), delay_s=(k * 1.5e-3) % 13.5e-3 + 0.5e-3)
    wide, safe = (record(core.replan(20.0), H1[0], H2[0]) for core in (unbounded, bounded))
    assert wide["rtt_prop_us"] > 500 and wide["initcwnd"] > safe["initcwnd"]
