"""``otcp-experiment``: run OTCP's Mininet experiments.

    otcp-experiment incast --senders 4,8,16,32,64 --buffer-bytes 85000,512000 --sru-bytes 262144 \\
        --rounds 50 --schemes default,fine-rto,small-packets,otcp --out results/NAME
    otcp-experiment incast --quick      # the README's main job: a few minutes, the headline plot
    otcp-experiment calibrate --buffer-bytes 32000,85000,512000 --packet-bytes 1500,750 --out DIR
    otcp-experiment datapath --datapaths afpacket,afxdp-nonpmd:native,afxdp:native --out DIR  # choose the switch's
    otcp-experiment shell --topo leafspine,2,2,4 [--script FILE] [--controllers N]   # Mininet's CLI, OTCP in place
    otcp-experiment multipath --topo leafspine,2,2,4 --topo fattree,4 --out DIR   # load per spine/core link
    otcp-experiment failover --topo fattree,4 --out DIR              # two controllers, the master killed
    otcp-experiment fairness --flows 4 --stagger-seconds 5 --out DIR
    otcp-experiment workload --topo star,16 --distribution websearch --load 0.5 --query-senders 8 \\
        --query-bytes 2000 --query-rate 10 --seconds 30 --bw-mbps 25 --seed 1 --out DIR
    otcp-experiment lease --senders 32 --lease-s 15 --out DIR    # the controller killed mid-incast: the safe state
    otcp-experiment report DIR... [--markdown] [--output FILE]        # results pages from summaries
    otcp-experiment simulate incast --topo leafspine,26,4,40 --senders 100,500,1000 --total-bytes 18750000 \\
        --bw-gbps 10 --uplink-gbps 100 --buffer-bytes 2000000 --ecn-k-bytes 97500 --rounds 10 \\
        --schemes dctcp,otcp-lossless --out DIR     # the same incast in ns-3 (otcp.experiments.sim)
    otcp-experiment simulate workload --topo star,32 --bw-gbps 10 --buffer-bytes 300000 --load 0.5 \\
        --query-senders 32 --query-bytes 20000 --query-load 0.1 --seconds 0.05 --out DIR   # the workload in ns-3

Every experiment records the command line that started it with its results.
Bad arguments get a message naming the option and exit status 2; a sweep in
which some run failed exits 1 (the others are still written); Ctrl-C or
SIGTERM stops the sweep, tears the network down and exits 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from otcp.controller.roles import MAX_INSTANCES
from otcp.experiments import calibrate, datapaths, failover, fairness, incast, lease, multipath, shell, workload
from otcp.experiments.analysis import report, results
from otcp.experiments.runner import datapath, schemes
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.emulation import EmulationError
from otcp.experiments.runner.network import RunError, topology_from_spec
from otcp.experiments.runner.progress import Progress
from otcp.experiments.sim import build as sim_build
from otcp.experiments.sim import fabric as sim_fabric
from otcp.experiments.sim import incast as sim_incast
from otcp.experiments.sim import schemes as sim_schemes
from otcp.experiments.sim import workload as sim_workload
from otcp.experiments.sim.scenario import SimulationError
from otcp.experiments.traffic import distributions
from otcp.planning.formulas import Lossless
from otcp.topo import fabrics
from otcp.topo.fabrics import MAX_BW_MBPS
from otcp.wire import build, limits

C = TypeVar("C", bound=ExperimentConfig)
T = TypeVar("T")
OutcomeT = TypeVar("OutcomeT", bound=results.Outcome)
SCHEME_NAMES = list(schemes.catalogue())
FULL = {"senders": "4,8,16,32,64", "buffer_bytes": "85000,512000", "sru_bytes": 262144, "rounds": 50,
        "warmup_seconds": 5.0, "bw_mbps": 100.0, "ceiling_repeats": 3,
        "schemes": ",".join(SCHEME_NAMES), "out": "results/incast"}
# --quick: the main job's incast part, the headline plot (goodput vs senders) at the shallow buffer, at
# 25 Mb/s, where the emulated switch is not the bottleneck at 32 senders (docs/experiments.md, "Rate and
# sizes" under "Workload"), with 16 KB per server: a round of them takes as long as one of 64 KB at 100 Mb/s,
# so a 200 ms RTOmin still dominates a round that meets it (at 100 Mb/s a round of 256 KB blocks
# outlasts it and hides the collapse). Its 2 s warm-up is enough: the OTCP schemes warm up on past it
# until their agents hold a plan with every sender counted (docs/experiments.md). Two ceiling samples
# per network: at 25 Mb/s they agree to 0.1 Mb/s.
QUICK = {"senders": "8,16,32", "buffer_bytes": "85000", "sru_bytes": 16384, "rounds": 10,
         "warmup_seconds": 2.0, "bw_mbps": 25.0, "ceiling_repeats": 2,
         "schemes": "default,fine-rto,static-rwnd,otcp,dctcp,otcp-lossless", "out": "results/quick/incast"}
FAIRNESS_SCHEMES = "default,otcp,dctcp,otcp-lossless,otcp-paced"
#: The size scale of each distribution unless --size-scale says otherwise: web search's largest flow
#: 2.9 MB, data mining's 9.7 MB.
SIZE_SCALES = {"websearch": 0.1, "datamining": 0.01}
# The workload's defaults: 25 Mb/s links, where the emulated switch is not the bottleneck
# (docs/experiments.md, "Workload"), and each distribution's sizes scaled so that its largest flow
# takes a few seconds alone at that rate (SIZE_SCALES).
WORKLOAD: dict[str, Any] = {
    "topo": "star,16", "distribution": "websearch", "size_scale": None, "load": 0.5, "query_senders": None,
    "query_bytes": None, "query_rate": None, "query_load": None, "background_flows": 0, "seconds": 30.0,
    "warmup_seconds": 3.0, "bw_mbps": 25.0, "buffer_bytes": "85000", "seed": 1, "ceiling_repeats": 3,
    "schemes": "default,fine-rto,static-rwnd,otcp,dctcp,otcp+dctcp,otcp-lossless,otcp-lossless+dctcp,otcp-paced",
    "out": "results/workload"}
# --quick: the main job's workload part, the mix with queries for the trade-off table.
WORKLOAD_QUICK: dict[str, Any] = {
    "topo": "star,8", "load": 0.5, "query_senders": "8", "query_bytes": "2000", "query_rate": 10.0, "seconds": 12.0,
    "ceiling_repeats": 2,
    "schemes": "default,fine-rto,static-rwnd,otcp,dctcp,otcp-lossless", "out": "results/quick/workload"}
CALIBRATE = {"buffer_bytes": "32000,85000,512000", "packet_bytes": "1500,750", "out": "results/calibration"}
# IP packet sizes a calibration burst may use: a UDP header and the burst's own, up to the hosts' MTU.
DATAPATH = {"datapaths": "afpacket,afxdp-nonpmd:native,afxdp-nonpmd:generic,afxdp:native",
            "buffer_bytes": "85000,512000", "packet_bytes": "1500,750,400", "bursts": 3, "busy_loops": 2,
            "out": "results/datapath"}
MIN_PACKET_BYTES = 64
MAX_PACKET_BYTES = 1500
MAX_SENDERS = 250
MAX_BUFFER_BYTES = 1 << 30


def positive_int_list(text: str, what: str, high: int | None = None) -> list[int]:
    """The distinct positive integers of a comma-separated option (ValueError names the option)."""
    values = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            raise ValueError(f"{what}: {part!r} is not an integer") from None
        if value < 1 or (high is not None and value > high):
            raise ValueError(f"{what}: {value} is out of range (1..{high or 'any'})")
        values.append(value)
    if len(set(values)) != len(values):
        raise ValueError(f"{what}: {text} lists a value twice")
    return values


def build_parser() -> argparse.ArgumentParser:
    """The otcp-experiment argument parser: incast, calibrate, shell, fairness, simulate and report."""
    parser = argparse.ArgumentParser(prog="otcp-experiment", description="OTCP's Mininet experiments.")
    parser.add_argument("--version", action="version", version=build.version_line("otcp-experiment"))
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("incast", help="TCP incast under each scheme (synchronized reads on a star)",
                              description=first_line(incast.__doc__))
    run.add_argument("--quick", action="store_true",
                     help=f"the main job: senders {QUICK['senders']}, shallow buffer, {QUICK['rounds']} rounds "
                          f"(explicit options still win)")
    run.add_argument("--senders", help=f"comma-separated sender counts (default {FULL['senders']})")
    run.add_argument("--buffer-bytes", help=f"comma-separated switch egress buffers in bytes "
                                            f"(default {FULL['buffer_bytes']}: shallow and deep)")
    block = run.add_mutually_exclusive_group()
    block.add_argument("--sru-bytes", type=int,
                       help=f"fixed block per server per round (default {FULL['sru_bytes']}, "
                            f"{QUICK['sru_bytes']} with --quick)")
    block.add_argument("--total-bytes", type=int, help="fixed total block per round, split over the servers")
    run.add_argument("--rounds", type=int, help=f"measured rounds per run (default {FULL['rounds']})")
    run.add_argument("--warmup-seconds", type=float,
                     help=f"seconds of unmeasured rounds before each run (default {FULL['warmup_seconds']:g}, "
                          f"{QUICK['warmup_seconds']:g} with --quick; "
                          "the OTCP controller needs them to count the flows)")
    run.add_argument("--schemes", help=f"comma-separated, from {', '.join(SCHEME_NAMES)} (default all)")
    run.add_argument("--out", help=f"output directory (default {FULL['out']}, or {QUICK['out']} with --quick)")
    run.add_argument("--bw-mbps", type=float, help=f"link rate in Mb/s (default {FULL['bw_mbps']:g}, "
                                                   f"{QUICK['bw_mbps']:g} with --quick)")
    run.add_argument("--delay-us", type=float, help="one-way delay per link (needs sch_netem)")
    run.add_argument("--queue-target-fraction", type=float, default=Lossless.queue_target_fraction,
                     help="otcp-lossless: the standing queue its windows aim for, as a share of the buffer "
                          f"(0 < F <= 1, default {Lossless.queue_target_fraction:g})")
    run.add_argument("--agent-timeout", type=float, default=ExperimentConfig.agent_timeout_s,
                     help="seconds the OTCP schemes' agents may take to get their routes, and their warm-up to "
                          f"get parameters for every flow (default {ExperimentConfig.agent_timeout_s:g}; a loaded "
                          "machine with 100+ hosts may need more)")
    run.add_argument("--fan-in-queue-fraction", type=float, default=Lossless.fan_in_queue_fraction,
                     help="otcp-lossless: where the senders' full frames do not fit that, the share of the buffer "
                          "its queue may rise to instead of shrinking segments (0 <= G <= 1, 0: shrink; default "
                          f"{Lossless.fan_in_queue_fraction:g})")
    run.add_argument("--fine-rto-ms", type=int, default=schemes.DEFAULT_FINE_RTO_MS,
                     help=f"the fine-rto schemes' rto_min in ms (default {schemes.DEFAULT_FINE_RTO_MS})")
    run.add_argument("--persistent", action="store_true", help="one connection per server for the whole run")
    run.add_argument("--connections-per-host", type=int, default=1, metavar="M",
                     help="run M senders in each sender host, as M persistent connections from one server (every "
                          "--senders count a multiple of M; needs --persistent; default 1)")
    run.add_argument("--forwarding", choices=["controller", "standalone"], default="controller",
                     help="the OTCP controller forwards (default), or standalone learning bridges")
    add_datapath_arguments(run)
    run.add_argument("--probe-interval-ms", type=float, default=10.0, help="latency probe interval (default 10)")
    run.add_argument("--ceiling-seconds", type=int, default=3,
                     help="length of the ceiling measurement on each network (default 3)")
    run.add_argument("--ceiling-repeats", type=int,
                     help=f"ceiling measurements per network and packet size (default {FULL['ceiling_repeats']}, "
                          f"{QUICK['ceiling_repeats']} with --quick; the spread is reported)")
    run.add_argument("--round-timeout", type=float, default=60.0, help="seconds before a round counts as failed")
    cal = commands.add_parser("calibrate", help="check the emulated switch: buffer size and loss accounting",
                              description=first_line(calibrate.__doc__))
    cal.add_argument("--buffer-bytes", default=CALIBRATE["buffer_bytes"],
                     help=f"comma-separated bottleneck buffers in bytes (default {CALIBRATE['buffer_bytes']})")
    cal.add_argument("--packet-bytes", default=CALIBRATE["packet_bytes"],
                     help=f"comma-separated IP packet sizes, {MIN_PACKET_BYTES}..{MAX_PACKET_BYTES} "
                          f"(default {CALIBRATE['packet_bytes']})")
    cal.add_argument("--out", default=CALIBRATE["out"], help=f"output directory (default {CALIBRATE['out']})")
    cal.add_argument("--bw-mbps", type=float, default=100.0, help="bottleneck rate in Mb/s (default 100)")
    cal.add_argument("--overload", type=float, default=2.0,
                     help="the sender link's rate as a multiple of the bottleneck's (default 2)")
    cal.add_argument("--overflow-ms", type=float, default=200.0,
                     help="how long each burst keeps the buffer full after filling it (default 200)")
    cal.add_argument("--forwarding", choices=["controller", "standalone"], default="controller",
                     help="the OTCP controller forwards (default), or a standalone learning bridge")
    add_datapath_arguments(cal)
    compare = commands.add_parser("datapath", help="the switch's datapath candidates side by side: ceilings, the "
                                  "switch's CPU and calibration", description=first_line(datapaths.__doc__))
    compare.add_argument("--datapaths", default=DATAPATH["datapaths"],
                         metavar="KIND[:MODE][+pinned][+maxsleep=US][+flush=US],...",
                         help=f"the candidates, each a datapath ({', '.join(datapath.DATAPATHS)}), for the AF_XDP "
                              f"ones an XDP mode ({', '.join(datapath.XDP_MODES)}; default "
                              f"{datapath.DEFAULT_XDP_MODE}), +pinned to run the experiment's processes apart "
                              "from the switch's forwarding threads (--pin-hosts), for afxdp +maxsleep=US to let "
                              "its PMD thread sleep (--pmd-maxsleep-us), and +flush=US to batch its output "
                              f"(--tx-flush-us) (default {DATAPATH['datapaths']})")
    compare.add_argument("--buffer-bytes", default=DATAPATH["buffer_bytes"],
                         help=f"comma-separated bottleneck buffers in bytes (default {DATAPATH['buffer_bytes']})")
    compare.add_argument("--packet-bytes", default=DATAPATH["packet_bytes"],
                         help=f"comma-separated IP packet sizes (default {DATAPATH['packet_bytes']})")
    compare.add_argument("--bursts", type=int, default=DATAPATH["bursts"],
                         help=f"calibration bursts per buffer and packet size (default {DATAPATH['bursts']})")
    compare.add_argument("--busy-loops", type=int, default=DATAPATH["busy_loops"],
                         help="processes spinning on the CPU during a second set of bursts, as busy as an incast of "
                              f"many senders keeps the machine (default {DATAPATH['busy_loops']}; 0: none)")
    compare.add_argument("--bw-mbps", type=float, default=100.0, help="bottleneck rate in Mb/s (default 100)")
    compare.add_argument("--ceiling-seconds", type=int, default=3, help="seconds of each ceiling sample (default 3)")
    compare.add_argument("--ceiling-repeats", type=int, default=3,
                         help="ceiling samples per packet size (default 3, more where they disagree)")
    compare.add_argument("--out", default=DATAPATH["out"], help=f"output directory (default {DATAPATH['out']})")
    compare.add_argument("--rewrite-page", action="store_true",
                         help="measure nothing: write OUT/datapath.md again from OUT/summary.json (the verdicts and "
                              "the choice made again by this code's rules)")
    mininet_shell = commands.add_parser("shell", help="a network with the controller and agents, then Mininet's CLI",
                                        description=first_line(shell.__doc__))
    mininet_shell.add_argument("--topo", required=True, metavar="NAME[,ARG...]",
                               help=f"an mn-style topology of `otcp.topo.fabrics` ({', '.join(fabrics.topos)}), "
                                    "e.g. leafspine,2,2,4")
    mininet_shell.add_argument("--script", metavar="FILE", help="run the CLI commands in FILE instead of a prompt")
    mininet_shell.add_argument("--controllers", type=int, default=1, metavar="N",
                               help="instances of the controller, every switch and agent connected to each "
                                    "(default 1)")
    spread = commands.add_parser("multipath", help="how the forwarding spreads load over spines or cores: planned "
                                 "pairs per link, pingAll and two iperf3 flows, one path per switch pair and multipath",
                                 description=first_line(multipath.__doc__))
    spread.add_argument("--topo", action="append", required=True, metavar="NAME[,ARG...]",
                        help="an mn-style topology of `otcp.topo.fabrics`, e.g. leafspine,2,2,4 (repeatable)")
    spread.add_argument("--out", default="results/multipath", help="output directory (default results/multipath)")
    failing = commands.add_parser("failover", help="two controllers on one fabric: the master killed, the "
                                  "other's takeover and the agents' new sets timed",
                                  description=first_line(failover.__doc__))
    failing.add_argument("--topo", default="fattree,4", metavar="NAME[,ARG...]",
                         help="an mn-style topology of `otcp.topo.fabrics` (default fattree,4)")
    failing.add_argument("--out", required=True, metavar="DIR", help="where failover.json and the run's files go")
    failing.add_argument("--heartbeat", type=float, default=1.0, metavar="SECONDS",
                         help="cluster.heartbeat_s of both instances (default 1)")
    failing.add_argument("--takeover", type=float, default=4.0, metavar="SECONDS",
                         help="cluster.takeover_s of both instances (default 4)")
    fair = commands.add_parser("fairness", help="long flows into one receiver, together or staggered: rates, "
                               "Jain's index, convergence and the queue per scheme",
                               description=first_line(fairness.__doc__))
    fair.add_argument("--flows", type=int, default=4, help="long flows, one per sender (default 4)")
    fair.add_argument("--stagger-seconds", type=float, default=0.0,
                      help="seconds between flow starts (default 0: all together)")
    fair.add_argument("--hold-seconds", type=float, default=10.0,
                      help="seconds every flow runs after the last one started (default 10)")
    fair.add_argument("--schemes", default=FAIRNESS_SCHEMES, help=f"comma-separated (default {FAIRNESS_SCHEMES})")
    fair.add_argument("--buffer-bytes", type=int, default=85000)
    fair.add_argument("--bw-mbps", type=float, default=100)
    fair.add_argument("--queue-target-fraction", type=float, default=Lossless.queue_target_fraction)
    fair.add_argument("--ceiling-seconds", type=int, default=3)
    fair.add_argument("--ceiling-repeats", type=int, default=3)
    fair.add_argument("--out", default="results/fairness")
    add_lease_arguments(commands.add_parser(
        "lease", help="the controller killed during an incast: every host's safe state, a lone flow, the return",
        description=first_line(lease.__doc__)))
    add_simulate_arguments(commands)
    add_workload_arguments(commands.add_parser(
        "workload", help="flow-size mixes, partition-aggregate queries and background flows: FCT slowdown per "
        "size, query completion, drops and CPU per scheme", description=first_line(workload.__doc__)))
    report.add_arguments(commands.add_parser("report", help="Markdown tables, or a results page, from the "
                                             "summaries of experiments' output directories",
                                             description=first_line(report.__doc__)))
    return parser


# The lease experiment's defaults: the quick incast's network and workload (25 Mb/s, 16 KB per server,
# where the emulated switch is not the bottleneck at 32 senders) with a lease short enough to wait out.
LEASE: dict[str, Any] = {"senders": 32, "buffer_bytes": 85000, "sru_bytes": 16384, "bw_mbps": 25.0,
                         "warmup_seconds": 2.0, "lease_s": 15.0, "kill_after_s": 3.0, "poll_s": 0.1,
                         "ceiling_seconds": 3, "ceiling_repeats": 2, "out": "results/lease"}


def add_lease_arguments(run: argparse.ArgumentParser) -> None:
    """The lease experiment's options."""
    run.add_argument("--senders", type=int, default=LEASE["senders"],
                     help=f"senders in the incast (default {LEASE['senders']})")
    run.add_argument("--buffer-bytes", type=int, default=LEASE["buffer_bytes"],
                     help=f"switch egress buffer in bytes (default {LEASE['buffer_bytes']})")
    run.add_argument("--sru-bytes", type=int, default=LEASE["sru_bytes"],
                     help=f"bytes each server sends per round (default {LEASE['sru_bytes']})")
    run.add_argument("--bw-mbps", type=float, default=LEASE["bw_mbps"],
                     help=f"every link's rate in Mb/s (default {LEASE['bw_mbps']:g})")
    run.add_argument("--warmup-seconds", type=float, default=LEASE["warmup_seconds"],
                     help="unmeasured incast before the agents' plan is waited for "
                          f"(default {LEASE['warmup_seconds']:g})")
    run.add_argument("--lease-s", type=float, default=LEASE["lease_s"],
                     help=f"the controller's agents.lease_s (default {LEASE['lease_s']:g})")
    run.add_argument("--kill-after-s", type=float, default=LEASE["kill_after_s"],
                     help=f"seconds of incast before the controller is killed (default {LEASE['kill_after_s']:g})")
    run.add_argument("--poll-s", type=float, default=LEASE["poll_s"],
                     help=f"seconds between two readings of every host (default {LEASE['poll_s']:g})")
    run.add_argument("--no-restart", action="store_true",
                     help="do not start the controller again at the end (no restoration measured)")
    run.add_argument("--ceiling-seconds", type=int, default=LEASE["ceiling_seconds"],
                     help=f"seconds of each single flow, and of each ceiling sample (default "
                          f"{LEASE['ceiling_seconds']})")
    run.add_argument("--ceiling-repeats", type=int, default=LEASE["ceiling_repeats"],
                     help=f"ceiling samples (default {LEASE['ceiling_repeats']})")
    run.add_argument("--out", default=LEASE["out"], help=f"output directory (default {LEASE['out']})")


