"""The switch's datapath (otcp.experiments.runner.datapath) and the comparison that chooses it
(otcp.experiments.datapaths), on text and data: no network. The ports for real, the fallback
where the kernel refuses XDP, and calibration on each datapath: tests/integration/test_calibration.py."""

import json
import subprocess

import pytest

from otcp.experiments import cli, datapaths
from otcp.experiments.calibrate import CalibrationRow
from otcp.experiments.cli import build_parser, datapath_config_from_args
from otcp.experiments.runner import datapath
from otcp.experiments.runner.datapath import Datapath, DatapathInUse
from otcp.experiments.runner.emulation import UserspaceSwitch
from otcp.topo.fabrics import LeafSpineTopo, StarTopo

# What Open vSwitch 3.1 logged when the kernel refused native XDP on a veth whose peer's MTU is 9000.
REFUSAL_LOG = """\
2026-11-27T07:33:21.404Z|00059|netdev_afxdp|WARN|libbpf: prog 'xdp_pass': BPF program load failed: Operation not permitted
2026-11-27T07:33:21.406Z|00063|netdev_afxdp|WARN|libbpf: Kernel error message: veth: Peer MTU is too large to set XDP
2026-11-27T07:33:21.407Z|00064|netdev_afxdp|ERR|xsk_socket__create failed (Numerical result out of range) mode: native, use-need-wakeup: true, qid: 0
2026-11-27T07:33:21.421Z|00065|netdev_afxdp|ERR|s1-eth1: Failed to create AF_XDP socket on queue 0 in native mode.
2026-11-27T07:33:21.421Z|00067|netdev_afxdp|INFO|s1-eth1: Removing xdp program.
2026-11-27T07:33:21.421Z|00071|dpif|WARN|netdev@ovs-netdev: failed to add s1-eth1 as port: Invalid argument
2026-11-27T07:33:21.421Z|00072|bridge|WARN|could not add network device s1-eth1 to ofproto (Invalid argument)
"""


def test_a_datapath_names_its_port_type_and_settings_and_refuses_nonsense():
    assert Datapath().interface_settings() == [] and Datapath().ovs_type == "system" and not Datapath().is_xdp
    nonpmd = Datapath.named("afxdp-nonpmd", "generic")
    assert nonpmd.interface_settings() == ["type=afxdp-nonpmd", "options:xdp-mode=generic"]
    assert (nonpmd.ovs_type, nonpmd.label, nonpmd.is_xdp) == ("afxdp-nonpmd", "afxdp-nonpmd generic", True)
    assert Datapath.named("afpacket", "generic") == Datapath()
    for kind, mode in (("dpdk", None), ("afpacket", "native"), ("afxdp", None), ("afxdp", "native-with-zerocopy")):
        with pytest.raises(ValueError):
            Datapath(kind, mode)


def test_mininet_adds_each_port_with_the_datapaths_settings(monkeypatch):
    monkeypatch.setattr(UserspaceSwitch, "OVSVersion", "3.1.0", raising=False)
    switch = UserspaceSwitch.__new__(UserspaceSwitch)
    switch.ports = {"s1-eth1": 1}
    assert switch.intfOpts("s1-eth1") == " -- set Interface s1-eth1 ofport_request=1"
    switch.port_settings = Datapath.named("afxdp").interface_settings()
    assert switch.intfOpts("s1-eth1") == \
        " -- set Interface s1-eth1 ofport_request=1 type=afxdp options:xdp-mode=native"


def test_before_the_network_starts_afxdp_falls_back_where_this_open_vswitch_or_topology_cannot():
    star = StarTopo(2, bw=100, buffer_bytes=85000)
    asked = Datapath.named("afxdp-nonpmd")
    assert datapath.choose(asked, star, ["afxdp", "afxdp-nonpmd", "system"]) == DatapathInUse(asked, asked)
    refused = datapath.choose(asked, star, ["system", "internal", "tap"])
    assert refused.used == Datapath() and "no afxdp-nonpmd port type (iface_types: system, internal, tap)" in \
        refused.reason
    assert refused.note.startswith("datapath afxdp-nonpmd native not available, the switch runs on afpacket: ")
    fabric = datapath.choose(asked, LeafSpineTopo(2, 2, 2, bw=100, buffer_bytes=85000), ["afxdp-nonpmd"])
    assert fabric.used == Datapath() and "switch-to-switch links" in fabric.reason
    assert datapath.choose(Datapath(), star, []) == DatapathInUse(Datapath(), Datapath())


