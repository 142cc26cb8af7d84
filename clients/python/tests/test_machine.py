"""The machine adapter: where it finds a machine, what it asks the
launcher, what it stops; with a fake launcher, then with real podman and
the base image machine/build makes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import unavailable

from warden_client import Machine, MachineError, Reach, state_root
from warden_client.common import SUPPORTED_VERSIONS
from warden_client import frames as fr

# -- where the launcher keeps machines ------------------------------------------


def test_state_root_follows_the_launcher() -> None:
    assert state_root({}, 0) == Path("/var/lib/warden/machines")
    assert state_root({"XDG_DATA_HOME": "/x/data", "HOME": "/home/me"}, 1000) == Path(
        "/x/data/warden/machines"
    )
    assert state_root({"XDG_DATA_HOME": "relative", "HOME": "/home/me"}, 1000) == Path(
        "/home/me/.local/share/warden/machines"
    )
    assert state_root({"XDG_DATA_HOME": "", "HOME": "/home/me"}, 1000) == Path(
        "/home/me/.local/share/warden/machines"
    )
    with pytest.raises(MachineError, match="nowhere"):
        state_root({"HOME": "rel"}, 1000)


def test_ids_are_checked_before_any_path_is_made() -> None:
    for bad in ("../x", "", "-a", "A", "a" * 32, None, 7):
        with pytest.raises(MachineError, match="not a machine id"):
            Machine({"id": bad, "image": "x"})
    assert Machine({"id": "a" * 31, "image": "x"}).id == "a" * 31


# -- a fake launcher and a fake warden ------------------------------------------

FAKE_LAUNCHER = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LAUNCHER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
if args[:2] == ["machine", "up"]:
    definition = json.load(open(args[2]))
    state = os.path.join(os.environ["FAKE_STATE"], definition["id"])
    os.makedirs(os.path.join(state, "run"), exist_ok=True)
    with open(os.path.join(state, "key"), "w") as f:
        f.write("f" * 64 + "\n")
    print("machine", definition["id"], "up in 0.01 s")
elif args[:2] == ["machine", "stop"]:
    pass
else:
    print("fake launcher: unexpected", args, file=sys.stderr)
    sys.exit(125)
'''


class FakeWarden:
    """Answers keyed hellos and runs `id -un` on a unix socket, for as
    many connections as come (each in turn)."""

    def __init__(self, path: str, key: str) -> None:
        self.key = key
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.listener.settimeout(0.2)
        self.stopping = threading.Event()
        self.hellos = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    self._one(conn)
                except (OSError, EOFError):
                    pass

    def _one(self, conn: socket.socket) -> None:
        def frame() -> tuple[int, int, bytes]:
            raw = b""
            while len(raw) < 9:
                more = conn.recv(9 - len(raw))
                if not more:
                    raise EOFError
                raw += more
            kind, id, size = fr.HEADER.unpack(raw)
            body = b""
            while len(body) < size:
                more = conn.recv(size - len(body))
                if not more:
                    raise EOFError
                body += more
            return kind, id, body

        _, _, body = frame()
        hello = json.loads(body)
        if hello.get("key") != self.key:
            conn.sendall(fr.encode_control(0, {"type": "error", "code": "refused", "message": "wrong key"}))
            return
        self.hellos += 1
        conn.sendall(fr.encode_control(0, {"type": "hello", "version": 3, "server": "fake"}))
        while True:
            kind, id, body = frame()
            request = json.loads(body)
            assert request["type"] == "run", request
            conn.sendall(
                fr.encode_control(id, {"type": "started", "command": 1, "pid": 2})
                + fr.encode(fr.STDOUT, id, b"shell\n")
                + fr.encode_control(id, {"type": "exit", "status": 0, "code": 0, "duration_ms": 1,
                                         "stdout_bytes": 6, "stderr_bytes": 0, "drained": True})
            )

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.listener.close()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: Any) -> Iterator[dict[str, Path]]:
    launcher = tmp_path / "warden"
    launcher.write_text(FAKE_LAUNCHER.replace("/usr/bin/env python3", sys.executable, 1))
    launcher.chmod(0o755)
    log = tmp_path / "launcher.log"
    log.touch()
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FAKE_LAUNCHER_LOG", str(log))
    monkeypatch.setenv("FAKE_STATE", str(state))
    yield {"launcher": launcher, "log": log, "state": state, "dir": tmp_path}


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_start_stop_and_reach_with_a_fake_launcher(fake: dict[str, Path]) -> None:
    definition = fake["dir"] / "def.json"
    definition.write_text(json.dumps({"id": "demo", "image": "localhost/whatever"}))
    m = Machine(definition, warden=fake["launcher"], state=fake["state"])
    assert not m.running()
    with pytest.raises(MachineError, match="is it made"):
        m.reach()
    reach = m.start()
    assert m.started
    assert calls(fake["log"]) == [["machine", "up", str(definition)]]
    assert reach == Reach(
        id="demo",
        socket=str(fake["state"] / "demo/run/api.sock"),
        key="f" * 64,
        key_file=str(fake["state"] / "demo/key"),
        state_dir=str(fake["state"] / "demo"),
    )
    assert "f" * 64 not in repr(reach), "the key is not printed"
    warden = FakeWarden(reach.socket, "f" * 64)
    try:
        assert m.exec(["id", "-un"]).stdout == b"shell\n"
        # Another adapter finds it running: it starts nothing, stops nothing.
        other = Machine(definition, warden=fake["launcher"], state=fake["state"])
        assert other.start() == reach and not other.started
        assert other.stop() is False
        assert len(calls(fake["log"])) == 1
        assert m.stop() is True
        assert calls(fake["log"])[-1] == ["machine", "stop", "demo"]
        assert m.stop() is False, "stopped once"
        assert not any(c[1] == "rm" for c in calls(fake["log"])), "never removes"
    finally:
        warden.close()


def test_a_dict_definition_is_written_with_its_paths_resolved(fake: dict[str, Path]) -> None:
    folder = fake["dir"] / "agent"
    folder.mkdir()
    m = Machine(
        {"id": "dict1", "image": "localhost/x", "setup": "setup.sh", "keys": []},
        warden=fake["launcher"],
        folder=folder,
        state=fake["state"],
    )
    with m:
        assert m.started
        (up,) = calls(fake["log"])
        assert up[:2] == ["machine", "up"] and up[3:] == ["--env-file", str(folder / ".env")]
        written = json.loads(Path(up[2]).read_text())
        assert written == {"id": "dict1", "image": "localhost/x", "setup": str(folder / "setup.sh"),
                           "keys": []}
        scratch = Path(up[2]).parent
        assert stat.S_IMODE(scratch.stat().st_mode) == 0o700
    assert calls(fake["log"])[-1] == ["machine", "stop", "dict1"]
    assert not scratch.exists(), "the scratch copy is removed"


def test_launcher_failures_are_machine_errors(fake: dict[str, Path]) -> None:
    with pytest.raises(MachineError, match="not found"):
        Machine({"id": "x", "image": "y"}, warden=fake["dir"] / "missing").start()
    broken = fake["dir"] / "broken"
    broken.write_text("#!/bin/sh\necho 'def.json: lend[0].at: /etc shadows a system path' >&2\nexit 125\n")
    broken.chmod(0o755)
    with pytest.raises(MachineError, match="shadows a system path") as caught:
        Machine({"id": "x", "image": "y"}, warden=broken, state=fake["state"]).start()
    assert caught.value.code == "launcher"
    bad = fake["dir"] / "bad.json"
    bad.write_text("[1]")
    with pytest.raises(MachineError, match="JSON object"):
        Machine(bad)


# -- real podman ------------------------------------------------------------------

#: The base image machine/build makes. The brief named it
#: localhost/warden-base; machine/build and tests/machines.rs name it
#: localhost/warden-machine:latest. Both are looked for, in that order.
IMAGES = ("localhost/warden-base", "localhost/warden-machine:latest")


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)


def _base_image() -> str | None:
    for image in IMAGES:
        if _podman("image", "exists", image).returncode == 0:
            return image
    return None


def test_a_real_machine_started_reached_stopped_and_kept(warden_binary: Path) -> None:
    if shutil.which("podman") is None:
        unavailable("the machine test needs podman")
    image = _base_image()
    if image is None:
        unavailable(f"the machine test needs one of {', '.join(IMAGES)} (sudo machine/build)")
    assert image is not None
    id = f"pyc{os.getpid() % 100000}-{uuid.uuid4().hex[:6]}"
    folder = Path(tempfile.mkdtemp(prefix="warden-pyclient-def-"))
    launcher = [str(warden_binary), "machine"]
    try:
        lent = folder / "lent"
        lent.mkdir()
        (lent / "file.txt").write_text("lent-content\n")
        (folder / ".env").write_text("API_TOKEN=canary-py-123\nOTHER=no\n")
        (folder / "setup.sh").write_text("set -e\necho made-by-setup > setup-marker\n")
        definition = folder / "def.json"
        definition.write_text(json.dumps({
            "id": id,
            "image": image,
            "keys": ["API_TOKEN"],
            "lend": [{"host": str(lent), "at": "/lent/src", "mode": "read"}],
            "setup": "setup.sh",
        }))
        m = Machine(definition, warden=warden_binary, up_timeout=600)
        assert not m.running()
        reach = m.start()
        assert m.started
        state = Path("/var/lib/warden/machines") / id
        assert reach.socket == str(state / "run/api.sock") and reach.kind == "container"
        assert reach.key == (state / "key").read_text().strip() and len(reach.key) == 64
        assert stat.S_IMODE((state / "key").stat().st_mode) == 0o600
        assert m.exec(["id", "-un"]).stdout == b"shell\n"
        assert m.exec(["cat", "/lent/src/file.txt"]).stdout == b"lent-content\n"
        env = m.exec(["env"]).stdout
        assert b"canary-py-123" not in env and b"API_TOKEN" not in env
        written = m.exec(shell="echo kept > note && cat note", folder="py")
        assert written.stdout == b"kept\n", written
        with m.client(timeout=60) as c:
            assert c.status()["protocol"] == max(SUPPORTED_VERSIONS)
        # A second adapter finds it running: starts nothing, stops nothing.
        other = Machine(definition, warden=warden_binary)
        assert other.start() == reach and not other.started
        assert other.stop() is False and m.running()
        # The one that started it stops it, and removes nothing.
        assert m.stop() is True
        assert not m.running()
        for volume in (f"warden-{id}-data", f"warden-{id}-work"):
            assert _podman("volume", "exists", volume).returncode == 0, f"{volume} was removed"
        assert (state / "key").exists()
        # Started again, the workspace is as it was.
        m.start()
        assert m.started
        assert m.exec(["cat", "note"], folder="py").stdout == b"kept\n"
        m.close()
        assert not m.running()
    finally:
        removed = subprocess.run([*launcher, "rm", "--volumes", id], capture_output=True, text=True,
                                 timeout=180, stdin=subprocess.DEVNULL, check=False)
        shutil.rmtree(folder, ignore_errors=True)
    assert removed.returncode == 0, removed.stderr
    left = _podman("ps", "-a", "--filter", f"label=warden.machine={id}", "-q").stdout
    # By name: podman's `run` makes a machine's volumes unlabelled.
    volumes = {f"warden-{id}-data", f"warden-{id}-work"}
    left += "".join(v + "\n" for v in _podman("volume", "ls", "-q").stdout.split() if v in volumes)
    assert left.strip() == "", f"left behind: {left}"
    assert not (Path("/var/lib/warden/machines") / id).exists()


def test_machines_of_a_warm_pool_each_their_own(warden_binary: Path) -> None:
    if shutil.which("podman") is None:
        unavailable("the machine test needs podman")
    image = _base_image()
    if image is None:
        unavailable(f"the machine test needs one of {', '.join(IMAGES)} (sudo machine/build)")
    pool = f"pyw{os.getpid() % 100000}-{uuid.uuid4().hex[:4]}"
    folder = Path(tempfile.mkdtemp(prefix="warden-pyclient-warm-"))
    definition = folder / "def.json"
    definition.write_text(json.dumps({"id": pool, "image": image}))
    taken: list[str] = []
    launcher = [str(warden_binary), "machine"]
    try:
        with pytest.raises(MachineError, match="a pool holds containers"):
            Machine(definition, warden=warden_binary, warm=1, vm=True)
        with pytest.raises(MachineError, match="only with warm"):
            Machine(definition, warden=warden_binary, warm_paused=True)
        first = Machine(definition, warden=warden_binary, warm=1, up_timeout=600)
        first.start()
        taken.append(first.id)
        assert first.id.startswith(f"{pool}-") and first.started
        assert first.exec(["id", "-un"]).stdout == b"shell\n"
        spares = Path("/var/lib/warden/pools") / pool / "spares"
        deadline = time.monotonic() + 90
        while not any(spares.iterdir()):
            assert time.monotonic() < deadline, "no spare made in 90 s"
            time.sleep(0.2)
        spare = next(spares.iterdir()).name
        second = Machine(definition, warden=warden_binary, warm=1, up_timeout=600)
        second.start()
        taken.append(second.id)
        assert second.id == spare, (second.id, spare)
        assert second.exec(["id", "-un"]).stdout == b"shell\n"
        assert second.stop() is True and first.running()
    finally:
        subprocess.run([*launcher, "up", "--warm", "0", "--fill", str(definition)], capture_output=True,
                       timeout=300, stdin=subprocess.DEVNULL, check=False)
        for id in taken:
            subprocess.run([*launcher, "rm", "--volumes", id], capture_output=True, timeout=180,
                           stdin=subprocess.DEVNULL, check=False)
        shutil.rmtree(Path("/var/lib/warden/pools") / pool, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
    left = _podman("ps", "-a", "--format", "{{.Names}}").stdout
    assert f"warden-{pool}-" not in left, f"left behind: {left}"


def test_a_missing_prerequisite_skips_or_under_ci_fails(monkeypatch: Any) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true forbids skipping"):
        unavailable("needs something")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="needs something"):
        unavailable("needs something")
