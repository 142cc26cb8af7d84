"""Replays every shared protocol fixture (clients/fixtures/*.json) against
both clients, with a fake warden on a unix socket: each client frame
must equal the recorded one (JSON as values; the hello's "client" field,
and "key" unless the fixture has one, ignored), each warden frame is
written as recorded, and the client's outcome must be the recorded
result or error."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from warden_client import AsyncClient, Client, DetachedCommand, Result, WardenError
from warden_client import frames as fr

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FILES = sorted(FIXTURES.glob("*.json"))
KINDS = {"control": fr.CONTROL, "stdout": fr.STDOUT, "stderr": fr.STDERR, "stdin": fr.STDIN}
#: The fake warden's patience for each client frame.
PATIENCE = 10.0


def _load(path: Path) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads(path.read_text())
    return fixture


def _payload(frame: dict[str, Any]) -> bytes:
    if "json" in frame:
        return json.dumps(frame["json"], separators=(",", ":")).encode()
    return base64.b64decode(frame.get("base64", ""))


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def _read_frame(conn: socket.socket) -> tuple[int, int, bytes]:
    kind, id, size = fr.HEADER.unpack(_recv_exact(conn, fr.HEADER_LEN))
    return kind, id, _recv_exact(conn, size)


def _same_client_frame(want: dict[str, Any], kind: int, id: int, body: bytes) -> str | None:
    """None when the frame is the recorded one, else what differs."""
    if KINDS[want["kind"]] != kind or want["id"] != id:
        return f"expected a {want['kind']} frame on id {want['id']}, got kind {kind} on id {id}: {body[:200]!r}"
    if "json" in want:
        try:
            got = json.loads(body)
        except ValueError:
            return f"expected JSON {want['json']}, got {body[:200]!r}"
        expected = dict(want["json"])
        if isinstance(got, dict) and got.get("type") == "hello" and expected.get("type") == "hello":
            got = dict(got)
            got.pop("client", None)
            expected.pop("client", None)
            if "key" not in expected:
                got.pop("key", None)
            # A newer client offers the recorded versions and newer ones (a
            # warden that answers the recorded one speaks it).
            offered, recorded = got.get("versions"), expected.get("versions")
            if isinstance(offered, list) and isinstance(recorded, list) and offered[: len(recorded)] == recorded:
                got["versions"] = recorded
        if got != expected:
            return f"expected {expected}, got {got}"
        return None
    expected_bytes = base64.b64decode(want.get("base64", ""))
    if body != expected_bytes:
        return f"expected bytes {expected_bytes[:64]!r}... ({len(expected_bytes)}), got {body[:64]!r}... ({len(body)})"
    return None


class FakeWarden:
    """Plays the warden side of a fixture on a unix socket, in a thread."""

    def __init__(self, fixture: dict[str, Any], path: str, pieces: bool = False) -> None:
        self.fixture = fixture
        #: Write warden's frames in small pieces, with pauses (partial reads).
        self.pieces = pieces
        self.problems: list[str] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.listener.settimeout(PATIENCE)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError as e:
            self.problems.append(f"no client connected: {e}")
            return
        with conn:
            conn.settimeout(PATIENCE)
            frames = self.fixture["frames"]
            for n, want in enumerate(frames):
                if want["from"] == "warden":
                    body = _payload(want)
                    data = fr.HEADER.pack(KINDS[want["kind"]], want["id"], len(body)) + body
                    try:
                        if self.pieces:
                            for at in range(0, len(data), 7):
                                conn.sendall(data[at : at + 7])
                                time.sleep(0.001)
                        else:
                            conn.sendall(data)
                    except OSError as e:
                        self.problems.append(f"frame {n}: cannot write: {e}")
                        return
                    continue
                try:
                    kind, id, body = _read_frame(conn)
                except (OSError, EOFError) as e:
                    self.problems.append(f"frame {n}: expected from the client {want}, got none: {e}")
                    return
                differs = _same_client_frame(want, kind, id, body)
                if differs:
                    self.problems.append(f"frame {n}: {differs}")
                    return
            last = frames[-1] if frames else None
            fatal = (
                last is not None
                and last["from"] == "warden"
                and last.get("json", {}).get("type") == "error"
                and last["id"] == 0
                and last["json"].get("code") in {"refused", "hello_required", "unsupported_version",
                                                  "bad_frame", "frame_too_large"}
            )
            if fatal:
                return  # warden closes after a fatal error
            # The script is over: anything more from the client is a frame
            # the fixture does not have.
            try:
                extra = _read_frame(conn)
                self.problems.append(f"an extra frame from the client: {extra[:2]} {extra[2][:200]!r}")
            except (OSError, EOFError):
                pass

    def finish(self) -> list[str]:
        self.thread.join(PATIENCE * 2)
        if self.thread.is_alive():
            self.problems.append("the fake warden did not finish")
        self.listener.close()
        return self.problems


def _run_args(args: dict[str, Any], stdin_b64: str | None) -> tuple[list[str] | None, dict[str, Any]]:
    """A fixture's protocol fields as the Python client takes them."""
    args = dict(args)
    argv = args.pop("argv", None)
    kwargs: dict[str, Any] = {}
    for name in ("shell", "folder", "env", "limits", "keep_background"):
        if name in args:
            kwargs[name] = args.pop(name)
    if "timeout_ms" in args:
        kwargs["timeout"] = args.pop("timeout_ms") / 1000
    if args.pop("stdin", "null") == "pipe":
        kwargs["stdin"] = base64.b64decode(stdin_b64 or "")
    if args:
        kwargs["extra"] = args
    return argv, kwargs


