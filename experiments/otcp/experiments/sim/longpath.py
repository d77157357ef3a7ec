"""Long fat paths in ns-3 (docs/longpaths.md, "Measured in ns-3"): the scenario program's
``longpath`` mode, driven with the planner's own formulas.

- **Responsiveness.** One bulk flow through a bottleneck of rate C and round trip RTT, its
  buffer one BDP; every flow starts with the planned initial ssthresh (the BDP in segments,
  ``formulas.initial_ssthresh_segments``), so slow start ends at full rate; two round trips
  after the first round trip in which the bottleneck sends at full rate, one data packet is
  dropped. Measured: the time from the drop to the first round trip in which the bottleneck
  sends at 95 % of C. Beside it, the formulas: AIMD's from half the window to 95 %
  (0.9 x ``responsiveness_seconds``, which counts to 100 %) and Scalable TCP's from 7/8 to 95 %
  (ln(0.95 / 0.875) / ln(1.01) round trips). An AIMD case whose predicted simulated time is
  above ``max_aimd_sim_s`` is not simulated (its cost is said): the formula stands alone.
- **RTT fairness.** Two flows of 181 and 117 ms through one 1 Gb/s bottleneck, both from the
  planned ssthresh of their share; AIMD (Linux Reno) with A = 1, and GridDT with the planned
  A (``griddt_increase`` against the reference round trip); each flow's mean rate over the
  measured time and Jain's index.

Each run writes its result under ``out/NAME/result.json``; ``summary.json`` holds every run's
figures, from which ``page`` makes the results page.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from otcp.experiments.analysis import plots
from otcp.experiments.sim.scenario import run as run_scenario
from otcp.planning import formulas

MSS_BYTES = formulas.DEFAULT_MSS_BYTES
#: What the page compares: ns-3's TcpCubic, Linux Reno's AIMD and OTCP's choice (otcp_scalable's rules).
RESPONSIVENESS_CCS = ("cubic", "reno", "scalable")
RATES_BPS = (100e6, 1e9, 2.5e9)
RTTS_S = (0.120, 0.200)
RECOVER_FRACTION = 0.95
#: Kelly, Ravot and Martin-Flatin's figures (TERENA 2003), for the page.
PAPER_FAIRNESS_MBPS = {"without": (202, 514), "with": (330, 388)}
#: Over how long the paper's rates are means, and how much of the link the two flows used.
PAPER_FAIRNESS_PERIOD_S = 7000
PAPER_LINK_USE = 0.72
FAIRNESS_RTTS_S = (0.181, 0.117)
FAIRNESS_BOTTLENECK_BPS = 1e9
#: The paper's fairness runs used jumbo frames (MTU 9 000 B).
PAPER_FAIRNESS_MTU_BYTES = 9000
#: IPv4, TCP and its timestamp option: a segment's payload is the MTU less these.
IP_TCP_HEADER_BYTES = formulas.FRAME_OVERHEAD_BYTES - 14


def bdp_segments(rate_bps: float, rtt_s: float) -> int:
    """The path's BDP in whole segments: the planner's initial ssthresh for a flow alone on a long
    path (``formulas.initial_ssthresh_segments``, whatever the threshold)."""
    return int(formulas.initial_ssthresh_segments(rate_bps / 8, rtt_s, MSS_BYTES))


def formula_seconds(cc: str, rate_bps: float, rtt_s: float) -> float | None:
    """The formula's time from the loss to 95 % of capacity (None for Cubic: ns-3's own algorithm)."""
    if cc == "reno":
        return float(formulas.responsiveness_seconds(rate_bps / 8, rtt_s, MSS_BYTES)) * 2 * (RECOVER_FRACTION - 0.5)
    if cc == "scalable":
        rtts = math.log(RECOVER_FRACTION / (1 - formulas.SCALABLE_B)) / math.log1p(formulas.SCALABLE_A)
        return rtts * rtt_s
    return None


def responsiveness_scenario(cc: str, rate_bps: float, rtt_s: float, max_sim_s: float) -> dict[str, Any]:
    """The scenario of one responsiveness run."""
    bdp_bytes = rate_bps / 8 * rtt_s
    segments = bdp_segments(rate_bps, rtt_s)
    buffers = min(2**31 - 1, int(4 * bdp_bytes))
    return {"mode": "longpath", "seed": 1, "bottleneck_bps": int(rate_bps), "mss_bytes": MSS_BYTES,
            "bin_s": rtt_s, "duration_s": max_sim_s, "buffer_bytes": int(bdp_bytes),
            "snd_buf_bytes": buffers, "rcv_buf_bytes": buffers,
            "flows": [{"rtt_s": rtt_s, "cc": cc, "ssthresh_segments": segments}],
            "drop": {"flow": 0, "after_full_s": 2 * rtt_s, "recover_fraction": RECOVER_FRACTION},
            "skip_idle_lost_scan": True}


def fairness_scenario(griddt: bool, seconds: float, buffer_bytes: int, mtu_bytes: int = 1500) -> dict[str, Any]:
    """The scenario of one RTT-fairness run: two flows of 181 and 117 ms through 1 Gb/s, on links
    of mtu_bytes (the segment is what fits with IPv4, TCP and timestamps)."""
    rate = FAIRNESS_BOTTLENECK_BPS
    mss = mtu_bytes - IP_TCP_HEADER_BYTES
    settings = formulas.LongPaths(griddt=griddt)
    flows = []
    for rtt in FAIRNESS_RTTS_S:
        _, ssthresh, increase = formulas.long_path_settings(rate / 8, rate / 8 / 2, rtt, settings, mss)
        flows.append({"rtt_s": rtt, "cc": "griddt" if griddt else "reno", "increase": float(increase or 1),
                      "ssthresh_segments": int(ssthresh)})
    buffers = int(4 * rate / 8 * max(FAIRNESS_RTTS_S))
    return {"mode": "longpath", "seed": 1, "bottleneck_bps": int(rate), "mss_bytes": mss, "mtu_bytes": mtu_bytes,
            "bin_s": 1.0, "duration_s": seconds, "buffer_bytes": buffer_bytes, "snd_buf_bytes": buffers,
            "rcv_buf_bytes": buffers, "flows": flows, "skip_idle_lost_scan": True}


#: The fairness runs' rates are also kept per window of this many simulated seconds (the plot, and
#: Jain's index over each window of the measured time).
FAIRNESS_WINDOW_S = 100.0


def window_rates(result: dict[str, Any], window_s: float) -> list[list[float]]:
    """Each flow's mean rate (b/s) over every whole window of window_s from the run's start."""
    per = max(1, round(window_s / result["bin_s"]))
    return [[sum(bins[i:i + per]) * 8 / (per * result["bin_s"]) for i in range(0, len(bins) - per + 1, per)]
            for bins in result["bins_bytes"]]


def jain(rates: list[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2), 1 when all are equal."""
    return sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))


