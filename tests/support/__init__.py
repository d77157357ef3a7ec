"""What the tests share: fixtures, fakes, namespaces and the reference planner
(the slow, one-pair-at-a-time oracle)."""
