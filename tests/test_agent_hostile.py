"""The agent against hostile or broken input: files and challenges nested
too deep, zone ids, nexthops a host route must copy, an apply killed
half-way, state files that cannot be used, duplicate keys, oversized keys,
trickled frames and a missing namespace. Real kernel, throwaway namespaces,
loopback only."""

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from pyroute2 import netns

from otcp.agent.client import ControllerClient
from otcp.agent.core import Agent
from otcp.agent.routes import OTCP_PROTO
from otcp.agent.state import DETAIL_BYTES, CorruptState, State
from otcp.wire import framing, paramset
from otcp.wire.validation import ValidationError
from support.agents import REPOSITORY, otcp_agent
from support.namespaces import expected
from support.routes import route


def write_set(path, generation, routes):
    path.write_text(json.dumps({"generation": generation, "routes": routes}))
    return str(path)


# -- nesting ---------------------------------------------------------------------------------------


@pytest.mark.root
def test_deeply_nested_file_is_refused_in_one_line(ns, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 1000)
    done = otcp_agent(ns, "apply", str(path), "--state", str(tmp_path / "state.db"))
    assert done.returncode == 2
    assert "nested 1000 levels deep" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


@pytest.mark.root
def test_a_nested_challenge_from_a_fake_controller_does_not_kill_the_agent(ns, tmp_path):
    """The fake controller sends `[` x 1000 as its challenge, twice; the agent logs and dials again."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    dialled = []

    def fake_controller():
        for _ in range(2):
            conn, _ = listener.accept()
            dialled.append(conn)
            conn.sendall(framing.frame(b"[" * 1000))

    thread = threading.Thread(target=fake_controller, daemon=True)
    thread.start()
    with Agent(str(tmp_path / "state.db"), netns=ns.name) as agent:
        client = ControllerClient(agent, "127.0.0.1", port, b"0123456789abcdef", backoff_initial=0.05,
                                  backoff_max=0.05)
        worker = threading.Thread(target=_run_until_stopped, args=(client,), daemon=True)
        worker.start()
        thread.join(timeout=20)
        assert len(dialled) == 2, "the agent did not come back after the nested challenge"
        assert worker.is_alive()
        client.stop()
        listener.close()
        worker.join(timeout=10)
    listener.close()
    for conn in dialled:
        conn.close()


def _run_until_stopped(client):
    try:
        client.run()
    except Exception:  # the test checks the thread is alive; any escape ends it
        return


# -- zone ids --------------------------------------------------------------------------------------


@pytest.mark.root
def test_zone_ids_are_refused_by_validation_and_by_apply(ns, tmp_path):
    with pytest.raises(ValidationError, match=r"routes\[0\]\.dst: .*zone id"):
        paramset.validate_param_set({"generation": 1, "routes": [route("fe80::1%v0")]})
    path = write_set(tmp_path / "zone.json", 1, [route("fe80::1%v0")])
    done = otcp_agent(ns, "apply", path, "--state", str(tmp_path / "state.db"))
    assert done.returncode == 2 and "zone id" in done.stderr and "Traceback" not in done.stderr


# -- nexthops that a host route must copy faithfully -----------------------------------------------


@pytest.mark.root
def test_an_onlink_gateway_is_carried_over(ns, tmp_path):
    ns.ip("route", "add", "10.66.0.0/16", "via", "10.99.0.1", "dev", "v0", "onlink")
    path = write_set(tmp_path / "set.json", 1, [route("10.66.0.5/32"), route("10.77.0.2/32")])
    done = otcp_agent(ns, "apply", path, "--state", str(tmp_path / "state.db"))
    assert done.returncode == 0, done.stderr
    lines = ns.ip("route", "show", "proto", str(OTCP_PROTO)).splitlines()
    onlink = [line for line in lines if line.startswith("10.66.0.5")]
    assert onlink and "via 10.99.0.1" in onlink[0] and "onlink" in onlink[0]
    assert ns.otcp_routes()["10.77.0.2/32"] == expected()


@pytest.mark.root
def test_an_ecmp_cover_skips_only_its_destinations(ns, tmp_path):
    ns.ip("addr", "add", "10.55.0.1/24", "dev", "v0")
    ns.ip("route", "add", "10.44.0.0/16", "nexthop", "via", "10.55.0.2", "dev", "v0",
          "nexthop", "via", "10.55.0.3", "dev", "v0")
    path = write_set(tmp_path / "set.json", 1, [route("10.44.0.9/32"), route("10.77.0.2/32")])
    done = otcp_agent(ns, "apply", path, "--json", "--state", str(tmp_path / "state.db"))
    assert done.returncode == 0, done.stderr
    results = {r["dst"]: r for r in json.loads(done.stdout)["results"]}
    assert results["10.44.0.9/32"]["status"] == "skipped" and "ECMP" in results["10.44.0.9/32"]["reason"]
    assert results["10.77.0.2/32"]["status"] == "applied"
    assert set(ns.otcp_routes()) == {"10.77.0.2/32"}


# -- an apply killed half-way ----------------------------------------------------------------------


@pytest.mark.root
def test_a_restart_removes_what_a_killed_first_apply_left(ns, tmp_path):
    state = str(tmp_path / "state.db")
    routes = [route(f"10.77.{i // 250}.{i % 250 + 2}/32") for i in range(20_000)]
    path = write_set(tmp_path / "big.json", 1, routes)
    applying = subprocess.Popen([sys.executable, "-m", "otcp.agent.cli", "--netns", ns.name, "apply", path, "--state",
                                 state], cwd=REPOSITORY, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while applying.poll() is None and not _has_otcp_route(ns):
        time.sleep(0.02)
    applying.send_signal(signal.SIGKILL)
    assert applying.wait() == -signal.SIGKILL, "the apply finished before it could be interrupted"
    assert _has_otcp_route(ns)
    with Agent(state, netns=ns.name) as agent:
        assert agent.state.applied() is None and agent.state.intent() is not None
    running = subprocess.Popen([sys.executable, "-m", "otcp.agent.cli", "--netns", ns.name, "run", "--controller",
                                "127.0.0.1:9", "--secret-file", _secret(tmp_path), "--state", state],
                               cwd=REPOSITORY, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(running.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any("left by the interrupted apply of generation 1" in line for line in lines):
            assert running.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        assert not _has_otcp_route(ns)
    finally:
        running.send_signal(signal.SIGTERM)
        running.wait(timeout=20)
        reader.join(timeout=20)
    with Agent(state, netns=ns.name) as agent:
        assert agent.state.intent() is None


def _has_otcp_route(ns):
    found = subprocess.run(["ip", "-n", ns.name, "route", "show", "proto", str(OTCP_PROTO), "root", "10.77.0.0/24"],
                           capture_output=True, text=True, check=True).stdout
    return bool(found.strip())


def _secret(tmp_path):
    path = tmp_path / "secret"
    path.write_text("0123456789abcdef0123456789abcdef")
    return str(path)


# -- a state file that cannot be used --------------------------------------------------------------


def _corrupt(kind, path):
    if kind == "garbage":
        with open(path, "wb") as handle:
            handle.write(os.urandom(4096))
    elif kind == "truncated":
        state = State(path)
        state.save_applied(paramset.validate_param_set({"generation": 3, "routes": [route("10.77.0.2/32")]}), [], "test")
        state.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        state.close()
        size = os.path.getsize(path)
        with open(path, "r+b") as handle:
            handle.truncate(size // 2)
    elif kind == "wrong schema":
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE applied (x TEXT)")
        db.commit()
        db.close()
    elif kind == "bad json":
        state = State(path)
        state.save_applied(paramset.validate_param_set({"generation": 3, "routes": [route("10.77.0.2/32")]}), [], "test")
        state.db.execute("UPDATE applied SET param_set = '{not json'")
        state.db.commit()
        state.close()
    elif kind == "directory":
        os.mkdir(path)


KINDS = ["garbage", "truncated", "wrong schema", "bad json", "directory"]


@pytest.mark.root
@pytest.mark.parametrize("kind", KINDS)
def test_show_reports_a_corrupt_state_in_one_line(ns, tmp_path, kind):
    state = str(tmp_path / "state.db")
    _corrupt(kind, state)
    done = otcp_agent(ns, "show", "--state", state)
    assert done.returncode == 2, done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert state in done.stderr


@pytest.mark.root
@pytest.mark.parametrize("kind", KINDS)
def test_revert_works_from_the_kernel_alone(ns, tmp_path, kind):
    state = str(tmp_path / "state.db")
    with Agent(str(tmp_path / "other.db"), netns=ns.name) as agent:
        agent.apply({"generation": 5, "routes": [route("10.77.0.2/32")]}, "test")
    _corrupt(kind, state)
    done = otcp_agent(ns, "revert", "--state", state)
    assert done.returncode == 0, done.stderr
    assert "removed 1 OTCP route(s)" in done.stdout and "moved it to" in done.stderr
    assert ns.otcp_routes() == {}
    with Agent(state, netns=ns.name) as agent:
        assert agent.show()["generation"] is None


@pytest.mark.root
@pytest.mark.parametrize("kind", KINDS)
def test_run_moves_a_corrupt_state_aside_and_still_dials(ns, tmp_path, kind):
    state = str(tmp_path / "state.db")
    _corrupt(kind, state)
    listener = _listener_in(ns)
    listener.settimeout(30)
    running = subprocess.Popen([sys.executable, "-m", "otcp.agent.cli", "--netns", ns.name, "run", "--controller",
                                f"127.0.0.1:{listener.getsockname()[1]}", "--secret-file", _secret(tmp_path),
                                "--state", state], cwd=REPOSITORY, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    try:
        conn, _ = listener.accept()
        conn.close()
    finally:
        running.send_signal(signal.SIGTERM)
        _, err = running.communicate(timeout=20)
        listener.close()
    assert "moved it to" in err and "Traceback" not in err
    assert [name for name in os.listdir(tmp_path) if ".corrupt-" in name]


@pytest.mark.root
def test_the_log_file_gets_the_lines_with_their_time(ns, tmp_path):
    state = str(tmp_path / "state.db")
    _corrupt("garbage", state)
    log = tmp_path / "agent.log"
    done = otcp_agent(ns, "--log-file", str(log), "revert", "--state", state)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert lines and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} otcp-agent WARNING .*moved it to", lines[0])
    assert lines == done.stderr.splitlines()


# -- a state file that cannot be written ----------------------------------------------------------


@pytest.fixture
def immutable(tmp_path):
    """state.db after generation 1 was applied to the namespace; the test makes it immutable
    (`chattr +i`), and the fixture takes the attribute off again."""
    made = []

    def make(path):
        subprocess.run(["chattr", "+i", path], check=True)
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", path], check=False)


def _one_line(done, *texts):
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for text in texts:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.root
@pytest.mark.parametrize("command", ["apply", "revert", "run"])
def test_an_immutable_state_stops_every_command_before_it_touches_a_route(ns, tmp_path, immutable, command):
    state = str(tmp_path / "state.db")
    done = otcp_agent(ns, "apply", write_set(tmp_path / "g1.json", 1, [route("10.77.0.2/32")]), "--state", state)
    assert done.returncode == 0, done.stderr
    before = ns.otcp_routes()
    immutable(state)
    arguments = {"apply": ["apply", write_set(tmp_path / "g2.json", 2, [route("10.77.0.3/32")])],
                 "revert": ["revert"],
                 "run": ["run", "--controller", "127.0.0.1:9", "--secret-file", _secret(tmp_path)]}[command]
    done = otcp_agent(ns, *arguments, "--state", state)
    assert done.returncode == 1
    _one_line(done, f"{state}: cannot write the state: the file is read-only")
    assert ns.otcp_routes() == before
    with Agent(state, netns=ns.name) as agent:
        shown = agent.show()
        assert shown["generation"] == 1 and shown["active"] is True


@pytest.mark.root
def test_show_gives_the_sets_admit_to_the_hosts_applications(ns, tmp_path):
    """A set's admit (fan-in admission) is shown, in words and as JSON; a set without one shows none."""
    state = str(tmp_path / "state.db")
    admitting = tmp_path / "g1.json"
    admitting.write_text(json.dumps({"generation": 1, "routes": [route("10.77.0.2/32")], "admit": 52}))
    assert otcp_agent(ns, "apply", str(admitting), "--state", state).returncode == 0
    assert json.loads(otcp_agent(ns, "show", "--json", "--state", state).stdout)["admit"] == 52
    assert "admission: applications here ask at most 52 senders to send at once" in \
        otcp_agent(ns, "show", "--state", state).stdout
    assert otcp_agent(ns, "apply", write_set(tmp_path / "g2.json", 2, [route("10.77.0.2/32")]),
                      "--state", state).returncode == 0
    assert json.loads(otcp_agent(ns, "show", "--json", "--state", state).stdout)["admit"] is None
    assert "admission" not in otcp_agent(ns, "show", "--state", state).stdout