def lease_config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> lease.LeaseConfig:
    """Validate the lease arguments; parser.error (exit 2) names the bad option."""
    check_ranges([("--senders", args.senders, 2, MAX_SENDERS), ("--buffer-bytes", args.buffer_bytes, 1600,
                                                                  MAX_BUFFER_BYTES),
                  ("--sru-bytes", args.sru_bytes, 1, 1 << 30), ("--bw-mbps", args.bw_mbps, 0.001, MAX_BW_MBPS),
                  ("--warmup-seconds", args.warmup_seconds, 0, 600),
                  ("--lease-s", args.lease_s, limits.LEASE_S[0], 600),
                  ("--kill-after-s", args.kill_after_s, 0.5, 600), ("--poll-s", args.poll_s, 0.05, 10),
                  ("--ceiling-seconds", args.ceiling_seconds, 1, 600),
                  ("--ceiling-repeats", args.ceiling_repeats, 1, 50)], parser)
    out = output_directory(args.out, parser)
    return lease.LeaseConfig(
        out=out, senders=[args.senders], buffers=[args.buffer_bytes], schemes=[lease.SCHEME],
        sru_bytes=args.sru_bytes, bw_mbps=args.bw_mbps, warmup_seconds=args.warmup_seconds, lease_s=args.lease_s,
        kill_after_s=args.kill_after_s, poll_s=args.poll_s, restart=not args.no_restart,
        ceiling_seconds=args.ceiling_seconds, ceiling_repeats=args.ceiling_repeats)


