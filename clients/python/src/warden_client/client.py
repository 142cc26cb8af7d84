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

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from . import core
from . import frames as fr
from .common import (
    STDIN_CHUNK,
    SUPPORTED_VERSIONS,
    Detached,
    DetachedCommand,
    Hello,
    Pty,
    Result,
    RunEnded,
    ShellStopped,
    TerminalSize,
    client_name,
    default_socket,
    detach_request,
    read_key,
    run_request,
    terminal_size,
)
from .core import BOTH as _BOTH
from .core import DEFAULT, Stream, _Default
from .core import Route as _Route
from .errors import ConnectionError, WardenError
from .link import Link as _Link
from .link import connect_socket as _connect_socket

__all__ = ["Attachment", "Client", "Process", "Stream"]

T = TypeVar("T")


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
        replies = link.route(0)
        try:
            link.send(core.hello_message(versions, client or client_name(), secret), connect_timeout)
            hello = core.hello_of(path, link.wait(core.first_event(replies), connect_timeout))
        except BaseException:
            link.close()
            raise
        return cls(link, hello)

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
            self._ids = core.next_id(self._ids)
            return self._ids

    def _request(self, message: dict[str, Any], answer: str) -> dict[str, Any]:
        """A request on id 0 and its answer (warden answers those in order;
        one at a time here)."""
        with self._requests:
            replies = self._link.route(0)
            self._link.asking = message["type"]
            try:
                self._link.send(fr.encode_control(0, message), self._link.timeout)
                event = self._link.wait(core.first_event(replies), self._link.timeout)
            finally:
                self._link.asking = None
        return core.answer_of(message, answer, event)

    def _call(self, call: core.Call[T]) -> T:
        """A request on id 0 as the core builds it, and what its answer gives."""
        try:
            event = self._request(call.message, call.answer)
        except WardenError as e:
            if call.gone is not None and e.code == "unknown_id":
                return call.gone()
            raise
        return call.parse(event)

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
        id, route = self._ask_on_id(request)
        if route.exit is not None:
            self._link.drop(id)
        return Process(self, id, route, stdin, size)

    def status(self) -> dict[str, Any]:
        """warden's status: users, layout, layers as a probe found them
        just now, running commands, shell's processes and the gate
        (version 3), ``activity`` (version 4: ``idle_ms``, and
        ``held_until_ms`` and ``idle_stop_s`` when they apply)."""
        return self._call(core.status())

    def reload(self) -> dict[str, Any]:
        """Has warden read network.json again; returns the policy in force."""
        return self._call(core.reload())

    def audit(self, kind: str, fields: Any = None) -> int:
        """Appends an event of the runtime's own to the audit log (kind
        ``[a-z0-9_]{1,64}``, fields any JSON); returns its line number."""
        return self._call(core.audit(kind, fields))

    def stop_shell(self, signal: str | int = "KILL") -> ShellStopped:
        """Signals every process of ``shell``, wherever it went (protocol
        version 3); with KILL, round after round until none is left."""
        return self._call(core.stop_shell(signal))

    def close_gate(self, reason: str) -> dict[str, Any]:
        """Closes the runtime's gate (protocol version 3): every shell
        command is refused (``WardenError`` ``gate_closed``) with
        ``reason`` until ``open_gate``. Returns the gate as it now is."""
        return self._call(core.close_gate(reason))

    def open_gate(self) -> dict[str, Any]:
        """Opens the runtime's gate again (protocol version 3)."""
        return self._call(core.open_gate())

    def hold(self, until_ms: int) -> int:
        """Keeps the machine awake until ``until_ms`` (Unix time in
        milliseconds; protocol version 4), whatever its idle stop says; a
        time past, or 0, lets go. Returns the hold now in force (0: none),
        which ``status()["activity"]["held_until_ms"]`` shows too. More
        than a week ahead is refused (``bad_request``)."""
        return self._call(core.hold(until_ms))

    def ready(self) -> int:
        """Says the machine is ready (protocol version 9, the runtime's):
        ``warden machine up`` and ``--start`` return once it is, where the
        definition says ``"ready": "runtime"``. Returns since when, in ms
        after warden started (said again, the first time stands)."""
        return self._call(core.ready())

    def next_job(self, at_ms: int) -> int:
        """Says when the runtime's next job is due (protocol version 9; Unix
        milliseconds, 0: none): the machine does not stop for being idle
        within five minutes of it, and ``warden machine serve`` starts it
        ahead of it. Returns it as warden holds it."""
        return self._call(core.next_job(at_ms))

    def hand_keys(self, text: str) -> list[str]:
        """Hands the runtime its keys (protocol version 4, the host's door
        only): ``text`` is a ``.env`` text (``NAME=VALUE`` lines), written
        as the runtime's ``.env`` and given to the main process. Returns
        the keys' names. On the machine's own socket warden refuses it
        (``WardenError`` ``refused``, not fatal: the connection goes on);
        a text that is not a ``.env`` is a ``bad_request``."""
        return self._call(core.hand_keys(text))

    # -- runs and their budgets (protocol version 8) --------------------------

    def begin_run(self, run: str, budget_usd: float | None = None) -> int:
        """Opens a run (protocol version 8): the machine's requests to its
        model providers count against its budget in dollars (``None``: the
        machine's ``spend.per_run_usd``) until :meth:`end_run`. Returns the
        budget in integer micro-dollars. A name already open, or a machine
        that meters no provider: ``bad_request`` or ``internal``."""
        return self._call(core.begin_run(run, budget_usd))

    def end_run(self, run: str) -> RunEnded:
        """Ends a run (protocol version 8): what it spent and how it ended."""
        return self._call(core.end_run(run))

    def card(self, run: str) -> dict[str, Any]:
        """A run's card (protocol version 8), built by warden from its audit
        log: ``began``, ``ended`` (None while open), ``how``,
        ``budget_micro_usd``, ``spent_micro_usd``, ``models``, ``requests``,
        ``commands`` (started while it was open: ``argv``, ``exit``,
        ``signal``, ``duration_ms``, ``limit``) and ``hosts``. An unknown
        run: ``bad_request``."""
        return self._call(core.card(run))

    def shutdown(self) -> None:
        """Stops the machine, as SIGTERM would (protocol version 2)."""
        try:
            self._call(core.shutdown())
        except ConnectionError:
            pass  # the stop began before the answer was written

    def signal(self, id: int, signal: str | int = "TERM") -> str | None:
        """Signals the process group of this connection's command ``id``;
        returns the signal's name as warden sent it (``"SIGTERM"``), or
        None when that command is not running (any more)."""
        return self._call(core.signal(id, signal))

    def resize(self, id: int, rows: int, cols: int) -> TerminalSize:
        """Resizes the terminal of this connection's command ``id``
        (protocol version 4; its foreground job gets SIGWINCH); returns the
        size as warden answered it. ``unknown_id`` when that command runs
        on no terminal (or no longer runs), ``bad_request`` for a side
        outside 1 to 1000."""
        return self._call(core.resize(id, rows, cols))

    # -- detached commands (protocol version 4) ------------------------------

    def _ask_on_id(self, request: dict[str, Any], follows: bool = False,
                   timeout: float | None | _Default = DEFAULT) -> tuple[int, _Route]:
        """Sends `request` on a new frame id and waits for its first answer
        there (or its refusal, raised)."""
        wait = core.own_timeout(timeout, self._link.timeout)
        id = self._next_id()
        route = self._link.route(id)
        route.follows = follows
        try:
            self._link.send(fr.encode_control(id, request), self._link.timeout)
            self._link.wait(core.first_answer(route), wait)
        except BaseException:
            self._link.drop(id)
            raise
        core.settle(self._link, id, route)
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
        return core.detached_of(route, tag)

    def list_commands(self) -> list[DetachedCommand]:
        """The detached commands, running or lately ended (warden keeps the
        last 64 that ended), oldest first (protocol version 4)."""
        return self._call(core.list_commands())

    def attach(self, command: int) -> Attachment:
        """Follows a detached command on a new frame id (protocol version
        4) and returns once warden does: iterate the :class:`Attachment`
        for what it printed while nobody was attached (the last MiB), then
        its output live, until its exit. ``unknown_id`` when warden has no
        such command."""
        id, route = self._ask_on_id(core.attach_request(command), True)
        return Attachment(self, id, route, command)

    def wait_command(self, command: int, timeout: float | None | _Default = DEFAULT) -> Result:
        """Waits for a detached command's end and returns how it ended (no
        output: :meth:`attach` gives it), at once if it has ended (protocol
        version 4). ``timeout`` bounds the wait (the client's own by
        default). ``unknown_id`` when warden has no such command (any more)."""
        id, route = self._ask_on_id(core.wait_request(command), True, timeout)
        self._link.drop(id)
        return core.waited(route, command)

    def signal_command(self, command: int, signal: str | int = "TERM") -> str | None:
        """Signals a detached command's whole process group (protocol
        version 4); returns the signal's name as warden sent it
        (``"SIGTERM"``), or None when that command is not running (any
        more)."""
        return self._call(core.signal_command(command, signal))


