"""The planner's terms per edge-switch pair: window lines that never win the minimum are left
out (planner._undominated), and the minimum over the rest is the same number. How route
parameters are numbered (planner._numbered) and put on the safe side (planner._safe_side)."""

import numpy as np
import pytest

from otcp.planning import formulas, planner
from otcp.planning.planner import _numbered, _safe_side, _undominated
from otcp.wire.paramset import PARAMETER_KEYS


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


def random_route_fields(rng: np.random.Generator, count: int, spread: int) -> dict[str, np.ndarray]:
    """Route fields as the planner gives them: some alike everywhere (null long-path fields,
    quickack on), some with a few values, one with spread values; 0 for no route."""
    fields = {name: np.zeros(count, dtype=np.int64) for name in PARAMETER_KEYS}
    fields["rto_min_ms"] = rng.choice([0, 5, 7, 200], size=count)
    fields["initcwnd"] = rng.choice([10, 4, 64], size=count)
    fields["cwnd_clamp"] = rng.choice([0, 30, 31, 120], size=count)
    fields["pacing_rate"] = rng.integers(0, spread, size=count) * 1000
    fields["quickack"] = np.ones(count, dtype=np.int64)
    return fields


@pytest.mark.parametrize("spread", [3, 5000])
def test_numbering_is_the_order_of_the_distinct_tuples(monkeypatch, spread):
    """The numbers are the ranks of the distinct field tuples in their order, whether or not the
    mixed-radix numbers outgrow the numbering table (made small here) and fields are alike."""
    monkeypatch.setattr(planner, "_NUMBERING_TABLE", 1 << 6)
    rng = np.random.default_rng(spread)
    fields = random_route_fields(rng, 4000, spread)
    labels, params = _numbered(fields)
    tuples = np.stack([fields[name] for name in PARAMETER_KEYS], axis=1)
    distinct, expected = np.unique(tuples, axis=0, return_inverse=True)
    assert np.array_equal(labels, expected.reshape(-1)) and len(params) == len(distinct)
    for label, row in zip(labels[:50].tolist(), tuples[:50].tolist()):
        assert params[label][:2] == tuple(row[:2]) and params[label][2] == (row[2] or None)
    empty_labels, empty_params = _numbered({name: values[:0] for name, values in fields.items()})
    assert len(empty_labels) == 0 and empty_params == []


def test_a_field_left_out_of_the_safe_side_is_null_there():
    """_safe_side of fields with those null in every element left out is the same as with them given."""
    rng = np.random.default_rng(3)
    fields = random_route_fields(rng, 3000, 4)
    starts = np.unique(np.concatenate([[0], rng.integers(1, 3000, size=400)]))
    every = _safe_side(fields, starts)
    null = [name for name in PARAMETER_KEYS if name != "rto_min_ms" and not fields[name].any()]
    assert null
    some = _safe_side({name: values for name, values in fields.items() if name not in null}, starts)
    assert every.keys() == some.keys()
    for name in every:
        assert every[name].dtype == some[name].dtype and np.array_equal(every[name], some[name])
