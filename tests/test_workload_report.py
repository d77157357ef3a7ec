"""The workload experiment's summary, table, results page, regime search and trade-off (no network)."""

import json

import pytest

from otcp.experiments import cli, workload
from otcp.experiments.analysis import fct, report, results, workload_report
from support.summaries import a_run


def a_workload_run(scheme="default", fan_in=8, response_bytes=2000, qcts=(0.004, 0.005, 0.006, 0.25), rto=(3,),
                   flows=(), drops=10, buffer_bytes=85000):
    """A WorkloadRun made by the experiment's own functions from flows (size, fct) and query completions."""
    outcomes = [fct.FlowOutcome(size, seconds, fct.ideal_fct_s(size, fct.IdealPath(25e6 / 8, 0.0005)))
                for size, seconds in flows]
    queries = [fct.QueryOutcome(qct, index in rto) for index, qct in enumerate(qcts)]
    responses = [qct for qct in qcts for _ in range(fan_in)] if fan_in else []
    return workload.WorkloadRun(
        scheme=scheme, buffer_bytes=buffer_bytes, query_senders=fan_in, query_bytes=response_bytes if fan_in else 0,
        query_rate=len(qcts) / 10.0, hosts=9, seconds=10.0, seed=1, ceiling_mbps=24.0,
        buckets=workload.bucket_records(outcomes),
        short_flows=workload.bucket_records(outcomes, (fct.SHORT_FLOW_BYTES, None))[0], flows=len(outcomes),
        flows_finished=sum(1 for o in outcomes if o.fct_s is not None),
        queries=vars(fct.query_stats(queries if fan_in else [])).copy(),
        responses=workload.response_summary(responses), drops=drops, drops_aggregator=drops // 2, timeouts=len(rto),
        retransmissions=drops, background_mbps=None, peak_backlog_bytes=80000, mean_backlog_bytes=20000.0,
        cpu_busy_pct=55.0, cpu_busiest_pct=70.0, cpu_softirq_pct=5.0, cpu_steal_pct=0.0, switch_cpu_pct=40.0,
        ce_marks=None, generations=None, start_late_p99_ms=1.5, static_rwnd_bytes=None, sent=1000, delivered=990,
        unexplained=0)


def write(tmp_path, name, runs, command="otcp-experiment workload --topo star,8"):
    config = workload.WorkloadConfig(out=str(tmp_path / name), topo="star,8", load=0.5, size_scale=0.1,
                                     command=command.split())
    (tmp_path / name).mkdir()
    outcome = workload.WorkloadOutcome(ceilings=[results.CeilingSample(8, 85000, 1500, 24.0, 30.0)], runs=runs,
                                       rtts={85000: {2: 0.0005}})
    return workload.write_summary(config, outcome, {"commit": None, "modified": None})


MIX = [(5000, 0.003), (5000, 0.004), (50_000, 0.030), (500_000, 0.2), (2_000_000, None)]


def test_the_summary_holds_the_issue_fields_and_checks_against_the_schema(tmp_path):
    path = write(tmp_path, "w", [a_workload_run(flows=MIX)])
    document = json.loads(open(path).read())
    assert document["experiment"] == "workload" and document["base_rtts_ms"] == {"85000": {"2": 0.5}}
    (run,) = document["runs"]
    assert [b["upper_bytes"] for b in run["buckets"]] == [10_000, 100_000, 1_000_000, None]
    assert set(run["buckets"][0]) >= {"upper_bytes", "flows", "fct_p50_ms", "fct_p99_ms", "slowdown_p50",
                                      "slowdown_p99"}
    assert run["buckets"][3]["flows"] == 1 and run["buckets"][3]["unfinished"] == 1
    assert sum(b["flows"] for b in run["buckets"]) == run["flows"] == 5 and run["flows_finished"] == 4
    assert {"count", "qct_p50_ms", "qct_p99_ms", "timeouts"} <= set(run["queries"])
    assert run["queries"]["timeouts"] == 1 and run["short_flows"]["flows"] == 3
    for field in ("drops", "timeouts", "background_mbps", "scheme"):
        assert field in run
    with pytest.raises(results.SchemaError, match="drops"):
        results.check_run({**run, "drops": -1}, fields=workload.WORKLOAD_FIELDS)


