"""The agent's side of the channel: dial the controller, authenticate,
report, then apply and acknowledge every parameter set it pushes.

`ControllerClient.run` never gives up: when the controller is unreachable
or goes away it waits (capped exponential backoff with jitter) and dials
again. The routes stay as they are while disconnected, until the applied
set's lease runs out: every `LEASE_POLL_S` while it waits (for a frame, or to
dial again) the agent checks the lease, and moves the host to the set's safe
state once no controller renewed it in time (`otcp.agent.lease`). TCP
keepalive notices a controller that vanished without closing the connection.
"""

import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from otcp.agent.core import Agent, BaseMismatch
from otcp.agent.lease import SAFE_INITCWND
from otcp.agent.metrics import AgentMetrics
from otcp.agent.routes import ApplyError
from otcp.agent.rtt import INTERVAL_S, RttMeter
from otcp.agent.state import StateUnwritable
from otcp.wire import framing, limits, messages, paramset, session
from otcp.wire.framing import ProtocolError
from otcp.wire.session import AuthenticationError
from otcp.wire.validation import Strict, ValidationError

LOG = logging.getLogger("otcp.agent")
Expected = TypeVar("Expected", bound=Strict)
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 30_000
STABLE_SESSION_S = 5.0
#: How often the agent checks its lease while it waits: a lapse comes at most this late (or, while
#: it dials, the connect timeout late).
LEASE_POLL_S = 1.0


