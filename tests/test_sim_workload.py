"""The simulated workload: the Mininet workload's schedule as the scenario program's flow list, the
program's records as the flow clients' (workload.Pulled), the ideal on a declared fabric; then small
simulations whose counts add up and a single flow alone on an idle star at its hand-worked ideal."""

import io
import json

import pytest

from otcp.experiments import cli, workload
from otcp.experiments.analysis import report, results
from otcp.experiments.runner.progress import Progress
from otcp.experiments.sim import workload as sim_workload
from otcp.experiments.sim.schemes import catalogue
from otcp.experiments.traffic import arrivals
from tests.test_sim_report import a_sim_run, write


def config(tmp_path, **settings):
    values = {"out": str(tmp_path), "command": ["test"], "schemes": ["default"], "bw_mbps": 1000.0,
              "buffers": [85000], "topo": "star,4", "distribution": "websearch", "size_scale": 0.01, "load": 0.3,
              "query_senders": [4], "query_bytes": [5000], "query_rate": 200.0, "background_flows": 1,
              "seconds": 0.05, "warmup_seconds": 0.01, "drain_seconds": 1.0, "seed": 3, "bw_gbps": 1.0,
              "poll_interval_s": 0.01}
    values.update(settings)
    return sim_workload.SimWorkloadConfig(**values)


def test_the_flow_list_is_the_workloads_schedule_with_the_warm_up_before_it(tmp_path):
    cfg = config(tmp_path)
    hosts = cfg.build_fabric(85000).hosts
    assert hosts == ["h1", "h2", "h3", "h4", "h5"]  # the Mininet workload's star,4: no probe host
    measured = cfg.schedule(hosts, 4, 5000, "measured", cfg.seconds)
    warmup = cfg.schedule(hosts, 4, 5000, "warmup-1", cfg.warmup_seconds)
    assert measured.flows and measured.queries and measured.background
    flows = sim_workload.flow_list(measured, warmup, 0.01)
    ran = [flow for flow in flows if flow.measured]
    # The measured flows are every connection the Mininet flow clients would make, under their keys.
    assert {flow.key for flow in ran} == workload.expected_keys(measured)
    by_key = {flow.key: flow for flow in ran}
    for flow in measured.flows:
        assert by_key[f"f{flow.id}"] == sim_workload.ScenarioFlow(f"f{flow.id}", "mix", flow.src, flow.dst,
                                                                  0.01 + flow.start_s, flow.size_bytes, True)
    for query in measured.queries:
        for index, responder in enumerate(query.responders):
            response = by_key[f"q{query.id}/{index}"]
            assert (response.kind, response.src, response.dst, response.size_bytes) == \
                ("query", responder, "h1", 5000)
            assert response.start_s == pytest.approx(0.01 + query.start_s)
    (long_flow,) = [flow for flow in ran if flow.kind == "background"]
    assert (long_flow.start_s, long_flow.size_bytes, long_flow.dst) == (0.0, None, "h1")
    early = [flow for flow in flows if not flow.measured]
    assert len(early) == len(warmup.flows) + sum(len(q.responders) for q in warmup.queries)
    assert all(flow.key.startswith("w") and flow.start_s < 0.01 and flow.kind != "background" for flow in early)
    assert long_flow.as_json() == {"src": long_flow.src, "dst": "h1", "start_s": 0.0, "bytes": None,
                                   "kind": "background"}
    with pytest.raises(ValueError, match="does not end by the measured start"):
        sim_workload.flow_list(measured, warmup, 0.005)


def test_the_measured_schedule_starts_at_the_first_poll_after_the_warm_up(tmp_path):
    assert config(tmp_path, warmup_seconds=0.01, poll_interval_s=0.01).measure_start_s == pytest.approx(0.01)
    assert config(tmp_path, warmup_seconds=0.011, poll_interval_s=0.01).measure_start_s == pytest.approx(0.02)
    assert config(tmp_path, warmup_seconds=0.0).measure_start_s == 0.0


