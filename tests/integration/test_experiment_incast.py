"""A tiny incast sweep for real: star, 4 senders, default, fine-rto and otcp, a few rounds.

Runs ``otcp-experiment incast`` as a child process (the OTCP controller
forwards; the otcp scheme runs the real agents), then checks the result
files, plots and per-host routes, and that nothing it created is left behind. No assertion on speed.
"""

import ipaddress
import json
import os
import re
import sqlite3
import subprocess
import sys

ROUNDS = 4


def bridges():
    return set(subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True, text=True,
                              check=True).stdout.split())


def test_tiny_sweep_writes_sane_results(tmp_path):
    out = tmp_path / "tiny"
    before = bridges()
    completed = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "incast", "--senders", "4", "--buffer-bytes", "85000",
         "--sru-bytes", "65536", "--rounds", str(ROUNDS), "--warmup-seconds", "0.5",
         "--schemes", "default,fine-rto,otcp,dctcp", "--ceiling-seconds", "2", "--ceiling-repeats", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]

    summary = json.loads((out / "summary.json").read_text())
    assert 10 < summary["ceiling_mbps"] < 1000
    assert [(r["scheme"], r["senders"]) for r in summary["runs"]] == [("default", 4), ("fine-rto", 4), ("otcp", 4)]
    for run in summary["runs"]:
        assert run["buffer_bytes"] == 85000 and run["sru_bytes"] == 65536
        # Goodput is measured, positive, and cannot beat the links.
        assert 0 < run["goodput_mbps"] <= 1.05 * 100
        assert 0 < run["fct_p50_ms"] <= run["fct_p95_ms"] <= run["fct_p99_ms"]
        assert run["drops"] >= 0 and run["timeouts"] >= 0
        # The loss account: every IPv4 packet the hosts sent was delivered or dropped at a named buffer.
        assert run["sent"] > 0 and run["delivered"] > 0
        assert run["sent"] == run["delivered"] + run["drops"] + run["drops_other_buffers"] + run["unexplained"]
        assert run["unexplained"] == 0, run
        assert run["packet_bytes"] == 1500 and 10 < run["ceiling_mbps"] < 1000
        assert 0 < run["cpu_busy_pct"] <= 100 and run["cpu_busy_pct"] <= run["cpu_busiest_pct"] <= 100
        assert 0 < run["peak_backlog_bytes"] <= 85000
        assert run["probe_rtt_avg_ms"] is not None and 0 < run["probe_rtt_avg_ms"] <= run["probe_rtt_max_ms"]
    assert summary["unexplained_losses"] == []
    (ceiling,) = summary["ceilings"]
    assert ceiling["packet_bytes"] == 1500 and len(ceiling["samples"]) == 2
    assert ceiling["min"] <= ceiling["median"] <= ceiling["max"]
    assert summary["unavailable"][0]["scheme"] == "dctcp" and summary["unavailable"][0]["reason"]

    db = sqlite3.connect(str(out / "results.db"))
    assert db.execute("SELECT count(*) FROM rounds").fetchone() == (3 * ROUNDS,)
    assert db.execute("SELECT count(*) FROM flows").fetchone() == (3 * ROUNDS * 4,)
    assert db.execute("SELECT count(DISTINCT host) FROM host_counters").fetchone() == (6,)

    for name in ("goodput.png", "fct_cdf.png", "fct_bars.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")

    # Routes as the kernel held them: fine-rto's carry rto_min, default's do not.
    hosts = sorted(os.listdir(out / "routes" / "default"))
    assert hosts == [f"h{i}.txt" for i in range(1, 7)]
    for host in hosts:
        default_routes = (out / "routes" / "default" / host).read_text()
        fine_routes = (out / "routes" / "fine-rto" / host).read_text()
        assert "10.0.0.0/8 dev" in default_routes and "rto_min" not in default_routes
        # iproute2 always locks rto_min: the kernel shows "rto_min lock 1ms".
        assert re.search(r"10\.0\.0\.0/8 dev .* rto_min (lock )?1ms", fine_routes), fine_routes
        assert "before traffic" in fine_routes
        # otcp's: agent routes (proto 79, a host or a prefix: the controller aggregates destinations) that
        # cover every other host, with the controller's rto_min and quickack.
        otcp_routes = (out / "routes" / "otcp" / host).read_text().split("after the measured rounds")[0]
        own = int(host.removesuffix(".txt").removeprefix("h"))
        prefixes = [ipaddress.ip_network(p) for p in re.findall(
            r"^(10\.0\.0\.\d+(?:/\d+)?) dev \S+ proto 79 .*rto_min lock \d+ms.*quickack 1", otcp_routes, re.M)]
        covered = [i for i in range(1, 7) if any(ipaddress.ip_address(f"10.0.0.{i}") in p for p in prefixes)]
        assert set(covered) >= {i for i in range(1, 7) if i != own}, otcp_routes

    # Everything torn down: no bridge of ours, no process still running from this output directory
    # (the controller's command line names its configuration file in it).
    assert bridges() == before
    assert processes_mentioning(str(out)) == []


def processes_mentioning(text):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if text.encode() in handle.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found
