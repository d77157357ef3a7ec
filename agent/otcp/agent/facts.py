"""What an agent reports about its host in ``hello``: addresses, MTU and MSS,
congestion controls, and whether ``net.ipv4.tcp_rto_min_us`` exists.

Addresses and MTUs come from netlink (the namespace of the agent's route
socket); the sysctls from /proc/sys/net, which shows the namespace of the
process (``otcp-agent --netns`` enters the namespace for both).
"""

import os
import socket
from typing import Any

from otcp.agent.netlink import RouteSocket
from otcp.wire import limits

PROC_IPV4 = "/proc/sys/net/ipv4"
RT_SCOPE_UNIVERSE = 0
_IPV4_TCP_HEADERS = 40
_TIMESTAMP_OPTION = 12


def addresses(netlink: RouteSocket) -> dict[int, list[str]]:
    """{interface index: [global addresses]}: no loopback, no link-local."""
    found: dict[int, list[str]] = {}
    for msg in netlink.dump_addresses():
        if msg["family"] not in (socket.AF_INET, socket.AF_INET6) or msg["scope"] != RT_SCOPE_UNIVERSE:
            continue
        address = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
        if address:
            found.setdefault(msg["index"], []).append(address)
    return found


def hello(netlink: RouteSocket, applied_generation: int | None, proc: str = PROC_IPV4) -> dict[str, Any]:
    """The facts of the hello message (the agent adds its enforcement; messages.Hello checks them)."""
    by_index = addresses(netlink)
    interfaces = []
    for link in sorted(netlink.dump_links(), key=lambda link: link["index"]):
        if link["index"] in by_index:
            interfaces.append(
                {"name": link.get_attr("IFLA_IFNAME"), "mtu": link.get_attr("IFLA_MTU") or 0,
                 "addresses": by_index[link["index"]]}
            )
    mtu = min((i["mtu"] for i in interfaces if i["mtu"]), default=None)
    timestamps = _read(os.path.join(proc, "tcp_timestamps")) not in (None, "0")
    mss = mtu - _IPV4_TCP_HEADERS - (_TIMESTAMP_OPTION if timestamps else 0) if mtu else None
    available = _read(os.path.join(proc, "tcp_available_congestion_control"))
    return {
        "hostname": socket.gethostname(),
        "addresses": [address for interface in interfaces for address in interface["addresses"]],
        "interfaces": interfaces,
        "mtu": mtu,
        "mss_bytes": mss,
        "congestion_controls": available.split() if available else [],
        "congestion_control": _read(os.path.join(proc, "tcp_congestion_control")),
        "tcp_rto_min_us": os.path.exists(os.path.join(proc, "tcp_rto_min_us")),
        "applied_generation": applied_generation,
        "agent_version": limits.VERSION,
    }


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None
