"""Open-loop arrivals: the seeded schedule of flows and queries every scheme runs.

``generate(hosts, duration_s, seed, mix=..., queries=..., background=...)``
returns a ``Schedule``:

- the **mix** (``Mix``): flows arriving as a Poisson process, each from a
  host drawn uniformly to another drawn uniformly among the rest, its size
  drawn from a flow-size distribution (``traffic.distributions``). The rate
  makes every host send, on average, ``load`` times its link rate in
  application bytes, so every host link carries that load in each direction
  (in expectation; TCP/IP and Ethernet headers add about 4.6 % on the wire
  at full-sized segments);
- **queries** (``Queries``): partition-aggregate requests arriving as a
  Poisson process at ``rate_per_s``; each asks ``fan_in`` responders, drawn
  without replacement from the hosts other than the aggregator, for
  ``response_bytes`` each, all at once;
- **background** (``Background``): long-lived flows into one host from
  senders drawn without replacement from the others, running the whole time.

Every part draws from its own random stream, named by the seed, the
stream (``"measured"``, ``"warmup"``, ...) and the part, so the same seed
gives the same flows whether or not queries are added, and a warm-up never
repeats the measured arrivals. Pure: no network, no clock; times are
seconds from the schedule's start. A simulator and the Mininet runner read
the same schedule.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence

from otcp.experiments.traffic.distributions import FlowSizes


def _positive(value: float, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive number, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Mix:
    """Flows of a size distribution at a load: sizes, load (0 < load, a share of link_bytes_per_s that
    every host offers on average), and the hosts' link rate in bytes per second."""

    sizes: FlowSizes
    load: float
    link_bytes_per_s: float

    def __post_init__(self) -> None:
        _positive(self.load, "the load")
        _positive(self.link_bytes_per_s, "the link rate")

    def rate_per_s(self, hosts: int) -> float:
        """Flow arrivals per second over all hosts: hosts x load x link rate / mean flow size."""
        return hosts * self.load * self.link_bytes_per_s / self.sizes.mean_bytes


@dataclasses.dataclass(frozen=True)
class Queries:
    """Partition-aggregate queries into aggregator: fan_in responders of response_bytes each,
    rate_per_s queries per second."""

    aggregator: str
    fan_in: int
    response_bytes: int
    rate_per_s: float

    def __post_init__(self) -> None:
        for value, what in ((self.fan_in, "the fan-in"), (self.response_bytes, "the response size")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{what} must be a positive integer, got {value!r}")
        _positive(self.rate_per_s, "the query rate")


def query_rate_for_load(load: float, fan_in: int, response_bytes: int, link_bytes_per_s: float) -> float:
    """Queries per second whose responses offer load (a share) of the aggregator's link."""
    _positive(load, "the query load")
    return load * link_bytes_per_s / (fan_in * response_bytes)


@dataclasses.dataclass(frozen=True)
class Background:
    """count long-lived flows into receiver, each from another host."""

    receiver: str
    count: int

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"the background flow count must be a positive integer, got {self.count!r}")


@dataclasses.dataclass(frozen=True)
class Flow:
    """One flow of the mix: its number, when it starts (s from the schedule's start), the host
    that sends it, the host that receives it, and its size in bytes."""

    id: int
    start_s: float
    src: str
    dst: str
    size_bytes: int


@dataclasses.dataclass(frozen=True)
class Query:
    """One query: its number, when it starts, its aggregator, its responders (each sends
    response_bytes to the aggregator) and the response size."""

    id: int
    start_s: float
    aggregator: str
    responders: tuple[str, ...]
    response_bytes: int


