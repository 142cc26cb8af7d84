"""The blocking client of warden's API (docs/protocol.md).

One :class:`Client` is one connection. It may be shared by threads and
may run many commands at once: each has its own frame id.

Frames are read when someone waits for one, never ahead: whoever waits
(for a reply, or a command's output) reads the socket while the others
wait their turn, and frames for other ids are left in their queues. So a
command whose output is streamed by the one reading it costs at most one
frame (1 MiB) of memory, whatever its size; output of a command that
nobody reads waits in memory until it is read, or is dropped once
:meth:`Process.wait` was asked to discard it.
"""

from __future__ import annotations

import math
import os
import select
import enum
import socket as _socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

from . import frames as fr
from .common import (
    FRAME_TIMEOUT,
    REFUSED_IN_PLACE,
    STDIN_CHUNK,
    SUPPORTED_VERSIONS,
    Detached,
    DetachedCommand,
    Hello,
    Pty,
    Result,
    RunEnded,
    ShellStopped,
    Started,
    TerminalSize,
    client_name,
    command_number,
    default_socket,
    detach_request,
    detached_commands,
    error_of,
    begin_run_request,
    card_of,
    hold_until,
    ready_since,
    next_job_of,
    read_key,
    result_of,
    run_ended,
    run_name,
    run_request,
    signal_name,
    terminal_size,
)
from .errors import FATAL_CODES, ConnectionError, ProtocolError, TimeoutError, WardenError

__all__ = ["Attachment", "Client", "Process", "Stream"]

Stream = Literal["stdout", "stderr"]
_NAMES: dict[int, Stream] = {fr.STDOUT: "stdout", fr.STDERR: "stderr"}
_BOTH = frozenset((fr.STDOUT, fr.STDERR))
_NOSIGNAL = getattr(_socket, "MSG_NOSIGNAL", 0)
#: How long one wait for room to write lasts before looking for frames.
_WRITE_SLICE = 0.05
#: A refusal may be sent just before warden closes: how long to look for it.
_LAST_WORDS = 2.0

T = TypeVar("T")
_END = object()


class _Default(enum.Enum):
    """A timeout left out: the client's own applies."""

    TIMEOUT = 0


DEFAULT = _Default.TIMEOUT


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + max(0.0, timeout)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


class _Route:
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


