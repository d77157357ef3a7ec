"""Frames on the agent channel: a 4-byte big-endian length, then that many bytes of JSON."""

import json
import struct
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from otcp.wire import validation
from otcp.wire.limits import MAX_FRAME_BYTES

_HEADER = struct.Struct("!I")


class ProtocolError(Exception):
    """The peer broke the protocol: bad frame, bad JSON, unexpected message."""


def frame(body: bytes) -> bytes:
    """One frame: the length header, then `body`."""
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

    def __init__(self, limit: int = MAX_FRAME_BYTES):
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the frames now complete."""
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

    def pending(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)


def encode_json(message: Mapping[str, Any] | BaseModel) -> bytes:
    """A message as compact JSON bytes (NaN and infinity refused). The validated models in it
    (a parameter set, its routes, a hello) go as their fields, every field given."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False, default=_fields).encode()


def _fields(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def decode_json(body: bytes, where: str = "message") -> dict[str, Any]:
    """Parse one JSON object; bad, too deep or non-object JSON raises ProtocolError."""
    try:
        message = validation.load_json(body, where)
    except validation.JSONError as error:
        raise ProtocolError(str(error)) from None
    if not isinstance(message, dict):
        raise ProtocolError(f"{where}: expected a JSON object, got {validation.json_type(message)}")
    return message
