"""The fairness experiment's record (otcp.experiments.fairness.summarize) on a hand-worked run."""

import types

import pytest

from otcp.experiments import fairness

MB = 1e6 / 8  # bytes in one megabit


def reports(intervals):
    """Byte-count reports every 0.5 s from per-interval rates: [(flow: Mb/s)] -> [{t, bytes}]."""
    counts, made = {}, [{"t": 0.0, "bytes": {"a": 0}}]
    for i, rates in enumerate(intervals, start=1):
        for flow, mbps in rates.items():
            counts[flow] = counts.get(flow, 0) + mbps * MB * 0.5
        made.append({"t": i * 0.5, "bytes": dict(counts)})
    return made


def test_a_staggered_pair_is_summarised_from_its_steady_part():
    # Flow a alone at 80 Mb/s for 1 s; b arrives at 1 s and both run at 40 for 1 s; then 60 and 20.
    # The hold is 2 s after the last arrival (1 s): the steady part is (2 s, 3 s], its intervals at 60 / 20.
    intervals = [{"a": 80}, {"a": 80}, {"a": 40, "b": 40}, {"a": 40, "b": 40}, {"a": 60, "b": 20},
                 {"a": 60, "b": 20}]
    config = fairness.FairnessConfig(out="unused", flows=2, stagger_s=1.0, hold_s=2.0, schemes=["default"])
    backlog = types.SimpleNamespace(series=[(-0.5, 70000), (0.0, 0), (1.0, 1000), (2.0, 3000), (3.0, 2000),
                                            (3.5, 9999)])
    run = fairness.summarize("default", reports(intervals), {"a": 0.0, "b": 1.0}, 3.0, backlog, 80.0, config,
                             packet_bytes=1500, drops=2, timeouts=1, ce_marks=None)
    assert run["flow_means_mbps"] == pytest.approx({"a": 60.0, "b": 20.0})
    assert run["goodput_steady_mbps"] == pytest.approx(80.0) and run["share_of_ceiling"] == pytest.approx(1.0)
    assert run["jain_steady"] == pytest.approx(80**2 / (2 * (60**2 + 20**2)))  # 0.8
    # Each arrival: within 10 % of its fair share (80, then 40 each) from the first interval after it, for 0.5 s.
    assert run["convergence"] == [{"flows": ["a"], "arrival_s": 0.0, "converged_after_s": 0.5},
                                  {"flows": ["b"], "arrival_s": 1.0, "converged_after_s": 0.5}]
    # The queue while the flows ran (0..3 s), not before or after.
    assert (run["queue_peak_bytes"], run["queue_mean_bytes"]) == (3000, 1500.0)
    assert (run["drops"], run["timeouts"], run["packet_bytes"]) == (2, 1, 1500)
    assert [sample["t"] for sample in run["rates"]] == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]


def test_a_flow_that_never_reaches_its_share_has_no_convergence_time():
    intervals = [{"a": 80}, {"a": 80}, {"a": 70, "b": 10}, {"a": 70, "b": 10}]
    config = fairness.FairnessConfig(out="unused", flows=2, stagger_s=1.0, hold_s=1.0, schemes=["default"])
    run = fairness.summarize("default", reports(intervals), {"a": 0.0, "b": 1.0}, 2.0,
                             types.SimpleNamespace(series=[]), 80.0, config, packet_bytes=1500, drops=0, timeouts=0,
                             ce_marks=None)
    assert run["convergence"][1]["converged_after_s"] is None
    assert run["queue_peak_bytes"] == 0 and run["queue_mean_bytes"] == 0.0


def test_a_scheme_whose_run_failed_is_a_row_with_its_error():
    document = {"runs": [], "failures": [{"scheme": "otcp-lossless", "senders": 4, "buffer_bytes": 85000,
                                          "error": "the flow sink did not start: no such port\nTraceback ..."}]}
    rows = fairness.summary_table(document).splitlines()
    assert rows[2].split()[:3] == ["otcp-lossless", "4", "FAILED:"]
    assert rows[2].endswith("the flow sink did not start: no such port")


def test_the_configuration_keeps_its_one_buffer():
    config = fairness.FairnessConfig(out="unused", flows=3, stagger_s=2.0, hold_s=4.0, schemes=["default"],
                                     buffers=[512000])
    assert (config.buffer_bytes, config.duration_s) == (512000, 8.0)
