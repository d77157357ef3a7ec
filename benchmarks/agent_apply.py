"""How fast the agent applies a parameter set, against `ip route replace`.

For 1, 100, 1 000 and 10 000 destinations, in a throwaway network
namespace, it times:

- ``otcp``: `Agent.apply` of a whole set from an empty table (validation,
  the lock, ``route get`` per destination, the writes, the SQLite state),
  the way a pushed set is applied;
- ``otcp update``: the next generation, every route's values changed
  (replaces);
- ``ip per route``: ``ip -n NS route replace DST dev v0 proto 79 rto_min ...``
  run once per route: the baseline;
- ``ip -batch``: the same commands fed to one ``ip -batch`` process, for
  reference.

Each figure is the best of a few runs in this one invocation (the 10 000
baseline runs once: it takes tens of seconds). Prints seconds, routes per
second and the speed-up over ``ip`` per route. The target is 1 000 routes in
under 1 s.

    .venv/bin/python benchmarks/agent_apply.py [--sizes 1,100,1000,10000]
"""

import argparse
import os
import subprocess
import tempfile
import time

from otcp.agent.core import Agent
from otcp.agent.routes import OTCP_PROTO


class Namespace:
    """A throwaway namespace whose veth v0 holds 10.0.0.1/8: every 10.x.y.z
    destination is directly reachable."""

    def __init__(self):
        self.name = f"otcp-bench-{os.getpid()}"
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        for command in (["link", "set", "lo", "up"], ["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                        ["link", "set", "v0", "up"], ["link", "set", "v1", "up"],
                        ["addr", "add", "10.0.0.1/8", "dev", "v0"]):
            self.ip(*command)

    def ip(self, *args, **kwargs):
        return subprocess.run(["ip", "-n", self.name, *args], check=True, capture_output=True, text=True, **kwargs)

    def count_otcp(self):
        return len(self.ip("route", "show", "proto", str(OTCP_PROTO)).stdout.splitlines())

    def flush_otcp(self):
        self.ip("route", "flush", "proto", str(OTCP_PROTO))

    def delete(self):
        subprocess.run(["ip", "netns", "del", self.name], check=False)


def destinations(count):
    return [f"10.{1 + i // 65536}.{i // 256 % 256}.{i % 256}/32" for i in range(count)]


def param_set(generation, dsts, initcwnd):
    return {"generation": generation, "routes": [
        {"dst": d, "rto_min_ms": 14, "initcwnd": initcwnd, "cwnd_clamp": 3, "advmss": None, "pacing_rate": None,
         "quickack": True}
        for d in dsts]}


def ip_commands(dsts, initcwnd):
    return [["route", "replace", d, "dev", "v0", "proto", str(OTCP_PROTO), "rto_min", "14ms", "initcwnd",
             str(initcwnd), "cwnd", "lock", "3", "quickack", "1"] for d in dsts]


def best(runs, measure):
    return min(measure() for _ in range(runs))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,100,1000,10000")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (best is kept)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    ns = Namespace()
    generation = [0]
    try:
        with tempfile.TemporaryDirectory() as tmp, Agent(os.path.join(tmp, "state.db"), netns=ns.name) as agent:

            def otcp_fresh(dsts):
                agent.revert()
                generation[0] += 1
                document = param_set(generation[0], dsts, 1)
                start = time.perf_counter()
                _, results = agent.apply(document, "benchmark")
                elapsed = time.perf_counter() - start
                assert all(r.status == "applied" for r in results) and ns.count_otcp() == len(dsts)
                return elapsed

            def otcp_update(dsts):
                generation[0] += 1
                document = param_set(generation[0], dsts, 1 + generation[0] % 2)
                start = time.perf_counter()
                agent.apply(document, "benchmark")
                elapsed = time.perf_counter() - start
                assert ns.count_otcp() == len(dsts)
                return elapsed

            def ip_per_route(dsts):
                agent.revert()
                commands = ip_commands(dsts, 1)
                start = time.perf_counter()
                for command in commands:
                    subprocess.run(["ip", "-n", ns.name, *command], check=True)
                elapsed = time.perf_counter() - start
                assert ns.count_otcp() == len(dsts)
                return elapsed

            def ip_batch(dsts):
                agent.revert()
                script = "\n".join(" ".join(c) for c in ip_commands(dsts, 1)) + "\n"
                start = time.perf_counter()
                ns.ip("-batch", "-", input=script)
                elapsed = time.perf_counter() - start
                assert ns.count_otcp() == len(dsts)
                return elapsed

            print(f"{'routes':>7}  {'otcp s':>8} {'routes/s':>9}  {'update s':>8} {'routes/s':>9}  "
                  f"{'ip/route s':>10} {'routes/s':>9}  {'ip -batch s':>11} {'routes/s':>9}  {'speed-up':>8}")
            for size in sizes:
                dsts = destinations(size)
                runs = 1 if size >= 10000 else args.runs
                fresh = best(args.runs, lambda dsts=dsts: otcp_fresh(dsts))
                update = best(args.runs, lambda dsts=dsts: otcp_update(dsts))
                per_route = best(runs, lambda dsts=dsts: ip_per_route(dsts))
                batch = best(args.runs, lambda dsts=dsts: ip_batch(dsts))
                agent.revert()
                print(f"{size:>7}  {fresh:>8.3f} {size / fresh:>9.0f}  {update:>8.3f} {size / update:>9.0f}  "
                      f"{per_route:>10.3f} {size / per_route:>9.0f}  {batch:>11.3f} {size / batch:>9.0f}  "
                      f"{per_route / fresh:>7.1f}x", flush=True)
                if size == 1000:
                    verdict = "met" if fresh < 1.0 else "NOT met"
                    print(f"         target (1 000 routes in under 1 s): {verdict}", flush=True)
    finally:
        ns.delete()


if __name__ == "__main__":
    main()
