"""Frames and the client's reading, without warden: headers, requests,
partial reads, interleaved commands, fatal errors, timeouts."""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import warden_client
from warden_client import (
    AsyncClient,
    Client,
    ConnectionError,
    ProtocolError,
    TimeoutError,
    WardenError,
)
from warden_client import frames as fr
from warden_client.common import run_request, terminal_size


def test_header_round_trip_and_limits() -> None:
    frame = fr.encode(fr.STDERR, 0xDEADBEEF, b"x" * 12345)
    assert frame[:9] == bytes([3, 0xDE, 0xAD, 0xBE, 0xEF, 0, 0, 0x30, 0x39])
    assert fr.decode_header(frame[:9]) == (fr.STDERR, 0xDEADBEEF, 12345)
    assert fr.decode_header(bytes([3, 0, 0, 0, 7, 0, 16, 0, 0])) == (3, 7, fr.MAX_FRAME)
    for raw, why in [
        (bytes([3, 0, 0, 0, 7, 0, 16, 0, 1]), "exceeds"),
        (bytes([0, 0, 0, 0, 0, 0, 0, 0, 0]), "unknown frame kind 0"),
        (bytes([9, 0, 0, 0, 0, 0, 0, 0, 0]), "unknown frame kind 9"),
        (bytes([1, 0, 0, 0, 0, 255, 255, 255, 255]), "exceeds"),
    ]:
        with pytest.raises(ProtocolError, match=why):
            fr.decode_header(raw)
    with pytest.raises(ValueError):
        fr.encode(fr.STDIN, 1, b"x" * (fr.MAX_FRAME + 1))
    with pytest.raises(ValueError):
        fr.encode(fr.STDIN, -1)
    with pytest.raises(ValueError):
        fr.encode(5, 1)


def test_the_protocol_documents_example_is_what_we_send() -> None:
    # docs/protocol.md, "Example": the hello and the run, byte by byte.
    hello = fr.encode_control(0, {"type": "hello", "versions": [1]})
    assert hello[:9].hex() == "01" + "00000000" + "0000001f"
    run = fr.encode_control(1, run_request(["echo", "hi"], None, None, None, None, False, None, False))
    assert run[:9].hex() == "01" + "00000001" + "00000023"
    assert run[9:] == b'{"type":"run","argv":["echo","hi"]}'


def test_run_requests_leave_defaults_out() -> None:
    assert run_request(None, "make", "p", 0.3, {"A": "1"}, True, {"processes": 4}, True) == {
        "type": "run", "shell": "make", "folder": "p", "timeout_ms": 300, "env": {"A": "1"},
        "stdin": "pipe", "limits": {"processes": 4}, "keep_background": True,
    }
    assert run_request(["x"], None, None, None, {}, False, None, False) == {"type": "run", "argv": ["x"]}
    with pytest.raises(TypeError):
        run_request("ls -l", None, None, None, None, False, None, False)
    with pytest.raises(ValueError):
        run_request(["x"], None, None, -1, None, False, None, False)


def test_pty_sizes_are_rows_first() -> None:
    size = warden_client.TerminalSize(24, 80)
    assert run_request(["sh"], None, None, None, None, False, None, False, None, size) == {
        "type": "run", "argv": ["sh"], "pty": {"rows": 24, "cols": 80},
    }
    assert terminal_size((30, 100)) == (30, 100) == warden_client.TerminalSize(rows=30, cols=100)
    # os.get_terminal_size() gives columns first: turned round.
    assert terminal_size(os.terminal_size((132, 50))) == warden_client.TerminalSize(50, 132)
    for bad in ((24,), (24.0, 80), (True, 80), "24x80", None):
        with pytest.raises(TypeError):
            terminal_size(bad)  # type: ignore[arg-type]
    # Out of range is warden's to say (bad_request), not the client's.
    assert terminal_size((0, 5000)) == (0, 5000)


def test_error_classes() -> None:
    e = ConnectionError("gone", 32)
    assert e.code == "connection" and e.errno == 32 and e.fatal
    assert isinstance(e, WardenError) and isinstance(e, OSError)
    assert isinstance(TimeoutError("slow"), builtins.TimeoutError)
    assert not WardenError("bad_request", "x").fatal and WardenError("refused", "x").fatal
    assert not WardenError("refused", "x", fatal=False).fatal
    assert str(WardenError("bad_json", "oops")) == "bad_json: oops"
    assert warden_client.CODES >= warden_client.FATAL_CODES


