"""The result schema, the SQLite store, the plots and the CLI's argument checks (no network)."""

import json
import sqlite3
import types
from pathlib import Path

import pytest

from otcp.experiments import cli, incast
from otcp.experiments.analysis import plots, report, results
from otcp.experiments.runner import ceiling, counters, schemes
from support.summaries import a_run


def full_record(**changes):
    fields = a_run(rounds=3, persistent=0, retransmissions=200, probe_rtt_std_ms=1.0, probe_lost=0.0)
    fields.update(changes)
    return results.RunRecord(**fields)


def a_detail(senders=2):
    rounds = [{"round": i, "start_s": float(i), "duration_s": 0.1, "bytes": 2000, "flows_s": [0.05] * senders}
              for i in range(3)]
    return results.RunDetail(rounds=rounds, servers=[f"h{i + 2}" for i in range(senders)],
                             host_counters={"h2": {"TcpExtTCPTimeouts": 2}}, probe_rtts=[1.0, 2.0],
                             path_counters={"s1:s1-eth1": {"qdisc_drops": 5}},
                             queues={"h1": {"buffer": {"sent_packets": 9880, "drops": 120}}})


def samples(*values, senders=16, packet_bytes=1500):
    return [results.CeilingSample(senders, 85000, packet_bytes, v, 50.0) for v in values]


def test_unexplained_may_be_negative_but_not_a_float():
    results.check_run(a_run(unexplained=-3))
    with pytest.raises(results.SchemaError, match="unexplained"):
        results.check_run(a_run(unexplained=1.5))


def test_a_run_keeps_what_the_af_xdp_rings_dropped_and_its_table_row_counts_it_as_other():
    fields = a_run(rounds=3, persistent=0, retransmissions=200, probe_rtt_std_ms=1.0, probe_lost=0.0)
    loss_fields = ("drops", "sent", "delivered", "drops_other_buffers", "sender_queue_drops", "unexplained")
    head = {key: value for key, value in fields.items() if key not in loss_fields}
    account = counters.LossAccount(sent=1000, delivered=980, drops=10, drops_other_buffers=2, queued=0,
                                   sender_queue_drops=1, switch_input_drops=4)
    record = results.RunRecord.build(head, {}, account, {})
    assert (record.switch_input_drops, record.unexplained) == (4, 4)  # 1000 - 980 - 10 - 2 - 4
    assert record.drops_other_buffers + record.sender_queue_drops + record.switch_input_drops == 7
    columns = incast.table_row(record).split()
    assert columns[columns.index(str(record.drops)) + 1] == "7"


def test_ce_marks_are_a_count_or_null():
    results.check_run(a_run(ce_marks=586))
    with pytest.raises(results.SchemaError, match="ce_marks"):
        results.check_run(a_run(ce_marks=1.5))


def test_the_catalogue_runs_schemes_in_its_own_order_and_says_what_each_needs():
    catalogue = schemes.catalogue()
    assert list(catalogue)[-6:] == ["dctcp", "otcp+dctcp", "otcp-lossless", "otcp-lossless+dctcp", "otcp-paced",
                                    "otcp-admit"]
    # The controller restarts only between formula sets: the lossless schemes run one after another.
    assert catalogue["otcp-lossless+dctcp"].formulas == "lossless" and catalogue["otcp-lossless+dctcp"].ecn
    static = catalogue["static-rwnd"]
    assert static.static_rwnd and static.kind == "routes" and static.rto_min_ms is None
    assert not any(scheme.static_rwnd for name, scheme in catalogue.items() if name != "static-rwnd")
    assert catalogue["otcp-paced"].pacing and not catalogue["otcp-lossless"].pacing
    admit = catalogue["otcp-admit"]
    assert (admit.formulas, admit.enforce, admit.admission, admit.pacing) == ("lossless", "bpf", True, False)
    assert [name for name, scheme in catalogue.items() if scheme.admission] == ["otcp-admit"]
    assert catalogue["dctcp"].congestion_control == "otcp_dctcp" and catalogue["dctcp"].ecn
    assert catalogue["dctcp"].kind == "routes" and catalogue["dctcp"].rto_min_ms is None
    assert catalogue["otcp+dctcp"].kind == "otcp" and catalogue["otcp+dctcp"].formulas == "published"
    lossless = catalogue["otcp-lossless"]
    assert (lossless.formulas, lossless.enforce, lossless.congestion_control) == ("lossless", "bpf", "cubic")
    assert catalogue["otcp"].enforce == "routes"  # the published reproduction: route attributes only


def test_a_runs_packet_size_follows_the_receivers_advmss():
    scheme = schemes.catalogue()["otcp-lossless"]
    assert schemes.packet_bytes_of(scheme) == 1500
    assert schemes.packet_bytes_of(scheme, 1352) == 1392  # advmss 1352 carries 1340 B + 12 B of timestamps
    assert schemes.packet_bytes_of(schemes.catalogue()["small-packets"]) == 750


def test_summary_flags_runs_with_unexplained_losses(tmp_path):
    runs = [full_record(), full_record(scheme="fine-rto", unexplained=7)]
    path = results.write_summary(str(tmp_path), results.Outcome(samples(90.0, 92.0), runs), results.code_version(), [])
    document = json.loads(open(path, encoding="utf-8").read())
    assert document["unexplained_losses"] == [{"scheme": "fine-rto", "senders": 16, "buffer_bytes": 85000,
                                               "unexplained": 7}]
    with pytest.raises(results.SchemaError, match="unexplained_losses"):
        results.check_summary({**document, "unexplained_losses": [{"scheme": "x", "unexplained": 0}]})


