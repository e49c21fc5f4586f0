"""Which machine (which running kernel) a process is on: the identity agents and controller compare.

Agents that share a kernel share its memory: a local cluster's agents, a netns testbed's agents
(network namespaces, one kernel), several agents of one lab server. ``host_id`` is the kernel's
boot id (``/proc/sys/kernel/random/boot_id``: new at every boot, the same in every namespace and
container on that kernel), else ``/etc/machine-id``, else the host name. Standard library only.
"""

from __future__ import annotations

import socket
from pathlib import Path

SOURCES = ("/proc/sys/kernel/random/boot_id", "/etc/machine-id")


def host_id() -> str:
    """This machine's identity: ``boot:<boot id>``, ``machine:<machine id>`` or ``host:<name>``."""
    for path, kind in zip(SOURCES, ("boot", "machine"), strict=True):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text:
            return f"{kind}:{text}"
    return f"host:{socket.gethostname()}"
