"""The flow-size distributions and the arrival generator: hand-worked cases, seeds, and
Kolmogorov-Smirnov checks that fail on a wrong distribution or rate."""

import math
import random
from collections import Counter

import pytest

from otcp.experiments.traffic import arrivals, distributions
from otcp.experiments.traffic.distributions import DistributionError, FlowSizes

HOSTS = [f"h{i}" for i in range(1, 9)]
LINK = 25e6 / 8  # 25 Mb/s in bytes per second


def ks_statistic(samples, cdf):
    """The two-sided Kolmogorov-Smirnov distance of samples from a continuous cdf."""
    ordered = sorted(samples)
    n = len(ordered)
    return max(max((i + 1) / n - cdf(x), cdf(x) - i / n) for i, x in enumerate(ordered))


def ks_p_value(d, n):
    """P(D >= d) under the null, Kolmogorov's limit with Stephens' small-sample correction."""
    t = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    return max(0.0, min(1.0, 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * t * t) for k in range(1, 101))))


def test_ks_p_value_matches_the_known_critical_values():
    # The asymptotic 5 % and 1 % critical values are 1.358 / sqrt(n) and 1.628 / sqrt(n).
    n = 10000
    assert ks_p_value(1.358 / math.sqrt(n), n) == pytest.approx(0.05, abs=0.002)
    assert ks_p_value(1.628 / math.sqrt(n), n) == pytest.approx(0.01, abs=0.001)


def test_the_shipped_distributions_load_with_their_sources():
    web = distributions.load("websearch")
    mining = distributions.load("datamining")
    assert web.points[0] == (8760, 0.15) and web.points[-1] == (29_200_000, 1.0)
    assert mining.points[0] == (1460, 0.5) and mining.points[-1] == (973_333_820, 1.0)
    assert "Data Center TCP (DCTCP)" in web.source and "SIGCOMM 2010" in web.source
    assert "VL2" in mining.source and "SIGCOMM 2009" in mining.source
    # The means the files' headers state.
    assert web.mean_bytes == pytest.approx(1.67e6, rel=0.005)
    assert mining.mean_bytes == pytest.approx(7.47e6, rel=0.005)
    with pytest.raises(DistributionError, match="no flow-size distribution 'hadoop'"):
        distributions.load("hadoop")


def test_hand_worked_quantiles_cdf_and_mean():
    sizes = FlowSizes("two", "by hand", ((100, 0.5), (300, 1.0)))
    assert sizes.quantile(0.0) == sizes.quantile(0.5) == 100  # the atom
    assert sizes.quantile(0.75) == 200
    assert sizes.quantile(1.0) == 300
    assert sizes.cdf(99) == 0 and sizes.cdf(100) == 0.5 and sizes.cdf(200) == 0.75 and sizes.cdf(300) == 1
    assert sizes.mean_bytes == 0.5 * 100 + 0.5 * 200
    assert sizes.sample(0.76) == 204  # 100 + 200 x 0.26 / 0.5
    doubled = sizes.scaled(2)
    assert doubled.points == ((200, 0.5), (600, 1.0)) and doubled.scale == 2 and doubled.mean_bytes == 300
    assert sizes.scaled(0.001).sample(0.1) == 1  # never below one byte


@pytest.mark.parametrize("text, problem", [
    ("100 0.5\n50 1.0\n", "does not follow"),
    ("100 0.5\n200 0.4\n", "does not follow"),
    ("100 0.5\n200 0.9\n", "last fraction is 0.9"),
    ("100 0.5 7\n", "line 1"),
    ("100 nan\n", "not a finite number"),
    ("# only a comment\n", "no points"),
])
def test_a_file_that_is_not_a_cdf_is_refused_naming_where(text, problem):
    with pytest.raises(DistributionError, match=problem):
        distributions.parse(text, "bad.cdf")


def test_bad_scale_and_fraction_are_refused():
    sizes = distributions.load("websearch")
    for factor in (0, -1, float("nan"), float("inf"), True):
        with pytest.raises(DistributionError):
            sizes.scaled(factor)
    with pytest.raises(ValueError):
        sizes.quantile(1.5)


def conditional_cdf(sizes):
    """The CDF of sizes above its atom (the continuous part)."""
    atom = sizes.fractions[0]
    return lambda x: (sizes.cdf(x) - atom) / (1 - atom)


@pytest.mark.parametrize("name", distributions.NAMES)
def test_sampled_sizes_follow_the_distribution(name):
    sizes = distributions.load(name)
    rng = random.Random(7)
    drawn = [sizes.sample(rng.random()) for _ in range(20000)]
    atom = sum(1 for size in drawn if size == sizes.sizes[0]) / len(drawn)
    share = sizes.fractions[0]
    assert abs(atom - share) < 4 * math.sqrt(share * (1 - share) / len(drawn))
    above = [size for size in drawn if size > sizes.sizes[0]]
    assert ks_p_value(ks_statistic(above, conditional_cdf(sizes)), len(above)) > 0.001


def test_the_ks_check_rejects_sizes_from_another_distribution():
    sizes = distributions.load("websearch")
    rng = random.Random(7)
    wrong = sizes.scaled(1.1)
    drawn = [wrong.sample(rng.random()) for _ in range(20000)]
    above = [size for size in drawn if size > wrong.sizes[0]]
    assert ks_p_value(ks_statistic(above, conditional_cdf(sizes)), len(above)) < 1e-6


