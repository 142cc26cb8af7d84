"""Against a real warden, booted as PID 1 of fresh namespaces (see
wardenbox.py): output, exit codes, signals, stdin, binary data, a large
stream in bounded memory, errors, status, audit, stop_shell, reload, the
gate, hold, the asyncio client, and the host socket with a right and a
wrong key, and hand_keys through it; commands on a terminal (pty): their
size, resize, typed input and Ctrl-C; detached commands: listed, attached
and waited for from another connection, fed stdin through an attachment,
resized, signalled."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
import tracemalloc
from typing import Any

import pytest
from conftest import HOST_KEY
from wardenbox import SHELL_UID, Warden

from warden_client import (
    SUPPORTED_VERSIONS,
    AsyncClient,
    Attachment,
    Client,
    ConnectionError,
    Process,
    TerminalSize,
    WardenError,
)

#: Every wait for warden in these tests is bounded by this.
PATIENCE = 30.0


@pytest.fixture
def client(warden: Warden) -> Any:
    with Client.connect(warden.socket, timeout=PATIENCE) as c:
        yield c


def test_hello_agrees_on_the_newest_version(client: Client, warden: Warden) -> None:
    assert client.version == max(SUPPORTED_VERSIONS)
    assert client.server.startswith("warden ")
    with Client.connect(warden.socket, versions=[1], timeout=PATIENCE) as old:
        assert old.version == 1
        with pytest.raises(WardenError) as caught:
            old.stop_shell()
        assert caught.value.code == "bad_request" and "version 3" in caught.value.message
        assert old.run(["true"]).ok, "a refused request is not fatal"


def test_an_unknown_version_is_refused(warden: Warden) -> None:
    with pytest.raises(WardenError) as caught:
        Client.connect(warden.socket, versions=[99], timeout=PATIENCE)
    assert caught.value.code == "unsupported_version"
    assert "no common version" in caught.value.message


def test_output_identity_and_environment(client: Client) -> None:
    r = client.run(["id", "-un"])
    assert (r.status, r.code, r.signal, r.stdout, r.stderr) == (0, 0, None, b"shell\n", b"")
    assert r.command is not None and r.pid is not None and r.drained
    r = client.run(shell='echo "$GREETING"; pwd; echo oops >&2', folder="py/sub",
                   env={"GREETING": "hello"})
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "hello" and lines[1].endswith("/workspace/py/sub"), r
    assert r.stderr == b"oops\n" and r.stdout_bytes == len(r.stdout)
    env = dict(
        line.split("=", 1) for line in client.run(["env"]).stdout.decode().splitlines() if "=" in line
    )
    assert env["USER"] == "shell" and "GREETING" not in env


def test_exit_codes_signals_and_spawn_failures(client: Client) -> None:
    cases: list[tuple[dict[str, Any], int, int | None, str | None]] = [
        ({"shell": "exit 3"}, 3, 3, None),
        ({"shell": "kill -9 $$"}, 137, None, "SIGKILL"),
        ({"shell": "kill -TERM $$"}, 143, None, "SIGTERM"),
        ({"argv": ["no-such-program"]}, 127, 127, None),
        ({"argv": ["/etc/passwd"]}, 126, 126, None),
    ]
    for request, status, code, signal in cases:
        argv = request.pop("argv", None)
        r = client.run(argv, **request)
        assert (r.status, r.code, r.signal) == (status, code, signal), r
    missing = client.run(["no-such-program"])
    assert missing.error and "No such file" in missing.error and missing.command is None
    assert not missing.ok
    with pytest.raises(WardenError, match="status 127"):
        missing.check()


def test_a_timeout_kills_the_group_and_says_so(client: Client) -> None:
    t0 = time.monotonic()
    r = client.run(shell="sleep 60 & sleep 60", timeout=0.3)
    assert time.monotonic() - t0 < 10
    assert (r.limit, r.signal, r.status, r.drained) == ("timeout", "SIGKILL", 137, True), r


def test_signals_reach_the_named_command(client: Client) -> None:
    with client.spawn(shell="sleep 60 & sleep 60") as first, client.spawn(["sleep", "61"]) as second:
        assert first.command != second.command
        assert first.kill("TERM") == "SIGTERM"
        r = first.wait()
        assert (r.status, r.signal, r.drained) == (143, "SIGTERM", True), r
        assert first.kill() is None, "an ended command is not signalled"
        with pytest.raises(WardenError) as caught:
            second.kill("BOGUS")
        assert caught.value.code == "bad_request"
        assert not second.ended
        assert second.kill(9) == "SIGKILL"
        assert second.wait().signal == "SIGKILL"


def test_stdin_and_binary_data_both_ways(client: Client) -> None:
    payload = bytes(range(256)) * (12 * 1024) + b"tail\x00\xff"  # 3 MiB + 6
    r = client.run(shell="cat; echo done >&2", stdin=payload)
    assert r.status == 0
    assert len(r.stdout) == len(payload) and r.stdout == payload
    assert r.stderr == b"done\n"
    assert (r.stdout_bytes, r.stderr_bytes) == (len(payload), 5)
    assert client.run(["cat"], stdin=b"").stdout == b""


def test_a_large_write_with_nobody_reading_does_not_deadlock(client: Client) -> None:
    """One thread writes 8 MiB to cat and reads only afterwards: the
    client reads cat's output while it waits for room to write."""
    data = os.urandom(8 * 1024 * 1024)
    with client.spawn(["cat"], stdin=True) as cat:
        cat.write(data)
        cat.close_stdin()
        got = b"".join(cat.stdout)
        assert cat.wait().status == 0
    assert got == data


