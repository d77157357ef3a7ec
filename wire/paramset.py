"""The parameter set: what the controller pushes to a host, and its rules.

The format (docs/design.md, "Parameter set")::

    {"generation": 7,
     "routes": [{"dst": "10.0.0.1/32", "rto_min_ms": 14, "initcwnd": 1,
                 "cwnd_clamp": 3, "advmss": null, "pacing_rate": null, "quickack": true}]}

Every key is required (``cwnd_clamp``, ``advmss`` and ``pacing_rate`` may be null). Destinations come back
as canonical prefixes; a destination without a prefix length is a host
route. `check_generation` is the one generation rule both peers use.
"""

import ipaddress
from typing import Annotated, Any

from pydantic import AfterValidator

import validation
from validation import Strict, ValidationError, int_range
from wire.limits import ADVMSS, CWND_CLAMP, GENERATION, INITCWND, MAX_FRAME_BYTES, PACING_RATE, RTO_MIN_MS

ROUTE_KEYS = ("dst", "rto_min_ms", "initcwnd", "cwnd_clamp", "advmss", "pacing_rate", "quickack")


def canonical_prefix(value: str) -> str:
    """'10.0.0.1' -> '10.0.0.1/32'; host bits, zone ids and junk refused."""
    if "%" in value:
        raise ValueError(f"{validation.show(value)} has a zone id; OTCP routes are global prefixes")
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as error:
        if "has host bits set" in str(error):
            raise ValueError(f"{validation.show(value)} has host bits set") from None
        raise ValueError(f"{validation.show(value)} is not an IPv4 or IPv6 prefix") from None


Prefix = Annotated[str, AfterValidator(canonical_prefix)]
Generation = int_range(*GENERATION)


class RouteParams(Strict):
    """The TCP parameters for one destination prefix."""

    dst: Prefix
    rto_min_ms: int_range(*RTO_MIN_MS)  # type: ignore[valid-type]
    initcwnd: int_range(*INITCWND)  # type: ignore[valid-type]
    cwnd_clamp: int_range(*CWND_CLAMP) | None  # type: ignore[valid-type]
    advmss: int_range(*ADVMSS) | None  # type: ignore[valid-type]
    pacing_rate: int_range(*PACING_RATE) | None  # type: ignore[valid-type]  # bytes/s; null: not paced
    quickack: bool


class ParamSet(Strict):
    """One host's parameters for one generation."""

    generation: Generation  # type: ignore[valid-type]
    routes: list[RouteParams]


def validate_param_set(param_set: Any) -> dict:
    """Check a parameter set completely; return it normalised as a dict.

    Unknown keys, wrong types (a bool is not an integer, 14.0 is not an
    integer), out-of-range values and malformed or duplicate destinations
    raise ValidationError naming the field.
    """
    if not isinstance(param_set, dict):
        raise ValidationError("", f"a parameter set is a JSON object, not {validation.json_type(param_set)}")
    checked = validation.check(ParamSet, param_set)
    seen: dict[str, int] = {}
    for i, route in enumerate(checked.routes):
        if route.dst in seen:
            raise ValidationError(f"routes[{i}].dst", f"{route.dst} duplicates routes[{seen[route.dst]}].dst")
        seen[route.dst] = i
    return checked.model_dump()


def parse_param_set(body: bytes, where: str = "parameter set") -> dict:
    """Bytes (a file, a frame) -> a validated set; size, JSON and fields checked."""
    if len(body) > MAX_FRAME_BYTES:
        raise ValidationError("", f"{where}: {len(body)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    try:
        param_set = validation.load_json(body, where)
    except validation.JSONError as error:
        raise ValidationError("", str(error)) from None
    if not isinstance(param_set, dict):
        raise ValidationError("", f"{where}: expected a JSON object, got {validation.json_type(param_set)}")
    return validate_param_set(param_set)


def claimed_generation(param_set: Any) -> int | None:
    """The generation a (possibly invalid) set claims, when it is a valid number; else None.

    What a reject message and a journal entry may quote of a refused set.
    """
    generation = param_set.get("generation") if isinstance(param_set, dict) else None
    low, high = GENERATION
    if isinstance(generation, int) and not isinstance(generation, bool) and low <= generation <= high:
        return generation
    return None


def same_routes(first: dict, second: dict | None) -> bool:
    """Whether two validated sets carry the same routes, in whatever order."""
    if second is None:
        return False
    return sorted(first["routes"], key=_by_destination) == sorted(second["routes"], key=_by_destination)


def _by_destination(route: dict) -> str:
    return route["dst"]


def check_generation(validated: dict, applied_generation: int | None, applied_set: dict | None = None) -> None:
    """The generation rule: a set must be newer than the applied generation.

    The one exception is the applied set itself, unchanged: re-applying it
    is allowed (a restarted agent does it from its state, and a controller
    re-sends its latest set when an agent reconnects), in any order. The
    same generation with different routes is refused.
    """
    if applied_generation is None:
        return
    generation = validated["generation"]
    if generation < applied_generation or (generation == applied_generation and applied_set is None):
        raise ValidationError(
            "generation", f"{generation} is not newer than the applied generation {applied_generation}"
        )
    if generation == applied_generation and not same_routes(validated, applied_set):
        raise ValidationError(
            "generation", f"{generation} was already applied with different routes; a change needs a newer generation"
        )