def test_the_table_shows_every_run_and_failure():
    runs = [a_workload_run(flows=MIX), a_workload_run("otcp", flows=MIX, qcts=(0.004, 0.005, 0.005, 0.006), rto=())]
    table = workload.summary_table(runs, [results.Failure("dctcp", 8, 85000, "the agents did not start\nmore")])
    lines = table.splitlines()
    assert lines[0].split()[:5] == ["scheme", "buffer", "query", "<10k", "10k-100k"]
    assert lines[2].startswith("default") and "8x2000" in lines[2]
    assert "dctcp" in lines[4] and "FAILED: the agents did not start" in lines[4]
    assert workload.bucket_name(None, [10_000, None]) == ">=10k"


def test_regime_table_ratios_and_finding():
    runs = [a_workload_run("default", 8, 2000, qcts=(0.004, 0.004, 0.205, 0.205), rto=(2, 3)),
            a_workload_run("otcp", 8, 2000, qcts=(0.004, 0.004, 0.005, 0.005), rto=()),
            a_workload_run("default", 16, 2000, qcts=(0.01, 0.01, 0.01, 0.01), rto=()),
            a_workload_run("otcp", 16, 2000, qcts=(0.01, 0.01, 0.01, 0.02), rto=())]
    found = {(r.point, r.scheme): r for r in workload_report.regimes([vars(run) for run in runs])}
    low = found[(("", 85000, 8, 2000), "otcp")]
    # Means 104.5 ms against 4.5 ms; p95 (rank 2.85 of 4) 205 against 5 ms.
    assert low.qct_mean == pytest.approx(104.5 / 4.5) and low.qct_p95 == pytest.approx(41.0)
    assert found[(("", 85000, 16, 2000), "otcp")].qct_p95 == pytest.approx(10 / 18.5)
    rows = [vars(run) for run in runs]
    table = workload_report.regime_table(rows)
    assert "| - | 85 kB | 8 | 2000 | otcp | 104.5 / 205.0 | 4.5 / 5.0 | 23.2x / 41.0x |" in table
    finding = workload_report.regime_finding(rows)
    assert "largest QCT ratio at the mean, otcp against default: 23.2x" in finding and "does not reach the paper's 12x" \
        not in finding.splitlines()[0]
    assert "largest QCT ratio at the p95, otcp against default: 41.0x" in finding and "reaches the paper's 31x" in finding
    assert "2 of 4 queries seeing a retransmission timeout" in finding
    # 20 000 B mean queue at 24 Mb/s: 6.7 ms of waiting for a response that meets it.
    assert "queue there averaged 20.0 kB (6.7 ms at 24.0 Mb/s) under default" in finding
    assert workload_report.regime_table(rows[:2]) == ""  # one point: no regime table


def test_the_tradeoff_puts_incast_goodput_beside_short_flow_slowdown_and_drops():
    incast = [a_run(scheme="default", senders=32, goodput_mbps=20.0, ceiling_mbps=95.0, drops=5000, timeouts=200),
              a_run(scheme="default", senders=8, goodput_mbps=90.0, ceiling_mbps=95.0),
              a_run(scheme="otcp", senders=32, goodput_mbps=90.0, ceiling_mbps=95.0, drops=600, timeouts=3)]
    work = [vars(a_workload_run("default", flows=MIX, drops=40)), vars(a_workload_run("otcp", flows=MIX, drops=2)),
            vars(a_workload_run("static-rwnd", flows=MIX, drops=0))]
    rows = workload_report.tradeoff_rows(incast, work)
    assert [row.scheme for row in rows] == ["default", "static-rwnd", "otcp"]
    default = rows[0]
    assert default.senders == 32 and default.goodput_share == pytest.approx(20 / 95)
    assert (default.incast_drops, default.incast_timeouts, default.workload_drops) == (5000, 200, 40)
    assert rows[1].goodput_share is None and rows[1].workload_drops == 0
    table = workload_report.tradeoff_table(rows)
    assert "| default | 21 % | 5000 / 200 |" in table and "| static-rwnd | - | - / - |" in table


def test_report_renders_workload_pages_and_draws_the_tradeoff(tmp_path, capsys):
    write(tmp_path, "work", [a_workload_run(flows=MIX), a_workload_run("otcp", flows=MIX, rto=())])
    incast_dir = tmp_path / "incast"
    incast_dir.mkdir()
    (incast_dir / "summary.json").write_text(json.dumps({"ceiling_mbps": 95.0, "runs": [a_run(senders=32)],
                                                         "command": "otcp-experiment incast --quick"}))
    page_path, plot = tmp_path / "page.md", tmp_path / "tradeoff.png"
    assert cli.main(["report", str(incast_dir), str(tmp_path / "work"), "--markdown", "--output", str(page_path),
                     "--tradeoff-plot", str(plot)]) == 0
    page = page_path.read_text()
    assert "## What each scheme pays for what it gets" in page and "![the trade-off per scheme](tradeoff.png)" in page
    tradeoff_section = page.split("## What each scheme pays for what it gets", 1)[1].split("\n## ", 1)[0]
    assert "Made by: `otcp-experiment incast --quick`; `otcp-experiment workload --topo star,8`" in tradeoff_section
    assert "## star,8, 85 kB buffers, queries of 8 x 2000 B" in page and "**FCT slowdown per flow size" in page
    assert "Made by: `otcp-experiment workload --topo star,8`" in page
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert report.main([str(tmp_path / "work")]) == 0
    assert "**Queries**" in capsys.readouterr().out


