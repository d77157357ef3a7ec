"""`otcp-controller`: run the controller, check or reload its configuration, plan offline, show stored
state, or ask a running one for its status."""

import argparse
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
    """Print the parameters an inventory implies (table or JSON)."""
    # Imported here, not at the top: `run` must let os-ken patch the process first.
    from otcp.planning import formulas, inventory, planner

    inv = inventory.load(args.inventory)
    lossless = None
    if args.lossless:
        chosen = {"queue_target_fraction": args.queue_target_fraction, "mss_floor_bytes": args.mss_floor}
        lossless = formulas.Lossless(**{key: value for key, value in chosen.items() if value is not None})
    if args.pacing_headroom is not None and not args.pacing:
        raise ValueError("--pacing-headroom needs --pacing")
    pacing = None
    if args.pacing:
        pacing = formulas.Pacing() if args.pacing_headroom is None else formulas.Pacing(args.pacing_headroom)
    long_paths = None
    if not args.no_long_paths:
        chosen = {"bdp_threshold_bytes": args.bdp_threshold, "griddt": args.griddt or None,
                  "reference_rtt_s": None if args.reference_rtt_ms is None else args.reference_rtt_ms * 1e-3}
        long_paths = formulas.LongPaths(**{key: value for key, value in chosen.items() if value is not None})
    elif args.bdp_threshold is not None or args.griddt or args.reference_rtt_ms is not None:
        raise ValueError("--bdp-threshold, --griddt and --reference-rtt-ms need long paths (no --no-long-paths)")
    plan = planner.Plan(inv.fabric(), formulas.Bounds(mss_bytes=inv.mss_bytes), lossless, pacing,
                        long_paths=long_paths)
    for src, dst in plan.unreachable:
        print(f"otcp-controller plan: no path from {plan.fabric.name(src)} to {plan.fabric.name(dst)}; pair left out",
              file=sys.stderr)
    if args.json:
        json.dump({"paths": list(plan.records())}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_table(plan.records())
    return 0


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
    plan.add_argument("inventory", help="inventory YAML (docs/controller.md)")
    plan.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plan.add_argument("--lossless", action="store_true", help="the otcp-lossless formulas instead of the published")
    plan.add_argument("--queue-target-fraction", type=float, metavar="F",
                      help="otcp-lossless: the standing queue per switch egress, as a share of its buffer")
    plan.add_argument("--mss-floor", type=int, metavar="BYTES",
                      help="otcp-lossless: the smallest segment payload a path may get")
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


if __name__ == "__main__":
    sys.exit(main())
