"""The errors a warden client raises.

Every error warden sends is a :class:`WardenError` carrying the protocol's
code (see docs/protocol.md, "Errors"). Failures of the socket itself are a
:class:`ConnectionError`, which is both a ``WardenError`` (code
``"connection"``) and Python's own ``ConnectionError``, so either ``except``
catches it. A peer that breaks the protocol is a :class:`ProtocolError`.
"""

from __future__ import annotations

import builtins

__all__ = [
    "CODES",
    "FATAL_CODES",
    "ConnectionError",
    "MachineError",
    "ProtocolError",
    "TimeoutError",
    "WardenError",
]

#: Every code warden may send in an ``error`` event.
CODES: frozenset[str] = frozenset(
    {
        "refused",
        "hello_required",
        "unsupported_version",
        "bad_frame",
        "frame_too_large",
        "bad_json",
        "bad_request",
        "duplicate_id",
        "unknown_id",
        "shutting_down",
        "not_confined",
        "audit_failing",
        "gate_closed",
        "internal",
    }
)

#: The codes after which warden closes the connection.
FATAL_CODES: frozenset[str] = frozenset(
    {"refused", "hello_required", "unsupported_version", "bad_frame", "frame_too_large"}
)


class WardenError(Exception):
    """An error warden reported, or one this client met talking to it.

    ``code`` is the protocol's code (``"bad_request"``, ``"refused"``...),
    or one of the client's own: ``"connection"`` (:class:`ConnectionError`),
    ``"timeout"`` (:class:`TimeoutError`), ``"protocol"``
    (:class:`ProtocolError`), ``"launcher"`` (:class:`MachineError`).
    """

    code: str
    message: str

    def __init__(self, code: str, message: str, *, fatal: bool | None = None) -> None:
        Exception.__init__(self, code, message)
        self.code = code
        self.message = message
        self._fatal = fatal

    @property
    def fatal(self) -> bool:
        """True when the connection is over after this error (a ``refused``
        that answered ``hand_keys`` is not: warden keeps the connection)."""
        if self._fatal is not None:
            return self._fatal
        return self.code in FATAL_CODES or self.code in ("connection", "protocol")

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ConnectionError(WardenError, builtins.ConnectionError):  # noqa: A001 - the brief's name
    """The socket failed: cannot connect, closed, reset, or timed out."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        WardenError.__init__(self, "connection", message)
        self.errno = errno


class TimeoutError(WardenError, builtins.TimeoutError):  # noqa: A001
    """Nothing came from warden (or no room to write) within the client's
    ``timeout``. Nothing was consumed: the connection is still usable."""

    def __init__(self, message: str) -> None:
        WardenError.__init__(self, "timeout", message)
        self.errno = None


class ProtocolError(WardenError):
    """The peer sent something that is not warden's protocol."""

    def __init__(self, message: str) -> None:
        WardenError.__init__(self, "protocol", message)


class MachineError(WardenError):
    """``warden machine ...`` failed, or a machine cannot be reached."""

    def __init__(self, message: str) -> None:
        WardenError.__init__(self, "launcher", message)
