"""The agent's side of the channel: dial the controller, authenticate,
report, then apply and acknowledge every parameter set it pushes.

An agent may be given several controllers (the instances of one fabric,
docs/controller.md, "Two controllers, one fabric"): one `ControllerClient` per
controller, each in its own thread (`run_all`), sharing one `SharedAgent`, which
applies what any of them sends one at a time and tells every connected
controller what the host holds (``held``) after each change. Only a host's
master sends it sets; the agent's (epoch, generation) rule keeps a set from
a controller that lost its authority out (`otcp.wire.paramset.check_generation`).

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
from otcp.agent.rtt import INTERVAL_S, RttMeter, established_connections
from otcp.agent.sending import SendingCounter
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


class SharedAgent:
    """One agent that several controller connections feed: they use it one at a time (`lock`), and
    each change of what it holds is told to every connected controller (`announce`)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.lock = threading.RLock()
        self._senders: set[_Sender] = set()

    def joined(self, sender: "_Sender") -> None:
        """A controller connection is up: it hears what the agent holds, now and after each change."""
        with self.lock:
            self._senders.add(sender)
            self._tell(sender)

    def left(self, sender: "_Sender") -> None:
        """A controller connection ended."""
        with self.lock:
            self._senders.discard(sender)

    def announce(self) -> None:
        """Tell every connected controller what the agent holds now."""
        with self.lock:
            for sender in list(self._senders):
                self._tell(sender)

    def _tell(self, sender: "_Sender") -> None:
        epoch, generation = self.agent.held()
        try:
            sender.send(messages.held_message(epoch, generation))
        except OSError:
            self._senders.discard(sender)  # its own reader finds the connection gone


class ControllerClient:
    """Keeps one agent connected to one controller."""

    def __init__(self, agent: Agent, host: str, port: int, secret: bytes, connect_timeout: float = 5.0,
                 handshake_timeout: float = 10.0, backoff_initial: float = 0.5, backoff_max: float = 30.0,
                 logger: logging.Logger = LOG, metrics: AgentMetrics | None = None, tls: ssl.SSLContext | None = None,
                 server_name: str | None = None, rtt_meter: RttMeter | None = None,
                 rtt_interval_s: float = INTERVAL_S, lease_poll_s: float = LEASE_POLL_S,
                 shared: SharedAgent | None = None) -> None:
        self.agent = agent
        self.shared = shared or SharedAgent(agent)
        self.address = (host, port)
        self.secret = secret
        self.metrics = metrics or AgentMetrics()
        self.metrics.follow_lease(lambda: agent.lease)
        self.lease_poll_s = lease_poll_s
        self.tls = tls  # an ssl.SSLContext that verifies the controller, or None for plain TCP
        self.server_name = server_name or host  # what the controller's certificate must name
        self.rtt_meter = rtt_meter or RttMeter()
        self.rtt_interval_s = rtt_interval_s
        self.sending_counter = SendingCounter()
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
        try:
            with self.shared.lock:
                lease = self.agent.lease
                results = self.agent.keep_lease()
        except (ApplyError, StateUnwritable) as error:
            lease = self.agent.lease
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
        connected = False
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
            self.metrics.connected.inc()
            connected = True
            self.log.info("authenticated to controller %s:%d", *self.address)
            with self.shared.lock:
                hello = self.agent.hello()
                sender = _Sender(sock, session)
                sender.send(hello)
                self.shared.joined(sender)
                # The reporter thread does not touch the agent's state: it reads this list.
                self._destinations = self.agent.destinations()
            self.log.info("reported addresses %s", ", ".join(hello.addresses) or "(none)")
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
                with self.shared.lock:
                    if params.delta is not None:
                        sender.send(self._handle_params(params.delta, params.lease_s, params.epoch, delta=True))
                    elif params.set is not None:
                        sender.send(self._handle_params(params.set, params.lease_s, params.epoch))
                    self._destinations = self.agent.destinations()
                    self.shared.announce()
                if "peers" in params.model_fields_set:  # absent: unchanged since the last params message
                    self._peers = params.peers
        finally:
            if connected:
                self.metrics.connected.dec()
            if sender is not None:
                self.shared.left(sender)
                sender.closed.set()
            sock.close()

    def _report_rtts(self, sender: "_Sender") -> None:
        """Every rtt_interval_s, measure the round trips to the applied set's
        destinations and report them, and the connections to each that sent since the
        last report (every time, so that a count that fell to none is heard), until the
        connection ends."""
        while not sender.closed.wait(self.rtt_interval_s):
            destinations = self._destinations
            try:
                connections = established_connections()  # one read for both reports
                self.rtt_meter.measure(destinations, self._peers, connections)
                round_trips = self.rtt_meter.report()
                if round_trips:
                    self.log.debug("round trips: %s", "; ".join(
                        f"{trip.dst} min {trip.min_s * 1e6:.0f} us of {trip.count} ({trip.source})"
                        for trip in round_trips))
                    sender.send(messages.rtt_message(round_trips))
                sender.send(messages.connections_message(self.sending_counter.count(destinations, connections)))
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
            with self.shared.lock:
                decision = self.agent.renew(renew.generation, renew.lease_s, renew.epoch)
        except (ApplyError, StateUnwritable) as error:
            self.log.error("could not restore generation %d on its renewal: %s", renew.generation, error)
            return
        if decision == "restore":
            self.log.info("the controller renewed generation %d: its planned values are back (lease %g s)",
                          renew.generation, renew.lease_s)
        elif decision == "ignore":
            self.log.debug("renewal of generation %d of epoch %d ignored: it is not the applied set",
                           renew.generation, renew.epoch)

    def _handle_params(self, param_set: dict[str, Any], lease_s: float, epoch: int,
                       delta: bool = False) -> dict[str, Any]:
        """Apply a whole set, or a delta against the applied one (a parsed JSON object), with its
        lease, from a controller of epoch; the answer to send: ack, reject, or (a delta with another
        base) resync, which asks for the whole set. Called with the shared agent's lock held."""
        generation = paramset.claimed_generation(param_set)
        started = time.monotonic()
        try:
            if delta:
                validated, results = self.agent.apply_delta(param_set, "controller", lease_s, epoch)
            else:
                validated, results = self.agent.apply(param_set, "controller", lease_s, epoch)
        except BaseMismatch as mismatch:
            self.metrics.resyncs.inc()
            self.log.info("%s; asking for the whole set", mismatch)
            return messages.resync_message(mismatch.generation, mismatch.applied_generation)
        except ValidationError as error:
            self.metrics.rejected("generation" if error.field in ("generation", "epoch") else "validation")
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
        self.log.info("applied generation %d: %d route(s), %d skipped (epoch %d, from %s:%d)", validated.generation,
                      len(results) - skipped, skipped, epoch, *self.address)
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


def run_all(clients: list[ControllerClient]) -> None:
    """Run every client (one per controller) until `stop` or an exception from outside (SystemExit,
    KeyboardInterrupt, raised in this thread), each in a thread of its own when there are several."""
    if len(clients) == 1:
        clients[0].run()
        return
    threads = [threading.Thread(target=client.run, name=f"controller {client.address[0]}:{client.address[1]}",
                                daemon=True) for client in clients]
    for thread in threads:
        thread.start()
    try:
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(0.5)
    finally:
        for client in clients:
            client.stop()


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
