"""`otcp-experiment shell` (`otcp.experiments.shell`) fed a script instead of a
terminal: a leaf-spine network comes up with the controller and an agent in
every host, Mininet's CLI runs `pingall`, an `iperf` and a host command
showing the OTCP routes, and everything is torn down afterwards."""

import os
import subprocess
import sys

from support.emulations import ovs_bridges

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shell(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "otcp.experiments.cli", "shell", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_the_shell_runs_a_script_of_cli_commands_with_otcp_in_place(tmp_path):
    script = tmp_path / "commands.mn"
    script.write_text("pingall\niperf h1 h4\nh1 ip route show proto 79\n")
    done = shell("--topo", "leafspine,2,2,2", "--script", str(script))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "*** OTCP is in place: 4 hosts with their routes (proto 79)" in output
    assert output.count("*** Results: 0% dropped (12/12 received)") >= 2  # ours before the CLI, then the script's
    assert "*** Iperf: testing TCP bandwidth between h1 and h4" in output
    results = [line for line in output.splitlines() if line.startswith("*** Results: [")]
    assert len(results) == 1 and results[0].count("Mbits/sec") == 2
    routes = [line for line in output.splitlines() if line.startswith("10.0.0.")]  # `h1 ip route show proto 79`
    assert routes and all("rto_min lock" in line and "quickack 1" in line for line in routes)
    assert not ovs_bridges() & {"leaf1", "leaf2", "spine1", "spine2"}


def test_a_bad_topology_is_named_in_one_line():
    done = shell("--topo", "leafspine,2,2,0")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "otcp-experiment: --topo leafspine,2,2,0: hosts_per_leaf: 0 is out of range 1..100000\n"
    done = shell("--topo", "ring,3")
    assert done.returncode == 2 and "'ring' is not a topology of `otcp.topo.fabrics`" in done.stderr
