"""The blocking client's transport: one unix socket, its frames read and
written by whichever thread waits (see :mod:`warden_client.client`).
The routes and the failure it keeps are the core's
(:class:`~warden_client.core.Switchboard`), touched under its lock."""

from __future__ import annotations

import math
import select
import socket as _socket
import threading
from collections.abc import Callable
from typing import TypeVar

from . import core
from . import frames as fr
from .common import FRAME_TIMEOUT
from .core import Route
from .core import deadline as _deadline
from .core import remaining as _remaining
from .errors import ConnectionError, TimeoutError, WardenError

__all__ = ["Link", "connect_socket", "hybrid_vsock"]

_NOSIGNAL = getattr(_socket, "MSG_NOSIGNAL", 0)
#: How long one wait for room to write lasts before looking for frames.
_WRITE_SLICE = 0.05

T = TypeVar("T")


class Link(core.Switchboard):
    """One socket: frames in and out, shared by threads (see the module).
    Its routes (:class:`~warden_client.core.Switchboard`) are touched under
    its lock only."""

    def __init__(self, sock: _socket.socket, timeout: float | None, name: str) -> None:
        super().__init__(timeout, name)
        sock.setblocking(False)
        self.sock = sock
        self._cond = threading.Condition()
        self._reading = False
        self._wlock = threading.Lock()

    # -- routes ------------------------------------------------------------

    def route(self, id: int) -> Route:
        with self._cond:
            return super().route(id)

    def drop(self, id: int) -> None:
        with self._cond:
            super().drop(id)
            self._cond.notify_all()

    def discard(self, route: Route, kinds: frozenset[int]) -> None:
        with self._cond:
            super().discard(route, kinds)

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
        deadline = _deadline(core.LAST_WORDS)
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


def connect_socket(path: str, timeout: float | None, vsock_port: int | None) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        if vsock_port is not None:
            hybrid_vsock(sock, path, vsock_port)
    except OSError as e:
        sock.close()
        raise ConnectionError(f"{path}: {e.strerror or e}", e.errno) from None
    except BaseException:
        sock.close()
        raise
    return sock


def hybrid_vsock(sock: _socket.socket, path: str, port: int) -> None:
    """The host's end of a VM's vsock (a unix socket kept by the VM's vsock
    device): ``CONNECT <port>``, answered ``OK <host port>``."""
    sock.sendall(core.vsock_request(port))
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
    core.vsock_answered(path, port, line)
