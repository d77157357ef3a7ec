"""A tiny fairness run for real: two long flows into one receiver, the second a second later, under
default and otcp-lossless (``otcp-experiment fairness``, `otcp.experiments.fairness`).

Runs the command as a child process, then checks fairness.json against what the run's own series
say (the means, the steady goodput, the arrivals), the plots, and that no bridge it created is left
behind. No assertion on speed.
"""

import json
import subprocess
import sys

from support.emulations import ovs_bridges

SCHEMES = ["default", "otcp-lossless"]
STAGGER_S = 1.0
HOLD_S = 3.0


def test_two_staggered_flows_give_a_sane_fairness_record(tmp_path):
    out = tmp_path / "fair"
    before = ovs_bridges()
    # Two ceiling samples: one a busy core or an early loss disturbed is taken again and set aside
    # (otcp.experiments.runner.ceiling), as the full runs do.
    completed = subprocess.run(
        [sys.executable, "-m", "otcp.experiments.cli", "fairness", "--flows", "2", "--stagger-seconds", str(STAGGER_S),
         "--hold-seconds", str(HOLD_S), "--schemes", ",".join(SCHEMES), "--ceiling-seconds", "1",
         "--ceiling-repeats", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Jain" in completed.stdout

    document = json.loads((out / "fairness.json").read_text())
    assert document["failures"] == [] and document["unavailable"] == []
    assert [run["scheme"] for run in document["runs"]] == SCHEMES
    for run in document["runs"]:
        assert run["flows"] == 2 and run["stagger_s"] == STAGGER_S
        assert 10 < run["ceiling_mbps"] < 1000
        # The steady part's means: one per flow, their sum the goodput, Jain's index of two at least 1/2.
        means = run["flow_means_mbps"]
        assert len(means) == 2 and all(rate > 0 for rate in means.values())
        assert abs(sum(means.values()) - run["goodput_steady_mbps"]) < 1e-6
        assert 0.5 <= run["jain_steady"] <= 1
        assert 0 < run["goodput_steady_mbps"] <= 1.05 * 100
        assert abs(run["share_of_ceiling"] - run["goodput_steady_mbps"] / run["ceiling_mbps"]) < 1e-9
        # One convergence record per arrival: the first flow at 0, the second a stagger later.
        arrivals = [entry["arrival_s"] for entry in run["convergence"]]
        assert arrivals[0] == 0 and 0.8 * STAGGER_S <= arrivals[1] <= 1.5 * STAGGER_S
        assert [len(entry["flows"]) for entry in run["convergence"]] == [1, 1]
        # The series it was computed from: rates per 100 ms and the backlog, in time order, within the buffer.
        times = [sample["t"] for sample in run["rates"]]
        assert len(times) > 10 and times == sorted(times)
        assert run["queue"] and run["queue_peak_bytes"] <= max(backlog for _, backlog in run["queue"]) <= 85000
        assert run["drops"] >= 0 and run["timeouts"] >= 0 and run["ce_marks"] is None
        assert (out / f"fairness-{run['scheme']}.png").read_bytes().startswith(b"\x89PNG")
    lossless = document["runs"][1]
    assert lossless["packet_bytes"] <= 1500
    assert ovs_bridges() == before
