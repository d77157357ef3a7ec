"""The flow workload's host programs on loopback: every planned connection is reported, finished or
not, with the ids the server reports its side's timeouts under."""

import json
import subprocess
import sys
import threading
import time

import pytest

from otcp.experiments.runner.controller import free_port

PYTHON = [sys.executable, "-m"]
#: The client starts its schedule this long after it is started: Python's start-up, on a busy machine too.
LEAD_S = 3.0


@pytest.fixture
def server():
    port = free_port()
    process = subprocess.Popen([*PYTHON, "otcp.experiments.hostprogs.flow_server", "--port", str(port), "--bind",
                                "127.0.0.1", "--cc", "reno"], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == f"listening {port}"
    yield port, process
    process.kill()
    process.wait()


def run_client(tmp_path, port, plan, drain_s=3.0, extra=()):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    start_at = time.monotonic() + LEAD_S
    completed = subprocess.run([*PYTHON, "otcp.experiments.hostprogs.flow_client", "--plan", str(path), "--port",
                                str(port), "--start-at", repr(start_at), "--drain-s", str(drain_s), "--cc", "reno",
                                "--id-base", str(7 << 32), *extra], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    return start_at, {record["key"]: record for record in map(json.loads, completed.stdout.splitlines())}


def test_every_flow_query_response_and_stream_is_reported(tmp_path, server):
    port, process = server
    plan = {"duration_s": 1.0,
            "flows": [{"key": "f0", "start_s": 0.1, "server": "127.0.0.1", "bytes": 5000},
                      {"key": "f1", "start_s": 0.2, "server": "127.0.0.1", "bytes": 2_000_000}],
            "queries": [{"key": "q0", "start_s": 0.3, "servers": ["127.0.0.1"] * 3, "bytes": 2000}],
            "background": [{"key": "b0", "server": "127.0.0.1"}]}
    start_at, records = run_client(tmp_path, port, plan)
    assert set(records) == {"f0", "f1", "q0/0", "q0/1", "q0/2", "b0"}
    for key in ("f0", "f1", "q0/0", "q0/1", "q0/2"):
        record = records[key]
        assert record["error"] is None and record["end"] is not None and record["start"] <= record["end"]
        assert record["bytes"] == (5000 if key == "f0" else 2_000_000 if key == "f1" else 2000)
        # Started at its time (give or take the event loop) and never early.
        assert record["scheduled"] <= record["start"] < record["scheduled"] + 0.5
    assert records["f0"]["scheduled"] == pytest.approx(start_at + 0.1)
    # The stream ran through the measured second and reports what arrived within it.
    stream = records["b0"]
    assert stream["end"] is None and stream["error"] is None and 0 < stream["measured_bytes"] <= stream["bytes"]
    # Ids count up from the base; the server reports each connection under its id once the client closed it.
    assert sorted(record["id"] for record in records.values()) == [(7 << 32) + i for i in range(1, 7)]
    reported = server_reports(process, {record["id"] for record in records.values()})
    assert sorted(r["id"] for r in reported) == sorted(record["id"] for record in records.values())
    finite = {record["id"] for key, record in records.items() if key != "b0"}
    assert all(r["rto"] == 0 and r["retrans"] == 0 for r in reported if r["id"] in finite), reported


def server_reports(process, ids, timeout_s=10.0):
    """The server's reports, read (by a thread) until it has reported every connection of ids or
    timeout_s passed."""
    reported = []

    def read():
        reported.extend(json.loads(line) for line in process.stdout if line.startswith("{"))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while {r["id"] for r in list(reported)} < ids and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(reported)


def test_a_flow_that_cannot_finish_is_reported_unfinished_at_the_deadline(tmp_path, server):
    port, _ = server
    plan = {"duration_s": 0.5, "flows": [{"key": "f0", "start_s": 0.0, "server": "127.0.0.1", "bytes": 1 << 40}]}
    _, records = run_client(tmp_path, port, plan, drain_s=1.0)
    assert records["f0"]["end"] is None and records["f0"]["error"] == "unfinished at the deadline"
    assert 0 < records["f0"]["bytes"] < 1 << 40


def test_a_refused_connection_is_reported_with_its_error(tmp_path):
    plan = {"duration_s": 0.2, "flows": [{"key": "f0", "start_s": 0.0, "server": "127.0.0.1", "bytes": 10}]}
    _, records = run_client(tmp_path, free_port(), plan, drain_s=1.0)
    assert records["f0"]["end"] is None and "connect failed" in records["f0"]["error"]