# -- a scripted peer ------------------------------------------------------


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


@pytest.fixture
def peer() -> Iterator[Callable[[Callable[[socket.socket], None]], Peer]]:
    made: list[Peer] = []

    def make(script: Callable[[socket.socket], None]) -> Peer:
        p = Peer(script)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


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
        try:
            read_frame(conn)
        except EOFError:
            pass

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
        try:
            read_frame(conn)
        except EOFError:
            pass

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
        try:
            read_frame(conn)
        except EOFError:
            pass

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
        try:
            read_frame(conn)
        except EOFError:
            pass

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
        try:
            read_frame(conn)
        except EOFError:
            pass

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
        try:
            read_frame(conn)
        except EOFError:
            pass

    p = peer(script)
    with Client.connect(p.path, timeout=10) as c:
        r = c.run(["x"])
    assert (r.stdout, r.command) == (b"ran", 4)


HELLO_4 = control(0, {"type": "hello", "version": 4, "server": "warden test"})
REFUSED_KEYS = {"type": "error", "code": "refused",
                "message": "hand_keys comes through the host's door only (the runtime writes its own .env)"}


def _version_4_script(conn: socket.socket) -> None:
    """hold and hand_keys as warden answers them: the hold in force, the
    names, a bad_request, and a refused hand_keys after which the
    connection goes on (a command that was running ends as usual)."""
    read_json(conn)
    conn.sendall(HELLO_4)
    assert read_json(conn) == (0, {"type": "hold", "until_ms": 1798761600000})
    conn.sendall(control(0, {"type": "held", "until_ms": 1798761600000}))
    assert read_json(conn) == (0, {"type": "hold", "until_ms": 0})
    conn.sendall(control(0, {"type": "held", "until_ms": 0}))
    assert read_json(conn) == (0, {"type": "hold", "until_ms": 9999999999999})
    conn.sendall(control(0, {"type": "error", "code": "bad_request",
                             "message": "hold: until_ms 9999999999999 is more than a week from now"}))
    assert read_json(conn) == (0, {"type": "hand_keys", "text": "API_TOKEN=abc\nOTHER=1\n"})
    conn.sendall(control(0, {"type": "keys_handed", "names": ["API_TOKEN", "OTHER"]}))
    _, run = read_json(conn)
    assert run == {"type": "run", "argv": ["sleep", "1"]}
    conn.sendall(control(1, {"type": "started", "command": 1, "pid": 10}))
    assert read_json(conn) == (0, {"type": "hand_keys", "text": "A=1\n"})
    conn.sendall(control(0, REFUSED_KEYS))
    assert read_json(conn) == (0, {"type": "status"})
    conn.sendall(control(0, {"type": "status", "protocol": 4, "activity": {"idle_ms": 1}}))
    conn.sendall(fr.encode(fr.STDOUT, 1, b"still\n")
                 + control(1, {"type": "exit", "status": 0, "code": 0, "duration_ms": 1,
                               "stdout_bytes": 6, "stderr_bytes": 0, "drained": True}))
    try:
        read_frame(conn)
    except EOFError:
        pass


def test_hold_and_hand_keys_and_a_refusal_that_is_not_fatal(peer: Any) -> None:
    p = peer(_version_4_script)
    with Client.connect(p.path, timeout=10) as c:
        assert c.version == 4
        assert c.hold(1798761600000) == 1798761600000
        assert c.hold(0) == 0
        with pytest.raises(WardenError) as caught:
            c.hold(9999999999999)
        assert caught.value.code == "bad_request" and not caught.value.fatal
        assert c.hand_keys("API_TOKEN=abc\nOTHER=1\n") == ["API_TOKEN", "OTHER"]
        with pytest.raises(TypeError):
            c.hold(True)
        with pytest.raises(ValueError):
            c.hold(-1)
        with pytest.raises(TypeError):
            c.hand_keys(b"A=1\n")  # type: ignore[arg-type]
        proc = c.spawn(["sleep", "1"])
        with pytest.raises(WardenError) as caught:
            c.hand_keys("A=1\n")
        assert caught.value.code == "refused" and not caught.value.fatal
        assert "host's door only" in caught.value.message
        assert c._link.failure is None, "the connection goes on"
        assert c.status()["activity"] == {"idle_ms": 1}
        r = proc.wait(collect=True)
        assert (r.status, r.stdout) == (0, b"still\n")


