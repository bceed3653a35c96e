"""Which process owns a file it left (a lock, a spool folder): its pid, host and start time, and whether it still runs,
so that what a dead process left can be removed and what a live one holds is left alone."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, Linux), to tell a reused pid from the owner."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def this_process() -> dict[str, object]:
    """This process as an owner: pid, host and start time."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": start_time(os.getpid())}


def is_this_process(owner: dict) -> bool:
    """Whether `owner` (pid and host) is this process."""
    return owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname()


def alive(owner: dict) -> bool:
    """Whether the process `owner` names (pid, host, start time when known) still runs; another host's: assume so."""
    if owner.get("host") != socket.gethostname():
        return True
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    started = owner.get("started")
    return started is None or start_time(pid) in (None, started)
