"""Which ns-3 build the simulator uses, measured: the scenario program built against the ns3 wheel
3.44 (the chosen build) and against Debian's libns3-dev 3.37, and the wheel's Python bindings.

    .venv/bin/python benchmarks/sim_builds.py [--senders 100,500] [--rounds 3] [--bindings-python PATH]

For each C++ build: the compile time; start-up, the wall time of a run that loads ns-3 and simulates
nothing (the program's Linux RTO model); and for each incast (a star of N senders at 10 Gb/s, a 2 MB
buffer, DCTCP marking at 97.5 KB, persistent connections, a 15 ms burst per round): events, CPU
seconds, events per CPU second and peak memory, with the ratio to the chosen build's in the same run.

The bindings need cppyy, which set-up does not install: --bindings-python names a Python whose `ns`
package imports (`pip install ns3==3.44.post0` with its dependencies). For it: the time to
`from ns import ns` and the process's peak memory after it, and which ns-3 libraries it loaded: the
wheel's lib64, which the C++ build links too, so the bindings' events cost what the C++ build's do.
Without it, the bindings are reported unmeasured, with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from otcp.experiments.sim import build, fabric, incast, scenario
from otcp.experiments.sim.schemes import catalogue

BURST_S = 0.015
RATE_GBPS = 10.0
BUFFER_BYTES = 2_000_000
ECN_K_BYTES = 97_500
#: A child that imports the bindings and reports the import's time, its peak memory and the ns-3 core
#: library it mapped.
BINDINGS_PROBE = """
import json, resource, time
started = time.monotonic()
from ns import ns
imported = time.monotonic() - started
maps = [line.split()[-1] for line in open("/proc/self/maps") if "libns3" in line and "core" in line]
print(json.dumps({"import_s": imported, "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "core_library": maps[0] if maps else None}))
"""


@dataclasses.dataclass
class Measured:
    """One build's figures."""

    name: str
    compile_s: float
    startup_s: float
    runs: dict[int, scenario.Outcome]


def incast_document(senders: int, rounds: int) -> dict:
    """The scenario of one incast: dctcp on a star of senders, 15 ms of bytes at the host rate per round."""
    config = incast.SimConfig(out="", schemes=["dctcp"], senders=[senders], bw_mbps=RATE_GBPS * 1000,
                              buffers=[BUFFER_BYTES], bw_gbps=RATE_GBPS, total_bytes=int(BURST_S * RATE_GBPS * 1e9 / 8),
                              sru_bytes=None, rounds=rounds, warmup_rounds=1, persistent=True,
                              ecn_k_bytes=ECN_K_BYTES, command=["benchmark"])
    sim_fabric = incast.build_fabric(config, senders, BUFFER_BYTES)
    placement = fabric.place(sim_fabric, senders, config.placement)
    return incast.scenario_document(config, sim_fabric, placement, catalogue()["dctcp"], BUFFER_BYTES)


def startup_s(binary: Path) -> float:
    """The wall time of a run that loads ns-3 and simulates nothing, best of three."""
    document = {"mode": "rto-model", "hz": 250, "rto_min_us": 200000, "samples": []}
    times = []
    for _ in range(3):
        started = time.monotonic()
        scenario.run(document, binary=binary)
        times.append(time.monotonic() - started)
    return min(times)


def measure(sdk: build.Sdk, directory: Path, senders: list[int], rounds: int) -> Measured:
    """Build against sdk into directory and run every incast."""
    binary = directory / sdk.standard
    started = time.monotonic()
    build.compile_into(sdk, binary)
    compiled = time.monotonic() - started
    result = Measured(sdk.name, compiled, startup_s(binary), {})
    for count in senders:
        print(f"  {sdk.name}: {count} senders ...", file=sys.stderr, flush=True)
        result.runs[count] = scenario.run(incast_document(count, rounds), binary=binary)
    return result


def bindings(python: str | None) -> str:
    """The Python bindings' start-up, memory and libraries, or why they were not measured."""
    if python is None:
        return "Python bindings: not measured (no --bindings-python; set-up installs the wheel without cppyy)"
    done = subprocess.run([python, "-c", BINDINGS_PROBE], capture_output=True, text=True)
    if done.returncode != 0:
        return f"Python bindings: not measured ({python} could not import them: {done.stderr.strip()[-300:]})"
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    return (f"Python bindings ({python}): `from ns import ns` {probe['import_s']:.1f} s, peak memory "
            f"{probe['max_rss_kb'] / 1024:.0f} MB before any topology; ns-3 core library loaded: "
            f"{probe['core_library']}")


def table(chosen: Measured, others: list[Measured]) -> str:
    """The figures of every build, each with its ratio to the chosen one's."""
    lines = ["| build | senders | events | CPU s | events per CPU s | vs chosen | peak memory | vs chosen |",
             "|---|---|---|---|---|---|---|---|"]
    for measured in [chosen, *others]:
        for count, outcome in measured.runs.items():
            base = chosen.runs[count]
            events = outcome.result["events"]
            speed, base_speed = events / outcome.cpu_s, base.result["events"] / base.cpu_s
            lines.append(f"| {measured.name} | {count} | {events} | {outcome.cpu_s:.2f} | {speed / 1000:.0f}k | "
                         f"{speed / base_speed:.2f}x | {outcome.max_rss_kb / 1024:.0f} MB | "
                         f"{outcome.max_rss_kb / base.max_rss_kb:.2f}x |")
    lines += ["", "| build | compile s | start-up s (load ns-3, simulate nothing) |", "|---|---|---|"]
    lines += [f"| {m.name} | {m.compile_s:.1f} | {m.startup_s:.3f} |" for m in [chosen, *others]]
    return "\n".join(lines)


def main() -> int:
    """Measure every build available here and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--senders", default="100,500", help="incast sizes (default 100,500)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per incast (default 3)")
    parser.add_argument("--bindings-python", help="a Python with the ns3 wheel's cppyy bindings")
    args = parser.parse_args()
    senders = [int(n) for n in args.senders.split(",")]
    with tempfile.TemporaryDirectory(prefix="otcp-sim-builds-") as tmp:
        chosen = measure(build.wheel_sdk(), Path(tmp), senders, args.rounds)
        others = []
        try:
            others.append(measure(build.debian_sdk(), Path(tmp), senders, args.rounds))
        except build.SimulatorUnavailable as exc:
            print(f"Debian's build: not measured ({exc})")
    print(table(chosen, others))
    print()
    print(bindings(args.bindings_python))
    return 0


if __name__ == "__main__":
    sys.exit(main())
