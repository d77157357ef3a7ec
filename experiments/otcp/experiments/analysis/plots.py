"""The plots of an experiment (PNG, matplotlib's Agg backend: no display needed).

- ``goodput.png``: goodput vs number of senders, one line per scheme and
  buffer, the single-flow ceiling drawn (the headline plot); beside it the
  same as a share of the full-size (1500 B) ceiling, and dotted, for a
  scheme that sent smaller packets, of the ceiling at its packet size;
- ``fct_cdf.png``: CDF of request completion times at the largest sender
  count, one line per scheme and buffer;
- ``fct_bars.png``: mean and p95 completion time per scheme at the largest
  sender count, one panel per buffer;
- ``fairness-SCHEME.png`` (the fairness experiment): every flow's rate over
  time, the fair share marked, and the bottleneck's backlog underneath;
- ``longpaths/fairness.png`` (the simulated long-path fairness runs): each flow's rate per window
  over the simulated time, one panel per run, the paper's rates dashed;
- ``slowdown-POINT.png`` (the workload experiment): p50 and p99 slowdown
  against flow size, one colour per scheme (the figure of pFabric, Homa,
  HPCC and Swift); ``qct-POINT.png``: the query completion times' CDFs;
- ``lease.png`` (the lease experiment): every host's routes and sock_ops entries over time, the
  plan or its safe state, from the controller's kill to its return;
- ``tradeoff.png`` (``otcp-experiment report`` over an incast and a
  workload directory): per scheme, goodput on synchronized reads beside
  the p99 short-flow slowdown and the drops.

A run that failed is marked where its point or bar would be: an ``x`` in its
line's colour at the bottom of the goodput plot, labelled "failed", and an
``x`` in place of its bars; its legend entry says it failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.figure import Figure  # noqa: E402

from otcp.experiments.analysis.fct import FlowOutcome, QueryOutcome, censored_percentile  # noqa: E402
from otcp.experiments.analysis.results import Failure  # noqa: E402
from otcp.experiments.analysis.stats import cdf  # noqa: E402
from otcp.experiments.analysis.workload_report import SHORT_FLOW_BYTES, Tradeoff  # noqa: E402

Run = Mapping[str, Any]
#: How a failed run is drawn: a large x with no line, not cut off at the axes' bottom edge.
FAILED_MARKER: dict[str, Any] = {"marker": "x", "markersize": 10, "markeredgewidth": 2, "linestyle": "none",
                                 "clip_on": False}


def _label(scheme: str, buffer_bytes: int, buffers: Sequence[int]) -> str:
    return scheme if len(buffers) == 1 else f"{scheme}, {buffer_bytes // 1000} KB"


def goodput_figure(runs: Sequence[Run], ceiling_mbps: float, failures: Iterable[Failure] = ()) -> Figure:
    """Goodput vs senders, one line per (scheme, buffer), each failed run an x at the bottom; on a
    second panel, each line's share of its network's full-size ceiling (solid) and, where its packets
    were smaller, of its ceiling at its packet size (dotted)."""
    failures = list(failures)
    buffers = sorted({r["buffer_bytes"] for r in runs} | {f.buffer_bytes for f in failures})
    figure, (axes, shares) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=(7, 5))
    colours: dict[tuple[str, int], Any] = {}
    for (scheme, buffer_bytes), series in _series(runs).items():
        series.sort(key=lambda r: r["senders"])
        (line,) = axes.plot([r["senders"] for r in series], [r["goodput_mbps"] for r in series], marker="o",
                            label=_label(scheme, buffer_bytes, buffers))
        colours[(scheme, buffer_bytes)] = line.get_color()
    _mark_failures(axes, failures, colours, buffers)
    axes.axhline(ceiling_mbps, color="black", linestyle="--", linewidth=1,
                 label=f"single-flow ceiling {ceiling_mbps:.1f} Mb/s")
    senders = sorted({r["senders"] for r in runs} | {f.senders for f in failures})
    axes.set_xscale("log", base=2)
    axes.set_xticks(senders, [str(s) for s in senders])
    axes.set_xlabel("senders")
    axes.set_ylabel("goodput (Mb/s)")
    axes.set_ylim(0, ceiling_mbps * 1.1)
    sru = sorted({r["sru_bytes"] for r in runs})
    axes.set_title(f"Incast goodput, {', '.join(f'{s // 1024} KB' for s in sru)} per server" if sru
                   else "Incast goodput")
    _share_panel(shares, runs, colours, senders)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _share_panel(axes: Any, runs: Sequence[Run], colours: dict[tuple[str, int], Any], senders: Sequence[int]) -> None:
    """Goodput as a share of the full-size ceiling per line (solid; runs without one left out), and
    dotted of the ceiling at the run's packet size where that was smaller."""
    for key, series in _series(runs).items():
        series.sort(key=lambda r: r["senders"])
        full = [r for r in series if r.get("full_ceiling_mbps")]
        axes.plot([r["senders"] for r in full], [100 * r["goodput_mbps"] / r["full_ceiling_mbps"] for r in full],
                  marker="o", color=colours[key])
        small = [r for r in series if r["packet_bytes"] < 1500]
        if small:
            axes.plot([r["senders"] for r in small], [100 * r["goodput_mbps"] / r["ceiling_mbps"] for r in small],
                      marker=".", linestyle=":", color=colours[key])
    axes.plot([], [], color="grey", label="of the full-size (1500 B) ceiling")
    axes.plot([], [], color="grey", linestyle=":", label="of the ceiling at the run's smaller packets")
    axes.set_xscale("log", base=2)
    axes.set_xticks(senders, [str(s) for s in senders])
    axes.set_xlabel("senders")
    axes.set_ylabel("goodput, % of the single-flow ceiling")
    axes.set_ylim(0, 110)
    axes.set_title("Against the line")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)


