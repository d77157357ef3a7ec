"""The parameter set: what the controller pushes to a host, and its rules.

The format (docs/design.md, "Parameter set")::

    {"generation": 7,
     "routes": [{"dst": "10.0.0.1/32", "rto_min_ms": 14, "initcwnd": 1,
                 "cwnd_clamp": 3, "advmss": null, "pacing_rate": null, "quickack": true}]}

Every key is required (``cwnd_clamp``, ``advmss`` and ``pacing_rate`` may be null). Destinations come back
as canonical prefixes; a destination without a prefix length is a host
route. `check_generation` is the one generation rule both peers use.
"""

import functools
import ipaddress
import operator
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator

from otcp.wire import framing, validation
from otcp.wire.limits import ADVMSS, CWND_CLAMP, GENERATION, INITCWND, MAX_FRAME_BYTES, PACING_RATE, RTO_MIN_MS
from otcp.wire.validation import Strict, ValidationError, int_range

ROUTE_KEYS = ("dst", "rto_min_ms", "initcwnd", "cwnd_clamp", "advmss", "pacing_rate", "quickack")


@functools.lru_cache(maxsize=1 << 16)
def canonical_prefix(value: str) -> str:
    """'10.0.0.1' -> '10.0.0.1/32'; host bits, zone ids and junk refused.

    Remembered (a pure function of the string; refusals are not kept): the
    controller validates every changed host's set before it publishes, about
    120 000 routes after one link failure at k=16, and ipaddress takes 15 us a prefix."""
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


def validate_param_set(param_set: Any, known: dict | None = None) -> dict:
    """Check a parameter set completely; return it normalised as a dict.

    Unknown keys, wrong types (a bool is not an integer, 14.0 is not an
    integer), out-of-range values and malformed or duplicate destinations
    raise ValidationError naming the field.

    known: a set validated before (the host's latest). A route equal to one of
    its routes, value for value and type for type, is valid already and is
    not checked again: after a link change most routes of a changed set are.
    A route that is normal already is kept as the object given, so that a
    caller that hands the same objects again (the planner makes each route
    once, and never changes it) has them recognised at once.
    """
    return validate_param_sets({"": param_set}, {"": known} if known is not None else {})[""]


def validate_param_sets(sets: Mapping[str, Any], known: Mapping[str, dict],
                        checked: dict[int, dict] | None = None) -> dict[str, dict]:
    """validate_param_set for each {key: set} against known[key] (its latest, if any): all
    valid, or ValidationError for the first that is not.

    checked: route objects validated already, by id, which the caller keeps unchanged; the
    dict keeps them alive, so no other object has their ids. Routes the call validates are
    added to it, so that a publication of many sets that share route objects checks each
    object once, and the next publication does not check them again."""
    checked = {} if checked is None else checked
    generations: set[int] = set()  # the generation values checked, of sets with no other key
    return {key: _validated(param_set, known.get(key), checked, generations) for key, param_set in sets.items()}


def _validated(param_set: Any, known: dict | None, checked: dict[int, dict], generations: set[int]) -> dict:
    """validate_param_set, with the route objects validated already (checked: the routes it
    validates are added) and the generations of two-key sets checked already."""
    if not isinstance(param_set, dict):
        raise ValidationError("", f"a parameter set is a JSON object, not {validation.json_type(param_set)}")
    routes = param_set.get("routes")
    if not isinstance(routes, list):  # refused, naming routes
        return validation.check(ParamSet, param_set).model_dump()
    new = [i for i, route in enumerate(routes) if id(route) not in checked]
    if new and known is not None:
        before = {route["dst"]: route for route in known["routes"]}
        checked.update((id(routes[i]), routes[i]) for i in new if _known_route(routes[i], before))
        new = [i for i in new if id(routes[i]) not in checked]
    generation = param_set.get("generation")
    normalised = list(routes)
    if new or type(generation) is not int or generation not in generations or len(param_set) != 2:
        try:
            model = validation.check(ParamSet, {**param_set, "routes": [routes[i] for i in new]})
        except ValidationError:
            validation.check(ParamSet, param_set)  # the same error, named at its place in the whole set
            raise
        if len(param_set) == 2:
            generations.add(model.generation)
        for i, route in zip(new, model.model_dump()["routes"]):
            if not _known_route(routes[i], {route["dst"]: route}):  # else keep the object given: it is normal already
                normalised[i] = route
            checked[id(normalised[i])] = normalised[i]
    _refuse_duplicates(list(map(operator.itemgetter("dst"), normalised)))
    return {"generation": generation, "routes": normalised}


