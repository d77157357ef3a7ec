"""The controller core with an explicit `now`: what it learns from each event
and what it asks the glue to do (`otcp.controller.core`)."""

import gc
import ipaddress
import types

import pytest
from os_ken.lib.packet import arp as arp_packet
from os_ken.lib.packet import tcp
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

from otcp.controller import core as core_module
from otcp.controller import delay, forwarding
from otcp.controller.arp import probe_frame as arp_probe_frame
from otcp.controller.core import ARP_PENDING_S, ECHO_PAYLOAD, MAX_GENERATION_LEAP
from otcp.controller.publication import Publications
from otcp.controller.topology import Host
from otcp.wire.limits import GENERATION, RTT_PROBE_PORT
from otcp.wire.messages import SendingConnections
from otcp.wire.paramset import ParamSet, RouteParams
from support.controller_fakes import (
    H1,
    H2,
    H3,
    HOSTS,
    PORTS,
    FakeDatapath,
    arp_frame,
    connected_core,
    ipv4_frame,
    learn_hosts,
    new_core,
    parsed,
    port_infos,
    port_mac,
    tcp_frame,
)


def packet_outs(actions):
    """(dpid, out port, message) of every PacketOut among the sends."""
    return [(dpid, m.actions[0].port, m) for dpid, m in actions.sends if isinstance(m, ofproto_v1_3_parser.OFPPacketOut)]


def settled_core():
    """Both switches, the link and three hosts, all learned at time 0."""
    core = connected_core()
    learn_hosts(core, 0.0, *HOSTS)
    return core


# -- switches ----------------------------------------------------------------------


def test_a_connecting_switch_is_cleared_then_sends_misses_up_through_a_meter():
    core = new_core()
    (_, clear), (_, old_meter), (_, meter), (_, probes), (_, miss) = core.switch_features(
        1, types.SimpleNamespace(ofproto=ofproto_v1_3, ofproto_parser=ofproto_v1_3_parser)).sends
    assert (clear.command, clear.cookie, clear.cookie_mask) == (
        ofproto_v1_3.OFPFC_DELETE, forwarding.COOKIE_BASE, forwarding.COOKIE_KIND_MASK)
    assert (old_meter.command, old_meter.meter_id) == (ofproto_v1_3.OFPMC_DELETE, forwarding.PACKET_IN_METER)
    assert (meter.command, meter.meter_id, meter.bands[0].rate) == (
        ofproto_v1_3.OFPMC_ADD, forwarding.PACKET_IN_METER, core_module.PACKET_IN_RATE_PPS)
    assert meter.flags & ofproto_v1_3.OFPMF_PKTPS
    # The controller's own probes go up unmetered: discovery never starves.
    assert probes.match["eth_type"] == 0x88CC and probes.priority > forwarding.PAIR_PRIORITY
    assert probes.instructions[0].actions[0].port == ofproto_v1_3.OFPP_CONTROLLER
    assert miss.priority == forwarding.TABLE_MISS_PRIORITY
    assert miss.instructions[0].meter_id == forwarding.PACKET_IN_METER
    assert miss.instructions[1].actions[0].port == ofproto_v1_3.OFPP_CONTROLLER


def test_ready_switch_is_asked_for_ports_and_their_description_changes_the_topology():
    core = new_core()
    core.switch_features(1, types.SimpleNamespace(ofproto=ofproto_v1_3, ofproto_parser=ofproto_v1_3_parser))
    (dpid, request), = core.switch_ready(1).sends
    assert dpid == 1 and isinstance(request, ofproto_v1_3_parser.OFPPortDescStatsRequest)
    assert core.port_description(4.0, 1, port_infos(1)).replan
    assert core.topology.switches[1] == {1: 12.5e6, 2: 12.5e6, 3: 12.5e6}  # LOCAL left out; kb/s -> B/s
    assert core.changed_at == 4.0
    assert not core.port_description(5.0, 1, port_infos(1)).replan  # nothing new
    assert core.changed_at == 4.0


def test_a_gone_switch_takes_its_links_and_hosts_along():
    core = settled_core()
    actions = core.switch_gone(7.0, 2)
    assert actions.replan and core.changed_at == 7.0
    assert 2 not in core.topology.switches and core.topology.links == {}
    assert set(core.topology.hosts) == {H1[0], H3[0]}
    assert core.ready_switches() == [1]
    assert not core.switch_gone(8.0, 2).replan


