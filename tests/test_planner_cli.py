"""`otcp-controller plan`: good inventories print every pair, bad ones exit 2
with one message naming the file, the entry and the problem."""

import json
import subprocess
import sys

import pytest
import yaml

from otcp.service import cli
from support.inventories import star, write_inventory
from support.messages import hello


def run_plan(capsys, path, *extra):
    status = cli.main(["plan", path, *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_json_output_has_every_ordered_pair(tmp_path, capsys):
    path = write_inventory(tmp_path, star(3))
    status, out, err = run_plan(capsys, path, "--json")
    assert status == 0 and err == ""
    paths = json.loads(out)["paths"]
    assert len(paths) == 4 * 3
    h2_h1 = next(p for p in paths if (p["src"], p["dst"]) == ("h2", "h1"))
    assert set(h2_h1) == {"src", "dst", "dst_ip", "hops", "min_rto_us", "rto_min_ms", "initcwnd", "cwnd_clamp",
                          "segment_bytes", "pacing_rate", "rtt_prop_us", "rtt_spread_us", "rtt_source", "quickack",
                          "congctl", "ssthresh", "increase"}
    assert (h2_h1["rtt_prop_us"], h2_h1["rtt_source"]) == (100.0, "inventory")
    assert h2_h1["dst_ip"] == "10.0.0.1" and h2_h1["rto_min_ms"] == 14


def test_table_output(tmp_path, capsys):
    status, out, _ = run_plan(capsys, write_inventory(tmp_path, star(2)))
    lines = out.splitlines()
    assert status == 0
    assert lines[0].split() == ["src", "dst", "dst_ip", "minRTO_us", "rto_min_ms", "initcwnd", "cwnd_clamp", "segment_B",
                                 "pacing_Bps", "congctl", "ssthresh", "increase", "RTTprop_us", "rtt_from", "path"]
    assert len(lines) == 1 + 3 * 2
    assert any(line.split()[:2] == ["h2", "h1"] and line.endswith("h2 s1 h1") for line in lines)


def test_a_long_path_gets_the_congestion_control_ssthresh_and_increase(tmp_path, capsys):
    """Two racks joined by a 1 Gb/s link of 60 ms each way: the racks' own pairs (40 us) get
    nothing, the pairs between them (RTT 120.04 ms, BDP 15 MB) otcp_scalable, ssthresh
    floor(125e6 x 0.12004 / 1448) = 10362 and with --griddt A = round(2 x 1.2004^2) = 3."""
    host = {"capacity_mbps": 1000, "delay_us": 10, "buffer_bytes": 131072}
    document = {"switches": ["s1", "s2"],
                "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}, "h3": {"ip": "10.0.1.1"}},
                "links": [{"a": "h1", "b": "s1", **host}, {"a": "h2", "b": "s1", **host},
                          {"a": "s1", "b": "s2", "capacity_mbps": 1000, "delay_us": 60000, "buffer_bytes": 10**6},
                          {"a": "h3", "b": "s2", **host}]}
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(document))
    for flags, increase in (([], None), (["--griddt"], 3)):
        status, out, _ = run_plan(capsys, str(path), "--json", *flags)
        assert status == 0
        got = {(p["src"], p["dst"]): (p["congctl"], p["ssthresh"], p["increase"]) for p in json.loads(out)["paths"]}
        assert got[("h1", "h2")] == got[("h2", "h1")] == (None, None, None)
        assert got[("h1", "h3")] == got[("h3", "h2")] == ("otcp_scalable", 10362, increase)
    status, out, _ = run_plan(capsys, str(path), "--json", "--bdp-threshold", "2e7")
    assert {p["congctl"] for p in json.loads(out)["paths"]} == {None}
    status, out, _ = run_plan(capsys, str(path), "--json", "--no-long-paths")
    assert {p["congctl"] for p in json.loads(out)["paths"]} == {None}


def test_unreachable_pairs_are_left_out_and_reported(tmp_path, capsys):
    document = {
        "switches": ["s1", "s2"],
        "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}, "h3": {"ip": "10.0.0.3"}},
        "links": [{"a": "h1", "b": "s1"}, {"a": "h2", "b": "s1"}, {"a": "h3", "b": "s2"}],
    }
    status, out, err = run_plan(capsys, write_inventory(tmp_path, document), "--json")
    assert status == 0
    pairs = {(p["src"], p["dst"]) for p in json.loads(out)["paths"]}
    assert pairs == {("h1", "h2"), ("h2", "h1")}
    assert "no path from h1 to h3" in err and "no path from h3 to h2" in err
    assert err.count("no path") == 4


def test_defaults_fill_missing_link_values(tmp_path, capsys):
    document = {
        "defaults": {"capacity_mbps": 100, "buffer_bytes": 85000, "delay_us": 25},
        "switches": ["s1"],
        "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}},
        "links": [{"a": "h1", "b": "s1"}, {"a": "h2", "b": "s1"}],
    }
    _, out, _ = run_plan(capsys, write_inventory(tmp_path, document), "--json")
    assert json.loads(out)["paths"][0]["min_rto_us"] == pytest.approx(13700.0)


BASE = {
    "switches": ["s1", "s2"],
    "hosts": {"h1": {"ip": "10.0.0.1"}, "h2": {"ip": "10.0.0.2"}},
    "links": [{"a": "h1", "b": "s1"}, {"a": "s1", "b": "s2"}, {"a": "h2", "b": "s2"}],
}


def edited(**changes):
    document = json.loads(json.dumps(BASE))
    document.update(changes)
    return document


BAD_INVENTORIES = [
    (edited(links=BASE["links"] + [{"a": "s2", "b": "s9"}]), "links[3].b: unknown node 's9'"),
    (edited(links=BASE["links"] + [{"a": "s2", "b": "s1"}]), "links[3]: duplicate link 's2' - 's1' (already links[1])"),
    (edited(links=[{**BASE["links"][0], "capacity_mbps": 0}] + BASE["links"][1:]), "links[0].capacity_mbps: 0 must be above 0"),
    (edited(links=[{**BASE["links"][0], "capacity_mbps": -5}] + BASE["links"][1:]), "links[0].capacity_mbps: -5 must be above 0"),
    (edited(links=[{**BASE["links"][0], "delay_us": -1}] + BASE["links"][1:]), "links[0].delay_us: -1 is below the minimum 0"),
    (edited(links=[{**BASE["links"][0], "buffer_bytes": -10}] + BASE["links"][1:]), "links[0].buffer_bytes: -10 is below the minimum 0"),
    (edited(links=BASE["links"][1:]), "hosts.h1: has no link"),
    (edited(hosts={**BASE["hosts"], "h3": {"ip": "10.0.0.1"}}), "hosts.h3.ip: 10.0.0.1 is already the address of 'h1'"),
    (edited(hosts={"h1": {"ip": "10.0.0.999"}, "h2": {"ip": "10.0.0.2"}}), "hosts.h1.ip: '10.0.0.999' is not an IP address"),
    (edited(links=BASE["links"] + [{"a": "h1", "b": "s2"}]), "host 'h1' already has a link"),
    (edited(links=BASE["links"] + [{"a": "s1", "b": "s1"}]), "links[3]: links 's1' to itself"),
    (edited(links=[{**BASE["links"][0], "speed": 1}] + BASE["links"][1:]), "links[0].speed: unknown key"),
    (edited(links=[{**BASE["links"][0], "capacity_mbps": "fast"}] + BASE["links"][1:]), 'links[0].capacity_mbps: "fast" is not a number'),
    (edited(flows=[{"src": "h1", "dst": "h7"}]), "flows[0].dst: unknown host 'h7'"),
    (edited(flows=[{"src": "h1", "dst": "h2", "count": 0}]), "flows[0].count: 0 is out of range 1..2147483647"),
    (edited(mss_bytes=0), "mss_bytes: 0 is out of range 1..65535"),
    (edited(extra=1), "extra: unknown key"),
    (edited(switches=["s1", "s1", "s2"]), "switches.s1: declared twice"),
    (edited(switches={"s1": {"dpid": 1}, "s2": {"dpid": 1}}), "switches.s2.dpid: 1 is already the dpid of 's1'"),
    (edited(links=[{**BASE["links"][0], "capacity_mbps": float("nan")}] + BASE["links"][1:]),
     "links[0].capacity_mbps: NaN is not a finite number"),
    (edited(links=[{**BASE["links"][0], "delay_us": float("inf")}] + BASE["links"][1:]),
     "links[0].delay_us: Infinity is not a finite number"),
    (edited(links=[{**BASE["links"][0], "buffer_bytes": True}] + BASE["links"][1:]),
     "links[0].buffer_bytes: true is not a number"),
    (edited(mss_bytes=1448.0), "mss_bytes: 1448.0 is not an integer"),
]


@pytest.mark.parametrize("document, message", BAD_INVENTORIES, ids=[m for _, m in BAD_INVENTORIES])
def test_bad_inventory_exits_2_naming_file_entry_and_problem(tmp_path, capsys, document, message):
    path = write_inventory(tmp_path, document)
    status, out, err = run_plan(capsys, path)
    assert status == 2
    assert out == ""
    assert err.startswith(f"otcp-controller plan: {path}: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_yaml_syntax_error_names_line(tmp_path, capsys):
    path = write_inventory(tmp_path, "switches: [s1\nhosts: {h1: {ip: 10.0.0.1}}\n")
    status, _, err = run_plan(capsys, path)
    assert status == 2
    assert f"{path}: YAML syntax error at line" in err


def test_missing_inventory_file(tmp_path, capsys):
    status, _, err = run_plan(capsys, str(tmp_path / "absent.yaml"))
    assert status == 2 and "absent.yaml: no such file" in err


def test_console_script_exit_status(tmp_path):
    path = write_inventory(tmp_path, edited(links=BASE["links"][1:]))
    result = subprocess.run(
        [sys.executable, "-m", "otcp.service.cli", "plan", path], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "hosts.h1: has no link" in result.stderr


def test_show_prints_the_last_generation_its_inputs_and_acks(tmp_path, capsys):
    from otcp.controller import store

    path = str(tmp_path / "controller.db")
    state = store.Store(path)
    record = {
        "src": "h2", "dst": "h1", "dst_ip": "10.0.0.1", "hops": ["h2", "s1", "h1"], "min_rto_us": 13700.0,
        "rto_min_ms": 14, "initcwnd": 1, "cwnd_clamp": 3, "quickack": True, "segment_bytes": 1448,
        "rtt_prop_us": 100.0, "rtt_spread_us": 0.0, "rtt_source": "inventory", "pacing_rate": None,
        "congctl": None, "ssthresh": None, "increase": None,
    }
    link = store.LinkMeasurement("s1", "h1", 25e-6, "measured", 4, 12.5e6, 85000.0, 16)
    state.save_generation(store.Generation(3, [record], [link], {("h2", "h1"): 1}))
    state.save_ack("10.0.0.2", 3, [])
    state.save_agent("10.0.0.2", hello(hostname="h2", addresses=["10.0.0.2"]))
    state.close()
    assert cli.main(["show", "--database", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith("generation 3, computed at ")
    assert "h2   h1   10.0.0.1  13700.0" in out
    assert "s1 -> h1: delay 25.0 us (measured, 4 samples), 100 Mb/s, buffer 85000 B, 16 active flows" in out
    assert ("10.0.0.2: acknowledged generation 3, h2: MSS 1448 B, congestion control cubic of reno cubic, "
            "tcp_rto_min_us present") in out
    assert cli.main(["show", "--database", path, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["paths"] == [record] and shown["acked_generations"] == {"10.0.0.2": 3}
    assert shown["agents"]["10.0.0.2"]["mss_bytes"] == 1448
    assert shown["links"][0]["delay_source"] == "measured"


def test_show_without_database_exits_2(tmp_path, capsys):
    assert cli.main(["show", "--database", str(tmp_path / "none.db")]) == 2
    assert "none.db: no such database" in capsys.readouterr().err


def test_show_json_on_a_database_without_parameters_is_json(tmp_path, capsys):
    from otcp.controller import store

    path = str(tmp_path / "controller.db")
    store.Store(path).close()
    assert cli.main(["show", "--database", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"generation": None, "computed_at": None,
                                                   "generations_in_the_minute_before": 0, "paths": [], "links": [],
                                                   "acked_generations": {}, "agents": {}}
    assert cli.main(["show", "--database", path]) == 0
    assert capsys.readouterr().out == f"{path}: no parameters computed yet\n"


def test_plan_shows_the_lossless_fields(tmp_path, capsys):
    path = write_inventory(tmp_path, star(16))
    status, out, _ = run_plan(capsys, path, "--lossless", "--json")
    assert status == 0
    h2_h1 = next(p for p in json.loads(out)["paths"] if (p["src"], p["dst"]) == ("h2", "h1"))
    # 16 full frames do not fit the queue target: each sender keeps one (the fan-in rule).
    assert (h2_h1["segment_bytes"], h2_h1["cwnd_clamp"], h2_h1["initcwnd"]) == (1448, 1, 1)
    status, out, _ = run_plan(capsys, path, "--lossless")
    assert "segment_B" in out.splitlines()[0]
    # Without the rule, the segment shrinks to fit the target: 22 500 / 16 - 66 = 1 340 B.
    status, out, _ = run_plan(capsys, path, "--lossless", "--fan-in-queue-fraction", "0", "--json")
    h2_h1 = next(p for p in json.loads(out)["paths"] if (p["src"], p["dst"]) == ("h2", "h1"))
    assert status == 0 and (h2_h1["segment_bytes"], h2_h1["cwnd_clamp"]) == (1340, 1)
    status, _, err = run_plan(capsys, path, "--lossless", "--fan-in-queue-fraction", "2")
    assert status == 2 and "fan_in_queue_fraction must be a number in [0, 1], got 2.0" in err


def test_plan_shows_the_pacing_rate(tmp_path, capsys):
    path = write_inventory(tmp_path, star(4))
    status, out, _ = run_plan(capsys, path, "--lossless", "--pacing", "--json")
    assert status == 0
    h2_h1 = next(p for p in json.loads(out)["paths"] if (p["src"], p["dst"]) == ("h2", "h1"))
    assert h2_h1["pacing_rate"] == 3_281_250  # 12.5e6 B/s / 4 flows x 1.05
    status, out, _ = run_plan(capsys, path, "--pacing", "--pacing-headroom", "0", "--json")
    h2_h1 = next(p for p in json.loads(out)["paths"] if (p["src"], p["dst"]) == ("h2", "h1"))
    assert h2_h1["pacing_rate"] == 3_125_000
    status, out, _ = run_plan(capsys, path, "--pacing")
    header, *rows = out.splitlines()
    assert "pacing_Bps" in header and any("3281250" in row.split() for row in rows)
    status, out, _ = run_plan(capsys, path, "--json")
    assert all(p["pacing_rate"] is None for p in json.loads(out)["paths"])


@pytest.mark.parametrize("options", [("--pacing", "--pacing-headroom", "nan"), ("--pacing", "--pacing-headroom", "-1"),
                                     ("--pacing", "--pacing-headroom", "2"), ("--pacing-headroom", "0.1")])
def test_plan_refuses_bad_pacing_settings(tmp_path, capsys, options):
    status, out, err = run_plan(capsys, write_inventory(tmp_path, star(2)), *options)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1 and "pacing" in err


@pytest.mark.parametrize("option, value", [("--queue-target-fraction", "nan"), ("--queue-target-fraction", "1.5"),
                                           ("--mss-floor", "10")])
def test_plan_refuses_bad_lossless_settings(tmp_path, capsys, option, value):
    status, out, err = run_plan(capsys, write_inventory(tmp_path, star(2)), "--lossless", option, value)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
