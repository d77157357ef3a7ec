"""The controller's plain modules, tested without a switch: delay probes,
flow counting, topology, forwarding messages, configuration and state."""

import types

import numpy as np
import pytest
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

from otcp.controller import arp, config, delay, forwarding, store
from otcp.controller.flowcount import FlowCounter
from otcp.controller.topology import Host, Topology
from otcp.planning import formulas, inventory
from otcp.planning.paths import HostPaths, SwitchPaths
from otcp.planning.planner import Plan
from otcp.wire.messages import RouteResult
from support.fabrics import fat_tree_fabric
from support.inventories import star, write_inventory


def fake_datapath(dpid=1):
    return types.SimpleNamespace(id=dpid, ofproto=ofproto_v1_3, ofproto_parser=ofproto_v1_3_parser)


# -- delay -------------------------------------------------------------------


def test_probe_frame_round_trip():
    frame = delay.probe_frame(0x1F, 3, "00:00:00:00:00:aa", 12345)
    assert delay.parse_probe(frame) == (0x1F, 3, 12345)


def test_foreign_lldp_and_junk_are_not_probes():
    from os_ken.topology.switches import LLDPPacket

    assert delay.parse_probe(LLDPPacket.lldp_packet(1, 2, "00:00:00:00:00:01", 120)) is None
    assert delay.parse_probe(b"\x00" * 10) is None
    assert delay.parse_probe(arp.probe_frame("10.0.0.1")) is None


def test_delay_is_elapsed_minus_half_echoes_minimum_of_window():
    estimator = delay.DelayEstimator(window=3, max_delay_s=None)
    estimator.echo_sent(1, 0.0)
    estimator.echo_received(1, 0.004)  # 4 ms round trip to s1
    estimator.echo_sent(2, 0.0)
    estimator.echo_received(2, 0.002)  # 2 ms to s2
    for sent, received in [(10.0, 10.0050), (11.0, 11.0032), (12.0, 11.0040 + 1.0)]:
        seq = estimator.next_probe(1, 7, sent)
        assert estimator.probe_received((1, 7, seq), 2, 9, received) == (1, 7, 2, 9)
    # samples: 5.0 - 3 = 2.0 ms, 3.2 - 3 = 0.2 ms, 4.0 - 3 = 1.0 ms -> minimum 0.2 ms
    (value, samples), = estimator.delays().values()
    assert value == pytest.approx(0.0002)
    assert samples == 3


def test_control_path_time_does_not_pass_for_propagation():
    """A sample taken while s1's control path is loaded is refused; one beyond the physical bound too."""
    estimator = delay.DelayEstimator(window=10, max_delay_s=100e-6)
    for dpid in (1, 2):
        estimator.echo_sent(dpid, 0.0)
        estimator.echo_received(dpid, 0.001)  # 1 ms: its best
    seq = estimator.next_probe(1, 1, 1.0)
    assert estimator.probe_received((1, 1, seq), 2, 1, 1.00105) is not None  # 50 us
    estimator.echo_sent(1, 2.0)
    estimator.echo_received(1, 2.005)  # 5 ms now: loaded
    seq = estimator.next_probe(1, 1, 2.0)
    assert estimator.probe_received((1, 1, seq), 2, 1, 2.004) is None
    estimator.echo_sent(1, 3.0)
    estimator.echo_received(1, 3.001)  # quiet again
    seq = estimator.next_probe(1, 1, 3.0)
    assert estimator.probe_received((1, 1, seq), 2, 1, 3.0065) is None  # 5.5 ms: no link in a rack is that long
    assert estimator.refused == {"loaded": 1, "beyond_bound": 1}
    assert estimator.delays()[(1, 1)] == (pytest.approx(50e-6), 1)


def test_the_spread_of_the_accepted_samples():
    estimator = delay.DelayEstimator(window=10, max_delay_s=None)
    for dpid in (1, 2):
        estimator.echo_sent(dpid, 0.0)
        estimator.echo_received(dpid, 0.001)
    for k, extra in enumerate([10e-6, 30e-6, 20e-6, 90e-6]):
        seq = estimator.next_probe(1, 1, float(k))
        estimator.probe_received((1, 1, seq), 2, 1, k + 0.001 + extra)
    assert estimator.spreads()[(1, 1)] == pytest.approx(20e-6)  # p90 of 4 samples is the 3rd: 30 - 10 us


def test_each_read_follows_the_samples_taken_since_the_last():
    """A link's delay and spread are computed once per new sample, and read by every plan."""
    estimator = delay.DelayEstimator(window=3, max_delay_s=None)
    key = (1, 1, 2, 1)
    seen = []
    for sample in (40e-6, 30e-6, 50e-6, 90e-6, 80e-6):
        estimator.record(key, sample)
        seen.append((estimator.delays()[(1, 1)], estimator.spreads()[(1, 1)]))
    assert seen == [((40e-6, 1), 0.0), ((30e-6, 2), 0.0), ((30e-6, 3), pytest.approx(10e-6)),
                    ((30e-6, 3), pytest.approx(20e-6)), ((50e-6, 3), pytest.approx(30e-6))]
    estimator.forget_switch(2)
    assert estimator.delays() == {} and estimator.spreads() == {}


