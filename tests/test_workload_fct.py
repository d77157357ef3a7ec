"""The ideal FCT, slowdown, size buckets and query statistics, against hand-worked cases."""

import pytest

from otcp.experiments.analysis import fct
from otcp.planning import formulas

RATE = 25e6 / 8  # 25 Mb/s in bytes per second


def test_framing_counts_packets_and_headers():
    framing = fct.Framing()
    assert (framing.mss_bytes, framing.overhead_bytes) == (1448, 66)
    assert framing.packets(1) == 1 and framing.wire_bytes(1) == 67 and framing.first_frame_bytes(1) == 67
    assert framing.packets(1448) == 1 and framing.wire_bytes(1448) == 1514
    assert framing.packets(1449) == 2 and framing.wire_bytes(1449) == 1449 + 2 * 66
    # 10 000 B: 6 full segments (8688 B) and one of 1312 B.
    assert framing.packets(10_000) == 7 and framing.wire_bytes(10_000) == 10_462
    assert framing.first_frame_bytes(10_000) == 1514


def test_ideal_fct_hand_worked():
    star = fct.IdealPath(RATE, 0.0005)  # two links, a new connection pulled: two round trips
    # One full segment: 2 x 0.5 ms + (1514 + 1514) B at 3.125 MB/s = 1 ms + 0.96896 ms.
    assert fct.ideal_fct_s(1448, star) == pytest.approx(0.001 + 3028 / RATE)
    assert fct.ideal_fct_s(1448, star) == pytest.approx(0.00196896)
    # 10 kB at a 1 ms round trip: 2 ms + (10 462 + 1514) B = 2 ms + 3.83232 ms.
    assert fct.ideal_fct_s(10_000, fct.IdealPath(RATE, 0.001)) == pytest.approx(0.00583232)
    # 1 MB: 691 packets, 1 045 606 B on the wire, plus the first frame again on the second link.
    assert fct.ideal_fct_s(1_000_000, star) == pytest.approx(0.001 + (1_045_606 + 1514) / RATE)
    # A leaf-spine path crosses four links; an open connection saves the handshake.
    assert fct.ideal_fct_s(1448, fct.IdealPath(RATE, 0.0005, links=4)) == pytest.approx(0.001 + 1514 * 4 / RATE)
    pushed = fct.IdealPath(RATE, 0.0005, round_trips=fct.PUSHED_OPEN)
    assert fct.ideal_fct_s(100, pushed) == pytest.approx(0.00025 + 166 * 2 / RATE)


def test_ideal_fct_refuses_what_is_not_a_flow_or_a_path():
    for size in (0, -1, True):
        with pytest.raises(ValueError):
            fct.ideal_fct_s(size, fct.IdealPath(RATE, 0.001))
    for bad in ({"rate_bytes_per_s": 0, "base_rtt_s": 0.001}, {"rate_bytes_per_s": RATE, "base_rtt_s": -1},
                {"rate_bytes_per_s": RATE, "base_rtt_s": float("nan")},
                {"rate_bytes_per_s": RATE, "base_rtt_s": 0.001, "links": 0}):
        with pytest.raises(ValueError):
            fct.IdealPath(**bad)


def test_slowdown_is_fct_over_the_ideal():
    assert fct.slowdown(0.006, 0.002) == pytest.approx(3.0)
    assert fct.FlowOutcome(1448, 0.004, 0.002).slowdown == pytest.approx(2.0)
    assert fct.FlowOutcome(1448, None, 0.002).slowdown is None
    with pytest.raises(ValueError):
        fct.slowdown(0.001, 0.0)


def test_buckets_split_at_ten_hundred_and_thousand_kilobytes():
    assert [fct.bucket_of(size) for size in (1, 9_999, 10_000, 99_999, 100_000, 999_999, 1_000_000, 10**9)] == \
        [0, 0, 1, 1, 2, 2, 3, 3]
    assert fct.bucket_of(500, (100, 200)) is None


