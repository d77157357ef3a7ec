"""`otcp-controller`: run the controller, check or reload its configuration, plan offline, show stored
state, or ask a running one for its status."""

import argparse
import dataclasses
import datetime
import fcntl
import json
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterable
from typing import Any, TextIO

from otcp.wire import build

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a writer SIGPIPE ended
DEFAULT_CONFIG = "/etc/otcp/controller.yaml"  # where scripts/install.sh puts it

_TABLE_COLUMNS = (
    ("src", "src"),
    ("dst", "dst"),
    ("dst_ip", "dst_ip"),
    ("min_rto_us", "minRTO_us"),
    ("rto_min_ms", "rto_min_ms"),
    ("initcwnd", "initcwnd"),
    ("cwnd_clamp", "cwnd_clamp"),
    ("segment_bytes", "segment_B"),
    ("pacing_rate", "pacing_Bps"),
    ("congctl", "congctl"),
    ("ssthresh", "ssthresh"),
    ("increase", "increase"),
    ("rtt_prop_us", "RTTprop_us"),
    ("rtt_source", "rtt_from"),
)


def print_table(rows: Iterable[dict[str, Any]], out: TextIO | None = None) -> None:
    """Print parameter records as an aligned text table with their paths."""
    out = out or sys.stdout
    header = [title for _, title in _TABLE_COLUMNS] + ["path"]
    lines = [header]
    for row in rows:
        cells = ["-" if row.get(key) is None else str(row[key]) for key, _ in _TABLE_COLUMNS]
        lines.append(cells + [" ".join(row.get("hops") or [])])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1] + "\n")


