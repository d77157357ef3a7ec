"""Start os-ken's manager with the OTCP app and its validated configuration.

One controller per database and per address: `claim` takes an exclusive
lock next to the database (naming the holder's pid) and checks that the
OpenFlow and agent ports are free, binding without SO_REUSEPORT, before
os-ken starts. A second `otcp-controller run` with the same configuration
refuses to start and names the first.
"""

import errno
import fcntl
import logging
import logging.handlers
import os
import resource
import signal
import socket
import sys
import warnings
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # imported at run time only after os-ken patched the process
    from otcp.controller.config import ControllerConfig


class InstanceError(RuntimeError):
    """Another controller already uses this database or address."""


def run(config_path: str) -> int:
    """Validate the configuration, claim the instance, then run os-ken until it is stopped."""
    # os-ken needs eventlet; its deprecation banner says nothing to operators.
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
    # os-ken's hub monkey-patches the standard library as it is imported; do
    # it before anything else is loaded, so no module is patched half-way.
    from os_ken.lib import hub

    hub.patch()
    from otcp.controller import config as controller_config

    config = controller_config.load(config_path)
    lock = claim(config)  # held (open) for as long as the process runs
    level = getattr(logging, config.log_level.upper())
    configure_logging(level, config.log_file)
    raise_descriptor_limit()
    from os_ken.cmd import manager

    from otcp.service import app

    app.CONFIG, app.CONFIG_PATH = config, os.path.abspath(config_path)
    openflow = config.openflow
    # SIGTERM (systemd's stop) and SIGINT end the controller as Ctrl-C does in os-ken: os-ken
    # closes every app, and the app logs it and removes its admin socket.
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, _interrupt_main())
    log = logging.getLogger("otcp.controller")
    try:
        manager.main(
            args=[
                "--ofp-listen-host", openflow.host,
                "--ofp-tcp-listen-port", str(openflow.port),
                "--nouse-stderr", "--default-log-level", str(level),  # our handlers, with timestamps
                "otcp.service.app",
            ],
            prog="otcp-controller",
        )
    except KeyboardInterrupt:  # a stop before os-ken's own handling of it begins
        log.info("stopped while starting")
    finally:
        lock.close()
    log.info("stopped (pid %d)", os.getpid())
    return 0


#: Every line of the controller's log: when, which logger, how severe, what.
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def configure_logging(level: int, log_file: str | None) -> None:
    """Log at level to stderr and, when log_file names one, to that file too (reopened when
    logrotate moves it), each line with its time."""
    formatter = logging.Formatter(LOG_FORMAT)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        handlers.append(logging.handlers.WatchedFileHandler(log_file))
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)


def _interrupt_main() -> Callable[[int, object], None]:
    """A signal handler that stops the controller: KeyboardInterrupt in the main green thread, the
    one calling this (where os-ken waits for its apps and closes them on it), never in whichever
    green thread the signal happened to interrupt. Called after os-ken patched the process."""
    import eventlet.hubs
    from eventlet import greenthread

    main = greenthread.getcurrent()

    def interrupt(signum: int, frame: object) -> None:
        logging.getLogger("otcp.controller").info("%s received: stopping", signal.Signals(signum).name)
        if greenthread.getcurrent() is main:
            raise KeyboardInterrupt
        eventlet.hubs.get_hub().schedule_call_global(0, main.throw, KeyboardInterrupt())

    return interrupt


def claim(config: "ControllerConfig") -> IO[str]:
    """Lock the database and check the listening ports; returns the open lock file.

    Raises InstanceError naming the other controller.
    """
    path = config.database + ".lock"
    lock = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise InstanceError(f"{config.database}: already used by another otcp-controller (pid {holder})") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    endpoints = [("openflow", config.openflow.host, config.openflow.port)]
    if config.agents.secret_file is not None:
        endpoints.append(("agents", config.agents.host, config.agents.port))
    for name, host, port in endpoints:
        try:
            _check_free(host, port)
        except OSError as error:
            lock.close()
            if error.errno == errno.EADDRINUSE:
                raise InstanceError(f"{name} {host}:{port}: already in use (another otcp-controller?)") from None
            raise InstanceError(f"{name} {host}:{port}: {error.strerror}") from None
    return lock


def _check_free(host: str, port: int) -> None:
    """Bind host:port exclusively (no SO_REUSEPORT) and let go: EADDRINUSE if anyone listens."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def raise_descriptor_limit() -> None:
    """Raise the soft limit on open files to the hard one: each agent is a connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    logging.getLogger("otcp.controller").info("open files: up to %d", max(soft, hard))