def test_a_reconnected_switch_has_its_hosts_back_before_they_send_anything():
    # A switch that drops its controller connection (a loaded controller missing the switch's
    # inactivity probe) and connects again: hosts whose agents wait for their first set are
    # silent, yet must be located again, or no set goes to them and no flow is counted.
    core = settled_core()
    core.switch_gone(7.0, 2)
    assert core.topology.host(H2[0]) is None and core.agent_epoch(H2[0]) is None  # meanwhile: not there
    core.switch_features(2, FakeDatapath(2))
    core.switch_ready(2)
    assert core.port_description(8.0, 2, port_infos(2)).replan
    assert core.topology.host(H2[0]) == Host(*H2, 2, 2)
    assert core.agent_epoch(H2[0]) is not None
    assert H2[0] in core.topology.located_hosts()
    # Seen elsewhere, the host is learned there, as a host that moved.
    learn_hosts(core, 9.0, (*H2, 1, 3))
    assert core.topology.host(H2[0]) == Host(*H2, 1, 3) and H2[0] not in core.topology.hints


def test_links_on_host_ports_are_refused(caplog):
    core = settled_core()
    assert not core.link_added(1.0, (1, 2), (2, 2)).replan
    assert "ignoring LLDP link on a host port: s1:2 -> s2:2" in caplog.text
    assert (1, 2) not in core.topology.links


def test_a_deleted_link_loses_its_delay_samples():
    core = measured_core()
    assert (1, 1) in core.delays.delays()
    assert core.link_deleted(20.0, (1, 1), (2, 1)).replan
    assert (1, 1) not in core.delays.delays() and core.changed_at == 20.0
    assert not core.link_deleted(21.0, (1, 1), (2, 1)).replan


# -- host learning and proxy ARP -------------------------------------------------------------


def test_hosts_are_learned_from_arp_and_ip_on_edge_ports_only():
    core = connected_core()
    actions = core.packet_in(3.0, 1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H1[0]))
    assert actions.replan and core.changed_at == 3.0
    assert core.topology.hosts[H1[0]] == Host(*H1, 1, 2)
    assert core.packet_in(4.0, 2, 2, ipv4_frame(H2, H1)).replan
    assert core.topology.hosts[H2[0]] == Host(*H2, 2, 2)
    core.packet_in(5.0, 1, 1, ipv4_frame(H3, H1))  # on a link port
    assert H3[0] not in core.topology.hosts and core.changed_at == 4.0


def test_the_controllers_own_probes_teach_nothing():
    core = connected_core()
    core.packet_in(1.0, 1, 2, arp_frame(arp_packet.ARP_REPLY, ("0.0.0.0", "00:00:00:00:00:09"), H2[0]))
    assert core.topology.hosts == {}


def test_arp_for_a_known_host_is_answered_by_the_controller():
    core = settled_core()
    [(dpid, port, reply)] = packet_outs(core.packet_in(1.0, 1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H2[0])))
    answer = parsed(reply).get_protocol(arp_packet.arp)
    assert (dpid, port) == (1, 2)
    assert (answer.opcode, answer.src_ip, answer.src_mac, answer.dst_ip) == (arp_packet.ARP_REPLY, *H2, H1[0])


def test_arp_for_an_unknown_host_waits_for_it_and_asks_every_edge_port():
    core = connected_core()
    learn_hosts(core, 0.0, (*H1, 1, 2))
    probes = packet_outs(core.packet_in(1.0, 1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H2[0])))
    assert sorted((dpid, port) for dpid, port, _ in probes) == [(1, 2), (1, 3), (2, 2)]
    probe = parsed(probes[0][2]).get_protocol(arp_packet.arp)
    assert (probe.src_ip, probe.dst_ip) == ("0.0.0.0", H2[0])
    # h2 answers the controller's probe: it is learned, and h1's request answered.
    answered = core.packet_in(1.5, 2, 2, arp_frame(arp_packet.ARP_REPLY, H2, "0.0.0.0"))
    [(dpid, port, reply)] = packet_outs(answered)
    assert (dpid, port) == (1, 2) and answered.replan
    assert parsed(reply).get_protocol(arp_packet.arp).src_mac == H2[1]
    # Answered once: h2 answering again sends nothing.
    assert packet_outs(core.packet_in(1.6, 2, 2, arp_frame(arp_packet.ARP_REPLY, H2, "0.0.0.0"))) == []


def test_an_unanswered_arp_request_expires():
    core = connected_core()
    learn_hosts(core, 0.0, (*H1, 1, 2))
    core.packet_in(1.0, 1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H2[0]))
    late = core.packet_in(1.0 + ARP_PENDING_S, 2, 2, arp_frame(arp_packet.ARP_REPLY, H2, "0.0.0.0"))
    assert packet_outs(late) == []
    assert H2[0] in core.topology.hosts  # learned all the same


# -- measurement -------------------------------------------------------------------------