def test_ceilings_per_packet_size_with_their_spread():
    all_samples = samples(90.0, 92.0, 91.0) + samples(88.0, 94.0, 91.0, senders=32) \
        + samples(60.0, 62.0, 61.0, packet_bytes=750)
    summary = results.ceiling_summary(all_samples)
    assert [c["packet_bytes"] for c in summary] == [1500, 750]
    full, small = summary
    assert full["median"] == 91.0 and (full["min"], full["max"]) == (88.0, 94.0)
    assert full["spread_pct"] == pytest.approx(100 * 3 / 91)
    assert [(n["senders"], n["median"]) for n in full["networks"]] == [(16, 91.0), (32, 91.0)]
    assert small["median"] == 61.0 and len(small["samples"]) == 3
    assert results.network_ceiling(all_samples, 16, 85000, 750) == 61.0
    assert results.network_ceiling(all_samples, 64, 85000, 1500) is None


#: A summary's code field: a commit, its files as committed, unchanged till the sweep ended.
CODE = {"commit": "0" * 40, "modified": False, "changed_during_sweep": False}


def test_a_good_summary_passes():
    results.check_summary({"ceiling_mbps": 95.6, "runs": [a_run(), a_run(probe_rtt_avg_ms=None,
                                                                        probe_rtt_max_ms=None)],
                           "unavailable": [{"scheme": "dctcp", "reason": "no tcp_dctcp"}], "code": CODE})
    results.check_summary({"ceiling_mbps": 95.6, "runs": [], "code": {**CODE, "commit": None, "modified": None}})


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
        results.check_summary({"ceiling_mbps": 95.6, "runs": [run], "code": CODE})


@pytest.mark.parametrize("document", [
    [], {"runs": []}, {"ceiling_mbps": 0, "runs": []}, {"ceiling_mbps": 90.0, "runs": {}},
    {"ceiling_mbps": 90.0, "runs": [], "unavailable": [{"scheme": "dctcp"}], "code": CODE},
    {"ceiling_mbps": 90.0, "runs": []}, {"ceiling_mbps": 90.0, "runs": [], "code": {**CODE, "modified": "yes"}},
    {"ceiling_mbps": 90.0, "runs": [], "code": {"commit": "0" * 40, "modified": False}},
])
def test_a_bad_summary_is_refused(document):
    with pytest.raises(results.SchemaError):
        results.check_summary(document)


def test_write_summary_keeps_only_the_schema_fields(tmp_path):
    outcome = results.Outcome(samples(95.6) + samples(60.0, packet_bytes=750), [full_record()],
                              notes=["a note"], unavailable=[results.Unavailable("dctcp", "no tcp_dctcp")])
    path = results.write_summary(str(tmp_path), outcome, results.code_version(), ["otcp-experiment", "incast"])
    document = json.loads(open(path, encoding="utf-8").read())
    assert set(document["runs"][0]) == set(results.RUN_FIELDS)
    assert document["ceiling_mbps"] == 95.6
    assert [c["median"] for c in document["ceilings"]] == [95.6, 60.0]
    assert document["unexplained_losses"] == []
    assert document["unavailable"] == [{"scheme": "dctcp", "reason": "no tcp_dctcp"}]
    assert document["notes"] == ["a note"]
    assert document["failures"] == [] and document["command"] == "otcp-experiment incast"
    results.check_summary(document)


def test_store_keeps_rounds_flows_counters_and_probe(tmp_path):
    store = results.ResultStore(str(tmp_path / "results.db"), {"senders": [2]})
    store.add_ceiling(samples(95.0, senders=2)[0], 95.0)
    detail = a_detail()
    detail.rounds[1]["flows_s"] = [0.05, 0.1]
    run_id = store.add_run(full_record(senders=2, unexplained=4), detail)
    store.add_unavailable(results.Unavailable("dctcp", "no tcp_dctcp"))
    store.close()
    db = sqlite3.connect(str(tmp_path / "results.db"))
    assert db.execute("SELECT scheme, senders, unexplained, cpu_busy_pct FROM runs WHERE id = ?",
                      (run_id,)).fetchone() == ("default", 2, 4, 60.0)
    assert db.execute("SELECT count(*) FROM rounds").fetchone() == (3,)
    assert db.execute("SELECT server, duration_s FROM flows WHERE round = 1 ORDER BY server").fetchall() == \
        [("h2", 0.05), ("h3", 0.1)]
    assert db.execute("SELECT sent_packets, drops FROM queues WHERE host = 'h1'").fetchone() == (9880, 120)
    assert db.execute("SELECT packet_bytes, mbps FROM ceiling").fetchone() == (1500, 95.0)
    assert db.execute("SELECT delta FROM host_counters WHERE host = 'h2'").fetchone() == (2,)
    assert db.execute("SELECT count(*) FROM probe_rtts").fetchone() == (2,)
    assert db.execute("SELECT delta FROM path_counters WHERE place = 's1:s1-eth1'").fetchone() == (5,)
    assert db.execute("SELECT ceiling_mbps FROM invocation").fetchone() == (95.0,)


def test_an_older_database_gets_the_new_columns(tmp_path):
    path = str(tmp_path / "results.db")
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE runs (id INTEGER PRIMARY KEY, invocation INTEGER, scheme TEXT, "
                      "lost_in_switch INTEGER); CREATE TABLE ceiling (invocation INTEGER, senders INTEGER, "
                      "buffer_bytes INTEGER, mbps REAL);")
    old.close()
    store = results.ResultStore(path, {})
    store.add_run(full_record(), a_detail(senders=16))
    store.close()
    assert sqlite3.connect(path).execute("SELECT unexplained FROM runs").fetchone() == (0,)


def test_routes_files_get_one_section_per_network(tmp_path):
    results.write_routes(str(tmp_path), "fine-rto", "h2", "senders=4", "10.0.0.0/8 dev h2-eth0 rto_min 1ms\n")
    path = results.write_routes(str(tmp_path), "fine-rto", "h2", "senders=8", "10.0.0.0/8 dev h2-eth0\n")
    text = open(path, encoding="utf-8").read()
    assert text.index("# senders=4") < text.index("# senders=8")
    assert path.endswith("routes/fine-rto/h2.txt")


