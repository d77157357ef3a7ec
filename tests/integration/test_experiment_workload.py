"""A small workload run for real: a star, two schemes (default and otcp with the live controller and
its agents), ten measured seconds of the web-search mix with queries and a long-lived flow.

Runs ``otcp-experiment workload`` as a child process, then checks that every flow the seeded
schedule holds is accounted for, finished or counted unfinished, in every size bucket, query and
connection record; that the counters and plots are there; and that nothing it created is left
behind. No assertion on speed.
"""

import json
import sqlite3
import subprocess
import sys

from otcp.experiments import cli
from support.emulations import ovs_bridges, processes_mentioning

ARGV = ["workload", "--topo", "star,4", "--distribution", "websearch", "--size-scale", "0.05", "--load", "0.3",
        "--query-senders", "3", "--query-bytes", "2000", "--query-rate", "5", "--background-flows", "1",
        "--seconds", "10", "--warmup-seconds", "1", "--bw-mbps", "25", "--seed", "4", "--schemes", "default,otcp",
        "--ceiling-seconds", "2", "--ceiling-repeats", "1"]


def test_a_small_workload_accounts_for_every_flow(tmp_path):
    out = tmp_path / "workload"
    before = ovs_bridges()
    completed = subprocess.run([sys.executable, "-m", "otcp.experiments.cli", *ARGV, "--out", str(out)],
                               capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "QCT p50/p99" in completed.stdout

    parser = cli.build_parser()
    config = cli.workload_config_from_args(parser.parse_args([*ARGV, "--out", str(out)]), parser)
    hosts = [f"h{i}" for i in range(1, 6)]
    schedule = config.schedule(hosts, 3, 2000, "measured", 10.0)
    assert schedule.flows and schedule.queries and len(schedule.background) == 1

    summary = json.loads((out / "summary.json").read_text())
    assert summary["experiment"] == "workload" and summary["seed"] == 4
    assert [run["scheme"] for run in summary["runs"]] == ["default", "otcp"]
    assert summary["failures"] == [] and summary["unavailable"] == []
    assert 0 < summary["base_rtts_ms"]["85000"]["2"] < 50
    for run in summary["runs"]:
        # Every flow of the seeded schedule is in exactly one bucket, finished or counted unfinished.
        assert run["flows"] == len(schedule.flows)
        assert sum(b["flows"] for b in run["buckets"]) == run["flows"]
        assert all(b["finished"] + b["unfinished"] == b["flows"] for b in run["buckets"])
        assert sum(b["finished"] for b in run["buckets"]) == run["flows_finished"] <= run["flows"]
        assert run["short_flows"]["flows"] == sum(1 for f in schedule.flows if f.size_bytes < 100_000)
        for bucket in run["buckets"]:
            if bucket["finished"]:
                assert bucket["slowdown_p50"] >= 0.5 and bucket["fct_p50_ms"] > 0
        queries = run["queries"]
        assert queries["count"] == len(schedule.queries) and queries["finished"] <= queries["count"]
        assert run["responses"]["count"] == 3 * len(schedule.queries)
        assert 0 <= queries["timeouts"] <= queries["count"]
        assert run["background_mbps"] > 0
        assert run["drops"] >= run["drops_aggregator"] >= 0 and run["timeouts"] >= 0
        # The loss account adds up: every IPv4 packet sent was delivered, dropped at a switch buffer or
        # still queued when the counters were read.
        assert run["unexplained"] == 0 and run["sent"] >= run["delivered"] + run["drops"] > 0
        assert 0 < run["cpu_busy_pct"] <= 100 and 0 < run["switch_cpu_pct"] <= 101
        assert (run["generations"] is None) == (run["scheme"] == "default")
        assert run["ceiling_mbps"] > 10
    db = sqlite3.connect(str(out / "results.db"))
    per_run = len(schedule.flows) + 3 * len(schedule.queries) + 1
    assert db.execute("SELECT count(*) FROM workload_connections").fetchone() == (2 * per_run,)
    unfinished = db.execute("SELECT count(*) FROM workload_connections WHERE kind = 'flow' AND end IS NULL")
    assert unfinished.fetchone() == (sum(len(schedule.flows) - r["flows_finished"] for r in summary["runs"]),)
    for name in ("slowdown-buf85000-3x2000.png", "qct-buf85000-3x2000.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")

    assert ovs_bridges() == before
    assert processes_mentioning(str(out)) == []
