"""The controller <-> agent channel: framing, authentication, messages, and the
validation of a parameter set.

Pure code shared by both ends (the agent's blocking client and the
controller's green-thread server): nothing here touches a socket or the
kernel, so every rule is tested without either.

The wire, in order:

1. Every message is a *frame*: a 4-byte big-endian length, then that many
   bytes.  A frame longer than the receiver's limit is refused before it is
   read (`FrameDecoder`).
2. The controller speaks first: ``{"type": "challenge", "version": 1,
   "nonce": <64 hex>}``.  This is all an unauthenticated peer ever receives.
3. The agent answers ``{"type": "auth", "nonce": <its own 64 hex>, "mac":
   HMAC-SHA256(secret, "otcp-agent-v1" | controller nonce | agent nonce)}``.
4. The controller checks it and answers ``{"type": "welcome", "mac":
   HMAC-SHA256(secret, "otcp-controller-v1" | agent nonce | controller
   nonce)}``, so the agent knows it talks to a holder of the secret too.
   The secret itself never crosses the wire.
5. From then on each frame is ``MAC(32 bytes) | JSON``, the MAC an
   HMAC-SHA256 under a per-connection, per-direction key over a sequence
   number and the JSON (`Session`): a message cannot be injected, replayed,
   reordered or altered on the way.
6. The agent sends ``hello`` (addresses, MTU/MSS, congestion controls,
   whether ``net.ipv4.tcp_rto_min_us`` exists, the generation it has
   applied); the controller sends ``params`` whenever the host's set changes;
   the agent answers each with ``ack`` (per-route results) or ``reject``
   (the reason, naming the field).
"""

import hashlib
import hmac
import ipaddress
import json
import os
import struct

VERSION = 1

#: Largest frame either side accepts once authenticated (a 10 000-route set
#: is about 1 MB).
MAX_FRAME_BYTES = 8 * 1024 * 1024
#: Largest frame accepted before authentication (challenge, auth, welcome).
MAX_HANDSHAKE_FRAME_BYTES = 1024
#: Largest hello the controller accepts.
MAX_HELLO_FRAME_BYTES = 64 * 1024

NONCE_BYTES = 32
MAC_BYTES = 32
_HEADER = struct.Struct("!I")

RTO_MIN_MS = (1, 1000)
INITCWND = (1, 256)
CWND_CLAMP = (1, 65535)
GENERATION = (1, 2**63 - 1)
ROUTE_KEYS = ("dst", "rto_min_ms", "initcwnd", "cwnd_clamp", "quickack")
SET_KEYS = ("generation", "routes")


class ProtocolError(Exception):
    """The peer broke the protocol: bad frame, bad JSON, unexpected message."""


class AuthenticationError(ProtocolError):
    """The peer does not hold the shared secret (or a message was forged)."""


class ValidationError(ValueError):
    """A field of a message or parameter set is wrong.

    `field` is where (``routes[3].initcwnd``), `problem` what; ``str()`` gives
    both, ready for a log line or a reject message.
    """

    def __init__(self, field, problem):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


# -- framing -----------------------------------------------------------------


def frame(body):
    """One frame: the length header, then `body` (bytes)."""
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"message of {len(body)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    return _HEADER.pack(len(body)) + body


class FrameDecoder:
    """Cuts a byte stream into frames, refusing any longer than the limit.

    Feed it whatever `recv` returned; it returns the complete frames. The
    limit can be changed between frames (the handshake uses a small one).
    A frame header announcing more than the limit raises at once, before
    the body is awaited or buffered.
    """

    def __init__(self, limit=MAX_FRAME_BYTES):
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, data):
        self._buffer += data
        frames = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length > self.limit:
                raise ProtocolError(f"frame of {length} bytes exceeds the {self.limit}-byte limit")
            if len(self._buffer) < _HEADER.size + length:
                break
            frames.append(bytes(self._buffer[_HEADER.size : _HEADER.size + length]))
            del self._buffer[: _HEADER.size + length]
        return frames

    def pending(self):
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)


def encode_json(message):
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()


def decode_json(body, where="message"):
    """Parse one JSON object; truncated or malformed JSON raises ProtocolError."""
    try:
        message = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as error:
        raise ProtocolError(f"{where}: not UTF-8 ({error.reason} at byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise ProtocolError(f"{where}: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}") from None
    except ValueError as error:
        raise ProtocolError(f"{where}: invalid JSON ({error})") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"{where}: expected a JSON object, got {_json_type(message)}")
    return message


