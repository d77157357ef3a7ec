"""A configuration reload, without a switch: which keys apply live and which need a restart, the
configuration the controller then runs with, a bad file refused whole, the core planning with the
new inventory and bounds at once, and `otcp-controller check`."""

import pytest
import yaml

from otcp.controller import reload
from otcp.controller.config import ControllerConfig
from otcp.service import cli
from support.controller_fakes import H1, H2, HOSTS, arp_frame, connected_core, learn_hosts

INVENTORY = {
    "switches": {"s1": {"dpid": 1}, "s2": {"dpid": 2}},
    "hosts": {"h1": {"ip": H1[0]}, "h2": {"ip": H2[0]}},
    "links": [{"a": "h1", "b": "s1", "capacity_mbps": 100, "buffer_bytes": 85000},
              {"a": "s1", "b": "s2", "capacity_mbps": 100, "buffer_bytes": 85000, "delay_us": 50},
              {"a": "h2", "b": "s2", "capacity_mbps": 100, "buffer_bytes": 85000}],
}


def write_files(directory, config, inventory=INVENTORY):
    """A configuration (with its inventory beside it) as files; returns the configuration's path."""
    (directory / "inventory.yaml").write_text(yaml.safe_dump(inventory))
    path = directory / "controller.yaml"
    path.write_text(yaml.safe_dump({"inventory": "inventory.yaml", **config}))
    return str(path)


def with_buffer(buffer_bytes):
    links = [{**link, "buffer_bytes": buffer_bytes} for link in INVENTORY["links"]]
    return {**INVENTORY, "links": links}


def test_the_changed_keys_are_split_into_live_and_restart(tmp_path):
    running = reload.read(write_files(tmp_path, {"intervals": {"probe_s": 1.0}, "openflow": {"port": 6653}}))
    candidate = reload.read(write_files(tmp_path, {"intervals": {"probe_s": 0.5}, "openflow": {"port": 6654},
                                                   "parameters": {"formulas": "lossless"}, "delay_window": 20},
                                        with_buffer(32000)))
    changes = reload.changes(running.config, running.inventory, candidate)
    assert changes.live == ("intervals.probe_s", "inventory", "parameters.formulas")
    assert changes.restart == ("delay_window", "openflow.port")
    # What runs then: the live keys from the file, the others as they were until a restart.
    effective = reload.effective(running.config, candidate.config)
    assert effective.intervals.probe_s == 0.5 and effective.parameters.formulas == "lossless"
    assert effective.openflow.port == 6653 and effective.delay_window == 10
    # The same files again change nothing.
    assert reload.changes(candidate.config, candidate.inventory, candidate) == reload.Changes()


def test_every_top_level_key_is_either_live_or_needs_a_restart():
    live = reload.LIVE_KEYS
    assert live <= set(ControllerConfig.model_fields)
    needing_restart = set(ControllerConfig.model_fields) - live
    assert needing_restart == {"openflow", "agents", "database", "delay_window", "stability", "measurement",
                               "metrics", "admin", "log_file", "cluster"}


@pytest.mark.parametrize("config, inventory, message", [
    ({"intervals": {"probe_s": 0}}, INVENTORY, "intervals.probe_s"),
    ({"intervals": {"probe_s": float("nan")}}, INVENTORY, "intervals.probe_s"),
    ({"bounds": {"initcwnd": [1, True]}}, INVENTORY, "bounds.initcwnd"),
    ({}, {**INVENTORY, "links": [{"a": "h1", "b": "s9"}]}, "s9"),
])
def test_a_bad_file_is_refused_with_the_line_run_would_print(tmp_path, config, inventory, message):
    with pytest.raises(ValueError, match=message) as refused:
        reload.read(write_files(tmp_path, config, inventory))
    assert "\n" not in str(refused.value) and str(tmp_path) in str(refused.value)


def planned_core(inventory):
    core = connected_core(inventory=inventory)
    learn_hosts(core, 0.0, *HOSTS[:2])
    return core


def min_rto_us(generation):
    return {(r["src"], r["dst"]): r["min_rto_us"] for r in generation.records}


def test_the_core_plans_with_a_reloaded_inventory_and_bounds_at_once(tmp_path):
    first = reload.read(write_files(tmp_path, {}))
    core = planned_core(first.inventory)
    before = core.replan(3.0).generation
    second = reload.read(write_files(tmp_path, {"bounds": {"initcwnd": [1, 4]}}, with_buffer(170000)))
    actions = core.reconfigure(3.5, reload.effective(first.config, second.config), second.inventory)
    assert actions.replan and not actions.sends  # no switch is touched, nothing is forgotten
    after = core.replan(3.5).generation  # settled already: the topology did not change
    assert after.number == before.number + 1
    # Twice the buffers: minRTO's buffer term doubles (the delays stay as they were).
    for pair, value in min_rto_us(before).items():
        assert min_rto_us(after)[pair] > value
    assert max(r["initcwnd"] for r in after.records) <= 4
    assert core.topology.inventory == second.inventory
    # A host packet still finds its way: the switches and hosts were kept.
    assert core.packet_in(4.0, 1, 2, arp_frame(1, H1, H2[0])).sends


def test_check_prints_ok_or_the_one_line_error(tmp_path, capsys):
    good = write_files(tmp_path, {})
    assert cli.main(["check", good]) == 0
    assert capsys.readouterr().out == f"{good}: ok (inventory {tmp_path}/inventory.yaml: 2 switches, 2 hosts, 3 links)\n"
    bad = write_files(tmp_path, {"intervals": {"recompute_s": -1}})
    assert cli.main(["check", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"otcp-controller check: {bad}: intervals.recompute_s") and err.count("\n") == 1


def test_reload_without_a_running_controller_says_so_and_signals_nobody(tmp_path, capsys):
    config = write_files(tmp_path, {"database": "c.db"})
    assert cli.main(["reload", "--config", config]) == 2
    assert capsys.readouterr().err == f"otcp-controller reload: {tmp_path}/c.db: no otcp-controller runs on this database\n"
