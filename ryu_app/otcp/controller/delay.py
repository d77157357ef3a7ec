"""Delays as measured, and held still for the planner (docs/design.md,
"Measurement"): each link's one-way delay by the controller's own probes
(`DelayEstimator`), each host pair's round trip by the agents (`HostRtts`),
both quantised and held (`StableDelays`) and taken into the plan at most once
a period (`Refresh`). All in seconds.

The controller sends a probe out of switch A's port and notes the time; the
probe crosses the link and switch B returns it as a packet-in. The sample is
the elapsed time minus half of each switch's latest echo round trip (the
controller legs, measured as close to the probe as OpenFlow allows).
Scheduling noise only ever adds, so the estimate is the minimum of a window
of samples, never below 0. Control-plane time must not pass for propagation:

- a sample taken while either switch's control path is loaded (its latest
  echo round trip well above its best) is refused;
- a sample above the physical bound of a link (`max_delay_s`: a link in one
  data center is metres to kilometres of fibre) is refused;
- the spread of the accepted samples is kept, so the planner can take the
  safe side of an estimate it is unsure of.

Probes carry only a sequence number: send times stay in the controller, and a
sequence number is accepted once, for the port it was sent from.

Each agent reports, per destination, its minimum round trip over a window
and the spread above it. A direction's minimum is the smallest its reports
gave over the last max_age_s (a windowed minimum, as the kernel keeps
tcp_min_rtt: a busy minute's reports carry queueing, a quiet moment's do
not), its top the largest (a windowed maximum: minRTO, which takes the top,
rises with the first busy report and falls only once it has aged out, so a
steady fabric's jitter does not move it up and down). A pair's estimate combines both
directions (the smaller minimum, the larger top) and expires when no report
renews it, so a host that went quiet falls back to the per-link view.

What the planner takes holds still, so it sees a change only when it is real:

- `StableDelays`: a delay is quantised up to a grid and moves only when the
  new value differs from the held one by more than a tolerance, so the
  jitter of the control path does not churn the parameters.
- `Refresh`: measured delays and round trips are taken into the plan as a
  whole at most once a period, so a fabric of many pairs, each crossing its
  tolerance now and then, still makes at most one such generation a period.
  A key measured for the first time is taken at once: a new path does not
  wait for the period.
"""

import math
import struct
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from os_ken.lib.packet import ethernet, lldp, packet

from otcp.planning.fabric import Pair, PairRtt
from otcp.wire.messages import RoundTrip

CHASSIS_PREFIX = b"otcp:"
_OUI = b"\x4f\x54\x43"  # "OTC": marks the sequence-number TLV as ours
_SUBTYPE_SEQUENCE = 1
Probe = tuple[int, int, int]  # what a probe says: (dpid, port) it left by, its sequence number
Key = TypeVar("Key", bound=Hashable)  # what a delay is of: a link, a host pair
Value = TypeVar("Value")


def probe_frame(dpid: int, port_no: int, hw_addr: str, sequence: int) -> bytes:
    """The bytes of a probe leaving (dpid, port_no)."""
    tlvs = (
        lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED, chassis_id=CHASSIS_PREFIX + b"%016x" % dpid),
        lldp.PortID(subtype=lldp.PortID.SUB_PORT_COMPONENT, port_id=struct.pack("!I", port_no)),
        lldp.TTL(ttl=1),
        lldp.OrganizationallySpecific(oui=_OUI, subtype=_SUBTYPE_SEQUENCE, info=struct.pack("!Q", sequence)),
        lldp.End(),
    )
    frame = packet.Packet()
    frame.add_protocol(ethernet.ethernet(dst=lldp.LLDP_MAC_NEAREST_BRIDGE, src=hw_addr, ethertype=0x88CC))
    frame.add_protocol(lldp.lldp(tlvs))
    frame.serialize()
    return bytes(frame.data)


def parse_probe(data: bytes) -> Probe | None:
    """(dpid, port_no, sequence) of an OTCP probe, or None for anything else."""
    try:
        frame = packet.Packet(data)
    except Exception:  # os-ken's parsers raise assorted errors on junk
        return None
    found = frame.get_protocol(lldp.lldp)
    if found is None or len(found.tlvs) < 4:
        return None
    chassis, port, _, extra = found.tlvs[:4]
    if not (
        isinstance(chassis, lldp.ChassisID)
        and chassis.chassis_id.startswith(CHASSIS_PREFIX)
        and isinstance(port, lldp.PortID)
        and len(port.port_id) == 4
        and isinstance(extra, lldp.OrganizationallySpecific)
        and extra.oui == _OUI
        and len(extra.info) == 8
    ):
        return None
    try:
        dpid = int(chassis.chassis_id[len(CHASSIS_PREFIX):], 16)
    except ValueError:
        return None
    return dpid, struct.unpack("!I", port.port_id)[0], struct.unpack("!Q", extra.info)[0]


