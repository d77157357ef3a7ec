"""Prometheus metrics of the controller (`metrics: {host, port}` in its configuration).

One custom collector reads everything at scrape time from the `LiveView`
(`otcp.service.live`), the core and the agent server: nothing is counted twice
and the core keeps no bookkeeping for it. Names follow Prometheus
conventions: the ``otcp_controller_`` prefix, base units (seconds, bytes),
``_total`` for counters. The list, with the label choices, is in
docs/operations.md ("Metrics").

Label cardinality: links and agents grow linearly with the fabric and get a
series each; paths grow with the square of the hosts, so their parameters
are exported as quantiles over all paths (a fixed number of series), and
each path's values are in `otcp-controller status --json` on request.
"""

import math
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from os_ken.lib import hub
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from otcp.service.agent_server import REFUSAL_REASONS
from otcp.service.live import LiveView
from otcp.wire import build

#: The quantiles every per-path parameter is summarised at (0 is the minimum, 1 the maximum).
QUANTILES = (0.0, 0.5, 0.9, 0.99, 1.0)
#: Per-path parameters: metric name, help, and the value of one path record in base units (None: not set).
PATH_PARAMETERS: tuple[tuple[str, str, Callable[[dict], float | None]], ...] = (
    ("otcp_controller_path_min_rto_seconds", "Computed minRTO over all paths, before rounding and bounds",
     lambda path: path["min_rto_us"] / 1e6),
    ("otcp_controller_path_rto_min_seconds", "rto_min route attribute over all paths",
     lambda path: path["rto_min_ms"] / 1e3),
    ("otcp_controller_path_initcwnd_segments", "initcwnd route attribute over all paths",
     lambda path: path["initcwnd"]),
    ("otcp_controller_path_cwnd_clamp_segments", "cwnd lock route attribute over the paths that have one",
     lambda path: path["cwnd_clamp"]),
)


