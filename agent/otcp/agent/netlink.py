"""A route netlink socket that sends requests in batches.

pyroute2 builds and parses every message (`rtmsg`, `ifinfmsg`,
`ifaddrmsg`); this module only adds the transport the agent needs to apply
thousands of routes quickly: many requests in one `send`, each answered by
its own acknowledgement, matched back by sequence number. pyroute2's own
`IPRoute` waits for each answer before sending the next request, which
costs about 0.4 ms per route; batched, a route costs a few tens of
microseconds of kernel time plus the encoding.

A socket can be opened in a named network namespace (`netns=`), which is
how the tests and the benchmark work on throwaway namespaces.
"""

import errno
import os
import socket
import struct
from collections.abc import Iterable, Iterator
from typing import Any, cast

from pyroute2 import netns as pyroute2_netns
from pyroute2.netlink import (
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
)
from pyroute2.netlink.rtnl import (
    RTM_GETADDR,
    RTM_GETLINK,
    RTM_GETROUTE,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWROUTE,
)
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
BATCH = 256
RTM_F_LOOKUP_TABLE = 0x1000
_NLMSGHDR = struct.Struct("=IHHII")
_NLMSGERR = struct.Struct("=i")
_RECV_BYTES = 1 << 20
NETNS_RUN_DIR = "/var/run/netns"


NetlinkMessage = Any  # a decoded pyroute2 message (rtmsg, ifinfmsg, ifaddrmsg): pyroute2 has no type information
RouteFields = dict[str, Any]  # the rtmsg header fields and attribute values of one route (see execute)


class NetlinkError(OSError):
    """The kernel refused a request; `errno` says why."""


