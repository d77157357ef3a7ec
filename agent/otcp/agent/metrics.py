"""Prometheus metrics of one agent (`otcp-agent run --metrics ADDRESS:PORT`).

Names follow Prometheus conventions: the ``otcp_agent_`` prefix, base units
(seconds), ``_total`` for counters. Reject reasons are a small fixed set, so
a hostile controller cannot blow up the label space.
"""

import math
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import MetricsHandler

from otcp.agent.enforcement import MODES, Mode
from otcp.agent.lease import Lease
from otcp.wire import build
from otcp.wire.messages import RouteResult

#: Scrapes served at once; more are closed at once. Each holds a thread and a descriptor, so an
#: unbounded number would let slow clients take the agent's descriptors from its controller connection.
MAX_SCRAPES = 8
#: Longest wait for a scrape's next bytes, and the longest a whole scrape may take.
SCRAPE_TIMEOUT_S = 5.0
SCRAPE_DEADLINE_S = 10.0
#: Why a set was refused: its fields, its generation, the kernel, or a state file that cannot be written.
REJECT_REASONS = ("validation", "generation", "kernel", "state")


class AgentMetrics:
    """The agent's gauges and counters, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.applied_generation = Gauge("otcp_agent_applied_generation", "Generation of the applied parameter set",
                                        registry=self.registry)
        self.routes = Gauge("otcp_agent_routes", "Routes of the applied set, by outcome", ["status"],
                            registry=self.registry)
        self.apply_seconds = Histogram("otcp_agent_apply_duration_seconds", "Time to validate and apply a set",
                                       buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10),
                                       registry=self.registry)
        self.rejects = Counter("otcp_agent_rejects_total", "Parameter sets refused, by reason", ["reason"],
                               registry=self.registry)
        self.resyncs = Counter("otcp_agent_resyncs_total", "Deltas whose base was not the applied generation "
                               "(the whole set was asked for)", registry=self.registry)
        self.connected = Gauge("otcp_agent_connected", "Controllers the agent is authenticated to now",
                               registry=self.registry)
        self.reconnects = Counter("otcp_agent_reconnects_total", "Connection attempts after the first",
                                  registry=self.registry)
        self.lease_expired = Gauge("otcp_agent_lease_expired", "1 while the host holds the safe state of its set "
                                   "because no controller renewed its lease", registry=self.registry)
        self.lease_remaining = Gauge("otcp_agent_lease_remaining_seconds", "Seconds left of the applied set's "
                                     "lease (NaN: no lease, the set holds until replaced)", registry=self.registry)
        labels = build.build_labels()
        Gauge("otcp_build_info", "The running OTCP: package version, agent channel protocol and Python (always 1)",
              list(labels), registry=self.registry).labels(**labels).set(1)
        self.enforcement = Gauge("otcp_agent_enforcement", "1 for the mode the agent enforces with: bpf (the "
                                 "sock_ops program alongside the routes) or routes (route attributes alone: BPF "
                                 "turned off or unavailable, the reason in the log and in otcp-agent show)",
                                 ["mode"], registry=self.registry)
        for status in ("applied", "skipped"):
            self.routes.labels(status)
        for reason in REJECT_REASONS:
            self.rejects.labels(reason)

    def enforcing(self, mode: Mode) -> None:
        """Record the enforcement mode: 1 for ``mode``, 0 for the other."""
        for each in MODES:
            self.enforcement.labels(each).set(1 if each == mode else 0)

    def follow_lease(self, lease: Callable[[], Lease | None]) -> None:
        """Read the lease gauges from lease() (the running agent's) at every scrape."""
        self.lease_expired.set_function(lambda: lease_expired(lease()))
        self.lease_remaining.set_function(lambda: lease_remaining_s(lease(), time.monotonic()))

    def serve(self, host: str, port: int, max_scrapes: int = MAX_SCRAPES) -> "MetricsServer":
        """Answer /metrics on host:port in a background thread, at most max_scrapes at once,
        each within SCRAPE_DEADLINE_S; returns the server (its address: `server_address`)."""
        server = MetricsServer((host, port), self.registry, max_scrapes)
        threading.Thread(target=server.serve_forever, name="otcp-agent-metrics", daemon=True).start()
        return server

    def applied(self, generation: int, results: Sequence[RouteResult], seconds: float) -> None:
        """Record a set that was applied."""
        self.applied_generation.set(generation)
        skipped = sum(1 for result in results if result.status == "skipped")
        self.routes.labels("applied").set(len(results) - skipped)
        self.routes.labels("skipped").set(skipped)
        self.apply_seconds.observe(seconds)

    def rejected(self, reason: str) -> None:
        """Record a set that was refused."""
        self.rejects.labels(reason).inc()


def lease_expired(lease: Lease | None) -> float:
    """otcp_agent_lease_expired of a lease: 1 once the host holds the safe state."""
    return 1.0 if lease is not None and lease.lapsed else 0.0


def lease_remaining_s(lease: Lease | None, now: float) -> float:
    """otcp_agent_lease_remaining_seconds of a lease at now (monotonic): NaN without one."""
    return math.nan if lease is None else lease.remaining_s(now)


class MetricsServer(ThreadingHTTPServer):
    """The agent's /metrics server: a thread per scrape, at most `max_scrapes` at once (a
    connection beyond them is closed unanswered and counted in `refused`), each cut off when its
    client is silent for SCRAPE_TIMEOUT_S or the scrape takes SCRAPE_DEADLINE_S."""

    daemon_threads = True
    request_queue_size = 64  # waiting connections cost the kernel, not the agent's descriptors

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, max_scrapes: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.slots = threading.BoundedSemaphore(max_scrapes)
        self.refused = 0
        handler = type("ScrapeHandler", (_ScrapeHandler,), {"registry": registry})
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on its own thread if a slot is free, else close it."""
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one scrape, then give its slot back."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _ScrapeHandler(MetricsHandler):
    """prometheus_client's handler with a timeout on every read and a deadline on the whole scrape."""

    timeout = SCRAPE_TIMEOUT_S

    def setup(self) -> None:
        """Start the scrape's deadline."""
        super().setup()
        self._deadline = threading.Timer(SCRAPE_DEADLINE_S, self._cut_off)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self) -> None:
        """The scrape ended in time: its deadline is off."""
        self._deadline.cancel()
        super().finish()

    def _cut_off(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""
