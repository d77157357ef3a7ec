"""``otcp-agent``: the host agent and its one-shot commands.

    otcp-agent run --controller HOST:PORT[,HOST:PORT...] --secret-file FILE [--state FILE] [--enforce bpf|routes]
    otcp-agent apply FILE.json [--json] [--dry-run] [--state FILE]     # FILE "-" reads stdin
    otcp-agent show [--json] [--state FILE]
    otcp-agent revert [--state FILE]
    otcp-agent doctor [--json] [--set FILE.json] [--state FILE] [--sysctl-root DIR]

Options before the subcommand: ``--netns NAME`` runs the whole command in
the named network namespace (as ``ip netns exec NAME`` would), ``--log-level``,
``--log-file FILE`` and ``--version``. Logs go to stderr (and the file), each
line with its time; results of one-shot commands to stdout.

Exit status: 0 done; 1 the kernel refused a change (the previous routes
were restored), the state file cannot be written (nothing changed), another
``run`` uses the state file, or the channel could not start, and for
``doctor``, this host would enforce less than the controller plans; 2 bad
input (the message names the file and the field); 130 stopped by SIGINT
(the message says whether the set was applied).
"""

import argparse
import datetime
import json
import logging
import logging.handlers
import os
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from otcp.agent import doctor, dryrun, rtt
from otcp.agent.client import ControllerClient, SharedAgent, client_tls, parse_address, run_all
from otcp.agent.core import Agent
from otcp.agent.enforcement import MODES, Enforcement, status_path
from otcp.agent.lease import SAFE_INITCWND
from otcp.agent.metrics import AgentMetrics
from otcp.agent.routes import OTCP_PROTO, ApplyError, Route, describe_routes, table_name
from otcp.agent.state import CorruptState, RunLock, State, StateUnwritable
from otcp.wire import build, limits, paramset, session
from otcp.wire.messages import RouteResult
from otcp.wire.paramset import ParamSet, RouteParams
from otcp.wire.validation import ValidationError

STATE_DIRECTORY = "/var/lib/otcp-agent"
#: The exit status of a command stopped by SIGINT (128 + the signal), as shells report it.
EXIT_INTERRUPTED = 130
#: How long a stopping agent waits for the apply another controller's connection is in.
STOP_WAIT_S = 5.0
LOG = logging.getLogger("otcp.agent")


