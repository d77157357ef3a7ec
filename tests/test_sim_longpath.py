"""The ns-3 long-path runs (otcp.experiments.sim.longpath, the program's longpath mode) on
small paths that simulate in a second: one loss at full rate against the formulas, the
planner's values in the scenarios, RTT fairness, and the results page from summaries."""

import json
import math

import pytest

from otcp.experiments.sim import longpath
from otcp.experiments.sim.scenario import SimulationError
from otcp.experiments.sim.scenario import run as run_scenario
from otcp.planning import formulas


def recovery(cc, rate_bps, rtt_s):
    result = run_scenario(longpath.responsiveness_scenario(cc, rate_bps, rtt_s, max_sim_s=60)).result
    assert result["drop_s"] is not None and result["recovered_s"] is not None, result
    return result["recovered_s"] - result["drop_s"], result


def test_the_scenario_takes_the_planners_ssthresh_and_the_bdp_buffer():
    scenario = longpath.responsiveness_scenario("scalable", 100e6, 0.12, 30)
    # 100 Mb/s x 120 ms = 1 500 000 B: floor(1 500 000 / 1448) = 1035 segments, the planner's ssthresh alone.
    assert scenario["flows"] == [{"rtt_s": 0.12, "cc": "scalable", "ssthresh_segments": 1035}]
    assert scenario["buffer_bytes"] == 1_500_000 and scenario["drop"]["after_full_s"] == 2 * 0.12
    fair = longpath.fairness_scenario(True, 10, 2_000_000)
    # GridDT: A = round(2 x (rtt / 100 ms)^2): 6.55 -> 7 at 181 ms, 2.74 -> 3 at 117 ms; each flow's share is 1/2.
    assert [(f["increase"], f["ssthresh_segments"]) for f in fair["flows"]] == [(7.0, 7812), (3.0, 5050)]
    assert {f["cc"] for f in longpath.fairness_scenario(False, 10, 2_000_000)["flows"]} == {"reno"}
    # The paper's jumbo frames: 9000 - 52 = 8948 B segments; floor(62.5e6 x 0.181 / 8948) = 1264, 817 at 117 ms.
    jumbo = longpath.fairness_scenario(True, 10, 2_000_000, mtu_bytes=9000)
    assert (jumbo["mss_bytes"], jumbo["mtu_bytes"]) == (8948, 9000)
    assert [(f["increase"], f["ssthresh_segments"]) for f in jumbo["flows"]] == [(7.0, 1264), (3.0, 817)]


def test_after_one_loss_reno_takes_the_aimd_formula_and_scalable_a_few_round_trips():
    """10 Mb/s over 80 ms (69 segments): Reno climbs from half the window at one segment per
    round trip, 0.9 x C RTT^2 / (2 MSS) = 2.49 s to 95 %; otcp_scalable's rules lose an eighth
    and come back at 1 % per round trip, whatever the rate: a handful of round trips."""
    reno, _ = recovery("reno", 10e6, 0.08)
    formula = longpath.formula_seconds("reno", 10e6, 0.08)
    assert formula == pytest.approx(0.9 * 10e6 / 8 * 0.08**2 / (2 * 1448))
    assert reno == pytest.approx(formula, rel=0.2), (reno, formula)
    scalable, result = recovery("scalable", 10e6, 0.08)
    assert scalable < 12 * 0.08 and scalable < reno / 5, (scalable, reno)
    assert result["bottleneck_drops"] == 0  # the one loss was the dropped packet
    assert longpath.formula_seconds("scalable", 1e9, 0.2) == pytest.approx(
        0.2 * math.log(0.95 / 0.875) / math.log(1.01))


