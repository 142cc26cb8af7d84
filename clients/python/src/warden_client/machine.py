"""A machine of the agent's own, made by warden's launcher.

``Machine(definition).start()`` runs ``warden machine up DEFINITION``
(unless the machine already answers) and returns a :class:`Reach`: the
socket and key through which the host talks to the machine's warden, as
the launcher keeps them. ``stop()`` stops what this adapter started, and
nothing else; the workspace and volumes are never removed here (that is
``warden machine rm --volumes ID``, the owner's call).

Where the launcher keeps a machine (src/host/this_host.rs ``state_root``,
src/host/state.rs ``state_dir``, ``socket``, ``key``):

- the state folder ``<root>/<id>/`` (mode 0700), ``<root>`` being
  ``/var/lib/warden/machines`` for root, else
  ``$XDG_DATA_HOME/warden/machines`` or ``$HOME/.local/share/warden/machines``;
- the key, ``<state>/key`` (64 hex characters, mode 0600, made once and
  kept across remakes);
- a container's host socket, ``<state>/run/api.sock`` (warden's
  ``host_socket``, mounted at ``/run/warden-host`` inside);
- a VM's hybrid vsock, ``<state>/vm/vsock.sock``, port 1024.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .client import Client
from .common import Result
from .errors import MachineError, WardenError

__all__ = ["ROOTFUL_STATE", "VSOCK_PORT", "Machine", "Reach", "state_root"]

#: Where a rootful launcher keeps machines.
ROOTFUL_STATE = "/var/lib/warden/machines"
#: warden's vsock port in a VM.
VSOCK_PORT = 1024
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")


def state_root(environ: Mapping[str, str] | None = None, euid: int | None = None) -> Path:
    """The folder holding the machines' state folders, as the launcher run
    by this user with this environment finds it."""
    env = os.environ if environ is None else environ
    uid = os.geteuid() if euid is None else euid
    if uid == 0:
        return Path(ROOTFUL_STATE)
    for name, tail in (("XDG_DATA_HOME", "warden/machines"), ("HOME", ".local/share/warden/machines")):
        value = env.get(name) or ""
        if value and os.path.isabs(value):
            return Path(value) / tail
    raise MachineError(
        "rootless: neither XDG_DATA_HOME nor HOME is set to an absolute path: "
        "nowhere the launcher keeps machines"
    )


@dataclass(frozen=True)
class Reach:
    """How the host reaches a machine's warden."""

    id: str
    #: The host socket (a container), or the host's end of the VM's vsock.
    socket: str
    #: The machine's key, which the host socket requires in the hello.
    key: str = field(repr=False)
    key_file: str
    state_dir: str
    kind: Literal["container", "vm"] = "container"
    #: The vsock port to ask for first (VMs only).
    vsock_port: int | None = None

    def connect(self, **options: Any) -> Client:
        """A :class:`Client` on this machine (options as :meth:`Client.connect`)."""
        return Client.connect(self.socket, self.key, vsock_port=self.vsock_port, **options)