def exponential_cdf(rate):
    return lambda gap: 1 - math.exp(-rate * gap)


def test_poisson_arrivals_have_exponential_gaps_and_the_right_count():
    rate, duration = 200.0, 100.0
    times = arrivals.poisson_times(rate, duration, random.Random(3))
    assert all(0 <= t < duration for t in times) and times == sorted(times)
    expected = rate * duration
    assert abs(len(times) - expected) < 4 * math.sqrt(expected)
    gaps = [b - a for a, b in zip([0.0] + times, times)]
    assert ks_p_value(ks_statistic(gaps, exponential_cdf(rate)), len(gaps)) > 0.001
    # The same check tells a rate 10 % off.
    assert ks_p_value(ks_statistic(gaps, exponential_cdf(rate * 1.1)), len(gaps)) < 1e-6


def test_the_mix_offers_the_load_hand_worked():
    sizes = FlowSizes("two", "by hand", ((100, 0.5), (300, 1.0)))  # mean 150 B
    mix = arrivals.Mix(sizes, 0.5, 1500.0)
    # 4 hosts x 0.5 x 1500 B/s / 150 B = 20 flows per second.
    assert mix.rate_per_s(4) == 20.0
    assert arrivals.query_rate_for_load(0.2, 8, 2000, LINK) == pytest.approx(0.2 * LINK / 16000)


def test_mix_flows_offer_the_load_between_uniform_pairs():
    mix = arrivals.Mix(distributions.load("websearch").scaled(0.1), 0.5, LINK)
    schedule = arrivals.generate(HOSTS, 200.0, seed=5, mix=mix)
    flows = schedule.flows
    assert all(flow.src != flow.dst for flow in flows)
    offered = sum(flow.size_bytes for flow in flows) / (200.0 * len(HOSTS) * LINK)
    assert offered == pytest.approx(0.5, rel=0.1)  # heavy-tailed sizes: a loose check
    expected = mix.rate_per_s(len(HOSTS)) * 200.0
    assert abs(len(flows) - expected) < 4 * math.sqrt(expected)
    for side in ("src", "dst"):
        counts = Counter(getattr(flow, side) for flow in flows)
        share = len(flows) / len(HOSTS)
        assert all(abs(counts[host] - share) < 5 * math.sqrt(share) for host in HOSTS), counts
    assert [flow.id for flow in flows] == list(range(len(flows)))


def test_the_seed_fixes_the_schedule_and_each_part_has_its_own_stream():
    mix = arrivals.Mix(distributions.load("datamining").scaled(0.01), 0.3, LINK)
    queries = arrivals.Queries("h1", 4, 2000, 5.0)
    first = arrivals.generate(HOSTS, 10.0, seed=1, mix=mix, queries=queries)
    assert first == arrivals.generate(HOSTS, 10.0, seed=1, mix=mix, queries=queries)
    assert first.flows != arrivals.generate(HOSTS, 10.0, seed=2, mix=mix, queries=queries).flows
    # Adding or dropping the queries leaves the mix's flows as they were; a warm-up stream differs.
    assert arrivals.generate(HOSTS, 10.0, seed=1, mix=mix).flows == first.flows
    assert arrivals.generate(HOSTS, 10.0, seed=1, stream="warmup-1", mix=mix).flows != first.flows


def test_queries_ask_distinct_responders_other_than_the_aggregator():
    queries = arrivals.Queries("h1", 5, 2000, 20.0)
    schedule = arrivals.generate(HOSTS, 20.0, seed=9, queries=queries,
                                 background=arrivals.Background("h1", 2))
    assert schedule.queries and all(len(set(q.responders)) == 5 and "h1" not in q.responders
                                    for q in schedule.queries)
    assert abs(len(schedule.queries) - 400) < 4 * math.sqrt(400)
    assert len(schedule.background) == 2 and all(f.dst == "h1" and f.src != "h1" for f in schedule.background)
    assert schedule.queries_of("h1") == list(schedule.queries) and schedule.queries_of("h2") == []


@pytest.mark.parametrize("call, problem", [
    (lambda: arrivals.Queries("h1", 8, 2000, 5.0), None),
    (lambda: arrivals.generate(HOSTS, 1.0, 1, queries=arrivals.Queries("h1", 8, 2000, 5.0)), "fan-in of 8"),
    (lambda: arrivals.Queries("h1", 0, 2000, 5.0), "fan-in"),
    (lambda: arrivals.Queries("h1", 2, 2000, float("nan")), "query rate"),
    (lambda: arrivals.Mix(distributions.load("websearch"), 0, LINK), "load"),
    (lambda: arrivals.generate(HOSTS, 0, 1), "duration"),
    (lambda: arrivals.generate(HOSTS, 1.0, True), "seed"),
    (lambda: arrivals.generate(["h1", "h1"], 1.0, 1), "twice"),
])
def test_bad_specifications_are_refused_naming_what(call, problem):
    if problem is None:
        call()
        return
    with pytest.raises(ValueError, match=problem):
        call()