class _Link:
    """One socket: frames in and out, shared by threads (see the module)."""

    def __init__(self, sock: _socket.socket, timeout: float | None, name: str) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.timeout = timeout
        self.name = name
        self._cond = threading.Condition()
        self._reading = False
        self._routes: dict[int, _Route] = {0: _Route()}
        self._failure: WardenError | None = None
        self._wlock = threading.Lock()
        #: The type of the request awaiting its answer on id 0 (one at a time).
        self.asking: str | None = None

    # -- routes ------------------------------------------------------------

    def route(self, id: int) -> _Route:
        with self._cond:
            route = self._routes.get(id)
            if route is None:
                route = self._routes[id] = _Route()
                route.command = True
            return route

    def drop(self, id: int) -> None:
        with self._cond:
            if id != 0:
                self._routes.pop(id, None)
            self._cond.notify_all()

    def discard(self, route: _Route, kinds: frozenset[int]) -> None:
        with self._cond:
            route.discard = route.discard | kinds
            kept = [item for item in route.output if item[0] not in kinds]
            route.output.clear()
            route.output.extend(kept)

    @property
    def failure(self) -> WardenError | None:
        return self._failure

    # -- reading -------------------------------------------------------------

    def _wait_fd(self, events: int, timeout: float | None) -> bool:
        poller = select.poll()
        try:
            # The socket object, not a saved number: once closed, its
            # descriptor may be another file's.
            poller.register(self.sock, events)
        except (ValueError, OSError):
            raise ConnectionError(f"{self.name}: the connection is closed") from None
        ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
        return bool(poller.poll(ms))

    def _recv_exact(self, buf: memoryview, deadline: float | None, begun: bool) -> None:
        """Fills `buf`. Before a frame has begun, waiting is bounded by
        `deadline` (TimeoutError, nothing consumed); once begun, the rest
        must come within FRAME_TIMEOUT (else the stream is lost)."""
        got, size = 0, len(buf)
        while got < size:
            try:
                n = self.sock.recv_into(buf[got:])
            except BlockingIOError:
                n = -1
            except OSError as e:
                raise ConnectionError(f"{self.name}: read: {e.strerror or e}", e.errno) from None
            if n == 0:
                where = "" if got == 0 and not begun else " in the middle of a frame"
                raise ConnectionError(f"{self.name}: warden closed the connection{where}")
            if n > 0:
                got += n
                continue
            if got == 0 and not begun:
                left = _remaining(deadline)
                if left is not None and left <= 0:
                    raise TimeoutError(f"{self.name}: nothing from warden in time")
                self._wait_fd(select.POLLIN, left)
            elif not self._wait_fd(select.POLLIN, FRAME_TIMEOUT):
                raise ConnectionError(
                    f"{self.name}: a frame stopped coming for {FRAME_TIMEOUT:.0f} s"
                )

    def _read_frame(self, deadline: float | None) -> fr.Frame:
        header = bytearray(fr.HEADER_LEN)
        self._recv_exact(memoryview(header), deadline, begun=False)
        kind, id, size = fr.decode_header(header)
        payload = bytearray(size)
        if size:
            self._recv_exact(memoryview(payload), None, begun=True)
        return fr.Frame(kind, id, bytes(payload))

    def _fail(self, error: WardenError) -> None:
        """Under the lock: the connection is over, for everyone."""
        if self._failure is None:
            self._failure = error

    def _dispatch(self, frame: fr.Frame) -> None:
        """Under the lock: hands a frame to its route."""
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
        elif frame.kind in _BOTH:
            route = self._routes.get(frame.id)
            if route is not None and frame.kind not in route.discard:
                route.output.append((frame.kind, frame.payload))
        else:
            raise ProtocolError(f"warden sent a {fr.KIND_NAMES[frame.kind]} frame")

    def _pump(self, deadline: float | None) -> None:
        """Reads one frame and dispatches it; the caller holds the reading
        role, which this gives back."""
        try:
            frame = self._read_frame(deadline)
            with self._cond:
                self._dispatch(frame)
        except TimeoutError:
            raise
        except WardenError as e:
            with self._cond:
                self._fail(e)
            raise
        except BaseException:
            # Interrupted (KeyboardInterrupt...) perhaps in a frame: the
            # stream cannot be trusted any more.
            with self._cond:
                self._fail(ConnectionError(f"{self.name}: interrupted while reading a frame"))
            raise
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()

    def wait(self, ready: Callable[[], T | None], timeout: float | None) -> T:
        """Reads frames until `ready()` (called under the lock) returns a
        value; frames of other ids go to their routes."""
        deadline = _deadline(timeout)
        while True:
            with self._cond:
                while True:
                    value = ready()
                    if value is not None:
                        return value
                    if self._failure is not None:
                        raise self._failure
                    if not self._reading:
                        self._reading = True
                        break
                    left = _remaining(deadline)
                    if left is not None and left <= 0:
                        raise TimeoutError(f"{self.name}: nothing from warden in time")
                    self._cond.wait(left)
            try:
                self._pump(deadline)
            except TimeoutError:
                raise
            except WardenError:
                pass  # the loop raises the failure, once ready() has had its say

    # -- writing -------------------------------------------------------------

    def send(self, data: bytes, timeout: float | None) -> None:
        """Writes whole frames. While warden has no room for them, reads
        what it sends meanwhile (if no other thread does), so that a large
        write never waits on output nobody reads."""
        deadline = _deadline(timeout)
        left = _remaining(deadline)
        if not self._wlock.acquire(timeout=-1 if left is None else max(0.0, left)):
            raise TimeoutError(f"{self.name}: another write held the connection too long")
        try:
            view = memoryview(data)
            sent = 0
            while sent < len(view):
                if self._failure is not None:
                    raise self._failure
                try:
                    sent += self.sock.send(view[sent:], _NOSIGNAL)
                except BlockingIOError:
                    if sent == 0:
                        self._await_room(deadline)  # TimeoutError: nothing was sent
                        continue
                    # A frame begun must be finished, or the stream is lost.
                    try:
                        self._await_room(_deadline(FRAME_TIMEOUT))
                    except TimeoutError:
                        error = ConnectionError(
                            f"{self.name}: warden took no more of a frame for {FRAME_TIMEOUT:.0f} s"
                        )
                        with self._cond:
                            self._fail(error)
                            self._cond.notify_all()
                        raise error from None
                except OSError as e:
                    lost = ConnectionError(f"{self.name}: write: {e.strerror or e}", e.errno)
                    self._last_words()
                    with self._cond:
                        self._fail(lost)
                        self._cond.notify_all()
                        # A refusal read just now says more than the socket.
                        raise (self._failure or lost) from None
        finally:
            self._wlock.release()

    def _await_room(self, deadline: float | None) -> None:
        while True:
            left = _remaining(deadline)
            if left is not None and left <= 0:
                raise TimeoutError(f"{self.name}: warden took nothing more in time")
            step = _WRITE_SLICE if left is None else min(_WRITE_SLICE, left)
            if self._wait_fd(select.POLLOUT, step):
                return
            with self._cond:
                if self._reading or self._failure is not None:
                    continue
                self._reading = True
            if self._wait_fd(select.POLLIN, 0):
                try:
                    self._pump(None)
                except WardenError:
                    pass  # the send loop raises the failure
            else:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()
            if self._failure is not None:
                return

    def _last_words(self) -> None:
        """After a failed write: warden may have said why before it closed
        (a refusal); read it, briefly, if no other thread is reading."""
        deadline = _deadline(_LAST_WORDS)
        while self._failure is None:
            with self._cond:
                if self._reading:
                    return
                self._reading = True
            try:
                self._pump(deadline)
            except WardenError:
                return

    def close(self) -> None:
        with self._cond:
            self._fail(ConnectionError(f"{self.name}: the client closed this connection"))
            self._cond.notify_all()
        try:
            # Wakes any thread waiting on the socket; warden sees the client
            # gone and kills the commands it started.
            self.sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _connect_socket(path: str, timeout: float | None, vsock_port: int | None) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        if vsock_port is not None:
            _hybrid_vsock(sock, path, vsock_port)
    except OSError as e:
        sock.close()
        raise ConnectionError(f"{path}: {e.strerror or e}", e.errno) from None
    except BaseException:
        sock.close()
        raise
    return sock


