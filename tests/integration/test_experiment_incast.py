"""A tiny incast sweep for real: star, 4 senders, default, fine-rto, otcp, dctcp and otcp-lossless, a few rounds.

Runs ``otcp-experiment incast`` as a child process (the OTCP controller
forwards; the OTCP schemes run the real agents, otcp-lossless with their
BPF enforcement; dctcp registers the BPF congestion control and marks at
the bottleneck), then checks the result files, plots and per-host routes,
and that nothing it created is left behind. No assertion on speed.
"""

import ipaddress
import json
import os
import re
import sqlite3
import subprocess
import sys

from support.emulations import ovs_bridges, processes_mentioning

ROUNDS = 4


def test_tiny_sweep_writes_sane_results(tmp_path):
    out = tmp_path / "tiny"
    before = ovs_bridges()
    completed = subprocess.run(
        [sys.executable, "-m", "otcp.experiments.cli", "incast", "--senders", "4", "--buffer-bytes", "85000",
         "--sru-bytes", "65536", "--rounds", str(ROUNDS), "--warmup-seconds", "0.5",
         "--schemes", "default,fine-rto,otcp,dctcp,otcp-lossless", "--ceiling-seconds", "2", "--ceiling-repeats", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]

    summary = json.loads((out / "summary.json").read_text())
    assert 10 < summary["ceiling_mbps"] < 1000
    schemes = ["default", "fine-rto", "otcp", "dctcp", "otcp-lossless"]
    assert [(r["scheme"], r["senders"]) for r in summary["runs"]] == [(s, 4) for s in schemes]
    for run in summary["runs"]:
        assert run["buffer_bytes"] == 85000 and run["sru_bytes"] == 65536
        # Goodput is measured, positive, and cannot beat the links.
        assert 0 < run["goodput_mbps"] <= 1.05 * 100
        assert 0 < run["fct_p50_ms"] <= run["fct_p95_ms"] <= run["fct_p99_ms"]
        assert run["drops"] >= 0 and run["timeouts"] >= 0
        # The loss account: every IPv4 packet the hosts sent was delivered or dropped at a named buffer.
        assert run["sent"] > 0 and run["delivered"] > 0
        assert run["sent"] == run["delivered"] + run["drops"] + run["drops_other_buffers"] + run["unexplained"]
        assert run["unexplained"] == 0, run
        assert 10 < run["ceiling_mbps"] < 1000
        # otcp-lossless's senders use the segment its receiver advertises: a packet size with its own ceiling.
        assert run["packet_bytes"] == 1500 if run["scheme"] != "otcp-lossless" else 296 <= run["packet_bytes"] <= 1500
        # The marker counts CE marks where ECN is on (DCTCP keeps the queue near K, so it marks).
        assert (run["ce_marks"] is None) == (run["scheme"] != "dctcp")
        # The controller's generations during the rounds are counted for the OTCP schemes only.
        assert (run["generations"] is None) == (not run["scheme"].startswith("otcp"))
        assert run["generations"] is None or run["generations"] >= 0
        assert 0 < run["cpu_busy_pct"] <= 100 and run["cpu_busy_pct"] <= run["cpu_busiest_pct"] <= 100
        # The switch's one forwarding thread moved every packet: busy, and at most one core (tick rounding aside).
        assert 0 < run["switch_cpu_pct"] <= 101
        assert run["switch_pmd_busy_pct"] is None  # AF_PACKET ports: no PMD thread polls them
        # Parts of both cores' busy time, measured. This kernel samples softirq at the tick (no
        # IRQ_TIME_ACCOUNTING): a run of under a second can find none (once in CI).
        assert 0 <= run["cpu_softirq_pct"] <= run["cpu_busy_pct"] and 0 <= run["cpu_steal_pct"] <= run["cpu_busy_pct"]
        assert 0 <= run["peak_backlog_bytes"] <= 85000
        # The switch's input sockets were sampled during the rounds.
        assert run["switch_input_mean_bytes"] >= 0 and 0 <= run["switch_input_busy_pct"] <= 100
        assert run["probe_rtt_avg_ms"] is not None and 0 < run["probe_rtt_avg_ms"] <= run["probe_rtt_max_ms"]
    assert summary["unexplained_losses"] == []
    # The readings name the switch's own ports: at line rate its forwarding thread lags at times.
    assert any(run["switch_input_busy_pct"] > 0 for run in summary["runs"]), summary["runs"]
    dctcp = next(r for r in summary["runs"] if r["scheme"] == "dctcp")
    assert dctcp["ce_marks"] > 0
    # The backlog sampler sees the queue: 4 x 64 KB overflow 85 000 B under default. otcp-lossless may
    # keep it empty at every sample, where its windows sum to about the round trip (once in CI: 0 B).
    default = next(r for r in summary["runs"] if r["scheme"] == "default")
    assert default["peak_backlog_bytes"] > 0
    for ceiling in summary["ceilings"]:
        kept = ceiling["samples"]
        assert ceiling["min"] <= ceiling["median"] <= ceiling["max"]
        # Two samples, or up to four where they disagreed: those within 5 % of the best are kept, and the
        # disturbed ones named in the notes (once in CI, one of 85.96 Mb/s kept after a disturbed pair).
        assert 1 <= len(kept) <= 4 and min(kept) >= 0.95 * max(kept)
        if len(kept) < 2:
            assert any(note.startswith(f"ceiling at {ceiling['packet_bytes']} B packets") and "set aside" in note
                       for note in summary["notes"]), summary["notes"]
    assert {c["packet_bytes"] for c in summary["ceilings"]} == {r["packet_bytes"] for r in summary["runs"]}
    assert summary["unavailable"] == []

    db = sqlite3.connect(str(out / "results.db"))
    assert db.execute("SELECT count(*) FROM rounds").fetchone() == (len(schemes) * ROUNDS,)
    assert db.execute("SELECT count(*) FROM flows").fetchone() == (len(schemes) * ROUNDS * 4,)
    assert db.execute("SELECT count(DISTINCT host) FROM host_counters").fetchone() == (6,)
    assert all(0 < busy <= 101 for busy, in db.execute("SELECT switch_cpu_pct FROM ceiling"))

    for name in ("goodput.png", "fct_cdf.png", "fct_bars.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")

    # Routes as the kernel held them: fine-rto's carry rto_min, default's do not.
    hosts = sorted(os.listdir(out / "routes" / "default"))
    assert hosts == [f"h{i}.txt" for i in range(1, 7)]
    for host in hosts:
        default_routes = (out / "routes" / "default" / host).read_text()
        fine_routes = (out / "routes" / "fine-rto" / host).read_text()
        assert "10.0.0.0/8 dev" in default_routes and "rto_min" not in default_routes
        # iproute2 always locks rto_min: the kernel shows "rto_min lock 1ms".
        assert re.search(r"10\.0\.0\.0/8 dev .* rto_min (lock )?1ms", fine_routes), fine_routes
        assert "before traffic" in fine_routes
        # otcp's: agent routes (proto 79, a host or a prefix: the controller aggregates destinations) that
        # cover every other host, with the controller's rto_min and quickack.
        otcp_routes = (out / "routes" / "otcp" / host).read_text().split("after the measured rounds")[0]
        own = int(host.removesuffix(".txt").removeprefix("h"))
        prefixes = [ipaddress.ip_network(p) for p in re.findall(
            r"^(10\.0\.0\.\d+(?:/\d+)?) dev \S+ proto 79 .*rto_min lock \d+ms.*quickack 1", otcp_routes, re.M)]
        covered = [i for i in range(1, 7) if any(ipaddress.ip_address(f"10.0.0.{i}") in p for p in prefixes)]
        assert set(covered) >= {i for i in range(1, 7) if i != own}, otcp_routes

    # otcp-lossless's routes carry the controller's windows, held by BPF from the first connection
    # (tests/test_bpf_sockops.py shows that on a first connection).
    lossless = (out / "routes" / "otcp-lossless" / "h2.txt").read_text()
    assert re.search(r"proto 79 .*cwnd lock \d+ .*initcwnd \d+", lossless), lossless

    # Everything torn down: no bridge of ours, no process still running from this output directory
    # (the controller's command line names its configuration file in it), the congestion control
    # unregistered, the marker unpinned.
    assert ovs_bridges() == before
    assert processes_mentioning(str(out)) == []
    assert "otcp_dctcp" not in open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    assert not [p for p in os.listdir("/sys/fs/bpf/otcp") if p.startswith("mark-")] \
        if os.path.isdir("/sys/fs/bpf/otcp") else True


def twelve_senders_at_25_mbps(out, buffer_bytes, scheme, *more):
    """An incast of 12 senders x 64 KB into buffer_bytes at 25 Mb/s with one scheme (and more arguments), written
    to out: its summary."""
    completed = subprocess.run(
        [sys.executable, "-m", "otcp.experiments.cli", "incast", "--senders", "12", "--buffer-bytes", str(buffer_bytes),
         "--sru-bytes", "65536", "--rounds", str(ROUNDS), "--warmup-seconds", "0.5", "--bw-mbps", "25",
         "--schemes", scheme, "--ceiling-seconds", "2", "--ceiling-repeats", "2", "--out", str(out), *more],
        capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def test_lossless_fan_in_keeps_full_frames_and_drops_nothing_where_they_do_not_fit_the_queue_target(tmp_path):
    """12 senders (13 flows with the probe's) into a 22 100 B buffer at 25 Mb/s: the queue target,
    5 525 B, plus the link's BDP (3 125 B per ms of round trip) holds fewer than 13 full frames of
    1 514 B at any round trip under 4.5 ms, so without the fan-in rule the segments would shrink.
    With it each sender keeps one full frame (13 x (1 514 + 66) = 20 540 B, each frame behind its
    sender's ACK of the request, fit the buffer less the frame it keeps free, 20 586 B): full-size
    packets, and the kernel's bfifo at the bottleneck drops nothing."""
    out = tmp_path / "fan-in"
    (run,) = twelve_senders_at_25_mbps(out, 22100, "otcp-lossless")["runs"]
    # The receiver advertised the full segment (no advmss on its routes, as the kernel held them after the
    # rounds): the senders' packets are full-size.
    assert run["packet_bytes"] == 1500, run
    receiver = (out / "routes" / "otcp-lossless" / "h1.txt").read_text().split("after the measured rounds")[1]
    assert "proto 79" in receiver and "advmss" not in receiver, receiver
    # One frame per sender: every window fits the buffer at once, so nothing dropped there.
    sender = (out / "routes" / "otcp-lossless" / "h2.txt").read_text().split("after the measured rounds")[1]
    assert re.search(r"^10\.0\.0\.\d+(?:/\d+)? dev \S+ proto 79 .*cwnd lock 1 .*initcwnd 1 ", sender, re.M), sender
    assert run["drops"] == 0 and run["peak_backlog_bytes"] <= 22100, run
    assert run["sent"] == run["delivered"] + run["drops_other_buffers"] + run["unexplained"], run


def test_senders_sharing_hosts_are_counted_as_their_connections_and_lossless_still_drops_nothing(tmp_path):
    """The same 12 senders into 22 100 B, as 3 hosts of 4 persistent connections each. The switch sees
    3 pairs; counted as 3 flows (4 with the probe's), each would get about a quarter of the queue
    target and the BDP, 2 frames and more, and 12 such windows overflow the buffer. The agents
    report 4 sending connections per host, the controller counts 12 flows on the receiver's
    downlink (13 with the probe's): every connection keeps one full frame, and nothing drops."""
    out = tmp_path / "sharing"
    summary = twelve_senders_at_25_mbps(out, 22100, "otcp-lossless", "--persistent", "--connections-per-host", "4")
    (run,) = summary["runs"]
    assert run["senders"] == 12, run
    assert any("3 sender hosts, each serving 4 persistent connections" in note for note in summary["notes"]), \
        summary["notes"]
    assert not (out / "routes" / "otcp-lossless" / "h6.txt").exists()  # h1 receives, h2-h4 send, h5 probes
    sender = (out / "routes" / "otcp-lossless" / "h2.txt").read_text().split("after the measured rounds")[1]
    assert re.search(r"^10\.0\.0\.\d+(?:/\d+)? dev \S+ proto 79 .*cwnd lock 1 .*initcwnd 1 ", sender, re.M), sender
    assert run["packet_bytes"] == 1500, run
    assert run["drops"] == 0 and run["timeouts"] == 0 and run["peak_backlog_bytes"] <= 22100, run
    assert run["sent"] == run["delivered"] + run["drops_other_buffers"] + run["unexplained"], run


def test_admission_keeps_full_frames_and_drops_nothing_where_even_they_do_not_fit_the_buffer(tmp_path):
    """12 senders into a 10 000 B buffer at 25 Mb/s: 12 full frames, each behind its ACK (18 960 B),
    do not fit even the whole buffer, so otcp-lossless would shrink every segment. otcp-admit's
    receiver asks at most (10 000 - 1 514) / (1 514 + 66) = 5.4 -> 5 senders at once (the admit of
    the controller's set for it, shown by its agent), the controller counts 5 flows on its downlink, each keeps one full frame: full-size packets, and the kernel's
    bfifo at the bottleneck drops nothing."""
    out = tmp_path / "admit"
    summary = twelve_senders_at_25_mbps(out, 10000, "otcp-admit")
    (run,) = summary["runs"]
    # The controller sent the receiver its K as its set's admit, and the run read it from the receiver's agent.
    assert any("the receiver's agent shows the controller's admit, 5:" in note for note in summary["notes"]), \
        summary["notes"]
    assert run["packet_bytes"] == 1500, run
    sender = (out / "routes" / "otcp-admit" / "h2.txt").read_text().split("after the measured rounds")[1]
    assert re.search(r"^10\.0\.0\.\d+(?:/\d+)? dev \S+ proto 79 .*cwnd lock 1 .*initcwnd 1 ", sender, re.M), sender
    assert run["drops"] == 0 and run["timeouts"] == 0 and run["peak_backlog_bytes"] <= 10000, run
    assert run["sent"] == run["delivered"] + run["drops_other_buffers"] + run["unexplained"], run