def test_open_vswitchs_answers_are_read_as_port_types_errors_and_xdp_modes():
    listing = json.dumps({"headings": ["name", "type", "error"], "data": [
        ["s1-eth1", "afxdp-nonpmd", "could not add network device s1-eth1 to ofproto (Invalid argument)"],
        ["s1-eth2", "", ["set", []]]]})
    assert datapath.parse_interfaces(listing) == {
        "s1-eth1": ("afxdp-nonpmd", "could not add network device s1-eth1 to ofproto (Invalid argument)"),
        "s1-eth2": ("system", None)}
    show = """netdev@ovs-netdev:
  lookups: hit:1 missed:1 lost:0
  port 0: ovs-netdev (tap)
  port 1: s1-eth1 (afxdp-nonpmd: n_rxq=1, use-need-wakeup=true, xdp-mode=native, xdp-mode-in-use=native)
  port 2: s1-eth2 (afxdp: n_rxq=1, use-need-wakeup=true, xdp-mode=best-effort, xdp-mode-in-use=generic)
  port 3: s2-eth1
"""
    assert datapath.parse_dpctl_modes(show) == {"s1-eth1": "native", "s1-eth2": "generic"}


def test_the_reason_of_a_refusal_is_the_kernels_words_first_then_open_vswitchs_errors():
    reasons = datapath.select_reasons(REFUSAL_LOG.splitlines(), ["s1-eth1", "s1-eth2"])
    assert reasons[0] == "veth: Peer MTU is too large to set XDP"
    assert reasons[1].startswith("xsk_socket__create failed (Numerical result out of range) mode: native")
    assert "s1-eth1: Failed to create AF_XDP socket on queue 0 in native mode." in reasons
    assert not any("Removing xdp program" in r or "2026-" in r for r in reasons)
    assert datapath.select_reasons(["2026-11-27T07:33:21.421Z|00011|memory|INFO|15640 kB"], ["s1-eth1"]) == []


def test_the_wires_payload_share_bounds_one_flow():
    # 1448 of every 1514 B frame, 698 of 764, 348 of 414: at 400 B no switch reaches 90 Mb/s.
    assert datapaths.wire_share_mbps(100, 1500) == pytest.approx(95.64, abs=0.01)
    assert datapaths.wire_share_mbps(100, 750) == pytest.approx(91.36, abs=0.01)
    assert datapaths.wire_share_mbps(100, 400) == pytest.approx(84.06, abs=0.01)


def row(packet, drops=10, peak=84800, unexplained=0, switch_input=0, used="afpacket"):
    return CalibrationRow(buffer_bytes=85000, packet_bytes=packet, peak_backlog_bytes=peak,
                          sent=1000, received=1000 - drops - unexplained - switch_input, drops=drops,
                          control_packets=0, backlog_samples=100, switch_input_drops=switch_input, datapath=used)


def candidate(label, ceilings, switch_cpu, rows, used=None, pmd=None):
    return datapaths.Candidate(label, used=[{"asked": label, "used": used or label, "reason": None}],
                               ceilings=[datapaths.CeilingAt(p, (m,), switch_cpu, 50.0, pmd) for p, m in ceilings],
                               calibration=rows)


def test_a_buffer_holds_when_its_largest_peak_does_and_nothing_may_be_lost_elsewhere():
    # One burst's peak sampled short (the sampler missed its full moment), another's not: the buffer held.
    held = datapaths.verdict([row(400, peak=84456), row(400), row(1500, peak=84784)])
    assert (held.bursts, held.filled, held.held, held.pairs, held.shortfall_bytes) == (3, 3, 2, 2, 216)
    assert held.faithful
    # Never filled (no drops): the pair does not count as held.
    assert not datapaths.verdict([row(400, drops=0, peak=40000)]).faithful
    assert not datapaths.verdict([row(1500), row(400, switch_input=3)]).faithful
    assert not datapaths.verdict([row(1500, unexplained=1)]).faithful
    assert not datapaths.verdict([row(1500, peak=83000)]).faithful
    assert not datapaths.verdict([]).faithful


def test_the_choice_is_the_fastest_faithful_candidate_and_says_why_of_each():
    ceilings = [(1500, 95.5), (400, 83.5)]
    afpacket = candidate("afpacket", ceilings, 35.0, [row(1500), row(400)])
    lossy = candidate("afxdp-nonpmd native", ceilings, 20.0, [row(1500), row(400)])
    lossy.loaded = [row(1500), row(400, switch_input=261)]
    cheaper = candidate("afxdp-nonpmd generic", [(1500, 95.4), (400, 83.0)], 22.0, [row(1500), row(400)])
    refused = candidate("afxdp native", ceilings, 30.0, [row(1500)], used="afpacket")
    slow = candidate("afxdp native", [(1500, 95.5), (400, 80.0)], 10.0, [row(1500), row(400)])
    chosen = datapaths.choice([afpacket, lossy, cheaper, refused], [1500, 400])
    # Same ceiling at 400 B (within 2 %): the least switch CPU at 1500 B of the faithful ones.
    assert chosen["datapath"] == "afxdp-nonpmd generic"
    assert "afxdp-nonpmd native: not faithful (loaded: 261 frames lost at the switch's input, 0 unexplained, " \
           "2 of 2 buffers within one frame)" in chosen["why"]
    assert any("afxdp native: not available here (ran on afpacket)" in why for why in chosen["why"])
    # A lower ceiling at the smallest packets loses, however little CPU it takes.
    assert datapaths.choice([afpacket, slow], [1500, 400])["datapath"] == "afpacket"
    assert datapaths.choice([lossy], [1500, 400])["datapath"] is None