def test_delay_never_below_zero_and_replays_rejected():
    estimator = delay.DelayEstimator(window=10, max_delay_s=None)
    for dpid in (1, 2):
        estimator.echo_sent(dpid, 0.0)
        estimator.echo_received(dpid, 0.010)
    seq = estimator.next_probe(1, 1, 5.0)
    assert estimator.probe_received((1, 1, seq), 2, 1, 5.001) is not None
    assert estimator.delays()[(1, 1)] == (0.0, 1)
    # The same sequence again, an unknown one, and a forged origin are refused.
    assert estimator.probe_received((1, 1, seq), 2, 1, 5.002) is None
    assert estimator.probe_received((1, 1, 999), 2, 1, 5.002) is None
    other = estimator.next_probe(1, 1, 6.0)
    assert estimator.probe_received((1, 2, other), 2, 1, 6.001) is None


def test_forgotten_link_has_no_delay():
    estimator = delay.DelayEstimator(window=10, max_delay_s=None)
    for dpid in (1, 2):
        estimator.echo_sent(dpid, 0.0)
        estimator.echo_received(dpid, 0.001)
    estimator.probe_received((1, 1, estimator.next_probe(1, 1, 1.0)), 2, 3, 1.002)
    assert (1, 1) in estimator.delays()
    estimator.forget_link((1, 1), (2, 3))
    assert estimator.delays() == {}


def test_no_sample_without_echo_round_trip():
    estimator = delay.DelayEstimator(window=10, max_delay_s=None)
    seq = estimator.next_probe(1, 1, 0.0)
    assert estimator.probe_received((1, 1, seq), 2, 1, 0.001) is None
    assert estimator.delays() == {}


# -- flow counts -------------------------------------------------------------


def full(src, dst, packets):
    """A pair entry's counters after packets full-size (1514 B) frames."""
    return src, dst, packets, packets * 1514


def test_pair_active_only_when_its_counter_grew():
    counter = FlowCounter(min_packets=1)
    counter.update(1, [full("10.0.0.1", "10.0.0.2", 10), full("10.0.0.2", "10.0.0.1", 5)])
    assert counter.active_pairs() == {}
    counter.update(1, [full("10.0.0.1", "10.0.0.2", 50), full("10.0.0.2", "10.0.0.1", 5),
                       full("10.0.0.3", "10.0.0.1", 1)])
    assert counter.active_pairs() == {("10.0.0.1", "10.0.0.2"): 1, ("10.0.0.3", "10.0.0.1"): 1}
    counter.update(2, [full("10.0.0.1", "10.0.0.2", 1)])
    counter.update(1, [full("10.0.0.1", "10.0.0.2", 50)])
    assert counter.active_pairs() == {}
    counter.forget_switch(1)
    counter.update(1, [full("10.0.0.1", "10.0.0.2", 60)])
    assert counter.active_pairs() == {}


def test_a_pair_that_only_returns_acks_is_no_flow():
    """The receiver's ACKs (66 B frames, up to 94 B with SACK blocks) do not make it a sender: a pair
    counts only when its frames since the last poll averaged more than a header-only frame."""
    counter = FlowCounter(min_packets=3)
    counter.update(1, [("10.0.0.1", "10.0.0.2", 0, 0), ("10.0.0.2", "10.0.0.1", 0, 0), ("10.0.0.3", "10.0.0.1", 0, 0)])
    # 40 data frames one way; 20 ACKs, the last 5 with SACK blocks (94 B), back; one 70 B request and 2 ACKs.
    counter.update(1, [("10.0.0.1", "10.0.0.2", 40, 40 * 1514), ("10.0.0.2", "10.0.0.1", 20, 15 * 66 + 5 * 94),
                       ("10.0.0.3", "10.0.0.1", 3, 70 + 2 * 66)])
    assert counter.active_pairs() == {("10.0.0.1", "10.0.0.2"): 1}
    # Small segments still carry data: 10 frames of 200 B payload (266 B) and 94 B each at the edge.
    counter.update(1, [("10.0.0.1", "10.0.0.2", 40, 40 * 1514), ("10.0.0.2", "10.0.0.1", 30, 15 * 66 + 5 * 94 + 2660),
                       ("10.0.0.3", "10.0.0.1", 6, 70 + 2 * 66 + 3 * 95)])
    assert counter.active_pairs() == {("10.0.0.2", "10.0.0.1"): 1, ("10.0.0.3", "10.0.0.1"): 1}


# -- topology ----------------------------------------------------------------


def two_switch_topology(inventory=None):
    topo = Topology(inventory)
    topo.add_switch(1, {1: 0, 2: 0, 3: 0})
    topo.add_switch(2, {1: 0, 2: 0})
    assert topo.add_link((1, 1), (2, 1)) and topo.add_link((2, 1), (1, 1))
    return topo


