"""How well the controller knows RTT_prop: its value for every host pair next
to the minimum of 20 pings between the same hosts.

    python -m otcp.experiments.rtt_accuracy --topo fattree,4 [--load] --out DIR

Builds the topology with the real controller (given the topology's own
inventory: capacities and buffers, no delays) and an agent in every host,
optionally with two iperf3 flows across the fabric, lets the agents report
their round trips, then for every ordered pair compares the controller's
RTT_prop with the ping minimum between the two hosts (20 pings each way, the
smaller minimum: one round trip, whichever end starts it), and keeps each
direction's own figure and how far the two disagree. It also reads the parameters the controller
planned (initcwnd, rto_min) next to what the planner gives on the inventory
alone (its default delays), and counts the generations made during a
minute of steady traffic. Writes DIR/rtt_accuracy.json and prints a summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

from otcp.controller import store
from otcp.experiments.analysis import results
from otcp.experiments.runner.agents import Agents
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.counters import MachineTimes
from otcp.experiments.runner.emulation import Emulation, EmulationError
from otcp.experiments.runner.network import start_network, topology_from_spec
from otcp.experiments.runner.progress import Progress
from otcp.planning import formulas, inventory, planner

PINGS = 20
PING_INTERVAL_S = 0.01
SETTLE_S = 30.0
STEADY_S = 60.0
INTERVALS = {"probe_s": 1.0, "flow_stats_s": 1.0, "recompute_s": 1.0}


@dataclasses.dataclass(kw_only=True)
class RttAccuracyConfig(ExperimentConfig):
    """One measurement: the base's output directory, the topology (an mn-style spec of
    `otcp.topo.fabrics`) and whether two iperf3 flows load the fabric meanwhile."""

    topo: str
    load: bool = False


def load_receivers(hosts: list[str]) -> list[str]:
    """The iperf3 receivers of --load: the last two hosts (the senders are the first two)."""
    return [hosts[-1], hosts[-2]]


def received_bytes(emulation: Emulation, host: str) -> int:
    """Bytes host's data interface received so far (its namespace's /proc/net/dev)."""
    name = emulation.host(host).defaultIntf().name
    process = emulation.start(host, ["cat", "/proc/net/dev"], stdout=subprocess.PIPE)
    out, _ = process.communicate(timeout=10)
    for line in out.decode().splitlines()[2:]:
        device, counters = line.split(":", 1)
        if device.strip() == name:
            return int(counters.split()[0])
    raise RuntimeError(f"{host}: no {name} in /proc/net/dev")


def ping_minima(emulation: Emulation, hosts: list[str], ips: dict[str, str],
                progress: Progress) -> dict[tuple[str, str], float]:
    """{(src, dst): ping minimum in ms}: one pair at a time, so the switches
    carry no other pings meanwhile (the emulated fabric shares two cores)."""
    minima: dict[tuple[str, str], float] = {}
    pairs = [(src, dst) for src in hosts for dst in hosts if src != dst]
    progress.start_run("pings")
    for k, (src, dst) in enumerate(pairs):
        process = emulation.start(src, ["ping", "-n", "-q", "-c", str(PINGS), "-i", str(PING_INTERVAL_S),
                                        ips[dst]], stdout=subprocess.PIPE)
        out, _ = process.communicate(timeout=60)
        found = re.search(rb"= ([\d.]+)/", out)
        if found:
            minima[(src, dst)] = float(found.group(1))
        progress.update(k + 1, len(pairs))
    progress.finish_run()
    return minima


def latest_records(database: str) -> tuple[int, dict[tuple[str, str], Any]]:
    """(generation, {(src, dst): record}) of the controller's newest generation."""
    db = store.Store(database, readonly=True)
    try:
        latest = db.latest_generation()
        if latest is None:
            return 0, {}
        return latest[0], {(r["src"], r["dst"]): r for r in latest[2]}
    finally:
        db.close()


ENFORCED = ("rto_min_ms", "initcwnd", "cwnd_clamp", "segment_bytes")