def test_the_page_holds_every_candidates_ceilings_calibration_and_the_choice():
    loaded = candidate("afxdp native", [(1500, 95.4), (400, 83.6)], 99.0, [row(1500), row(400)], pmd=41.0)
    loaded.loaded = [row(1500, switch_input=5), row(400)]
    summary = {"experiment": "datapath", "bw_mbps": 100.0, "buffers": [85000], "packet_sizes": [1500, 400],
               "bursts": 1, "busy_loops": 2, "wire_share_mbps": {"1500": 95.64, "400": 84.06},
               "candidates": [candidate("afpacket", [(1500, 95.5), (400, 83.5)], 35.0,
                                        [row(1500), row(400)]).as_dict(), loaded.as_dict()],
               "command": "otcp-experiment datapath --out results/datapath", "choice": {"datapath": "afpacket",
                                                                                     "why": ["afpacket: faithful"]}}
    text = datapaths.page(summary)
    assert "    otcp-experiment datapath --out results/datapath" in text
    assert "| afpacket | afpacket | 400 | 83.5 (83.5) | 84.1 | 35 % | - | 50 % |" in text
    assert "| afxdp native | afxdp native | 1500 | 95.4 (95.4) | 95.6 | 99 % | 41 % | 50 % |" in text
    # A summary from before the PMD column: its ceilings read back with none.
    old = {**loaded.as_dict(), "ceilings": [{k: v for k, v in c.items() if k != "switch_pmd_busy_pct"}
                                            for c in loaded.as_dict()["ceilings"]]}
    assert datapaths.Candidate.from_dict(old).ceilings[0].switch_pmd_busy_pct is None
    assert datapaths.Candidate.from_dict(loaded.as_dict()).ceilings[0].switch_pmd_busy_pct == 41.0
    assert "| afpacket | quiet | 2 | 2 | 2 of 2 | 200 (1514) | 0 | 0 | yes |" in text
    assert "| afxdp native | loaded | 2 | 2 | 2 of 2 | 200 (1514) | 5 | 0 | NO |" in text
    assert "**afpacket**" in text


def test_the_comparisons_options_are_checked():
    parser = build_parser()
    config = datapath_config_from_args(parser.parse_args(
        ["datapath", "--datapaths", "afpacket,afxdp-nonpmd:generic,afxdp", "--out", "/tmp/otcp-datapath-args"]),
        parser)
    assert config.candidates == [Datapath(), Datapath("afxdp-nonpmd", "generic"), Datapath("afxdp", "native")]
    assert (config.buffers, config.packet_sizes, config.bursts, config.busy_loops) == \
        ([85000, 512000], [1500, 750, 400], 3, 2)
    for bad in ("afpacket,afpacket", "afxdp:zerocopy", "afpacket:native", "dpdk"):
        with pytest.raises(SystemExit):
            datapath_config_from_args(parser.parse_args(["datapath", "--datapaths", bad]), parser)


