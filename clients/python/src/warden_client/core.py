"""The core the blocking and the asyncio clients share, without I/O.

Everything here is pure state and computation: where each frame id's
frames go and whether the connection is over, the hello and each
request as warden takes it and its answer as the client returns it, and
the state of one command (its output waiting, its stdin, its end). The
clients (:mod:`warden_client.client`, :mod:`warden_client.aio`) add only
their transport: who reads and writes the socket, and how they wait.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from . import frames as fr
from .common import (
    REFUSED_IN_PLACE,
    STDIN_CHUNK,
    Detached,
    DetachedCommand,
    Hello,
    Result,
    RunEnded,
    ShellStopped,
    Started,
    TerminalSize,
    begin_run_request,
    card_of,
    command_number,
    detached_commands,
    error_of,
    hold_until,
    next_job_of,
    ready_since,
    result_of,
    run_ended,
    run_name,
    signal_name,
    terminal_size,
)
from .errors import FATAL_CODES, ConnectionError, ProtocolError, WardenError

#: A refusal may be sent just before warden closes: how long to look for it.
LAST_WORDS = 2.0

Stream = Literal["stdout", "stderr"]
NAMES: dict[int, Stream] = {fr.STDOUT: "stdout", fr.STDERR: "stderr"}
BOTH = frozenset((fr.STDOUT, fr.STDERR))
#: What a wait for a command's output gets once the command has ended.
END = object()
T = TypeVar("T")


class _Default(enum.Enum):
    """A timeout left out: the client's own applies."""

    TIMEOUT = 0


DEFAULT = _Default.TIMEOUT


def deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + max(0.0, timeout)


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def own_timeout(timeout: float | None | _Default, default: float | None) -> float | None:
    """``timeout``, or the client's own when it was left out."""
    return default if isinstance(timeout, _Default) else timeout


# -- where frames go ---------------------------------------------------------


class Route:
    """Where frames of one id go. Touched only under the link's lock."""

    def __init__(self) -> None:
        self.output: deque[tuple[int, bytes]] = deque()
        self.events: deque[dict[str, Any]] = deque()
        #: Output kinds dropped on arrival (their reader gave up on them).
        self.discard: frozenset[int] = frozenset()
        #: The exit event, once it came: nothing follows it.
        self.exit: dict[str, Any] | None = None
        self.started: dict[str, Any] | None = None
        #: An error before `started` or `exit`: the run was refused.
        self.refused: WardenError | None = None
        #: Errors after the start (stdin for a command that had ended).
        self.late_errors: list[WardenError] = []
        self.command = False
        #: An attach or a wait (version 4): before its answer, unknown_id
        #: means warden has no such detached command: a refusal.
        self.follows = False

    def on_control(self, event: dict[str, Any]) -> None:
        if not self.command:
            self.events.append(event)
            return
        kind = event["type"]
        if kind == "exit":
            self.exit = event
        elif kind in ("started", "detached", "attached"):
            # The first answer: the command runs (a detached run: runs on
            # its own; an attach: is followed here).
            self.started = event
        elif kind == "error":
            error = error_of(event)
            # unknown_id is about stdin that came too late: never a refusal
            # of a run (of an attach or a wait, before its answer, it is).
            answered = self.started is not None or self.exit is not None
            if not answered and (error.code != "unknown_id" or self.follows):
                self.refused = error
            else:
                self.late_errors.append(error)
        # Other events (a later protocol's) are not this version's concern.

    @property
    def ended(self) -> bool:
        return self.exit is not None or self.refused is not None


