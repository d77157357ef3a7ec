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
import weakref
from collections.abc import Iterable

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

    With previous (the paths of the same switches a moment ago) and only
    links taken away since, only the pairs whose path crossed a removed link
    are computed again, the same way, one hop count at a time: every other
    path is still among the fewest hops (no path got shorter) and still the
    cheapest of them, so it is where the others start from. kept_from is
    previous then (weakly held), and changed the (sources, targets) index
    arrays of the pairs computed again; else both are None (all is new).
    """

    def __init__(self, switches: Iterable[str], switch_links: Iterable[tuple[str, str]],
                 previous: "SwitchPaths | None" = None) -> None:
        self.switches = sorted(switches)
        self.index = {name: i for i, name in enumerate(self.switches)}
        self.links = frozenset((a, b) if a < b else (b, a) for a, b in switch_links
                               if a in self.index and b in self.index and a != b)
        self._neighbours()
        self.kept_from: weakref.ref[SwitchPaths] | None = None
        self.changed: tuple[np.ndarray, np.ndarray] | None
        if previous is not None and previous.switches == self.switches and self.links <= previous.links:
            self.kept_from = weakref.ref(previous)
            self.changed = previous._pairs_over(previous.links - self.links)
            self._repair(previous, *self.changed)
        else:
            self.changed = None
            self._compute()

    def _neighbours(self) -> None:
        """The neighbour and tie-breaking weight tables (switches x most links of one switch)."""
        count = len(self.switches)
        neighbours: list[list[tuple[int, int]]] = [[] for _ in range(count)]
        for a, b in sorted(self.links):
            weight = tie_breaker(a, b)
            neighbours[self.index[a]].append((self.index[b], weight))
            neighbours[self.index[b]].append((self.index[a], weight))
        degree = max((len(n) for n in neighbours), default=0) or 1
        # Column `count` of the cost and hop tables is a sentinel that is never reached.
        self._neighbour = np.full((count, degree), count, dtype=np.int64)
        self._weight = np.full((count, degree), np.inf)
        for i, row in enumerate(neighbours):
            for k, (j, w) in enumerate(row):
                self._neighbour[i, k], self._weight[i, k] = j, w

    def _compute(self) -> None:
        """Every pair's path, all sources at once."""
        count = len(self.switches)
        neighbour, weight = self._neighbour, self._weight
        hops = np.full((count, count + 1), UNREACHABLE, dtype=np.int32)
        np.fill_diagonal(hops, 0)
        cost = np.full((count, count + 1), np.inf)
        np.fill_diagonal(cost, 0.0)
        before = np.full((count, count), UNREACHABLE, dtype=np.int64)  # the switch before j on i's path to j
        layers = []
        layer = 0
        while count:
            layer += 1
            reached = np.where(hops == layer - 1, cost, np.inf)
            candidates = reached[:, neighbour] + weight[None, :, :]  # (source, switch, neighbour)
            best = candidates.argmin(axis=-1)
            value = np.take_along_axis(candidates, best[..., None], axis=-1)[..., 0]
            new = np.isfinite(value) & (hops[:, :count] == UNREACHABLE)
            if not new.any():
                break
            hops[:, :count][new] = layer
            cost[:, :count][new] = value[new]
            before[new] = neighbour[np.nonzero(new)[1], best[new]]
            layers.append(new)
        self.hops, self._cost = np.ascontiguousarray(hops[:, :count]), cost
        self.node_matrix = np.full((count, count, max(layer, 1)), UNREACHABLE, dtype=np.int32)
        self.node_matrix[np.arange(count), np.arange(count), 0] = np.arange(count)
        for hop, new in enumerate(layers, start=1):
            sources, targets = np.nonzero(new)
            self.node_matrix[sources, targets, :hop] = self.node_matrix[sources, before[sources, targets], :hop]
            self.node_matrix[sources, targets, hop] = targets

    def _repair(self, previous: "SwitchPaths", sources: np.ndarray, targets: np.ndarray) -> None:
        """The paths of previous, with the pairs sources[k] -> targets[k] computed
        again over the links left, in order of their new hop count."""
        hops = np.pad(previous.hops, ((0, 0), (0, 1)), constant_values=UNREACHABLE)  # the sentinel column again
        cost, nodes = previous._cost.copy(), previous.node_matrix.copy()
        hops[sources, targets], cost[sources, targets], nodes[sources, targets] = UNREACHABLE, np.inf, UNREACHABLE
        pending = np.arange(len(sources))
        layer = int(previous.hops[sources, targets].min(initial=1))  # no path got shorter
        while len(pending) and layer <= hops.max() + 1:
            i, j = sources[pending], targets[pending]
            around = self._neighbour[j]  # (pairs, neighbours)
            candidates = np.where(hops[i[:, None], around] == layer - 1, cost[i[:, None], around], np.inf) \
                + self._weight[j]
            best = candidates.argmin(axis=-1)
            value = candidates[np.arange(len(pending)), best]
            found = np.isfinite(value)
            i, j, via = i[found], j[found], around[found, best[found]]
            if layer >= nodes.shape[-1]:
                nodes = _padded(nodes, layer + 1)
            hops[i, j], cost[i, j] = layer, value[found]
            nodes[i, j, :layer] = nodes[i, via, :layer]
            nodes[i, j, layer] = j
            pending = pending[~found]
            layer += 1
        self.hops, self._cost, self.node_matrix = np.ascontiguousarray(hops[:, :-1]), cost, nodes

    def _pairs_over(self, links: Iterable[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
        """The (sources, targets) index arrays of the pairs whose path crosses any of links (either way)."""
        if not links or self.node_matrix.shape[-1] < 2:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        count = len(self.switches)
        codes = [self.index[a] * count + self.index[b] for a, b in links] + \
                [self.index[b] * count + self.index[a] for a, b in links]
        tails, heads = self.node_matrix[:, :, :-1].astype(np.int64), self.node_matrix[:, :, 1:]
        crossed = np.isin(np.where(heads >= 0, tails * count + heads, -1), codes)
        sources, targets = np.nonzero(crossed.any(axis=-1))
        return sources, targets

    def path(self, a: str, b: str) -> list[str] | None:
        """Switch names from a to b inclusive, or None if unreachable."""
        i, j = self.index[a], self.index[b]
        if self.hops[i, j] == UNREACHABLE:
            return None
        return [self.switches[k] for k in self.node_matrix[i, j, : self.hops[i, j] + 1]]

    def next_hops(self) -> np.ndarray:
        """(switches x switches) index of the next switch on i's path to j; UNREACHABLE at j itself or with no path."""
        if self.node_matrix.shape[-1] < 2:
            return np.full(self.hops.shape, UNREACHABLE, dtype=np.int32)
        return np.where(self.hops > 0, self.node_matrix[:, :, 1], UNREACHABLE)


def _padded(nodes: np.ndarray, longest: int) -> np.ndarray:
    """A node matrix with room for paths of longest switches (a copy, padded with UNREACHABLE)."""
    return np.pad(nodes, ((0, 0), (0, 0), (0, longest - nodes.shape[-1])), constant_values=UNREACHABLE)