def _reject_constant(name):
    raise ValueError(f"{name} is not allowed")


# -- authentication ----------------------------------------------------------


def new_nonce():
    return os.urandom(NONCE_BYTES).hex()


def read_secret(path):
    """The shared secret from a file: its bytes with surrounding whitespace
    stripped (the controller reads its file the same way)."""
    with open(path, "rb") as handle:
        secret = handle.read().strip()
    if not secret:
        raise ValueError(f"{path}: the secret file is empty")
    return secret


def agent_mac(secret, controller_nonce, agent_nonce):
    """What the agent proves: it holds the secret and saw this challenge."""
    return _mac(secret, b"otcp-agent-v1", controller_nonce, agent_nonce)


def controller_mac(secret, agent_nonce, controller_nonce):
    """What the controller proves back (a different label: no reflection)."""
    return _mac(secret, b"otcp-controller-v1", agent_nonce, controller_nonce)


def _mac(secret, label, first, second):
    data = label + b"\0" + _nonce_bytes(first) + _nonce_bytes(second)
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


def _nonce_bytes(nonce):
    try:
        raw = bytes.fromhex(nonce)
    except (TypeError, ValueError):
        raise AuthenticationError("nonce is not hexadecimal") from None
    if len(raw) != NONCE_BYTES:
        raise AuthenticationError(f"nonce must be {NONCE_BYTES} bytes")
    return raw


def macs_equal(expected, received):
    return isinstance(received, str) and hmac.compare_digest(expected.encode(), received.encode())


class Session:
    """Seals and opens the frames of one authenticated connection.

    Each direction has its own key, derived from the secret and both nonces,
    and its own sequence number, so a frame is bound to this connection,
    this direction and this position.
    """

    def __init__(self, secret, controller_nonce, agent_nonce, role):
        if role not in ("agent", "controller"):
            raise ValueError(f"role must be 'agent' or 'controller', not {role!r}")
        nonces = _nonce_bytes(controller_nonce) + _nonce_bytes(agent_nonce)
        to_agent = hmac.new(secret, b"otcp-key-v1 controller->agent\0" + nonces, hashlib.sha256).digest()
        to_controller = hmac.new(secret, b"otcp-key-v1 agent->controller\0" + nonces, hashlib.sha256).digest()
        self._send_key, self._receive_key = (to_controller, to_agent) if role == "agent" else (to_agent, to_controller)
        self._sent = 0
        self._received = 0

    def seal(self, message):
        """A message dict -> the frame to send."""
        body = encode_json(message)
        mac = hmac.new(self._send_key, struct.pack("!Q", self._sent) + body, hashlib.sha256).digest()
        self._sent += 1
        return frame(mac + body)

    def open(self, body):
        """A received frame body -> the message dict (checked, in order)."""
        if len(body) < MAC_BYTES:
            raise ProtocolError(f"frame of {len(body)} bytes is too short to carry a MAC")
        mac, payload = body[:MAC_BYTES], body[MAC_BYTES:]
        expected = hmac.new(self._receive_key, struct.pack("!Q", self._received) + payload, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, expected):
            raise AuthenticationError(f"message {self._received} has a bad MAC (forged, replayed or reordered)")
        self._received += 1
        return decode_json(payload)


# -- messages ----------------------------------------------------------------


def challenge_message(nonce):
    return {"type": "challenge", "version": VERSION, "nonce": nonce}


def auth_message(secret, challenge):
    """The agent's answer to a challenge; returns (message, agent nonce)."""
    check_message(challenge, "challenge")
    if challenge["version"] != VERSION:
        raise ProtocolError(f"controller speaks protocol version {challenge['version']}, this agent {VERSION}")
    nonce = new_nonce()
    return {"type": "auth", "nonce": nonce, "mac": agent_mac(secret, challenge["nonce"], nonce)}, nonce


def welcome_message(secret, agent_nonce, controller_nonce):
    return {"type": "welcome", "mac": controller_mac(secret, agent_nonce, controller_nonce)}


def params_message(param_set):
    return {"type": "params", "set": param_set}


def ack_message(generation, results):
    return {"type": "ack", "generation": generation, "results": results}


def reject_message(generation, error):
    return {"type": "reject", "generation": generation, "error": error}


# A message schema: key -> (check, required).  Checks raise ValidationError.