def test_async_hold_and_hand_keys_and_a_refusal_that_is_not_fatal(peer: Any) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(p.path, timeout=10) as c:
            assert c.version == 4
            assert await c.hold(1798761600000) == 1798761600000
            assert await c.hold(0) == 0
            with pytest.raises(WardenError) as caught:
                await c.hold(9999999999999)
            assert caught.value.code == "bad_request"
            assert await c.hand_keys("API_TOKEN=abc\nOTHER=1\n") == ["API_TOKEN", "OTHER"]
            proc = await c.spawn(["sleep", "1"])
            with pytest.raises(WardenError) as caught:
                await c.hand_keys("A=1\n")
            assert caught.value.code == "refused" and not caught.value.fatal
            assert c._link.failure is None, "the connection goes on"
            assert (await c.status())["activity"] == {"idle_ms": 1}
            r = await proc.wait(collect=True)
            assert (r.status, r.stdout) == (0, b"still\n")

    p = peer(_version_4_script)
    asyncio.run(main())


def test_a_refused_hello_is_still_fatal_with_a_key(peer: Any) -> None:
    def script(conn: socket.socket) -> None:
        read_json(conn)
        conn.sendall(control(0, {"type": "error", "code": "refused", "message": "wrong key"}))

    p = peer(script)
    with pytest.raises(WardenError) as caught:
        Client.connect(p.path, "k" * 64, timeout=5)
    assert caught.value.code == "refused" and caught.value.fatal


RESIZE_UNKNOWN = {"type": "error", "code": "unknown_id", "message": "id 2 runs no command on a terminal"}


def _pty_script(conn: socket.socket) -> None:
    """A command on a terminal as warden runs it: pty in the run, typed
    input without stdin "pipe", resize on id 0, one output stream; then a
    resize for a command without a terminal, and one for the ended one."""
    read_json(conn)
    conn.sendall(HELLO_4)
    assert read_json(conn) == (1, {"type": "run", "argv": ["sh"], "pty": {"rows": 24, "cols": 80}})
    conn.sendall(control(1, {"type": "started", "command": 1, "pid": 10}))
    assert read_frame(conn) == (fr.STDIN, 1, b"stty size\r")
    conn.sendall(fr.encode(fr.STDOUT, 1, b"stty size\r\n24 80\r\n"))
    assert read_json(conn) == (0, {"type": "resize", "target": 1, "rows": 40, "cols": 120})
    conn.sendall(control(0, {"type": "resized", "target": 1, "rows": 40, "cols": 120}))
    assert read_json(conn) == (0, {"type": "resize", "target": 1, "rows": 0, "cols": 80})
    conn.sendall(control(0, {"type": "error", "code": "bad_request",
                             "message": "pty 0x80: rows and cols must be 1 to 1000"}))
    assert read_frame(conn) == (fr.STDIN, 1, b"\x03")
    conn.sendall(control(1, {"type": "exit", "status": 130, "signal": "SIGINT", "duration_ms": 1,
                             "stdout_bytes": 19, "stderr_bytes": 0, "drained": True}))
    assert read_json(conn) == (2, {"type": "run", "argv": ["sleep", "9"]})
    conn.sendall(control(2, {"type": "started", "command": 2, "pid": 11}))
    assert read_json(conn) == (0, {"type": "resize", "target": 2, "rows": 24, "cols": 80})
    conn.sendall(control(0, RESIZE_UNKNOWN))
    conn.sendall(control(2, {"type": "exit", "status": 0, "code": 0, "duration_ms": 1,
                             "stdout_bytes": 0, "stderr_bytes": 0, "drained": True}))
    try:
        read_frame(conn)
    except EOFError:
        pass


