"""The asyncio client: the same protocol and the same rules as
:mod:`warden_client.client`, for an event loop.

Frames are read when a task waits for one: one read at a time (a shared
task), frames of other ids left in their queues. While a write waits for
room, what warden sends meanwhile is read, so a large write never waits
on output nobody reads.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

from . import frames as fr
from .client import (
    _BOTH,
    _END,
    _NAMES,
    DEFAULT,
    Stream,
    _Default,
    _deadline,
    _detached,
    _remaining,
    _resized,
    _Route,
)
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

__all__ = ["AsyncAttachment", "AsyncClient", "AsyncProcess"]

T = TypeVar("T")
#: The stream reader's buffer: a frame's payload is read past it anyway.
_READ_LIMIT = 2 * fr.MAX_FRAME


class _AsyncLink:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        timeout: float | None,
        name: str,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.timeout = timeout
        self.name = name
        self._routes: dict[int, _Route] = {0: _Route()}
        self._failure: WardenError | None = None
        self._reading: asyncio.Task[None] | None = None
        self._wlock = asyncio.Lock()
        #: The type of the request awaiting its answer on id 0 (one at a time).
        self.asking: str | None = None

    @property
    def failure(self) -> WardenError | None:
        return self._failure

    def route(self, id: int) -> _Route:
        route = self._routes.get(id)
        if route is None:
            route = self._routes[id] = _Route()
            route.command = True
        return route

    def drop(self, id: int) -> None:
        if id != 0:
            self._routes.pop(id, None)

    def discard(self, route: _Route, kinds: frozenset[int]) -> None:
        route.discard = route.discard | kinds
        kept = [item for item in route.output if item[0] not in kinds]
        route.output.clear()
        route.output.extend(kept)

    def _fail(self, error: WardenError) -> None:
        if self._failure is None:
            self._failure = error

    async def _read_one(self) -> None:
        """Reads one frame and dispatches it; never raises: a failure ends
        the connection for every waiter."""
        try:
            try:
                header = await self.reader.readexactly(fr.HEADER_LEN)
            except asyncio.IncompleteReadError as e:
                where = " in the middle of a frame" if e.partial else ""
                raise ConnectionError(f"{self.name}: warden closed the connection{where}") from None
            kind, id, size = fr.decode_header(header)
            try:
                payload = await asyncio.wait_for(self.reader.readexactly(size), FRAME_TIMEOUT)
            except asyncio.IncompleteReadError:
                raise ConnectionError(
                    f"{self.name}: warden closed the connection in the middle of a frame"
                ) from None
            except asyncio.TimeoutError:
                raise ConnectionError(
                    f"{self.name}: a frame stopped coming for {FRAME_TIMEOUT:.0f} s"
                ) from None
            self._dispatch(fr.Frame(kind, id, payload))
        except WardenError as e:
            self._fail(e)
        except OSError as e:
            self._fail(ConnectionError(f"{self.name}: read: {e.strerror or e}", e.errno))

    def _dispatch(self, frame: fr.Frame) -> None:
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

    def _reader(self) -> asyncio.Task[None]:
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read_one())
        return self._reading

    async def wait(self, ready: Callable[[], T | None], timeout: float | None) -> T:
        deadline = _deadline(timeout)
        while True:
            value = ready()
            if value is not None:
                return value
            if self._failure is not None:
                raise self._failure
            left = _remaining(deadline)
            if left is not None and left <= 0:
                raise TimeoutError(f"{self.name}: nothing from warden in time")
            try:
                await asyncio.wait_for(asyncio.shield(self._reader()), left)
            except asyncio.TimeoutError:
                raise TimeoutError(f"{self.name}: nothing from warden in time") from None

    async def send(self, data: bytes, timeout: float | None) -> None:
        deadline = _deadline(timeout)
        try:
            await asyncio.wait_for(self._wlock.acquire(), _remaining(deadline))
        except asyncio.TimeoutError:
            raise TimeoutError(f"{self.name}: another write held the connection too long") from None
        try:
            if self._failure is not None:
                raise self._failure
            try:
                self.writer.write(data)
            except (OSError, RuntimeError) as e:
                raise await self._broken(e) from None
            drain: asyncio.Future[None] = asyncio.ensure_future(self.writer.drain())
            while not drain.done():
                left = _remaining(deadline)
                if left is not None and left <= 0:
                    drain.cancel()
                    raise TimeoutError(f"{self.name}: warden took nothing more in time")
                # While there is no room, read what warden sends meanwhile.
                pending = {drain} if self._failure is not None else {drain, self._reader()}
                await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            try:
                drain.result()
            except (OSError, RuntimeError) as e:
                raise await self._broken(e) from None
        finally:
            self._wlock.release()

    async def _broken(self, e: BaseException) -> WardenError:
        """A write failed: warden may have said why before it closed (a
        refusal); that is the error, else the socket's."""
        strerror = getattr(e, "strerror", None)
        error = ConnectionError(f"{self.name}: write: {strerror or e}", getattr(e, "errno", None))
        deadline = _deadline(2.0)
        while self._failure is None:
            left = _remaining(deadline)
            if left is not None and left <= 0:
                break
            try:
                await asyncio.wait_for(asyncio.shield(self._reader()), left)
            except asyncio.TimeoutError:
                break
        self._fail(error)
        assert self._failure is not None
        return self._failure

    async def close(self) -> None:
        self._fail(ConnectionError(f"{self.name}: the client closed this connection"))
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def _hybrid_vsock(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, port: int
) -> None:
    writer.write(f"CONNECT {port}\n".encode())
    await writer.drain()
    try:
        line = await reader.readuntil(b"\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        raise ConnectionError(f"{path}: CONNECT {port}: no answer; is the VM up and listening?") from None
    answer = line[:-1].decode("utf-8", "replace")
    if not (answer.startswith("OK ") and answer[3:].isdigit()):
        raise ConnectionError(f"{path}: CONNECT {port}: answered {answer!r}, not OK <port>")


class AsyncClient:
    """A connection to warden's API, for asyncio. See :class:`~warden_client.Client`."""

    def __init__(self, link: _AsyncLink, hello: Hello) -> None:
        self._link = link
        self._hello = hello
        self._ids = 0
        self._requests = asyncio.Lock()

    @classmethod
    async def connect(
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
    ) -> AsyncClient:
        """Connects and says hello (arguments as :meth:`Client.connect`)."""
        path = os.fspath(socket) if socket is not None else default_socket()
        secret = read_key(key, key_file)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(path, limit=_READ_LIMIT), connect_timeout
            )
        except asyncio.TimeoutError:
            raise ConnectionError(f"{path}: no connection in {connect_timeout} s") from None
        except OSError as e:
            raise ConnectionError(f"{path}: {e.strerror or e}", e.errno) from None
        link = _AsyncLink(reader, writer, timeout, path)
        try:
            if vsock_port is not None:
                await asyncio.wait_for(_hybrid_vsock(reader, writer, path, vsock_port), connect_timeout)
            hello: dict[str, Any] = {
                "type": "hello",
                "versions": [int(v) for v in versions],
                "client": client or client_name(),
            }
            if secret is not None:
                hello["key"] = secret
            replies = link.route(0)
            await link.send(fr.encode_control(0, hello), connect_timeout)
            event = await link.wait(
                lambda: replies.events.popleft() if replies.events else None, connect_timeout
            )
            if event["type"] == "error":
                raise error_of(event)
            if event["type"] != "hello" or not isinstance(event.get("version"), int):
                raise ProtocolError(f"{path}: expected warden's hello, got {event!r:.200}")
        except asyncio.TimeoutError:
            await link.close()
            raise ConnectionError(f"{path}: no answer in {connect_timeout} s") from None
        except BaseException:
            await link.close()
            raise
        extra = {k: v for k, v in event.items() if k not in ("type", "version", "server")}
        return cls(link, Hello(event["version"], str(event.get("server", "")), extra))

    @property
    def version(self) -> int:
        return self._hello.version

    @property
    def server(self) -> str:
        return self._hello.server

    async def close(self) -> None:
        """Closes the connection: warden kills every command it started."""
        await self._link.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _next_id(self) -> int:
        self._ids += 1
        if self._ids > fr.MAX_ID:
            raise WardenError("internal", "this connection has used every frame id")
        return self._ids

    async def _request(self, message: dict[str, Any], answer: str) -> dict[str, Any]:
        async with self._requests:
            replies = self._link.route(0)
            self._link.asking = message["type"]
            try:
                await self._link.send(fr.encode_control(0, message), self._link.timeout)
                event = await self._link.wait(
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

    async def run(
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
        """Runs a command to its end; see :meth:`Client.run`."""
        process = await self.spawn(
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
                await process.write(stdin)
                await process.close_stdin()
            except BrokenPipeError:
                pass
        return await process.wait(collect=True)

    async def spawn(
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
    ) -> AsyncProcess:
        """Starts a command; see :meth:`Client.spawn`."""
        size = None if pty is None else terminal_size(pty)
        request = run_request(
            argv, shell, folder, timeout, env, stdin, limits, keep_background, extra, size
        )
        id = self._next_id()
        route = self._link.route(id)
        try:
            await self._link.send(fr.encode_control(id, request), self._link.timeout)
            await self._link.wait(
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
        return AsyncProcess(self, id, route, stdin, size)

    async def status(self) -> dict[str, Any]:
        return await self._request({"type": "status"}, "status")

    async def reload(self) -> dict[str, Any]:
        return await self._request({"type": "reload"}, "reloaded")

    async def audit(self, kind: str, fields: Any = None) -> int:
        message: dict[str, Any] = {"type": "audit", "kind": kind}
        if fields is not None:
            message["fields"] = fields
        event = await self._request(message, "recorded")
        seq = event.get("seq")
        if not isinstance(seq, int):
            raise ProtocolError(f"recorded without a seq: {event!r:.200}")
        return seq

    async def stop_shell(self, signal: str | int = "KILL") -> ShellStopped:
        event = await self._request(
            {"type": "stop_shell", "signal": signal_name(signal)}, "shell_stopped"
        )
        return ShellStopped(int(event.get("signalled", 0)), int(event.get("left", 0)))

    async def close_gate(self, reason: str) -> dict[str, Any]:
        return await self._request({"type": "close_gate", "reason": reason}, "gate")

    async def open_gate(self) -> dict[str, Any]:
        return await self._request({"type": "open_gate"}, "gate")

    async def hold(self, until_ms: int) -> int:
        """See :meth:`Client.hold`."""
        event = await self._request({"type": "hold", "until_ms": hold_until(until_ms)}, "held")
        until = event.get("until_ms")
        if isinstance(until, bool) or not isinstance(until, int):
            raise ProtocolError(f"held without an until_ms: {event!r:.200}")
        return until

    async def ready(self) -> int:
        """See :meth:`Client.ready`."""
        return ready_since(await self._request({"type": "ready"}, "ready_noted"))

    async def next_job(self, at_ms: int) -> int:
        """See :meth:`Client.next_job`."""
        event = await self._request({"type": "next_job", "at_ms": hold_until(at_ms)}, "next_job_at")
        return next_job_of(event)

    async def hand_keys(self, text: str) -> list[str]:
        """See :meth:`Client.hand_keys`."""
        if not isinstance(text, str):
            raise TypeError(f"text is a .env text (a str), not {type(text).__name__}")
        event = await self._request({"type": "hand_keys", "text": text}, "keys_handed")
        names = event.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ProtocolError(f"keys_handed without names: {event!r:.200}")
        return names

    async def begin_run(self, run: str, budget_usd: float | None = None) -> int:
        """See :meth:`Client.begin_run`."""
        event = await self._request(begin_run_request(run, budget_usd), "run_begun")
        budget = event.get("budget_micro_usd")
        if isinstance(budget, bool) or not isinstance(budget, int):
            raise ProtocolError(f"run_begun without budget_micro_usd: {event!r:.200}")
        return budget

    async def end_run(self, run: str) -> RunEnded:
        """See :meth:`Client.end_run`."""
        return run_ended(await self._request({"type": "end_run", "run": run_name(run)}, "run_ended"))

    async def card(self, run: str) -> dict[str, Any]:
        """See :meth:`Client.card`."""
        return card_of(await self._request({"type": "card", "run": run_name(run)}, "card"))

    async def shutdown(self) -> None:
        try:
            await self._request({"type": "shutdown"}, "shutting_down")
        except ConnectionError:
            pass

    async def signal(self, id: int, signal: str | int = "TERM") -> str | None:
        """See :meth:`Client.signal`."""
        try:
            event = await self._request(
                {"type": "signal", "target": id, "signal": signal_name(signal)}, "signalled"
            )
        except WardenError as e:
            if e.code == "unknown_id":
                return None
            raise
        return str(event.get("signal", signal))

    async def resize(self, id: int, rows: int, cols: int) -> TerminalSize:
        """See :meth:`Client.resize`."""
        size = terminal_size((rows, cols))
        event = await self._request(
            {"type": "resize", "target": id, "rows": size.rows, "cols": size.cols}, "resized"
        )
        return _resized(event)

    # -- detached commands (protocol version 4) ------------------------------

    async def _ask_on_id(self, request: dict[str, Any], follows: bool = False,
                         timeout: float | None | _Default = DEFAULT) -> tuple[int, _Route]:
        wait = self._link.timeout if isinstance(timeout, _Default) else timeout
        id = self._next_id()
        route = self._link.route(id)
        route.follows = follows
        try:
            await self._link.send(fr.encode_control(id, request), self._link.timeout)
            await self._link.wait(lambda: True if (route.started or route.ended) else None, wait)
        except BaseException:
            self._link.drop(id)
            raise
        if route.refused is not None:
            self._link.drop(id)
            raise route.refused
        return id, route

    async def detach(
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
        """Starts a detached command; see :meth:`Client.detach`."""
        size = None if pty is None else terminal_size(pty)
        request = detach_request(
            run_request(argv, shell, folder, timeout, env, stdin, limits, keep_background, extra, size),
            tag,
        )
        id, route = await self._ask_on_id(request)
        self._link.drop(id)
        return _detached(route, tag)

    async def list_commands(self) -> list[DetachedCommand]:
        """See :meth:`Client.list_commands`."""
        return detached_commands(await self._request({"type": "list"}, "commands"))

    async def attach(self, command: int) -> AsyncAttachment:
        """See :meth:`Client.attach`."""
        request = {"type": "attach", "command": command_number(command)}
        id, route = await self._ask_on_id(request, True)
        return AsyncAttachment(self, id, route, command)

    async def wait_command(self, command: int, timeout: float | None | _Default = DEFAULT) -> Result:
        """See :meth:`Client.wait_command`."""
        request = {"type": "wait", "command": command_number(command)}
        id, route = await self._ask_on_id(request, True, timeout)
        self._link.drop(id)
        assert route.exit is not None
        result = result_of(route.exit)
        result.command = command
        return result

    async def signal_command(self, command: int, signal: str | int = "TERM") -> str | None:
        """See :meth:`Client.signal_command`."""
        try:
            event = await self._request(
                {"type": "signal_command", "command": command_number(command),
                 "signal": signal_name(signal)},
                "command_signalled",
            )
        except WardenError as e:
            if e.code == "unknown_id":
                return None
            raise
        return str(event.get("signal", signal))


class AsyncProcess:
    """A command started by :meth:`AsyncClient.spawn`; ``async for stream,
    chunk in process`` reads its output. See :class:`~warden_client.Process`."""

    def __init__(
        self,
        client: AsyncClient,
        id: int,
        route: _Route,
        stdin: bool,
        pty: TerminalSize | None = None,
    ) -> None:
        self._client = client
        self._link = client._link
        self._route = route
        self.id = id
        started = route.started or {}
        self.command: int | None = started.get("command")
        self.pid: int | None = started.get("pid")
        #: Its terminal's size as last asked for (None: no terminal).
        self.terminal: TerminalSize | None = pty
        self._piped = stdin or pty is not None
        self._stdin_open = self._piped
        self._result: Result | None = None

    @property
    def ended(self) -> bool:
        return self._route.exit is not None

    @property
    def result(self) -> Result | None:
        return self._result

    async def _take(self, kinds: frozenset[int], timeout: float | None) -> tuple[int, bytes] | None:
        route = self._route

        def ready() -> tuple[int, bytes] | object | None:
            for i, item in enumerate(route.output):
                if item[0] in kinds:
                    del route.output[i]
                    return item
            return _END if route.ended else None

        got = await self._link.wait(ready, timeout)
        if got is _END:
            self._link.drop(self.id)
            return None
        assert isinstance(got, tuple)
        return got

    async def output(
        self, timeout: float | None | _Default = DEFAULT
    ) -> AsyncIterator[tuple[Stream, bytes]]:
        wait = self._link.timeout if isinstance(timeout, _Default) else timeout
        while (item := await self._take(_BOTH, wait)) is not None:
            yield _NAMES[item[0]], item[1]

    def __aiter__(self) -> AsyncIterator[tuple[Stream, bytes]]:
        return self.output()

    async def _stream(self, kind: int) -> AsyncIterator[bytes]:
        while (item := await self._take(frozenset((kind,)), self._link.timeout)) is not None:
            yield item[1]

    @property
    def stdout(self) -> AsyncIterator[bytes]:
        return self._stream(fr.STDOUT)

    @property
    def stderr(self) -> AsyncIterator[bytes]:
        return self._stream(fr.STDERR)

    def discard(self, stream: Stream) -> None:
        kind = fr.STDOUT if stream == "stdout" else fr.STDERR
        self._link.discard(self._route, frozenset((kind,)))

    async def wait(self, timeout: float | None | _Default = DEFAULT, collect: bool = False) -> Result:
        if self._result is not None:
            return self._result
        wait = self._link.timeout if isinstance(timeout, _Default) else timeout
        out: list[bytes] = []
        err: list[bytes] = []
        if not collect:
            self._link.discard(self._route, _BOTH)
        while (item := await self._take(_BOTH, wait)) is not None:
            (out if item[0] == fr.STDOUT else err).append(item[1])
        exit = self._route.exit
        assert exit is not None
        started = Started(self.command, self.pid or 0) if self.command is not None else None
        self._result = result_of(exit, b"".join(out), b"".join(err), started)
        self._result.pid = self.pid
        return self._result

    async def kill(self, signal: str | int = "TERM") -> str | None:
        """See :meth:`Process.kill`."""
        if self.ended:
            return None
        return await self._client.signal(self.id, signal)

    async def resize(self, rows: int, cols: int) -> TerminalSize | None:
        """See :meth:`Process.resize`."""
        if self.ended and self.terminal is not None:
            return None
        try:
            size = await self._client.resize(self.id, rows, cols)
        except WardenError as e:
            if e.code == "unknown_id" and self.terminal is not None:
                return None
            raise
        self.terminal = size
        return size

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._piped:
            raise ValueError("stdin is not a pipe: spawn(..., stdin=True) or pty=(rows, cols)")
        if not self._stdin_open:
            raise ValueError("stdin is closed")
        view = memoryview(data).cast("B")
        for start in range(0, len(view), STDIN_CHUNK):
            if self._route.exit is not None or self._route.late_errors:
                why = self._route.late_errors[0] if self._route.late_errors else "it has ended"
                raise BrokenPipeError(f"command {self.id}: stdin: {why}")
            frame = fr.encode(fr.STDIN, self.id, view[start : start + STDIN_CHUNK])
            await self._link.send(frame, self._link.timeout)

    async def close_stdin(self) -> None:
        if not self._piped or not self._stdin_open:
            return
        self._stdin_open = False
        if self._route.exit is None:
            await self._link.send(fr.encode(fr.STDIN, self.id), self._link.timeout)

    async def __aenter__(self) -> AsyncProcess:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._result is not None or self._link.failure is not None:
            return
        if not self.ended:
            try:
                await self.kill("KILL")
            except WardenError:
                return
        try:
            await self.wait()
        except WardenError:
            pass

    def __repr__(self) -> str:
        state = "ended" if self.ended else "running"
        return f"<warden AsyncProcess id={self.id} command={self.command} pid={self.pid} {state}>"


class AsyncAttachment(AsyncProcess):
    """A detached command followed on a frame id of this connection
    (:meth:`AsyncClient.attach`); ``async for stream, chunk in attachment``
    reads what it printed, then its output live. See
    :class:`~warden_client.Attachment`."""

    def __init__(self, client: AsyncClient, id: int, route: _Route, command: int) -> None:
        super().__init__(client, id, route, True)
        event = route.started or {}
        self.command = command
        self.pid = None
        self._number = command
        self.dropped_bytes: int = int(event.get("dropped_bytes", 0) or 0)

    async def kill(self, signal: str | int = "TERM") -> str | None:
        """See :meth:`Attachment.kill`."""
        if self.ended:
            return None
        return await self._client.signal_command(self._number, signal)

    async def resize(self, rows: int, cols: int) -> TerminalSize | None:
        """See :meth:`Attachment.resize`."""
        if self.ended:
            return None
        try:
            size = await self._client.resize(self.id, rows, cols)
        except WardenError as e:
            if e.code == "unknown_id" and self.ended:
                return None
            raise
        self.terminal = size
        return size

    def close(self) -> None:
        """See :meth:`Attachment.close`."""
        self._link.discard(self._route, _BOTH)
        self._link.drop(self.id)

    async def __aexit__(self, *exc: object) -> None:
        if self._result is None:
            self.close()

    def __repr__(self) -> str:
        state = "ended" if self.ended else "running"
        return f"<warden AsyncAttachment id={self.id} command={self.command} {state}>"
