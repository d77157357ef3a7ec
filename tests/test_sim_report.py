"""The report on simulated runs: their own tables (completion against the ideal round, the queue,
duplicate segments, the cost) in place of the CPU's, the cost table, and the validation table of
simulated runs against emulated ones; and the simulate command's checks of its arguments."""

import json

import pytest

from otcp.experiments import cli
from otcp.experiments.analysis import report
from tests.test_experiment_results import a_run


def a_sim_run(**changes):
    run = a_run(ideal_ms=100.0, queue_mean_bytes=20500.0, duplicate_segments=7, wall_per_sim_s=12.5,
                wall_s=5.0, events=500000, max_rss_mb=80.0, topo="--topo leafspine,26,4,40", bw_gbps=10.0,
                placement="next", ecn_k_bytes=None, retransmissions=9, sim_seconds=0.9, rounds_seconds=0.4,
                cpu_s=4.9)
    run.update(changes)
    return run


def test_simulated_runs_get_their_tables_and_not_the_cpus():
    runs = [a_sim_run(fct_p50_ms=150.0, fct_p99_ms=320.0), a_sim_run(scheme="static-rwnd", timeouts=0)]
    text = report.report(runs)
    assert "1.50x / 3.20x" in text and "84 / 20.5" in text and "30 / 7" in text and "12.5 s / 80 MB" in text
    assert "CPU during the rounds" not in text
    assert "static-rwnd did not time out up to 16 senders" in text and "default first timed out at 16" in text
    # Emulated runs keep the CPU's table and get none of the simulator's.
    emulated = report.report([a_run()])
    assert "CPU during the rounds" in emulated and "ideal round" not in emulated


def test_the_cost_table_groups_by_topology_rate_and_senders():
    runs = [a_sim_run(senders=100, wall_per_sim_s=3.0), a_sim_run(senders=100, scheme="dctcp", wall_per_sim_s=5.0,
                                                                   max_rss_mb=90.0),
            a_sim_run(senders=1000, wall_per_sim_s=40.0), a_run()]
    table = report.cost_table(runs)
    assert "| leafspine,26,4,40 | 10 Gb/s | 100 | 2 | 5.0 (3.0-5.0) | 100k | 90 MB |" in table
    assert "| 1000 | 1 | 40.0 (40.0-40.0) |" in table
    assert report.cost_table([a_run()]) == ""


def write(directory, runs, command):
    directory.mkdir()
    (directory / "summary.json").write_text(json.dumps({"runs": runs, "command": command}))
    return str(directory)


def test_the_validation_table_gives_simulated_over_emulated_per_cell(tmp_path):
    emulated = write(tmp_path / "mininet", [a_run(senders=4, sru_bytes=65536, goodput_mbps=47.5, ceiling_mbps=95.0,
                                                  drops=400, fct_p95_ms=50.0),
                                            a_run(senders=8, sru_bytes=65536, drops=0)], "otcp-experiment incast")
    simulated = write(tmp_path / "sim", [a_sim_run(senders=4, sru_bytes=65536, goodput_mbps=45.0, ceiling_mbps=90.0,
                                                   drops=440, fct_p95_ms=40.0),
                                         a_sim_run(senders=8, sru_bytes=65536, drops=0)],
                      "otcp-experiment simulate incast")
    table = report.validation(emulated, simulated)
    assert "## Validation: sim against mininet" in table and "**64 KB per server**" in table
    assert "| 4 | 1.00, 1.10, 0.80<br>(50 %, 400, 50)<br>RTOs 30 / 30; switch 71 % |" in table
    assert "| 8 | 1.00, 1.00, 1.00" in table
    assert "Made by: `otcp-experiment simulate incast` against `otcp-experiment incast`" in table