def test_the_programs_records_become_the_flow_clients(tmp_path):
    flows = [sim_workload.ScenarioFlow("wf0", "mix", "h2", "h1", 0.001, 1000, False),
             sim_workload.ScenarioFlow("f0", "mix", "h3", "h1", 0.012, 3000, True),
             sim_workload.ScenarioFlow("q0/0", "query", "h4", "h1", 0.013, 2000, True),
             sim_workload.ScenarioFlow("b0", "background", "h5", "h1", 0.0, None, True)]
    result = {"flows": [[0.001, 0.002, 1000, 0, 0], [0.012, 0.0125, 3000, 3000, 1], [0.013, None, 1448, 1448, 0],
                        [0.0, None, 90000, 60000, 0]]}
    pulled = sim_workload.pulled(flows, result, 0.01)
    assert set(pulled.connections) == {"f0", "q0/0", "b0"} and pulled.servers == {}
    done, stuck, long_flow = (pulled.connections[key] for key in ("f0", "q0/0", "b0"))
    assert done["start"] == pytest.approx(0.002) and done["end"] == pytest.approx(0.0025)
    assert done["scheduled"] == pytest.approx(0.002) and done["error"] is None and done["rto"] == 1
    assert stuck["end"] is None and stuck["error"] == sim_workload.UNFINISHED and stuck["bytes"] == 1448
    assert long_flow["error"] is None and long_flow["measured_bytes"] == 60000
    assert workload.timed_out(done, pulled.servers) and not workload.timed_out(stuck, pulled.servers)


def test_the_ideal_on_a_declared_star_hand_worked(tmp_path):
    fabric = config(tmp_path).build_fabric(85000)
    ideals = sim_workload.SimIdeals(fabric, 1e9)
    # Two links of 5 us, each carrying a ping's 86 B frame (0.688 us at 1 Gb/s) both ways.
    path = ideals.path("h2", "h1")
    assert (path.links, path.base_rtt_s) == (2, pytest.approx(4 * (5e-6 + 86 * 8 / 1e9)))
    # 10 full segments of 1448 B, each with 54 B of TCP, timestamps, IPv4 and PPP headers, and the
    # first frame once more on the second link; two round trips before.
    wire = 10 * (1448 + 54) + (1448 + 54)
    assert ideals.ideal_s("h2", "h1", 14480) == pytest.approx(2 * path.base_rtt_s + wire * 8 / 1e9)
    assert ideals.base_rtts(fabric.hosts) == {2: pytest.approx(path.base_rtt_s)}


def test_a_single_flow_alone_on_the_idle_star_takes_its_ideal(tmp_path):
    # 10 segments, the initial window: the handshake, the request, then every segment back to back. The
    # ideal, 177.68 us, is two base round trips (2 x 22.752 us: each of the four legs a ping's 86 B frame
    # on both links) and 11 frames of 1502 B at 1 Gb/s (132.176 us). The handshake's and the request's
    # frames are smaller than a ping's, and the data's leg is in the frames already: the flow takes at
    # most the ideal, and at least the ideal less every leg's ping frames (8 x 0.688 us).
    # Both schemes start with Linux's initial window of 10 (an OTCP plan may start lower).
    cfg = config(tmp_path, schemes=["default", "dctcp"], query_senders=[], query_bytes=[], query_rate=None,
                 background_flows=0, warmup_seconds=0.0)
    fabric = cfg.build_fabric(85000)
    schedule = arrivals.Schedule(0.01, 1, "measured", flows=(arrivals.Flow(0, 0.001, "h2", "h1", 14480),))
    flows = sim_workload.flow_list(schedule, None, 0.0)
    ideals = sim_workload.SimIdeals(fabric, 1e9)
    for scheme in ("default", "dctcp"):
        run, outcomes, queries, connections = sim_workload.run_scheme(
            cfg, fabric, catalogue()[scheme], schedule, flows, ideals, 85000, 1000.0,
            Progress(total=1, stream=io.StringIO()))
        (outcome,) = outcomes
        assert outcome.ideal_s == pytest.approx(177.68e-6, rel=1e-4)
        ping_frame_s = 86 * 8 / 1e9
        assert outcome.ideal_s - 8 * ping_frame_s <= outcome.fct_s <= outcome.ideal_s, scheme
        assert 0.96 < outcome.slowdown <= 1.0
        assert connections.connections["f0"]["bytes"] == 14480
        assert run.drops == run.timeouts == run.unexplained == 0 and run.sent == run.delivered
        assert queries == [] and run.flows_finished == run.flows == 1