def test_plots_are_written(tmp_path):
    runs = [full_record(scheme=s, senders=n, goodput_mbps=g) for s, n, g in
            [("default", 4, 90.0), ("default", 16, 30.0), ("fine-rto", 4, 92.0), ("fine-rto", 16, 85.0)]]
    sweep = incast.SweepResult(samples(95.0), runs, round_durations=[[100.0, 120.0, 300.0]] * 4)
    incast.draw_plots(str(tmp_path), sweep)
    for name in ("goodput.png", "fct_cdf.png", "fct_bars.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_summary_table_shows_share_of_each_runs_ceiling_and_flags():
    runs = [full_record(goodput_mbps=47.5, ceiling_mbps=95.0, switch_input_mean_bytes=9230.0),
            full_record(scheme="small-packets", packet_bytes=750, goodput_mbps=45.0, ceiling_mbps=60.0,
                        unexplained=3, switch_input_mean_bytes=None, switch_input_busy_pct=None)]
    table = incast.summary_table(runs, results.ceiling_summary(samples(95.0) + samples(60.0, packet_bytes=750)))
    lines = table.splitlines()
    assert "50%" in lines[2] and "default" in lines[2]
    assert lines[0].split()[17] == "sw%" and lines[2].split()[17] == "71"
    # %line: against the full-size (1500 B) ceiling, 45 / 95; %ceil: against the run's own packet size's, 45 / 60.
    assert lines[0].split()[5:7] == ["%line", "%ceil"] and lines[3].split()[5:7] == ["47%", "75%"]
    assert "3!" in lines[3]
    assert lines[0].split()[-1] == "swin" and lines[2].split()[-1] == "9.2k" and lines[3].split()[-1] == "-"
    assert "1500 B packets: median 95.0" in table and "750 B packets: median 60.0" in table


def test_block_modes():
    fixed = incast.IncastConfig(out="x", senders=[4], buffers=[1], schemes=["default"], sru_bytes=1000)
    split = incast.IncastConfig(out="x", senders=[4], buffers=[1], schemes=["default"], sru_bytes=None,
                                total_bytes=1000)
    assert fixed.block_bytes(4) == 1000 and fixed.block_bytes(16) == 1000
    assert split.block_bytes(4) == 250 and split.block_bytes(16) == 62


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
    (["--ceiling-repeats", "0"], "--ceiling-repeats"),
    (["--fan-in-queue-fraction", "1.5"], "--fan-in-queue-fraction"),
    (["--fan-in-queue-fraction", "nan"], "--fan-in-queue-fraction"),
    (["--agent-timeout", "0"], "--agent-timeout"),
    (["--connections-per-host", "0", "--persistent"], "--connections-per-host"),
    (["--connections-per-host", "4"], "needs --persistent"),
    (["--connections-per-host", "8", "--persistent", "--senders", "16,12,20"], "--senders: 12, 20 is not a multiple"),
])
def test_bad_arguments_exit_2_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["incast"] + argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--buffer-bytes", "32000,x"], "--buffer-bytes"),
    (["--buffer-bytes", "1000"], "cannot hold one 1514 B frame"),
    (["--packet-bytes", "1501"], "--packet-bytes"),
    (["--packet-bytes", "40"], "--packet-bytes"),
    (["--packet-bytes", "750,750"], "twice"),
    (["--overload", "1"], "--overload"),
    (["--bw-mbps", "600"], "--bw-mbps"),
    (["--overflow-ms", "5"], "--overflow-ms"),
])
def test_bad_calibrate_arguments_exit_2_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["calibrate"] + argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()[-1]) < 200


def test_calibrate_defaults_and_burst_length():
    parser = cli.build_parser()
    config = cli.calibration_config_from_args(parser.parse_args(["calibrate", "--out", "x"]), parser)
    assert config.buffers == [32000, 85000, 512000] and config.packet_sizes == [1500, 750]
    # Twice the bottleneck's rate: the queue grows at 100 Mb/s, 512 000 B fill in 41 ms; three times that, plus 200 ms.
    assert config.burst_seconds(512000) == pytest.approx(3 * 512000 * 8 / 100e6 + 0.2)


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
    assert config.senders == [8, 16, 32] and config.buffers == [85000]
    assert config.rounds == 7
    assert config.sru_bytes == 16384 and config.total_bytes is None
    assert config.out.endswith("results/quick/incast") and config.bw_mbps == 25.0
    assert cli.config_from_args(parser.parse_args(["incast"]), parser).bw_mbps == 100.0
    full = cli.config_from_args(parser.parse_args(["incast", "--total-bytes", "1048576"]), parser)
    assert full.sru_bytes is None and full.block_bytes(16) == 65536
    assert (full.fan_in_queue_fraction, full.agent_timeout_s) == (1.0, 120.0)
    chosen = cli.config_from_args(parser.parse_args(["incast", "--fan-in-queue-fraction", "0", "--agent-timeout",
                                                     "400"]), parser)
    assert (chosen.fan_in_queue_fraction, chosen.agent_timeout_s) == (0.0, 400.0)
    shared = cli.config_from_args(parser.parse_args(["incast", "--senders", "64,128", "--persistent",
                                                     "--connections-per-host", "8"]), parser)
    assert shared.connections_per_host == 8 and [shared.sender_hosts(n) for n in shared.senders] == [8, 16]