def test_a_terminal_types_resizes_and_has_one_stream(peer: Any) -> None:
    p = peer(_pty_script)
    with Client.connect(p.path, timeout=10) as c:
        sh = c.spawn(["sh"], pty=(24, 80))
        assert sh.terminal == (24, 80)
        sh.write(b"stty size\r")
        assert next(iter(sh)) == ("stdout", b"stty size\r\n24 80\r\n")
        assert sh.resize(40, 120) == warden_client.TerminalSize(40, 120) == sh.terminal
        with pytest.raises(WardenError) as caught:
            sh.resize(0, 80)
        assert caught.value.code == "bad_request" and not caught.value.fatal
        assert sh.terminal == (40, 120), "a refused size is not taken"
        with pytest.raises(TypeError):
            sh.resize(1.5, 80)  # type: ignore[arg-type]
        sh.write(b"\x03")
        r = sh.wait()
        assert (r.status, r.signal) == (130, "SIGINT")
        assert sh.resize(10, 10) is None, "an ended command is not resized"
        plain = c.spawn(["sleep", "9"])
        assert plain.terminal is None
        with pytest.raises(ValueError, match="pty="):
            plain.write(b"x")
        with pytest.raises(WardenError) as caught:
            plain.resize(24, 80)
        assert caught.value.code == "unknown_id" and "terminal" in caught.value.message
        assert plain.wait().status == 0


def test_async_a_terminal_types_resizes_and_has_one_stream(peer: Any) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(p.path, timeout=10) as c:
            sh = await c.spawn(["sh"], pty=warden_client.TerminalSize(24, 80))
            assert sh.terminal == (24, 80)
            await sh.write(b"stty size\r")
            assert await sh.output().__anext__() == ("stdout", b"stty size\r\n24 80\r\n")
            assert await sh.resize(40, 120) == (40, 120) == sh.terminal
            with pytest.raises(WardenError) as caught:
                await sh.resize(0, 80)
            assert caught.value.code == "bad_request"
            await sh.write(b"\x03")
            assert (await sh.wait()).status == 130
            assert await sh.resize(10, 10) is None
            plain = await c.spawn(["sleep", "9"])
            with pytest.raises(WardenError) as caught:
                await plain.resize(24, 80)
            assert caught.value.code == "unknown_id"
            assert (await plain.wait()).status == 0

    p = peer(_pty_script)
    asyncio.run(main())


LISTED = {
    "command": 7, "tag": "t", "argv": ["/bin/sh", "-c", "exit 5"], "folder": "p", "pid": 70,
    "started_ms": 1796112000000, "state": "exited",
    "exit": {"status": 5, "code": 5, "duration_ms": 2.5, "stdout_bytes": 3, "stderr_bytes": 0,
             "drained": True},
    "attached": 0, "dropped_bytes": 12,
}
ENDED = {"type": "exit", "status": 143, "signal": "SIGTERM", "duration_ms": 1, "stdout_bytes": 11,
         "stderr_bytes": 4, "drained": True}
NO_SUCH = {"type": "error", "code": "unknown_id", "message": "no detached command 99"}


