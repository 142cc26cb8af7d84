"""A real warden for the live tests: booted as PID 1 of fresh PID, mount
and network namespaces, as scripts/demo-namespace does it (its own
machine.json, runtime uid 2000, shell uid 2001, its folder under /var/tmp
mode 0755, copies of /etc/passwd and /etc/group bind-mounted inside), and
stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

RUNTIME_UID = 2000
SHELL_UID = 2001
REPO = Path(__file__).resolve().parents[3]
#: The binary to boot: $WARDEN_BIN (as the Node client's tests take it),
#: else the release build.
BUILT = Path(os.environ.get("WARDEN_BIN") or REPO / "target/x86_64-unknown-linux-gnu/release/warden")


def private_binary() -> Path | None:
    """A copy of the release binary in a private folder (the build may
    replace the original under us); None when none is built."""
    if not BUILT.is_file():
        return None
    folder = Path(tempfile.mkdtemp(prefix="warden-pyclient-bin-", dir="/var/tmp"))
    folder.chmod(0o755)
    copy = folder / "warden"
    shutil.copy2(BUILT, copy)
    copy.chmod(0o755)
    return copy


def _says_hello(path: Path, key: str | None = None) -> bool:
    """True when warden answers a hello on `path` (a raw check that does
    not lean on the client under test)."""
    hello: dict[str, Any] = {"type": "hello", "versions": [1, 2, 3], "client": "wardenbox"}
    if key is not None:
        hello["key"] = key
    body = json.dumps(hello).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(str(path))
            s.sendall(bytes([1]) + (0).to_bytes(4, "big") + len(body).to_bytes(4, "big") + body)
            header = s.recv(9, socket.MSG_WAITALL)
            if len(header) != 9:
                return False
            size = int.from_bytes(header[5:9], "big")
            answer = json.loads(s.recv(size, socket.MSG_WAITALL))
            return bool(answer.get("type") == "hello")
    except OSError:
        return False


class Warden:
    """One booted warden; `socket` is its API, `root` its folder."""

    def __init__(self, binary: Path, config: dict[str, Any] | None = None,
                 before_boot: Any = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="warden-pyclient-", dir="/var/tmp"))
        self.root.chmod(0o755)
        etc = self.root / "etc"
        etc.mkdir()
        shutil.copy("/etc/passwd", etc / "passwd")
        shutil.copy("/etc/group", etc / "group")
        self.home = self.root / "home/runtime"
        self.socket = self.root / "run/api.sock"
        #: The host socket, when `config` asks for one there.
        self.host_socket = self.root / "host/api.sock"
        machine = {
            "runtime": {"name": "runtime", "uid": RUNTIME_UID, "gid": RUNTIME_UID,
                        "home": str(self.home)},
            "shell": {"name": "shell", "uid": SHELL_UID, "gid": SHELL_UID,
                      "home": str(self.root / "home/shell")},
            "socket": str(self.socket),
            "shell_tmp": str(self.root / "var/shell-tmp"),
            "grace_period_ms": 2000,
            "drain_ms": 500,
        }
        # "{root}" in a string value of `config` is this warden's folder.
        machine.update({k: v.format(root=self.root) if isinstance(v, str) else v
                        for k, v in (config or {}).items()})
        if before_boot is not None:
            before_boot(self)
        (self.root / "machine.json").write_text(json.dumps(machine))
        self.log_path = self.root / "warden.log"
        script = ('mount --bind "$1/etc/passwd" /etc/passwd && '
                  'mount --bind "$1/etc/group" /etc/group && '
                  'exec "$2" init --config "$1/machine.json" -- sleep infinity')
        with open(self.log_path, "wb") as log:
            self.unshare = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--net", "--mount", "--mount-proc",
                 "--propagation", "private", "--", "sh", "-c", script, "sh",
                 str(self.root), str(binary)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )

    def wait_ready(self, limit: float = 20.0) -> None:
        deadline = time.monotonic() + limit
        while not _says_hello(self.socket):
            if self.unshare.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"warden did not become ready; log:\n{self.log()}")
            time.sleep(0.01)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def pid(self) -> int | None:
        """warden's pid on the host: unshare --fork's only child."""
        me = self.unshare.pid
        try:
            children = Path(f"/proc/{me}/task/{me}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def audit_lines(self) -> list[dict[str, Any]]:
        path = self.home / "data/audit/warden.jsonl"
        try:
            text = path.read_text()
        except OSError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def stop(self, limit: float = 30.0) -> int | None:
        """SIGTERM to warden, then waits (bounded); SIGKILL if it lingers.
        Returns unshare's exit status."""
        if self.unshare.poll() is None:
            pid = self.pid()
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                self.unshare.wait(limit)
            except subprocess.TimeoutExpired:
                pid = self.pid()
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                self.unshare.kill()
                self.unshare.wait(10)
        return self.unshare.returncode

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
