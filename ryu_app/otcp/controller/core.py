"""The controller's state and policy, free of os-ken's app machinery (docs/design.md, "Architecture").

`ControllerCore` decides everything the OTCP controller does: it keeps the
topology and the measurements (delay probes, echoes, flow statistics),
plans, keeps each switch's forwarding entries in line with the plan,
numbers parameter generations and answers ARP for the hosts it knows.

Its methods take events as plain data (dpid, port numbers, frame bytes,
parsed statistics) with `now`, the time they happened, and return
`Actions`: OpenFlow messages to send, whether to re-plan, rows to store,
a generation to store and deliver. ``otcp.service.app`` feeds it os-ken's
events and carries the Actions out; the core itself never reads a clock,
sends, or touches SQLite or a socket.

OpenFlow messages are built with each switch's `ofproto` and
`ofproto_parser`, handed over when the switch connects.
"""

import contextlib
import gc
import logging
import math
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from os_ken.lib.packet import arp as arp_packet
from os_ken.lib.packet import packet

from otcp.controller import arp, delay, forwarding
from otcp.controller.config import ControllerConfig
from otcp.controller.delay import HostRtts, Refresh, StableDelays
from otcp.controller.flowcount import FlowCounter, HeldFlows, ReportedConnections
from otcp.controller.forwarding import OpenFlowCodec
from otcp.controller.publication import Publications
from otcp.controller.roles import RoleActions, RoleChange, RoleName, Roles
from otcp.controller.store import Generation, HostRecord, LinkMeasurement, LinkRecord, TopologySnapshot
from otcp.controller.topology import Host, SwitchPort, Topology
from otcp.planning.fabric import Fabric, Pair, PairRtt
from otcp.planning.inventory import Inventory
from otcp.planning.paths import HostPaths, SwitchPaths
from otcp.planning.planner import Plan, PlanRecords
from otcp.wire.limits import GENERATION, RTT_PROBE_PORT
from otcp.wire.messages import RoundTrip, SendingConnections

ETH_TYPE_LLDP = 0x88CC
RTT_HIGH_STEP_S = 1e-3
ETH_TYPE_IPV4 = 0x0800
# Discovery has settled once this many probe rounds passed without a change;
# a port that carried a link stays out of host learning for as long.
SETTLE_PROBE_ROUNDS = 3
# A link is gone once this many probes in a row left its source port and
# none arrived. Counted in probe rounds sent, not in time: a controller that
# stalled (busy, starved of CPU) sent no probes, and forgets no link for it.
LINK_TIMEOUT_ROUNDS = 5
# An ARP request for a host nobody answers for is forgotten after this long.
ARP_PENDING_S = 5.0
# The edge ports are asked for one unknown address at most once per this long.
ARP_PROBE_INTERVAL_S = 1.0
# Packet-ins each switch may send per second (an OpenFlow meter on the table miss).
PACKET_IN_RATE_PPS = 1000
# Payload of the controller's echo requests, so other echoes are not timed.
ECHO_PAYLOAD = b"otcp"
# IPv4's protocol number of TCP (the header's byte 9), for reading frames in place.
IP_PROTO_TCP = 6
# How far ahead of the controller an agent's applied generation may be and
# still be followed: more generations than a controller makes in a century
# at one a second. Anything further is a corrupt or forged state, refused
# rather than followed toward the end of the generation range (otcp.wire.limits.GENERATION).
MAX_GENERATION_LEAP = 2**32
# What a SLAVE may send a switch (OpenFlow lets it read, not write): questions and its own settings.
SLAVE_MESSAGES = frozenset({"OFPEchoRequest", "OFPFlowStatsRequest", "OFPPortDescStatsRequest", "OFPRoleRequest",
                            "OFPSetAsync", "OFPBarrierRequest"})
ROLES = {"nochange": "OFPCR_ROLE_NOCHANGE", "master": "OFPCR_ROLE_MASTER", "slave": "OFPCR_ROLE_SLAVE"}

Send = tuple[int, Any]  # (dpid, OpenFlow message)
Row = TypeVar("Row")


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a while. A re-plan makes up to
    hundreds of thousands of objects (flow mods, routes) that all stay alive, and
    every collection of the oldest generation walks all of them: half the time of
    building a k=16 fabric's 327 360 flow mods. After, they join the oldest
    generation without a walk (frozen and thawed at once: gc.unfreeze puts every
    object there), where the full collections see them; else the young collection
    that follows would walk them all, some 0.07 s at k=16. Where anything else froze
    objects, they are left frozen, and the young collection walks these."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class MadeWhenRead(Sequence[Row]):
    """Rows made by a function the first time they are read, and kept: what only the store
    and the live view read is made after the agents have their sets."""

    def __init__(self, make: Callable[[], list[Row]]) -> None:
        self._make: Callable[[], list[Row]] | None = make
        self._rows: list[Row] = []

    def _made(self) -> list[Row]:
        if self._make is not None:
            self._rows, self._make = self._make(), None
        return self._rows

    def __len__(self) -> int:
        return len(self._made())

    def __getitem__(self, index: Any) -> Any:
        return self._made()[index]


@dataclass(frozen=True)
class PortInfo:
    """One port of a switch's port description."""

    number: int
    hw_addr: str
    speed_kbps: int