def run_responsiveness(out: Path, max_aimd_sim_s: float, max_sim_s: float,
                       max_window_segments: int) -> list[dict[str, Any]]:
    """Every responsiveness case; each one's figures (and result.json under out/NAME). A case whose
    BDP exceeds max_window_segments is not simulated: in loss recovery ns-3's cost per ACK grows
    with the window (its SACK scoreboard is walked per ACK)."""
    rows = []
    for rate in RATES_BPS:
        for rtt in RTTS_S:
            for cc in RESPONSIVENESS_CCS:
                name = f"resp-{cc}-{rate / 1e6:g}mbps-{rtt * 1e3:g}ms"
                formula = formula_seconds(cc, rate, rtt)
                row: dict[str, Any] = {"name": name, "cc": cc, "rate_bps": rate, "rtt_s": rtt,
                                       "formula_s": formula, "aimd_full_s": float(
                                           formulas.responsiveness_seconds(rate / 8, rtt, MSS_BYTES))}
                segments = bdp_segments(rate, rtt)
                if segments > max_window_segments:
                    row["skipped"] = (f"a window of {segments} segments, above --max-window-segments "
                                      f"{max_window_segments}")
                    rows.append(row)
                    print(f"{name}: not simulated ({row['skipped']})", file=sys.stderr)
                    continue
                if cc == "reno" and formula is not None and formula > max_aimd_sim_s:
                    packets = rate / 8 / (MSS_BYTES + 54) * formula
                    row["skipped"] = (f"{formula:.0f} simulated seconds, about {packets / 1e6:.0f} million packets: "
                                      f"above --max-aimd-sim-s {max_aimd_sim_s:g}")
                    rows.append(row)
                    print(f"{name}: not simulated ({row['skipped']})", file=sys.stderr)
                    continue
                started = time.monotonic()
                print(f"{name}: simulating", file=sys.stderr, flush=True)
                outcome = run_scenario(responsiveness_scenario(cc, rate, rtt, max_sim_s))
                result = outcome.result
                (out / name).mkdir(parents=True, exist_ok=True)
                (out / name / "result.json").write_text(json.dumps(result) + "\n")
                recovered = result.get("recovered_s")
                dropped = result.get("drop_s")
                row.update(measured_s=None if recovered is None or dropped is None else recovered - dropped,
                           drop_s=dropped, sim_s=result["sim_s"], events=result["events"], cpu_s=outcome.cpu_s,
                           wall_s=time.monotonic() - started, max_rss_mb=outcome.max_rss_kb / 1024,
                           bottleneck_drops=result["bottleneck_drops"],
                           lowest_after_loss=_lowest_after(result, rate))
                print(f"{name}: back to 95 % in {row['measured_s']} s (formula {formula}), cpu {outcome.cpu_s:.0f} s",
                      file=sys.stderr, flush=True)
                rows.append(row)
    return rows


