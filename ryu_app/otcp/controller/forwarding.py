"""Forwarding entries: what each switch should hold, as flow mods.

- **By destination**: every switch holds one IPv4 entry per destination host
  (ipv4_dst -> output), toward it along the plan's paths. The paths toward
  one host form a tree (otcp.planning.paths.HostPaths), so one entry serves
  every source: a switch holds as many entries as there are hosts, not pairs.
  With multipath the hosts' trees spread over the equal-cost paths
  (ECMP-like, per destination).
- **Per pair at the ingress only**: a host's port on its edge switch sends
  IPv4 that matches no pair entry up (a punt entry); the controller answers
  with a pair entry (ipv4_src, ipv4_dst -> output) on that switch alone,
  idle after PAIR_IDLE_S. Its packet counter is what flow counting reads.
  When a destination's port changes on a switch, the pair entries toward it
  there are deleted and come back with the next packet.

Functions return OpenFlow 1.3 messages built with the switch's `ofproto`
and `ofproto_parser` (a datapath, or anything holding both); the caller
sends them.
"""

from collections.abc import Iterable
from functools import lru_cache
from types import SimpleNamespace
from typing import Any, NamedTuple, Protocol

import numpy as np

from otcp.planning.fabric import Fabric
from otcp.planning.paths import UNREACHABLE, HostPaths

# Every OTCP entry's cookie has these high bits; the low bits say which kind.
COOKIE_BASE = 0x07C7_0000_0000_0000
COOKIE_KIND_MASK = 0xFFFF_FFFF_0000_0000
COOKIE = COOKIE_BASE | 1  # destination, punt and probe entries
PAIR_COOKIE = COOKIE_BASE | 2  # ingress pair entries (flow counting)
PROBE_PRIORITY = 0xFFFF
PAIR_PRIORITY = 300
PUNT_PRIORITY = 200
DESTINATION_PRIORITY = 100
TABLE_MISS_PRIORITY = 0
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_LLDP = 0x88CC
# The meter that rate-limits a switch's packet-ins (table miss and punts).
PACKET_IN_METER = 1
Message = Any  # an os-ken OpenFlow message (os-ken has no type information)


class OpenFlowCodec(Protocol):
    """What building messages for a switch needs (an os-ken Datapath has both)."""

    ofproto: Any
    ofproto_parser: Any
# A pair entry nobody used for this long goes (its pair is idle; flow counting holds it).
PAIR_IDLE_S = 60


def destination_entries(fabric: Fabric, paths: HostPaths) -> dict[int, dict[str, int]]:
    """{dpid: {dst_ip: out_port}}: on every switch with a path (paths: the
    forwarding toward each of the fabric's hosts) to a host, the port toward it,
    from the egress ports the fabric carries. A hop with no known egress (one
    direction of a link seen, the other not yet or no longer) gets no entry.
    Each switch's entries go by destination in the hosts' order."""
    switches = paths.switch_paths.switches
    index = paths.switch_paths.index
    dpids = sorted({dpid for dpid, _ in fabric.egress.values()})
    row_of = {dpid: row for row, dpid in enumerate(dpids)}
    # [i, j]: the row (among dpids) of the switch holding the egress from switch i to switch j, and its port;
    # the row -1 where there is none (the last column too: next_hop's UNREACHABLE).
    holder = np.full((len(switches), len(switches) + 1), -1, dtype=np.int64)
    port = np.zeros(holder.shape, dtype=np.int64)
    for (u, v), (dpid, out) in fabric.egress.items():
        if u in index and v in index:
            holder[index[u], index[v]], port[index[u], index[v]] = row_of[dpid], out
    # ports[r, d]: the port of the switch at row r toward host d; -1 where it has no entry for d.
    ports = np.full((len(dpids), len(paths.hosts)), -1, dtype=np.int64)
    destination, switch = np.nonzero(paths.next_hop != UNREACHABLE)
    hop = paths.next_hop[destination, switch]
    rows = holder[switch, hop]
    known = rows >= 0
    ports[rows[known], destination[known]] = port[switch, hop][known]
    for d, ip in enumerate(paths.hosts):  # the last hop, into the host
        egress = fabric.egress.get((paths.attachment[ip], ip))
        if egress is not None:
            ports[row_of[egress[0]], d] = egress[1]
    hosts = np.array(paths.hosts, dtype=object)
    entries = {}
    for dpid, toward in zip(dpids, ports):
        held = np.nonzero(toward >= 0)[0]
        if len(held):
            entries[dpid] = dict(zip(hosts[held].tolist(), toward[held].tolist()))
    return entries


