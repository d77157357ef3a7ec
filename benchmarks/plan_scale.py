"""How fast the planner evaluates every host pair of a fat-tree.

For k = 4, 8, 16 and 24 (24 only if it fits in memory) it builds the
fat-tree's inventory (otcp.topo.fabrics.FatTreeTopo), plans every ordered host
pair, and prints hosts, pairs, seconds and pairs per second. The baseline,
measured in the same run on the same fabric, is the one-pair-at-a-time
reference evaluation (support.reference) over a sample of pairs.

Target: k = 16 (1024 hosts, about a million pairs) in under 10 s.

    .venv/bin/python benchmarks/plan_scale.py [--k 4,8,16,24] [--sample 2000] [--pacing]

--pacing plans with otcp-paced's pacing rate as well (and the lossless windows).
"""

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from otcp.planning import formulas  # noqa: E402
from otcp.planning.paths import HostPaths, SwitchPaths  # noqa: E402
from otcp.planning.planner import Plan  # noqa: E402
from support.fabrics import fat_tree_fabric  # noqa: E402
from support.reference import ReferencePlanner  # noqa: E402

TARGET_K, TARGET_SECONDS = 16, 10.0
# Measured peak for k = 24 (12 M pairs) is about 1.5 GB; keep a wide margin.
BYTES_PER_PAIR = 400


def available_memory():
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(k, sample_size, rng, pacing=False):
    fabric = fat_tree_fabric(k)
    hosts = len(fabric.hosts)
    started = time.perf_counter()
    HostPaths(SwitchPaths(fabric.switches, fabric.switch_links()), fabric.attachments())
    paths_seconds = time.perf_counter() - started
    started = time.perf_counter()
    plan = Plan(fabric, formulas.Bounds(), *((formulas.Lossless(), formulas.Pacing()) if pacing else ()))
    seconds = time.perf_counter() - started
    reference = ReferencePlanner(fabric, formulas.Bounds())
    names = sorted(fabric.hosts)
    sample = [tuple(rng.sample(names, 2)) for _ in range(sample_size)]
    started = time.perf_counter()
    for src, dst in sample:
        reference.pair(src, dst)
    baseline_rate = sample_size / (time.perf_counter() - started)
    return hosts, len(plan), seconds, paths_seconds, baseline_rate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", default="4,8,16,24", help="fat-tree sizes, comma-separated even numbers")
    parser.add_argument("--sample", type=int, default=2000, help="pairs the baseline evaluates per size")
    parser.add_argument("--pacing", action="store_true", help="plan otcp-paced: lossless windows and pacing rates")
    args = parser.parse_args(argv)
    try:
        sizes = [int(k) for k in args.k.split(",")]
    except ValueError:
        parser.error(f"--k: expected comma-separated integers, got {args.k!r}")
    rng = random.Random(1)
    print(f"{'k':>3} {'hosts':>6} {'pairs':>10} {'seconds':>8} {'pairs/s':>11} {'paths s':>8} "
          f"{'baseline pairs/s':>17} {'speed-up':>9}")
    results = {}
    for k in sizes:
        pairs_needed = (k ** 3 // 4) ** 2
        if pairs_needed * BYTES_PER_PAIR > available_memory():
            print(f"{k:>3} skipped: about {pairs_needed * BYTES_PER_PAIR / 2**30:.1f} GiB needed, "
                  f"{available_memory() / 2**30:.1f} GiB available")
            continue
        hosts, pairs, seconds, paths_seconds, baseline_rate = measure(k, args.sample, rng, args.pacing)
        rate = pairs / seconds
        results[k] = seconds
        print(f"{k:>3} {hosts:>6} {pairs:>10} {seconds:>8.2f} {rate:>11.0f} {paths_seconds:>8.2f} "
              f"{baseline_rate:>17.0f} {rate / baseline_rate:>8.1f}x", flush=True)
    if TARGET_K in results:
        verdict = "met" if results[TARGET_K] < TARGET_SECONDS else "NOT met"
        print(f"target: k={TARGET_K} planned in under {TARGET_SECONDS:.0f} s: {verdict} "
              f"({results[TARGET_K]:.2f} s, {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