def generations_between(database: str, start: float, end: float) -> list[dict[str, Any]]:
    """The generations the controller made between start and end, each with
    what moved: {"generation", "at", "changed": {parameter: pairs}, "flows_changed"}."""
    db = store.Store(database, readonly=True)
    try:
        made = db.generations_made(start, end)
        changes: list[dict[str, Any]] = []
        if made:  # each generation is read once, and compared with the one before it
            before = made[0][0] - 1
            old, old_flows = db.generation_parameters(before, ENFORCED), db.generation_inputs(before)[1]
        for number, at in made:
            new, new_flows = db.generation_parameters(number, ENFORCED), db.generation_inputs(number)[1]
            changed = {name: sum(1 for pair, values in new.items() if pair in old and old[pair][k] != values[k])
                       for k, name in enumerate(ENFORCED)}
            changes.append({"generation": number, "at": at - start,
                            "changed": {name: n for name, n in changed.items() if n},
                            "flows_changed": old_flows != new_flows})
            old, old_flows = new, new_flows
        return changes
    finally:
        db.close()


def run(config: RttAccuracyConfig) -> dict[str, Any]:
    """Measure one topology; returns the result document."""
    spec, load, out = config.topo, config.load, config.out
    topo = topology_from_spec(spec)
    os.makedirs(out, exist_ok=True)
    hosts = sorted(topo.hosts(), key=lambda name: int(name[1:]))
    code = results.code_version()
    progress = Progress(1)
    progress.message(f"{spec}: starting the network, the controller and the agents")
    with start_network(config, topo, out, with_agents=True, intervals=INTERVALS) as network:
        emulation, ips, controller = network.emulation, network.data_ips, network.require_controller()
        emulation.net.pingAll(timeout=1)  # every host is learned
        with Agents(emulation, hosts, controller.config_path, os.path.join(out, "agents")) as agents:
            agents.wait_for_routes(ips)
            flows = []
            if load:
                for src, dst in zip(hosts[:2], load_receivers(hosts)):
                    flows.append(emulation.start(dst, ["iperf3", "-s", "-1"]))
                    emulation.wait_listening(dst, 5201)
                    flows.append(emulation.start(src, ["iperf3", "-c", ips[dst], "-t", "600", "-C", "cubic"]))
            progress.message(f"letting the agents report for {SETTLE_S:.0f} s, then a steady minute")
            time.sleep(SETTLE_S)
            steady_start = time.time()
            received = {dst: received_bytes(emulation, dst) for dst in load_receivers(hosts)} if load else {}
            machine_before = MachineTimes.now()
            time.sleep(STEADY_S)
            cpu_busy = (MachineTimes.now() - machine_before).cpu_busy_pct
            load_mbps = {dst: (received_bytes(emulation, dst) - before) * 8 / STEADY_S / 1e6
                         for dst, before in received.items()}
            database = controller.process.database
            steady_generations = generations_between(database, steady_start, time.time())
            minima = ping_minima(emulation, hosts, ips, progress)
            progress.close()
            generation, records = latest_records(database)
            for process in flows:
                emulation.stop(process)
    inv = inventory.load(os.path.join(out, "inventory.yaml"))
    offline = {(r["src"], r["dst"]): r for r in planner.Plan(inv.fabric(), formulas.Bounds()).records()}
    rows: list[dict[str, Any]] = []
    for (src, dst), ping_ms in sorted(minima.items()):
        record = records.get((src, dst))
        truth = offline.get((src, dst))
        if record is None:
            continue
        # A round trip between two hosts crosses the same links whichever end starts it: the
        # pair's reference is the smaller of its two directions' minima, as RTT_prop is one value
        # per pair; the one-direction figures and their disagreement are kept beside it.
        pair_ms = min(ping_ms, minima.get((dst, src), ping_ms))
        rows.append({"src": src, "dst": dst, "ping_min_ms": ping_ms, "pair_ping_min_ms": pair_ms,
                     "rtt_prop_ms": record["rtt_prop_us"] / 1000,
                     "ratio": record["rtt_prop_us"] / 1000 / pair_ms,
                     "one_direction_ratio": record["rtt_prop_us"] / 1000 / ping_ms,
                     "ping_asymmetry": max(ping_ms, minima.get((dst, src), ping_ms)) / pair_ms,
                     "source": record["rtt_source"],
                     "initcwnd": record["initcwnd"], "rto_min_ms": record["rto_min_ms"],
                     "inventory_initcwnd": truth["initcwnd"] if truth else None,
                     "inventory_rto_min_ms": truth["rto_min_ms"] if truth else None})
    ratios = [row["ratio"] for row in rows]
    one_way = [row["one_direction_ratio"] for row in rows]
    asymmetry = [row["ping_asymmetry"] for row in rows]
    return {
        "topo": spec, "load": load, "generation": generation, "pairs": len(rows),
        "median_ratio": statistics.median(ratios) if ratios else None,
        "max_ratio": max(ratios) if ratios else None,
        "pairs_over_3x": sum(1 for r in ratios if r > 3 or r < 1 / 3),
        "one_direction": {"median_ratio": statistics.median(one_way) if one_way else None,
                          "pairs_over_3x": sum(1 for r in one_way if r > 3 or r < 1 / 3)},
        "ping_asymmetry": {"median": statistics.median(asymmetry) if asymmetry else None,
                           "max": max(asymmetry) if asymmetry else None},
        "sources": {s: sum(1 for row in rows if row["source"] == s) for s in {row["source"] for row in rows}},
        "generations_in_a_steady_minute": len(steady_generations),
        "steady_generations": steady_generations,
        "load_mbps": load_mbps,  # what each iperf3 receiver got during the steady minute
        "cpu_busy_pct": cpu_busy,  # both cores' busy share during the steady minute
        "rows": rows,
        **results.provenance(code, config.command),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; exit 0, or 2 on bad input, 1 if the network failed."""
    parser = argparse.ArgumentParser(prog="python -m otcp.experiments.rtt_accuracy",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--topo", required=True, help="a topology of `otcp.topo.fabrics`, e.g. fattree,4")
    parser.add_argument("--load", action="store_true", help="two iperf3 flows across the fabric meanwhile")
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args(argv)
    command = ["python", "-m", "otcp.experiments.rtt_accuracy", *(sys.argv[1:] if argv is None else argv)]
    try:
        result = run(RttAccuracyConfig(out=os.path.abspath(args.out), topo=args.topo, load=args.load, command=command))
    except ValueError as error:
        print(f"rtt_accuracy: {error}", file=sys.stderr)
        return 2
    except (EmulationError, RuntimeError, TimeoutError) as error:
        print(f"rtt_accuracy: {error}", file=sys.stderr)
        return 1
    results.write_json(os.path.join(args.out, "rtt_accuracy.json"), result, indent=1)
    print(f"{result['topo']}{' under load' if result['load'] else ''}: {result['pairs']} pairs, RTT_prop / ping "
          f"minimum median {result['median_ratio']:.2f}, max {result['max_ratio']:.2f}, "
          f"{result['pairs_over_3x']} beyond 3x; sources {result['sources']}; "
          f"{result['generations_in_a_steady_minute']} generations in a steady minute")
    print(f"(against each direction's own ping minimum: median {result['one_direction']['median_ratio']:.2f}, "
          f"{result['one_direction']['pairs_over_3x']} beyond 3x; the two directions' ping minima differ by "
          f"{result['ping_asymmetry']['median']:.2f}x in the median, {result['ping_asymmetry']['max']:.2f}x at most)")
    loads = ", ".join(f"{dst} {mbps:.1f} Mb/s" for dst, mbps in result["load_mbps"].items())
    print(f"(steady minute: CPU {result['cpu_busy_pct']:.0f} % busy{'; iperf3 received ' + loads if loads else ''})")
    for change in result["steady_generations"]:
        print(f"  generation {change['generation']} at {change['at']:.0f} s: pairs changed {change['changed']}"
              f"{', flows changed' if change['flows_changed'] else ''}")
    initcwnds = sorted({(row["initcwnd"], row["inventory_initcwnd"]) for row in result["rows"]})
    rtos = sorted({(row["rto_min_ms"], row["inventory_rto_min_ms"]) for row in result["rows"]})
    print(f"(initcwnd planned, with the inventory's default delays): {initcwnds}")
    print(f"(rto_min ms planned, with the inventory's default delays): {rtos}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