class MadeEntries(NamedTuple):
    """Destination entries and what they were made from (the forwarding paths, the fabric's hosts and egress ports)."""

    paths: HostPaths
    hosts: dict[str, str]
    egress: dict[tuple[str, str], tuple[int, int]]
    entries: dict[int, dict[str, int]]


def entries_after_links_went(fabric: Fabric, paths: HostPaths,
                             before: MadeEntries) -> dict[int, dict[str, int]] | None:
    """destination_entries(fabric, paths), made from before (the entries a moment ago),
    where the same hosts sit where they did and all that changed since is switch links
    taken away. Only the entries whose next hop changed are made again; a switch with
    none of them keeps its very entries. None where anything else changed."""
    if not _only_links_went(fabric, paths, before):
        return None
    dpid_of = {name: dpid for (name, _), (dpid, _) in before.egress.items()}
    switches = paths.switch_paths.switches
    entries = dict(before.entries)
    copied: set[int] = set()
    for d, i in zip(*(index.tolist() for index in np.nonzero(paths.next_hop != before.paths.next_hop))):
        source, ip = switches[i], paths.hosts[d]
        if source not in dpid_of:  # a switch with no egress never had entries
            continue
        dpid, hop = dpid_of[source], int(paths.next_hop[d, i])
        egress = fabric.egress.get((source, switches[hop])) if hop != UNREACHABLE else None
        if dpid not in copied:
            entries[dpid] = dict(entries.get(dpid, {}))
            copied.add(dpid)
        if egress is None:
            entries[dpid].pop(ip, None)
        else:
            entries[dpid][ip] = egress[1]
    return {dpid: toward for dpid, toward in entries.items() if toward or dpid not in copied}


def _only_links_went(fabric: Fabric, paths: HostPaths, before: MadeEntries) -> bool:
    """Whether paths are of the same switches and hosts, at the same places, as before's, and all
    that changed since is switch links taken away: no egress port but those of the links that went changed."""
    now, then = paths.switch_paths, before.paths.switch_paths
    if (before.hosts != fabric.hosts or paths.hosts != before.paths.hosts or paths.attachment != before.paths.attachment
            or now.switches != then.switches or not now.links <= then.links):
        return False
    went = then.links - now.links
    return not (any(before.egress.get(key) != value for key, value in fabric.egress.items())
                or any(tuple(sorted(key)) not in went for key in before.egress.keys() - fabric.egress.keys()))


def sync_messages(datapath: OpenFlowCodec, installed: dict[str, int], desired: dict[str, int]) -> list[Message]:
    """Flow mods that turn one switch's destination entries from installed into
    desired; the pair entries toward a destination whose port changed or
    went are deleted with it."""
    moved = sorted(ip for ip, port in installed.items() if desired.get(ip) != port)
    messages = [remove_pair_entries_toward(datapath, ip) for ip in moved]
    added = [(ip, port) for ip, port in sorted(desired.items()) if installed.get(ip) != port]
    messages += _destination_entries_in_bulk(datapath, added)
    messages += [remove_destination_entry(datapath, ip) for ip in moved if ip not in desired]
    return messages


#: The fields of a destination entry's flow mod that differ from entry to entry; the others are alike in all.
_OWN_FIELDS = frozenset({"datapath", "match", "instructions"})


@lru_cache(maxsize=8)
def _bulk_destination_entry_type(ofproto: Any, parser: Any) -> type:
    """The flow mod type of destination entries made many at once: os-ken builds a flow mod in
    about 7 us, and the first plan of a k=16 fat-tree adds 330 000 entries. A subclass of the
    parser's OFPFlowMod, of the same name, whose instances hold only their own fields
    (_OWN_FIELDS) and take the others from the class, as destination_entry gives them. os-ken
    prints those as the message's own (its _opt_attributes), so an instance serialises and
    prints exactly as one built by destination_entry."""
    built = vars(_add(SimpleNamespace(ofproto=ofproto, ofproto_parser=parser), COOKIE, DESTINATION_PRIORITY,
                      parser.OFPMatch(), []))
    shared = {name: value for name, value in built.items() if name not in _OWN_FIELDS}
    flow_mod = parser.OFPFlowMod
    return type(flow_mod.__name__, (flow_mod,), {
        **shared, "__module__": __name__, "__doc__": "A destination entry made in bulk (sync_messages).",
        "_opt_attributes": sorted(shared.keys() - set(flow_mod._base_attributes))})


