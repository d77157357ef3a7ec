"""``otcp-agent doctor``'s decisions from given facts, its exit status, and its sysctl reads from a
fake /proc/sys tree; ``apply --dry-run``'s changes from a plan. No root, no netlink: the checks on
the real kernel are in tests/test_agent_doctor_root.py."""

import dataclasses
import errno
import json
import socket

from otcp.agent import doctor, dryrun
from otcp.agent.doctor import CgroupProgram, Facts, ForeignRoute, Probe, Report, RouteReadback, SkippedDestination
from otcp.agent.enforcement import Enforcement
from otcp.agent.routes import RT_SCOPE_LINK, RT_TABLE_MAIN, KernelRoute, Lookup, Route, plan_routes
from otcp.wire.paramset import ParamSet, RouteParams

WORKS = Probe("works", "fine")


def scratch_route(**params):
    values = {"rto_min_ms": 7, "initcwnd": 13, "cwnd_clamp": 17, "advmss": 1211, "quickack": True, **params}
    return Route(family=socket.AF_INET, dst="198.51.100.7/32", table=RT_TABLE_MAIN, oif=2, gateway="192.0.2.2",
                 prefsrc=None, scope=0, priority=None, **values)


def healthy(**changes):
    """The facts of a host that enforces everything (this machine's, as the root test finds them)."""
    facts = Facts(kernel="6.18.0", btf=True, bpffs="/sys/fs/bpf", cgroup2="/sys/fs/cgroup", sockops=WORKS,
                  struct_ops=WORKS, routes=(RouteReadback("IPv4", scratch_route(), scratch_route()),),
                  tcp_metrics=WORKS, rto_min_us=200_000, no_metrics_save=0, other_sockops=(), foreign_routes=())
    return dataclasses.replace(facts, **changes)


def statuses(facts):
    return {(f.check, f.status) for f in doctor.findings(facts)}


def short_checks(facts):
    return sorted({f.check for f in doctor.findings(facts) if f.status == "short"})


def test_a_healthy_host_has_nothing_short_and_exits_0():
    report = Report(None, tuple(doctor.findings(healthy())))
    assert report.short == [] and report.exit_status() == 0
    assert doctor.format_report(report)[-1] == "this host enforces everything the controller plans"


def test_without_btf_or_an_attachable_sockops_program_enforcement_falls_short():
    assert short_checks(healthy(btf=False)) == ["btf"]
    failed = healthy(sockops=Probe("fails", "Operation not permitted"))
    assert short_checks(failed) == ["sockops"]
    text = [f for f in doctor.findings(failed) if f.check == "sockops"][0]
    assert "Operation not permitted" in text.summary and "no pacing rate" in text.detail
    assert ("pacing", "note") in statuses(failed)
    report = Report(None, tuple(doctor.findings(failed)))
    assert report.exit_status() == 1 and report.as_json()["short"] == ["sockops"]


def test_missing_mounts_are_notes_and_the_untried_sockops_check_is_short():
    facts = healthy(bpffs=None, cgroup2=None, sockops=Probe("untried", "the BPF filesystem missing"))
    assert ("bpffs", "note") in statuses(facts) and ("cgroup2", "note") in statuses(facts)
    assert short_checks(facts) == ["sockops"]


def test_a_mount_table_it_may_not_read_is_said_and_leaves_the_sockops_check_untried():
    # As doctor without CAP_SYS_ADMIN in a namespace with a mount namespace of its own finds it.
    why = "reading the machine's mount table failed (exit 1): nsenter: Operation not permitted"
    facts = healthy(cgroup2=None, mounts_unreadable=why, sockops=Probe("untried", why))
    cgroup2 = [f for f in doctor.findings(facts) if f.check == "cgroup2"][0]
    assert cgroup2.status == "note" and cgroup2.summary == f"the cgroup-v2 root not looked for: {why}"
    assert "CAP_SYS_ADMIN" in cgroup2.detail
    assert short_checks(facts) == ["sockops"]


def test_struct_ops_is_never_short_the_agent_does_not_use_it():
    facts = healthy(struct_ops=Probe("fails", "the verifier refused"))
    assert ("struct_ops", "note") in statuses(facts) and short_checks(facts) == []


