"""The OTCP parameter formulas (docs/design.md, "Formulas"), as pure functions.

Every function works on plain floats and on numpy arrays alike, so the offline
planner evaluates a million host pairs at once with the same code the live
controller uses for a handful. Units: seconds, bytes and bytes per second.
"""

from dataclasses import dataclass

import numpy as np

#: Defaults, defined here once: the segment size, and the facts of a link
#: neither the inventory nor a measurement describes.
DEFAULT_MSS_BYTES = 1448
DEFAULT_CAPACITY_MBPS = 1000
DEFAULT_BUFFER_BYTES = 131072
DEFAULT_LINK_DELAY_US = 10

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

    def __post_init__(self):
        if self.mss_bytes <= 0:
            raise ValueError(f"mss_bytes must be positive, got {self.mss_bytes}")
        for name in ("rto_min_ms", "initcwnd", "cwnd"):
            low, high = getattr(self, name + "_low"), getattr(self, name + "_high")
            if not 1 <= low <= high:
                raise ValueError(f"{name} bounds must satisfy 1 <= low <= high, got {low}..{high}")


def capacity_bytes_per_s(capacity_mbps):
    """Link capacity in bytes/s from Mb/s (Mb/s x 1e6 / 8)."""
    return capacity_mbps * 1e6 / 8


def flows_sharing(active_flows_on_link, pair_is_active):
    """N_l(s,d): the flows on a link counting the pair being configured once."""
    return np.where(pair_is_active, active_flows_on_link, active_flows_on_link + 1)


def min_rto_seconds(rtt_prop_s, queueing_s):
    """minRTO: the round trip with every queue on the way full.

    rtt_prop_s is the sum of one-way delays over the round trip R(s,d);
    queueing_s is the sum of buf_l / cap_l over the same links.
    """
    return rtt_prop_s + queueing_s


def initial_window_bytes(fair_share_bytes_per_s, rtt_prop_s):
    """The flow's fair share of the BDP: min(cap_l / N_l) x RTT_prop."""
    return fair_share_bytes_per_s * rtt_prop_s


def max_window_bytes(share_of_capacity, share_of_buffer, rtt_prop_s):
    """min over the path's switch egresses of (cap_l x RTT_prop + buf_l) / N_l.

    share_of_capacity and share_of_buffer hold cap_l / N_l and buf_l / N_l
    along the last axis (one column per link). Columns padded with a capacity
    share of 0 and a buffer share of +inf drop out of the minimum.
    """
    rtt = np.asarray(rtt_prop_s, dtype=float)[..., np.newaxis]
    return np.min(share_of_capacity * rtt + share_of_buffer, axis=-1)


def rto_min_ms(min_rto_s, bounds=Bounds()):
    """rto_min route attribute: ceil(min_rto in ms), clamped."""
    ms = np.ceil(np.asarray(min_rto_s, dtype=float) * 1e3 - _ROUNDING_SLACK)
    return np.clip(ms, bounds.rto_min_ms_low, bounds.rto_min_ms_high).astype(np.int64)


def initcwnd_segments(iw_bytes, bounds=Bounds()):
    """initcwnd route attribute: floor(iw / MSS), clamped."""
    segments = np.floor(np.asarray(iw_bytes, dtype=float) / bounds.mss_bytes + _ROUNDING_SLACK)
    return np.clip(segments, bounds.initcwnd_low, bounds.initcwnd_high).astype(np.int64)


def cwnd_clamp_segments(max_bytes, bounds=Bounds()):
    """cwnd (locked) route attribute: floor(max / MSS), clamped.

    A path with no switch egress (no buffer that can overflow) has an
    unbounded window, returned as 0: "no clamp".
    """
    max_bytes = np.asarray(max_bytes, dtype=float)
    unbounded = ~np.isfinite(max_bytes)
    finite = np.where(unbounded, 0.0, max_bytes)
    segments = np.floor(finite / bounds.mss_bytes + _ROUNDING_SLACK)
    clamped = np.clip(segments, bounds.cwnd_low, bounds.cwnd_high).astype(np.int64)
    return np.where(unbounded, 0, clamped)


def seconds_to_us(seconds):
    """Microseconds rounded to 1 ns, as the plan output shows them."""
    return round(float(seconds) * 1e6, 3)

