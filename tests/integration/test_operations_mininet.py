"""Operating OTCP on a real network (docs/operations.md): the controller and
four agents in Mininet with their Prometheus endpoints on, fetched with
`curl` as an operator's Prometheus would, and the controller's live view
through `otcp-controller status`. Taking a link down changes what both
endpoints report."""

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from otcp.controller import config as controller_config
from otcp.experiments.runner.controller import wait_for
from otcp.service import admin
from support.emulations import AGENT_METRICS_PORT

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def samples(page):
    """{(name, sorted labels): value} of a metrics page."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(page) for sample in family.samples}


def controller_metrics(port):
    done = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True)
    return samples(done.stdout) if done.returncode == 0 else {}


def agent_metrics(emulation, host):
    page = emulation.run(host, ["curl", "-sf", f"http://127.0.0.1:{AGENT_METRICS_PORT}/metrics"], check=False)
    return samples(page)


def value(page, name, **labels):
    return page.get((name, tuple(sorted(labels.items()))))


def delay_series(page, src, dst):
    """The sources with which the s -> d link's delay is exported (measured, or the default when the
    controller refused its samples: docs/design.md, "Measurement")."""
    return {dict(labels)["source"] for name, labels in page
            if name == "otcp_controller_link_delay_seconds" and dict(labels)["src"] == src and dict(labels)["dst"] == dst}


def settled(emulation, port):
    """The controller's page once all four agents acknowledged their newest sets, else None."""
    if emulation.net.pingAll(timeout=1) != 0:  # hosts must speak to be learned and planned
        return None
    page = controller_metrics(port)
    hosts = [h.IP() for h in emulation.hosts]
    if value(page, "otcp_controller_agents_connected") != 4 or value(page, "otcp_controller_paths") != 12:
        return None
    if any(value(page, "otcp_controller_agent_lag_generations", host=ip) != 0 for ip in hosts):
        return None
    return page