def _lowest_after(result: dict[str, Any], rate_bps: float) -> float | None:
    """The bottleneck's lowest rate in a round trip after the drop, as a share of its capacity."""
    if result.get("drop_s") is None:
        return None
    bins, width = result["link_bins_bytes"], result["bin_s"]
    first = int(result["drop_s"] / width) + 1
    after = bins[first:]
    return min(after) * 8 / width / rate_bps if after else None


def fairness_figures(result: dict[str, Any], measure_from_s: float) -> dict[str, Any]:
    """What a fairness run's result shows: each flow's mean rate from measure_from_s on, Jain's
    index of them, the link's share used, each flow's rate per window and the lowest and highest
    Jain's index over the windows of the measured time."""
    width = result["bin_s"]
    first = int(measure_from_s / width)
    rates = [sum(bins[first:]) * 8 / (len(bins[first:]) * width) for bins in result["bins_bytes"]]
    windows = window_rates(result, FAIRNESS_WINDOW_S)
    measured = [jain(list(pair)) for index, pair in enumerate(zip(*windows))
                if index * FAIRNESS_WINDOW_S >= first * width]
    return {"rates_bps": rates, "jain": jain(rates), "measured_from_s": first * width,
            "measured_to_s": len(result["bins_bytes"][0]) * width,
            "link_share": sum(rates) / FAIRNESS_BOTTLENECK_BPS, "window_s": FAIRNESS_WINDOW_S,
            "window_rates_bps": windows, "window_jain": [min(measured), max(measured)] if measured else None,
            "bottleneck_drops": result["bottleneck_drops"], "events": result["events"]}


def run_fairness(out: Path, seconds: float, measure_from_s: float, buffer_bytes: int,
                 mtu_bytes: int, jobs: int = 1) -> list[dict[str, Any]]:
    """The two RTT-fairness runs, without and with the per-path increase (jobs of them at once),
    each showing its simulated time every tenth of the run."""

    def one(griddt: bool) -> dict[str, Any]:
        name = f"fair-{'griddt' if griddt else 'reno'}"
        print(f"{name}: simulating {seconds:g} s", file=sys.stderr, flush=True)
        scenario = {**fairness_scenario(griddt, seconds, buffer_bytes, mtu_bytes), "progress_s": seconds / 10}
        started = time.monotonic()
        outcome = run_scenario(scenario, on_progress=lambda message: print(
            f"{name}: {message['t']:.0f} / {message['end']:g} simulated s, {time.monotonic() - started:.0f} s",
            file=sys.stderr, flush=True))
        result = outcome.result
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "result.json").write_text(json.dumps(result) + "\n")
        figures = fairness_figures(result, measure_from_s)
        print(f"{name}: {[round(r / 1e6) for r in figures['rates_bps']]} Mb/s, Jain {figures['jain']:.3f}",
              file=sys.stderr)
        return {"name": name, "griddt": griddt, "rtts_s": list(FAIRNESS_RTTS_S),
                "increase": [flow["increase"] for flow in scenario["flows"]],
                "ssthresh_segments": [flow["ssthresh_segments"] for flow in scenario["flows"]],
                "buffer_bytes": buffer_bytes, "mtu_bytes": mtu_bytes, **figures,
                "cpu_s": outcome.cpu_s, "wall_s": time.monotonic() - started,
                "max_rss_mb": outcome.max_rss_kb / 1024}

    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each run is its own process
        return list(pool.map(one, (False, True)))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.2f} s"