def test_hosts_learned_only_on_edge_ports():
    topo = two_switch_topology()
    assert topo.learn_host("10.0.0.1", "00:00:00:00:00:01", 1, 2)
    assert not topo.learn_host("10.0.0.1", "00:00:00:00:00:01", 1, 2)  # unchanged
    assert not topo.learn_host("10.0.0.9", "00:00:00:00:00:09", 2, 1)  # link port
    assert not topo.learn_host("10.0.0.9", "00:00:00:00:00:09", 7, 1)  # unknown switch
    assert topo.learn_host("10.0.0.1", "00:00:00:00:00:01", 1, 3)  # moved
    assert sorted(topo.edge_ports()) == [(1, 2), (1, 3), (2, 2)]
    assert topo.hosts["10.0.0.1"].port == 3
    assert topo.host_port(1, 3) and not topo.host_port(1, 2)  # the move left port 2
    assert topo.learn_host("10.0.0.4", "00:00:00:00:00:01", 1, 3)  # a second address on the same port
    assert topo.learn_host("10.0.0.1", "00:00:00:00:00:01", 2, 2)
    assert topo.host_port(1, 3) and topo.host_port(2, 2)
    topo.remove_switch(2)
    assert not topo.host_port(2, 2) and set(topo.hosts) == {"10.0.0.4"}


def test_lldp_on_host_port_is_ignored():
    topo = two_switch_topology()
    topo.learn_host("10.0.0.1", "00:00:00:00:00:01", 1, 2)
    assert not topo.add_link((1, 2), (2, 2))  # a host cannot invent a link
    assert not topo.add_link((2, 2), (1, 2))
    assert (1, 2) not in topo.links


def test_fabric_uses_inventory_then_port_speed_and_defaults(tmp_path):
    from otcp.planning import inventory

    path = write_inventory(
        tmp_path,
        {
            "switches": {"a": {"dpid": 1}, "b": {"dpid": 2}},
            "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}},
            "links": [
                {"a": "h1", "b": "a", "capacity_mbps": 100, "buffer_bytes": 85000},
                {"a": "a", "b": "b", "capacity_mbps": 1000, "delay_us": 50, "buffer_bytes": 512000},
                {"a": "h2", "b": "b"},
            ],
        },
    )
    topo = two_switch_topology(inventory.load(path))
    topo.learn_host("10.0.0.1", "00:00:00:00:00:01", 1, 2)
    topo.learn_host("10.0.0.2", "00:00:00:00:00:02", 2, 2)
    topo.learn_host("10.0.0.3", "00:00:00:00:00:03", 1, 3)  # not in the inventory
    topo.switches[1][3] = 1.25e9
    defaults = config.DefaultsSection(capacity_mbps=10, buffer_bytes=4000, host_link_delay_us=7)
    fabric, sources = topo.fabric({(1, 1): 0.0003}, {("10.0.0.3", "10.0.0.2"): 1}, defaults)
    # Hosts are their addresses; the inventory names them, for display.
    assert fabric.hosts == {"10.0.0.1": "h1", "10.0.0.2": "h2", "10.0.0.3": "10.0.0.3"}
    h1 = "10.0.0.1"
    assert fabric.links[("a", h1)].capacity_bytes_per_s == 12.5e6  # the inventory's link h1 - a
    assert fabric.links[("a", h1)].buffer_bytes == 85000
    assert fabric.links[(h1, "a")].buffer_bytes == 0
    assert fabric.links[("a", "b")].delay_s == pytest.approx(50e-6)  # pinned by the inventory
    assert sources[("a", "b")] == "inventory"
    assert fabric.links[("a", "10.0.0.3")].capacity_bytes_per_s == 1.25e9  # port speed
    assert fabric.links[("a", "10.0.0.3")].buffer_bytes == 4000  # default buffer
    assert fabric.links[("a", h1)].delay_s == pytest.approx(7e-6) and sources[("a", h1)] == "default"
    assert fabric.flows == {("10.0.0.3", "10.0.0.2"): 1}


def test_measured_delay_used_when_not_pinned():
    topo = two_switch_topology()
    defaults = config.DefaultsSection(capacity_mbps=10, buffer_bytes=0, host_link_delay_us=0)
    fabric, sources = topo.fabric({(1, 1): 0.0003}, {}, defaults)
    assert fabric.links[("s1", "s2")].delay_s == pytest.approx(0.0003)
    assert sources[("s1", "s2")] == "measured"
    assert sources[("s2", "s1")] == "default"  # no sample yet


# -- forwarding --------------------------------------------------------------


def planned_topology():
    topo = two_switch_topology()
    topo.learn_host("10.0.0.1", "00:00:00:00:00:01", 1, 2)
    topo.learn_host("10.0.0.2", "00:00:00:00:00:02", 2, 2)
    topo.learn_host("10.0.0.3", "00:00:00:00:00:03", 1, 3)
    fabric, _ = topo.fabric({}, {}, config.DefaultsSection(capacity_mbps=100, buffer_bytes=85000, host_link_delay_us=10))
    return topo, Plan(fabric)


def test_destination_entries_follow_the_paths_one_per_host_on_each_switch():
    topo, plan = planned_topology()
    entries = forwarding.destination_entries(plan.fabric, plan.host_paths)
    assert entries == {1: {"10.0.0.1": 2, "10.0.0.2": 1, "10.0.0.3": 3}, 2: {"10.0.0.1": 1, "10.0.0.2": 2,
                                                                             "10.0.0.3": 1}}