class Switchboard:
    """One connection's routes, by frame id, and its failure once it is
    over: a link without its socket. Not thread-safe (the blocking link
    calls it under its lock)."""

    def __init__(self, timeout: float | None, name: str) -> None:
        self.timeout = timeout
        self.name = name
        self._routes: dict[int, Route] = {0: Route()}
        self._failure: WardenError | None = None
        #: The type of the request awaiting its answer on id 0 (one at a time).
        self.asking: str | None = None

    @property
    def failure(self) -> WardenError | None:
        return self._failure

    def route(self, id: int) -> Route:
        route = self._routes.get(id)
        if route is None:
            route = self._routes[id] = Route()
            route.command = True
        return route

    def drop(self, id: int) -> None:
        if id != 0:
            self._routes.pop(id, None)

    def discard(self, route: Route, kinds: frozenset[int]) -> None:
        route.discard = route.discard | kinds
        kept = [item for item in route.output if item[0] not in kinds]
        route.output.clear()
        route.output.extend(kept)

    def _fail(self, error: WardenError) -> None:
        """The connection is over, for everyone."""
        if self._failure is None:
            self._failure = error

    def _dispatch(self, frame: fr.Frame) -> None:
        """Hands a frame to its route."""
        if frame.kind == fr.CONTROL:
            event = frame.json()
            code = event.get("code")
            # A refusal of the request it answers (hand_keys on the
            # machine's own socket) leaves the connection open.
            in_place = frame.id == 0 and code == "refused" and self.asking in REFUSED_IN_PLACE
            if event["type"] == "error" and code in FATAL_CODES and not in_place:
                self._fail(error_of(event))
                return
            route = self._routes.get(frame.id)
            if route is not None:
                route.on_control(event)
        elif frame.kind in BOTH:
            route = self._routes.get(frame.id)
            if route is not None and frame.kind not in route.discard:
                route.output.append((frame.kind, frame.payload))
        else:
            raise ProtocolError(f"warden sent a {fr.KIND_NAMES[frame.kind]} frame")


def next_id(last: int) -> int:
    """The frame id after ``last``. Never reused while the connection
    lives (2**32 - 1 of them): a late frame for an old id cannot be taken
    for a new one's."""
    if last + 1 > fr.MAX_ID:
        raise WardenError("internal", "this connection has used every frame id")
    return last + 1


def first_event(replies: Route) -> Callable[[], dict[str, Any] | None]:
    """A wait's test: the next event on id 0, if one came."""
    return lambda: replies.events.popleft() if replies.events else None


def first_answer(route: Route) -> Callable[[], bool | None]:
    """A wait's test: a command's first answer (or its end) came."""
    return lambda: True if (route.started or route.ended) else None


def settle(board: Switchboard, id: int, route: Route) -> None:
    """After a command's first answer: a refusal is raised, its id let go."""
    if route.refused is not None:
        board.drop(id)
        raise route.refused


# -- the hello -----------------------------------------------------------------


def vsock_request(port: int) -> bytes:
    """What the host's end of a VM's hybrid vsock is asked first."""
    return f"CONNECT {port}\n".encode()


def vsock_answered(path: str, port: int, line: bytes | bytearray) -> None:
    """Checks the vsock's answer (``OK <host port>``, without its newline)."""
    answer = line.decode("utf-8", "replace")
    if not (answer.startswith("OK ") and answer[3:].isdigit()):
        raise ConnectionError(f"{path}: CONNECT {port}: answered {answer!r}, not OK <port>")


def hello_message(versions: Sequence[int], client: str, secret: str | None) -> bytes:
    """The hello frame: the versions this client speaks, its name, the key."""
    hello: dict[str, Any] = {
        "type": "hello",
        "versions": [int(v) for v in versions],
        "client": client,
    }
    if secret is not None:
        hello["key"] = secret
    return fr.encode_control(0, hello)


def hello_of(path: str, event: dict[str, Any]) -> Hello:
    """warden's answer to the hello: its hello, or the error it raises."""
    if event["type"] == "error":
        raise error_of(event)
    if event["type"] != "hello" or not isinstance(event.get("version"), int):
        raise ProtocolError(f"{path}: expected warden's hello, got {event!r:.200}")
    extra = {k: v for k, v in event.items() if k not in ("type", "version", "server")}
    return Hello(event["version"], str(event.get("server", "")), extra)


# -- requests on id 0 and their answers -------------------------------------------