class Process(core.Command):
    """A command started by :meth:`Client.spawn`.

    Iterating it yields ``(stream, chunk)`` pairs, ``stream`` being
    ``"stdout"`` or ``"stderr"``, in the order warden sent them, until the
    command has ended; :attr:`stdout` and :attr:`stderr` yield one stream's
    chunks (the other's wait in memory until read or discarded). Then
    :meth:`wait` returns its :class:`Result`.

    On a terminal (``pty=``) everything comes as ``"stdout"``, and
    :meth:`write` types into the terminal.
    """

    _client: Client
    _link: _Link

    def __init__(
        self, client: Client, id: int, route: _Route, stdin: bool, pty: TerminalSize | None = None
    ) -> None:
        super().__init__(client, id, route, stdin, pty)

    # -- output --------------------------------------------------------------

    def _take(self, kinds: frozenset[int], timeout: float | None) -> tuple[int, bytes] | None:
        return self._took(self._link.wait(self._ready(kinds), timeout))

    def output(self, timeout: float | None | _Default = DEFAULT) -> Iterator[tuple[Stream, bytes]]:
        """``(stream, chunk)`` pairs until the command has ended; each wait
        for the next one is bounded by ``timeout`` (the client's own by
        default)."""
        wait = core.own_timeout(timeout, self._link.timeout)
        while (item := self._take(_BOTH, wait)) is not None:
            yield core.NAMES[item[0]], item[1]

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

    # -- the end -----------------------------------------------------------------

    def wait(self, timeout: float | None | _Default = DEFAULT, collect: bool = False) -> Result:
        """Waits for the end and returns the Result. Output not yet read is
        dropped (``collect=True``: gathered into the Result instead).
        ``timeout`` bounds each wait for a frame (the client's own by
        default)."""
        if self._result is not None:
            return self._result
        wait = core.own_timeout(timeout, self._link.timeout)
        out, err = self._collecting(collect)
        while (item := self._take(_BOTH, wait)) is not None:
            (out if item[0] == fr.STDOUT else err).append(item[1])
        return self._ended_with(out, err)

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
        if self._resize_moot():
            return None
        try:
            size = self._client.resize(self.id, rows, cols)
        except WardenError as e:
            if self._resize_gone(e):
                return None
            raise
        return self._resized(size)

    # -- stdin -------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Sends bytes to the command's stdin (``spawn(..., stdin=True)``),
        or types them into its terminal (``pty=``: raw, ``b"\\x03"`` is
        Ctrl-C). BrokenPipeError once the command has ended."""
        view = self._stdin(data)
        for start in range(0, len(view), STDIN_CHUNK):
            self._link.send(self._stdin_frame(view, start), self._link.timeout)

    def close_stdin(self) -> None:
        """Ends the command's input (an empty stdin frame)."""
        frame = self._stdin_end()
        if frame is not None:
            self._link.send(frame, self._link.timeout)

    # -- context -------------------------------------------------------------------

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._keeps():
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


class Attachment(core.Following, Process):
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
        self._follow(route, command)

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
        return super().resize(rows, cols)

    def __exit__(self, *exc: object) -> None:
        if self._result is None:
            self.close()
