"""warden's frames: a 9-byte header (kind u8, id u32 big-endian, len u32
big-endian) and ``len`` payload bytes, at most 1 MiB.

Pure functions only: the clients do the reading and writing.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from .errors import ProtocolError

__all__ = [
    "CONTROL",
    "HEADER",
    "HEADER_LEN",
    "KIND_NAMES",
    "MAX_FRAME",
    "STDERR",
    "STDIN",
    "STDOUT",
    "Frame",
    "decode_header",
    "encode",
    "encode_control",
]

CONTROL = 1
STDOUT = 2
STDERR = 3
STDIN = 4
KIND_NAMES: dict[int, str] = {CONTROL: "control", STDOUT: "stdout", STDERR: "stderr", STDIN: "stdin"}

HEADER = struct.Struct(">BII")
HEADER_LEN = HEADER.size  # 9
MAX_FRAME = 1 << 20
MAX_ID = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame as read: its kind, its id and its payload."""

    kind: int
    id: int
    payload: bytes

    def json(self) -> dict[str, Any]:
        """The payload of a control frame, as a JSON object."""
        try:
            value = json.loads(self.payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError(f"control frame {self.id}: not JSON: {e}") from None
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise ProtocolError(f"control frame {self.id}: not an event object: {value!r:.200}")
        return value


def encode(kind: int, id: int, payload: bytes | bytearray | memoryview = b"") -> bytes:
    """One frame, header and payload, ready for a single write."""
    if kind not in KIND_NAMES:
        raise ValueError(f"unknown frame kind {kind}")
    if not 0 <= id <= MAX_ID:
        raise ValueError(f"frame id {id} is not a u32")
    size = len(payload)
    if size > MAX_FRAME:
        raise ValueError(f"a frame carries at most {MAX_FRAME} bytes, not {size}")
    return HEADER.pack(kind, id, size) + bytes(payload)


def encode_control(id: int, message: dict[str, Any]) -> bytes:
    """A control frame carrying ``message`` as compact UTF-8 JSON."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return encode(CONTROL, id, body)


def decode_header(raw: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """``(kind, id, len)`` of a header; refuses an unknown kind or a length
    over the limit, as warden does, before any payload is read."""
    if len(raw) != HEADER_LEN:
        raise ProtocolError(f"a header is {HEADER_LEN} bytes, not {len(raw)}")
    kind, id, size = HEADER.unpack(bytes(raw))
    if kind not in KIND_NAMES:
        raise ProtocolError(f"unknown frame kind {kind}")
    if size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes exceeds the limit of {MAX_FRAME} bytes")
    return kind, id, size
