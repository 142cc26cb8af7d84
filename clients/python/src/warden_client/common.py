"""What the blocking and the asyncio clients share: the requests they
build, the results they return, and where they connect by default."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

from .errors import ProtocolError, WardenError

__all__ = [
    "DEFAULT_SOCKET",
    "SUPPORTED_VERSIONS",
    "VERSION",
    "CommandFailed",
    "Detached",
    "DetachedCommand",
    "Hello",
    "Pty",
    "Result",
    "RunEnded",
    "ShellStopped",
    "Started",
    "TerminalSize",
    "client_name",
    "command_number",
    "detach_request",
    "detached_commands",
    "error_of",
    "begin_run_request",
    "card_of",
    "hold_until",
    "ready_since",
    "next_job_of",
    "read_key",
    "result_of",
    "run_ended",
    "run_name",
    "run_request",
    "signal_name",
    "terminal_size",
]

VERSION = "0.1.0"
#: The protocol versions this client speaks.
SUPPORTED_VERSIONS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9)
#: Requests whose ``refused`` answer refuses that request alone: warden
#: keeps the connection (``hand_keys`` anywhere but the host's door).
REFUSED_IN_PLACE: frozenset[str] = frozenset({"hand_keys"})
#: Where warden serves the machine's own API.
DEFAULT_SOCKET = "/run/warden/api.sock"
#: How many bytes one stdin frame carries at most (warden takes 1 MiB).
STDIN_CHUNK = 256 * 1024
#: Once a frame has begun, the rest must come within this (warden's rule
#: for its clients, applied the other way).
FRAME_TIMEOUT = 30.0


def client_name() -> str:
    return f"warden-python {VERSION}"


def default_socket() -> str:
    return os.environ.get("WARDEN_SOCKET") or DEFAULT_SOCKET


def read_key(key: str | None, key_file: str | os.PathLike[str] | None) -> str | None:
    """The machine's key: given, read from ``key_file``, or from the file
    ``WARDEN_KEY_FILE`` names (as the ``warden`` command reads it)."""
    if key is not None:
        return key
    path = key_file if key_file is not None else os.environ.get("WARDEN_KEY_FILE") or None
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


class TerminalSize(NamedTuple):
    """A terminal's size in characters, rows first (as the protocol, and
    ``stty size``, give it; each side 1 to 1000). ``pty=(24, 80)`` is the
    same as ``pty=TerminalSize(24, 80)``."""

    rows: int
    cols: int


#: What ``pty=`` takes: ``(rows, cols)``, a TerminalSize, or what
#: ``os.get_terminal_size()`` returns (columns first: it is turned round).
Pty: TypeAlias = TerminalSize | tuple[int, int] | os.terminal_size


def terminal_size(pty: Pty) -> TerminalSize:
    """``pty=`` as a TerminalSize. Whole numbers only; their range (1 to
    1000) is warden's to check, and it says so (``bad_request``)."""
    if isinstance(pty, os.terminal_size):
        rows, cols = pty.lines, pty.columns
    else:
        try:
            rows, cols = pty
        except (TypeError, ValueError):
            raise TypeError(f"pty is (rows, cols), not {pty!r}") from None
    for name, value in (("rows", rows), ("cols", cols)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"pty: {name} is a whole number, not {value!r}")
    return TerminalSize(rows, cols)


def run_request(
    argv: Sequence[str] | None,
    shell: str | None,
    folder: str | None,
    timeout: float | None,
    env: Mapping[str, str] | None,
    pipe_stdin: bool,
    limits: Mapping[str, int | None] | None,
    keep_background: bool,
    extra: Mapping[str, Any] | None = None,
    pty: TerminalSize | None = None,
) -> dict[str, Any]:
    """A ``run`` request, with the fields left at their defaults left out
    (as warden's own client sends it). What warden checks (one of argv and
    shell, folders, names, a terminal's size) is left to warden, which says
    what is wrong. ``pty`` (version 4) runs it on a terminal of that size.
    ``extra`` fields are sent as they are (a newer warden's)."""
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv is a list of strings; for a command line use shell=...")
    request: dict[str, Any] = {"type": "run"}
    if argv is not None:
        request["argv"] = [str(a) for a in argv]
    if shell is not None:
        request["shell"] = shell
    if folder is not None:
        request["folder"] = folder
    if pipe_stdin:
        request["stdin"] = "pipe"
    if env:
        request["env"] = dict(env)
    if timeout is not None:
        if timeout < 0 or math.isnan(timeout):
            raise ValueError(f"timeout {timeout!r}: seconds, not negative")
        # Rounded first: 0.3 s is 300 ms, not 301.
        request["timeout_ms"] = math.ceil(round(timeout * 1000, 6))
    if keep_background:
        request["keep_background"] = True
    if limits is not None:
        request["limits"] = dict(limits)
    if pty is not None:
        request["pty"] = {"rows": pty.rows, "cols": pty.cols}
    if extra:
        request.update(extra)
    return request