def test_report_tables_and_the_dctcp_findings():
    runs = [a_run(scheme="dctcp", senders=8, sru_bytes=65536, ceiling_mbps=94.0, timeouts=0, fct_p95_ms=60.0,
                  fct_mean_ms=50.0),
            a_run(scheme="dctcp", senders=16, sru_bytes=65536, ceiling_mbps=94.0, timeouts=10, fct_p95_ms=245.0,
                  fct_mean_ms=145.0),
            a_run(scheme="otcp+dctcp", senders=16, sru_bytes=65536, ceiling_mbps=94.0, timeouts=0, fct_p95_ms=122.5,
                  fct_mean_ms=116.0, generations=3),
            a_run(scheme="default", senders=16, sru_bytes=65536, ceiling_mbps=94.0, goodput_mbps=47.0,
                  backlog_empty_pct=None)]
    # 16 x 64 KiB x 8 / 94 Mb/s = 89.2 ms: the ideal round
    assert report.ideal_ms(runs[1]) == pytest.approx(16 * 65536 * 8 / 94e6 * 1000)
    text = report.report(runs)
    assert "| senders | default | dctcp | otcp+dctcp |" in text  # the catalogue's order
    assert "| 16 | 50 % |" in text
    assert "dctcp first timed out at 16 senders (10 RTOs)" in text
    assert "at 16 senders, dctcp against otcp+dctcp: mean 145.0 / 116.0 ms = 1.25x, p95 245.0 / 122.5 ms = 2.00x" in text
    assert "IP packet size used" not in text  # no otcp-lossless run: no empty table
    assert "new generations during the measured rounds**\n\n| senders | otcp+dctcp |\n|---|---|\n| 16 | 3 |" in text
    # default's run took no backlog sample in a round: a blank cell, not a number
    assert "the tail's share of a round**\n\n| senders | dctcp | otcp+dctcp |" in text
    assert "| 16 | 12 % / 30 %; 15 % | 12 % / 30 %; 15 % |" in text
    assert report.emptiness(a_run(backlog_empty_tail_pct=None, round_tail_pct=None)) == "12 % / -"
    # Both cores' busy share and the switch thread's; "-" for a summary from before the switch was measured.
    assert "the part of its cycles spent on packets)**\n\n| senders | default | dctcp | otcp+dctcp |" \
        "\n|---|---|---|---|\n| 8 |  | 60 (12, 0) / 71 |  |\n| 16 | 60 (12, 0) / 71 | 60 (12, 0) / 71 | 60 (12, 0) / 71 |" \
        in text
    # Where PMD threads polled the switch's ports: the part of their cycles spent on packets.
    assert report.cpu_use(a_run(switch_cpu_pct=101.0, switch_pmd_busy_pct=38.4)) == "60 (12, 0) / 101 (PMD 38)"
    before = report.report([{k: v for k, v in run.items() if k not in ("switch_cpu_pct", "cpu_softirq_pct", "cpu_steal_pct")}
                            for run in runs])
    assert "| 16 | 60 (-, -) / - | 60 (-, -) / - | 60 (-, -) / - |" in before
    assert "connections still unfinished, mean share over a round's time**\n\n| senders | default | dctcp | otcp+dctcp |" \
        "\n|---|---|---|---|\n| 8 |  | 84 % |  |\n| 16 | 84 % | 84 % | 84 % |" in text
    # A summary from before a field left its table out, not a blank or an error.
    older = report.report([{k: v for k, v in run.items() if k != "connections_unfinished_pct"} for run in runs])
    assert "connections still unfinished" not in older
    assert "had not yet taken in**\n\n| senders | default | dctcp | otcp+dctcp |" \
        "\n|---|---|---|---|\n| 8 |  | 9.2 kB, 94 % |  |" in text
    assert "the switch's input sockets" not in report.report(
        [{k: v for k, v in run.items() if not k.startswith("switch_input")} for run in runs])


def test_report_merges_sweeps_with_later_runs_replacing_earlier_ones(tmp_path):
    for name, goodput in (("first", 30.0), ("again", 60.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"runs": [a_run(goodput_mbps=goodput)]}))
    (tmp_path / "first" / "summary.json").write_text(json.dumps(
        {"runs": [a_run(goodput_mbps=30.0), a_run(senders=8, goodput_mbps=50.0)]}))
    runs = report.load_runs([str(tmp_path / "first"), str(tmp_path / "again")])
    assert sorted((r["senders"], r["goodput_mbps"]) for r in runs) == [(8, 50.0), (16, 60.0)]
    assert report.code_line(str(tmp_path / "first")) == f"{tmp_path / 'first'}: code not recorded"
    (tmp_path / "again" / "summary.json").write_text(json.dumps(
        {"runs": [], "code": {**CODE, "commit": "abcdef0123" + "0" * 30, "changed_during_sweep": True}}))
    assert report.code_line(str(tmp_path / "again")) == f"{tmp_path / 'again'}: commit abcdef0 (changed during the sweep)"


