"""pingall on a Mininet fabric against the OTCP controller: loss, time, CPU, entries.

It builds the network with otcp.experiments.runner.emulation.emulate (Open vSwitch
userspace datapath, OpenFlow 1.3) against `otcp-controller run` started by
otcp.experiments.runner.controller.ControllerProcess in DIR (default configuration, no
inventory), waits until every switch link is stored as up (or --wait
seconds, for a controller that never gets there), then pings and prints:

- the loss and the time of Mininet's pingAll (or of pings from one host to
  every other with --from);
- the controller's and ovs-vswitchd's CPU seconds over the pings (user +
  system, /proc/PID/stat);
- OTCP-cookie entries per switch after the pings, min / max / mean by role
  (core and spine; aggregation; edge and leaf), from ovs-ofctl dump-flows;
- host sightings in the controller's log (how often a host was placed, at
  how many places) and links lost.

Run as root, under the shared Mininet lock:

    flock -o /tmp/otcp-mininet.lock .venv/bin/python benchmarks/fabric_pingall.py fattree,6 DIR
    flock -o /tmp/otcp-mininet.lock .venv/bin/python benchmarks/fabric_pingall.py leafspine,4,4,3 DIR
"""

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time

from otcp.controller import store
from otcp.experiments.runner.controller import ControllerProcess, wait_for
from otcp.experiments.runner.emulation import emulate
from otcp.topo.fabrics import FatTreeTopo, LeafSpineTopo

ROLES = (("core", ("c", "spine")), ("aggregation", ("a",)), ("edge", ("e", "leaf")))


def topology(text: str):
    """fattree,K or leafspine,LEAVES,SPINES,HOSTS_PER_LEAF -> the Mininet topology."""
    kind, *numbers = text.split(",")
    values = [int(n) for n in numbers]
    if kind == "fattree" and len(values) == 1:
        return FatTreeTopo(k=values[0])
    if kind == "leafspine" and len(values) == 3:
        return LeafSpineTopo(leaves=values[0], spines=values[1], hosts_per_leaf=values[2])
    raise ValueError(f"{text!r}: expected fattree,K or leafspine,LEAVES,SPINES,HOSTS_PER_LEAF")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stored_links(controller: ControllerProcess) -> set:
    """The switch links the controller has stored as up, by its names."""
    db = store.Store(controller.database, readonly=True)
    try:
        return set(db.db.execute("SELECT src, dst FROM links WHERE up = 1"))
    finally:
        db.close()


def controller_links(topo) -> set:
    """The topology's directed switch links by the controller's names (s<dpid>)."""
    name = {switch: f"s{int(topo.nodeInfo(switch)['dpid'], 16)}" for switch in topo.switches()}
    return {pair for a, b in topo.links() if a in name and b in name
            for pair in ((name[a], name[b]), (name[b], name[a]))}


def otcp_entries(switch: str) -> int:
    """Entries with an OTCP cookie (0x07c7...) on one switch."""
    flows = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", switch], capture_output=True, text=True,
                           check=True).stdout
    return sum(1 for line in flows.splitlines() if "cookie=0x7c7" in line)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topology", help="fattree,K or leafspine,LEAVES,SPINES,HOSTS_PER_LEAF")
    parser.add_argument("workdir", help="directory for the controller's configuration, database and log")
    parser.add_argument("--wait", type=float, default=180.0, help="seconds to wait for discovery at most")
    parser.add_argument("--from", dest="source", help="ping from this host to every other instead of pingall")
    args = parser.parse_args(argv)
    topo = topology(args.topology)
    controller = ControllerProcess(args.workdir)

    @contextlib.contextmanager
    def start(_):
        with controller:
            yield controller.openflow_port

    with emulate(topo, controller=start) as emulation:
        started = time.monotonic()
        try:
            wait_for(lambda: stored_links(controller) == controller_links(topo), args.wait, interval=1,
                     what="discovery")
            print(f"discovery: every switch link up after {time.monotonic() - started:.0f} s", flush=True)
        except TimeoutError:
            print(f"discovery: {len(stored_links(controller))} of {len(controller_links(topo))} links up "
                  f"after {args.wait:.0f} s", flush=True)
        vswitchd = int(subprocess.run(["pidof", "ovs-vswitchd"], capture_output=True, text=True,
                                      check=True).stdout.split()[0])
        cpu = cpu_seconds(controller.process.pid), cpu_seconds(vswitchd)
        began = time.monotonic()
        if args.source:
            source = emulation.host(args.source)
            others = [h for h in emulation.net.hosts if h is not source]
            answered = sum(" 0% packet loss" in source.cmd(f"ping -c1 -W1 {h.IP()}") for h in others)
            loss, pings = 100.0 * (1 - answered / len(others)), len(others)
        else:
            loss, pings = emulation.net.pingAll(timeout=2), len(emulation.net.hosts) * (len(emulation.net.hosts) - 1)
        seconds = time.monotonic() - began
        used = cpu_seconds(controller.process.pid) - cpu[0], cpu_seconds(vswitchd) - cpu[1]
        print(f"{pings} pings: {loss:.1f} % lost in {seconds:.1f} s; controller CPU {used[0]:.1f} s "
              f"({100 * used[0] / seconds:.0f} % of a core), ovs-vswitchd {used[1]:.1f} s "
              f"({100 * used[1] / seconds:.0f} %)", flush=True)
        entries = {switch.name: otcp_entries(switch.name) for switch in emulation.net.switches}
        for role, prefixes in ROLES:
            counts = [n for name, n in entries.items() if name.startswith(prefixes)]
            if counts:
                print(f"OTCP entries, {role}: min {min(counts)}, max {max(counts)}, "
                      f"mean {sum(counts) / len(counts):.0f}", flush=True)
        log = controller.log()
        sightings = re.findall(r"host (\S+) \(\S+\) at (s\d+:\d+)", log)
        print(f"host sightings: {len(sightings)} at {len(set(sightings))} places for "
              f"{len({ip for ip, _ in sightings})} hosts; links lost: {len(re.findall(r' down$', log, re.M))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
