"""The messages of the agent channel, their schemas and their constructors.

In order: the controller's ``challenge``; the agent's ``auth``; the
controller's ``welcome``; the agent's ``hello`` (addresses, MTU/MSS,
congestion controls, whether ``net.ipv4.tcp_rto_min_us`` exists, the
generation it has applied, and how it enforces: BPF or routes alone); then
``params`` from the controller whenever the host's set changes, each
answered by ``ack`` (per-route results, and the enforcement again) or
``reject`` (the reason, naming the field); every third of a lease, the
controller's ``renew`` of the acknowledged generation's lease; every few
seconds, the agent's ``rtt`` report of the round trips it measured to its
destinations, and its ``connections`` report of how many of its connections to each
destination sent data since the last one; and, to every controller it is connected to whenever its applied
set changes, the agent's ``held``: the (epoch, generation) it holds. Every
``params`` and ``renew`` carries the sender's ``epoch``: its authority over the
host (docs/design.md, "Two controllers").
"""

import ipaddress
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, overload

from pydantic import AfterValidator, Field, model_validator

from otcp.wire import validation
from otcp.wire.framing import ProtocolError, encode_json
from otcp.wire.limits import (
    ADVMSS,
    CONNECTIONS,
    CWND_CLAMP,
    EPOCH,
    GENERATION,
    INITCWND,
    LEASE_S,
    MAC_BYTES,
    MAX_FRAME_BYTES,
    PACING_RATE,
    RTO_MIN_MS,
    VERSION,
)
from otcp.wire.paramset import ParamSet, RouteParams
from otcp.wire.session import agent_mac, controller_mac, new_nonce
from otcp.wire.validation import Strict, int_range


def _hex(value: str) -> str:
    try:
        bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{validation.show(value)} is not hexadecimal") from None
    return value


def _address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{validation.show(value)} is not an IPv4 or IPv6 address") from None


Hex = Annotated[str, Field(max_length=128), AfterValidator(_hex)]
Address = Annotated[str, Field(max_length=64), AfterValidator(_address)]
Name = Annotated[str, Field(max_length=64)]
Generation = Annotated[int, int_range(*GENERATION)]
Epoch = Annotated[int, int_range(*EPOCH)]
Version = Annotated[int, int_range(1, 65535)]
Count = Annotated[int, int_range(0, 2**31 - 1)]
LeaseSeconds = Annotated[float, Field(ge=LEASE_S[0], le=LEASE_S[1])]


class Challenge(Strict):
    """The controller's first words: all an unauthenticated peer ever receives."""

    type: Literal["challenge"]
    version: Version
    nonce: Hex


class Auth(Strict):
    """The agent's proof that it holds the secret."""

    type: Literal["auth"]
    nonce: Hex
    mac: Hex


class Welcome(Strict):
    """The controller's proof back."""

    type: Literal["welcome"]
    mac: Hex


class Interface(Strict):
    """One interface of the host, as the hello reports it."""

    name: Name
    mtu: Count
    addresses: Annotated[list[Address], Field(max_length=256)]


class LongPathsEnforcement(Strict):
    """What the agent enforces of a long fat path's fields (docs/longpaths.md): the congestion
    controls a route's ``congctl`` may name on this host (a route naming another goes without
    it), and whether otcp_scalable's per-destination map gives connections the route's
    ``ssthresh`` and ``increase`` from their first packet (else why not: the route's
    ``ssthresh lock`` then reaches connections only through the tcp_metrics cache, and
    ``increase`` not at all)."""

    congestion_controls: Annotated[list[Annotated[str, Field(max_length=16)]], Field(max_length=64)]
    scalable_map: bool
    reason: Annotated[str, Field(max_length=4096)] | None


class Enforcement(Strict):
    """How the agent enforces the set: the sock_ops program alongside the
    routes ("bpf"), or the routes alone ("routes"), with the reason; and
    (protocol 8) what it enforces of the long-path fields."""

    mode: Literal["bpf", "routes"]
    reason: Annotated[str, Field(max_length=4096)] | None
    long_paths: LongPathsEnforcement | None = None