def _destination_entries_in_bulk(datapath: OpenFlowCodec, added: list[tuple[str, int]]) -> list[Message]:
    """destination_entry(datapath, ip, port) for each (ip, port) of added, made without os-ken's constructor."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    entry_type = _bulk_destination_entry_type(ofproto, parser)
    entries = []
    for ip, port in added:
        entry: Message = object.__new__(entry_type)
        entry.datapath, entry.match = datapath, _destination_match(parser, ip)
        entry.instructions = _output_instructions(ofproto, parser, port)
        entries.append(entry)
    return entries


def punt_messages(datapath: OpenFlowCodec, installed: set[int], desired: set[int]) -> list[Message]:
    """Flow mods that turn one switch's punt entries (host ports) from installed into desired."""
    return [punt_entry(datapath, port) for port in sorted(desired - installed)] + [
        _delete_strict(datapath, PUNT_PRIORITY, _punt_match(datapath.ofproto_parser, port))
        for port in sorted(installed - desired)]


def _apply(datapath: OpenFlowCodec, actions: list[Any]) -> list[Any]:
    return [datapath.ofproto_parser.OFPInstructionActions(datapath.ofproto.OFPIT_APPLY_ACTIONS, actions)]


def _to_controller(datapath: OpenFlowCodec) -> list[Any]:
    return [datapath.ofproto_parser.OFPActionOutput(datapath.ofproto.OFPP_CONTROLLER,
                                                    datapath.ofproto.OFPCML_NO_BUFFER)]


def _add(datapath: OpenFlowCodec, cookie: int, priority: int, match: Any, instructions: list[Any],
         idle_timeout: int = 0) -> Message:
    return datapath.ofproto_parser.OFPFlowMod(
        datapath=datapath, cookie=cookie, command=datapath.ofproto.OFPFC_ADD, priority=priority, match=match,
        idle_timeout=idle_timeout, instructions=instructions)


def _delete_strict(datapath: OpenFlowCodec, priority: int, match: Any) -> Message:
    ofproto = datapath.ofproto
    return datapath.ofproto_parser.OFPFlowMod(
        datapath=datapath, cookie=COOKIE, cookie_mask=0xFFFF_FFFF_FFFF_FFFF, command=ofproto.OFPFC_DELETE_STRICT,
        priority=priority, out_port=ofproto.OFPP_ANY, out_group=ofproto.OFPG_ANY, match=match)


# os-ken builds a match or an action list slowly (tens of microseconds) and
# never changes one after: those of destination entries are made once per
# parser and shared by every switch's messages.
@lru_cache(maxsize=1 << 16)
def _destination_match(parser: Any, dst_ip: str) -> Any:
    return parser.OFPMatch(eth_type=ETH_TYPE_IPV4, ipv4_dst=dst_ip)


@lru_cache(maxsize=1 << 12)
def _output_instructions(ofproto: Any, parser: Any, port: int) -> list[Any]:
    return [parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(port)])]


def destination_entry(datapath: OpenFlowCodec, dst_ip: str, out_port: int) -> Message:
    """Add (or overwrite) the entry forwarding everything to dst_ip out of out_port."""
    return _add(datapath, COOKIE, DESTINATION_PRIORITY, _destination_match(datapath.ofproto_parser, dst_ip),
                _output_instructions(datapath.ofproto, datapath.ofproto_parser, out_port))


def remove_destination_entry(datapath: OpenFlowCodec, dst_ip: str) -> Message:
    """Delete the entry forwarding to dst_ip."""
    return _delete_strict(datapath, DESTINATION_PRIORITY, _destination_match(datapath.ofproto_parser, dst_ip))


def punt_entry(datapath: OpenFlowCodec, port: int) -> Message:
    """Send IPv4 from a host's port that matches no pair entry up, through the packet-in meter."""
    return _add(datapath, COOKIE, PUNT_PRIORITY, _punt_match(datapath.ofproto_parser, port),
                _punt_instructions(datapath.ofproto, datapath.ofproto_parser))


# A punt entry's match and instructions, shared like a destination entry's: a switch has its
# host ports, numbered alike on every switch, and every punt entry the same instructions.
@lru_cache(maxsize=1 << 12)
def _punt_match(parser: Any, port: int) -> Any:
    return parser.OFPMatch(in_port=port, eth_type=ETH_TYPE_IPV4)


@lru_cache(maxsize=8)
def _punt_instructions(ofproto: Any, parser: Any) -> list[Any]:
    codec = SimpleNamespace(ofproto=ofproto, ofproto_parser=parser)
    return [parser.OFPInstructionMeter(PACKET_IN_METER), *_apply(codec, _to_controller(codec))]