def test_a_route_metric_read_back_otherwise_is_short_and_named():
    unlocked = scratch_route(rto_min_ms=None)  # route_from_message: an unlocked rto_min counts as absent
    found = doctor.route_metric_findings([RouteReadback("IPv4", scratch_route(), unlocked)])
    short = [f for f in found if f.status == "short"]
    assert [f.summary for f in short] == ["rto_min lock 7 written, (none) read back"]
    assert len([f for f in found if f.status == "ok"]) == 4
    refused = doctor.route_metric_findings([RouteReadback("IPv6", scratch_route(), None, "Invalid argument")])
    assert [(f.check, f.status) for f in refused] == [("route IPv6", "short")]
    unmade = doctor.route_metric_findings(Probe("untried", "ip netns add otcp-doctor-1: Permission denied"))
    assert [(f.check, f.status) for f in unmade] == [("route", "short")] and "Permission denied" in unmade[0].summary


def test_the_rto_min_sysctl_is_a_note_overridden_by_otcp():
    assert doctor.rto_min_sysctl_finding(None).status == "ok"
    assert doctor.rto_min_sysctl_finding(200_000).status == "ok"
    set_low = doctor.rto_min_sysctl_finding(5_000)
    assert set_low.status == "note" and "net.ipv4.tcp_rto_min_us = 5000" in set_low.summary
    assert "overrides it" in set_low.detail


def test_no_metrics_save_is_short_only_without_the_sockops_program():
    assert doctor.no_metrics_save_finding(1, bpf_works=True).status == "note"
    assert doctor.no_metrics_save_finding(1, bpf_works=False).status == "short"
    assert doctor.no_metrics_save_finding(0, bpf_works=False).status == "ok"
    unreachable = Probe("fails", "no tcp_metrics family")
    assert doctor.tcp_metrics_finding(unreachable, bpf_works=False).status == "short"
    assert doctor.tcp_metrics_finding(unreachable, bpf_works=True).status == "note"


def test_other_sockops_programs_are_named_and_otcps_own_is_not():
    listing = (CgroupProgram(41, "otcp_sockops", "cgroup_sock_ops", "multi"),
               CgroupProgram(42, "tuner", "sock_ops", "multi"), CgroupProgram(43, "guard", "cgroup_inet_ingress"))
    found = doctor.other_sockops_findings(listing)
    assert [(f.status, f.summary) for f in found] == [
        ("note", "sock_ops program id 42 (tuner, multi) on the cgroup-v2 root")]
    assert [f.status for f in doctor.other_sockops_findings(())] == ["ok"]
    assert [f.status for f in doctor.other_sockops_findings(Probe("fails", "no bpftool"))] == ["note"]


def test_foreign_routes_with_metrics_say_which_destinations_they_cover():
    static = ForeignRoute("10.88.0.0/16", RT_TABLE_MAIN, 4, (("rto_min lock", 50), ("initcwnd", 20)))
    found = doctor.foreign_route_findings([static], ["10.88.1.2/32", "10.77.0.2/32", "2001:db8::2/128",
                                                     "10.88.0.0/16"])
    (finding,) = found
    assert finding.status == "note"
    assert finding.summary == "10.88.0.0/16 table main proto static: rto_min lock 50 initcwnd 20"
    assert "toward 10.88.1.2/32 OTCP's host route overrides" in finding.detail
    assert "apply skips 10.88.0.0/16, this route's own prefix" in finding.detail
    assert "10.77.0.2/32" not in finding.detail
    alone = doctor.foreign_route_findings([static], [])[0]
    assert "doctor --set FILE" in alone.detail


def test_a_destination_apply_would_skip_is_short():
    facts = healthy(destinations=("10.88.1.0/24",),
                    skipped=(SkippedDestination("10.88.1.0/24", "a non-OTCP route for 10.88.1.0/24 exists"),))
    assert short_checks(facts) == ["destination"]
    lines = doctor.format_report(Report("h1", tuple(doctor.findings(facts))))
    assert lines[0] == "otcp-agent doctor: namespace h1"
    assert any("apply would skip 10.88.1.0/24: a non-OTCP route" in line for line in lines)
    assert lines[-1] == "1 finding(s) short of what the controller plans: destination"


