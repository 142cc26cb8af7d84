"""Frames and requests, without warden: headers, the protocol's example,
run requests, terminal sizes, the error classes. The client's reading
against a scripted peer is in test_connection.py and test_requests.py."""

from __future__ import annotations

import builtins
import os

import pytest

import warden_client
from warden_client import (
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
