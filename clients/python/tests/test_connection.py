"""The client's reading against a scripted peer, without warden: partial
reads, interleaved commands, fatal errors, timeouts, the hybrid vsock
line, the asyncio client."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from typing import Any

import pytest

import warden_client
from warden_client import (
    AsyncClient,
    Client,
    ConnectionError,
    TimeoutError,
    WardenError,
)
from warden_client import frames as fr

from scriptedpeer import HELLO, control, read_frame, read_json, until_closed


def test_partial_reads_byte_by_byte(peer: Any) -> None:
    """Frames cut anywhere, a 1 MiB frame among them, are put together."""
    big = bytes(range(256)) * 4096  # 1 MiB

    def script(conn: socket.socket) -> None:
        read_json(conn)
        stream = HELLO
        conn.sendall(stream[:1])
        time.sleep(0.01)
        conn.sendall(stream[1:])
        _, run = read_json(conn)
        assert run["argv"] == ["x"]
        out = (
            control(1, {"type": "started", "command": 7, "pid": 70})
            + fr.encode(fr.STDOUT, 1, b"ab")
            + fr.encode(fr.STDOUT, 1, big)
            + fr.encode(fr.STDERR, 1, b"e")
            + control(1, {"type": "exit", "status": 0, "code": 0, "duration_ms": 1.5,
                          "stdout_bytes": len(big) + 2, "stderr_bytes": 1, "drained": True})
        )
        # Odd pieces, small ones at the frame boundaries.
        cuts = [1, 3, 5, 8, 9, 10, 17, 4099, 65536 + 3]
        at = 0
        while at < len(out):
            n = cuts[at % len(cuts)]
            conn.sendall(out[at : at + n])
            at += n
        until_closed(conn)

    p = peer(script)
    with Client.connect(p.path, timeout=10) as c:
        assert (c.version, c.server) == (3, "warden test")
        r = c.run(["x"])
    assert r.stdout == b"ab" + big and r.stderr == b"e"
    assert (r.status, r.code, r.command, r.pid, r.stdout_bytes) == (0, 0, 7, 70, len(big) + 2)


def test_commands_interleave_and_each_gets_its_own(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        read_json(conn)
        conn.sendall(HELLO)
        for id in (1, 2):
            got_id, run = read_json(conn)
            assert got_id == id
            conn.sendall(control(id, {"type": "started", "command": 10 + id, "pid": 100 + id}))
        conn.sendall(
            fr.encode(fr.STDOUT, 2, b"two-a") + fr.encode(fr.STDOUT, 1, b"one-a")
            + fr.encode(fr.STDERR, 2, b"two-err") + fr.encode(fr.STDOUT, 1, b"one-b")
            + fr.encode(fr.STDOUT, 9, b"nobody's")  # an id nobody runs: dropped
            + control(1, {"type": "exit", "status": 3, "code": 3, "duration_ms": 1,
                          "stdout_bytes": 10, "stderr_bytes": 0, "drained": True})
            + fr.encode(fr.STDOUT, 2, b"two-b")
            + control(2, {"type": "exit", "status": 143, "signal": "SIGTERM", "duration_ms": 2,
                          "stdout_bytes": 10, "stderr_bytes": 7, "drained": True})
        )
        until_closed(conn)

    p = peer(script)
    with Client.connect(p.path, timeout=10) as c:
        one = c.spawn(["one"])
        two = c.spawn(["two"])
        assert (one.command, two.pid) == (11, 102)
        # Reading two's stdout first: one's output waits for it.
        assert b"".join(two.stdout) == b"two-atwo-b"
        assert b"".join(two.stderr) == b"two-err"
        assert list(one) == [("stdout", b"one-a"), ("stdout", b"one-b")]
        assert one.wait().status == 3
        assert two.wait().signal == "SIGTERM"


def test_a_fatal_error_ends_every_wait(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        read_json(conn)
        conn.sendall(HELLO)
        read_json(conn)
        conn.sendall(control(1, {"type": "started", "command": 1, "pid": 2}))
        conn.sendall(fr.encode(fr.STDOUT, 1, b"partial"))
        conn.sendall(control(0, {"type": "error", "code": "bad_frame", "message": "a frame stopped"}))

    p = peer(script)
    with Client.connect(p.path, timeout=10) as c:
        proc = c.spawn(["x"])
        chunks = []
        with pytest.raises(WardenError) as caught:
            for _, chunk in proc:
                chunks.append(chunk)
        assert chunks == [b"partial"], "output before the error is delivered"
        assert caught.value.code == "bad_frame"
        with pytest.raises(WardenError):
            c.status()


def test_non_fatal_errors_answer_their_request(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        read_json(conn)
        conn.sendall(HELLO)
        assert read_json(conn) == (0, {"type": "audit", "kind": "Bad Kind"})
        conn.sendall(control(0, {"type": "error", "code": "bad_request", "message": "an audit kind is [a-z0-9_]{1,64}"}))
        assert read_json(conn) == (0, {"type": "signal", "target": 5, "signal": "15"})
        conn.sendall(control(0, {"type": "error", "code": "unknown_id", "message": "no running command with id 5"}))
        assert read_json(conn) == (0, {"type": "stop_shell", "signal": "KILL"})
        conn.sendall(control(0, {"type": "shell_stopped", "signalled": 2, "left": 0}))
        _, run = read_json(conn)
        assert run == {"type": "run", "shell": "x", "extra_field": True}
        conn.sendall(control(1, {"type": "error", "code": "bad_request", "message": "unknown field"}))
        until_closed(conn)

    p = peer(script)
    with Client.connect(p.path, timeout=10) as c:
        with pytest.raises(WardenError) as caught:
            c.audit("Bad Kind")
        assert caught.value.code == "bad_request" and not caught.value.fatal
        assert c.signal(5, 15) is None
        assert c.stop_shell() == warden_client.ShellStopped(2, 0)
        with pytest.raises(WardenError, match="unknown field"):
            c.run(shell="x", extra={"extra_field": True})


def test_timeouts_leave_the_connection_usable(peer: Any) -> None:
    go = threading.Event()

    def script(conn: socket.socket) -> None:
        read_json(conn)
        conn.sendall(HELLO)
        read_json(conn)
        go.wait(10)
        conn.sendall(control(0, {"type": "status", "protocol": 3}))
        until_closed(conn)

    p = peer(script)
    with Client.connect(p.path, timeout=0.2) as c:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            c.status()
        assert time.monotonic() - t0 < 5
        go.set()
        # The late answer is still there for whoever waits for id 0 next.
        replies = c._link.route(0)
        got = c._link.wait(lambda: replies.events.popleft() if replies.events else None, 5)
        assert got["type"] == "status"


def test_refusal_before_the_hello_is_the_error_raised(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(control(0, {"type": "error", "code": "refused",
                                 "message": "uid 65534 may not use this socket: only root and runtime may"}))
        # As warden does: hear the peer out briefly, then close.
        conn.settimeout(0.5)
        try:
            conn.recv(65536)
        except OSError:
            pass

    p = peer(script)
    with pytest.raises(WardenError) as caught:
        Client.connect(p.path, timeout=5)
    assert caught.value.code == "refused" and "may not use" in caught.value.message


def test_a_missing_socket_is_a_connection_error() -> None:
    with pytest.raises(ConnectionError) as caught:
        Client.connect("/nonexistent/warden.sock")
    assert caught.value.errno is not None
    with pytest.raises(OSError):  # Python's own ConnectionError catches it too
        Client.connect("/nonexistent/warden.sock")
    with pytest.raises(ConnectionError):
        asyncio.run(AsyncClient.connect("/nonexistent/warden.sock"))


def test_a_peer_closing_mid_frame_is_a_connection_error(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        read_json(conn)
        conn.sendall(HELLO)
        read_json(conn)
        conn.sendall(control(1, {"type": "started", "command": 1, "pid": 2}))
        conn.sendall(fr.encode(fr.STDOUT, 1, b"0123456789")[:12])

    p = peer(script)
    with Client.connect(p.path, timeout=10) as c:
        proc = c.spawn(["x"])
        with pytest.raises(ConnectionError, match="middle of a frame"):
            proc.wait()


def test_the_default_socket_and_key_come_from_the_environment(peer: Any, monkeypatch: Any, tmp_path: Any) -> None:
    key = tmp_path / "key"
    key.write_text("k" * 40 + "\n")

    def script(conn: socket.socket) -> None:
        _, hello = read_json(conn)
        assert hello == {"type": "hello", "versions": [1, 2, 3, 4, 5, 6, 7, 8, 9],
                         "client": f"warden-python {warden_client.__version__}", "key": "k" * 40}
        conn.sendall(HELLO)

    p = peer(script)
    monkeypatch.setenv("WARDEN_SOCKET", p.path)
    monkeypatch.setenv("WARDEN_KEY_FILE", str(key))
    Client.connect().close()


def test_hybrid_vsock_connect_line(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        line = b""
        while not line.endswith(b"\n"):
            line += conn.recv(1)
        assert line == b"CONNECT 1024\n"
        conn.sendall(b"OK 1073741824\n")
        _, hello = read_json(conn)
        assert hello["key"] == "the-key"
        conn.sendall(HELLO)

    p = peer(script)
    with Client.connect(p.path, "the-key", vsock_port=1024) as c:
        assert c.version == 3


def test_hybrid_vsock_refusal_is_clear(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        conn.recv(64)
        conn.sendall(b"NO\n")

    p = peer(script)
    with pytest.raises(ConnectionError, match="CONNECT 7"):
        Client.connect(p.path, "k", vsock_port=7)


def test_async_client_streams_and_interleaves(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        read_json(conn)
        conn.sendall(HELLO)
        _, run = read_json(conn)
        assert run == {"type": "run", "argv": ["cat"], "stdin": "pipe"}
        conn.sendall(control(1, {"type": "started", "command": 1, "pid": 2}))
        got = b""
        while True:
            kind, id, body = read_frame(conn)
            assert (kind, id) == (fr.STDIN, 1)
            if not body:
                break
            got += body
            conn.sendall(fr.encode(fr.STDOUT, 1, body))
        conn.sendall(control(1, {"type": "exit", "status": 0, "code": 0, "duration_ms": 1,
                                 "stdout_bytes": len(got), "stderr_bytes": 0, "drained": True}))
        until_closed(conn)

    data = os.urandom(3 * 1024 * 1024 + 5)

    async def main() -> bytes:
        async with await AsyncClient.connect(p.path, timeout=10) as c:
            r = await c.run(["cat"], stdin=data)
            return r.stdout

    p = peer(script)
    assert asyncio.run(main()) == data


def test_unknown_id_on_a_run_never_refuses_it(peer: Any) -> None:
    """clients/fixtures/README.md: unknown_id is about late stdin frames and
    does not end the command, even before its started event."""

    def script(conn: socket.socket) -> None:
        read_json(conn)
        conn.sendall(HELLO)
        read_json(conn)
        conn.sendall(
            control(1, {"type": "error", "code": "unknown_id", "message": "id 1 has no open stdin"})
            + control(1, {"type": "started", "command": 4, "pid": 5})
            + fr.encode(fr.STDOUT, 1, b"ran")
            + control(1, {"type": "exit", "status": 0, "code": 0, "duration_ms": 1,
                          "stdout_bytes": 3, "stderr_bytes": 0, "drained": True})
        )
        until_closed(conn)

    p = peer(script)
    with Client.connect(p.path, timeout=10) as c:
        r = c.run(["x"])
    assert (r.stdout, r.command) == (b"ran", 4)