def test_interactive_stdin(client: Client) -> None:
    with client.spawn(["cat"], stdin=True) as cat:
        for word in (b"one\n", b"two\n"):
            cat.write(word)
            assert next(cat.stdout) == word
        cat.close_stdin()
        assert list(cat.stdout) == []
        assert cat.wait().status == 0
        with pytest.raises(ValueError):
            cat.write(b"late")
    with client.spawn(["true"]) as plain:
        with pytest.raises(ValueError, match="not a pipe"):
            plain.write(b"x")


def test_a_large_stream_in_bounded_memory(client: Client) -> None:
    size = 256 * 1024 * 1024
    tracemalloc.start()
    try:
        total, largest = 0, 0
        with client.spawn(shell=f"head -c {size} /dev/zero; echo end >&2") as proc:
            for stream, chunk in proc:
                if stream == "stdout":
                    total += len(chunk)
                    largest = max(largest, len(chunk))
            r = proc.wait()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == size == r.stdout_bytes and r.stderr_bytes == 4
    assert largest <= 1024 * 1024
    assert peak < 16 * 1024 * 1024, f"streaming 256 MiB held {peak} bytes at its peak"


def test_wait_drops_output_without_holding_it(client: Client) -> None:
    tracemalloc.start()
    try:
        with client.spawn(["head", "-c", str(64 * 1024 * 1024), "/dev/zero"]) as proc:
            r = proc.wait()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.stdout == b"" and r.stdout_bytes == 64 * 1024 * 1024
    assert peak < 16 * 1024 * 1024, peak


def test_many_commands_from_threads_on_one_connection(client: Client) -> None:
    results: dict[int, bytes] = {}
    errors: list[BaseException] = []

    def one(n: int) -> None:
        try:
            results[n] = client.run(shell=f"sleep 0.{n % 3}; echo {n}").stdout
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE)
    assert not errors, errors
    assert results == {n: f"{n}\n".encode() for n in range(12)}


def test_refused_requests_are_typed_errors_and_not_fatal(client: Client) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"argv": ["true"], "folder": "../x"}, "bad_request", "may not contain"),
        ({"argv": ["true"], "shell": "true"}, "bad_request", ""),
        ({"argv": ["true"], "env": {"BAD NAME": "1"}}, "bad_request", ""),
        ({"argv": ["true"], "extra": {"surprise": 1}}, "bad_request", "unknown field `surprise`"),
        ({"argv": ["true"], "limits": {"no_such_limit": 1}}, "bad_request", ""),
    ]
    for request, code, says in cases:
        argv = request.pop("argv")
        with pytest.raises(WardenError) as caught:
            client.run(argv, **request)
        assert caught.value.code == code and says in caught.value.message, caught.value
    for kind in ("Bad Kind", "", "x" * 65):
        with pytest.raises(WardenError) as caught:
            client.audit(kind, {})
        assert caught.value.code == "bad_request"
    with pytest.raises(WardenError) as caught:
        client.stop_shell("NOPE")
    assert caught.value.code == "bad_request"
    assert client.run(["echo", "still here"]).stdout == b"still here\n"