def test_censored_percentiles_interpolate_and_never_invent_an_unfinished_flow():
    assert fct.censored_percentile([1.0, 2.0, 3.0, 4.0], 0, 50) == 2.5
    # One unfinished flow counts as the largest of five: the median is the third value.
    assert fct.censored_percentile([1.0, 2.0, 3.0, 4.0], 1, 50) == 3.0
    # p99 of five falls between the fourth value and the unfinished one: beyond the run.
    assert fct.censored_percentile([1.0, 2.0, 3.0, 4.0], 1, 99) is None
    assert fct.censored_percentile([4.0, 1.0, 3.0, 2.0], 0, 100) == 4.0
    assert fct.censored_percentile([], 0, 50) is None
    assert fct.censored_percentile([], 3, 50) is None
    with pytest.raises(ValueError):
        fct.censored_percentile([1.0], 0, 101)


def test_bucket_statistics_hand_worked():
    outcomes = [fct.FlowOutcome(1000, fct_s, 0.001) for fct_s in (0.001, 0.002, 0.003, 0.004)]
    outcomes += [fct.FlowOutcome(50_000, 0.010, 0.005), fct.FlowOutcome(60_000, None, 0.005)]
    outcomes += [fct.FlowOutcome(2_000_000, 1.0, 0.5)]
    small, medium, large, huge = fct.bucket_stats(outcomes)
    assert (small.upper_bytes, small.flows, small.finished, small.unfinished) == (10_000, 4, 4, 0)
    assert small.fct_p50_ms == pytest.approx(2.5) and small.slowdown_p50 == pytest.approx(2.5)
    # p99 of four: rank 2.97, between the third (3 ms) and fourth (4 ms) values.
    assert small.fct_p99_ms == pytest.approx(3.97) and small.slowdown_p99 == pytest.approx(3.97)
    assert small.fct_p999_ms == pytest.approx(3.997)
    # One of two did not finish: the median, at rank 0.5, touches the unfinished flow.
    assert (medium.flows, medium.finished, medium.unfinished) == (2, 1, 1)
    assert medium.fct_p50_ms is None and medium.slowdown_p99 is None
    assert (large.flows, large.fct_p50_ms, large.slowdown_p50) == (0, None, None)
    assert huge.upper_bytes is None and huge.fct_p99_ms == pytest.approx(1000.0) and huge.slowdown_p99 == 2.0
    assert sum(bucket.flows for bucket in (small, medium, large, huge)) == len(outcomes)


def test_query_statistics_count_timeouts_and_unfinished_queries():
    done = [fct.QueryOutcome(t, False) for t in (0.010, 0.020, 0.030)] + [fct.QueryOutcome(0.250, True)]
    stats = fct.query_stats(done)
    assert (stats.count, stats.finished, stats.timeouts) == (4, 4, 1)
    assert stats.qct_mean_ms == pytest.approx(77.5) and stats.qct_p50_ms == pytest.approx(25.0)
    assert stats.qct_p99_ms == pytest.approx(250 - 0.03 * (250 - 30))
    stuck = fct.query_stats(done + [fct.QueryOutcome(None, True)])
    assert stuck.qct_mean_ms is None and stuck.qct_p99_ms is None and stuck.timeouts == 2
    assert stuck.qct_p50_ms == pytest.approx(30.0)


def test_the_static_receive_window_is_the_even_share_in_whole_segments():
    # (3.125 MB/s x 0.5 ms + 85 000 B) / 16 = 5 410.6 B: three 1448-B segments.
    assert formulas.static_rwnd_bytes(RATE, 0.0005, 85_000, 16) == 3 * 1448
    assert formulas.static_rwnd_bytes(RATE, 0.0005, 85_000, 1000) == 1448  # never below one segment
    assert formulas.static_rwnd_bytes(RATE, 0.0005, 85_000, 1) == 59 * 1448  # 86 562.5 B
