"""The parameter set: what the controller pushes to a host, and its rules.

The format (docs/design.md, "Parameter set")::

    {"generation": 7,
     "routes": [{"dst": "10.0.0.1/32", "rto_min_ms": 14, "initcwnd": 1,
                 "cwnd_clamp": 3, "advmss": null, "pacing_rate": null, "quickack": true,
                 "congctl": null, "ssthresh": null, "increase": null}],
     "admit": null}

``cwnd_clamp``, ``advmss``, ``pacing_rate``, ``congctl``, ``ssthresh`` and
``increase`` are optional: absent or null means "not set" (no clamp, the
kernel's MSS, not paced, the host's congestion control, the kernel's initial
ssthresh, Scalable TCP rather than GridDT's increase); the controller sends
every key. ``admit`` (optional, null: no limit) is not a route's: it is the
most senders the host may ask to send to it at once under fan-in admission,
advice for its applications that the agent shows and no kernel enforces.
Destinations come back as canonical prefixes; a destination without a
prefix length is a host route. `check_generation` is the one
generation rule both peers use: (epoch, generation) must not go back.

A set is a `ParamSet` of `RouteParams` everywhere in both processes: frozen,
validated once when made (from JSON by `validate_param_set`, by the planner
from its columns), so nothing checks a route twice, and two routes with the
same parameters are equal (and hash alike) whichever made them. Only the
wire and the state files carry sets as JSON.
"""

import functools
import ipaddress
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, StringConstraints

from otcp.wire import framing, limits, validation
from otcp.wire.limits import ADMIT, ADVMSS, CWND_CLAMP, GENERATION, INITCWND, MAX_FRAME_BYTES, PACING_RATE, RTO_MIN_MS
from otcp.wire.validation import Strict, ValidationError, int_range


@functools.lru_cache(maxsize=1 << 16)
def canonical_prefix(value: str) -> str:
    """'10.0.0.1' -> '10.0.0.1/32'; host bits, zone ids and junk refused.

    Remembered (a pure function of the string; refusals are not kept): the
    planner validates every route it makes, the same prefixes plan after plan,
    and ipaddress takes 15 us a prefix."""
    if "%" in value:
        raise ValueError(f"{validation.show(value)} has a zone id; OTCP routes are global prefixes")
    length = value.rpartition("/")[2] if "/" in value else None
    if length is not None and not (length.isascii() and length.isdigit() and str(int(length)) == length):
        raise ValueError(f"{validation.show(value)}: the prefix length must be a number of bits without "
                         "leading zeros (not a netmask)")
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as error:
        if "has host bits set" in str(error):
            raise ValueError(f"{validation.show(value)} has host bits set") from None
        raise ValueError(f"{validation.show(value)} is not an IPv4 or IPv6 prefix") from None


Prefix = Annotated[str, AfterValidator(canonical_prefix)]
Generation = Annotated[int, int_range(*GENERATION)]
CongestionControl = Annotated[str, StringConstraints(pattern=limits.CONGCTL_PATTERN)]


class RouteParams(Strict):
    """The TCP parameters for one destination prefix."""

    dst: Prefix
    rto_min_ms: Annotated[int, int_range(*RTO_MIN_MS)]
    initcwnd: Annotated[int, int_range(*INITCWND)]
    cwnd_clamp: Annotated[int, int_range(*CWND_CLAMP)] | None = None  # None: no clamp
    advmss: Annotated[int, int_range(*ADVMSS)] | None = None  # None: the kernel's MSS
    pacing_rate: Annotated[int, int_range(*PACING_RATE)] | None = None  # bytes/s; None: not paced
    quickack: bool
    # Long fat paths (docs/longpaths.md); None: not set.
    congctl: CongestionControl | None = None  # the congestion control new connections use
    ssthresh: Annotated[int, int_range(*limits.SSTHRESH)] | None = None  # initial slow-start threshold, segments
    increase: Annotated[int, int_range(*limits.INCREASE)] | None = None  # GridDT's A at every window (segments per RTT)

    @classmethod
    def of(cls, dst: str, parameters: Sequence[Any]) -> "RouteParams":
        """The route to dst that carries parameters (values of PARAMETER_KEYS, in order), validated."""
        return cls(dst=dst, **dict(zip(PARAMETER_KEYS, parameters, strict=True)))

    def parameters(self) -> tuple[Any, ...]:
        """The values of PARAMETER_KEYS: what a route carries besides its destination."""
        return (self.rto_min_ms, self.initcwnd, self.cwnd_clamp, self.advmss, self.pacing_rate, self.quickack,
                self.congctl, self.ssthresh, self.increase)