def test_status_lists_users_layers_and_running_commands(client: Client) -> None:
    with client.spawn(["sleep", "30"]) as sleeper:
        status = client.status()
        assert status["type"] == "status" and status["protocol"] == max(SUPPORTED_VERSIONS) and status["pid1"] is True
        assert isinstance(status["activity"]["idle_ms"], int)
        assert "idle_stop_s" not in status["activity"], "no idle stop in this config"
        users = {u["name"]: u for u in status["users"]}
        assert users["shell"]["uid"] == SHELL_UID
        running = [r for r in status["running"] if r["command"] == sleeper.command]
        assert running and running[0]["argv"] == ["sleep", "30"]
        assert any(p["name"] == "sleep" for p in status["shell_processes"])
        assert status["shell_process_count"] >= 1
        layers = {layer["layer"]: layer for layer in status["layers"]}
        assert layers["landlock"]["required"]
        assert all(layer["holds"] for layer in status["layers"] if layer["required"]), layers
        sleeper.kill("KILL")


def test_audit_events_land_in_the_log(client: Client, warden: Warden) -> None:
    first = client.audit("served_memory", {"file": "notes.md", "to": "agent"})
    second = client.audit("py_client_test")
    assert isinstance(first, int) and second > first
    lines = {line.get("seq"): line for line in warden.audit_lines()}
    line = lines[first]
    assert line["kind"] == "runtime", line
    assert line["event"] == "served_memory" and line["fields"] == {"file": "notes.md", "to": "agent"}
    assert line["from_uid"] == 0


def test_reload_says_what_holds(client: Client) -> None:
    state = client.reload()
    # Right after boot warden also says "default (being worked out)", which
    # docs/protocol.md does not list (it says "network.json" or "default").
    assert state["type"] == "reloaded"
    assert state["hosts_from"] == "network.json" or state["hosts_from"].startswith("default"), state
    assert isinstance(state["hosts"], list)


def test_stop_shell_ends_what_escaped(client: Client) -> None:
    # A new session and a double fork: out of the command's process group.
    # warden ends what a command leaves behind, wherever it went, unless it
    # keeps its background: this one does.
    r = client.run(shell="setsid sh -c 'sleep 301 </dev/null >/dev/null 2>&1 &'; "
                         "setsid sh -c '(sleep 302 </dev/null >/dev/null 2>&1 &) &'; echo left",
                   keep_background=True)
    assert r.stdout == b"left\n"
    deadline = time.monotonic() + 10
    while sum(p["name"] == "sleep" for p in client.status().get("shell_processes", [])) < 2:
        assert time.monotonic() < deadline, "the escapes did not start"
        time.sleep(0.05)
    stopped = client.stop_shell()
    assert stopped.signalled >= 2 and stopped.left == 0, stopped
    assert not any(p["name"] == "sleep" for p in client.status().get("shell_processes", []))
    assert client.run(["true"]).ok, "the machine carries on"


def test_kept_background_output_is_cut_after_the_drain(client: Client) -> None:
    r = client.run(shell="sleep 31 & echo started", keep_background=True)
    assert (r.status, r.drained, r.stdout) == (0, False, b"started\n"), r
    client.stop_shell()


def test_closing_the_connection_kills_its_commands(warden: Warden, client: Client) -> None:
    other = Client.connect(warden.socket, timeout=PATIENCE)
    proc = other.spawn(["sleep", "62"])
    assert any(r["command"] == proc.command for r in client.status()["running"])
    other.close()
    deadline = time.monotonic() + 10
    while any(r["command"] == proc.command for r in client.status()["running"]):
        assert time.monotonic() < deadline, "the command outlived its connection"
        time.sleep(0.05)
    with pytest.raises(ConnectionError):
        other.status()


def test_asyncio_client(warden: Warden) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(warden.socket, timeout=PATIENCE) as c:
            assert c.version == max(SUPPORTED_VERSIONS)
            r = await c.run(["id", "-un"])
            assert r.stdout == b"shell\n"
            echoed = await c.run(["cat"], stdin=os.urandom(2 * 1024 * 1024 + 1))
            assert echoed.stdout_bytes == 2 * 1024 * 1024 + 1
            runs = await asyncio.gather(*(c.run(shell=f"echo {n}") for n in range(8)))
            assert [x.stdout for x in runs] == [f"{n}\n".encode() for n in range(8)]
            async with await c.spawn(shell="head -c 50000000 /dev/zero") as proc:
                total = 0
                async for stream, chunk in proc:
                    total += len(chunk)
                assert total == 50_000_000
            sleeper = await c.spawn(["sleep", "30"])
            assert await sleeper.kill("TERM") == "SIGTERM"
            assert (await sleeper.wait()).status == 143
            status = await c.status()
            assert status["protocol"] == max(SUPPORTED_VERSIONS) and "activity" in status
            until = int(time.time() * 1000) + 600_000
            assert await c.hold(until) == until
            assert (await c.status())["activity"]["held_until_ms"] == until
            assert await c.hold(0) == 0
            assert "held_until_ms" not in (await c.status())["activity"]
            assert isinstance(await c.audit("py_async_test", {"n": 1}), int)
            with pytest.raises(WardenError) as caught:
                await c.run(["true"], folder="/abs")
            assert caught.value.code == "bad_request"

    asyncio.run(main())