SIM_SCHEME_NAMES = list(sim_schemes.catalogue())
SIM_DEFAULT_SCHEMES = ",".join(SIM_SCHEME_NAMES)
#: The simulated workload's: every scheme but those whose receiver admits its senders in turns (incast only).
SIM_WORKLOAD_SCHEMES = [name for name, scheme in sim_schemes.catalogue().items() if not scheme.admission]
MAX_SIM_SENDERS = 100_000


def add_simulate_arguments(commands: Any) -> None:
    """otcp-experiment simulate incast: the incast sweep in ns-3."""
    simulate = commands.add_parser("simulate", help="the experiments in ns-3, at data-center rates and fan-in",
                                   description=first_line(sim_incast.__doc__))
    kinds = simulate.add_subparsers(dest="workload", required=True)
    run = kinds.add_parser("incast", help="TCP incast under each scheme, simulated",
                           description=first_line(sim_incast.__doc__))
    where = run.add_mutually_exclusive_group()
    where.add_argument("--topo", default="star", metavar="star[,N]|leafspine,L,S,H|fattree,K",
                       help="an otcp.topo topology (default star, one per sender count)")
    where.add_argument("--inventory", metavar="FILE", help="an inventory file, as the controller reads it")
    run.add_argument("--senders", required=True, help="comma-separated sender counts")
    block = run.add_mutually_exclusive_group(required=True)
    block.add_argument("--sru-bytes", type=int, help="block per server per round")
    block.add_argument("--total-bytes", type=int, help="block per round in all, split over the servers")
    add_simulated_fabric_arguments(run, "host links' rate in Gb/s",
                                   "comma-separated switch egress buffers toward hosts")
    run.add_argument("--rounds", type=int, required=True, help="measured rounds per run")
    run.add_argument("--warmup-rounds", type=int, default=2, help="unmeasured rounds first (default 2)")
    run.add_argument("--schemes", default=SIM_DEFAULT_SCHEMES, help=f"comma-separated, from "
                                                                    f"{', '.join(SIM_SCHEME_NAMES)} (default all)")
    run.add_argument("--out", required=True, help="output directory")
    run.add_argument("--placement", choices=sim_fabric.PLACEMENTS, default="next",
                     help="senders: the hosts after the receiver (default), its rack's, or other racks'")
    run.add_argument("--persistent", action="store_true", help="one connection per server for the whole run")
    run.add_argument("--poll-interval-ms", type=float, default=1000.0,
                     help="the controller's flow-statistics poll (default 1000, the controller's)")
    add_simulated_scheme_arguments(run)
    run.add_argument("--round-gap-ms", type=float, default=0.0, help="idle time between rounds (default 0)")
    run.add_argument("--probe-interval-ms", type=float, default=10.0, help="latency probe interval (default 10)")
    run.add_argument("--round-timeout", type=float, default=60.0, help="simulated seconds before a round fails")
    add_simulate_workload_arguments(kinds.add_parser(
        "workload", help="flow-size mixes, partition-aggregate queries and background flows, simulated",
        description=first_line(sim_workload.__doc__)))


#: simulate workload's defaults: the workload's (WORKLOAD) at a simulated data-center rate, the
#: published flow sizes, and simulated seconds that a 10 Gb/s fabric fills with many flows.
SIM_WORKLOAD: dict[str, Any] = {"topo": "star,16", "size_scale": 1.0, "load": 0.5, "seconds": 0.05,
                                "warmup_seconds": 0.01, "drain_seconds": 5.0, "poll_interval_ms": 10.0}


