"""The workload experiment's results as Markdown: per point, per regime, and the trade-off.

From workload summaries (``otcp.experiments.workload``; several directories
are merged, a later run replacing an earlier one of the same scheme and
point), per point (fabric, buffer, query fan-in, response size):

- FCT slowdown per size bucket at p50 / p99 / p99.9, with each bucket's
  flows (and those that did not finish);
- queries: QCT at p50 / p95 / p99, the queries that saw a retransmission
  timeout, and the responses' FCT;
- drops, RTOs, CE marks, the long-lived flows' goodput, the aggregator's
  queue, the CPU and how late the hosts started their flows;

then the **regime** table (``regime_table``): for every point, each OTCP
scheme's mean and p95 QCT and response FCT against default's, as ratios,
with the largest ratios reached and where (``regime_finding``). With an
incast summary beside a workload one, the **trade-off** (``tradeoff_rows``):
per scheme, goodput on synchronized reads beside the p99 slowdown of short
flows (under 100 kB) and the drops of both experiments, at the workload
point with a flow mix that the most schemes ran (the first such given).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from otcp.experiments.analysis.fct import SHORT_FLOW_BYTES
from otcp.experiments.runner.schemes import catalogue

Run = dict[str, Any]
#: (fabric, buffer, query fan-in, response bytes): what a run's tables and ratios are grouped by.
Point = tuple[str, int, int, int]
#: The FCT ratios the OTCP paper reports against default TCP: at the mean and at p95.
PAPER_MEAN_RATIO = 12.0
PAPER_P95_RATIO = 31.0


def is_workload(document: Mapping[str, Any]) -> bool:
    """Whether a summary is the workload experiment's."""
    return document.get("experiment") == "workload"


def point_of(run: Run) -> Point:
    """The point a run belongs to (its fabric: the summary's topo, which merged_runs sets on the run;
    "" where unknown)."""
    return run.get("topo") or "", run["buffer_bytes"], run["query_senders"], run["query_bytes"]


def point_title(point: Point) -> str:
    """How a section names a point."""
    topo, buffer_bytes, fan_in, response_bytes = point
    return (f"{topo}, " if topo else "") + f"{buffer_bytes // 1000} kB buffers" + (
        f", queries of {fan_in} x {response_bytes} B" if fan_in else "")


def scheme_order(name: str) -> int:
    """A scheme's place in the catalogue (unknown ones last)."""
    order = list(catalogue())
    return order.index(name) if name in order else len(order)


