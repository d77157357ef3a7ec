"""Host-pair forwarding entries: what each switch should hold, as flow mods.

Every ordered host pair gets an IPv4 entry (ipv4_src, ipv4_dst) -> output on
each switch of its path. The entries also give the per-pair counters that
flow counting reads. Functions return OpenFlow 1.3 messages built with the
switch's `ofproto` and `ofproto_parser` (a datapath, or anything holding
both); the caller sends them.
"""

from ryu_app.planner import Plan

COOKIE = 0x07C7_0000_0000_0001
PAIR_PRIORITY = 100
PROBE_PRIORITY = 0xFFFF
TABLE_MISS_PRIORITY = 0
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_LLDP = 0x88CC
# The meter that rate-limits a switch's packet-ins (the table miss).
PACKET_IN_METER = 1


def desired_entries(plan: Plan) -> dict[int, dict[tuple[str, str], int]]:
    """{dpid: {(src_ip, dst_ip): out_port}} for every reachable pair, from the
    egress ports the plan's fabric carries. A hop with no known egress (one
    direction of a link seen, the other not yet or no longer) gets no entry."""
    egress = plan.fabric.egress
    ip_of = plan.fabric.hosts
    entries: dict[int, dict[tuple[str, str], int]] = {}
    for k in range(len(plan)):
        hops = plan.hops(k)
        pair = (ip_of[hops[0]], ip_of[hops[-1]])
        for hop in zip(hops[1:-1], hops[2:]):
            if hop in egress:
                dpid, port = egress[hop]
                entries.setdefault(dpid, {})[pair] = port
    return entries


def sync_messages(datapath, installed, desired):
    """Flow mods that turn the installed entries of one switch into desired."""
    messages = [
        pair_entry(datapath, src, dst, port)
        for (src, dst), port in sorted(desired.items())
        if installed.get((src, dst)) != port
    ]
    messages += [remove_pair_entry(datapath, src, dst) for (src, dst) in sorted(set(installed) - set(desired))]
    return messages


def _pair_match(parser, src_ip, dst_ip):
    return parser.OFPMatch(eth_type=ETH_TYPE_IPV4, ipv4_src=src_ip, ipv4_dst=dst_ip)


def pair_entry(datapath, src_ip, dst_ip, out_port):
    """Add (or overwrite) the entry forwarding src_ip -> dst_ip out of out_port."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    actions = [parser.OFPActionOutput(out_port)]
    return parser.OFPFlowMod(
        datapath=datapath,
        cookie=COOKIE,
        command=ofproto.OFPFC_ADD,
        priority=PAIR_PRIORITY,
        match=_pair_match(parser, src_ip, dst_ip),
        instructions=[parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS, actions)],
    )


def remove_pair_entry(datapath, src_ip, dst_ip):
    """Delete the entry forwarding src_ip -> dst_ip."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowMod(
        datapath=datapath,
        cookie=COOKIE,
        command=ofproto.OFPFC_DELETE_STRICT,
        priority=PAIR_PRIORITY,
        out_port=ofproto.OFPP_ANY,
        out_group=ofproto.OFPG_ANY,
        match=_pair_match(parser, src_ip, dst_ip),
    )


def remove_otcp_entries(datapath):
    """Delete every entry carrying the OTCP cookie (an earlier run's)."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowMod(
        datapath=datapath, cookie=COOKIE, cookie_mask=0xFFFF_FFFF_FFFF_FFFF, command=ofproto.OFPFC_DELETE,
        out_port=ofproto.OFPP_ANY, out_group=ofproto.OFPG_ANY, match=parser.OFPMatch(),
    )


def packet_in_meter(datapath, rate_pps):
    """Replace the packet-in meter: at most rate_pps packets a second (burst
    as many), the rest dropped in the switch. Delete, then add (an add over an
    existing meter is an error)."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    band = parser.OFPMeterBandDrop(rate=rate_pps, burst_size=rate_pps)
    return [
        parser.OFPMeterMod(datapath, command=ofproto.OFPMC_DELETE, meter_id=PACKET_IN_METER),
        parser.OFPMeterMod(datapath, command=ofproto.OFPMC_ADD, flags=ofproto.OFPMF_PKTPS | ofproto.OFPMF_BURST,
                           meter_id=PACKET_IN_METER, bands=[band]),
    ]


def probe_entry(datapath):
    """Send the controller's LLDP probes up, past the packet-in meter (discovery and delay)."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    actions = [parser.OFPActionOutput(ofproto.OFPP_CONTROLLER, ofproto.OFPCML_NO_BUFFER)]
    return parser.OFPFlowMod(
        datapath=datapath, cookie=COOKIE, priority=PROBE_PRIORITY, match=parser.OFPMatch(eth_type=ETH_TYPE_LLDP),
        instructions=[parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS, actions)],
    )


def table_miss_entry(datapath):
    """Send what no entry matches to the controller (host learning, ARP,
    first packets), through the packet-in meter."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    actions = [parser.OFPActionOutput(ofproto.OFPP_CONTROLLER, ofproto.OFPCML_NO_BUFFER)]
    return parser.OFPFlowMod(
        datapath=datapath,
        priority=TABLE_MISS_PRIORITY,
        match=parser.OFPMatch(),
        instructions=[parser.OFPInstructionMeter(PACKET_IN_METER),
                      parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS, actions)],
    )


def packet_out(datapath, port, data):
    """A PacketOut sending raw frame bytes out of one port."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPPacketOut(
        datapath=datapath,
        buffer_id=ofproto.OFP_NO_BUFFER,
        in_port=ofproto.OFPP_CONTROLLER,
        actions=[parser.OFPActionOutput(port)],
        data=data,
    )


def flow_stats_request(datapath):
    """Ask for the OTCP pair entries only (matched by cookie)."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowStatsRequest(
        datapath, cookie=COOKIE, cookie_mask=0xFFFF_FFFF_FFFF_FFFF, out_port=ofproto.OFPP_ANY,
        out_group=ofproto.OFPG_ANY,
    )


def pair_counters(stats):
    """(src_ip, dst_ip, packet_count) for each pair entry in a stats reply."""
    counters = []
    for stat in stats:
        if stat.cookie == COOKIE and stat.priority == PAIR_PRIORITY:
            match = stat.match
            counters.append((match["ipv4_src"], match["ipv4_dst"], stat.packet_count))
    return counters