def test_a_folder_of_emulated_sweeps_is_validated_as_one(tmp_path):
    (tmp_path / "mininet").mkdir()
    write(tmp_path / "mininet" / "a", [a_run(senders=4, sru_bytes=65536, drops=400)], "mn 4")
    write(tmp_path / "mininet" / "b", [a_run(senders=8, sru_bytes=65536, drops=100)], "mn 8")
    simulated = write(tmp_path / "sim", [a_sim_run(senders=n, sru_bytes=65536, drops=200) for n in (4, 8)], "sim")
    table = report.validation(str(tmp_path / "mininet"), simulated)
    assert "## Validation: sim against mininet" in table
    assert "| 4 | 1.00, 0.50, " in table and "| 8 | 1.00, 2.00, " in table
    assert table.endswith("Made by: `sim` against `mn 4`; `mn 8`")


def test_a_folder_of_simulated_sweeps_is_validated_as_one(tmp_path):
    emulated = write(tmp_path / "mininet", [a_run(senders=n, sru_bytes=65536, drops=400) for n in (4, 8)], "mn")
    (tmp_path / "sim").mkdir()
    write(tmp_path / "sim" / "a", [a_sim_run(senders=n, sru_bytes=65536, drops=200) for n in (4, 8)], "sim all")
    write(tmp_path / "sim" / "b", [a_sim_run(senders=8, sru_bytes=65536, drops=0)], "sim 8 again")
    table = report.validation(emulated, str(tmp_path / "sim"))
    # The later folder's run at 8 senders replaces the earlier one's.
    assert "| 4 | 1.00, 0.50, " in table and "| 8 | 1.00, 0.00, " in table
    assert table.endswith("Made by: `sim all`; `sim 8 again` against `mn`")


def test_a_gap_over_ten_percent_is_named_with_what_differs_between_the_runs(tmp_path):
    # Emulated: 80 % of its ceiling, 400 drops, p95 50 ms, no RTO, its switch at 93 %, queue empty 40 %.
    emulated = a_run(senders=16, sru_bytes=65536, goodput_mbps=76.0, ceiling_mbps=95.0, drops=400, fct_p95_ms=50.0,
                     timeouts=0, switch_cpu_pct=93.0, backlog_empty_pct=40.0, peak_backlog_bytes=84000)
    # Simulated: 50 % (0.625 of it), 405 drops (within the noise), p95 52 ms (1.04), 12 RTOs, never empty.
    simulated = a_sim_run(senders=16, sru_bytes=65536, goodput_mbps=45.0, ceiling_mbps=90.0, drops=405,
                          fct_p95_ms=52.0, timeouts=12, backlog_empty_pct=2.0, peak_backlog_bytes=83000)
    assert report.gaps(simulated, emulated) == ["goodput 0.62"]
    assert report.what_differs(simulated, emulated) == [
        "RTOs 12 simulated, 0 emulated", "the emulated switch's thread at 93 % of a core",
        "the emulated bottleneck queue empty in 40 % of samples (simulated 2 %)"]
    # Drops from none: a gap whatever the ratio, once past the noise; an equal pair has nothing to say.
    assert report.gaps(a_sim_run(drops=11, timeouts=0), a_run(drops=0, timeouts=0)) == ["drops inf"]
    same = a_run(timeouts=0, switch_cpu_pct=10.0, backlog_empty_pct=5.0)
    assert report.gaps(same, same) == [] and report.what_differs(same, same)[0].startswith("no counter differs")
    table = report.validation(write(tmp_path / "mininet", [emulated], "mn"), write(tmp_path / "sim", [simulated], "sim"))
    assert ("- 16 senders, default: goodput 0.62; RTOs 12 simulated, 0 emulated; the emulated switch's thread at "
            "93 % of a core; the emulated bottleneck queue empty in 40 % of samples (simulated 2 %)") in table


def test_each_directory_is_a_section_of_its_own(tmp_path):
    first = write(tmp_path / "imc", [a_sim_run()], "one")
    second = write(tmp_path / "dctcp", [a_sim_run(goodput_mbps=10.0)], "two")
    text = report.page([first, second], "T", str(tmp_path), each=True)
    assert "## imc" in text and "## dctcp" in text and "### 256 KB per server" in text
    assert text.count("Made by: `one`") >= 1 and text.count("Made by: `two`") >= 1
    assert "## Cost of the simulations" in text
    (tmp_path / "imc" / "goodput.png").write_bytes(b"png")
    assert "goodput.png" in report.page([first], "T", str(tmp_path), each=True)
    assert "goodput.png" not in report.page([first], "T", str(tmp_path), each=True, plots=False)


