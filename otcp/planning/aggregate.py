"""Fewest prefixes that give every known destination its own parameters.

A host's parameter set is a routing table: the kernel picks the longest
matching prefix. Destinations that share their parameters (hosts behind one
edge switch, whole pods of a homogeneous fabric) need not have a route each:
ORTC (Draves et al., "Constructing optimal IP routing tables", INFOCOM 1999)
builds the smallest table that sends every known address to its label, with
the addresses no host has as "don't care". Here it runs over a binary trie of
the known addresses compressed to its branching nodes (a node with one child
has that child's candidates, exactly), for many sources at once: label sets
are bit masks, one row per source. The state is kept (Aggregation), so that
when a few labels change only the nodes they reach are done again. Of the
equally small tables, the one chosen takes the lowest label where there is a
choice, so it depends on how the labels are numbered.

Scope of "don't care": an address inside the smallest prefix covering the
known hosts of one family that is no known host's, the source's own address,
and a destination the source cannot reach, may take whatever parameters a
covering route carries. Nothing outside that covering prefix is routed.
"""

import heapq
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class PrefixTrie:
    """The compressed binary trie of one address family's known addresses.

    Nodes are in post-order (children before parents, the root last).
    prefixes[i] is node i's prefix text; leaf_host[i] the index (into the
    addresses given) of a leaf's host, -1 for inner nodes; children[i] the
    two child nodes of an inner node, (-1, -1) for a leaf.
    """

    prefixes: list[str]
    leaf_host: np.ndarray
    children: np.ndarray

    @classmethod
    def build(cls, addresses: list[str]) -> "PrefixTrie":
        """The trie over addresses (all of one family, distinct)."""
        parsed = [ipaddress.ip_address(a) for a in addresses]
        width = parsed[0].max_prefixlen if parsed else 32
        network = ipaddress.IPv4Network if width == 32 else ipaddress.IPv6Network
        order = sorted(range(len(parsed)), key=lambda i: int(parsed[i]))
        values = [int(parsed[i]) for i in order]
        prefixes: list[str] = []
        leaf_host: list[int] = []
        children: list[tuple[int, int]] = []

        def add(prefix: str, host: int, kids: tuple[int, int]) -> int:
            prefixes.append(prefix)
            leaf_host.append(host)
            children.append(kids)
            return len(prefixes) - 1

        def node(lo: int, hi: int) -> int:  # values[lo:hi], at least one
            if hi - lo == 1:
                return add(f"{network((values[lo], width))}", order[lo], (-1, -1))
            common = width - (values[lo] ^ values[hi - 1]).bit_length()
            split_bit = 1 << (width - common - 1)
            split = next(i for i in range(lo, hi) if values[i] & split_bit)
            left, right = node(lo, split), node(split, hi)
            base = values[lo] >> (width - common) << (width - common)
            return add(f"{network((base, common))}", -1, (left, right))

        if values:
            node(0, len(values))
        return cls(prefixes, np.array(leaf_host, dtype=np.int64),
                   np.array(children, dtype=np.int64).reshape(-1, 2))

    def __len__(self) -> int:
        return len(self.prefixes)

    def coarsened(self, groups: Sequence[int], budget: int) -> tuple["PrefixTrie", np.ndarray]:
        """A trie of at most budget leaves, each a node of this one, that together cover every
        address; and, per address, the index of the coarse leaf covering it (its leaf_host in
        the coarse trie: labels for the coarse trie have one column per coarse leaf).

        groups[i] is address i's group (the edge switch a host hangs off). The leaves are
        merged into their parents one sibling pair at a time, fewest groups under the parent
        first, then fewest addresses: siblings of one group merge before any two groups mix,
        so where each group's addresses are a prefix of their own, and budget is the number
        of groups, the coarse leaves are exactly the groups' prefixes.
        """
        count = len(self)
        parent = _levels(self)[2] if count else np.zeros(0, dtype=np.int64)
        members: list[frozenset] = []  # the groups under each node
        addresses: list[int] = []  # how many addresses are under each node
        for host, (left, right) in zip(self.leaf_host.tolist(), self.children.tolist()):  # children first
            members.append(frozenset((groups[host],)) if host >= 0 else members[left] | members[right])
            addresses.append(1 if host >= 0 else addresses[left] + addresses[right])
        is_leaf = self.leaf_host >= 0
        in_cut = is_leaf.copy()
        mergeable = [(len(members[i]), addresses[i], i) for i in range(count)
                     if not is_leaf[i] and is_leaf[self.children[i]].all()]
        heapq.heapify(mergeable)
        leaves = int(is_leaf.sum())
        while leaves > budget and mergeable:
            _, _, i = heapq.heappop(mergeable)
            in_cut[self.children[i]] = False
            in_cut[i] = True
            leaves -= 1
            up = parent[i]
            if up >= 0 and in_cut[self.children[up]].all():
                heapq.heappush(mergeable, (len(members[up]), addresses[up], int(up)))
        # Top-down: what lies under a leaf of the cut goes; each address takes its cut ancestor.
        under = np.full(count, -1, dtype=np.int64)  # the cut node at or above each node
        for i in range(count - 1, -1, -1):
            if in_cut[i]:
                under[i] = i
            elif parent[i] >= 0:
                under[i] = under[parent[i]]
        kept = np.nonzero((under < 0) | in_cut)[0]
        renumbered = np.full(count, -1, dtype=np.int64)
        renumbered[kept] = np.arange(len(kept))
        cut_position = np.full(count, -1, dtype=np.int64)
        cut_position[in_cut] = np.arange(int(in_cut.sum()))
        coarse = PrefixTrie([self.prefixes[i] for i in kept], cut_position[kept],  # a cut node is a coarse leaf
                            np.where(in_cut[kept, None], -1, renumbered[np.maximum(self.children[kept], 0)]))
        covering = np.empty(int(is_leaf.sum()), dtype=np.int64)
        covering[self.leaf_host[is_leaf]] = cut_position[under[is_leaf]]
        return coarse, covering


