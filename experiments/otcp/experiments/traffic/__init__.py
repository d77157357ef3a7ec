"""What a workload offers, independent of any network: flow-size distributions and seeded arrivals.

- ``distributions``: the published flow-size CDFs (``cdfs/*.cdf``, each with its source), sampled;
- ``arrivals``: the seeded schedule of a run: the flow mix, queries and long-lived flows.

The Mininet runner (``otcp.experiments.workload``) and a simulator read the same schedule.
"""
