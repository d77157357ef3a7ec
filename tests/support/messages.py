"""Messages of the agent channel as the tests build them."""

from otcp.wire import limits, messages


def hello(**fields):
    """An agent's hello (messages.Hello) about a host h1, with fields changed."""
    document = {"type": "hello", "hostname": "h1", "addresses": ["10.0.0.1"], "interfaces": [], "mtu": 1500,
                "mss_bytes": 1448, "congestion_controls": ["reno", "cubic"], "congestion_control": "cubic",
                "tcp_rto_min_us": True, "applied_generation": None, "agent_version": limits.VERSION,
                "enforcement": {"mode": "routes", "reason": "a test"}}
    return messages.parse_message({**document, **fields}, messages.Hello)