def _mark_failures(axes: Any, failures: Sequence[Failure], colours: dict[tuple[str, int], Any],
                   buffers: Sequence[int]) -> None:
    """An x at goodput 0 for every failed run, in its line's colour (a new one for a scheme
    with no line), labelled "failed"; one legend entry per scheme and buffer."""
    labelled = set()
    for failure in failures:
        key = (failure.scheme, failure.buffer_bytes)
        if key not in colours:
            palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
            colours[key] = palette[len(colours) % len(palette)]
        label = f"{_label(failure.scheme, failure.buffer_bytes, buffers)}: failed" if key not in labelled else None
        labelled.add(key)
        axes.plot([failure.senders], [0], color=colours[key], label=label, **FAILED_MARKER)
        axes.annotate("failed", (failure.senders, 0), textcoords="offset points", xytext=(0, 9), ha="center",
                      color=colours[key], fontsize=7)


def goodput_plot(path: str, runs: Sequence[Run], ceiling_mbps: float, failures: Iterable[Failure] = ()) -> str:
    """Write goodput_figure to path."""
    return _save(goodput_figure(runs, ceiling_mbps, failures), path)


def fct_cdf_plot(path: str, runs: Sequence[Run], round_durations: Mapping[int, Sequence[float]],
                 failures: Iterable[Failure] = ()) -> str:
    """CDF of request completion times at the largest sender count.

    round_durations: {run index in runs: [duration in ms of every round]}. A run that failed
    at that count gets a legend entry saying so.
    """
    largest = max(r["senders"] for r in runs)
    failed = [f for f in failures if f.senders == largest]
    buffers = sorted({r["buffer_bytes"] for r in runs} | {f.buffer_bytes for f in failed})
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for index, run in enumerate(runs):
        if run["senders"] != largest:
            continue
        values, fractions = cdf(round_durations[index])
        axes.step(values, fractions, where="post", label=_label(run["scheme"], run["buffer_bytes"], buffers))
    for failure in failed:
        axes.plot([], [], label=f"{_label(failure.scheme, failure.buffer_bytes, buffers)}: failed", **FAILED_MARKER)
    axes.set_xscale("log")
    axes.set_xlabel("request completion time (ms)")
    axes.set_ylabel("fraction of requests")
    axes.set_title(f"Completion times at {largest} senders")
    _finish(figure, axes)
    return _save(figure, path)


