"""The OTCP side of an experiment: the real controller and the real agents.

- ``Controller(...)`` is what ``otcp.experiments.emulation.emulate`` needs to
  start ``otcp-controller run --config FILE`` (through
  ``otcp.experiments.controller_process.ControllerProcess``, stopped by PID): OpenFlow on
  127.0.0.1, the agent channel on the management network's root address
  with a secret made for this run, the inventory the topology wrote, and
  its own SQLite database. The controller forwards traffic for every
  scheme, and is restarted with another formula set between OTCP schemes.
- ``Agents`` starts ``otcp-agent run`` in every host, waits until every host
  has its per-destination routes, and afterwards stops the agents and
  removes their routes with ``otcp-agent revert``.

The runner never computes or copies OTCP's parameters: it reads back what
the kernel of each host holds (``ip route show``).
"""

import contextlib
import importlib.util
import ipaddress
import json
import math
import os
import secrets
import shutil
import signal
import sqlite3
import sys
import tempfile
import time

from otcp.agent import rtt
from otcp.agent.enforcement import status_path
from otcp.agent.routes import OTCP_PROTO
from otcp.experiments.controller_process import ControllerProcess, free_port
from otcp.experiments.schemes import Applied
from otcp.service.admin import read_status


def agent_unavailable_reason():
    """Why the agent cannot run yet, or None."""
    if importlib.util.find_spec("otcp.agent.cli") is None:
        return "the host agent (otcp-agent, `otcp.agent.cli`) is not installed in this checkout"
    if _agent_command() is None:
        return "the otcp-agent console script is not installed next to this Python"
    return None


def _agent_command():
    path = os.path.join(os.path.dirname(sys.executable), "otcp-agent")
    return path if os.path.exists(path) else shutil.which("otcp-agent")