def _hybrid_vsock(sock: _socket.socket, path: str, port: int) -> None:
    """The host's end of a VM's vsock (a unix socket kept by the VM's vsock
    device): ``CONNECT <port>``, answered ``OK <host port>``."""
    sock.sendall(f"CONNECT {port}\n".encode())
    line = bytearray()
    while len(line) <= 64:
        byte = sock.recv(1)
        if not byte:
            raise ConnectionError(f"{path}: CONNECT {port}: no answer; is the VM up and listening?")
        if byte == b"\n":
            break
        line += byte
    else:
        raise ConnectionError(f"{path}: CONNECT {port}: answer too long")
    answer = line.decode("utf-8", "replace")
    if not (answer.startswith("OK ") and answer[3:].isdigit()):
        raise ConnectionError(f"{path}: CONNECT {port}: answered {answer!r}, not OK <port>")


class Client:
    """A connection to warden's API.

    >>> with Client.connect() as c:                      # doctest: +SKIP
    ...     print(c.run(["id", "-un"]).stdout)
    b'shell\\n'

    ``timeout`` bounds each wait for warden (a reply, the next frame of a
    command's output, room to write): :class:`TimeoutError` when it passes,
    and the connection stays usable. ``None`` waits as long as it takes.
    """

    def __init__(self, link: _Link, hello: Hello) -> None:
        self._link = link
        self._hello = hello
        self._ids = 0
        self._ids_lock = threading.Lock()
        self._requests = threading.Lock()

    @classmethod
    def connect(
        cls,
        socket: str | os.PathLike[str] | None = None,
        key: str | None = None,
        *,
        key_file: str | os.PathLike[str] | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = 20.0,
        versions: Sequence[int] = SUPPORTED_VERSIONS,
        client: str | None = None,
        vsock_port: int | None = None,
    ) -> Client:
        """Connects and says hello.

        ``socket``: the API socket (default ``$WARDEN_SOCKET``, else
        ``/run/warden/api.sock``). ``key`` (or ``key_file``, or the file
        ``$WARDEN_KEY_FILE`` names): the machine's key, which the host
        socket requires. ``connect_timeout`` bounds the connection and the
        hello's answer (a wrong key is answered after half a second, more
        when others wait). ``vsock_port``: the socket is the host's end of
        a VM's hybrid vsock; the client asks for this port first.
        """
        path = os.fspath(socket) if socket is not None else default_socket()
        secret = read_key(key, key_file)
        sock = _connect_socket(path, connect_timeout, vsock_port)
        link = _Link(sock, timeout, path)
        hello: dict[str, Any] = {
            "type": "hello",
            "versions": [int(v) for v in versions],
            "client": client or client_name(),
        }
        if secret is not None:
            hello["key"] = secret
        replies = link.route(0)
        try:
            link.send(fr.encode_control(0, hello), connect_timeout)
            event = link.wait(lambda: replies.events.popleft() if replies.events else None,
                              connect_timeout)
            if event["type"] == "error":
                raise error_of(event)
            if event["type"] != "hello" or not isinstance(event.get("version"), int):
                raise ProtocolError(f"{path}: expected warden's hello, got {event!r:.200}")
        except BaseException:
            link.close()
            raise
        extra = {k: v for k, v in event.items() if k not in ("type", "version", "server")}
        return cls(link, Hello(event["version"], str(event.get("server", "")), extra))

    # -- the connection ----------------------------------------------------

    @property
    def version(self) -> int:
        """The protocol version agreed in the hello."""
        return self._hello.version

    @property
    def server(self) -> str:
        """What warden called itself in its hello (``warden 0.1.0``)."""
        return self._hello.server

    @property
    def timeout(self) -> float | None:
        return self._link.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._link.timeout = value

    def close(self) -> None:
        """Closes the connection: warden kills every command it started."""
        self._link.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_id(self) -> int:
        with self._ids_lock:
            # Never reused while the connection lives (2**32 - 1 of them):
            # a late frame for an old id cannot be taken for a new one's.
            self._ids += 1
            if self._ids > fr.MAX_ID:
                raise WardenError("internal", "this connection has used every frame id")
            return self._ids

    def _request(self, message: dict[str, Any], answer: str) -> dict[str, Any]:
        """A request on id 0 and its answer (warden answers those in order;
        one at a time here)."""
        with self._requests:
            replies = self._link.route(0)
            self._link.asking = message["type"]
            try:
                self._link.send(fr.encode_control(0, message), self._link.timeout)
                event = self._link.wait(
                    lambda: replies.events.popleft() if replies.events else None, self._link.timeout
                )
            finally:
                self._link.asking = None
        if event["type"] == "error":
            # It answered this request: the connection goes on.
            raise error_of(event, fatal=False)
        if event["type"] != answer:
            raise ProtocolError(f"{message['type']}: expected {answer}, got {event!r:.200}")
        return event

    # -- requests ------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        folder: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | bytearray | memoryview | None = None,
        limits: Mapping[str, int | None] | None = None,
        keep_background: bool = False,
        extra: Mapping[str, Any] | None = None,
        pty: Pty | None = None,
    ) -> Result:
        """Runs a command as ``shell`` to its end and returns its output.

        ``argv``: the program and its arguments, or ``shell``: a line for
        ``/bin/sh -c``. ``folder``: a folder under the workspace (made if
        missing). ``timeout``: seconds before warden kills its whole
        process group. ``env``: variables added to its clean environment.
        ``stdin``: bytes fed to it (else it reads /dev/null). ``limits``:
        lowers the policy's (``{"cpu_seconds": 10, ...}``). ``pty``:
        ``(rows, cols)`` (protocol version 4): it runs on a terminal of
        that size; all it prints is in ``stdout``, and ``stdin`` is typed.

        A command that cannot start is a Result too (``error`` says why);
        a request warden refuses raises :class:`WardenError`.
        """
        process = self.spawn(
            argv,
            shell=shell,
            folder=folder,
            timeout=timeout,
            env=env,
            stdin=stdin is not None,
            limits=limits,
            keep_background=keep_background,
            extra=extra,
            pty=pty,
        )
        if stdin is not None:
            try:
                process.write(stdin)
                process.close_stdin()
            except BrokenPipeError:
                pass  # it ended without reading it all, as a pipe would
        return process.wait(collect=True)

    def spawn(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        folder: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
        limits: Mapping[str, int | None] | None = None,
        keep_background: bool = False,
        extra: Mapping[str, Any] | None = None,
        pty: Pty | None = None,
    ) -> Process:
        """Starts a command and returns once warden says it runs (or that
        it could not start: the Process has then ended, with ``error``).
        Its output is read by iterating the Process; ``stdin=True`` gives
        it a pipe fed by :meth:`Process.write`. ``pty=(rows, cols)``
        (protocol version 4) runs it on a terminal: its output all comes
        as ``stdout``, :meth:`Process.write` types into it (no
        ``stdin=True`` needed) and :meth:`Process.resize` resizes it."""
        size = None if pty is None else terminal_size(pty)
        request = run_request(
            argv, shell, folder, timeout, env, stdin, limits, keep_background, extra, size
        )
        id = self._next_id()
        route = self._link.route(id)
        try:
            self._link.send(fr.encode_control(id, request), self._link.timeout)
            self._link.wait(
                lambda: True if (route.started or route.ended) else None, self._link.timeout
            )
        except BaseException:
            self._link.drop(id)
            raise
        if route.refused is not None:
            self._link.drop(id)
            raise route.refused
        if route.exit is not None:
            self._link.drop(id)
        return Process(self, id, route, stdin, size)

    def status(self) -> dict[str, Any]:
        """warden's status: users, layout, layers as a probe found them
        just now, running commands, shell's processes and the gate
        (version 3), ``activity`` (version 4: ``idle_ms``, and
        ``held_until_ms`` and ``idle_stop_s`` when they apply)."""
        return self._request({"type": "status"}, "status")

    def reload(self) -> dict[str, Any]:
        """Has warden read network.json again; returns the policy in force."""
        return self._request({"type": "reload"}, "reloaded")

    def audit(self, kind: str, fields: Any = None) -> int:
        """Appends an event of the runtime's own to the audit log (kind
        ``[a-z0-9_]{1,64}``, fields any JSON); returns its line number."""
        message: dict[str, Any] = {"type": "audit", "kind": kind}
        if fields is not None:
            message["fields"] = fields
        event = self._request(message, "recorded")
        seq = event.get("seq")
        if not isinstance(seq, int):
            raise ProtocolError(f"recorded without a seq: {event!r:.200}")
        return seq

    def stop_shell(self, signal: str | int = "KILL") -> ShellStopped:
        """Signals every process of ``shell``, wherever it went (protocol
        version 3); with KILL, round after round until none is left."""
        event = self._request({"type": "stop_shell", "signal": signal_name(signal)}, "shell_stopped")
        return ShellStopped(int(event.get("signalled", 0)), int(event.get("left", 0)))

    def close_gate(self, reason: str) -> dict[str, Any]:
        """Closes the runtime's gate (protocol version 3): every shell
        command is refused (``WardenError`` ``gate_closed``) with
        ``reason`` until ``open_gate``. Returns the gate as it now is."""
        return self._request({"type": "close_gate", "reason": reason}, "gate")

    def open_gate(self) -> dict[str, Any]:
        """Opens the runtime's gate again (protocol version 3)."""
        return self._request({"type": "open_gate"}, "gate")

    def hold(self, until_ms: int) -> int:
        """Keeps the machine awake until ``until_ms`` (Unix time in
        milliseconds; protocol version 4), whatever its idle stop says; a
        time past, or 0, lets go. Returns the hold now in force (0: none),
        which ``status()["activity"]["held_until_ms"]`` shows too. More
        than a week ahead is refused (``bad_request``)."""
        event = self._request({"type": "hold", "until_ms": hold_until(until_ms)}, "held")
        until = event.get("until_ms")
        if isinstance(until, bool) or not isinstance(until, int):
            raise ProtocolError(f"held without an until_ms: {event!r:.200}")
        return until

    def ready(self) -> int:
        """Says the machine is ready (protocol version 9, the runtime's):
        ``warden machine up`` and ``--start`` return once it is, where the
        definition says ``"ready": "runtime"``. Returns since when, in ms
        after warden started (said again, the first time stands)."""
        return ready_since(self._request({"type": "ready"}, "ready_noted"))

    def next_job(self, at_ms: int) -> int:
        """Says when the runtime's next job is due (protocol version 9; Unix
        milliseconds, 0: none): the machine does not stop for being idle
        within five minutes of it, and ``warden machine serve`` starts it
        ahead of it. Returns it as warden holds it."""
        event = self._request({"type": "next_job", "at_ms": hold_until(at_ms)}, "next_job_at")
        return next_job_of(event)

    def hand_keys(self, text: str) -> list[str]:
        """Hands the runtime its keys (protocol version 4, the host's door
        only): ``text`` is a ``.env`` text (``NAME=VALUE`` lines), written
        as the runtime's ``.env`` and given to the main process. Returns
        the keys' names. On the machine's own socket warden refuses it
        (``WardenError`` ``refused``, not fatal: the connection goes on);
        a text that is not a ``.env`` is a ``bad_request``."""
        if not isinstance(text, str):
            raise TypeError(f"text is a .env text (a str), not {type(text).__name__}")
        event = self._request({"type": "hand_keys", "text": text}, "keys_handed")
        names = event.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ProtocolError(f"keys_handed without names: {event!r:.200}")
        return names

    # -- runs and their budgets (protocol version 8) --------------------------

    def begin_run(self, run: str, budget_usd: float | None = None) -> int:
        """Opens a run (protocol version 8): the machine's requests to its
        model providers count against its budget in dollars (``None``: the
        machine's ``spend.per_run_usd``) until :meth:`end_run`. Returns the
        budget in integer micro-dollars. A name already open, or a machine
        that meters no provider: ``bad_request`` or ``internal``."""
        event = self._request(begin_run_request(run, budget_usd), "run_begun")
        budget = event.get("budget_micro_usd")
        if isinstance(budget, bool) or not isinstance(budget, int):
            raise ProtocolError(f"run_begun without budget_micro_usd: {event!r:.200}")
        return budget

    def end_run(self, run: str) -> RunEnded:
        """Ends a run (protocol version 8): what it spent and how it ended."""
        return run_ended(self._request({"type": "end_run", "run": run_name(run)}, "run_ended"))

    def card(self, run: str) -> dict[str, Any]:
        """A run's card (protocol version 8), built by warden from its audit
        log: ``began``, ``ended`` (None while open), ``how``,
        ``budget_micro_usd``, ``spent_micro_usd``, ``models``, ``requests``,
        ``commands`` (started while it was open: ``argv``, ``exit``,
        ``signal``, ``duration_ms``, ``limit``) and ``hosts``. An unknown
        run: ``bad_request``."""
        return card_of(self._request({"type": "card", "run": run_name(run)}, "card"))

    def shutdown(self) -> None:
        """Stops the machine, as SIGTERM would (protocol version 2)."""
        try:
            self._request({"type": "shutdown"}, "shutting_down")
        except ConnectionError:
            pass  # the stop began before the answer was written

    def signal(self, id: int, signal: str | int = "TERM") -> str | None:
        """Signals the process group of this connection's command ``id``;
        returns the signal's name as warden sent it (``"SIGTERM"``), or
        None when that command is not running (any more)."""
        try:
            event = self._request(
                {"type": "signal", "target": id, "signal": signal_name(signal)}, "signalled"
            )
        except WardenError as e:
            if e.code == "unknown_id":
                return None
            raise
        return str(event.get("signal", signal))

    def resize(self, id: int, rows: int, cols: int) -> TerminalSize:
        """Resizes the terminal of this connection's command ``id``
        (protocol version 4; its foreground job gets SIGWINCH); returns the
        size as warden answered it. ``unknown_id`` when that command runs
        on no terminal (or no longer runs), ``bad_request`` for a side
        outside 1 to 1000."""
        size = terminal_size((rows, cols))
        event = self._request(
            {"type": "resize", "target": id, "rows": size.rows, "cols": size.cols}, "resized"
        )
        return _resized(event)

    # -- detached commands (protocol version 4) ------------------------------

    def _ask_on_id(self, request: dict[str, Any], follows: bool = False,
                   timeout: float | None | _Default = DEFAULT) -> tuple[int, _Route]:
        """Sends `request` on a new frame id and waits for its first answer
        there (or its refusal, raised)."""
        wait = self._link.timeout if isinstance(timeout, _Default) else timeout
        id = self._next_id()
        route = self._link.route(id)
        route.follows = follows
        try:
            self._link.send(fr.encode_control(id, request), self._link.timeout)
            self._link.wait(lambda: True if (route.started or route.ended) else None, wait)
        except BaseException:
            self._link.drop(id)
            raise
        if route.refused is not None:
            self._link.drop(id)
            raise route.refused
        return id, route

    def detach(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        folder: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
        limits: Mapping[str, int | None] | None = None,
        keep_background: bool = False,
        extra: Mapping[str, Any] | None = None,
        pty: Pty | None = None,
        tag: str | None = None,
    ) -> Detached:
        """Starts a detached command (protocol version 4): it runs on
        whoever is connected, this connection's end included. Arguments as
        :meth:`spawn`, plus ``tag`` (1 to 128 printable bytes: its name in
        :meth:`list_commands`); ``stdin=True`` lets attachments write to it
        (on a ``pty`` they always may). Returns warden's number for it, its
        pid and tag; a command that could not start is a Detached whose
        ``exit`` says why. A bad tag, or a 65th detached command, is a
        ``bad_request``."""
        size = None if pty is None else terminal_size(pty)
        request = detach_request(
            run_request(argv, shell, folder, timeout, env, stdin, limits, keep_background, extra, size),
            tag,
        )
        id, route = self._ask_on_id(request)
        self._link.drop(id)
        return _detached(route, tag)

    def list_commands(self) -> list[DetachedCommand]:
        """The detached commands, running or lately ended (warden keeps the
        last 64 that ended), oldest first (protocol version 4)."""
        return detached_commands(self._request({"type": "list"}, "commands"))

    def attach(self, command: int) -> Attachment:
        """Follows a detached command on a new frame id (protocol version
        4) and returns once warden does: iterate the :class:`Attachment`
        for what it printed while nobody was attached (the last MiB), then
        its output live, until its exit. ``unknown_id`` when warden has no
        such command."""
        id, route = self._ask_on_id({"type": "attach", "command": command_number(command)}, True)
        return Attachment(self, id, route, command)

    def wait_command(self, command: int, timeout: float | None | _Default = DEFAULT) -> Result:
        """Waits for a detached command's end and returns how it ended (no
        output: :meth:`attach` gives it), at once if it has ended (protocol
        version 4). ``timeout`` bounds the wait (the client's own by
        default). ``unknown_id`` when warden has no such command (any more)."""
        request = {"type": "wait", "command": command_number(command)}
        id, route = self._ask_on_id(request, True, timeout)
        self._link.drop(id)
        assert route.exit is not None
        result = result_of(route.exit)
        result.command = command
        return result

    def signal_command(self, command: int, signal: str | int = "TERM") -> str | None:
        """Signals a detached command's whole process group (protocol
        version 4); returns the signal's name as warden sent it
        (``"SIGTERM"``), or None when that command is not running (any
        more)."""
        try:
            event = self._request(
                {"type": "signal_command", "command": command_number(command),
                 "signal": signal_name(signal)},
                "command_signalled",
            )
        except WardenError as e:
            if e.code == "unknown_id":
                return None
            raise
        return str(event.get("signal", signal))