def probe_round(core, now, dpid):
    """Send one probe round of a switch; return {port: probe frame}."""
    actions = core.probe_switch(now, dpid)
    echo = actions.sends[0][1]
    assert isinstance(echo, ofproto_v1_3_parser.OFPEchoRequest) and echo.data == ECHO_PAYLOAD
    return {port: message.data for _, port, message in packet_outs(actions)}


def measured_core():
    """h1 and h2 learned; echoes of 4 ms (s1) and 2 ms (s2); one probe s1:1 -> s2:1 taking 5 ms."""
    core = connected_core()
    learn_hosts(core, 0.0, (*H1, 1, 2), (*H2, 2, 2))
    probes = probe_round(core, 10.0, 1)
    probe_round(core, 10.0, 2)
    core.echo_reply(10.004, 1, ECHO_PAYLOAD)
    core.echo_reply(10.002, 2, ECHO_PAYLOAD)
    core.packet_in(10.005, 2, 1, probes[1])
    return core


def test_probes_leave_every_port_but_hosts_and_are_timed_against_echoes():
    core = connected_core()
    learn_hosts(core, 0.0, (*H1, 1, 2))
    probes = probe_round(core, 10.0, 1)
    assert sorted(probes) == [1, 3]  # not h1's port 2, not LOCAL
    assert delay.parse_probe(probes[1])[:2] == (1, 1)
    assert parsed_source(probes[1]) == port_mac(1, 1)
    core = measured_core()
    (value, samples), = core.delays.delays().values()
    assert value == pytest.approx(0.005 - 0.002 - 0.001) and samples == 1


def parsed_source(frame):
    from os_ken.lib.packet import ethernet

    return parsed(types.SimpleNamespace(data=frame)).get_protocol(ethernet.ethernet).src


def test_foreign_echoes_and_probes_on_host_ports_are_not_measured():
    core = connected_core()
    learn_hosts(core, 0.0, (*H1, 1, 2))
    probes = probe_round(core, 10.0, 1)
    core.echo_reply(10.001, 1, b"other")
    assert core.delays.echo_rtt(1) is None
    core.echo_reply(10.001, 1, ECHO_PAYLOAD)
    core.echo_reply(10.001, 2, ECHO_PAYLOAD)
    core.packet_in(10.002, 1, 2, probes[1])  # arrives on h1's port: a host replaying it
    assert core.delays.delays() == {}


def pair_stat(src, dst, packets):
    """A pair entry's flow statistics after packets full-size frames, as os-ken parses them from a reply."""
    match = ofproto_v1_3_parser.OFPMatch(eth_type=0x0800, ipv4_src=src, ipv4_dst=dst)
    return types.SimpleNamespace(cookie=forwarding.PAIR_COOKIE, priority=forwarding.PAIR_PRIORITY,
                                 packet_count=packets, byte_count=packets * 1514, match=match)


def test_flow_stats_make_pairs_active_and_count_on_their_links():
    core = measured_core()
    (dpid, request), (_, _) = core.stats_round().sends
    assert dpid == 1 and isinstance(request, ofproto_v1_3_parser.OFPFlowStatsRequest)

    core.flow_stats(1, [pair_stat(H1[0], H2[0], 10)])
    core.flow_stats(1, [pair_stat(H1[0], H2[0], 50)])
    rows = {(row.src, row.dst): row for row in core.replan(20.0).measurements}
    assert rows[("s1", "s2")].flows == 1 and rows[("s2", "s1")].flows == 0
    assert rows[("s1", "s2")].delay_source == "measured" and rows[("s1", "s2")].samples == 1
    assert rows[("s1", "s2")].delay_s == pytest.approx(0.002)
    assert rows[("s2", "s1")].delay_source == "default"


def test_an_agents_sending_connections_multiply_an_active_pair_while_its_report_is_fresh():
    core = measured_core()
    core.connection_report(15.0, H1[0], [SendingConnections(H2[0], 8), SendingConnections("10.9.9.9", 3)])
    core.connection_report(15.0, H2[0], [SendingConnections(H1[0], 4)])  # the pair back carries no data
    core.flow_stats(1, [pair_stat(H1[0], H2[0], 10)])
    core.flow_stats(1, [pair_stat(H1[0], H2[0], 50)])
    rows = {(row.src, row.dst): row for row in core.replan(20.0).measurements}
    assert rows[("s1", "s2")].flows == 8 and rows[("s2", "s1")].flows == 0
    core.connection_report(18.0, H1[0], [])  # between two jobs: the higher report still holds
    rows = {(row.src, row.dst): row for row in core.replan(21.0).measurements}
    assert rows[("s1", "s2")].flows == 8
    core.flow_stats(1, [pair_stat(H1[0], H2[0], 90)])
    late = 18.0 + core.reported_connections.max_age_s + 1.0
    rows = {(row.src, row.dst): row for row in core.replan(late).measurements}
    assert rows[("s1", "s2")].flows == 1  # every report has aged out: the switch's pair alone


