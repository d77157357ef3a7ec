"""The planner's per-pair parameters as the scenario program's per-connection settings.

A host's TCP toward a peer takes what a Linux host takes from its route toward that peer and from
the agent's BPF (docs/design.md, "Parameter set"; docs/enforcement.md):

- ``rto_min_ms`` -> rto_min (the scenario's Linux RTO: SRTT + RTTVAR, RTTVAR >= rto_min);
- ``initcwnd`` -> the initial window (at most the clamp, as tcp_init_cwnd has it);
- ``cwnd_clamp`` -> the window clamp (snd_cwnd_clamp); with the agents' BPF it also sets ssthresh
  and established connections follow a new clamp, and a new pacing rate, at their next RTT sample;
- ``advmss`` on the *peer's* route toward this host -> the segment this host sends (advmss less the
  12 bytes of the timestamp option, which the kernel takes out of an advertised MSS);
- ``pacing_rate`` (bytes/s) -> SO_MAX_PACING_RATE (bits/s in ns-3);
- ``quickack`` -> this host acknowledges the peer's every segment at once (no delayed ACKs).

A static scheme's hosts take Linux's defaults with the scheme's rto_min.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence
from typing import Any

from otcp.planning import formulas
from otcp.wire.paramset import RouteParams

LINUX_INITCWND = 10


@dataclasses.dataclass(frozen=True)
class ConnSettings:
    """What one host's TCP takes toward one peer (the scenario program's ConnSettings)."""

    rto_min_us: int
    initcwnd: int = LINUX_INITCWND
    clamp_segments: int = 0
    clamp_sets_ssthresh: bool = False
    follows: bool = False
    segment_bytes: int = formulas.DEFAULT_MSS_BYTES
    pacing_bps: int = 0
    quickack: bool = False
    rcv_window_bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        """The settings as the scenario reads them."""
        return dataclasses.asdict(self)


def longest_match(routes: Sequence[RouteParams], address: str) -> RouteParams | None:
    """The route of a parameter set that longest-prefix match picks for address (None: no route)."""
    target = ipaddress.ip_address(address)
    best: tuple[int, RouteParams] | None = None
    for route in routes:
        network = ipaddress.ip_network(route.dst)
        if target in network and (best is None or network.prefixlen > best[0]):
            best = (network.prefixlen, route)
    return None if best is None else best[1]


def planned(toward: RouteParams, back: RouteParams | None, bpf: bool, mss_bytes: int = formulas.DEFAULT_MSS_BYTES
            ) -> ConnSettings:
    """A host's settings toward a peer from its route toward the peer (toward) and the peer's route
    toward it (back: its advmss sets this host's segment; None: the kernel's MSS); bpf: the agents'
    BPF enforces them (ssthresh with the clamp, established connections follow)."""
    advmss = back.advmss if back is not None else None
    return ConnSettings(
        rto_min_us=toward.rto_min_ms * 1000,
        initcwnd=toward.initcwnd,
        clamp_segments=toward.cwnd_clamp or 0,
        clamp_sets_ssthresh=bpf,
        follows=bpf,
        segment_bytes=min(int(advmss) - formulas.TIMESTAMP_OPTION_BYTES, mss_bytes) if advmss else mss_bytes,
        pacing_bps=(toward.pacing_rate or 0) * 8,
        quickack=toward.quickack)


def static(rto_min_ms: int, rcv_window_bytes: int = 0) -> ConnSettings:
    """Linux's defaults with a static rto_min (and a static receive window, 0: autotuned)."""
    return ConnSettings(rto_min_us=rto_min_ms * 1000, rcv_window_bytes=rcv_window_bytes)


def static_rwnd_bytes(rate_bps: float, rtt_s: float, buffer_bytes: float, senders: int,
                      mss_bytes: int = formulas.DEFAULT_MSS_BYTES) -> int:
    """IMC 2024's static receive window (formulas.static_rwnd_bytes) for a bottleneck of rate_bps:
    the fair share of its BDP plus its buffer, (C x RTT + B) / N, in whole segments, at least one."""
    capacity = formulas.capacity_bytes_per_s(rate_bps / 1e6)
    return int(formulas.static_rwnd_bytes(capacity, rtt_s, buffer_bytes, senders, mss_bytes))
