"""How many of this host's connections to each destination sent data lately
(docs/design.md, "Measurement").

The controller counts flows from its switches' pair entries: one per host pair.
Several senders on one host (many connections from one namespace, as a storage
server serving many clients' stripes) are as many flows on every link of the
pair's path, and a window planned for one would overshoot the buffer that many
times. The agent counts them where they are visible: a connection sent since
the last count when the bytes its peer acknowledged (``tcpi_bytes_acked``) grew.
The controller takes the count only for pairs its switches see carrying data,
so a connection that only sends requests does not make a sender.
"""

import ipaddress
from collections import Counter
from collections.abc import Iterable

from otcp.agent.rtt import Connection, covered_by, established_connections
from otcp.wire.limits import CONNECTIONS
from otcp.wire.messages import SendingConnections

#: A connection seen for the first time has had its SYN acknowledged (one byte): data is more.
SYN_BYTES = 1
ConnectionKey = tuple[str, int, str, int]  # (src, src_port, dst, dst_port)


class SendingCounter:
    """The bytes every connection had acknowledged at the last count, to tell which sent since."""

    def __init__(self) -> None:
        self._acked: dict[ConnectionKey, int] = {}

    def count(self, prefixes: Iterable[str],
              connections: Iterable[Connection] | None = None) -> list[SendingConnections]:
        """Per destination under one of prefixes (the applied set's), the connections (the host's
        established ones: read now if not given) whose acknowledged bytes grew since the last
        count, at most CONNECTIONS' top; by address."""
        covered = covered_by(ipaddress.ip_network(prefix) for prefix in prefixes)
        acked: dict[ConnectionKey, int] = {}
        sending: Counter[str] = Counter()
        for connection in established_connections() if connections is None else connections:
            key = (connection.src, connection.src_port, connection.dst, connection.dst_port)
            acked[key] = connection.bytes_acked
            if connection.bytes_acked > self._acked.get(key, SYN_BYTES):
                sending[connection.dst] += 1
        self._acked = acked
        return [SendingConnections(dst, min(count, CONNECTIONS[1])) for dst, count in sorted(sending.items())
                if covered(dst)]
