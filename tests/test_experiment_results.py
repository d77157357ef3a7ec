"""The result schema, the SQLite store, the plots and the CLI's argument checks (no network)."""

import json
import sqlite3

import pytest

from experiments import cli, incast, results, schemes


def a_run(**changes):
    run = {"scheme": "default", "senders": 16, "buffer_bytes": 85000, "sru_bytes": 262144,
           "goodput_mbps": 31.5, "fct_mean_ms": 250.0, "fct_p50_ms": 240.0, "fct_p95_ms": 300.0,
           "fct_p99_ms": 320.0, "drops": 120, "timeouts": 30, "probe_rtt_avg_ms": 5.2, "probe_rtt_max_ms": 9.9}
    run.update(changes)
    return run


def full_record(**changes):
    record = a_run(rounds=3, persistent=0, drops_elsewhere=0, lost_in_switch=4, peak_backlog_bytes=84000,
                   retransmissions=200, probe_rtt_std_ms=1.0, probe_lost=0.0)
    record.update(changes)
    return record


def test_a_good_summary_passes():
    results.check_summary({"ceiling_mbps": 95.6, "runs": [a_run(), a_run(probe_rtt_avg_ms=None,
                                                                        probe_rtt_max_ms=None)],
                           "unavailable": [{"scheme": "dctcp", "reason": "no tcp_dctcp"}]})


@pytest.mark.parametrize("run, message", [
    ({k: v for k, v in a_run().items() if k != "drops"}, "missing drops"),
    (a_run(goodput_mbps="fast"), "goodput_mbps"),
    (a_run(senders=2.5), "senders"),
    (a_run(drops=-1), "negative"),
    (a_run(timeouts=True), "timeouts"),
    (a_run(fct_p95_ms=400.0), "out of order"),
    (a_run(senders=0), "at least 1"),
])
def test_a_bad_run_is_named(run, message):
    with pytest.raises(results.SchemaError, match=message):
        results.check_summary({"ceiling_mbps": 95.6, "runs": [run]})


@pytest.mark.parametrize("document", [
    [], {"runs": []}, {"ceiling_mbps": 0, "runs": []}, {"ceiling_mbps": 90.0, "runs": {}},
    {"ceiling_mbps": 90.0, "runs": [], "unavailable": [{"scheme": "dctcp"}]},
])
def test_a_bad_summary_is_refused(document):
    with pytest.raises(results.SchemaError):
        results.check_summary(document)


def test_write_summary_keeps_only_the_schema_fields(tmp_path):
    path = results.write_summary(str(tmp_path), 95.6, [full_record()], [("dctcp", "no tcp_dctcp")], ["a note"])
    document = json.loads(open(path, encoding="utf-8").read())
    assert set(document["runs"][0]) == set(results.RUN_FIELDS)
    assert document["unavailable"] == [{"scheme": "dctcp", "reason": "no tcp_dctcp"}]
    assert document["notes"] == ["a note"]
    results.check_summary(document)


def test_store_keeps_rounds_flows_counters_and_probe(tmp_path):
    store = results.ResultStore(str(tmp_path / "results.db"), {"senders": [2]})
    store.add_ceiling(2, 85000, 95.0)
    rounds = [{"round": i, "start_s": float(i), "duration_s": 0.1, "bytes": 2000, "flows_s": [0.05, 0.1]}
              for i in range(3)]
    run_id = store.add_run(full_record(senders=2), rounds, ["h2", "h3"],
                           {"h2": {"TcpExtTCPTimeouts": 2}}, [1.0, 2.0],
                           {"s1:s1-eth1": {"qdisc_drops": 5}})
    store.add_unavailable("dctcp", "no tcp_dctcp")
    store.close()
    db = sqlite3.connect(str(tmp_path / "results.db"))
    assert db.execute("SELECT scheme, senders, lost_in_switch FROM runs WHERE id = ?", (run_id,)).fetchone() == \
        ("default", 2, 4)
    assert db.execute("SELECT count(*) FROM rounds").fetchone() == (3,)
    assert db.execute("SELECT server, duration_s FROM flows WHERE round = 1 ORDER BY server").fetchall() == \
        [("h2", 0.05), ("h3", 0.1)]
    assert db.execute("SELECT delta FROM host_counters WHERE host = 'h2'").fetchone() == (2,)
    assert db.execute("SELECT count(*) FROM probe_rtts").fetchone() == (2,)
    assert db.execute("SELECT delta FROM path_counters WHERE place = 's1:s1-eth1'").fetchone() == (5,)
    assert db.execute("SELECT ceiling_mbps FROM invocation").fetchone() == (95.0,)


