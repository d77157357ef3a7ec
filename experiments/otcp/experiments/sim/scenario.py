"""One run of the scenario program: the scenario in as one JSON line, JSON lines out.

The program reports every round, or a workload's simulated time (shown as progress), asks at every
controller poll of a closed loop (answered by loop.ClosedLoop), and ends with its result and its cost
(wall and CPU seconds, peak memory). The machine's CPU over the run is read from /proc/stat, as the
Mininet runner reads it.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from otcp.experiments.runner.counters import cpu_busy, cpu_parts, read_cpu_times
from otcp.experiments.sim.build import program
from otcp.experiments.sim.fabric import SimFabric, SimFabricSettings
from otcp.experiments.sim.loop import ClosedLoop
from otcp.experiments.sim.schemes import SimScheme


class SimulationError(RuntimeError):
    """The program failed: its own message (a round that never finished, a bad scenario)."""


@dataclasses.dataclass
class Outcome:
    """What a run gave: its result line, its cost, the machine's CPU while it ran (busy, the busiest
    CPU's, and the softirq and steal parts: runner.counters.cpu_parts), and the simulated time its
    rounds took (warm-up and measured: the time with traffic, which is what costs)."""

    result: dict[str, Any]
    rounds_s: float
    wall_s: float
    cpu_s: float
    max_rss_kb: int
    cpu_busy_pct: float
    cpu_busiest_pct: float
    cpu_parts: dict[str, float] = dataclasses.field(default_factory=dict)


def scheme_document(mode: str, config: SimFabricSettings, fabric: SimFabric, scheme: SimScheme,
                    host_queue_packets: int, k_bytes: float, settings: dict[str, Any],
                    workload: dict[str, Any]) -> dict[str, Any]:
    """The program's input for one scheme's run of a simulated experiment (mode: "incast" or
    "workload") on fabric: the kernel's HZ and the controller's poll from config (a poll only for a
    planned scheme), the hosts' queues, the switches' marking threshold k_bytes (only for an ECN
    scheme), the scheme's TCP, every host's settings before any plan and the experiment's workload."""
    return {
        "mode": mode, "hz": config.hz, **fabric.scenario(), "host_queue_packets": host_queue_packets,
        "ecn_k_bytes": round(k_bytes) if scheme.ecn else None,
        "tcp": {"congestion_control": scheme.congestion_control, "ecn": scheme.ecn},
        "settings": settings,
        "poll_s": config.poll_interval_s if scheme.planned else None,
        "workload": workload,
    }


def run(scenario: dict[str, Any], loop: ClosedLoop | None = None,
        on_round: Callable[[dict[str, Any]], None] | None = None, binary: Path | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None) -> Outcome:
    """Run the program (binary: another build of it) on scenario, showing its rounds (on_round) or a
    workload's progress (on_progress); raise SimulationError with its message when it fails."""
    before, started = read_cpu_times(), time.monotonic()
    process = subprocess.Popen([str(binary or program())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    shown = {"round": on_round, "progress": on_progress}
    ended: dict[str, dict[str, Any]] = {}
    rounds_s = 0.0
    try:
        process.stdin.write(json.dumps(scenario) + "\n")
        process.stdin.flush()
        for line in process.stdout:
            message = json.loads(line)
            event = message.get("event")
            if event == "poll":
                if loop is None:
                    raise SimulationError("the program polled a scenario without a closed loop")
                process.stdin.write(json.dumps(loop.poll(message["t"], message["pairs"])) + "\n")
                process.stdin.flush()
            elif event in ("result", "cost"):
                ended[event] = message
            else:
                rounds_s += message["duration_s"] if event == "round" else 0.0
                show = shown.get(event)
                if show is not None:
                    show(message)
        error = process.stderr.read().strip()
        status = process.wait()
    except BaseException:
        process.kill()
        process.wait()
        raise
    result, cost = ended.get("result"), ended.get("cost")
    if status != 0 or result is None or cost is None:
        raise SimulationError(error or f"the scenario program exited with status {status} and no result")
    after = read_cpu_times()
    busy, busiest = cpu_busy(before, after)
    return Outcome(result, rounds_s, time.monotonic() - started, cost["cpu_s"], cost["max_rss_kb"], busy, busiest,
                   cpu_parts(before, after))
