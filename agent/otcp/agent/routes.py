"""OTCP's per-destination routes in the kernel: plan, apply as a whole, read
back, remove.

Every route the agent creates carries the route protocol number `OTCP_PROTO`
(79, unused in iproute2's /etc/iproute2/rt_protos); that number is how the
agent recognises its own routes and it never changes, replaces or deletes a
route without it. A destination's route:

- goes into the table the kernel would look up for it now (``ip route get``),
  with the nexthop and device the kernel would use now; when an OTCP route
  for that exact prefix already exists (an earlier generation), the nexthop
  is taken from the most specific non-OTCP route covering it instead, so a
  changed gateway is followed rather than pinned;
- carries ``rto_min lock``, ``initcwnd``, ``cwnd lock N`` (when the clamp is
  not null) and ``quickack 1`` (when quickack is true) as route metrics
  (TCP reads a route's rto_min and cwnd only when they are locked), and a
  long fat path's ``congctl NAME`` (every new connection to it uses that
  congestion control) and ``ssthresh lock N`` (the record: on this kernel it
  reaches connections only through the tcp_metrics cache, docs/longpaths.md);
- is skipped, and reported, when a non-OTCP route for the same prefix exists
  in that table, when the kernel has no route to it, or when the kernel
  routes it as something other than unicast (a local address, broadcast).

`RouteTable.apply` applies a validated set as a whole: if the kernel
refuses any route, every change made so far is undone and the routes of the
previous generation are back, exactly as they were. After a change, the
kernel's cached TCP metrics of the changed destinations are cleared, or
their connections would keep the old window clamp (`otcp.agent.tcp_metrics`).
"""

import errno
import ipaddress
import logging
import os
import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyroute2.netlink import NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE
from pyroute2.netlink.rtnl import RTM_DELROUTE, RTM_NEWROUTE

from otcp.agent.netlink import NetlinkMessage, RouteFields, RouteSocket
from otcp.agent.tcp_metrics import TcpMetrics
from otcp.wire.messages import RouteResult
from otcp.wire.paramset import ParamSet, RouteParams

LOG = logging.getLogger("otcp.agent")

#: The route protocol number of every OTCP route (``proto 79`` in ``ip route``).
OTCP_PROTO = 79

RTN_UNICAST = 1
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
RT_SCOPE_NOWHERE = 255
RT_TABLE_MAIN = 254
RTAX_SSTHRESH = 6
RTAX_CWND = 7
RTAX_ADVMSS = 8
RTAX_RTO_MIN = 13
RTNH_F_ONLINK = 4
IPV6_DEFAULT_METRIC = 1024
_ROUTE_TYPES = {
    0: "unspec", 1: "unicast", 2: "local", 3: "broadcast", 4: "anycast", 5: "multicast",
    6: "blackhole", 7: "unreachable", 8: "prohibit", 9: "throw", 10: "nat", 11: "xresolve",
}
_TABLE_NAMES = {253: "default", 254: "main", 255: "local"}
_PROTO_NAMES = {
    0: "unspec", 1: "redirect", 2: "kernel", 3: "boot", 4: "static", 8: "gated", 9: "ra", 10: "mrt",
    11: "zebra", 12: "bird", 13: "dnrouted", 14: "xorp", 15: "ntk", 16: "dhcp", 18: "keepalived",
    42: "babel", 99: "openr", 186: "bgp", 187: "isis", 188: "ospf", 189: "rip", 192: "eigrp",
    OTCP_PROTO: "otcp",
}


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Request = tuple[int, int, RouteFields]  # (netlink message type, flags, route fields): RouteSocket.execute
Undo = tuple[int, int, "Route"]  # a Request to be, its route's fields made only if it is sent


class ApplyError(Exception):
    """The kernel refused part of a set; the previous routes were put back.

    `rolled_back` is False only if undoing also failed (then the message
    lists what could not be restored).
    """

    def __init__(self, message: str, rolled_back: bool = True) -> None:
        super().__init__(message)
        self.rolled_back = rolled_back


