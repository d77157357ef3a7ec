"""Evaluate the OTCP formulas for every ordered host pair of a Fabric.

Used by `otcp-controller plan` on an inventory and by the live controller on
its measured fabric. The sums and minima over a pair's round trip are taken
once per switch path (from an edge switch toward a host, along the host's
forwarding tree) and once per host, then combined per host pair with numpy,
so a fabric of a thousand hosts (a million pairs) plans in a fraction of a
second.
"""

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otcp.planning import formulas
from otcp.planning.aggregate import Aggregation, PrefixTrie
from otcp.planning.explain import Clamp, LinkTerm, LongPathTerms, PathExplanation, SegmentTerms
from otcp.planning.fabric import Fabric
from otcp.planning.paths import UNREACHABLE, HostPaths, SwitchPaths
from otcp.wire.limits import ADMIT
from otcp.wire.paramset import PARAMETER_KEYS, RouteParams

#: Where a pair's RTT_prop came from, least trusted last among the link
#: sources: a round trip is as good as its weakest link; "host" is measured
#: end to end by the agents and preferred.
DELAY_SOURCES = ("inventory", "measured", "default", "host")
HOST = DELAY_SOURCES.index("host")
KNOWN = DELAY_SOURCES.index("measured")  # this and lower: a link delay that is not a guess

#: What an explanation says of an input whose origin the fabric does not record (a live fabric's
#: capacities and buffers), and of a host's egress buffer, which the formulas leave out.
NOT_RECORDED, HOST_QUEUE = "not recorded", "host queue, not counted"

Terms = dict[str, np.ndarray]  # named arrays of per-entity terms (Plan._terms_of_switch_paths, _terms_of_hosts)
# Pairs evaluated at once: their temporary arrays (half a MB each) stay in the processor's caches.
_CHUNK_PAIRS = 1 << 16
# The per-pair arrays of a Plan: src and dst, then what _evaluate_pairs returns, in its order.
_PAIR_ARRAYS = ("src", "dst", "min_rto_s", "rto_min_ms", "initcwnd", "cwnd_clamp", "segment", "pacing_rate",
                "congctl", "ssthresh", "increase", "rtt_prop_s", "rtt_spread_s", "rtt_source")


def _differs(new: np.ndarray | None, old: np.ndarray | None) -> np.ndarray | None:
    """Per (source, destination) host, whether a matrix of measured round trips (None: none
    measured, NaN: not this pair) changed; None where none did."""
    if new is None:
        if old is None:
            return None
        new = np.full(old.shape, np.nan)
    if old is None:
        old = np.full(new.shape, np.nan)
    differs = ~((new == old) | (np.isnan(new) & np.isnan(old)))
    return differs if differs.any() else None


def _undominated(slope: np.ndarray, offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Window lines (slope x RTT + offset, columns along axis 1) with those that never win the
    minimum left out: a line at or above another in both slope and offset (the first of equal
    ones kept), or with an infinite offset where another has a finite one. Round trips are never
    negative and float rounding is monotone, so the minimum over the rest is the same number.
    Columns are cut to the most lines any entity keeps; its others are lines it left out."""
    columns = slope.shape[1]
    if not columns:
        return slope, offset
    left_out = np.zeros(slope.shape, dtype=bool)
    infinite, finite = np.isinf(offset), np.isfinite(offset)
    for i in range(columns):  # line i against each other line j, a column pair at a time (small temporaries)
        s_i, o_i = slope[:, i], offset[:, i]
        for j in range(columns):
            s_j, o_j = slope[:, j], offset[:, j]
            if j < i:  # j comes first: it leaves an equal line i out
                left_out[:, i] |= (s_j <= s_i) & (o_j <= o_i) | infinite[:, i]
            elif j > i:
                left_out[:, i] |= ((s_j <= s_i) & (o_j <= o_i) & ((s_j < s_i) | (o_j < o_i))
                                   | infinite[:, i] & finite[:, j])
    # Each line's new column: the kept ones first, then the others, each in their order (a stable sort).
    kept_before = np.cumsum(~left_out, axis=1)
    column = np.where(left_out, kept_before[:, -1:] + np.arange(columns)[:, None] - kept_before, kept_before - 1)
    kept = max(1, int(kept_before[:, -1].max(initial=0)))
    moved = []
    for lines in (slope, offset):
        out = np.empty_like(lines)
        np.put_along_axis(out, column, lines, axis=1)
        moved.append(out[:, :kept])
    return moved[0], moved[1]


# What pads a window-line column (a switch path shorter than the longest): a line that never wins the minimum.
_LINE_PADDING = {"slope": 0.0, "offset": np.inf}


def _changed_terms(new: Terms, old: Terms, names: Sequence[str] | None = None) -> np.ndarray:
    """Per entity (the last axis: switch path from an edge switch toward a host, or host), whether
    any of its terms (of names, if given) differ between two plans' (Plan._terms_of_switch_paths,
    Plan._terms_of_hosts)."""
    changed = np.zeros(next(iter(new.values())).shape[-1], dtype=bool)
    for name in names or new:
        values, before = new[name], old[name]
        if values.shape != before.shape:  # window lines of longer or shorter switch paths than before
            columns = max(values.shape[1], before.shape[1])
            values, before = (np.pad(v, ((0, 0), (0, columns - v.shape[1]), (0, 0)),
                                     constant_values=_LINE_PADDING[name]) for v in (values, before))
        changed |= (values != before).any(axis=tuple(range(values.ndim - 1)))
    return changed


@dataclass
class _LinkTable:
    """Per directed link arrays, with one padding link at the end.

    The padding link has no delay, no buffer and infinite capacity, so it
    adds nothing to sums and never wins a minimum.
    """

    index: dict
    capacity: np.ndarray
    delay: np.ndarray
    buffer: np.ndarray
    switch_egress: np.ndarray
    flows: np.ndarray
    counted: np.ndarray  # the flows N_l counts: F_l, or with admission only those admitted at once
    spread: np.ndarray  # how far above its delay a measured link's samples reach
    source: np.ndarray  # index into DELAY_SOURCES

    @classmethod
    def build(cls, fabric: Fabric) -> "_LinkTable":
        """The table of fabric's links, in sorted order."""
        links = sorted(fabric.links)
        size = len(links) + 1
        capacity = np.full(size, np.inf)
        delay = np.zeros(size)
        buffer = np.zeros(size)
        switch_egress = np.zeros(size, dtype=bool)
        spread = np.zeros(size)
        source = np.zeros(size, dtype=np.int64)
        if links:  # the facts' fields, as columns (LinkFacts order)
            capacity[:-1], delay[:-1], buffer[:-1], sources, spread[:-1] = zip(*map(fabric.links.__getitem__, links))
            source[:-1] = [DELAY_SOURCES.index(name) for name in sources]
        switch_egress[:-1] = [u not in fabric.hosts for (u, _) in links]
        return cls(
            index={link: i for i, link in enumerate(links)},
            capacity=capacity,
            delay=delay,
            buffer=buffer,
            switch_egress=switch_egress,
            flows=np.zeros(size, dtype=np.int64),
            counted=np.zeros(size, dtype=np.int64),
            spread=spread,
            source=source,
        )

    @property
    def padding(self) -> int:
        """The padding link's index."""
        return len(self.capacity) - 1


# Small non-negative integers (below this) are numbered with a table rather than by sorting.
_NUMBERING_TABLE = 1 << 22


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) for a flat array of non-negative integers: in one
    pass through a table of presence where they are small (the route fields mostly are)."""
    top = int(values.max(initial=0)) + 1
    if top > _NUMBERING_TABLE:
        return np.unique(values, return_inverse=True)
    present = np.zeros(top, dtype=bool)
    present[values] = True
    number = np.cumsum(present) - 1
    return np.nonzero(present)[0], number[values]


# A route's parameters besides its destination, the values of PARAMETER_KEYS in order.
Parameters = tuple[int, int, int | None, int | None, int | None, bool, str | None, int | None, int | None]
#: A route's congestion control as a number in the planner's integer columns: its index here (0: none).
_CONGCTL_NAMES: list[str | None] = [None]


def _congctl_code(name: str | None) -> int:
    """The number of a congestion control's name in the planner's columns, numbered when first seen."""
    if name not in _CONGCTL_NAMES:
        _CONGCTL_NAMES.append(name)
    return _CONGCTL_NAMES.index(name)

# The terms of a round trip's delays, and the pair arrays that follow from them alone (_round_trips, minRTO).
_DELAY_TERMS = ("delay", "spread", "source", "queueing")
_DELAY_ARRAYS = ("min_rto_s", "rto_min_ms", "rtt_prop_s", "rtt_spread_s", "rtt_source")


def _numbered(fields: dict[str, np.ndarray]) -> tuple[np.ndarray, list[Parameters]]:
    """Number the distinct route parameters of fields ({route field: array}, all of one shape,
    0 for a null field, quickack as 0 or 1): (each element's number, the route parameters of
    each number)."""
    shape = fields["rto_min_ms"].shape
    # The tuples so far as mixed-radix numbers (each field's digit its value's rank), numbered
    # again only where the next digit would take them past the table: the same order, so the
    # same numbers in the end. A field alike everywhere (a long-path field on short paths) adds
    # no digit.
    label = np.zeros(int(np.prod(shape)), dtype=np.int64)
    tuples = 1  # label < tuples
    for name in PARAMETER_KEYS:
        column = fields[name].reshape(-1)
        if not len(column) or column.min() == column.max():
            continue
        values, number = _distinct(column)
        if tuples * len(values) > _NUMBERING_TABLE:
            _, label = _distinct(label)
            tuples = int(label.max(initial=0)) + 1
        label = label * len(values) + number
        tuples *= len(values)
    _, label = _distinct(label)
    # An element of each number (any: they are alike), for its parameters.
    element = np.zeros(int(label.max(initial=-1)) + 1, dtype=np.int64)
    element[label] = np.arange(len(label))
    chosen = [fields[name].reshape(-1)[element].tolist() for name in PARAMETER_KEYS]
    params: list[Parameters] = [(rto, initcwnd, clamp or None, advmss or None, rate or None, bool(quickack),
                                 _CONGCTL_NAMES[congctl], ssthresh or None, increase or None)
                                for rto, initcwnd, clamp, advmss, rate, quickack, congctl, ssthresh, increase
                                in zip(*chosen)]
    return label.reshape(shape), params


#: Where more than this share of the pairs have new route fields, their labels and ORTC's
#: state are made afresh: cheaper than updating most of them (measured at k = 16).
RELABEL_SHARE = 0.25

#: Routes made and kept for sharing (_RouteState.made) per host before they are let go: the
#: sets hold at most one per edge switch each, mostly the same ones.
MADE_ROUTES_PER_HOST = 256

#: The safe side of each route field across the destinations one route serves: the largest
#: minRTO (a shorter timer fires while a segment may still be queued), the smallest initial
#: window, window clamp, advertised MSS (what the destination sends this host; fewer, smaller
#: frames in flight) and pacing rate, and quickack on where any destination needs it. A null
#: clamp, MSS or rate is unbounded: larger than any. The long-path fields go together and only
#: where every destination has them (_ALL_OR_NONE): a rack behind the same route keeps its own.
_SAFE_SIDE = {"rto_min_ms": np.maximum, "initcwnd": np.minimum, "cwnd_clamp": np.minimum, "advmss": np.minimum,
              "pacing_rate": np.minimum, "quickack": np.maximum, "congctl": np.minimum, "ssthresh": np.minimum,
              "increase": np.minimum}
_ALL_OR_NONE = ("congctl", "ssthresh", "increase")
_UNBOUNDED = np.iinfo(np.int64).max

#: A host whose set is on the safe side stays there until its exact set fits in this share of the
#: budget: a set near the budget would otherwise flip at every small change, and a flip replaces
#: every prefix, so it goes to the agent whole, not as a delta.
EXACT_AGAIN_SHARE = 0.75


def _safe_side(fields: dict[str, np.ndarray], starts: np.ndarray) -> dict[str, np.ndarray]:
    """Per route field, the safe side (_SAFE_SIDE) of fields (flat arrays, 0 for a null field and
    in every field toward an address with no route) over each group of consecutive elements
    (groups start at starts, none empty); 0 in every field where no element has a route. A
    field left out of fields (but rto_min_ms) is 0 in every element, so on the safe side too."""
    reachable = fields["rto_min_ms"] > 0
    safe = {}
    for name, side in _SAFE_SIDE.items():
        if name not in fields:
            safe[name] = np.zeros(len(starts), dtype=np.int64)
            continue
        values = fields[name]
        if name in _ALL_OR_NONE:  # a null among the destinations with a route wins
            values = np.where(reachable, values, _UNBOUNDED)
        elif side is np.minimum:  # null and no route are the largest; no route is null again after the minimum
            values = np.where(reachable & (values > 0), values, _UNBOUNDED)
        safe[name] = side.reduceat(values, starts)
        safe[name][safe[name] == _UNBOUNDED] = 0
    # Of a congestion control, its settings: all of them, or none where one is gone (any route).
    none = safe["congctl"] == 0
    for name in _ALL_OR_NONE:
        safe[name][none] = 0
    return safe


@dataclass
class _Numbering:
    """Route parameters numbered for good: a label keeps its number, and its parameters, from plan to plan."""

    params: list[Parameters] = field(default_factory=list)  # each label's parameters
    numbers: dict[Parameters, int] = field(default_factory=dict)  # the other way: parameters, their label

    def numbered(self, params: list[Parameters]) -> np.ndarray:
        """The numbers of params (as _numbered gives them), new ones numbered after the others."""
        numbers = []
        for p in params:
            number = self.numbers.get(p)
            if number is None:
                number = self.numbers[p] = len(self.params)
                self.params.append(p)
            numbers.append(number)
        return np.array(numbers, dtype=np.int64)

    def field_values(self) -> dict[str, np.ndarray]:
        """{route field: its value per label, 0 for null}, with one 0 more at the end (for the label -1)."""
        congctl = PARAMETER_KEYS.index("congctl")
        return {name: np.array([_congctl_code(p[i]) if i == congctl else p[i] or 0  # type: ignore[arg-type]
                                for p in self.params] + [0],
                               dtype=np.int64)
                for i, name in enumerate(PARAMETER_KEYS)}


@dataclass
class _FamilyRoutes:
    """ORTC's state for one address family's destinations, every host a source (rows): over the
    trie of the family's hosts with each pair's exact label, and over the coarse trie with the
    safe label of each coarse leaf (the safe side of the exact labels of the hosts it covers).
    The coarse state of a source is brought up to date only when its set is on the safe side
    (_RouteState.settle): until then its changed leaves wait in pending."""

    exact: Aggregation  # its labels: (hosts x the family's hosts)
    coarse: Aggregation  # its labels: (hosts x coarse leaves), -1 where no host under the leaf has a route
    pending: np.ndarray  # (hosts x coarse leaves): whether the coarse label waits for exact labels that changed


@dataclass
class _RouteState:
    """What route_sets keeps for the next plan's, which updates it where labels changed (relabel):
    the numberings of the exact and the safe labels, and ORTC's state per address family (as
    _family_tries), which holds the labels."""

    exact: _Numbering
    safe: _Numbering
    families: list[_FamilyRoutes]
    # Every route made, by (prefix, parameters): a route is made (and validated) once and shared by
    # the sets that have it, plan after plan.
    made: dict[tuple[str, Parameters], RouteParams] = field(default_factory=dict)

    @classmethod
    def build(cls, labels: np.ndarray, params: list[Parameters], tries: list) -> "_RouteState":
        """The state of labels (sources x destinations, -1 for none) numbered by _numbered, each
        numbering with room for more (_words)."""
        state = cls(_Numbering(), _Numbering(), [])
        state.exact.numbered(params)
        for members, _, trie, coarse, covering in tries:
            exact = Aggregation(trie, labels[:, members], _words(len(state.exact.params)))
            width = int((coarse.leaf_host >= 0).sum())  # coarse leaves
            rows, leaves = np.divmod(np.arange(len(labels) * width), width)
            safe_labels = state._safe_labels(exact.labels, rows, leaves, covering).reshape(len(labels), width)
            state.families.append(_FamilyRoutes(exact, Aggregation(coarse, safe_labels, _words(len(state.safe.params))),
                                                np.zeros((len(labels), width), dtype=bool)))
        return state

    def relabel(self, rows: np.ndarray, columns: np.ndarray, labels: np.ndarray, params: list[Parameters],
                tries: list) -> bool:
        """Give pairs (rows[i], columns[i]) the labels numbered by _numbered, and update ORTC's
        exact state (the coarse state's leaves over them wait: settle); False if the labels
        outgrew its masks (the state is then to be made afresh)."""
        labels = self.exact.numbered(params)[labels]
        for family, (members, _, _, _, covering) in zip(self.families, tries):
            if len(self.exact.params) > family.exact.capacity:
                return False
            column = np.full(family.exact.labels.shape[0], -1, dtype=np.int64)  # a host's among members
            column[members] = np.arange(len(members))
            inside = column[columns] >= 0
            family.exact.update(rows[inside], column[columns[inside]], labels[inside])
            family.pending[rows[inside], covering[column[columns[inside]]]] = True
        return True

    def settle(self, coarse_rows: list[np.ndarray], tries: list) -> bool:
        """Bring the coarse state of coarse_rows (sources, per family) up to date with the exact
        labels: the safe labels of their pending leaves; False if the labels outgrew its masks."""
        for family, rows, (_, _, _, _, covering) in zip(self.families, coarse_rows, tries):
            waiting, leaves_at = np.nonzero(family.pending[rows])
            if not len(waiting):
                continue
            rows_at = rows[waiting]
            safe = self._safe_labels(family.exact.labels, rows_at, leaves_at, covering)
            if len(self.safe.params) > family.coarse.capacity:
                return False
            family.coarse.update(rows_at, leaves_at, safe)
            family.pending[rows_at, leaves_at] = False
        return True

    def _safe_labels(self, exact_labels: np.ndarray, rows: np.ndarray, leaves: np.ndarray,
                     covering: np.ndarray) -> np.ndarray:
        """The safe label (numbered by self.safe) of each (rows[i], coarse leaf leaves[i]): the safe side
        of the exact labels (sources x the family's hosts) toward the hosts under that leaf, -1 where
        none has a route."""
        order = np.argsort(covering, kind="stable")  # the members under each leaf, together
        size = np.bincount(covering, minlength=int(covering.max(initial=-1)) + 1)
        first = np.cumsum(size) - size
        count = size[leaves]
        starts = np.cumsum(count) - count
        under = order[np.repeat(first[leaves] - starts, count) + np.arange(int(count.sum()))]
        labels = exact_labels[np.repeat(rows, count), under]
        values = self.exact.field_values()
        # A field null under every label (a long-path field where no path is long) is gathered for no element.
        safe = _safe_side({name: values[name][labels] for name in PARAMETER_KEYS
                           if name == "rto_min_ms" or values[name].any()}, starts)
        covered = safe["rto_min_ms"] > 0
        numbered = np.full(len(rows), -1, dtype=np.int64)
        if covered.any():
            local, params = _numbered({name: values[covered] for name, values in safe.items()})
            numbered[covered] = self.safe.numbered(params)[local]
        return numbered

    def routes(self, aggregation: Aggregation, rows: np.ndarray, numbering: _Numbering) -> list[list[RouteParams]]:
        """The routes of rows (sources) of aggregation, whose labels numbering numbered: each
        (prefix, parameters) made once, and shared by every set that has it from then on."""
        position, node, label = aggregation.emitted(rows)
        distinct, which = _distinct(node * aggregation.capacity + label)
        made, prefixes, params = self.made, aggregation.trie.prefixes, numbering.params
        shared = np.empty(len(distinct), dtype=object)
        nodes, labels = np.divmod(distinct, aggregation.capacity)
        for k, (at, labelled) in enumerate(zip(nodes.tolist(), labels.tolist())):
            key = (prefixes[at], params[labelled])
            route = made.get(key)
            if route is None:
                route = made[key] = RouteParams.of(*key)
            shared[k] = route
        routes = shared[which]
        bounds = np.searchsorted(position, np.arange(len(rows) + 1)).tolist()
        return [routes[start:end].tolist() for start, end in zip(bounds[:-1], bounds[1:])]


def _words(labels: int) -> int:
    """64-bit words of ORTC masks with room for labels and half as many again (16 at least): a
    change of flows or delays brings a few new labels, and every word more slows each update."""
    return -(-(labels + max(16, labels // 2)) // 64)


class Plan:
    """The parameters for every reachable ordered host pair of a fabric.

    Arrays are aligned: pair k goes from hosts[src[k]] to hosts[dst[k]].
    cwnd_clamp 0 means "no clamp" (a path with no switch buffer); pacing_rate
    0 means "not paced" (pacing off); congctl, ssthresh and increase 0 mean
    "not set" (not a long fat path, or no GridDT increase).
    """

    # Per pair, set by _evaluate.
    src: np.ndarray
    dst: np.ndarray
    min_rto_s: np.ndarray
    rto_min_ms: np.ndarray
    initcwnd: np.ndarray
    cwnd_clamp: np.ndarray
    segment: np.ndarray  # payload bytes per segment on the pair's data path
    pacing_rate: np.ndarray  # bytes/s, 0: not paced
    congctl: np.ndarray  # the congestion control's number (_CONGCTL_NAMES), 0: not set
    ssthresh: np.ndarray  # initial slow-start threshold, segments, 0: not set
    increase: np.ndarray  # GridDT's A, segments per round trip, 0: not set
    rtt_prop_s: np.ndarray  # the round trip the windows were sized with
    rtt_spread_s: np.ndarray  # how unsure it is
    rtt_source: np.ndarray  # index into DELAY_SOURCES
    # Set by _finish.
    unreachable: list[tuple[str, str]]  # the host pairs (addresses) with no path
    _segment_toward: np.ndarray  # [a, b]: the segment of the data path from host a to host b
    _quickack_toward: np.ndarray | None  # [a, b]: whether b acknowledges a's segments at once (lossless only)
    # otcp-lossless only (else None): per pair, its window in bytes on the wire and the segment its path
    # alone would take; per host, the segment of the paths into it (_segments_of_receivers; 0: their own).
    _window: np.ndarray | None = None
    _own_segment: np.ndarray | None = None
    _receiver_segment: np.ndarray | None = None

    def __init__(self, fabric: Fabric, bounds: formulas.Bounds = formulas.Bounds(),
                 lossless: formulas.Lossless | None = None,
                 pacing: formulas.Pacing | None = None, previous: "Plan | None" = None,
                 coarse_before: frozenset[str] | None = None, switch_paths: SwitchPaths | None = None,
                 host_paths: HostPaths | None = None, multipath: bool = True,
                 long_paths: formulas.LongPaths | None = formulas.LongPaths()):
        """Plan every pair; with lossless, by the otcp-lossless formulas, else the published ones;
        with pacing, each pair also gets its fair-share pacing rate (otcp-paced); with long_paths,
        the pairs whose BDP exceeds its threshold also get its congestion control, initial
        ssthresh and (griddt) increase.

        With previous (the plan of the same fabric a moment ago), only the
        pairs whose inputs changed are evaluated again: the terms of their
        switch paths (a moved path, a link on it with other facts or
        flow count) or of either host's links, the pair's own flow or
        measured round trip. The rest is taken from
        previous, and so are the route sets of the hosts none of whose
        parameters changed. A change of hosts, switches, reachability or
        bounds evaluates everything.

        coarse_before: the hosts whose sets were on the safe side before
        (route_sets); previous's (Plan.coarse_hosts) when not given.
        switch_paths, host_paths: the fabric's switch paths and the forwarding
        toward each host over them where the caller has them already (the
        controller routes before it plans); else made here, with multipath
        (equal-cost paths spread over the destinations, HostPaths) or not.
        Every pair's parameters follow its data path (its destination's tree)
        and its ACK path (its source's).
        """
        self.fabric = fabric
        self.bounds = bounds
        self.lossless = lossless
        self.pacing = pacing
        self.long_paths = long_paths
        self._congctl = 0 if long_paths is None else _congctl_code(long_paths.congctl)
        self.hosts = sorted(fabric.hosts)  # their addresses; a host's index is its row and column
        self.host_index = {ip: i for i, ip in enumerate(self.hosts)}
        self.attachment = fabric.attachments()
        # The previous plan's paths where the switches and their links are the same (paths depend on nothing
        # else), else paths kept from them where only links went.
        self._switch_links = frozenset(fabric.switch_links())
        self.switch_paths: SwitchPaths = switch_paths if switch_paths is not None else (
            previous.switch_paths if previous is not None and previous._switch_links == self._switch_links
            and previous.switch_paths.switches == sorted(fabric.switches)
            else SwitchPaths(fabric.switches, self._switch_links, previous=previous.switch_paths if previous else None))
        self.host_paths: HostPaths = host_paths if host_paths is not None else (
            previous.host_paths if previous is not None and previous.host_paths.switch_paths is self.switch_paths
            and previous.host_paths.attachment == self.attachment and previous.host_paths.multipath == multipath
            else HostPaths(self.switch_paths, self.attachment, multipath))
        self._links = _LinkTable.build(fabric)
        self._build_host_link_tables()
        self._host_rtts()
        self._count_flows()
        self._receiver_rtt = self._smallest_active_round_trips()
        self._edge_terms, self._host_terms = self._terms_of_switch_paths(previous), self._terms_of_hosts()
        self._edge_line_rows = self._line_rows(previous)
        self._route_sets: dict[str, list[RouteParams]] | None = None
        self._previous_sets: dict[str, list[RouteParams]] = {}  # route sets still right, by host
        self._coarse_before = (coarse_before if coarse_before is not None
                               else previous.coarse_hosts if previous is not None else frozenset())
        self._coarse: frozenset[str] | None = None  # set by route_sets
        self._tries: list[tuple[np.ndarray, int, PrefixTrie, PrefixTrie, np.ndarray]] | None = None  # _family_tries
        self._route_state_kept: _RouteState | None = None  # route_sets' state: made by it, or taken from previous
        self._relabel = np.zeros(0, dtype=np.int64)  # the pairs whose route fields changed since previous
        if not self._evaluate_changes(previous):
            self._evaluate()

    # -- paths ---------------------------------------------------------------

    def _build_host_link_tables(self) -> None:
        links = self._links.index
        sp = self.switch_paths
        self._attach = np.array([sp.index[self.attachment[h]] for h in self.hosts], dtype=np.int64)
        self._uplink = np.array([links[(h, self.attachment[h])] for h in self.hosts], dtype=np.int64)
        self._downlink = np.array([links[(self.attachment[h], h)] for h in self.hosts], dtype=np.int64)
        # The switches hosts hang off (edge switches), and each host's among them.
        self._edges, self._host_edge = np.unique(self._attach, return_inverse=True)
        # Edge-switch-to-host link matrix: [a, d, c] is the link between the c-th and (c+1)-th
        # switch of the path from the a-th edge switch toward host d, padding beyond its end.
        lookup = np.full((len(sp.switches), len(sp.switches)), self._links.padding)
        for (u, v), i in links.items():
            if u in sp.index and v in sp.index:
                lookup[sp.index[u], sp.index[v]] = i
        nodes = self._edge_nodes = self.host_paths.node_matrix(self._edges)
        tails, heads = nodes[:, :, :-1], nodes[:, :, 1:]
        valid = (tails != UNREACHABLE) & (heads != UNREACHABLE)
        # Only as many columns as the longest path from an edge switch (switches elsewhere may be farther).
        longest = int(valid.any(axis=(0, 1)).sum())
        self._segment_links = np.where(valid, lookup[np.maximum(tails, 0), np.maximum(heads, 0)],
                                       self._links.padding)[:, :, :longest]

    def _path_links(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Forward link indices (..., links) for host index arrays src, dst."""
        between = self._segment_links[self._host_edge[src], dst]
        return np.concatenate([self._uplink[src][..., None], between, self._downlink[dst][..., None]], axis=-1)

    def _host_rtts(self) -> None:
        """Matrices of the round trips the hosts measured (NaN where none), if any were."""
        self._rtt_low = self._rtt_high = None
        if not self.fabric.host_rtts:
            return
        n = len(self.hosts)
        self._rtt_low, self._rtt_high = np.full((n, n), np.nan), np.full((n, n), np.nan)
        for (a, b), rtt in self.fabric.host_rtts.items():
            if a in self.host_index and b in self.host_index:
                self._rtt_low[self.host_index[a], self.host_index[b]] = rtt.low_s
                self._rtt_high[self.host_index[a], self.host_index[b]] = rtt.high_s

    def _smallest_active_round_trips(self) -> np.ndarray | None:
        """otcp-lossless: per host, the smallest minimum the hosts measured on the paths of its
        active pairs into it (NaN where none); None without lossless or measurements."""
        if self.lossless is None or self._rtt_low is None:
            return None
        smallest = np.where(self._active & ~np.isnan(self._rtt_low), self._rtt_low, np.inf).min(axis=0)
        return np.where(np.isfinite(smallest), smallest, np.nan)

    def _count_flows(self) -> None:
        """F_l: active flows whose data path contains each link; and the flows N_l counts on it:
        F_l, or with fan_in_admission the sum over destinations d of min(F_l,d, K_d), since d
        lets at most K_d (formulas.admitted_flows of its downlink) of its senders send at once."""
        n, t = len(self.hosts), self._links
        self._active = np.zeros((n, n), dtype=bool)
        flows = [(self.host_index[src], self.host_index[dst], count)
                 for (src, dst), count in self.fabric.flows.items() if count > 0 and src != dst]
        admitting = self.lossless is not None and self.lossless.fan_in_admission
        if flows:
            s, d, count = (np.array(column, dtype=np.int64) for column in zip(*flows))
            reachable = self.switch_paths.hops[self._attach[s], self._attach[d]] != UNREACHABLE
            s, d, count = s[reachable], d[reachable], count[reachable]
            self._active[s, d] = True
            links = self._path_links(s, d)  # (flows, links), padding past a path's end
            np.add.at(t.flows, links.reshape(-1), np.repeat(count, links.shape[1]))
            if admitting:
                assert self.lossless is not None
                # Per (link, destination): its flows, then at most the destination's K of them.
                keys, per_key = np.unique(links * n + d[:, None], return_inverse=True)
                into = np.zeros(len(keys), dtype=np.int64)
                np.add.at(into, per_key.reshape(-1), np.repeat(count, links.shape[1]))
                admitted = formulas.admitted_flows(t.buffer[self._downlink], self.bounds, self.lossless)
                np.add.at(t.counted, keys // n, np.minimum(into, admitted[keys % n]))
        t.flows[t.padding] = 0
        if admitting:
            t.counted[t.padding] = 0
        else:
            t.counted = t.flows

    # -- formulas ------------------------------------------------------------
    #
    # A pair's data path is its source's uplink, the switch path from the
    # source's edge switch toward the destination (its tree, HostPaths) and
    # the destination's downlink; its ACK path the same from the destination
    # toward the source. So every sum and minimum the formulas take over a
    # round trip is a term of those two switch paths combined with a term of
    # each host, and the terms are computed once per (edge switch, host) path
    # and once per host (_terms_of_switch_paths, _terms_of_hosts). Per host pair
    # only their combination remains, and a pair whose terms did not change
    # keeps its parameters. The terms that count flows come twice, along
    # their first axis: [0] for a pair that is not itself a flow
    # (N_l = F_l + 1), [1] for one that is (N_l = F_l).

    def _forward_terms(self, forward: np.ndarray, admitting: bool = False
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """For forward links (..., columns): per sharing (see above), the smallest cap_l / N_l,
        shape (2, ...), and each column's window line, the slope cap_l / N_l and the offset
        buf_l / N_l (the queue target's share with lossless) where the link's tail is a switch,
        0 and +inf elsewhere (so it never wins the minimum), shapes (2, columns, ...); with
        lossless, the smallest high fan-in share over the switch egresses
        (formulas.fan_in_share_bytes, +inf where there is none), shape (2, ...), else None.
        admitting: the links are receivers' downlinks whose receivers admit their senders in
        turns (formulas.admitted_flows), so N_l counts at most that many flows."""
        t = self._links
        capacity, egress = t.capacity[forward], t.switch_egress[forward]
        queue = (t.buffer[forward] if self.lossless is None
                 else formulas.queue_target_bytes(t.buffer[forward], self.lossless))
        admitted = (formulas.admitted_flows(t.buffer[forward], self.bounds, self.lossless)
                    if admitting and self.lossless is not None else None)
        shares, slopes, offsets, fan_ins = [], [], [], []
        for pair_is_active in (False, True):
            # N_l >= 1 always; only padding columns could reach 0 here.
            sharing = np.maximum(formulas.flows_sharing(t.counted[forward], pair_is_active), 1)
            if admitted is not None:
                sharing = np.minimum(sharing, admitted)
            share = capacity / sharing
            shares.append(share.min(axis=-1, initial=np.inf))
            slopes.append(np.moveaxis(np.where(egress, share, 0.0), -1, 0))
            offsets.append(np.moveaxis(np.where(egress, queue / sharing, np.inf), -1, 0))
            if self.lossless is not None:
                fan_in = formulas.fan_in_share_bytes(t.buffer[forward], sharing, self.bounds, self.lossless)
                fan_ins.append(np.where(egress, fan_in, np.inf).min(axis=-1, initial=np.inf))
        return np.stack(shares), np.stack(slopes), np.stack(offsets), np.stack(fan_ins) if fan_ins else None

    def _round_trip_sums(self, round_trip: np.ndarray) -> Terms:
        """Sums (maximum for the delay source) over links (..., columns)."""
        t = self._links
        return {"delay": t.delay[round_trip].sum(axis=-1), "spread": t.spread[round_trip].sum(axis=-1),
                "source": t.source[round_trip].max(axis=-1, initial=0),
                "queueing": (t.buffer / t.capacity)[round_trip].sum(axis=-1)}

    def _terms_of_switch_paths(self, previous: "Plan | None") -> Terms:
        """The switch paths' terms, per path from an edge switch a toward a host d, a * len(hosts) + d:
        the sums along it (a round trip adds those of its two ways), and what the data path takes.
        Computed again only for the paths whose links or whose links' facts (flow counts too)
        changed since previous; the others keep previous's (_paths_changed_since)."""
        between = self._segment_links  # the links from a toward d
        forward = between.reshape(between.shape[0] * between.shape[1], between.shape[-1])
        changed = self._paths_changed_since(previous)
        if changed is None or 2 * changed.sum() > len(changed):  # gathering most paths costs more than all in order
            terms = self._round_trip_sums(forward)
            terms["share"], slope, offset, fan_in = self._forward_terms(forward)
            if fan_in is not None:
                terms["fan_in_share"] = fan_in
            terms["capacity"] = self._links.capacity[forward].min(axis=-1, initial=np.inf)
            self._edge_lines = slope, offset
            terms["slope"], terms["offset"] = _undominated(slope, offset)
            return terms
        assert previous is not None
        kept = previous._edge_terms
        if not changed.any():
            self._edge_lines = previous._edge_lines
            return kept
        redone = forward[changed]
        terms = self._round_trip_sums(redone)
        terms["share"], slope, offset, fan_in = self._forward_terms(redone)
        if fan_in is not None:
            terms["fan_in_share"] = fan_in
        terms["capacity"] = self._links.capacity[redone].min(axis=-1, initial=np.inf)
        merged = {}
        for name, values in terms.items():
            merged[name] = kept[name].copy()
            merged[name][..., changed] = values
        lines = []
        for before, values in zip(previous._edge_lines, (slope, offset)):
            lines.append(before.copy())
            lines[-1][..., changed] = values
        self._edge_lines = lines[0], lines[1]
        new_slope, new_offset = _undominated(slope, offset)
        # A path's lines past the ones it keeps never win the minimum, so it may have more of them than before.
        columns = max(kept["slope"].shape[1], new_slope.shape[1])
        for name, new in (("slope", new_slope), ("offset", new_offset)):
            padding = _LINE_PADDING[name]
            values = np.pad(kept[name], ((0, 0), (0, columns - kept[name].shape[1]), (0, 0)), constant_values=padding)
            values[..., changed] = np.pad(new, ((0, 0), (0, columns - new.shape[1]), (0, 0)), constant_values=padding)
            merged[name] = values
        return merged

    def _paths_changed_since(self, previous: "Plan | None") -> np.ndarray | None:
        """Per switch path (as _terms_of_switch_paths numbers them), whether its links or any of
        their facts or flow counts differ from previous's; None where previous's terms cannot be
        taken at all (other hosts, edge switches, path lengths or lossless settings)."""
        if (previous is None or previous.hosts != self.hosts or previous.lossless != self.lossless
                or not np.array_equal(previous._edges, self._edges)
                or previous._segment_links.shape != self._segment_links.shape):
            return None
        now, before = self._links, previous._links
        # Each of previous's link indices as this plan numbers the same link; a link gone is -1.
        renumbered = np.full(before.padding + 1, -1, dtype=np.int64)
        renumbered[before.padding] = now.padding
        for link, i in before.index.items():
            renumbered[i] = now.index.get(link, -1)
        still = renumbered >= 0
        old, new = np.nonzero(still)[0], renumbered[still]
        facts_moved = np.ones(now.padding + 1, dtype=bool)
        facts_moved[new] = ((now.capacity[new] != before.capacity[old]) | (now.delay[new] != before.delay[old])
                            | (now.buffer[new] != before.buffer[old]) | (now.counted[new] != before.counted[old])
                            | (now.switch_egress[new] != before.switch_egress[old])
                            | (now.spread[new] != before.spread[old]) | (now.source[new] != before.source[old]))
        edges, hosts, columns = self._segment_links.shape
        links = self._segment_links.reshape(edges * hosts, columns)
        moved = (renumbered[previous._segment_links.reshape(links.shape)] != links) | facts_moved[links]
        return moved.any(axis=-1)

    def _line_rows(self, previous: "Plan | None") -> tuple[np.ndarray, np.ndarray]:
        """The switch paths' window lines (slope, offset) as rows [sharing x switch paths +
        path, column], so that a host pair's lines are one contiguous row; previous's where its
        lines are the same objects."""
        slope, offset = self._edge_terms["slope"], self._edge_terms["offset"]
        if previous is not None and previous._edge_terms["slope"] is slope and previous._edge_terms["offset"] is offset:
            return previous._edge_line_rows
        sharing, columns, pairs = slope.shape
        return (np.ascontiguousarray(slope.transpose(0, 2, 1)).reshape(sharing * pairs, columns),
                np.ascontiguousarray(offset.transpose(0, 2, 1)).reshape(sharing * pairs, columns))

    def _terms_of_hosts(self) -> Terms:
        """Each host's terms: its two links on the round trip; on the data path, its uplink's
        share and its downlink's share and window line (an uplink's tail is the host: no line)."""
        terms = self._round_trip_sums(np.stack([self._uplink, self._downlink], axis=-1))
        terms["uplink_share"] = self._forward_terms(self._uplink[:, None])[0]
        admitting = self.lossless is not None and self.lossless.fan_in_admission
        terms["downlink_share"], slope, offset, fan_in = self._forward_terms(self._downlink[:, None], admitting)
        terms["downlink_slope"], terms["downlink_offset"] = slope[:, 0], offset[:, 0]
        if fan_in is not None:
            terms["downlink_fan_in_share"] = fan_in
        terms["capacity"] = np.minimum(self._links.capacity[self._uplink], self._links.capacity[self._downlink])
        return terms

    def _pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every reachable ordered pair (src, dst, index of its data path's switch path), in pair order."""
        n = len(self.hosts)
        reachable = self.switch_paths.hops[np.ix_(self._attach, self._attach)] != UNREACHABLE
        np.fill_diagonal(reachable, False)
        src, dst = (index.astype(np.int64, copy=False) for index in np.nonzero(reachable))
        return src, dst, self._host_edge[src] * n + dst

    def _backward(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The index of the switch path pairs src[i] -> dst[i] take back (their ACKs): dst's edge switch toward src."""
        return self._host_edge[dst] * len(self.hosts) + src

    def _evaluate(self) -> None:
        self.src, self.dst, self._forward = self._pairs()
        self._evaluate_every_pair()
        self._finish()

    def _evaluate_every_pair(self) -> None:
        """The arrays of _PAIR_ARRAYS after src and dst, for every pair of self.src and self.dst, in order:
        each chunk written into them as it is evaluated (no chunk outlives the next)."""
        count = len(self.src)
        columns: list[np.ndarray] = []
        windows = np.empty(count) if self.lossless is not None else None
        for start in range(0, count, _CHUNK_PAIRS):
            end = start + _CHUNK_PAIRS
            *values, window = self._evaluate_pairs(self.src[start:end], self.dst[start:end],
                                                   self._forward[start:end])
            columns = columns or [np.empty(count, dtype=np.asarray(v).dtype) for v in values]
            for column, chunk in zip(columns, values):
                column[start:end] = chunk
            if windows is not None:
                windows[start:end] = window
        for name in _PAIR_ARRAYS[2:]:
            setattr(self, name, columns.pop(0) if columns else np.zeros(0, dtype=np.int64))
        if windows is not None:
            self._window, self._own_segment = windows, self.segment
            self._receiver_segment = self._smallest_active_segments()
            self.segment, self.cwnd_clamp, self.initcwnd = self._segments_of_receivers(slice(None), self.initcwnd)

    def _finish(self, previous: "Plan | None" = None) -> None:
        """What follows from the pair arrays: per data path, the segment and (otcp-lossless) whether
        its receiver acknowledges every segment at once, both set on the receiver's route toward
        the sender (advmss, quickack); the unreachable pairs. Previous's, where it reaches the
        same pairs and has the same segments or clamps."""
        n = len(self.hosts)

        def per_path(values: np.ndarray, default: float) -> np.ndarray:
            """[a, b]: values of the data path from host a to host b (default where none)."""
            matrix = np.full((n, n), default, dtype=np.asarray(values).dtype)
            matrix[self.src, self.dst] = values
            return matrix

        self._segment_toward = (previous._segment_toward if previous is not None and self.segment is previous.segment
                                else per_path(self.segment, self.bounds.mss_bytes))
        self._quickack_toward = (
            None if self.lossless is None
            else previous._quickack_toward if previous is not None and self.cwnd_clamp is previous.cwnd_clamp
            else per_path(formulas.lossless_quickack(self.cwnd_clamp), True))
        if previous is not None:
            self.unreachable = previous.unreachable
            return
        self.unreachable = []
        if len(self.src) < n * (n - 1):
            no_path = self.switch_paths.hops[np.ix_(self._attach, self._attach)] == UNREACHABLE
            self.unreachable = [(self.hosts[s], self.hosts[d]) for s, d in zip(*np.nonzero(no_path))]

    def _evaluate_changes(self, previous: "Plan | None") -> bool:
        """Evaluate only what changed since previous (see __init__); False if it cannot."""
        if previous is None or not self._comparable(previous):
            return False
        redo, delays_kept = self._pairs_to_redo(previous)
        self.src, self.dst, self._forward = previous.src, previous.dst, previous._forward
        if 2 * redo.sum() > len(redo):  # evaluating every pair in order is cheaper than gathering most of them
            self._evaluate_every_pair()
            self._finish()
            changed = np.nonzero((self.rto_min_ms != previous.rto_min_ms) | (self.initcwnd != previous.initcwnd)
                                 | (self.cwnd_clamp != previous.cwnd_clamp)
                                 | (self.pacing_rate != previous.pacing_rate) | (self.congctl != previous.congctl)
                                 | (self.ssthresh != previous.ssthresh) | (self.increase != previous.increase))[0]
            moved = np.nonzero(self._reverse_fields_differ(previous, slice(None)))[0]
        else:
            changed, moved = self._evaluate_again(previous, np.nonzero(redo)[0], delays_kept)
            self._finish(previous)
        self._take_route_state(previous, self._with_reverse_pairs(changed, moved))
        return True

    def _comparable(self, previous: "Plan") -> bool:
        """Whether previous planned the same hosts, switches, reachability and settings (bounds, formulas)."""
        sp = self.switch_paths
        return (previous.hosts == self.hosts and previous.fabric.hosts == self.fabric.hosts
                and previous.attachment == self.attachment and previous.switch_paths.switches == sp.switches
                and (previous.bounds, previous.lossless, previous.pacing, previous.long_paths)
                == (self.bounds, self.lossless, self.pacing, self.long_paths)
                and np.array_equal(previous.switch_paths.hops >= 0, sp.hops >= 0))

    def _pairs_to_redo(self, previous: "Plan") -> tuple[np.ndarray, bool]:
        """Per pair of previous, whether its inputs changed since (its edge switches' or either
        host's terms, its flow, its measured round trip, the round trip into its destination);
        and whether no delay moved at all (then what follows from delays alone is kept)."""
        src, dst, forward = previous.src, previous.dst, previous._forward
        redo = np.zeros(len(src), dtype=bool)
        edges_changed = _changed_terms(self._edge_terms, previous._edge_terms)
        if edges_changed.any():
            redo |= edges_changed[forward] | edges_changed[self._backward(src, dst)]
        hosts_changed = _changed_terms(self._host_terms, previous._host_terms)
        if hosts_changed.any():
            redo |= hosts_changed[src] | hosts_changed[dst]
        measured = [_differs(self._rtt_low, previous._rtt_low), _differs(self._rtt_high, previous._rtt_high)]
        for cells in (self._active != previous._active, *measured):
            if cells is not None and cells.any():  # (source, destination) matrices
                redo |= cells[src, dst]
        receivers_moved = _differs(self._receiver_rtt, previous._receiver_rtt)  # per destination host
        if receivers_moved is not None:
            redo |= receivers_moved[dst]
        # Where no delay moved (flows moved, say), every pair keeps what follows from delays alone.
        delays_kept = (all(cells is None for cells in measured) and receivers_moved is None
                       and not _changed_terms(self._edge_terms, previous._edge_terms, _DELAY_TERMS).any()
                       and not _changed_terms(self._host_terms, previous._host_terms, _DELAY_TERMS).any())
        return redo, delays_kept

    def _evaluate_again(self, previous: "Plan", chosen: np.ndarray,
                        delays_kept: bool) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate the chosen pairs (indices) again and take the rest from previous: each pair
        array is previous's own where none of its values changed. Returns the pairs whose route
        fields changed, and those whose segment or quickack moved (their reverse pairs' routes
        carry those)."""
        names = _PAIR_ARRAYS[2:]
        chosen, columns = self._evaluated_columns(previous, chosen, delays_kept)
        differs = np.zeros((len(names), len(chosen)), dtype=bool)
        for column, name in enumerate(names):
            evaluated = columns[column]
            if evaluated is not None:  # else a column of delays alone, kept
                np.not_equal(evaluated, getattr(previous, name)[chosen], out=differs[column])
        changed_among = np.zeros(len(chosen), dtype=bool)
        for column, name in enumerate(names):
            before = getattr(previous, name)
            if not differs[column].any():  # shared: no plan writes into its pair arrays once made
                setattr(self, name, before)
                continue
            array = before.copy()
            array[chosen] = columns[column]
            setattr(self, name, array)
            if name in PARAMETER_KEYS:
                changed_among |= differs[column]
        candidates = chosen[differs[names.index("segment")] | differs[names.index("cwnd_clamp")]]
        return chosen[changed_among], candidates[self._reverse_fields_differ(previous, candidates)]

    def _evaluated_columns(self, previous: "Plan", chosen: np.ndarray,
                           delays_kept: bool) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """The chosen pairs (grown, with otcp-lossless, by the pairs into a host whose segment moved)
        and their pair arrays after src and dst, evaluated a chunk at a time; None for a column of
        delays alone where delays_kept (previous's)."""
        names = _PAIR_ARRAYS[2:]
        chunks: list[list[np.ndarray | None]] = []
        windows = []
        for start in range(0, len(chosen), _CHUNK_PAIRS):
            k = chosen[start:start + _CHUNK_PAIRS]
            *values, window = self._evaluate_pairs(self.src[k], self.dst[k], self._forward[k],
                                                   previous.rtt_prop_s[k] if delays_kept else None)
            chunks.append(values)
            windows.append(window)
        columns: list[np.ndarray | None] = [
            getattr(previous, name)[:0] if not chunks
            else None if chunks[0][column] is None
            else np.concatenate([chunk[column] for chunk in chunks]) for column, name in enumerate(names)]
        if self.lossless is not None:
            window = np.concatenate([w for w in windows if w is not None]) if chunks else np.zeros(0)
            return self._receivers_follow(previous, chosen, columns, window)
        return chosen, columns

    def _with_reverse_pairs(self, changed: np.ndarray, moved: np.ndarray) -> np.ndarray:
        """The pairs whose route fields changed: their own (changed), and the reverse pairs of those
        whose segment or quickack moved (a host's route toward another carries them for the path
        back: advmss, quickack)."""
        if not len(moved):
            return changed
        src, dst, n = self.src, self.dst, len(self.hosts)
        keys = src * n + dst  # in order: pairs go by source, then destination
        reverse = np.minimum(np.searchsorted(keys, dst[moved] * n + src[moved]), len(keys) - 1)
        relabel = np.zeros(len(src), dtype=bool)
        relabel[changed] = relabel[reverse[keys[reverse] == dst[moved] * n + src[moved]]] = True
        return np.nonzero(relabel)[0]

    def _take_route_state(self, previous: "Plan", changed: np.ndarray) -> None:
        """Take what route_sets needs from previous: its tries, its route state (updated where
        changed, the pairs whose route fields changed) and the sets of the hosts none of whose
        routes changed."""
        is_stale = np.zeros(len(self.hosts), dtype=bool)
        is_stale[self.src[changed]] = True
        # A set kept was chosen under the previous plan's hysteresis: one host's, for all its address families.
        stale = ({self.hosts[i] for i in np.nonzero(is_stale)[0].tolist()}
                 | (self._coarse_before ^ previous._coarse_before))
        self._tries = previous._tries  # the same hosts and attachments
        if previous._route_state_kept is not None:  # taken: it is updated in place, and holds for one plan only
            self._route_state_kept, previous._route_state_kept = previous._route_state_kept, None
            if previous._route_sets is None:  # the state is still of the plan before previous: its changes too
                relabel = np.zeros(len(self.src), dtype=bool)
                relabel[changed] = relabel[previous._relabel] = True
                changed = np.nonzero(relabel)[0]
            self._relabel = changed
        self._previous_sets = {host: routes for host, routes in (previous._route_sets or {}).items()
                               if host not in stale}

    def _reverse_fields_differ(self, previous: "Plan", pairs: np.ndarray | slice) -> np.ndarray:
        """Per pair (of pairs), whether what its receiver's route toward its sender carries for it
        changed since previous: its segment (advmss), or with otcp-lossless whether it is
        acknowledged at once (quickack)."""
        differ = self.segment[pairs] != previous.segment[pairs]
        if self.lossless is not None:
            differ |= (formulas.lossless_quickack(self.cwnd_clamp[pairs])
                       != formulas.lossless_quickack(previous.cwnd_clamp[pairs]))
        return differ

    def _evaluate_pairs(self, src: np.ndarray, dst: np.ndarray, forward: np.ndarray,
                        window_rtt: np.ndarray | None = None) -> tuple[np.ndarray | None, ...]:
        """The formulas for the pairs src[i] -> dst[i] whose data path's switch path is forward[i]:
        the arrays of _PAIR_ARRAYS after src and dst. With window_rtt (the pairs' round trips for
        the windows, as a plan before had them, where no delay moved since), only the columns
        that do not follow from delays alone: the others (_DELAY_ARRAYS) are None."""
        e, h = self._edge_terms, self._host_terms
        n, ways = len(self.hosts), e["share"].shape[-1]
        # Flat indices into the [sharing, ...] terms: one gather each.
        sharing = self._active.reshape(-1)[src * n + dst].astype(np.int64)
        line, up, down = sharing * ways + forward, sharing * n + src, sharing * n + dst
        if window_rtt is None:
            rtt, spread, source, rtt_for_rto = self._round_trips(src, dst, forward)
            queueing = (e["queueing"][forward] + e["queueing"][self._backward(src, dst)]
                        + h["queueing"][src] + h["queueing"][dst])
            min_rto = formulas.min_rto_seconds(rtt_for_rto, queueing)
            rto_min_ms = formulas.rto_min_ms(min_rto, self.bounds)
        else:
            rtt, spread, source, min_rto, rto_min_ms = window_rtt, None, None, None, None
        fair_share = np.minimum(e["share"].reshape(-1)[line],
                                np.minimum(h["uplink_share"].reshape(-1)[up], h["downlink_share"].reshape(-1)[down]))
        # The smallest window of the data path's switch egresses: the switch path's, then the downlink's.
        window = formulas.max_window_bytes(h["downlink_slope"].reshape(-1)[down, None],
                                           h["downlink_offset"].reshape(-1)[down, None], rtt)
        slope, offset = self._edge_line_rows
        if slope.shape[1]:  # else no switch path has a link: one switch
            window = np.minimum(formulas.max_window_bytes(slope[line], offset[line], rtt), window)
        initcwnd = formulas.initcwnd_segments(formulas.initial_window_bytes(fair_share, rtt), self.bounds)
        if self.lossless is None:
            cwnd = formulas.cwnd_clamp_segments(window, self.bounds)
            segment = np.full(len(src), self.bounds.mss_bytes, dtype=np.int64)
        else:
            fan_in_share = np.minimum(e["fan_in_share"].reshape(-1)[line],  # over the data path's switch egresses
                                      h["downlink_fan_in_share"].reshape(-1)[down])
            window = formulas.fan_in_window_bytes(window, fan_in_share, self.bounds)
            segment = formulas.segment_bytes(window, self.bounds, self.lossless)
            cwnd = formulas.lossless_cwnd_segments(window, segment, self.bounds)
            initcwnd = formulas.lossless_initcwnd_segments(cwnd, initcwnd, self.bounds)
        pacing = (np.zeros(len(src), dtype=np.int64) if self.pacing is None
                  else formulas.pacing_rate_bytes_per_s(fair_share, self.pacing))
        if self.long_paths is None:
            congctl = ssthresh = increase = np.zeros(len(src), dtype=np.int64)
        else:
            bottleneck = np.minimum(e["capacity"][forward], np.minimum(h["capacity"][src], h["capacity"][dst]))
            long, ssthresh, increase = formulas.long_path_settings(bottleneck, fair_share, rtt, self.long_paths,
                                                                   self.bounds.mss_bytes)
            congctl = np.where(long, self._congctl, 0).astype(np.int64)
        return (min_rto, rto_min_ms, initcwnd, cwnd, segment, pacing, congctl, ssthresh, increase,
                None if window_rtt is not None else rtt, spread, source, None if self.lossless is None else window)

    def _smallest_active_segments(self) -> np.ndarray:
        """otcp-lossless: per host, the smallest segment its active pairs' paths into it would take
        alone; 0 for a host nothing sends to."""
        assert self._own_segment is not None  # otcp-lossless
        n = len(self.hosts)
        senders, receivers = np.nonzero(self._active)
        smallest = np.full(n, np.iinfo(np.int64).max)
        if len(senders):
            pairs = np.searchsorted(self.src * n + self.dst, senders * n + receivers)  # active pairs have paths
            np.minimum.at(smallest, receivers, self._own_segment[pairs])
        return np.where(smallest == np.iinfo(np.int64).max, 0, smallest)

    def _segments_of_receivers(self, pairs: np.ndarray | slice,
                               initcwnd: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """otcp-lossless: the (segment, cwnd_clamp, initcwnd) of pairs (initcwnd as _evaluate_pairs
        gives it). A host's aggregated route toward many senders carries one advmss, the smallest:
        counted in frames of its own path's segment, a sender's clamp would hold fewer bytes than
        its window. So every path into a host with active pairs takes the smallest segment of those,
        and counts its window in frames of it; a host nothing sends to leaves each its own."""
        assert self._receiver_segment is not None and self._own_segment is not None and self._window is not None
        receiver = self._receiver_segment[self.dst[pairs]]
        segment = np.where(receiver > 0, receiver, self._own_segment[pairs])
        cwnd = formulas.lossless_cwnd_segments(self._window[pairs], segment, self.bounds)
        # Where the window is unbounded the clamp stays 0 and initcwnd the published one.
        return segment, cwnd, formulas.lossless_initcwnd_segments(cwnd, initcwnd, self.bounds)

    def _receivers_follow(self, previous: "Plan", chosen: np.ndarray, columns: list[np.ndarray | None],
                          window: np.ndarray) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """otcp-lossless, in an incremental plan: the chosen pairs' columns (as evaluated, with their
        windows) under _segments_of_receivers, and chosen grown by the pairs into every host whose
        segment moved (with previous's columns, but for segment, clamp and initcwnd)."""
        names = _PAIR_ARRAYS[2:]
        segment_at, cwnd_at, initcwnd_at = (names.index(name) for name in ("segment", "cwnd_clamp", "initcwnd"))
        assert previous._own_segment is not None and previous._window is not None  # otcp-lossless
        self._own_segment, self._window = previous._own_segment.copy(), previous._window.copy()
        self._own_segment[chosen], self._window[chosen] = columns[segment_at], window
        self._receiver_segment = self._smallest_active_segments()
        moved = self._receiver_segment != previous._receiver_segment
        if moved.any():
            extra = np.setdiff1d(np.nonzero(moved[self.dst])[0], chosen, assume_unique=True)
            merged = np.concatenate([chosen, extra])
            order = np.argsort(merged, kind="stable")
            chosen = merged[order]
            columns = [None if values is None else np.concatenate([values, getattr(previous, name)[extra]])[order]
                       for values, name in zip(columns, names)]
        initcwnd = columns[initcwnd_at]
        assert initcwnd is not None  # evaluated: it does not follow from delays alone
        columns[segment_at], columns[cwnd_at], columns[initcwnd_at] = self._segments_of_receivers(chosen, initcwnd)
        return chosen, columns

    def _round_trips(self, src: np.ndarray, dst: np.ndarray,
                     forward: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """RTT_prop for the windows, its spread and source, and the RTT for minRTO, per pair.

        The safe side of an estimate differs by parameter: windows grow
        with the round trip, so they take the smallest (the hosts' measured
        minimum, or the links' sum where it is smaller and no link's delay is
        a default); minRTO shrinks
        with it, so it takes the top of the estimate (plus the spread).

        otcp-lossless: a measured pair's window takes the smallest minimum
        measured on any active pair's path into its destination, where that
        is smaller than its own. Each is an upper bound of the round trip into
        the host (a sender measures the queue its neighbours built too), and
        the paths into one host share its downlink: so they get alike windows.
        An unmeasured pair whose links' delays are defaults takes it too: a
        measurement of the host's downlink beats a guess.
        """
        e, h = self._edge_terms, self._host_terms
        backward = self._backward(src, dst)
        rtt = e["delay"][forward] + e["delay"][backward] + h["delay"][src] + h["delay"][dst]
        spread = e["spread"][forward] + e["spread"][backward] + h["spread"][src] + h["spread"][dst]
        source = np.maximum(np.maximum(e["source"][forward], e["source"][backward]),
                            np.maximum(h["source"][src], h["source"][dst]))
        if self._rtt_low is None or self._rtt_high is None:
            return rtt, spread, source, rtt + spread
        low, high = self._rtt_low[src, dst], self._rtt_high[src, dst]
        measured = ~np.isnan(low)
        known = source <= KNOWN
        if self._receiver_rtt is not None:
            into = self._receiver_rtt[dst]
            low = np.where(measured, np.fmin(low, into), np.where(known, low, into))
        # Where every link's delay is known (measured or declared), both are upper
        # bounds of the propagation round trip (a loaded host measures its queues
        # too), so the windows take the smaller: pairs sharing a bottleneck then
        # get alike windows, whichever of them a host measured busy.
        host = ~np.isnan(low) & ~(known & (rtt <= low))
        window_rtt = np.where(host, low, rtt)
        return (window_rtt, np.where(measured, high - window_rtt, spread), np.where(host, HOST, source),
                np.where(measured, high, rtt + spread))

    # -- views ---------------------------------------------------------------

    def link_flows(self) -> dict[tuple[str, str], int]:
        """{(u, v): F_l} for every directed link with active flows."""
        names = {i: link for link, i in self._links.index.items()}
        return {names[i]: int(n) for i, n in enumerate(self._links.flows[:-1]) if n}

    def pairs_per_link(self) -> dict[tuple[str, str], int]:
        """{(u, v): the pairs of the plan whose data path crosses the directed link}, for links some
        pair crosses: how the forwarding spreads an all-to-all load (every pair one flow)."""
        through = np.zeros(len(self._links.capacity), dtype=np.int64)
        for start in range(0, len(self.src), _CHUNK_PAIRS):
            links = self._path_links(self.src[start:start + _CHUNK_PAIRS], self.dst[start:start + _CHUNK_PAIRS])
            through += np.bincount(links.reshape(-1), minlength=len(through))
        names = list(self._links.index)  # the table's links in their order
        return {names[i]: int(n) for i, n in enumerate(through[:-1].tolist()) if n}

    def __len__(self) -> int:
        return len(self.src)

    def switch_path(self, src: int, dst: int) -> list[str]:
        """The switches along the data path from host src to host dst (indices; a pair of the plan)."""
        nodes = self._edge_nodes[self._host_edge[src], dst]
        switches = self.switch_paths.switches
        return [switches[k] for k in nodes.tolist() if k != UNREACHABLE]

    def hops(self, k: int) -> list[str]:
        """The names of the nodes along pair k's data path (display)."""
        src, dst = int(self.src[k]), int(self.dst[k])
        names = self.fabric.name
        return [names(self.hosts[src]), *self.switch_path(src, dst), names(self.hosts[dst])]

    def pair_index(self, src: str, dst: str) -> int | None:
        """The index of the pair from host address src to dst, or None where the plan has no such pair."""
        if src not in self.host_index or dst not in self.host_index:
            return None
        n, key = len(self.hosts), self.host_index[src] * len(self.hosts) + self.host_index[dst]
        keys = self.src * n + self.dst  # in order: pairs go by source, then destination
        at = int(np.searchsorted(keys, key))
        return at if at < len(keys) and keys[at] == key else None

    def explain(self, k: int, mss_origin: str = NOT_RECORDED) -> PathExplanation:
        """Why pair k's parameters are what they are: its links and the terms of its formulas
        (otcp.planning.explain), from the same link table and formulas as the plan; mss_origin
        says where the plan's MSS came from."""
        s, d = int(self.src[k]), int(self.dst[k])
        t = self._links
        active, rtt = bool(self._active[s, d]), float(self.rtt_prop_s[k])

        def links(a: int, b: int) -> list[int]:
            return [i for i in self._path_links(np.array([a]), np.array([b]))[0].tolist() if i != t.padding]

        admitting = self.lossless is not None and self.lossless.fan_in_admission
        data = [self._link_term(i, active, rtt, admitting and i == int(self._downlink[d])) for i in links(s, d)]
        ack = [self._link_term(i, None, rtt) for i in links(d, s)]
        round_trip = links(s, d) + links(d, s)
        bottleneck = min(data, key=lambda link: link.capacity_bytes_per_s / (link.sharing or 1))
        fair_share = bottleneck.capacity_bytes_per_s / (bottleneck.sharing or 1)
        windows = [link for link in data if link.window_bytes is not None]
        window_link = min(windows, key=lambda link: link.window_bytes or 0.0) if windows else None
        window = window_link.window_bytes if window_link is not None else None
        rtt_for_rto = float(self._round_trips(np.array([s]), np.array([d]), self._forward[k:k + 1])[3][0])
        initial_window = float(formulas.initial_window_bytes(fair_share, rtt))
        clamps, segment_terms = self._clamps(k, initial_window, window, fair_share)
        return PathExplanation(
            src=self.fabric.name(self.hosts[s]), dst=self.fabric.name(self.hosts[d]), dst_ip=self.hosts[d],
            pair_is_flow=active, data_path=tuple(data), ack_path=tuple(ack), bottleneck=bottleneck,
            fair_share_bytes_per_s=fair_share, window_link=window_link, window_bytes=window,
            link_delay_sum_s=float(t.delay[round_trip].sum()), rtt_prop_s=rtt,
            rtt_origin=DELAY_SOURCES[int(self.rtt_source[k])], rtt_for_rto_s=rtt_for_rto,
            queueing_s=float((t.buffer / t.capacity)[round_trip].sum()), min_rto_s=float(self.min_rto_s[k]),
            mss_bytes=self.bounds.mss_bytes, mss_origin=mss_origin, initial_window_bytes=initial_window,
            rto_min_ms=int(self.rto_min_ms[k]), initcwnd=int(self.initcwnd[k]),
            cwnd_clamp=int(self.cwnd_clamp[k]) or None, segment_bytes=int(self.segment[k]),
            pacing_rate=int(self.pacing_rate[k]) or None, clamps=clamps, segment=segment_terms,
            long_path=self._long_path_terms(k, data, rtt))

    def _long_path_terms(self, k: int, data: list[LinkTerm], rtt: float) -> LongPathTerms | None:
        """How the long-fat-path rule judged pair k, whose data path is data and RTT_prop rtt."""
        if self.long_paths is None:
            return None
        bdp = min(link.capacity_bytes_per_s for link in data) * rtt
        congctl = _CONGCTL_NAMES[int(self.congctl[k])]
        return LongPathTerms(bdp, self.long_paths.bdp_threshold_bytes, congctl is not None, congctl,
                             int(self.ssthresh[k]) or None, int(self.increase[k]) or None, self.long_paths.griddt,
                             self.long_paths.reference_rtt_s)

    def _link_term(self, i: int, active: bool | None, rtt: float, admitting: bool = False) -> LinkTerm:
        """Link i (of the link table) in an explanation: on a data path whose pair is a flow or
        not (active), or on an ACK path (active None); rtt, the pair's RTT_prop; admitting, the
        downlink of a destination that admits its senders in turns (N_l counts at most those)."""
        t = self._links
        admitting_anywhere = self.lossless is not None and self.lossless.fan_in_admission
        u, v = list(t.index)[i]  # the table's links in their order
        facts, origins = self.fabric.links[(u, v)], self.fabric.origins.get((u, v))
        sharing = max(int(formulas.flows_sharing(int(t.counted[i]), active)), 1) if active is not None else None
        if sharing is not None and admitting and self.lossless is not None:
            sharing = min(sharing, int(formulas.admitted_flows(t.buffer[i], self.bounds, self.lossless)))
        window = None
        if sharing is not None and t.switch_egress[i]:
            queue = (t.buffer[i] if self.lossless is None
                     else float(formulas.queue_target_bytes(t.buffer[i], self.lossless)))
            window = float(formulas.max_window_bytes(np.array([[t.capacity[i] / sharing]]),
                                                     np.array([[queue / sharing]]), rtt)[0])
        return LinkTerm(self.fabric.name(u), self.fabric.name(v), float(t.capacity[i]),
                        origins.capacity if origins else NOT_RECORDED, float(t.buffer[i]),
                        HOST_QUEUE if u in self.fabric.hosts else origins.buffer if origins else NOT_RECORDED,
                        float(t.delay[i]), origins.delay if origins else facts.delay_source, int(t.flows[i]),
                        sharing, window, int(t.counted[i]) if admitting_anywhere else None)

    def _clamps(self, k: int, initial_window: float, window: float | None,
                fair_share: float) -> tuple[tuple[Clamp, ...], SegmentTerms | None]:
        """The bounds that changed pair k's values (what each formula gave before them), and with
        otcp-lossless how its segment was chosen; initial_window, window (None: unbounded) and
        fair_share as the explanation has them."""
        bounds = self.bounds
        clamps: list[Clamp] = []

        def bounded(parameter: str, formula: float, low: tuple[str, int], high: tuple[str, int]) -> None:
            clamps.extend(Clamp(parameter, formula, name, bound)
                          for (name, bound), beyond in ((low, formula < low[1]), (high, formula > high[1])) if beyond)

        bounded("rto_min_ms", int(formulas.whole_ms_above(self.min_rto_s[k])),
                ("bounds.rto_min_ms[0]", bounds.rto_min_ms_low), ("bounds.rto_min_ms[1]", bounds.rto_min_ms_high))
        initcwnd_bounds = (("bounds.initcwnd[0]", bounds.initcwnd_low), ("bounds.initcwnd[1]", bounds.initcwnd_high))
        cwnd_bounds = (("bounds.cwnd[0]", bounds.cwnd_low), ("bounds.cwnd[1]", bounds.cwnd_high))
        segment_terms = None
        if self.lossless is None or window is None:
            bounded("initcwnd", float(formulas.whole_segments(initial_window, bounds.mss_bytes)), *initcwnd_bounds)
            if window is not None:
                bounded("cwnd_clamp", float(formulas.whole_segments(window, bounds.mss_bytes)), *cwnd_bounds)
        else:
            assert self._window is not None and self._own_segment is not None and self._receiver_segment is not None
            wire, segment = float(self._window[k]), int(self.segment[k])
            fitting = int(formulas.fitting_segment_bytes(wire, bounds))
            raised = self.lossless.fan_in_queue_fraction if wire > window else None  # the fan-in rule took over
            admitted = (int(formulas.admitted_flows(self._links.buffer[self._downlink[self.dst[k]]], bounds,
                                                    self.lossless))
                        if self.lossless.fan_in_admission else None)
            segment_terms = SegmentTerms(wire, formulas.FRAME_OVERHEAD_BYTES, int(formulas.window_frames(wire, bounds)),
                                         fitting, self.lossless.mss_floor_bytes, int(self._own_segment[k]),
                                         int(self._receiver_segment[self.dst[k]]), segment, raised, admitted)
            bounded("segment_bytes", fitting, ("parameters.mss_floor_bytes", self.lossless.mss_floor_bytes),
                    ("bounds.mss_bytes", bounds.mss_bytes))
            bounded("cwnd_clamp", float(formulas.whole_segments(wire, segment + formulas.FRAME_OVERHEAD_BYTES)),
                    *cwnd_bounds)
            bounded("initcwnd", int(self.cwnd_clamp[k]), *initcwnd_bounds)  # the whole window at once
        if self.pacing is not None:
            bounded("pacing_rate", float(formulas.paced_share(fair_share, self.pacing)),
                    ("the smallest pacing rate", formulas.PACING_RATE_LOW_BYTES_PER_S),
                    ("the largest pacing rate", formulas.MAX_PACING_RATE_BYTES_PER_S))
        return tuple(clamps), segment_terms

    def _quickacks(self, pairs: np.ndarray | slice) -> np.ndarray:
        """Per pair (indices), whether its source's route toward its destination carries quickack
        (acknowledging at once what the destination sends): always, but where otcp-lossless turns it off."""
        if self._quickack_toward is None:
            return np.ones(len(self.src[pairs]), dtype=bool)
        return self._quickack_toward[self.dst[pairs], self.src[pairs]]

    def records(self) -> Iterator[dict[str, Any]]:
        """Every reachable pair's record in the plan output format (docs/design.md, "Parameter
        set"), in pair order, built from whole columns (a million pairs in about a second).
        Records are for people: hosts by name, times in microseconds."""
        ips, names = self.hosts, self.fabric.hosts
        middles: dict[int, list[str]] = {}  # switch paths, shared by the pairs from one switch to one host
        forward = self._forward.tolist()
        columns = zip(self.src.tolist(), self.dst.tolist(), np.round(self.min_rto_s * 1e6, 3).tolist(),
                      self.rto_min_ms.tolist(), self.initcwnd.tolist(), self.cwnd_clamp.tolist(),
                      self.segment.tolist(), self.pacing_rate.tolist(), np.round(self.rtt_prop_s * 1e6, 3).tolist(),
                      np.round(self.rtt_spread_s * 1e6, 3).tolist(), self.rtt_source.tolist(),
                      self._quickacks(slice(None)).tolist(), self.congctl.tolist(), self.ssthresh.tolist(),
                      self.increase.tolist())
        for k, (s, d, min_rto_us, rto_min_ms, initcwnd, clamp, segment, pacing, rtt_us, spread_us, source,
                quickack, congctl, ssthresh, increase) in enumerate(columns):
            middle = middles.get(forward[k])
            if middle is None:
                middle = middles[forward[k]] = self.switch_path(s, d)
            src, dst = names[ips[s]], names[ips[d]]
            yield {"src": src, "dst": dst, "dst_ip": ips[d], "hops": [src, *middle, dst],
                   "min_rto_us": min_rto_us, "rto_min_ms": rto_min_ms, "initcwnd": initcwnd,
                   "cwnd_clamp": clamp or None, "segment_bytes": segment, "pacing_rate": pacing or None,
                   "rtt_prop_us": rtt_us,
                   "rtt_spread_us": spread_us, "rtt_source": DELAY_SOURCES[source], "quickack": quickack,
                   "congctl": _CONGCTL_NAMES[congctl], "ssthresh": ssthresh or None, "increase": increase or None}

    def record_rows(self, generation: int) -> Iterator[tuple[Any, ...]]:
        """The records as rows of the store's parameters table, (generation, src,
        dst, dst_ip, hops as JSON, min_rto_us, rto_min_ms, initcwnd, cwnd_clamp,
        quickack, segment_bytes, rtt_prop_us, rtt_spread_us, rtt_source,
        pacing_rate, congctl, ssthresh, increase), in pair order, straight from the columns: no dict per pair."""
        ips = np.array(self.hosts, dtype=object)
        names = np.array([self.fabric.hosts[ip] for ip in self.hosts], dtype=object)
        # One JSON hops list per pair: the middle is per (source's switch, destination) path.
        middles: dict[int, str] = {}
        sources, destinations = names[self.src].tolist(), names[self.dst].tolist()
        quoted = np.array([json.dumps(name) for name in names.tolist()], dtype=object)
        hops = []
        for s, d, way, src, dst in zip(quoted[self.src].tolist(), quoted[self.dst].tolist(), self._forward.tolist(),
                                       self.src.tolist(), self.dst.tolist()):
            middle = middles.get(way)
            if middle is None:
                middle = middles[way] = json.dumps(self.switch_path(src, dst))[1:-1]
            hops.append(f"[{s}, {middle}, {d}]")
        clamp = self.cwnd_clamp.astype(object)
        clamp[self.cwnd_clamp == 0] = None
        pacing = self.pacing_rate.astype(object)
        pacing[self.pacing_rate == 0] = None
        source_names = np.array(DELAY_SOURCES, dtype=object)[self.rtt_source].tolist()
        congctl = np.array(_CONGCTL_NAMES, dtype=object)[self.congctl].tolist()
        ssthresh, increase = ([value or None for value in column.tolist()] for column in (self.ssthresh, self.increase))
        return zip(itertools.repeat(generation), sources, destinations, ips[self.dst].tolist(), hops,
                   np.round(self.min_rto_s * 1e6, 3).tolist(), self.rto_min_ms.tolist(), self.initcwnd.tolist(),
                   clamp.tolist(), self._quickacks(slice(None)).astype(int).tolist(), self.segment.tolist(),
                   np.round(self.rtt_prop_s * 1e6, 3).tolist(), np.round(self.rtt_spread_s * 1e6, 3).tolist(),
                   source_names, pacing.tolist(), congctl, ssthresh, increase)

    def routes_for(self, host: str) -> list[RouteParams]:
        """The routes of one host's (an address's) parameter set before aggregation: one per
        reachable destination (docs/design.md, "Parameter set")."""
        source = self.host_index[host]
        pairs = np.nonzero(self.src == source)[0]
        fields = self._route_fields(pairs)
        routes = []
        for k, values in zip(pairs.tolist(), zip(*(fields[name].tolist() for name in PARAMETER_KEYS))):
            dst_ip = self.hosts[self.dst[k]]
            rto, initcwnd, clamp, advmss, rate, quickack, congctl, ssthresh, increase = values
            parameters = (rto, initcwnd, clamp or None, advmss or None, rate or None, bool(quickack),
                          _CONGCTL_NAMES[congctl], ssthresh or None, increase or None)
            routes.append(RouteParams.of(f"{dst_ip}/{128 if ':' in dst_ip else 32}", parameters))
        return routes

    def admissions(self) -> dict[str, int]:
        """{host address: K}, with fan_in_admission: the most senders the host may ask to send to
        it at once (formulas.admitted_flows of its downlink's buffer, at most the wire's ADMIT
        top: asking fewer than the plan counts is the safe side); {} without it."""
        if self.lossless is None or not self.lossless.fan_in_admission:
            return {}
        admitted = formulas.admitted_flows(self._links.buffer[self._downlink], self.bounds, self.lossless)
        return dict(zip(self.hosts, np.minimum(admitted, ADMIT[1]).tolist()))

    def route_sets(self) -> dict[str, list[RouteParams]]:
        """{host address: the routes of its parameter set}, aggregated (otcp.planning.aggregate, with its "don't
        care" addresses) to at most one route per edge switch, per address family:

        - the fewest prefixes under which longest-prefix match gives every reachable destination
          exactly the parameters routes_for gives it, where they fit in that budget;
        - else one route per prefix of a trie coarsened to that budget (PrefixTrie.coarsened:
          the edge switches' own prefixes where their hosts' addresses have them), each with
          the safe side of the parameters of the destinations under it (_safe_side), merged
          again where alike. A host whose set was on the safe side before (coarse_before)
          stays there until its exact set fits in EXACT_AGAIN_SHARE of the budget.

        Computed once; a host whose parameters did not change since the previous plan keeps its set,
        and the others' come from the previous plan's route state, updated where labels changed
        (_route_state)."""
        if self._route_sets is not None:
            return self._route_sets
        sources = np.array([i for i, host in enumerate(self.hosts) if host not in self._previous_sets], dtype=np.int64)
        state, over = self._route_state(sources)
        sets: dict[str, list[RouteParams]] = {self.hosts[i]: [] for i in sources}
        coarse_now = {host for host in self._coarse_before if host in self._previous_sets}
        for family, is_over in zip(state.families, over):
            coarse_now.update(self.hosts[i] for i in sources[is_over])
            for rows, aggregation, numbering in ((sources[~is_over], family.exact, state.exact),
                                                 (sources[is_over], family.coarse, state.safe)):
                for i, routes in zip(rows, state.routes(aggregation, rows, numbering)):
                    sets[self.hosts[i]] += routes
        self._route_sets = {host: sets[host] if host in sets else self._previous_sets[host] for host in self.hosts}
        self._coarse = frozenset(coarse_now)
        if len(state.made) > MADE_ROUTES_PER_HOST * len(self.hosts):  # routes of sets long gone: start again
            state.made = {}
        return self._route_sets

    @property
    def coarse_hosts(self) -> frozenset[str]:
        """The hosts whose sets are on the safe side (route_sets), for the next plan's
        hysteresis; while route_sets was not made, the ones before this plan."""
        return self._coarse if self._coarse is not None else self._coarse_before

    def _route_state(self, sources: np.ndarray) -> tuple[_RouteState, list[np.ndarray]]:
        """The exact labels of every pair and ORTC's state over them: previous's, updated for the pairs
        whose route fields changed since; made afresh for a first plan, where most pairs changed,
        or where the labels outgrew it. And, per address family, which of sources have their
        sets on the safe side (their coarse state is then up to date): those whose exact sets
        are over the budget, or over EXACT_AGAIN_SHARE of it for those on the safe side before."""
        state, self._route_state_kept = self._route_state_kept, None
        made = state.made if state is not None else {}  # routes are the same whatever numbers their labels
        tries = self._family_tries()
        if state is not None and len(self._relabel) > RELABEL_SHARE * len(self.src):
            state = None
        if state is not None and len(self._relabel):
            pairs = self._relabel
            labels, params = _numbered(self._route_fields(pairs))
            if not state.relabel(self.src[pairs], self.dst[pairs], labels, params, tries):
                state = None
        was_coarse = np.array([self.hosts[i] in self._coarse_before for i in sources.tolist()], dtype=bool)

        def over_budget(state: _RouteState) -> list[np.ndarray]:
            return [family.exact.route_counts(sources) > np.where(was_coarse, int(budget * EXACT_AGAIN_SHARE), budget)
                    for family, (_, budget, _, _, _) in zip(state.families, tries)]

        over = over_budget(state) if state is not None else []
        if state is not None and not state.settle([sources[is_over] for is_over in over], tries):
            state = None
        if state is None:
            labels = np.full((len(self.hosts), len(self.hosts)), -1, dtype=np.int64)
            labels[self.src, self.dst], params = _numbered(self._route_fields(slice(None)))
            state = _RouteState.build(labels, params, tries)
            state.made = made
            over = over_budget(state)
        self._route_state_kept = state
        return state, over

    def _family_tries(self) -> list[tuple[np.ndarray, int, PrefixTrie, PrefixTrie, np.ndarray]]:
        """Per address family with hosts, IPv4 first: its hosts' indices, the route budget (its
        hosts' edge switches), the trie of their addresses, that trie coarsened to the budget and
        the coarse leaf covering each address (PrefixTrie.coarsened). Made once for a fabric's
        hosts and attachments, and kept by the plans after it."""
        if self._tries is None:
            self._tries = []
            for family in (False, True):
                members = np.array([i for i, ip in enumerate(self.hosts) if (":" in ip) == family], dtype=np.int64)
                if len(members):
                    trie = PrefixTrie.build([self.hosts[i] for i in members])
                    edges = self._host_edge[members]
                    budget = len(np.unique(edges))
                    self._tries.append((members, budget, trie, *trie.coarsened(edges.tolist(), budget)))
        return self._tries

    def _route_fields(self, pairs: np.ndarray | slice) -> dict[str, np.ndarray]:
        """{route field: array}: what routes_for gives each of pairs (indices, or a slice: views
        of the pair arrays then), 0 for a null field (no clamp, the kernel's MSS, not paced, no
        long-path setting), quickack as 0 or 1, congctl as its number (_CONGCTL_NAMES)."""
        if self.segment.min(initial=self.bounds.mss_bytes) >= self.bounds.mss_bytes:  # the kernel's MSS everywhere
            advmss = np.zeros(len(self.src[pairs]), dtype=np.int64)
        else:
            advmss = formulas.advmss_bytes(self._segment_toward[self.dst[pairs], self.src[pairs]], self.bounds)
        return {"rto_min_ms": self.rto_min_ms[pairs], "initcwnd": self.initcwnd[pairs],
                "cwnd_clamp": self.cwnd_clamp[pairs], "advmss": advmss, "pacing_rate": self.pacing_rate[pairs],
                "quickack": self._quickacks(pairs).astype(np.int64), "congctl": self.congctl[pairs],
                "ssthresh": self.ssthresh[pairs], "increase": self.increase[pairs]}


class PlanRecords(Sequence[dict]):
    """A plan's per-pair records, made only when someone asks (the live view,
    the metrics, a test): a million dicts cost seconds, and most generations
    are never looked at. Iterating makes them once and keeps them; `rows` gives
    the store its rows straight from the plan's columns."""

    def __init__(self, plan: Plan) -> None:
        self._plan: Plan | None = plan
        self._count = len(plan)
        self._records: list[dict] | None = None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.made())

    def __getitem__(self, index: Any) -> Any:
        return self.made()[index]

    def made(self) -> list[dict]:
        """The records as a list (made on the first call; the plan is then let go)."""
        if self._records is None:
            assert self._plan is not None
            self._records, self._plan = list(self._plan.records()), None
        return self._records

    def rows(self, generation: int) -> Iterator[tuple[Any, ...]] | None:
        """Rows of the store's parameters table (`Plan.record_rows`)."""
        if self._plan is not None:
            return self._plan.record_rows(generation)
        return None
