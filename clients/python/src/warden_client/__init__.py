"""A client of warden's API: run commands as ``shell`` in an agent's
machine and stream their output, and make podman machines with the
``warden machine`` launcher.

>>> from warden_client import Client                  # doctest: +SKIP
>>> with Client.connect() as c:                       # doctest: +SKIP
...     r = c.run(["make", "test"], folder="proj", timeout=600)
...     print(r.status, r.stdout.decode())
"""

from .aio import AsyncAttachment, AsyncClient, AsyncProcess
from .client import Attachment, Client, Process, Stream
from .common import (
    DEFAULT_SOCKET,
    SUPPORTED_VERSIONS,
    VERSION,
    CommandFailed,
    Detached,
    DetachedCommand,
    Result,
    RunEnded,
    ShellStopped,
    TerminalSize,
)
from .machine import Machine, Reach, state_root
from .errors import (
    CODES,
    FATAL_CODES,
    ConnectionError,
    MachineError,
    ProtocolError,
    TimeoutError,
    WardenError,
)

__version__ = VERSION

__all__ = [
    "CODES",
    "DEFAULT_SOCKET",
    "AsyncAttachment",
    "AsyncClient",
    "AsyncProcess",
    "Machine",
    "Reach",
    "state_root",
    "FATAL_CODES",
    "SUPPORTED_VERSIONS",
    "Attachment",
    "Client",
    "CommandFailed",
    "ConnectionError",
    "Detached",
    "DetachedCommand",
    "MachineError",
    "Process",
    "ProtocolError",
    "Result",
    "RunEnded",
    "ShellStopped",
    "Stream",
    "TerminalSize",
    "TimeoutError",
    "WardenError",
    "__version__",
]
