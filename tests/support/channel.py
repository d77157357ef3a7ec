"""The controller <-> agent channel's two ends as the tests run them: the
server (`otcp.service.agent_server`) on os-ken's hub in this process, its
callbacks and log recorded, and the real agent (`otcp-agent run`) as a process
in a namespace."""

import json
import logging
import signal
import subprocess
import sys
import time

from eventlet.green import subprocess as green_subprocess
from os_ken.lib import hub
from pyroute2 import netns as pyroute2_netns

from otcp.controller.publication import Publications
from otcp.service.agent_server import AgentServer
from otcp.wire import framing, limits, messages, paramset, session
from support.agents import REPOSITORY

SECRET = b"test-secret-0123456789abcdef"
#: Only stops a broken test from hanging; nothing asserts on speed.
DEADLINE_S = 30


def wait_for(condition, what, timeout=DEADLINE_S):
    """Let the hub run until `condition()` holds; fail after `timeout`."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        hub.sleep(0.05)


class Recorder(logging.Handler):
    """Keeps the server's log lines so tests can check why it disconnected."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def has(self, text):
        return any(text in line for line in self.lines)


class Controller:
    """An AgentServer with its callbacks recorded."""

    def __init__(self, host="127.0.0.1", port=0, netns=None, **options):
        self.acks, self.agents, self.rejects, self.rtts = [], [], [], []
        self.log = Recorder()
        logger = logging.getLogger(f"otcp.test.server.{id(self)}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(self.log)
        self.publications = Publications()
        self.server = AgentServer(
            host, port, SECRET, self.publications, on_ack=lambda *a: self.acks.append(a),
            on_agent=lambda *a: self.agents.append(a), on_reject=lambda *a: self.rejects.append(a), logger=logger,
            on_rtt=lambda *a: self.rtts.append(a),
            **options,
        )
        if netns is None:
            self.server.start()
        else:  # listen on the namespace's loopback, where its agent lives
            pyroute2_netns.pushns(netns)
            try:
                self.server.start()
            finally:
                pyroute2_netns.popns()
        self.port = self.server.address[1]

    def publish(self, host_ip, param_set):
        """What the controller core and app do with a new set (a dict, as the planner's routes would
        make it): publish it, deliver it."""
        validated = paramset.validate_param_set(param_set)
        self.publications.publish(validated.generation, {host_ip: validated.routes})
        self.server.deliver(host_ip)

    def acked(self, generation):
        return any(ack[1] == generation for ack in self.acks)

    def stop(self):
        self.server.stop()


class AgentProcess:
    """`otcp-agent run` in a namespace, its log in a file."""

    def __init__(self, ns, port, tmp_path, secret=SECRET, name="agent", extra=()):
        self.extra = list(extra)
        self.secret_file = tmp_path / f"{name}.secret"
        self.secret_file.write_bytes(secret + b"\n")
        self.log_path = tmp_path / f"{name}.log"
        self.state = tmp_path / f"{name}.db"
        self.ns, self.port = ns, port
        self.process = None
        self.start()

    def start(self):
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "otcp.agent.cli", "--netns", self.ns.name, "--log-level", "debug", "run",
                 "--controller", f"127.0.0.1:{self.port}", "--secret-file", str(self.secret_file),
                 "--state", str(self.state), "--backoff-max", "1", *self.extra],
                cwd=REPOSITORY, stdout=log, stderr=log,
            )

    def log(self):
        return self.log_path.read_text()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def agent_under_controller(ns, tmp_path, cleanup, param_set, **agent_options):
    """(controller, agent): a Controller listening in the namespace ns that has published param_set
    for the namespace's address (support.namespaces: 10.77.0.1), and the real agent started there
    with agent_options (AgentProcess's); cleanup stops both."""
    controller = Controller(netns=ns.name)
    cleanup.append(controller)
    controller.publish("10.77.0.1", param_set)
    agent = AgentProcess(ns, controller.port, tmp_path, **agent_options)
    cleanup.append(agent)
    return controller, agent


class GreenPeer:
    """A hand-driven agent connection on a green thread, cooperative with the hub: it speaks the
    real protocol, or misbehaves as its caller makes it. source: the loopback address it connects from."""

    def __init__(self, port, source="127.0.0.1"):
        self.sock = hub.connect(("127.0.0.1", port), bind=(source, 0))
        self.decoder = framing.FrameDecoder(limits.MAX_FRAME_BYTES)
        self.frames = []
        self.session = None

    def read(self, timeout=DEADLINE_S):
        """The next frame body, or None once the server has closed."""
        with hub.Timeout(timeout):
            while not self.frames:
                try:
                    data = self.sock.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data:
                    return None
                self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)

    def read_until_closed(self):
        """Every frame body until the server closes."""
        frames = []
        while (frame := self.read()) is not None:
            frames.append(frame)
        return frames

    def send_json(self, message):
        """Send a message as one unsealed frame (the handshake's, or a bad one)."""
        self.sock.sendall(framing.frame(framing.encode_json(message)))

    def authenticate(self, secret=SECRET, addresses=("10.9.0.1",)):
        """Answer the challenge and send a hello for addresses; False when the server refuses the secret."""
        challenge = messages.parse_message(json.loads(self.read()), messages.Challenge)
        auth, nonce = messages.auth_message(secret, challenge)
        self.send_json(auth)
        welcome = self.read()
        if welcome is None:
            return False
        self.session = session.Session(secret, challenge.nonce, nonce, "agent")
        hello = {"type": "hello", "hostname": "green", "addresses": list(addresses), "interfaces": [],
                 "mtu": 1500, "mss_bytes": 1448, "congestion_controls": ["cubic"], "congestion_control": "cubic",
                 "tcp_rto_min_us": True, "applied_generation": None, "agent_version": limits.VERSION,
                 "enforcement": {"mode": "routes", "reason": None}}
        self.sock.sendall(self.session.seal(hello))
        return True

    def receive(self):
        """The next sealed message, opened (None once the server has closed)."""
        body = self.read()
        return None if body is None else self.session.open(body)

    def close(self):
        self.sock.close()


def scrape(ns, port):
    """The agent's /metrics page, fetched from inside its namespace ("" while it does not answer); the
    hub runs meanwhile, as for the agent commands of `support.agents`."""
    fetch = ("import sys, urllib.request\n"
             f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=5).read().decode())")
    done = green_subprocess.run(["ip", "netns", "exec", ns.name, sys.executable, "-c", fetch], capture_output=True,
                                text=True)
    return done.stdout if done.returncode == 0 else ""


def metric(page, name):
    """The value of one unlabelled sample on a metrics page (0 if absent)."""
    for line in page.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0