#: The fields of a route besides dst, in the order routes carry them.
PARAMETER_KEYS = ("rto_min_ms", "initcwnd", "cwnd_clamp", "advmss", "pacing_rate", "quickack",
                  "congctl", "ssthresh", "increase")


Admit = Annotated[int, int_range(*ADMIT)]


class ParamSet(Strict):
    """One host's parameters for one generation: its routes, and with fan-in admission
    (admit) the most senders its applications may ask to send to it at once."""

    generation: Generation
    routes: list[RouteParams]
    admit: Admit | None = None  # None: no limit planned


def validate_param_set(document: Any) -> ParamSet:
    """Check a parameter set completely (a parsed JSON object, or one whose routes are
    `RouteParams` already); return it as a ParamSet. A ParamSet is returned as it is.

    Unknown keys, wrong types (a bool is not an integer, 14.0 is not an
    integer), out-of-range values and malformed or duplicate destinations
    raise ValidationError naming the field.
    """
    if isinstance(document, ParamSet):
        return document
    if not isinstance(document, dict):
        raise ValidationError("", f"a parameter set is a JSON object, not {validation.json_type(document)}")
    checked = validation.check(ParamSet, document)
    refuse_duplicates(checked.routes)
    return checked


def refuse_duplicates(routes: Sequence[RouteParams]) -> None:
    """ValidationError naming the second of two routes to the same destination."""
    destinations = [route.dst for route in routes]
    if len(set(destinations)) == len(destinations):
        return
    seen: dict[str, int] = {}
    for i, dst in enumerate(destinations):
        if dst in seen:
            raise ValidationError(f"routes[{i}].dst", f"{dst} duplicates routes[{seen[dst]}].dst")
        seen[dst] = i