def test_destination_entries_on_a_fat_tree_are_what_every_pairs_path_needs():
    """Per destination, each switch forwards every source's packets the way
    that source's planned path goes: the per-pair entries, folded."""
    fabric = fat_tree_fabric(4)
    for (u, v) in fabric.links:  # the live controller's egress ports, invented per directed link
        if u in fabric.switches:
            fabric.egress[(u, v)] = (fabric.switches.index(u) + 1, hash((u, v)) % 1000 + 1)
    plan = Plan(fabric)
    entries = forwarding.destination_entries(plan.fabric, plan.host_paths)
    for k in range(len(plan)):
        src, dst = plan.hosts[plan.src[k]], plan.hosts[plan.dst[k]]
        nodes = [src, *plan.host_paths.path(plan.attachment[src], dst), dst]
        assert plan.hops(k) == [fabric.hosts[src], *nodes[1:-1], fabric.hosts[dst]]  # the same path, by name
        for hop in zip(nodes[1:-1], nodes[2:]):
            dpid, port = fabric.egress[hop]
            assert entries[dpid][dst] == port
    assert {len(e) for e in entries.values()} == {len(fabric.hosts)}  # one entry per host, every switch


def test_destination_entries_leave_out_the_hops_with_no_known_egress():
    """A hop whose egress port is not known (one direction of a link seen) gets no entry; every
    other entry is the port toward the next switch, or into the host, by destination in host order."""
    fabric = fat_tree_fabric(4)
    for (u, v) in fabric.links:
        if u in fabric.switches:
            fabric.egress[(u, v)] = (fabric.switches.index(u) + 1, hash((u, v)) % 1000 + 1)
    for hop in sorted(fabric.egress)[::7]:
        del fabric.egress[hop]
    paths = HostPaths(SwitchPaths(fabric.switches, fabric.switch_links()), fabric.attachments())
    expected: dict[int, dict[str, int]] = {}
    for ip in paths.hosts:
        for switch in fabric.switches:
            hop = paths.path(switch, ip)
            if hop is not None:
                egress = fabric.egress.get((switch, hop[1] if len(hop) > 1 else ip))
                if egress is not None:
                    expected.setdefault(egress[0], {})[ip] = egress[1]
    entries = forwarding.destination_entries(fabric, paths)
    assert entries == expected and all(list(entries[dpid]) == list(expected[dpid]) for dpid in expected)
    assert sum(map(len, entries.values())) < len(fabric.switches) * len(fabric.hosts)


def test_entries_after_links_went_are_the_entries_made_afresh_and_keep_the_rest():
    """After links went, only the entries whose next hop changed are made again; a switch
    with none of them keeps its very dict. Anything else changed (an egress port moved, one
    went whose link is still there) is refused."""
    import random

    fabric = fat_tree_fabric(6)
    for (u, v) in fabric.links:
        if u in fabric.switches:
            fabric.egress[(u, v)] = (fabric.switches.index(u) + 1, hash((u, v)) % 1000 + 1)
    paths = HostPaths(SwitchPaths(fabric.switches, fabric.switch_links()), fabric.attachments())
    entries = forwarding.destination_entries(fabric, paths)

    def made(paths, egress, entries):
        return forwarding.MadeEntries(paths, fabric.hosts, egress, entries)

    rng = random.Random(4)
    for taken in (1, 4):
        gone = set(rng.sample(sorted({tuple(sorted(link)) for link in fabric.switch_links()}), taken))
        egress = dict(fabric.egress)
        for a, b in gone:
            for link in ((a, b), (b, a)):
                del fabric.links[link], fabric.egress[link]
        kept = HostPaths(SwitchPaths(fabric.switches, fabric.switch_links(), previous=paths.switch_paths),
                         fabric.attachments())
        after = forwarding.entries_after_links_went(fabric, kept, made(paths, egress, entries))
        assert after == forwarding.destination_entries(fabric, kept)
        sources = {kept.switch_paths.switches[i] for i in np.nonzero(kept.next_hop != paths.next_hop)[1]}
        untouched = {dpid for (name, _), (dpid, _) in fabric.egress.items() if name not in sources}
        assert untouched and all(after[dpid] is entries[dpid] for dpid in untouched)
        paths, entries = kept, after
    same = HostPaths(SwitchPaths(fabric.switches, fabric.switch_links(), previous=paths.switch_paths),
                     fabric.attachments())
    moved = {**fabric.egress, next(iter(fabric.egress)): (99, 99)}
    assert forwarding.entries_after_links_went(fabric, same, made(paths, moved, entries)) is None
    one_way = next(key for key in fabric.egress if key[1] in fabric.switches)
    without = {key: value for key, value in fabric.egress.items() if key != one_way}
    assert forwarding.entries_after_links_went(fabric, same, made(paths, {**fabric.egress}, entries)) is not None
    fabric_egress, fabric.egress = fabric.egress, without
    assert forwarding.entries_after_links_went(fabric, same, made(paths, fabric_egress, entries)) is None