def _detached(route: _Route, tag: str | None) -> Detached:
    """What a detached run's id was answered with."""
    if route.exit is not None:
        return Detached(None, None, tag, result_of(route.exit))
    event = route.started or {}
    command, pid = event.get("command"), event.get("pid")
    if type(command) is not int or type(pid) is not int or event.get("type") != "detached":
        raise ProtocolError(f"a detached run answered with {event!r:.200}")
    answered = event.get("tag", tag)
    return Detached(command, pid, None if answered is None else str(answered))


def _resized(event: Mapping[str, Any]) -> TerminalSize:
    """The size a ``resized`` event says."""
    rows, cols = event.get("rows"), event.get("cols")
    if type(rows) is int and type(cols) is int:
        return TerminalSize(rows, cols)
    raise ProtocolError(f"resized without rows and cols: {dict(event)!r:.200}")


class Process:
    """A command started by :meth:`Client.spawn`.

    Iterating it yields ``(stream, chunk)`` pairs, ``stream`` being
    ``"stdout"`` or ``"stderr"``, in the order warden sent them, until the
    command has ended; :attr:`stdout` and :attr:`stderr` yield one stream's
    chunks (the other's wait in memory until read or discarded). Then
    :meth:`wait` returns its :class:`Result`.

    On a terminal (``pty=``) everything comes as ``"stdout"``, and
    :meth:`write` types into the terminal.
    """

    def __init__(
        self, client: Client, id: int, route: _Route, stdin: bool, pty: TerminalSize | None = None
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

    def _take(self, kinds: frozenset[int], timeout: float | None) -> tuple[int, bytes] | None:
        route = self._route

        def ready() -> tuple[int, bytes] | object | None:
            for i, item in enumerate(route.output):
                if item[0] in kinds:
                    del route.output[i]
                    return item
            return _END if route.ended else None

        got = self._link.wait(ready, timeout)
        if got is _END:
            self._link.drop(self.id)
            return None
        assert isinstance(got, tuple)
        return got

    def output(self, timeout: float | None | _Default = DEFAULT) -> Iterator[tuple[Stream, bytes]]:
        """``(stream, chunk)`` pairs until the command has ended; each wait
        for the next one is bounded by ``timeout`` (the client's own by
        default)."""
        wait = self._link.timeout if isinstance(timeout, _Default) else timeout
        while (item := self._take(_BOTH, wait)) is not None:
            yield _NAMES[item[0]], item[1]

    def __iter__(self) -> Iterator[tuple[Stream, bytes]]:
        return self.output()

    def _stream(self, kind: int) -> Iterator[bytes]:
        while (item := self._take(frozenset((kind,)), self._link.timeout)) is not None:
            yield item[1]

    @property
    def stdout(self) -> Iterator[bytes]:
        """stdout's chunks until the command has ended."""
        return self._stream(fr.STDOUT)

    @property
    def stderr(self) -> Iterator[bytes]:
        """stderr's chunks until the command has ended."""
        return self._stream(fr.STDERR)

    def discard(self, stream: Stream) -> None:
        """Drops one stream's output, what waits and what is still to come."""
        kind = fr.STDOUT if stream == "stdout" else fr.STDERR
        self._link.discard(self._route, frozenset((kind,)))

    # -- the end -----------------------------------------------------------------

    def wait(self, timeout: float | None | _Default = DEFAULT, collect: bool = False) -> Result:
        """Waits for the end and returns the Result. Output not yet read is
        dropped (``collect=True``: gathered into the Result instead).
        ``timeout`` bounds each wait for a frame (the client's own by
        default)."""
        if self._result is not None:
            return self._result
        wait = self._link.timeout if isinstance(timeout, _Default) else timeout
        out: list[bytes] = []
        err: list[bytes] = []
        if not collect:
            self._link.discard(self._route, _BOTH)
        while (item := self._take(_BOTH, wait)) is not None:
            (out if item[0] == fr.STDOUT else err).append(item[1])
        exit = self._route.exit
        assert exit is not None
        started = Started(self.command, self.pid or 0) if self.command is not None else None
        self._result = result_of(exit, b"".join(out), b"".join(err), started)
        self._result.pid = self.pid
        return self._result

    def kill(self, signal: str | int = "TERM") -> str | None:
        """Signals the command's whole process group (``TERM``, ``SIGTERM``
        or ``15``); returns the name warden sent it by (``"SIGTERM"``), or
        None when the command has already ended."""
        if self.ended:
            return None
        return self._client.signal(self.id, signal)

    def resize(self, rows: int, cols: int) -> TerminalSize | None:
        """Resizes the command's terminal (``spawn(..., pty=...)``, protocol
        version 4; its foreground job gets SIGWINCH); returns the new size,
        or None when the command has already ended. A command without a
        terminal: ``WardenError`` ``unknown_id``; a side outside 1 to 1000:
        ``bad_request``."""
        if self.ended and self.terminal is not None:
            return None
        try:
            size = self._client.resize(self.id, rows, cols)
        except WardenError as e:
            # A command that had a terminal has ended meanwhile (its exit
            # may still be on its way): as kill() says it.
            if e.code == "unknown_id" and self.terminal is not None:
                return None
            raise
        self.terminal = size
        return size

    # -- stdin -------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Sends bytes to the command's stdin (``spawn(..., stdin=True)``),
        or types them into its terminal (``pty=``: raw, ``b"\\x03"`` is
        Ctrl-C). BrokenPipeError once the command has ended."""
        if not self._piped:
            raise ValueError("stdin is not a pipe: spawn(..., stdin=True) or pty=(rows, cols)")
        if not self._stdin_open:
            raise ValueError("stdin is closed")
        view = memoryview(data).cast("B")
        for start in range(0, len(view), STDIN_CHUNK):
            self._check_open()
            frame = fr.encode(fr.STDIN, self.id, view[start : start + STDIN_CHUNK])
            self._link.send(frame, self._link.timeout)

    def _check_open(self) -> None:
        if self._route.exit is not None or self._route.late_errors:
            why = self._route.late_errors[0] if self._route.late_errors else "it has ended"
            raise BrokenPipeError(f"command {self.id}: stdin: {why}")

    def close_stdin(self) -> None:
        """Ends the command's input (an empty stdin frame)."""
        if not self._piped or not self._stdin_open:
            return
        self._stdin_open = False
        if self._route.exit is None:
            self._link.send(fr.encode(fr.STDIN, self.id), self._link.timeout)

    # -- context -------------------------------------------------------------------

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._result is not None or self._link.failure is not None:
            return
        if not self.ended:
            try:
                self.kill("KILL")
            except WardenError:
                return
        try:
            self.wait()
        except WardenError:
            pass

    def __repr__(self) -> str:
        state = "ended" if self.ended else "running"
        return f"<warden Process id={self.id} command={self.command} pid={self.pid} {state}>"


class Attachment(Process):
    """A detached command followed on a frame id of this connection
    (:meth:`Client.attach`, protocol version 4): iterating it yields what
    it printed while nobody was attached (the last MiB), then its output
    live, until it has ended; then :meth:`wait` returns its Result.

    :meth:`write` and :meth:`close_stdin` reach its stdin when it was
    detached with ``stdin=True`` or a ``pty`` (closing it closes it for
    every attachment); :meth:`resize` resizes its terminal; :meth:`kill`
    is :meth:`Client.signal_command`. Leaving a ``with`` block, or
    :meth:`close`, only stops following it: the command runs on.
    """

    def __init__(self, client: Client, id: int, route: _Route, command: int) -> None:
        # Whether it takes stdin is warden's to say: write() is let through.
        super().__init__(client, id, route, True)
        event = route.started or {}
        #: warden's number for the command.
        self.command = command
        #: Always None: :meth:`Client.list_commands` has it.
        self.pid = None
        self._number = command
        #: Output let go before this attachment, because nobody was
        #: attached and the buffer was full.
        self.dropped_bytes: int = int(event.get("dropped_bytes", 0) or 0)

    def kill(self, signal: str | int = "TERM") -> str | None:
        """Signals the detached command's whole process group; returns the
        signal's name as warden sent it, or None once it has ended."""
        if self.ended:
            return None
        return self._client.signal_command(self._number, signal)

    def resize(self, rows: int, cols: int) -> TerminalSize | None:
        """Resizes its terminal (it was detached with ``pty=``); returns the
        new size, or None once it has ended. ``unknown_id`` when it runs on
        no terminal."""
        if self.ended:
            return None
        try:
            size = self._client.resize(self.id, rows, cols)
        except WardenError as e:
            # It ended meanwhile (its exit was read on the way): as kill() says it.
            if e.code == "unknown_id" and self.ended:
                return None
            raise
        self.terminal = size
        return size

    def close(self) -> None:
        """Stops following it here: what warden still sends for it on this
        id is dropped, and the Attachment is not read any more. The command
        runs on."""
        self._link.discard(self._route, _BOTH)
        self._link.drop(self.id)

    def __exit__(self, *exc: object) -> None:
        if self._result is None:
            self.close()

    def __repr__(self) -> str:
        state = "ended" if self.ended else "running"
        return f"<warden Attachment id={self.id} command={self.command} {state}>"