def fct_bars_plot(path: str, runs: Sequence[Run], failures: Iterable[Failure] = ()) -> str:
    """Mean and p95 completion time per scheme at the largest sender count; a run that
    failed there is an x in place of its bars."""
    largest = max(r["senders"] for r in runs)
    failures = [f for f in failures if f.senders == largest]
    buffers = sorted({r["buffer_bytes"] for r in runs} | {f.buffer_bytes for f in failures})
    figure, panels = plt.subplots(1, len(buffers), figsize=(4 + 3 * len(buffers), 4.5), squeeze=False)
    for panel, buffer_bytes in zip(panels[0], buffers):
        chosen = [r for r in runs if r["senders"] == largest and r["buffer_bytes"] == buffer_bytes]
        failed = [f for f in failures if f.buffer_bytes == buffer_bytes]
        names = [r["scheme"] for r in chosen] + [f.scheme for f in failed]
        positions = range(len(chosen))
        panel.bar([p - 0.2 for p in positions], [r["fct_mean_ms"] for r in chosen], width=0.4, label="mean")
        panel.bar([p + 0.2 for p in positions], [r["fct_p95_ms"] for r in chosen], width=0.4, label="p95")
        if failed:
            panel.plot([len(chosen) + i for i in range(len(failed))], [0] * len(failed), color="black",
                       label="failed", **FAILED_MARKER)
        panel.set_xticks(list(range(len(names))), names, rotation=30, ha="right")
        panel.set_ylabel("request completion time (ms)")
        panel.set_title(f"{largest} senders, {buffer_bytes // 1000} KB buffer")
        panel.grid(True, axis="y", alpha=0.3)
        panel.legend(fontsize=8)
    figure.tight_layout()
    return _save(figure, path)


def _series(runs: Iterable[Run]) -> dict[tuple[str, int], list[Run]]:
    series: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        series.setdefault((run["scheme"], run["buffer_bytes"]), []).append(run)
    return series


def _finish(figure: Figure, axes: Any) -> None:
    """Grid, legend and layout."""
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()


def _save(figure: Figure, path: str) -> str:
    """Write the PNG and free the figure."""
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def fairness_plot(path: str, run: Mapping[str, Any], duration_s: float, buffer_bytes: int) -> str:
    """One fairness run (otcp.experiments.fairness.summarize's record): rates above, queue below;
    duration_s: from the first flow's start to the end of every flow."""
    figure, (rates, queue) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[2, 1])
    flows = sorted(run["flow_means_mbps"], key=lambda f: tuple(int(p) for p in f.split(".")))
    for flow in flows:
        points = [(r["t"], r["mbps"][flow]) for r in run["rates"] if flow in r["mbps"]]
        rates.plot([t for t, _ in points], [m for _, m in points], linewidth=1, label=flow)
    for index in range(run["flows"]):
        share = run["ceiling_mbps"] / (index + 1)
        start = index * run["stagger_s"]
        end = (index + 1) * run["stagger_s"] if index + 1 < run["flows"] else duration_s
        if run["stagger_s"] == 0 and index + 1 < run["flows"]:
            continue
        rates.hlines(share, start, end, colors="black", linestyles="--", linewidth=0.8)
    jain = "-" if run["jain_steady"] is None else f"{run['jain_steady']:.3f}"
    rates.set_title(f"{run['scheme']}: {run['flows']} flows, one every {run['stagger_s']:g} s "
                    f"(Jain {jain} in the steady part; dashed: fair share)")
    rates.set_ylabel("rate (Mb/s, per 100 ms)")
    rates.grid(True, alpha=0.3)
    rates.legend(fontsize=7, ncol=4)
    queue.plot([t for t, _ in run["queue"]], [b / 1000 for _, b in run["queue"]], color="tab:red", linewidth=0.8)
    queue.axhline(buffer_bytes / 1000, color="black", linestyle="--", linewidth=0.8, label="buffer")
    queue.set_ylabel("bottleneck backlog (kB)")
    queue.set_xlabel("seconds since the first flow started")
    queue.set_xlim(0, duration_s)
    queue.grid(True, alpha=0.3)
    queue.legend(fontsize=7)
    figure.tight_layout()
    return _save(figure, path)


def long_path_fairness_plot(path: str, rows: Sequence[Mapping[str, Any]],
                            paper_mbps: Mapping[bool, Sequence[float]]) -> str:
    """The simulated RTT-fairness runs (``sim.longpath``'s rows): per run a panel of each flow's rate
    per window against simulated time, the start of the measured time dotted, and the paper's
    rates for the same run (paper_mbps by griddt) dashed in the flows' colours."""
    figure, panels = plt.subplots(len(rows), 1, figsize=(8, 2.6 * len(rows)), sharex=True, squeeze=False)
    for panel, row in zip(panels[:, 0], rows):
        width = row["window_s"]
        for index, (rtt, rates) in enumerate(zip(row["rtts_s"], row["window_rates_bps"])):
            colour = f"C{index}"
            panel.step([width * (i + 1) for i in range(len(rates))], [r / 1e6 for r in rates], where="pre",
                       color=colour, label=f"{rtt * 1e3:g} ms, A = {row['increase'][index]:g}")
            panel.axhline(paper_mbps[row["griddt"]][index], color=colour, linestyle="--", linewidth=0.8)
        panel.axvline(row["measured_from_s"], color="black", linestyle=":", linewidth=0.8)
        panel.set_title(f"{'GridDT, planned A' if row['griddt'] else 'Reno AIMD'}: Jain {row['jain']:.3f} "
                        f"from {row['measured_from_s']:g} s (dashed: the paper's rates)", fontsize=9)
        panel.set_ylabel(f"Mb/s per {width:g} s")
        panel.set_ylim(0, None)
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=7, loc="lower right")
    panels[-1, 0].set_xlabel("simulated seconds")
    figure.tight_layout()
    return _save(figure, path)


