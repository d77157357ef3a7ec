"""Statistics of a run and the parsers of what the runner measures (no network)."""

import json

import pytest

from otcp.experiments.analysis import stats
from otcp.experiments.runner import counters, measure


def test_percentile_interpolates_between_ranks():
    values = [10, 20, 30, 40, 50]
    assert stats.percentile(values, 0) == 10
    assert stats.percentile(values, 50) == 30
    assert stats.percentile(values, 100) == 50
    assert stats.percentile(values, 95) == pytest.approx(48.0)
    assert stats.percentile([7], 99) == 7
    assert stats.percentile([3, 1, 2], 50) == 2


@pytest.mark.parametrize("values, q", [([], 50), ([1, 2], -1), ([1, 2], 101)])
def test_percentile_refuses_nonsense(values, q):
    with pytest.raises(ValueError):
        stats.percentile(values, q)


def test_summarize_rounds_goodput_and_completion_times():
    # Two rounds of 1 MB each, 100 ms long, the second starting 50 ms after the first ended.
    rounds = [{"start_s": 10.0, "duration_s": 0.1, "bytes": 1_000_000},
              {"start_s": 10.15, "duration_s": 0.1, "bytes": 1_000_000}]
    summary = stats.summarize_rounds(rounds)
    # 16 Mbit over 0.25 s of wall time.
    assert summary["goodput_mbps"] == pytest.approx(64.0)
    assert summary["fct_mean_ms"] == pytest.approx(100.0)
    assert summary["fct_p50_ms"] == pytest.approx(100.0)


def test_summarize_rounds_tail_follows_the_slow_round():
    rounds = [{"start_s": i * 1.0, "duration_s": 0.01, "bytes": 1000} for i in range(19)]
    rounds.append({"start_s": 19.0, "duration_s": 0.21, "bytes": 1000})
    summary = stats.summarize_rounds(rounds)
    assert summary["fct_p50_ms"] == pytest.approx(10.0)
    # rank 0.99 x 19 = 18.81: 81 % of the way from 10 ms to 210 ms.
    assert summary["fct_p99_ms"] == pytest.approx(172.0)
    assert summary["fct_p50_ms"] <= summary["fct_p95_ms"] <= summary["fct_p99_ms"]


def test_summarize_rounds_refuses_empty_input():
    with pytest.raises(ValueError):
        stats.summarize_rounds([])


def test_queue_emptiness_counts_samples_in_rounds_and_in_their_tails():
    # Two rounds of 100 ms; the first's first connection finished 60 ms in, the second's 80 ms in.
    rounds = [{"start_s": 10.0, "duration_s": 0.1, "bytes": 1, "flows_s": [0.09, 0.06]},
              {"start_s": 10.2, "duration_s": 0.1, "bytes": 1, "flows_s": [0.08, 0.1]}]
    samples = [(9.9, 0),                                     # before the first round: not counted
               (10.0, 0), (10.05, 3000),                    # the first round, before its tail
               (10.07, 1500), (10.1, 0),                    # its tail (the round's end included)
               (10.15, 0),                                   # between the rounds: not counted
               (10.25, 0), (10.29, 0),                       # the second round: before, then in its tail
               (10.35, 0)]                                   # after the last: not counted
    shares = stats.queue_emptiness(samples, rounds)
    assert shares["backlog_empty_pct"] == pytest.approx(100.0 * 4 / 6)
    assert shares["backlog_empty_tail_pct"] == pytest.approx(100.0 * 2 / 3)
    assert shares["round_tail_pct"] == pytest.approx(30.0)  # the median of 40 % and 20 %
    assert stats.queue_emptiness([(9.0, 0), (11.0, 0)], rounds) == {
        "backlog_empty_pct": None, "backlog_empty_tail_pct": None, "round_tail_pct": pytest.approx(30.0)}
    assert stats.queue_emptiness([(10.01, 0)], rounds)["backlog_empty_tail_pct"] is None


def test_switch_input_averages_what_the_switch_had_not_taken_in_during_rounds():
    rounds = [{"start_s": 10.0, "duration_s": 0.1, "bytes": 1, "flows_s": [0.09, 0.06]}]
    samples = [(9.9, 0, 50000),                   # before the round: not counted
               (10.0, 0, 0), (10.05, 3000, 4600),  # in the round
               (10.1, 0, 2300),                    # its end, included
               (10.2, 0, 90000)]                   # after it: not counted
    assert stats.switch_input(samples, rounds) == {"switch_input_mean_bytes": pytest.approx(6900 / 3),
                                                   "switch_input_busy_pct": pytest.approx(200 / 3)}
    # Samples without the switch's inputs (the probe was not asked for them), or none in a round: no figure.
    empty = {"switch_input_mean_bytes": None, "switch_input_busy_pct": None}
    assert stats.switch_input([(10.05, 3000)], rounds) == empty
    assert stats.switch_input([(11.0, 0, 4600)], rounds) == empty
    # queue_emptiness reads the same three-valued samples.
    assert stats.queue_emptiness(samples, rounds)["backlog_empty_pct"] == pytest.approx(200 / 3)