def test_a_flow_stats_reply_in_parts_is_counted_as_one_poll():
    """Open vSwitch splits a reply over 64 KB: every part but the last says more follows."""
    core = measured_core()
    for packets in (10, 50):  # two polls, each in two parts: h1 -> h2 in the first, h2 -> h1 in the second
        core.flow_stats(1, [pair_stat(H1[0], H2[0], packets)], more=True)
        assert core.flow_counter.active_pairs() == {}  # nothing counted before the last part
        core.flow_stats(1, [pair_stat(H2[0], H1[0], packets)])
    # Both sent 40 packets since the first poll; counted part by part, the first part's pair was not
    # seen in the last "poll" (the second part alone) and never counted.
    assert core.flow_counter.active_pairs() == {(H1[0], H2[0]): 1, (H2[0], H1[0]): 1}


# -- forwarding --------------------------------------------------------------------------


def test_a_missed_packet_goes_straight_out_of_its_destinations_edge_port():
    core = settled_core()
    actions = core.packet_in(4.0, 1, 2, ipv4_frame(H1, H2))
    assert not actions.replan and [m for _, m in actions.sends if isinstance(m, ofproto_v1_3_parser.OFPFlowMod)] == []
    [(dpid, port, message)] = packet_outs(actions)
    assert (dpid, port, message.data) == (2, 2, ipv4_frame(H1, H2))  # at h2's port, never into the fabric
    # Missed again at s2's link port (an entry not yet applied): delivered the same, h1 not moved.
    again = core.packet_in(4.1, 2, 1, ipv4_frame(H1, H2))
    assert [(d, p) for d, p, _ in packet_outs(again)] == [(2, 2)] and core.topology.hosts[H1[0]] == Host(*H1, 1, 2)
    assert packet_outs(core.packet_in(4.2, 1, 2, ipv4_frame(H1, ("10.0.0.99", "00:00:00:00:00:99")))) == []
    assert packet_outs(core.packet_in(4.3, 2, 2, ipv4_frame(H1, H2))) == []  # already at its destination's port


# -- discovery and host learning (hosts must not flap onto switch links) ---------------------------


def probe_out_of(core, now, dpid, port):
    """The probe that switch dpid's probe round at now sends out of port."""
    return probe_round(core, now, dpid)[port]


def test_links_are_discovered_from_the_controllers_own_probes_and_expire_when_they_stop():
    core = new_core()
    for dpid in PORTS:
        core.switch_features(dpid, FakeDatapath(dpid))
        core.switch_ready(dpid)
        core.port_description(0.0, dpid, port_infos(dpid))
    probe = probe_out_of(core, 1.0, 1, 1)
    assert core.packet_in(1.001, 2, 1, probe).replan
    assert core.topology.links == {(1, 1): (2, 1)}
    assert not core.packet_in(1.002, 2, 1, probe).replan  # the same probe twice proves nothing new
    forged = delay.probe_frame(1, 3, port_mac(1, 3), 999)  # never sent: no link s1:3 -> s2:2
    assert not core.packet_in(1.003, 2, 2, forged).replan and (1, 3) not in core.topology.links
    core.packet_in(2.001, 2, 1, probe_out_of(core, 2.0, 1, 1))
    assert not core.expire_links(1000.0).replan  # a controller that stalled sent no probes: nothing expires
    for round_number in range(1, core_module.LINK_TIMEOUT_ROUNDS):
        probe_round(core, 1000.0 + round_number, 1)  # probes leave s1:1 and never arrive
        assert not core.expire_links(1000.5 + round_number).replan
    probe_round(core, 1010.0, 1)
    assert core.expire_links(1010.5).replan and core.topology.links == {}


def test_a_port_that_carried_a_link_learns_no_host_until_discovery_settles_there():
    """A link that timed out (its probes lost under load) leaves its ports
    link ports for learning: a host's packet arriving there is a packet in
    flight along the old path, not the host."""
    core = connected_core()
    core.link_deleted(10.0, (1, 1), (2, 1))
    core.link_deleted(10.0, (2, 1), (1, 1))
    settle = core_module.SETTLE_PROBE_ROUNDS * 1.0
    assert not core.edge_port(10.0 + settle - 0.01, 2, 1)
    core.packet_in(10.5, 2, 1, ipv4_frame(H1, H2))
    core.packet_in(10.5, 2, 1, arp_frame(arp_packet.ARP_REQUEST, H1, H2[0]))
    assert core.topology.hosts == {}
    assert core.edge_port(10.0 + settle, 2, 1)  # settled: a host may be plugged in there now
    assert not core.edge_port(10.0 + settle, 2, 7)  # a port the switch does not have
    learn_hosts(core, 10.0 + settle, (*H1, 2, 1))
    assert core.topology.hosts[H1[0]] == Host(*H1, 2, 1)


