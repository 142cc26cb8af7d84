"""Shared fixtures: the package from src/, the skip-or-fail rule, the
scripted peers (scriptedpeer.py), and the live wardens (booted once per
session, stopped with SIGTERM at the end)."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import wardenbox  # noqa: E402
from scriptedpeer import Peer  # noqa: E402

#: The host socket's key in the keyed warden (at least 32 characters).
HOST_KEY = "pyclient-key-0123456789abcdef0123456789abcdef"


def unavailable(reason: str) -> None:
    """Skips, saying why; under CI=true a missing prerequisite fails."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}, and CI=true forbids skipping", pytrace=False)
    print(f"SKIPPED {reason}", file=sys.stderr)
    pytest.skip(reason)


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


@pytest.fixture(scope="session")
def warden_binary() -> Iterator[Path]:
    """A private copy of the release binary (the build may replace the
    original while the tests run)."""
    if os.geteuid() != 0:
        unavailable("live tests need root (namespaces, bind mounts, setuid)")
    copy = wardenbox.private_binary()
    if copy is None:
        unavailable(f"no warden binary at {wardenbox.BUILT} (scripts/test or cargo build --release)")
    assert copy is not None
    yield copy
    shutil.rmtree(copy.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def warden(warden_binary: Path) -> Iterator[wardenbox.Warden]:
    """warden as PID 1 of fresh namespaces, its API on `warden.socket`."""
    box = wardenbox.Warden(warden_binary)
    try:
        box.wait_ready()
        yield box
    finally:
        status = box.stop()
        log = box.log()
        box.remove()
    # SIGTERM with `sleep infinity` as the main process: 128 + 15.
    assert status == 143, f"warden ended with {status}; log:\n{log}"


@pytest.fixture(scope="session")
def keyed_warden(warden_binary: Path) -> Iterator[wardenbox.Warden]:
    """A second warden with a host socket and a key file (root's, 0600)."""

    def key_first(box: wardenbox.Warden) -> None:
        key = box.root / "key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(HOST_KEY + "\n")
        (box.root / "host").mkdir()

    box = wardenbox.Warden(
        warden_binary,
        config={"host_socket": "{root}/host/api.sock", "key_file": "{root}/key"},
        before_boot=key_first,
    )
    try:
        box.wait_ready()
        yield box
    finally:
        status = box.stop()
        log = box.log()
        box.remove()
    assert status == 143, f"warden ended with {status}; log:\n{log}"
