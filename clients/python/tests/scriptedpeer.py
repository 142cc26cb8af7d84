"""A scripted peer for the client's tests: a fake warden on a unix socket
that plays a script on the connection, and the helpers that read what the
client sends (the `peer` fixture in conftest.py makes them)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from warden_client import frames as fr

def control(id: int, message: dict[str, Any]) -> bytes:
    return fr.encode_control(id, message)


HELLO = control(0, {"type": "hello", "version": 3, "server": "warden test"})


class Peer:
    """A fake warden: `script(conn)` runs on the accepted connection."""

    def __init__(self, script: Callable[[socket.socket], None]) -> None:
        self.dir = tempfile.mkdtemp(prefix="warden-peer-")
        self.path = os.path.join(self.dir, "api.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.listener.settimeout(10)
        self.error: BaseException | None = None

        def serve() -> None:
            try:
                conn, _ = self.listener.accept()
                with conn:
                    conn.settimeout(10)
                    script(conn)
            except BaseException as e:  # reported by close()
                self.error = e

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.thread.join(15)
        self.listener.close()
        os.unlink(self.path)
        os.rmdir(self.dir)
        assert not self.thread.is_alive(), "the peer's script did not end"
        if self.error is not None:
            raise self.error


def read_frame(conn: socket.socket) -> tuple[int, int, bytes]:
    def exact(n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return bytes(data)

    kind, id, size = fr.HEADER.unpack(exact(9))
    return kind, id, exact(size)


def read_json(conn: socket.socket) -> tuple[int, dict[str, Any]]:
    kind, id, body = read_frame(conn)
    assert kind == fr.CONTROL
    return id, json.loads(body)


def until_closed(conn: socket.socket) -> None:
    """Waits for the client's next frame, or for it to close."""
    try:
        read_frame(conn)
    except EOFError:
        pass
