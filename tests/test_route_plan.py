"""Route planning as a pure decision: synthetic kernel routes and lookups in,
writes, skips and removals out. No root, no netlink."""

import errno
import socket

from otcp.agent.routes import RT_SCOPE_LINK, RT_TABLE_MAIN, KernelRoute, Lookup, Route, plan_routes
from otcp.wire.messages import RouteResult
from otcp.wire.paramset import RouteParams

MAIN = RT_TABLE_MAIN
LAN = KernelRoute(family=socket.AF_INET, table=MAIN, dst="10.0.0.0/8", proto=2, type=1, priority=None,
                  oif=3, gateway=None, prefsrc="10.0.0.1")


def wanted(dst, rto_min_ms=14, initcwnd=1, cwnd_clamp=3, advmss=None):
    return RouteParams(dst=dst, rto_min_ms=rto_min_ms, initcwnd=initcwnd, cwnd_clamp=cwnd_clamp, advmss=advmss,
                       quickack=True)


def owned(dst, oif=3, **params):
    values = {"rto_min_ms": 14, "initcwnd": 1, "cwnd_clamp": 3, "quickack": True, **params}
    return Route(family=socket.AF_INET, dst=dst, table=MAIN, oif=oif, gateway=None, prefsrc="10.0.0.1",
                 scope=RT_SCOPE_LINK, priority=None, **values)


def on_lan(oif=3):
    return Lookup(table=MAIN, type=1, oif=oif, gateway=None)


def test_a_new_destination_takes_the_lookup_nexthop_and_covering_source():
    plan = plan_routes([wanted("10.0.0.2/32")], [], [LAN], [on_lan()])
    (op, new, old), = plan.writes
    assert (op, new.dst, new.oif, new.prefsrc, new.scope, old) == ("add", "10.0.0.2/32", 3, "10.0.0.1", RT_SCOPE_LINK,
                                                                   None)
    assert (new.rto_min_ms, new.initcwnd, new.cwnd_clamp) == (14, 1, 3)
    assert plan.stale == []


def test_unchanged_is_kept_changed_is_replaced_and_dropped_goes():
    current = [owned("10.0.0.2/32"), owned("10.0.0.3/32"), owned("10.0.0.9/32")]
    plan = plan_routes([wanted("10.0.0.2/32"), wanted("10.0.0.3/32", initcwnd=4)], current, [LAN],
                       [on_lan(), on_lan()])
    assert [(op, new.dst) for op, new, _ in plan.writes] == [("keep", "10.0.0.2/32"), ("replace", "10.0.0.3/32")]
    assert [route.dst for route in plan.stale] == ["10.0.0.9/32"]


def test_an_existing_route_follows_the_covering_route_not_its_own_lookup():
    moved = KernelRoute(**{**LAN.__dict__, "oif": 7})
    # The lookup answers with the OTCP route itself (oif 3); the covering route now says 7.
    plan = plan_routes([wanted("10.0.0.2/32")], [owned("10.0.0.2/32")], [moved], [on_lan(3)])
    (op, new, _), = plan.writes
    assert (op, new.oif) == ("replace", 7)


def test_skips_are_reported_with_their_reason_in_order():
    local = Lookup(table=255, type=2, oif=1, gateway=None)
    operator = KernelRoute(family=socket.AF_INET, table=MAIN, dst="10.0.0.4/32", proto=4, type=1, priority=None,
                           oif=3, gateway=None, prefsrc=None)
    plan = plan_routes(
        [wanted("10.0.0.5/32"), wanted("10.0.0.1/32"), wanted("10.0.0.4/32"), wanted("10.0.0.2/32")],
        [], [LAN, operator], [errno.ENETUNREACH, local, on_lan(), on_lan()])
    results = plan.results({3: "eth0"})
    assert [r.status for r in results] == ["skipped", "skipped", "skipped", "applied"]
    assert "no route to 10.0.0.5 (ENETUNREACH" in results[0].reason
    assert "as local, not unicast" in results[1].reason
    assert "a non-OTCP route for 10.0.0.4/32 exists in table main (proto static)" in results[2].reason
    assert results[3] == RouteResult(dst="10.0.0.2/32", status="applied", dev="eth0", gateway=None, table=MAIN)


def test_an_existing_route_with_no_covering_route_is_skipped():
    plan = plan_routes([wanted("10.0.0.2/32")], [owned("10.0.0.2/32")], [], [on_lan()])
    assert plan.writes == [] and plan.results({})[0].reason.startswith("no non-OTCP route covers")
    assert [route.dst for route in plan.stale] == ["10.0.0.2/32"]


def test_the_most_specific_unicast_cover_wins():
    wide = KernelRoute(**{**LAN.__dict__, "oif": 9})
    narrow = KernelRoute(**{**LAN.__dict__, "dst": "10.0.0.0/24", "oif": 5})
    blackhole = KernelRoute(**{**LAN.__dict__, "dst": "10.0.0.0/28", "type": 6, "oif": None})
    plan = plan_routes([wanted("10.0.0.2/32")], [owned("10.0.0.2/32")], [wide, narrow, blackhole], [on_lan()])
    assert plan.writes[0][1].oif == 5
