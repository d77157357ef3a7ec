"""The formulas evaluated one pair at a time, straight from docs/design.md, "Formulas".

Slow and obvious on purpose: the tests use it as the oracle for the
vectorised planner, and benchmarks/plan_scale.py as its baseline.
"""

import math

from ryu_app import formulas
from ryu_app.paths import SwitchPaths


class ReferencePlanner:
    """Per-pair evaluation over the same forwarding paths the planner uses."""

    def __init__(self, fabric, bounds=formulas.Bounds()):
        self.fabric = fabric
        self.bounds = bounds
        self.switch_paths = SwitchPaths(fabric.switches, fabric.switch_links())
        self.attachment = fabric.attachments()
        self.flows_on = {}
        for (src, dst), count in fabric.flows.items():
            path = self.host_path(src, dst)
            for link in zip(path or [], (path or [])[1:]):
                self.flows_on[link] = self.flows_on.get(link, 0) + count

    def host_path(self, src, dst):
        """Node names from host src to host dst, or None if unreachable."""
        middle = self.switch_paths.path(self.attachment[src], self.attachment[dst])
        return None if middle is None else [src, *middle, dst]

    def pair(self, src, dst):
        """(min_rto_s, rto_min_ms, initcwnd, cwnd_clamp) or None if no path."""
        path = self.host_path(src, dst)
        if path is None:
            return None
        forward = list(zip(path, path[1:]))
        round_trip = forward + [(v, u) for (u, v) in reversed(forward)]
        facts = self.fabric.links
        rtt = sum(facts[link].delay_s for link in round_trip)
        queueing = sum(facts[link].buffer_bytes / facts[link].capacity_bytes_per_s for link in round_trip)
        own = self.fabric.flows.get((src, dst), 0) > 0
        shares, maxima = [], []
        for link in forward:
            flows = self.flows_on.get(link, 0)
            sharing = flows if own else flows + 1
            shares.append(facts[link].capacity_bytes_per_s / sharing)
            if link[0] not in self.fabric.hosts:
                maxima.append((facts[link].capacity_bytes_per_s * rtt + facts[link].buffer_bytes) / sharing)
        min_rto = rtt + queueing
        return (
            min_rto,
            int(formulas.rto_min_ms(min_rto, self.bounds)),
            int(formulas.initcwnd_segments(min(shares) * rtt, self.bounds)),
            int(formulas.cwnd_clamp_segments(min(maxima, default=math.inf), self.bounds)),
        )
