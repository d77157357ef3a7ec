"""Forwarding paths: one shortest path per switch pair, the same both ways,
and the paths toward any one switch forming a tree (SwitchPaths); and from
them, the forwarding toward each host (HostPaths), which spreads the hosts
over the equal-cost paths (multipath) or gives each its switch's path.

The controller installs the hosts' paths and the planner evaluates the formulas
over them, so both must agree. What makes them installable as one entry per
destination on each switch (docs/design.md, "Architecture"): a path's tail is
the path from where it is, so every switch forwards toward a destination the
same way whoever sent the packet. A switch pair's paths have it, and are the
same both ways, because each is the unique cheapest among the fewest-hop
paths, under a tie-breaking weight per link taken from a hash of its two
switch names (so it does not change when other links come and go). A host's
tree has it by construction (HostPaths); with multipath a pair's ACKs follow
its source's tree, not the reverse of its data path.
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
        while count and (hops[:, :count] == UNREACHABLE).any():  # a fabric in one piece: no last look at nothing
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
        self.node_matrix = np.full((count, count, len(layers) + 1), UNREACHABLE, dtype=np.int32)
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


#: The most ways into a switch HostPaths counts: past it, every host's key is smaller than the
#: count and takes the first choice there (products stay exact in int64).
_MOST_CHOICES = 1 << 40


class HostPaths:
    """Forwarding toward each host: from every switch, the next switch on its way there.

    The paths toward one host form a tree (every switch forwards toward it the same way
    whoever sent the packet), so a switch holds one entry per destination host. Every
    step goes to a neighbour one hop closer to the host's switch: every path is among
    the fewest hops. With multipath, the equal-cost paths are spread over the hosts,
    ECMP-like per destination, deterministically:

    - each host has a key: its rank among the hosts of its switch (by address) plus
      the rank of that switch among all switches times the most hosts any switch has;
    - a switch i with c neighbours closer to the host's switch j takes the one numbered
      (key // above) mod c, where above counts the distinct ways a packet toward j
      reaches i (the product of the choices of the switches before it, the most over
      the ways in). So the key's digits, farthest switch first, pick one of the
      equal-cost paths: the hosts of one switch leave every switch by different
      links (and arrive over different last links), and consecutive switches' hosts
      (a pod's) take the paths left, through every core.

    With previous (the forwarding of the same hosts a moment ago) and only links taken
    away since, a destination keeps its next hop at every switch whose distance to the
    destination's switch did not change and where that hop is still a link one hop
    closer; elsewhere it takes the rule's. So a failure moves only the trees that
    crossed the failed link (or whose distance grew), not every tree at the switches
    whose number of choices changed. What is kept then depends on the forwarding before;
    when links come (back), everything takes the rule's again, which is balanced.

    Without multipath, each host takes its switch's path (SwitchPaths: one per switch
    pair). A pair's data path follows the destination's tree and its ACKs the
    source's: the two need not cross the same switches.

    next_hop[d, i] is the index (in switch_paths.switches) of the next switch from
    switch i toward host d (hosts in sorted order), UNREACHABLE at d's own switch or
    with no path.
    """

    def __init__(self, switch_paths: SwitchPaths, attachment: dict[str, str], multipath: bool = True,
                 previous: "HostPaths | None" = None) -> None:
        self.switch_paths = switch_paths
        self.multipath = multipath
        self.attachment = dict(attachment)
        self.hosts = sorted(attachment)
        self.host_index = {host: i for i, host in enumerate(self.hosts)}
        self.attach = np.array([switch_paths.index[attachment[h]] for h in self.hosts], dtype=np.int64)
        if multipath and self.hosts:
            self.next_hop = self._spread(self.keys())
            if previous is not None:
                self.next_hop = self._kept_from(previous, self.next_hop)
        else:
            self.next_hop = np.ascontiguousarray(switch_paths.next_hops()[:, self.attach].T)

    def keys(self) -> np.ndarray:
        """Each host's key (see the class): rank at its switch + rank of its switch x the most hosts on one."""
        on_switch = np.bincount(self.attach, minlength=len(self.switch_paths.switches))
        most = int(on_switch.max(initial=1))
        order = np.lexsort((np.arange(len(self.hosts)), self.attach))  # by switch, then address
        rank = np.empty(len(self.hosts), dtype=np.int64)
        first = np.cumsum(on_switch) - on_switch
        rank[order] = np.arange(len(self.hosts)) - first[self.attach[order]]
        return rank + self.attach * most

    def _spread(self, keys: np.ndarray) -> np.ndarray:
        """next_hop under multipath (the class's rule), every host at once: computed per switch
        hosts hang off (a target), then looked up per host."""
        sp = self.switch_paths
        count = len(sp.switches)
        targets, target_of = np.unique(self.attach, return_inverse=True)
        distance = sp.hops[:, targets].astype(np.int64)  # (switch, target)
        neighbours: list[list[int]] = [[] for _ in range(count)]
        for a, b in sp.links:
            neighbours[sp.index[a]].append(sp.index[b])
            neighbours[sp.index[b]].append(sp.index[a])
        degree = max((len(n) for n in neighbours), default=0) or 1
        table = np.full((count, degree), count, dtype=np.int64)  # column `count`: a sentinel, never closer
        for i, row in enumerate(neighbours):
            table[i, :len(row)] = sorted(row)
        padded = np.vstack([distance, np.full((1, len(targets)), -2, dtype=np.int64)])
        # closer[i, k, t]: neighbour k of switch i is one hop closer to target t than i is.
        closer = (padded[table] == (distance - 1)[:, None, :]) & (distance > 0)[:, None, :]
        choices = closer.sum(axis=1)  # (switch, target)
        passing, column, toward = np.nonzero(closer)  # switch `passing` may forward to table[passing, column]
        onto = table[passing, column]
        # The closer neighbours of each (switch, target) in order: nth[i, t, c] is the c-th.
        numbered = np.cumsum(closer, axis=1, dtype=np.int32)[passing, column, toward] - 1
        nth = np.full((count, len(targets), max(int(choices.max(initial=0)), 1)), UNREACHABLE, dtype=np.int32)
        nth[passing, toward, numbered] = onto
        # above[i, t]: the most distinct ways a packet for target t reaches switch i, counting the
        # choices of the switches it passed; farthest first, since those are before i on any path.
        above = np.ones((count, len(targets)), dtype=np.int64)
        layer_of = distance[passing, toward]
        for layer in range(int(distance.max(initial=0)), 1, -1):
            at = layer_of == layer
            ways = np.minimum(above[passing[at], toward[at]] * choices[passing[at], toward[at]], _MOST_CHOICES)
            np.maximum.at(above, (onto[at], toward[at]), ways)
        # Per host d and switch i: the closer neighbour numbered (key // above) mod choices.
        pick = (keys[:, None] // above[:, target_of].T) % np.maximum(choices[:, target_of].T, 1)  # (host, switch)
        return np.ascontiguousarray(nth[np.arange(count)[None, :], target_of[:, None], pick])

    def _kept_from(self, previous: "HostPaths", spread: np.ndarray) -> np.ndarray:
        """next_hop with previous's next hops kept where they still hold (see the class): spread
        (the rule's) elsewhere, and everywhere unless only links went since previous."""
        sp, before = self.switch_paths, previous.switch_paths
        if not (previous.multipath and previous.hosts == self.hosts and previous.attachment == self.attachment
                and before.switches == sp.switches and sp.links <= before.links):
            return spread
        count = len(sp.switches)
        linked = np.zeros((count + 1, count + 1), dtype=bool)  # the last row and column: UNREACHABLE
        for a, b in sp.links:
            linked[sp.index[a], sp.index[b]] = linked[sp.index[b], sp.index[a]] = True
        distance = sp.hops[:, self.attach].T  # (host, switch)
        hop = previous.next_hop
        host = np.arange(len(self.hosts))[:, None]
        holds = ((distance > 0) & (distance == before.hops[:, self.attach].T) & (hop != UNREACHABLE)
                 & linked[np.arange(count)[None, :], hop]
                 & (sp.hops[hop, self.attach[host]] == distance - 1))
        return np.where(holds, hop, spread)

    def node_matrix(self, sources: np.ndarray) -> np.ndarray:
        """(sources, hosts, switches on the way) : the switch indices from each of sources (switch
        indices) to each host's switch inclusive, UNREACHABLE past the end or with no path."""
        sp = self.switch_paths
        sources = np.asarray(sources, dtype=np.int64)
        longest = int(sp.hops.max(initial=0)) + 1
        nodes = np.full((len(sources), len(self.hosts), longest), UNREACHABLE, dtype=np.int32)
        reachable = sp.hops[sources[:, None], self.attach[None, :]] != UNREACHABLE
        at = np.where(reachable, sources[:, None], UNREACHABLE)
        nodes[:, :, 0] = at
        host = np.broadcast_to(np.arange(len(self.hosts)), at.shape)
        for step in range(1, longest):
            going = at != UNREACHABLE
            at = np.where(going, self.next_hop[host, np.maximum(at, 0)], UNREACHABLE)
            nodes[:, :, step] = at
        return nodes

    def path(self, switch: str, host: str) -> list[str] | None:
        """Switch names from switch to host's switch inclusive, or None if unreachable."""
        sp = self.switch_paths
        d, at = self.host_index[host], sp.index[switch]
        target = int(self.attach[d])
        if sp.hops[at, target] == UNREACHABLE:
            return None
        nodes = [at]
        while at != target:
            at = int(self.next_hop[d, at])
            nodes.append(at)
        return [sp.switches[k] for k in nodes]
