"""The real OTCP agents as an experiment runs them: ``otcp-agent run`` in every host.

``Agents`` (a context manager) starts the agents, waits until every host has
its per-destination routes (``wait_for_routes``), stops them while a run's
counters are read (``paused``), and afterwards stops them and removes their
routes with ``otcp-agent revert``. The runner never computes or copies
OTCP's parameters: it reads back what the kernel of each host holds
(``ip route show``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from otcp.agent import rtt
from otcp.agent.enforcement import status_path
from otcp.agent.routes import OTCP_PROTO
from otcp.wire import validation

if TYPE_CHECKING:
    from otcp.experiments.runner.emulation import Emulation


def agent_unavailable_reason() -> str | None:
    """Why the agent cannot run yet, or None."""
    if importlib.util.find_spec("otcp.agent.cli") is None:
        return "the host agent (otcp-agent, `otcp.agent.cli`) is not installed in this checkout"
    if _agent_command() is None:
        return "the otcp-agent console script is not installed next to this Python"
    return None


def _agent_command() -> str | None:
    path = os.path.join(os.path.dirname(sys.executable), "otcp-agent")
    return path if os.path.exists(path) else shutil.which("otcp-agent")


def first_probes_s(hosts: int) -> float:
    """Seconds until agents started together on hosts hosts have probed each of their peers
    once, at their default interval and probes per round, and reported it."""
    return (math.ceil((hosts - 1) / rtt.PROBES_PER_ROUND) + 1) * rtt.INTERVAL_S


def agent_endpoint(controller_config: str) -> tuple[str, int, str]:
    """(host, port, secret_file) of the agent channel from a controller.yaml."""
    agents = validation.load_yaml_file(controller_config)["agents"]
    return agents["host"], agents["port"], agents["secret_file"]


#: How long a stopped agent's last probe may still be on the wire: its SYN and the RST that
#: answers it cross the emulation in milliseconds, and the agent gives a probe 0.2 s.
PROBE_SETTLE_S = 0.3


class Agents:
    """otcp-agent in every host, for one scheme's run: started on entry (stopped again if
    that fails half-way), stopped and their routes removed on exit. controller_config: the
    controller's configuration file, or those of every instance of it (sharing one secret):
    each agent connects to all of them."""

    def __init__(self, emulation: Emulation, hosts: Iterable[str], controller_config: str | Sequence[str],
                 workdir: str, timeout: float = 60.0, enforce: str = "routes") -> None:
        self.emulation = emulation
        self.enforce = enforce
        self.hosts = list(hosts)
        configs = [controller_config] if isinstance(controller_config, str) else list(controller_config)
        endpoints = [agent_endpoint(config) for config in configs]
        if len({secret for _, _, secret in endpoints}) != 1:
            raise ValueError("the controller instances do not share one agent secret file")
        self.controllers = ",".join(f"{host}:{port}" for host, port, _ in endpoints)
        self.secret_file = endpoints[0][2]
        self.workdir = workdir
        self.timeout = timeout
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        command = _agent_command()
        if command is None:
            raise RuntimeError(agent_unavailable_reason() or "otcp-agent is not installed")
        self.command = command
        self.started: float | None = None

    def apply(self) -> None:
        """Start the agents (see the class docstring)."""
        os.makedirs(self.workdir, exist_ok=True)
        for host in self.hosts:
            log = open(os.path.join(self.workdir, f"agent-{host}.log"), "ab")
            self.processes[host] = self.emulation.start(host, [
                self.command, "run", "--controller", self.controllers,
                "--secret-file", self.secret_file, "--state", self.state_path(host), "--enforce", self.enforce,
            ], stdout=log, stderr=log)
            log.close()

    def first_probes_done_at(self) -> float:
        """When (time.monotonic) every agent has probed each of its peers once, counted from
        wait_for_routes (the agents take seconds to start on a loaded host). A probe of a peer
        the host never reached is a new pair at its switch, which punts it to the controller
        (both ways): all the agents' first probes at once slowed the rounds of 32 senders by up
        to half for a second and a half. Later probes of the same peers do not pay it."""
        if self.started is None:
            raise RuntimeError("wait_for_routes() first")
        return self.started + first_probes_s(len(self.hosts))

    def wait_for_routes(self, data_ips: dict[str, str]) -> None:
        """Wait until every host holds an agent route covering every other host
        (a host route, or a prefix the controller aggregated destinations into)."""
        deadline = time.monotonic() + self.timeout
        missing: dict[str, list[str]] = {}
        while time.monotonic() < deadline:
            missing = {}
            for host in self.hosts:
                process = self.processes[host]
                if process.poll() is not None:
                    raise RuntimeError(f"otcp-agent in {host} exited with status {process.returncode}; "
                                       f"log: {os.path.join(self.workdir, f'agent-{host}.log')}")
                have = agent_destinations(self.emulation, host)
                uncovered = sorted(ip for name, ip in data_ips.items()
                                   if name != host and not any(ipaddress.ip_address(ip) in net for net in have))
                if uncovered:
                    missing[host] = uncovered
            if not missing:
                self.check_enforcement()
                self.started = time.monotonic()  # every agent runs: its first round trips are on their way
                return
            time.sleep(0.5)
        sample = ", ".join(f"{h} lacks {v[0]}" for h, v in list(missing.items())[:3])
        raise TimeoutError(f"agents did not install routes within {self.timeout:.0f} s ({sample})")

    @contextlib.contextmanager
    def paused(self, settle_s: float = PROBE_SETTLE_S) -> Iterator[None]:
        """The agents stopped (SIGSTOP) while the context lasts, from settle_s after their last
        probe could have gone out: a loss account read meanwhile sees the same packets at both
        ends. Their round-trip probes (a SYN, and the RST the destination's kernel answers)
        would otherwise cross the hosts' counters while they are read one host after another:
        counted sent at one and not yet delivered at the other, or the reverse, they read as
        packets lost or copied (docs/experiments.md, "The agents are stopped while the counters
        are read")."""
        running = [process for process in self.processes.values() if process.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGSTOP)
        for process in running:
            # SIGSTOP lands when the process next runs: wait for it (or its exit), reaping nothing.
            with contextlib.suppress(ChildProcessError):
                os.waitid(os.P_PID, process.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
        try:
            time.sleep(settle_s)
            yield
        finally:
            for process in running:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGCONT)

    def admit(self, host: str) -> int | None:
        """How many senders host's applications may ask at once, as its agent shows it
        (``otcp-agent show --json``): the admit of the controller's set under fan-in admission,
        None when the set gives none."""
        shown = json.loads(self.emulation.run(host, [self.command, "show", "--json", "--state",
                                                     self.state_path(host)]))
        return shown["admit"]

    def state_path(self, host: str) -> str:
        """The agent's state database in host."""
        return os.path.join(self.workdir, f"agent-{host}.db")

    def check_enforcement(self) -> None:
        """Raise if an agent enforces less than asked: an agent that cannot
        load BPF falls back to routes and says why, and a scheme that needs
        BPF must not run silently without it."""
        for host in self.hosts:
            with open(status_path(self.state_path(host)), encoding="utf-8") as handle:
                status = json.load(handle)
            if status["mode"] != self.enforce:
                raise RuntimeError(f"otcp-agent in {host} enforces by {status['mode']}, not {self.enforce}: "
                                   f"{status['reason']}")

    def __enter__(self) -> Agents:
        try:
            self.apply()
        except BaseException:
            self.revert()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.revert()

    def revert(self) -> None:
        """Stop every agent (by PID), then remove the routes it created."""
        for process in self.processes.values():
            self.emulation.stop(process)
        for host in self.processes:
            self.emulation.run(host, [self.command, "revert", "--state", self.state_path(host)], check=False)
        self.processes.clear()


def agent_destinations(emulation: Emulation, host: str) -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The destination prefixes of host's agent routes (proto 79), read from the kernel."""
    argv = ["ip", "-j", "route", "show", "proto", str(OTCP_PROTO)]
    routes = json.loads(emulation.run(host, argv) or "[]")
    return {ipaddress.ip_network(route["dst"], strict=False) for route in routes}