def pair_entry(datapath: OpenFlowCodec, src_ip: str, dst_ip: str, out_port: int) -> Message:
    """The ingress entry of one pair: forwards src_ip -> dst_ip out of out_port and counts its packets."""
    parser = datapath.ofproto_parser
    return _add(datapath, PAIR_COOKIE, PAIR_PRIORITY,
                parser.OFPMatch(eth_type=ETH_TYPE_IPV4, ipv4_src=src_ip, ipv4_dst=dst_ip),
                _apply(datapath, [parser.OFPActionOutput(out_port)]), idle_timeout=PAIR_IDLE_S)


def remove_pair_entries_toward(datapath: OpenFlowCodec, dst_ip: str) -> Message:
    """Delete every pair entry toward dst_ip (matched by cookie and destination)."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowMod(
        datapath=datapath, cookie=PAIR_COOKIE, cookie_mask=0xFFFF_FFFF_FFFF_FFFF, command=ofproto.OFPFC_DELETE,
        out_port=ofproto.OFPP_ANY, out_group=ofproto.OFPG_ANY, match=_destination_match(parser, dst_ip))


def remove_otcp_entries(datapath: OpenFlowCodec) -> Message:
    """Delete every entry carrying an OTCP cookie (an earlier run's)."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowMod(
        datapath=datapath, cookie=COOKIE_BASE, cookie_mask=COOKIE_KIND_MASK, command=ofproto.OFPFC_DELETE,
        out_port=ofproto.OFPP_ANY, out_group=ofproto.OFPG_ANY, match=parser.OFPMatch(),
    )


def packet_in_meter(datapath: OpenFlowCodec, rate_pps: int) -> list[Message]:
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


def probe_entry(datapath: OpenFlowCodec) -> Message:
    """Send the controller's LLDP probes up, past the packet-in meter (discovery and delay)."""
    parser = datapath.ofproto_parser
    return _add(datapath, COOKIE, PROBE_PRIORITY, parser.OFPMatch(eth_type=ETH_TYPE_LLDP),
                _apply(datapath, _to_controller(datapath)))


def table_miss_entry(datapath: OpenFlowCodec) -> Message:
    """Send what no entry matches to the controller (host learning, ARP,
    first packets), through the packet-in meter."""
    parser = datapath.ofproto_parser
    return _add(datapath, 0, TABLE_MISS_PRIORITY, parser.OFPMatch(),
                [parser.OFPInstructionMeter(PACKET_IN_METER), *_apply(datapath, _to_controller(datapath))])


def packet_out(datapath: OpenFlowCodec, port: int, data: bytes) -> Message:
    """A PacketOut sending raw frame bytes out of one port."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPPacketOut(
        datapath=datapath,
        buffer_id=ofproto.OFP_NO_BUFFER,
        in_port=ofproto.OFPP_CONTROLLER,
        actions=[parser.OFPActionOutput(port)],
        data=data,
    )


def flow_stats_request(datapath: OpenFlowCodec) -> Message:
    """Ask for the pair entries only (matched by cookie)."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowStatsRequest(
        datapath, cookie=PAIR_COOKIE, cookie_mask=0xFFFF_FFFF_FFFF_FFFF, out_port=ofproto.OFPP_ANY,
        out_group=ofproto.OFPG_ANY,
    )


def pair_counters(stats: Iterable[Any]) -> list[tuple[str, str, int, int]]:
    """(src_ip, dst_ip, packet_count, byte_count) for each pair entry in a stats reply."""
    return [(stat.match["ipv4_src"], stat.match["ipv4_dst"], stat.packet_count, stat.byte_count)
            for stat in stats if stat.cookie == PAIR_COOKIE and stat.priority == PAIR_PRIORITY]


def async_config(datapath: OpenFlowCodec) -> Message:
    """The asynchronous messages this controller takes in every role: packet-ins (a SLAVE gets
    none by default, and learns hosts and links from them), port status, and no flow removals."""
    ofproto, parser = datapath.ofproto, datapath.ofproto_parser
    packet_ins = 1 << ofproto.OFPR_NO_MATCH | 1 << ofproto.OFPR_ACTION
    ports = 1 << ofproto.OFPPR_ADD | 1 << ofproto.OFPPR_DELETE | 1 << ofproto.OFPPR_MODIFY
    return parser.OFPSetAsync(datapath, [packet_ins, packet_ins], [ports, ports], [0, 0])
