"""The ns-3 scenario program, for real: built at set-up, its Linux RTO model against a hand-worked
sequence of RTT samples, and small simulations whose counts add up and whose rounds take the
hand-worked ideal time when the windows fit the buffer; the closed loop planning a run."""

import importlib.util
import io
import json

import pytest

from otcp.experiments.analysis import results
from otcp.experiments.runner.progress import Progress
from otcp.experiments.sim import build, scenario
from otcp.experiments.sim import fabric as fabric_module
from otcp.experiments.sim.incast import SEGMENT_OVERHEAD_BYTES, SimConfig, build_fabric, run_sweep, workload_pairs
from otcp.experiments.sim.loop import ClosedLoop
from otcp.experiments.sim.schemes import selected


def test_set_up_built_the_program_and_it_is_up_to_date():
    line = build.command(build.wheel_sdk(), build.PROGRAM)
    assert build.PROGRAM.exists(), "scripts/bootstrap.sh builds it (python -m otcp.experiments.sim build)"
    assert not build._stale(build.BUILD_DIR / "otcp-sim.command", line)
    assert build.program() == build.PROGRAM


def test_a_missing_sdk_is_named_with_how_to_get_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(build.SimulatorUnavailable, match=r"pip install --no-deps ns3==3\.44"):
        build.sdk_root()


def rto_model(hz, rto_min_us, samples):
    """The program's LinuxRtt after each sample [rtt_us, snd_una, snd_nxt]."""
    return scenario.run({"mode": "rto-model", "hz": hz, "rto_min_us": rto_min_us, "samples": samples}
                        ).result["steps"]


def test_the_linux_rto_model_follows_a_hand_worked_sequence():
    # HZ=1000 (1 ms jiffies), rto_min 5 ms. Linux keeps srtt x 8 and mdev x 4 in microseconds.
    steps = rto_model(1000, 5000, [[1000, 1, 100], [3000, 50, 150], [9000, 120, 200], [1000, 210, 300],
                                   [1000, 310, 400]])
    expected = [
        (0, 0, 1000000),        # no sample yet: TCP_TIMEOUT_INIT, 1 s
        (1000, 5000, 6000),     # first: srtt 1000, mdev 2 x 1000 = 2000 < rto_min: rttvar 5000
        (1250, 5000, 7000),     # srtt 1000 + (3000 - 1000) / 8; mdev 2000 + 2000 - 500 = 3500; same round trip
        (2218, 10375, 13000),   # srtt 1250 + 7750 / 8; mdev 3500 + 7750 - 875 = 10375 > rttvar: it rises at once;
                                # una 120 passed rtt_seq 100: a round trip ended, rttvar not above mdev_max: kept
        (2066, 10032, 13000),   # a falling sample: mdev 10375 + (1218 - 2593) = 9000; round trip ended:
                                # rttvar -= (10375 - 9000) / 4 = 343
        (1933, 9478, 12000),    # mdev 9000 + (1066 - 2250) = 7816; rttvar -= (10032 - 7816) / 4 = 554
    ]
    assert [(s["srtt_us"], s["rttvar_us"], s["rto_us"]) for s in steps] == expected
    for step in steps[1:]:  # and ns-3's RTO, SRTT + max(0, 4 x variation), is that RTO
        assert step["rto_us"] * 1000 <= step["ns3_rto_ns"] < step["rto_us"] * 1000 + 4


def test_the_rto_is_whole_jiffies_and_rto_min_counts_from_srtt():
    # HZ=250: rto_min 1 ms is one 4 ms jiffy; 100 us + 4 ms rounds up to two jiffies, 8 ms. An RFC 6298
    # MinRto of 1 ms (ns-3's own) would give 1.1 ms.
    assert rto_model(250, 1000, [[100, 1, 10]])[1]["rto_us"] == 8000
    # Linux's 200 ms default: 200 ms of rttvar on top of SRTT, not a floor under the whole RTO.
    assert rto_model(250, 200000, [[30000, 1, 10]])[1]["rto_us"] == 232000