class Hello(Strict):
    """What the agent tells of its host once authenticated."""

    type: Literal["hello"]
    hostname: Annotated[str, Field(max_length=255)]
    addresses: Annotated[list[Address], Field(max_length=256)]
    interfaces: Annotated[list[Interface], Field(max_length=256)]
    mtu: Count | None
    mss_bytes: Count | None
    congestion_controls: Annotated[list[Name], Field(max_length=64)]
    congestion_control: Name | None
    tcp_rto_min_us: bool
    applied_generation: Generation | None
    agent_version: Version
    enforcement: Enforcement


class Params(Strict):
    """A parameter set for the host, whole (`set`) or as a delta against the
    generation the agent acknowledged (`delta`), exactly one of them (each
    checked by otcp.wire.paramset); and the other hosts' addresses, which the agent
    probes for round trips (its routes may be aggregated prefixes that do not
    name them), absent when they did not change since the last params message
    on this connection; the set's lease: how long it holds, in seconds from
    when the agent applies it, unless renewed (`Renew`); and the sender's epoch,
    its authority over the host: the agent takes no set of an older epoch than
    the one it holds."""

    type: Literal["params"]
    set: dict[str, Any] | None = None
    delta: dict[str, Any] | None = None
    peers: Annotated[list[Address], Field(max_length=100_000)] = []
    lease_s: LeaseSeconds
    epoch: Epoch

    @model_validator(mode="before")
    @classmethod
    def _set_or_delta(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = [key for key in ("set", "delta") if key in data]
            if len(given) != 1:
                raise ValueError("a params message carries exactly one of set and delta, "
                                 f"not {' and '.join(given) or 'neither'}")
            if not isinstance(data[given[0]], dict):
                raise ValueError(f"{given[0]}: {validation.show(data[given[0]])} is not an object")
        return data


class Renew(Strict):
    """The controller is there, and vouches for the set of `generation` (the one the agent
    acknowledged on this connection) under its authority `epoch`: its lease starts again,
    lease_s from now, when the agent holds that generation of that epoch."""

    type: Literal["renew"]
    generation: Generation
    lease_s: LeaseSeconds
    epoch: Epoch


class Held(Strict):
    """What the agent holds, told to every controller it is connected to when it changes and
    after its hello: the epoch (None: none held) and generation (None: nothing applied) of its
    applied set. A standby controller numbers its generations past it."""

    type: Literal["held"]
    epoch: Epoch | None
    generation: Generation | None


class RouteResult(Strict):
    """What became of one route of a set."""

    dst: Name
    status: Literal["applied", "skipped"]
    reason: Annotated[str, Field(max_length=4096)] | None = None
    dev: Name | None = None
    gateway: Address | None = None
    table: Annotated[int, int_range(0, 2**32 - 1)] | None = None


class Ack(Strict):
    """The agent applied a set."""

    type: Literal["ack"]
    generation: Generation
    results: Annotated[list[RouteResult], Field(max_length=1_000_000)]
    enforcement: Enforcement


@dataclass(frozen=True)
class RoundTrip:
    """A host's round trip to one destination over the agent's window, as both processes
    hold it: the smallest sample and how far the samples reach above it (their 90th
    percentile), in seconds; how many samples there were and where the smallest came from.
    On the wire it is an `RttSample`, in microseconds (`rtt_message`, `Rtt.round_trips`)."""

    dst: str  # the destination's address
    min_s: float
    spread_s: float
    count: int
    source: Literal["tcp", "probe"]


class RttSample(Strict):
    """A `RoundTrip` on the wire: microseconds."""

    dst: Address
    min_rtt_us: Annotated[float, Field(ge=0, le=60_000_000)]
    spread_us: Annotated[float, Field(ge=0, le=60_000_000)]
    count: Annotated[int, int_range(1, 2**31 - 1)]
    source: Literal["tcp", "probe"]


class Rtt(Strict):
    """The agent's periodic report of round trips to its destinations."""

    type: Literal["rtt"]
    samples: Annotated[list[RttSample], Field(max_length=100_000)]

    def round_trips(self) -> list[RoundTrip]:
        """The samples as the process holds them: seconds."""
        return [RoundTrip(s.dst, s.min_rtt_us * 1e-6, s.spread_us * 1e-6, s.count, s.source) for s in self.samples]


@dataclass(frozen=True)
class SendingConnections:
    """How many of a host's TCP connections to one destination sent data over the agent's
    last interval: several senders sharing a host are that many flows on every link of the
    pair's path, where the switch's pair entry sees one (docs/design.md, "Measurement")."""

    dst: str  # the destination's address
    connections: int


class ConnectionCount(Strict):
    """A `SendingConnections` on the wire."""

    dst: Address
    connections: Annotated[int, int_range(*CONNECTIONS)]


class Connections(Strict):
    """The agent's periodic report of its sending connections per destination."""

    type: Literal["connections"]
    counts: Annotated[list[ConnectionCount], Field(max_length=100_000)]

    def sending(self) -> list[SendingConnections]:
        """The counts as the processes hold them."""
        return [SendingConnections(c.dst, c.connections) for c in self.counts]


class Resync(Strict):
    """The agent cannot apply a delta: its applied generation is not the delta's
    base (or it holds no active set). The controller answers with the whole set."""

    type: Literal["resync"]
    generation: Generation
    applied_generation: Generation | None


class Reject(Strict):
    """The agent refused a set, and why."""

    type: Literal["reject"]
    generation: Generation | None
    error: Annotated[str, Field(max_length=65536)]


SCHEMAS: dict[str, type[Strict]] = {
    "challenge": Challenge, "auth": Auth, "welcome": Welcome, "hello": Hello,
    "params": Params, "ack": Ack, "reject": Reject, "rtt": Rtt, "connections": Connections, "resync": Resync,
    "renew": Renew, "held": Held,
}
KINDS = {schema: kind for kind, schema in SCHEMAS.items()}
Message = TypeVar("Message", bound=Strict)


@overload
def parse_message(message: Any) -> Strict: ...


@overload
def parse_message(message: Any, *expected: type[Message]) -> Message: ...


def parse_message(message: Any, *expected: type[Strict]) -> Strict:
    """Check a received message (parsed JSON) against its schema; returns it as that model.

    `expected` (schemas of SCHEMAS) limits which types are acceptable at this point of
    the conversation. Unknown keys, missing keys and wrong types are errors.
    """
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, got {validation.json_type(message)}")
    kind = message.get("type")
    names = [KINDS[schema] for schema in expected]
    if not isinstance(kind, str) or kind not in SCHEMAS or (names and kind not in names):
        wanted = " or ".join(names) if names else "a known message type"
        raise ProtocolError(f"type: expected {wanted}, got {validation.show(kind)}")
    try:
        return validation.check(SCHEMAS[kind], message)
    except validation.ValidationError as error:
        raise ProtocolError(f"{kind} message: {error}") from None


def challenge_message(nonce: str) -> dict:
    """The controller's challenge."""
    return {"type": "challenge", "version": VERSION, "nonce": nonce}


def auth_message(secret: bytes, challenge: Challenge) -> tuple[dict, str]:
    """The agent's answer to a challenge; returns (message, agent nonce)."""
    if challenge.version != VERSION:
        raise ProtocolError(f"controller speaks protocol version {challenge.version}, this agent {VERSION}")
    nonce = new_nonce()
    return {"type": "auth", "nonce": nonce, "mac": agent_mac(secret, challenge.nonce, nonce)}, nonce


def welcome_message(secret: bytes, agent_nonce: str, controller_nonce: str) -> dict:
    """The controller's answer to a valid auth."""
    return {"type": "welcome", "mac": controller_mac(secret, agent_nonce, controller_nonce)}


def params_message(param_set: ParamSet | dict, peers: Sequence[str] | None = (), *, lease_s: float,
                   epoch: int) -> dict:
    """A whole parameter set on its way to an agent, with its lease, the sender's epoch and the
    addresses it may probe (None: unchanged since the last params message, left out)."""
    message: dict[str, Any] = {"type": "params", "set": param_set, "lease_s": lease_s, "epoch": epoch}
    if peers is not None:
        message["peers"] = list(peers)
    return message


#: The longest route a parameter set can carry, as JSON with its separator (an IPv6 /128, every field at its widest).
_WIDEST_ROUTE_BYTES = len(encode_json(RouteParams(
    dst="ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", rto_min_ms=RTO_MIN_MS[1], initcwnd=INITCWND[1],
    cwnd_clamp=CWND_CLAMP[1], advmss=ADVMSS[1], pacing_rate=PACING_RATE[1], quickack=False))) + 1


#: More than a params message takes besides its routes and peers (keys, the widest generation,
#: lease and epoch: 127 bytes).
MESSAGE_OVERHEAD_BYTES = 192


def peers_bytes(peers: Sequence[str]) -> int:
    """At least the bytes a list of peer addresses takes in a message (each quoted, with its comma)."""
    return sum(len(peer) + 3 for peer in peers)


def whole_set_bytes(param_set: ParamSet, peers: Sequence[str], limit: int = MAX_FRAME_BYTES,
                    peers_size: int | None = None) -> int:
    """The size of the frame body that carries param_set whole with peers (its MAC, the
    message with the longest lease and epoch): the most any params message for the set takes.
    Counted exactly only when a bound on it could exceed limit (a set of routes can be large);
    peers_size is `peers_bytes(peers)` when the caller has it (one count for every host's set)."""
    peers_size = peers_bytes(peers) if peers_size is None else peers_size
    bound = MAC_BYTES + MESSAGE_OVERHEAD_BYTES + len(param_set.routes) * _WIDEST_ROUTE_BYTES + peers_size
    if bound <= limit:
        return bound
    return MAC_BYTES + len(encode_json(params_message(param_set, peers, lease_s=float(LEASE_S[1]),
                                                      epoch=EPOCH[1])))


def delta_message(delta: dict, peers: Sequence[str] | None = None, *, lease_s: float, epoch: int) -> dict:
    """A delta (otcp.wire.paramset.make_delta) against the set the agent acknowledged, with
    the lease of the set it makes, the sender's epoch and the addresses it may probe (None:
    unchanged, left out)."""
    message: dict[str, Any] = {"type": "params", "delta": delta, "lease_s": lease_s, "epoch": epoch}
    if peers is not None:
        message["peers"] = list(peers)
    return message


def renew_message(generation: int, lease_s: float, epoch: int) -> dict:
    """The controller's renewal, under its epoch, of the lease of the generation the agent acknowledged."""
    return {"type": "renew", "generation": generation, "lease_s": lease_s, "epoch": epoch}


def held_message(epoch: int | None, generation: int | None) -> dict:
    """The agent's word of what it holds: its applied set's epoch and generation."""
    return {"type": "held", "epoch": epoch, "generation": generation}


def resync_message(generation: int, applied_generation: int | None) -> dict:
    """The agent's request for the whole set: the delta for `generation` had another base."""
    return {"type": "resync", "generation": generation, "applied_generation": applied_generation}


def ack_message(generation: int, results: Sequence[RouteResult | dict], enforcement: Enforcement | dict) -> dict:
    """The agent's acknowledgement of an applied set: what became of each route, and how
    the agent enforces it."""
    return {"type": "ack", "generation": generation, "results": list(results), "enforcement": enforcement}


def rtt_message(round_trips: Sequence[RoundTrip]) -> dict:
    """The agent's report of round trips, in microseconds to 0.1 us (`RttSample`)."""
    samples = []
    for trip in round_trips:
        if not (math.isfinite(trip.min_s) and math.isfinite(trip.spread_s)):
            raise ValueError(f"round trip to {trip.dst}: {trip.min_s} s (spread {trip.spread_s} s) is not finite")
        samples.append({"dst": trip.dst, "min_rtt_us": round(trip.min_s * 1e6, 1),
                        "spread_us": round(trip.spread_s * 1e6, 1), "count": trip.count, "source": trip.source})
    return {"type": "rtt", "samples": samples}


def connections_message(sending: Sequence[SendingConnections]) -> dict:
    """The agent's report of its sending connections per destination (`ConnectionCount`)."""
    return {"type": "connections", "counts": [{"dst": s.dst, "connections": s.connections} for s in sending]}


def reject_message(generation: int | None, error: str) -> dict:
    """The agent's refusal of a set."""
    return {"type": "reject", "generation": generation, "error": error}
