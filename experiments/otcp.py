"""The OTCP side of an experiment: the real controller and the real agents.

- ``controller_starter(...)`` returns what ``experiments.emulation.emulate``
  needs to start ``otcp-controller run --config FILE`` (through
  ``ryu_app.process.ControllerProcess``, stopped by PID): OpenFlow on
  127.0.0.1, the agent channel on the management network's root address
  with a secret made for this run, the inventory the topology wrote, and
  its own SQLite database. The controller forwards traffic for every
  scheme.
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
import os
import secrets
import shutil
import sys
import tempfile
import time

from agent.routes import OTCP_PROTO
from ryu_app.process import ControllerProcess, free_port


def agent_unavailable_reason():
    """Why the agent cannot run yet, or None."""
    if importlib.util.find_spec("agent.cli") is None:
        return "the host agent (otcp-agent, agent/cli.py) is not installed in this checkout"
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


def controller_starter(workdir, inventory_path, with_agents, intervals=None):
    """A callable for emulate(controller=...): starts the OTCP controller.

    with_agents: open the agent channel on the management address (needs
    emulate(management=True)).
    """

    @contextlib.contextmanager
    def start(management_ip):
        settings = {"inventory": os.path.abspath(inventory_path), "log_level": "info"}
        if intervals:
            settings["intervals"] = dict(intervals)
        if with_agents:
            if management_ip is None:
                raise ValueError("the agent channel needs the management network")
            secret = write_secret(os.path.join(workdir, "agent-secret"))
            settings["agents"] = {"host": management_ip, "port": free_port(), "secret_file": secret}
        # The admin socket's path must fit a unix socket (107 bytes): a short
        # directory of its own, not the output directory, which may be deep.
        admin_dir = tempfile.mkdtemp(prefix="otcp-admin-")
        settings["admin"] = {"socket": os.path.join(admin_dir, "controller.sock")}
        process = ControllerProcess(workdir, **settings)
        try:
            process.start()
            yield process.openflow_port
        finally:
            process.stop()
            shutil.rmtree(admin_dir, ignore_errors=True)

    return start


def agent_endpoint(workdir_config):
    """(host, port, secret_file) of the agent channel from a controller.yaml."""
    import yaml

    with open(workdir_config, encoding="utf-8") as handle:
        agents = yaml.safe_load(handle)["agents"]
    return agents["host"], agents["port"], agents["secret_file"]


class Agents:
    """otcp-agent in every host, for one scheme's run."""

    def __init__(self, emulation, hosts, controller_config, workdir, timeout=60.0):
        self.emulation = emulation
        self.hosts = list(hosts)
        self.host_address, self.port, self.secret_file = agent_endpoint(controller_config)
        self.workdir = workdir
        self.timeout = timeout
        self.processes = {}
        self.command = _agent_command()

    def start(self):
        """Start the agents (see the class docstring)."""
        os.makedirs(self.workdir, exist_ok=True)
        for host in self.hosts:
            log = open(os.path.join(self.workdir, f"agent-{host}.log"), "ab")
            self.processes[host] = self.emulation.start(host, [
                self.command, "run", "--controller", f"{self.host_address}:{self.port}",
                "--secret-file", self.secret_file, "--state", os.path.join(self.workdir, f"agent-{host}.db"),
                # The otcp scheme is the published reproduction: route attributes only (docs/enforcement.md).
                "--enforce", "routes",
            ], stdout=log, stderr=log)
            log.close()

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
                return
            time.sleep(0.5)
        sample = ", ".join(f"{h} lacks {v[0]}" for h, v in list(missing.items())[:3])
        raise TimeoutError(f"agents did not install routes within {self.timeout:.0f} s ({sample})")

    def stop(self):
        """Stop every agent (by PID), then remove the routes it created."""
        for process in self.processes.values():
            self.emulation.stop(process)
        for host in self.processes:
            self.emulation.run(host, [self.command, "revert", "--state",
                                      os.path.join(self.workdir, f"agent-{host}.db")], check=False)
        self.processes.clear()

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()


def agent_destinations(emulation, host):
    """The destination prefixes of host's agent routes (proto 79), read from the kernel."""
    argv = ["ip", "-j", "route", "show", "proto", str(OTCP_PROTO)]
    routes = json.loads(emulation.run(host, argv) or "[]")
    return {ipaddress.ip_network(route["dst"], strict=False) for route in routes}