def test_the_host_socket_lets_in_only_the_key(keyed_warden: Warden) -> None:
    host = keyed_warden.host_socket
    mode = stat.S_IMODE(os.stat(host).st_mode)
    assert mode == 0o600, oct(mode)
    with Client.connect(host, HOST_KEY, timeout=PATIENCE) as c:
        assert c.run(["id", "-un"]).stdout == b"shell\n"
    def refusals() -> list[dict[str, Any]]:
        return [line for line in keyed_warden.audit_lines() if line.get("kind") == "connection_refused"]

    before = len(refusals())
    key_file = keyed_warden.root / "key"
    with Client.connect(host, key_file=key_file, timeout=PATIENCE) as c:
        assert c.status()["protocol"] == max(SUPPORTED_VERSIONS)
    for key, reason in ((HOST_KEY[:-1] + "X", "wrong key"), (None, "no key")):
        t0 = time.monotonic()
        with pytest.raises(WardenError) as caught:
            Client.connect(host, key, timeout=PATIENCE)
        assert caught.value.code == "refused" and reason in caught.value.message, caught.value
        assert time.monotonic() - t0 >= 0.4, "a refusal comes half a second later"
    refused = refusals()[before:]
    assert [line["door"] for line in refused] == ["host", "host"], refused
    assert all(line["via"] == "host_socket" for line in refused)
    # The machine's own socket needs no key.
    with Client.connect(keyed_warden.socket, timeout=PATIENCE) as c:
        assert c.run(["true"]).ok


def test_the_host_socket_through_asyncio(keyed_warden: Warden) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(keyed_warden.host_socket, HOST_KEY, timeout=PATIENCE) as c:
            assert (await c.run(["echo", "host"])).stdout == b"host\n"
        with pytest.raises(WardenError) as caught:
            await AsyncClient.connect(keyed_warden.host_socket, "wrong-" + HOST_KEY, timeout=PATIENCE)
        assert caught.value.code == "refused"

    asyncio.run(main())


def test_closing_wakes_a_thread_waiting_on_output(warden: Warden) -> None:
    c = Client.connect(warden.socket, timeout=PATIENCE)
    sleeper = c.spawn(["sleep", "30"])
    raised: list[BaseException] = []

    def waiter() -> None:
        try:
            sleeper.wait()
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.05)
    c.close()
    thread.join(10)
    assert not thread.is_alive(), "close() left a thread waiting"
    assert len(raised) == 1 and isinstance(raised[0], ConnectionError), raised


def test_the_gate_refuses_every_run_with_its_reason_until_opened(client: Client) -> None:
    closed = client.close_gate("a tool read a web page in this reply")
    assert closed["closed"] is True
    try:
        with pytest.raises(WardenError) as refused:
            client.run(["true"])
        assert refused.value.code == "gate_closed"
        assert "read a web page" in str(refused.value)
        assert client.status()["gate"]["closed"] is True
    finally:
        assert client.open_gate()["closed"] is False
    assert client.run(["true"]).status == 0


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_hold_is_in_force_and_in_status_until_a_time_past_lets_go(client: Client, warden: Warden) -> None:
    assert "held_until_ms" not in client.status()["activity"]
    until = _now_ms() + 3_600_000
    assert client.hold(until) == until
    try:
        assert client.status()["activity"]["held_until_ms"] == until
        with pytest.raises(WardenError) as caught:
            client.hold(_now_ms() + 8 * 24 * 3_600_000)
        assert caught.value.code == "bad_request" and "more than a week" in caught.value.message
        assert not caught.value.fatal
        assert client.status()["activity"]["held_until_ms"] == until, "a refused hold leaves the one in force"
        lines = [line for line in warden.audit_lines() if line.get("kind") == "hold"]
        assert any(line.get("until_ms") == until for line in lines), lines
    finally:
        assert client.hold(_now_ms() - 1000) == 0, "a time past lets go"
    assert "held_until_ms" not in client.status()["activity"]
    assert client.hold(_now_ms() + 60_000) > 0
    assert client.hold(0) == 0
    assert "held_until_ms" not in client.status()["activity"]