def test_routes_files_get_one_section_per_network(tmp_path):
    results.write_routes(str(tmp_path), "fine-rto", "h2", "senders=4", "10.0.0.0/8 dev h2-eth0 rto_min 1ms\n")
    path = results.write_routes(str(tmp_path), "fine-rto", "h2", "senders=8", "10.0.0.0/8 dev h2-eth0\n")
    text = open(path, encoding="utf-8").read()
    assert text.index("# senders=4") < text.index("# senders=8")
    assert path.endswith("routes/fine-rto/h2.txt")


def test_plots_are_written(tmp_path):
    runs = [full_record(scheme=s, senders=n, goodput_mbps=g) for s, n, g in
            [("default", 4, 90.0), ("default", 16, 30.0), ("fine-rto", 4, 92.0), ("fine-rto", 16, 85.0)]]
    incast.draw_plots(str(tmp_path), runs, [[100.0, 120.0, 300.0]] * 4, 95.0)
    for name in ("goodput.png", "fct_cdf.png", "fct_bars.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_summary_table_shows_share_of_ceiling():
    table = incast.summary_table([full_record(goodput_mbps=47.5)], 95.0)
    assert "50%" in table and "default" in table


def test_block_modes():
    fixed = incast.IncastConfig(out="x", senders=[4], buffers=[1], schemes=["default"], sru_bytes=1000)
    split = incast.IncastConfig(out="x", senders=[4], buffers=[1], schemes=["default"], sru_bytes=None,
                                total_bytes=1000)
    assert fixed.block_bytes(4) == 1000 and fixed.block_bytes(16) == 1000
    assert split.block_bytes(4) == 250 and split.block_bytes(16) == 62


def test_dctcp_is_unavailable_here_with_a_reason():
    reason = schemes.dctcp_unavailable_reason()
    available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    assert reason
    if "dctcp" not in available:
        assert "tcp_dctcp" in reason


@pytest.mark.parametrize("argv, message", [
    (["--senders", "4,x"], "--senders"),
    (["--senders", "0"], "--senders"),
    (["--senders", "4,4"], "twice"),
    (["--buffer-bytes", "-5"], "--buffer-bytes"),
    (["--schemes", "default,bogus"], "bogus"),
    (["--rounds", "0"], "--rounds"),
    (["--bw-mbps", "5000"], "--bw-mbps"),
    (["--sru-bytes", "1", "--total-bytes", "2"], "not allowed with"),
    (["--total-bytes", "3", "--senders", "4"], "--total-bytes"),
    (["--fine-rto-ms", "0"], "--fine-rto-ms"),
])
def test_bad_arguments_exit_2_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["incast"] + argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_out_must_be_a_directory(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["incast", "--out", str(afile)])
    assert exit_info.value.code == 2
    assert str(afile) in capsys.readouterr().err


def test_quick_preset_and_explicit_options():
    parser = cli.build_parser()
    config = cli.config_from_args(parser.parse_args(["incast", "--quick", "--rounds", "7"]), parser)
    assert config.senders == [4, 8, 16, 32] and config.buffers == [85000]
    assert config.rounds == 7
    assert config.sru_bytes == 65536 and config.total_bytes is None
    assert config.out.endswith("results/quick")
    full = cli.config_from_args(parser.parse_args(["incast", "--total-bytes", "1048576"]), parser)
    assert full.sru_bytes is None and full.block_bytes(16) == 65536