LinkKey = tuple[int, int, int, int]  # (src_dpid, src_port, dst_dpid, dst_port)
#: A probe not back after this long is given up (it can no longer be told from a later one's).
PROBE_TIMEOUT_S = 5.0
#: An echo round trip more than this many times the switch's best, plus
#: LOADED_SLACK_S, means its control path is busy: probe samples wait.
LOADED_FACTOR = 2.0
LOADED_SLACK_S = 200e-6


class DelayEstimator:
    """Echo round trips per switch, probe samples and delay per directed link."""

    def __init__(self, window: int, max_delay_s: float | None, probe_timeout_s: float = PROBE_TIMEOUT_S) -> None:
        """window: samples kept per link; max_delay_s: the physical bound of one link (None: none)."""
        self.window = window
        self.probe_timeout_s = probe_timeout_s
        self.max_delay_s = max_delay_s  # the physical bound of one link, or None
        self.refused = {"loaded": 0, "beyond_bound": 0}  # samples refused, by reason
        self._sequence = 0
        self._outstanding: dict[int, tuple[int, int, float]] = {}  # sequence -> (dpid, port, sent_at)
        self._echo_sent: dict[int, float] = {}  # dpid -> sent_at
        self._echo_rtts: dict[int, deque[float]] = {}  # dpid -> round trips
        self._samples: dict[LinkKey, deque[float]] = {}  # (src_dpid, src_port, dst_dpid, dst_port) -> samples
        # the same keys -> (delay_s, samples, spread_s), until the next sample
        self._summaries: dict[LinkKey, tuple[float, int, float]] = {}

    # -- echo (controller <-> switch) -----------------------------------------

    def echo_sent(self, dpid: int, now: float) -> None:
        """An echo request leaves for switch dpid at now."""
        self._echo_sent[dpid] = now

    def echo_received(self, dpid: int, now: float) -> None:
        """Switch dpid's echo reply arrived at now: one round trip."""
        sent = self._echo_sent.pop(dpid, None)
        if sent is not None:
            self._echo_rtts.setdefault(dpid, deque(maxlen=self.window)).append(now - sent)

    def echo_rtt(self, dpid: int) -> float | None:
        """The smallest recent echo round trip of a switch, or None."""
        rtts = self._echo_rtts.get(dpid)
        return min(rtts) if rtts else None

    def _control_leg(self, dpid: int) -> float | None:
        """Half the switch's latest echo round trip, or None when it has none or its control path is loaded."""
        rtts = self._echo_rtts.get(dpid)
        if not rtts:
            return None
        if rtts[-1] > LOADED_FACTOR * min(rtts) + LOADED_SLACK_S:
            return None
        return rtts[-1] / 2

    # -- probes ----------------------------------------------------------------

    def next_probe(self, dpid: int, port: int, now: float) -> int:
        """Register a probe about to leave (dpid, port); return its sequence."""
        self._sequence += 1
        self._outstanding[self._sequence] = (dpid, port, now)
        for seq in [s for s, (_, _, t) in self._outstanding.items() if now - t > self.probe_timeout_s]:
            del self._outstanding[seq]
        return self._sequence

    def sent_probe(self, probe: Probe, dst_dpid: int) -> bool:
        """True if probe (dpid, port, sequence) is one this controller sent out of
        that port, still outstanding, and arrived at another switch: a link's proof."""
        src_dpid, src_port, sequence = probe
        origin = self._outstanding.get(sequence)
        return origin is not None and origin[:2] == (src_dpid, src_port) and src_dpid != dst_dpid

    def probe_received(self, probe: Probe, dst_dpid: int, dst_port: int, now: float) -> LinkKey | None:
        """Take one sample from a parsed probe; return the link key or None.

        Returns None for unknown or replayed sequence numbers, a probe that
        claims another origin than it was sent from, while either switch has
        no echo round trip yet or a loaded control path, and for a sample
        beyond the physical bound.
        """
        src_dpid, src_port, sequence = probe
        if not self.sent_probe(probe, dst_dpid):
            return None
        origin = self._outstanding[sequence]
        if not self._echo_rtts.get(src_dpid) or not self._echo_rtts.get(dst_dpid):
            return None
        del self._outstanding[sequence]
        source_leg, destination_leg = self._control_leg(src_dpid), self._control_leg(dst_dpid)
        if source_leg is None or destination_leg is None:
            self.refused["loaded"] += 1
            return None
        sample = (now - origin[2]) - source_leg - destination_leg
        if self.max_delay_s is not None and sample > self.max_delay_s:
            self.refused["beyond_bound"] += 1
            return None
        key: LinkKey = (src_dpid, src_port, dst_dpid, dst_port)
        self.record(key, sample)
        return key

    def record(self, key: LinkKey, sample: float) -> None:
        """Keep one checked sample (seconds) of link key (src_dpid, src_port, dst_dpid, dst_port)."""
        self._samples.setdefault(key, deque(maxlen=self.window)).append(sample)
        self._summaries.pop(key, None)

    def _summarised(self) -> dict[LinkKey, tuple[float, int, float]]:
        """{link key: (delay_s, samples, spread_s)} for every measured link: each link's
        computed again only after a new sample (a plan reads every link; few have moved)."""
        for key, samples in self._samples.items():
            if key not in self._summaries:
                ordered = sorted(samples)
                low = max(0.0, ordered[0])
                self._summaries[key] = (low, len(ordered), max(0.0, ordered[int(0.9 * (len(ordered) - 1))]) - low)
        return self._summaries

    def delays(self) -> dict[tuple[int, int], tuple[float, int]]:
        """{(src_dpid, src_port): (delay_s, samples)} for every measured link."""
        return {key[:2]: (delay_s, count) for key, (delay_s, count, _) in self._summarised().items()}

    def spreads(self) -> dict[tuple[int, int], float]:
        """{(src_dpid, src_port): seconds between the smallest and the 90th-percentile sample}."""
        return {key[:2]: spread for key, (_, _, spread) in self._summarised().items()}

    def forget_link(self, src: tuple[int, int], dst: tuple[int, int]) -> None:
        """Drop the samples of a link that went away: (dpid, port) ends."""
        key = (src[0], src[1], dst[0], dst[1])
        self._samples.pop(key, None)
        self._summaries.pop(key, None)

    def forget_switch(self, dpid: int) -> None:
        """Drop the echoes and the link samples of a switch that went away."""
        self._echo_rtts.pop(dpid, None)
        self._echo_sent.pop(dpid, None)
        self._samples = {k: s for k, s in self._samples.items() if dpid not in (k[0], k[2])}
        self._summaries = {k: s for k, s in self._summaries.items() if k in self._samples}