def test_ready_is_noted_once_in_status_and_the_audit_log(client: Client, warden: Warden) -> None:
    assert client.status()["ready"] == {}, "this warden waits for nothing: ready as it answers"
    since = client.ready()
    assert isinstance(since, int) and since >= 0
    assert client.ready() == since, "said again, the first time stands"
    assert client.status()["ready"] == {"after_ms": since, "by": "runtime"}
    lines = [line for line in warden.audit_lines() if line.get("kind") == "ready"]
    assert len(lines) == 1 and lines[0]["after_ms"] == since, lines
    with Client.connect(warden.socket, versions=list(range(1, 9)), timeout=PATIENCE) as old:
        with pytest.raises(WardenError) as caught:
            old.ready()
        assert caught.value.code == "bad_request" and "version 9" in caught.value.message
        assert "ready" not in old.status()


def test_next_job_is_in_status_and_the_audit_log(client: Client, warden: Warden) -> None:
    at = _now_ms() + 3_600_000
    assert client.next_job(at) == at
    assert client.status()["activity"]["next_job_at_ms"] == at
    lines = [line for line in warden.audit_lines() if line.get("kind") == "next_job"]
    assert any(line.get("at_ms") == at for line in lines), lines
    with pytest.raises(WardenError) as caught:
        client.next_job(_now_ms() + 8 * 24 * 3_600_000)
    assert caught.value.code == "bad_request" and "more than a week" in caught.value.message
    assert client.next_job(0) == 0
    assert "next_job_at_ms" not in client.status()["activity"]


def test_ready_in_asyncio(warden: Warden) -> None:
    async def main() -> int:
        async with await AsyncClient.connect(warden.socket, timeout=PATIENCE) as c:
            return await c.ready()

    assert asyncio.run(main()) >= 0


def test_version_3_sees_no_activity_and_may_not_hold(warden: Warden) -> None:
    with Client.connect(warden.socket, versions=[1, 2, 3], timeout=PATIENCE) as old:
        assert old.version == 3
        assert "activity" not in old.status()
        with pytest.raises(WardenError) as caught:
            old.hold(_now_ms() + 60_000)
        assert caught.value.code == "bad_request" and "version 4" in caught.value.message
        assert old.run(["true"]).ok


def test_hand_keys_on_the_machine_socket_is_refused_and_not_fatal(client: Client, warden: Warden) -> None:
    with pytest.raises(WardenError) as caught:
        client.hand_keys("API_TOKEN=canary-local-py\n")
    assert caught.value.code == "refused" and not caught.value.fatal
    assert "host's door only" in caught.value.message
    assert client.run(["echo", "still here"]).stdout == b"still here\n"
    env = warden.home / ".env"
    assert not env.exists() or "canary-local-py" not in env.read_text()


def test_hand_keys_through_the_host_socket(keyed_warden: Warden) -> None:
    text = "PY_TOKEN=canary-py-hand\n# a comment\n\nexport PY_OTHER=x=y\n"
    with Client.connect(keyed_warden.host_socket, HOST_KEY, timeout=PATIENCE) as c:
        assert c.version == max(SUPPORTED_VERSIONS)
        assert c.hand_keys(text) == ["PY_TOKEN", "PY_OTHER"]
        env = keyed_warden.home / ".env"
        assert env.read_text() == text
        meta = os.lstat(env)
        assert stat.S_IMODE(meta.st_mode) == 0o600 and meta.st_uid == 2000
        with pytest.raises(WardenError) as caught:
            c.hand_keys("not a key line\n")
        assert caught.value.code == "bad_request" and "line 1" in caught.value.message
        assert env.read_text() == text, "a refused text changes nothing"
        assert c.run(["true"]).ok
    lines = [line for line in keyed_warden.audit_lines() if line.get("kind") == "keys_handed"]
    assert lines and lines[-1]["names"] == ["PY_TOKEN", "PY_OTHER"], lines
    log = (keyed_warden.home / "data/audit/warden.jsonl").read_text()
    assert "canary-py-hand" not in log, "no value in the audit log"


def _screen_until(proc: Process, want: bytes, screen: bytearray) -> None:
    """Reads the terminal's output into `screen` until it shows `want`."""
    while want not in screen:
        stream, chunk = next(iter(proc))
        assert stream == "stdout", "a terminal has one stream"
        screen += chunk


def test_pty_stty_size_is_the_size_asked_for_and_the_terminal_is_all_three(client: Client) -> None:
    r = client.run(["stty", "size"], pty=(30, 100))
    assert (r.status, r.stdout, r.stderr) == (0, b"30 100\r\n", b""), r
    r = client.run(shell="test -t 0 && test -t 1 && test -t 2 && echo all three; echo err >&2",
                   pty=TerminalSize(24, 80))
    assert (r.status, r.stdout, r.stderr, r.stderr_bytes) == (0, b"all three\r\nerr\r\n", b"", 0), r
    assert client.run(shell="test -t 0 || test -t 1 || test -t 2").status == 1, "no terminal without pty"
    # run()'s stdin is typed: the terminal echoes it, the command reads it.
    r = client.run(shell='read x; echo "got $x"', stdin=b"abc\r", pty=(24, 80))
    assert r.stdout == b"abc\r\ngot abc\r\n", r