def test_griddt_evens_out_two_round_trips_that_reno_does_not():
    """Two flows of 181 and 117 ms through 10 Mb/s for 60 s: Reno gives the shorter round trip
    more; GridDT's planned increases bring Jain's index up."""
    rows = {}
    for griddt in (False, True):
        scenario = longpath.fairness_scenario(griddt, 60, 30_000)
        scenario["bottleneck_bps"] = 10_000_000
        for flow in scenario["flows"]:  # the share of 10 Mb/s, not of 1 Gb/s
            flow["ssthresh_segments"] = int(formulas.initial_ssthresh_segments(10e6 / 8 / 2, flow["rtt_s"]))
        result = run_scenario(scenario).result
        rates = [sum(bins[20:]) * 8 / (len(bins[20:]) * result["bin_s"]) for bins in result["bins_bytes"]]
        rows[griddt] = rates, longpath.jain(rates)
    (slow, fast), plain = rows[False]
    assert fast > slow and rows[True][1] > plain, rows


def test_skipping_the_idle_lost_scan_changes_no_figure():
    """The program's NextSeg (src/next_seg.h) skips ns-3's walk of the sent list when nothing is
    marked lost: every run gives the same result with and without it, event for event: one loss
    and its SACK recovery (Reno, Cubic, otcp_scalable), and two flows through a small buffer
    (GridDT)."""
    cases = [longpath.responsiveness_scenario(cc, 10e6, 0.08, 30) for cc in ("reno", "cubic", "scalable")]
    fair = longpath.fairness_scenario(True, 20, 30_000)
    fair["bottleneck_bps"] = 10_000_000
    for scenario in (*cases, fair):
        assert scenario["skip_idle_lost_scan"] is True
        skipped = run_scenario(scenario).result
        walked = run_scenario({**scenario, "skip_idle_lost_scan": False}).result
        assert skipped == walked, scenario
        assert "drop" not in scenario or skipped["recovered_s"] > skipped["drop_s"] > 0  # a loss, recovered


def test_a_bad_scenario_is_refused_with_the_programs_words():
    scenario = longpath.responsiveness_scenario("vegas", 10e6, 0.08, 5)
    with pytest.raises(SimulationError, match="unknown cc vegas"):
        run_scenario(scenario)
    scenario = longpath.responsiveness_scenario("reno", 10e6, 0.0005, 5)
    with pytest.raises(SimulationError, match="rtt_s is below the core's round trip"):
        run_scenario(scenario)
    scenario = {**longpath.fairness_scenario(False, 5, 30_000, mtu_bytes=9000), "mtu_bytes": 1500}
    with pytest.raises(SimulationError, match="mss_bytes 8948 plus 52 B of headers exceeds mtu_bytes 1500"):
        run_scenario(scenario)


def test_jumbo_frames_carry_whole_segments_and_report_progress():
    """At MTU 9000 every packet on the bottleneck is one 8948 B segment and its 52 B of headers (ns-3
    would fragment a segment the links' MTU cannot carry); progress lines come every progress_s."""
    scenario = {**longpath.fairness_scenario(False, 4, 60_000, mtu_bytes=9000), "progress_s": 1.0}
    scenario["bottleneck_bps"] = 10_000_000
    seen = []
    result = run_scenario(scenario, on_progress=seen.append).result
    assert [round(message["t"]) for message in seen] == [1, 2, 3] and seen[0]["end"] == 4  # the stop comes first at 4
    read = sum(sum(bins) for bins in result["bins_bytes"])
    sent = sum(result["link_bins_bytes"])
    assert read > 0 and read % 8948 == 0  # the receiver reads whole segments
    assert sent >= read and (sent - read) / sent < 0.2, (sent, read)