def test_the_controllers_own_arp_probe_coming_back_through_a_link_teaches_and_answers_nothing():
    """A probe for a known host, sent out of a port whose link is not
    discovered yet, reaches the next switch: the controller must neither
    answer it there nor learn from it, or the answer would cross back and
    teach it that the host is on the link port."""
    core = new_core()
    for dpid in PORTS:
        core.switch_features(dpid, FakeDatapath(dpid))
        core.switch_ready(dpid)
        core.port_description(0.0, dpid, port_infos(dpid))
    learn_hosts(core, 0.0, (*H2, 2, 2))
    came_back = core.packet_in(0.5, 1, 1, arp_probe_frame(H2[0]))
    assert came_back.sends == [] and set(core.topology.hosts) == {H2[0]}


def test_edge_ports_are_asked_for_an_unknown_address_at_most_once_a_second():
    core = connected_core()
    learn_hosts(core, 0.0, (*H1, 1, 2))
    assert len(packet_outs(core.packet_in(1.0, 1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H2[0])))) == 3
    assert packet_outs(core.packet_in(1.5, 1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H2[0]))) == []
    again = core.packet_in(1.0 + core_module.ARP_PROBE_INTERVAL_S, 1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H2[0]))
    assert len(packet_outs(again)) == 3
    # The three waiting requests are all answered when h2 speaks.
    assert len(packet_outs(core.packet_in(2.5, 2, 2, arp_frame(arp_packet.ARP_REPLY, H2, "0.0.0.0")))) == 3


def destination_mods(actions):
    """(dpid, command, dst ip) of the flow mods by destination among the sends."""
    return [(d, m.command, m.match["ipv4_dst"]) for d, m in actions.sends
            if isinstance(m, ofproto_v1_3_parser.OFPFlowMod) and "ipv4_dst" in m.match]


def test_replan_installs_one_entry_per_destination_and_then_only_what_changed():
    core = settled_core()
    first = core.replan(1.0)
    assert sorted(destination_mods(first)) == sorted(
        [(dpid, ofproto_v1_3.OFPFC_ADD, ip) for dpid in (1, 2) for ip in (H1[0], H2[0], H3[0])])
    punts = [(d, m.match["in_port"]) for d, m in first.sends if m.priority == forwarding.PUNT_PRIORITY]
    assert sorted(punts) == [(1, 2), (1, 3), (2, 2)]  # the hosts' ports
    assert core.entries_per_switch() == {1: 3 + 2 + 2, 2: 3 + 1 + 2}
    assert core.replan(1.5).sends == []  # nothing changed, nothing sent
    core.link_deleted(2.0, (1, 1), (2, 1))  # one direction gone: s1 loses its hop toward s2
    one_way = core.replan(2.0)
    # Its pair entries toward h2 (any), then its destination entry for h2.
    assert destination_mods(one_way) == [(1, ofproto_v1_3.OFPFC_DELETE, H2[0]),
                                         (1, ofproto_v1_3.OFPFC_DELETE_STRICT, H2[0])]


def test_reroute_sends_the_forwarding_a_replan_would_and_plans_nothing():
    """Forwarding before parameters: after a link change, reroute's flow mods are the ones
    replan would have sent; the replan after it sends none and still makes the generation."""
    routed, planned = settled_core(), settled_core()
    for core in (routed, planned):
        core.replan(1.0)
        core.link_deleted(2.0, (1, 1), (2, 1))
    rerouted = routed.reroute()
    assert rerouted.generation is None and not rerouted.deliver and rerouted.topology is None
    replanned = planned.replan(2.0)
    assert destination_mods(rerouted) == destination_mods(replanned) != []
    after = routed.replan(2.0)
    assert destination_mods(after) == []
    assert routed.entries_per_switch() == planned.entries_per_switch()
    assert (after.generation is None) == (replanned.generation is None)
    assert routed.reroute().sends == []  # nothing changed since


def test_the_destination_entries_are_made_once_while_paths_hosts_and_ports_stay(monkeypatch):
    core = settled_core()
    made = []
    original = forwarding.destination_entries
    monkeypatch.setattr(forwarding, "destination_entries", lambda *args: made.append(1) or original(*args))
    core.reroute()
    core.replan(1.0)
    core.replan(1.5)
    assert len(made) == 1
    core.link_deleted(2.0, (1, 1), (2, 1))  # other paths
    core.reroute()
    core.replan(2.0)
    assert len(made) == 2


