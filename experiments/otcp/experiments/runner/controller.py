"""The real OTCP controller as an experiment runs it.

- ``ControllerProcess`` runs ``otcp-controller run`` as a child process (for
  experiments and tests): it writes a configuration, starts the controller,
  waits until switches can connect, and stops it by PID (never by name), so
  it only ever stops the controller it started.
- ``ControllerInstances`` starts several instances of one fabric's controller
  (ranks 0..n-1 of its ``cluster`` section), for emulate to connect every
  switch to each of them.
- ``Controller`` is what ``otcp.experiments.runner.emulation.emulate`` needs
  to start one for a network: OpenFlow on 127.0.0.1, the agent channel on
  the management network's root address with a secret made for this run,
  the inventory the topology wrote, and its own SQLite database. It forwards
  traffic for every scheme, is restarted with another formula set between
  OTCP schemes, and says (``flows_applied``) when the agents hold parameters
  planned for the flows a run makes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import yaml

from otcp.service.admin import AdminError, read_status

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate: Callable[[], T], timeout: float, interval: float = 0.2, what: str = "condition") -> T:
    """Poll predicate until it returns something true; raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class ControllerProcess:
    """One OTCP controller in its own working directory.

    settings are merged into the configuration file (see otcp.controller.config);
    openflow.port defaults to a free port. The log goes to workdir/controller.log.
    """

    def __init__(self, workdir: str, **settings: Any) -> None:
        self.workdir = os.path.abspath(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        settings.setdefault("openflow", {})
        settings["openflow"].setdefault("host", "127.0.0.1")
        settings["openflow"].setdefault("port", free_port())
        settings.setdefault("database", os.path.join(self.workdir, "controller.db"))
        self.settings = settings
        self.config_path = os.path.join(self.workdir, "controller.yaml")
        self.log_path = os.path.join(self.workdir, "controller.log")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def openflow_port(self) -> int:
        """The port switches connect to."""
        return self.settings["openflow"]["port"]

    @property
    def database(self) -> str:
        """The controller's SQLite file."""
        return self.settings["database"]

    def start(self, timeout: float = 30) -> ControllerProcess:
        """Write the configuration, start the controller, wait until it listens."""
        with open(self.config_path, "w", encoding="utf-8") as handle:
            yaml.safe_dump(self.settings, handle)
        command = [sys.executable, "-m", "otcp.service.cli", "run", "--config", self.config_path]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        wait_for(self._listening, timeout, what=f"the controller on port {self.openflow_port} (log: {self.log_path})")
        return self

    def _listening(self) -> bool:
        assert self.process is not None, "start() first"
        if self.process.poll() is not None:
            raise RuntimeError(f"controller exited with status {self.process.returncode}; log: {self.log_path}")
        with socket.socket() as probe:
            probe.settimeout(0.5)
            return probe.connect_ex((self.settings["openflow"]["host"], self.openflow_port)) == 0

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL, the process this object started."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        """SIGKILL the process this object started, as a crash would end it, and reap it."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait()

    def log(self) -> str:
        """The controller's log so far."""
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def __enter__(self) -> ControllerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_secret(path: str) -> str:
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

    def __init__(self, workdir: str, inventory_path: str, with_agents: bool,
                 intervals: dict[str, float] | None = None, parameters: dict[str, Any] | None = None,
                 lease_s: float | None = None) -> None:
        self.workdir = workdir
        self.lease_s = lease_s
        self.parameters: dict[str, Any] = {"formulas": "published", **(parameters or {})}
        self.inventory_path = inventory_path
        self.with_agents = with_agents
        self.intervals = intervals
        self._process: ControllerProcess | None = None

    @property
    def config_path(self) -> str:
        """The controller.yaml it runs with (the agents read the channel's endpoint from it)."""
        return os.path.join(self.workdir, "controller.yaml")

    @property
    def process(self) -> ControllerProcess:
        """The running controller (while the network it was given to runs)."""
        if self._process is None:
            raise RuntimeError("the controller has not been started (emulate starts it)")
        return self._process

    @contextlib.contextmanager
    def __call__(self, management_ip: str | None) -> Iterator[int]:
        """Start the controller (see the class docstring); the value is its OpenFlow port."""
        settings: dict[str, Any] = {"inventory": os.path.abspath(self.inventory_path), "log_level": "info",
                                    "parameters": dict(self.parameters)}
        if self.intervals:
            settings["intervals"] = dict(self.intervals)
        if self.with_agents:
            if management_ip is None:
                raise ValueError("the agent channel needs the management network")
            secret = write_secret(os.path.join(self.workdir, "agent-secret"))
            settings["agents"] = {"host": management_ip, "port": free_port(), "secret_file": secret}
            if self.lease_s is not None:
                settings["agents"]["lease_s"] = self.lease_s
        # The admin socket's path must fit a unix socket (107 bytes): a short
        # directory of its own, not the output directory, which may be deep.
        admin_dir = tempfile.mkdtemp(prefix="otcp-admin-")
        settings["admin"] = {"socket": os.path.join(admin_dir, "controller.sock")}
        self._process = ControllerProcess(self.workdir, **settings)
        try:
            self._process.start()
            yield self._process.openflow_port
        finally:
            self._process.stop()
            shutil.rmtree(admin_dir, ignore_errors=True)

    def status(self) -> dict[str, Any]:
        """The controller's live view, read from its admin socket."""
        return read_status(self.process.settings["admin"]["socket"])

    def generation(self) -> int:
        """The newest generation the controller made."""
        return self.status()["generation"]

    def flows_applied(self, pairs: Iterable[tuple[str, str]], since: int, active: bool = True,
                      measured: Iterable[tuple[str, str]] = (), connections: int = 1) -> bool:
        """Whether the agents hold parameters computed with every (source host,
        destination host) of pairs active, each as at least connections flows (its
        agent's count of sending connections), or with none of them if not active:
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
        wanted, measured = set(pairs), set(measured)
        with contextlib.closing(sqlite3.connect(f"file:{self.process.database}?mode=ro", uri=True)) as db:
            counted: dict[int, dict[tuple[str, str], int]] = {number: {}
                                                              for number in range(since, status["generation"] + 1)}
            for number, src, dst, count in db.execute("SELECT generation, src, dst, count FROM generation_flows "
                                                      "WHERE generation >= ?", (since,)):
                counted.setdefault(number, {})[(src, dst)] = count
            matching = [number for number, found in counted.items()
                        if (all(found.get(pair, 0) >= connections for pair in wanted) if active
                            else not wanted & found.keys())]
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
                return measured <= planned
        return True

    def use(self, formulas: str, pacing: bool = False, admission: bool = False) -> bool:
        """Restart with formulas ('published' or 'lossless'), pacing and fan-in
        admission on or off, unless it already runs so; True if it restarted."""
        parameters = self.process.settings["parameters"]
        wanted = (formulas, pacing, admission)
        if (parameters["formulas"], parameters.get("pacing", False), parameters.get("fan_in_admission", False)) \
                == wanted:
            return False
        self.process.stop()
        parameters.update(formulas=formulas, pacing=pacing, fan_in_admission=admission)
        self.process.start()
        return True


class ControllerInstances:
    """count instances of one fabric's controller for emulate(controller=...): ranks 0..count-1 of
    `cluster` (heartbeat_s, takeover_s), each in its own directory under workdir with its own
    database, OpenFlow port, agent port (on the management address) and admin socket, one agent
    secret and the topology's inventory. Calling it starts them (rank 0 first) and returns a
    context manager whose value is their OpenFlow ports; they are stopped after the network."""

    def __init__(self, workdir: str, inventory: str, count: int = 2, heartbeat_s: float = 1.0,
                 takeover_s: float = 4.0, intervals: dict[str, float] | None = None) -> None:
        self.workdir = workdir
        self.inventory = inventory
        self.count = count
        self.cluster = {"instances": count, "heartbeat_s": heartbeat_s, "takeover_s": takeover_s}
        self.intervals = intervals
        self.processes: list[ControllerProcess] = []

    @contextlib.contextmanager
    def __call__(self, management_ip: str | None) -> Iterator[list[int]]:
        """Start every instance (see the class docstring); the value is their OpenFlow ports."""
        if management_ip is None:
            raise ValueError("the agent channel needs the management network")
        secret = write_secret(os.path.join(self.workdir, "agent-secret"))
        admin_dir = tempfile.mkdtemp(prefix="otcp-admin-")  # a unix socket's path is short
        for rank in range(self.count):
            settings: dict[str, Any] = {
                "inventory": os.path.abspath(self.inventory), "log_level": "info",
                "agents": {"host": management_ip, "port": free_port(), "secret_file": secret},
                "admin": {"socket": os.path.join(admin_dir, f"c{rank}.sock")},
                "cluster": {**self.cluster, "rank": rank}}
            if self.intervals:
                settings["intervals"] = dict(self.intervals)
            self.processes.append(ControllerProcess(os.path.join(self.workdir, f"controller{rank}"), **settings))
        try:
            for process in self.processes:
                process.start()
            yield [process.openflow_port for process in self.processes]
        finally:
            for process in self.processes:
                process.stop()
            shutil.rmtree(admin_dir, ignore_errors=True)

    def status(self, rank: int) -> dict[str, Any] | None:
        """Instance rank's live view, None while it does not answer."""
        try:
            return read_status(self.processes[rank].settings["admin"]["socket"])
        except AdminError:
            return None

    def config_paths(self) -> list[str]:
        """Every instance's controller.yaml (the agents read the channel's endpoints from them)."""
        return [process.config_path for process in self.processes]