def add_simulate_workload_arguments(run: argparse.ArgumentParser) -> None:
    """otcp-experiment simulate workload's options: the workload's, with the simulator's rates and delays."""
    run.add_argument("--topo", default=SIM_WORKLOAD["topo"], metavar="star,N|leafspine,L,S,H|fattree,K",
                     help=f"an otcp.topo topology, as the workload takes it (default {SIM_WORKLOAD['topo']})")
    run.add_argument("--distribution", choices=distributions.NAMES, default=WORKLOAD["distribution"],
                     help=f"the flow sizes of the mix (default {WORKLOAD['distribution']})")
    run.add_argument("--size-scale", type=float, default=SIM_WORKLOAD["size_scale"],
                     help="multiply the distribution's sizes by this (default 1: the published sizes)")
    run.add_argument("--load", type=float, default=SIM_WORKLOAD["load"],
                     help=f"the mix's load on every host link, 0 for no mix (default {SIM_WORKLOAD['load']:g})")
    run.add_argument("--query-senders", metavar="N[,N...]", help="queries' fan-in, one point each (default none)")
    run.add_argument("--query-bytes", metavar="B[,B...]", help="each response's bytes, one point each")
    rate = run.add_mutually_exclusive_group()
    rate.add_argument("--query-rate", type=float, help="queries per simulated second")
    rate.add_argument("--query-load", type=float, help="queries per second such that the responses offer this "
                                                       "share of the aggregator's link")
    run.add_argument("--background-flows", type=int, default=0, help="long-lived flows into the aggregator")
    run.add_argument("--seconds", type=float, default=SIM_WORKLOAD["seconds"],
                     help=f"measured simulated seconds per run (default {SIM_WORKLOAD['seconds']:g})")
    run.add_argument("--warmup-seconds", type=float, default=SIM_WORKLOAD["warmup_seconds"],
                     help=f"the warm-up's simulated seconds (default {SIM_WORKLOAD['warmup_seconds']:g})")
    run.add_argument("--drain-seconds", type=float, default=SIM_WORKLOAD["drain_seconds"],
                     help=f"how long flows may still finish after the measured seconds (default "
                          f"{SIM_WORKLOAD['drain_seconds']:g}: a SYN's 1 s timeout and its back-off, twice)")
    run.add_argument("--seed", type=int, default=WORKLOAD["seed"],
                     help=f"the arrivals' seed (default {WORKLOAD['seed']})")
    run.add_argument("--schemes", default=",".join(SIM_WORKLOAD_SCHEMES),
                     help=f"comma-separated, from {', '.join(SIM_WORKLOAD_SCHEMES)} (default all)")
    run.add_argument("--out", required=True, help="output directory")
    add_simulated_fabric_arguments(run, "host links' rate in Gb/s (the load's base)",
                                   "comma-separated switch egress buffers toward hosts, a fabric each")
    run.add_argument("--poll-interval-ms", type=float, default=SIM_WORKLOAD["poll_interval_ms"],
                     help=f"the controller's flow-statistics poll in simulated ms (default "
                          f"{SIM_WORKLOAD['poll_interval_ms']:g}: the live controller's 1 s scaled to the "
                          f"simulated seconds)")
    add_simulated_scheme_arguments(run)


def add_simulated_fabric_arguments(run: argparse.ArgumentParser, bw_help: str, buffer_help: str) -> None:
    """The options of every simulate command that make its fabric's tiers (sim.fabric.SimFabricSettings):
    rates, buffers (bw_help, buffer_help: what the command's --bw-gbps and --buffer-bytes are for), delays,
    and the marking threshold."""
    run.add_argument("--bw-gbps", type=float, required=True, help=bw_help)
    run.add_argument("--uplink-gbps", type=float, help="switch-to-switch links' rate (default --bw-gbps)")
    run.add_argument("--buffer-bytes", required=True, help=buffer_help)
    run.add_argument("--uplink-buffer-bytes", type=int, help="switch-to-switch egress buffers (default the buffer)")
    run.add_argument("--delay-us", default="5", help="host links' one-way delay in µs (default 5)")
    run.add_argument("--uplink-delay-us", help="comma-separated switch-to-switch delays in µs, dealt out over the "
                                               "edge switches' uplinks (default --delay-us)")
    run.add_argument("--ecn-k-bytes", type=float, help="DCTCP marking threshold at every switch egress "
                                                       "(default: DCTCP's for the host rate)")


def add_simulated_scheme_arguments(run: argparse.ArgumentParser) -> None:
    """The options of every simulate command that the schemes' hosts run with: the kernel's HZ, fine-rto's
    rto_min and otcp-lossless's standing queue."""
    run.add_argument("--hz", type=int, default=250, choices=(100, 250, 300, 1000),
                     help="the kernel's HZ: RTOs are whole jiffies (default 250, Debian's)")
    run.add_argument("--fine-rto-ms", type=int, default=schemes.DEFAULT_FINE_RTO_MS,
                     help=f"fine-rto's rto_min in ms (default {schemes.DEFAULT_FINE_RTO_MS})")
    run.add_argument("--queue-target-fraction", type=float, default=Lossless.queue_target_fraction,
                     help=f"otcp-lossless's standing queue, share of the buffer (default "
                          f"{Lossless.queue_target_fraction:g})")
    run.add_argument("--fan-in-queue-fraction", type=float, default=Lossless.fan_in_queue_fraction,
                     help="otcp-lossless: where the senders' full frames do not fit its target, the share of the "
                          "buffer its queue may rise to instead of shrinking segments (0 <= G <= 1, 0: shrink; "
                          f"default {Lossless.fan_in_queue_fraction:g})")


def float_list(text: str, what: str, low: float, high: float) -> list[float]:
    """The numbers of a comma-separated option within low..high (ValueError names the option)."""
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{what}: {part!r} is not a number") from None
        if not low <= value <= high:
            raise ValueError(f"{what}: {value:g} is out of range ({low:g}..{high:g})")
        values.append(value)
    return values


def simulate_config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> sim_incast.SimConfig:
    """Validate the simulate incast arguments; parser.error (exit 2) names the bad option."""
    senders = option_error(parser, positive_int_list, args.senders, "--senders", MAX_SIM_SENDERS)
    names, buffers, fabric = simulated_fabric_from_args(args, parser, min_poll_ms=1)
    checks = [("--rounds", args.rounds, 1, 100_000), ("--warmup-rounds", args.warmup_rounds, 0, 1000),
              ("--sru-bytes", args.sru_bytes, 1, 1 << 34), ("--total-bytes", args.total_bytes, 1, 1 << 40),
              ("--round-gap-ms", args.round_gap_ms, 0, 60_000),
              ("--probe-interval-ms", args.probe_interval_ms, 0.01, 1000),
              ("--round-timeout", args.round_timeout, 0.001, 1e6)]
    check_ranges(checks, parser)
    if args.total_bytes is not None and args.total_bytes < max(senders):
        parser.error(f"--total-bytes: {args.total_bytes} is less than one byte per server at {max(senders)} senders")
    return sim_incast.SimConfig(
        **dataclasses.asdict(fabric), out=output_directory(args.out, parser), schemes=names,
        bw_mbps=args.bw_gbps * 1000, buffers=buffers, fine_rto_ms=args.fine_rto_ms,
        queue_target_fraction=args.queue_target_fraction, fan_in_queue_fraction=args.fan_in_queue_fraction,
        topo=args.topo, inventory=args.inventory,
        senders=senders, sru_bytes=args.sru_bytes, total_bytes=args.total_bytes, rounds=args.rounds,
        warmup_rounds=args.warmup_rounds, persistent=args.persistent, placement=args.placement,
        probe_interval_s=args.probe_interval_ms / 1000, round_gap_s=args.round_gap_ms / 1000,
        round_timeout_s=args.round_timeout)


def simulated_fabric_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser, min_poll_ms: float
                               ) -> tuple[list[str], list[int], sim_fabric.SimFabricSettings]:
    """Validate the options every simulate command takes (--schemes, --buffer-bytes and the fabric's:
    add_simulated_fabric_arguments, add_simulated_scheme_arguments, --poll-interval-ms from min_poll_ms
    up); return the scheme names, the buffers and the fabric's settings. parser.error (exit 2) names
    the bad option."""
    buffers = option_error(parser, positive_int_list, args.buffer_bytes, "--buffer-bytes", MAX_BUFFER_BYTES)
    delays = option_error(parser, float_list, args.delay_us, "--delay-us", 0, 1e6)
    uplink_delays = None if args.uplink_delay_us is None else \
        option_error(parser, float_list, args.uplink_delay_us, "--uplink-delay-us", 0, 1e6)
    names = [n for n in args.schemes.split(",") if n]
    unknown = [n for n in names if n not in SIM_SCHEME_NAMES]
    if unknown or not names or len(set(names)) != len(names):
        parser.error(f"--schemes: {args.schemes!r}: each of {', '.join(SIM_SCHEME_NAMES)} at most once")
    check_ranges([("--bw-gbps", args.bw_gbps, 1e-6, 1000), ("--uplink-gbps", args.uplink_gbps, 1e-6, 1000),
                  ("--uplink-buffer-bytes", args.uplink_buffer_bytes, 1, MAX_BUFFER_BYTES),
                  ("--ecn-k-bytes", args.ecn_k_bytes, 1, MAX_BUFFER_BYTES),
                  ("--poll-interval-ms", args.poll_interval_ms, min_poll_ms, 60_000),
                  ("--fine-rto-ms", args.fine_rto_ms, 1, 200),
                  ("--queue-target-fraction", args.queue_target_fraction, 1e-6, 1),
                  ("--fan-in-queue-fraction", args.fan_in_queue_fraction, 0, 1)], parser)
    fabric = sim_fabric.SimFabricSettings(
        bw_gbps=args.bw_gbps, uplink_gbps=args.uplink_gbps, link_delays_us=delays, uplink_delays_us=uplink_delays,
        uplink_buffer_bytes=args.uplink_buffer_bytes, ecn_k_bytes=args.ecn_k_bytes,
        poll_interval_s=args.poll_interval_ms / 1000, hz=args.hz)
    return names, buffers, fabric