def detach_request(request: dict[str, Any], tag: str | None) -> dict[str, Any]:
    """A run request made detached (protocol version 4): ``"detach": true``
    and the ``tag`` when there is one (1 to 128 printable bytes: warden
    checks, and says ``bad_request``)."""
    if tag is not None and not isinstance(tag, str):
        raise TypeError(f"tag is a str, not {type(tag).__name__}")
    request["detach"] = True
    if tag is not None:
        request["tag"] = tag
    return request


def command_number(command: int) -> int:
    """A detached command's number as warden takes it (``list``, ``attach``...)."""
    if isinstance(command, bool) or not isinstance(command, int):
        raise TypeError(f"a detached command is warden's number for it (an int), not {command!r}")
    if command < 0:
        raise ValueError(f"command {command}: warden's numbers are not negative")
    return command


def signal_name(signal: str | int) -> str:
    """A signal as warden takes it: ``TERM``, ``SIGTERM`` or ``15``."""
    if isinstance(signal, bool):
        raise TypeError("a signal is a name or a number")
    if isinstance(signal, int):
        return str(int(signal))
    return str(signal)


def ready_since(event: dict[str, Any]) -> int:
    """The ``after_ms`` of a ``ready_noted`` answer."""
    after = event.get("after_ms")
    if isinstance(after, bool) or not isinstance(after, int):
        raise ProtocolError(f"ready_noted without an after_ms: {event!r:.200}")
    return after


def next_job_of(event: dict[str, Any]) -> int:
    """The ``at_ms`` of a ``next_job_at`` answer."""
    at = event.get("at_ms")
    if isinstance(at, bool) or not isinstance(at, int):
        raise ProtocolError(f"next_job_at without an at_ms: {event!r:.200}")
    return at


def hold_until(until_ms: int) -> int:
    """A hold's time as warden takes it: Unix milliseconds, 0 or more."""
    if isinstance(until_ms, bool) or not isinstance(until_ms, int):
        raise TypeError(f"until_ms is a time in Unix milliseconds (an int), not {until_ms!r}")
    if until_ms < 0:
        raise ValueError(f"until_ms {until_ms}: Unix milliseconds, not negative")
    return until_ms


def run_name(run: str) -> str:
    """A run's name as warden takes it: 1 to 128 bytes (UTF-8), no
    control character."""
    if not isinstance(run, str):
        raise TypeError(f"a run's name is a str, not {type(run).__name__}")
    control = any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in run)
    if not 1 <= len(run.encode("utf-8", "surrogatepass")) <= 128 or control:
        raise ValueError(f"run {run!r:.160}: 1 to 128 bytes, no control character")
    return run


def begin_run_request(run: str, budget_usd: float | None) -> dict[str, Any]:
    """The ``begin_run`` request (protocol version 8); no budget: the
    machine's ``spend.per_run_usd``."""
    request: dict[str, Any] = {"type": "begin_run", "run": run_name(run)}
    if budget_usd is not None:
        if isinstance(budget_usd, bool) or not isinstance(budget_usd, (int, float)):
            raise TypeError(f"budget_usd is dollars (a number), not {budget_usd!r}")
        if not math.isfinite(budget_usd) or budget_usd < 0:
            raise ValueError(f"budget_usd {budget_usd!r}: dollars, finite, not negative")
        request["budget_usd"] = budget_usd
    return request


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The answer to ``end_run``: what the run spent, in integer
    micro-dollars, and how it ended (``ended``; ``budget`` when it reached
    its budget first)."""

    run: str
    spent_micro_usd: int
    how: str

    @property
    def spent_usd(self) -> float:
        return self.spent_micro_usd / 1_000_000


def run_ended(event: Mapping[str, Any]) -> RunEnded:
    spent, how = event.get("spent_micro_usd"), event.get("how")
    if isinstance(spent, bool) or not isinstance(spent, int) or not isinstance(how, str):
        raise ProtocolError(f"run_ended without spent_micro_usd and how: {event!r:.200}")
    return RunEnded(str(event.get("run", "")), spent, how)


def card_of(event: Mapping[str, Any]) -> dict[str, Any]:
    card = event.get("card")
    if not isinstance(card, dict):
        raise ProtocolError(f"card without a card: {event!r:.200}")
    return card


@dataclass(slots=True)
class Result:
    """How a command ended, and its output (when collected).

    ``status`` follows the shell's convention: the exit code, or 128+n
    after death by signal n. ``code`` or ``signal`` says which
    (``signal`` is a name such as ``"SIGTERM"``). ``limit`` names the limit
    that ended it (``timeout``, ``output``, ``memory``, ``processes``,
    ``cpu``, ``file_size``).
    ``error`` says why it could not start (status 127, 126 or 125).
    ``drained`` is false when output was still held open by a kept
    background process and was cut. ``stdout_bytes``/``stderr_bytes`` are
    warden's counts, also when the output was streamed, not collected.
    """

    status: int
    code: int | None = None
    signal: str | None = None
    limit: str | None = None
    error: str | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    duration_ms: float = 0.0
    drained: bool = True
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    #: warden's own name for the command (None when it never started).
    command: int | None = None
    pid: int | None = None

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.status == 0

    def check(self) -> Result:
        """Returns self when the command exited 0; raises otherwise."""
        if not self.ok:
            raise CommandFailed(self)
        return self


class CommandFailed(WardenError):
    """Raised by :meth:`Result.check`: the command did not exit 0."""

    def __init__(self, result: Result) -> None:
        how = (
            result.error
            or (f"killed by {result.signal}" if result.signal else None)
            or f"exit code {result.code}"
        )
        if result.limit:
            how += f" ({result.limit} limit)"
        WardenError.__init__(self, "command_failed", f"status {result.status}: {how}")
        self.result = result


@dataclass(frozen=True, slots=True)
class ShellStopped:
    """The answer to ``stop_shell``: processes signalled, and left."""

    signalled: int
    left: int


@dataclass(frozen=True, slots=True)
class Started:
    """A command has started: warden's name for it and its pid."""

    command: int
    pid: int