#: What the no-harm table compares of each incast run (otcp-experiment simulate incast's summary).
NO_HARM_FIELDS = ("goodput_mbps", "fct_p99_ms", "drops", "timeouts")


def no_harm_lines(with_long: dict[str, Any], without: dict[str, Any]) -> list[str]:
    """The section comparing the racks' incast with a long path beside them and without one: per
    scheme the incast figures of both runs, and whether they are the same."""
    lines = ["", "## No harm to the racks: their incast with and without a long path", "",
             "The same simulated incast in the receiver's rack of a leaf-spine, once with the other rack's "
             "uplink 60 ms long (every path between the racks long fat: otcp_scalable, ssthresh and all) and "
             "once with 10 us uplinks; the racks' own paths are short in both. The runs:", "",
             *(f"    {summary['command']}" for summary in (with_long, without) if summary.get("command")), "",
             "| scheme | goodput (Mb/s) with / without | p99 round (ms) | drops | RTOs | the same |",
             "|---|---|---|---|---|---|"]
    before = {run["scheme"]: run for run in without["runs"]}
    for run in with_long["runs"]:
        other = before.get(run["scheme"])
        if other is None:
            continue
        cells = [f"{run[name]:g} / {other[name]:g}" for name in NO_HARM_FIELDS]
        same = all(run[name] == other[name] for name in NO_HARM_FIELDS)
        lines.append(f"| {run['scheme']} | {' | '.join(cells)} | {'yes' if same else 'no'} |")
    return lines


def page(summaries: list[dict[str, Any]], command: str,
         no_harm: tuple[dict[str, Any], dict[str, Any]] | None = None, fairness_plot: str | None = None) -> str:
    """The results page (Markdown) from run summaries, and the no-harm pair of incast summaries
    (with the long path, without) where given; fairness_plot: the fairness plot's link."""
    lines = ["# Long fat paths (ns-3)", "",
             "Made by the program from its run summaries (`summary.json` of each run directory, copied beside "
             "this page), with:", "", f"    {command}", "",
             "How the runs go, and what the simulator leaves out: "
             "[../longpaths.md](../longpaths.md#measured-in-ns-3), which names the commands that made them.", ""]
    commands = [s["command"] for s in summaries if s.get("command")]
    if commands:
        lines += ["The runs:", "", *(f"    {command}" for command in commands), ""]
    responsiveness = [row for s in summaries for row in s.get("responsiveness", [])]
    fairness = [row for s in summaries for row in s.get("fairness", [])]
    if responsiveness:
        lines += _responsiveness_lines(responsiveness)
    if fairness:
        lines += _fairness_lines(fairness)
        if fairness_plot:
            lines += ["", f"![each flow's rate per {FAIRNESS_WINDOW_S:g} s]({fairness_plot})"]
    if no_harm is not None:
        lines += no_harm_lines(*no_harm)
    return "\n".join(lines) + "\n"