class Machine:
    """A machine made from a definition (a dict, or the path of its JSON
    file) by the launcher ``warden`` (a name in PATH, or a path).

    - ``env_file``: the owner's secrets (``--env-file``); by default the
      launcher's own default, ``.env`` beside the definition (for a dict:
      in ``folder``).
    - ``folder``: for a dict, the folder its relative ``dockerfile`` and
      ``setup`` are resolved against (default: the current folder).
    - ``vm``: make it a micro-VM (``--vm``).
    - ``warm``: take the machine from a pool of this many made ahead and
      stopped (``up --warm N``): a start costs a start, not a make. The
      definition's id names the pool; the machine is ``<id>-<k>``, and
      :attr:`id` becomes it when :meth:`start` returns. Containers only.
      ``warm_paused``: the pool's spares wait frozen (``--paused``: their
      memory held, a take is a thaw) rather than stopped.
    - ``up_timeout``: seconds ``warden machine up`` may take (an image
      build included); ``stop_timeout``: for ``warden machine stop``.
    - ``state``: the launcher's state root, only when it is not the one
      this process would find (see :func:`state_root`).
    """

    def __init__(
        self,
        definition: Mapping[str, Any] | str | os.PathLike[str],
        warden: str | os.PathLike[str] = "warden",
        *,
        env_file: str | os.PathLike[str] | None = None,
        folder: str | os.PathLike[str] | None = None,
        vm: bool = False,
        warm: int | None = None,
        warm_paused: bool = False,
        up_timeout: float = 1800.0,
        stop_timeout: float = 60.0,
        state: str | os.PathLike[str] | None = None,
    ) -> None:
        self.warden = os.fspath(warden)
        self.vm = vm
        if warm is not None and (vm or warm < 0):
            raise MachineError(f"warm={warm!r}: a pool holds containers, 0 or more of them")
        if warm_paused and warm is None:
            raise MachineError("warm_paused: only with warm=N")
        self.warm = warm
        self.warm_paused = warm_paused
        self.up_timeout = up_timeout
        self.stop_timeout = stop_timeout
        self._env_file = None if env_file is None else os.fspath(env_file)
        self._scratch: str | None = None
        if isinstance(definition, Mapping):
            self._definition: dict[str, Any] = dict(definition)
            self._base = Path(folder if folder is not None else os.getcwd()).resolve()
            self._path: Path | None = None
            if self._env_file is None:
                self._env_file = str(self._base / ".env")
        else:
            self._path = Path(os.fspath(definition)).resolve()
            try:
                text = self._path.read_text(encoding="utf-8")
            except OSError as e:
                raise MachineError(f"{self._path}: {e.strerror or e}") from None
            try:
                loaded = json.loads(text)
            except ValueError as e:
                raise MachineError(f"{self._path}: not JSON: {e}") from None
            if not isinstance(loaded, dict):
                raise MachineError(f"{self._path}: a definition is a JSON object")
            self._definition = loaded
            self._base = self._path.parent
        id = self._definition.get("id")
        if not isinstance(id, str) or not _ID.fullmatch(id):
            raise MachineError(f"id {id!r}: not a machine id ([a-z0-9][a-z0-9-]{{0,30}})")
        #: The machine's id (its container is ``warden-<id>``).
        self.id: str = id
        self._state_root = Path(os.fspath(state)) if state is not None else None
        self._started = False

    # -- where it is -----------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        """The machine's state folder on the host."""
        return (self._state_root or state_root()) / self.id

    @property
    def started(self) -> bool:
        """True when this adapter started the machine (and ``stop`` will
        stop it)."""
        return self._started

    def reach(self) -> Reach:
        """How to reach the machine (made earlier; it need not run)."""
        state = self.state_dir
        key_file = state / "key"
        try:
            key = key_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise MachineError(
                f"machine {self.id}: key {key_file}: {e.strerror or e} (is it made? `warden machine up`)"
            ) from None
        if (state / "vm").is_dir():
            return Reach(self.id, str(state / "vm/vsock.sock"), key, str(key_file), str(state),
                         "vm", VSOCK_PORT)
        return Reach(self.id, str(state / "run/api.sock"), key, str(key_file), str(state))

    def running(self, timeout: float = 5.0) -> bool:
        """True when the machine's warden answers the key now."""
        try:
            reach = self.reach()
        except MachineError:
            return False
        if not os.path.exists(reach.socket):
            return False
        try:
            reach.connect(connect_timeout=timeout).close()
        except (WardenError, OSError):
            return False
        return True

    # -- life ------------------------------------------------------------------------

    def _definition_file(self) -> str:
        if self._path is not None:
            return str(self._path)
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix=f"warden-machine-{self.id}-")
        written = dict(self._definition)
        for name in ("dockerfile", "setup"):
            value = written.get(name)
            if isinstance(value, str) and value and not os.path.isabs(value):
                written[name] = str(self._base / value)
        path = Path(self._scratch) / f"{self.id}.json"
        path.write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")
        return str(path)

    def _launcher(self, args: Sequence[str], timeout: float) -> str:
        command = [self.warden, "machine", *args]
        try:
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False
            )
        except FileNotFoundError:
            raise MachineError(f"{self.warden}: not found (the warden launcher)") from None
        except subprocess.TimeoutExpired:
            raise MachineError(f"{' '.join(command)}: still running after {timeout:.0f} s") from None
        out = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip() or out.strip()[-2000:]
            raise MachineError(f"{' '.join(command)} failed ({done.returncode}): {said}")
        return out

    def start(self) -> Reach:
        """Makes and starts the machine unless it already answers; returns
        how to reach it. ``started`` says whether this call started it."""
        # A pool's machine is this adapter's own: never one found running.
        if self._started if self.warm is not None else self.running():
            return self.reach()
        args = ["up", self._definition_file()]
        if self._env_file is not None:
            args += ["--env-file", self._env_file]
        if self.vm:
            args.append("--vm")
        if self.warm is not None:
            args += ["--warm", str(self.warm)]
            if self.warm_paused:
                args.append("--paused")
        said = self._launcher(args, self.up_timeout)
        if self.warm is not None:
            self.id = _brought(said)
        self._started = True
        return self.reach()

    def stop(self) -> bool:
        """Stops the machine if this adapter started it (warden gets SIGTERM,
        SIGKILL after 10 s); returns whether it did. Never removes the
        machine, its workspace or its volumes."""
        if not self._started:
            return False
        self._launcher(["stop", self.id], self.stop_timeout)
        self._started = False
        return True

    def close(self) -> None:
        """Stops what this adapter started and removes its scratch files."""
        try:
            self.stop()
        finally:
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None

    def __enter__(self) -> Machine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- through the machine's warden ------------------------------------------------

    def client(self, **options: Any) -> Client:
        """A :class:`Client` on the machine's warden, with its key."""
        return self.reach().connect(**options)

    def exec(self, argv: Sequence[str] | None = None, **run: Any) -> Result:
        """Runs a command as ``shell`` in the machine (arguments as
        :meth:`Client.run`) on a connection of its own."""
        with self.client() as client:
            return client.run(argv, **run)

    def __repr__(self) -> str:
        return f"<warden Machine {self.id} started={self._started}>"


def _brought(said: str) -> str:
    """The id in ``up``'s ``machine ID up in ...`` line."""
    found = re.search(r"^machine ([a-z0-9][a-z0-9-]{0,30}) up", said, re.MULTILINE)
    if found is None:
        raise MachineError(f"warden machine up --warm: no `machine ID up` line in: {said[-2000:]}")
    return found.group(1)