def test_a_hosts_first_packet_of_a_pair_installs_its_counting_entry_at_the_ingress_only():
    core = settled_core()
    core.replan(1.0)
    actions = core.packet_in(4.0, 1, 2, ipv4_frame(H1, H2))
    (dpid, entry), (out_dpid, out) = actions.sends
    assert (dpid, entry.cookie, entry.priority, entry.match["ipv4_src"], entry.match["ipv4_dst"]) == (
        1, forwarding.PAIR_COOKIE, forwarding.PAIR_PRIORITY, H1[0], H2[0])
    assert entry.instructions[0].actions[0].port == 1 and entry.idle_timeout == forwarding.PAIR_IDLE_S
    assert (out_dpid, out.actions[0].port) == (1, 1)  # on toward s2 by the destination entries


@pytest.mark.parametrize("ip_options", [b"", b"\x01\x01\x01\x00"])  # NOPs and end: a 24-byte header
def test_an_agents_round_trip_probe_goes_on_without_a_counting_entry(ip_options):
    core = settled_core()
    core.replan(1.0)
    syn = core.packet_in(4.0, 1, 2, tcp_frame(H1, H2, 40000, RTT_PROBE_PORT, ip_options=ip_options))
    rst = core.packet_in(4.0, 1, 3, tcp_frame(H3, H2, RTT_PROBE_PORT, 40000, tcp.TCP_RST | tcp.TCP_ACK,
                                               ip_options=ip_options))
    for actions in (syn, rst):
        assert [(dpid, port) for dpid, port, _ in packet_outs(actions)] == [(1, 1)]  # on toward s2
        assert len(actions.sends) == 1  # and no pair entry
    data = core.packet_in(4.0, 1, 2, tcp_frame(H1, H2, 40000, 5001, ip_options=ip_options))
    assert [m.cookie for _, m in data.sends if isinstance(m, ofproto_v1_3_parser.OFPFlowMod)] == [
        forwarding.PAIR_COOKIE]


def test_only_a_whole_tcp_header_to_or_from_the_probe_port_is_a_probe():
    probe = tcp_frame(H1, H2, 40000, RTT_PROBE_PORT)
    assert core_module.is_rtt_probe(probe)
    assert core_module.is_rtt_probe(tcp_frame(H1, H2, RTT_PROBE_PORT, 40000, tcp.TCP_RST))
    assert not core_module.is_rtt_probe(tcp_frame(H1, H2, 40000, RTT_PROBE_PORT + 1))
    assert not core_module.is_rtt_probe(probe[:36])  # the ports cut off
    udp = bytearray(probe)
    udp[23] = 17
    assert not core_module.is_rtt_probe(bytes(udp))  # port 9 of another protocol
    assert not core_module.is_rtt_probe(ipv4_frame(H1, H2))


# -- generations and publication ---------------------------------------------------------------


def test_no_generation_until_discovery_has_settled():
    core = settled_core()  # last change at 0, probe rounds of 1 s
    early = core.replan(2.9)
    assert early.generation is None and early.deliver == [] and core.generation == 0
    assert early.topology.switches == {1: "s1", 2: "s2"}
    assert {(h.ip, h.dpid, h.port) for h in early.topology.hosts} == {(H1[0], 1, 2), (H2[0], 2, 2), (H3[0], 1, 3)}
    assert core.settled(3.0)


def test_a_generation_publishes_only_the_hosts_whose_routes_changed():
    core = settled_core()
    first = core.replan(3.0)
    assert first.generation.number == 1 and core.generation == 1
    assert first.deliver == [H1[0], H2[0], H3[0]]
    assert len(first.generation.records) == 6 and len(first.generation.link_rows) == len(first.measurements)
    assert core.publications.latest(H1[0]).generation == 1
    assert core.replan(4.0).generation is None  # nothing changed
    # h2 now sends to h1: h2's and h3's routes toward h1 share s1 -> h1 with it.
    core.flow_counter.update(2, [(H2[0], H1[0], 1, 1 * 1514)])
    core.flow_counter.update(2, [(H2[0], H1[0], 5, 5 * 1514)])
    second = core.replan(5.0)
    assert second.generation.number == 2 and second.deliver == [H2[0], H3[0]]
    assert second.generation.flows == {(H2[0], H1[0]): 1}
    assert core.publications.latest(H1[0]).generation == 1
    assert core.publications.latest(H2[0]).generation == 2