def answer_of(message: dict[str, Any], answer: str, event: dict[str, Any]) -> dict[str, Any]:
    """The answer to a request on id 0, or the error that answered it."""
    if event["type"] == "error":
        # It answered this request: the connection goes on.
        raise error_of(event, fatal=False)
    if event["type"] != answer:
        raise ProtocolError(f"{message['type']}: expected {answer}, got {event!r:.200}")
    return event


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """A request on id 0: the message, the answer it expects, and what the
    client returns of that answer. ``gone``, when there is one, is what
    the client returns when ``unknown_id`` answered it (a command that is
    not running, any more): then that is not an error."""

    message: dict[str, Any]
    answer: str
    parse: Callable[[dict[str, Any]], T]
    gone: Callable[[], T] | None = None


def _event(event: dict[str, Any]) -> dict[str, Any]:
    return event


def _int_field(event: dict[str, Any], name: str, missing: str) -> int:
    value = event.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{missing}: {event!r:.200}")
    return value


def status() -> Call[dict[str, Any]]:
    return Call({"type": "status"}, "status", _event)


def reload() -> Call[dict[str, Any]]:
    return Call({"type": "reload"}, "reloaded", _event)


def audit(kind: str, fields: Any) -> Call[int]:
    message: dict[str, Any] = {"type": "audit", "kind": kind}
    if fields is not None:
        message["fields"] = fields

    def seq(event: dict[str, Any]) -> int:
        value = event.get("seq")
        if not isinstance(value, int):
            raise ProtocolError(f"recorded without a seq: {event!r:.200}")
        return value

    return Call(message, "recorded", seq)


def stop_shell(signal: str | int) -> Call[ShellStopped]:
    return Call(
        {"type": "stop_shell", "signal": signal_name(signal)},
        "shell_stopped",
        lambda event: ShellStopped(int(event.get("signalled", 0)), int(event.get("left", 0))),
    )


def close_gate(reason: str) -> Call[dict[str, Any]]:
    return Call({"type": "close_gate", "reason": reason}, "gate", _event)


def open_gate() -> Call[dict[str, Any]]:
    return Call({"type": "open_gate"}, "gate", _event)


def hold(until_ms: int) -> Call[int]:
    return Call(
        {"type": "hold", "until_ms": hold_until(until_ms)},
        "held",
        lambda event: _int_field(event, "until_ms", "held without an until_ms"),
    )


def ready() -> Call[int]:
    return Call({"type": "ready"}, "ready_noted", ready_since)


def next_job(at_ms: int) -> Call[int]:
    return Call({"type": "next_job", "at_ms": hold_until(at_ms)}, "next_job_at", next_job_of)


def hand_keys(text: str) -> Call[list[str]]:
    if not isinstance(text, str):
        raise TypeError(f"text is a .env text (a str), not {type(text).__name__}")

    def names(event: dict[str, Any]) -> list[str]:
        names = event.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ProtocolError(f"keys_handed without names: {event!r:.200}")
        return names

    return Call({"type": "hand_keys", "text": text}, "keys_handed", names)


def begin_run(run: str, budget_usd: float | None) -> Call[int]:
    return Call(
        begin_run_request(run, budget_usd),
        "run_begun",
        lambda event: _int_field(event, "budget_micro_usd", "run_begun without budget_micro_usd"),
    )


def end_run(run: str) -> Call[RunEnded]:
    return Call({"type": "end_run", "run": run_name(run)}, "run_ended", run_ended)


def card(run: str) -> Call[dict[str, Any]]:
    return Call({"type": "card", "run": run_name(run)}, "card", card_of)


def shutdown() -> Call[None]:
    return Call({"type": "shutdown"}, "shutting_down", lambda event: None)


def signal(id: int, signal: str | int) -> Call[str | None]:
    return Call(
        {"type": "signal", "target": id, "signal": signal_name(signal)},
        "signalled",
        lambda event: str(event.get("signal", signal)),
        gone=lambda: None,
    )


def resize(id: int, rows: int, cols: int) -> Call[TerminalSize]:
    size = terminal_size((rows, cols))
    return Call(
        {"type": "resize", "target": id, "rows": size.rows, "cols": size.cols},
        "resized",
        resized_of,
    )