@pytest.mark.root
def test_a_state_locked_by_another_process_is_reported_and_nothing_changes(ns, tmp_path):
    state = str(tmp_path / "state.db")
    assert otcp_agent(ns, "apply", write_set(tmp_path / "g1.json", 1, [route("10.77.0.2/32")]),
                      "--state", state).returncode == 0
    before = ns.otcp_routes()
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys\n"
                               "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                               "db.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read()", state],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        done = otcp_agent(ns, "apply", write_set(tmp_path / "g2.json", 2, [route("10.77.0.3/32")]), "--state", state)
    finally:
        holder.communicate("")
    assert done.returncode == 1
    _one_line(done, "cannot write the state: another process has held its write lock for more than 5 s")
    assert ns.otcp_routes() == before


@pytest.mark.root
def test_a_second_run_on_the_same_state_file_is_refused(ns, tmp_path):
    state = str(tmp_path / "state.db")
    listener = _listener_in(ns)
    listener.settimeout(30)
    command = [sys.executable, "-m", "otcp.agent.cli", "--netns", ns.name, "run", "--controller",
               f"127.0.0.1:{listener.getsockname()[1]}", "--secret-file", _secret(tmp_path), "--state", state]
    first = subprocess.Popen(command, cwd=REPOSITORY, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        conn, _ = listener.accept()  # the first one runs
        second = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=30)
        conn.close()
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=20)
        listener.close()
    assert second.returncode == 1
    _one_line(second, f"{state}: another otcp-agent run (pid {first.pid}) uses this state file")