def test_unfinished_connections_is_the_mean_share_of_connections_still_running():
    # Round 1, 100 ms: connections done at 50 and 100 ms, so 2 running for the first half, 1 for the
    # second: 75 %. Round 2, 200 ms: all three run to the end: 100 %. Mean 87.5 %.
    rounds = [{"start_s": 0.0, "duration_s": 0.1, "bytes": 1, "flows_s": [0.05, 0.1]},
              {"start_s": 1.0, "duration_s": 0.2, "bytes": 1, "flows_s": [0.2, 0.2, 0.2]},
              {"start_s": 2.0, "duration_s": 0.1, "bytes": 0, "flows_s": []}]  # no connection: left out
    assert stats.unfinished_connections(rounds) == {"connections_unfinished_pct": pytest.approx(87.5)}
    assert stats.unfinished_connections(rounds[2:]) == {"connections_unfinished_pct": None}


def test_summarize_probe():
    summary = stats.summarize_probe([1.0, 3.0], sent=4)
    assert summary["probe_rtt_avg_ms"] == 2.0
    assert summary["probe_rtt_max_ms"] == 3.0
    assert summary["probe_rtt_std_ms"] == 1.0
    assert summary["probe_lost"] == 0.5
    assert stats.summarize_probe([], sent=3)["probe_rtt_avg_ms"] is None
    with pytest.raises(ValueError):
        stats.summarize_probe([1.0, 2.0], sent=1)


def test_counter_deltas_and_cdf():
    assert counters.counter_deltas({"a": 5}, {"a": 8, "b": 2}, ["a", "b", "c"]) == {"a": 3, "b": 2, "c": 0}
    values, fractions = stats.cdf([3, 1, 2, 2])
    assert values == [1, 2, 2, 3]
    assert fractions == [0.25, 0.5, 0.75, 1.0]


PING_OUTPUT = """PING 10.0.0.1 (10.0.0.1) 56(84) bytes of data.
64 bytes from 10.0.0.1: icmp_seq=1 ttl=64 time=0.512 ms
64 bytes from 10.0.0.1: icmp_seq=3 ttl=64 time=7.25 ms

--- 10.0.0.1 ping statistics ---
4 packets transmitted, 2 received, 50% packet loss, time 31ms
rtt min/avg/max/mdev = 0.512/3.881/7.250/3.369 ms
"""


def test_parse_ping():
    assert measure.parse_ping(PING_OUTPUT) == ([0.512, 7.25], 4)
    # Killed before the summary: the highest sequence number stands in.
    assert measure.parse_ping(PING_OUTPUT.split("\n---")[0]) == ([0.512, 7.25], 3)


def test_parse_nstat():
    text = json.dumps({"kernel": {"TcpExtTCPTimeouts": 12, "TcpRetransSegs": 40}})
    assert counters.parse_nstat(text) == {"TcpExtTCPTimeouts": 12, "TcpRetransSegs": 40}
    with pytest.raises(ValueError, match="nstat"):
        counters.parse_nstat("garbage")


def test_parse_qdisc_drops_takes_each_device_root():
    text = json.dumps([
        {"kind": "htb", "handle": "5:", "dev": "s1-eth1", "root": True, "drops": 17, "backlog": 0},
        {"kind": "bfifo", "handle": "8001:", "dev": "s1-eth1", "parent": "5:1", "drops": 17, "backlog": 0},
        {"kind": "noqueue", "handle": "0:", "dev": "lo", "root": True, "drops": 0},
    ])
    assert counters.parse_qdisc_drops(text) == {"s1-eth1": 17, "lo": 0}


def test_parse_link_counters():
    text = json.dumps([{"ifname": "s1-eth2", "stats64": {
        "rx": {"packets": 100, "dropped": 1}, "tx": {"packets": 90, "dropped": 2}}}])
    assert counters.parse_link_counters(text) == {
        "s1-eth2": {"rx_packets": 100, "tx_packets": 90, "rx_dropped": 1, "tx_dropped": 2}}


def queues(egress_sent, egress_drops, delivered, drops, backlog=0):
    return counters.LinkQueues(egress=counters.QueueCounters(egress_sent, egress_drops),
                            buffer=counters.QueueCounters(delivered, drops, backlog_bytes=1514 * backlog,
                                                       backlog_packets=backlog))


