"""The plots of an incast sweep (PNG, matplotlib's Agg backend: no display needed).

- ``goodput.png``: goodput vs number of senders, one line per scheme and
  buffer, the single-flow ceiling drawn (the headline plot);
- ``fct_cdf.png``: CDF of request completion times at the largest sender
  count, one line per scheme and buffer;
- ``fct_bars.png``: mean and p95 completion time per scheme at the largest
  sender count, one panel per buffer;
- ``fairness-SCHEME.png`` (the fairness experiment): every flow's rate over
  time, the fair share marked, and the bottleneck's backlog underneath.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from otcp.experiments.stats import cdf


def _label(scheme, buffer_bytes, buffers):
    return scheme if len(buffers) == 1 else f"{scheme}, {buffer_bytes // 1000} KB"


def goodput_plot(path, runs, ceiling_mbps):
    """Goodput vs senders, one line per (scheme, buffer)."""
    buffers = sorted({r["buffer_bytes"] for r in runs})
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for (scheme, buffer_bytes), series in _series(runs).items():
        series.sort(key=lambda r: r["senders"])
        axes.plot([r["senders"] for r in series], [r["goodput_mbps"] for r in series], marker="o",
                  label=_label(scheme, buffer_bytes, buffers))
    axes.axhline(ceiling_mbps, color="black", linestyle="--", linewidth=1,
                 label=f"single-flow ceiling {ceiling_mbps:.1f} Mb/s")
    senders = sorted({r["senders"] for r in runs})
    axes.set_xscale("log", base=2)
    axes.set_xticks(senders, [str(s) for s in senders])
    axes.set_xlabel("senders")
    axes.set_ylabel("goodput (Mb/s)")
    axes.set_ylim(0, ceiling_mbps * 1.1)
    sru = sorted({r["sru_bytes"] for r in runs})
    axes.set_title(f"Incast goodput, {', '.join(f'{s // 1024} KB' for s in sru)} per server")
    return _save(figure, axes, path)


def fct_cdf_plot(path, runs, round_durations):
    """CDF of request completion times at the largest sender count.

    round_durations: {run index in runs: [duration in ms of every round]}.
    """
    largest = max(r["senders"] for r in runs)
    buffers = sorted({r["buffer_bytes"] for r in runs})
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for index, run in enumerate(runs):
        if run["senders"] != largest:
            continue
        values, fractions = cdf(round_durations[index])
        axes.step(values, fractions, where="post", label=_label(run["scheme"], run["buffer_bytes"], buffers))
    axes.set_xscale("log")
    axes.set_xlabel("request completion time (ms)")
    axes.set_ylabel("fraction of requests")
    axes.set_title(f"Completion times at {largest} senders")
    return _save(figure, axes, path)


def fct_bars_plot(path, runs):
    """Mean and p95 completion time per scheme at the largest sender count."""
    largest = max(r["senders"] for r in runs)
    buffers = sorted({r["buffer_bytes"] for r in runs})
    figure, panels = plt.subplots(1, len(buffers), figsize=(4 + 3 * len(buffers), 4.5), squeeze=False)
    for panel, buffer_bytes in zip(panels[0], buffers):
        chosen = [r for r in runs if r["senders"] == largest and r["buffer_bytes"] == buffer_bytes]
        names = [r["scheme"] for r in chosen]
        positions = range(len(chosen))
        panel.bar([p - 0.2 for p in positions], [r["fct_mean_ms"] for r in chosen], width=0.4, label="mean")
        panel.bar([p + 0.2 for p in positions], [r["fct_p95_ms"] for r in chosen], width=0.4, label="p95")
        panel.set_xticks(list(positions), names, rotation=30, ha="right")
        panel.set_ylabel("request completion time (ms)")
        panel.set_title(f"{largest} senders, {buffer_bytes // 1000} KB buffer")
        panel.grid(True, axis="y", alpha=0.3)
        panel.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _series(runs):
    series = {}
    for run in runs:
        series.setdefault((run["scheme"], run["buffer_bytes"]), []).append(run)
    return series


def _save(figure, axes, path):
    """Grid, legend, write the PNG and free the figure."""
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def fairness_plot(path, run, config):
    """One fairness run (otcp.experiments.fairness.summarize's record): rates above, queue below."""
    figure, (rates, queue) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[2, 1])
    flows = sorted(run["flow_means_mbps"], key=lambda f: tuple(int(p) for p in f.split(".")))
    for flow in flows:
        points = [(r["t"], r["mbps"][flow]) for r in run["rates"] if flow in r["mbps"]]
        rates.plot([t for t, _ in points], [m for _, m in points], linewidth=1, label=flow)
    for index in range(run["flows"]):
        share = run["ceiling_mbps"] / (index + 1)
        start = index * run["stagger_s"]
        end = (index + 1) * run["stagger_s"] if index + 1 < run["flows"] else config.duration_s
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
    queue.axhline(config.buffer_bytes / 1000, color="black", linestyle="--", linewidth=0.8, label="buffer")
    queue.set_ylabel("bottleneck backlog (kB)")
    queue.set_xlabel("seconds since the first flow started")
    queue.set_xlim(0, config.duration_s)
    queue.grid(True, alpha=0.3)
    queue.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