@dataclass(frozen=True)
class Route:
    """One OTCP route: where it is, where it leads, and its TCP parameters."""

    family: int
    dst: str  # canonical prefix, "10.0.0.2/32"
    table: int
    oif: int | None
    gateway: str | None
    prefsrc: str | None
    scope: int
    priority: int | None
    rto_min_ms: int | None
    initcwnd: int | None
    cwnd_clamp: int | None
    quickack: bool
    onlink: bool = False
    advmss: int | None = None
    congctl: str | None = None
    ssthresh: int | None = None

    @property
    def key(self) -> tuple[int, int, str, int]:
        """What identifies a route to the kernel (replace and delete match on it)."""
        return (self.family, self.table, self.dst, self._metric())

    def _metric(self) -> int:
        if self.priority is None:
            return IPV6_DEFAULT_METRIC if self.family == socket.AF_INET6 else 0
        return self.priority

    def same_as(self, other: "Route") -> bool:
        """Same place, nexthop and parameters (nothing to write)."""
        return self.key == other.key and self.nexthop == other.nexthop and self.params == other.params

    @property
    def nexthop(self) -> tuple[int | None, str | None, str | None, int, bool]:
        """Where the route sends packets: (oif, gateway, prefsrc, scope, onlink)."""
        return (self.oif, self.gateway, self.prefsrc, self.scope, self.onlink)

    @property
    def params(self) -> tuple[int | None, int | None, int | None, int | None, bool, str | None, int | None]:
        """The TCP parameters the route carries: rto_min_ms, initcwnd, cwnd_clamp, advmss, quickack,
        congctl, ssthresh."""
        return (self.rto_min_ms, self.initcwnd, self.cwnd_clamp, self.advmss, self.quickack, self.congctl,
                self.ssthresh)

    def fields(self) -> RouteFields:
        """The netlink fields that create this route (see RouteSocket.execute)."""
        network = ipaddress.ip_network(self.dst)
        metrics: dict[str, int | str] = {}
        locks = 0
        if self.rto_min_ms is not None:
            # TCP uses a route's rto_min only when it is locked (tcp_rto_min()
            # checks dst_metric_locked); `ip route ... rto_min` locks it too.
            metrics["RTAX_RTO_MIN"] = self.rto_min_ms
            locks |= 1 << RTAX_RTO_MIN
        if self.initcwnd is not None:
            metrics["RTAX_INITCWND"] = self.initcwnd
        if self.cwnd_clamp is not None:
            # A locked cwnd becomes the connection's window clamp.
            metrics["RTAX_CWND"] = self.cwnd_clamp
            locks |= 1 << RTAX_CWND
        if self.advmss is not None:
            # The MSS this host advertises to the destination: what the peer sends it.
            metrics["RTAX_ADVMSS"] = self.advmss
        if self.ssthresh is not None:
            metrics["RTAX_SSTHRESH"] = self.ssthresh
            locks |= 1 << RTAX_SSTHRESH
        if self.congctl is not None:
            metrics["RTAX_CC_ALGO"] = self.congctl
        if locks:
            metrics["RTAX_LOCK"] = locks
        if self.quickack:
            metrics["RTAX_QUICKACK"] = 1
        return {
            "family": self.family, "dst": str(network.network_address), "dst_len": network.prefixlen,
            "table": self.table, "proto": OTCP_PROTO, "scope": self.scope, "type": RTN_UNICAST,
            "oif": self.oif, "gateway": self.gateway, "prefsrc": self.prefsrc, "priority": self.priority,
            "flags": RTNH_F_ONLINK if self.onlink else 0, "metrics": metrics,
        }

    def delete_fields(self) -> RouteFields:
        """The netlink fields that delete exactly this route, and only if it is OTCP's."""
        network = ipaddress.ip_network(self.dst)
        return {
            "family": self.family, "dst": str(network.network_address), "dst_len": network.prefixlen,
            "table": self.table, "proto": OTCP_PROTO, "scope": RT_SCOPE_NOWHERE, "type": 0,
            "priority": self.priority,
        }