def _known_route(route: Any, before: dict[str, dict]) -> bool:
    """Whether route is one of a validated set's routes (before: by destination), with
    the same types too: True == 1 and 14.0 == 14 in Python, not on the wire."""
    if not isinstance(route, dict) or not isinstance(route.get("dst"), str):
        return False
    old = before.get(route["dst"])
    return old == route and all(type(route[key]) is type(value) for key, value in old.items())


def _refuse_duplicates(destinations: list[str]) -> None:
    if len(set(destinations)) == len(destinations):
        return
    seen: dict[str, int] = {}
    for i, dst in enumerate(destinations):
        if dst in seen:
            raise ValidationError(f"routes[{i}].dst", f"{dst} duplicates routes[{seen[dst]}].dst")
        seen[dst] = i


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


# -- deltas (protocol 6) --------------------------------------------------------------------

#: The route fields besides dst, in the order routes carry them.
PARAMETER_KEYS = ROUTE_KEYS[1:]


class RoutePatch(Strict):
    """A change to one destination of the base set: dst and only the fields that changed
    (at least one). A field given as null sets it to null (no clamp, kernel MSS, not paced)."""

    dst: Prefix
    rto_min_ms: int_range(*RTO_MIN_MS) = None  # type: ignore[valid-type]
    initcwnd: int_range(*INITCWND) = None  # type: ignore[valid-type]
    cwnd_clamp: int_range(*CWND_CLAMP) | None = None  # type: ignore[valid-type]
    advmss: int_range(*ADVMSS) | None = None  # type: ignore[valid-type]
    pacing_rate: int_range(*PACING_RATE) | None = None  # type: ignore[valid-type]
    quickack: bool = None  # type: ignore[assignment]


class RouteCopy(RoutePatch):
    """A new destination whose route is the base's route for `like`, with the fields
    given changed (none, when the parameters are the same): aggregation moves prefixes
    more often than it changes parameters."""

    like: Prefix


class ParamDelta(Strict):
    """The change from the set of generation `base` to the set of `generation`."""

    base: Generation  # type: ignore[valid-type]
    generation: Generation  # type: ignore[valid-type]
    added: list[RouteParams]
    copied: list[RouteCopy]
    changed: list[RoutePatch]
    removed: list[Prefix]


def _fields(patch: RoutePatch) -> dict:
    """The parameter fields a patch gives (an explicit null where a route has none was refused)."""
    return {key: getattr(patch, key) for key in PARAMETER_KEYS if key in patch.model_fields_set}


def validate_delta(delta: Any) -> dict:
    """Check a delta on its own (not yet against its base); return it normalised.

    A patch is {"dst", and the changed fields}; a field absent from a patch
    keeps its base value; a copy is {"dst", "like", and the fields that differ
    from the base's route for "like"}. Refused, naming the field: what a set
    refuses, a generation not newer than the base, a patch that changes
    nothing, a destination named twice (within or across added, copied,
    changed and removed).
    """
    if not isinstance(delta, dict):
        raise ValidationError("", f"a delta is a JSON object, not {validation.json_type(delta)}")
    checked = validation.check(ParamDelta, delta)
    if checked.generation <= checked.base:  # type: ignore[operator]
        raise ValidationError("generation", f"{checked.generation} is not newer than the base {checked.base}")
    seen: dict[str, str] = {}

    def note(dst: str, where: str) -> None:
        if dst in seen:
            raise ValidationError(where, f"{dst} is already named by {seen[dst]}")
        seen[dst] = where

    for i, route in enumerate(checked.added):
        note(route.dst, f"added[{i}].dst")
    copied = []
    for i, copy in enumerate(checked.copied):
        note(copy.dst, f"copied[{i}].dst")
        copied.append({"dst": copy.dst, "like": copy.like, **_fields(copy)})
    changed = []
    for i, patch in enumerate(checked.changed):
        note(patch.dst, f"changed[{i}].dst")
        fields = _fields(patch)
        if not fields:
            raise ValidationError(f"changed[{i}]", f"changes nothing of {patch.dst}")
        changed.append({"dst": patch.dst, **fields})
    for i, dst in enumerate(checked.removed):
        note(dst, f"removed[{i}]")
    return {"base": checked.base, "generation": checked.generation,
            "added": [route.model_dump() for route in checked.added], "copied": copied, "changed": changed,
            "removed": list(checked.removed)}