def _string(field, value, max_length=4096):
    if not isinstance(value, str):
        raise ValidationError(field, f"{_show(value)} is not a string")
    if len(value) > max_length:
        raise ValidationError(field, f"longer than {max_length} characters")
    return value


def _hex_string(field, value):
    _string(field, value, 128)
    try:
        bytes.fromhex(value)
    except ValueError:
        raise ValidationError(field, f"{_show(value)} is not hexadecimal") from None
    return value


def _version(field, value):
    return _integer(field, value, (1, 65535))


def _boolean(field, value):
    if not isinstance(value, bool):
        raise ValidationError(field, f"{_show(value)} is not true or false")
    return value


def _optional(check):
    def optional(field, value):
        return None if value is None else check(field, value)

    return optional


def _list_of(check, max_items):
    def list_of(field, value):
        if not isinstance(value, list):
            raise ValidationError(field, f"{_show(value)} is not a list")
        if len(value) > max_items:
            raise ValidationError(field, f"more than {max_items} items")
        return [check(f"{field}[{i}]", item) for i, item in enumerate(value)]

    return list_of


def _address(field, value):
    _string(field, value, 64)
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValidationError(field, f"{_show(value)} is not an IPv4 or IPv6 address") from None


def _object(schema):
    def check(field, value):
        return _check_keys(field, value, schema)

    return check


def _generation(field, value):
    return _integer(field, value, GENERATION)


_RESULT_SCHEMA = {
    "dst": (lambda f, v: _string(f, v, 64), True),
    "status": (lambda f, v: _choice(f, v, ("applied", "skipped")), True),
    "reason": (_string, False),
    "dev": (lambda f, v: _string(f, v, 64), False),
    "gateway": (_optional(_address), False),
    "table": (lambda f, v: _integer(f, v, (0, 2**32 - 1)), False),
}

_INTERFACE_SCHEMA = {
    "name": (lambda f, v: _string(f, v, 64), True),
    "mtu": (lambda f, v: _integer(f, v, (0, 2**31 - 1)), True),
    "addresses": (_list_of(_address, 256), True),
}

SCHEMAS = {
    "challenge": {"version": (_version, True), "nonce": (_hex_string, True)},
    "auth": {"nonce": (_hex_string, True), "mac": (_hex_string, True)},
    "welcome": {"mac": (_hex_string, True)},
    "hello": {
        "hostname": (lambda f, v: _string(f, v, 255), True),
        "addresses": (_list_of(_address, 256), True),
        "interfaces": (_list_of(_object(_INTERFACE_SCHEMA), 256), True),
        "mtu": (_optional(lambda f, v: _integer(f, v, (0, 2**31 - 1))), True),
        "mss_bytes": (_optional(lambda f, v: _integer(f, v, (0, 2**31 - 1))), True),
        "congestion_controls": (_list_of(lambda f, v: _string(f, v, 64), 64), True),
        "congestion_control": (_optional(lambda f, v: _string(f, v, 64)), True),
        "tcp_rto_min_us": (_boolean, True),
        "applied_generation": (_optional(_generation), True),
        "agent_version": (_version, True),
    },
    "params": {"set": (lambda f, v: _check_dict(f, v), True)},
    "ack": {
        "generation": (_generation, True),
        "results": (_list_of(_object(_RESULT_SCHEMA), 1_000_000), True),
    },
    "reject": {
        "generation": (_optional(_generation), True),
        "error": (lambda f, v: _string(f, v, 65536), True),
    },
}


def check_message(message, *expected):
    """Check a received message against its schema; returns its type.

    `expected` limits which types are acceptable at this point of the
    conversation. Unknown keys, missing keys and wrong types are errors.
    """
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, got {_json_type(message)}")
    kind = message.get("type")
    if kind not in SCHEMAS or (expected and kind not in expected):
        wanted = " or ".join(expected) if expected else "a known message type"
        raise ProtocolError(f"type: expected {wanted}, got {_show(kind)}")
    body = {k: v for k, v in message.items() if k != "type"}
    try:
        _check_keys("", body, SCHEMAS[kind])
    except ValidationError as error:
        raise ProtocolError(f"{kind} message: {error}") from None
    return kind


def _check_dict(field, value):
    if not isinstance(value, dict):
        raise ValidationError(field, f"{_show(value)} is not an object")
    return value