def route_from_message(msg: NetlinkMessage) -> Route:
    """A kernel route message -> Route (parameters read from its metrics)."""
    family = msg["family"]
    dst = msg.get_attr("RTA_DST") or ("0.0.0.0" if family == socket.AF_INET else "::")
    table = msg.get_attr("RTA_TABLE") or msg["table"]
    oif, gateway = msg.get_attr("RTA_OIF"), msg.get_attr("RTA_GATEWAY")
    multipath = msg.get_attr("RTA_MULTIPATH")
    if oif is None and gateway is None and multipath:
        first = multipath[0]
        oif, gateway = first.get("oif"), first.get_attr("RTA_GATEWAY")
    metrics = {}
    nested = msg.get_attr("RTA_METRICS")
    if nested is not None:
        metrics = {name: value for name, value in nested["attrs"]}
    locks = metrics.get("RTAX_LOCK", 0)
    return Route(
        family=family,
        dst=f"{dst}/{msg['dst_len']}",
        table=table,
        oif=oif,
        gateway=gateway,
        prefsrc=msg.get_attr("RTA_PREFSRC"),
        scope=msg["scope"],
        priority=msg.get_attr("RTA_PRIORITY"),
        # Unlocked values are ignored by TCP, so they count as absent.
        rto_min_ms=metrics.get("RTAX_RTO_MIN") if locks & (1 << RTAX_RTO_MIN) else None,
        initcwnd=metrics.get("RTAX_INITCWND"),
        cwnd_clamp=metrics.get("RTAX_CWND") if locks & (1 << RTAX_CWND) else None,
        quickack=metrics.get("RTAX_QUICKACK", 0) == 1,
        advmss=metrics.get("RTAX_ADVMSS"),
        onlink=bool(msg["flags"] & RTNH_F_ONLINK),
        congctl=metrics.get("RTAX_CC_ALGO") or None,
        ssthresh=metrics.get("RTAX_SSTHRESH") if locks & (1 << RTAX_SSTHRESH) else None,
    )


def describe_routes(routes: Sequence[Route], most: int = 20) -> str:
    """Routes as one line for a log or a message: "10.1.0.0/16 (table 100), ...", at most `most` named."""
    named = ", ".join(f"{route.dst} (table {table_name(route.table)})" for route in routes[:most])
    return named + (f" and {len(routes) - most} more" if len(routes) > most else "")


def proto_name(proto: int) -> str:
    """A route protocol's name as `ip route` shows it (kernel, static...)."""
    return _PROTO_NAMES.get(proto, str(proto))


def table_name(table: int) -> str:
    """A routing table's name as `ip route` shows it (main, local...)."""
    return _TABLE_NAMES.get(table, str(table))