def error_of(event: Mapping[str, Any], fatal: bool | None = None) -> WardenError:
    """The exception an ``error`` event stands for (``fatal``: whether the
    connection is over, when the code alone does not say)."""
    return WardenError(
        str(event.get("code", "internal")), str(event.get("message", "")), fatal=fatal
    )


def _int(event: Mapping[str, Any], name: str, default: int | None = None) -> int | None:
    value = event.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"exit: {name} is {value!r}, not a number")
    return int(value)


def result_of(
    event: Mapping[str, Any],
    stdout: bytes = b"",
    stderr: bytes = b"",
    started: Started | None = None,
) -> Result:
    """A Result from an ``exit`` event."""
    status = _int(event, "status")
    if status is None:
        raise ProtocolError(f"exit without a status: {dict(event)!r:.200}")
    signal = event.get("signal")
    limit = event.get("limit")
    error = event.get("error")
    return Result(
        status=status,
        code=_int(event, "code"),
        signal=None if signal is None else str(signal),
        limit=None if limit is None else str(limit),
        error=None if error is None else str(error),
        stdout=stdout,
        stderr=stderr,
        duration_ms=float(event.get("duration_ms", 0.0)),
        drained=bool(event.get("drained", True)),
        stdout_bytes=_int(event, "stdout_bytes", 0) or 0,
        stderr_bytes=_int(event, "stderr_bytes", 0) or 0,
        command=started.command if started else None,
        pid=started.pid if started else None,
    )


@dataclass(frozen=True, slots=True)
class Detached:
    """The answer to a detached run (protocol version 4): warden's number
    for the command, its pid and its tag. When it could not start,
    ``command`` and ``pid`` are None and ``exit`` says why (``error``,
    status 127, 126 or 125)."""

    command: int | None
    pid: int | None
    tag: str | None = None
    exit: Result | None = None


@dataclass(frozen=True, slots=True)
class DetachedCommand:
    """A detached command as ``list_commands`` shows it (protocol version 4)."""

    command: int
    argv: list[str]
    pid: int
    #: When it started (Unix ms).
    started_ms: int
    #: ``"running"`` or ``"exited"``.
    state: str
    #: Connections following it now.
    attached: int
    #: Output let go because nobody was attached and the buffer (1 MiB) was full.
    dropped_bytes: int
    tag: str | None = None
    folder: str | None = None
    #: How it ended, once it has (no output: ``attach`` gives it).
    exit: Result | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"


def detached_commands(event: Mapping[str, Any]) -> list[DetachedCommand]:
    """The DetachedCommands of a ``commands`` event."""
    listed = event.get("commands")
    if not isinstance(listed, list):
        raise ProtocolError(f"commands without a list: {dict(event)!r:.200}")
    out = []
    for entry in listed:
        try:
            command = int(entry["command"])
            ended = entry.get("exit")
            exit = None if ended is None else result_of(ended)
            if exit is not None:
                exit.command = command
            out.append(
                DetachedCommand(
                    command=command,
                    argv=[str(a) for a in entry["argv"]],
                    pid=int(entry["pid"]),
                    started_ms=int(entry["started_ms"]),
                    state=str(entry["state"]),
                    attached=int(entry.get("attached", 0)),
                    dropped_bytes=int(entry.get("dropped_bytes", 0)),
                    tag=None if entry.get("tag") is None else str(entry["tag"]),
                    folder=None if entry.get("folder") is None else str(entry["folder"]),
                    exit=exit,
                )
            )
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ProtocolError(f"a detached command warden listed: {entry!r:.200}") from None
    return out


@dataclass(slots=True)
class Hello:
    """What warden said in its hello."""

    version: int
    server: str
    extra: dict[str, Any] = field(default_factory=dict)