def test_paced_generations_carry_each_routes_rate_and_follow_the_flows():
    """otcp-paced: with pacing, every route of a published set carries the fair-share rate, and a new
    flow into h1 halves the rate of the other sender's route toward h1 (s1 -> h1 shared by two)."""
    core = connected_core(parameters={"formulas": "lossless", "pacing": True, "pacing_headroom": 0.05})
    learn_hosts(core, 0.0, *HOSTS)
    core.replan(3.0)

    def rate(host, toward):  # the rate longest-prefix match gives toward (the sets are aggregated)
        routes = [r for r in core.publications.latest(host).routes
                  if ipaddress.ip_address(toward) in ipaddress.ip_network(r.dst)]
        return max(routes, key=lambda r: ipaddress.ip_network(r.dst).prefixlen).pacing_rate

    before = rate(H3[0], H1[0])
    assert isinstance(before, int) and before > 0
    assert all(isinstance(r.pacing_rate, int) for r in core.publications.latest(H1[0]).routes)
    core.flow_counter.update(2, [(H2[0], H1[0], 1, 1 * 1514)])
    core.flow_counter.update(2, [(H2[0], H1[0], 5, 5 * 1514)])
    assert core.replan(5.0).generation.number == 2
    assert abs(2 * rate(H3[0], H1[0]) - before) <= 1


def test_with_fan_in_admission_every_set_tells_its_host_how_many_senders_to_ask_at_once():
    """K = floor((g x buf - F) / (F + H)) of the host's downlink: (85 000 - 1514) / 1580 -> 52.
    Without admission a set carries none; a new admit alone makes a new generation."""
    plain = settled_core()
    plain.replan(3.0)
    assert [plain.publications.latest(ip).admit for ip, *_ in HOSTS] == [None, None, None]
    core = connected_core(parameters={"formulas": "lossless", "fan_in_admission": True})
    learn_hosts(core, 0.0, *HOSTS)
    assert core.replan(3.0).generation.number == 1
    assert [core.publications.latest(ip).admit for ip, *_ in HOSTS] == [52, 52, 52]
    assert core.replan(4.0).generation is None  # nothing changed
    publications = core.publications
    routes = publications.latest(H1[0]).routes
    assert not publications.changed(H1[0], routes, 52)
    assert publications.changed(H1[0], routes, 40) and publications.changed(H1[0], routes, None)
    publications.publish(2, {H1[0]: routes}, {H1[0]: 40})
    assert publications.latest(H1[0]).admit == 40 and not publications.changed(H1[0], routes, 40)
    with pytest.raises(ValueError, match="admit: 0 is out of range 1..65535"):
        publications.publish(3, {H1[0]: routes}, {H1[0]: 0})
    assert publications.latest(H1[0]).generation == 2  # a bad set is not kept


def test_generations_continue_from_the_stored_number():
    core = connected_core(generation=41, known_hosts=[Host(*H1, 1, 2), Host(*H2, 2, 2)])
    actions = core.replan(3.0)
    assert actions.generation.number == 42 and actions.deliver == [H1[0], H2[0]]


def test_an_agent_at_or_ahead_of_the_controller_moves_the_numbering_on():
    core = settled_core()
    core.replan(3.0)
    assert not core.agent_arrived(H1[0], None).replan
    assert not core.agent_arrived(H1[0], 0).replan  # behind: it accepts what comes
    actions = core.agent_arrived(H1[0], 7)  # its earlier controller got further
    assert actions.replan and core.generation == 7
    assert core.publications.latest(H1[0]) is None
    following = core.replan(4.0)
    assert following.generation.number == 8 and following.deliver == [H1[0]]


def test_an_agent_absurdly_far_ahead_is_not_followed(caplog):
    core = settled_core()
    core.replan(3.0)
    assert not core.agent_arrived(H1[0], 1 + MAX_GENERATION_LEAP + 1).replan
    assert core.generation == 1 and core.publications.latest(H1[0]).generation == 1
    assert "not followed" in caplog.text
    assert core.agent_arrived(H1[0], 1 + MAX_GENERATION_LEAP).replan  # the bound itself is followed
    assert core.generation == 1 + MAX_GENERATION_LEAP
    core.generation = GENERATION[1] - 1
    assert not core.agent_arrived(H1[0], GENERATION[1]).replan  # no number left to continue with