@contextlib.contextmanager
def sigint_caught():
    """SIGINT caught in this process while the context lasts, so that a child started in it gets
    SIGINT's default action at exec. A test run started in the background (as CI may be) inherits
    SIGINT ignored, which a child would keep, and Python then keeps ignoring it too."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.root
def test_sigint_during_apply_says_what_was_applied(ns, tmp_path):
    routes = [route(f"10.88.{i // 256}.{i % 256}/32") for i in range(10_000)]
    path = write_set(tmp_path / "big.json", 1, routes)
    outcomes = set()
    for delay in (0.0, 0.5):  # from when the agent opened its state: at the apply's start, and into it
        state = str(tmp_path / f"state-{delay}.db")
        with sigint_caught():
            apply = subprocess.Popen([sys.executable, "-m", "otcp.agent.cli", "--netns", ns.name, "apply", path,
                                      "--state", state], cwd=REPOSITORY, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(state) and apply.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(delay)
        apply.send_signal(signal.SIGINT)
        out, err = apply.communicate(timeout=120)
        count = len(ns.otcp_routes())
        if apply.returncode == 0:  # it finished before the signal came
            outcomes.add("finished")
        else:
            assert apply.returncode == 130 and "Traceback" not in err, err
            line = err.strip().splitlines()[-1]
            if count:
                assert count == 10_000 and "generation 1 was applied whole" in line, line
                outcomes.add("whole")
            else:
                assert "no route changed" in line, line
                outcomes.add("nothing")
        assert otcp_agent(ns, "revert", "--state", state).returncode == 0
    assert outcomes & {"whole", "nothing"}


def _listener_in(ns):
    """A TCP listener on the namespace's loopback, where an agent run with --netns dials."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns.name}", os.O_RDONLY)
    try:
        netns.setns(target)
        try:
            return socket.create_server(("127.0.0.1", 0))
        finally:
            netns.setns(own)
    finally:
        os.close(own)
        os.close(target)


