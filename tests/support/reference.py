"""The formulas evaluated one pair at a time, straight from docs/design.md, "Formulas".

Slow and obvious on purpose: the tests use it as the oracle for the
vectorised planner, and benchmarks/plan_scale.py as its baseline.
"""

import math

from otcp.planning import formulas
from otcp.planning.paths import HostPaths, SwitchPaths


class ReferencePlanner:
    """Per-pair evaluation over the same forwarding paths the planner uses: a pair's data goes
    along its destination's tree, its ACKs along its source's (otcp.planning.paths.HostPaths)."""

    def __init__(self, fabric, bounds=formulas.Bounds(), lossless=formulas.Lossless(), pacing=formulas.Pacing(),
                 long_paths=formulas.LongPaths(), multipath=True):
        self.fabric = fabric
        self.long_paths = long_paths
        self.bounds = bounds
        self.lossless = lossless
        self.pacing = pacing
        self.switch_paths = SwitchPaths(fabric.switches, fabric.switch_links())
        self.attachment = fabric.attachments()
        self.host_paths = HostPaths(self.switch_paths, self.attachment, multipath)
        self.flows_on = {}
        flows_toward = {}  # (link, destination): that destination's flows on the link
        for (src, dst), count in fabric.flows.items():
            path = self.host_path(src, dst)
            for link in zip(path or [], (path or [])[1:]):
                self.flows_on[link] = self.flows_on.get(link, 0) + count
                flows_toward[link, dst] = flows_toward.get((link, dst), 0) + count
        # The flows N_l counts: with admission, at most K of each destination's at once.
        self.counted_on = dict(self.flows_on)
        if lossless is not None and lossless.fan_in_admission:
            self.counted_on = {}
            for (link, dst), count in flows_toward.items():
                self.counted_on[link] = self.counted_on.get(link, 0) + min(count, self.admitted(dst))

    def host_path(self, src, dst):
        """The nodes from host src to host dst (hosts are addresses), or None if unreachable."""
        middle = self.host_paths.path(self.attachment[src], dst)
        return None if middle is None else [src, *middle, dst]

    def round_trip(self, src, dst, round_trip):
        """(RTT for the windows, RTT for minRTO): where the hosts measured one, their
        minimum (or the sum of the links' delays if smaller and none of them is a
        default) and their top; else that sum, and it plus the links' spreads."""
        facts = self.fabric.links
        rtt = sum(facts[link].delay_s for link in round_trip)
        measured = self.fabric.host_rtts.get((src, dst))
        if measured is not None:
            known = all(facts[link].delay_source in ("inventory", "measured") for link in round_trip)
            return (min(measured.low_s, rtt) if known else measured.low_s), measured.high_s
        return rtt, rtt + sum(facts[link].delay_spread_s for link in round_trip)

    def lossless_round_trip(self, src, dst, round_trip):
        """otcp-lossless: the RTT for the windows: the smallest of the minimums the hosts measured
        on the pair and on the path of any active pair into dst (then the links' sum if smaller and
        none of them is a default). A pair not measured itself takes them only where some link's
        delay is a default; else, and where there are none, as round_trip gives it."""
        facts = self.fabric.links
        rtt = sum(facts[link].delay_s for link in round_trip)
        known = all(facts[link].delay_source in ("inventory", "measured") for link in round_trip)
        own = self.fabric.host_rtts.get((src, dst))
        lows = [self.fabric.host_rtts[(sender, dst)].low_s for sender in self._active_senders(dst)
                if (sender, dst) in self.fabric.host_rtts]
        if own is not None:
            lows.append(own.low_s)
        elif known or not lows:
            return self.round_trip(src, dst, round_trip)[0]
        return min(*lows, rtt) if known else min(lows)

    def _active_senders(self, dst):
        """The hosts with an active flow to dst along a path."""
        return [sender for (sender, receiver), count in self.fabric.flows.items()
                if receiver == dst and count > 0 and sender != dst and self.host_path(sender, dst) is not None]

    def _links_of(self, src, dst):
        """(forward links, round-trip links, the RTT for windows, the RTT for minRTO), or None if no path."""
        path = self.host_path(src, dst)
        if path is None:
            return None
        back = self.host_path(dst, src)
        forward = list(zip(path, path[1:]))
        round_trip = forward + list(zip(back, back[1:]))
        return (forward, round_trip, *self.round_trip(src, dst, round_trip))

    def admitted(self, dst):
        """K: how many senders dst admits at once, the full frames (each with its ACK) that fit
        the fan-in budget of its downlink."""
        full_frame = self.bounds.mss_bytes + formulas.FRAME_OVERHEAD_BYTES
        buffer = self.fabric.links[(self.attachment[dst], dst)].buffer_bytes
        budget = buffer * self.lossless.fan_in_queue_fraction - full_frame
        return max(1, math.floor(max(budget, 0.0) / (full_frame + formulas.FRAME_OVERHEAD_BYTES) + 1e-9))

    def _sharing(self, src, dst, link):
        """N_l: the flows on link counting the pair (src, dst) once; with admission, each
        destination's at most K, and on dst's own downlink at most dst's K in all."""
        flows = self.counted_on.get(link, 0)
        sharing = flows if self.fabric.flows.get((src, dst), 0) > 0 else flows + 1
        if self.lossless is not None and self.lossless.fan_in_admission and link[1] == dst:
            sharing = min(sharing, self.admitted(dst))
        return max(sharing, 1)

    def pair(self, src, dst):
        """(min_rto_s, rto_min_ms, initcwnd, cwnd_clamp) or None if no path."""
        found = self._links_of(src, dst)
        if found is None:
            return None
        forward, round_trip, rtt, rtt_for_rto = found
        facts = self.fabric.links
        queueing = sum(facts[link].buffer_bytes / facts[link].capacity_bytes_per_s for link in round_trip)
        shares, maxima = [], []
        for link in forward:
            sharing = self._sharing(src, dst, link)
            shares.append(facts[link].capacity_bytes_per_s / sharing)
            if link[0] not in self.fabric.hosts:
                maxima.append((facts[link].capacity_bytes_per_s * rtt + facts[link].buffer_bytes) / sharing)
        min_rto = rtt_for_rto + queueing
        return (
            min_rto,
            int(formulas.rto_min_ms(min_rto, self.bounds)),
            int(formulas.initcwnd_segments(min(shares) * rtt, self.bounds)),
            int(formulas.cwnd_clamp_segments(min(maxima, default=math.inf), self.bounds)),
        )

    def lossless_pair(self, src, dst):
        """(initcwnd, cwnd_clamp, segment_bytes) by the otcp-lossless formulas, or None if no path.
        Where dst has active senders, the segment is the smallest their paths would take alone;
        else the path's own: the largest whose whole frames fill its window."""
        own = self._lossless_window_and_segment(src, dst)
        if own is None:
            return None
        window, segment = own
        if window is None:
            published_initcwnd = self.pair(src, dst)[2]
            return published_initcwnd, 0, segment
        active = [self._lossless_window_and_segment(sender, dst)[1] for sender in self._active_senders(dst)]
        segment = min(active, default=segment)
        frames = math.floor(window / (segment + formulas.FRAME_OVERHEAD_BYTES) + 1e-9)
        cwnd = max(self.bounds.cwnd_low, min(self.bounds.cwnd_high, frames))
        initcwnd = max(self.bounds.initcwnd_low, min(self.bounds.initcwnd_high, cwnd))
        return initcwnd, cwnd, segment

    def _lossless_window_and_segment(self, src, dst):
        """The otcp-lossless window of the path src -> dst in bytes on the wire (None: no switch
        egress, unbounded) and the segment that path alone would take; None if no path."""
        found = self._links_of(src, dst)
        if found is None:
            return None
        forward, round_trip, _, _ = found
        rtt = self.lossless_round_trip(src, dst, round_trip)
        facts = self.fabric.links
        windows, fan_in_shares = [], []
        mss = self.bounds.mss_bytes
        overhead = formulas.FRAME_OVERHEAD_BYTES
        for link in forward:
            if link[0] in self.fabric.hosts:
                continue
            sharing = self._sharing(src, dst, link)
            buffer = facts[link].buffer_bytes
            target = buffer * self.lossless.queue_target_fraction
            windows.append((facts[link].capacity_bytes_per_s * rtt + target) / sharing)
            # The high fan-in budget: g x buf_l, one full frame kept free for what no window counts,
            # and per flow the header-only ACK its sender returns right before its first window.
            budget = max(0.0, buffer * self.lossless.fan_in_queue_fraction - (mss + overhead))
            fan_in_shares.append(max(0.0, budget / sharing - overhead))
        if not windows:
            return None, mss
        window = min(windows)
        if window < mss + overhead:  # high fan-in: the queue may rise toward the buffer, up to a full frame each
            window = max(window, min(mss + overhead, min(fan_in_shares)))
        frames = min(self.bounds.cwnd_high, max(1, math.ceil(window / (mss + overhead) - 1e-9)))
        return window, max(self.lossless.mss_floor_bytes, min(mss, math.floor(window / frames + 1e-9) - overhead))

    def lossless_quickack(self, host, peer):
        """otcp-lossless: whether host's route toward peer carries quickack: where the window of
        the data path from peer to host is a single segment, or that path has none."""
        back = self.lossless_pair(peer, host)
        return back is None or back[1] == 1

    def pacing_rate(self, src, dst):
        """otcp-paced: the fair share at the path's bottleneck, min over its links of cap_l / N_l,
        times (1 + headroom), in whole bytes/s within 1..MAX_PACING_RATE_BYTES_PER_S; None if no path."""
        found = self._links_of(src, dst)
        if found is None:
            return None
        facts = self.fabric.links
        share = min(facts[link].capacity_bytes_per_s / self._sharing(src, dst, link) for link in found[0])
        rate = math.floor(min(share * (1 + self.pacing.headroom), formulas.MAX_PACING_RATE_BYTES_PER_S) + 1e-6)
        return max(1, min(formulas.MAX_PACING_RATE_BYTES_PER_S, rate))

    def long_path(self, src, dst):
        """(congctl, ssthresh, increase) of the path src -> dst, each None where not set: a path
        whose bottleneck capacity times its round trip (the windows') exceeds the threshold gets
        the congestion control, floor(fair share x RTT / MSS) segments within 2..2^20 - 1 and,
        with griddt, A = round(reference_increase x (RTT / reference RTT)^2) within 1..64;
        None if no path."""
        found = self._links_of(src, dst)
        if found is None:
            return None
        forward, _, rtt, _ = found
        facts, settings = self.fabric.links, self.long_paths
        bottleneck = min(facts[link].capacity_bytes_per_s for link in forward)
        if not bottleneck * rtt > settings.bdp_threshold_bytes:
            return None, None, None
        share = min(facts[link].capacity_bytes_per_s / self._sharing(src, dst, link) for link in forward)
        ssthresh = max(2, min(2**20 - 1, math.floor(share * rtt / self.bounds.mss_bytes + 1e-9)))
        increase = None
        if settings.griddt:
            exact = settings.reference_increase * (rtt / settings.reference_rtt_s) ** 2
            increase = max(1, min(64, math.floor(exact + 0.5 + 1e-9)))
        return settings.congctl, ssthresh, increase