def _detached_script(conn: socket.socket) -> None:
    """Detached commands as warden answers them: a detached run, one that
    cannot start, list, an attachment (its backlog, stdin through it, an
    unknown_id about stdin that does not end it, resize, signal_command),
    a wait, and unknown commands."""
    read_json(conn)
    conn.sendall(HELLO_4)
    assert read_json(conn) == (1, {"type": "run", "argv": ["cat"], "stdin": "pipe", "detach": True,
                                   "tag": "t"})
    conn.sendall(control(1, {"type": "detached", "command": 7, "pid": 70, "tag": "t"}))
    assert read_json(conn) == (2, {"type": "run", "argv": ["nope"], "detach": True})
    conn.sendall(control(2, {"type": "exit", "status": 127, "code": 127, "duration_ms": 0.5,
                             "error": "cannot execute nope: No such file or directory",
                             "stdout_bytes": 0, "stderr_bytes": 0, "drained": True}))
    assert read_json(conn) == (0, {"type": "list"})
    conn.sendall(control(0, {"type": "commands", "commands": [LISTED]}))
    assert read_json(conn) == (3, {"type": "attach", "command": 7})
    conn.sendall(control(3, {"type": "attached", "command": 7, "dropped_bytes": 12}))
    conn.sendall(fr.encode(fr.STDOUT, 3, b"backlog\n"))
    conn.sendall(fr.encode(fr.STDERR, 3, b"err\n"))
    assert read_frame(conn) == (fr.STDIN, 3, b"in\n")
    conn.sendall(fr.encode(fr.STDOUT, 3, b"in\n"))
    assert read_frame(conn) == (fr.STDIN, 3, b"")
    conn.sendall(control(3, {"type": "error", "code": "unknown_id", "message": "id 3 has no open stdin"}))
    assert read_json(conn) == (0, {"type": "resize", "target": 3, "rows": 40, "cols": 120})
    conn.sendall(control(0, {"type": "resized", "target": 3, "rows": 40, "cols": 120}))
    assert read_json(conn) == (0, {"type": "signal_command", "command": 7, "signal": "TERM"})
    conn.sendall(control(0, {"type": "command_signalled", "command": 7, "signal": "SIGTERM"}))
    conn.sendall(control(3, ENDED))
    assert read_json(conn) == (4, {"type": "wait", "command": 7})
    conn.sendall(control(4, ENDED))
    assert read_json(conn) == (5, {"type": "attach", "command": 99})
    conn.sendall(control(5, NO_SUCH))
    assert read_json(conn) == (6, {"type": "wait", "command": 99})
    conn.sendall(control(6, NO_SUCH))
    assert read_json(conn) == (0, {"type": "signal_command", "command": 7, "signal": "KILL"})
    conn.sendall(control(0, {"type": "error", "code": "unknown_id",
                             "message": "no running detached command 7"}))
    try:
        read_frame(conn)
    except EOFError:
        pass


def _check_listed(listed: list[warden_client.DetachedCommand]) -> None:
    assert len(listed) == 1
    one = listed[0]
    assert (one.command, one.tag, one.folder, one.pid, one.state, one.running) == (7, "t", "p", 70, "exited", False)
    assert (one.started_ms, one.attached, one.dropped_bytes) == (1796112000000, 0, 12)
    assert one.exit is not None and (one.exit.status, one.exit.command, one.exit.stdout) == (5, 7, b"")


def test_detached_commands_frames_and_answers(peer: Any) -> None:
    p = peer(_detached_script)
    with Client.connect(p.path, timeout=10) as c:
        assert c.detach(["cat"], stdin=True, tag="t") == warden_client.Detached(7, 70, "t")
        missing = c.detach(["nope"])
        assert (missing.command, missing.pid, missing.tag) == (None, None, None)
        assert missing.exit is not None and missing.exit.status == 127 and "nope" in (missing.exit.error or "")
        _check_listed(c.list_commands())
        with pytest.raises(TypeError):
            c.attach("7")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            c.detach(["x"], tag=5)  # type: ignore[arg-type]
        with c.attach(7) as a:
            assert isinstance(a, warden_client.Attachment) and isinstance(a, warden_client.Process)
            assert (a.command, a.pid, a.dropped_bytes) == (7, None, 12)
            assert next(a.stdout) == b"backlog\n"
            a.write(b"in\n")
            assert next(a.stdout) == b"in\n"
            a.close_stdin()
            assert a.resize(40, 120) == (40, 120) == a.terminal
            assert a.kill() == "SIGTERM"
            assert list(a.stderr) == [b"err\n"]
            r = a.wait()
            assert (r.status, r.signal, r.command, r.pid) == (143, "SIGTERM", 7, None)
            assert [e.code for e in a._route.late_errors] == ["unknown_id"]
            assert a.kill() is None and a.resize(1, 1) is None, "ended: nothing is sent"
        waited = c.wait_command(7)
        assert (waited.status, waited.signal, waited.command, waited.stdout) == (143, "SIGTERM", 7, b"")
        for call in (lambda: c.attach(99), lambda: c.wait_command(99)):
            with pytest.raises(WardenError) as caught:
                call()
            assert caught.value.code == "unknown_id" and not caught.value.fatal
        assert c.signal_command(7, "KILL") is None