def test_a_small_workload_adds_up(tmp_path, monkeypatch):
    cfg = config(tmp_path, schemes=["default", "otcp-lossless"], buffers=[30000])
    pulled = []
    run_scheme = sim_workload.run_scheme

    def keeping(*arguments):
        ran = run_scheme(*arguments)
        pulled.append(ran[3])
        return ran

    monkeypatch.setattr(sim_workload, "run_scheme", keeping)
    summary, outcome = sim_workload.run_workload(cfg, Progress(total=1, stream=io.StringIO()))
    assert summary is not None and not outcome.failures
    with open(summary, encoding="utf-8") as handle:
        document = json.load(handle)
    results.check_summary(document, sim_workload.SIM_WORKLOAD_FIELDS)
    assert document["experiment"] == "workload" and document["simulator"] == "ns-3"
    hosts = cfg.build_fabric(30000).hosts
    schedule = cfg.schedule(hosts, 4, 5000, "measured", cfg.seconds)
    assert [run["scheme"] for run in document["runs"]] == ["default", "otcp-lossless"]
    sizes = {f"f{flow.id}": flow.size_bytes for flow in schedule.flows}
    sizes.update({f"q{query.id}/{index}": 5000 for query in schedule.queries for index in range(4)})
    for run, (_, flows, queries), connections in zip(document["runs"], outcome.details, pulled, strict=True):
        # Every flow of the same schedule is counted once: finished, or unfinished in its bucket.
        assert run["flows"] == len(schedule.flows) == len(flows) == sum(b["flows"] for b in run["buckets"])
        assert run["flows_finished"] == sum(b["finished"] for b in run["buckets"])
        assert run["queries"]["count"] == len(schedule.queries) == len(queries)
        assert run["responses"]["count"] == 4 * len(schedule.queries)
        # Every packet sent in the measured time is delivered, dropped in a counted queue, or still in
        # flight at the end (a flow that never finished).
        lost = run["drops"] + run["host_queue_drops"]
        assert run["sent"] == run["delivered"] + lost + run["unexplained"]
        assert run["flows_finished"] < run["flows"] or run["unexplained"] == 0
        # A finished flow got its bytes, an unfinished one less.
        for key, size in sizes.items():
            record = connections.connections[key]
            assert record["bytes"] == size if record["error"] is None else record["bytes"] < size
        # Every timeout a measured flow saw at either end is among the run's, counted from its start.
        assert sum(record["rto"] for record in connections.connections.values()) <= run["timeouts"]
        # The long-lived flow's goodput is what the aggregator's link carried at most.
        assert 0 < run["background_mbps"] <= 1000
    by_scheme = {run["scheme"]: run for run in document["runs"]}
    assert by_scheme["default"]["drops"] > 0  # a 30 kB buffer under a 4-way fan-in
    assert by_scheme["otcp-lossless"]["generations"] is not None
    # The report reads it as the Mininet workload's.
    text = report.text([str(tmp_path)])
    assert "**FCT slowdown per flow size" in text and "star,4 in ns-3, 1 Gb/s hosts" in text
    # Beside an incast of another fabric, a page leaves the trade-off out when asked to.
    incast = write(tmp_path / "incast", [a_sim_run()], "otcp-experiment simulate incast")
    assert "## What each scheme pays" in report.page([incast, str(tmp_path)], "T", str(tmp_path))
    assert "## What each scheme pays" not in report.page([incast, str(tmp_path)], "T", str(tmp_path),
                                                         with_tradeoff=False)


@pytest.mark.parametrize(("argv", "message"), [
    (["--load", "nan"], "--load: nan is out of range"),
    (["--query-senders", "4"], "--query-senders and --query-bytes go together"),
    (["--query-senders", "4", "--query-bytes", "1000"], "--query-rate or --query-load"),
    (["--query-senders", "9", "--query-bytes", "1000", "--query-rate", "10"], "star,4 has 4 hosts besides"),
    (["--topo", "ring,3"], "unknown topology 'ring'"),
    (["--schemes", "default,bogus"], "--schemes"),
    (["--schemes", "default,otcp-admit"], "--schemes: otcp-admit needs a receiver that admits its senders in turns"),
    (["--load", "0"], "nothing to run"),
    (["--seconds", "0"], "--seconds: 0.0 is out of range"),
])
def test_bad_simulate_workload_arguments_exit_2_naming_the_option(argv, message, capsys, tmp_path):
    base = ["simulate", "workload", "--topo", "star,4", "--bw-gbps", "1", "--buffer-bytes", "85000"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*base, *argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