def simulate_workload_config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser
                                       ) -> sim_workload.SimWorkloadConfig:
    """Validate the simulate workload arguments; parser.error (exit 2) names the bad option."""
    names, buffers, fabric = simulated_fabric_from_args(args, parser, min_poll_ms=0.01)
    admitting = [name for name in names if name not in SIM_WORKLOAD_SCHEMES]
    if admitting:
        parser.error(f"--schemes: {admitting[0]} needs a receiver that admits its senders in turns: only the "
                     "incast's does")
    rate_given = args.query_rate is not None or args.query_load is not None
    fan_ins, sizes = query_points(parser, args.query_senders, args.query_bytes, MAX_SIM_SENDERS, 1 << 34,
                                  rate_given, rate_given)
    checks = [("--load", args.load, 0, 2), ("--size-scale", args.size_scale, 1e-6, 1e3),
              ("--query-rate", args.query_rate, 1e-3, 1e7), ("--query-load", args.query_load, 1e-6, 2),
              ("--background-flows", args.background_flows, 0, MAX_SIM_SENDERS),
              ("--seconds", args.seconds, 1e-4, 3600), ("--warmup-seconds", args.warmup_seconds, 0, 600),
              ("--drain-seconds", args.drain_seconds, 1e-3, 600), ("--seed", args.seed, 0, 2**63)]
    check_ranges(checks, parser)
    if not args.load and not fan_ins and not args.background_flows:
        parser.error("--load 0 with no queries and no background flows: nothing to run")
    config = sim_workload.SimWorkloadConfig(
        **dataclasses.asdict(fabric), out=output_directory(args.out, parser), schemes=names,
        bw_mbps=args.bw_gbps * 1000, buffers=buffers, fine_rto_ms=args.fine_rto_ms,
        queue_target_fraction=args.queue_target_fraction, fan_in_queue_fraction=args.fan_in_queue_fraction,
        topo=args.topo, distribution=args.distribution,
        size_scale=args.size_scale, load=args.load, query_senders=fan_ins, query_bytes=sizes,
        query_rate=args.query_rate, query_load=args.query_load, background_flows=args.background_flows,
        seconds=args.seconds, warmup_seconds=args.warmup_seconds, drain_seconds=args.drain_seconds, seed=args.seed)
    try:
        hosts = len(config.build_fabric(buffers[0]).hosts)
    except ValueError as exc:
        parser.error(str(exc))
    if fan_ins and max(fan_ins) > hosts - 1 or args.background_flows > hosts - 1:
        parser.error(f"--query-senders/--background-flows: {args.topo} has {hosts - 1} hosts besides the aggregator")
    return config


def simulated(run: Callable[[Progress], T], out: str) -> tuple[int | None, T | None]:
    """run(progress) under a progress bar; return (status, result): status None when it ran, 130 when
    interrupted, 1 when the simulator failed, each said on stderr."""
    progress = Progress(total=1)
    try:
        return None, run(progress)
    except KeyboardInterrupt:
        print(f"otcp-experiment: interrupted; completed runs are in {out}", file=sys.stderr)
        return 130, None
    except SimulationError as exc:
        print(f"otcp-experiment: {exc}", file=sys.stderr)
        return 1, None
    finally:
        progress.close()


def main_simulate_workload(config: sim_workload.SimWorkloadConfig) -> int:
    """otcp-experiment simulate workload: 0 when every run finished, 1 if any failed, 2 no simulator."""
    return simulate_and_report(lambda: None, lambda progress: sim_workload.run_workload(config, progress),
                               lambda outcome: workload.summary_table(outcome.runs, outcome.failures), config.out)


def main_simulate(config: sim_incast.SimConfig) -> int:
    """otcp-experiment simulate incast: 0 when every run finished, 1 if any failed, 2 bad input or no simulator."""
    def check_fabrics() -> None:  # every fabric and placement is checked before anything runs
        for senders in config.senders:
            for buffer_bytes in config.buffers:
                sim_fabric.place(sim_incast.build_fabric(config, senders, buffer_bytes), senders, config.placement)

    return simulate_and_report(check_fabrics, lambda progress: sim_incast.run_sweep(config, progress),
                               lambda sweep: sim_incast.summary_table(sweep.runs, sweep.failures), config.out)


def simulate_and_report(check: Callable[[], None], run: Callable[[Progress], tuple[str | None, OutcomeT]],
                        table: Callable[[OutcomeT], str], out: str) -> int:
    """Build the simulator and check the input (2 when either fails, said on stderr), run under a
    progress bar, print the summary table and where the results are; 0 when every run finished,
    1 if any failed or the simulator failed, 130 when interrupted."""
    try:
        sim_build.program()
        check()
    except (sim_build.SimulatorUnavailable, ValueError) as exc:
        print(f"otcp-experiment: {exc}", file=sys.stderr)
        return 2
    status, result = simulated(run, out)
    if status is not None or result is None:
        return 1 if status is None else status
    summary, outcome = result
    if outcome.runs or outcome.failures:
        print(table(outcome))
    return report_failures_and_results(outcome, summary, out)


def report_failures_and_results(outcome: results.Outcome, summary: str | None, out: str) -> int:
    """Print each failed run's note (stderr) and where the results are; return the exit status:
    1 if any run failed or none ran, else 0."""
    for failure in outcome.failures:
        print(failure.note(), file=sys.stderr)
    if summary:
        print(f"results: {summary}, {os.path.join(out, 'results.db')}, plots in {out}")
    return 1 if outcome.failures or not outcome.runs else 0


def first_line(text: str | None) -> str:
    """A module docstring's first line: a subcommand's description."""
    return (text or "").split("\n")[0]


def add_workload_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """otcp-experiment workload's options, on parser."""
    preset = ", ".join(f"--{key.replace('_', '-')} {value}" for key, value in WORKLOAD_QUICK.items()
                       if key != "out")
    parser.add_argument("--quick", action="store_true",
                        help=f"the main job's part: {preset} (explicit options still win)")
    parser.add_argument("--topo", metavar="NAME[,ARG...]",
                        help=f"an mn-style topology of `otcp.topo.fabrics` ({', '.join(fabrics.topos)}) without link "
                             f"options, e.g. star,16 or leafspine,2,2,4 (default {WORKLOAD['topo']})")
    parser.add_argument("--distribution", choices=distributions.NAMES,
                        help=f"the flow sizes of the mix (default {WORKLOAD['distribution']})")
    parser.add_argument("--size-scale", type=float,
                        help="multiply the distribution's sizes by this (default "
                             + ", ".join(f"{scale:g} for {name}" for name, scale in SIZE_SCALES.items())
                             + "; docs/experiments.md says why)")
    parser.add_argument("--load", type=float,
                        help=f"the mix's load on every host link, 0 for no mix (default {WORKLOAD['load']:g})")
    parser.add_argument("--query-senders", metavar="N[,N...]", help="queries' fan-in, one point each (default none)")
    parser.add_argument("--query-bytes", metavar="B[,B...]", help="each response's bytes, one point each")
    rate = parser.add_mutually_exclusive_group()
    rate.add_argument("--query-rate", type=float, help="queries per second")
    rate.add_argument("--query-load", type=float, help="queries per second such that the responses offer this "
                                                       "share of the aggregator's link")
    parser.add_argument("--background-flows", type=int, help="long-lived flows into the aggregator (default 0)")
    parser.add_argument("--seconds", type=float, help=f"measured seconds per run (default {WORKLOAD['seconds']:g})")
    parser.add_argument("--warmup-seconds", type=float,
                        help=f"unmeasured seconds before each run (default {WORKLOAD['warmup_seconds']:g})")
    parser.add_argument("--drain-seconds", type=float, default=10.0,
                        help="how long flows may still finish after the measured seconds (default 10)")
    parser.add_argument("--bw-mbps", type=float, help=f"every link's rate (default {WORKLOAD['bw_mbps']:g})")
    parser.add_argument("--buffer-bytes", help=f"comma-separated switch egress buffers, a fabric each (default "
                                               f"{WORKLOAD['buffer_bytes']})")
    parser.add_argument("--seed", type=int, help=f"the arrivals' seed (default {WORKLOAD['seed']})")
    parser.add_argument("--schemes", help=f"comma-separated, from {', '.join(SCHEME_NAMES)} (default "
                                          f"{WORKLOAD['schemes']})")
    parser.add_argument("--out", help=f"output directory (default {WORKLOAD['out']})")
    parser.add_argument("--delay-us", type=float, help="one-way delay per link (needs sch_netem)")
    parser.add_argument("--queue-target-fraction", type=float, default=Lossless.queue_target_fraction,
                        help=f"otcp-lossless's queue target (default {Lossless.queue_target_fraction:g})")
    parser.add_argument("--fine-rto-ms", type=int, default=schemes.DEFAULT_FINE_RTO_MS,
                        help=f"the fine-rto schemes' rto_min in ms (default {schemes.DEFAULT_FINE_RTO_MS})")
    parser.add_argument("--forwarding", choices=["controller", "standalone"], default="controller",
                        help="the OTCP controller forwards (default), or standalone learning bridges")
    add_datapath_arguments(parser)
    parser.add_argument("--ceiling-seconds", type=int, default=3)
    parser.add_argument("--ceiling-repeats", type=int,
                        help=f"ceiling measurements per network and packet size (default "
                             f"{WORKLOAD['ceiling_repeats']}, {WORKLOAD_QUICK['ceiling_repeats']} with --quick)")
    return parser


