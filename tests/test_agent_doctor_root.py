"""``otcp-agent doctor`` and ``apply --dry-run`` on the real kernel: doctor on this machine, and in a
namespace where a route of another protocol and the namespace's own tcp_rto_min_us conflict with
OTCP's; a dry run against a namespace's OTCP routes, which it leaves as they were."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from otcp.bpf import dctcp, sockops
from support.agents import otcp_agent
from support.routes import route, set_for

pytestmark = pytest.mark.root

REPOSITORY = Path(__file__).resolve().parents[1]


def netns_names():
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def by_check(report):
    found = {}
    for finding in report["findings"]:
        found.setdefault(finding["check"], []).append(finding)
    return found


def test_doctor_on_this_machine_finds_everything_enforceable_and_leaves_nothing(built, tmp_path):
    attached_before = sockops.attached()
    registered_before = dctcp.CC_NAME in dctcp.available_congestion_controls()
    namespaces_before = netns_names()
    done = subprocess.run([sys.executable, "-m", "otcp.agent.cli", "doctor", "--json", "--state",
                           str(tmp_path / "state.db")], cwd=REPOSITORY, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    checks = by_check(report)
    for check in ("btf", "bpffs", "cgroup2", "sockops", "struct_ops", "tcp_metrics", "pacing"):
        assert [f["status"] for f in checks[check]] == ["ok"], checks[check]
    for family in ("route IPv4", "route IPv6"):
        assert [f["status"] for f in checks[family]] == ["ok"] * 5, checks[family]
    assert report["short"] == [] and report["exit_status"] == 0
    # What the checks made is gone: the scratch namespace, the program, the congestion control.
    assert netns_names() == namespaces_before
    assert sockops.attached() == attached_before
    assert (dctcp.CC_NAME in dctcp.available_congestion_controls()) == registered_before
    assert not (tmp_path / "state.db").exists()


def test_doctor_in_a_namespace_names_a_foreign_route_and_its_rto_min_sysctl(built, ns, tmp_path):
    ns.ip("route", "add", "10.88.1.0/24", "via", "10.77.0.254", "proto", "static", "rto_min", "50ms",
          "initcwnd", "20")
    subprocess.run(["ip", "netns", "exec", ns.name, "sysctl", "-q", "-w", "net.ipv4.tcp_rto_min_us=50000"], check=True)
    host_value = Path("/proc/sys/net/ipv4/tcp_rto_min_us").read_text().strip()
    path = tmp_path / "set.json"
    path.write_text(json.dumps(set_for(1, "10.88.1.0/24", "10.88.1.2/32", "10.77.0.2/32")))
    done = otcp_agent(ns, "doctor", "--json", "--set", str(path), "--state", str(tmp_path / "state.db"))
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["netns"] == ns.name and report["short"] == ["destination"]
    checks = by_check(report)
    (foreign,) = checks["foreign_route"]
    assert foreign["summary"] == "10.88.1.0/24 table main proto static: rto_min lock 50 initcwnd 20"
    assert foreign["detail"] == ("toward 10.88.1.2/32 OTCP's host route overrides these values; apply skips "
                                 "10.88.1.0/24, this route's own prefix, and these values hold there")
    (skipped,) = checks["destination"]
    assert skipped["summary"].startswith("apply would skip 10.88.1.0/24: a non-OTCP route for 10.88.1.0/24")
    (sysctl,) = checks["tcp_rto_min_us"]
    assert sysctl["status"] == "note" and "net.ipv4.tcp_rto_min_us = 50000" in sysctl["summary"]
    # The sysctl is the namespace's own: the host's is untouched.
    assert Path("/proc/sys/net/ipv4/tcp_rto_min_us").read_text().strip() == host_value
    text = otcp_agent(ns, "doctor", "--set", str(path), "--state", str(tmp_path / "state.db"))
    assert text.returncode == 1
    assert "SHORT  destination" in text.stdout and "net.ipv4.tcp_rto_min_us = 50000" in text.stdout
    assert not {name for name in netns_names() if name.startswith("otcp-doctor-")}


def journal_rows(state):
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as db:
        return db.execute("SELECT at, generation, source, outcome, detail FROM journal").fetchall()


def test_apply_dry_run_lists_the_changes_and_leaves_routes_and_state_alone(ns, tmp_path):
    state = str(tmp_path / "state.db")
    first = tmp_path / "first.json"
    first.write_text(json.dumps(set_for(1, "10.88.0.2/32", "10.88.0.3/32", "10.88.0.9/32")))
    assert otcp_agent(ns, "apply", str(first), "--state", state).returncode == 0
    second = tmp_path / "second.json"
    second.write_text(json.dumps({"generation": 2, "routes": [
        route("10.88.0.2/32"), route("10.88.0.3/32", initcwnd=4, rto_min_ms=20), route("10.88.0.4/32"),
        route("10.99.0.1/32")]}))
    routes_before, shown_before, journal_before = ns.otcp_routes(), otcp_agent(ns, "show", "--json", "--state", state), \
        journal_rows(state)
    done = otcp_agent(ns, "apply", "--dry-run", "--json", str(second), "--state", state)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [(c["op"], c["dst"]) for c in result["changes"]] == [
        ("keep", "10.88.0.2/32"), ("change", "10.88.0.3/32"), ("add", "10.88.0.4/32"), ("skip", "10.99.0.1/32"),
        ("remove", "10.88.0.9/32")]
    change = {a["name"]: (a["old"], a["new"]) for a in result["changes"][1]["attributes"]}
    assert change["initcwnd"] == (1, 4) and change["rto_min_ms"] == (14, 20) and change["cwnd_clamp"] == (3, 3)
    assert change["dev"] == ("v0", "v0") and change["gateway"] == ("10.77.0.254", "10.77.0.254")
    added = {a["name"]: (a["old"], a["new"]) for a in result["changes"][2]["attributes"]}
    assert added["rto_min_ms"] == (None, 14) and added["gateway"] == (None, "10.77.0.254")
    assert result["generation"] == 2 and result["applied_generation"] == 1
    text = otcp_agent(ns, "apply", "--dry-run", str(second), "--state", state)
    assert "  change  10.88.0.3/32 (main): rto_min_ms 14 -> 20, initcwnd 1 -> 4" in text.stdout
    # Nothing changed: the routes read back, the stored generation, the journal.
    assert ns.otcp_routes() == routes_before
    assert otcp_agent(ns, "show", "--json", "--state", state).stdout == shown_before.stdout
    assert journal_rows(state) == journal_before
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(set_for(1, "10.88.0.5/32")))
    refused = otcp_agent(ns, "apply", "--dry-run", str(stale), "--state", state)
    assert refused.returncode == 2 and "was already applied with different parameters" in refused.stderr
