"""How many agents the controller's channel serves, and what load does to a good agent.

Runs the real `AgentServer` on os-ken's hub in this process, on loopback,
with green-thread peers that speak the real protocol:

1. the descriptor limit, raised as `otcp-controller run` raises it;
2. N authenticated agents connected at once (default 2000), and the time
   they took to authenticate;
3. a good agent's push-to-ack latency (publish -> params -> ack), median
   and 95th percentile, with no other peer (the baseline, measured in the
   same run) and with the N agents connected: the ratio is the figure;
4. with N unauthenticated peers from one address holding their
   connections open against a server with the default limits, how many of
   20 fresh agents still authenticate.

    .venv/bin/python benchmarks/channel_capacity.py [--agents 2000]
"""

import argparse
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from os_ken.lib import hub  # noqa: E402

from otcp.controller.publication import Publications  # noqa: E402
from otcp.service.agent_server import AgentServer  # noqa: E402
from otcp.service.launcher import raise_descriptor_limit  # noqa: E402
from otcp.wire import messages  # noqa: E402
from otcp.wire.paramset import RouteParams  # noqa: E402
from support.channel import SECRET, GreenPeer  # noqa: E402

ROUTE = RouteParams(dst="10.99.0.2/32", rto_min_ms=14, initcwnd=1, cwnd_clamp=3, quickack=True)


def address(i):
    return f"10.{100 + i // 65536}.{i // 256 % 256}.{i % 256}"


def push_to_ack(server, publications, good, pushes, first_generation):
    """Latencies of `pushes` sets to the good agent, each published, received and acknowledged."""
    latencies = []
    for generation in range(first_generation, first_generation + pushes):
        started = time.perf_counter()
        publications.publish(generation, {"10.99.0.1": [ROUTE]})
        server.deliver("10.99.0.1")
        message = good.session.open(good.read())
        ack = messages.ack_message(message["set"]["generation"], [], {"mode": "routes", "reason": None})
        good.sock.sendall(good.session.seal(ack))
        while server.acked.get("10.99.0.1") != generation:
            hub.sleep(0)
        latencies.append(time.perf_counter() - started)
    return latencies


def summary(latencies):
    ordered = sorted(latencies)
    return statistics.median(ordered) * 1e3, ordered[int(0.95 * (len(ordered) - 1))] * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--pushes", type=int, default=50)
    args = parser.parse_args()

    raise_descriptor_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"open files: soft {soft}, hard {hard}; each agent costs one descriptor on the controller "
          f"(two in this benchmark, which also holds the agents' ends)")

    publications = Publications()
    server = AgentServer("127.0.0.1", 0, SECRET, publications, on_ack=lambda *a: None,
                         max_connections=args.agents + 100, max_unauthenticated=args.agents + 100,
                         unauthenticated_per_source=args.agents + 100, handshake_timeout=120.0)
    server.start()
    port = server.address[1]
    good = GreenPeer(port)
    assert good.authenticate(addresses=("10.99.0.1",))
    baseline = push_to_ack(server, publications, good, args.pushes, 1)

    started = time.perf_counter()
    peers = [GreenPeer(port) for _ in range(args.agents)]
    threads = [hub.spawn(peer.authenticate, addresses=(address(i),)) for i, peer in enumerate(peers)]
    authenticated = sum(1 for thread in threads if thread.wait())
    connect_s = time.perf_counter() - started
    loaded = push_to_ack(server, publications, good, args.pushes, 1 + args.pushes)
    print(f"{authenticated} of {args.agents} agents authenticated in {connect_s:.1f} s "
          f"({authenticated / connect_s:.0f}/s); {len(server.connected_hosts())} connected")
    base_median, base_p95 = summary(baseline)
    load_median, load_p95 = summary(loaded)
    print(f"good agent push-to-ack: alone median {base_median:.2f} ms p95 {base_p95:.2f} ms; "
          f"with {authenticated} agents median {load_median:.2f} ms p95 {load_p95:.2f} ms "
          f"(ratio {load_median / base_median:.2f}x)")
    for peer in peers:
        peer.close()
    hub.sleep(0.5)

    server.stop()
    # The same flood against a server with the default limits (1024 connections, a quarter of
    # them for unauthenticated peers, 16 per source).
    guarded = AgentServer("127.0.0.1", 0, SECRET, Publications(), on_ack=lambda *a: None, handshake_timeout=120.0)
    guarded.start()
    squatters = []  # from 127.0.0.2; they never authenticate
    for _ in range(args.agents):
        try:
            squatters.append(GreenPeer(guarded.address[1], source="127.0.0.2"))
        except OSError:
            break
    hub.sleep(0.5)
    let_in = len(guarded._connections)
    fresh = 0
    for i in range(20):
        try:
            peer = GreenPeer(guarded.address[1], source="127.0.0.3")
            if peer.authenticate(addresses=(address(args.agents + i),)):
                fresh += 1
            peer.close()
        except (OSError, ValueError, TypeError, hub.Timeout):
            continue
    print(f"{len(squatters)} unauthenticated connection attempts from one address, "
          f"{let_in} of them let in: {fresh} of 20 fresh agents from another address authenticated")
    for squatter in squatters:
        squatter.close()
    guarded.stop()


if __name__ == "__main__":
    main()