def test_the_summary_names_the_code_it_ran(tmp_path):
    """The commit the sweep started from, whether its files differed from it, and whether
    it changed before the sweep ended; nulls outside a git checkout."""
    import subprocess

    repository, plain = tmp_path / "repository", tmp_path / "plain"
    repository.mkdir()
    plain.mkdir()

    def git(*args):
        return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    git("init", "-q")
    (repository / "a.py").write_text("one\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    first = results.code_version(str(repository))
    assert first == {"commit": git("rev-parse", "HEAD"), "modified": False}
    (repository / "a.py").write_text("two\n")
    assert results.code_version(str(repository)) == {**first, "modified": True}
    assert results.code_version(str(plain)) == {"commit": None, "modified": None}
    document = json.loads(open(results.write_summary(str(plain), results.Outcome(samples(95.0), [full_record()]),
                                                     first, []), encoding="utf-8").read())
    assert document["code"] == {**first, "changed_during_sweep": results.code_version() != first}
    assert document["code"]["changed_during_sweep"]  # this checkout is not that commit
    now = results.code_version()
    document = json.loads(open(results.write_summary(str(plain), results.Outcome(samples(95.0), [full_record()]),
                                                     now, []), encoding="utf-8").read())
    assert document["code"] == {**now, "changed_during_sweep": False}


def fake_ceiling_network(monkeypatch, readings, switch_seconds=None, pmd_shares=None):
    """A network whose single-flow ceiling samples are readings, in order (one too many fails), with
    both cores half busy. switch_seconds: the switch thread's CPU seconds in each 3 s sample (else no
    switch runs); pmd_shares: its PMD thread's share of cycles on packets in each, in % (else none)."""
    readings = iter(readings)
    monkeypatch.setattr(ceiling.measure, "single_flow_ceiling", lambda *args, **kwargs: next(readings))
    # Every read of /proc/stat: 100 more jiffies, 50 of them busy, on each of two cores.
    jiffies = iter(range(0, 10**6, 100))
    monkeypatch.setattr(counters, "read_cpu_times", lambda: (lambda n: counters.CpuTimes(
        (n // 2, n // 2), (n, n), (0, 0), (0, 0)))(next(jiffies)))
    # Read before and after each sample: (0 s at 0 s, busy at 3 s), then (10 s at 10 s, 10 + busy at 13 s), ...
    times = iter([counters.ThreadTime(7, 10.0 * i + busy * at, 10.0 * i + 3 * at)
                  for i, busy in enumerate(switch_seconds or []) for at in (0, 1)])
    monkeypatch.setattr(counters, "switch_thread_time", lambda pid: next(times, None))
    # Read before and after each sample: 1000 cycles a sample, share % of them on packets.
    cycles = iter([{"numa_id 0 core_id 1": counters.PmdCycles(1000 * i + (100 - share) * 10 * at,
                                                              1000 * i + share * 10 * at)}
                   for i, share in enumerate(pmd_shares or []) for at in (0, 1)])
    monkeypatch.setattr(counters, "pmd_cycles", lambda pid: next(cycles, None))
    return types.SimpleNamespace(config=types.SimpleNamespace(ceiling_repeats=3, ceiling_seconds=3,
                                                                    connections_per_host=1),
                                 topo=types.SimpleNamespace(senders=["h2"], receiver="h1"), emulation=None,
                                 data_ips={"h1": "10.0.0.1"}, flush_tcp_metrics=lambda hosts: None)


def test_ceiling_samples_that_agree_are_taken_once(monkeypatch):
    messages = []
    taken = ceiling.ceiling_samples(fake_ceiling_network(monkeypatch, [94.6, 95.6, 95.1], [2.85, 2.94, 2.4],
                                                         [30, 45, 41]),
                                    "h2", "h1", 1500, types.SimpleNamespace(message=messages.append))
    assert (taken.kept, taken.set_aside) == ([(94.6, 50.0, pytest.approx(95.0), pytest.approx(30.0)),
                                              (95.6, 50.0, pytest.approx(98.0), pytest.approx(45.0)),
                                              (95.1, 50.0, pytest.approx(80.0), pytest.approx(41.0))], [])
    assert messages[-1] == ("single-flow ceiling, 1500 B packets: median 95.1 Mb/s (94.6, 95.6, 95.1); "
                            "switch threads 80-98 % of a core, of which on packets in its PMD threads 30-45 %")


def test_disturbed_ceiling_samples_are_measured_again_and_set_aside(monkeypatch):
    # The 32-sender network of results/gens-64k-now: 56.3, 69.9, 85.5 Mb/s. Within 5 % of the best
    # only 85.5 itself, so more samples, until three agree (94.0, 94.5, 93.9) or six are taken.
    network = fake_ceiling_network(monkeypatch, [56.3, 69.9, 85.5, 94.0, 94.5, 93.9], [1.8, 2.4, 2.7, 2.9, 2.9, 2.9])
    messages = []
    sweep, stored = incast.SweepResult(), []
    store = types.SimpleNamespace(add_ceiling=lambda sample, ceiling: stored.append(sample))
    incast.measure_ceiling(network, store, types.SimpleNamespace(message=messages.append), sweep, 85000, 1500)
    assert [s.mbps for s in sweep.ceilings] == [s.mbps for s in stored] == [94.0, 94.5, 93.9]
    assert sweep.ceiling() == 94.0
    assert "(4/3, again: the samples disagree, 3 s of iperf3)" in messages[3]
    assert "median 94.0 Mb/s (94.0, 94.5, 93.9); set aside as disturbed: 56.3, 69.9, 85.5" in messages[6]
    assert sweep.notes == ["ceiling at 1500 B packets on the 1-sender network (85000 B): set aside as disturbed (more than "
                           "5% below the best, Mb/s (both cores busy, the switch thread busy)): 56.3 (50 %, 60 %), "
                           "69.9 (50 %, 80 %), 85.5 (50 %, 90 %)"]


def test_ceiling_samples_that_never_agree_stop_at_twice_the_repeats(monkeypatch):
    # A CPU-bound small-packet ceiling: six samples, and the two within 5 % of the best are kept.
    taken = ceiling.ceiling_samples(fake_ceiling_network(monkeypatch, [37.0, 33.7, 40.8, 35.0, 36.0, 39.0]), "h2",
                                    "h1", 415, types.SimpleNamespace(message=lambda text: None))
    assert [s.mbps for s in taken.kept] == [40.8, 39.0]
    assert [s.mbps for s in taken.set_aside] == [37.0, 33.7, 35.0, 36.0]
    assert {s.switch_cpu_pct for s in taken.kept + taken.set_aside} == {None}  # no switch ran
    assert ceiling.stats.agreeing_ceilings([37.0, 33.7, 40.8]) == [40.8]


def test_a_failed_run_is_a_row_with_its_error_where_the_sweep_ran_it():
    runs = [full_record(scheme="default", senders=4), full_record(scheme="otcp", senders=4),
            full_record(scheme="default", senders=8)]
    failed = [results.Failure("fine-rto", 4, 85000, "the workload client exited with status 1\nmore detail"),
              results.Failure("otcp-lossless", 8, 85000, "x" * 300)]
    table = incast.summary_table(runs, results.ceiling_summary(samples(95.0)), failed)
    rows = [line.split()[:3] for line in table.splitlines()[2:7]]
    assert rows == [["default", "4", "85000"], ["fine-rto", "4", "85000"], ["otcp", "4", "85000"],
                    ["default", "8", "85000"], ["otcp-lossless", "8", "85000"]]
    lines = table.splitlines()
    assert lines[3].endswith("FAILED: the workload client exited with status 1")  # its first line
    assert lines[6].endswith("FAILED: " + "x" * 97 + "...") and len(lines[6]) < 150


def test_the_summary_lists_failures_and_the_command(tmp_path):
    outcome = results.Outcome(samples(95.0), [full_record()],
                              failures=[results.Failure("otcp", 16, 85000, "agents did not install routes")])
    path = results.write_summary(str(tmp_path), outcome, results.code_version(),
                                 ["otcp-experiment", "incast", "--out", "my results"])
    document = json.loads(open(path, encoding="utf-8").read())
    assert document["failures"] == [{"scheme": "otcp", "senders": 16, "buffer_bytes": 85000,
                                     "error": "agents did not install routes"}]
    assert "failed: otcp n=16 buf=85000: agents did not install routes" in document["notes"]
    assert document["command"] == "otcp-experiment incast --out 'my results'"
    for bad in ([{"scheme": "otcp", "senders": "16", "buffer_bytes": 85000, "error": "x"}], [{"scheme": "otcp"}]):
        with pytest.raises(results.SchemaError, match=r"failures\[0\]"):
            results.check_summary({**document, "failures": bad})
    with pytest.raises(results.SchemaError, match="command"):
        results.check_summary({**document, "command": ["otcp-experiment"]})


def test_a_failed_run_is_an_x_on_the_goodput_plot_in_its_lines_colour():
    runs = [dataclasses_asdict(full_record(scheme=s, senders=n, goodput_mbps=g)) for s, n, g in
            [("default", 4, 90.0), ("default", 16, 30.0), ("otcp", 4, 92.0)]]
    failures = [results.Failure("otcp", 16, 85000, "timed out"), results.Failure("dctcp", 8, 85000, "refused")]
    figure = plots.goodput_figure(runs, 95.0, failures)
    axes = figure.axes[0]
    lines = {line.get_label(): line for line in axes.get_lines()}
    marked = lines["otcp: failed"]
    assert (marked.get_marker(), list(marked.get_xdata()), list(marked.get_ydata())) == ("x", [16], [0])
    assert marked.get_color() == lines["otcp"].get_color()
    assert lines["dctcp: failed"].get_color() not in {lines["otcp"].get_color(), lines["default"].get_color()}
    assert [text.get_text() for text in axes.texts] == ["failed", "failed"]
    assert [tick.get_text() for tick in axes.get_xticklabels()] == ["4", "8", "16"]
    plots.plt.close(figure)


def test_a_sweep_whose_runs_all_failed_still_draws_its_goodput_plot(tmp_path):
    sweep = incast.SweepResult(samples(95.0), failures=[results.Failure("default", 4, 85000, "broke")])
    incast.draw_plots(str(tmp_path), sweep)
    assert (tmp_path / "goodput.png").read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "fct_cdf.png").exists()
    runs = [full_record(scheme="default", senders=4)]
    sweep = incast.SweepResult(samples(95.0), runs, failures=[results.Failure("otcp", 4, 85000, "broke")],
                               round_durations=[[100.0, 120.0]])
    incast.draw_plots(str(tmp_path), sweep)
    assert (tmp_path / "fct_bars.png").read_bytes().startswith(b"\x89PNG")


def write_sweep(directory, runs, command=None, failures=(), plots_drawn=("goodput.png",), notes=()):
    directory.mkdir(parents=True)
    document = {"runs": runs, "failures": list(failures), "code": {**CODE, "commit": "abcdef0" + "0" * 33},
                "notes": list(notes)}
    if command:
        document["command"] = command
    (directory / "summary.json").write_text(json.dumps(document))
    for name in plots_drawn:
        (directory / name).write_bytes(b"\x89PNG")
    return str(directory)


def test_the_results_page_gives_each_table_its_command_the_failures_and_the_plots(tmp_path):
    quick = write_sweep(tmp_path / "results" / "quick", [a_run(senders=4, sru_bytes=65536),
                                                         a_run(scheme="otcp", senders=4, sru_bytes=65536)],
                        command="otcp-experiment incast --quick --out results/quick",
                        failures=[{"scheme": "otcp", "senders": 8, "buffer_bytes": 85000, "error": "timed out"},
                                  {"scheme": "default", "senders": 4, "buffer_bytes": 85000, "error": "re-run"}],
                        plots_drawn=("goodput.png", "fct_cdf.png"))
    older = write_sweep(tmp_path / "results" / "older", [a_run(senders=16, sru_bytes=65536)])
    docs = tmp_path / "docs" / "results"
    docs.mkdir(parents=True)
    output = docs / "quick.md"
    assert cli.main(["report", quick, older, "--markdown", "--title", "The quick job", "--output", str(output)]) == 0
    page = output.read_text()
    assert page.startswith("# The quick job\n")
    section = page.split("## 64 KB per server\n", 1)[1]
    goodput = section.split("\n\n**")[0]
    assert goodput.startswith("\n**64 KB per server: goodput")
    # Runs from both sweeps in one table: both commands, the older one's missing.
    assert goodput.endswith("Made by: `otcp-experiment incast --quick --out results/quick`; "
                            f"(command not recorded: {older})")
    assert "| 4 | 31.5 Mb/s, 33 % | 31.5 Mb/s, 33 % |" in goodput and "| 16 | 31.5 Mb/s, 33 % |  |" in goodput
    own_size = section.split("\n\n**")[1]
    assert own_size.startswith("64 KB per server: goodput, share of the ceiling at the run's packet size")
    assert "| 4 | 33 % | 33 % |" in own_size and "| 16 | 33 % |  |" in own_size
    # The failure at 8 senders was not run again; the one at 4 was (a finished run replaces it).
    assert "## Runs that failed\n\n- otcp n=8 buf=85000: timed out (`otcp-experiment incast --quick" in page
    assert "re-run" not in page
    assert f"![goodput against senders, {quick}](../../results/quick/goodput.png)" in page
    assert "](../../results/quick/fct_cdf.png)" in page and "older/fct_cdf.png" not in page
    assert f"- {quick}: committed code" in page and "abcdef0" not in page


def test_a_folder_of_sweeps_is_one_section_with_one_table(tmp_path):
    emulator = tmp_path / "results" / "emulator"
    first = write_sweep(emulator / "a-counts", [a_run(senders=16, sru_bytes=65536), a_run(senders=64, sru_bytes=65536)],
                        command="otcp-experiment incast --senders 16,64 --out results/emulator/a-counts")
    again = write_sweep(emulator / "b-again", [a_run(senders=64, sru_bytes=65536, goodput_mbps=50.0),
                                               a_run(scheme="otcp", senders=16, sru_bytes=65536)],
                        command="otcp-experiment incast --senders 16,64 --out results/emulator/b-again")
    apart = write_sweep(tmp_path / "results" / "apart", [a_run(senders=8, sru_bytes=65536)], command="apart")
    output = tmp_path / "page.md"
    assert cli.main(["report", str(emulator), apart, "--markdown", "--each", "--title", "T",
                     "--output", str(output)]) == 0
    page = output.read_text()
    assert page.count("\n## ") >= 2 and "\n## emulator\n" in page and "\n## apart\n" in page
    emulated = page.split("\n## emulator\n", 1)[1].split("\n## apart\n", 1)[0]
    goodput = emulated.split("\n\n**")[1]
    # One table of both folders' runs, the later folder's run at 64 replacing the earlier one's.
    assert "| 16 | 31.5 Mb/s, 33 % | 31.5 Mb/s, 33 % |" in goodput and "| 64 | 50.0 Mb/s, 53 % |  |" in goodput
    assert "| 8 |" not in goodput
    assert goodput.endswith("Made by: `otcp-experiment incast --senders 16,64 --out results/emulator/a-counts`; "
                            "`otcp-experiment incast --senders 16,64 --out results/emulator/b-again`")
    assert f"- {first}: committed code" in page and f"- {again}: committed code" in page
    assert "## Notes" not in page  # none noted
    assert report.text([str(emulator)]).splitlines()[-2:] == [
        f"- {first}: commit abcdef0", f"- {again}: commit abcdef0"]


def test_the_page_gives_every_note_once_with_the_folders_that_hold_it(tmp_path):
    shared = write_sweep(tmp_path / "shared", [a_run(senders=64, sru_bytes=65536)], command="a",
                         notes=["the 64-sender network (85000 B): 8 sender hosts", "cubic per socket"])
    alone = write_sweep(tmp_path / "alone", [a_run(senders=64, sru_bytes=65536)], command="b",
                        notes=["cubic per socket"])
    output = tmp_path / "page.md"
    assert cli.main(["report", shared, alone, "--markdown", "--each", "--title", "T", "--output", str(output)]) == 0
    notes = output.read_text().split("\n## Notes\n\n", 1)[1].split("\n\n## ", 1)[0]
    assert notes.splitlines() == [f"- the 64-sender network (85000 B): 8 sender hosts ({shared})",
                                  f"- cubic per socket ({shared}, {alone})"]


def test_a_folder_of_sweeps_gets_one_goodput_plot_of_all_its_runs(tmp_path, monkeypatch):
    def ceilings(*medians):
        return [{"packet_bytes": 1500, "networks": [{"senders": 16 * (i + 1), "buffer_bytes": 85000, "median": m}
                                                   for i, m in enumerate(medians)]}]

    emulator = tmp_path / "results" / "emulator"
    first = write_sweep(emulator / "a-counts", [a_run(senders=16, sru_bytes=65536), a_run(senders=64, sru_bytes=65536)],
                        failures=[{"scheme": "otcp", "senders": 128, "buffer_bytes": 85000, "error": "timed out"},
                                  {"scheme": "otcp", "senders": 16, "buffer_bytes": 85000, "error": "re-run"}],
                        plots_drawn=("goodput.png", "fct_cdf.png"))
    again = write_sweep(emulator / "b-again", [a_run(senders=64, sru_bytes=65536, goodput_mbps=50.0),
                                               a_run(scheme="otcp", senders=16, sru_bytes=65536)])
    for folder, medians in ((first, (90.0, 80.0)), (again, (70.0,))):
        document = json.loads((Path(folder) / "summary.json").read_text())
        (Path(folder) / "summary.json").write_text(json.dumps({**document, "ceilings": ceilings(*medians)}))
    drawn = []
    monkeypatch.setattr(report.plots, "goodput_plot", lambda path, runs, line, failures: drawn.append(
        (path, sorted((r["scheme"], r["senders"], r["goodput_mbps"]) for r in runs), line,
         [(f.scheme, f.senders) for f in failures])) or path)
    output = tmp_path / "page.md"
    assert cli.main(["report", str(emulator), "--markdown", "--each", "--title", "T", "--output", str(output)]) == 0
    # One plot of both folders' runs (the later run at 64 replacing the earlier), drawn into the folder, at the
    # median of the three networks' full-size ceilings, with the failure no run replaced.
    assert drawn == [(str(emulator / "goodput.png"),
                      [("default", 16, 31.5), ("default", 64, 50.0), ("otcp", 16, 31.5)], 80.0, [("otcp", 128)])]
    page = output.read_text()
    assert f"![goodput against senders, every run of {emulator}](results/emulator/goodput.png)" in page
    assert "a-counts/goodput.png" not in page and "](results/emulator/a-counts/fct_cdf.png)" in page


def test_the_report_without_markdown_prints_the_tables_as_before(tmp_path, capsys):
    quick = write_sweep(tmp_path / "quick", [a_run(senders=4, sru_bytes=65536)], command="otcp-experiment incast")
    assert cli.main(["report", quick]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**64 KB per server: goodput") and "Made by" not in out
    assert out.endswith(f"\n\n- {quick}: commit abcdef0\n")
    assert report.main([str(tmp_path / "missing")]) == 2
    assert "summary.json" in capsys.readouterr().err


def dataclasses_asdict(record):
    import dataclasses

    return dataclasses.asdict(record)


def test_a_page_shows_a_results_path_from_results_on_wherever_the_run_kept_it(tmp_path):
    run_dir = write_sweep(tmp_path / "elsewhere" / "results" / "quick", [a_run(senders=4, sru_bytes=65536)],
                          command=f"otcp-experiment incast --quick --out {tmp_path}/elsewhere/results/quick "
                                  f"--routes=/srv/lab/results/routes --inventory /etc/otcp/inventory.yaml")
    output = tmp_path / "page.md"
    assert cli.main(["report", run_dir, "--markdown", "--title", "T", "--output", str(output)]) == 0
    assert ("Made by: `otcp-experiment incast --quick --out results/quick --routes=results/routes "
            "--inventory /etc/otcp/inventory.yaml`") in output.read_text()


def test_the_report_takes_the_full_size_ceiling_of_an_older_summary_from_its_ceiling_samples(tmp_path):
    # A summary from before runs recorded full_ceiling_mbps: its network's 1500 B ceiling samples stand in.
    run = a_run(scheme="otcp-lossless", senders=64, sru_bytes=65536, packet_bytes=400, ceiling_mbps=50.0,
                goodput_mbps=40.0)
    del run["full_ceiling_mbps"]
    directory = write_sweep(tmp_path / "older", [run])
    summary = json.loads((tmp_path / "older" / "summary.json").read_text())
    network = {"senders": 64, "buffer_bytes": 85000, "median": 80.0}
    summary["ceilings"] = [{"packet_bytes": 1500, "networks": [network, {**network, "senders": 8, "median": 1.0}]},
                           {"packet_bytes": 400, "networks": [{**network, "median": 50.0}]}]
    (tmp_path / "older" / "summary.json").write_text(json.dumps(summary))
    page = report.report(report.load_runs([directory]))
    assert "| 64 | 40.0 Mb/s, 50 % |" in page and "| 64 | 80 % |" in page
    # Where the sweep has no 1500 B sample of that network, the table leaves the run out.
    del summary["ceilings"][0]
    (tmp_path / "older" / "summary.json").write_text(json.dumps(summary))
    assert "full-size" not in report.report(report.load_runs([directory]))


def test_the_goodput_plot_shows_shares_of_the_full_size_and_the_own_packet_ceiling():
    runs = [dataclasses_asdict(full_record(scheme=s, senders=n, goodput_mbps=g, packet_bytes=p, ceiling_mbps=c,
                                           full_ceiling_mbps=80.0))
            for s, n, g, p, c in [("default", 64, 40.0, 1500, 80.0), ("otcp-lossless", 64, 20.0, 400, 40.0)]]
    figure = plots.goodput_figure(runs, 80.0)
    shares = figure.axes[1]
    data = sorted((list(line.get_xdata()), list(line.get_ydata()), line.get_linestyle())
                  for line in shares.get_lines() if len(line.get_xdata()))
    # default: 50 % of the line; otcp-lossless: 25 % of it, and 50 % of its own packet size's ceiling (dotted).
    assert data == [([64], [25.0], "-"), ([64], [50.0], "-"), ([64], [50.0], ":")]
    plots.plt.close(figure)


def test_the_fan_in_targets_name_what_missed_and_the_load_beside_it():
    runs = [a_run(scheme="default", senders=64, goodput_mbps=40.0), a_run(scheme="fine-rto", senders=64, goodput_mbps=70.0),
            a_run(scheme="otcp-lossless", senders=64, goodput_mbps=65.0, drops=0, timeouts=2, cpu_busy_pct=99.0,
                  switch_cpu_pct=47.0, backlog_empty_pct=65.0),
            a_run(scheme="default", senders=16, goodput_mbps=50.0), a_run(scheme="fine-rto", senders=16, goodput_mbps=80.0),
            a_run(scheme="otcp-lossless", senders=16, goodput_mbps=80.0, drops=0, timeouts=0),
            a_run(scheme="otcp-lossless", senders=8, goodput_mbps=90.0, drops=0, timeouts=0)]  # no default at 8
    text = report.fan_in_targets(runs)
    lines = text.splitlines()
    assert lines[0].startswith("Targets for otcp-lossless: 0 drops and 0 RTOs, goodput at least 1.5x default's")
    assert lines[1] == "- otcp-lossless at 16 senders met its targets: 0 drops, 0 RTOs, 80.0 Mb/s against " \
                       "default's 50.0 and fine-rto's 80.0"
    # 65 / 40 = 1.62x default's, but 0.93x fine-rto's, and 2 RTOs.
    assert lines[2] == "- otcp-lossless at 64 senders missed (2 RTOs, 0.93x fine-rto's): 65.0 Mb/s against default's " \
                       "40.0 and fine-rto's 70.0; both cores 99 % busy, the switch's thread 47 % of a core, the " \
                       "bottleneck's queue found empty in 65 % of samples"
    assert len(lines) == 3
    assert report.fan_in_targets([run for run in runs if run["scheme"] != "fine-rto"]) == ""
    # otcp-admit is held to the same targets, its lines after otcp-lossless's.
    runs.append(a_run(scheme="otcp-admit", senders=64, goodput_mbps=71.0, drops=0, timeouts=0))
    lines = report.fan_in_targets(runs).splitlines()
    assert lines[0].startswith("Targets for otcp-lossless and otcp-admit: 0 drops and 0 RTOs")
    assert lines[3] == "- otcp-admit at 64 senders met its targets: 0 drops, 0 RTOs, 71.0 Mb/s against default's " \
                       "40.0 and fine-rto's 70.0"


def test_a_fan_in_target_above_the_full_size_ceiling_is_called_out_of_reach():
    # default at 18.8 of a 23.9 Mb/s line: 1.5x default's is 28.2 Mb/s, above the line.
    runs = [a_run(scheme="default", senders=64, goodput_mbps=18.8, full_ceiling_mbps=23.9),
            a_run(scheme="fine-rto", senders=64, goodput_mbps=20.4, full_ceiling_mbps=23.9),
            a_run(scheme="otcp-lossless", senders=64, goodput_mbps=23.5, drops=0, timeouts=0, full_ceiling_mbps=23.9)]
    assert report.fan_in_targets(runs).splitlines()[1].startswith(
        "- otcp-lossless at 64 senders missed (1.25x default's goodput (the target, 28.2 Mb/s, is above the "
        "full-size ceiling, 23.9)): 23.5 Mb/s")
    runs[0]["goodput_mbps"] = 15.9  # 23.85: within reach, and missed
    assert "(1.48x default's goodput):" in report.fan_in_targets(runs)
    runs[2]["drops"] = 1
    assert "missed (1 drop, 1.48x default's goodput):" in report.fan_in_targets(runs)