def sweep(tmp_path, **settings):
    config = SimConfig(out=str(tmp_path), command=["test"], **settings)
    summary, outcome = run_sweep(config, Progress(total=1, stream=io.StringIO()))
    assert summary is not None and not outcome.failures
    with open(summary, encoding="utf-8") as handle:
        document = json.load(handle)
    results.check_summary(document, None)
    return document, outcome


def test_rounds_take_the_ideal_time_with_no_drops_when_windows_fit(tmp_path):
    # 8 senders x 10 segments: the whole block in the initial window (IW 10); 8 x 10 x 1502 B = 120 KB
    # into a 512 000 B buffer at 1 Gb/s with 5 us links: 961.28 us of bytes back to back plus the
    # request's 20 us round trip, 981.28 us; the first packet's own 12 us on its sender's link comes on top.
    document, outcome = sweep(tmp_path, schemes=["default"], senders=[8], sru_bytes=14480, bw_gbps=1.0,
                              buffers=[512000], rounds=3, warmup_rounds=1, persistent=True)
    (run,) = document["runs"]
    assert run["drops"] == 0 and run["timeouts"] == 0 and run["unexplained"] == 0
    assert run["sent"] == run["delivered"] > 8 * 10 * 3
    assert run["ideal_ms"] == pytest.approx(0.98128)
    for duration in outcome.round_durations[0]:
        assert duration == pytest.approx(0.98128 + 0.012, rel=0.01)
    assert run["fct_p99_ms"] == pytest.approx(0.98128 + 0.012, rel=0.01)
    assert run["ceiling_mbps"] > 900  # one flow's goodput on a 1 Gb/s link
    assert run["probe_rtt_avg_ms"] is not None


def test_every_packet_is_delivered_or_dropped_where_it_is_counted(tmp_path):
    document, _ = sweep(tmp_path, schemes=["default", "fine-rto"], senders=[8], sru_bytes=65536, bw_gbps=1.0,
                        buffers=[20000], rounds=3, warmup_rounds=1)
    for run in document["runs"]:
        assert run["drops"] > 0 and run["retransmissions"] > 0
        lost = run["drops"] + run["drops_other_buffers"] + run["sender_queue_drops"]
        assert run["sent"] == run["delivered"] + lost and run["unexplained"] == 0
        assert run["goodput_mbps"] * run["fct_mean_ms"] > 0


def test_the_closed_loop_plans_a_lossless_run(tmp_path):
    document, outcome = sweep(tmp_path, schemes=["otcp-lossless"], senders=[8], sru_bytes=65536, bw_gbps=1.0,
                              buffers=[85000], rounds=3, warmup_rounds=1, poll_interval_s=0.05)
    (run,) = document["runs"]
    assert run["drops"] == 0 and run["timeouts"] == 0 and run["unexplained"] == 0
    assert run["generations"] is not None
    # The plan's segment (the receiver's advmss) is what the senders sent: below 1448 B at 8 senders.
    assert run["packet_bytes"] < 1500
    assert run["peak_backlog_bytes"] <= 85000 * 0.25 + 8 * run["packet_bytes"]


def test_the_fan_in_share_is_the_commands(tmp_path):
    """12 senders into 20 000 B at 1 Gb/s: 12 full frames do not fit the queue target (5 000 B and the
    BDP), so the fan-in rule lets the queue rise toward the buffer, where the shrink to the target
    (--fan-in-queue-fraction 0) holds it near the target; both lossless."""
    peaks = {}
    for share in (1.0, 0.0):
        document, _ = sweep(tmp_path / str(share), schemes=["otcp-lossless"], senders=[12], sru_bytes=32768,
                            bw_gbps=1.0, buffers=[20000], rounds=3, warmup_rounds=1, poll_interval_s=0.05,
                            fan_in_queue_fraction=share)
        (run,) = document["runs"]
        assert run["drops"] == 0 and run["timeouts"] == 0, (share, run)
        peaks[share] = run["peak_backlog_bytes"]
    assert peaks[0.0] < 10_000 < peaks[1.0] <= 20_000, peaks