def _exit_event(result: Result) -> dict[str, Any]:
    """A Result as warden's exit event says it (no output)."""
    event: dict[str, Any] = {"type": "exit", "status": result.status}
    for name in ("code", "signal", "limit", "error"):
        value = getattr(result, name)
        if value is not None:
            event[name] = value
    event.update(
        duration_ms=result.duration_ms,
        stdout_bytes=result.stdout_bytes,
        stderr_bytes=result.stderr_bytes,
        drained=result.drained,
    )
    return event


def _exit_dict(result: Result) -> dict[str, Any]:
    """A Result as the fixture records it: the exit event and the output."""
    event = _exit_event(result)
    event.update(
        stdout_base64=base64.b64encode(result.stdout).decode(),
        stderr_base64=base64.b64encode(result.stderr).decode(),
    )
    return event


def _commands_dict(listed: list[DetachedCommand]) -> dict[str, Any]:
    """list_commands() as warden's commands event says it."""
    commands = []
    for c in listed:
        entry: dict[str, Any] = {"command": c.command}
        if c.tag is not None:
            entry["tag"] = c.tag
        entry["argv"] = c.argv
        if c.folder is not None:
            entry["folder"] = c.folder
        entry.update(pid=c.pid, started_ms=c.started_ms, state=c.state)
        if c.exit is not None:
            exit = _exit_event(c.exit)
            del exit["type"]
            entry["exit"] = exit
        entry.update(attached=c.attached, dropped_bytes=c.dropped_bytes)
        commands.append(entry)
    return {"type": "commands", "commands": commands}


def _hello_key(fixture: dict[str, Any]) -> str | None:
    for frame in fixture["frames"]:
        if frame["from"] == "client" and frame.get("json", {}).get("type") == "hello":
            key = frame["json"].get("key")
            return None if key is None else str(key)
    return None


def _outcome_sync(fixture: dict[str, Any], path: str) -> Any:
    call = fixture["call"]
    method, args = call["method"], call.get("args", {})
    with Client.connect(path, key=_hello_key(fixture), timeout=PATIENCE, connect_timeout=PATIENCE) as c:
        if method == "hello_only":
            return {"type": "hello", "version": c.version, "server": c.server}
        if method == "run":
            argv, kwargs = _run_args(args, call.get("stdin_base64"))
            return _exit_dict(c.run(argv, **kwargs))
        if method == "signal_after_start":
            argv, kwargs = _run_args(args["run"], call.get("stdin_base64"))
            process = c.spawn(argv, **kwargs)
            name = process.kill(args.get("signal", "TERM"))
            outcome: dict[str, Any] = {}
            if name is not None:
                outcome["signalled"] = {"type": "signalled", "target": process.id, "signal": name}
            outcome["exit"] = _exit_dict(process.wait(collect=True))
            return outcome
        if method == "status":
            return c.status()
        if method == "reload":
            return c.reload()
        if method == "audit":
            return {"type": "recorded", "seq": c.audit(args["kind"], args.get("fields"))}
        if method == "stop_shell":
            stopped = c.stop_shell(args.get("signal", "KILL"))
            return {"type": "shell_stopped", "signalled": stopped.signalled, "left": stopped.left}
        if method == "hold":
            return {"type": "held", "until_ms": c.hold(args["until_ms"])}
        if method == "list":
            return _commands_dict(c.list_commands())
        if method == "wait":
            return _exit_event(c.wait_command(args["command"]))
    raise AssertionError(f"unknown method {method!r}: the replayer needs teaching")