def list_commands() -> Call[list[DetachedCommand]]:
    return Call({"type": "list"}, "commands", detached_commands)


def signal_command(command: int, signal: str | int) -> Call[str | None]:
    return Call(
        {"type": "signal_command", "command": command_number(command),
         "signal": signal_name(signal)},
        "command_signalled",
        lambda event: str(event.get("signal", signal)),
        gone=lambda: None,
    )


def resized_of(event: Mapping[str, Any]) -> TerminalSize:
    """The size a ``resized`` event says."""
    rows, cols = event.get("rows"), event.get("cols")
    if type(rows) is int and type(cols) is int:
        return TerminalSize(rows, cols)
    raise ProtocolError(f"resized without rows and cols: {dict(event)!r:.200}")


# -- detached commands (protocol version 4) ----------------------------------------


def detached_of(route: Route, tag: str | None) -> Detached:
    """What a detached run's id was answered with."""
    if route.exit is not None:
        return Detached(None, None, tag, result_of(route.exit))
    event = route.started or {}
    command, pid = event.get("command"), event.get("pid")
    if type(command) is not int or type(pid) is not int or event.get("type") != "detached":
        raise ProtocolError(f"a detached run answered with {event!r:.200}")
    answered = event.get("tag", tag)
    return Detached(command, pid, None if answered is None else str(answered))


def attach_request(command: int) -> dict[str, Any]:
    """An ``attach`` to a detached command (protocol version 4)."""
    return {"type": "attach", "command": command_number(command)}


def wait_request(command: int) -> dict[str, Any]:
    """A ``wait`` for a detached command's end (protocol version 4)."""
    return {"type": "wait", "command": command_number(command)}


def waited(route: Route, command: int) -> Result:
    """How a detached command ended, as a ``wait`` was answered."""
    assert route.exit is not None
    result = result_of(route.exit)
    result.command = command
    return result


# -- one command's state -------------------------------------------------------------