@dataclass
class HostRtts:
    """The reports of the last max_age_s, by (reporting host, destination) address.

    A report whose minimum is a probe's is taken once the agent's window holds
    min_samples samples: a single SYN probe is often the first packet between
    its hosts through a userspace switch, which pays an upcall at every hop
    (3 564 us where the ping minimum was 201 us, in
    tests/integration/test_agent_mininet.py), and the minimum of one sample
    is no minimum. One whose minimum is the kernel's (source "tcp",
    tcpi_min_rtt) is taken at once: that is already a connection's minimum
    over every ACK it had."""

    max_age_s: float
    min_samples: int
    _reports: dict[Pair, list[tuple[float, PairRtt]]] = field(default_factory=dict)  # oldest first

    def report(self, now: float, host_ip: str, round_trips: Iterable[RoundTrip]) -> None:
        """Take one agent's report: the kernel's minimums, and probes' of enough samples."""
        for trip in round_trips:
            if trip.source != "tcp" and trip.count < self.min_samples:
                continue
            self._reports.setdefault((host_ip, trip.dst), []).append(
                (now, PairRtt(trip.min_s, trip.min_s + trip.spread_s, trip.source)))

    def estimates(self, now: float) -> dict[Pair, PairRtt]:
        """{(a, b): PairRtt} for every pair either end reported lately, in both orders."""
        kept = {key: [(at, rtt) for at, rtt in history if now - at <= self.max_age_s]
                for key, history in self._reports.items()}
        self._reports = {key: history for key, history in kept.items() if history}
        combined: dict[Pair, PairRtt] = {}
        for (a, b), history in self._reports.items():
            lowest = min((rtt for _, rtt in history), key=lambda r: r.low_s)
            top = max(rtt.high_s for _, rtt in history)
            rtt = PairRtt(lowest.low_s, top, lowest.source)
            for pair in ((a, b), (b, a)):
                known = combined.get(pair)
                if known is None:
                    combined[pair] = rtt
                else:
                    low = min(known, rtt, key=lambda r: r.low_s)
                    combined[pair] = PairRtt(low.low_s, max(known.high_s, rtt.high_s), low.source)
        return combined


@dataclass
class StableDelays(Generic[Key]):
    """Delays per key (a link, a host pair), quantised up to step_s, moving only past the tolerance."""

    step_s: float
    tolerance: float
    _held: dict[Key, float] = field(default_factory=dict)

    def update(self, measured: dict[Key, float]) -> dict[Key, float]:
        """Take this plan's measured {key: delay_s}; return the delays to plan with."""
        stable = {}
        for key, delay in measured.items():
            quantised = math.ceil(delay / self.step_s - 1e-9) * self.step_s if self.step_s > 0 else delay
            held = self._held.get(key)
            if held is None or abs(quantised - held) > max(self.step_s, self.tolerance * held):
                self._held[key] = held = quantised
            stable[key] = held
        self._held = {key: self._held[key] for key in stable}
        return stable


@dataclass
class Refresh:
    """When measurements are taken into the plan: all at most every period_s, new keys at once."""

    period_s: float
    _taken_at: float = -math.inf

    def inputs(self, now: float, measured: dict[Key, Value], taken: dict[Key, Value]) -> dict[Key, Value] | None:
        """What to take now, given this plan's measurements and those taken before:
        all of measured when the period is up, else those taken plus the keys new
        in measured, or None when there is nothing to take."""
        if now - self._taken_at >= self.period_s:
            self._taken_at = now
            return measured
        new = {key: value for key, value in measured.items() if key not in taken}
        return {**taken, **new} if new else None
