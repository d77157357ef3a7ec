"""Routes and parameter sets as the tests write them (dicts, as a hand-written
set file holds them), and longest-prefix match over a route list."""

import ipaddress


def route(dst, rto_min_ms=14, initcwnd=1, cwnd_clamp=3, quickack=True, advmss=None, pacing_rate=None, congctl=None,
          ssthresh=None, increase=None):
    """One route of a parameter set, with every field named."""
    return {"dst": dst, "rto_min_ms": rto_min_ms, "initcwnd": initcwnd, "cwnd_clamp": cwnd_clamp, "advmss": advmss,
            "pacing_rate": pacing_rate, "quickack": quickack, "congctl": congctl, "ssthresh": ssthresh,
            "increase": increase}


def set_for(generation, *dsts, **params):
    """A parameter set: one route per destination, all with the same parameters."""
    return {"generation": generation, "routes": [route(dst, **params) for dst in dsts]}


def destination(route):
    """A route's prefix (a RouteParams, or a test's own {"dst": ...})."""
    return route["dst"] if isinstance(route, dict) else route.dst


def lookup(routes, address):
    """The route longest-prefix match picks for address, or None."""
    address = ipaddress.ip_address(address)
    matching = [r for r in routes if address in ipaddress.ip_network(destination(r))]
    return max(matching, key=lambda r: ipaddress.ip_network(destination(r)).prefixlen, default=None)