def test_publications_keep_only_valid_sets_and_tell_what_changed():
    publications = Publications()
    route = RouteParams(dst="10.0.0.2/32", rto_min_ms=14, initcwnd=1, quickack=True)
    publications.publish(1, {"10.0.0.1": [route]})
    assert publications.latest("10.0.0.1") == ParamSet(generation=1, routes=[route])
    assert not publications.changed("10.0.0.1", [route])
    assert not publications.changed("10.0.0.1", [RouteParams(**route.model_dump())])  # an equal route
    assert publications.changed("10.0.0.1", [route.model_copy(update={"initcwnd": 2})])
    assert publications.changed("10.0.0.3", [])
    # A set is checked as a whole: one route per destination, a generation in range, a host's address.
    for bad, message in (({"10.0.0.3": [], "10.0.0.1": [route, route]}, r"routes\[1\].dst: 10.0.0.2/32 duplicates"),
                         ({"h1": []}, "host_ip: 'h1' is not an IPv4 or IPv6 address")):
        with pytest.raises(ValueError, match=message):
            publications.publish(2, bad)
        assert publications.latest("10.0.0.3") is None  # nothing of a bad batch is kept
    with pytest.raises(ValueError, match="generation: 0 is out of range"):
        publications.publish(0, {"10.0.0.3": [route]})
    publications.forget("10.0.0.1")
    assert publications.changed("10.0.0.1", [route])


def test_sets_share_the_route_objects_the_planner_made_once():
    """A route is made (and validated) once by the planner and shared by every set that has it,
    plan after plan: the sets published hold those very objects."""
    core = settled_core()
    core.replan(3.0)
    sets = [core.publications.latest(ip) for ip in (H1[0], H2[0], H3[0])]
    routes = [route for param_set in sets for route in param_set.routes]
    assert len({id(route) for route in routes}) < len(routes)
    core.flow_counter.update(2, [(H2[0], H1[0], 1, 1 * 1514)])
    core.flow_counter.update(2, [(H2[0], H1[0], 5, 5 * 1514)])
    core.replan(5.0)
    kept = core.publications.latest(H1[0])  # h1's routes did not change: its set is the one published before
    assert kept is sets[0]


def test_the_core_imports_no_os_ken_machinery():
    source = open(core_module.__file__).read()
    for forbidden in ("os_ken.base", "os_ken.controller", "os_ken.topology", "os_ken.lib.hub", "import time"):
        assert forbidden not in source


# -- stored hosts are hints ----------------------------------------------------------------


def test_a_stored_host_on_what_is_now_a_link_port_is_never_used():
    """After a restart on another fabric, s1:1 is a link: the stored host there gives way to it."""
    core = connected_core(known_hosts=[Host(*H1, 1, 1), Host(*H2, 2, 2)])
    assert core.topology.host(H1[0]) is None and core.topology.host(H2[0]) == Host(*H2, 2, 2)
    assert (1, 1) in core.topology.links  # the hint did not keep the link out
    plan_hosts = {record.ip for record in core.replan(3.0).topology.hosts}
    assert plan_hosts == {H2[0]}


def test_a_stored_host_on_a_port_the_switch_does_not_have_is_never_used():
    core = connected_core(known_hosts=[Host(*H1, 1, 99), Host(*H2, 7, 2)])
    assert core.topology.host(H1[0]) is None and core.topology.host(H2[0]) is None
    assert list(core.replan(3.0).topology.hosts) == []


def test_a_host_seen_at_a_new_place_wins_at_once():
    core = connected_core(known_hosts=[Host(*H1, 1, 2)])
    learn_hosts(core, 1.0, (*H1, 1, 3))
    assert core.topology.host(H1[0]) == Host(*H1, 1, 3) and H1[0] not in core.topology.hints


def test_a_replan_pauses_the_garbage_collector_and_gives_it_back_as_it_was(monkeypatch):
    """The collector is off while the plan's objects are made (half the time of a k=16
    fabric's flow mods went to it), and back to its earlier state after, also on an error;
    what the plan made is then in the oldest generation."""
    core = settled_core()
    seen = []
    original = core._sync_forwarding
    monkeypatch.setattr(core, "_sync_forwarding", lambda *args: seen.append(gc.isenabled()) or original(*args))
    was_enabled = gc.isenabled()
    try:
        gc.enable()
        core.replan(20.0)
        assert seen == [False] and gc.isenabled()
        # What the plan made and kept joined the oldest generation without a walk; objects someone
        # else froze stay frozen.
        made = core._last_plan
        assert any(o is made for o in gc.get_objects(generation=2))
        marker = [made]
        gc.freeze()
        core.replan(20.5)
        assert gc.isenabled() and gc.get_freeze_count() and not any(o is marker for o in gc.get_objects())
        gc.unfreeze()
        assert any(o is marker for o in gc.get_objects(generation=2))
        gc.disable()
        core.replan(21.0)
        assert not gc.isenabled()
        gc.enable()
        monkeypatch.setattr(core, "_sync_forwarding", lambda *args: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            core.replan(22.0)
        assert gc.isenabled()
    finally:
        (gc.enable if was_enabled else gc.disable)()