def write_secret(path):
    """A fresh random shared secret for the agent channel, readable by root only."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    return path


class Controller:
    """The OTCP controller of one network, for emulate(controller=...).

    Calling it with the root namespace's management address (None without a
    management network) starts ``otcp-controller run`` and returns a context
    manager whose value is the OpenFlow port. with_agents opens the agent
    channel on the management address. ``use`` restarts it on the same
    ports and database with another formula set or pacing (the OTCP schemes
    differ in them); the switches reconnect and the hosts it knew are
    restored from its database.
    """

    def __init__(self, workdir, inventory_path, with_agents, intervals=None, parameters=None):
        self.workdir = workdir
        self.parameters = {"formulas": "published", **(parameters or {})}
        self.inventory_path = inventory_path
        self.with_agents = with_agents
        self.intervals = intervals
        self.process = None

    @contextlib.contextmanager
    def __call__(self, management_ip):
        """Start the controller (see the class docstring); the value is its OpenFlow port."""
        settings = {"inventory": os.path.abspath(self.inventory_path), "log_level": "info",
                    "parameters": dict(self.parameters)}
        if self.intervals:
            settings["intervals"] = dict(self.intervals)
        if self.with_agents:
            if management_ip is None:
                raise ValueError("the agent channel needs the management network")
            secret = write_secret(os.path.join(self.workdir, "agent-secret"))
            settings["agents"] = {"host": management_ip, "port": free_port(), "secret_file": secret}
        # The admin socket's path must fit a unix socket (107 bytes): a short
        # directory of its own, not the output directory, which may be deep.
        admin_dir = tempfile.mkdtemp(prefix="otcp-admin-")
        settings["admin"] = {"socket": os.path.join(admin_dir, "controller.sock")}
        self.process = ControllerProcess(self.workdir, **settings)
        try:
            self.process.start()
            yield self.process.openflow_port
        finally:
            self.process.stop()
            shutil.rmtree(admin_dir, ignore_errors=True)

    def status(self):
        """The controller's live view, read from its admin socket."""
        return read_status(self.process.settings["admin"]["socket"])

    def generation(self):
        """The newest generation the controller made."""
        return self.status()["generation"]

    def flows_applied(self, pairs, since, active=True, measured=()):
        """Whether the agents hold parameters computed with every (source host,
        destination host) of pairs active (with none of them, if not active):
        what a run waits for after its warm-up, so that its measured rounds
        see the parameters for their flows (the controller counts flows from
        the switches' statistics, polled and re-planned every few seconds).
        That generation must also have planned every pair of measured with
        the round trip its hosts measured (rtt_source "host"), as a long-running
        deployment does, not with the per-link defaults its agents start from.

        The generation that counts is the newest from `since` on whose flows
        match and that every agent has acknowledged, or has nothing newer
        published for its host (with none active, the newest of all must match;
        `since` itself counts: flows of the same pairs left by the scheme before
        give the same parameters, and then no new generation comes). Not simply
        the newest that matches: while the hosts' round trips to all their peers
        come in (64 senders: a generation every 2 s for a minute), some agent
        is always one behind it.
        """
        status = self.status()
        with contextlib.closing(sqlite3.connect(f"file:{self.process.database}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT generation, src, dst FROM generation_flows WHERE generation >= ?",
                              (since,)).fetchall()
            counted = {number: set() for number in range(since, status["generation"] + 1)}
            for number, src, dst in rows:
                counted.setdefault(number, set()).add((src, dst))
            wanted = set(pairs)
            matching = [number for number, found in counted.items()
                        if (wanted <= found if active else not wanted & found)]
            agents = status["agents"]
            if not matching or not agents or (not active and max(matching) != status["generation"]):
                return False
            held = max((number for number in matching
                        if all(agent["lag_generations"] == 0 or (agent["acknowledged_generation"] or 0) >= number
                               for agent in agents)), default=None)
            if held is None:
                return False
            if measured:
                planned = {(src, dst) for src, dst in db.execute(
                    "SELECT src, dst FROM parameters WHERE generation = ? AND rtt_source = 'host'", (held,))}
                return set(measured) <= planned
        return True

    def use(self, formulas, pacing=False):
        """Restart with formulas ('published' or 'lossless') and pacing on or
        off, unless it already runs so; True if it restarted."""
        parameters = self.process.settings["parameters"]
        if (parameters["formulas"], parameters.get("pacing", False)) == (formulas, pacing):
            return False
        self.process.stop()
        parameters.update(formulas=formulas, pacing=pacing)
        self.process.start()
        return True


def first_probes_s(hosts):
    """Seconds until agents started together on hosts hosts have probed each of their peers
    once, at their default interval and probes per round, and reported it."""
    return (math.ceil((hosts - 1) / rtt.PROBES_PER_ROUND) + 1) * rtt.INTERVAL_S


def agent_endpoint(workdir_config):
    """(host, port, secret_file) of the agent channel from a controller.yaml."""
    import yaml

    with open(workdir_config, encoding="utf-8") as handle:
        agents = yaml.safe_load(handle)["agents"]
    return agents["host"], agents["port"], agents["secret_file"]


#: How long a stopped agent's last probe may still be on the wire: its SYN and the RST that
#: answers it cross the emulation in milliseconds, and the agent gives a probe 0.2 s.
PROBE_SETTLE_S = 0.3


class Agents(Applied):
    """otcp-agent in every host, for one scheme's run."""

    def __init__(self, emulation, hosts, controller_config, workdir, timeout=60.0, enforce="routes"):
        self.emulation = emulation
        self.enforce = enforce
        self.hosts = list(hosts)
        self.host_address, self.port, self.secret_file = agent_endpoint(controller_config)
        self.workdir = workdir
        self.timeout = timeout
        self.processes = {}
        self.command = _agent_command()
        self.started = None

    def apply(self):
        """Start the agents (see the class docstring)."""
        os.makedirs(self.workdir, exist_ok=True)
        for host in self.hosts:
            log = open(os.path.join(self.workdir, f"agent-{host}.log"), "ab")
            self.processes[host] = self.emulation.start(host, [
                self.command, "run", "--controller", f"{self.host_address}:{self.port}",
                "--secret-file", self.secret_file, "--state", self.state_path(host), "--enforce", self.enforce,
            ], stdout=log, stderr=log)
            log.close()

    def first_probes_done_at(self):
        """When (time.monotonic) every agent has probed each of its peers once, counted from
        wait_for_routes (the agents take seconds to start on a loaded host). A probe of a peer
        the host never reached is a new pair at its switch, which punts it to the controller
        (both ways): all the agents' first probes at once slowed the rounds of 32 senders by up
        to half for a second and a half. A long-running agent no longer pays that."""
        return self.started + first_probes_s(len(self.hosts))

    def wait_for_routes(self, data_ips):
        """Wait until every host holds an agent route covering every other host
        (a host route, or a prefix the controller aggregated destinations into)."""
        deadline = time.monotonic() + self.timeout
        missing = {}
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
    def paused(self, settle_s=PROBE_SETTLE_S):
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

    def state_path(self, host):
        """The agent's state database in host."""
        return os.path.join(self.workdir, f"agent-{host}.db")

    def check_enforcement(self):
        """Raise if an agent enforces less than asked: an agent that cannot
        load BPF falls back to routes and says why, and a scheme that needs
        BPF must not run silently without it."""
        for host in self.hosts:
            with open(status_path(self.state_path(host)), encoding="utf-8") as handle:
                status = json.load(handle)
            if status["mode"] != self.enforce:
                raise RuntimeError(f"otcp-agent in {host} enforces by {status['mode']}, not {self.enforce}: "
                                   f"{status['reason']}")

    def revert(self):
        """Stop every agent (by PID), then remove the routes it created."""
        for process in self.processes.values():
            self.emulation.stop(process)
        for host in self.processes:
            self.emulation.run(host, [self.command, "revert", "--state", self.state_path(host)], check=False)
        self.processes.clear()


def agent_destinations(emulation, host):
    """The destination prefixes of host's agent routes (proto 79), read from the kernel."""
    argv = ["ip", "-j", "route", "show", "proto", str(OTCP_PROTO)]
    routes = json.loads(emulation.run(host, argv) or "[]")
    return {ipaddress.ip_network(route["dst"], strict=False) for route in routes}
