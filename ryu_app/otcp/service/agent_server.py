"""The controller's side of the agent channel, inside the os-ken process.

Agents dial in; each must authenticate (HMAC challenge-response over a
shared secret, both ways, see the `wire` package), report its addresses, and
is then mapped to the host whose IP it reported. The app publishes each
host's latest parameter set; the server sends it when the host's agent is
connected (now, or when it connects) and reports the agent's ack.

Everything runs on os-ken's green threads (`os_ken.lib.hub`): one reader and
one writer per connection, so a slow or hostile agent only ever blocks its
own threads. What gets an agent logged and disconnected, without touching
the others:

- no valid ``auth`` within `handshake_timeout` (an unauthenticated peer
  receives the challenge and nothing else), or a wrong secret;
- a frame over the limit (1 KiB before authentication, 64 KiB for the
  hello, `agent.limits.MAX_FRAME_BYTES` after), malformed JSON, a bad MAC,
  an unknown or unexpected message, an ack for a generation it was not sent;
- more messages than the rate limit allows (a flood);
- not reading a parameter set within `write_timeout` (a slow reader).

Every such refusal is counted by reason (`REFUSAL_REASONS`, `AgentServer.refused`)
for the metrics. With `tls` (an `ssl.SSLContext` from `server_tls`), each
accepted connection is wrapped and its TLS handshake done in its own green
thread, within the handshake deadline, before the HMAC handshake on top.

Sets come from a `Publications` shared with the controller core, which
keeps the latest set per host: if sets are published faster than an agent
reads them, it gets the newest, never a backlog. Once an agent acknowledged a
set on its connection, a newer one goes as a delta against it (routes added or
copied from the base's, fields changed, destinations removed) when that is the shorter message; an
agent whose applied generation is not the delta's base answers ``resync`` and
gets the set again (whole, unless it holds the acknowledged one).

Every set and renewal carries the epoch `authority(host_ip)` gives: this controller's authority
over the host, as MASTER of its switch (`otcp.controller.roles`). Where it gives None (this
instance is a standby there, or the host's switch is reconnecting) nothing is sent: no set, no
renewal. A set so withheld goes once the authority is back: after the next plan
(`release_withheld`, which the app calls) or at the writer's next renewal tick. Each agent's
``held`` (what it holds, whoever sent it) goes to `on_held(generation)`, as does the applied
generation of its hello.

Every set carries the lease `lease_s` (``agents.lease_s``); every third of it the
writer renews the lease of the generation the agent acknowledged on the connection
(``renew``). An agent that hears no renewal for a whole lease moves its host to the
set's safe state (docs/agent.md, "Leases"); nothing is renewed before the agent
acknowledged a set, so a controller that has no set for a host lets its old one lapse.

Usage from the app::

    server = AgentServer(host, port, secret, publications, on_ack=store_ack, logger=app.logger)
    server.start()
    publications.publish(7, {"10.0.0.1": [RouteParams(...), ...]})
    server.deliver("10.0.0.1")
"""

import collections
import errno
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from eventlet.green import ssl as green_ssl
from os_ken.lib import hub

from otcp.controller.config import DEFAULT_LEASE_S
from otcp.controller.publication import Publications
from otcp.wire import framing, limits, messages, paramset, session
from otcp.wire.framing import ProtocolError
from otcp.wire.messages import (
    Ack,
    Connections,
    Held,
    Hello,
    Reject,
    Resync,
    RoundTrip,
    RouteResult,
    Rtt,
    SendingConnections,
)
from otcp.wire.paramset import ParamSet
from otcp.wire.session import AuthenticationError

LOG = logging.getLogger("otcp.agent_server")
#: Send buffer of an agent connection (the kernel doubles it for bookkeeping).
SEND_BUFFER_BYTES = 64 * 1024
#: How long the accept loop waits when the process is out of descriptors or memory.
ACCEPT_RETRY_S = 0.5
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
#: Why agents are refused or cut off; `AgentServer.refused` counts each.
REFUSAL_REASONS = ("connection_limit", "handshake_timeout", "tls", "authentication", "protocol", "flooding",
                   "slow_reader")
#: Renewals per lease: two can be late (a busy hub, a slow write) before a lease lapses.
RENEWALS_PER_LEASE = 3