def _responsiveness_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The responsiveness section of the page."""
    lines = ["## Responsiveness: one loss at full rate, time back to 95 % of capacity", "",
              "Round trip, capacity; for each congestion control the simulated time from the dropped packet "
              "to the first round trip the bottleneck sends at 95 % of its capacity, and the formula's "
              "(AIMD: C x RTT^2 / (2 MSS) from half the window, x 0.9 to 95 %; otcp_scalable: "
              "ln(0.95 / 0.875) / ln(1.01) round trips). *AIMD to 100 %* is the paper's measure, "
              "C x RTT^2 / (2 MSS), MSS 1448 B. The window at the loss is above the BDP by what it grew in "
              "the round trips before it (a queue), so the rate falls less than the cut (the lowest rate after "
              "the loss, below)" + _scalable_floor(rows) + ".", "",
              "| RTT | capacity | AIMD to 100 % (formula) | Reno-AIMD to 95 %: formula | simulated | "
              "Cubic (ns-3 TcpCubic): simulated | OTCP (otcp_scalable): formula | simulated |",
              "|---|---|---|---|---|---|---|---|"]
    cases = sorted({(row["rtt_s"], row["rate_bps"]) for row in rows})
    by = {(row["rtt_s"], row["rate_bps"], row["cc"]): row for row in rows}
    for rtt, rate in cases:
        cubic, reno, scal = (by.get((rtt, rate, cc), {}) for cc in RESPONSIVENESS_CCS)

        def simulated(row: dict[str, Any]) -> str:
            if not row:
                return "-"
            if "skipped" in row:
                return "not simulated"
            return _duration(row.get("measured_s")) if row.get("measured_s") is not None else "not within the run"

        lines.append(f"| {rtt * 1e3:g} ms | {rate / 1e9:g} Gb/s | {_duration(reno.get('aimd_full_s'))} | "
                     f"{_duration(reno.get('formula_s'))} | {simulated(reno)} | {simulated(cubic)} | "
                     f"{_duration(scal.get('formula_s'))} | {simulated(scal)} |")
    skipped = [row for row in rows if "skipped" in row]
    if skipped:
        lines += ["", "Not simulated (the formula stands alone): " + "; ".join(
            f"{row['name']}: {row['skipped']}" for row in skipped) + "."]
    lines += ["", "Cost of each simulated run (CPU seconds, events, peak memory):", "",
              "| run | simulated s | events | CPU s | peak MB | bottleneck drops | lowest rate after the loss |",
              "|---|---|---|---|---|---|---|"]
    for row in rows:
        if "skipped" not in row:
            lowest = row.get("lowest_after_loss")
            lines.append(f"| {row['name']} | {row['sim_s']:.1f} | {row['events']} | {row['cpu_s']:.1f} | "
                         f"{row['max_rss_mb']:.0f} | {row['bottleneck_drops']} | "
                         f"{'-' if lowest is None else f'{lowest:.0%}'} |")
    return lines


def _scalable_floor(rows: list[dict[str, Any]]) -> str:
    """What the page says of otcp_scalable's lowest rates after the loss, from the rows."""
    lowest = [row["lowest_after_loss"] for row in rows if row["cc"] == "scalable" and row.get("lowest_after_loss")]
    if not lowest:
        return ""
    low, high = f"{min(lowest):.0%}", f"{max(lowest):.0%}"
    return (f": after otcp_scalable's cut of 1/8 the link still sends {low if low == high else f'{low} to {high}'}, "
            "and its time back is shorter than the formula's from 7/8")