def parse_param_set(body: bytes, where: str = "parameter set") -> ParamSet:
    """Bytes (a file, a frame) -> a validated set; size, JSON and fields checked."""
    if len(body) > MAX_FRAME_BYTES:
        raise ValidationError("", f"{where}: {len(body)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    try:
        document = validation.load_json(body, where)
    except validation.JSONError as error:
        raise ValidationError("", str(error)) from None
    if not isinstance(document, dict):
        raise ValidationError("", f"{where}: expected a JSON object, got {validation.json_type(document)}")
    return validate_param_set(document)


def claimed_generation(document: Any) -> int | None:
    """The generation a (possibly invalid) set claims, when it is a valid number; else None.

    What a reject message and a journal entry may quote of a refused set.
    """
    if isinstance(document, ParamSet):
        return document.generation
    generation = document.get("generation") if isinstance(document, dict) else None
    low, high = GENERATION
    if isinstance(generation, int) and not isinstance(generation, bool) and low <= generation <= high:
        return generation
    return None


def same_parameters(first: ParamSet, second: ParamSet | None) -> bool:
    """Whether two sets carry the same routes, in whatever order (a set has no two alike), and
    the same admit."""
    return (second is not None and first.admit == second.admit and len(first.routes) == len(second.routes)
            and set(first.routes) == set(second.routes))


def check_generation(validated: ParamSet, applied_generation: int | None, applied_set: ParamSet | None = None,
                     epoch: int | None = None, applied_epoch: int | None = None) -> None:
    """The generation rule: a set must be newer than the applied one, in (epoch, generation) order.

    `epoch` is the authority of the controller that sent the set (the OpenFlow generation id it
    became master of the host's switch with, docs/design.md, "Two controllers"); `applied_epoch`
    the authority of the applied set. Both None (a set given by hand, an agent that never held
    an epoch): generations alone. A set from a newer epoch is taken whatever its generation
    number (a new master's numbering), one from an older epoch is refused whatever its number
    (a master that lost its switch); within one epoch the generation must grow.

    The one exception is the applied set itself, unchanged: re-applying it
    is allowed (a restarted agent does it from its state, and a controller
    re-sends its latest set when an agent reconnects), in any order. The
    same generation with different routes or admit is refused.
    """
    if applied_generation is None:
        return
    if epoch is not None and applied_epoch is not None and epoch != applied_epoch:
        if epoch < applied_epoch:
            raise ValidationError("epoch", f"{epoch} is older than the applied set's epoch {applied_epoch}: "
                                  "the controller that sent it is no longer its host's master")
        return
    generation = validated.generation
    if generation < applied_generation or (generation == applied_generation and applied_set is None):
        raise ValidationError(
            "generation", f"{generation} is not newer than the applied generation {applied_generation}"
        )
    if generation == applied_generation and not same_parameters(validated, applied_set):
        raise ValidationError(
            "generation", f"{generation} was already applied with different parameters; a change needs a newer "
            "generation"
        )


# -- deltas (protocol 6) --------------------------------------------------------------------


class RoutePatch(Strict):
    """A change to one destination of the base set: dst and only the fields that changed
    (at least one). A field given as null sets it to null (no clamp, kernel MSS, not paced)."""

    dst: Prefix
    rto_min_ms: Annotated[int, int_range(*RTO_MIN_MS)] = None  # type: ignore[assignment]
    initcwnd: Annotated[int, int_range(*INITCWND)] = None  # type: ignore[assignment]
    cwnd_clamp: Annotated[int, int_range(*CWND_CLAMP)] | None = None
    advmss: Annotated[int, int_range(*ADVMSS)] | None = None
    pacing_rate: Annotated[int, int_range(*PACING_RATE)] | None = None
    quickack: bool = None  # type: ignore[assignment]
    congctl: CongestionControl | None = None
    ssthresh: Annotated[int, int_range(*limits.SSTHRESH)] | None = None
    increase: Annotated[int, int_range(*limits.INCREASE)] | None = None

    def changes(self) -> dict[str, Any]:
        """The parameter fields the patch gives (absent ones keep the base's value)."""
        return {key: getattr(self, key) for key in PARAMETER_KEYS if key in self.model_fields_set}


class RouteCopy(RoutePatch):
    """A new destination whose route is the base's route for `like`, with the fields
    given changed (none, when the parameters are the same): aggregation moves prefixes
    more often than it changes parameters."""

    like: Prefix


class ParamDelta(Strict):
    """The change from the set of generation `base` to the set of `generation`; admit, when
    given (null included), is the new set's, else the base's holds."""

    base: Generation
    generation: Generation
    added: list[RouteParams]
    copied: list[RouteCopy]
    changed: list[RoutePatch]
    removed: list[Prefix]
    admit: Admit | None = None


def validate_delta(document: Any) -> ParamDelta:
    """Check a delta on its own (not yet against its base).

    A patch is {"dst", and the changed fields}; a field absent from a patch
    keeps its base value; a copy is {"dst", "like", and the fields that differ
    from the base's route for "like"}. Refused, naming the field: what a set
    refuses, a generation not newer than the base, a patch that changes
    nothing, a destination named twice (within or across added, copied,
    changed and removed).
    """
    if not isinstance(document, dict):
        raise ValidationError("", f"a delta is a JSON object, not {validation.json_type(document)}")
    delta = validation.check(ParamDelta, document)
    if delta.generation <= delta.base:
        raise ValidationError("generation", f"{delta.generation} is not newer than the base {delta.base}")
    named = [(route.dst, f"added[{i}].dst") for i, route in enumerate(delta.added)]
    named += [(copy.dst, f"copied[{i}].dst") for i, copy in enumerate(delta.copied)]
    named += [(patch.dst, f"changed[{i}].dst") for i, patch in enumerate(delta.changed)]
    named += [(dst, f"removed[{i}]") for i, dst in enumerate(delta.removed)]
    seen: dict[str, str] = {}
    for dst, where in named:
        if dst in seen:
            raise ValidationError(where, f"{dst} is already named by {seen[dst]}")
        seen[dst] = where
    for i, patch in enumerate(delta.changed):
        if not patch.changes():
            raise ValidationError(f"changed[{i}]", f"changes nothing of {patch.dst}")
    return delta


def apply_delta(base_set: ParamSet, document: ParamDelta | dict[str, Any]) -> ParamSet:
    """The set a delta (a parsed JSON object, or one `validate_delta` checked) makes of its
    base, the set of generation delta["base"].

    The delta is checked first (`validate_delta`); then every destination it
    changes or removes, and every route a copy is like, must be in the base,
    and none it adds or copies to may be. The routes the base has and the
    delta does not touch stay the base's objects; the set keeps the base's
    order, added routes then copies at the end, and the base's admit unless the delta gives one.
    """
    delta = document if isinstance(document, ParamDelta) else validate_delta(document)
    if base_set.generation != delta.base:
        raise ValidationError("base", f"{delta.base} is not the base set's generation {base_set.generation}")
    base = {route.dst: route for route in base_set.routes}
    routes = dict(base)

    def in_base(dst: str, where: str) -> None:
        if dst not in base:
            raise ValidationError(where, f"{dst} is not in generation {delta.base}")

    def not_in_base(dst: str, where: str) -> None:
        if dst in base:
            raise ValidationError(where, f"{dst} is already in generation {delta.base}")

    # The fields a patch or copy gives passed the same checks as a route's: the copies are valid routes.
    for i, patch in enumerate(delta.changed):
        in_base(patch.dst, f"changed[{i}].dst")
        routes[patch.dst] = routes[patch.dst].model_copy(update=patch.changes())
    for i, dst in enumerate(delta.removed):
        in_base(dst, f"removed[{i}]")
        del routes[dst]
    for i, route in enumerate(delta.added):
        not_in_base(route.dst, f"added[{i}].dst")
        routes[route.dst] = route
    for i, copy in enumerate(delta.copied):
        not_in_base(copy.dst, f"copied[{i}].dst")
        in_base(copy.like, f"copied[{i}].like")
        routes[copy.dst] = base[copy.like].model_copy(update={"dst": copy.dst, **copy.changes()})
    admit = delta.admit if "admit" in delta.model_fields_set else base_set.admit
    return ParamSet(generation=delta.generation, routes=list(routes.values()), admit=admit)


def make_delta(base_set: ParamSet, new_set: ParamSet) -> dict[str, Any]:
    """The delta from a set to a newer one, as the wire carries it: routes added, patches
    of the fields that changed, destinations removed. A new destination is sent as a copy
    of a base route with the same parameters, else of the base route that covered it
    (longest prefix) with the fields that differ, else whole; admit where it changed.
    `apply_delta(base_set, make_delta(base_set, new_set))` carries the same parameters as new_set."""
    before = {route.dst: route for route in base_set.routes}
    by_parameters: dict[tuple, str] = {}
    for route in base_set.routes:
        by_parameters.setdefault(route.parameters(), route.dst)
    added: list[RouteParams] = []
    copied: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    for route in new_set.routes:
        old = before.get(route.dst)
        if old is not None:
            if old != route:
                changed.append({"dst": route.dst, **_differing(old, route)})
            continue
        like = by_parameters.get(route.parameters())
        if like is not None:
            copied.append({"dst": route.dst, "like": like})
            continue
        covering = _covering(before, route.dst)
        if covering is not None and len(_differing(before[covering], route)) <= len(PARAMETER_KEYS) // 2:
            copied.append({"dst": route.dst, "like": covering, **_differing(before[covering], route)})
        else:
            added.append(route)
    after = {route.dst for route in new_set.routes}
    delta = {"base": base_set.generation, "generation": new_set.generation, "added": added,
             "copied": copied, "changed": changed, "removed": [dst for dst in before if dst not in after]}
    if new_set.admit != base_set.admit:
        delta["admit"] = new_set.admit
    return delta


def _differing(old: RouteParams, new: RouteParams) -> dict[str, Any]:
    return {key: value for key, value, was in zip(PARAMETER_KEYS, new.parameters(), old.parameters()) if value != was}


def _covering(routes: dict[str, RouteParams], dst: str) -> str | None:
    """The longest prefix among routes' destinations that covers dst (a canonical prefix), or None."""
    network = ipaddress.ip_network(dst)
    for length in range(network.prefixlen - 1, -1, -1):
        candidate = str(network.supernet(new_prefix=length))
        if candidate in routes:
            return candidate
    return None


def worth_a_delta(base_set: ParamSet | None, new_set: ParamSet) -> dict[str, Any] | None:
    """The delta to send an agent that acknowledged base_set when new_set is its latest:
    make_delta's, where base_set is older and the delta is the shorter message; else None
    (the whole set goes)."""
    if base_set is None or base_set.generation >= new_set.generation:
        return None
    delta = make_delta(base_set, new_set)
    return delta if delta_is_smaller(delta, new_set) else None


def delta_is_smaller(delta: dict[str, Any], new_set: ParamSet) -> bool:
    """Whether a delta's JSON is shorter than the whole set's. A delta that replaces every
    prefix of the set can still be: a copy names two prefixes, a removal one, and a
    route carries every field."""
    return len(framing.encode_json(delta)) < len(framing.encode_json(new_set))