@dataclass
class Actions:
    """What the glue does after a core call, in this order."""

    sends: list[Send] = field(default_factory=list)
    replan: bool = False  # wake the plan loop
    topology: TopologySnapshot | None = None  # store, with measurements
    measurements: Sequence[LinkMeasurement] = ()  # made when first read
    generation: Generation | None = None  # a new generation to store
    deliver: list[str] = field(default_factory=list)  # hosts whose new set goes to their agent

    def __add__(self, other: "Actions") -> "Actions":
        """Both calls' sends, in order, and a re-plan if either asks (neither may carry more)."""
        assert not (other.topology or other.generation or other.deliver), "only sends and re-plans add up"
        return Actions(self.sends + other.sends, self.replan or other.replan, self.topology, self.measurements,
                       self.generation, self.deliver)


@dataclass
class _Switch:
    """A connected switch: how to talk to it and what it holds."""

    codec: OpenFlowCodec
    ready: bool = False  # in MAIN state: probed, polled and given entries
    installed: dict[str, int] = field(default_factory=dict)  # destination entry: dst ip -> out port
    punts: set[int] = field(default_factory=set)  # host ports whose unpaired IPv4 comes up
    port_addresses: dict[int, str] = field(default_factory=dict)  # port -> hw address


@dataclass(frozen=True)
class _PendingArp:
    """An ARP request for a host not known yet, waiting for it to speak."""

    asked_at: float
    dpid: int
    port: int
    request: arp_packet.arp


def frame_header(data: bytes) -> tuple[int, str] | None:
    """(ethertype, source MAC) of an Ethernet frame, read without a parser; None if too short."""
    if len(data) < 14:
        return None
    return struct.unpack_from("!H", data, 12)[0], data[6:12].hex(":")


def ipv4_addresses(data: bytes) -> tuple[str, str] | None:
    """(source, destination) of an untagged IPv4 frame, read without a parser; None if truncated."""
    if len(data) < 34:
        return None
    return ".".join(map(str, data[26:30])), ".".join(map(str, data[30:34]))


def is_rtt_probe(data: bytes) -> bool:
    """Whether an untagged IPv4 frame is an agent's round-trip probe: a TCP segment to or from
    RTT_PROBE_PORT (the SYN, or the kernel's RST that answers it). Read without a parser."""
    if len(data) < 34 or data[23] != IP_PROTO_TCP:
        return False
    ports_at = 14 + (data[14] & 0x0F) * 4
    if len(data) < ports_at + 4:
        return False
    src_port, dst_port = struct.unpack_from("!HH", data, ports_at)
    return RTT_PROBE_PORT in (src_port, dst_port)


