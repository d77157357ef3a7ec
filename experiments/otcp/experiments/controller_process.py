"""Run `otcp-controller run` as a child process: for experiments and tests.

ControllerProcess writes a configuration, starts the controller, waits until
switches can connect, and stops it by PID (never by name), so it only ever
stops the controller it started.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import yaml


def free_port():
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate, timeout, interval=0.2, what="condition"):
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

    def __init__(self, workdir, **settings):
        self.workdir = os.path.abspath(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        settings.setdefault("openflow", {})
        settings["openflow"].setdefault("host", "127.0.0.1")
        settings["openflow"].setdefault("port", free_port())
        settings.setdefault("database", os.path.join(self.workdir, "controller.db"))
        self.settings = settings
        self.config_path = os.path.join(self.workdir, "controller.yaml")
        self.log_path = os.path.join(self.workdir, "controller.log")
        self.process = None

    @property
    def openflow_port(self):
        """The port switches connect to."""
        return self.settings["openflow"]["port"]

    @property
    def database(self):
        """The controller's SQLite file."""
        return self.settings["database"]

    def start(self, timeout=30):
        """Write the configuration, start the controller, wait until it listens."""
        with open(self.config_path, "w", encoding="utf-8") as handle:
            yaml.safe_dump(self.settings, handle)
        command = [sys.executable, "-m", "otcp.service.cli", "run", "--config", self.config_path]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        wait_for(self._listening, timeout, what=f"the controller on port {self.openflow_port} (log: {self.log_path})")
        return self

    def _listening(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"controller exited with status {self.process.returncode}; log: {self.log_path}")
        with socket.socket() as probe:
            probe.settimeout(0.5)
            return probe.connect_ex((self.settings["openflow"]["host"], self.openflow_port)) == 0

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL, the process this object started."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log(self):
        """The controller's log so far."""
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
