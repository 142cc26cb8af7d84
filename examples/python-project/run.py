#!/usr/bin/env python3
# examples/python-project/run.py: a project lent to a machine at the path it
# has on the host, through the Python client's Machine. The machine runs a
# plain image (warden's root filesystem, no warden in it: the launcher lends
# its own static warden), and the project's tests run there as `shell`.
# Usage: run.py [PROJECT]  (default: the current folder). WARDEN names the
# launcher (default: `warden` on PATH). The machine is stopped at the end,
# not removed: `warden machine rm python-project --volumes`.
import os
import shlex
import sys

from warden_client import Machine

project = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
definition = {
    "id": "python-project",
    "image": "localhost/warden-rootfs:bookworm",
    "requires": ["python3", "git"],
    "lend": [{"host": project, "at": project, "mode": "write"}],
}
if os.geteuid() != 0:
    # Rootless podman: what shell writes in the project is the owner's.
    definition["keep_id"] = "shell"

with Machine(definition, warden=os.environ.get("WARDEN", "warden")) as machine:
    print(f"machine {machine.id}: {project} lent at {project}", flush=True)
    line = (
        f"cd {shlex.quote(project)} && id -un && "
        "python3 -m unittest -v > unittest.log 2>&1; s=$?; cat unittest.log; exit $s"
    )
    result = machine.exec(shell=line, timeout=120)
    sys.stdout.write(result.stdout.decode())
    sys.stdout.write(result.stderr.decode())
    print(f"the tests ended with status {result.status}; unittest.log is in {project}")
sys.exit(result.status)
