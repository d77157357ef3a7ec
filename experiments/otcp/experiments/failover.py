"""``otcp-experiment failover``: two controllers on one fabric, the master killed, its timeline.

    otcp-experiment failover --topo fattree,4 --out results/failover

Starts two instances of the OTCP controller (ranks 0 and 1 of `cluster`, each with its own
database, OpenFlow port, agent port and admin socket, one agent secret), builds the topology
with every switch connected to both (``otcp.experiments.runner.emulation``) and an agent in
every host connected to both, and waits until instance 0 is MASTER of every switch, instance
1 SLAVE of every switch, and every agent holds a set from instance 0. Then, with TCP traffic
between pods and a continuous ping across the fabric (the first host to the last) running:

1. ``pingall``; every agent's (epoch, generation);
2. ``kill -9`` of the master;
3. the time until the other instance is MASTER of every switch (its own record of when it
   became MASTER of each, against the time of the kill);
4. the time until every agent applied a set from the new master whose epoch and generation
   are both greater than those it held (the agents' own record of when they applied it);
5. the pings lost across the switch-over, and ``pingall`` again;
6. the old master started again: it must come back SLAVE of every switch, and for
   `watch_s` nothing may change (the survivor's role and epoch of every switch, every
   agent's epoch).

The figures are written to OUT/failover.json and printed; docs/operations.md quotes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from typing import Any

from otcp.experiments.runner.agents import Agents
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.controller import ControllerInstances, wait_for
from otcp.experiments.runner.emulation import Emulation, emulate
from otcp.experiments.runner.network import RunError
from otcp.experiments.runner.progress import Progress

#: The continuous ping's interval, seconds (root may go below 0.2 s).
PING_INTERVAL_S = 0.01
#: How many TCP flows cross the fabric while the master is killed.
TRAFFIC_FLOWS = 4
IPERF_PORT = 5201


@dataclasses.dataclass(kw_only=True)
class FailoverConfig(ExperimentConfig):
    """One failover run: the base's output directory and command line, the topology (a
    FabricTopo), the cluster's heartbeat and takeover wait, the controllers' measurement
    intervals, how long traffic runs before the kill and after it, and how long the old master
    is watched once it is back."""

    topo: Any
    heartbeat_s: float = 1.0
    takeover_s: float = 4.0
    intervals: dict[str, float] = dataclasses.field(default_factory=lambda: {"recompute_s": 1.0})
    before_s: float = 5.0
    after_s: float = 25.0
    watch_s: float = 20.0
    timeout_s: float = 120.0


def roles(status: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """{dpid: role record} of an instance's live view ({} when it did not answer)."""
    return {} if status is None else {row["dpid"]: row for row in status["roles"]}


def leads_all(status: dict[str, Any] | None, switches: int) -> bool:
    """Whether the instance is MASTER of every one of the fabric's switches."""
    found = roles(status)
    return len(found) == switches and all(row["role"] == "master" for row in found.values())


def follows_all(status: dict[str, Any] | None, switches: int) -> bool:
    """Whether the instance is SLAVE of every one of the fabric's switches."""
    found = roles(status)
    return len(found) == switches and all(row["role"] == "slave" for row in found.values())


@dataclasses.dataclass(frozen=True)
class Held:
    """What an agent holds, from its state file: the epoch and generation of its applied set, and
    when (wall clock) it applied it; None where it holds none."""

    epoch: int | None
    generation: int | None
    applied_at: float | None

    def passed(self, before: Held) -> bool:
        """Whether this is a set of a greater epoch and a greater generation than before."""
        return (self.epoch is not None and self.generation is not None and before.epoch is not None
                and before.generation is not None and self.epoch > before.epoch and self.generation > before.generation)


def held(state_path: str) -> Held:
    """What the agent whose state file is state_path holds (read-only)."""
    with contextlib.closing(sqlite3.connect(f"file:{state_path}?mode=ro", uri=True)) as db:
        applied = db.execute("SELECT generation, applied_at FROM applied WHERE id = 1").fetchone()
        epoch = db.execute("SELECT epoch FROM authority WHERE id = 1").fetchone()
    return Held(epoch[0] if epoch else None, *(applied if applied else (None, None)))


def status_when(instances: ControllerInstances, rank: int, condition: Callable[[dict[str, Any] | None], bool]) -> \
        dict[str, Any] | None:
    """Instance rank's live view if it meets condition, else None (for wait_for)."""
    status = instances.status(rank)
    return status if status is not None and condition(status) else None


def ping_counts(output: str) -> tuple[int, int]:
    """(transmitted, received) from ping's summary line."""
    found = re.search(r"(\d+) packets transmitted, (\d+) received", output)
    if found is None:
        raise RunError(f"no ping summary in: {output.strip()[-200:]}")
    return int(found.group(1)), int(found.group(2))


def pairs_across(hosts: list[str], count: int) -> list[tuple[str, str]]:
    """count (client, server) pairs, each host of the first half to one of the second half."""
    half = len(hosts) // 2
    return [(hosts[i], hosts[half + i]) for i in range(min(count, half))]