def _check_keys(field, value, schema):
    _check_dict(field, value)
    prefix = f"{field}." if field else ""
    for key in value:
        if key not in schema:
            raise ValidationError(f"{prefix}{key}", "unknown key")
    for key, (check, required) in schema.items():
        if key in value:
            check(f"{prefix}{key}", value[key])
        elif required:
            raise ValidationError(f"{prefix}{key}", "missing")
    return value


# -- parameter sets ----------------------------------------------------------


def validate_param_set(param_set, applied_generation=None):
    """Check a parameter set completely; return it normalised.

    The format is the design note's (section 4)::

        {"generation": 7,
         "routes": [{"dst": "10.0.0.1/32", "rto_min_ms": 14, "initcwnd": 1,
                     "cwnd_clamp": 3, "quickack": true}]}

    Every key is required (``cwnd_clamp`` may be null); unknown keys, wrong
    types (a bool is not an integer, 14.0 is not an integer), out-of-range
    values, malformed or duplicate destinations, and a generation not newer
    than `applied_generation` raise `ValidationError` naming the field.
    A destination without a prefix length is a host route (/32 or /128);
    destinations come back as canonical prefixes (``10.0.0.1/32``).
    """
    if not isinstance(param_set, dict):
        raise ValidationError("", f"a parameter set is a JSON object, not {_json_type(param_set)}")
    for key in param_set:
        if key not in SET_KEYS:
            raise ValidationError(str(key), "unknown key")
    for key in SET_KEYS:
        if key not in param_set:
            raise ValidationError(key, "missing")
    generation = _integer("generation", param_set["generation"], GENERATION)
    if applied_generation is not None and generation <= applied_generation:
        raise ValidationError(
            "generation", f"{generation} is not newer than the applied generation {applied_generation}"
        )
    routes = param_set["routes"]
    if not isinstance(routes, list):
        raise ValidationError("routes", f"{_show(routes)} is not a list")
    normalised = []
    seen = {}
    for i, route in enumerate(routes):
        field = f"routes[{i}]"
        if not isinstance(route, dict):
            raise ValidationError(field, f"{_show(route)} is not an object")
        for key in route:
            if key not in ROUTE_KEYS:
                raise ValidationError(f"{field}.{key}", "unknown key")
        for key in ROUTE_KEYS:
            if key not in route:
                raise ValidationError(f"{field}.{key}", "missing")
        dst = _prefix(f"{field}.dst", route["dst"])
        if dst in seen:
            raise ValidationError(f"{field}.dst", f"{dst} duplicates routes[{seen[dst]}].dst")
        seen[dst] = i
        cwnd_clamp = route["cwnd_clamp"]
        normalised.append(
            {
                "dst": dst,
                "rto_min_ms": _integer(f"{field}.rto_min_ms", route["rto_min_ms"], RTO_MIN_MS),
                "initcwnd": _integer(f"{field}.initcwnd", route["initcwnd"], INITCWND),
                "cwnd_clamp": None if cwnd_clamp is None else _integer(f"{field}.cwnd_clamp", cwnd_clamp, CWND_CLAMP),
                "quickack": _boolean(f"{field}.quickack", route["quickack"]),
            }
        )
    return {"generation": generation, "routes": normalised}


def parse_param_set(body, applied_generation=None, where="parameter set"):
    """Bytes (a file, a frame) -> a validated set; size, JSON and fields checked."""
    if len(body) > MAX_FRAME_BYTES:
        raise ValidationError("", f"{where}: {len(body)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    try:
        param_set = decode_json(body, where)
    except ProtocolError as error:
        raise ValidationError("", str(error)) from None
    return validate_param_set(param_set, applied_generation)


def _integer(field, value, bounds):
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"{_show(value)} is not an integer")
    if not low <= value <= high:
        raise ValidationError(field, f"{value} is out of range {low}..{high}")
    return value


def _choice(field, value, choices):
    if value not in choices:
        raise ValidationError(field, f"{_show(value)} is not one of {', '.join(choices)}")
    return value


def _prefix(field, value):
    if not isinstance(value, str):
        raise ValidationError(field, f"{_show(value)} is not a string")
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as error:
        if "has host bits set" in str(error):
            raise ValidationError(field, f"{_show(value)} has host bits set") from None
        raise ValidationError(field, f"{_show(value)} is not an IPv4 or IPv6 prefix") from None


def _show(value):
    text = json.dumps(value) if _jsonable(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(value):
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _json_type(value):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )
