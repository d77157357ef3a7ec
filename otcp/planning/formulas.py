"""The OTCP parameter formulas (docs/design.md, "Formulas"), as pure functions.

Every function works on plain floats and on numpy arrays alike, so the offline
planner evaluates a million host pairs at once with the same code the live
controller uses for a handful. Units: seconds, bytes and bytes per second.
"""

import re
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike

from otcp.wire.limits import CONGCTL_PATTERN, PACING_RATE, SSTHRESH

Value = TypeVar("Value", float, np.ndarray)  # a number, or an array of them: the same comes back

#: Defaults, defined here once: the segment size, and the facts of a link
#: neither the inventory nor a measurement describes.
DEFAULT_MSS_BYTES = 1448
DEFAULT_CAPACITY_MBPS = 1000
DEFAULT_BUFFER_BYTES = 131072
DEFAULT_LINK_DELAY_US = 10

#: What a full-sized segment adds to a switch queue beyond its payload:
#: Ethernet 14, IPv4 20, TCP 20 and the timestamp option 12 (a bfifo counts frames).
FRAME_OVERHEAD_BYTES = 66
#: The timestamp option, which the kernel takes out of an advertised MSS.
TIMESTAMP_OPTION_BYTES = 12

# Float sums of microsecond delays land a hair beside whole numbers
# (13.7 ms -> 13.700000000000001); the tolerance keeps ceil/floor honest.
_ROUNDING_SLACK = 1e-9


@dataclass(frozen=True)
class Bounds:
    """Configurable limits and segment size the formulas clamp to."""

    mss_bytes: int = DEFAULT_MSS_BYTES
    rto_min_ms_low: int = 1
    rto_min_ms_high: int = 200
    initcwnd_low: int = 1
    initcwnd_high: int = 64
    cwnd_low: int = 1
    cwnd_high: int = 65535

    def __post_init__(self) -> None:
        if self.mss_bytes <= 0:
            raise ValueError(f"mss_bytes must be positive, got {self.mss_bytes}")
        for name in ("rto_min_ms", "initcwnd", "cwnd"):
            low, high = getattr(self, name + "_low"), getattr(self, name + "_high")
            if not 1 <= low <= high:
                raise ValueError(f"{name} bounds must satisfy 1 <= low <= high, got {low}..{high}")