def test_a_page_is_written_again_from_a_summary_by_the_rules_of_the_code(tmp_path):
    quick = candidate("afxdp-nonpmd native", [(1500, 95.6), (400, 84.0)], 26.0, [row(1500), row(400)])
    summary = {"experiment": "datapath", "bw_mbps": 100.0, "buffers": [85000], "packet_sizes": [1500, 400],
               "bursts": 1, "wire_share_mbps": {"1500": 95.64, "400": 84.06},
               "candidates": [candidate("afpacket", [(1500, 95.6), (400, 83.9)], 35.0,
                                        [row(1500), row(400)]).as_dict(), quick.as_dict()],
               # A choice recorded by older rules: made again from the rows.
               "command": "otcp-experiment datapath --out DIR", "choice": {"datapath": None, "why": []}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    text = datapaths.rewrite_page(str(tmp_path))
    assert (tmp_path / "datapath.md").read_text() == text
    assert "**afxdp-nonpmd native**" in text and "processes spinning" not in text
    assert build_parser().parse_args(["datapath", "--rewrite-page", "--out", str(tmp_path)]).rewrite_page


def test_a_comparison_failed_when_a_candidate_could_not_be_measured():
    measured = datapaths.Candidate("afpacket")
    assert not datapaths.Comparison([measured], {}).failed
    stopped = datapaths.Candidate("afxdp-nonpmd:native", error="ovs-vsctl: the port was refused")
    assert datapaths.Comparison([measured, stopped], {}).failed


def test_a_sleeping_pmd_and_batched_output_are_named_parsed_and_checked(capsys):
    sleeping = Datapath.named("afxdp", pmd_maxsleep_us=100)
    assert sleeping.label == "afxdp native, PMD sleeps up to 100 us"
    assert sleeping.ovs_settings() == {"pmd-maxsleep": 100} and Datapath().ovs_settings() == {}
    both = Datapath("afxdp", "native", True, 50, 20)
    assert both.label == "afxdp native, pinned, PMD sleeps up to 50 us, output batched up to 20 us"
    assert both.ovs_settings() == {"pmd-maxsleep": 50, "tx-flush-interval": 20}
    batched = Datapath.named("afpacket", tx_flush_us=50)
    assert (batched.label, batched.ovs_settings()) == ("afpacket, output batched up to 50 us",
                                                      {"tx-flush-interval": 50})
    for kind, mode, sleep, flush, words in (
            ("afpacket", None, 100, 0, "no PMD thread"), ("afxdp-nonpmd", "native", 100, 0, "no PMD thread"),
            ("afxdp", "native", -1, 0, "PMD sleep -1"), ("afxdp", "native", 10_001, 0, "PMD sleep 10001"),
            ("afxdp", "native", True, 0, "PMD sleep True"), ("afxdp", "native", 1.5, 0, "PMD sleep 1.5"),
            ("afpacket", None, 0, 1_000_001, "output batch wait 1000001"),
            ("afpacket", None, 0, float("nan"), "output batch wait nan"), ("afpacket", None, 0, True, "wait True")):
        with pytest.raises(ValueError, match=words):
            Datapath(kind, mode, False, sleep, flush)
    parser = build_parser()
    config = datapath_config_from_args(parser.parse_args(
        ["datapath", "--datapaths", "afxdp:native+maxsleep=100,afxdp+pinned+maxsleep=50+flush=20,afpacket+flush=50,"
         "afxdp", "--out", "/tmp/otcp-sleep-args"]), parser)
    assert config.candidates == [sleeping, both, batched, Datapath("afxdp", "native")]
    for bad in ("afxdp+maxsleep", "afxdp+maxsleep=x", "afpacket+maxsleep=100", "afxdp+maxsleep=20000",
                "afpacket+flush=-1", "afpacket+flush=2000000", "afpacket+batch=5"):
        with pytest.raises(SystemExit):
            datapath_config_from_args(parser.parse_args(["datapath", "--datapaths", bad]), parser)
    incast = cli.config_from_args(parser.parse_args(["incast", "--datapath", "afxdp", "--pmd-maxsleep-us", "100"]),
                                  parser)
    assert incast.switch_datapath() == sleeping
    flushed = cli.config_from_args(parser.parse_args(["incast", "--tx-flush-us", "50"]), parser)
    assert flushed.switch_datapath() == batched
    with pytest.raises(SystemExit):
        cli.config_from_args(parser.parse_args(["incast", "--pmd-maxsleep-us", "100"]), parser)
    assert "--pmd-maxsleep-us/--tx-flush-us: datapath afpacket has no PMD thread" in capsys.readouterr().err


@pytest.mark.root
def test_open_vswitchs_settings_hold_while_the_network_runs_and_are_put_back_after():
    """On the real Open vSwitch: both keys are there inside; after, what was there before (none, or a value)."""
    keys = ("pmd-maxsleep", "tx-flush-interval")

    def setting(key):
        return subprocess.run(["ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", f"other_config:{key}"],
                              capture_output=True, text=True, check=True).stdout.strip()

    def put(key, value):
        subprocess.run(["ovs-vsctl", "set", "Open_vSwitch", ".", f"other_config:{key}={value}"] if value else
                       ["ovs-vsctl", "remove", "Open_vSwitch", ".", "other_config", key], check=True)

    before = {key: setting(key) for key in keys}
    try:
        for earlier in ({"pmd-maxsleep": "", "tx-flush-interval": ""}, {"pmd-maxsleep": '"7"', "tx-flush-interval": ""}):
            for key, value in earlier.items():
                put(key, value)
            with datapath.ovs_other_config({"pmd-maxsleep": 100, "tx-flush-interval": 20}):
                assert (setting("pmd-maxsleep"), setting("tx-flush-interval")) == ('"100"', '"20"')
            assert {key: setting(key) for key in keys} == earlier
    finally:
        for key, value in before.items():
            put(key, value)
