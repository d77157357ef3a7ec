"""Fewest prefixes that give every known destination its own parameters.

A host's parameter set is a routing table: the kernel picks the longest
matching prefix. Destinations that share their parameters (hosts behind one
edge switch, whole pods of a homogeneous fabric) need not have a route each:
ORTC (Draves et al., "Constructing optimal IP routing tables", INFOCOM 1999)
builds the smallest table that sends every known address to its label, with
the addresses no host has as "don't care". Here it runs over a binary trie of
the known addresses compressed to its branching nodes (a node with one child
has that child's candidates, exactly), for many sources at once: label sets
are bit masks, one row per source.

Scope of "don't care": an address inside the smallest prefix covering the
known hosts of one family that is no known host's, the source's own address,
and a destination the source cannot reach, may take whatever parameters a
covering route carries. Nothing outside that covering prefix is routed.
"""

import ipaddress
from dataclasses import dataclass

import numpy as np

# Label masks of one block of sources stay below this many 64-bit words.
_BLOCK_WORDS = 1 << 22


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


def aggregate(trie: PrefixTrie, labels: np.ndarray) -> list[list[tuple[str, int]]]:
    """The fewest routes per source: for each row of labels (sources x
    addresses, the label of each address for that source, -1 for don't
    care), [(prefix, label)], most general first. Longest-prefix match over
    them gives every address with a label exactly its label."""
    sources = labels.shape[0]
    if not len(trie) or not sources:
        return [[] for _ in range(sources)]
    count = int(labels.max(initial=-1)) + 1
    words = max(1, -(-count // 64))
    block = max(1, _BLOCK_WORDS // (len(trie) * words))
    routes: list[list[tuple[str, int]]] = []
    for start in range(0, sources, block):
        routes += _aggregate_block(trie, labels[start:start + block], words)
    return routes


def _aggregate_block(trie: PrefixTrie, labels: np.ndarray, words: int) -> list[list[tuple[str, int]]]:
    sources = labels.shape[0]
    rows = np.arange(sources)
    masks = np.zeros((len(trie), sources, words), dtype=np.uint64)
    # Pass 1, bottom-up: a leaf's candidates are its label (all labels if it
    # is a don't-care); an inner node's are its children's common labels if
    # they have any, else all of theirs.
    for i in range(len(trie)):
        host = trie.leaf_host[i]
        if host >= 0:
            label = labels[:, host]
            leaf = np.zeros((sources, words), dtype=np.uint64)
            known = label >= 0
            leaf[rows[known], label[known] // 64] = np.left_shift(np.uint64(1), (label[known] % 64).astype(np.uint64))
            leaf[~known] = np.iinfo(np.uint64).max
            masks[i] = leaf
        else:
            left, right = masks[trie.children[i, 0]], masks[trie.children[i, 1]]
            common = left & right
            masks[i] = np.where(common.any(axis=-1, keepdims=True), common, left | right)
    # Pass 2, top-down: a node routes only where the label it inherits is not one of its candidates.
    chosen = np.full((len(trie), sources), -1, dtype=np.int64)
    emit = np.zeros((len(trie), sources), dtype=bool)
    root = len(trie) - 1
    inherited = np.full(sources, -1, dtype=np.int64)
    stack = [(root, inherited)]
    while stack:
        i, inherited = stack.pop()
        mask = masks[i]
        keeps = _has(mask, inherited)
        routed = ~keeps & ~(mask == np.iinfo(np.uint64).max).all(axis=-1)
        label = np.where(routed, _lowest(mask), inherited)
        emit[i], chosen[i] = routed, label
        if trie.leaf_host[i] < 0:
            stack += [(int(trie.children[i, 0]), label), (int(trie.children[i, 1]), label)]
    return [[(trie.prefixes[i], int(chosen[i, s])) for i in np.nonzero(emit[:, s])[0][::-1]]
            for s in range(sources)]


def _has(mask: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Per source, whether label (>= 0) is among the mask's labels."""
    valid = label >= 0
    word = np.where(valid, label // 64, 0)
    bit = np.left_shift(np.uint64(1), np.where(valid, label % 64, 0).astype(np.uint64))
    return valid & ((mask[np.arange(len(label)), word] & bit) != 0)


def _lowest(mask: np.ndarray) -> np.ndarray:
    """Per source, the lowest label in the mask (the mask has at least one)."""
    first_word = (mask != 0).argmax(axis=-1)
    word = mask[np.arange(len(mask)), first_word]
    lowest_bit = word & (~word + np.uint64(1))
    return first_word * 64 + np.log2(lowest_bit.astype(np.float64)).astype(np.int64)