class ControllerClient:
    """Keeps one agent connected to its controller."""

    def __init__(self, agent: Agent, host: str, port: int, secret: bytes, connect_timeout: float = 5.0,
                 handshake_timeout: float = 10.0, backoff_initial: float = 0.5, backoff_max: float = 30.0,
                 logger: logging.Logger = LOG, metrics: AgentMetrics | None = None, tls: ssl.SSLContext | None = None,
                 server_name: str | None = None, rtt_meter: RttMeter | None = None,
                 rtt_interval_s: float = INTERVAL_S, lease_poll_s: float = LEASE_POLL_S) -> None:
        self.agent = agent
        self.address = (host, port)
        self.secret = secret
        self.metrics = metrics or AgentMetrics()
        self.metrics.follow_lease(lambda: agent.lease)
        self.lease_poll_s = lease_poll_s
        self.tls = tls  # an ssl.SSLContext that verifies the controller, or None for plain TCP
        self.server_name = server_name or host  # what the controller's certificate must name
        self.rtt_meter = rtt_meter or RttMeter()
        self.rtt_interval_s = rtt_interval_s
        self._destinations: list[str] = []  # of the applied set, for the round-trip reporter
        self._peers: list[str] = []  # the hosts the controller knows, to probe
        self.connect_timeout = connect_timeout
        self.handshake_timeout = handshake_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.log = logger
        self.sessions = 0  # authenticated sessions so far
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Make `run` return after its current attempt instead of dialling again."""
        self._stopping.set()

    def run(self) -> None:
        """Connect, serve, reconnect; returns after `stop`, or on an exception from
        outside (SystemExit, KeyboardInterrupt)."""
        failures = 0
        attempts = 0
        while not self._stopping.is_set():
            if attempts:
                self.metrics.reconnects.inc()
            attempts += 1
            started = time.monotonic()
            sessions = self.sessions
            try:
                self.serve_once()
                self.log.warning("controller %s:%d closed the connection", *self.address)
            except (OSError, ProtocolError, ValueError) as error:
                self.log.warning("controller %s:%d: %s", *self.address, _describe(error))
            # A session that authenticated and lasted resets the backoff; a
            # controller that keeps dropping us right away does not.
            lasted = time.monotonic() - started >= STABLE_SESSION_S
            failures = 0 if self.sessions > sessions and lasted else failures + 1
            delay = min(self.backoff_max, self.backoff_initial * 2 ** (failures - 1 if failures else 0))
            delay *= random.uniform(0.5, 1.0)
            self.log.info("reconnecting in %.1f s", delay)
            self._wait(delay)

    def _wait(self, delay: float) -> None:
        """Wait delay seconds (or until `stop`), keeping the lease meanwhile."""
        end = time.monotonic() + delay
        while not self._stopping.is_set() and (left := end - time.monotonic()) > 0:
            self._stopping.wait(min(left, self.lease_poll_s))
            self.keep_lease()

    def keep_lease(self) -> None:
        """Move the host to the safe state if the applied set's lease ran out (logged in one line)."""
        lease = self.agent.lease
        try:
            results = self.agent.keep_lease()
        except (ApplyError, StateUnwritable) as error:
            self.log.error("the lease of generation %s ran out, and its safe state could not be applied: %s",
                           lease.generation if lease else None, error)
            return
        if results is not None and lease is not None:
            self.log.warning("no controller renewed the lease of generation %d for %g s: safe state applied "
                             "(rto_min and quickack kept, initcwnd at most %d; no window clamp, advmss or "
                             "pacing) to %d route(s)", lease.generation, lease.lease_s, SAFE_INITCWND,
                             sum(1 for r in results if r.status == "applied"))

    def serve_once(self) -> None:
        """One connection: handshake, hello, then params until it closes."""
        sock = socket.create_connection(self.address, timeout=self.connect_timeout)
        sender = None
        try:
            _keepalive(sock)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.server_name)
            reader = _Reader(sock, self.lease_poll_s, self.keep_lease)
            # One deadline for the whole handshake, not one per receive: a
            # challenge trickled a byte at a time cannot hold the agent.
            reader.deadline = time.monotonic() + self.handshake_timeout
            session = self._handshake(sock, reader)
            reader.deadline = None
            self.sessions += 1
            self.metrics.connected.set(1)
            self.log.info("authenticated to controller %s:%d", *self.address)
            hello = self.agent.hello()
            sender = _Sender(sock, session)
            sender.send(hello)
            self.log.info("reported addresses %s", ", ".join(hello.addresses) or "(none)")
            # The reporter thread must not touch the agent's state (SQLite is per thread): it reads this list.
            self._destinations = self.agent.destinations()
            reporter = threading.Thread(target=self._report_rtts, args=(sender,), daemon=True)
            reporter.start()
            while True:
                body = reader.frame()
                if body is None:
                    return
                message = messages.parse_message(session.open(body), messages.Params, messages.Renew)
                if isinstance(message, messages.Renew):
                    self._renew(message)
                    continue
                assert isinstance(message, messages.Params)  # the one other kind parse_message lets through
                params = message
                if params.delta is not None:
                    sender.send(self._handle_params(params.delta, params.lease_s, delta=True))
                elif params.set is not None:
                    sender.send(self._handle_params(params.set, params.lease_s))
                self._destinations = self.agent.destinations()
                if "peers" in params.model_fields_set:  # absent: unchanged since the last params message
                    self._peers = params.peers
        finally:
            self.metrics.connected.set(0)
            if sender is not None:
                sender.closed.set()
            sock.close()

    def _report_rtts(self, sender: "_Sender") -> None:
        """Every rtt_interval_s, measure the round trips to the applied set's
        destinations and report them, until the connection ends."""
        while not sender.closed.wait(self.rtt_interval_s):
            destinations = self._destinations
            try:
                self.rtt_meter.measure(destinations, self._peers)
                round_trips = self.rtt_meter.report()
                if round_trips:
                    self.log.debug("round trips: %s", "; ".join(
                        f"{trip.dst} min {trip.min_s * 1e6:.0f} us of {trip.count} ({trip.source})"
                        for trip in round_trips))
                    sender.send(messages.rtt_message(round_trips))
            except OSError as error:
                if not sender.closed.is_set():
                    self.log.warning("round-trip report failed: %s", error)
                return

    def _handshake(self, sock: socket.socket, reader: "_Reader") -> session.Session:
        reader.decoder.limit = limits.MAX_HANDSHAKE_FRAME_BYTES
        challenge = _expect(reader, messages.Challenge, "waiting for the challenge")
        auth, agent_nonce = messages.auth_message(self.secret, challenge)
        sock.sendall(framing.frame(framing.encode_json(auth)))
        welcome = _expect(reader, messages.Welcome, "authentication refused (wrong secret?)")
        expected = session.controller_mac(self.secret, agent_nonce, challenge.nonce)
        if not session.macs_equal(expected, welcome.mac):
            raise AuthenticationError("the controller could not prove it holds the secret")
        reader.decoder.limit = limits.MAX_FRAME_BYTES
        return session.Session(self.secret, challenge.nonce, agent_nonce, "agent")

    def _renew(self, renew: messages.Renew) -> None:
        """The controller renewed the lease of a generation: the lease starts again, and a host in
        the safe state gets the planned values back."""
        try:
            decision = self.agent.renew(renew.generation, renew.lease_s)
        except (ApplyError, StateUnwritable) as error:
            self.log.error("could not restore generation %d on its renewal: %s", renew.generation, error)
            return
        if decision == "restore":
            self.log.info("the controller renewed generation %d: its planned values are back (lease %g s)",
                          renew.generation, renew.lease_s)
        elif decision == "ignore":
            self.log.debug("renewal of generation %d ignored: it is not the applied generation", renew.generation)

    def _handle_params(self, param_set: dict[str, Any], lease_s: float, delta: bool = False) -> dict[str, Any]:
        """Apply a whole set, or a delta against the applied one (a parsed JSON object), with its
        lease; the answer to send: ack, reject, or (a delta with another base) resync, which asks for
        the whole set."""
        generation = paramset.claimed_generation(param_set)
        started = time.monotonic()
        try:
            if delta:
                validated, results = self.agent.apply_delta(param_set, "controller", lease_s)
            else:
                validated, results = self.agent.apply(param_set, "controller", lease_s)
        except BaseMismatch as mismatch:
            self.metrics.resyncs.inc()
            self.log.info("%s; asking for the whole set", mismatch)
            return messages.resync_message(mismatch.generation, mismatch.applied_generation)
        except ValidationError as error:
            self.metrics.rejected("generation" if error.field == "generation" else "validation")
            self.log.warning("rejected generation %s: %s", generation, error)
            return messages.reject_message(generation, str(error))
        except ApplyError as error:
            self.metrics.rejected("kernel")
            self.log.error("could not apply generation %s: %s", generation, error)
            return messages.reject_message(generation, str(error))
        except StateUnwritable as error:
            self.metrics.rejected("state")
            self.log.error("could not apply generation %s: %s; no route changed", generation, error)
            return messages.reject_message(generation, f"{error}; no route changed")
        self.metrics.applied(validated.generation, results, time.monotonic() - started)
        skipped = sum(1 for r in results if r.status == "skipped")
        self.log.info("applied generation %d: %d route(s), %d skipped", validated.generation,
                      len(results) - skipped, skipped)
        for result in results:
            if result.status == "skipped":
                self.log.info("  skipped %s: %s", result.dst, result.reason)
        return messages.ack_message(validated.generation, results, self.agent.enforcement.report())