@pytest.mark.parametrize("argv, message", [
    (["--senders", "4", "--sru-bytes", "100", "--bw-gbps", "0", "--buffer-bytes", "85000", "--rounds", "1"],
     "--bw-gbps: 0.0 is out of range"),
    (["--senders", "4,4", "--sru-bytes", "100", "--bw-gbps", "1", "--buffer-bytes", "85000", "--rounds", "1"],
     "--senders: 4,4 lists a value twice"),
    (["--senders", "4", "--sru-bytes", "100", "--bw-gbps", "1", "--buffer-bytes", "85000", "--rounds", "1",
      "--schemes", "small-packets"], "--schemes: 'small-packets'"),
    (["--senders", "4", "--sru-bytes", "100", "--bw-gbps", "1", "--buffer-bytes", "85000", "--rounds", "1",
      "--uplink-delay-us", "5,x"], "--uplink-delay-us: 'x' is not a number"),
    (["--senders", "4", "--sru-bytes", "100", "--bw-gbps", "nan", "--buffer-bytes", "85000", "--rounds", "1"],
     "--bw-gbps: nan is out of range"),
    (["--senders", "4", "--sru-bytes", "100", "--bw-gbps", "1", "--buffer-bytes", "85000", "--rounds", "1",
      "--fan-in-queue-fraction", "1.5"], "--fan-in-queue-fraction: 1.5 is out of range"),
])
def test_bad_simulate_arguments_exit_2_naming_the_option(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["simulate", "incast", *argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_fabric_too_small_for_the_senders_is_refused_before_anything_runs(capsys, tmp_path):
    status = cli.main(["simulate", "incast", "--topo", "leafspine,2,1,2", "--senders", "8", "--sru-bytes", "100",
                       "--bw-gbps", "1", "--buffer-bytes", "85000", "--rounds", "1", "--out", str(tmp_path / "o")])
    assert status == 2 and "--senders: 8 senders placed 'next' need 8 hosts; the fabric has 3" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_otcp_losslesss_targets_are_judged_per_sender_count():
    met = [a_sim_run(scheme="otcp-lossless", senders=n, timeouts=0, drops=0, fct_p99_ms=110.0) for n in (100, 500)]
    assert "otcp-lossless met its targets at every sender count (100, 500): 0 RTOs, 0 drops, p99 at most 1.10x" \
        in report.lossless_targets(met)
    missed = met + [a_sim_run(scheme="otcp-lossless", senders=1000, timeouts=0, drops=3, fct_p99_ms=130.0)]
    assert "missed its targets (0 RTOs, 0 drops, p99 within 1.2x the ideal) at 1000 senders (0 RTOs, 7 spurious " \
        "retransmissions (duplicate segments at the receivers), 3 drops, p99 1.30x; queue peak 84,000 B, mean " \
        "20,500 B, the plan's target 21,250 B: 0.25 of the buffer)" in report.lossless_targets(missed)
    assert "the plan's target 42,500 B: 0.5 of the buffer)" in report.lossless_targets(missed, lambda run: 0.5)
    assert report.lossless_targets([a_run(scheme="otcp-lossless")]) == ""
    # otcp-admit is judged the same, on a line of its own.
    admitted = [a_sim_run(scheme="otcp-admit", senders=n, timeouts=0, drops=0, fct_p99_ms=101.0) for n in (100, 500)]
    assert report.lossless_targets(missed + admitted).splitlines()[1] == \
        "- otcp-admit met its targets at every sender count (100, 500): 0 RTOs, 0 drops, p99 at most 1.01x the ideal"


def test_the_queue_target_is_the_commands_or_the_default():
    def sweep(command):
        return report.Sweep("d", {"command": command} if command else {})
    assert sweep("otcp-experiment simulate incast --queue-target-fraction 0.5 --rounds 2").queue_target_fraction == 0.5
    assert sweep("otcp-experiment simulate incast --queue-target-fraction=0.1").queue_target_fraction == 0.1
    assert sweep("otcp-experiment simulate incast --rounds 2").queue_target_fraction == 0.25
    assert sweep(None).queue_target_fraction == 0.25


def test_a_fixed_block_per_round_is_one_table_across_sender_counts():
    runs = [a_sim_run(senders=n, sru_bytes=-(-1_000_000 // n), total_bytes=1_000_000) for n in (10, 30)]
    text = report.report([*runs, a_sim_run(senders=4, sru_bytes=65536)])
    assert "**1 MB per round over the servers: drops at the bottleneck / RTOs**" in text
    assert "| 10 |" in text and "| 30 |" in text and "**64 KB per server: drops" in text
    assert text.count("drops at the bottleneck / RTOs**") == 2


def test_otcp_dctcp_is_set_against_dctcp_wherever_dctcp_timed_out():
    runs = [a_sim_run(scheme="dctcp", senders=20, timeouts=0, fct_mean_ms=10.0, fct_p95_ms=11.0, fct_p50_ms=10.0),
            a_sim_run(scheme="dctcp", senders=40, timeouts=12, fct_mean_ms=80.0, fct_p95_ms=210.0, fct_p50_ms=20.0),
            a_sim_run(scheme="otcp+dctcp", senders=20, timeouts=0, fct_mean_ms=10.0, fct_p95_ms=11.0,
                      fct_p50_ms=10.0),
            a_sim_run(scheme="otcp+dctcp", senders=40, timeouts=3, fct_mean_ms=20.0, fct_p95_ms=30.0, fct_p50_ms=20.0)]
    findings = report.dctcp_findings(runs)
    assert "dctcp first timed out at 40 senders (12 RTOs)" in findings
    assert "- at 40 senders, dctcp against otcp+dctcp: mean 80.0 / 20.0 ms = 4.00x, p95 210.0 / 30.0 ms = 7.00x, " \
        "p50 20.0 / 20.0 ms = 1.00x; RTOs 12 / 3" in findings
    assert "at 20 senders" not in findings
    # Where dctcp never timed out, the most congested point both ran.
    assert "- at 20 senders" in report.dctcp_findings(runs[:1] + runs[2:3])


def test_static_rto_min_values_are_set_against_otcps_per_path_ones(tmp_path):
    setting = {"topo": "--topo leafspine,4,2,32", "placement": "rack", "senders": 31, "sru_bytes": 65536,
               "ideal_ms": 2.0}
    plain = write(tmp_path / "paths", [a_sim_run(scheme="default", fct_p50_ms=400.0, fct_p99_ms=410.0, **setting),
                                       a_sim_run(scheme="fine-rto", fct_p50_ms=20.0, fct_p99_ms=22.0, **setting),
                                       a_sim_run(scheme="otcp", fct_p50_ms=2.0, fct_p99_ms=2.2, timeouts=0,
                                                 duplicate_segments=0, drops=0, **setting)],
                  "otcp-experiment simulate incast --schemes default,fine-rto,otcp")
    five = write(tmp_path / "rto5", [a_sim_run(scheme="fine-rto", fct_p50_ms=30.0, fct_p99_ms=31.0, **setting)],
                 "otcp-experiment simulate incast --schemes fine-rto --fine-rto-ms 5")
    table = report.static_values([report.Sweep.load(plain), report.Sweep.load(five)])
    assert "| setting | rto_min 1 ms | rto_min 5 ms | rto_min 200 ms | otcp |" in table
    assert "| leafspine,4,2,32, rack, 31 x 64 KB | **10.00x / 11.00x; 30 / 7 / 120** | 15.00x / 15.50x; 30 / 7 / 120 " \
        "| 200.00x / 205.00x; 30 / 7 / 120 | 1.00x / 1.10x; 0 / 0 / 0 |" in table
    # default's and fine-rto's alone are no sweep of values.
    assert report.static_values([report.Sweep.load(plain)]) == ""