def test_established_receivers_take_the_quickack_of_a_new_plan(tmp_path):
    # Persistent connections made under the idle fabric's plan (a window of several segments, delayed
    # ACKs), then the poll's plan of 8 flows into a 20 000 B buffer: one segment per sender and quickack
    # at the receiver. A receiver that kept delaying its ACKs would hold each one-segment window past
    # the sender's RTO, whose retransmission arrives as a duplicate segment.
    document, _ = sweep(tmp_path, schemes=["otcp-lossless"], senders=[8], sru_bytes=65536, bw_gbps=1.0,
                        buffers=[20000], rounds=3, warmup_rounds=1, persistent=True, poll_interval_s=0.05)
    (run,) = document["runs"]
    assert run["duplicate_segments"] == 0
    assert run["retransmissions"] <= run["drops"] + run["drops_other_buffers"] + run["sender_queue_drops"]


def planned_segments(config, senders, buffer_bytes):
    """(the idle fabric's segment, the segment with every sender active) of the first sender's
    connection into the receiver, as the run's closed loop plans them."""
    fabric = build_fabric(config, senders, buffer_bytes)
    placement = fabric_module.place(fabric, senders, config.placement)
    (scheme,) = selected(["otcp-lossless"])
    loop = ClosedLoop.for_scheme(fabric, workload_pairs(placement), scheme, config.lossless())
    pair = (placement.senders[0], placement.receiver)
    loop.poll(0.0, [])
    idle = loop.settings[pair].segment_bytes
    loop.poll(1.0, [(sender, placement.receiver, 100, 100 * 1514) for sender in placement.senders])
    return idle, loop.settings[pair].segment_bytes


def test_the_packet_size_reported_is_the_one_the_measured_rounds_sent(tmp_path):
    # 24 senders into 20 000 B at 1 Gb/s: the fan-in plan's segment is well under the idle fabric's,
    # which the warm-up's connections were made with. A new connection per round sends the plan's; a
    # persistent one keeps the segment it was made with (fixed at set-up, as in Linux).
    settings = {"schemes": ["otcp-lossless"], "senders": [24], "sru_bytes": 16384, "bw_gbps": 1.0,
                "buffers": [20000], "rounds": 2, "warmup_rounds": 1, "poll_interval_s": 0.05}
    idle, busy = planned_segments(SimConfig(out=str(tmp_path), command=["test"], **settings), 24, 20000)
    assert busy < idle
    for persistent, segment in ((False, busy), (True, idle)):
        document, _ = sweep(tmp_path / str(persistent), persistent=persistent, **settings)
        (run,) = document["runs"]
        assert run["packet_bytes"] == segment + SEGMENT_OVERHEAD_BYTES, (persistent, idle, busy)


def test_admission_keeps_full_frames_and_the_buffer_holds_them(tmp_path):
    """32 senders into 20 000 B at 1 Gb/s: 11 full frames fit the fan-in budget ((20000 - 1514) / (1514 +
    66) = 11.7), so otcp-admit's receiver asks 11 at a time and they keep 1448 B segments, where
    otcp-lossless shrinks every sender's to fit 32 frames; both lossless."""
    document, _ = sweep(tmp_path, schemes=["otcp-lossless", "otcp-admit"], senders=[32], sru_bytes=32768,
                        bw_gbps=1.0, buffers=[20000], rounds=3, warmup_rounds=1, poll_interval_s=0.05)
    runs = {run["scheme"]: run for run in document["runs"]}
    for run in runs.values():
        assert run["drops"] == 0 and run["timeouts"] == 0 and run["unexplained"] == 0, run
        assert run["peak_backlog_bytes"] <= 20000
    assert runs["otcp-admit"]["packet_bytes"] == 1448 + SEGMENT_OVERHEAD_BYTES
    assert runs["otcp-lossless"]["packet_bytes"] < 600
    # 32 full frames, each behind its ACK, are 50 560 B: only asking in turns keeps them in 20 000 B.
    assert any("asks at most 11 senders at once" in note for note in document["notes"])