def run(config: FailoverConfig, progress: Progress | None = None) -> dict[str, Any]:
    """The whole run (see the module docstring); returns the figures, also written to OUT/failover.json."""
    progress = progress or Progress(total=1)
    workdir = os.path.join(config.out, "work")
    os.makedirs(workdir, exist_ok=True)
    inventory = config.topo.write_inventory(os.path.join(workdir, "inventory.yaml"))
    instances = ControllerInstances(workdir, inventory, heartbeat_s=config.heartbeat_s, takeover_s=config.takeover_s,
                                    intervals=config.intervals)
    switches = len(config.topo.switches())
    with emulate(config.topo, controller=instances, management=True) as emulation:
        hosts = [host.name for host in emulation.hosts]
        with Agents(emulation, hosts, instances.config_paths(), os.path.join(workdir, "agents"),
                    timeout=config.timeout_s) as agents:
            progress.message("waiting for every host to be reachable and to hold its routes")
            wait_for(lambda: emulation.net.pingAll(timeout=1) == 0, config.timeout_s, interval=0,
                     what="pingall without loss")
            agents.wait_for_routes({host.name: host.IP() for host in emulation.hosts})
            progress.message("waiting for instance 0 to lead every switch and every agent to hold its set")
            wait_for(lambda: leads_all(instances.status(0), switches) and follows_all(instances.status(1), switches)
                     and _agents_settled(instances.status(0), len(hosts)), config.timeout_s,
                     what="instance 0 MASTER of every switch, instance 1 SLAVE, every agent's set acknowledged")
            return _failover(config, emulation, instances, agents, hosts, switches, progress)


def _agents_settled(status: dict[str, Any] | None, hosts: int) -> bool:
    """Whether every host's agent acknowledged the newest set published for it."""
    if status is None:
        return False
    agents = [agent for agent in status["agents"] if agent["connected"]]
    return len(agents) == hosts and all(agent["lag_generations"] == 0 and agent["acknowledged_generation"]
                                        for agent in agents)