class RouteTable:
    """The OTCP routes of one network namespace (the current one by default)."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self.netlink = RouteSocket(netns)
        self._tcp_metrics: TcpMetrics | None = None
        self.last_undo: list[Undo] = []  # what reverses the last apply, in the order it changed
        self.last_removed: list[Route] = []  # the OTCP routes the last apply removed (no longer wanted)

    def close(self) -> None:
        """Close the netlink sockets."""
        self.netlink.close()
        if self._tcp_metrics is not None:
            self._tcp_metrics.close()

    def __enter__(self) -> "RouteTable":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------

    def owned(self) -> list[Route]:
        """Every OTCP route in every table, read from the kernel."""
        return [route_from_message(m) for m in self.netlink.dump_routes() if m["proto"] == OTCP_PROTO]

    def interface_names(self) -> dict[int, str]:
        """{interface index: name}."""
        return {link["index"]: link.get_attr("IFLA_IFNAME") for link in self.netlink.dump_links()}

    def describe(self, route: Route, names: dict[int, str] | None = None) -> dict[str, Any]:
        """A route as a JSON-able dict, as `show` prints it."""
        names = self.interface_names() if names is None else names
        return {
            "dst": route.dst, "table": route.table, "dev": None if route.oif is None else names.get(route.oif),
            "gateway": route.gateway,
            "rto_min_ms": route.rto_min_ms, "initcwnd": route.initcwnd, "cwnd_clamp": route.cwnd_clamp,
            "advmss": route.advmss, "quickack": route.quickack, "congctl": route.congctl,
            "ssthresh": route.ssthresh,
        }

    # -- applying ------------------------------------------------------------

    def apply(self, param_set: ParamSet) -> list[RouteResult]:
        """Make the kernel's OTCP routes exactly those of a validated set.

        Returns one result per route of the set, in order: applied (with its
        device, gateway and table) or skipped (with the reason). Raises
        ApplyError (after restoring the previous routes) if the kernel refuses
        a change.
        """
        plan = self.plan(param_set.routes)
        writes = [(op, new, old) for op, new, old in plan.writes if op != "keep"]
        undo: list[Undo] = []
        self.last_removed = []
        try:
            self._write(writes, undo)
            self.last_removed = self._remove_stale(plan.stale, undo)
        except _Refused as error:
            problems = self._undo(undo)
            if problems:
                raise ApplyError(f"{error}; rollback incomplete: {'; '.join(problems)}", rolled_back=False) from None
            raise ApplyError(f"{error}; the previous routes were restored") from None
        self.last_undo = undo
        touched = [new.dst for op, new, _ in writes] + [old.dst for old in plan.stale]
        self.forget_tcp_metrics(touched)
        return plan.results(self.interface_names())

    def _write(self, writes: list[tuple[str, Route, Route | None]], undo: list[Undo]) -> None:
        """Add or replace routes; undo gains what reverses each write the kernel took.
        _Refused names the first it refused."""
        codes = self.netlink.execute([_write_request(op, new) for op, new, _ in writes])
        refused = None
        for (_, new, old), code in zip(writes, codes):
            if code == 0:
                undo.append((RTM_DELROUTE, 0, new) if old is None else (RTM_NEWROUTE, NLM_F_REPLACE, old))
            elif refused is None:
                refused = f"{new.dst}: the kernel refused the route ({_strerror(code)})"
        if refused is not None:
            raise _Refused(refused)

    def _remove_stale(self, stale: list[Route], undo: list[Undo]) -> list[Route]:
        """Delete OTCP routes no longer wanted (one already gone is fine); undo gains what puts
        each back. Returns those removed; _Refused names the first the kernel refused to remove."""
        codes = self.netlink.execute([(RTM_DELROUTE, 0, old.delete_fields()) for old in stale])
        refused = None
        removed = []
        for old, code in zip(stale, codes):
            if code == 0:
                undo.append((RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, old))
                removed.append(old)
            elif code not in (errno.ENOENT, errno.ESRCH) and refused is None:
                refused = f"{old.dst}: the kernel refused to remove the old route ({_strerror(code)})"
        if refused is not None:
            raise _Refused(refused)
        return removed

    def forget_tcp_metrics(self, prefixes: Sequence[str]) -> int:
        """Drop the kernel's cached TCP metrics for destinations whose route
        changed, so new connections take the route's new window clamp (see
        `otcp.agent.tcp_metrics`). A failure is logged, never fatal: the routes
        are in place either way."""
        if not prefixes:
            return 0
        try:
            if self._tcp_metrics is None:
                self._tcp_metrics = TcpMetrics(self.netns)
            forgotten = self._tcp_metrics.forget(prefixes)
        except OSError as error:
            LOG.warning("could not clear cached TCP metrics for changed routes: %s", error)
            return 0
        if forgotten:
            LOG.info("cleared %d cached TCP metrics entr%s for changed routes", forgotten,
                     "y" if forgotten == 1 else "ies")
        return forgotten

    def undo_last(self) -> list[str]:
        """Reverse the last successful `apply` (used when its state cannot be
        saved, so kernel and state never disagree). Returns the problems."""
        undo, self.last_undo = self.last_undo, []
        return self._undo(undo)

    def _undo(self, undo: list[Undo]) -> list[str]:
        """Reverse applied changes (the requests that reverse each), newest first; returns what could not be."""
        requests = [(kind, flags, route.delete_fields() if kind == RTM_DELROUTE else route.fields())
                    for kind, flags, route in reversed(undo)]
        codes = self.netlink.execute(requests)
        # Deleting a route that is already gone leaves the kernel as wanted.
        return [
            f"{fields['dst']}/{fields['dst_len']}: {_strerror(code)}"
            for (kind, _, fields), code in zip(requests, codes)
            if code != 0 and not (kind == RTM_DELROUTE and code in (errno.ENOENT, errno.ESRCH))
        ]

    def revert(self) -> list[Route]:
        """Remove every OTCP route, and nothing else; returns what was removed."""
        return self._delete(self.owned())

    def remove(self, prefixes: Iterable[str]) -> list[Route]:
        """Remove the OTCP routes for these prefixes (in any table); returns what was removed."""
        wanted = set(prefixes)
        return self._delete([route for route in self.owned() if route.dst in wanted])

    def _delete(self, owned: list[Route]) -> list[Route]:
        codes = self.netlink.execute([(RTM_DELROUTE, 0, route.delete_fields()) for route in owned])
        problems = [f"{r.dst}: {_strerror(c)}" for r, c in zip(owned, codes) if c not in (0, errno.ENOENT, errno.ESRCH)]
        if problems:
            raise ApplyError("could not remove: " + "; ".join(problems), rolled_back=False)
        self.forget_tcp_metrics([route.dst for route in owned])
        return owned

    # -- planning ------------------------------------------------------------

    def plan(self, routes: Sequence[RouteParams]) -> "Plan":
        """Decide, for each route of a set, what to write (nothing yet): read
        the kernel's routes and its lookups, then `plan_routes` decides."""
        owned, foreign = [], []
        for msg in self.netlink.dump_routes():
            if msg["proto"] == OTCP_PROTO:
                owned.append(route_from_message(msg))
            elif msg["family"] in (socket.AF_INET, socket.AF_INET6):
                foreign.append(kernel_route_from_message(msg))
        networks = [ipaddress.ip_network(r.dst) for r in routes]
        answers = self.netlink.get_routes([(_family(n), str(n.network_address)) for n in networks])
        lookups = [answer if isinstance(answer, int) else lookup_from_message(answer) for answer in answers]
        return plan_routes(routes, owned, foreign, lookups)


