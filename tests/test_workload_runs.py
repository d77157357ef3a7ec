"""How the workload experiment turns a schedule into the hosts' plans and their reports into outcomes
(no network: the fabrics are Mininet Topo objects, the reports are made up)."""

import pytest

from otcp.experiments import workload
from otcp.experiments.analysis import fct
from otcp.experiments.traffic import arrivals
from otcp.topo.fabrics import LeafSpineTopo, StarTopo

IPS = {f"h{i}": f"10.0.0.{i}" for i in range(1, 9)}


def a_schedule():
    return arrivals.Schedule(
        10.0, 1, "measured",
        flows=(arrivals.Flow(0, 0.5, "h2", "h1", 5000), arrivals.Flow(1, 1.0, "h1", "h3", 200_000),
               arrivals.Flow(2, 2.0, "h3", "h1", 50)),
        queries=(arrivals.Query(0, 3.0, "h1", ("h2", "h3"), 2000),),
        background=(arrivals.LongFlow("h3", "h1"),))


def test_each_host_plans_what_it_receives():
    schedule = a_schedule()
    plan = workload.host_plan(schedule, "h1", IPS)
    assert plan["duration_s"] == 10.0
    assert plan["flows"] == [{"key": "f0", "start_s": 0.5, "server": "10.0.0.2", "bytes": 5000},
                             {"key": "f2", "start_s": 2.0, "server": "10.0.0.3", "bytes": 50}]
    assert plan["queries"] == [{"key": "q0", "start_s": 3.0, "servers": ["10.0.0.2", "10.0.0.3"], "bytes": 2000}]
    assert plan["background"] == [{"key": "b0", "server": "10.0.0.3"}]
    assert workload.host_plan(schedule, "h3", IPS)["flows"][0]["key"] == "f1"
    assert workload.host_plan(schedule, "h2", IPS) == {"duration_s": 10.0, "flows": [], "queries": [],
                                                       "background": []}
    assert workload.expected_keys(schedule) == {"f0", "f1", "f2", "q0/0", "q0/1", "b0"}


def record(key, conn_id, start, end, error=None, rto=0, **extra):
    return {"key": key, "id": conn_id, "scheduled": start - 0.001, "start": start, "end": end, "bytes": 1,
            "error": error, "rto": rto, **extra}


def test_reports_become_outcomes_with_unfinished_flows_and_timeouts_kept():
    schedule = a_schedule()
    pulled = workload.Pulled(
        connections={r["key"]: r for r in (
            record("f0", 1, 100.5, 100.52), record("f1", 2, 101.0, None, "unfinished at the deadline"),
            record("f2", 3, 102.0, 102.001), record("q0/0", 4, 103.0, 103.004),
            record("q0/1", 5, 103.0005, 103.210), record("b0", 6, 99.0, None, measured_bytes=25_000_000))},
        servers={5: {"id": 5, "rto": 1, "retrans": 2}})
    fabric = workload.Fabric(25e6 / 8, {("h2", "h1"): 2, ("h1", "h3"): 2, ("h3", "h1"): 2}, {2: 0.0005})
    flows = workload.flow_outcomes(schedule, pulled, fabric)
    assert [f.fct_s for f in flows] == [pytest.approx(0.02), None, pytest.approx(0.001)]
    assert flows[0].ideal_s == fct.ideal_fct_s(5000, fct.IdealPath(25e6 / 8, 0.0005))
    queries, responses = workload.query_outcomes(schedule, pulled)
    # The query ran from its first connect() to its last response's last byte; the server saw an RTO.
    assert queries == [fct.QueryOutcome(pytest.approx(0.21), True)]
    assert responses == [pytest.approx(0.004), pytest.approx(0.2095)]
    assert workload.background_mbps(schedule, pulled) == pytest.approx(20.0)
    assert workload.start_lateness_ms(pulled) == pytest.approx(1.0)
    assert workload.response_summary(responses)["count"] == 2
    rows = list(workload.connection_rows(schedule, pulled, fabric))
    assert [row[:2] for row in rows] == [("f0", "flow"), ("f1", "flow"), ("f2", "flow"), ("q0/0", "response"),
                                         ("q0/1", "response"), ("b0", "background")]
    assert rows[4][10] == 1 and rows[1][7] is None  # the server's RTO; an unfinished flow's end


def test_path_lengths_and_the_fabrics_ports():
    star = StarTopo(3, bw=25, buffer_bytes=85000)
    assert set(workload.path_links(star).values()) == {2}
    fabric = LeafSpineTopo(2, 2, 2, bw=25, buffer_bytes=85000)
    links = workload.path_links(fabric)
    assert links[("h1", "h2")] == 2 and links[("h1", "h3")] == 4 and len(links) == 4 * 3


def test_the_static_window_counts_the_senders_a_receiver_expects():
    class Network:
        topo = StarTopo(8, bw=25, buffer_bytes=85000)

    fabric = workload.Fabric(25e6 / 8, workload.path_links(Network.topo), {2: 0.0005})
    queries = arrivals.Schedule(1.0, 1, "measured", queries=(arrivals.Query(0, 0.0, "h1", ("h2",) * 4, 2000),),
                                background=(arrivals.LongFlow("h3", "h1"),))
    # (3.125 MB/s x 0.5 ms + 85 000 B) / (4 responders + 1 long flow) = 17 312 B: 11 segments.
    assert workload.static_rwnd(Network(), fabric, queries, 85000) == 11 * 1448
    # Without queries, every other host: 86 562 B / 8 = 10 820 B, 7 segments.
    assert workload.static_rwnd(Network(), fabric, arrivals.Schedule(1.0, 1, "m"), 85000) == 7 * 1448
