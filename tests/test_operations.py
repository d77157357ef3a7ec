"""Operating the controller (docs/operations.md): bounded history, the live
view behind the admin socket and `otcp-controller status`, and the
Prometheus metrics, driven through the app's own steps (`otcp.service.app`) on
fake datapaths with a simulated clock."""

import json
import subprocess
import sys
import time
import types

import pytest
import yaml
from os_ken.lib import hub
from os_ken.lib.packet import arp as arp_packet

from otcp.controller import config
from otcp.experiments.runner.controller import free_port
from otcp.service import app, metrics
from otcp.wire import build
from support.channel import GreenPeer, wait_for
from support.controller_fakes import H1, H2, H3, PORTS, FakeDatapath, arp_frame, port_infos

ROOT = __file__.rsplit("/tests/", 1)[0]
LINKS = 8  # directed: s1 <-> s2, h1 <-> s1, h2 <-> s2, h3 <-> s1
PATHS = 6  # ordered host pairs


class Clock:
    """Simulated wall-clock time for the app and its store."""

    def __init__(self):
        self.now = time.time()

    def time(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    simulated = Clock()
    monkeypatch.setattr(app, "time", types.SimpleNamespace(time=simulated.time, perf_counter=time.perf_counter))
    return simulated


def make_controller(tmp_path, clock, **settings):
    """The app with both fake switches connected, the link up and h1, h2, h3 learned."""
    (tmp_path / "secret").write_bytes(b"operations-test-secret-0123456789")
    settings = {"database": "state.db", "intervals": {"probe_s": 1.0, "flow_stats_s": 1.0, "recompute_s": 1.0},
                "agents": {"port": free_port(), "secret_file": "secret"},
                # h3_sends below adds one packet a poll: that is a flow here.
                "stability": {"min_flow_packets": 1}, **settings}
    (tmp_path / "controller.yaml").write_text(yaml.safe_dump(settings))
    app.CONFIG = config.load(str(tmp_path / "controller.yaml"))
    try:
        controller = app.OTCPController()
    finally:
        app.CONFIG = None
    controller.store.clock = clock.time
    core = controller.core
    for dpid in PORTS:
        core.switch_features(dpid, FakeDatapath(dpid))
        core.switch_ready(dpid)
        core.port_description(clock.now, dpid, port_infos(dpid))
    core.link_added(clock.now, (1, 1), (2, 1))
    core.link_added(clock.now, (2, 1), (1, 1))
    for (ip, mac), dpid, port in ((H1, 1, 2), (H2, 2, 2), (H3, 1, 3)):
        core.packet_in(clock.now, dpid, port, arp_frame(arp_packet.ARP_REQUEST, (ip, mac), ip))
    return controller


def h3_sends(controller, packets):
    """Flow statistics of s1 in which h3 -> h2 has sent `packets` so far: while it
    grows, h1 -> h2 shares s1 -> s2 with it and gets smaller windows."""
    controller.core.flow_counter.update(1, [(H3[0], H2[0], packets, packets * 1514)])


def count(controller, table):
    return controller.store.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_history_stays_under_the_retention_bound_for_ten_minutes_at_one_second_intervals(tmp_path, clock):
    retention = {"measurements_s": 60, "generations": 10, "prune_interval_s": 10}
    # No flow hold: the pauses below must end flows, so that generations keep coming.
    controller = make_controller(tmp_path, clock, retention=retention, stability={"flow_hold_s": 0, "min_flow_packets": 1})
    packets, generations = 0, set()
    for second in range(600):
        clock.now += 1.0
        if (second // 5) % 2 == 0:  # h3 -> h2 sends for 5 s, pauses 5 s: a new generation each time
            packets += 1
        h3_sends(controller, packets)
        controller._replan()
        generations.add(controller.core.generation)
        if second % retention["prune_interval_s"] == 0:
            controller._prune()
        # Rows younger than the bound, plus what one prune interval (and this plan) adds.
        assert count(controller, "link_measurements") <= LINKS * (60 + 10 + 1)
        assert count(controller, "generations") <= 10 + 10 // 5 + 1
        assert count(controller, "parameters") == PATHS * count(controller, "generations")
        assert count(controller, "generation_inputs") == LINKS * count(controller, "generations")
    assert len(generations) > 100  # the bound was tested against a steady stream of generations
    latest, _, _ = controller.store.latest_generation()
    assert latest == controller.core.generation  # the newest is always kept
    controller.store.close()


def key(name, **labels):
    """The key of one sample in `scrape`."""
    return name, tuple(sorted(labels.items()))


def scrape(registry):
    """{(sample name, labels as a sorted tuple): value} of one collection."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in registry.collect() for sample in family.samples}


def test_metrics_follow_the_plan_and_a_lost_link(tmp_path, clock):
    controller = make_controller(tmp_path, clock)
    registry = metrics.registry_for(controller.live, controller.config.database)
    before = scrape(registry)
    assert before[("otcp_controller_generation", ())] == 0 and before[("otcp_controller_paths", ())] == 0
    assert before[key("otcp_build_info", **build.build_labels())] == 1
    assert before[("otcp_controller_sets_too_large", ())] == 0
    assert not any(name == "otcp_controller_link_delay_seconds" for name, _ in before)
    clock.now += 5.0  # discovery has settled
    h3_sends(controller, 1)
    h3_sends(controller, 2)
    controller._replan()
    page = scrape(registry)
    assert page[("otcp_controller_generation", ())] == 1
    assert page[("otcp_controller_generations_total", ())] == 1
    assert page[("otcp_controller_generations_last_minute", ())] == 1
    assert page[("otcp_controller_plan_duration_seconds_count", ())] == 1
    assert page[("otcp_controller_switches", ())] == 2 and page[("otcp_controller_hosts", ())] == 3
    assert page[("otcp_controller_master_switches", ())] == page[("otcp_controller_connected_switches", ())] == 2
    s1_s2 = {"src": "s1", "dst": "s2"}
    assert page[key("otcp_controller_link_delay_seconds", **s1_s2, source="default")] == pytest.approx(10e-6)
    assert page[key("otcp_controller_link_capacity_bytes_per_second", **s1_s2)] == 100e6 / 8
    assert page[key("otcp_controller_link_buffer_bytes", **s1_s2)] == 131072
    assert page[key("otcp_controller_link_active_flows", **s1_s2)] == 1
    assert page[key("otcp_controller_link_active_flows", src="s2", dst="s1")] == 0
    assert page[("otcp_controller_paths", ())] == PATHS
    record = {(r["src"], r["dst"]): r for r in controller.live.paths}[(H1[0], H2[0])]
    assert page[key("otcp_controller_path_cwnd_clamp_segments", quantile="0")] == record["cwnd_clamp"]
    assert page[key("otcp_controller_path_cwnd_clamp_segments", quantile="1")] > record["cwnd_clamp"]
    assert page[key("otcp_controller_path_rto_min_seconds", quantile="1")] == record["rto_min_ms"] / 1e3
    assert page[key("otcp_controller_agents_refused_total", reason="tls")] == 0
    assert page[("otcp_controller_database_bytes", ())] > 0

    for src, dst in ((1, 2), (2, 1)):  # the link goes down: discovery loses both directions
        controller._carry_out(controller.core.link_deleted(clock.now, (src, 1), (dst, 1)))
    clock.now += 5.0
    controller._replan()
    page = scrape(registry)
    assert key("otcp_controller_link_active_flows", **s1_s2) not in page
    assert key("otcp_controller_link_active_flows", src=H1[0], dst="s1") in page
    assert page[("otcp_controller_paths", ())] == 2  # only h1 <-> h3, on the same switch, are left
    controller.store.close()


def status_command(*args):
    return subprocess.Popen([sys.executable, "-m", "otcp.service.cli", "status", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process):
    """Let the hub serve until the client process exits; its (status, stdout, stderr)."""
    deadline = time.monotonic() + 30
    while process.poll() is None:
        assert time.monotonic() < deadline, "the status command did not finish"
        hub.sleep(0.05)
    return process.returncode, process.stdout.read(), process.stderr.read()


def test_status_reads_the_live_view_from_the_admin_socket(tmp_path, clock):
    controller = make_controller(tmp_path, clock)
    clock.now += 5.0
    controller._replan()
    controller.start()
    try:
        socket_path = controller.config.admin.socket
        code, out, err = finished(status_command("--socket", socket_path, "--json"))
        assert code == 0, err
        status = json.loads(out)
        assert status["generation"] == 1 and status["paths_generation"] == 1
        assert [s["name"] for s in status["switches"]] == ["s1", "s2"]
        assert {(link["src"], link["dst"]) for link in status["links"]} >= {("s1", "s2"), ("s2", "s1")}
        assert len(status["paths"]) == PATHS and {H1[0], H2[0], H3[0]} == {p["src"] for p in status["paths"]}
        assert status["agents"] == []
        code, out, err = finished(status_command("--config", str(tmp_path / "controller.yaml")))
        assert code == 0, err
        assert out.startswith("generation 1 (1 in the last minute), planned ")
        assert "  s1 -> s2: delay 10.0 us (default, 0 samples), 100 Mb/s, buffer 131072 B, 0 active flows" in out
        assert "parameters (generation 1):" in out and "agents: none" in out
        # An agent whose addresses match no host is connected, and gets nothing: status says so.
        stranger = GreenPeer(controller.agent_server.address[1])
        assert stranger.authenticate(secret=(tmp_path / "secret").read_bytes(), addresses=("10.99.0.2",))
        wait_for(lambda: controller.agent_server.agents(), "the stranger's hello")
        code, out, err = finished(status_command("--socket", socket_path))
        assert code == 0, err
        assert (f"  unknown host (green): connected from 127.0.0.1:{stranger.sock.getsockname()[1]}, reports "
                "10.99.0.2, none of them a host with parameters; it gets no set") in out.splitlines()
        assert "None" not in out
        stranger.close()
    finally:
        for thread in controller.threads:
            hub.kill(thread)
        controller.agent_server.stop()
        controller.store.close()


def test_status_without_a_running_controller_says_so_in_one_line(tmp_path):
    process = status_command("--socket", str(tmp_path / "nothing.sock"))
    code, out, err = process.wait(), process.stdout.read(), process.stderr.read()
    assert (code, out) == (1, "")
    assert err == f"otcp-controller status: {tmp_path / 'nothing.sock'}: no such socket (is the controller running?)\n"


def test_reading_the_status_does_not_import_eventlet():
    """The experiment runner and `status` read the socket; eventlet's deprecation warning must not reach them."""
    code = ("import sys, otcp.experiments.runner.controller, otcp.service.admin\n"
            "print('eventlet' in sys.modules)")
    done = subprocess.run([sys.executable, "-W", "always", "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "False\n", "")


def test_operations_settings_are_checked(tmp_path):
    path = str(tmp_path / "controller.yaml")
    (tmp_path / "controller.yaml").write_text("not a certificate\n")
    for settings, message in (
        ({"metrics": {"host": "127.0.0.1"}}, "metrics.port: missing"),
        ({"retention": {"generations": 0}}, "retention.generations: 0 is out of range 1..1000000"),
        ({"agents": {"tls": {"cert_file": "c.pem", "key_file": "k.pem"}}},
         f"agents.tls.cert_file: {tmp_path / 'c.pem'}: no such file"),
        ({"admin": {"socket": "x" * 120}}, "longer than 107 bytes"),
        ({"agents": {"tls": {"cert_file": "controller.yaml", "key_file": "controller.yaml"}}},
         "agents.tls: cert_file and key_file are not a PEM certificate chain and its private key"),
    ):
        with pytest.raises(config.ConfigError, match=f"^{path}: .*") as raised:
            config.validate(settings, path)
        assert message in str(raised.value)
