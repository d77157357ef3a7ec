"""Forget the kernel's cached TCP metrics for destinations whose route changed.

Why: Linux applies a route's ``cwnd lock N`` (the window clamp) not from the
route but from its TCP metrics cache (``ip tcp_metrics``). An entry is made
when a connection to a destination closes, copying the route's locked
values at that moment, and an entry in use is never refreshed from the
route. So after the agent changes a route, connections to a destination
that already has an entry keep the *old* clamp (or none) until the entry is
deleted. This is the kernel behaviour discussed on netdev in June 2025
("tcp_metrics: set maximum cwnd from the route", P. Tesarik); it also means
the first connection to a destination without an entry is not clamped.

`TcpMetrics.forget` deletes the entries whose destination address falls in
the given prefixes, through the ``tcp_metrics`` generic netlink family
(what ``ip tcp_metrics delete`` does). The entries are a cache: deleting
them loses learned RTT and ssthresh hints for those destinations, nothing
else. Messages are built and parsed by pyroute2.
"""

import ipaddress
import os
import socket
from collections.abc import Iterable

from pyroute2.netlink import (
    CTRL_CMD_GETFAMILY,
    GENL_ID_CTRL,
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    ctrlmsg,
    genlmsg,
)

from otcp.agent import netlink
from otcp.agent.netlink import NetlinkMessage

FAMILY_NAME = "tcp_metrics"
TCP_METRICS_CMD_GET = 1
TCP_METRICS_CMD_DEL = 2
NETLINK_GENERIC = 16  # not exported by the socket module


class tcp_metrics_msg(genlmsg):
    """A message of the tcp_metrics family (include/uapi/linux/tcp_metrics.h)."""

    prefix = "TCP_METRICS_ATTR_"
    nla_map = (
        ("TCP_METRICS_ATTR_UNSPEC", "none"),
        ("TCP_METRICS_ATTR_ADDR_IPV4", "ip4addr"),
        ("TCP_METRICS_ATTR_ADDR_IPV6", "ip6addr"),
        ("TCP_METRICS_ATTR_AGE", "uint64"),
        ("TCP_METRICS_ATTR_TW_TSVAL", "uint32"),
        ("TCP_METRICS_ATTR_TW_TS_STAMP", "int32"),
        ("TCP_METRICS_ATTR_VALS", "hex"),
        ("TCP_METRICS_ATTR_FOPEN_MSS", "uint16"),
        ("TCP_METRICS_ATTR_FOPEN_SYN_DROPS", "uint16"),
        ("TCP_METRICS_ATTR_FOPEN_SYN_DROP_TS", "uint64"),
        ("TCP_METRICS_ATTR_FOPEN_COOKIE", "hex"),
        ("TCP_METRICS_ATTR_SADDR_IPV4", "ip4addr"),
        ("TCP_METRICS_ATTR_SADDR_IPV6", "ip6addr"),
        ("TCP_METRICS_ATTR_PAD", "hex"),
    )


class TcpMetrics:
    """The TCP metrics cache of one network namespace."""

    def __init__(self, netns: str | None = None) -> None:
        if netns is None:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        else:
            self.sock = netlink.socket_in_namespace(netns, NETLINK_GENERIC)
        self.sock.bind((0, 0))
        self._sequence = 1
        self.family_id = self._resolve_family()

    def close(self) -> None:
        """Close the generic netlink socket."""
        self.sock.close()

    def entries(self) -> list[tuple[str, str | None]]:
        """[(destination, source)] address strings of every cached entry."""
        msg = tcp_metrics_msg()
        msg["cmd"] = TCP_METRICS_CMD_GET
        msg["version"] = 1
        found = []
        for reply in self._dump(msg, NLM_F_REQUEST | NLM_F_DUMP):
            destination = reply.get_attr("TCP_METRICS_ATTR_ADDR_IPV4") or reply.get_attr("TCP_METRICS_ATTR_ADDR_IPV6")
            source = reply.get_attr("TCP_METRICS_ATTR_SADDR_IPV4") or reply.get_attr("TCP_METRICS_ATTR_SADDR_IPV6")
            if destination:
                found.append((destination, source))
        return found

    def forget(self, prefixes: Iterable[str]) -> int:
        """Delete the entries whose destination lies in one of `prefixes`;
        returns how many were deleted."""
        networks = [ipaddress.ip_network(p) for p in prefixes]
        if not networks:
            return 0
        doomed = [(d, s) for d, s in self.entries() if any(ipaddress.ip_address(d) in n for n in networks)]
        deleted = 0
        for destination, source in doomed:
            msg = tcp_metrics_msg()
            msg["cmd"] = TCP_METRICS_CMD_DEL
            msg["version"] = 1
            v6 = ":" in destination
            attrs = [("TCP_METRICS_ATTR_ADDR_IPV6" if v6 else "TCP_METRICS_ATTR_ADDR_IPV4", destination)]
            if source:
                attrs.append(("TCP_METRICS_ATTR_SADDR_IPV6" if v6 else "TCP_METRICS_ATTR_SADDR_IPV4", source))
            msg["attrs"] = attrs
            if self._acknowledged(msg, NLM_F_REQUEST | NLM_F_ACK) == 0:
                deleted += 1
        return deleted

    def _resolve_family(self) -> int:
        msg = ctrlmsg()
        msg["cmd"] = CTRL_CMD_GETFAMILY
        msg["version"] = 1
        msg["attrs"] = [("CTRL_ATTR_FAMILY_NAME", FAMILY_NAME)]
        replies = self._dump(msg, NLM_F_REQUEST, message_type=GENL_ID_CTRL, reply_class=ctrlmsg, single=True)
        if not replies:
            raise OSError(0, "no tcp_metrics netlink family")
        return int(replies[0].get_attr("CTRL_ATTR_FAMILY_ID"))

    def _acknowledged(self, msg: NetlinkMessage, flags: int) -> int:
        """Send one request; the errno of its acknowledgement (0 = done)."""
        sequence = self._send(msg, flags, None)
        while True:
            data = self.sock.recv(1 << 16)
            for kind, seq, offset, _ in netlink.messages_in(data):
                if seq == sequence and kind == NLMSG_ERROR:
                    return netlink.error_code(data, offset)

    def _dump(self, msg: NetlinkMessage, flags: int, message_type: int | None = None,
              reply_class: type = tcp_metrics_msg, single: bool = False) -> list[NetlinkMessage]:
        """Send one request; its decoded replies (only the first with single). A refusal
        raises OSError with the kernel's errno."""
        sequence = self._send(msg, flags, message_type)
        replies: list[NetlinkMessage] = []
        while True:
            data = self.sock.recv(1 << 16)
            for kind, seq, offset, length in netlink.messages_in(data):
                if seq != sequence:
                    continue
                if kind == NLMSG_DONE:
                    return replies
                if kind == NLMSG_ERROR:
                    code = netlink.error_code(data, offset)
                    if code:
                        raise OSError(code, f"tcp_metrics: {os.strerror(code)}")
                    continue
                reply = reply_class(data[offset : offset + length])
                reply.decode()
                replies.append(reply)
                if single:
                    return replies

    def _send(self, msg: NetlinkMessage, flags: int, message_type: int | None) -> int:
        """Number and send one request (to the tcp_metrics family unless message_type); its sequence number."""
        sequence = self._sequence
        self._sequence += 1
        msg["header"]["type"] = self.family_id if message_type is None else message_type
        msg["header"]["flags"] = flags
        msg["header"]["sequence_number"] = sequence
        msg.encode()
        self.sock.send(msg.data)
        return sequence