class ControllerCore:
    """The controller's state and decisions; see the module docstring.

    Links are discovered from the core's own delay probes (a probe this
    controller sent out of one port, arriving at another switch, proves the
    link) and forgotten when their probes stop. Hosts are learned only at
    confirmed edge ports: ports of a described switch that carry no link and
    carried none for SETTLE_PROBE_ROUNDS probe rounds. Nothing the
    controller sends comes back as a host sighting: its own ARP probes are
    dropped on arrival, its ARP answers leave only by edge ports, and a
    packet that missed its entry is delivered straight out of its
    destination's edge port, never into the fabric.
    """

    def __init__(
        self,
        config: ControllerConfig,
        *,
        now: float,
        inventory: Inventory | None = None,
        known_hosts: Iterable[Host] = (),
        generation: int = 0,
        logger: logging.Logger | None = None,
    ) -> None:
        """config: the validated configuration, whose sections the core reads (intervals,
        delay_window, defaults, bounds, parameters, stability, measurement)."""
        self.log = logger or logging.getLogger("otcp.controller")
        self._take_planning(config)
        stability, measurement = config.stability, config.measurement
        self.stable_delays: StableDelays[SwitchPort] = StableDelays(stability.delay_step_s, stability.delay_tolerance)
        self.held_flows = HeldFlows(stability.flow_hold_s)
        self.reported_connections = ReportedConnections(measurement.connection_report_max_age_s)
        self.host_rtts = HostRtts(measurement.host_rtt_max_age_s, measurement.host_rtt_min_samples)
        # The hosts' round trips are held still like the links' delays, each bound on its own.
        self.stable_rtt_low: StableDelays[Pair] = StableDelays(stability.delay_step_s, stability.delay_tolerance)
        # The top of an estimate (minimum + spread) feeds minRTO in whole milliseconds: a coarser grid.
        self.stable_rtt_high: StableDelays[Pair] = StableDelays(max(stability.delay_step_s, RTT_HIGH_STEP_S),
                                                                stability.delay_tolerance)
        self.delay_refresh = Refresh(stability.refresh_s)
        self.rtt_refresh = Refresh(stability.refresh_s)
        self._link_delays: dict[SwitchPort, float] = {}  # the links' delays as the plans take them
        self._pair_rtts: dict[Pair, PairRtt] = {}  # the hosts' round trips as the plans take them
        self.topology = Topology(inventory)
        # Where hosts were before a restart: hints, so the first plans are complete.
        for host in known_hosts:
            self.topology.add_hint(host)
        self.delays = delay.DelayEstimator(window=config.delay_window, max_delay_s=measurement.max_link_delay_s)
        # A pair that sent fewer packets than this in a poll is not a flow: the agents'
        # round-trip probes (a SYN and its RST) and a ping must not change the windows.
        self.flow_counter = FlowCounter(stability.min_flow_packets)
        self._stats_parts: dict[int, list] = {}  # dpid -> the pair counters of a reply's parts so far
        self.publications = Publications()
        self.generation = generation
        self.changed_at = now
        self._switches: dict[int, _Switch] = {}
        self._pending_arp: dict[str, list[_PendingArp]] = {}  # target ip -> requests awaiting an answer
        self._arp_probed_at: dict[str, float] = {}  # target ip -> when the edge ports were last asked
        self._probed_links: set[tuple[SwitchPort, SwitchPort]] = set()  # links found by probes
        self._unanswered: dict[SwitchPort, int] = {}  # port -> probes sent out of it since one arrived
        self._link_seen_at: dict[SwitchPort, float] = {}  # port -> last time a link was there
        self._last_plan: Plan | None = None  # what the next plan evaluates again only where inputs changed
        self._paths: tuple[tuple, SwitchPaths] | None = None  # (switches and switch links, their paths)
        self._host_paths_made: HostPaths | None = None  # the last forwarding toward each host
        self._entries_made: forwarding.MadeEntries | None = None  # the last destination entries made
        cluster = config.cluster
        # Which switches this instance is MASTER of (docs/controller.md, "Two controllers, one fabric").
        self.roles = Roles(cluster.rank, cluster.instances, cluster.heartbeat_s, cluster.takeover_s, now=now)

    def _take_planning(self, config: ControllerConfig) -> None:
        """Read the sections that steer planning: the probe interval, defaults, bounds and formulas."""
        self.probe_interval_s = config.intervals.probe_s
        self.defaults = config.defaults
        self.bounds = config.bounds.limits()
        self.lossless = config.parameters.lossless()
        self.pacing = config.parameters.paced()
        self.multipath = config.forwarding.multipath
        self.long_paths = config.long_paths.settings()

    def reconfigure(self, now: float, config: ControllerConfig, inventory: Inventory | None) -> Actions:
        """A reload's configuration and inventory: plan with them from scratch, now (no measurement,
        switch or agent is forgotten)."""
        self._take_planning(config)
        self.topology.set_inventory(inventory)
        self._last_plan = None  # a plan made with other bounds or formulas is no base for the next
        return Actions(replan=True)

    # -- switches ------------------------------------------------------------

    def switch_features(self, dpid: int, codec: OpenFlowCodec, now: float | None = None) -> Actions:
        """A switch connected at now. Alone, this instance is its MASTER at once (`_role_changed`
        sets it up; the time does not matter then); one of several asks the switch for its election
        id and, to learn while it is SLAVE, for the packet-ins a SLAVE gets none of by default."""
        self._switches[dpid] = _Switch(codec)
        if self.roles.instances == 1:
            return self._carry_roles(now or 0.0, self.roles.connected(now or 0.0, dpid))
        if now is None:
            raise ValueError("switch_features: one of several instances needs the time the switch connected")
        asked = self._carry_roles(now, self.roles.connected(now, dpid))
        return Actions([(dpid, forwarding.async_config(codec))]) + asked

    def _setup(self, dpid: int, fresh: bool) -> list[Send]:
        """What a switch this instance just became MASTER of needs before its entries: the packet-in
        meter, the probe and table-miss entries; first, where no master led it before, the
        removal of an earlier run's entries (a master taking over from another keeps them:
        traffic goes on through them until the new master's are in)."""
        codec = self._switches[dpid].codec
        return [(dpid, message) for message in (
            *((forwarding.remove_otcp_entries(codec),) if fresh else ()),
            *forwarding.packet_in_meter(codec, PACKET_IN_RATE_PPS),
            forwarding.probe_entry(codec), forwarding.table_miss_entry(codec))]

    # -- roles -------------------------------------------------------------------

    def role_tick(self, now: float) -> Actions:
        """Heartbeats, polls, step-downs and takeovers due at now (`otcp.controller.roles`)."""
        return self._carry_roles(now, self.roles.tick(now))

    def role_reply(self, now: float, dpid: int, role: int, generation_id: int) -> Actions:
        """A switch answered a role request (its OFPCR_ROLE_* and election id)."""
        switch = self._switches.get(dpid)
        if switch is None:
            return Actions()
        ofproto = switch.codec.ofproto
        names: dict[int, RoleName] = {ofproto.OFPCR_ROLE_MASTER: "master", ofproto.OFPCR_ROLE_SLAVE: "slave"}
        name = names.get(role, "equal")
        return self._carry_roles(now, self.roles.answered(now, dpid, name, generation_id))

    def role_refused(self, now: float, dpid: int) -> Actions:
        """A switch refused a role request as stale: another instance leads it."""
        return self._carry_roles(now, self.roles.refused(now, dpid))

    def _carry_roles(self, now: float, decided: RoleActions) -> Actions:
        """The role requests as OpenFlow messages, and what each change of role needs."""
        sends: list[Send] = []
        for request in decided.requests:
            switch = self._switches.get(request.dpid)
            if switch is not None:
                ofproto, parser = switch.codec.ofproto, switch.codec.ofproto_parser
                sends.append((request.dpid, parser.OFPRoleRequest(switch.codec, getattr(ofproto, ROLES[request.role]),
                                                                  request.generation_id)))
        actions = Actions(sends)
        for change in decided.changes:
            actions = actions + self._role_changed(now, change)
        return actions

    def _role_changed(self, now: float, change: RoleChange) -> Actions:
        """This instance became MASTER of a switch (its setup, then every entry it should hold, sent
        at once) or stopped being it (what it sent there is forgotten, so a later takeover sends it
        all again). Either way the switch's hosts get their next set from whoever leads them now,
        under that one's epoch."""
        switch = self._switches.get(change.dpid)
        if switch is None:
            return Actions()
        switch.installed, switch.punts = {}, set()
        alone = self.roles.instances == 1
        if not alone:
            self.log.warning("s%d: %s", change.dpid, f"MASTER with epoch {change.epoch}" if change.master
                             else "no longer MASTER: sending it nothing, and its hosts' agents no sets")
            for ip, host in self.topology.located_hosts().items():
                if host.dpid == change.dpid:
                    self.publications.forget(ip)
        if not change.master:
            return Actions()
        self._unanswered = {port: count for port, count in self._unanswered.items() if port[0] != change.dpid}
        actions = Actions(self._setup(change.dpid, change.fresh or alone), replan=True)
        if switch.ready:
            actions.sends += self.reroute().sends
        return actions

    def may_send(self, dpid: int, message: Any) -> bool:
        """Whether this instance may send message to the switch: anything as its MASTER, only
        questions and its own settings as SLAVE."""
        return self.roles.is_master(dpid) or type(message).__name__ in SLAVE_MESSAGES

    def agent_epoch(self, host_ip: str | None, now: float | None = None) -> int | None:
        """The epoch a set to host_ip's agent carries: this instance's authority as MASTER of the
        host's switch; None when it is not (then it sends the agent no set and no renewal). With
        now, None too once the switch has not confirmed it in time (`Roles.epoch`)."""
        host = self.topology.host(host_ip) if host_ip is not None else None
        return None if host is None else self.roles.epoch(host.dpid, now)

    def switch_ready(self, dpid: int) -> Actions:
        """The switch is in MAIN state: ask for its ports."""
        switch = self._switches.get(dpid)
        if switch is None:
            return Actions()
        switch.ready = True
        actions = self.port_status(dpid)
        actions.replan = True  # its entries come with the next plan
        return actions

    def switch_gone(self, now: float, dpid: int) -> Actions:
        """The switch disconnected: forget it and what was measured through it (its hosts stay as hints)."""
        if dpid in self._switches:
            self.log.warning("s%d disconnected: its links are forgotten, its hosts kept where they were until it "
                             "connects again", dpid)
        self._switches.pop(dpid, None)
        self.roles.gone(dpid)
        self.delays.forget_switch(dpid)
        self._probed_links = {link for link in self._probed_links if dpid not in (link[0][0], link[1][0])}
        self._unanswered = {port: count for port, count in self._unanswered.items() if port[0] != dpid}
        self.flow_counter.forget_switch(dpid)
        self._stats_parts.pop(dpid, None)
        return self._changed(now) if self.topology.remove_switch(dpid) else Actions()

    def port_status(self, dpid: int) -> Actions:
        """A port changed: ask for the switch's port description again."""
        switch = self._switches.get(dpid)
        if switch is None:
            return Actions()
        return Actions([(dpid, switch.codec.ofproto_parser.OFPPortDescStatsRequest(switch.codec, 0))])

    def port_description(self, now: float, dpid: int, ports: Iterable[PortInfo]) -> Actions:
        """The switch's ports: their addresses (for probes) and speeds (for the fabric)."""
        switch = self._switches.get(dpid)
        if switch is None:
            return Actions()
        physical = [p for p in ports if p.number <= switch.codec.ofproto.OFPP_MAX]
        switch.port_addresses = {p.number: p.hw_addr for p in physical}
        speeds = {p.number: p.speed_kbps * 1000 / 8 for p in physical}  # kb/s -> bytes/s
        return self._changed(now) if self.topology.add_switch(dpid, speeds) else Actions()

    def link_added(self, now: float, src: SwitchPort, dst: SwitchPort) -> Actions:
        """A link was discovered; one claimed on a host's port is refused."""
        self._link_seen_at[src] = self._link_seen_at[dst] = now
        if self.topology.add_link(src, dst):
            return self._link_changed(now, src, dst, "up")
        if self.topology.host_port(*src) or self.topology.host_port(*dst):
            self.log.warning("ignoring LLDP link on a host port: s%d:%d -> s%d:%d", *src, *dst)
        return Actions()

    def link_deleted(self, now: float, src: SwitchPort, dst: SwitchPort) -> Actions:
        """A link went away: forget it and its delay samples."""
        self._probed_links.discard((src, dst))
        if not self.topology.remove_link(src, dst):
            return Actions()
        self._link_seen_at[src] = self._link_seen_at[dst] = now
        self.delays.forget_link(src, dst)
        return self._link_changed(now, src, dst, "down")

    def _link_changed(self, now: float, src: SwitchPort, dst: SwitchPort, state: str) -> Actions:
        self.log.info("link s%d:%d -> s%d:%d %s", *src, *dst, state)
        return self._changed(now)

    def _changed(self, now: float) -> Actions:
        """The topology changed: re-plan now, and wait to settle before publishing."""
        self.changed_at = now
        return Actions(replan=True)

    def expire_links(self, now: float) -> Actions:
        """Forget the probed links of whose last LINK_TIMEOUT_ROUNDS probes none arrived."""
        actions = Actions()
        silent = sorted(link for link in self._probed_links if self._unanswered.get(link[0], 0) >= LINK_TIMEOUT_ROUNDS)
        for (src, dst) in silent:
            actions.replan |= self.link_deleted(now, src, dst).replan
        return actions

    def settled(self, now: float) -> bool:
        """True once discovery has had a few probe rounds since the last change."""
        return now - self.changed_at >= SETTLE_PROBE_ROUNDS * self.probe_interval_s

    def edge_port(self, now: float, dpid: int, port: int) -> bool:
        """True if (dpid, port) is a confirmed edge port, where a host may be
        learned: a described port of a switch, carrying no link now nor in
        the last SETTLE_PROBE_ROUNDS probe rounds."""
        ports = self.topology.switches.get(dpid)
        return (ports is not None and port in ports and not self.topology.is_link_port(dpid, port)
                and now - self._link_seen_at.get((dpid, port), -math.inf)
                >= SETTLE_PROBE_ROUNDS * self.probe_interval_s)

    # -- packets -----------------------------------------------------------------

    def packet_in(self, now: float, dpid: int, in_port: int, data: bytes) -> Actions:
        """A frame a switch sent up: a delay probe, ARP, or a packet that missed its entry.

        O(1) per frame: the Ethernet and IPv4 headers are read in place and
        only ARP and probes are parsed; nothing here plans or sorts.
        """
        header = frame_header(data)
        if dpid not in self._switches or header is None:
            return Actions()
        ethertype, src_mac = header
        if ethertype == ETH_TYPE_LLDP:
            return self._probe_arrived(now, dpid, in_port, data)
        if src_mac == arp.CONTROLLER_MAC:  # the controller's own ARP probe, back through a link
            return Actions()
        if ethertype == arp.ETH_TYPE_ARP:
            request = packet.Packet(data).get_protocol(arp_packet.arp)
            if request is None or not self.edge_port(now, dpid, in_port):
                return Actions()
            actions = self._learn(now, request.src_ip, src_mac, dpid, in_port)
            if request.opcode == arp_packet.ARP_REQUEST:
                actions.sends += self._answer_arp(now, dpid, in_port, request)
            return actions
        addresses = ipv4_addresses(data) if ethertype == ETH_TYPE_IPV4 else None
        if addresses is None:
            return Actions()
        if not self.edge_port(now, dpid, in_port):
            return Actions(self._deliver_missed(dpid, in_port, addresses, data))
        actions = self._learn(now, addresses[0], src_mac, dpid, in_port)
        actions.sends += self._first_of_pair(dpid, in_port, addresses, data)
        return actions

    def _first_of_pair(self, dpid: int, in_port: int, pair: Pair, data: bytes) -> list[Send]:
        """A host's packet with no pair entry at its edge switch: the pair entry
        (for flow counting) toward the port the destination's entry names, and
        the packet sent out of it; without a destination entry yet, delivered.

        An agent's round-trip probe is sent on without an entry: it is one packet, never a
        flow, and with every agent probing its peers, entries for probes would grow to one per
        host pair, which every flow-statistics poll would carry."""
        switch = self._switches[dpid]
        out_port = switch.installed.get(pair[1])
        if out_port is None or out_port == in_port:
            return self._deliver_missed(dpid, in_port, pair, data)
        if is_rtt_probe(data):
            return [(dpid, forwarding.packet_out(switch.codec, out_port, data))]
        return [(dpid, forwarding.pair_entry(switch.codec, *pair, out_port)),
                (dpid, forwarding.packet_out(switch.codec, out_port, data))]

    def _probe_arrived(self, now: float, dpid: int, in_port: int, data: bytes) -> Actions:
        """A probe came up: the link it crossed, and a delay sample when this controller sent it.

        A SLAVE cannot send probes (a switch refuses its packet-outs): it learns the links from
        the master's, which prove the link but carry no time it knows (no sample). A probe that
        claims to leave a switch this instance is MASTER of, and that it did not send, proves
        nothing."""
        probe = delay.parse_probe(data)
        if probe is None or probe[0] == dpid:
            return Actions()
        ours = self.delays.sent_probe(probe, dpid)
        if not ours and (self.roles.is_master(probe[0]) or probe[0] not in self._switches):
            return Actions()
        src, dst = (probe[0], probe[1]), (dpid, in_port)
        if self.topology.host_port(*src) or self.topology.host_port(*dst):
            return Actions()  # a host replaying a probe: no link, no sample
        if ours:
            self.delays.probe_received(probe, dpid, in_port, now)
        self._probed_links.add((src, dst))
        self._unanswered[src] = 0
        return self.link_added(now, src, dst)

    def _deliver_missed(self, dpid: int, in_port: int, pair: Pair, data: bytes) -> list[Send]:
        """A packet that missed the table (its entries not there yet, or not
        yet applied): send it straight out of its destination's edge port,
        so it never re-enters the fabric. The entries come with the plan
        that every change already asked for."""
        host = self.topology.host(pair[1])
        target = self._switches.get(host.dpid) if host is not None else None
        if host is None or target is None or not target.ready or (host.dpid, host.port) == (dpid, in_port):
            return []
        self.log.debug("missed packet %s -> %s at s%d: delivered at s%d:%d", *pair, dpid, host.dpid, host.port)
        return [(host.dpid, forwarding.packet_out(target.codec, host.port, data))]

    def _learn(self, now: float, ip: str, mac: str, dpid: int, port: int) -> Actions:
        """Learn (or move) the sender; answer ARP requests that waited for it."""
        if ip == "0.0.0.0" or mac == arp.CONTROLLER_MAC:
            return Actions()
        actions = Actions()
        if self.topology.learn_host(ip, mac, dpid, port):
            self.log.info("host %s (%s) at s%d:%d", ip, mac, dpid, port)
            actions = self._changed(now)
        host = self.topology.host(ip)
        for waiting in self._pending_arp.pop(ip, []):
            switch = self._switches.get(waiting.dpid)
            if host is None or switch is None or not switch.ready or now - waiting.asked_at >= ARP_PENDING_S:
                continue
            reply = arp.reply_frame(waiting.request, host.mac)
            actions.sends.append((waiting.dpid, forwarding.packet_out(switch.codec, waiting.port, reply)))
        return actions

    def _answer_arp(self, now: float, dpid: int, in_port: int, request: arp_packet.arp) -> list[Send]:
        """Proxy ARP: answer for a known host; for an unknown one, keep the
        request and ask every edge port from the controller's own address."""
        target = self.topology.host(request.dst_ip)
        if target is not None:
            reply = arp.reply_frame(request, target.mac)
            return [(dpid, forwarding.packet_out(self._switches[dpid].codec, in_port, reply))]
        self._pending_arp = {
            ip: fresh for ip, waiting in self._pending_arp.items()
            if (fresh := [w for w in waiting if now - w.asked_at < ARP_PENDING_S])
        }
        self._pending_arp.setdefault(request.dst_ip, []).append(_PendingArp(now, dpid, in_port, request))
        if now - self._arp_probed_at.get(request.dst_ip, -math.inf) < ARP_PROBE_INTERVAL_S:
            return []
        self._arp_probed_at = {ip: at for ip, at in self._arp_probed_at.items() if now - at < ARP_PROBE_INTERVAL_S}
        self._arp_probed_at[request.dst_ip] = now
        self.log.debug("ARP for unknown %s from s%d:%d: probing edge ports", request.dst_ip, dpid, in_port)
        probe = arp.probe_frame(request.dst_ip)
        ready = set(self.ready_switches())
        return [
            (edge_dpid, forwarding.packet_out(self._switches[edge_dpid].codec, port, probe))
            for edge_dpid, port in self.topology.edge_ports()
            if edge_dpid in ready and self.edge_port(now, edge_dpid, port)
        ]

    # -- measurement -----------------------------------------------------------

    def ready_switches(self) -> list[int]:
        """Dpids of the switches in MAIN state."""
        return [dpid for dpid, switch in self._switches.items() if switch.ready]

    def probe_switch(self, now: float, dpid: int) -> Actions:
        """One probe round of one switch: an echo request (the controller
        leg) and, as its MASTER, a delay probe out of every port that is not a
        host's. Only probes this instance sent count toward a link's expiry: a
        SLAVE forgets no link for the master's probes it misses (the master
        being gone is when it must keep them most), and counts from its first
        own round once it is MASTER."""
        switch = self._switches.get(dpid)
        if switch is None or not switch.ready:
            return Actions()
        self.delays.echo_sent(dpid, now)
        sends = [(dpid, switch.codec.ofproto_parser.OFPEchoRequest(switch.codec, data=ECHO_PAYLOAD))]
        if not self.roles.is_master(dpid):
            return Actions(sends)
        for port, hw_addr in switch.port_addresses.items():
            if self.topology.host_port(dpid, port):
                continue
            sequence = self.delays.next_probe(dpid, port, now)
            self._unanswered[(dpid, port)] = self._unanswered.get((dpid, port), 0) + 1
            frame = delay.probe_frame(dpid, port, hw_addr, sequence)
            sends.append((dpid, forwarding.packet_out(switch.codec, port, frame)))
        return Actions(sends)

    def echo_reply(self, now: float, dpid: int, data: bytes) -> None:
        """A switch answered an echo request: one controller-leg round trip."""
        if data == ECHO_PAYLOAD:
            self.delays.echo_received(dpid, now)

    def stats_round(self) -> Actions:
        """Ask every ready switch with hosts (only they hold pair entries) for their counters."""
        edges = {host.dpid for host in self.topology.located_hosts().values()}
        return Actions([
            (dpid, forwarding.flow_stats_request(self._switches[dpid].codec))
            for dpid in self.ready_switches() if dpid in edges
        ])

    def flow_stats(self, dpid: int, stats: Iterable[Any], more: bool = False) -> None:
        """A switch's flow statistics (os-ken OFPFlowStats): which pairs sent since the last poll.

        A switch sends a long reply in parts, each but the last flagged OFPMPF_REPLY_MORE
        (more): the parts are gathered and counted as one poll. Counted part by part, the
        pairs of all but the last part never counted as flows (Open vSwitch splits at
        64 KB: the pair entries of 32 senders' edge switch, their agents probing each other)."""
        entries = self._stats_parts.pop(dpid, []) + forwarding.pair_counters(stats)
        if more:
            self._stats_parts[dpid] = entries
        else:
            self.flow_counter.update(dpid, entries)

    # -- planning ----------------------------------------------------------------

    def reroute(self) -> Actions:
        """Forwarding before parameters: the flow mods that make every ready switch
        follow the switch links and hosts as they are now. The app sends them
        before it re-plans, since traffic through a failed link is lost until
        they are out; the re-plan then finds them in place."""
        with _collector_paused():
            fabric, _ = self.topology.fabric(self._link_delays, {}, self.defaults)
            return Actions(self._sync_forwarding(fabric, self._host_paths(fabric)))

    def replan(self, now: float) -> Actions:
        """Plan the current fabric: forwarding entries for every switch, the
        topology and link measurements to store and, once settled, a new
        generation if any host's parameters changed."""
        with _collector_paused():
            delays = self.delays.delays()
            plan, delay_sources = self._plan(now, delays)
            actions = Actions(self._sync_forwarding(plan.fabric, plan.host_paths))
            actions.topology = self._topology_snapshot()
            actions.measurements = self._link_measurements(plan, delay_sources, delays, actions.topology.switches)
            if self.settled(now):
                actions.generation, actions.deliver = self._next_generation(plan, actions.measurements)
        return actions

    def _plan(self, now: float, delays: dict[SwitchPort, tuple[float, int]]) -> tuple[Plan, dict[tuple[str, str], str]]:
        """The plan of the fabric as measured now (delays: DelayEstimator.delays()), inputs held still, and where
        each link's delay came from; only the pairs whose inputs changed since the last plan are evaluated again."""
        measured = {key: value for key, (value, _) in delays.items()}
        taking = self.delay_refresh.inputs(now, measured, self._link_delays)
        if taking is not None:
            self._link_delays = self.stable_delays.update(taking)
        flows = self.held_flows.update(now, self.reported_connections.weigh(now, self.flow_counter.active_pairs()))
        fabric, delay_sources = self.topology.fabric(self._link_delays, flows, self.defaults, self.delays.spreads(),
                                                     self._stable_host_rtts(now))
        host_paths = self._host_paths(fabric)
        self._last_plan = Plan(fabric, self.bounds, self.lossless, self.pacing, previous=self._last_plan,
                               switch_paths=host_paths.switch_paths, host_paths=host_paths,
                               long_paths=self.long_paths)
        return self._last_plan, delay_sources

    def _switch_paths(self, fabric: Fabric) -> SwitchPaths:
        """The fabric's switch paths: the last ones while its switches and their links are the
        same; after links went, those with only the pairs that crossed them computed again."""
        key = (tuple(sorted(fabric.switches)), frozenset(fabric.switch_links()))
        if self._paths is None or self._paths[0] != key:
            self._paths = (key, SwitchPaths(fabric.switches, key[1], previous=self._paths[1] if self._paths else None))
        return self._paths[1]

    def _host_paths(self, fabric: Fabric) -> HostPaths:
        """The forwarding toward each of the fabric's hosts over its switch paths: the last one while
        those paths, the hosts' places and the multipath setting are the same; after links went, the
        last one's next hops where they still hold (HostPaths: only the trees that crossed them move)."""
        paths, attachment = self._switch_paths(fabric), fabric.attachments()
        made = self._host_paths_made
        if made is None or made.switch_paths is not paths or made.attachment != attachment \
                or made.multipath != self.multipath:
            made = self._host_paths_made = HostPaths(paths, attachment, self.multipath, previous=made)
        return made

    def rtt_report(self, now: float, host_ip: str, round_trips: Iterable[RoundTrip]) -> Actions:
        """An agent's round trips to its destinations: used from the next plan on."""
        self.host_rtts.report(now, host_ip, round_trips)
        return Actions()

    def connection_report(self, now: float, host_ip: str, sending: Iterable[SendingConnections]) -> Actions:
        """An agent's count of its connections that sent to each destination: from the next plan on, an active
        pair counts as that many flows (flowcount.ReportedConnections)."""
        self.reported_connections.report(now, host_ip, sending)
        return Actions()

    def _stable_host_rtts(self, now: float) -> dict[Pair, PairRtt]:
        """The hosts' round trips per pair, low and high each held still, taken once a refresh period."""
        taking = self.rtt_refresh.inputs(now, self.host_rtts.estimates(now), self._pair_rtts)
        if taking is not None:
            lows = self.stable_rtt_low.update({pair: rtt.low_s for pair, rtt in taking.items()})
            highs = self.stable_rtt_high.update({pair: rtt.high_s for pair, rtt in taking.items()})
            self._pair_rtts = {pair: PairRtt(lows[pair], max(lows[pair], highs[pair]), rtt.source)
                               for pair, rtt in taking.items()}
        return self._pair_rtts

    def _sync_forwarding(self, fabric: Fabric, paths: HostPaths) -> list[Send]:
        """Flow mods bringing every ready switch's destination and punt entries
        in line with the fabric and its forwarding paths: only the entries that changed."""
        desired = self._destination_entries(fabric, paths)
        punts: dict[int, set[int]] = {}
        for (_, node), (dpid, port) in fabric.egress.items():
            if node in fabric.hosts:
                punts.setdefault(dpid, set()).add(port)
        sends = []
        for dpid, switch in self._switches.items():
            if not switch.ready or not self.roles.is_master(dpid):
                continue
            entries, ports = desired.get(dpid, {}), punts.get(dpid, set())
            if entries is not switch.installed and entries != switch.installed:
                sends += [(dpid, m) for m in forwarding.sync_messages(switch.codec, switch.installed, entries)]
                switch.installed = entries
            if ports != switch.punts:
                sends += [(dpid, m) for m in forwarding.punt_messages(switch.codec, switch.punts, ports)]
                switch.punts = ports
        return sends

    def _destination_entries(self, fabric: Fabric, paths: HostPaths) -> dict[int, dict[str, int]]:
        """forwarding.destination_entries, made again only when the paths, hosts or egress
        ports changed (the re-plan right after reroute finds them made); after links went,
        only those whose next hop changed."""
        made = self._entries_made
        if made is not None and made.paths is paths and made.hosts == fabric.hosts and made.egress == fabric.egress:
            return made.entries
        entries = forwarding.entries_after_links_went(fabric, paths, made) if made is not None else None
        if entries is None:
            entries = forwarding.destination_entries(fabric, paths)
        self._entries_made = forwarding.MadeEntries(paths, dict(fabric.hosts), dict(fabric.egress), entries)
        return entries

    def entries_per_switch(self) -> dict[int, int]:
        """{dpid: OTCP entries it holds now, pair entries aside}: destinations,
        punts, and the probe and table-miss entries."""
        return {dpid: len(switch.installed) + len(switch.punts) + 2 for dpid, switch in self._switches.items()}

    def _topology_snapshot(self) -> TopologySnapshot:
        """The topology now: its switches' names, and its links and hosts, taken now and made into
        records when first read."""
        topo = self.topology
        names = {dpid: topo.switch_name(dpid) for dpid in topo.switches}
        links = [(src, dst) for src, dst in topo.links.items() if src[0] in names and dst[0] in names]
        hosts = [(h, topo.host_name(h.ip)) for h in topo.located_hosts().values()]
        return TopologySnapshot(
            names,
            MadeWhenRead(lambda: [LinkRecord(names[src[0]], names[dst[0]], *src, *dst) for src, dst in links]),
            MadeWhenRead(lambda: [HostRecord(h.ip, name, h.mac, h.dpid, h.port) for h, name in hosts]))

    def _link_measurements(self, plan: Plan, delay_sources: dict[tuple[str, str], str],
                           delays: dict[SwitchPort, tuple[float, int]], names: dict[int, str]) -> "MadeWhenRead":
        """One row per directed link of the plan: the facts it used, its delay samples and its flows,
        made when first read (the plan, its fabric and delays do not change; the links are taken now).
        names: the switches' names, {dpid: name} (the topology snapshot's)."""
        links = dict(self.topology.links)

        def rows() -> list[LinkMeasurement]:
            samples = {}
            for src, (_, count) in delays.items():
                dst = links.get(src)
                if dst is not None and src[0] in names and dst[0] in names:
                    samples[(names[src[0]], names[dst[0]])] = count
            flows_on = plan.link_flows()
            name = plan.fabric.name  # the rows are for people: hosts by name
            return [
                LinkMeasurement(name(u), name(v), facts.delay_s, delay_sources[(u, v)], samples.get((u, v), 0),
                                facts.capacity_bytes_per_s, facts.buffer_bytes, flows_on.get((u, v), 0))
                for (u, v), facts in sorted(plan.fabric.links.items())
            ]

        return MadeWhenRead(rows)

    # -- generations -------------------------------------------------------------

    def _next_generation(self, plan: Plan, link_rows: Sequence[LinkMeasurement]) -> tuple[Generation | None, list[str]]:
        """Number a new generation and publish the sets of the hosts whose
        routes or admit (fan-in admission's K) changed; returns it and those hosts, (None, []) if none did."""
        # Only the hosts of the switches this instance is MASTER of: the others' agents take sets
        # from their own switch's master.
        routes = {ip: host_routes for ip, host_routes in plan.route_sets().items() if self.agent_epoch(ip) is not None}
        admissions = plan.admissions()
        # The hosts' addresses, for the agents' round-trip probes (an aggregated prefix hides them).
        self.publications.peers = sorted(plan.fabric.hosts)
        changed = {ip: host_routes for ip, host_routes in routes.items()
                   if self.publications.changed(ip, host_routes, admissions.get(ip))}
        if not changed:
            return None, []
        number = self.generation + 1
        too_large = self.publications.publish(number, changed, admissions)
        self.generation = number
        for host_ip, refused in sorted(too_large.items()):
            self.log.error("%s", refused.describe(host_ip))
        self.log.info("generation %d: new parameters for %d host(s)%s", number, len(changed) - len(too_large),
                      f" ({len(too_large)} more over the frame limit)" if too_large else "")
        changed = {ip: host_routes for ip, host_routes in changed.items() if ip not in too_large}
        name = plan.fabric.name
        flows = {(name(src), name(dst)): count for (src, dst), count in plan.fabric.flows.items()}
        return Generation(number, PlanRecords(plan), link_rows, flows), sorted(changed)

    def agent_holds(self, generation: int | None) -> None:
        """An agent holds generation (told at its hello and whenever its set changes, whoever sent
        it): this instance numbers its next generations past it, so that as a host's new master it
        sends a greater generation than any the host held. A number past MAX_GENERATION_LEAP ahead
        is not followed (`agent_arrived`)."""
        if generation is None or generation <= self.generation or generation >= GENERATION[1]:
            return
        if generation - self.generation > MAX_GENERATION_LEAP:
            self.log.error("an agent holds generation %d, more than %d past this controller's %d: not followed",
                           generation, MAX_GENERATION_LEAP, self.generation)
            return
        self.log.debug("an agent holds generation %d: numbering from %d", generation, generation + 1)
        self.generation = generation

    def agent_arrived(self, host_ip: str, applied_generation: int | None) -> Actions:
        """The one rule for an agent's applied generation (docs/design.md, "Wire protocol").

        An agent refuses any set not newer than what it applied. One that
        applied this controller's generation or a later one (its controller's
        database was reset) is followed: numbering continues past it, and
        its host gets a new set. One more than MAX_GENERATION_LEAP ahead, or
        at the last generation number, is refused: it keeps refusing sets
        until its state is reset.
        """
        if applied_generation is None or applied_generation < self.generation:
            return Actions()
        if applied_generation - self.generation > MAX_GENERATION_LEAP or applied_generation >= GENERATION[1]:
            self.log.error("agent for %s applied generation %d, more than %d past this controller's %d: "
                           "not followed; reset that agent's state", host_ip, applied_generation,
                           MAX_GENERATION_LEAP, self.generation)
            return Actions()
        self.log.warning("agent for %s applied generation %d; continuing from %d", host_ip, applied_generation,
                         applied_generation + 1)
        self.generation = applied_generation
        self.publications.forget(host_ip)
        return Actions(replan=True)
