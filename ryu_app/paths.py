"""Forwarding paths: one shortest path per switch pair, the same both ways,
and the paths toward any one switch forming a tree.

The controller installs these paths and the planner evaluates the formulas
over them, so both must agree. Two properties make them installable as one
entry per destination on each switch (docs/design.md, "Architecture"):

- the path from b to a is the reverse of the path from a to b, so ACKs
  retrace the data path;
- a path's tail is the path from where it is: every switch forwards toward
  a destination the same way whoever sent the packet.

Both hold because each path is the unique cheapest among the fewest-hop
paths, under a tie-breaking weight per link taken from a hash of its two
switch names (so it does not change when other links come and go, and
equal-cost multipath fabrics spread destinations over their cores).
"""

import hashlib

import numpy as np

UNREACHABLE = -1
# Tie-breaking weights are integers below 2**_WEIGHT_BITS: sums along any
# path stay exact in float64 and two different paths tie with negligible odds.
_WEIGHT_BITS = 40


def tie_breaker(a: str, b: str) -> int:
    """The tie-breaking weight of the link between switches a and b (either order)."""
    low, high = sorted((a, b))
    digest = hashlib.blake2b(f"{low}\0{high}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - _WEIGHT_BITS)


class SwitchPaths:
    """Shortest switch-level paths between every pair of switches.

    node_matrix[i, j, :hops[i, j] + 1] holds the switch indices of the path
    from switch i to switch j; hops is UNREACHABLE where there is none.
    Computed for all sources at once, one hop count at a time: a switch j
    first reached at h hops takes, of its neighbours reached at h - 1, the
    one whose path plus the link's tie-breaking weight is cheapest.
    """

    def __init__(self, switches, switch_links):
        self.switches = sorted(switches)
        self.index = {name: i for i, name in enumerate(self.switches)}
        count = len(self.switches)
        neighbours: list[list[tuple[int, int]]] = [[] for _ in range(count)]
        for a, b in sorted({tuple(sorted(link)) for link in switch_links}):
            if a in self.index and b in self.index and a != b:
                weight = tie_breaker(a, b)
                neighbours[self.index[a]].append((self.index[b], weight))
                neighbours[self.index[b]].append((self.index[a], weight))
        degree = max((len(n) for n in neighbours), default=0) or 1
        # Column `count` of cost is a sentinel that is never reached.
        neighbour = np.full((count, degree), count, dtype=np.int64)
        weight = np.full((count, degree), np.inf)
        for i, row in enumerate(neighbours):
            for k, (j, w) in enumerate(row):
                neighbour[i, k], weight[i, k] = j, w
        self.hops = np.full((count, count), UNREACHABLE, dtype=np.int32)
        np.fill_diagonal(self.hops, 0)
        cost = np.full((count, count + 1), np.inf)
        cost[np.arange(count), np.arange(count)] = 0.0
        before = np.full((count, count), UNREACHABLE, dtype=np.int64)  # the switch before j on i's path to j
        layers = []
        layer = 0
        while count:
            layer += 1
            reached = np.where(np.pad(self.hops, ((0, 0), (0, 1)), constant_values=UNREACHABLE) == layer - 1,
                               cost, np.inf)
            candidates = reached[:, neighbour] + weight[None, :, :]  # (source, switch, neighbour)
            best = candidates.argmin(axis=-1)
            value = np.take_along_axis(candidates, best[..., None], axis=-1)[..., 0]
            new = np.isfinite(value) & (self.hops == UNREACHABLE)
            if not new.any():
                break
            self.hops[new] = layer
            cost[:, :count][new] = value[new]
            before[new] = neighbour[np.nonzero(new)[1], best[new]]
            layers.append(new)
        self.node_matrix = np.full((count, count, max(layer, 1)), UNREACHABLE, dtype=np.int32)
        self.node_matrix[np.arange(count), np.arange(count), 0] = np.arange(count)
        for hop, new in enumerate(layers, start=1):
            sources, targets = np.nonzero(new)
            self.node_matrix[sources, targets, :hop] = self.node_matrix[sources, before[sources, targets], :hop]
            self.node_matrix[sources, targets, hop] = targets

    def path(self, a, b):
        """Switch names from a to b inclusive, or None if unreachable."""
        i, j = self.index[a], self.index[b]
        if self.hops[i, j] == UNREACHABLE:
            return None
        return [self.switches[k] for k in self.node_matrix[i, j, : self.hops[i, j] + 1]]

    def next_hops(self):
        """(switches x switches) index of the next switch on i's path to j; UNREACHABLE at j itself or with no path."""
        if self.node_matrix.shape[-1] < 2:
            return np.full(self.hops.shape, UNREACHABLE, dtype=np.int32)
        return np.where(self.hops > 0, self.node_matrix[:, :, 1], UNREACHABLE)
