"""What the running controller knows right now, for `otcp-controller status` and the metrics.

`LiveView` is fed by the glue (`otcp.service.app`) with every plan's `Actions`
and reads the rest from the core and the agent server when asked, so the
core keeps no bookkeeping for it. Everything here runs on os-ken's hub, the
same thread as the core: nothing is locked and nothing is copied ahead of a
request (docs/operations.md, "Live view").
"""

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from prometheus_client import Counter, Histogram

from otcp.controller.core import Actions, ControllerCore
from otcp.controller.reload import Changes
from otcp.controller.store import LinkMeasurement, TopologySnapshot

#: The window of `generations_last_minute`, seconds.
MINUTE_S = 60.0
#: Buckets of the plan duration: a small fabric plans in about a millisecond, a large one in seconds.
PLAN_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LiveView:
    """The controller's latest plan inputs, parameters and agents.

    `paths` starts as the newest stored generation's records, so a restarted
    controller shows parameters before it makes a generation of its own.
    """

    def __init__(self, core: ControllerCore, paths: list[dict] | None = None, paths_generation: int = 0,
                 agent_server: Any = None) -> None:
        self.core = core
        self.agent_server = agent_server  # the AgentServer, once the app started it (None: channel off)
        self.topology = TopologySnapshot()
        self.links: Sequence[LinkMeasurement] = []  # one per directed link of the latest plan, made when read
        # The parameter records of generation `paths_generation`: a list, or the generation's
        # planner.PlanRecords, whose records are made when first read.
        self.paths: Sequence[dict] = paths or []
        self.paths_generation = paths_generation
        self.planned_at: float | None = None
        self.last_plan_seconds: float | None = None
        # Not registered anywhere: otcp.service.metrics collects them with everything else.
        self.plan_duration = Histogram("otcp_controller_plan_duration_seconds",
                                       "Time to plan the fabric and decide a generation", buckets=PLAN_BUCKETS,
                                       registry=None)
        self.generations_made = Counter("otcp_controller_generations", "Generations made by this process",
                                        registry=None)
        self._generation_times: deque[float] = deque()
        self.reload: dict[str, Any] | None = None  # the last reload's outcome, for `otcp-controller reload`
        self.switch_connections: dict[int, int] = {}  # dpid -> OpenFlow connections since start

    def switch_connected(self, dpid: int) -> None:
        """A switch connected (again)."""
        self.switch_connections[dpid] = self.switch_connections.get(dpid, 0) + 1

    def reloaded(self, now: float, changes: Changes | None = None, error: str | None = None) -> None:
        """A reload at now: the keys it applied and those needing a restart, or why it was refused."""
        self.reload = {"at": now, "refused": error, "applied": list(changes.live) if changes else [],
                       "needs_restart": list(changes.restart) if changes else []}

    def planned(self, now: float, actions: Actions, seconds: float) -> None:
        """A plan took `seconds` at `now` and decided `actions`."""
        self.planned_at = now
        self.last_plan_seconds = seconds
        self.plan_duration.observe(seconds)
        if actions.topology is not None:
            self.topology = actions.topology
            self.links = actions.measurements
        if actions.generation is not None:
            self.paths = actions.generation.records
            self.paths_generation = actions.generation.number
            self.generations_made.inc()
            self._generation_times.append(now)

    def generations_last_minute(self, now: float) -> int:
        """How many generations this process made in the minute before now."""
        while self._generation_times and self._generation_times[0] <= now - MINUTE_S:
            self._generation_times.popleft()
        return len(self._generation_times)

    def agents(self) -> list[dict]:
        """Every connected agent and every host that acknowledged a set, with its
        acknowledged generation and its lag: generations published for its host
        and not yet acknowledged."""
        if self.agent_server is None:
            return []
        connected = {agent["host_ip"] or agent["peer"]: agent for agent in self.agent_server.agents()}
        rows = []
        for key in sorted(set(connected) | set(self.agent_server.acked)):
            agent = connected.get(key, {})
            acknowledged = self.agent_server.acked.get(key)
            published = self.core.publications.latest(key)
            lag = None
            if published is not None:
                lag = max(0, published.generation - (acknowledged or 0))
            rows.append({
                "host_ip": agent.get("host_ip", key), "connected": bool(agent), "peer": agent.get("peer"),
                "hostname": agent.get("hostname"), "addresses": agent.get("addresses", []),
                "acknowledged_generation": acknowledged, "published_generation":
                    None if published is None else published.generation, "lag_generations": lag,
            })
        return rows

    def status(self, now: float) -> dict:
        """The whole live view as one JSON-ready document."""
        return {
            "now": now,
            "generation": self.core.generation,
            "generations_last_minute": self.generations_last_minute(now),
            "planned_at": self.planned_at,
            "plan_duration_s": self.last_plan_seconds,
            "switches": [{"dpid": dpid, "name": name, "connections": self.switch_connections.get(dpid, 0)}
                         for dpid, name in sorted(self.topology.switches.items())],
            "hosts": [asdict(host) for host in self.topology.hosts],
            "links": [asdict(link) for link in self.links],
            "paths_generation": self.paths_generation,
            "paths": list(self.paths),
            "agents": self.agents(),
            "sets_too_large": [refused.describe(host_ip)
                               for host_ip, refused in sorted(self.core.publications.too_large.items())],
            "reload": self.reload,
            "cluster": {"rank": self.core.roles.rank, "instances": self.core.roles.instances,
                        "failover_bound_s": self.core.roles.failover_bound_s()},
            "roles": self.core.roles.summary(),
        }
