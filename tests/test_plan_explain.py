"""`plan --explain` and Plan.explain: every pair's terms, which give back its values; the bounds
that clamped; where the inputs came from; --config, --host/--set and a closed pipe."""

import json
import math
import os
import subprocess
import sys

import pytest
import yaml

from otcp.planning import formulas, inventory
from otcp.planning.planner import Plan
from otcp.service import cli
from otcp.wire import paramset
from support.inventories import random_inventory, star, write_inventory


def values_from_terms(e, bounds, lossless):
    """The parameters an explanation's terms give by the formulas (docs/design.md), recomputed."""
    rto = min(max(math.ceil((e.rtt_for_rto_s + e.queueing_s) * 1e3 - 1e-9), bounds.rto_min_ms_low),
              bounds.rto_min_ms_high)
    initcwnd = min(max(math.floor(e.fair_share_bytes_per_s * e.rtt_prop_s / bounds.mss_bytes + 1e-9),
                       bounds.initcwnd_low), bounds.initcwnd_high)
    if e.window_bytes is None:
        return rto, initcwnd, None
    if lossless is None:
        clamp = min(max(math.floor(e.window_bytes / bounds.mss_bytes + 1e-9), bounds.cwnd_low), bounds.cwnd_high)
        return rto, initcwnd, clamp
    frame = e.segment.segment_bytes + formulas.FRAME_OVERHEAD_BYTES
    clamp = min(max(math.floor(e.segment.window_wire_bytes / frame + 1e-9), bounds.cwnd_low), bounds.cwnd_high)
    return rto, min(max(clamp, bounds.initcwnd_low), bounds.initcwnd_high), clamp


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("lossless", [None, formulas.Lossless(0.25, 200), formulas.Lossless(0.25, 200, 1.0, True)],
                         ids=["published", "lossless", "admission"])
def test_every_pairs_terms_give_its_values(seed, lossless):
    inv = inventory.parse(random_inventory(seed))
    bounds = formulas.Bounds(mss_bytes=1448, initcwnd_high=[64, 10][seed % 2])
    plan = Plan(inv.fabric(), bounds, lossless, formulas.Pacing())
    for k, record in enumerate(plan.records()):
        e = plan.explain(k, "inventory")
        assert (e.src, e.dst, e.dst_ip) == (record["src"], record["dst"], record["dst_ip"])
        assert [e.data_path[0].src, *(link.dst for link in e.data_path)] == record["hops"]
        assert [link.dst for link in e.ack_path][-1] == e.src  # the ACKs come back to the source
        assert (e.rto_min_ms, e.initcwnd, e.cwnd_clamp, e.segment_bytes, e.pacing_rate) == (
            record["rto_min_ms"], record["initcwnd"], record["cwnd_clamp"], record["segment_bytes"],
            record["pacing_rate"])
        assert e.min_rto_s == pytest.approx(e.rtt_for_rto_s + e.queueing_s)
        assert e.link_delay_sum_s == pytest.approx(sum(link.delay_s for link in (*e.data_path, *e.ack_path)))
        assert e.fair_share_bytes_per_s == min(link.capacity_bytes_per_s / link.sharing for link in e.data_path)
        admitted = e.segment.admitted_flows if e.segment is not None else None
        counted = e.bottleneck.flows if e.bottleneck.admitted_flows is None else e.bottleneck.admitted_flows
        assert (e.bottleneck.admitted_flows is None) == (lossless is None or not lossless.fan_in_admission)
        assert counted <= e.bottleneck.flows
        assert e.bottleneck.sharing == counted + (0 if e.pair_is_flow else 1) or counted == 0 \
            or e.bottleneck.sharing == admitted
        rto, initcwnd, clamp = values_from_terms(e, bounds, lossless)
        assert rto == e.rto_min_ms and clamp == e.cwnd_clamp
        if lossless is None or e.window_bytes is None:
            assert initcwnd == e.initcwnd
        else:
            assert e.segment.segment_bytes == (e.segment.receiver_bytes or e.segment.own_bytes)
            assert e.segment.frame_overhead_bytes == 66
        for clamp_ in e.clamps:
            assert clamp_.value == getattr(e, clamp_.parameter) or clamp_.parameter == "segment_bytes"