def _failover(config: FailoverConfig, emulation: Emulation, instances: ControllerInstances, agents: Agents,
              hosts: list[str], switches: int, progress: Progress) -> dict[str, Any]:
    """Steps 1-6 of the module docstring on the settled network."""
    result: dict[str, Any] = {"switches": switches, "hosts": len(hosts), "heartbeat_s": config.heartbeat_s,
                              "takeover_s": config.takeover_s, "command": config.command}
    survivor_status = instances.status(1)
    assert survivor_status is not None  # it answered a moment ago
    result["failover_bound_s"] = survivor_status["cluster"]["failover_bound_s"]
    result["pingall_before_loss_percent"] = emulation.net.pingAll(timeout=1)
    before = {host: held(agents.state_path(host)) for host in hosts}
    old_epochs = {dpid: row["epoch"] for dpid, row in roles(instances.status(0)).items()}

    first, last = emulation.host(hosts[0]), emulation.host(hosts[-1])
    duration = config.before_s + config.after_s
    ping = emulation.start(first.name, ["ping", "-n", "-q", "-i", str(PING_INTERVAL_S), "-w", f"{duration:g}",
                                        last.IP()], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    flows = _start_traffic(emulation, hosts, duration)
    time.sleep(config.before_s)

    progress.message("kill -9 of the master (instance 0)")
    master = instances.processes[0].process
    assert master is not None
    killed_at = time.time()
    os.kill(master.pid, signal.SIGKILL)
    master.wait()

    taken = wait_for(lambda: status_when(instances, 1, lambda status: leads_all(status, switches)),
                     config.timeout_s, interval=0.1, what="instance 1 MASTER of every switch")
    new_roles = roles(taken)
    result["takeover_s_per_switch"] = {f"s{dpid}": round(row["master_since"] - killed_at, 3)
                                       for dpid, row in sorted(new_roles.items())}
    result["all_switches_master_after_s"] = max(result["takeover_s_per_switch"].values())
    result["new_epochs_greater"] = all(new_roles[dpid]["epoch"] > epoch for dpid, epoch in old_epochs.items())

    def moved() -> dict[str, Held] | None:
        now = {host: held(agents.state_path(host)) for host in hosts}
        return now if all(now[host].passed(before[host]) for host in hosts) else None

    after = wait_for(moved, config.timeout_s, interval=0.2, what="every agent to hold a set from the new master")
    assert after is not None  # wait_for returns only what is true
    result["agents"] = {host: {"before": {"epoch": before[host].epoch, "generation": before[host].generation},
                               "after": {"epoch": after[host].epoch, "generation": after[host].generation,
                                         "applied_after_s": round((after[host].applied_at or 0.0) - killed_at, 3)}}
                        for host in hosts}
    result["all_agents_new_set_after_s"] = max(agent["after"]["applied_after_s"] for agent in result["agents"].values())

    out, _ = ping.communicate(timeout=duration + 30)
    transmitted, received = ping_counts(out.decode(errors="replace"))
    result["ping"] = {"from": first.name, "to": last.name, "interval_s": PING_INTERVAL_S,
                      "transmitted": transmitted, "received": received, "lost": transmitted - received}
    result["traffic"] = _finish_traffic(emulation, flows, duration)
    result["pingall_after_loss_percent"] = emulation.net.pingAll(timeout=1)
    progress.message("the old master back: it must rejoin as SLAVE and change nothing")
    result["rejoin"] = _rejoin(config, instances, agents, hosts, switches)
    path = os.path.join(config.out, "failover.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return result


def _start_traffic(emulation: Emulation, hosts: list[str], duration: float) -> list[tuple[Any, Any]]:
    """iperf3 flows from the first half of the hosts to the second (across the fabric's core),
    for duration; returns (server, client) processes."""
    flows = []
    for client, server in pairs_across(hosts, TRAFFIC_FLOWS):
        listener = emulation.start(server, ["iperf3", "-s", "-1", "-p", str(IPERF_PORT)])
        emulation.wait_listening(server, IPERF_PORT)
        sender = emulation.start(client, ["iperf3", "-J", "-t", f"{duration:g}", "-p", str(IPERF_PORT),
                                          "-c", emulation.host(server).IP()], stdout=subprocess.PIPE)
        flows.append((listener, sender))
    return flows


def _finish_traffic(emulation: Emulation, flows: list[tuple[Any, Any]], duration: float) -> list[dict[str, Any]]:
    """Each flow's mean rate (Mb/s) as iperf3 reports it, once it ends."""
    rates = []
    for listener, sender in flows:
        out, _ = sender.communicate(timeout=duration + 30)
        try:
            report = json.loads(out)
            rates.append({"mbps": round(report["end"]["sum_received"]["bits_per_second"] / 1e6, 2)})
        except (ValueError, KeyError):
            rates.append({"mbps": None, "error": out.decode(errors="replace")[-200:]})
        emulation.stop(listener)
    return rates


def _rejoin(config: FailoverConfig, instances: ControllerInstances, agents: Agents, hosts: list[str],
            switches: int) -> dict[str, Any]:
    """Start the old master again; see that it is SLAVE of every switch and that, for watch_s, the
    survivor keeps every switch with the same epoch and every agent its epoch."""
    survivor = roles(instances.status(1))
    epochs = {host: held(agents.state_path(host)).epoch for host in hosts}
    started = time.time()
    instances.processes[0].start()
    returned = wait_for(lambda: status_when(instances, 0, lambda status: follows_all(status, switches)),
                        config.timeout_s, interval=0.2, what="the old master to come back as SLAVE of every switch")
    back_after_s = time.time() - started
    time.sleep(config.watch_s)
    now_survivor, now_returned = roles(instances.status(1)), roles(instances.status(0))
    kept = {dpid: (row["epoch"], row["promotions"], row["demotions"]) for dpid, row in survivor.items()}
    still = {dpid: (row["epoch"], row["promotions"], row["demotions"]) for dpid, row in now_survivor.items()}
    return {
        "slave_of_every_switch_after_s": round(back_after_s, 3),
        "watched_s": config.watch_s,
        "returned_slave_throughout": follows_all({"roles": list(now_returned.values())}, switches)
        and all(row["promotions"] == 0 for row in now_returned.values()),
        "survivor_unchanged": kept == still,
        "agents_epoch_unchanged": epochs == {host: held(agents.state_path(host)).epoch for host in hosts},
        "returned_demotions": sum(row["demotions"] for row in roles(returned).values()),
    }


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The run's figures as the command prints them."""
    ping = result["ping"]
    rejoin = result["rejoin"]
    return [
        f"{result['switches']} switches, {result['hosts']} hosts; heartbeat {result['heartbeat_s']:g} s, "
        f"takeover after {result['takeover_s']:g} s; stated bound {result['failover_bound_s']:g} s",
        f"pingall before: {result['pingall_before_loss_percent']:g} % lost",
        f"kill -9 of the master -> the other MASTER of every switch after {result['all_switches_master_after_s']:.2f} s"
        f" (new epochs greater: {result['new_epochs_greater']})",
        f"every agent holds a set from the new master (greater epoch and generation) after "
        f"{result['all_agents_new_set_after_s']:.2f} s",
        f"continuous ping {ping['from']} -> {ping['to']} every {ping['interval_s'] * 1e3:g} ms: "
        f"{ping['lost']} of {ping['transmitted']} lost",
        "traffic: " + ", ".join(f"{flow['mbps']} Mb/s" for flow in result["traffic"]),
        f"pingall after: {result['pingall_after_loss_percent']:g} % lost",
        f"old master back: SLAVE of every switch after {rejoin['slave_of_every_switch_after_s']:.2f} s; "
        f"over {rejoin['watched_s']:g} s it stayed SLAVE: {rejoin['returned_slave_throughout']}, the survivor's "
        f"roles unchanged: {rejoin['survivor_unchanged']}, agents' epochs unchanged: "
        f"{rejoin['agents_epoch_unchanged']}",
    ]