def add_datapath_arguments(parser: argparse.ArgumentParser) -> None:
    """--datapath and --xdp-mode: what the switches' ports are (otcp.experiments.runner.datapath)."""
    parser.add_argument("--datapath", choices=datapath.DATAPATHS, default=datapath.DEFAULT_DATAPATH,
                        help="the switch ports' sockets: afpacket (default), afxdp-nonpmd (AF_XDP polled by the "
                             "switch's main thread) or afxdp (AF_XDP, a PMD thread busy-polling a core); where "
                             "this machine refuses AF_XDP the switch runs on afpacket and says why")
    parser.add_argument("--xdp-mode", choices=datapath.XDP_MODES, default=datapath.DEFAULT_XDP_MODE,
                        help=f"the AF_XDP datapaths' XDP mode on the veths (default {datapath.DEFAULT_XDP_MODE})")
    parser.add_argument("--pin-hosts", action="store_true",
                        help="run every process of the experiment (hosts, agents, controller, this one) on the "
                             "cores the switch's forwarding threads do not poll on (the PMD threads' cores, or "
                             "the last core); the run's notes say where, or why not")
    parser.add_argument("--pmd-maxsleep-us", type=int, default=0, metavar="US",
                        help="with --datapath afxdp: let the switch's PMD thread sleep up to US microseconds in an "
                             "iteration that found few packets (Open vSwitch's other_config:pmd-maxsleep, put back "
                             f"after), {datapath.PMD_MAXSLEEP_US[0]}..{datapath.PMD_MAXSLEEP_US[1]} (default 0: it "
                             "busy-polls a whole core)")
    parser.add_argument("--tx-flush-us", type=int, default=0, metavar="US",
                        help="let a frame the switch forwards wait up to US microseconds in an output batch, for "
                             "fewer, larger sends (Open vSwitch's other_config:tx-flush-interval, put back after), "
                             f"{datapath.TX_FLUSH_US[0]}..{datapath.TX_FLUSH_US[1]} (default 0: sent at once)")


def datapath_settings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """An ExperimentConfig's datapath fields from --datapath, --xdp-mode, --pin-hosts, --pmd-maxsleep-us and
    --tx-flush-us; parser.error (exit 2) names a bad combination."""
    try:
        datapath.Datapath.named(args.datapath, args.xdp_mode, args.pin_hosts, args.pmd_maxsleep_us, args.tx_flush_us)
    except ValueError as exc:
        parser.error(f"--pmd-maxsleep-us/--tx-flush-us: {exc}")
    return {"datapath": args.datapath, "xdp_mode": args.xdp_mode, "pin_hosts": args.pin_hosts,
            "pmd_maxsleep_us": args.pmd_maxsleep_us, "tx_flush_us": args.tx_flush_us}


def workload_config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> workload.WorkloadConfig:
    """Validate the workload arguments; parser.error (exit 2) names the bad option."""
    preset = {**WORKLOAD, **WORKLOAD_QUICK} if args.quick else WORKLOAD

    def pick(name: str) -> Any:
        value = getattr(args, name)
        return preset.get(name) if value is None else value

    names = scheme_names(pick("schemes"), parser)
    buffers = option_error(parser, positive_int_list, str(pick("buffer_bytes")), "--buffer-bytes", MAX_BUFFER_BYTES)
    query_rate, query_load = pick("query_rate"), pick("query_load")
    fan_ins, sizes = query_points(parser, pick("query_senders"), pick("query_bytes"), MAX_SENDERS, 1 << 30,
                                  query_rate is not None or query_load is not None,
                                  args.query_rate is not None or args.query_load is not None)
    size_scale = SIZE_SCALES[pick("distribution")] if pick("size_scale") is None else pick("size_scale")
    checks = [("--load", pick("load"), 0, 2), ("--size-scale", size_scale, 1e-6, 1e3),
              ("--query-rate", query_rate, 1e-3, 1e4), ("--query-load", query_load, 1e-6, 2),
              ("--background-flows", pick("background_flows"), 0, MAX_SENDERS),
              ("--seconds", pick("seconds"), 1, 3600), ("--warmup-seconds", pick("warmup_seconds"), 0, 600),
              ("--drain-seconds", args.drain_seconds, 1, 600), ("--bw-mbps", pick("bw_mbps"), 0.001, MAX_BW_MBPS),
              ("--seed", pick("seed"), 0, 2**63), ("--delay-us", args.delay_us, 0, 1e6),
              ("--fine-rto-ms", args.fine_rto_ms, 1, 200), ("--queue-target-fraction", args.queue_target_fraction,
                                                            1e-6, 1),
              ("--ceiling-seconds", args.ceiling_seconds, 1, 600),
              ("--ceiling-repeats", pick("ceiling_repeats"), 1, 50)]
    check_ranges(checks, parser)
    if not pick("load") and not fan_ins and not pick("background_flows"):
        parser.error("--load 0 with no queries and no background flows: nothing to run")
    topo = option_error(parser, lambda spec: topology_from_spec(spec, bw=pick("bw_mbps"), buffer_bytes=buffers[0],
                                                                delay_us=args.delay_us), pick("topo"))
    others = len(topo.hosts()) - 1
    if fan_ins and max(fan_ins) > others or pick("background_flows") > others:
        parser.error(f"--query-senders/--background-flows: {pick('topo')} has {others} hosts besides the aggregator")
    out = output_directory(pick("out"), parser)
    return workload.WorkloadConfig(
        out=out, schemes=names, bw_mbps=pick("bw_mbps"), buffers=buffers, delay_us=args.delay_us,
        forwarding=args.forwarding, fine_rto_ms=args.fine_rto_ms, queue_target_fraction=args.queue_target_fraction,
        **datapath_settings(args, parser),
        ceiling_seconds=args.ceiling_seconds, ceiling_repeats=pick("ceiling_repeats"), topo=pick("topo"),
        distribution=pick("distribution"), size_scale=size_scale, load=pick("load"),
        query_senders=fan_ins, query_bytes=sizes, query_rate=query_rate, query_load=query_load,
        background_flows=pick("background_flows"), seconds=pick("seconds"), warmup_seconds=pick("warmup_seconds"),
        drain_seconds=args.drain_seconds, seed=pick("seed"))


def query_points(parser: argparse.ArgumentParser, senders: str | None, response_bytes: str | None,
                 max_senders: int, max_bytes: int, has_rate: bool, rate_given: bool) -> tuple[list[int], list[int]]:
    """The query fan-ins and response sizes of a workload command (--query-senders, --query-bytes; None
    or empty: no queries), which need each other and a rate: has_rate, a --query-rate or --query-load
    applies (given or preset); rate_given, the command line gives one, which needs queries.
    parser.error (exit 2) names the bad option."""
    fan_ins = option_error(parser, positive_int_list, str(senders), "--query-senders", max_senders) \
        if senders else []
    sizes = option_error(parser, positive_int_list, str(response_bytes), "--query-bytes", max_bytes) \
        if response_bytes else []
    if bool(fan_ins) != bool(sizes):
        parser.error("--query-senders and --query-bytes go together: queries need both")
    if fan_ins and not has_rate:
        parser.error("--query-rate or --query-load: queries need a rate")
    if not fan_ins and rate_given:
        parser.error("--query-rate/--query-load: no queries (--query-senders, --query-bytes) to set a rate for")
    return fan_ins, sizes


def fairness_config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> fairness.FairnessConfig:
    """Validate the fairness arguments; parser.error (exit 2) names the bad option."""
    names = scheme_names(args.schemes, parser)
    checks = [("--flows", args.flows, 1, MAX_SENDERS), ("--stagger-seconds", args.stagger_seconds, 0, 600),
              ("--hold-seconds", args.hold_seconds, 1, 3600),
              ("--buffer-bytes", args.buffer_bytes, 1, MAX_BUFFER_BYTES),
              ("--bw-mbps", args.bw_mbps, 0.001, MAX_BW_MBPS),
              ("--queue-target-fraction", args.queue_target_fraction, 1e-6, 1),
              ("--ceiling-seconds", args.ceiling_seconds, 1, 600), ("--ceiling-repeats", args.ceiling_repeats, 1, 50)]
    check_ranges(checks, parser)
    return fairness.FairnessConfig(
        out=os.path.abspath(args.out), flows=args.flows, stagger_s=args.stagger_seconds, hold_s=args.hold_seconds,
        schemes=names, buffers=[args.buffer_bytes], bw_mbps=args.bw_mbps, ceiling_seconds=args.ceiling_seconds,
        ceiling_repeats=args.ceiling_repeats, queue_target_fraction=args.queue_target_fraction)


def scheme_names(text: str, parser: argparse.ArgumentParser) -> list[str]:
    """The scheme names of a --schemes value, each known and listed once."""
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in SCHEME_NAMES]
    if unknown or not names:
        parser.error(f"--schemes: unknown scheme(s) {', '.join(unknown) or '(none given)'}; "
                     f"known: {', '.join(SCHEME_NAMES)}")
    if len(set(names)) != len(names):
        parser.error(f"--schemes: {text} lists a scheme twice")
    return names


def check_ranges(checks: Sequence[tuple[str, float | None, float, float | None]],
                 parser: argparse.ArgumentParser) -> None:
    """parser.error for the first (option, value, low, high) whose value is out of range (NaN is)."""
    for option, value, low, high in checks:
        if value is not None and not (low <= value and (high is None or value <= high)):
            parser.error(f"{option}: {value} is out of range ({low}..{high if high is not None else 'any'})")