def _fairness_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The RTT-fairness section of the page."""
    mtus = sorted({row.get("mtu_bytes", 1500) for row in rows})
    lines = ["", "## RTT fairness: two flows, 181 and 117 ms, through 1 Gb/s", "",
              "Each flow's mean rate over the measured time, the link's use (both rates over its capacity) and "
              "Jain's index; both flows start together with the planned ssthresh of their share, on links of "
              f"MTU {' and '.join(f'{mtu} B' for mtu in mtus)}. Kelly, Ravot and Martin-Flatin measured, with "
              f"MTU {PAPER_FAIRNESS_MTU_BYTES} B over {PAPER_FAIRNESS_PERIOD_S} s, 202 / 514 Mb/s with standard "
              f"TCP and 330 / 388 Mb/s with GridDT (A = 7 and 3), the link {PAPER_LINK_USE:.0%} used in both.", "",
              "| run | MTU | A (181 / 117 ms) | measured | 181 ms flow | 117 ms flow | link used | Jain "
              f"| Jain per {FAIRNESS_WINDOW_S:g} s, lowest - highest | the paper's |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        paper = PAPER_FAIRNESS_MBPS["with" if row["griddt"] else "without"]
        slow, fast = (rate / 1e6 for rate in row["rates_bps"])
        paper_jain = jain([float(p) for p in paper])
        increases = " / ".join(f"{a:g}" for a in row["increase"])
        lines.append(f"| {'GridDT, planned A' if row['griddt'] else 'Reno AIMD'} | {row.get('mtu_bytes', 1500)} B | "
                     f"{increases} | {row['measured_from_s']:g}-{row['measured_to_s']:g} s | {slow:.0f} Mb/s | "
                     f"{fast:.0f} Mb/s | {(slow + fast) / 1e3:.0%} | {row['jain']:.3f} | "
                     f"{'-' if not row.get('window_jain') else '{:.3f} - {:.3f}'.format(*row['window_jain'])} | "
                     f"{paper[0]} / {paper[1]} Mb/s, Jain {paper_jain:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m otcp.experiments.sim.longpath run|page``."""
    parser = argparse.ArgumentParser(prog="python -m otcp.experiments.sim.longpath", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="simulate the responsiveness or fairness runs")
    run.add_argument("part", choices=("responsiveness", "fairness"))
    run.add_argument("--out", required=True, help="directory for the runs and summary.json")
    run.add_argument("--max-aimd-sim-s", type=float, default=600.0,
                     help="AIMD cases predicted to need more simulated seconds are formula only (default 600)")
    run.add_argument("--max-sim-s", type=float, default=2000.0, help="a responsiveness run's simulated limit")
    run.add_argument("--max-window-segments", type=int, default=50_000,
                     help="cases whose BDP is more segments are formula only (default 50000: up to 2.5 Gb/s x 200 ms)")
    run.add_argument("--seconds", type=float, default=120.0, help="fairness: simulated seconds (default 120)")
    run.add_argument("--measure-from-s", type=float, default=20.0,
                     help="fairness: the rates are means from this simulated second on (default 20)")
    run.add_argument("--buffer-bytes", type=int, default=2_000_000, help="fairness: the bottleneck's buffer")
    run.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                     help="fairness: runs at once (default: 2 where the machine has 2 CPUs)")
    run.add_argument("--mtu-bytes", type=int, default=PAPER_FAIRNESS_MTU_BYTES,
                     help=f"fairness: the links' MTU (default {PAPER_FAIRNESS_MTU_BYTES}, the paper's jumbo frames)")
    make = commands.add_parser("page", help="the results page from run directories' summary.json")
    make.add_argument("runs", nargs="+", help="run directories (each with summary.json)")
    make.add_argument("--output", required=True, help="the Markdown page to write")
    make.add_argument("--no-harm", nargs=2, metavar=("WITH_LONG", "WITHOUT"),
                      help="two simulate incast run directories: the racks with a long path beside them, and without")
    args = parser.parse_args(argv)
    if args.command == "page":
        summaries = [json.loads((Path(run) / "summary.json").read_text()) for run in args.runs]
        shown = " ".join(["python -m otcp.experiments.sim.longpath page", *args.runs,
                                          *(["--no-harm", *args.no_harm] if args.no_harm else []),
                                          "--output", args.output])
        pair = None if args.no_harm is None else tuple(
            json.loads((Path(run) / "summary.json").read_text()) for run in args.no_harm)
        plotted = [row for s in summaries for row in s.get("fairness", []) if "window_rates_bps" in row]
        link = None
        if plotted:  # beside the page, in the directory of its name: longpaths.md -> longpaths/fairness.png
            output = Path(args.output)
            (output.parent / output.stem).mkdir(parents=True, exist_ok=True)
            plots.long_path_fairness_plot(str(output.parent / output.stem / "fairness.png"), plotted,
                                          {griddt: PAPER_FAIRNESS_MBPS["with" if griddt else "without"]
                                           for griddt in (False, True)})
            link = f"{output.stem}/fairness.png"
        Path(args.output).write_text(page(summaries, shown, pair, link))  # type: ignore[arg-type]
        return 0
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    if args.mtu_bytes <= IP_TCP_HEADER_BYTES:
        parser.error(f"--mtu-bytes {args.mtu_bytes}: must exceed the {IP_TCP_HEADER_BYTES} B of IPv4, TCP and "
                     "timestamp headers")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.part == "responsiveness":
        summary: dict[str, Any] = {"responsiveness": run_responsiveness(out, args.max_aimd_sim_s, args.max_sim_s,
                                                                        args.max_window_segments)}
    else:
        summary = {"fairness": run_fairness(out, args.seconds, args.measure_from_s, args.buffer_bytes,
                                            args.mtu_bytes, args.jobs)}
    summary["command"] = " ".join(["python -m otcp.experiments.sim.longpath", *(sys.argv[1:] if argv is None
                                                                                  else argv)])
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