def markdown(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def number(value: float | None, digits: int = 1, unit: str = "") -> str:
    """value with digits decimals and unit, "-" for None."""
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def bucket_name(upper: int | None, previous: int | None) -> str:
    """A bucket's name: "< 10 kB", "10-100 kB", "100 kB-1 MB", ">= 1 MB"."""
    def size(value: int) -> str:
        return f"{value // 1_000_000} MB" if value >= 1_000_000 else f"{value // 1000} kB"
    if upper is None:
        return f">= {size(previous)}" if previous is not None else "all sizes"
    if previous is None:
        return f"< {size(upper)}"
    low, high = size(previous), size(upper)
    return f"{low.split()[0]}-{high}" if low.split()[1] == high.split()[1] else f"{low}-{high}"


def bucket_cell(bucket: Mapping[str, Any], field: str) -> str:
    """p50 / p99 / p99.9 of field ("slowdown" or "fct", in ms) and the bucket's flows."""
    if not bucket["flows"]:
        return "no flows"
    unit = "_ms" if field == "fct" else ""
    values = " / ".join(number(bucket[f"{field}_{q}{unit}"], 1) for q in ("p50", "p99", "p999"))
    unfinished = bucket["flows"] - bucket["finished"]
    return f"{values} ({bucket['flows']}" + (f", {unfinished} unfinished)" if unfinished else ")")


def bucket_table(runs: Sequence[Run], field: str) -> str:
    """Scheme rows, bucket columns: field at p50 / p99 / p99.9."""
    buckets = runs[0]["buckets"]
    names = [bucket_name(b["upper_bytes"], buckets[i - 1]["upper_bytes"] if i else None)
             for i, b in enumerate(buckets)]
    return markdown(["scheme", *names], ([run["scheme"], *(bucket_cell(b, field) for b in run["buckets"])]
                                         for run in runs))


def query_table(runs: Sequence[Run]) -> str:
    """Scheme rows: the queries' completion and timeouts, and the responses' FCT."""
    rows = []
    for run in runs:
        queries, responses = run["queries"], run["responses"]
        unfinished = queries["count"] - queries["finished"]
        rows.append([run["scheme"], f"{queries['count']}" + (f" ({unfinished} unfinished)" if unfinished else ""),
                     " / ".join(number(queries[f"qct_{q}_ms"]) for q in ("p50", "p95", "p99")),
                     number(queries["qct_mean_ms"]), str(queries["timeouts"]),
                     " / ".join(number(responses[f"fct_{q}_ms"]) for q in ("mean", "p95", "p99"))])
    return markdown(["scheme", "queries", "QCT p50 / p95 / p99 (ms)", "QCT mean (ms)", "saw an RTO",
                     "response FCT mean / p95 / p99 (ms)"], rows)


def counters_table(runs: Sequence[Run]) -> str:
    """Scheme rows: drops, RTOs, CE marks, long-lived goodput, the queue, CPU and lateness."""
    rows = [[run["scheme"], f"{run['drops']} ({run['drops_aggregator']})", str(run["timeouts"]),
             "-" if run["ce_marks"] is None else str(run["ce_marks"]), number(run["background_mbps"]),
             f"{run['peak_backlog_bytes'] // 1000} / {run['mean_backlog_bytes'] / 1000:.1f}",
             f"{run['cpu_busy_pct']:.0f} / {number(run['switch_cpu_pct'], 0)}", f"{run['start_late_p99_ms']:.1f}",
             "-" if run["generations"] is None else str(run["generations"]),
             "-" if run["static_rwnd_bytes"] is None else str(run["static_rwnd_bytes"])]
            for run in runs]
    return markdown(["scheme", "drops (at the aggregator)", "RTOs", "CE marks", "long-lived Mb/s",
                     "aggregator queue peak / mean (kB)", "CPU % both cores / switch thread",
                     "start late p99 (ms)", "generations", "static window (B)"], rows)


def merged_runs(documents: Sequence[tuple[Mapping[str, Any], Any]]) -> list[tuple[Run, Any]]:
    """Every workload run of documents (each with its origin and its summary's topo); a later one
    replaces an earlier one of the same scheme and point."""
    runs: dict[tuple[str, str, int, int, int], tuple[Run, Any]] = {}
    for document, origin in documents:
        for run in document["runs"]:
            placed = {**run, "topo": document.get("topo")}
            runs[(run["scheme"], *point_of(placed))] = (placed, origin)
    return list(runs.values())


def by_point(runs: Iterable[Run]) -> dict[Point, list[Run]]:
    """Runs grouped by point (in point order), each group in the catalogue's order."""
    points: dict[Point, list[Run]] = {}
    for run in runs:
        points.setdefault(point_of(run), []).append(run)
    return {point: sorted(points[point], key=lambda r: scheme_order(r["scheme"])) for point in sorted(points)}


def sections(runs: Sequence[Run], made_by: Callable[[Sequence[Run]], str] | None, heading: str) -> str:
    """Every point's tables, then the regime table where there are several points."""
    parts = []
    for point, chosen in by_point(runs).items():
        parts.append(f"{heading}{point_title(point)}")
        if any(run["flows"] for run in chosen):
            parts += ["**FCT slowdown per flow size: p50 / p99 / p99.9 (flows)**\n\n"
                      + bucket_table(chosen, "slowdown"),
                      f"**FCT per flow size, ms: p50 / p99 / p99.9 (flows)**\n\n{bucket_table(chosen, 'fct')}"]
        if any(run["queries"]["count"] for run in chosen):
            parts.append(f"**Queries**\n\n{query_table(chosen)}")
        parts.append(f"**Counters during the measured seconds**\n\n{counters_table(chosen)}")
        if made_by is not None:
            parts.append(made_by(chosen))
    regime = regime_table(runs)
    if regime:
        parts += [f"{heading}The regime search: OTCP against default", regime, regime_finding(runs)]
        if made_by is not None:
            parts.append(made_by([r for r in runs if r["query_senders"]]))
    return "\n\n".join(parts)


def ratio(default: float | None, other: float | None) -> float | None:
    """default / other, None where either is missing (or other is 0)."""
    return None if default is None or not other else default / other


@dataclasses.dataclass(frozen=True)
class Regime:
    """One point's OTCP scheme against default: QCT and response FCT, mean and p95, as ratios
    (default over the scheme: above 1, the scheme is faster)."""

    point: Point
    scheme: str
    qct_mean: float | None
    qct_p95: float | None
    fct_mean: float | None
    fct_p95: float | None
    default: Run
    other: Run


def regimes(runs: Sequence[Run]) -> list[Regime]:
    """Every point with queries that default and an OTCP scheme both ran."""
    found = []
    for point, chosen in by_point(r for r in runs if r["query_senders"]).items():
        default = next((r for r in chosen if r["scheme"] == "default"), None)
        if default is None:
            continue
        for other in (r for r in chosen if r["scheme"].startswith("otcp")):
            dq, oq, dr, orr = default["queries"], other["queries"], default["responses"], other["responses"]
            found.append(Regime(point, other["scheme"], ratio(dq["qct_mean_ms"], oq["qct_mean_ms"]),
                                ratio(dq["qct_p95_ms"], oq["qct_p95_ms"]),
                                ratio(dr["fct_mean_ms"], orr["fct_mean_ms"]),
                                ratio(dr["fct_p95_ms"], orr["fct_p95_ms"]), default, other))
    return found


def regime_table(runs: Sequence[Run]) -> str:
    """The regime search's table: a row per point and OTCP scheme ("" with fewer than two points)."""
    found = regimes(runs)
    if len({regime.point for regime in found}) < 2:
        return ""
    rows = []
    for regime in found:
        topo, buffer_bytes, fan_in, response_bytes = regime.point
        dq, oq = regime.default["queries"], regime.other["queries"]
        rows.append([topo or "-", f"{buffer_bytes // 1000} kB", str(fan_in), str(response_bytes), regime.scheme,
                     f"{number(dq['qct_mean_ms'])} / {number(dq['qct_p95_ms'])}",
                     f"{number(oq['qct_mean_ms'])} / {number(oq['qct_p95_ms'])}",
                     f"{number(regime.qct_mean)}x / {number(regime.qct_p95)}x",
                     f"{number(regime.fct_mean)}x / {number(regime.fct_p95)}x",
                     f"{dq['timeouts']} / {oq['timeouts']} of {dq['count']}"])
    return markdown(["fabric", "buffer", "fan-in", "response B", "scheme", "default QCT mean / p95 (ms)",
                     "scheme QCT mean / p95 (ms)", "QCT ratio mean / p95", "response FCT ratio mean / p95",
                     "queries with an RTO: default / scheme"], rows)


def regime_finding(runs: Sequence[Run]) -> str:
    """The largest ratios the regime search reached for otcp, where, and whether they reach the
    paper's; with the measured facts at the point of the largest p95 ratio."""
    found = [r for r in regimes(runs) if r.scheme == "otcp"] or regimes(runs)
    if not found:
        return ""
    lines = []
    for label, key, paper in (("mean", "mean", PAPER_MEAN_RATIO), ("p95", "p95", PAPER_P95_RATIO)):
        for measure in ("qct", "fct"):
            best = max(found, key=lambda r: getattr(r, f"{measure}_{key}") or 0.0)
            value = getattr(best, f"{measure}_{key}")
            what = "QCT" if measure == "qct" else "response FCT"
            reached = "reaches" if value is not None and value >= paper else "does not reach"
            lines.append(f"- largest {what} ratio at the {label}, {best.scheme} against default: "
                         f"{number(value)}x at {point_title(best.point)}; it {reached} the paper's {paper:g}x")
    best = max(found, key=lambda r: r.qct_p95 or 0.0)
    dq, oq = best.default["queries"], best.other["queries"]
    lines.append(f"- at that point default's p95 QCT is {number(dq['qct_p95_ms'])} ms with {dq['timeouts']} of "
                 f"{dq['count']} queries seeing a retransmission timeout and {best.default['drops']} drops; "
                 f"{best.scheme}'s is {number(oq['qct_p95_ms'])} ms with {oq['timeouts']} and "
                 f"{best.other['drops']} drops")
    lines.append(f"- the aggregator's queue there averaged {queue_text(best.default)} under default and "
                 f"{queue_text(best.other)} under {best.scheme}: what a response waits behind without a timeout")
    return "\n".join(lines)


def queue_text(run: Run) -> str:
    """A run's mean queue at the aggregator in kB and in ms at its measured ceiling."""
    wait_ms = run["mean_backlog_bytes"] * 8 / (run["ceiling_mbps"] * 1e6) * 1000
    return f"{run['mean_backlog_bytes'] / 1000:.1f} kB ({wait_ms:.1f} ms at {run['ceiling_mbps']:.1f} Mb/s)"


@dataclasses.dataclass(frozen=True)
class Tradeoff:
    """One scheme in both experiments: goodput on synchronized reads (share of the ceiling) and
    that run's drops and RTOs at the incast sweep's most senders; the workload's p99 slowdown of
    short flows, its p99 QCT, drops and RTOs."""

    scheme: str
    senders: int | None
    goodput_share: float | None
    incast_drops: int | None
    incast_timeouts: int | None
    short_slowdown_p99: float | None
    qct_p99_ms: float | None
    workload_drops: int | None
    workload_timeouts: int | None


def tradeoff_rows(incast_runs: Sequence[Run], workload_runs: Sequence[Run]) -> list[Tradeoff]:
    """A Tradeoff per scheme either experiment ran (the incast runs at their most senders and the
    shallowest buffer; the workload's point with a flow mix that the most schemes ran, the first
    given of those, else its first point)."""
    incast = {r["scheme"]: r for r in tradeoff_incast(incast_runs)}
    work = {r["scheme"]: r for r in tradeoff_point(workload_runs)}
    rows = []
    for scheme in sorted(set(incast) | set(work), key=scheme_order):
        i, w = incast.get(scheme), work.get(scheme)
        short = w["short_flows"] if w else None
        rows.append(Tradeoff(
            scheme, i["senders"] if i else None, i["goodput_mbps"] / i["ceiling_mbps"] if i else None,
            i["drops"] if i else None, i["timeouts"] if i else None,
            short["slowdown_p99"] if short and short["flows"] else None,
            w["queries"]["qct_p99_ms"] if w and w["queries"]["count"] else None,
            w["drops"] if w else None, w["timeouts"] if w else None))
    return rows


def tradeoff_incast(runs: Sequence[Run]) -> list[Run]:
    """The incast runs the trade-off shows: those at the most senders of the shallowest buffer."""
    if not runs:
        return []
    buffer_bytes = min(r["buffer_bytes"] for r in runs)
    most = max(r["senders"] for r in runs if r["buffer_bytes"] == buffer_bytes)
    return [r for r in runs if (r["buffer_bytes"], r["senders"]) == (buffer_bytes, most)]


def tradeoff_point(runs: Sequence[Run]) -> list[Run]:
    """The workload runs the trade-off shows: those of the point with a flow mix that the most
    schemes ran (the first given of those; without a mix, the first point given)."""
    points: dict[Point, list[Run]] = {}
    for run in runs:
        points.setdefault(point_of(run), []).append(run)
    with_mix = [chosen for chosen in points.values() if any(run["flows"] for run in chosen)]
    return max(with_mix, key=len) if with_mix else next(iter(points.values()), [])


def tradeoff_table(rows: Sequence[Tradeoff]) -> str:
    """The trade-off as a Markdown table."""
    senders = next((row.senders for row in rows if row.senders), None)
    def cell(value: int | None) -> str:
        return "-" if value is None else str(value)
    return markdown(
        ["scheme", f"incast goodput, {senders} senders" if senders else "incast goodput", "incast drops / RTOs",
         f"p99 slowdown, flows < {SHORT_FLOW_BYTES // 1000} kB", "p99 QCT (ms)", "workload drops / RTOs"],
        ([row.scheme, "-" if row.goodput_share is None else f"{100 * row.goodput_share:.0f} %",
          f"{cell(row.incast_drops)} / {cell(row.incast_timeouts)}", number(row.short_slowdown_p99),
          number(row.qct_p99_ms), f"{cell(row.workload_drops)} / {cell(row.workload_timeouts)}"] for row in rows))