class Command:
    """What a command started on a connection is, apart from reading and
    writing: its route, its stdin's state, its Result once it has one.
    ``_client`` is the client that started it; ``_link`` its link."""

    #: What its repr calls it.
    _label = "Process"

    def __init__(
        self, client: Any, id: int, route: Route, stdin: bool, pty: TerminalSize | None = None
    ) -> None:
        self._client = client
        self._link = client._link
        self._route = route
        #: This connection's frame id for the command.
        self.id = id
        started = route.started or {}
        #: warden's own name for the command, and its pid (None when it
        #: could not start).
        self.command: int | None = started.get("command")
        self.pid: int | None = started.get("pid")
        #: Its terminal's size as last asked for (None: no terminal).
        self.terminal: TerminalSize | None = pty
        # A terminal takes input whether or not stdin=True: what is typed.
        self._stdin_open = stdin or pty is not None
        self._piped = self._stdin_open
        self._result: Result | None = None

    # -- state ---------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """True once warden has reported the command's end (its output may
        still wait to be read)."""
        return self._route.exit is not None

    @property
    def result(self) -> Result | None:
        """The Result, once :meth:`wait` returned it."""
        return self._result

    # -- output --------------------------------------------------------------

    def _ready(self, kinds: frozenset[int]) -> Callable[[], tuple[int, bytes] | object | None]:
        """A wait's test: the next chunk of one of ``kinds``, or END."""
        route = self._route

        def ready() -> tuple[int, bytes] | object | None:
            for i, item in enumerate(route.output):
                if item[0] in kinds:
                    del route.output[i]
                    return item
            return END if route.ended else None

        return ready

    def _took(self, got: tuple[int, bytes] | object) -> tuple[int, bytes] | None:
        """What a wait for a chunk got: the chunk, or None at the end."""
        if got is END:
            self._link.drop(self.id)
            return None
        assert isinstance(got, tuple)
        return got

    def discard(self, stream: Stream) -> None:
        """Drops one stream's output, what waits and what is still to come."""
        kind = fr.STDOUT if stream == "stdout" else fr.STDERR
        self._link.discard(self._route, frozenset((kind,)))

    # -- the end -----------------------------------------------------------------

    def _collecting(self, collect: bool) -> tuple[list[bytes], list[bytes]]:
        """Before a wait for the end: output not to be collected is dropped."""
        if not collect:
            self._link.discard(self._route, BOTH)
        return [], []

    def _ended_with(self, out: list[bytes], err: list[bytes]) -> Result:
        """The Result, once the output has all been read."""
        exit = self._route.exit
        assert exit is not None
        started = Started(self.command, self.pid or 0) if self.command is not None else None
        self._result = result_of(exit, b"".join(out), b"".join(err), started)
        self._result.pid = self.pid
        return self._result

    def _resize_moot(self) -> bool:
        """A resize that need not be asked: the command has ended."""
        return self.ended and self.terminal is not None

    def _resize_gone(self, error: WardenError) -> bool:
        """A command that had a terminal has ended meanwhile (its exit may
        still be on its way): a resize answered as kill() says it."""
        return error.code == "unknown_id" and self.terminal is not None

    def _resized(self, size: TerminalSize) -> TerminalSize:
        self.terminal = size
        return size

    # -- stdin -------------------------------------------------------------------

    def _stdin(self, data: bytes | bytearray | memoryview) -> memoryview:
        """``data`` as bytes for stdin, once stdin is a pipe and open."""
        if not self._piped:
            raise ValueError("stdin is not a pipe: spawn(..., stdin=True) or pty=(rows, cols)")
        if not self._stdin_open:
            raise ValueError("stdin is closed")
        return memoryview(data).cast("B")

    def _stdin_frame(self, view: memoryview, start: int) -> bytes:
        """The stdin frame of ``view``'s chunk at ``start``; BrokenPipeError
        once the command has ended."""
        self._check_open()
        return fr.encode(fr.STDIN, self.id, view[start : start + STDIN_CHUNK])

    def _check_open(self) -> None:
        if self._route.exit is not None or self._route.late_errors:
            why = self._route.late_errors[0] if self._route.late_errors else "it has ended"
            raise BrokenPipeError(f"command {self.id}: stdin: {why}")

    def _stdin_end(self) -> bytes | None:
        """The frame that ends stdin, if one is to be sent (once)."""
        if not self._piped or not self._stdin_open:
            return None
        self._stdin_open = False
        if self._route.exit is None:
            return fr.encode(fr.STDIN, self.id)
        return None

    def _keeps(self) -> bool:
        """Leaving a ``with`` block: nothing to end (it has its Result, or
        the connection is over)."""
        return self._result is not None or self._link.failure is not None

    def __repr__(self) -> str:
        state = "ended" if self.ended else "running"
        return f"<warden {self._label} id={self.id} command={self.command} pid={self.pid} {state}>"


class Following(Command):
    """What an attachment to a detached command changes in a Command."""

    _label = "Attachment"

    def _follow(self, route: Route, command: int) -> None:
        event = route.started or {}
        #: warden's number for the command.
        self.command = command
        #: Always None: :meth:`Client.list_commands` has it.
        self.pid = None
        self._number = command
        #: Output let go before this attachment, because nobody was
        #: attached and the buffer was full.
        self.dropped_bytes: int = int(event.get("dropped_bytes", 0) or 0)

    def _resize_moot(self) -> bool:
        return self.ended

    def _resize_gone(self, error: WardenError) -> bool:
        # It ended meanwhile (its exit was read on the way): as kill() says it.
        return error.code == "unknown_id" and self.ended

    def close(self) -> None:
        """Stops following it here: what warden still sends for it on this
        id is dropped, and the Attachment is not read any more. The command
        runs on."""
        self._link.discard(self._route, BOTH)
        self._link.drop(self.id)

    def __repr__(self) -> str:
        state = "ended" if self.ended else "running"
        return f"<warden {self._label} id={self.id} command={self.command} {state}>"