def apply_delta(base_set: dict, delta: Any) -> dict:
    """The set a delta makes of its base (a validated set of generation delta["base"]).

    The delta is checked first (`validate_delta`); then every destination it
    changes or removes, and every route a copy is like, must be in the base,
    and none it adds or copies to may be. The result is validated as a whole
    set (`validate_param_set`) and keeps the base's order, added routes then
    copies at the end.
    """
    checked = validate_delta(delta)
    if base_set["generation"] != checked["base"]:
        raise ValidationError("base", f"{checked['base']} is not the base set's generation {base_set['generation']}")
    base = {route["dst"]: route for route in base_set["routes"]}
    routes = {dst: dict(route) for dst, route in base.items()}
    for i, patch in enumerate(checked["changed"]):
        if patch["dst"] not in routes:
            raise ValidationError(f"changed[{i}].dst", f"{patch['dst']} is not in generation {checked['base']}")
        routes[patch["dst"]].update(patch)
    for i, dst in enumerate(checked["removed"]):
        if dst not in routes:
            raise ValidationError(f"removed[{i}]", f"{dst} is not in generation {checked['base']}")
        del routes[dst]
    for i, route in enumerate(checked["added"]):
        if route["dst"] in base:
            raise ValidationError(f"added[{i}].dst", f"{route['dst']} is already in generation {checked['base']}")
        routes[route["dst"]] = route
    for i, copy in enumerate(checked["copied"]):
        if copy["dst"] in base:
            raise ValidationError(f"copied[{i}].dst", f"{copy['dst']} is already in generation {checked['base']}")
        if copy["like"] not in base:
            raise ValidationError(f"copied[{i}].like", f"{copy['like']} is not in generation {checked['base']}")
        fields = {key: value for key, value in copy.items() if key != "like"}
        routes[copy["dst"]] = {**base[copy["like"]], **fields}
    return validate_param_set({"generation": checked["generation"], "routes": list(routes.values())})


def make_delta(base_set: dict, new_set: dict) -> dict:
    """The delta from a set to a newer one: routes added, patches of the fields
    that changed, destinations removed. A new destination is sent as a copy of
    a base route with the same parameters, else of the base route that covered
    it (longest prefix) with the fields that differ, else whole.
    `apply_delta(base_set, make_delta(base_set, new_set))` carries the same
    routes as new_set."""
    before = {route["dst"]: route for route in base_set["routes"]}
    by_parameters: dict[tuple, str] = {}
    for route in base_set["routes"]:
        by_parameters.setdefault(tuple(route[key] for key in PARAMETER_KEYS), route["dst"])
    added, copied, changed = [], [], []
    for route in new_set["routes"]:
        old = before.get(route["dst"])
        if old is not None:
            if old != route:
                changed.append({"dst": route["dst"], **_differing(old, route)})
            continue
        like = by_parameters.get(tuple(route[key] for key in PARAMETER_KEYS))
        if like is not None:
            copied.append({"dst": route["dst"], "like": like})
            continue
        covering = _covering(before, route["dst"])
        if covering is not None and len(_differing(before[covering], route)) <= len(PARAMETER_KEYS) // 2:
            copied.append({"dst": route["dst"], "like": covering, **_differing(before[covering], route)})
        else:
            added.append(route)
    after = {route["dst"] for route in new_set["routes"]}
    return {"base": base_set["generation"], "generation": new_set["generation"], "added": added,
            "copied": copied, "changed": changed, "removed": [dst for dst in before if dst not in after]}


def _differing(old: dict, new: dict) -> dict:
    return {key: new[key] for key in PARAMETER_KEYS if new[key] != old[key]}


def _covering(routes: dict, dst: str) -> str | None:
    """The longest prefix among routes' destinations that covers dst (a canonical prefix), or None."""
    network = ipaddress.ip_network(dst)
    for length in range(network.prefixlen - 1, -1, -1):
        candidate = str(network.supernet(new_prefix=length))
        if candidate in routes:
            return candidate
    return None


def worth_a_delta(base_set: dict | None, new_set: dict) -> dict | None:
    """The delta to send an agent that acknowledged base_set when new_set is its latest:
    make_delta's, where base_set is older and the delta is the shorter message; else None
    (the whole set goes)."""
    if base_set is None or base_set["generation"] >= new_set["generation"]:
        return None
    delta = make_delta(base_set, new_set)
    return delta if delta_is_smaller(delta, new_set) else None


def delta_is_smaller(delta: dict, new_set: dict) -> bool:
    """Whether a delta's JSON is shorter than the whole set's. A delta that replaces every
    prefix of the set can still be: a copy names two prefixes, a removal one, and a
    route carries every field."""
    return len(framing.encode_json(delta)) < len(framing.encode_json(new_set))