def server_tls(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or later) with the controller's certificate chain and key,
    whose sockets cooperate with os-ken's hub."""
    context = green_ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class Refused(ProtocolError):
    """A peer refused for one of REFUSAL_REASONS."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def read_secret(path: str) -> bytes:
    """The shared secret in a file, without surrounding whitespace."""
    with open(path, "rb") as handle:
        return handle.read().strip()


class AgentServer:
    """Accepts, authenticates and feeds host agents.

    `on_ack(host_ip, generation, results)` is called for every acknowledged
    set; `on_agent(host_ip, hello)` when an authenticated agent is mapped to
    a published host (at its hello, or at the first `deliver` to one of its
    addresses); `on_rtt(now, host_ip, round_trips)` for each round-trip report of a
    mapped agent (`time.time()` it came, and `messages.RoundTrip`s); `on_connections(now,
    host_ip, sending)` likewise for each report of its sending connections
    (`messages.SendingConnections`); `on_reject(host_ip,
    generation, error)` when an agent refuses a set. Callbacks run on the
    connection's green thread; an exception in one is logged and does not
    affect the connection.
    """

    def __init__(self, host: str, port: int, secret: bytes, publications: Publications,
                 on_ack: Callable[[str, int, list[RouteResult]], object],
                 on_agent: Callable[[str, Hello], object] | None = None, logger: logging.Logger | None = None,
                 on_reject: Callable[[str, int | None, str], object] | None = None,
                 on_rtt: Callable[[float, str, list[RoundTrip]], object] | None = None,
                 on_connections: Callable[[float, str, list[SendingConnections]], object] | None = None,
                 handshake_timeout: float = 5.0,
                 write_timeout: float = 10.0, rate_per_s: float = 20.0, burst: float = 200.0,
                 max_connections: int = 1024, max_unauthenticated: int | None = None,
                 unauthenticated_per_source: int = 16, send_buffer_bytes: int = SEND_BUFFER_BYTES,
                 tls: ssl.SSLContext | None = None, lease_s: float = DEFAULT_LEASE_S,
                 authority: Callable[[str | None], int | None] = lambda host_ip: 0,
                 on_held: Callable[[int | None], object] | None = None) -> None:
        if not isinstance(secret, bytes) or not secret:
            raise ValueError("agents.secret_file: the secret must be non-empty bytes")
        if isinstance(lease_s, bool) or not limits.LEASE_S[0] <= lease_s <= limits.LEASE_S[1]:
            raise ValueError(f"agents.lease_s: {lease_s!r} is not a number of seconds in "
                             f"{limits.LEASE_S[0]}..{limits.LEASE_S[1]}")
        self.host = host
        self.port = port
        self.secret = secret
        self.publications = publications
        self.on_ack = on_ack
        self.on_agent = on_agent
        self.on_reject = on_reject
        self.on_rtt = on_rtt
        self.on_connections = on_connections
        self.log = logger or LOG
        self.handshake_timeout = handshake_timeout
        self.write_timeout = write_timeout
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_connections = max_connections
        # Peers that have not authenticated get a quarter of the connections,
        # and few from any one address: a flood of them cannot lock agents out.
        self.max_unauthenticated = max_unauthenticated or max(1, max_connections // 4)
        self.unauthenticated_per_source = unauthenticated_per_source
        self.send_buffer_bytes = send_buffer_bytes
        self.address: tuple[str, int] | None = None  # (host, port) actually listened on, after start()
        self.tls = tls  # server_tls(...) for TLS under the HMAC handshake, None for plain TCP
        self.lease_s = lease_s  # the lease of every set, renewed every lease_s / RENEWALS_PER_LEASE
        self.authority = authority  # host ip (None: not mapped) -> the epoch of its sets, None: send none
        self.on_held = on_held
        self.acked: dict[str, int] = {}  # host ip -> last acknowledged generation
        self.refused: collections.Counter[str] = collections.Counter()  # reason -> agents refused or cut off
        self._connections: set[_Connection] = set()  # every open connection
        self._agents: set[_Connection] = set()  # authenticated connections that sent their hello
        self._listener: Any = None
        self._thread: Any = None
        self._refused = 0  # connections refused since the last log line about it
        self._refusal_logged_at = -1.0
        if len(secret) < 16:
            self.log.warning("agent secret is only %d bytes; use 16 or more random bytes", len(secret))

    # -- the app's interface ---------------------------------------------------

    def start(self) -> None:
        """Listen, and serve agents on green threads.

        The port is bound without SO_REUSEPORT, so a second controller
        cannot listen on it too.
        """
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._listener = hub.listen((self.host, self.port), family=family, reuse_port=False)
        self.address = self._listener.getsockname()[:2]
        self._thread = hub.spawn(self._accept_loop)
        self.log.info("agent channel listening on %s:%d", *self.address)

    def _accept_loop(self) -> None:
        """Accept agents for ever; running out of descriptors pauses it, never ends it."""
        while True:
            try:
                sock, peer = self._listener.accept()
            except OSError as error:
                if error.errno not in _RESOURCE_ERRNOS:
                    raise
                self.log.error("cannot accept agents: %s (%d connections open); retrying",
                               os.strerror(error.errno), len(self._connections))
                hub.sleep(ACCEPT_RETRY_S)
                continue
            hub.spawn(self._handle, sock, peer)

    def deliver(self, host_ip: str) -> None:
        """Send host_ip's latest published set now if its agent is connected
        (else it goes when the agent connects)."""
        connection = self._connection_for(host_ip)
        # Mapping the agent may have made the core drop the set (an agent ahead of its generations).
        latest = self.publications.latest(host_ip)
        if connection is not None and latest is not None:
            connection.send_latest(latest)

    def release_withheld(self) -> None:
        """Send every set withheld for want of authority whose host this controller leads now.

        A set is withheld when the host's switch is not led by this instance, or the host is not
        located (its switch reconnecting): the controller publishes no new generation when it
        takes the switch (back) and the host's parameters are the same, so without this the
        agent would wait for the next change. The app calls it after each plan; each writer
        also tries at its lease renewals."""
        for connection in list(self._agents):
            self._release(connection)

    def _release(self, connection: "_Connection") -> None:
        """Have the writer send the host's latest set, if one was withheld and may go now."""
        if not connection.withheld or connection.host_ip is None or self.authority(connection.host_ip) is None:
            return
        latest = self.publications.latest(connection.host_ip)
        if latest is not None:
            connection.withheld = False
            self.log.info("agent %s for %s: generation %d was withheld while this controller had no authority "
                          "over the host; sending it now", connection.peer, connection.host_ip, latest.generation)
            connection.send_latest(latest)

    def agents(self) -> list[dict[str, Any]]:
        """One record per authenticated agent that sent its hello, for display: its peer address, the
        host it is mapped to (None until a set is published for one of its addresses) and what it reported."""
        return [{"peer": c.peer, "host_ip": c.host_ip, "hostname": c.hello.hostname,
                 "addresses": list(c.addresses), "applied_generation_at_hello": c.hello.applied_generation}
                for c in self._agents if c.hello is not None]

    def connected_hosts(self) -> set[str]:
        """Every address reported by a connected, authenticated agent."""
        return {address for connection in self._agents for address in connection.addresses}

    def stop(self) -> None:
        """Stop listening and disconnect every agent."""
        if self._thread is not None:
            hub.kill(self._thread)
            self._thread = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for connection in list(self._connections):
            self._close(connection, None)

    # -- connections -------------------------------------------------------------

    def _handle(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        source, name = peer[0], f"{peer[0]}:{peer[1]}"
        refusal = self._refusal(source)
        if refusal:
            self.refused["connection_limit"] += 1
            self._log_refusal(name, refusal)
            sock.close()
            return
        # A small send buffer makes a peer that does not read block the
        # writer, so the write deadline catches it on the first large set.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
        connection = _Connection(self, sock, name, source)
        self._connections.add(connection)
        try:
            try:
                with hub.Timeout(self.handshake_timeout):
                    if self.tls is not None:
                        connection.sock = self._tls_handshake(sock)
                    hello = connection.handshake()
            except hub.Timeout:
                raise Refused("handshake_timeout", f"no authentication within {self.handshake_timeout:g} s") from None
            self._register(connection, hello)
            connection.writer = hub.spawn(self._write_loop, connection)
            connection.read_loop()
        except AuthenticationError as error:
            self._refuse(connection, "authentication", f"authentication failed: {error}")
        except Refused as error:
            self._refuse(connection, error.reason, str(error))
        except ProtocolError as error:
            self._refuse(connection, "protocol", str(error))
        except _Closed:
            pass
        except OSError as error:
            self._close(connection, f"connection error: {error}", level=logging.INFO)
        finally:
            self._close(connection, "closed the connection", level=logging.INFO)

    def _tls_handshake(self, sock: socket.socket) -> ssl.SSLSocket:
        """The connection wrapped in TLS, its handshake done (a plain-TCP peer sends no
        ClientHello and runs into the handshake deadline)."""
        assert self.tls is not None  # called only with TLS
        try:
            wrapped = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            wrapped.do_handshake()
        except hub.Timeout:
            raise Refused("tls", f"no TLS handshake within {self.handshake_timeout:g} s "
                                 "(a plain-TCP agent?)") from None
        except (ssl.SSLError, OSError) as error:
            raise Refused("tls", f"TLS handshake failed: {error}") from None
        return wrapped

    def _refuse(self, connection: "_Connection", reason: str, message: str) -> None:
        """Count a refusal by reason and disconnect."""
        if not connection.closed:
            self.refused[reason] += 1
        self._close(connection, message)

    def _log_refusal(self, peer: str, reason: str) -> None:
        """Log refused connections, at most one line a second: a flood must not flood the log."""
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at >= 1.0:
            more = f" (and {self._refused - 1} more refused since the last report)" if self._refused > 1 else ""
            self.log.warning("agent %s refused: %s%s", peer, reason, more)
            self._refused, self._refusal_logged_at = 0, now

    def _refusal(self, source: str) -> str:
        """Why a new connection from source is refused now, or ""."""
        if len(self._connections) >= self.max_connections:
            return f"{len(self._connections)} connections already open"
        waiting = [c for c in self._connections if c.session is None]
        if len(waiting) >= self.max_unauthenticated:
            return f"{len(waiting)} connections already waiting to authenticate"
        if sum(1 for c in waiting if c.source == source) >= self.unauthenticated_per_source:
            return f"{self.unauthenticated_per_source} connections from {source} already waiting to authenticate"
        return ""

    def _register(self, connection: "_Connection", hello: Hello) -> None:
        """Take an authenticated agent's hello: map it to its host if a set is published for one
        of its addresses (canonical: the hello's schema made them so), and send that set."""
        connection.hello = hello
        connection.addresses = list(hello.addresses)
        for other in list(self._agents):
            if set(other.addresses) & set(connection.addresses):
                self._close(other, f"replaced by a newer connection from {connection.peer}", level=logging.INFO)
        self._agents.add(connection)
        if self.on_held is not None:
            self._callback(self.on_held, hello.applied_generation)
        self.log.info("agent %s (%s) authenticated: addresses %s, applied generation %s", connection.peer,
                      hello.hostname, ", ".join(connection.addresses) or "none", hello.applied_generation)
        for address in connection.addresses:
            if self.publications.latest(address) is not None:
                self._map(connection, address)
                latest = self.publications.latest(address)  # the core may have dropped it meanwhile
                if latest is not None:
                    connection.send_latest(latest)
                return
        self.log.info("agent %s: no parameters published yet for %s", connection.peer,
                      ", ".join(connection.addresses) or "its addresses")

    def _map(self, connection: "_Connection", host_ip: str) -> None:
        connection.host_ip = host_ip
        if self.on_agent is not None:
            self._callback(self.on_agent, host_ip, connection.hello)

    def _connection_for(self, host_ip: str) -> "_Connection | None":
        for connection in self._agents:
            if connection.host_ip == host_ip:
                return connection
        for connection in self._agents:
            if connection.host_ip is None and host_ip in connection.addresses:
                self._map(connection, host_ip)
                return connection
        return None

    def _write_loop(self, connection: "_Connection") -> None:
        """Send the connection's latest set whenever there is one, and the renewals of its lease."""
        try:
            while True:
                connection.wake.wait(timeout=max(0.0, connection.renew_at - time.monotonic()))
                connection.wake.clear()
                while connection.pending is not None:
                    param_set, connection.pending = connection.pending, None
                    epoch = self.authority(connection.host_ip)
                    if epoch is None:
                        connection.withheld = True
                        self.log.debug("generation %d withheld from agent %s for %s: this controller does not "
                                       "lead its switch now", param_set.generation, connection.peer,
                                       connection.host_ip)
                        continue
                    connection.withheld = False
                    message, delta = connection.params_for(param_set, self.publications.peers, epoch)
                    assert connection.session is not None  # the writer starts after the handshake
                    data = connection.session.seal(message)
                    if not self._send(connection, data, f"generation {param_set.generation} ({len(data)} bytes)"):
                        return
                    if delta is None:
                        self.log.info("sent generation %d (%d routes, %d bytes, epoch %d) to agent %s for %s",
                                      param_set.generation, len(param_set.routes), len(data), epoch, connection.peer,
                                      connection.host_ip)
                    else:
                        self.log.info("sent generation %d as a delta against %d (%d added, %d copied, %d changed, "
                                      "%d removed of %d routes, %d bytes) to agent %s for %s", param_set.generation,
                                      delta["base"], len(delta["added"]), len(delta["copied"]), len(delta["changed"]),
                                      len(delta["removed"]), len(param_set.routes), len(data), connection.peer,
                                      connection.host_ip)
                if time.monotonic() >= connection.renew_at:
                    self._release(connection)
                    if not self._renew(connection):
                        return
        except OSError as error:
            self._close(connection, f"connection error while sending: {error}", level=logging.INFO)
        except Exception as error:  # a writer that cannot go on must not leave the agent waiting
            # Closing makes the agent reconnect and ask again, instead of holding a connection that sends nothing.
            self._close(connection, f"cannot send to it: {type(error).__name__}: {error}", level=logging.ERROR)

    def _send(self, connection: "_Connection", data: bytes, what: str) -> bool:
        """Send sealed data to the agent within the write timeout; False when it did not take it (what:
        what the data is, for the message) and was refused as a slow reader."""
        try:
            with hub.Timeout(self.write_timeout):
                connection.sock.sendall(data)
        except hub.Timeout:
            self._refuse(connection, "slow_reader", f"slow reader: {what} not taken within {self.write_timeout:g} s")
            return False
        return True

    def _renew(self, connection: "_Connection") -> bool:
        """Renew the lease of the set the agent acknowledged on this connection (none before it
        acknowledged one); False when the agent was cut off as a slow reader."""
        connection.renew_at = time.monotonic() + self.lease_s / RENEWALS_PER_LEASE
        epoch = self.authority(connection.host_ip)
        if connection.acked_set is None or epoch is None or epoch != connection.acked_epoch:
            return True  # nothing acknowledged under this controller's present authority
        generation = connection.acked_set.generation
        assert connection.session is not None  # the writer starts after the handshake
        data = connection.session.seal(messages.renew_message(generation, self.lease_s, epoch))
        if not self._send(connection, data, f"the renewal of generation {generation}"):
            return False
        self.log.debug("renewed the lease of generation %d (%g s) of agent %s for %s", generation, self.lease_s,
                       connection.peer, connection.host_ip)
        return True

    def _acknowledged(self, connection: "_Connection", ack: Ack) -> None:
        generation = ack.generation
        if generation not in connection.sent:
            raise ProtocolError(f"ack for generation {generation}, which was not sent to it")
        param_set, _ = connection.sent.pop(generation)
        epoch = connection.sent_epochs.pop(generation, None)
        if connection.acked_set is None or generation >= connection.acked_set.generation:
            connection.acked_set = param_set  # what later deltas are based on
            connection.acked_epoch = epoch
        if connection.host_ip is not None:
            self.acked[connection.host_ip] = generation
        skipped = sum(1 for result in ack.results if result.status == "skipped")
        unenforced = sum(1 for result in ack.results if result.status == "applied" and result.reason)
        self.log.info("agent %s acknowledged generation %d for %s (%d skipped, %d not fully enforced)", connection.peer,
                      generation, connection.host_ip, skipped, unenforced)
        self._callback(self.on_ack, connection.host_ip, generation, ack.results)

    def _rejected(self, connection: "_Connection", reject: Reject) -> None:
        generation = reject.generation
        if generation is not None:
            if generation not in connection.sent:
                raise ProtocolError(f"reject for generation {generation}, which was not sent to it")
            connection.sent.pop(generation)
        self.log.warning("agent %s for %s rejected generation %s: %s", connection.peer, connection.host_ip,
                         generation, reject.error)
        if self.on_reject is not None:
            self._callback(self.on_reject, connection.host_ip, generation, reject.error)

    def _resync(self, connection: "_Connection", resync: Resync) -> None:
        """The agent could not apply a delta (its applied generation was not the base):
        send the latest set again, whole unless the agent holds the acknowledged set."""
        generation = resync.generation
        if generation not in connection.sent or not connection.sent[generation][1]:
            raise ProtocolError(f"resync for generation {generation}, which was not sent to it as a delta")
        del connection.sent[generation]
        acked = connection.acked_set
        if acked is None or resync.applied_generation != acked.generation:
            connection.acked_set = None
        self.log.info("agent %s for %s holds generation %s, not the base of the delta to %d: sending %s",
                      connection.peer, connection.host_ip, resync.applied_generation, generation,
                      "the whole set" if connection.acked_set is None else "a delta against it")
        latest = self.publications.latest(connection.host_ip) if connection.host_ip is not None else None
        if latest is not None:
            connection.send_latest(latest)

    def _callback(self, function: Callable[..., object], *args: Any) -> None:
        try:
            function(*args)
        except Exception:  # the app's bug must not cost the agent its connection
            self.log.exception("agent server callback %s failed", getattr(function, "__name__", function))

    def _close(self, connection: "_Connection", reason: str | None, level: int = logging.WARNING) -> None:
        """Disconnect an agent (once), logging why; kills its green threads."""
        if connection.closed:
            return
        connection.closed = True
        self._connections.discard(connection)
        self._agents.discard(connection)
        if reason is not None:
            who = f"agent {connection.peer}" + (f" ({connection.host_ip})" if connection.host_ip else "")
            self.log.log(level, "%s disconnected: %s", who, reason)
        try:
            connection.sock.close()
        except OSError:
            pass
        current = hub.getcurrent()
        for thread in (connection.reader, connection.writer):
            if thread is not None and thread is not current:
                hub.kill(thread)


class _Connection:
    """One agent connection: its socket, session, and what to send it."""

    def __init__(self, server: AgentServer, sock: Any, peer: str, source: str) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.source = source
        self.reader = hub.getcurrent()
        self.writer: Any = None
        self.session: session.Session | None = None
        self.decoder = framing.FrameDecoder(limits.MAX_HANDSHAKE_FRAME_BYTES)
        self.frames: list[bytes] = []
        self.hello: Hello | None = None
        self.addresses: list[str] = []
        self.host_ip: str | None = None
        self.pending: ParamSet | None = None
        self.withheld = False  # a set was not sent for want of authority over the host; sent once it is there
        # generation -> (the set, whether it went as a delta), until acked or rejected
        self.sent: dict[int, tuple[ParamSet, bool]] = {}
        self.acked_set: ParamSet | None = None  # the latest set the agent acknowledged here: the base of deltas
        self.acked_epoch: int | None = None  # the epoch it was sent with
        self.sent_epochs: dict[int, int] = {}  # generation -> the epoch it was sent with, until acked
        self.peers_sent: list[str] | None = None  # the peers of the last params message on this connection
        self.wake = hub.Event()
        self.closed = False
        self.tokens = server.burst
        self.refilled = time.monotonic()
        self.frame_started: float | None = None  # when the first bytes of a partial frame came
        self.renew_at = time.monotonic() + server.lease_s / RENEWALS_PER_LEASE  # the next renewal

    def handshake(self) -> Hello:
        """Challenge, check the agent's MAC, prove ours, read the hello."""
        nonce = session.new_nonce()
        self.sock.sendall(framing.frame(framing.encode_json(messages.challenge_message(nonce))))
        auth = messages.parse_message(framing.decode_json(self.read_frame(), "auth"), messages.Auth)
        expected = session.agent_mac(self.server.secret, nonce, auth.nonce)
        if not session.macs_equal(expected, auth.mac):
            raise AuthenticationError("wrong secret")
        self.sock.sendall(framing.frame(framing.encode_json(
            messages.welcome_message(self.server.secret, auth.nonce, nonce))))
        self.session = session.Session(self.server.secret, nonce, auth.nonce, "controller")
        self.decoder.limit = limits.MAX_HELLO_FRAME_BYTES
        hello = messages.parse_message(self.session.open(self.read_frame()), Hello)
        self.decoder.limit = limits.MAX_FRAME_BYTES
        return hello

    def read_loop(self) -> None:
        """Acks, rejects, resyncs, and round-trip and connection reports until the agent goes away."""
        assert self.session is not None  # read after the handshake
        while True:
            body = self.read_frame()
            self.charge(1 + len(body) // 65536)
            message = messages.parse_message(self.session.open(body), Ack, Reject, Rtt, Connections, Resync,
                                             Held)
            if isinstance(message, Held):
                if self.server.on_held is not None:
                    self.server._callback(self.server.on_held, message.generation)
            elif isinstance(message, Ack):
                self.server._acknowledged(self, message)
            elif isinstance(message, Reject):
                self.server._rejected(self, message)
            elif isinstance(message, Resync):
                self.server._resync(self, message)
            elif isinstance(message, Rtt) and self.host_ip is not None and self.server.on_rtt is not None:
                self.server._callback(self.server.on_rtt, time.time(), self.host_ip, message.round_trips())
            elif (isinstance(message, Connections) and self.host_ip is not None
                  and self.server.on_connections is not None):
                self.server._callback(self.server.on_connections, time.time(), self.host_ip, message.sending())

    def read_frame(self) -> bytes:
        """The next whole frame. Once a frame has begun, the rest must come
        within the write timeout: a frame cannot trickle in for ever."""
        while not self.frames:
            if self.decoder.pending():
                self.frame_started = self.frame_started or time.monotonic()
                left = self.frame_started + self.server.write_timeout - time.monotonic()
                if left <= 0:
                    raise ProtocolError(f"a frame did not arrive whole within {self.server.write_timeout:g} s")
                try:
                    with hub.Timeout(left):
                        data = self.sock.recv(65536)
                except hub.Timeout:
                    raise ProtocolError(
                        f"a frame did not arrive whole within {self.server.write_timeout:g} s") from None
            else:
                self.frame_started = None
                data = self.sock.recv(65536)
            if not data:
                raise _Closed()
            self.frames.extend(self.decoder.feed(data))
        self.frame_started = None
        return self.frames.pop(0)

    def charge(self, cost: int) -> None:
        """Token bucket: `rate_per_s` messages a second, bursts of `burst`."""
        now = time.monotonic()
        self.tokens = min(self.server.burst, self.tokens + (now - self.refilled) * self.server.rate_per_s)
        self.refilled = now
        self.tokens -= cost
        if self.tokens < 0:
            raise Refused("flooding", f"flooding: more than {self.server.rate_per_s:g} messages a second")

    def params_for(self, param_set: ParamSet, all_peers: list[str],
                   epoch: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The params message for a set under epoch: a delta against the acknowledged set when it
        is older, of the same epoch, and the delta is the shorter message, else the whole set;
        the peers only when they changed. Returns (message, the delta or None)."""
        peers = [ip for ip in all_peers if ip not in self.addresses]
        changed_peers = None if peers == self.peers_sent else peers
        base = self.acked_set if self.acked_epoch == epoch else None
        delta = paramset.worth_a_delta(base, param_set)
        self.sent[param_set.generation] = (param_set, delta is not None)
        self.sent_epochs[param_set.generation] = epoch
        self.peers_sent = peers
        lease_s = self.server.lease_s
        if delta is None:
            return messages.params_message(param_set, changed_peers, lease_s=lease_s, epoch=epoch), None
        return messages.delta_message(delta, changed_peers, lease_s=lease_s, epoch=epoch), delta

    def send_latest(self, param_set: ParamSet) -> None:
        """Have the writer send param_set next (it replaces one not yet sent)."""
        self.pending = param_set
        self.wake.set()


class _Closed(OSError):
    """The agent closed its end."""

    def __str__(self) -> str:
        return "closed by the agent"