async def _outcome_async(fixture: dict[str, Any], path: str) -> Any:
    call = fixture["call"]
    method, args = call["method"], call.get("args", {})
    c = await AsyncClient.connect(
        path, key=_hello_key(fixture), timeout=PATIENCE, connect_timeout=PATIENCE
    )
    try:
        if method == "hello_only":
            return {"type": "hello", "version": c.version, "server": c.server}
        if method == "run":
            argv, kwargs = _run_args(args, call.get("stdin_base64"))
            return _exit_dict(await c.run(argv, **kwargs))
        if method == "signal_after_start":
            argv, kwargs = _run_args(args["run"], call.get("stdin_base64"))
            process = await c.spawn(argv, **kwargs)
            name = await process.kill(args.get("signal", "TERM"))
            outcome: dict[str, Any] = {}
            if name is not None:
                outcome["signalled"] = {"type": "signalled", "target": process.id, "signal": name}
            outcome["exit"] = _exit_dict(await process.wait(collect=True))
            return outcome
        if method == "status":
            return await c.status()
        if method == "reload":
            return await c.reload()
        if method == "audit":
            return {"type": "recorded", "seq": await c.audit(args["kind"], args.get("fields"))}
        if method == "stop_shell":
            stopped = await c.stop_shell(args.get("signal", "KILL"))
            return {"type": "shell_stopped", "signalled": stopped.signalled, "left": stopped.left}
        if method == "hold":
            return {"type": "held", "until_ms": await c.hold(args["until_ms"])}
        if method == "list":
            return _commands_dict(await c.list_commands())
        if method == "wait":
            return _exit_event(await c.wait_command(args["command"]))
    finally:
        await c.close()
    raise AssertionError(f"unknown method {method!r}: the replayer needs teaching")


if FILES:
    PARAMS = [pytest.param(p, id=p.stem) for p in FILES]
else:
    PARAMS = [pytest.param(None, id="none", marks=pytest.mark.skip(
        reason=f"{FIXTURES} holds no fixture yet (the Node helper writes them)"))]


@pytest.mark.parametrize("writes", ["whole", "pieces"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("path", PARAMS)
def test_fixture_replays(path: Path, flavour: str, writes: str) -> None:
    fixture = _load(path)
    with tempfile.TemporaryDirectory(prefix="warden-fixture-") as folder:
        socket_path = f"{folder}/api.sock"
        fake = FakeWarden(fixture, socket_path, pieces=writes == "pieces")
        outcome: Any = None
        raised: WardenError | None = None
        try:
            if flavour == "sync":
                outcome = _outcome_sync(fixture, socket_path)
            else:
                outcome = asyncio.run(_outcome_async(fixture, socket_path))
        except WardenError as e:
            raised = e
        problems = fake.finish()
    assert not problems, f"{path.name}: the client's frames differ from the recording:\n" + "\n".join(problems)
    if "error" in fixture:
        want = fixture["error"]
        assert raised is not None, f"{path.name}: expected {want}, the client returned {outcome!r}"
        assert raised.code == want["code"], f"{path.name}: {raised!r}"
        assert want.get("message_contains", "") in raised.message, f"{path.name}: {raised!r}"
    else:
        assert raised is None, f"{path.name}: the client raised {raised!r}"
        assert outcome == fixture["result"], f"{path.name}: outcome differs"


def test_fixtures_are_there() -> None:
    """Says plainly when the shared fixtures are missing (the replay above
    is then one skipped case)."""
    if not FILES:
        pytest.skip(f"{FIXTURES} holds no fixture yet")
    names = {_load(p)["call"]["method"] for p in FILES}
    assert names <= {"run", "status", "reload", "audit", "stop_shell", "hold", "list", "wait",
                     "signal_after_start", "hello_only"}, names