@pytest.mark.parametrize("argv, problem", [
    (["--query-senders", "8"], "go together"),
    (["--query-senders", "8", "--query-bytes", "2000"], "need a rate"),
    (["--query-rate", "5"], "no queries"),
    (["--query-senders", "40", "--query-bytes", "2000", "--query-rate", "5", "--topo", "star,8"], "8 hosts besides"),
    (["--load", "0"], "nothing to run"),
    (["--load", "nan"], "--load"),
    (["--topo", "ring,4"], "not a topology"),
    (["--topo", "star,4,bw=10"], "bw comes from its own option"),
    (["--schemes", "default,bogus"], "unknown scheme"),
    (["--seconds", "0"], "--seconds"),
    (["--size-scale", "-1"], "--size-scale"),
])
def test_workload_options_are_checked(argv, problem, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.workload_config_from_args(cli.build_parser().parse_args(["workload", *argv]), cli.build_parser())
    assert exit_info.value.code == 2
    assert problem in capsys.readouterr().err


def test_the_quick_preset_and_explicit_options():
    parser = cli.build_parser()
    quick = cli.workload_config_from_args(parser.parse_args(["workload", "--quick"]), parser)
    assert quick.topo == cli.WORKLOAD_QUICK["topo"] and quick.query_senders == [int(cli.WORKLOAD_QUICK["query_senders"])]
    regime = cli.workload_config_from_args(parser.parse_args(
        ["workload", "--topo", "star,32", "--load", "0", "--query-senders", "8,16,32", "--query-bytes", "2000,65536",
         "--query-load", "0.2", "--background-flows", "2", "--buffer-bytes", "85000,512000"]), parser)
    assert regime.points() == [(8, 2000), (8, 65536), (16, 2000), (16, 65536), (32, 2000), (32, 65536)]
    assert regime.mix() is None and regime.buffers == [85000, 512000]
    assert regime.queries("h1", 8, 2000).rate_per_s == pytest.approx(0.2 * 25e6 / 8 / 16000)
    # Each distribution's sizes are scaled for the emulator unless told otherwise.
    for name, scale in (("websearch", 0.1), ("datamining", 0.01)):
        assert cli.workload_config_from_args(parser.parse_args(["workload", "--distribution", name]),
                                             parser).size_scale == scale
    assert cli.workload_config_from_args(parser.parse_args(["workload", "--size-scale", "1"]), parser).size_scale == 1


def test_runs_of_two_fabrics_stay_apart_and_the_tradeoff_takes_the_mix_most_schemes_ran(tmp_path):
    star = [a_workload_run(scheme, flows=MIX) for scheme in ("default", "otcp", "dctcp")]
    regime = [a_workload_run(scheme, buffer_bytes=32000) for scheme in ("default", "otcp")]
    documents = [({"topo": "star,8", "runs": [vars(run) for run in star]}, "star"),
                 ({"topo": "star,16", "runs": [vars(run) for run in regime]}, "regime"),
                 ({"topo": "leafspine,2,2,4", "runs": [vars(run) for run in star]}, "leafspine")]
    merged = workload_report.merged_runs(documents)
    # The same scheme and point on two fabrics: both kept, each with its summary's fabric.
    assert len(merged) == 8 and {run["topo"] for run, _ in merged} == {"star,8", "star,16", "leafspine,2,2,4"}
    runs = [run for run, _ in merged]
    # The regime's point sorts first, but has no mix; star and leaf-spine tie on schemes: the first given wins.
    chosen = workload_report.tradeoff_point(runs)
    assert {run["topo"] for run in chosen} == {"star,8"} and len(chosen) == 3
    assert workload_report.tradeoff_point([run for run in runs if run["topo"] == "star,16"])[0]["topo"] == "star,16"
    assert "## star,16, 32 kB buffers, queries of 8 x 2000 B" in workload_report.sections(runs, None, "## ")
