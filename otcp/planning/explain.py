"""Why a pair's parameters are what they are: the terms of its formulas, as data.

Plan.explain (otcp.planning.planner) fills these in for one pair from the same
link table and formulas its parameters came from; `otcp-controller plan
--explain` renders them (text or JSON). Units are the process's own: seconds,
bytes and bytes per second.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class LinkTerm:
    """One directed link of a pair's round trip, with what the formulas take from it.

    capacity, buffer and delay each say where they came from (the *_origin
    fields: "inventory", "inventory defaults", "default", "measured", or "not
    recorded" for a live fabric's capacity and buffer). buffer_bytes is 0 on
    a host's egress, whose queue is not counted. flows is F_l, the active
    flows whose data path crosses the link; sharing is N_l, those counting
    this pair once (F_l where the pair is itself a flow, else F_l + 1), on
    the data path only (None on the ACK path). window_bytes is the link's
    window line at the pair's round trip, (cap_l x RTT_prop + buf_l) / N_l
    (the queue target's share of buf_l with otcp-lossless), where the link
    leaves a switch; None elsewhere. admitted_flows is, with fan_in_admission,
    the flows of F_l that N_l counts: at most K of each destination's (the
    senders it asks at once); None without admission.
    """

    src: str
    dst: str
    capacity_bytes_per_s: float
    capacity_origin: str
    buffer_bytes: float
    buffer_origin: str
    delay_s: float
    delay_origin: str
    flows: int
    sharing: int | None
    window_bytes: float | None
    admitted_flows: int | None = None


@dataclass(frozen=True)
class Clamp:
    """A bound that changed a value: what the formula gave, the bound's name and value, what was kept."""

    parameter: str
    formula: float
    bound: str
    value: int


@dataclass(frozen=True)
class SegmentTerms:
    """otcp-lossless: how the path's segment (payload per frame) was chosen.

    The window counts frames as a switch queue does, each segment plus
    frame_overhead_bytes of headers (Ethernet 14, IPv4 20, TCP 20, the
    timestamp option 12). It is split into frames = ceil(window / (MSS +
    overhead)) frames of window / frames bytes; fitting_bytes is what that
    leaves for payload, own_bytes the same within the floor and the MSS.
    receiver_bytes is the smallest own segment of the active pairs into the
    destination (0: none), which every path into it takes (its route
    carries one advmss); segment_bytes is the one the pair gets.
    fan_in_queue_fraction is set where the high fan-in rule raised the
    window above the queue target's (formulas.fan_in_window_bytes): the
    share of the buffer the queue may rise to; None where it did not.
    admitted_flows is, with fan_in_admission, how many senders the
    destination asks at once (formulas.admitted_flows of its downlink), the
    most its downlink counts; None without admission.
    """

    window_wire_bytes: float
    frame_overhead_bytes: int
    frames: int
    fitting_bytes: int
    floor_bytes: int
    own_bytes: int
    receiver_bytes: int
    segment_bytes: int
    fan_in_queue_fraction: float | None = None
    admitted_flows: int | None = None


@dataclass(frozen=True)
class LongPathTerms:
    """How the long-fat-path rule judged a pair (docs/design.md, "Long fat paths").

    bdp_bytes is the bottleneck's capacity x RTT_prop; above threshold_bytes
    the pair is long and gets congctl, ssthresh (its fair share x RTT_prop, in
    segments) and, with GridDT, increase (A from its round trip against
    reference_rtt_s); otherwise those three stay unset.
    """

    bdp_bytes: float
    threshold_bytes: float
    long: bool
    congctl: str | None
    ssthresh: int | None
    increase: int | None
    griddt: bool
    reference_rtt_s: float


@dataclass(frozen=True)
class PathExplanation:
    """One ordered pair's parameters and the terms they came from (docs/design.md, "Formulas").

    data_path and ack_path are the links of the round trip (the data goes
    along the destination's tree, the ACKs along the source's). bottleneck is
    the data path's link with the smallest cap_l / N_l: fair_share_bytes_per_s,
    which sizes the initial window (times rtt_prop_s) and the pacing rate.
    window_link is the switch egress whose window line is smallest (None: no
    switch egress, no clamp); window_bytes its value.

    The delay term: link_delay_sum_s sums the round trip's one-way delays;
    rtt_prop_s is what the windows use (that sum, or what the hosts measured:
    rtt_origin), rtt_for_rto_s what minRTO uses (its top: plus the spread).
    The buffer term: queueing_s sums buf_l / cap_l over the round trip.
    min_rto_s = rtt_for_rto_s + queueing_s. initial_window_bytes =
    fair share x rtt_prop_s. clamps lists the bounds that changed a value.
    long_path says how the long-fat-path rule judged the pair (None: the rule is off).
    """

    src: str
    dst: str
    dst_ip: str
    pair_is_flow: bool
    data_path: tuple[LinkTerm, ...]
    ack_path: tuple[LinkTerm, ...]
    bottleneck: LinkTerm
    fair_share_bytes_per_s: float
    window_link: LinkTerm | None
    window_bytes: float | None
    link_delay_sum_s: float
    rtt_prop_s: float
    rtt_origin: str
    rtt_for_rto_s: float
    queueing_s: float
    min_rto_s: float
    mss_bytes: int
    mss_origin: str
    initial_window_bytes: float
    rto_min_ms: int
    initcwnd: int
    cwnd_clamp: int | None
    segment_bytes: int
    pacing_rate: int | None
    clamps: tuple[Clamp, ...]
    segment: SegmentTerms | None
    long_path: LongPathTerms | None = None
