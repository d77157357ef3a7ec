"""YAML from outside (the inventory, the controller configuration, what the experiment runner
reads of it): a key given twice is refused with the key and both lines, and aliases that
would expand into a "billion laughs" are refused from the event stream, before anything is
expanded, in one line from the command line."""

import subprocess
import sys

import pytest
import yaml

from otcp.controller import config
from otcp.experiments.runner.agents import agent_endpoint
from otcp.planning import inventory
from otcp.wire import validation
from otcp.wire.validation import ValidationError
from support.agents import REPOSITORY
from support.inventories import star, write_inventory


def bomb(levels, top="switches"):
    """A "billion laughs": each level an anchor of ten aliases of the one before (10**levels values)."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines + [f"{top}: *a{levels - 1}"]) + "\n"


def test_a_key_given_twice_is_refused_with_the_key_and_both_lines():
    with pytest.raises(ValidationError) as refused:
        validation.load_yaml("hosts:\n  h4: {ip: 10.0.0.4}\n  h5: {ip: 10.0.0.5}\n  h4: {ip: 10.0.0.6}\n", "inv.yaml")
    assert str(refused.value) == 'inv.yaml: line 4: key "h4" is given twice (first at line 2)'
    with pytest.raises(ValidationError, match='line 1: key "a" is given twice'):
        validation.load_yaml("{a: 1, a: 2}")


def test_anchors_aliases_and_merge_keys_within_the_cap_still_load():
    text = "base: &base {capacity_mbps: 100, delay_us: 25}\nlink: {<<: *base, a: h1}\nsame: *base\n"
    assert validation.load_yaml(text) == {"base": {"capacity_mbps": 100, "delay_us": 25},
                                          "link": {"capacity_mbps": 100, "delay_us": 25, "a": "h1"},
                                          "same": {"capacity_mbps": 100, "delay_us": 25}}


@pytest.mark.parametrize("levels", [7, 9, 30])
def test_an_alias_bomb_is_refused_unexpanded(levels):
    """30 levels is 10**30 values: only a refusal that never expands them can end."""
    if levels == 7:  # 10**7 values: over the cap too
        with pytest.raises(ValidationError, match="more than 1000000 values once its aliases are expanded"):
            validation.load_yaml(bomb(levels))
        return
    with pytest.raises(ValidationError) as refused:
        validation.load_yaml(bomb(levels), "inv.yaml")
    # Line 6 defines a5, a million values: where the document goes over the cap, whatever follows.
    assert str(refused.value) == ("inv.yaml: line 6: more than 1000000 values once its aliases are "
                                  "expanded; refused unexpanded")


def test_every_yaml_loader_refuses_duplicates_and_bombs(tmp_path):
    duplicate = "agents: {host: 127.0.0.1, port: 6653}\nagents: {host: 127.0.0.2, port: 6653}\n"
    for text, message in ((duplicate, 'line 2: key "agents" is given twice'), (bomb(9, "agents"), "aliases")):
        path = tmp_path / "controller.yaml"
        path.write_text(text)
        with pytest.raises(config.ConfigError, match=message):
            config.load(str(path))
        with pytest.raises(ValidationError, match=message):
            agent_endpoint(str(path))
    good = yaml.safe_dump(star(2))
    with pytest.raises(inventory.InventoryError, match='key "h1" is given twice'):
        inventory.load(write_inventory(tmp_path, good.replace("  h2:", "  h1:"), "dup.yaml"))
    with pytest.raises(inventory.InventoryError, match="aliases are expanded"):
        inventory.load(write_inventory(tmp_path, bomb(9), "bomb.yaml"))


@pytest.mark.parametrize("text, message", [
    (bomb(10), "line 6: more than 1000000 values once its aliases are expanded; refused unexpanded"),
    ("switches: {s1: {dpid: 1}}\nhosts:\n  h4: {ip: 10.0.0.4}\n  h4: {ip: 10.0.0.5}\n",
     'line 4: key "h4" is given twice (first at line 3)'),
], ids=["bomb", "duplicate"])
def test_the_command_line_refuses_in_one_line(tmp_path, text, message):
    path = write_inventory(tmp_path, text)
    done = subprocess.run([sys.executable, "-m", "otcp.service.cli", "plan", path], cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"otcp-controller plan: {path}: {message}"]