def _levels(trie: PrefixTrie) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The trie's nodes by height (the leaves first) and by depth (the root first), and each node's parent (-1)."""
    count = len(trie)
    height, depth, parent = [0] * count, [0] * count, [-1] * count
    for i, (left, right) in enumerate(trie.children.tolist()):  # post-order: children before parents
        if left >= 0:
            height[i] = 1 + max(height[left], height[right])
            parent[left] = parent[right] = i
    for i in range(count - 2, -1, -1):  # the other way, parents first (the root is the last node)
        depth[i] = depth[parent[i]] + 1
    heights, depths = np.array(height), np.array(depth)
    return ([np.nonzero(heights == h)[0] for h in range(max(height) + 1)],
            [np.nonzero(depths == d)[0] for d in range(max(depth) + 1)], np.array(parent, dtype=np.int64))


class Aggregation:
    """ORTC's state for many sources over one trie, kept so that a change of a
    few labels redoes only the nodes it reaches (update): the labels (sources x
    addresses, -1 for don't care), the candidate labels of every node (masks:
    bits, one row per source), the label each node routes or inherits (chosen),
    and whether it routes (emit).

    Labels must stay below capacity (64 per word of the masks)."""

    def __init__(self, trie: PrefixTrie, labels: np.ndarray, words: int) -> None:
        """ORTC for every row of labels (sources x addresses, -1 for don't care), all the nodes of one level
        at once. The labels are kept, and changed by update (copied only if not in C order)."""
        self.trie = trie
        self.labels = np.ascontiguousarray(labels)
        self.levels = by_height, by_depth, parent = _levels(trie)
        self.leaf_node = np.empty(len(trie.leaf_host[trie.leaf_host >= 0]), dtype=np.int64)
        self.leaf_node[trie.leaf_host[by_height[0]]] = by_height[0]
        self._height, self._depth = (np.zeros(len(trie), dtype=np.int64) for _ in range(2))
        for level, nodes in enumerate(by_height):
            self._height[nodes] = level
        for level, nodes in enumerate(by_depth):
            self._depth[nodes] = level
        sources = labels.shape[0]
        self.masks = np.zeros((len(trie), sources, words), dtype=np.uint64)
        # Pass 1, bottom-up: a leaf's candidates are its label (all labels if it
        # is a don't-care); an inner node's are its children's common labels if
        # they have any, else all of theirs.
        leaves = by_height[0]
        self.masks[leaves] = _leaf_masks(labels[:, trie.leaf_host[leaves]].T, words)
        for nodes in by_height[1:]:
            self.masks[nodes] = _merged(self.masks[trie.children[nodes, 0]], self.masks[trie.children[nodes, 1]])
        # Pass 2, top-down: a node routes only where the label it inherits is not one of its candidates.
        self.chosen = np.full((len(trie), sources), -1, dtype=np.int32)  # labels stay below capacity
        self.emit = np.zeros((len(trie), sources), dtype=bool)
        for nodes in by_depth:
            inherited = np.where(parent[nodes, None] >= 0, self.chosen[parent[nodes]], -1)
            self.chosen[nodes], self.emit[nodes] = _choose(self.masks[nodes], inherited)
        self.counts = self.emit.sum(axis=0)  # each source's routes

    @property
    def capacity(self) -> int:
        """The labels the masks hold: every label must be below it."""
        return 64 * self.masks.shape[-1]

    def update(self, rows: np.ndarray, addresses: np.ndarray, labels: np.ndarray) -> None:
        """Give address addresses[i] the label labels[i] (-1: don't care) for source rows[i]; then
        redo only the nodes whose candidates changed, their ancestors', and the nodes below
        whose inherited label changed. The state is then ORTC's for the new labels.

        Cells (node, source) are numbered node x sources + source, to index the state flat."""
        by_height, by_depth, parent = self.levels
        sources = self.emit.shape[1]
        children, leaf_host = self.trie.children, self.trie.leaf_host
        masks = self.masks.reshape(-1, self.masks.shape[-1])
        chosen, emit = self.chosen.reshape(-1), self.emit.reshape(-1)
        self.labels[rows, addresses] = labels
        stamp = np.empty(chosen.shape, dtype=np.int32)  # no update changes 2**31 cells

        def distinct(cells: np.ndarray) -> np.ndarray:
            """Each of cells once (in no order): of a cell given twice, the one whose position
            its stamp holds after all are stamped, whichever write came last."""
            position = np.arange(len(cells), dtype=np.int32)
            stamp[cells] = position
            return cells[stamp[cells] == position]

        # Pass 1, up from the changed leaves: the cells to redo, by height.
        up: list[list[np.ndarray]] = [[] for _ in by_height]
        changed: list[np.ndarray] = []  # the cells whose candidates changed

        cells = self.leaf_node[addresses] * sources + rows
        new = _leaf_masks(labels, masks.shape[-1])
        differs = (new != masks[cells]).any(axis=-1)
        cells = cells[differs]
        masks[cells] = new[differs]
        changed.append(cells)
        self._push_up(cells, up)
        for height in range(1, len(by_height)):
            if not up[height]:
                continue
            cells = distinct(np.concatenate(up[height]))
            node, row = np.divmod(cells, sources)
            new = _merged(masks[children[node, 0] * sources + row], masks[children[node, 1] * sources + row])
            differs = (new != masks[cells]).any(axis=-1)
            cells = cells[differs]
            masks[cells] = new[differs]
            changed.append(cells)
            self._push_up(cells, up)
        # Pass 2, down: by depth, the cells whose candidates changed and the children of those whose label moved.
        every = np.concatenate(changed)
        depth_of = self._depth[every // sources]
        order = np.argsort(depth_of, kind="stable")
        bounds = np.searchsorted(depth_of[order], np.arange(len(by_depth) + 1))
        own = [every[order[bounds[d]:bounds[d + 1]]] for d in range(len(by_depth))]  # each cell once
        below = np.zeros(0, dtype=np.int64)  # the children of the cells above whose label moved, each once
        seen = np.zeros(chosen.shape, dtype=bool)
        flat_labels = self.labels.reshape(-1)
        for depth in range(len(by_depth)):
            seen[own[depth]] = True
            cells = np.concatenate([own[depth], below[~seen[below]]])
            seen[own[depth]] = False
            below = np.zeros(0, dtype=np.int64)
            if not len(cells):
                continue
            node, row = np.divmod(cells, sources)
            up_node = parent[node]
            inherited = np.where(up_node >= 0, chosen[np.maximum(up_node, 0) * sources + row], -1)
            address = leaf_host[node]
            leaf = address >= 0
            # A leaf routes its own label where it inherits another; a don't-care leaf routes nothing.
            label = flat_labels[row[leaf] * self.labels.shape[1] + address[leaf]]
            now = np.empty(len(cells), dtype=np.int32)
            routes = np.empty(len(cells), dtype=bool)
            now[leaf] = np.where(label >= 0, label, inherited[leaf])
            routes[leaf] = (label >= 0) & (label != inherited[leaf])
            now[~leaf], routes[~leaf] = _choose(masks[cells[~leaf]], inherited[~leaf])
            flipped = routes != emit[cells]
            self.counts += np.bincount(row[flipped], weights=np.where(routes[flipped], 1, -1),
                                       minlength=sources).astype(np.int64)
            emit[cells] = routes
            moved = (now != chosen[cells]) & ~leaf
            chosen[cells] = now
            if moved.any() and depth + 1 < len(by_depth):
                node, row = node[moved], row[moved]
                below = np.concatenate([children[node, 0] * sources + row, children[node, 1] * sources + row])

    def _push_up(self, cells: np.ndarray, up: list[list[np.ndarray]]) -> None:
        """Add the parent cells of cells (but the root's) to up, by the parents' heights."""
        sources = self.emit.shape[1]
        node, row = np.divmod(cells, sources)
        above = self.levels[2][node]
        node, row = above[above >= 0], row[above >= 0]
        heights = self._height[node]
        for height in np.nonzero(np.bincount(heights))[0].tolist():
            at = heights == height
            up[height].append(node[at] * sources + row[at])

    def route_counts(self, rows: np.ndarray) -> np.ndarray:
        """How many routes each of rows (sources) has."""
        return self.counts[rows]

    def emitted(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The routes of rows (sources), as arrays: each route's position in rows, trie node and
        label, by source in the order of rows, each source's most general first."""
        # Parents before children: the post-order reversed. (A flat nonzero of a C-ordered
        # copy, divided again: np.nonzero of the 2-D view is three times slower.)
        emit = self.emit.T[rows, ::-1]
        position, reversed_node = np.divmod(np.flatnonzero(emit), emit.shape[1])
        node = len(self.trie) - 1 - reversed_node
        return position, node, self.chosen[node, rows[position]]


def _leaf_masks(labels: np.ndarray, words: int) -> np.ndarray:
    """The candidate masks (..., words) of leaves with labels (...): the label's bit, every bit for -1."""
    known = labels >= 0
    label = np.where(known, labels, 0).astype(np.uint64)
    bit = np.left_shift(np.uint64(1), label % np.uint64(64))
    masks = np.empty((*labels.shape, words), dtype=np.uint64)
    for w in range(words):  # elementwise, a word at a time (a scatter of each label's bit is slower)
        in_word = bit if words == 1 else np.where(label // np.uint64(64) == w, bit, np.uint64(0))
        masks[..., w] = np.where(known, in_word, np.iinfo(np.uint64).max)
    return masks


def _merged(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """An inner node's candidates from its children's: their common labels if any, else all of theirs."""
    common = left & right
    return np.where(common.any(axis=-1, keepdims=True), common, left | right)


def _choose(mask: np.ndarray, inherited: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node (of masks), the label it gives its addresses and whether it routes: where the label it
    inherits is not among its candidates (and it has any: a don't-care subtree routes nothing), its lowest."""
    routed = ~_has(mask, inherited) & (mask != np.iinfo(np.uint64).max).any(axis=-1)
    return np.where(routed, _lowest(mask), inherited), routed


def _has(mask: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Per (node, source), whether label (>= 0) is among the mask's labels."""
    valid = label >= 0
    bit = np.left_shift(np.uint64(1), np.where(valid, label % 64, 0).astype(np.uint64))
    return valid & ((_word(mask, np.where(valid, label // 64, 0)) & bit) != 0)


def _lowest(mask: np.ndarray) -> np.ndarray:
    """Per (node, source), the lowest label in the mask (the mask has at least one)."""
    first_word = (mask != 0).argmax(axis=-1) if mask.shape[-1] > 1 else 0
    word = _word(mask, first_word)
    below_lowest_bit = (word & (~word + np.uint64(1))) - np.uint64(1)  # the bits under the lowest one
    return first_word * 64 + np.bitwise_count(below_lowest_bit).astype(np.int32)


def _word(mask: np.ndarray, index: np.ndarray | int) -> np.ndarray:
    """Per (node, source), the mask's 64-bit word at index (with one word, that one, whatever index is)."""
    if mask.shape[-1] == 1:
        return mask[..., 0]
    return np.take_along_axis(mask, np.asarray(index)[..., None], axis=-1)[..., 0]
