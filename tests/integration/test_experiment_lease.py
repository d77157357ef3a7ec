"""The lease experiment for real, small: 4 senders, otcp-lossless's agents (routes and BPF), a 4 s lease.

Runs ``otcp-experiment lease`` as a child process: the real controller is killed with SIGKILL during
the incast, every host's routes and sock_ops entries are read until they hold the safe state, one flow
runs, and the controller comes back on its database. Checks, from what the run read in the hosts and in
the agents' journals: no lease outlived the kill by more than its length, no agent lapsed before its
lease ran out or later than its poll after, every host went from its plan to the safe state and stayed
there until the controller came back, and every host then held its controller's set again. Nothing
is left behind. No assertion on speed (the targets are the command's exit status, either way)."""

import json
import subprocess
import sys

from otcp.agent.client import LEASE_POLL_S
from support.emulations import ovs_bridges, processes_mentioning

LEASE_S = 4.0
#: What applying the safe state may add to the agent's poll on a machine this experiment keeps busy.
APPLY_ALLOWANCE_S = 1.0


def test_a_killed_controller_leaves_every_host_at_the_safe_state_and_its_return_restores_the_plan(tmp_path):
    out = tmp_path / "lease"
    before = ovs_bridges()
    completed = subprocess.run(
        [sys.executable, "-m", "otcp.experiments.cli", "lease", "--senders", "4", "--lease-s", str(LEASE_S),
         "--kill-after-s", "2", "--ceiling-seconds", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    document = json.loads((out / "lease.json").read_text())
    assert "targets" in document, completed.stderr[-3000:]
    met = all(target["met"] for target in document["targets"].values())
    assert completed.returncode == (0 if met else 1), completed.stderr[-3000:]
    assert "safe state within 5 s:" in completed.stdout

    assert document["deadline_s"] == LEASE_S + LEASE_POLL_S
    assert [h["host"] for h in document["hosts"]] == [f"h{i}" for i in range(1, 7)]
    for host in document["hosts"]:
        # Renewed until the kill, never after it: the lease ran out within one lease of the kill.
        assert 0 < host["lease_expired_s"] <= LEASE_S, host
        # The agent applied the safe state once its lease had run out, at its next poll.
        assert host["lease_expired_s"] <= host["safe_applied_s"] <= \
            host["lease_expired_s"] + LEASE_POLL_S + APPLY_ALLOWANCE_S, host
        assert host["safe_applied_s"] <= host["seen_safe_s"], host
        # The controller's return: its set again, the same generation or a newer one.
        assert host["restored_s"] > host["seen_safe_s"] and host["generation_restored"] >= host["generation_before"]

    # What the polls read: each host at its plan before the kill, then at the safe state, which it
    # kept until the controller came back
    restart = next(e["t"] for e in document["events"] if e["event"] == "controller started again")
    for host in document["hosts"]:
        states = [(t, state) for name, t, state in document["readings"] if name == host["host"]]
        # (a poll may catch a new generation half-way: "other"; never the safe state while renewed)
        before_kill = [state for t, state in states if t < 0]
        assert "planned" in before_kill and "safe" not in before_kill, (host["host"], before_kill)
        after = [state for t, state in states if host["seen_safe_s"] <= t < restart]
        assert after and set(after) == {"safe"}, (host["host"], after)
    flow = document["flows"]["safe"]
    assert flow["start"] >= max(h["seen_safe_s"] for h in document["hosts"]) and 0 < flow["mbps"]
    assert 10 < document["ceiling_mbps"] < 1000
    assert (out / "lease.png").read_bytes().startswith(b"\x89PNG")

    assert ovs_bridges() == before
    assert processes_mentioning(str(out)) == []
