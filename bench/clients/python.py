#!/usr/bin/env python3
"""The Python client (sync) against sudo, from Python, side by side in one
run (see docs/benchmarks.md): ``true`` run as shell through warden's API
(``Client.run``, one connection, the exit awaited) and through
``subprocess.run(["sudo", "-u", "shell", "env", "-i", "true"])``, with
Python's own ``subprocess.run(["/bin/true"])`` as the floor. The
contenders take turns (A B C A B C ...), so the machine's drifts hit them
alike.

Root: warden is booted as PID 1 of fresh namespaces by the live tests' own
support (clients/python/tests/wardenbox.py: a private copy of
target/x86_64-unknown-linux-gnu/release/warden, or $WARDEN_BIN). sudo
needs a user named shell with the uid warden's shell has (2001): the
script runs in a mount namespace of its own, where /etc/passwd and
/etc/group are the copies that warden completed at its boot, bound over
the host's. The host's files are never written.

    python3 bench/clients/python.py [--runs 200] [--warmup 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "clients/python/src"), str(REPO / "clients/python/tests")]

import wardenbox  # noqa: E402
from warden_client import Client, __version__ as VERSION  # noqa: E402


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    if not 0 < args.runs <= 100_000 or not 0 <= args.warmup <= 100_000:
        parser.error("--runs: 1 to 100000, --warmup: 0 to 100000")
    return args


def private_etc() -> None:
    """Runs this script again in a mount namespace of its own, out of any
    terminal's session (so sudo's use_pty, on in Debian's sudoers, does
    not apply: the kind case for sudo)."""
    if os.environ.get("WARDEN_BENCH_PRIVATE_ETC") == "1":
        return
    env = dict(os.environ, WARDEN_BENCH_PRIVATE_ETC="1")
    argv = ["unshare", "--mount", "--propagation", "private", "--",
            "setsid", "--wait", sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
    sys.exit(subprocess.run(argv, env=env).returncode)


def must(argv: list[str]) -> str:
    out = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr}")
    return out.stdout


def switch_user() -> list[str]:
    """sudo, or runuser when sudo is missing: the argv that runs true as shell."""
    for argv in (["sudo", "-u", "shell", "env", "-i", "true"],
                 ["runuser", "-u", "shell", "--", "env", "-i", "true"]):
        if shutil.which(argv[0]):
            return argv
    raise RuntimeError("neither sudo nor runuser is installed")


def stats(times: list[float]) -> dict[str, Any]:
    ordered = sorted(times)
    n = len(ordered)
    return {"runs": n, "p50": ordered[n // 2], "p95": ordered[n * 95 // 100],
            "mean": sum(ordered) / n}


def main() -> int:
    args = arguments()
    if os.geteuid() != 0:
        print("bench/clients/python.py: needs root (warden boots as PID 1 of new namespaces; sudo)",
              file=sys.stderr)
        return 1
    private_etc()
    binary = wardenbox.private_binary()
    if binary is None:
        print(f"no warden binary at {wardenbox.BUILT} (cargo build --release)", file=sys.stderr)
        return 1
    box = wardenbox.Warden(binary)
    etc = Path(tempfile.mkdtemp(prefix="warden-bench-etc-"))
    mounted: list[str] = []
    try:
        box.wait_ready()
        # The copies warden completed (shell and runtime appended), bound over /etc.
        for name in ("passwd", "group"):
            shutil.copy(box.root / "etc" / name, etc / name)
            must(["mount", "--bind", str(etc / name), f"/etc/{name}"])
            mounted.append(f"/etc/{name}")
        line = must(["getent", "passwd", "shell"]).strip()
        if line.split(":")[2] != str(wardenbox.SHELL_UID):
            raise RuntimeError(f"shell is not warden's shell: {line}")

        sudo = switch_user()
        with Client.connect(box.socket, timeout=30) as client:

            def through_warden() -> None:
                r = client.run(["true"])
                if r.status != 0:
                    raise RuntimeError(f"true through warden: {r}")

            def through_sudo() -> None:
                r = subprocess.run(sudo, stdin=subprocess.DEVNULL, capture_output=True)
                if r.returncode != 0:
                    raise RuntimeError(f"{' '.join(sudo)}: exit {r.returncode}: {r.stderr!r}")

            def floor() -> None:
                r = subprocess.run(["/bin/true"], stdin=subprocess.DEVNULL, capture_output=True)
                if r.returncode != 0:
                    raise RuntimeError(f"/bin/true: exit {r.returncode}")

            contenders: list[tuple[str, Callable[[], None]]] = [
                ('client.run(["true"]) (sync, one connection)', through_warden),
                (f"subprocess.run({sudo!r})".replace("'", '"'), through_sudo),
                ('subprocess.run(["/bin/true"]) (floor: Python\'s own spawn, no user switch)', floor),
            ]
            for _, once in contenders:
                for _ in range(args.warmup):
                    once()
            times: list[list[float]] = [[] for _ in contenders]
            for _ in range(args.runs):
                for k, (_, once) in enumerate(contenders):
                    start = time.perf_counter_ns()
                    once()
                    times[k].append((time.perf_counter_ns() - start) / 1e6)
            server = client.server
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", target])
        shutil.rmtree(etc, ignore_errors=True)
        status = box.stop()
        log = box.log()
        box.remove()
        shutil.rmtree(binary.parent, ignore_errors=True)
        if status != 143:
            print(f"warden ended with {status}:\n{log}", file=sys.stderr)

    rows = [{"name": name, **stats(t)} for (name, _), t in zip(contenders, times)]
    api, su = rows[0], rows[1]
    print(f"\nPython {platform.python_version()}, warden-client {VERSION} (sync), {server} "
          f"({wardenbox.BUILT}); {os.cpu_count()} CPUs; {args.runs} runs each after "
          f"{args.warmup} warm-up, interleaved")
    width = max(len(r["name"]) for r in rows)
    print(f"{'contender':<{width}}  {'median ms':>9}  {'p95 ms':>7}  {'sudo/x':>6}")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['p50']:>9.2f}  {r['p95']:>7.2f}  {su['p50'] / r['p50']:>6.2f}")
    ratio = su["p50"] / api["p50"]
    print(f"ratio {sudo[0]}/client (Python): median {ratio:.2f}x, p95 {su['p95'] / api['p95']:.2f}x "
          f"(target: 3x; {'met' if ratio >= 3 else 'NOT met'} at the median)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"language": "python", "runtime": platform.python_version(), "switch": sudo[0],
             "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