def test_a_clamped_initial_window_is_named_with_its_bound():
    """10 Gb/s and 40 us each way: the fair share of the BDP is 69 segments, and the bound keeps 64."""
    document = star(1, capacity_mbps=10_000, delay_us=20)
    document["flows"] = []
    plan = Plan(inventory.parse(document).fabric())
    e = plan.explain(plan.pair_index("10.0.0.2", "10.0.0.1"))
    assert e.initial_window_bytes == pytest.approx(1.25e9 * 80e-6)
    initcwnd = [clamp for clamp in e.clamps if clamp.parameter == "initcwnd"]
    assert [(c.formula, c.bound, c.value) for c in initcwnd] == [(69, "bounds.initcwnd[1]", 64)] and e.initcwnd == 64


def test_inputs_say_where_they_came_from(tmp_path):
    document = {"mss_bytes": 1400, "defaults": {"buffer_bytes": 50000}, "switches": ["s1"],
                "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}},
                "links": [{"a": "h1", "b": "s1", "capacity_mbps": 100, "delay_us": 7}, {"a": "h2", "b": "s1"}]}
    inv = inventory.parse(document)
    assert inv.mss_origin == "inventory" and inventory.parse({}).mss_origin == "default"
    plan = Plan(inv.fabric(), formulas.Bounds(mss_bytes=inv.mss_bytes))
    e = plan.explain(plan.pair_index("10.0.0.1", "10.0.0.2"), inv.mss_origin)
    up, down = e.data_path
    assert (up.capacity_origin, up.delay_origin, up.buffer_origin) == ("inventory", "inventory",
                                                                       "host queue, not counted")
    assert (down.capacity_origin, down.buffer_origin, down.delay_origin) == ("default", "inventory defaults",
                                                                           "default")
    assert (e.bottleneck.src, e.bottleneck.sharing, e.window_link.src) == ("h1", 1, "s1")
    assert e.mss_origin == "inventory"