def test_pty_resize_then_stty_size_shows_the_new_size(client: Client) -> None:
    with client.spawn(shell="stty size; read line; stty size", pty=(24, 80)) as proc:
        screen = bytearray()
        _screen_until(proc, b"24 80\r\n", screen)
        assert proc.resize(40, 120) == TerminalSize(40, 120) == proc.terminal
        with pytest.raises(WardenError) as caught:
            proc.resize(1001, 80)
        assert caught.value.code == "bad_request" and "1 to 1000" in caught.value.message
        proc.write(b"\r")
        for _, chunk in proc:
            screen += chunk
        assert proc.wait().status == 0
    assert bytes(screen) == b"24 80\r\n\r\n40 120\r\n"


def test_pty_ctrl_c_is_sigint_for_the_foreground_job(client: Client) -> None:
    t0 = time.monotonic()
    with client.spawn(["sleep", "100"], pty=(24, 80)) as sleeper:
        sleeper.write(b"\x03")
        r = sleeper.wait(collect=True)
    assert (r.status, r.signal, r.stdout) == (130, "SIGINT", b"^C"), r
    # A shell that traps it: its wait ends and the trap runs (the
    # background sleep ignores SIGINT, as it does without job control).
    with client.spawn(shell='trap "echo INT; exit 9" INT; echo ready; sleep 100 & wait',
                      pty=(24, 80)) as trapped:
        screen = bytearray()
        _screen_until(trapped, b"ready\r\n", screen)
        trapped.write(b"\x03")
        for _, chunk in trapped:
            screen += chunk
        assert trapped.wait().status == 9, bytes(screen)
    assert bytes(screen) in (b"ready\r\nINT\r\n", b"ready\r\n^CINT\r\n"), bytes(screen)
    assert time.monotonic() - t0 < 20


def test_pty_refusals_resize_without_a_terminal_bad_sizes_and_version_3(
    client: Client, warden: Warden
) -> None:
    with client.spawn(["sleep", "30"]) as plain:
        with pytest.raises(WardenError) as caught:
            plain.resize(24, 80)
        assert caught.value.code == "unknown_id" and "terminal" in caught.value.message
        assert not caught.value.fatal
        plain.kill("KILL")
    for size in ((0, 80), (24, 1001)):
        with pytest.raises(WardenError) as caught:
            client.run(["true"], pty=size)
        assert caught.value.code == "bad_request" and "1 to 1000" in caught.value.message
    with Client.connect(warden.socket, versions=[1, 2, 3], timeout=PATIENCE) as old:
        with pytest.raises(WardenError) as caught:
            old.run(["true"], pty=(24, 80))
        assert caught.value.code == "bad_request" and "version 4" in caught.value.message
        with pytest.raises(WardenError) as caught:
            old.resize(1, 24, 80)
        assert caught.value.code == "bad_request" and "version 4" in caught.value.message
    assert client.run(["echo", "still here"]).stdout == b"still here\n"


def test_pty_through_asyncio(warden: Warden) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(warden.socket, timeout=PATIENCE) as c:
            assert (await c.run(["stty", "size"], pty=(12, 34))).stdout == b"12 34\r\n"
            async with await c.spawn(shell="stty size; read line; stty size", pty=(24, 80)) as proc:
                screen = bytearray()
                async for _, chunk in proc:
                    screen += chunk
                    if b"24 80\r\n" in screen:
                        break
                assert await proc.resize(50, 132) == (50, 132)
                await proc.write(b"\r")
                async for _, chunk in proc:
                    screen += chunk
                assert (await proc.wait()).status == 0
            assert bytes(screen).endswith(b"50 132\r\n"), bytes(screen)
            async with await c.spawn(["sleep", "100"], pty=(24, 80)) as sleeper:
                await sleeper.write(b"\x03")
                assert (await sleeper.wait()).status == 130
            plain = await c.spawn(["sleep", "30"])
            with pytest.raises(WardenError) as caught:
                await plain.resize(24, 80)
            assert caught.value.code == "unknown_id"
            await plain.kill("KILL")
            await plain.wait()

    asyncio.run(main())