#: Flows per size bin of the slowdown plot, at least (fewer bins when there are fewer flows).
SLOWDOWN_BINS = 10


def size_bins(sizes: Sequence[int], bins: int = SLOWDOWN_BINS) -> list[tuple[int, int]]:
    """Up to bins (low, high) size ranges (inclusive) holding about as many of sizes each,
    a size never split over two."""
    ordered = sorted(sizes)
    ranges: list[tuple[int, int]] = []
    for index in range(bins):
        chunk = ordered[len(ordered) * index // bins: len(ordered) * (index + 1) // bins]
        if not chunk:
            continue
        low = chunk[0] if not ranges else max(chunk[0], ranges[-1][1] + 1)
        if low <= chunk[-1]:
            ranges.append((low, chunk[-1]))
    return ranges


def slowdown_plot(path: str, runs: Mapping[str, Sequence[FlowOutcome]], title: str) -> str:
    """p99 (solid) and p50 (dashed) slowdown against flow size, per scheme (runs: its flows, the
    same schedule's), in size bins of about equal flow counts; a bin whose percentile falls on
    flows that did not finish has no point."""
    figure, axes = plt.subplots(figsize=(10, 5))
    sizes = [flow.size_bytes for flows in runs.values() for flow in flows]
    ranges = size_bins(sorted(set(sizes)) if len(set(sizes)) < SLOWDOWN_BINS else sizes)
    for scheme, flows in runs.items():
        xs, p50s, p99s = [], [], []
        for low, high in ranges:
            chosen = [f for f in flows if low <= f.size_bytes <= high]
            done = [f.slowdown for f in chosen if f.slowdown is not None]
            unfinished = len(chosen) - len(done)
            xs.append(sorted(f.size_bytes for f in chosen)[len(chosen) // 2])
            p50s.append(censored_percentile(done, unfinished, 50))
            p99s.append(censored_percentile(done, unfinished, 99))
        (line,) = axes.plot(*_present(xs, p99s), marker="o", label=f"{scheme} p99")
        axes.plot(*_present(xs, p50s), marker=".", linestyle="--", color=line.get_color(), label=f"{scheme} p50")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("flow size (bytes; each point: the median of a bin of about equal flow counts)")
    axes.set_ylabel("slowdown (FCT / ideal FCT)")
    axes.set_title(f"Slowdown against flow size, {title}")
    # Two lines per scheme: the legend goes beside the axes, not over the curves.
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    return _save(figure, path)


def _present(xs: Sequence[float], ys: Sequence[float | None]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def qct_cdf_plot(path: str, runs: Mapping[str, Sequence[QueryOutcome]], title: str) -> str:
    """The CDF of query completion times per scheme (runs: its queries); queries that did not
    finish keep the curve below 1 and are counted in the legend."""
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for scheme, queries in runs.items():
        done = [q.qct_s * 1000.0 for q in queries if q.qct_s is not None]
        unfinished = len(queries) - len(done)
        if not queries:
            continue
        values, fractions = cdf(done) if done else ([], [])
        scale = len(done) / len(queries)
        label = scheme + (f" ({unfinished} unfinished)" if unfinished else "")
        axes.step(values, [f * scale for f in fractions], where="post", label=label)
    axes.set_xscale("log")
    axes.set_xlabel("query completion time (ms)")
    axes.set_ylabel("fraction of queries")
    axes.set_title(f"Query completion, {title}")
    _finish(figure, axes)
    return _save(figure, path)


def tradeoff_plot(path: str, rows: Sequence[Tradeoff]) -> str:
    """Per scheme, side by side: goodput on synchronized reads (share of the ceiling), the p99
    slowdown of short flows, and the drops in each experiment; a scheme one experiment did not
    run has no bar there."""
    figure, (goodput, slowdown, drops) = plt.subplots(1, 3, figsize=(12, 0.5 * len(rows) + 2), sharey=True)
    names = [row.scheme for row in rows]
    positions = list(range(len(rows)))

    def bars(axes: Any, values: Sequence[float | None], **style: Any) -> None:
        axes.barh([p for p, v in zip(positions, values) if v is not None], [v for v in values if v is not None],
                  **style)

    bars(goodput, [None if r.goodput_share is None else 100 * r.goodput_share for r in rows], color="tab:blue")
    goodput.set_xlim(0, 105)
    senders = next((r.senders for r in rows if r.senders), None)
    goodput.set_xlabel(f"goodput on synchronized reads,\n% of the ceiling ({senders} senders)")
    bars(slowdown, [r.short_slowdown_p99 for r in rows], color="tab:orange")
    # Linear from 0: a bar's length is the slowdown (1 at best), as on a log axis it would not be.
    slowdown.set_xlim(left=0)
    slowdown.set_xlabel(f"p99 slowdown, flows < {SHORT_FLOW_BYTES // 1000} kB\n(workload)")
    bars(drops, [None if r.incast_drops is None else float(r.incast_drops) for r in rows], height=0.4,
         align="edge", color="tab:red", label="incast")
    bars(drops, [None if r.workload_drops is None else float(r.workload_drops) for r in rows], height=-0.4,
         align="edge", color="tab:purple", label="workload")
    drops.set_xscale("symlog")
    drops.set_xlabel("packets dropped at the switches")
    drops.legend(fontsize=8)
    goodput.set_yticks(positions, names)
    goodput.invert_yaxis()
    for axes in (goodput, slowdown, drops):
        axes.grid(True, axis="x", alpha=0.3)
    figure.suptitle("What each scheme pays for what it gets")
    figure.tight_layout()
    return _save(figure, path)


#: The colour of each state a host's reading may be in (otcp.experiments.lease.HostReading.state).
LEASE_STATE_COLOURS = {"planned": "tab:orange", "safe": "tab:green", "both": "tab:olive", "other": "tab:red",
                       "none": "lightgrey"}


def lease_plot(path: str, document: Mapping[str, Any]) -> str | None:
    """The lease experiment's timeline (otcp.experiments.lease's document): every host's state as the
    polls read it, against seconds since the controller was killed, with the deadline, the flows and
    the events marked; None when the run ended before the kill."""
    if "readings" not in document:
        return None
    hosts = [h["host"] for h in document["hosts"]]
    rows = {host: index for index, host in enumerate(hosts)}
    figure, axes = plt.subplots(figsize=(10, max(3.0, 0.18 * len(hosts) + 1.5)))
    by_host: dict[str, list[tuple[float, str]]] = {host: [] for host in hosts}
    for host, t, state in document["readings"]:
        by_host[host].append((t, state))
    for host, points in by_host.items():
        for (t, state), (t_next, _) in zip(points, points[1:]):
            axes.barh(rows[host], t_next - t, left=t, height=0.8, color=LEASE_STATE_COLOURS[state], linewidth=0)
    deadline = document["deadline_s"]
    axes.axvline(0, color="black", linewidth=1)
    axes.axvline(deadline, color="black", linestyle="--", linewidth=1)
    for flow in document["flows"].values():
        axes.axvspan(flow["start"], flow["end"], color="tab:blue", alpha=0.15)
        axes.text((flow["start"] + flow["end"]) / 2, 0.99, f"one flow:\n{flow['mbps']:.1f} Mb/s", ha="center",
                  va="top", fontsize=7, transform=axes.get_xaxis_transform(),
                  bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0})
    for event in document["events"]:
        if event["event"].startswith("controller started"):
            axes.axvline(event["t"], color="tab:purple", linewidth=1)
    handles: list[Any] = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in LEASE_STATE_COLOURS.values()]
    handles += [plt.Line2D([], [], color="black"), plt.Line2D([], [], color="black", linestyle="--"),
                plt.Line2D([], [], color="tab:purple")]
    labels = [*LEASE_STATE_COLOURS, "controller killed", f"lease + poll ({deadline:g} s)", "controller back"]
    axes.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.set_yticks(range(len(hosts)), hosts, fontsize=6)
    axes.set_xlabel("seconds since the controller was killed")
    axes.set_title(f"every host's routes and sock_ops entries: the plan, or its safe state "
                   f"(ceiling {document['ceiling_mbps']:.1f} Mb/s)")
    axes.grid(True, axis="x", alpha=0.3)
    figure.tight_layout()
    return _save(figure, path)