def test_sync_messages_add_change_and_remove_and_drop_stale_pair_entries():
    datapath = fake_datapath()
    installed = {"10.0.0.1": 1, "10.0.0.2": 3, "10.0.0.9": 2}
    desired = {"10.0.0.1": 1, "10.0.0.2": 4, "10.0.0.3": 2}
    messages = forwarding.sync_messages(datapath, installed, desired)
    commands = [(m.command, m.cookie, m.priority, m.match["ipv4_dst"]) for m in messages]
    assert commands == [
        # the pair entries toward a moved or gone host, whatever their priority
        (ofproto_v1_3.OFPFC_DELETE, forwarding.PAIR_COOKIE, ofproto_v1_3.OFP_DEFAULT_PRIORITY, "10.0.0.2"),
        (ofproto_v1_3.OFPFC_DELETE, forwarding.PAIR_COOKIE, ofproto_v1_3.OFP_DEFAULT_PRIORITY, "10.0.0.9"),
        (ofproto_v1_3.OFPFC_ADD, forwarding.COOKIE, forwarding.DESTINATION_PRIORITY, "10.0.0.2"),
        (ofproto_v1_3.OFPFC_ADD, forwarding.COOKIE, forwarding.DESTINATION_PRIORITY, "10.0.0.3"),
        (ofproto_v1_3.OFPFC_DELETE_STRICT, forwarding.COOKIE, forwarding.DESTINATION_PRIORITY, "10.0.0.9"),
    ]
    assert messages[2].instructions[0].actions[0].port == 4
    assert forwarding.sync_messages(datapath, desired, desired) == []
    # The added entries are made in bulk, without os-ken's constructor: each is a flow mod that prints,
    # converts and serialises exactly as one built alone, and sending one touches no other.
    many = {f"10.0.{i // 256}.{i % 256}": i % 7 + 1 for i in range(300)}
    messages = forwarding.sync_messages(datapath, {}, many)
    assert len(messages) == len(many)
    for xid, message in enumerate(messages):
        built = forwarding.destination_entry(datapath, message.match["ipv4_dst"], many[message.match["ipv4_dst"]])
        assert isinstance(message, ofproto_v1_3_parser.OFPFlowMod) and type(message).__name__ == "OFPFlowMod"
        assert str(message) == str(built) and message.to_jsondict() == built.to_jsondict()
        message.set_xid(xid)
        built.set_xid(xid)
        message.serialize()
        built.serialize()
        assert bytes(message.buf) == bytes(built.buf)
    assert all(message.xid is None and message.buf is None
               for message in forwarding.sync_messages(datapath, {}, many))
    punts = forwarding.punt_messages(datapath, {2, 3}, {3, 5})
    assert [(m.command, m.match["in_port"]) for m in punts] == [(ofproto_v1_3.OFPFC_ADD, 5),
                                                                 (ofproto_v1_3.OFPFC_DELETE_STRICT, 2)]
    assert punts[0].instructions[0].meter_id == forwarding.PACKET_IN_METER