def test_doctor_reads_sysctls_under_the_root_it_is_given(tmp_path):
    ipv4 = tmp_path / "net" / "ipv4"
    ipv4.mkdir(parents=True)
    (ipv4 / "tcp_rto_min_us").write_text("50000\n")
    (ipv4 / "tcp_no_metrics_save").write_text("1\n")
    assert doctor.read_sysctl("net.ipv4.tcp_rto_min_us", tmp_path) == 50_000
    assert doctor.read_sysctl("net.ipv4.tcp_absent", tmp_path) is None
    facts = healthy(rto_min_us=doctor.read_sysctl("net.ipv4.tcp_rto_min_us", tmp_path),
                    no_metrics_save=doctor.read_sysctl("net.ipv4.tcp_no_metrics_save", tmp_path))
    report = Report(None, tuple(doctor.findings(facts)))
    text = "\n".join(doctor.format_report(report))
    assert "net.ipv4.tcp_rto_min_us = 50000, not the default 200000" in text
    assert report.exit_status() == 0  # the sock_ops program clamps; OTCP's rto_min overrides the sysctl
    assert json.loads(json.dumps(report.as_json()))["exit_status"] == 0


# -- apply --dry-run ---------------------------------------------------------------

LAN = KernelRoute(family=socket.AF_INET, table=RT_TABLE_MAIN, dst="10.0.0.0/8", proto=2, type=1, priority=None,
                  oif=3, gateway=None, prefsrc="10.0.0.1")


def wanted(dst, **params):
    values = {"rto_min_ms": 14, "initcwnd": 1, "cwnd_clamp": 3, "quickack": True, **params}
    return RouteParams(dst=dst, **values)


def owned(dst, **params):
    values = {"rto_min_ms": 14, "initcwnd": 1, "cwnd_clamp": 3, "quickack": True, **params}
    return Route(family=socket.AF_INET, dst=dst, table=RT_TABLE_MAIN, oif=3, gateway=None, prefsrc="10.0.0.1",
                 scope=RT_SCOPE_LINK, priority=None, **values)


def describe(route):
    return {"dst": route.dst, "table": route.table, "dev": {3: "eth0"}.get(route.oif), "gateway": route.gateway,
            "rto_min_ms": route.rto_min_ms, "initcwnd": route.initcwnd, "cwnd_clamp": route.cwnd_clamp,
            "advmss": route.advmss, "quickack": route.quickack}


def test_the_dry_run_lists_add_change_remove_keep_and_skip_with_old_and_new_values():
    routes = [wanted("10.0.0.2/32"), wanted("10.0.0.3/32", initcwnd=4), wanted("10.0.0.4/32", pacing_rate=125_000),
              wanted("10.0.0.5/32")]
    lookup = Lookup(table=RT_TABLE_MAIN, type=1, oif=3, gateway=None)
    plan = plan_routes(routes, [owned("10.0.0.2/32"), owned("10.0.0.3/32"), owned("10.0.0.9/32")], [LAN],
                       [lookup, lookup, lookup, errno.ENETUNREACH])
    changes = dryrun.route_changes(plan, ParamSet(generation=2, routes=routes), {3: "eth0"}, describe,
                                   Enforcement.one_shot())
    assert [(c.op, c.dst) for c in changes] == [("keep", "10.0.0.2/32"), ("change", "10.0.0.3/32"),
                                                ("add", "10.0.0.4/32"), ("skip", "10.0.0.5/32"),
                                                ("remove", "10.0.0.9/32")]
    keep, change, add, skip, remove = changes
    assert keep.changed() == []
    assert [(a.name, a.old, a.new) for a in change.changed()] == [("initcwnd", 1, 4)]
    assert {a.name: (a.old, a.new) for a in add.attributes}["dev"] == (None, "eth0")
    assert "pacing_rate 125000 B/s not enforced" in add.reason
    assert "no route to 10.0.0.5" in skip.reason and skip.attributes == ()
    assert {a.name: (a.old, a.new) for a in remove.attributes}["cwnd_clamp"] == (3, None)
    result = dryrun.DryRun(2, 1, tuple(changes))
    assert result.counts() == {"add": 1, "change": 1, "remove": 1, "keep": 1, "skip": 1}
    lines = dryrun.format_dry_run(result)
    assert lines[0] == ("dry run: generation 2 (applied now: 1): 1 add, 1 change, 1 remove, 1 keep, 1 skip; "
                        "nothing was changed")
    assert "  change  10.0.0.3/32 (main): initcwnd 1 -> 4" in lines
    assert json.loads(json.dumps(result.as_json()))["changes"][1]["op"] == "change"


def test_the_dry_run_reads_no_state_where_there_is_none_and_creates_none(tmp_path):
    path = tmp_path / "state.db"
    assert dryrun.stored_applied(str(path)) == (None, "")
    assert not path.exists()


def test_an_unusable_state_file_is_reported_not_moved(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"not a database")
    applied, note = dryrun.stored_applied(str(path))
    assert applied is None and "apply would move it aside" in note
    assert path.read_bytes() == b"not a database" and sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]