@dataclass(frozen=True)
class Lossless:
    """The otcp-lossless formulas' settings (docs/design.md, "Formulas").

    queue_target_fraction: the standing queue each switch egress may hold,
    as a share of its buffer; mss_floor_bytes: the smallest segment payload
    a path may be given; fan_in_queue_fraction: the share of its buffer a
    switch egress's queue may rise to where its flows' full frames do not
    fit the queue target (high fan-in, :func:`fan_in_window_bytes`), 0 for
    never: segments then shrink until one frame each fits the target;
    fan_in_admission: the receivers admit their senders in turns
    (:func:`admitted_flows`), so a receiver's downlink counts at most that
    many of its flows, each keeping full frames.
    """

    queue_target_fraction: float = 0.25
    mss_floor_bytes: int = 256
    fan_in_queue_fraction: float = 1.0
    fan_in_admission: bool = False

    def __post_init__(self) -> None:
        for name, low_open in (("queue_target_fraction", True), ("fan_in_queue_fraction", False)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not (0 < value <= 1 if low_open else 0 <= value <= 1):
                raise ValueError(f"{name} must be a number in {'(0' if low_open else '[0'}, 1], got {value!r}")
        if not 64 <= self.mss_floor_bytes:
            raise ValueError(f"mss_floor_bytes must be at least 64, got {self.mss_floor_bytes}")
        if not isinstance(self.fan_in_admission, bool):
            raise ValueError(f"fan_in_admission must be true or false, got {self.fan_in_admission!r}")


@dataclass(frozen=True)
class Pacing:
    """The otcp-paced setting (docs/design.md, "Pacing"): how far above the
    fair share at the path's bottleneck each flow may be paced, as a fraction."""

    headroom: float = 0.05

    def __post_init__(self) -> None:
        if isinstance(self.headroom, bool) or not isinstance(self.headroom, int | float) \
                or not 0 <= self.headroom <= 1:
            raise ValueError(f"pacing headroom must be a number in [0, 1], got {self.headroom!r}")


@dataclass(frozen=True)
class LongPaths:
    """The long-fat-path settings (docs/design.md, "Long fat paths").

    A path whose bandwidth-delay product (its bottleneck's capacity x its
    round trip) exceeds bdp_threshold_bytes gets congctl, an initial ssthresh
    from its fair share of the BDP, and with griddt GridDT's additive increase
    A = reference_increase x (rtt / reference_rtt_s)^2 at every window; other
    paths get none of them (null: as without this setting).
    """

    bdp_threshold_bytes: float = 1_250_000
    congctl: str = "otcp_scalable"
    griddt: bool = False
    reference_rtt_s: float = 0.1
    reference_increase: float = 2.0

    def __post_init__(self) -> None:
        for name in ("bdp_threshold_bytes", "reference_rtt_s", "reference_increase"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ValueError(f"long paths: {name} must be a finite number above 0, got {value!r}")
        if not isinstance(self.congctl, str) or not re.fullmatch(CONGCTL_PATTERN, self.congctl):
            raise ValueError(f"long paths: congctl {self.congctl!r} is not a congestion control's name "
                             f"({CONGCTL_PATTERN})")
        if not isinstance(self.griddt, bool):
            raise ValueError(f"long paths: griddt must be true or false, got {self.griddt!r}")


def capacity_bytes_per_s(capacity_mbps: Value) -> Value:
    """Link capacity in bytes/s from Mb/s (Mb/s x 1e6 / 8)."""
    return capacity_mbps * 1e6 / 8


def flows_sharing(active_flows_on_link: ArrayLike, pair_is_active: ArrayLike) -> np.ndarray:
    """N_l(s,d): the flows on a link counting the pair being configured once."""
    flows = np.asarray(active_flows_on_link)
    return np.where(pair_is_active, flows, flows + 1)


def min_rto_seconds(rtt_prop_s: Value, queueing_s: Value) -> Value:
    """minRTO: the round trip with every queue on the way full.

    rtt_prop_s is the sum of one-way delays over the round trip R(s,d);
    queueing_s is the sum of buf_l / cap_l over the same links.
    """
    return rtt_prop_s + queueing_s


def initial_window_bytes(fair_share_bytes_per_s: Value, rtt_prop_s: Value) -> Value:
    """The flow's fair share of the BDP: min(cap_l / N_l) x RTT_prop."""
    return fair_share_bytes_per_s * rtt_prop_s


def max_window_bytes(share_of_capacity: np.ndarray, share_of_buffer: np.ndarray, rtt_prop_s: ArrayLike) -> np.ndarray:
    """min over the path's switch egresses of (cap_l x RTT_prop + buf_l) / N_l.

    share_of_capacity and share_of_buffer hold cap_l / N_l and buf_l / N_l
    along the last axis (one column per link). Columns padded with a capacity
    share of 0 and a buffer share of +inf drop out of the minimum.
    """
    rtt = np.asarray(rtt_prop_s, dtype=float)[..., np.newaxis]
    return np.min(share_of_capacity * rtt + share_of_buffer, axis=-1)


def static_rwnd_bytes(capacity_bytes_per_s: ArrayLike, rtt_prop_s: ArrayLike, buffer_bytes: ArrayLike,
                      senders: ArrayLike, mss_bytes: int = DEFAULT_MSS_BYTES) -> np.ndarray:
    """The static 1/N receive-window clamp, the baseline OTCP's live flow counts are judged
    against: the bottleneck's budget (cap x RTT_prop + buf, what its link and buffer hold)
    split evenly over the N senders a receiver expects at once, in whole segments, at least one."""
    share = (np.asarray(capacity_bytes_per_s, dtype=float) * np.asarray(rtt_prop_s, dtype=float)
             + np.asarray(buffer_bytes, dtype=float)) / np.asarray(senders, dtype=float)
    segments = np.floor(share / mss_bytes + _ROUNDING_SLACK)
    return (np.maximum(segments, 1) * mss_bytes).astype(np.int64)


def whole_ms_above(seconds: ArrayLike) -> np.ndarray:
    """ceil(seconds in ms): minRTO as the whole milliseconds rto_min takes, before its bounds."""
    return np.ceil(np.asarray(seconds, dtype=float) * 1e3 - _ROUNDING_SLACK).astype(np.int64)


def rto_min_ms(min_rto_s: ArrayLike, bounds: Bounds = Bounds()) -> np.ndarray:
    """rto_min route attribute: ceil(min_rto in ms), clamped."""
    return np.clip(whole_ms_above(min_rto_s), bounds.rto_min_ms_low, bounds.rto_min_ms_high).astype(np.int64)


def whole_segments(window_bytes: ArrayLike, segment_bytes: ArrayLike) -> np.ndarray:
    """floor(window / segment): the whole segments a window holds, before any bound (as floats:
    an unbounded window stays infinite)."""
    return np.floor(np.asarray(window_bytes, dtype=float) / np.asarray(segment_bytes) + _ROUNDING_SLACK)


def initcwnd_segments(iw_bytes: ArrayLike, bounds: Bounds = Bounds()) -> np.ndarray:
    """initcwnd route attribute: floor(iw / MSS), clamped."""
    segments = whole_segments(iw_bytes, bounds.mss_bytes)
    return np.clip(segments, bounds.initcwnd_low, bounds.initcwnd_high).astype(np.int64)


def cwnd_clamp_segments(max_bytes: ArrayLike, bounds: Bounds = Bounds()) -> np.ndarray:
    """cwnd (locked) route attribute: floor(max / MSS), clamped.

    A path with no switch egress (no buffer that can overflow) has an
    unbounded window, returned as 0: "no clamp".
    """
    window = np.asarray(max_bytes, dtype=float)
    unbounded = ~np.isfinite(window)
    finite = np.where(unbounded, 0.0, window)
    segments = whole_segments(finite, bounds.mss_bytes)
    clamped = np.clip(segments, bounds.cwnd_low, bounds.cwnd_high).astype(np.int64)
    return np.where(unbounded, 0, clamped)


def queue_target_bytes(buffer_bytes: ArrayLike, lossless: Lossless = Lossless()) -> np.ndarray:
    """The queue otcp-lossless aims to stand at a switch egress: a share of its buffer."""
    return np.asarray(buffer_bytes, dtype=float) * lossless.queue_target_fraction


def fan_in_share_bytes(buffer_bytes: ArrayLike, flows_sharing_link: ArrayLike, bounds: Bounds = Bounds(),
                       lossless: Lossless = Lossless()) -> np.ndarray:
    """One flow's share of a switch egress's buffer under the high fan-in rule: (g x buf_l - F) / N_l - H.

    g = fan_in_queue_fraction, N_l the flows sharing the link, F one full frame (MSS +
    FRAME_OVERHEAD_BYTES) held back for what no window counts (a ping, the connections'
    handshakes and FINs), and H = FRAME_OVERHEAD_BYTES, a header-only frame, held back per flow:
    the ACK a sender returns for the request that starts its flow, sent right before its first
    window (a new connection, or one idle past its RTO, acknowledges data at once: Linux's
    quick-ACK mode), so N_l of them arrive with the round's first frames. 0 where g x buf_l holds
    no more than that.
    """
    full_frame = bounds.mss_bytes + FRAME_OVERHEAD_BYTES
    budget = np.asarray(buffer_bytes, dtype=float) * lossless.fan_in_queue_fraction - full_frame
    share = np.maximum(budget, 0.0) / np.asarray(flows_sharing_link, dtype=float) - FRAME_OVERHEAD_BYTES
    return np.maximum(share, 0.0)


def admitted_flows(buffer_bytes: ArrayLike, bounds: Bounds = Bounds(), lossless: Lossless = Lossless()) -> np.ndarray:
    """How many senders a receiver behind a switch egress of buffer_bytes admits at once
    (fan_in_admission): the most whose full frames, each with its ACK, fit the fan-in budget,
    K = floor((g x buf - F) / (F + H)), at least 1.

    g = fan_in_queue_fraction, F one full frame (MSS + FRAME_OVERHEAD_BYTES), kept free as in
    :func:`fan_in_share_bytes`, and H = FRAME_OVERHEAD_BYTES. With at most K flows sharing the
    egress, :func:`fan_in_share_bytes` is at least F: nobody's segment shrinks. The receiver asks
    the next sender as soon as one of the K finishes, so K flows keep the port busy.
    """
    full_frame = bounds.mss_bytes + FRAME_OVERHEAD_BYTES
    budget = np.asarray(buffer_bytes, dtype=float) * lossless.fan_in_queue_fraction - full_frame
    fitting = np.floor(np.maximum(budget, 0.0) / (full_frame + FRAME_OVERHEAD_BYTES) + _ROUNDING_SLACK)
    return np.maximum(fitting, 1).astype(np.int64)


def fan_in_window_bytes(window_wire_bytes: ArrayLike, fan_in_share: ArrayLike, bounds: Bounds = Bounds()) -> np.ndarray:
    """otcp-lossless's window where N flows' full frames do not fit the budget (high fan-in).

    window_wire_bytes is W = min over the path's switch egresses of (cap_l x RTT_prop + Q_l) / N_l
    (Q_l = f x buf_l, the queue target); fan_in_share is S = min over the same egresses of
    :func:`fan_in_share_bytes`, (g x buf_l - F) / N_l - H (g = fan_in_queue_fraction, F one full frame,
    MSS + FRAME_OVERHEAD_BYTES, H a header-only frame per flow). Where W holds at least one full
    frame, W stands. Below it, shrinking segments to fit W costs FRAME_OVERHEAD_BYTES per frame
    and the switch its per-packet work; instead the queue may rise toward g x buf_l:

        W' = max(W, min(F, S))

    so each flow keeps one full frame while N_l of them, each with its ACK, fit g x buf_l - F,
    and below that a frame of S. The link's BDP is left out on purpose: a synchronized round's
    first frames arrive together (each behind its sender's ACK of the request) and find the wire
    empty, so all N_l of them must fit the buffer at once, with a full frame to spare for the
    packets no window counts (a ping, handshakes, FINs).
    N_l x (W' + H) <= g x buf_l - F at every egress, so the buffer holds them (lossless); the cost is a
    standing queue of up to g x buf_l / cap_l seconds for everyone else on that port while the
    fan-in lasts. minRTO already counts every buffer on the round trip full. g = 0 keeps W.
    """
    window = np.asarray(window_wire_bytes, dtype=float)
    share = np.asarray(fan_in_share, dtype=float)
    share = np.where(np.isfinite(share), share, 0.0)  # no switch egress: the window is unbounded anyway
    full_frame = bounds.mss_bytes + FRAME_OVERHEAD_BYTES
    return np.where(window < full_frame, np.maximum(window, np.minimum(full_frame, share)), window)


def segment_bytes(window_wire_bytes: ArrayLike, bounds: Bounds = Bounds(),
                  lossless: Lossless = Lossless()) -> np.ndarray:
    """Payload per segment on a path: the largest at which a whole number of
    frames fills the flow's window.

    k = ceil(window / full frame) frames (at most cwnd_high), each window / k
    bytes on the wire: the window is used to within k bytes, where full
    segments would leave up to one frame of it unused (a quarter of the
    window at 4 frames). Never below the floor nor above the configured MSS.
    window_wire_bytes counts frames as a switch queue does; an unbounded
    window (no switch egress) keeps the configured MSS.
    """
    window = np.asarray(window_wire_bytes, dtype=float)
    segment = np.clip(fitting_segment_bytes(window, bounds), lossless.mss_floor_bytes, bounds.mss_bytes)
    return np.where(np.isfinite(window), segment, bounds.mss_bytes).astype(np.int64)


def window_frames(window_wire_bytes: ArrayLike, bounds: Bounds = Bounds()) -> np.ndarray:
    """k = ceil(window / full frame), within 1..cwnd_high: the frames segment_bytes splits a window into
    (a full frame is the MSS plus FRAME_OVERHEAD_BYTES); 1 for an unbounded window."""
    window = np.asarray(window_wire_bytes, dtype=float)
    finite = np.where(np.isfinite(window), window, 0.0)
    full_frame = bounds.mss_bytes + FRAME_OVERHEAD_BYTES
    return np.clip(np.ceil(finite / full_frame - _ROUNDING_SLACK), 1, bounds.cwnd_high)


def fitting_segment_bytes(window_wire_bytes: ArrayLike, bounds: Bounds = Bounds()) -> np.ndarray:
    """floor(window / k) - FRAME_OVERHEAD_BYTES: the payload of each of window_frames' k frames,
    before the floor and the MSS bound it (as floats)."""
    window = np.asarray(window_wire_bytes, dtype=float)
    finite = np.where(np.isfinite(window), window, 0.0)
    return np.floor(finite / window_frames(window, bounds) + _ROUNDING_SLACK) - FRAME_OVERHEAD_BYTES


def lossless_cwnd_segments(window_wire_bytes: ArrayLike, segment: ArrayLike, bounds: Bounds = Bounds()) -> np.ndarray:
    """cwnd clamp for otcp-lossless: whole frames of `segment` payload in the window, clamped.

    At least one segment always: when even one frame of the floor segment
    exceeds the window, the path cannot be lossless and the clamp says 1.
    An unbounded window is 0, "no clamp".
    """
    window = np.asarray(window_wire_bytes, dtype=float)
    unbounded = ~np.isfinite(window)
    frames = whole_segments(np.where(unbounded, 0.0, window), np.asarray(segment) + FRAME_OVERHEAD_BYTES)
    clamped = np.clip(frames, bounds.cwnd_low, bounds.cwnd_high).astype(np.int64)
    return np.where(unbounded, 0, clamped)


def lossless_initcwnd_segments(cwnd_clamp: ArrayLike, published_initcwnd: ArrayLike,
                               bounds: Bounds = Bounds()) -> np.ndarray:
    """initcwnd for otcp-lossless: the whole window at once, since the buffer absorbs it.

    Where nothing clamps the window (no switch egress), the published initial window.
    """
    cwnd = np.asarray(cwnd_clamp)
    whole = np.clip(cwnd, bounds.initcwnd_low, bounds.initcwnd_high)
    return np.where(cwnd == 0, published_initcwnd, whole).astype(np.int64)


def lossless_quickack(cwnd_clamp_back: ArrayLike) -> np.ndarray:
    """otcp-lossless: whether a receiver acknowledges every segment at once (the quickack
    route attribute, on its route toward the sender), given the clamp of the sender's path
    toward it: only where that window is a single segment, which a delayed ACK would hold
    for the delayed-ACK timer. From 2 segments on, Linux acknowledges every second full
    segment at once anyway, and quickack only doubles the ACKs: packets the switch forwards
    and both kernels handle. No clamp (0) is not a single segment. The published formulas
    keep quickack on every route."""
    return np.asarray(cwnd_clamp_back) == 1


def advmss_bytes(segment: ArrayLike, bounds: Bounds = Bounds()) -> np.ndarray:
    """The advmss route attribute that makes the peer send `segment` payloads, or 0 ("not
    set") where the segment is the configured MSS (the kernel's own choice stands)."""
    payload = np.asarray(segment, dtype=np.int64)
    return np.where(payload >= bounds.mss_bytes, 0, payload + TIMESTAMP_OPTION_BYTES)


#: The largest pacing rate a route may carry (bytes/s): what SO_MAX_PACING_RATE
#: takes from BPF (otcp.wire.limits.PACING_RATE; otcp.bpf.sockops.MAX_PACING_RATE).
MAX_PACING_RATE_BYTES_PER_S = PACING_RATE[1]
#: The smallest (bytes/s).
PACING_RATE_LOW_BYTES_PER_S = PACING_RATE[0]


def pacing_rate_bytes_per_s(fair_share_bytes_per_s: ArrayLike, pacing: Pacing = Pacing()) -> np.ndarray:
    """otcp-paced: each flow paced at its fair share of the path's bottleneck, plus headroom.

    fair_share_bytes_per_s is ``min over the path's links l of cap_l / N_l``,
    the same share the initial window uses: N_l flows (this one counted) on
    a link of capacity cap_l each get cap_l / N_l if it is split evenly, and
    a flow can go no faster than its share at the tightest link of its path.
    The rate is that times (1 + headroom), in whole bytes/s (rounded down:
    the larger rate is the side that queues), at least 1 and at most
    MAX_PACING_RATE_BYTES_PER_S. The headroom keeps the N paced flows' sum
    just above the link's capacity, so the bottleneck stays busy when a
    pacer runs a little slow; what the sum adds beyond the capacity stands
    in the queue, bounded there by the window clamp.
    """
    whole = np.floor(np.minimum(paced_share(fair_share_bytes_per_s, pacing), MAX_PACING_RATE_BYTES_PER_S) + 1e-6)
    return np.clip(whole, PACING_RATE_LOW_BYTES_PER_S, MAX_PACING_RATE_BYTES_PER_S).astype(np.int64)


def paced_share(fair_share_bytes_per_s: ArrayLike, pacing: Pacing = Pacing()) -> np.ndarray:
    """The fair share times (1 + headroom): the pacing rate before it is made whole and bounded."""
    # Shares are around 1e6..1e10 bytes/s: a float product lands a few ulps (< 1e-5) beside a whole number
    # (pacing_rate_bytes_per_s adds 1e-6 before taking the floor).
    return np.asarray(fair_share_bytes_per_s, dtype=float) * (1 + pacing.headroom)


# -- long fat paths: Scalable TCP and GridDT (docs/longpaths.md) --------------------------

#: Scalable TCP's constants (Kelly): above the legacy window, cwnd grows by
#: SCALABLE_A per segment acknowledged and loses SCALABLE_B of itself per
#: window with a loss; at or below SCALABLE_LWND_SEGMENTS, standard AIMD.
SCALABLE_A = 0.01
SCALABLE_B = 0.125
SCALABLE_LWND_SEGMENTS = 16
#: The initial ssthresh otcp_scalable accepts from its map (segments): the
#: kernel's floor of 2, and below the program's sane-window bound of 2^20.
SSTHRESH_SEGMENTS = SSTHRESH
#: The largest GridDT additive increase A the formulas give (segments per
#: round trip): a flow 8 times the reference's round trip; otcp_scalable's
#: map holds up to 255.
GRIDDT_INCREASE_HIGH = 64  # within the wire's INCREASE


def _positive(name: str, value: object) -> np.ndarray:
    """``value`` as a float array, refused unless every element is a finite
    number above 0 (NaN, inf, bools and text are bad input)."""
    if isinstance(value, bool | str | bytes):
        raise ValueError(f"{name} must be a number, got {value!r}")
    array = np.asarray(value)
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"{name} must be a number, got {value!r}")
    array = array.astype(float)
    if not np.all(np.isfinite(array)) or not np.all(array > 0):
        raise ValueError(f"{name} must be finite and above 0, got {value!r}")
    return array


def is_long_fat_path(bdp_bytes: ArrayLike, threshold_bytes: ArrayLike) -> np.ndarray:
    """Whether a path's bandwidth-delay product exceeds ``threshold_bytes``:
    where AIMD's one segment per round trip takes long to refill the pipe
    after a loss (:func:`responsiveness_seconds`) and otcp_scalable pays.
    RFC 1072's "long fat network" is 10^5 bits (12 500 B); the planner picks
    its own threshold. A BDP of 0 (nothing to fill) is not long and fat."""
    bdp = np.asarray(bdp_bytes, dtype=float)
    if isinstance(bdp_bytes, bool) or not np.all(np.isfinite(bdp)) or not np.all(bdp >= 0):
        raise ValueError(f"bdp_bytes must be finite and at least 0, got {bdp_bytes!r}")
    return bdp > _positive("threshold_bytes", threshold_bytes)


def initial_ssthresh_segments(fair_share_bytes_per_s: ArrayLike, rtt_s: ArrayLike,
                              mss_bytes: ArrayLike = DEFAULT_MSS_BYTES, low: int = SSTHRESH_SEGMENTS[0],
                              high: int = SSTHRESH_SEGMENTS[1]) -> np.ndarray:
    """An initial slow-start threshold from the path's share of the BDP:
    floor(fair share x RTT / MSS) segments, within [low, high].

    fair_share_bytes_per_s is min over the path's links of cap_l / N_l (as
    :func:`initial_window_bytes` takes it) and rtt_s the path's round trip.
    Slow start then ends where the flow's share of the pipe is full, instead
    of doubling past it into the buffer (the multi-segment losses of an
    overshoot); congestion avoidance takes it from there.
    """
    if not (isinstance(low, int) and isinstance(high, int) and not isinstance(low, bool)
            and not isinstance(high, bool) and SSTHRESH_SEGMENTS[0] <= low <= high <= SSTHRESH_SEGMENTS[1]):
        raise ValueError(f"ssthresh bounds must be whole segments with {SSTHRESH_SEGMENTS[0]} <= low <= high <= "
                         f"{SSTHRESH_SEGMENTS[1]}, got {low!r}..{high!r}")
    bdp = _positive("fair_share_bytes_per_s", fair_share_bytes_per_s) * _positive("rtt_s", rtt_s)
    segments = np.floor(bdp / _positive("mss_bytes", mss_bytes) + _ROUNDING_SLACK)
    return np.clip(segments, low, high).astype(np.int64)


def griddt_increase(rtt_s: ArrayLike, reference_rtt_s: ArrayLike, reference_increase: ArrayLike = 1,
                    high: int = GRIDDT_INCREASE_HIGH) -> np.ndarray:
    """GridDT's additive increase A (segments per round trip) for a
    connection of round trip ``rtt_s``, so that AIMD flows of different round
    trips through one bottleneck get equal rates: A = reference_increase x
    (rtt / reference_rtt)^2, rounded, within [1, high].

    Why the square: an AIMD flow that adds A segments per round trip and
    halves on a loss holds a mean window of about sqrt(1.5 A / p) segments at
    loss rate p, so its rate is sqrt(1.5 A / p) x MSS / RTT; flows sharing a
    bottleneck see the same p, and equal rates need sqrt(A) / RTT equal,
    A proportional to RTT^2. Kelly, Ravot and Martin-Flatin (TERENA 2003)
    ran A = 3 at 117 ms beside A = 7 at 181 ms: 3 x (181 / 117)^2 = 7.18.
    The connection with the shortest round trip is the natural reference
    (A = 1: standard TCP); the rest grow faster.
    """
    if isinstance(high, bool) or not isinstance(high, int) or not 1 <= high <= GRIDDT_INCREASE_HIGH:
        raise ValueError(f"high must be a whole number of segments in 1..{GRIDDT_INCREASE_HIGH}, got {high!r}")
    ratio = _positive("rtt_s", rtt_s) / _positive("reference_rtt_s", reference_rtt_s)
    increase = _positive("reference_increase", reference_increase) * ratio**2
    # np.round rounds halves to even; A x.5 goes up, as "round" means to the reader.
    return np.clip(np.floor(increase + 0.5 + _ROUNDING_SLACK), 1, high).astype(np.int64)


def responsiveness_seconds(capacity_bytes_per_s: ArrayLike, rtt_s: ArrayLike, mss_bytes: ArrayLike = DEFAULT_MSS_BYTES,
                           increase_segments: ArrayLike = 1) -> np.ndarray:
    """AIMD's responsiveness: the time to use a link fully again after one
    loss, r = C x RTT^2 / (2 x inc x MSS).

    A flow filling the link holds W = C x RTT / MSS segments; the loss halves
    it, and it regains W / 2 at ``increase_segments`` per round trip. C is
    in bytes/s (the seconds-bytes-bytes/s units of this module). At RTT
    200 ms and MSS 1 460 B: 171 s at 100 Mb/s, 71 min at 2.5 Gb/s, 4.76 h
    at 10 Gb/s (Kelly, Ravot and Martin-Flatin: 3 min, 1 h 10 min, 4 h 45 min).
    """
    capacity = _positive("capacity_bytes_per_s", capacity_bytes_per_s)
    rtt = _positive("rtt_s", rtt_s)
    return capacity * rtt**2 / (2 * _positive("increase_segments", increase_segments)
                                 * _positive("mss_bytes", mss_bytes))


def scalable_recovery_rtts(a: ArrayLike = SCALABLE_A, b: ArrayLike = SCALABLE_B) -> np.ndarray:
    """Scalable TCP's recovery after one loss, in round trips:
    log(1 / (1 - b)) / log(1 + a), 13.42 for (a, b) = (0.01, 0.125).

    Each round trip acknowledges cwnd segments and adds a per segment, so the
    window grows by the factor 1 + a per round trip; a loss leaves 1 - b of
    it. The time is the same at every capacity (above the legacy window).
    """
    cut = _positive("b", b)
    if not np.all(cut < 1):
        raise ValueError(f"b must be a share of the window in (0, 1), got {b!r}")
    return np.log(1 / (1 - cut)) / np.log1p(_positive("a", a))


def scalable_recovery_seconds(rtt_s: ArrayLike, a: ArrayLike = SCALABLE_A, b: ArrayLike = SCALABLE_B) -> np.ndarray:
    """Scalable TCP's recovery after one loss, in seconds: rtt x
    :func:`scalable_recovery_rtts` (2.7 s at 200 ms; "3 s" in Kelly, Ravot
    and Martin-Flatin)."""
    return _positive("rtt_s", rtt_s) * scalable_recovery_rtts(a, b)


def long_path_settings(bottleneck_bytes_per_s: ArrayLike, fair_share_bytes_per_s: ArrayLike, rtt_s: ArrayLike,
                       long_paths: LongPaths, mss_bytes: int = DEFAULT_MSS_BYTES
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per path: (long: its BDP, bottleneck capacity x rtt, exceeds the threshold; the initial
    ssthresh in segments, 0 where not long; GridDT's A, 0 where not long or without griddt).

    The planner's and the controller's one rule (docs/design.md, "Long fat paths"): a path
    that is not long gets nothing, so its route is what it was without the setting."""
    bdp = np.asarray(bottleneck_bytes_per_s, dtype=float) * np.asarray(rtt_s, dtype=float)
    long = is_long_fat_path(np.where(np.isfinite(bdp), bdp, 0.0), long_paths.bdp_threshold_bytes)
    _positive("mss_bytes", mss_bytes)  # refused whether or not a path is long
    if not long.any():  # a data centre's paths: none is long, none gets anything
        nothing = np.zeros(np.shape(long), dtype=np.int64)
        return long, nothing, nothing.copy()
    # Evaluated on every path with harmless stand-ins where not long (a zero round trip or share).
    rtt = np.where(long, rtt_s, 1.0)
    share = np.where(long, fair_share_bytes_per_s, 1.0)
    ssthresh = np.where(long, initial_ssthresh_segments(share, rtt, mss_bytes), 0)
    increase = (np.where(long, griddt_increase(rtt, long_paths.reference_rtt_s, long_paths.reference_increase), 0)
                if long_paths.griddt else np.zeros(np.shape(long), dtype=np.int64))
    return long, ssthresh.astype(np.int64), increase.astype(np.int64)