def test_a_detached_command_outlives_its_connection_and_is_followed_by_another(warden: Warden) -> None:
    line = "echo first; echo oops >&2; sleep 1.5; echo second; exit 5"
    with Client.connect(warden.socket, timeout=PATIENCE) as first:
        started = first.detach(shell=line, tag="nightly build")
    assert started.command is not None and started.pid is not None and started.exit is None, started
    assert started.tag == "nightly build"
    with Client.connect(warden.socket, timeout=PATIENCE) as other:
        listed = {c.command: c for c in other.list_commands()}[started.command]
        assert (listed.tag, listed.state, listed.running, listed.pid) == ("nightly build", "running", True, started.pid)
        assert any("echo first" in a for a in listed.argv), listed.argv
        assert listed.attached == 0 and listed.exit is None
        assert _now_ms() - 60_000 < listed.started_ms <= _now_ms()
        time.sleep(0.3)  # it prints its first lines to nobody: they come as the backlog
        with other.attach(started.command) as attachment:
            attached_at = time.monotonic()
            assert isinstance(attachment, Attachment) and attachment.dropped_bytes == 0
            assert {c.command: c for c in other.list_commands()}[started.command].attached == 1
            chunks: list[tuple[str, bytes, float]] = []
            for stream, chunk in attachment:
                chunks.append((stream, chunk, time.monotonic()))
            r = attachment.wait()
        out = [c for c in chunks if c[0] == "stdout"]
        assert b"".join(c[1] for c in out) == b"first\nsecond\n" and out[0][1] == b"first\n", chunks
        assert out[-1][2] - attached_at > 0.5, "the second line came live, after the attachment"
        assert b"".join(c[1] for c in chunks if c[0] == "stderr") == b"oops\n"
        assert (r.status, r.code, r.command, r.pid) == (5, 5, started.command, None), r
        # Ended: wait answers at once; attach gives it all again; list says so.
        waited = other.wait_command(started.command)
        assert (waited.status, waited.command) == (5, started.command)
        with other.attach(started.command) as again:
            r = again.wait(collect=True)
        assert (r.stdout, r.stderr, r.status) == (b"first\nsecond\n", b"oops\n", 5)
        ended = {c.command: c for c in other.list_commands()}[started.command]
        assert ended.state == "exited" and not ended.running
        assert ended.exit is not None and ended.exit.status == 5
    kinds = {line.get("kind") for line in warden.audit_lines()}
    assert {"command_attached", "command_waited"} <= kinds, kinds


def test_a_detached_cat_is_fed_through_an_attachment(client: Client) -> None:
    cat = client.detach(["cat"], stdin=True, tag="cat")
    assert cat.command is not None
    with client.attach(cat.command) as attachment:
        for word in (b"typed later\n", b"and more\n"):
            attachment.write(word)
            assert next(attachment.stdout) == word
        attachment.close_stdin()
        assert list(attachment.stdout) == []
        r = attachment.wait()
    assert (r.status, r.stdout_bytes) == (0, 21), r
    # One that takes no stdin: warden says so, and it runs to its end.
    deaf = client.detach(shell="sleep 0.5")
    assert deaf.command is not None
    with client.attach(deaf.command) as follower:
        follower.write(b"nobody reads this\n")
        assert follower.wait().status == 0
        with pytest.raises((BrokenPipeError, ValueError)):
            follower.write(b"more")


def test_signal_command_then_wait_command(client: Client) -> None:
    sleeper = client.detach(["sleep", "100"])
    assert sleeper.command is not None
    assert client.signal_command(sleeper.command, "TERM") == "SIGTERM"
    r = client.wait_command(sleeper.command)
    assert (r.status, r.signal) == (143, "SIGTERM"), r
    assert client.signal_command(sleeper.command) is None, "an ended command is not signalled"
    # An attachment's kill() is signal_command.
    other = client.detach(["sleep", "100"])
    assert other.command is not None
    with client.attach(other.command) as attachment:
        assert attachment.kill("KILL") == "SIGKILL"
        assert attachment.wait().status == 137