def command_plan(args: argparse.Namespace) -> int:
    """Print the parameters an inventory implies (table or JSON), with --explain why, with --set one
    host's parameter set as the controller would push it, with --link-load the pairs per switch link."""
    # Imported here, not at the top: `run` must let os-ken patch the process first.
    from otcp.planning import planner

    inv, settings, mss_origin = _plan_inputs(args)
    if args.link_load:
        return _print_link_load(inv.fabric(), settings)
    plan = planner.Plan(inv.fabric(), *settings, multipath=args.multipath, long_paths=args.long_paths)
    for src, dst in plan.unreachable:
        print(f"otcp-controller plan: no path from {plan.fabric.name(src)} to {plan.fabric.name(dst)}; pair left out",
              file=sys.stderr)
    source = _chosen_host(plan, args.host) if args.host is not None else None
    if source is not None and args.set:  # _plan_inputs refused --set without --host
        return _print_set(plan, source, args.generation)
    pairs = [k for k in range(len(plan)) if source is None or plan.src[k] == plan.host_index[source]]
    records = list(plan.records()) if source is None else [record for record in plan.records()
                                                           if record["src"] == plan.fabric.name(source)]
    if args.json:
        if args.explain:
            records = [{**record, "explain": dataclasses.asdict(plan.explain(k, mss_origin))}
                       for record, k in zip(records, pairs)]
        json.dump({"paths": records}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.explain:
        for k in pairs:
            sys.stdout.write(render_explanation(plan.explain(k, mss_origin)) + "\n")
    else:
        print_table(records)
    return 0


def _plan_inputs(args: argparse.Namespace) -> tuple[Any, tuple[Any, Any, Any], str]:
    """The inventory, the planner's settings (bounds, lossless, pacing) and where the MSS came
    from: from the controller's configuration with --config, else from the inventory and options."""
    from otcp.planning import fabric, formulas, inventory

    formula_options = {"--lossless": args.lossless, "--queue-target-fraction": args.queue_target_fraction,
                       "--mss-floor": args.mss_floor, "--fan-in-queue-fraction": args.fan_in_queue_fraction,
                       "--fan-in-admission": args.fan_in_admission, "--pacing": args.pacing,
                       "--pacing-headroom": args.pacing_headroom, "--single-path": args.single_path,
                       "--no-long-paths": args.no_long_paths, "--bdp-threshold": args.bdp_threshold,
                       "--griddt": args.griddt, "--reference-rtt-ms": args.reference_rtt_ms}
    if args.set and args.host is None:
        raise ValueError("--set needs --host")
    if args.config is not None:
        from otcp.controller import config as controller_config

        given = [option for option, value in formula_options.items() if value not in (None, False)]
        if given:
            raise ValueError(f"{given[0]}: --config sets the formulas (its parameters, long_paths and forwarding "
                             "sections)")
        config = controller_config.load(args.config)
        path = args.inventory or config.inventory
        if path is None:
            raise ValueError(f"{args.config}: names no inventory; give one")
        args.multipath = config.forwarding.multipath
        args.long_paths = config.long_paths.settings()
        return (inventory.load(path), (config.bounds.limits(), config.parameters.lossless(), config.parameters.paced()),
                fabric.CONFIG)
    if args.inventory is None:
        raise ValueError("give an inventory, or --config with one")
    inv = inventory.load(args.inventory)
    lossless = None
    if args.lossless:
        chosen = {"queue_target_fraction": args.queue_target_fraction, "mss_floor_bytes": args.mss_floor,
                  "fan_in_queue_fraction": args.fan_in_queue_fraction, "fan_in_admission": args.fan_in_admission}
        lossless = formulas.Lossless(**{key: value for key, value in chosen.items() if value is not None})
    elif args.fan_in_admission:
        raise ValueError("--fan-in-admission needs --lossless")
    if args.pacing_headroom is not None and not args.pacing:
        raise ValueError("--pacing-headroom needs --pacing")
    pacing = None
    if args.pacing:
        pacing = formulas.Pacing() if args.pacing_headroom is None else formulas.Pacing(args.pacing_headroom)
    args.multipath = not args.single_path
    args.long_paths = _long_paths(args)
    return inv, (formulas.Bounds(mss_bytes=inv.mss_bytes), lossless, pacing), inv.mss_origin


def _long_paths(args: argparse.Namespace) -> Any:
    """The planner's long-path setting from the options (None with --no-long-paths)."""
    from otcp.planning import formulas

    long_paths = None
    if not args.no_long_paths:
        chosen = {"bdp_threshold_bytes": args.bdp_threshold, "griddt": args.griddt or None,
                  "reference_rtt_s": None if args.reference_rtt_ms is None else args.reference_rtt_ms * 1e-3}
        long_paths = formulas.LongPaths(**{key: value for key, value in chosen.items() if value is not None})
    elif args.bdp_threshold is not None or args.griddt or args.reference_rtt_ms is not None:
        raise ValueError("--bdp-threshold, --griddt and --reference-rtt-ms need long paths (no --no-long-paths)")
    return long_paths


def _chosen_host(plan: Any, host: str) -> str:
    """The address of the host --host names (by name or address); ValueError if none."""
    if host in plan.host_index:
        return host
    by_name = {name: address for address, name in plan.fabric.hosts.items()}
    if host not in by_name:
        raise ValueError(f"--host {host}: no such host in the inventory")
    return by_name[host]


def _print_set(plan: Any, host: str, generation: int) -> int:
    """Print host's parameter set as the controller would push it (its aggregated routes), in the
    format `otcp-agent apply` takes; validated as the agent validates it."""
    from otcp.wire import paramset

    checked = paramset.validate_param_set({"generation": generation, "routes": plan.route_sets()[host]})
    json.dump(checked.model_dump(mode="json", exclude_none=True), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


def _print_link_load(fabric: Any, settings: tuple[Any, Any, Any]) -> int:
    """Per directed switch-to-switch link, the ordered host pairs whose data path crosses it (every
    pair one flow) with one path per switch pair and with multipath, and the spread of each."""
    from otcp.planning import planner

    loads = [planner.Plan(fabric, *settings, multipath=multipath).pairs_per_link() for multipath in (False, True)]
    links = sorted(link for link in set(loads[0]) | set(loads[1])
                   if link[0] not in fabric.hosts and link[1] not in fabric.hosts)
    lines = [["link", "pairs, one path per switch pair", "pairs, multipath"]]
    lines += [[f"{a} -> {b}", str(loads[0].get((a, b), 0)), str(loads[1].get((a, b), 0))] for a, b in links]
    widths = [max(len(line[i]) for line in lines) for i in range(3)]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    for title, load in zip(("one path per switch pair", "multipath"), loads):
        counts = [load.get(link, 0) for link in links]
        if counts:
            print(f"{title}: {sum(1 for c in counts if c)} of {len(counts)} switch links carry pairs, "
                  f"{min(counts)} to {max(counts)} pairs per link")
    return 0


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


def _mbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e6:g} Mb/s"


def render_explanation(e: Any) -> str:
    """A PathExplanation (otcp.planning.explain) as text: the pair's values, its links, and each
    formula with its terms, the bounds that clamped, and where the inputs came from."""
    values = (f"rto_min {e.rto_min_ms} ms, initcwnd {e.initcwnd}, cwnd_clamp {_dash(e.cwnd_clamp)}, "
              f"segment {e.segment_bytes} B" + (f", pacing {e.pacing_rate} B/s" if e.pacing_rate else ""))
    lines = [f"{e.src} -> {e.dst} ({e.dst_ip}): {values}",
             f"  data: {' > '.join([e.data_path[0].src, *(link.dst for link in e.data_path)])}; "
             f"ACKs: {' > '.join([e.ack_path[0].src, *(link.dst for link in e.ack_path)])}"
             + ("; the pair is an active flow" if e.pair_is_flow else "")]
    header = ["link", "capacity", "buffer", "delay", "F_l", "N_l", "window"]
    rows = [header] + [[f"{'ack ' if link.sharing is None else ''}{link.src} -> {link.dst}",
                        f"{_mbps(link.capacity_bytes_per_s)} ({link.capacity_origin})",
                        f"{link.buffer_bytes:g} B ({link.buffer_origin})",
                        f"{_us(link.delay_s)} ({link.delay_origin})",
                        str(link.flows) + ("" if link.admitted_flows in (None, link.flows)
                                           else f" ({link.admitted_flows} admitted)"), _dash(link.sharing),
                        "-" if link.window_bytes is None else f"{link.window_bytes:.0f} B"]
                       for link in (*e.data_path, *e.ack_path)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["    " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    b = e.bottleneck
    lines.append(f"  bottleneck {b.src} -> {b.dst}: {_mbps(b.capacity_bytes_per_s)} / N_l {b.sharing} = "
                 f"fair share {e.fair_share_bytes_per_s:.0f} B/s")
    lines.append(f"  delay term: one-way delays sum to {_us(e.link_delay_sum_s)} over the round trip; "
                 f"RTT_prop {_us(e.rtt_prop_s)} (rtt_from {e.rtt_origin}), {_us(e.rtt_for_rto_s)} for minRTO")
    lines.append(f"  buffer term: sum of buf_l / cap_l over the round trip {_us(e.queueing_s)}")
    lines.append(f"  minRTO = {_us(e.rtt_for_rto_s)} + {_us(e.queueing_s)} = {_us(e.min_rto_s)} "
                 f"-> rto_min {e.rto_min_ms} ms")
    lines.append(f"  initial window = fair share x RTT_prop = {e.initial_window_bytes:.0f} B; "
                 f"MSS {e.mss_bytes} B ({e.mss_origin})")
    if e.window_link is not None:
        w = e.window_link
        lines.append(f"  window: smallest at {w.src} -> {w.dst}, (cap_l x RTT_prop + buf_l) / N_l = "
                     f"{e.window_bytes:.0f} B -> cwnd_clamp {_dash(e.cwnd_clamp)}")
    else:
        lines.append("  window: no switch egress on the data path, no clamp")
    if e.segment is not None and e.segment.fan_in_queue_fraction is not None:
        lines.append(f"  high fan-in: N_l full frames do not fit that, so the queue may rise to "
                     f"{e.segment.fan_in_queue_fraction:g} of the buffer, less one full frame kept free: one full "
                     f"frame each, or (that share of buf_l - a full frame) / N_l less each flow's ACK "
                     f"({e.segment.frame_overhead_bytes} B) where smaller -> "
                     f"{e.segment.window_wire_bytes:.0f} B")
    if e.segment is not None and e.segment.admitted_flows is not None:
        lines.append(f"  admission: the destination asks at most {e.segment.admitted_flows} senders at once (full "
                     f"frames, each with its ACK, that fit its downlink's fan-in budget); its downlink counts at "
                     f"most that many flows, and every link at most that many of each destination's")
    if e.segment is not None:
        g = e.segment
        lines.append(f"  segment: the window is {g.window_wire_bytes:.0f} B on the wire; a full frame is the MSS plus "
                     f"{g.frame_overhead_bytes} B of headers (Ethernet 14, IPv4 20, TCP 20, timestamps 12), so "
                     f"{g.frames} frame(s) of {g.window_wire_bytes / g.frames:.0f} B, {g.fitting_bytes} B of payload "
                     f"each; within floor {g.floor_bytes} and MSS {e.mss_bytes}: {g.own_bytes} B"
                     + (f"; the smallest of the active paths into {e.dst} is {g.receiver_bytes} B, which every "
                        f"path into it takes" if g.receiver_bytes else "")
                     + f" -> segment {g.segment_bytes} B")
    if e.segment is not None:
        lines.append(f"  initcwnd = cwnd_clamp: otcp-lossless sends the whole window at once -> initcwnd {e.initcwnd}")
    if e.pacing_rate:
        lines.append(f"  pacing: the fair share {e.fair_share_bytes_per_s:.0f} B/s plus the headroom -> "
                     f"{e.pacing_rate} B/s")
    if e.long_path is not None:
        lines.append(_long_path_line(e.long_path, e.mss_bytes))
    for clamp in e.clamps:
        lines.append(f"  clamped: {clamp.parameter} {clamp.formula:g} -> {clamp.value} ({clamp.bound})")
    return "\n".join(lines)


def _long_path_line(terms: Any, mss_bytes: int) -> str:
    """A LongPathTerms (otcp.planning.explain) as one line of an explanation."""
    judged = (f"  long path: BDP = bottleneck x RTT_prop = {terms.bdp_bytes:.0f} B, "
              f"{'above' if terms.long else 'not above'} the threshold {terms.threshold_bytes:.0f} B")
    if not terms.long:
        return judged + " -> no congctl, ssthresh or increase"
    increase = (f", increase {terms.increase} (GridDT: from the RTT against {_us(terms.reference_rtt_s)})"
                if terms.griddt else "")
    return (judged + f" -> congctl {terms.congctl}, ssthresh {terms.ssthresh} "
            f"(fair share x RTT_prop / MSS {mss_bytes} B){increase}")


def command_run(args: argparse.Namespace) -> int:
    """Run the controller until stopped."""
    # Imported here: os-ken monkey-patches the process through eventlet.
    from otcp.service import launcher

    try:
        return launcher.run(args.config)
    except launcher.InstanceError as error:
        print(f"otcp-controller run: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


#: How long `reload` waits for the controller to report the reload's outcome.
RELOAD_WAIT_S = 10.0


def command_check(args: argparse.Namespace) -> int:
    """Check a configuration and the inventory it names, as `run` and a reload would; run nothing."""
    from otcp.controller import reload

    candidate = reload.read(args.config)  # ValueError: one line, exit 2
    what = "no inventory"
    if candidate.inventory is not None:
        inv = candidate.inventory
        what = f"inventory {inv.path}: {len(inv.switches)} switches, {len(inv.hosts)} hosts, {len(inv.links)} links"
    print(f"{args.config}: ok ({what})")
    return 0


def running_pid(database: str) -> int:
    """The pid of the controller that holds database's lock; ValueError if none does."""
    path = database + ".lock"
    try:
        with open(path, encoding="utf-8") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return int(lock.read().strip())
    except (FileNotFoundError, ValueError):
        pass
    raise ValueError(f"{database}: no otcp-controller runs on this database")


def command_reload(args: argparse.Namespace) -> int:
    """Check the configuration, then have the running controller re-read it (SIGHUP) and print the outcome."""
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
    from otcp.controller import reload
    from otcp.service import admin

    candidate = reload.read(args.config)  # a bad file stops here, and the controller hears nothing
    config = candidate.config
    pid = running_pid(config.database)
    try:
        before = admin.read_status(config.admin.socket).get("reload")
        os.kill(pid, signal.SIGHUP)
        outcome = None
        deadline = time.monotonic() + RELOAD_WAIT_S
        while outcome in (None, before) and time.monotonic() < deadline:
            time.sleep(0.1)
            outcome = admin.read_status(config.admin.socket).get("reload")
    except admin.AdminError as error:
        print(f"otcp-controller reload: {error}", file=sys.stderr)
        return EXIT_FAILED
    if outcome in (None, before):
        print(f"otcp-controller reload: the controller (pid {pid}) reported no reload within {RELOAD_WAIT_S:g} s",
              file=sys.stderr)
        return EXIT_FAILED
    if outcome["refused"]:
        print(f"otcp-controller reload: refused, the running configuration stays: {outcome['refused']}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"reloaded {args.config} (controller pid {pid}): applied {', '.join(outcome['applied']) or 'nothing'}; "
          f"needing a restart {', '.join(outcome['needs_restart']) or 'nothing'}")
    return 0


def command_show(args: argparse.Namespace) -> int:
    """Print the controller's stored state: topology, generations, agents."""
    from otcp.controller import store

    if not os.path.exists(args.database):
        raise ValueError(f"{args.database}: no such database")
    state = store.Store(args.database, readonly=True)
    latest = state.latest_generation()
    if latest is None:
        if args.json:
            json.dump({"generation": None, "computed_at": None, "generations_in_the_minute_before": 0, "paths": [],
                       "links": [], "acked_generations": state.acks(), "agents": state.agents()}, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            print(f"{args.database}: no parameters computed yet")
        return 0
    generation, computed_at, rows = latest
    links, _ = state.generation_inputs(generation)
    acks = state.acks()
    agents = state.agents()
    if args.json:
        document = {
            "generation": generation,
            "computed_at": computed_at,
            "generations_in_the_minute_before": state.generations_between(computed_at - 60, computed_at),
            "paths": rows,
            "links": [{"src": src, "dst": dst, **values} for (src, dst), values in sorted(links.items())],
            "acked_generations": acks,
            "agents": agents,
        }
        json.dump(document, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    when = datetime.datetime.fromtimestamp(computed_at, datetime.UTC).isoformat(timespec="seconds")
    last_minute = state.generations_between(computed_at - 60, computed_at)
    print(f"generation {generation}, computed at {when} ({last_minute} generations in the minute up to it)")
    print_table(rows)
    print("\nlinks it was computed from:")
    for (src, dst), values in sorted(links.items()):
        print(link_line(src, dst, values))
    if acks or agents:
        print("\nagents:")
        for host_ip in sorted(set(acks) | set(agents)):
            hello = agents.get(host_ip, {})
            facts = (
                f", {hello.get('hostname')}: MSS {hello.get('mss_bytes')} B, congestion control "
                f"{hello.get('congestion_control')} of {' '.join(hello.get('congestion_controls', []))}, "
                f"tcp_rto_min_us {'present' if hello.get('tcp_rto_min_us') else 'absent'}"
                if hello else ""
            )
            print(f"  {host_ip}: acknowledged generation {acks.get(host_ip, '-')}{facts}")
    return 0


def link_line(src: str, dst: str, values: dict[str, Any]) -> str:
    """One directed link's measurement as a line of text."""
    return (f"  {src} -> {dst}: delay {values['delay_s'] * 1e6:.1f} us ({values['delay_source']}, "
            f"{values['samples']} samples), {values['capacity_bytes_per_s'] * 8 / 1e6:g} Mb/s, "
            f"buffer {values['buffer_bytes']:g} B, {values['flows']} active flows")


def command_status(args: argparse.Namespace) -> int:
    """Print the running controller's live view, read from its admin socket."""
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")  # os-ken's hub, imported by admin
    from otcp.controller import config as controller_config
    from otcp.service import admin

    path = args.socket or controller_config.load(args.config).admin.socket
    try:
        status = admin.read_status(path)
    except admin.AdminError as error:
        print(f"otcp-controller status: {error}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        json.dump(status, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    planned = "not planned yet"
    if status["planned_at"] is not None:
        planned = (f"planned {status['now'] - status['planned_at']:.1f} s ago "
                   f"in {status['plan_duration_s'] * 1e3:.1f} ms")
    print(f"generation {status['generation']} ({status['generations_last_minute']} in the last minute), {planned}")
    print("switches: " + (", ".join(f"{s['name']} (dpid {s['dpid']})" for s in status["switches"]) or "none"))
    cluster = status["cluster"]
    if cluster["instances"] > 1:
        leading = [role["dpid"] for role in status["roles"] if role["role"] == "master"]
        print(f"instance rank {cluster['rank']} of {cluster['instances']}: MASTER of {len(leading)} of "
              f"{len(status['roles'])} switches ({', '.join(f's{dpid}' for dpid in leading) or 'none'}), "
              f"failover within {cluster['failover_bound_s']:g} s")
    print("hosts: " + (", ".join(f"{h['name']} {h['ip']} at s{h['dpid']}:{h['port']}" for h in status["hosts"])
                       or "none"))
    print("\nlinks:" if status["links"] else "\nlinks: none")
    for link in status["links"]:
        print(link_line(link["src"], link["dst"], link))
    if status["paths"]:
        print(f"\nparameters (generation {status['paths_generation']}):")
        print_table(status["paths"])
    else:
        print("\nparameters: none yet")
    print("\nagents:" if status["agents"] else "\nagents: none")
    for agent in status["agents"]:
        where = f"connected from {agent['peer']}" if agent["connected"] else "not connected"
        if agent["host_ip"] is None:
            print(f"  unknown host ({agent['hostname'] or '?'}): {where}, reports "
                  f"{', '.join(agent['addresses']) or 'no address'}, none of them a host with parameters; "
                  "it gets no set")
            continue
        print(f"  {agent['host_ip']} ({agent['hostname'] or '?'}): {where}, acknowledged generation "
              f"{_dash(agent['acknowledged_generation'])}, published {_dash(agent['published_generation'])}, "
              f"lag {_dash(agent['lag_generations'])}")
    for line in status.get("sets_too_large", []):
        print(f"  {line}")
    return 0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def build_parser() -> argparse.ArgumentParser:
    """The otcp-controller command line: run, check, reload, plan, show, status."""
    parser = argparse.ArgumentParser(
        prog="otcp-controller", description="OTCP controller: per-path TCP parameters from fabric measurements"
    )
    parser.add_argument("--version", action="version", version=build.version_line("otcp-controller"))
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the os-ken controller with the OTCP app")
    run.add_argument("--config", required=True, help="controller configuration (YAML)")
    run.set_defaults(handler=command_run)
    check = commands.add_parser("check", help="check a configuration and its inventory without running")
    check.add_argument("config", help="controller configuration (YAML)")
    check.set_defaults(handler=command_check)
    reload = commands.add_parser("reload", help="have the running controller re-read its configuration and "
                                                "inventory (as SIGHUP does), after checking them")
    reload.add_argument("--config", default=DEFAULT_CONFIG,
                        help=f"the running controller's configuration file (default {DEFAULT_CONFIG})")
    reload.set_defaults(handler=command_reload)
    plan = commands.add_parser("plan", help="print the parameters an inventory implies")
    plan.add_argument("inventory", nargs="?", help="inventory YAML (docs/controller.md); with --config, the "
                                                   "configuration's when left out")
    plan.add_argument("--config", metavar="FILE",
                      help="the controller's configuration: its bounds, formulas and forwarding instead of options")
    plan.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plan.add_argument("--explain", action="store_true",
                      help="per pair, the terms of each formula: bottleneck and N_l, delay and buffer terms, "
                           "the bounds that clamped, where each input came from")
    plan.add_argument("--host", metavar="H", help="only the pairs from host H (a name or an address)")
    plan.add_argument("--set", action="store_true",
                      help="with --host: the parameter set the controller would push to H, as otcp-agent apply "
                           "takes it")
    plan.add_argument("--generation", type=int, default=1, metavar="N", help="the generation --set carries (default 1)")
    plan.add_argument("--single-path", action="store_true",
                      help="one path per switch pair instead of spreading destinations over equal-cost paths")
    plan.add_argument("--link-load", action="store_true",
                      help="per switch-to-switch link, the host pairs crossing it, one path per switch pair "
                           "beside multipath")
    plan.add_argument("--lossless", action="store_true", help="the otcp-lossless formulas instead of the published")
    plan.add_argument("--queue-target-fraction", type=float, metavar="F",
                      help="otcp-lossless: the standing queue per switch egress, as a share of its buffer")
    plan.add_argument("--mss-floor", type=int, metavar="BYTES",
                      help="otcp-lossless: the smallest segment payload a path may get")
    plan.add_argument("--fan-in-queue-fraction", type=float, metavar="G",
                      help="otcp-lossless: where N full frames do not fit the queue target, the share of its "
                           "buffer a switch egress's queue may rise to (0: shrink segments instead)")
    plan.add_argument("--fan-in-admission", action="store_true",
                      help="otcp-lossless: receivers admit their senders in turns, as many at once as full "
                           "frames fit their downlink's buffer; each keeps full frames")
    plan.add_argument("--pacing", action="store_true",
                      help="otcp-paced: each pair also gets a pacing rate, its fair share at the bottleneck")
    plan.add_argument("--pacing-headroom", type=float, metavar="H",
                      help="otcp-paced: the rate is the fair share x (1 + H), 0 <= H <= 1 (default 0.05)")
    plan.add_argument("--no-long-paths", action="store_true",
                      help="no path gets the long-fat-path settings (congctl, ssthresh, increase)")
    plan.add_argument("--bdp-threshold", type=float, metavar="BYTES",
                      help="long fat paths: a BDP above this (default 1250000) gets congctl and ssthresh")
    plan.add_argument("--griddt", action="store_true",
                      help="long fat paths also get GridDT's increase A = 2 x (RTT / reference RTT)^2")
    plan.add_argument("--reference-rtt-ms", type=float, metavar="MS",
                      help="GridDT's reference round trip (default 100 ms)")
    plan.set_defaults(handler=command_plan)
    show = commands.add_parser("show", help="print the last parameters a controller stored")
    show.add_argument("--database", required=True, help="the controller's SQLite file")
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show.set_defaults(handler=command_show)
    status = commands.add_parser("status", help="ask the running controller for its live view (read-only)")
    status.add_argument("--config", default=DEFAULT_CONFIG,
                        help=f"the controller's configuration, to find its admin socket (default {DEFAULT_CONFIG})")
    status.add_argument("--socket", help="the admin socket itself (instead of --config)")
    status.add_argument("--json", action="store_true", help="print JSON instead of text")
    status.set_defaults(handler=command_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one otcp-controller command; returns the exit status (0 ok, 2 bad input)."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ValueError as exc:  # InventoryError and ConfigError are ValueErrors
        print(f"otcp-controller {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # the reader went (`plan | head`): stop quietly, as a killed writer would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return EXIT_CLOSED_PIPE


if __name__ == "__main__":
    sys.exit(main())