def test_loss_account_balances_when_every_loss_is_at_a_buffer():
    before = {"h1": queues(10, 0, 5, 0), "h2": queues(100, 0, 20, 0), "h3": queues(100, 0, 20, 0)}
    # h2 and h3 send 1000 packets each to h1 and h1 sends 600 ACKs back; h1's buffer drops 400 and
    # delivers 1600; the ACKs all arrive.
    after = {"h1": queues(610, 0, 1605, 400), "h2": queues(1100, 2, 320, 0), "h3": queues(1100, 0, 320, 0)}
    account = counters.loss_account(before, after, "h1")
    assert account.sent == 600 + 1000 + 1000
    assert account.delivered == 1600 + 300 + 300
    assert account.drops == 400
    assert account.drops_other_buffers == 0
    assert account.sender_queue_drops == 2
    assert account.unexplained == 0
    assert account.as_dict()["unexplained"] == 0


def test_loss_account_names_what_no_buffer_dropped():
    before = {"h1": queues(0, 0, 0, 0), "h2": queues(0, 0, 0, 0)}
    # 7 packets vanished between h2's link and h1's buffer; 3 still queued in h1's buffer.
    after = {"h1": queues(0, 0, 880, 110, backlog=3), "h2": queues(1000, 0, 0, 0)}
    account = counters.loss_account(before, after, "h1")
    assert (account.sent, account.delivered, account.drops, account.queued) == (1000, 880, 110, 3)
    assert account.unexplained == 7


def test_loss_account_counts_drops_at_other_buffers_apart():
    before = {"h1": queues(0, 0, 0, 0), "h2": queues(0, 0, 0, 0)}
    after = {"h1": queues(500, 0, 1000, 0), "h2": queues(1000, 0, 495, 5)}
    account = counters.loss_account(before, after, "h1")
    assert (account.drops, account.drops_other_buffers, account.unexplained) == (0, 5, 0)


def test_loss_account_refuses_mismatched_snapshots():
    with pytest.raises(ValueError, match="different hosts"):
        counters.loss_account({"h1": queues(0, 0, 0, 0)}, {"h2": queues(0, 0, 0, 0)}, "h1")
    with pytest.raises(ValueError, match="bottleneck"):
        counters.loss_account({"h2": queues(0, 0, 0, 0)}, {"h2": queues(0, 0, 0, 0)}, "h1")


def test_parse_queue_counters_reads_the_ipv4_queues():
    text = json.dumps([
        {"kind": "htb", "handle": "5:", "dev": "h1-eth0", "root": True, "packets": 999, "drops": 0},
        {"kind": "pfifo", "handle": "10:", "dev": "h1-eth0", "parent": "5:10", "packets": 900, "drops": 2,
         "backlog": 0, "qlen": 0},
        {"kind": "pfifo", "handle": "20:", "dev": "h1-eth0", "parent": "5:20", "packets": 99, "drops": 0},
        {"kind": "bfifo", "handle": "10:", "dev": "h1-eth0-ifb", "parent": "5:10", "packets": 5000, "drops": 40,
         "backlog": 84784, "qlen": 56},
    ])
    found = counters.parse_queue_counters(text)
    assert found == {"h1-eth0": counters.QueueCounters(900, 2, 0, 0),
                     "h1-eth0-ifb": counters.QueueCounters(5000, 40, 84784, 56)}
    assert counters.parse_queue_counters(text, handle="20:") == {"h1-eth0": counters.QueueCounters(99, 0, 0, 0)}


def test_cpu_busy_from_proc_stat():
    before = counters.parse_proc_stat("cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\n"
                                   "cpu1 5 0 5 40 0 0 0 0 0 0\nintr 1\n")
    # cpu0 busy 90 of 100 jiffies, cpu1 10 of 100 (its iowait counts as idle).
    after = counters.parse_proc_stat("cpu0 50 0 50 50 0 0 0 0 0 0\ncpu1 10 0 10 110 20 0 0 0 0 0\n")
    mean, busiest = counters.cpu_busy(before, after)
    assert mean == pytest.approx(50.0)
    assert busiest == pytest.approx(90.0)
    assert counters.cpu_parts(before, after) == {"softirq": 0.0, "steal": 0.0}
    with pytest.raises(ValueError):
        counters.parse_proc_stat("intr 1\n")