def status(controller):
    done = subprocess.run([sys.executable, "-m", "otcp.service.cli", "status", "--config", controller.config_path, "--json"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_metrics_endpoints_show_live_values_that_follow_a_link_going_down(triangle_agents):
    emulation, controller, port = triangle_agents.emulation, triangle_agents.controller, triangle_agents.metrics_port
    before = wait_for(lambda: settled(emulation, port), 90, interval=1, what="every agent to acknowledge")
    h1 = emulation.host("h1").IP()
    assert len(delay_series(before, "s1", "s3")) == 1 and delay_series(before, "s1", "s3") <= {"measured", "default"}
    # A host link cannot be probed; the triangle's inventory gives no delay, so it is the default.
    assert value(before, "otcp_controller_link_delay_seconds", src="h1", dst="s1", source="default") == pytest.approx(10e-6)
    assert value(before, "otcp_controller_link_capacity_bytes_per_second", src="s1", dst="s3") == 100e6 / 8
    assert value(before, "otcp_controller_link_buffer_bytes", src="s1", dst="s3") == 85000
    assert value(before, "otcp_controller_plan_duration_seconds_count") >= 1
    agent_before = agent_metrics(emulation, "h1")
    applied = value(agent_before, "otcp_agent_applied_generation")
    assert applied == value(before, "otcp_controller_agent_acknowledged_generation", host=h1)
    assert value(agent_before, "otcp_agent_connected") == 1
    # One route per destination or per prefix (the controller publishes the fewest): at least one, none skipped.
    assert value(agent_before, "otcp_agent_routes", status="applied") >= 1
    assert value(agent_before, "otcp_agent_routes", status="skipped") == 0

    emulation.net.configLinkStatus("s1", "s3", "down")
    try:
        def link_gone():
            page = controller_metrics(port)
            gone = not delay_series(page, "s1", "s3")
            return page if gone and value(page, "otcp_controller_generation") > value(before, "otcp_controller_generation") \
                else None

        after = wait_for(link_gone, 60, interval=1, what="the controller's metrics to lose s1 -> s3")
        assert delay_series(after, "s1", "s2")
        # h1's route to h4 detours over s2: its agent applies a newer generation.
        wait_for(lambda: (value(agent_metrics(emulation, "h1"), "otcp_agent_applied_generation") or 0) > applied, 60,
                 interval=1, what="h1's agent to apply the detour's generation")
        agent_after = agent_metrics(emulation, "h1")
        assert value(agent_after, "otcp_agent_apply_duration_seconds_count") > value(
            agent_before, "otcp_agent_apply_duration_seconds_count")
        # The newest generation may come from the hosts' round trips first: wait for the detour's.
        def detour():
            live = status(controller)
            path = next((p for p in live["paths"] if (p["src"], p["dst"]) == ("h1", "h4")), None)
            return live if path is not None and path["hops"] == ["h1", "s1", "s2", "s3", "h4"] else None

        live = wait_for(detour, 60, interval=1, what="the live view's h1 -> h4 path to take the detour")
        assert ("s1", "s3") not in {(link["src"], link["dst"]) for link in live["links"]}
    finally:
        emulation.net.configLinkStatus("s1", "s3", "up")


def test_status_shows_the_live_topology_parameters_and_agents(triangle_agents):
    emulation, controller, port = triangle_agents.emulation, triangle_agents.controller, triangle_agents.metrics_port
    wait_for(lambda: settled(emulation, port), 90, interval=1, what="every agent to acknowledge")
    live = status(controller)
    links = {(link["src"], link["dst"]): link for link in live["links"]}
    assert {"s1", "s2", "s3"} == {s["name"] for s in live["switches"]}
    assert links[("s1", "s2")]["delay_source"] in ("measured", "default")
    assert links[("s1", "s2")]["capacity_bytes_per_s"] == 100e6 / 8 and links[("s1", "s2")]["buffer_bytes"] == 85000
    assert links[("h1", "s1")]["delay_source"] == "default"
    assert len(live["paths"]) == 12 and live["paths_generation"] <= live["generation"]
    agents = {agent["host_ip"]: agent for agent in live["agents"]}
    assert set(agents) == {h.IP() for h in emulation.hosts}
    for host in emulation.hosts:
        agent = agents[host.IP()]
        assert agent["connected"] and agent["hostname"] and agent["lag_generations"] == 0
        assert agent["acknowledged_generation"] == agent["published_generation"]
    done = subprocess.run([sys.executable, "-m", "otcp.service.cli", "status", "--config", controller.config_path],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    assert "  s1 -> s2: delay " in done.stdout and "Mb/s, buffer 85000 B" in done.stdout
    assert f"  {emulation.host('h1').IP()} (" in done.stdout and "lag 0" in done.stdout


def reload_command(controller):
    return subprocess.run([sys.executable, "-m", "otcp.service.cli", "reload", "--config", controller.config_path],
                          cwd=ROOT, capture_output=True, text=True, check=False)


def connections(live):
    """Each switch's OpenFlow connections and each agent's peer address: a reconnect changes one."""
    return ({s["name"]: s["connections"] for s in live["switches"]},
            {agent["host_ip"]: agent["peer"] for agent in live["agents"]})


def test_a_reload_follows_the_inventory_without_reconnecting_and_a_bad_one_changes_nothing(triangle_agents):
    emulation, controller, port = triangle_agents.emulation, triangle_agents.controller, triangle_agents.metrics_port
    wait_for(lambda: settled(emulation, port), 90, interval=1, what="every agent to acknowledge")
    before = status(controller)
    min_rto = {(p["src"], p["dst"]): p["min_rto_us"] for p in before["paths"]}
    inventory_path = triangle_agents.workdir / "inventory.yaml"
    original = inventory_path.read_text()
    inventory = yaml.safe_load(original)
    for link in inventory["links"]:
        link["buffer_bytes"] = 2 * link.get("buffer_bytes", 85000)
    inventory_path.write_text(yaml.safe_dump(inventory))
    try:
        done = reload_command(controller)
        assert done.returncode == 0, done.stderr
        assert "applied inventory; needing a restart nothing" in done.stdout

        def followed():
            live = status(controller)
            now = {(p["src"], p["dst"]): p["min_rto_us"] for p in live["paths"]}
            if live["paths_generation"] <= before["paths_generation"] or now.keys() != min_rto.keys():
                return None
            return live if all(now[pair] > value for pair, value in min_rto.items()) else None

        after = wait_for(followed, 30, interval=0.5, what="a generation with the doubled buffers")
        wait_for(lambda: settled(emulation, port), 30, interval=0.5, what="every agent to take the new set")
        assert connections(status(controller)) == connections(before)  # no switch or agent reconnected
        assert all(link["buffer_bytes"] == 170000 for link in after["links"] if link["src"].startswith("s"))

        # A bad file: `reload` refuses it before the controller hears of it; a SIGHUP straight to the
        # controller gets the same line back in its status, and the running configuration stays.
        config_path = controller.config_path
        good_config = open(config_path).read()
        socket_path = controller_config.load(config_path).admin.socket  # status --config reads the file
        with open(config_path, "a") as config:
            config.write("delay_window: -1\n")
        try:
            refused = reload_command(controller)
            assert refused.returncode == 2 and "delay_window" in refused.stderr and refused.stdout == ""
            pid = int(open(controller.database + ".lock").read())
            os.kill(pid, signal.SIGHUP)
            live = wait_for(lambda: (s := admin.read_status(socket_path))["reload"]["refused"] and s, 10,
                            what="the refusal")
            # Measurements may re-plan meanwhile; what must hold is that nothing of the bad file was applied.
            assert "delay_window" in live["reload"]["refused"] and live["reload"]["applied"] == []
            assert all(link["buffer_bytes"] == 170000 for link in live["links"] if link["src"].startswith("s"))
        finally:
            with open(config_path, "w") as config:
                config.write(good_config)
    finally:
        inventory_path.write_text(original)
        assert reload_command(controller).returncode == 0
    assert connections(status(controller)) == connections(before)