def test_pair_counters_read_only_otcp_pair_entries():
    parser = ofproto_v1_3_parser
    ours = types.SimpleNamespace(
        cookie=forwarding.PAIR_COOKIE, priority=forwarding.PAIR_PRIORITY, packet_count=42, byte_count=42 * 1514,
        match=parser.OFPMatch(eth_type=0x0800, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.2"),
    )
    miss = types.SimpleNamespace(cookie=0, priority=0, packet_count=7, match=parser.OFPMatch())
    destination = types.SimpleNamespace(cookie=forwarding.COOKIE, priority=forwarding.DESTINATION_PRIORITY,
                                        packet_count=9, match=parser.OFPMatch(eth_type=0x0800, ipv4_dst="10.0.0.2"))
    assert forwarding.pair_counters([ours, miss, destination]) == [("10.0.0.1", "10.0.0.2", 42, 42 * 1514)]


def test_arp_reply_answers_the_request():
    from os_ken.lib.packet import arp as arp_packet
    from os_ken.lib.packet import packet

    request = arp_packet.arp(
        opcode=arp_packet.ARP_REQUEST, src_mac="00:00:00:00:00:01", src_ip="10.0.0.1",
        dst_mac="00:00:00:00:00:00", dst_ip="10.0.0.2",
    )
    reply = packet.Packet(arp.reply_frame(request, "00:00:00:00:00:02")).get_protocol(arp_packet.arp)
    assert (reply.opcode, reply.src_ip, reply.src_mac, reply.dst_ip) == (
        arp_packet.ARP_REPLY, "10.0.0.2", "00:00:00:00:00:02", "10.0.0.1")


# -- configuration and state ------------------------------------------------------


def test_config_defaults_and_relative_paths(tmp_path):
    (tmp_path / "secret").write_text("s3cret\n")
    path = tmp_path / "controller.yaml"
    path.write_text("openflow: {port: 7000}\nagents: {secret_file: secret}\ndatabase: state.db\n")
    loaded = config.load(str(path))
    assert (loaded.openflow.host, loaded.openflow.port) == ("127.0.0.1", 7000)
    assert loaded.agents.secret_file == str(tmp_path / "secret")
    assert loaded.database == str(tmp_path / "state.db")
    assert loaded.intervals.probe_s == 1.0
    assert loaded.bounds.limits().rto_min_ms_high == 200
    assert loaded.parameters.paced() is None and loaded.parameters.lossless() is None
    # The one set of defaults: the models' own, which the core takes as they are.
    assert loaded.stability == config.StabilitySection() and loaded.stability.refresh_s == 60
    assert loaded.agents.lease_s == config.DEFAULT_LEASE_S == 120


@pytest.mark.parametrize("text, pacing", [
    ("parameters: {pacing: true}\n", formulas.Pacing(0.05)),
    ("parameters: {formulas: lossless, pacing: true, pacing_headroom: 0}\n", formulas.Pacing(0.0)),
    ("parameters: {pacing: true, pacing_headroom: 1}\n", formulas.Pacing(1.0)),
    ("parameters: {pacing: false, pacing_headroom: 0.2}\n", None),
])
def test_config_pacing(tmp_path, text, pacing):
    path = tmp_path / "controller.yaml"
    path.write_text(text)
    assert config.load(str(path)).parameters.paced() == pacing


@pytest.mark.parametrize("text, lossless", [
    ("parameters: {formulas: lossless}\n", formulas.Lossless(0.25, 256, 1.0)),
    ("parameters: {formulas: lossless, fan_in_queue_fraction: 0}\n", formulas.Lossless(0.25, 256, 0.0)),
    ("parameters: {formulas: lossless, queue_target_fraction: 0.5, fan_in_queue_fraction: 0.8}\n",
     formulas.Lossless(0.5, 256, 0.8)),
    ("parameters: {formulas: lossless, fan_in_admission: true}\n", formulas.Lossless(0.25, 256, 1.0, True)),
])
def test_config_lossless_fan_in(tmp_path, text, lossless):
    path = tmp_path / "controller.yaml"
    path.write_text(text)
    assert config.load(str(path)).parameters.lossless() == lossless


@pytest.mark.parametrize(
    "text, message",
    [
        ("openflow: {port: 0}\n", "openflow.port: 0 is out of range 1..65535"),
        ("openflow: {prt: 1}\n", "openflow.prt: unknown key"),
        ("intervals: {probe_s: -1}\n", "intervals.probe_s: -1 is below the minimum 0.05"),
        ("intervals: {probe_s: .nan}\n", "intervals.probe_s: NaN is not a finite number"),
        ("defaults: {capacity_mbps: .inf}\n", "defaults.capacity_mbps: Infinity is not a finite number"),
        ("delay_window: true\n", "delay_window: true is not an integer"),
        ("bounds: {initcwnd: [10, 5]}\n", "bounds: initcwnd bounds must satisfy"),
        ("bounds: {initcwnd: [1, 300]}\n", "bounds.initcwnd: high bound 300 is above what agents accept"),
        ("inventory: nowhere.yaml\n", "nowhere.yaml: no such file"),
        ("colour: blue\n", "colour: unknown key"),
        ("log_level: loud\n", "log_level: \"loud\" is not one of"),
        ("parameters: {pacing: 1}\n", "parameters.pacing: 1 is not true or false"),
        ("parameters: {pacing: fair-share}\n", "parameters.pacing: \"fair-share\" is not true or false"),
        ("parameters: {pacing: true, pacing_headroom: .nan}\n", "parameters.pacing_headroom: NaN is not a finite"),
        ("parameters: {pacing: true, pacing_headroom: .inf}\n", "parameters.pacing_headroom: Infinity is not a"),
        ("parameters: {pacing: true, pacing_headroom: true}\n", "parameters.pacing_headroom: true is not a number"),
        ("parameters: {pacing: true, pacing_headroom: -0.01}\n", "parameters.pacing_headroom: -0.01 is below"),
        ("parameters: {pacing: true, pacing_headroom: 1.5}\n", "parameters.pacing_headroom: 1.5 is above"),
        ("parameters: {pacing: true, pacing_headroom: \"0.1\"}\n", "parameters.pacing_headroom: \"0.1\" is not a"),
        ("parameters: {formulas: lossless, fan_in_queue_fraction: 1.5}\n",
         "parameters.fan_in_queue_fraction: 1.5 is above"),
        ("parameters: {formulas: lossless, fan_in_queue_fraction: .nan}\n",
         "parameters.fan_in_queue_fraction: NaN is not a finite"),
        ("parameters: {formulas: lossless, fan_in_admission: 1}\n",
         "parameters.fan_in_admission: 1 is not true or false"),
        ("agents: {lease_s: 0.5}\n", "agents.lease_s: 0.5 is below the minimum 1"),
        ("agents: {lease_s: 86401}\n", "agents.lease_s: 86401 is above the maximum 86400"),
        ("agents: {lease_s: .nan}\n", "agents.lease_s: NaN is not a finite number"),
        ("agents: {lease_s: .inf}\n", "agents.lease_s: Infinity is not a finite number"),
        ("agents: {lease_s: true}\n", "agents.lease_s: true is not a number"),
        ("agents: {lease_s: \"2m\"}\n", "agents.lease_s: \"2m\" is not a number"),
    ],
)
def test_config_errors_name_the_key(tmp_path, text, message):
    path = tmp_path / "controller.yaml"
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=message.replace("[", r"\[")) as error:
        config.load(str(path))
    assert str(error.value).startswith(str(path))