def quantile(ordered: list[float], q: float) -> float:
    """The nearest-rank q-quantile of an ascending, non-empty list."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class ControllerCollector(Collector):
    """Every controller metric, read from the live view when Prometheus scrapes."""

    def __init__(self, live: LiveView, database: str, clock: Callable[[], float] = time.time) -> None:
        self.live = live
        self.database = database
        self.clock = clock

    def describe(self) -> list[Metric]:
        """Nothing up front: the registry must not collect at registration."""
        return []

    def collect(self) -> Iterator[Metric]:
        """All families, built from the state of this moment."""
        live, now = self.live, self.clock()
        labels = build.build_labels()
        info = GaugeMetricFamily("otcp_build_info", "The running OTCP: package version, agent channel protocol and "
                                 "Python (always 1)", labels=list(labels))
        info.add_metric(list(labels.values()), 1)
        yield info
        yield _gauge("otcp_controller_generation", "Number of the newest parameter generation", live.core.generation)
        yield from live.generations_made.collect()
        yield _gauge("otcp_controller_generations_last_minute", "Generations made in the last 60 s",
                     live.generations_last_minute(now))
        yield from live.plan_duration.collect()
        last_plan = GaugeMetricFamily("otcp_controller_last_plan_timestamp_seconds",
                                      "When the fabric was last planned (Unix time; absent before the first plan)")
        if live.planned_at is not None:
            last_plan.add_metric([], live.planned_at)
        yield last_plan
        yield _gauge("otcp_controller_switches", "Switches in the topology", len(live.topology.switches))
        yield _gauge("otcp_controller_hosts", "Hosts in the topology", len(live.topology.hosts))
        roles = live.core.roles.summary()
        yield _gauge("otcp_controller_master_switches", "Connected switches this instance is MASTER of",
                     sum(1 for role in roles if role["role"] == "master"))
        yield _gauge("otcp_controller_connected_switches", "Switches connected to this instance", len(roles))
        yield from self._links()
        yield from self._paths()
        yield from self._agents()
        yield _gauge("otcp_controller_sets_too_large", "Hosts whose newest set is over the agent channel's frame "
                     "limit, so not published (they keep their previous set)", len(live.core.publications.too_large))
        yield _gauge("otcp_controller_database_bytes", "Size of the SQLite database with its write-ahead log",
                     sum(os.path.getsize(path) for path in (self.database, self.database + "-wal")
                         if os.path.exists(path)))

    def _links(self) -> Iterator[Metric]:
        delay = GaugeMetricFamily("otcp_controller_link_delay_seconds",
                                  "One-way delay of a directed link, by where it came from "
                                  "(measured, inventory, default)", labels=["src", "dst", "source"])
        samples = GaugeMetricFamily("otcp_controller_link_delay_samples", "Probe samples behind a measured delay",
                                    labels=["src", "dst"])
        capacity = GaugeMetricFamily("otcp_controller_link_capacity_bytes_per_second",
                                     "Capacity of a directed link", labels=["src", "dst"])
        buffer = GaugeMetricFamily("otcp_controller_link_buffer_bytes",
                                   "Egress buffer of a directed link's tail switch (0 for a host)",
                                   labels=["src", "dst"])
        flows = GaugeMetricFamily("otcp_controller_link_active_flows",
                                  "Active flows crossing the link: host pairs, each counted as the connections "
                                  "its source's agent reports sending",
                                  labels=["src", "dst"])
        for link in self.live.links:
            ends = [link.src, link.dst]
            delay.add_metric(ends + [link.delay_source], link.delay_s)
            samples.add_metric(ends, link.samples)
            capacity.add_metric(ends, link.capacity_bytes_per_s)
            buffer.add_metric(ends, link.buffer_bytes)
            flows.add_metric(ends, link.flows)
        yield from (delay, samples, capacity, buffer, flows)

    def _paths(self) -> Iterator[Metric]:
        paths = self.live.paths
        yield _gauge("otcp_controller_paths", "Host pairs with parameters in the newest generation", len(paths))
        for name, documentation, value_of in PATH_PARAMETERS:
            family = GaugeMetricFamily(name, documentation, labels=["quantile"])
            values = sorted(value for path in paths if (value := value_of(path)) is not None)
            if values:
                for q in QUANTILES:
                    family.add_metric([f"{q:g}"], quantile(values, q))
            yield family

    def _agents(self) -> Iterator[Metric]:
        agents = self.live.agents()
        yield _gauge("otcp_controller_agents_connected", "Authenticated agents connected now",
                     sum(1 for agent in agents if agent["connected"]))
        acknowledged = GaugeMetricFamily("otcp_controller_agent_acknowledged_generation",
                                         "Newest generation a host's agent acknowledged", labels=["host"])
        lag = GaugeMetricFamily("otcp_controller_agent_lag_generations",
                                "Generations published for a host and not yet acknowledged by its agent",
                                labels=["host"])
        for agent in agents:
            if agent["host_ip"] is None:
                continue  # authenticated, not yet mapped to a host
            if agent["acknowledged_generation"] is not None:
                acknowledged.add_metric([agent["host_ip"]], agent["acknowledged_generation"])
            if agent["lag_generations"] is not None:
                lag.add_metric([agent["host_ip"]], agent["lag_generations"])
        refused = CounterMetricFamily("otcp_controller_agents_refused", "Agent connections refused or cut off, "
                                      "by reason", labels=["reason"])
        server = self.live.agent_server
        for reason in REFUSAL_REASONS:
            refused.add_metric([reason], 0 if server is None else server.refused[reason])
        yield from (acknowledged, lag, refused)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def registry_for(live: LiveView, database: str) -> CollectorRegistry:
    """A registry holding only the controller's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControllerCollector(live, database))
    return registry


#: Scrapes served at once (more wait in the listen backlog, holding no descriptor), and the longest
#: wait for a scrape's next bytes: slow clients cannot take the controller's descriptors or green threads.
MAX_SCRAPES = 8
SCRAPE_TIMEOUT_S = 5.0


def serve(host: str, port: int, registry: CollectorRegistry) -> Any:
    """Answer /metrics on host:port from a green thread of os-ken's hub; returns the thread."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return serve_on(hub.listen((host, port), family=family), registry)


def serve_on(listener: Any, registry: CollectorRegistry) -> Any:
    """Answer /metrics on a listening socket of the hub, MAX_SCRAPES at a time, each connection
    closed after one scrape or SCRAPE_TIMEOUT_S of silence; returns the thread."""
    import eventlet.wsgi

    return hub.spawn(eventlet.wsgi.server, listener, make_wsgi_app(registry), log_output=False,
                     max_size=MAX_SCRAPES, socket_timeout=SCRAPE_TIMEOUT_S, keepalive=False)