class _Sender:
    """Sends sealed messages on one connection from any thread, one at a time
    (a session's sequence numbers must go out in order)."""

    def __init__(self, sock: socket.socket, session: session.Session) -> None:
        self.sock = sock
        self.session = session
        self.closed = threading.Event()
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any] | Strict) -> None:
        """Seal and send one message."""
        with self._lock:
            self.sock.sendall(self.session.seal(message))


class _Reader:
    """Whole frames from a blocking socket; `idle()` runs every `poll_s` while none comes."""

    def __init__(self, sock: socket.socket, poll_s: float, idle: Callable[[], object]) -> None:
        self.sock = sock
        self.poll_s = poll_s
        self.idle = idle
        self.decoder = framing.FrameDecoder(limits.MAX_HANDSHAKE_FRAME_BYTES)
        self.deadline: float | None = None  # time.monotonic() by which the next frame must be whole, or None
        self._ready: list[bytes] = []

    def frame(self) -> bytes | None:
        """The next frame's body, or None when the peer closed cleanly."""
        while not self._ready:
            wait = self.poll_s
            if self.deadline is not None:
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    raise ProtocolError("the handshake did not finish in time")
                wait = min(wait, remaining)
            self.sock.settimeout(wait)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                self.idle()
                continue
            if not data:
                if self.decoder.pending():
                    raise ProtocolError("connection closed in the middle of a frame")
                return None
            self._ready.extend(self.decoder.feed(data))
        return self._ready.pop(0)


def _expect(reader: "_Reader", kind: type[Expected], closed_meaning: str) -> Expected:
    body = reader.frame()
    if body is None:
        raise ProtocolError(f"connection closed: {closed_meaning}")
    return messages.parse_message(framing.decode_json(body, messages.KINDS[kind]), kind)


def _keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)


def _describe(error: Exception) -> str:
    if isinstance(error, socket.timeout):
        return "timed out"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    return str(error) or type(error).__name__


def parse_address(text: str, option: str = "--controller") -> tuple[str, int]:
    """"HOST:PORT" or "[IPv6]:PORT" -> (host, port); ValueError names the option and the problem."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{option}: {text!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{option}: port {port!r} is not a number in 1..65535")
    return host, int(port)


def client_tls(ca_file: str) -> ssl.SSLContext:
    """A TLS context that trusts only ca_file and checks the controller's name (TLS 1.2 or later)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