def test_store_keeps_generations_and_numbers_them_on(tmp_path):
    path = str(tmp_path / "state.db")
    state = store.Store(path)
    assert state.last_generation_number() == 0 and state.latest_generation() is None
    record = {
        "src": "h1", "dst": "h2", "dst_ip": "10.0.0.2", "hops": ["h1", "s1", "h2"], "min_rto_us": 13700.0,
        "rto_min_ms": 14, "initcwnd": 1, "cwnd_clamp": 3, "quickack": True, "segment_bytes": 1448,
        "rtt_prop_us": 100.0, "rtt_spread_us": 0.0, "rtt_source": "inventory", "pacing_rate": 3281250,
        "congctl": "otcp_scalable", "ssthresh": 1035, "increase": None,
    }
    state.save_generation(store.Generation(1, [record], [], {}))
    state.save_generation(store.Generation(2, [{**record, "cwnd_clamp": None}], [], {}))
    state.save_link_measurements([store.LinkMeasurement("s1", "s2", 0.0001, "measured", 5, 1.25e7, 85000, 2)])
    state.save_ack("10.0.0.1", 2, [RouteResult(dst="10.0.0.2/32", status="applied")])
    state.save_topology(store.TopologySnapshot({1: "s1"}, [], [store.HostRecord("10.0.0.1", "h1", "00:00:00:00:00:01", 1, 2)]))
    state.close()
    reopened = store.Store(path, readonly=True)
    assert reopened.last_generation_number() == 2
    generation, _, records = reopened.latest_generation()
    assert generation == 2 and records == [{**record, "cwnd_clamp": None}]
    assert reopened.latest_link_measurements()[("s1", "s2")]["flows"] == 2
    assert reopened.acks() == {"10.0.0.1": 2}
    assert reopened.known_hosts() == [Host("10.0.0.1", "00:00:00:00:00:01", 1, 2)]


def test_paths_are_shortest_symmetric_and_trees_toward_each_switch():
    """What one entry per destination needs: a path's tail is the path from
    where it is; and ACKs retrace the data path."""
    import networkx as nx

    from otcp.planning.paths import SwitchPaths

    fabric = fat_tree_fabric(6)
    paths = SwitchPaths(fabric.switches, fabric.switch_links())
    graph = nx.Graph(fabric.switch_links())
    for a in paths.switches:
        for b in paths.switches:
            path = paths.path(a, b)
            assert path == paths.path(b, a)[::-1]
            assert len(path) - 1 == nx.shortest_path_length(graph, a, b)
            assert all(paths.path(middle, b) == path[i:] for i, middle in enumerate(path))
    # Destinations spread over the cores: edge switch e1_1 reaches the other pods through more than one.
    cores = {paths.path("e1_1", f"e{pod}_{i}")[2] for pod in range(2, 7) for i in (1, 2, 3)}
    assert len(cores) > 1 and all(core.startswith("c") for core in cores)
    assert SwitchPaths(["s1", "s2"], []).path("s1", "s2") is None


def _same_paths(a, b) -> bool:
    """Whether two SwitchPaths of the same switches hold the same paths."""
    return np.array_equal(a.hops, b.hops) and all(
        a.path(x, y) == b.path(x, y) for x in a.switches for y in a.switches)


@pytest.mark.parametrize("seed", range(3))
def test_paths_after_links_went_are_the_paths_computed_afresh(seed):
    """Taking links away recomputes only the pairs whose path crossed them, and the
    result is what a fresh computation gives: on a fat-tree (one link, then several,
    down to a cut) and on a ring, where the paths that remain get longer."""
    import random

    from otcp.planning.paths import SwitchPaths

    rng = random.Random(seed)
    fabric = fat_tree_fabric(6)
    links = {tuple(sorted(link)) for link in fabric.switch_links()}
    paths = SwitchPaths(fabric.switches, links)
    for taken in (1, 5, 20):
        links -= set(rng.sample(sorted(links), taken))
        kept = SwitchPaths(fabric.switches, links, previous=paths)
        assert kept.kept_from is not None and kept.kept_from() is paths and kept.changed is not None
        assert 0 < len(kept.changed[0]) < len(kept.switches) ** 2 / (2 if taken > 1 else 10)
        assert _same_paths(kept, SwitchPaths(fabric.switches, links))
        paths = kept
    ring = [(f"s{i}", f"s{(i + 1) % 8}") for i in range(8)]
    around = SwitchPaths([a for a, _ in ring], ring)
    cut = SwitchPaths([a for a, _ in ring], ring[1:], previous=around)
    assert cut.path("s0", "s1") == ["s0", "s7", "s6", "s5", "s4", "s3", "s2", "s1"]
    assert _same_paths(cut, SwitchPaths([a for a, _ in ring], ring[1:]))
    split = SwitchPaths(cut.switches, ring[1:4] + ring[5:], previous=cut)
    assert split.path("s0", "s4") is None and _same_paths(split, SwitchPaths(cut.switches, ring[1:4] + ring[5:]))


def test_paths_with_a_new_link_or_switch_are_computed_afresh():
    """A link or switch that came is no removal: every pair is computed again."""
    from otcp.planning.paths import SwitchPaths

    line = [("s1", "s2"), ("s2", "s3")]
    paths = SwitchPaths(["s1", "s2", "s3"], line)
    closed = SwitchPaths(["s1", "s2", "s3"], [*line, ("s3", "s1")], previous=paths)
    assert closed.kept_from is None and closed.changed is None and closed.path("s1", "s3") == ["s1", "s3"]
    grown = SwitchPaths(["s1", "s2", "s3", "s4"], line, previous=paths)
    assert grown.kept_from is None and grown.path("s1", "s4") is None


