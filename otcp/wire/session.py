"""Authentication on the agent channel: HMAC challenge-response, then MAC'd frames.

The controller sends a challenge nonce; the agent answers with its own
nonce and HMAC-SHA256(secret, "otcp-agent-v1" | controller nonce | agent
nonce); the controller proves itself back under another label, so neither
side can reflect the other's proof. The secret never crosses the wire.
From then on every frame carries a MAC under a per-connection,
per-direction key over a sequence number (`Session`).
"""

import hashlib
import hmac
import os
import struct
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from otcp.wire.framing import ProtocolError, decode_json, encode_json, frame
from otcp.wire.limits import MAC_BYTES, NONCE_BYTES


class AuthenticationError(ProtocolError):
    """The peer does not hold the shared secret (or a message was forged)."""


def new_nonce() -> str:
    """A fresh random nonce, as hex."""
    return os.urandom(NONCE_BYTES).hex()


def read_secret(path: str) -> bytes:
    """The shared secret from a file: its bytes with surrounding whitespace
    stripped (controller and agent read their files the same way)."""
    with open(path, "rb") as handle:
        secret = handle.read().strip()
    if not secret:
        raise ValueError(f"{path}: the secret file is empty")
    return secret


def agent_mac(secret: bytes, controller_nonce: str, agent_nonce: str) -> str:
    """What the agent proves: it holds the secret and saw this challenge."""
    return _mac(secret, b"otcp-agent-v1", controller_nonce, agent_nonce)


def controller_mac(secret: bytes, agent_nonce: str, controller_nonce: str) -> str:
    """What the controller proves back (a different label: no reflection)."""
    return _mac(secret, b"otcp-controller-v1", agent_nonce, controller_nonce)


def _mac(secret: bytes, label: bytes, first: str, second: str) -> str:
    data = label + b"\0" + _nonce_bytes(first) + _nonce_bytes(second)
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


def _nonce_bytes(nonce: str) -> bytes:
    try:
        raw = bytes.fromhex(nonce)
    except (TypeError, ValueError):
        raise AuthenticationError("nonce is not hexadecimal") from None
    if len(raw) != NONCE_BYTES:
        raise AuthenticationError(f"nonce must be {NONCE_BYTES} bytes")
    return raw


def macs_equal(expected: str, received: object) -> bool:
    """Constant-time comparison of a MAC with what the peer sent."""
    return isinstance(received, str) and hmac.compare_digest(expected.encode(), received.encode())


class Session:
    """Seals and opens the frames of one authenticated connection.

    Each direction has its own key, derived from the secret and both nonces,
    and its own sequence number, so a frame is bound to this connection,
    this direction and this position.
    """

    def __init__(self, secret: bytes, controller_nonce: str, agent_nonce: str, role: str):
        if role not in ("agent", "controller"):
            raise ValueError(f"role must be 'agent' or 'controller', not {role!r}")
        nonces = _nonce_bytes(controller_nonce) + _nonce_bytes(agent_nonce)
        to_agent = hmac.new(secret, b"otcp-key-v1 controller->agent\0" + nonces, hashlib.sha256).digest()
        to_controller = hmac.new(secret, b"otcp-key-v1 agent->controller\0" + nonces, hashlib.sha256).digest()
        self._send_key, self._receive_key = (to_controller, to_agent) if role == "agent" else (to_agent, to_controller)
        self._sent = 0
        self._received = 0

    def seal(self, message: Mapping[str, Any] | BaseModel) -> bytes:
        """A message (a dict, or a message model) -> the frame to send."""
        body = encode_json(message)
        mac = hmac.new(self._send_key, struct.pack("!Q", self._sent) + body, hashlib.sha256).digest()
        self._sent += 1
        return frame(mac + body)

    def open(self, body: bytes) -> dict[str, Any]:
        """A received frame body -> the message dict (checked, in order)."""
        if len(body) < MAC_BYTES:
            raise ProtocolError(f"frame of {len(body)} bytes is too short to carry a MAC")
        mac, payload = body[:MAC_BYTES], body[MAC_BYTES:]
        expected = hmac.new(self._receive_key, struct.pack("!Q", self._received) + payload, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, expected):
            raise AuthenticationError(f"message {self._received} has a bad MAC (forged, replayed or reordered)")
        self._received += 1
        return decode_json(payload)