@dataclass(frozen=True)
class KernelRoute:
    """A route that is not OTCP's, as far as planning needs it."""

    family: int
    table: int
    dst: str  # "10.0.0.0/8"
    proto: int
    type: int
    priority: int | None
    oif: int | None
    gateway: str | None
    prefsrc: str | None
    onlink: bool = False
    multipath: bool = False  # several nexthops (ECMP)
    nexthop_id: int | None = None  # a nexthop object (``ip nexthop``)


@dataclass(frozen=True)
class Lookup:
    """The kernel's answer to ``ip route get``: the table, kind and nexthop it would use now."""

    table: int
    type: int
    oif: int | None
    gateway: str | None


def kernel_route_from_message(msg: NetlinkMessage) -> KernelRoute:
    """A kernel route message -> KernelRoute (its first hop if multipath)."""
    route = route_from_message(msg)
    multipath = msg.get_attr("RTA_MULTIPATH")
    return KernelRoute(family=route.family, table=route.table, dst=route.dst, proto=msg["proto"], type=msg["type"],
                       priority=route.priority, oif=route.oif, gateway=route.gateway, prefsrc=route.prefsrc,
                       onlink=route.onlink, multipath=bool(multipath) and len(multipath) > 1,
                       nexthop_id=nexthop_id(msg))


#: The kernel's RTA_NH_ID (include/uapi/linux/rtnetlink.h): the route uses a nexthop object.
RTA_NH_ID = 30
_RTATTR = struct.Struct("=HH")
_RTMSG_START = 16 + 12  # nlmsghdr, then rtmsg: the route's attributes follow


def nexthop_id(msg: NetlinkMessage) -> int | None:
    """The id of the nexthop object a route message uses (``ip route ... nhid N``), or None.

    Read from the kernel's own attribute in the raw message when pyroute2 does not decode
    it (0.9.7 reports RTA_NH_ID as an unknown attribute with no value)."""
    known = msg.get_attr("RTA_NH_ID")
    if known is not None:
        return int(known)
    start = getattr(msg, "offset", 0) or 0
    data = bytes(msg.data[start : start + msg["header"]["length"]])
    offset = _RTMSG_START
    while offset + _RTATTR.size <= len(data):
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size:
            break
        if kind & 0x3FFF == RTA_NH_ID and length >= _RTATTR.size + 4:
            return int(struct.unpack_from("=I", data, offset + _RTATTR.size)[0])
        offset += (length + 3) & ~3
    return None


def lookup_from_message(msg: NetlinkMessage) -> Lookup:
    """An ``ip route get`` answer -> Lookup."""
    return Lookup(table=msg.get_attr("RTA_TABLE") or msg["table"], type=msg["type"],
                  oif=msg.get_attr("RTA_OIF"), gateway=msg.get_attr("RTA_GATEWAY"))


def plan_routes(wanted: Sequence[RouteParams], owned: Sequence[Route], foreign: Sequence[KernelRoute],
                lookups: Sequence[Lookup | int]) -> "Plan":
    """What to write for a set: a pure decision on what the kernel holds.

    wanted: the set's routes; owned: the OTCP `Route`s in
    the kernel; foreign: every other route (`KernelRoute`); lookups: for each
    wanted route, in order, the kernel's `Lookup` for its address or the
    errno it refused with. A new destination takes the lookup's table and
    nexthop; an existing one follows the most specific non-OTCP route that
    covers it, so a changed gateway is followed rather than pinned.
    """
    by_prefix: dict[tuple[int, int, str], Route] = {}
    for route in owned:
        by_prefix.setdefault((route.family, route.table, route.dst), route)
    others = _ForeignRoutes(foreign)
    plan = Plan()
    kept = set()
    for params, answer in zip(wanted, lookups):
        dst = params.dst
        network = ipaddress.ip_network(dst)
        family = _family(network)
        if isinstance(answer, int):
            plan.skip(dst, f"no route to {network.network_address} ({_strerror(answer)})")
            continue
        if answer.type != RTN_UNICAST:
            kind = _ROUTE_TYPES.get(answer.type, answer.type)
            plan.skip(dst, f"the kernel routes {network.network_address} as {kind}, not unicast")
            continue
        table = answer.table
        conflict = others.exact(family, table, network)
        if conflict is not None:
            plan.skip(dst, f"a non-OTCP route for {dst} exists in table {table_name(table)} "
                           f"(proto {proto_name(conflict.proto)}); left alone")
            continue
        previous = by_prefix.get((family, table, dst))
        underlying = others.covering(family, table, network)
        if underlying is not None and (unfaithful := _cannot_copy(underlying)):
            plan.skip(dst, f"the route covering it, {underlying.dst} in table {table_name(table)}, {unfaithful}")
            continue
        prefsrc = underlying.prefsrc if underlying is not None else None
        if previous is None:
            oif, gateway = answer.oif, answer.gateway
        elif underlying is not None:
            oif, gateway = underlying.oif, underlying.gateway
        else:
            plan.skip(dst, f"no non-OTCP route covers {dst} in table {table_name(table)}")
            continue
        new = Route(
            family=family, dst=dst, table=table, oif=oif, gateway=gateway, prefsrc=prefsrc,
            scope=RT_SCOPE_UNIVERSE if gateway is not None or family == socket.AF_INET6 else RT_SCOPE_LINK,
            priority=previous.priority if previous is not None else None,
            rto_min_ms=params.rto_min_ms, initcwnd=params.initcwnd, cwnd_clamp=params.cwnd_clamp,
            advmss=params.advmss, quickack=params.quickack, onlink=underlying is not None and underlying.onlink,
            congctl=params.congctl, ssthresh=params.ssthresh,
        )
        if previous is None:
            plan.write("add", new, None)
        else:
            kept.add(previous.key)
            plan.write("keep" if new.same_as(previous) else "replace", new, previous)
    # Everything else of OTCP's goes: dropped destinations, and any second
    # route of a prefix at another metric.
    plan.stale = [route for route in owned if route.key not in kept]
    return plan


def _cannot_copy(route: KernelRoute) -> str:
    """Why a host route cannot carry this covering route's nexthop faithfully, or "".

    A host route copies one nexthop: an ECMP route would be pinned to its
    first hop, and a nexthop object's group cannot be copied by value.
    """
    if route.multipath:
        return "has several nexthops (ECMP); a host route would pin it to one, so it is left alone"
    if route.nexthop_id is not None:
        return f"uses nexthop object {route.nexthop_id}; it is left alone"
    return ""


class Plan:
    """What `apply` will do: writes (add, replace, keep), skips and removals."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, Route, Route | None]] = []  # (op, new Route, previous Route or None)
        self.stale: list[Route] = []  # OTCP routes no longer wanted
        self._order: list[int | tuple[str, str]] = []  # a write's index, or a skip's (dst, reason)

    def write(self, op: str, new: Route, old: Route | None) -> None:
        """Plan one route write: add, replace or keep."""
        self._order.append(len(self.writes))
        self.writes.append((op, new, old))

    def skip(self, dst: str, reason: str) -> None:
        """Record that one destination is skipped, and why."""
        self._order.append((dst, reason))

    def results(self, names: dict[int, str]) -> list[RouteResult]:
        """One result per route of the set, in order, as an ack reports them (names: the
        interfaces' names by index)."""
        results = []
        for item in self._order:
            if isinstance(item, tuple):
                results.append(RouteResult(dst=item[0], status="skipped", reason=item[1]))
            else:
                _, new, _ = self.writes[item]
                device = names.get(new.oif) if new.oif is not None else None
                results.append(RouteResult(dst=new.dst, status="applied", dev=device, gateway=new.gateway,
                                           table=new.table))
        return results


class _ForeignRoutes:
    """Non-OTCP routes indexed for exact and longest-prefix lookups."""

    def __init__(self, routes: Iterable[KernelRoute]) -> None:
        self._by_prefix: dict[tuple[int, int, int], dict[int, list[KernelRoute]]] = {}  # (family, table, length)
        lengths: dict[tuple[int, int], set[int]] = {}  # (family, table) -> prefix lengths
        for route in routes:
            network = ipaddress.ip_network(route.dst, strict=False)
            key = (route.family, route.table, network.prefixlen)
            self._by_prefix.setdefault(key, {}).setdefault(int(network.network_address), []).append(route)
            lengths.setdefault((route.family, route.table), set()).add(network.prefixlen)
        # (family, table) -> its prefix lengths, longest first
        self._lengths = {key: sorted(found, reverse=True) for key, found in lengths.items()}

    def exact(self, family: int, table: int, network: Network) -> KernelRoute | None:
        """A non-OTCP route for exactly this prefix, or None."""
        found = self._by_prefix.get((family, table, network.prefixlen), {}).get(int(network.network_address))
        return found[0] if found else None

    def covering(self, family: int, table: int, network: Network) -> KernelRoute | None:
        """The most specific unicast route strictly covering `network` (lowest metric)."""
        bits = network.max_prefixlen
        address = int(network.network_address)
        for length in self._lengths.get((family, table), []):
            if length >= network.prefixlen:
                continue
            mask = ((1 << length) - 1) << (bits - length) if length else 0
            candidates = [r for r in self._by_prefix[(family, table, length)].get(address & mask, [])
                          if r.type == RTN_UNICAST]
            if candidates:
                return min(candidates, key=lambda r: r.priority or 0)
        return None


class _Refused(Exception):
    pass


def _write_request(op: str, route: Route) -> Request:
    flags = NLM_F_REPLACE if op == "replace" else NLM_F_CREATE | NLM_F_EXCL
    return (RTM_NEWROUTE, flags, route.fields())


def _family(network: Network) -> int:
    return socket.AF_INET if network.version == 4 else socket.AF_INET6


def _strerror(code: int) -> str:
    return f"{errno.errorcode.get(code, code)}: {os.strerror(code)}"
