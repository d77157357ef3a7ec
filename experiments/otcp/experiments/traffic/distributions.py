"""Flow-size distributions: published CDFs, shipped as files, sampled by inverse transform.

A distribution is a list of points (size in bytes, cumulative fraction of
flows), read from ``cdfs/NAME.cdf`` (package data, each with its source in
its header): ``websearch`` (DCTCP, Alizadeh et al. 2010) and ``datamining``
(VL2, Greenberg et al. 2009). Between two points the CDF is linear in size;
the first point's fraction is the share of flows of exactly its size (an
atom: 15 % of web-search flows are 6 packets). ``FlowSizes.scaled(f)``
multiplies every size by f, for an emulator that cannot carry the published
sizes at its rate (the caller says so in its results).

Pure: no network, no clock; randomness comes in as uniform numbers, so a
simulator and the Mininet runner draw the same sizes from the same seed.
"""

from __future__ import annotations

import bisect
import dataclasses
import importlib.resources
import math
from collections.abc import Sequence

#: The distributions shipped with the package, by name.
NAMES = ("websearch", "datamining")


class DistributionError(ValueError):
    """A CDF that is not one: names the file (or the caller's label) and the line or point."""


@dataclasses.dataclass(frozen=True)
class FlowSizes:
    """One flow-size distribution: its name, where its points come from (the CDF file's header),
    the points (size in bytes, cumulative fraction), strictly increasing in both, the last
    fraction 1, and the factor its published sizes were multiplied by."""

    name: str
    source: str
    points: tuple[tuple[float, float], ...]
    scale: float = 1.0

    def __post_init__(self) -> None:
        check_points(self.points, self.name)
        if not (math.isfinite(self.scale) and self.scale > 0) or isinstance(self.scale, bool):
            raise DistributionError(f"{self.name}: scale must be a positive number, got {self.scale!r}")

    @property
    def sizes(self) -> tuple[float, ...]:
        """The points' sizes (bytes)."""
        return tuple(size for size, _ in self.points)

    @property
    def fractions(self) -> tuple[float, ...]:
        """The points' cumulative fractions."""
        return tuple(fraction for _, fraction in self.points)

    def scaled(self, factor: float) -> FlowSizes:
        """The same distribution with every size multiplied by factor (> 0)."""
        if isinstance(factor, bool) or not (math.isfinite(factor) and factor > 0):
            raise DistributionError(f"{self.name}: the size scale must be a positive number, got {factor!r}")
        return FlowSizes(self.name, self.source, tuple((size * factor, f) for size, f in self.points),
                         self.scale * factor)

    def quantile(self, u: float) -> float:
        """The size (bytes, not rounded) at cumulative fraction u, 0 <= u <= 1: the inverse CDF."""
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"a cumulative fraction is within 0..1, got {u!r}")
        sizes, fractions = self.sizes, self.fractions
        if u <= fractions[0]:
            return sizes[0]
        i = bisect.bisect_left(fractions, u)
        low, high = fractions[i - 1], fractions[i]
        return sizes[i - 1] + (sizes[i] - sizes[i - 1]) * (u - low) / (high - low)

    def sample(self, u: float) -> int:
        """A flow size in whole bytes (at least 1) for a uniform number u in [0, 1)."""
        return max(1, round(self.quantile(u)))

    def cdf(self, size: float) -> float:
        """The share of flows of at most size bytes (the atom at the first point included)."""
        sizes, fractions = self.sizes, self.fractions
        if size < sizes[0]:
            return 0.0
        if size >= sizes[-1]:
            return 1.0
        i = bisect.bisect_right(sizes, size)
        return fractions[i - 1] + (fractions[i] - fractions[i - 1]) * (size - sizes[i - 1]) / (sizes[i] - sizes[i - 1])

    @property
    def mean_bytes(self) -> float:
        """The mean flow size (bytes): the atom, plus each segment's share times its midpoint."""
        sizes, fractions = self.sizes, self.fractions
        total = fractions[0] * sizes[0]
        for i in range(1, len(sizes)):
            total += (fractions[i] - fractions[i - 1]) * (sizes[i] + sizes[i - 1]) / 2
        return total


def check_points(points: Sequence[tuple[float, float]], where: str) -> None:
    """Raise DistributionError unless points is a CDF: at least one point, sizes positive and
    strictly increasing, fractions within (0, 1], strictly increasing and ending at 1."""
    if not points:
        raise DistributionError(f"{where}: no points")
    previous = (0.0, 0.0)
    for index, (size, fraction) in enumerate(points):
        for value in (size, fraction):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise DistributionError(f"{where}: point {index + 1}: {value!r} is not a finite number")
        if size <= previous[0] or (index and fraction <= previous[1]) or not 0 < fraction <= 1:
            raise DistributionError(f"{where}: point {index + 1} ({size:g} B, {fraction:g}) does not follow "
                                    f"({previous[0]:g} B, {previous[1]:g}): sizes and fractions must increase, "
                                    "fractions within (0, 1]")
        previous = (size, fraction)
    if previous[1] != 1.0:
        raise DistributionError(f"{where}: the last fraction is {previous[1]:g}, not 1")


def parse(text: str, name: str) -> FlowSizes:
    """A FlowSizes from a CDF file's text: the '#' lines up to the first empty one are its
    source (kept, without the '#'), other '#' lines comments; every other non-empty line is
    "size_bytes cumulative_fraction"."""
    source: list[str] = []
    points: list[tuple[float, float]] = []
    in_source = True
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            comment = stripped.lstrip("#").strip()
            in_source = in_source and bool(comment)
            if in_source:
                source.append(comment)
            continue
        if not stripped:
            continue
        fields = stripped.split()
        try:
            if len(fields) != 2:
                raise ValueError(f"expected two fields, got {len(fields)}")
            points.append((float(fields[0]), float(fields[1])))
        except ValueError as exc:
            raise DistributionError(f"{name}: line {number}: {stripped!r}: {exc}") from None
    return FlowSizes(name, " ".join(source), tuple(points))


def load(name: str) -> FlowSizes:
    """The shipped distribution called name (one of NAMES)."""
    if name not in NAMES:
        raise DistributionError(f"no flow-size distribution {name!r}; shipped: {', '.join(NAMES)}")
    text = importlib.resources.files(__package__).joinpath("cdfs").joinpath(f"{name}.cdf").read_text(encoding="utf-8")
    return parse(text, name)