def calibration_config_from_args(args: argparse.Namespace,
                                 parser: argparse.ArgumentParser) -> calibrate.CalibrationConfig:
    """Validate the calibrate arguments; parser.error (exit 2) names the bad option."""
    buffers = option_error(parser, positive_int_list, args.buffer_bytes, "--buffer-bytes", MAX_BUFFER_BYTES)
    sizes = option_error(parser, positive_int_list, args.packet_bytes, "--packet-bytes", MAX_PACKET_BYTES)
    small = [s for s in sizes if s < MIN_PACKET_BYTES]
    if small:
        parser.error(f"--packet-bytes: {small[0]} is out of range ({MIN_PACKET_BYTES}..{MAX_PACKET_BYTES})")
    frame = max(sizes) + calibrate.ETHERNET_HEADER
    tiny = [b for b in buffers if b < frame]
    if tiny:
        parser.error(f"--buffer-bytes: {tiny[0]} cannot hold one {frame} B frame")
    for option, value, low, high in (("--bw-mbps", args.bw_mbps, 0.001, MAX_BW_MBPS / 2),
                                     ("--overload", args.overload, 1.1, 10),
                                     ("--overflow-ms", args.overflow_ms, 10, 10000)):
        if not low <= value <= high:
            parser.error(f"{option}: {value} is out of range ({low}..{high})")
    if args.bw_mbps * args.overload > MAX_BW_MBPS:
        parser.error(f"--overload: the sender link would run at {args.bw_mbps * args.overload:g} Mb/s, "
                     f"over {MAX_BW_MBPS}")
    out = output_directory(args.out, parser)
    return calibrate.CalibrationConfig(out=out, buffers=buffers, packet_sizes=sizes, bw_mbps=args.bw_mbps,
                                       overload=args.overload, overflow_ms=args.overflow_ms,
                                       forwarding=args.forwarding, **datapath_settings(args, parser))


def datapath_config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> datapaths.DatapathConfig:
    """Validate the datapath comparison's arguments; parser.error (exit 2) names the bad option."""
    candidates = option_error(parser, parse_datapaths, args.datapaths)
    buffers = option_error(parser, positive_int_list, args.buffer_bytes, "--buffer-bytes", MAX_BUFFER_BYTES)
    sizes = option_error(parser, positive_int_list, args.packet_bytes, "--packet-bytes", MAX_PACKET_BYTES)
    small = [s for s in sizes if s < MIN_PACKET_BYTES]
    if small:
        parser.error(f"--packet-bytes: {small[0]} is out of range ({MIN_PACKET_BYTES}..{MAX_PACKET_BYTES})")
    tiny = [b for b in buffers if b < max(sizes) + calibrate.ETHERNET_HEADER]
    if tiny:
        parser.error(f"--buffer-bytes: {tiny[0]} cannot hold one {max(sizes) + calibrate.ETHERNET_HEADER} B frame")
    check_ranges([("--bursts", args.bursts, 1, 100), ("--busy-loops", args.busy_loops, 0, 64),
                  ("--bw-mbps", args.bw_mbps, 0.001, MAX_BW_MBPS / 2),
                  ("--ceiling-seconds", args.ceiling_seconds, 1, 600),
                  ("--ceiling-repeats", args.ceiling_repeats, 1, 50)], parser)
    out = output_directory(args.out, parser)
    return datapaths.DatapathConfig(out=out, buffers=buffers, packet_sizes=sizes, bw_mbps=args.bw_mbps,
                                    candidates=candidates, bursts=args.bursts, busy_loops=args.busy_loops,
                                    ceiling_seconds=args.ceiling_seconds,
                                    ceiling_repeats=args.ceiling_repeats)


def parse_datapaths(text: str) -> list[datapath.Datapath]:
    """The candidates of --datapaths (KIND[:MODE][+pinned][+maxsleep=US][+flush=US],...), each once
    (ValueError names the option)."""
    found = []
    for part in text.split(","):
        name, *modifiers = part.split("+")
        kind, _, mode = name.partition(":")
        try:
            pinned, waits = False, {"maxsleep": 0, "flush": 0}
            for modifier in modifiers:
                setting, _, value = modifier.partition("=")
                if modifier == "pinned":
                    pinned = True
                elif setting in waits and value.isdigit():
                    waits[setting] = int(value)
                else:
                    raise ValueError(f"+{modifier} is not +pinned, +maxsleep=US or +flush=US")
            found.append(datapath.Datapath(kind, mode, pinned, waits["maxsleep"], waits["flush"]) if mode
                         else datapath.Datapath.named(kind, pinned=pinned, pmd_maxsleep_us=waits["maxsleep"],
                                                      tx_flush_us=waits["flush"]))
        except ValueError as exc:
            raise ValueError(f"--datapaths: {part!r}: {exc}") from None
    if len(set(found)) != len(found):
        raise ValueError(f"--datapaths: {text} lists a candidate twice")
    return found


def output_directory(path: str, parser: argparse.ArgumentParser) -> str:
    """An --out value as an absolute path; parser.error (exit 2) when it exists and is not a directory."""
    out = os.path.abspath(path)
    if os.path.exists(out) and not os.path.isdir(out):
        parser.error(f"--out: {out} exists and is not a directory")
    return out


def option_error(parser: argparse.ArgumentParser, parse: Callable[..., T], *arguments: Any) -> T:
    """parse(*arguments), its ValueError (which names the option) as parser.error (exit 2)."""
    try:
        return parse(*arguments)
    except ValueError as exc:
        parser.error(str(exc))


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> incast.IncastConfig:
    """Validate the arguments; parser.error (exit 2) names the bad option."""
    preset = QUICK if args.quick else FULL

    def pick(name: str) -> Any:
        value = getattr(args, name)
        return preset[name] if value is None else value

    senders = option_error(parser, positive_int_list, pick("senders"), "--senders", MAX_SENDERS)
    buffers = option_error(parser, positive_int_list, pick("buffer_bytes"), "--buffer-bytes", MAX_BUFFER_BYTES)
    names = scheme_names(pick("schemes"), parser)
    checks = [("--rounds", pick("rounds"), 1, None), ("--warmup-seconds", pick("warmup_seconds"), 0, 600),
              ("--sru-bytes", args.sru_bytes, 1, 1 << 30), ("--total-bytes", args.total_bytes, 1, 1 << 34),
              ("--bw-mbps", pick("bw_mbps"), 0.001, MAX_BW_MBPS), ("--delay-us", args.delay_us, 0, 1e6),
              ("--fine-rto-ms", args.fine_rto_ms, 1, 200), ("--probe-interval-ms", args.probe_interval_ms, 2, 1000),
              ("--queue-target-fraction", args.queue_target_fraction, 1e-6, 1),
              ("--fan-in-queue-fraction", args.fan_in_queue_fraction, 0, 1),
              ("--agent-timeout", args.agent_timeout, 1, 3600),
              ("--ceiling-seconds", args.ceiling_seconds, 1, 600),
              ("--ceiling-repeats", pick("ceiling_repeats"), 1, 50),
              ("--round-timeout", args.round_timeout, 1, 3600),
              ("--connections-per-host", args.connections_per_host, 1, MAX_SENDERS)]
    check_ranges(checks, parser)
    sharing = args.connections_per_host
    if sharing > 1 and not args.persistent:
        parser.error(f"--connections-per-host: {sharing} needs --persistent: the agents count the connections that "
                     "sent over their last few seconds, which a connection per request does not outlive")
    if any(count % sharing for count in senders):
        parser.error(f"--senders: {', '.join(str(c) for c in senders if c % sharing)} is not a multiple of "
                     f"--connections-per-host {sharing}")
    if args.total_bytes is not None and args.total_bytes < max(senders):
        parser.error(f"--total-bytes: {args.total_bytes} is less than one byte per server at {max(senders)} senders")
    out = output_directory(pick("out"), parser)
    return incast.IncastConfig(
        out=out, senders=senders, buffers=buffers, schemes=names,
        sru_bytes=None if args.total_bytes is not None else pick("sru_bytes"),
        total_bytes=args.total_bytes, rounds=pick("rounds"), warmup_seconds=pick("warmup_seconds"),
        persistent=args.persistent, connections_per_host=sharing, bw_mbps=pick("bw_mbps"), delay_us=args.delay_us,
        fine_rto_ms=args.fine_rto_ms,
        forwarding=args.forwarding, **datapath_settings(args, parser),
        probe_interval_s=args.probe_interval_ms / 1000.0,
        ceiling_seconds=args.ceiling_seconds, ceiling_repeats=pick("ceiling_repeats"),
        round_timeout_s=args.round_timeout, queue_target_fraction=args.queue_target_fraction,
        fan_in_queue_fraction=args.fan_in_queue_fraction, agent_timeout_s=args.agent_timeout)


def environment_problem() -> str | None:
    """Why this machine cannot run Mininet experiments now, or None."""
    if os.geteuid() != 0:
        return "must run as root (Mininet, Open vSwitch and route changes need it)"
    for tool in ("ovs-vsctl", "tc", "ip", "ping", "iperf3", "nstat", "ethtool", "mnexec"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (see scripts/bootstrap.sh)"
    status = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True)
    if status.returncode != 0:
        return f"Open vSwitch is not running (ovs-vsctl show: {status.stderr.strip()}); see scripts/bootstrap.sh"
    return None