# -- input the agent refuses, and peers that stall -------------------------------------------------


def test_duplicate_keys_are_refused():
    with pytest.raises(ValidationError, match='duplicate key "generation"'):
        paramset.parse_param_set(b'{"generation": 1, "generation": 2, "routes": []}')


@pytest.mark.root
def test_the_same_routes_in_another_order_are_the_same_set(ns, tmp_path):
    first, second = route("10.77.0.2/32"), route("10.77.0.3/32")
    with Agent(str(tmp_path / "state.db"), netns=ns.name) as agent:
        agent.apply({"generation": 4, "routes": [first, second]}, "test")
        agent.apply({"generation": 4, "routes": [second, first]}, "test")
    assert set(ns.otcp_routes()) == {"10.77.0.2/32", "10.77.0.3/32"}


@pytest.mark.root
def test_a_huge_rejected_key_is_neither_echoed_nor_journaled_whole(ns, tmp_path):
    state = str(tmp_path / "state.db")
    key = "k" * (8 * 1024 * 1024 - 100)
    with Agent(state, netns=ns.name) as agent:
        with pytest.raises(ValidationError) as caught:
            agent.apply({"generation": 1, "routes": [], key: 1}, "test")
        assert len(str(caught.value)) < 200
        assert all(len(detail) <= DETAIL_BYTES for *_, detail in agent.state.journal())
    files = [state, state + "-wal"]
    assert sum(os.path.getsize(path) for path in files if os.path.exists(path)) < 1024 * 1024


def test_corrupt_state_is_an_error_with_one_line():
    with pytest.raises(CorruptState, match="not a usable state database|cannot open"):
        State("/proc/version")


@pytest.mark.root
def test_a_trickled_challenge_cannot_hold_the_agent(ns, tmp_path):
    """One byte of challenge every 0.3 s: the handshake's single deadline (1 s) ends it."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle():
        conn, _ = listener.accept()
        with conn:
            for byte in framing.frame(b'{"type": "challenge", "version": 1, "nonce": "' + b"ab" * 32 + b'"}'):
                if stop.wait(0.3):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    with Agent(str(tmp_path / "state.db"), netns=ns.name) as agent:
        client = ControllerClient(agent, "127.0.0.1", listener.getsockname()[1], b"0123456789abcdef",
                                  handshake_timeout=1.0)
        with pytest.raises(Exception, match="did not finish in time"):
            client.serve_once()
    stop.set()
    listener.close()


def test_cli_refuses_a_missing_namespace():
    done = subprocess.run([sys.executable, "-m", "otcp.agent.cli", "--netns", f"otcp-test-{os.getpid()}-absent", "show"],
                          cwd=REPOSITORY, capture_output=True, text=True)
    assert done.returncode == 2 and "--netns" in done.stderr
