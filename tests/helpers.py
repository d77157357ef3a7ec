"""Small builders shared by the unit tests."""

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


def hello(**fields):
    """An agent's hello (messages.Hello) about a host h1, with fields changed."""
    from otcp.wire import limits, messages

    document = {"type": "hello", "hostname": "h1", "addresses": ["10.0.0.1"], "interfaces": [], "mtu": 1500,
                "mss_bytes": 1448, "congestion_controls": ["reno", "cubic"], "congestion_control": "cubic",
                "tcp_rto_min_us": True, "applied_generation": None, "agent_version": limits.VERSION,
                "enforcement": {"mode": "routes", "reason": "a test"}}
    return messages.parse_message({**document, **fields}, messages.Hello)