def test_a_database_of_the_first_version_gets_the_new_columns(tmp_path):
    import sqlite3

    path = str(tmp_path / "old.db")
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE parameters (generation INTEGER, src TEXT, dst TEXT, dst_ip TEXT, hops TEXT, "
                "min_rto_us REAL, rto_min_ms INTEGER, initcwnd INTEGER, cwnd_clamp INTEGER, quickack INTEGER, "
                "PRIMARY KEY (generation, src, dst))")
    old.commit()
    old.close()
    store.Store(path).close()
    columns = [row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(parameters)")]
    assert columns[-8:] == ["segment_bytes", "rtt_prop_us", "rtt_spread_us", "rtt_source", "pacing_rate", "congctl",
                            "ssthresh", "increase"]


def test_a_generation_keeps_its_pacing_rates(tmp_path):
    document = star(3)
    fabric = inventory.parse(document).fabric()
    plan = Plan(fabric, formulas.Bounds(), formulas.Lossless(), formulas.Pacing(0.05))
    state = store.Store(str(tmp_path / "paced.db"))
    state.save_generation(store.Generation(1, list(plan.records()), [], {}))
    _, _, records = state.latest_generation()
    state.close()
    assert records and {r["pacing_rate"] for r in records} == {r["pacing_rate"] for r in plan.records()}
    assert all(isinstance(r["pacing_rate"], int) and r["pacing_rate"] > 0 for r in records)


def test_a_generation_stored_from_the_plans_columns_reads_back_as_its_records(tmp_path):
    """PlanRecords makes no record until asked; the rows it gives the store are the records'."""
    from otcp.planning.planner import PlanRecords

    fabric = inventory.parse(star(4)).fabric()
    fabric.flows = {("10.0.0.1", "10.0.0.2"): 2}  # h1 -> h2
    plan = Plan(fabric, formulas.Bounds(), formulas.Lossless(), formulas.Pacing(0.05))
    lazy, dicts = PlanRecords(plan), store.Store(str(tmp_path / "dicts.db"))
    columns = store.Store(str(tmp_path / "columns.db"))
    assert len(lazy) == len(plan) == 20 and lazy._records is None
    columns.save_generation(store.Generation(3, lazy, [], {}))
    assert lazy._records is None  # stored without a dict per pair
    dicts.save_generation(store.Generation(3, list(plan.records()), [], {}))
    assert columns.latest_generation()[2] == dicts.latest_generation()[2]
    assert columns.latest_generation()[2] == sorted(plan.records(), key=lambda r: (r["src"], r["dst"]))
    assert list(lazy) == list(plan.records()) and lazy[0] == next(plan.records())
    columns.save_generation(store.Generation(4, lazy, [], {}))  # once made, the records themselves are stored
    assert columns.latest_generation()[2] == dicts.latest_generation()[2]
    columns.close()
    dicts.close()


def test_the_generations_of_a_time_span_and_what_each_changed(tmp_path):
    """Store.generations_made and generation_parameters, and rtt_accuracy's account of
    each generation in a span: the parameters it moved and whether its flows changed."""
    from otcp.experiments import rtt_accuracy

    fabric = inventory.parse(star(3)).fabric()
    idle = Plan(fabric, formulas.Bounds(), formulas.Lossless())
    fabric.flows = {("10.0.0.2", "10.0.0.1"): 1, ("10.0.0.3", "10.0.0.1"): 1}  # h2, h3 -> h1
    busy = Plan(fabric, formulas.Bounds(), formulas.Lossless())
    times = iter([10.0, 20.0, 30.0])
    path = str(tmp_path / "controller.db")
    state = store.Store(path, clock=lambda: next(times))
    state.save_generation(store.Generation(1, list(idle.records()), [], {}))
    state.save_generation(store.Generation(2, list(busy.records()), [], {("h2", "h1"): 1, ("h3", "h1"): 1}))
    state.save_generation(store.Generation(3, list(busy.records()), [], {("h2", "h1"): 1, ("h3", "h1"): 1}))
    assert state.generations_made(15.0, 35.0) == [(2, 20.0), (3, 30.0)]
    clamps = state.generation_parameters(2, ["cwnd_clamp", "initcwnd"])
    assert clamps == {(r["src"], r["dst"]): (r["cwnd_clamp"], r["initcwnd"]) for r in busy.records()}
    with pytest.raises(ValueError, match="columns: generation; DROP TABLE parameters not among"):
        state.generation_parameters(2, ["generation; DROP TABLE parameters"])
    state.close()
    moved = sum(1 for a, b in zip(idle.records(), busy.records()) if a["cwnd_clamp"] != b["cwnd_clamp"])
    assert moved
    first, second = rtt_accuracy.generations_between(path, 15.0, 35.0)
    assert first["generation"] == 2 and first["at"] == 5.0 and first["flows_changed"]
    assert first["changed"]["cwnd_clamp"] == moved
    assert second == {"generation": 3, "at": 15.0, "changed": {}, "flows_changed": False}