def test_detach_refusals_unknown_commands_and_version_3(client: Client, warden: Warden) -> None:
    for call in (lambda: client.attach(999_999), lambda: client.wait_command(999_999)):
        with pytest.raises(WardenError) as caught:
            call()
        assert caught.value.code == "unknown_id" and "999999" in caught.value.message
        assert not caught.value.fatal
    assert client.signal_command(999_999) is None
    with pytest.raises(WardenError) as caught:
        client.run(["true"], extra={"tag": "lonely"})
    assert caught.value.code == "bad_request" and "tag goes with detach" in caught.value.message
    for tag in ("", "x" * 129):
        with pytest.raises(WardenError) as caught:
            client.detach(["true"], tag=tag)
        assert caught.value.code == "bad_request" and "tag" in caught.value.message
    missing = client.detach(["no-such-program"], tag="missing")
    assert (missing.command, missing.pid, missing.tag) == (None, None, "missing")
    assert missing.exit is not None and missing.exit.status == 127 and missing.exit.error
    with Client.connect(warden.socket, versions=[1, 2, 3], timeout=PATIENCE) as old:
        for request in (lambda: old.detach(["true"]), old.list_commands, lambda: old.attach(1)):
            with pytest.raises(WardenError) as caught:
                request()
            assert caught.value.code == "bad_request" and "version 4" in caught.value.message
    assert client.run(["echo", "still here"]).stdout == b"still here\n"


def test_detached_through_asyncio(warden: Warden) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(warden.socket, timeout=PATIENCE) as c:
            sh = await c.detach(shell="stty size; read line; stty size", pty=(24, 80), tag="tty")
            assert sh.command is not None and sh.tag == "tty"
            async with await c.attach(sh.command) as attachment:
                screen = bytearray()
                async for _, chunk in attachment:
                    screen += chunk
                    if b"24 80\r\n" in screen:
                        break
                assert await attachment.resize(40, 120) == (40, 120) == attachment.terminal
                await attachment.write(b"\r")
                async for _, chunk in attachment:
                    screen += chunk
                assert (await attachment.wait()).status == 0
            assert bytes(screen) == b"24 80\r\n\r\n40 120\r\n", bytes(screen)
            cat = await c.detach(["cat"], stdin=True)
            assert cat.command is not None
            async with await c.attach(cat.command) as fed:
                await fed.write(b"async\n")
                await fed.close_stdin()
                r = await fed.wait(collect=True)
            assert (r.stdout, r.status) == (b"async\n", 0)
            sleeper = await c.detach(["sleep", "100"])
            assert sleeper.command is not None
            assert await c.signal_command(sleeper.command, "TERM") == "SIGTERM"
            assert (await c.wait_command(sleeper.command)).status == 143
            listed = {d.command: d for d in await c.list_commands()}
            assert listed[sleeper.command].state == "exited" and listed[sh.command].tag == "tty"
            with pytest.raises(WardenError) as caught:
                await c.attach(999_999)
            assert caught.value.code == "unknown_id"

    asyncio.run(main())


def test_a_run_s_card_lists_its_commands_at_zero_spend(client: Client, warden: Warden) -> None:
    """begin_run, end_run and card (version 8) with no provider traffic:
    the card still holds the commands the run ran, and how each ended."""
    assert client.begin_run("py-run", 0.25) == 250_000
    with pytest.raises(WardenError) as caught:
        client.begin_run("py-run")
    assert caught.value.code == "bad_request" and not caught.value.fatal
    assert client.card("py-run")["how"] == "open"
    assert client.run(["sh", "-c", "exit 3"]).status == 3
    assert client.run(["sleep", "30"], timeout=0.3).limit == "timeout"
    ended = client.end_run("py-run")
    assert (ended.run, ended.spent_micro_usd, ended.how) == ("py-run", 0, "ended")
    card = client.card("py-run")
    assert (card["run"], card["how"], card["spent_micro_usd"], card["budget_micro_usd"]) == (
        "py-run", "ended", 0, 250_000)
    assert isinstance(card["began"], str) and isinstance(card["ended"], str)
    assert card["models"] == [] and card["requests"] == []
    commands = card["commands"]
    assert [c["argv"] for c in commands] == [["sh", "-c", "exit 3"], ["sleep", "30"]], commands
    assert (commands[0]["exit"], commands[0]["limit"]) == (3, None)
    assert commands[1]["limit"] == "timeout" and commands[1]["duration_ms"] >= 300
    begun = [line for line in warden.audit_lines() if line.get("kind") == "run_begin"]
    assert begun[-1]["run"] == "py-run" and begun[-1]["budget_micro_usd"] == 250_000
    with pytest.raises(WardenError) as caught:
        client.card("never-begun")
    assert caught.value.code == "bad_request"


def test_async_begin_run_end_run_and_card(warden: Warden) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(warden.socket, timeout=PATIENCE) as c:
            assert await c.begin_run("py-async-run") > 0
            assert (await c.run(["true"])).status == 0
            assert (await c.end_run("py-async-run")).how == "ended"
            card = await c.card("py-async-run")
            assert [cmd["argv"] for cmd in card["commands"]] == [["true"]]
            assert card["commands"][0]["exit"] == 0

    asyncio.run(main())
