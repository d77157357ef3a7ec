"""The planner's terms per edge-switch pair: window lines that never win the minimum are left
out (planner._undominated), and the minimum over the rest is the same number."""

import numpy as np

from otcp.planning import formulas
from otcp.planning.planner import _undominated


def test_the_minimum_over_the_lines_kept_is_the_minimum_over_all():
    rng = np.random.default_rng(11)
    entities, columns = 500, 5
    # Few distinct values, so equal lines and equal slopes or offsets are common; some infinite offsets.
    slope = rng.choice([0.0, 1.25e6, 1.25e7, 6.25e6], size=(2, columns, entities))
    offset = rng.choice([0.0, 2.0e4, 8.5e4, np.inf], size=(2, columns, entities))
    kept_slope, kept_offset = _undominated(slope, offset)
    assert kept_slope.shape[1] < columns
    for rtt in (0.0, 1e-6, 3.7e-5, 1e-3, np.array(rng.uniform(0, 1e-3, entities))):
        for sharing in range(2):
            every = formulas.max_window_bytes(slope[sharing].T, offset[sharing].T, rtt)
            kept = formulas.max_window_bytes(kept_slope[sharing].T, kept_offset[sharing].T, rtt)
            assert np.array_equal(every, kept)


def test_lines_of_one_entity_alike_keep_one():
    slope = np.full((2, 4, 3), 1.25e7)
    offset = np.full((2, 4, 3), 8.5e4)
    offset[:, 2, 1] = np.inf  # never finite: left out
    kept_slope, kept_offset = _undominated(slope, offset)
    assert kept_slope.shape == (2, 1, 3) and (kept_offset == 8.5e4).all()