def main(argv: list[str] | None = None) -> int:
    """Run one otcp-agent command; returns the exit status (0 ok, 1 failed, 2 bad input, 130 interrupted)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if args.log_file:
        try:
            handlers.append(logging.handlers.WatchedFileHandler(args.log_file))  # reopened after logrotate
        except OSError as error:
            print(f"otcp-agent: --log-file {args.log_file}: {error.strerror or error}", file=sys.stderr)
            return 2
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), handlers=handlers,
                        format="%(asctime)s otcp-agent %(levelname)s %(message)s")
    logging.getLogger("pyroute2").setLevel(logging.WARNING)  # its debug lines are every netlink message
    if args.netns:
        try:
            _enter_netns(args.netns)
        except OSError as error:
            print(f"otcp-agent: --netns {args.netns}: {error.strerror or error}", file=sys.stderr)
            return 2
    if args.state is None:
        args.state = default_state_path(args.netns)
    try:
        return args.command(args)
    except StateUnwritable as error:
        print(f"otcp-agent: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"otcp-agent {args.subcommand}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def default_state_path(netns: str | None) -> str:
    """Where the state lives unless --state says: one file per namespace."""
    if netns:
        return os.path.join(STATE_DIRECTORY, os.path.basename(netns), "state.db")
    return os.path.join(STATE_DIRECTORY, "state.db")


def build_parser() -> argparse.ArgumentParser:
    """The otcp-agent command line: run, apply, show, revert."""
    parser = argparse.ArgumentParser(
        prog="otcp-agent", description="Apply OTCP's per-destination TCP parameters as route attributes "
        f"(routes tagged proto {OTCP_PROTO})."
    )
    parser.add_argument("--version", action="version", version=build.version_line("otcp-agent"))
    parser.add_argument("--netns", metavar="NAME", help="run in this named network namespace")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-file", metavar="FILE", help="log here as well as to stderr")
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")

    def state_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--state", metavar="FILE",
                         help=f"SQLite state file (default {STATE_DIRECTORY}/state.db, or "
                              f"{STATE_DIRECTORY}/NETNS/state.db with --netns)")

    run = commands.add_parser("run", help="connect to the controller and apply what it pushes")
    run.add_argument("--controller", required=True, action="append", metavar="HOST:PORT",
                     help="a controller to connect to; every instance of the fabric's controller, given once "
                     "each or comma-separated: the agent takes sets from whichever is its host's master")
    run.add_argument("--secret-file", required=True, metavar="FILE")
    run.add_argument("--backoff-max", type=float, default=30.0, metavar="SECONDS",
                     help="longest wait between reconnection attempts (default 30)")
    run.add_argument("--rtt-interval", type=float, default=rtt.INTERVAL_S, metavar="SECONDS",
                     help="how often to measure and report round trips to the set's destinations (default 5)")
    run.add_argument("--metrics", metavar="ADDRESS:PORT",
                     help="serve Prometheus metrics here (off by default)")
    run.add_argument("--tls-ca", metavar="FILE",
                     help="speak TLS to the controller and verify its certificate against this CA")
    run.add_argument("--tls-server-name", metavar="NAME",
                     help="the name the controller's certificate must carry (default: the --controller host)")
    run.add_argument("--enforce", choices=MODES, default="bpf",
                     help="bpf (default): also enforce the window, initial window, rto_min and pacing with the "
                     "sock_ops program from the first connection, falling back to routes alone when BPF is "
                     "unavailable; routes: route attributes alone (the published OTCP)")
    state_option(run)
    run.set_defaults(command=cmd_run)

    apply = commands.add_parser("apply", help="validate and apply a parameter set from a JSON file")
    apply.add_argument("file", metavar="FILE.json")
    apply.add_argument("--json", action="store_true", help="print the per-route results as JSON")
    apply.add_argument("--dry-run", action="store_true",
                       help="print the change per route (add, change, remove, keep, skip) and change nothing")
    state_option(apply)
    apply.set_defaults(command=cmd_apply)

    show = commands.add_parser("show", help="what is applied, read back from the kernel")
    show.add_argument("--json", action="store_true")
    state_option(show)
    show.set_defaults(command=cmd_show)

    revert = commands.add_parser("revert", help="remove every route the agent created, and nothing else")
    state_option(revert)
    revert.set_defaults(command=cmd_revert)

    check = commands.add_parser("doctor", help="what this host can enforce of what the controller plans, and why "
                                "not (exit 1 when it falls short)")
    check.add_argument("--json", action="store_true")
    check.add_argument("--set", metavar="FILE.json",
                       help="plan this parameter set's destinations as apply would (default: the stored set's)")
    check.add_argument("--sysctl-root", default=str(doctor.SYSCTL_ROOT), metavar="DIR",
                       help="read the sysctls under this directory (default /proc/sys)")
    state_option(check)
    check.set_defaults(command=cmd_doctor)
    return parser


# -- commands ----------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    """Keep this host's routes in line with the controller until stopped."""
    try:
        controllers = [parse_address(text.strip()) for given in args.controller for text in given.split(",")]
        if len(set(controllers)) != len(controllers):
            raise ValueError("--controller: a controller is given twice")
        secret = session.read_secret(args.secret_file)
        metrics_address = parse_address(args.metrics, "--metrics") if args.metrics else None
        tls = client_tls(args.tls_ca) if args.tls_ca else None
    except (ValueError, OSError, ssl.SSLError) as error:
        print(f"otcp-agent: {error}", file=sys.stderr)
        return 2
    if not args.backoff_max > 0:
        print("otcp-agent: --backoff-max: must be above 0", file=sys.stderr)
        return 2
    if not 0 < args.rtt_interval < 3600:
        print("otcp-agent: --rtt-interval: must be above 0 and below 3600", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    running = RunLock(args.state)
    running.acquire()  # StateUnwritable (one line, exit 1) while another agent runs on this state
    try:
        return _run(args, controllers, secret, metrics_address, tls)
    finally:
        running.release()


def _run(args: argparse.Namespace, controllers: list[tuple[str, int]], secret: bytes,
         metrics_address: tuple[str, int] | None, tls: ssl.SSLContext | None) -> int:
    """`run` once its arguments are checked and it holds the state file."""
    _check_writable(args.state)  # an agent that cannot record what it applies must not apply, nor load BPF
    enforcing = Enforcement.start(args.enforce, status_path=status_path(args.state))
    with Agent(args.state, recover=True, enforcement=enforcing) as agent:
        _restore(agent)
        metrics = AgentMetrics()
        metrics.enforcing(enforcing.mode)
        metrics.applied_generation.set(agent.state.applied_generation() or 0)
        if metrics_address is not None:
            try:
                metrics.serve(*metrics_address)
            except OSError as error:
                print(f"otcp-agent: --metrics {args.metrics}: {error.strerror or error}", file=sys.stderr)
                return 2
        shared = SharedAgent(agent)
        clients = [ControllerClient(agent, host, port, secret, backoff_max=args.backoff_max,
                                    backoff_initial=min(0.5, args.backoff_max), metrics=metrics, tls=tls,
                                    server_name=args.tls_server_name, rtt_interval_s=args.rtt_interval,
                                    shared=shared)
                   for host, port in controllers]
        try:
            run_all(clients)
        except SystemExit:
            LOG.info("stopping; the applied routes stay%s",
                     "; the BPF enforcement goes" if enforcing.mode == "bpf" else "")
        # No connection's apply is cut by the close (the threads end with the process); one stuck
        # writing to its controller holds it at most this long.
        shared.lock.acquire(timeout=STOP_WAIT_S)
    return 0


def _check_writable(path: str) -> None:
    """StateUnwritable unless the state file can be written now; a corrupt one passes (the agent
    moves it aside and starts afresh)."""
    try:
        state = State(path)
    except CorruptState:
        return
    try:
        state.check_writable()
    finally:
        state.close()


def _restore(agent: Agent) -> None:
    """Finish what an interrupted apply left, then put back the stored generation (after a
    restart); a set that no longer applies is logged, and the agent goes on."""
    try:
        finished = agent.finish_interrupted()
        if finished:
            LOG.warning("%s", finished)
        results = agent.reapply_stored()
    except (ValidationError, ApplyError) as error:
        LOG.error("could not re-apply the stored generation: %s", error)
        return
    if results is None:
        return
    applied = sum(1 for r in results if r.status == "applied")
    if agent.lease is not None and agent.lease.lapsed:
        LOG.warning("the lease of stored generation %d ran out: its safe state re-applied (%d route(s))",
                    agent.lease.generation, applied)
    else:
        LOG.info("re-applied stored generation %d (%d route(s))", agent.state.applied_generation(), applied)


def cmd_apply(args: argparse.Namespace) -> int:
    """Apply a parameter set from a file (or stdin) once, or with --dry-run show what that would change."""
    try:
        param_set = _param_set_file(args.file)
        if param_set is None:
            return 2
        if args.dry_run:
            return _dry_run(args, param_set)
        agent = Agent(args.state, recover=True)
    except KeyboardInterrupt:
        print(f"otcp-agent apply: interrupted before it applied {args.file}; no route changed", file=sys.stderr)
        return EXIT_INTERRUPTED
    with agent:
        try:
            validated, results = agent.apply(param_set, f"file {args.file}")
        except ValidationError as error:
            print(f"otcp-agent: {args.file}: {error}", file=sys.stderr)
            return 2
        except ApplyError as error:
            print(f"otcp-agent: {args.file}: {error}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"otcp-agent apply: interrupted; {_what_was_applied(agent, param_set)}", file=sys.stderr)
            return EXIT_INTERRUPTED
    _print_applied(validated, results, agent.unknown_removed, args.json)
    return 0


def _print_applied(validated: ParamSet, results: list[RouteResult], unknown: list[Route], as_json: bool) -> None:
    """What ``apply`` did, per route: as JSON, or the count and every route skipped or not fully
    enforced; and the OTCP routes it removed that the state did not know."""
    if as_json:
        print(json.dumps({"generation": validated.generation,
                          "results": [r.model_dump(exclude_unset=True) for r in results],
                          "removed_unknown": [{"dst": r.dst, "table": r.table} for r in unknown]}, indent=2))
        return
    if unknown:
        print(f"removed {len(unknown)} OTCP route(s) the state did not know: {describe_routes(unknown)}")
    applied = [r for r in results if r.status == "applied"]
    print(f"generation {validated.generation}: {len(applied)} route(s) applied, "
          f"{len(results) - len(applied)} skipped")
    for result in results:
        if result.status == "skipped":
            print(f"  skipped {result.dst}: {result.reason}")
        elif result.reason:
            print(f"  applied {result.dst}, but {result.reason}")


def _what_was_applied(agent: Agent, param_set: ParamSet) -> str:
    """What an apply stopped by SIGINT did: all of the set or none of it (signals wait while
    routes and state change, so never a part)."""
    applied = agent.state.applied()
    if applied is not None and applied.active and applied.param_set == param_set and agent.state.intent() is None:
        return (f"generation {param_set.generation} was applied whole before it stopped "
                f"({len(param_set.routes)} route(s); otcp-agent show lists them)")
    held = "no generation" if applied is None else f"generation {applied.generation}"
    return f"generation {param_set.generation} was not applied; no route changed ({held} stays)"


def _param_set_file(path: str) -> ParamSet | None:
    """A parameter set read from a file (or stdin), validated; None when it cannot be (said on stderr)."""
    try:
        return paramset.parse_param_set(_read_input(path), where=path)
    except OSError as error:
        print(f"otcp-agent: {path}: {error.strerror or error}", file=sys.stderr)
    except ValidationError as error:
        print(f"otcp-agent: {path}: {error}" if error.field else f"otcp-agent: {error}", file=sys.stderr)
    return None


def _dry_run(args: argparse.Namespace, param_set: ParamSet) -> int:
    """``apply --dry-run``: the change per route, nothing written."""
    try:
        result = dryrun.dry_run(param_set, args.state)  # --netns: this process is in it already
    except ValidationError as error:
        print(f"otcp-agent: {args.file}: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
    else:
        print("\n".join(dryrun.format_dry_run(result)))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check what this host (or namespace) can enforce; exit 1 when it falls short of the plan."""
    routes: list[RouteParams] = []
    if args.set is not None:
        given = _param_set_file(args.set)
        if given is None:
            return 2
        routes = given.routes
    else:
        applied = dryrun.stored_applied(args.state)[0]
        if applied is not None and applied.active:
            routes = applied.param_set.routes
    report = doctor.doctor(routes, Path(args.sysctl_root), args.netns)
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print("\n".join(doctor.format_report(report)))
    return report.exit_status()


def cmd_show(args: argparse.Namespace) -> int:
    """Print the applied generation and the OTCP routes read back from the kernel."""
    try:
        agent = Agent(args.state)
    except CorruptState as error:
        print(f"otcp-agent: {error} (run, apply and revert move it aside)", file=sys.stderr)
        return 2
    with agent:
        shown = agent.show()
    if args.json:
        print(json.dumps(shown, indent=2))
        return 0
    if shown["generation"] is None:
        print("no generation applied")
    else:
        when = datetime.datetime.fromtimestamp(shown["applied_at"]).isoformat(timespec="seconds")
        status = "active" if shown["active"] else "reverted"
        epoch = "" if shown["epoch"] is None else f" of epoch {shown['epoch']}"
        print(f"generation {shown['generation']}{epoch} ({status}, applied {when})")
    rows = [("DESTINATION", "DEV", "GATEWAY", "TABLE", "RTO_MIN", "INITCWND", "CWND", "ADVMSS", "QUICKACK",
             "CONGCTL", "SSTHRESH")]
    for r in shown["routes"]:
        rows.append((
            r["dst"], r["dev"] or "?", r["gateway"] or "-", table_name(r["table"]),
            "-" if r["rto_min_ms"] is None else f"{r['rto_min_ms']}ms",
            "-" if r["initcwnd"] is None else str(r["initcwnd"]),
            "-" if r["cwnd_clamp"] is None else f"{r['cwnd_clamp']} lock",
            "-" if r["advmss"] is None else str(r["advmss"]),
            "on" if r["quickack"] else "off",
            r["congctl"] or "-",
            "-" if r["ssthresh"] is None else f"{r['ssthresh']} lock",
        ))
    if not _print_table(rows):
        print("no OTCP routes in the kernel")
    for skipped in shown["skipped"]:
        print(f"skipped {skipped['dst']}: {skipped['reason']}")
    for unenforced in shown["unenforced"]:
        print(f"applied {unenforced['dst']}, but {unenforced['reason']}")
    if shown["admit"] is not None:
        print(f"admission: applications here ask at most {shown['admit']} senders to send at once (fan-in "
              "admission: a contract the planned windows count on; no kernel enforces it)")
    _print_enforcement(shown["enforcement"])
    _print_lease(shown["lease"], shown["generation"] is not None and shown["active"])
    return 0


def _print_table(rows: Sequence[tuple[str, ...]]) -> bool:
    """Print a header row and its rows in aligned columns, when there are rows; whether there were."""
    if len(rows) < 2:
        return False
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return True


def _print_lease(lease: dict[str, Any] | None, active: bool) -> None:
    """The lease part of ``show``: how long the set holds, or that it lapsed to its safe state."""
    if not active:
        return
    if lease is None:
        print("lease: none (applied by hand: held until replaced)")
        return
    until = datetime.datetime.fromtimestamp(lease["expires_at"]).isoformat(timespec="seconds")
    if lease["safe_state"]:
        print(f"lease: expired at {until}: safe state applied (rto_min and quickack kept, initcwnd at most "
              f"{SAFE_INITCWND}; no window clamp, advmss or pacing) until a controller renews it")
    elif lease["expired"]:
        print(f"lease: expired at {until}; a running agent applies the safe state within a second")
    else:
        print(f"lease: {lease['remaining_s']:.0f} s left of {lease['lease_s']:g} s (until {until})")


def _print_enforcement(enforcement: dict[str, Any]) -> None:
    """The enforcement part of ``show``: mode, reason, the BPF entries and counters."""
    reason = f" ({enforcement['reason']})" if enforcement["reason"] else ""
    print(f"enforcement: {enforcement['mode']}{reason}")
    if enforcement.get("error"):
        print(f"  BPF entries unreadable: {enforcement['error']}")
    rows = [("BPF DESTINATION", "CWND_CLAMP", "INITCWND", "RTO_MIN", "PACING", "CONNECTIONS")]
    for e in enforcement["entries"]:
        rows.append((e["dst"], str(e["cwnd_clamp"] or "-"), str(e["initcwnd"] or "-"),
                     "-" if e["rto_min_us"] is None else f"{e['rto_min_us']}us",
                     "-" if e["pacing_rate"] is None else f"{e['pacing_rate']}B/s", str(e["connections"])))
    _print_table(rows)
    if enforcement.get("scalable_error"):
        print(f"  otcp_scalable entries unreadable: {enforcement['scalable_error']}")
    scalable_rows = [("OTCP_SCALABLE DESTINATION", "SSTHRESH", "INCREASE", "ABOVE_16", "CONNECTIONS")]
    for e in enforcement.get("scalable_entries", []):
        scalable_rows.append((e["dst"], str(e["initial_ssthresh"] or "-"), f"{e['increase']:g}",
                              "aimd (griddt)" if e["griddt"] else "scalable", str(e["connections"])))
    _print_table(scalable_rows)
    if enforcement["counters"] is not None:
        counts = ", ".join(f"{name} {value}" for name, value in enforcement["counters"].items() if value)
        print(f"otcp_sockops counters of the whole machine (every namespace and host on it together, not this "
              f"one's alone): {counts or 'no connection seen yet'}")


def cmd_revert(args: argparse.Namespace) -> int:
    """Remove every OTCP route of this host (or namespace)."""
    with Agent(args.state, recover=True) as agent:
        try:
            removed = agent.revert()
        except ApplyError as error:
            print(f"otcp-agent: revert: {error}", file=sys.stderr)
            return 1
    print(f"removed {len(removed)} OTCP route(s)")
    if agent.unknown_removed:
        print(f"  of which {len(agent.unknown_removed)} the state did not know: "
              f"{describe_routes(agent.unknown_removed)}")
    return 0


# -- helpers -------------------------------------------------------------------


def _read_input(path: str) -> bytes:
    """The file's bytes, refusing more than a frame can carry without reading it all."""
    limit = limits.MAX_FRAME_BYTES
    handle = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        body = handle.read(limit + 1)
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()
    if len(body) > limit:
        raise ValidationError("", f"{path}: larger than the {limit}-byte limit")
    return body


def _enter_netns(name: str) -> None:
    from pyroute2 import netns

    netns.setns(name, flags=0)


def _stop(signum: int, frame: object) -> NoReturn:
    raise SystemExit(0)


if __name__ == "__main__":
    sys.exit(main())