def test_async_detached_commands_frames_and_answers(peer: Any) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(p.path, timeout=10) as c:
            assert await c.detach(["cat"], stdin=True, tag="t") == warden_client.Detached(7, 70, "t")
            missing = await c.detach(["nope"])
            assert missing.command is None and missing.exit is not None and missing.exit.status == 127
            _check_listed(await c.list_commands())
            async with await c.attach(7) as a:
                assert isinstance(a, warden_client.AsyncAttachment)
                assert (a.command, a.dropped_bytes) == (7, 12)
                assert await a.stdout.__anext__() == b"backlog\n"
                await a.write(b"in\n")
                assert await a.stdout.__anext__() == b"in\n"
                await a.close_stdin()
                assert await a.resize(40, 120) == (40, 120)
                assert await a.kill() == "SIGTERM"
                r = await a.wait(collect=True)
                assert (r.status, r.stderr, r.pid) == (143, b"err\n", None)
            assert (await c.wait_command(7)).status == 143
            for call in (c.attach(99), c.wait_command(99)):
                with pytest.raises(WardenError) as caught:
                    await call
                assert caught.value.code == "unknown_id"
            assert await c.signal_command(7, "KILL") is None

    p = peer(_detached_script)
    asyncio.run(main())


HELLO_8 = control(0, {"type": "hello", "version": 8, "server": "warden test"})
CARD = {"run": "job-41", "began": "2026-12-04T10:00:00.000000Z", "ended": None, "how": "open",
        "budget_micro_usd": 500000, "spent_micro_usd": 0, "models": [], "requests": [],
        "commands": [], "hosts": {"reached": [], "refused": []}}


def _version_8_script(conn: socket.socket) -> None:
    """begin_run, card and end_run as warden answers them, and a card of a
    run warden does not know (a bad_request that is not fatal)."""
    read_json(conn)
    conn.sendall(HELLO_8)
    assert read_json(conn) == (0, {"type": "begin_run", "run": "job-41", "budget_usd": 0.5})
    conn.sendall(control(0, {"type": "run_begun", "run": "job-41", "budget_micro_usd": 500000}))
    assert read_json(conn) == (0, {"type": "begin_run", "run": "job-42"})
    conn.sendall(control(0, {"type": "run_begun", "run": "job-42", "budget_micro_usd": 1000000}))
    assert read_json(conn) == (0, {"type": "card", "run": "job-41"})
    conn.sendall(control(0, {"type": "card", "card": CARD}))
    assert read_json(conn) == (0, {"type": "end_run", "run": "job-41"})
    conn.sendall(control(0, {"type": "run_ended", "run": "job-41", "spent_micro_usd": 123456,
                             "how": "budget"}))
    assert read_json(conn) == (0, {"type": "card", "run": "nope"})
    conn.sendall(control(0, {"type": "error", "code": "bad_request",
                             "message": 'card: no run "nope" in the audit log'}))
    try:
        read_frame(conn)
    except EOFError:
        pass


def test_runs_and_their_card_frames_and_answers(peer: Any) -> None:
    p = peer(_version_8_script)
    with Client.connect(p.path, timeout=10) as c:
        assert c.version == 8
        assert c.begin_run("job-41", 0.5) == 500000
        assert c.begin_run("job-42") == 1000000
        assert c.card("job-41") == CARD
        ended = c.end_run("job-41")
        assert (ended.run, ended.spent_micro_usd, ended.how) == ("job-41", 123456, "budget")
        assert ended.spent_usd == 0.123456
        with pytest.raises(WardenError) as caught:
            c.card("nope")
        assert caught.value.code == "bad_request" and not caught.value.fatal
        for bad_name in ["", "x" * 129, "a\nb", "é" * 65]:
            with pytest.raises(ValueError):
                c.end_run(bad_name)
        with pytest.raises(TypeError):
            c.card(7)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            c.begin_run("x", float("nan"))
        with pytest.raises(TypeError):
            c.begin_run("x", True)
        assert c._link.failure is None


def test_async_runs_and_their_card_frames_and_answers(peer: Any) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(p.path, timeout=10) as c:
            assert c.version == 8
            assert await c.begin_run("job-41", 0.5) == 500000
            assert await c.begin_run("job-42") == 1000000
            assert await c.card("job-41") == CARD
            ended = await c.end_run("job-41")
            assert (ended.spent_micro_usd, ended.how) == (123456, "budget")
            with pytest.raises(WardenError) as caught:
                await c.card("nope")
            assert caught.value.code == "bad_request"
            with pytest.raises(ValueError):
                await c.begin_run("", 1.0)

    p = peer(_version_8_script)
    asyncio.run(main())