def test_the_page_shows_formula_and_simulation_side_by_side():
    rows = [{"name": "resp-reno-100mbps-120ms", "cc": "reno", "rate_bps": 100e6, "rtt_s": 0.12, "formula_s": 55.94,
             "aimd_full_s": 62.15, "measured_s": 52.4, "sim_s": 54.0, "events": 5, "cpu_s": 27.0, "max_rss_mb": 30.0,
             "bottleneck_drops": 0, "lowest_after_loss": 0.52},
            {"name": "resp-reno-2500mbps-200ms", "cc": "reno", "rate_bps": 2.5e9, "rtt_s": 0.2, "formula_s": 3840.0,
             "aimd_full_s": 4267.0, "skipped": "too long"}]
    fair = [{"name": "fair-griddt", "griddt": True, "increase": [7.0, 3.0], "rates_bps": [4.5e8, 5e8],
             "jain": longpath.jain([4.5e8, 5e8]), "measured_from_s": 20, "measured_to_s": 120}]
    page = longpath.page([{"responsiveness": rows}, {"fairness": fair}], "CMD")
    assert "    CMD" in page
    assert "| 120 ms | 0.1 Gb/s | 62.15 s | 55.94 s | 52.40 s | - | - | - |" in page
    assert "| 200 ms | 2.5 Gb/s | 1.19 h | 1.07 h | not simulated |" in page
    assert "| GridDT, planned A | 1500 B | 7 / 3 | 20-120 s | 450 Mb/s | 500 Mb/s | 95% | 0.997 | - |" in page


def test_the_no_harm_section_compares_each_scheme_of_the_two_runs():
    run = {"scheme": "otcp", "goodput_mbps": 900.5, "fct_p99_ms": 9.1, "drops": 0, "timeouts": 0}
    lines = longpath.no_harm_lines({"runs": [run, {**run, "scheme": "default", "drops": 5}]},
                                   {"runs": [run, {**run, "scheme": "default", "drops": 7}]})
    assert "| otcp | 900.5 / 900.5 | 9.1 / 9.1 | 0 / 0 | 0 / 0 | yes |" in lines
    assert "| default | 900.5 / 900.5 | 9.1 / 9.1 | 5 / 7 | 0 / 0 | no |" in lines


def test_fairness_figures_hand_worked():
    """Two flows, 1 s bins, 4 s: flow 0 reads 125 000 B every second (1 Mb/s), flow 1 125 000 B then
    375 000 B (1 then 3 Mb/s) in alternate seconds. From second 2 on: 1 and 2 Mb/s, Jain
    9 / (2 x 5) = 0.9; per 2 s window both windows are 1 and 2 Mb/s."""
    result = {"bin_s": 1.0, "bins_bytes": [[125_000] * 4, [125_000, 375_000] * 2], "bottleneck_drops": 3,
              "events": 9}
    assert longpath.window_rates(result, 2.0) == [[1e6, 1e6], [2e6, 2e6]]
    figures = longpath.fairness_figures(result, 2.0)
    assert figures["rates_bps"] == [1e6, 2e6] and figures["jain"] == pytest.approx(0.9)
    assert (figures["measured_from_s"], figures["measured_to_s"]) == (2.0, 4.0)
    assert figures["link_share"] == pytest.approx(3e6 / 1e9)


def test_the_page_command_draws_the_fairness_plot(tmp_path):
    result = {"bin_s": 1.0, "bins_bytes": [[125_000] * 300, [250_000] * 300], "bottleneck_drops": 0, "events": 1}
    rows = [{"name": f"fair-{name}", "griddt": griddt, "rtts_s": [0.181, 0.117], "increase": [a, 1.0],
             "mtu_bytes": 9000, **longpath.fairness_figures(result, 100.0)}
            for name, griddt, a in (("reno", False, 1.0), ("griddt", True, 7.0))]
    (tmp_path / "fair").mkdir()
    (tmp_path / "fair" / "summary.json").write_text(json.dumps({"fairness": rows, "command": "RUN"}))
    output = tmp_path / "pages" / "longpaths.md"
    output.parent.mkdir()
    assert longpath.main(["page", str(tmp_path / "fair"), "--output", str(output)]) == 0
    text = output.read_text()
    assert "![each flow's rate per 100 s](longpaths/fairness.png)" in text
    assert (output.parent / "longpaths" / "fairness.png").stat().st_size > 10_000
    assert "| Reno AIMD | 9000 B | 1 / 1 | 100-300 s | 1 Mb/s | 2 Mb/s | 0% | 0.900 | 0.900 - 0.900 |" in text