def run_plan(capsys, *argv):
    status = cli.main(["plan", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_explain_text_and_json(tmp_path, capsys):
    path = write_inventory(tmp_path, star(3))
    status, out, err = run_plan(capsys, path, "--explain", "--host", "h2", "--lossless")
    assert status == 0 and err == ""
    assert [line.split()[:3] for line in out.splitlines() if not line.startswith(" ")] == [
        ["h2", "->", "h1"], ["h2", "->", "h3"], ["h2", "->", "h4"]]  # the pairs from h2 only
    for words in ("bottleneck", "N_l", "delay term", "buffer term", "66 B of headers", "(inventory)",
                  "(host queue, not counted)"):
        assert words in out
    status, out, _ = run_plan(capsys, write_inventory(tmp_path, star(3, capacity_mbps=10_000, delay_us=20), "fast.yaml"),
                              "--explain", "--host", "h1")
    assert status == 0 and "clamped: initcwnd 69 -> 64 (bounds.initcwnd[1])" in out
    status, out, _ = run_plan(capsys, path, "--explain", "--json")
    paths = json.loads(out)["paths"]
    assert status == 0 and len(paths) == 12
    explained = paths[0]["explain"]
    assert explained["bottleneck"]["sharing"] >= 1 and explained["rto_min_ms"] == paths[0]["rto_min_ms"]
    assert {"queueing_s", "link_delay_sum_s", "clamps", "data_path", "ack_path", "mss_origin"} <= set(explained)


def test_config_gives_the_bounds_and_formulas(tmp_path, capsys):
    path = write_inventory(tmp_path, star(3))
    config = tmp_path / "controller.yaml"
    config.write_text(yaml.safe_dump({"inventory": "inventory.yaml", "bounds": {"cwnd": [1, 5]},
                                      "parameters": {"formulas": "lossless", "pacing": True}}))
    status, out, err = run_plan(capsys, "--config", str(config), "--json", "--explain")
    assert status == 0, err
    paths = json.loads(out)["paths"]
    assert all(p["cwnd_clamp"] <= 5 and p["pacing_rate"] for p in paths)
    assert any(c["bound"] == "bounds.cwnd[1]" for p in paths for c in p["explain"]["clamps"])
    assert paths[0]["explain"]["mss_origin"] == "config"
    assert paths[0]["explain"]["data_path"][0]["capacity_origin"] == "inventory"
    status, _, err = run_plan(capsys, path, "--config", str(config), "--lossless")
    assert status == 2 and "--lossless: --config sets the formulas" in err


def test_set_is_what_the_agent_takes(tmp_path, capsys):
    """--set prints the host's aggregated set (what the controller pushes); it passes the
    agent's own validation and `otcp-agent apply --dry-run` reads it."""
    path = write_inventory(tmp_path, star(3))
    status, out, _ = run_plan(capsys, path, "--host", "h2", "--set", "--generation", "7")
    assert status == 0
    checked = paramset.parse_param_set(out.encode(), "the --set output")
    plan = Plan(inventory.load(path).fabric())
    assert checked.generation == 7 and checked.routes == plan.route_sets()["10.0.0.2"]
    document = tmp_path / "set.json"
    document.write_text(out)
    dry = subprocess.run([sys.executable, "-m", "otcp.agent.cli", "apply", "--dry-run", str(document),
                          "--state", str(tmp_path / "state.db")], capture_output=True, text=True, check=False)
    assert dry.returncode == 0, dry.stderr
    assert "dry run: generation 7" in dry.stdout and "nothing was changed" in dry.stdout
    status, _, err = run_plan(capsys, path, "--set")
    assert status == 2 and "--set needs --host" in err
    status, _, err = run_plan(capsys, path, "--host", "h9", "--set")
    assert status == 2 and "--host h9: no such host" in err


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`plan | head -1`: the reader goes after a line; no traceback, the status a shell gives SIGPIPE."""
    path = write_inventory(tmp_path, star(60))
    process = subprocess.Popen([sys.executable, "-m", "otcp.service.cli", "plan", path, "--explain"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ})
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 128 + 13 and err == ""


@pytest.mark.parametrize("seed", range(6))
def test_long_path_terms_give_the_long_path_values(seed):
    inv = inventory.parse(random_inventory(seed, long_delays=True))
    long_paths = formulas.LongPaths(bdp_threshold_bytes=[12_500, 1e6][seed % 2], griddt=seed % 3 == 0)
    plan = Plan(inv.fabric(), formulas.Bounds(mss_bytes=1448), long_paths=long_paths)
    for k, record in enumerate(plan.records()):
        e = plan.explain(k, "inventory")
        terms = e.long_path
        assert terms.bdp_bytes == pytest.approx(min(link.capacity_bytes_per_s for link in e.data_path) * e.rtt_prop_s)
        assert terms.long == (terms.bdp_bytes > long_paths.bdp_threshold_bytes)
        assert (terms.congctl, terms.ssthresh, terms.increase) == (record["congctl"], record["ssthresh"],
                                                                  record["increase"])
        if terms.long:
            assert terms.ssthresh == int(formulas.initial_ssthresh_segments(e.fair_share_bytes_per_s, e.rtt_prop_s,
                                                                            1448))
            assert (terms.increase is not None) == long_paths.griddt


def test_no_long_path_terms_without_the_rule():
    plan = Plan(inventory.parse(star(2)).fabric(), long_paths=None)
    assert plan.explain(0).long_path is None


def test_explain_says_why_a_path_is_long(tmp_path, capsys):
    path = write_inventory(tmp_path, star(2, capacity_mbps=1000, delay_us=30_000))
    status, out, _ = run_plan(capsys, path, "--explain", "--host", "h2")
    assert status == 0 and "above the threshold 1250000 B -> congctl otcp_scalable, ssthresh" in out
    status, out, _ = run_plan(capsys, write_inventory(tmp_path, star(2), "short.yaml"), "--explain", "--host", "h2")
    assert status == 0 and "not above the threshold 1250000 B -> no congctl, ssthresh or increase" in out


def test_explain_shows_the_high_fan_in_rule_where_it_raised_the_window(tmp_path, capsys):
    # 64 senders into h1: (1 250 + 21 250) / 64 = 352 B from the queue target; the queue may rise to the
    # whole buffer, less one full frame kept free and each sender's 66 B ACK, instead: (85 000 - 1 514) / 64
    # - 66 = 1 238 B, segment 1 172 B.
    path = write_inventory(tmp_path, star(64))
    status, out, err = run_plan(capsys, path, "--explain", "--host", "h2", "--lossless")
    assert status == 0 and err == ""
    h1 = out.split("h2 -> h1")[1].split("h2 -> h3")[0]
    assert "window: smallest at s1 -> h1, (cap_l x RTT_prop + buf_l) / N_l = 352 B" in h1
    assert "high fan-in: N_l full frames do not fit that, so the queue may rise to 1 of the buffer, less one" in h1
    assert "less each flow's ACK (66 B) where smaller -> 1238 B" in h1 and "-> segment 1172 B" in h1
    # Without the rule (and on a path it does not concern) no such line.
    status, out, _ = run_plan(capsys, path, "--explain", "--host", "h2", "--lossless", "--fan-in-queue-fraction", "0")
    assert status == 0 and "high fan-in" not in out and "-> segment 285 B" in out.split("h2 -> h3")[0]


def test_explain_shows_the_admission_and_the_downlinks_count(tmp_path, capsys):
    # 128 senders into h1 with admission: h1 asks at most (85 000 - 1 514) / (1 514 + 66) = 52.8 -> 52 at
    # once, so its downlink counts 52 flows: (1 250 + 21 250) / 52 = 433 B from the queue target, raised
    # to one full frame each (83 486 / 52 - 66 = 1 539.5 B is above it): segment 1 448 B.
    path = write_inventory(tmp_path, star(128))
    status, out, err = run_plan(capsys, path, "--explain", "--host", "h2", "--lossless", "--fan-in-admission")
    assert status == 0 and err == ""
    h1 = out.split("h2 -> h1")[1].split("h2 -> h3")[0]
    downlink = next(line for line in h1.splitlines() if line.split()[:3] == ["s1", "->", "h1"])
    assert downlink.split()[-6:] == ["128", "(52", "admitted)", "52", "433", "B"]  # F_l, N_l, window
    assert "(cap_l x RTT_prop + buf_l) / N_l = 433 B" in h1
    assert "admission: the destination asks at most 52 senders at once" in h1 and "-> segment 1448 B" in h1
    # --json carries it as the segment's admitted_flows; without admission there is none.
    status, out, _ = run_plan(capsys, path, "--explain", "--host", "h2", "--lossless", "--fan-in-admission",
                              "--json")
    assert '"admitted_flows": 52' in out
    downlink = json.loads(out)["paths"][0]["explain"]["data_path"][-1]
    assert (downlink["flows"], downlink["admitted_flows"], downlink["sharing"]) == (128, 52, 52)
    status, out, _ = run_plan(capsys, path, "--explain", "--host", "h2", "--lossless")
    assert "admission" not in out and "-> segment 520 B" in out.split("h2 -> h3")[0]
    status, out, err = run_plan(capsys, path, "--fan-in-admission")
    assert status == 2 and out == "" and "--fan-in-admission needs --lossless" in err
