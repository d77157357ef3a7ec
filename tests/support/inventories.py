"""Inventories as the tests write them: the worked example's star, random
fabrics for the planner's property tests, and a file to point a command at."""

import random

import yaml


def write_inventory(tmp_path, document, name="inventory.yaml"):
    """Write an inventory dict (or raw YAML text) and return its path."""
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    return str(path)


def star(senders, capacity_mbps=100, delay_us=25, buffer_bytes=85000):
    """The worked example of docs/design.md ("Formulas"): senders h2.. -> receiver h1 on s1."""
    hosts = {f"h{i}": {"ip": f"10.0.0.{i}"} for i in range(1, senders + 2)}
    links = [
        {"a": h, "b": "s1", "capacity_mbps": capacity_mbps, "delay_us": delay_us, "buffer_bytes": buffer_bytes}
        for h in hosts
    ]
    flows = [{"src": f"h{i}", "dst": "h1"} for i in range(2, senders + 2)]
    return {"switches": {"s1": {"dpid": 1}}, "hosts": hosts, "links": links, "flows": flows}


def random_inventory(seed, long_delays=False):
    """An inventory document drawn from seed: mixed capacities, delays, buffers and flows, sometimes islands;
    with long_delays, some links of a wide-area path's one-way delay too (10 and 60 ms)."""
    rng = random.Random(seed)
    switches = [f"s{i}" for i in range(rng.randint(1, 7))]
    hosts = {f"h{i}": {"ip": f"10.0.{seed}.{i + 1}"} for i in range(rng.randint(2, 9))}
    links = []

    def values():
        return {
            "capacity_mbps": rng.choice([10, 100, 1000, 40000]),
            "delay_us": rng.choice([0, 1, 25, 300] + ([10_000, 60_000] if long_delays else [])),
            "buffer_bytes": rng.choice([0, 8000, 85000, 512000]),
        }

    for i, switch in enumerate(switches[1:], start=1):
        if rng.random() < 0.85:  # sometimes an island
            links.append({"a": switch, "b": rng.choice(switches[:i]), **values()})
    pairs = {frozenset((link["a"], link["b"])) for link in links}
    for _ in range(rng.randint(0, 4)):
        a, b = rng.sample(switches, 2) if len(switches) > 1 else (None, None)
        if a and frozenset((a, b)) not in pairs:
            pairs.add(frozenset((a, b)))
            links.append({"a": a, "b": b, **values()})
    for host in hosts:
        links.append({"a": host, "b": rng.choice(switches), **values()})
    names = list(hosts)
    flows = [
        {"src": src, "dst": dst, "count": rng.randint(1, 30)}
        for src, dst in {tuple(rng.sample(names, 2)) for _ in range(rng.randint(0, 6))}
    ]
    return {"switches": switches, "hosts": hosts, "links": links, "flows": flows}
