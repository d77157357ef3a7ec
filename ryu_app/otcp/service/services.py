"""What the controller serves besides OpenFlow: the agent channel, the admin
socket and the Prometheus endpoint, started from the configuration
(docs/operations.md). The app calls `start_services` once, at start."""

import time
from dataclasses import dataclass, field
from typing import Any

from otcp.controller.config import ControllerConfig
from otcp.controller.core import ControllerCore
from otcp.controller.store import Store
from otcp.service import metrics
from otcp.service.admin import AdminServer
from otcp.service.agent_server import AgentServer, read_secret, server_tls
from otcp.service.live import LiveView


@dataclass
class Services:
    """The running side services: the agent server (None when the channel is off) and their green threads."""

    agent_server: AgentServer | None = None
    admin: AdminServer | None = None
    threads: list = field(default_factory=list)

    def stop(self) -> None:
        """Disconnect the agents and stop listening for them; remove the admin socket."""
        if self.agent_server is not None:
            self.agent_server.stop()
        if self.admin is not None:
            self.admin.stop()


def start_services(config: ControllerConfig, core: ControllerCore, store: Store, live: LiveView, logger: Any,
                   on_agent: Any) -> Services:
    """Start the agent channel (if a secret is configured), the admin socket and the metrics (if configured)."""
    services = Services()
    agents = config.agents
    if agents.secret_file is None:
        logger.info("agent channel off: no agents.secret_file configured")
    else:
        tls = server_tls(agents.tls.cert_file, agents.tls.key_file) if agents.tls is not None else None
        services.agent_server = AgentServer(
            agents.host, agents.port, read_secret(agents.secret_file), core.publications,
            on_ack=store.save_ack, on_agent=on_agent, logger=logger, tls=tls,
            on_rtt=core.rtt_report, on_connections=core.connection_report, lease_s=agents.lease_s,
            on_held=core.agent_holds,
            authority=lambda host_ip: core.agent_epoch(host_ip, time.time()))
        services.agent_server.start()
        live.agent_server = services.agent_server
    services.admin = AdminServer(config.admin.socket, live.status, logger)
    services.threads.append(services.admin.start())
    if config.metrics is not None:
        address = config.metrics.host, config.metrics.port
        services.threads.append(metrics.serve(*address, metrics.registry_for(live, config.database)))
        logger.info("Prometheus metrics at http://%s:%d/metrics", *address)
    return services
