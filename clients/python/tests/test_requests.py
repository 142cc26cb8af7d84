"""Requests of protocol versions 4 to 8 against a scripted peer, both
clients: hold and hand_keys, a terminal, detached commands, runs and
their card."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

import warden_client
from warden_client import (
    AsyncClient,
    Client,
    WardenError,
)
from warden_client import frames as fr

from scriptedpeer import control, read_frame, read_json, until_closed


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
    until_closed(conn)


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
    until_closed(conn)


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
    until_closed(conn)


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
    until_closed(conn)


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