def clear_previous_outputs(out: str) -> None:
    """Remove the per-invocation parts of an earlier sweep in out (routes/ and work/)."""
    for part in ("routes", "work"):
        shutil.rmtree(os.path.join(out, part), ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run otcp-experiment; return the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = ["otcp-experiment", *arguments]
    parser = build_parser()
    args = parser.parse_args(arguments)
    if args.command == "report":
        return report.run(args)
    # The commands that check their own arguments.
    own: dict[str, Callable[[argparse.Namespace, list[str]], int]] = {
        "shell": main_shell, "multipath": main_multipath, "failover": main_failover}
    if args.command in own:
        return own[args.command](args, command)
    if args.command == "calibrate":
        return main_calibrate(with_command(calibration_config_from_args(args, parser), command))
    if args.command == "datapath":
        return rewrite_datapath_page(args.out) if args.rewrite_page else \
            main_datapath(with_command(datapath_config_from_args(args, parser), command))
    if args.command == "simulate" and args.workload == "workload":
        return main_simulate_workload(with_command(simulate_workload_config_from_args(args, parser), command))
    if args.command == "simulate":
        return main_simulate(with_command(simulate_config_from_args(args, parser), command))
    if args.command == "lease":
        return main_lease(with_command(lease_config_from_args(args, parser), command))
    if args.command == "fairness":
        return main_fairness(with_command(fairness_config_from_args(args, parser), command))
    if args.command == "workload":
        return main_workload(with_command(workload_config_from_args(args, parser), command))
    return main_incast(with_command(config_from_args(args, parser), command))


def with_command(config: C, command: list[str]) -> C:
    """config, recording the command line that asked for it."""
    config.command = command
    return config


def main_incast(config: incast.IncastConfig) -> int:
    """otcp-experiment incast: 0 when every run finished, 1 if any failed, 2 bad input or environment."""
    problem = environment_problem()
    if problem:
        print(f"otcp-experiment: {problem}", file=sys.stderr)
        return 2
    os.makedirs(config.out, exist_ok=True)
    clear_previous_outputs(config.out)
    progress = Progress(total=1)
    try:
        summary, sweep = incast.run_sweep(config, progress)
    except KeyboardInterrupt:
        progress.close()
        print("otcp-experiment: interrupted; the network is torn down, completed runs are in "
              f"{config.out}", file=sys.stderr)
        return 130
    except (EmulationError, RunError, TimeoutError) as exc:
        progress.close()
        print(f"otcp-experiment: {exc}", file=sys.stderr)
        return 1
    progress.close()
    if sweep.runs or sweep.failures:
        print(incast.summary_table(sweep.runs, results.ceiling_summary(sweep.ceilings), sweep.failures))
    flagged = results.unexplained_losses(sweep.runs)
    if flagged:
        print(f"unexplained losses in {len(flagged)} run(s): "
              + ", ".join(f"{f['scheme']} n={f['senders']} buf={f['buffer_bytes']}: {f['unexplained']}"
                          for f in flagged), file=sys.stderr)
    return report_failures_and_results(sweep, summary, config.out)


def parsed_for_this_machine(parse: Callable[[], T]) -> T | None:
    """For the commands that check their own arguments: parse()'s value when it raises no ValueError
    (bad input) and this machine can run Mininet experiments now (environment_problem); else None,
    the reason said on stderr (the command exits 2)."""
    try:
        value = parse()
    except ValueError as exc:
        print(f"otcp-experiment: {exc}", file=sys.stderr)
        return None
    problem = environment_problem()
    if problem:
        print(f"otcp-experiment: {problem}", file=sys.stderr)
        return None
    return value


def main_shell(args: argparse.Namespace, command: list[str]) -> int:
    """otcp-experiment shell: 0 after the CLI ends, 1 if the network or OTCP did not come up, 2 bad input."""
    def checked_topology() -> Any:
        topo = topology_from_spec(args.topo)
        if not 1 <= args.controllers <= MAX_INSTANCES:
            raise ValueError(f"--controllers: {args.controllers} is not in 1..{MAX_INSTANCES}")
        return topo

    topo = parsed_for_this_machine(checked_topology)
    if topo is None:
        return 2
    try:
        return shell.run(shell.shell_config(topo, args.script, command, args.controllers))
    except (EmulationError, TimeoutError, RuntimeError) as exc:
        print(f"otcp-experiment: {exc}", file=sys.stderr)
        return 1


def main_multipath(args: argparse.Namespace, command: list[str]) -> int:
    """otcp-experiment multipath: 0 when written, 1 if a network or a flow failed, 2 bad input."""
    topologies = parsed_for_this_machine(lambda: [(spec, topology_from_spec(spec)) for spec in args.topo])
    if topologies is None:
        return 2
    try:
        return multipath.run(topologies, args.out, shlex.join(command))
    except KeyboardInterrupt:
        print("otcp-experiment: interrupted; the network is torn down", file=sys.stderr)
        return 130
    except (EmulationError, TimeoutError, RuntimeError, subprocess.SubprocessError, ValueError) as exc:
        print(f"otcp-experiment: {exc}", file=sys.stderr)
        return 1


def main_failover(args: argparse.Namespace, command: list[str]) -> int:
    """otcp-experiment failover: 0 when it ran (the figures printed and in OUT/failover.json), 1 when
    the network, the controllers or the agents failed, 2 bad input."""
    try:
        topo = topology_from_spec(args.topo)
        if not 0.1 <= args.heartbeat <= 60 or not args.takeover >= 3 * args.heartbeat:
            raise ValueError(f"--takeover {args.takeover:g} must be at least 3 heartbeats of --heartbeat "
                             f"{args.heartbeat:g} (0.1..60 s)")
    except ValueError as exc:
        print(f"otcp-experiment: {exc}", file=sys.stderr)
        return 2
    config = failover.FailoverConfig(topo=topo, out=args.out, heartbeat_s=args.heartbeat, takeover_s=args.takeover,
                                     command=command)
    status, result = run_experiment(failover.run, config)
    if result is None:
        return status or 1
    for line in failover.summary_lines(result):
        print(line)
    print(f"figures: {os.path.join(args.out, 'failover.json')}")
    return 0


def run_experiment(run: Callable[[C, Progress], T], config: C) -> tuple[int | None, T | None]:
    """Check the machine, clear config.out's work/, run(config, progress); return
    (status, result): status None when it ran, else the exit status it failed with."""
    problem = environment_problem()
    if problem:
        print(f"otcp-experiment: {problem}", file=sys.stderr)
        return 2, None
    os.makedirs(config.out, exist_ok=True)
    shutil.rmtree(os.path.join(config.out, "work"), ignore_errors=True)
    progress = Progress(total=1)
    try:
        return None, run(config, progress)
    except KeyboardInterrupt:
        print("otcp-experiment: interrupted; the network is torn down", file=sys.stderr)
        return 130, None
    except (EmulationError, RunError, TimeoutError, subprocess.TimeoutExpired) as exc:
        print(f"otcp-experiment: {exc}", file=sys.stderr)
        return 1, None
    finally:
        progress.close()


def main_fairness(config: fairness.FairnessConfig) -> int:
    """otcp-experiment fairness: 0 when every scheme ran, 1 if any failed, 2 bad input or environment."""
    status, document = run_experiment(fairness.run_fairness, config)
    if status is not None or document is None:
        return 1 if status is None else status
    print(fairness.summary_table(document))
    for failure in document["failures"]:
        print(f"failed: {failure['scheme']}: {failure['error']}", file=sys.stderr)
    print(f"results: {os.path.join(config.out, 'fairness.json')}, plots in {config.out}")
    return 1 if document["failures"] or not document["runs"] else 0


def main_lease(config: lease.LeaseConfig) -> int:
    """otcp-experiment lease: 0 when both targets are met, 1 when one is missed or the run failed, 2 bad input
    or environment."""
    status, document = run_experiment(lease.run_lease, config)
    if status is not None or document is None:
        return 1 if status is None else status
    print(lease.summary_text(document))
    print(f"results: {os.path.join(config.out, 'lease.json')}, {os.path.join(config.out, 'lease.png')}")
    return 0 if all(target["met"] for target in document["targets"].values()) else 1


def main_workload(config: workload.WorkloadConfig) -> int:
    """otcp-experiment workload: 0 when every run finished, 1 if any failed, 2 bad input or environment."""
    status, ran = run_experiment(workload.run_workload, config)
    if status is not None or ran is None:
        return 1 if status is None else status
    summary, outcome = ran
    if outcome.runs or outcome.failures:
        print(workload.summary_table(outcome.runs, outcome.failures))
    return report_failures_and_results(outcome, summary, config.out)


def rewrite_datapath_page(out: str) -> int:
    """otcp-experiment datapath --rewrite-page: 0 when written, 1 without a readable summary."""
    try:
        print(datapaths.rewrite_page(out))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"otcp-experiment: --rewrite-page: {os.path.join(out, 'summary.json')}: {exc!r}", file=sys.stderr)
        return 1
    return 0


def main_datapath(config: datapaths.DatapathConfig) -> int:
    """otcp-experiment datapath: 0 when every candidate was measured, 1 if one failed, 2 bad input or environment."""
    status, comparison = run_experiment(datapaths.run_comparison, config)
    if status is not None or comparison is None:
        return 1 if status is None else status
    print(datapaths.page(comparison.summary))
    print(f"results: {os.path.join(config.out, 'summary.json')}, page: {os.path.join(config.out, 'datapath.md')}")
    return 1 if comparison.failed else 0


def main_calibrate(config: calibrate.CalibrationConfig) -> int:
    """otcp-experiment calibrate: 0 when every row is within one packet with nothing unexplained, else 1."""
    status, rows = run_experiment(calibrate.run_calibration, config)
    if status is not None or rows is None:
        return 1 if status is None else status
    print(calibrate.calibration_table(rows))
    print(f"results: {os.path.join(config.out, 'calibration.json')}")
    return 0 if all(row.ok for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