@dataclasses.dataclass(frozen=True)
class LongFlow:
    """A long-lived background flow: its sender and receiver."""

    src: str
    dst: str


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Everything a run offers, in time order: the mix's flows, the queries and the long-lived
    flows, over duration_s seconds, drawn with seed on stream."""

    duration_s: float
    seed: int
    stream: str
    flows: tuple[Flow, ...] = ()
    queries: tuple[Query, ...] = ()
    background: tuple[LongFlow, ...] = ()

    def flows_into(self, host: str) -> list[Flow]:
        """The mix's flows host receives."""
        return [flow for flow in self.flows if flow.dst == host]

    def queries_of(self, host: str) -> list[Query]:
        """The queries host aggregates."""
        return [query for query in self.queries if query.aggregator == host]

    def background_into(self, host: str) -> list[LongFlow]:
        """The long-lived flows host receives."""
        return [flow for flow in self.background if flow.dst == host]


def stream_random(seed: int, stream: str, part: str) -> random.Random:
    """The random generator of one part ("flows", "queries", "background") of one stream."""
    return random.Random(f"otcp-workload:{seed}:{stream}:{part}")


def poisson_times(rate_per_s: float, duration_s: float, rng: random.Random) -> list[float]:
    """Arrival times of a Poisson process of rate_per_s in [0, duration_s): exponential gaps."""
    _positive(rate_per_s, "the arrival rate")
    times, now = [], rng.expovariate(rate_per_s)
    while now < duration_s:
        times.append(now)
        now += rng.expovariate(rate_per_s)
    return times


def mix_flows(hosts: Sequence[str], mix: Mix, duration_s: float, rng: random.Random) -> list[Flow]:
    """The mix's flows over duration_s (see the module docstring)."""
    if len(hosts) < 2:
        raise ValueError(f"a flow mix needs two hosts at least, got {list(hosts)}")
    flows = []
    for number, start in enumerate(poisson_times(mix.rate_per_s(len(hosts)), duration_s, rng)):
        src = rng.choice(hosts)
        dst = rng.choice([host for host in hosts if host != src])
        flows.append(Flow(number, start, src, dst, mix.sizes.sample(rng.random())))
    return flows


def query_arrivals(hosts: Sequence[str], queries: Queries, duration_s: float, rng: random.Random) -> list[Query]:
    """The queries over duration_s (see the module docstring)."""
    candidates = [host for host in hosts if host != queries.aggregator]
    if queries.aggregator not in hosts or queries.fan_in > len(candidates):
        raise ValueError(f"a fan-in of {queries.fan_in} into {queries.aggregator} needs that many other hosts; "
                         f"there are {len(candidates)}")
    return [Query(number, start, queries.aggregator, tuple(rng.sample(candidates, queries.fan_in)),
                  queries.response_bytes)
            for number, start in enumerate(poisson_times(queries.rate_per_s, duration_s, rng))]


def long_flows(hosts: Sequence[str], background: Background, rng: random.Random) -> list[LongFlow]:
    """The long-lived flows: background.count senders drawn from the hosts but the receiver."""
    candidates = [host for host in hosts if host != background.receiver]
    if background.receiver not in hosts or background.count > len(candidates):
        raise ValueError(f"{background.count} long-lived flows into {background.receiver} need that many other "
                         f"hosts; there are {len(candidates)}")
    return [LongFlow(src, background.receiver) for src in rng.sample(candidates, background.count)]


def generate(hosts: Sequence[str], duration_s: float, seed: int, stream: str = "measured", mix: Mix | None = None,
             queries: Queries | None = None, background: Background | None = None) -> Schedule:
    """The schedule of one run (see the module docstring); hosts in a fixed order (draws index it)."""
    _positive(duration_s, "the duration")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"the seed must be an integer, got {seed!r}")
    hosts = list(hosts)
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"hosts listed twice: {hosts}")
    return Schedule(
        duration_s, seed, stream,
        flows=tuple(mix_flows(hosts, mix, duration_s, stream_random(seed, stream, "flows"))) if mix else (),
        queries=tuple(query_arrivals(hosts, queries, duration_s, stream_random(seed, stream, "queries")))
        if queries else (),
        background=tuple(long_flows(hosts, background, stream_random(seed, stream, "background")))
        if background else ())