def test_softirq_and_steal_shares_from_proc_stat():
    before = counters.parse_proc_stat("cpu0 10 0 10 70 0 0 5 5 0 0\ncpu1 10 0 10 80 0 0 0 0 0 0\n")
    # 100 jiffies on each CPU, user +30 and system +10 on both; cpu0: softirq +15, steal +5, idle +40;
    # cpu1: softirq +5, idle +55.
    after = counters.parse_proc_stat("cpu0 40 0 20 110 0 0 20 10 0 0\ncpu1 40 0 20 135 0 0 5 0 0 0\n")
    assert counters.cpu_parts(before, after) == {"softirq": pytest.approx(10.0), "steal": pytest.approx(2.5)}
    assert counters.cpu_busy(before, after)[0] == pytest.approx(52.5)  # softirq and steal count as busy
    # A kernel without the steal column: its steal is 0, not an error.
    short = counters.parse_proc_stat("cpu0 1 2 3 4 5 6 7\n")
    assert (short.busy, short.total, short.softirq, short.steal) == ((19,), (28,), (7,), (0,))


def test_switch_thread_busy_share_from_its_task_stat():
    # A /proc/PID/task/TID/stat line whose name holds a space and a parenthesis; utime 250, stime 50 ticks.
    line = "14085 (ovs (vswitchd) R 1 14084 14084 0 -1 4194560 9 0 0 0 250 50 0 0 10 -10 3 0 1000 0 0\n"
    assert counters.parse_task_stat(line, 100) == pytest.approx(3.0)
    before = counters.ThreadTime(14085, 3.0, 100.0)
    assert counters.thread_busy(before, counters.ThreadTime(14085, 4.8, 102.0)) == pytest.approx(90.0)
    assert counters.thread_busy(before, counters.ThreadTime(20000, 0.1, 102.0)) is None  # restarted
    assert counters.thread_busy(before, None) is None and counters.thread_busy(None, before) is None
    assert counters.thread_busy(before, before) is None  # no time passed


def test_spread_of_repeated_measurements():
    spread = stats.Spread((90.0, 92.0, 91.0, 93.0, 89.0))
    assert spread.median == 91.0
    assert (spread.low, spread.high) == (89.0, 93.0)
    assert spread.spread_pct == pytest.approx(100 * 2 / 91)


def test_parse_iperf3():
    text = json.dumps({"end": {"sum_received": {"bits_per_second": 95.6e6}}})
    assert measure.parse_iperf3(text) == pytest.approx(95.6)
    with pytest.raises(ValueError, match="unable to connect"):
        measure.parse_iperf3(json.dumps({"error": "unable to connect"}))


def test_jain_index_by_hand():
    assert stats.jain_index([10, 10, 10, 10]) == pytest.approx(1.0)
    assert stats.jain_index([40, 0, 0, 0]) == pytest.approx(0.25)  # one flow has everything: 1/n
    # (10 + 30)^2 / (2 x (100 + 900)) = 1600 / 2000
    assert stats.jain_index([10, 30]) == pytest.approx(0.8)
    assert stats.jain_index([]) is None and stats.jain_index([0, 0]) is None


def test_interval_rates_from_byte_counts():
    reports = [(0.0, {}), (0.1, {"a": 125_000}), (0.2, {"a": 250_000, "b": 62_500})]
    (t1, first), (t2, second) = stats.interval_rates(reports)
    assert (t1, t2) == (0.1, 0.2)
    assert first == {"a": pytest.approx(10.0)}  # 125 000 B in 0.1 s = 10 Mb/s
    assert second == {"a": pytest.approx(10.0), "b": pytest.approx(5.0)}
    with pytest.raises(ValueError, match="out of order"):
        stats.interval_rates([(0.2, {}), (0.1, {})])


def rates_of(samples, step=0.1):
    """[(t, {flow: Mb/s})] at t = step, 2 step, ... from a list of {flow: Mb/s}."""
    return [(round((i + 1) * step, 3), sample) for i, sample in enumerate(samples)]


def test_convergence_after_an_arrival():
    arrivals = {"a": 0.0, "b": 1.0}
    # a alone at 90 Mb/s until b arrives at 1.0; then they approach 45 each, within 10 % from t = 1.5.
    samples = [{"a": 90.0}] * 10 + [{"a": 80.0, "b": 10.0}] * 2 + [{"a": 60.0, "b": 30.0}] * 2 \
        + [{"a": 47.0, "b": 43.0}] * 10
    rates = rates_of(samples)
    assert stats.convergence_time(rates, 0.0, arrivals, 90.0, until=1.0) == pytest.approx(0.1)
    assert stats.convergence_time(rates, 1.0, arrivals, 90.0, hold_s=0.5) == pytest.approx(0.5)
    # A dip inside the hold restarts the clock; never converging is None.
    dipped = rates_of(samples[:17] + [{"a": 70.0, "b": 20.0}] + samples[18:])
    assert stats.convergence_time(dipped, 1.0, arrivals, 90.0, hold_s=0.5) == pytest.approx(0.9)  # from 1.9
    assert stats.convergence_time(rates_of([{"a": 80.0, "b": 10.0}] * 30), 1.0, arrivals, 90.0) is None