class RouteSocket:
    """One NETLINK_ROUTE socket, optionally in a named network namespace."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        if netns is None:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        else:
            self.sock = socket_in_namespace(netns, socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 21)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        # Errors carry no copy of the request; the kernel's text comes along.
        self.sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        self.sock.bind((0, 0))
        self._sequence = 1
        self._templates: dict[Any, bytes] = {}  # encoded messages by shape (everything but the destination)

    def close(self) -> None:
        """Close the netlink socket."""
        self.sock.close()

    def __enter__(self) -> "RouteSocket":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------

    def dump_routes(self, family: int = socket.AF_UNSPEC) -> list[NetlinkMessage]:
        """Every route of every table (decoded `rtmsg`s)."""
        msg = rtmsg()
        msg["family"] = family
        return self._dump(msg, RTM_GETROUTE, RTM_NEWROUTE, rtmsg)

    def dump_links(self) -> list[NetlinkMessage]:
        """Every network interface (decoded `ifinfmsg`s)."""
        msg = ifinfmsg()
        return self._dump(msg, RTM_GETLINK, RTM_NEWLINK, ifinfmsg)

    def dump_addresses(self) -> list[NetlinkMessage]:
        """Every interface address (decoded `ifaddrmsg`s)."""
        msg = ifaddrmsg()
        return self._dump(msg, RTM_GETADDR, RTM_NEWADDR, ifaddrmsg)

    def _dump(self, msg: NetlinkMessage, request_type: int, reply_type: int,
              reply_class: type) -> list[NetlinkMessage]:
        sequence = self._next_sequence()
        msg["header"]["type"] = request_type
        msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
        msg["header"]["sequence_number"] = sequence
        msg.encode()
        self.sock.send(msg.data)
        replies: list[NetlinkMessage] = []
        while True:
            data = self.sock.recv(_RECV_BYTES)
            for kind, seq, offset, length in messages_in(data):
                if seq != sequence:
                    continue
                if kind == NLMSG_DONE:
                    return replies
                if kind == NLMSG_ERROR:
                    code = error_code(data, offset)
                    if code:
                        raise NetlinkError(code, f"dump failed: {errno.errorcode.get(code, code)}")
                    continue
                if kind == reply_type:
                    reply = reply_class(data[offset : offset + length])
                    reply.decode()
                    replies.append(reply)

    def get_routes(self, destinations: Iterable[tuple[int, str]]) -> list[NetlinkMessage | int]:
        """Ask the kernel which route it would use for each destination now.

        `destinations` is a list of (family, address string). Returns, in the
        same order, the decoded `rtmsg` answer or the errno of the refusal
        (an int, e.g. ENETUNREACH).
        """
        requests = []
        for family, address in destinations:
            template = self._templates.get(("get", family))
            if template is None:
                msg = rtmsg()
                msg["family"] = family
                msg["dst_len"] = 32 if family == socket.AF_INET else 128
                msg["flags"] = RTM_F_LOOKUP_TABLE  # report the table the lookup used, not always "main"
                msg["attrs"] = [("RTA_DST", _SENTINEL[family])]
                msg["header"]["type"] = RTM_GETROUTE
                msg["header"]["flags"] = NLM_F_REQUEST
                msg.encode()
                template = self._templates[("get", family)] = _checked_template(msg.data, family)
            requests.append(_patched(template, family, address))
        return self._batch(requests, answer_type=RTM_NEWROUTE)

    # -- writing -------------------------------------------------------------

    def execute(self, requests: Iterable[tuple[int, int, RouteFields]]) -> list[int]:
        """Send route requests, each acknowledged; returns an errno per request
        (0 = done), in order.

        `requests` are (message type, netlink flags, fields) where fields are
        the `rtmsg` header fields plus attribute values: see `route_message`.
        """
        answers = self._batch([self._route_request(kind, flags, fields) for kind, flags, fields in requests],
                              answer_type=None)
        return cast(list[int], answers)  # with no answer type, every answer is an errno

    def _route_request(self, kind: int, flags: int, fields: RouteFields) -> bytes:
        """Encode one route request through pyroute2, reusing a template.

        Routes of one set differ only in their destination, so the message is
        encoded once per shape (everything but the destination) and the
        destination bytes are patched into a copy.
        """
        dst = fields["dst"]
        family = fields["family"]
        shape = (kind, flags, tuple(sorted((k, v) for k, v in fields.items() if k not in ("dst", "metrics"))),
                 tuple(sorted(fields.get("metrics", {}).items())))
        template = self._templates.get(shape)
        if template is None:
            template = self._encode_template(kind, flags | NLM_F_REQUEST | NLM_F_ACK, fields)
            self._templates[shape] = template
        return _patched(template, family, dst)

    def _encode_template(self, kind: int, flags: int, fields: RouteFields) -> bytes:
        msg = rtmsg()
        for key in ("family", "dst_len", "table", "proto", "scope", "type", "tos", "flags"):
            msg[key] = fields.get(key, 0)
        sentinel = _SENTINEL[fields["family"]]
        # RTA_DST first: its value sits at a fixed offset (_DST_OFFSET).
        attrs: list[tuple[str, Any]] = [("RTA_DST", sentinel)]
        table = fields.get("table", 0)
        if table >= 256:
            msg["table"] = 252  # RT_TABLE_COMPAT: the real id is in RTA_TABLE
        attrs.append(("RTA_TABLE", table))
        for key, name in (("oif", "RTA_OIF"), ("gateway", "RTA_GATEWAY"), ("prefsrc", "RTA_PREFSRC"),
                          ("priority", "RTA_PRIORITY")):
            if fields.get(key) is not None:
                attrs.append((name, fields[key]))
        metrics = fields.get("metrics")
        if metrics:
            attrs.append(("RTA_METRICS", {"attrs": [(name, value) for name, value in metrics.items()]}))
        msg["attrs"] = attrs
        msg["header"]["type"] = kind
        msg["header"]["flags"] = flags
        msg.encode()
        return _checked_template(msg.data, fields["family"])

    # -- the batch transport -------------------------------------------------

    def _batch(self, requests: list[bytes], answer_type: int | None) -> list[NetlinkMessage | int]:
        """Send encoded requests BATCH at a time (each numbered here); collect one answer per
        request: the errno of an NLMSG_ERROR (0 for an acknowledgement) or, when `answer_type`
        is given, the decoded reply of that type."""
        answers: list[NetlinkMessage | int] = []
        for start in range(0, len(requests), BATCH):
            chunk = requests[start : start + BATCH]
            first = self._sequence
            wire = bytearray()
            for encoded in chunk:
                data = bytearray(encoded)
                struct.pack_into("=I", data, 8, self._next_sequence())
                wire += data
            self.sock.send(bytes(wire))
            pending = {first + i: i for i in range(len(chunk))}
            results: list[NetlinkMessage | int] = [None] * len(chunk)
            while pending:
                received = self.sock.recv(_RECV_BYTES)
                for kind, seq, offset, length in messages_in(received):
                    index = pending.get(seq)
                    if index is None:
                        continue
                    if kind == NLMSG_ERROR:
                        results[index] = error_code(received, offset)
                    elif kind == answer_type:
                        reply = rtmsg(received[offset : offset + length])
                        reply.decode()
                        results[index] = reply
                    else:
                        continue
                    del pending[seq]
            answers.extend(results)
        return answers

    def _next_sequence(self) -> int:
        sequence = self._sequence
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF or 1
        return sequence


def socket_in_namespace(netns: str, protocol: int) -> socket.socket:
    """A netlink socket created in a named namespace (which must exist).

    The calling thread enters the namespace just long enough to create the
    socket, which stays bound to it; no child process is forked.
    """
    path = netns if "/" in netns else os.path.join(NETNS_RUN_DIR, netns)
    target = os.open(path, os.O_RDONLY)
    try:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            pyroute2_netns.setns(target)
            try:
                return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol)
            finally:
                pyroute2_netns.setns(own)
        finally:
            os.close(own)
    finally:
        os.close(target)


_DST_OFFSET = _NLMSGHDR.size + 12 + 4  # nlmsghdr, struct rtmsg, rtattr header
_SENTINEL: dict[int, str] = {socket.AF_INET: "192.0.2.123", socket.AF_INET6: "2001:db8:ffff::7b"}


def _checked_template(data: bytes, family: int) -> bytes:
    """An encoded message whose RTA_DST holds the sentinel at _DST_OFFSET."""
    encoded = bytes(data)
    packed = socket.inet_pton(family, _SENTINEL[family])
    if encoded[_DST_OFFSET : _DST_OFFSET + len(packed)] != packed:
        raise RuntimeError("pyroute2 did not place RTA_DST first; cannot batch")
    return encoded


def _patched(template: bytes, family: int, address: str) -> bytes:
    """A copy of `template` for another destination address."""
    packed = socket.inet_pton(family, address)
    return template[:_DST_OFFSET] + packed + template[_DST_OFFSET + len(packed) :]


def messages_in(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(type, sequence, offset, length) of each netlink message in `data`."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, sequence, _pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            break
        yield kind, sequence, offset, length
        offset += (length + 3) & ~3


def error_code(data: bytes, offset: int) -> int:
    """The errno of the NLMSG_ERROR message at offset (0: an acknowledgement)."""
    (code,) = _NLMSGERR.unpack_from(data, offset + _NLMSGHDR.size)
    return -code
