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

from . import core
from . import frames as fr
from .common import (
    FRAME_TIMEOUT,
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
from .core import deadline as _deadline
from .core import remaining as _remaining
from .errors import ConnectionError, TimeoutError, WardenError

__all__ = ["AsyncAttachment", "AsyncClient", "AsyncProcess"]

T = TypeVar("T")
#: The stream reader's buffer: a frame's payload is read past it anyway.
_READ_LIMIT = 2 * fr.MAX_FRAME


class _AsyncLink(core.Switchboard):
    """One connection's streams: frames in and out, for an event loop. Its
    routes are the core's (:class:`~warden_client.core.Switchboard`)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        timeout: float | None,
        name: str,
    ) -> None:
        super().__init__(timeout, name)
        self.reader = reader
        self.writer = writer
        self._reading: asyncio.Task[None] | None = None
        self._wlock = asyncio.Lock()

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
        deadline = _deadline(core.LAST_WORDS)
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
    writer.write(core.vsock_request(port))
    await writer.drain()
    try:
        line = await reader.readuntil(b"\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        raise ConnectionError(f"{path}: CONNECT {port}: no answer; is the VM up and listening?") from None
    core.vsock_answered(path, port, line[:-1])


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
            replies = link.route(0)
            await link.send(core.hello_message(versions, client or client_name(), secret), connect_timeout)
            hello = core.hello_of(path, await link.wait(core.first_event(replies), connect_timeout))
        except asyncio.TimeoutError:
            await link.close()
            raise ConnectionError(f"{path}: no answer in {connect_timeout} s") from None
        except BaseException:
            await link.close()
            raise
        return cls(link, hello)

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
        self._ids = core.next_id(self._ids)
        return self._ids

    async def _request(self, message: dict[str, Any], answer: str) -> dict[str, Any]:
        async with self._requests:
            replies = self._link.route(0)
            self._link.asking = message["type"]
            try:
                await self._link.send(fr.encode_control(0, message), self._link.timeout)
                event = await self._link.wait(core.first_event(replies), self._link.timeout)
            finally:
                self._link.asking = None
        return core.answer_of(message, answer, event)

    async def _call(self, call: core.Call[T]) -> T:
        """A request on id 0 as the core builds it, and what its answer gives."""
        try:
            event = await self._request(call.message, call.answer)
        except WardenError as e:
            if call.gone is not None and e.code == "unknown_id":
                return call.gone()
            raise
        return call.parse(event)

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
        id, route = await self._ask_on_id(request)
        if route.exit is not None:
            self._link.drop(id)
        return AsyncProcess(self, id, route, stdin, size)

    async def status(self) -> dict[str, Any]:
        return await self._call(core.status())

    async def reload(self) -> dict[str, Any]:
        return await self._call(core.reload())

    async def audit(self, kind: str, fields: Any = None) -> int:
        return await self._call(core.audit(kind, fields))

    async def stop_shell(self, signal: str | int = "KILL") -> ShellStopped:
        return await self._call(core.stop_shell(signal))

    async def close_gate(self, reason: str) -> dict[str, Any]:
        return await self._call(core.close_gate(reason))

    async def open_gate(self) -> dict[str, Any]:
        return await self._call(core.open_gate())

    async def hold(self, until_ms: int) -> int:
        """See :meth:`Client.hold`."""
        return await self._call(core.hold(until_ms))

    async def ready(self) -> int:
        """See :meth:`Client.ready`."""
        return await self._call(core.ready())

    async def next_job(self, at_ms: int) -> int:
        """See :meth:`Client.next_job`."""
        return await self._call(core.next_job(at_ms))

    async def hand_keys(self, text: str) -> list[str]:
        """See :meth:`Client.hand_keys`."""
        return await self._call(core.hand_keys(text))

    async def begin_run(self, run: str, budget_usd: float | None = None) -> int:
        """See :meth:`Client.begin_run`."""
        return await self._call(core.begin_run(run, budget_usd))

    async def end_run(self, run: str) -> RunEnded:
        """See :meth:`Client.end_run`."""
        return await self._call(core.end_run(run))

    async def card(self, run: str) -> dict[str, Any]:
        """See :meth:`Client.card`."""
        return await self._call(core.card(run))

    async def shutdown(self) -> None:
        try:
            await self._call(core.shutdown())
        except ConnectionError:
            pass

    async def signal(self, id: int, signal: str | int = "TERM") -> str | None:
        """See :meth:`Client.signal`."""
        return await self._call(core.signal(id, signal))

    async def resize(self, id: int, rows: int, cols: int) -> TerminalSize:
        """See :meth:`Client.resize`."""
        return await self._call(core.resize(id, rows, cols))

    # -- detached commands (protocol version 4) ------------------------------

    async def _ask_on_id(self, request: dict[str, Any], follows: bool = False,
                         timeout: float | None | _Default = DEFAULT) -> tuple[int, _Route]:
        wait = core.own_timeout(timeout, self._link.timeout)
        id = self._next_id()
        route = self._link.route(id)
        route.follows = follows
        try:
            await self._link.send(fr.encode_control(id, request), self._link.timeout)
            await self._link.wait(core.first_answer(route), wait)
        except BaseException:
            self._link.drop(id)
            raise
        core.settle(self._link, id, route)
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
        return core.detached_of(route, tag)

    async def list_commands(self) -> list[DetachedCommand]:
        """See :meth:`Client.list_commands`."""
        return await self._call(core.list_commands())

    async def attach(self, command: int) -> AsyncAttachment:
        """See :meth:`Client.attach`."""
        id, route = await self._ask_on_id(core.attach_request(command), True)
        return AsyncAttachment(self, id, route, command)

    async def wait_command(self, command: int, timeout: float | None | _Default = DEFAULT) -> Result:
        """See :meth:`Client.wait_command`."""
        id, route = await self._ask_on_id(core.wait_request(command), True, timeout)
        self._link.drop(id)
        return core.waited(route, command)

    async def signal_command(self, command: int, signal: str | int = "TERM") -> str | None:
        """See :meth:`Client.signal_command`."""
        return await self._call(core.signal_command(command, signal))


class AsyncProcess(core.Command):
    """A command started by :meth:`AsyncClient.spawn`; ``async for stream,
    chunk in process`` reads its output. See :class:`~warden_client.Process`."""

    _label = "AsyncProcess"
    _client: AsyncClient
    _link: _AsyncLink

    def __init__(
        self,
        client: AsyncClient,
        id: int,
        route: _Route,
        stdin: bool,
        pty: TerminalSize | None = None,
    ) -> None:
        super().__init__(client, id, route, stdin, pty)

    async def _take(self, kinds: frozenset[int], timeout: float | None) -> tuple[int, bytes] | None:
        return self._took(await self._link.wait(self._ready(kinds), timeout))

    async def output(
        self, timeout: float | None | _Default = DEFAULT
    ) -> AsyncIterator[tuple[Stream, bytes]]:
        wait = core.own_timeout(timeout, self._link.timeout)
        while (item := await self._take(_BOTH, wait)) is not None:
            yield core.NAMES[item[0]], item[1]

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

    async def wait(self, timeout: float | None | _Default = DEFAULT, collect: bool = False) -> Result:
        if self._result is not None:
            return self._result
        wait = core.own_timeout(timeout, self._link.timeout)
        out, err = self._collecting(collect)
        while (item := await self._take(_BOTH, wait)) is not None:
            (out if item[0] == fr.STDOUT else err).append(item[1])
        return self._ended_with(out, err)

    async def kill(self, signal: str | int = "TERM") -> str | None:
        """See :meth:`Process.kill`."""
        if self.ended:
            return None
        return await self._client.signal(self.id, signal)

    async def resize(self, rows: int, cols: int) -> TerminalSize | None:
        """See :meth:`Process.resize`."""
        if self._resize_moot():
            return None
        try:
            size = await self._client.resize(self.id, rows, cols)
        except WardenError as e:
            if self._resize_gone(e):
                return None
            raise
        return self._resized(size)

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        view = self._stdin(data)
        for start in range(0, len(view), STDIN_CHUNK):
            await self._link.send(self._stdin_frame(view, start), self._link.timeout)

    async def close_stdin(self) -> None:
        frame = self._stdin_end()
        if frame is not None:
            await self._link.send(frame, self._link.timeout)

    async def __aenter__(self) -> AsyncProcess:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._keeps():
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


class AsyncAttachment(core.Following, AsyncProcess):
    """A detached command followed on a frame id of this connection
    (:meth:`AsyncClient.attach`); ``async for stream, chunk in attachment``
    reads what it printed, then its output live. See
    :class:`~warden_client.Attachment`."""

    _label = "AsyncAttachment"

    def __init__(self, client: AsyncClient, id: int, route: _Route, command: int) -> None:
        super().__init__(client, id, route, True)
        self._follow(route, command)

    async def kill(self, signal: str | int = "TERM") -> str | None:
        """See :meth:`Attachment.kill`."""
        if self.ended:
            return None
        return await self._client.signal_command(self._number, signal)

    async def resize(self, rows: int, cols: int) -> TerminalSize | None:
        """See :meth:`Attachment.resize`."""
        return await super().resize(rows, cols)

    async def __aexit__(self, *exc: object) -> None:
        if self._result is None:
            self.close()
