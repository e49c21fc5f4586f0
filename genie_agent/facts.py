"""Host facts an agent reports in its hello: CPUs, memory and NICs (name, speed, MTU, addresses).

Besides the host's total memory, an agent says how much it may still allocate
(``available_memory``: the host's available memory, less where its memory cgroup allows less)
and which machine it is on (``genie.wire.hostid``), so the controller can add up what the agents
that share one machine's memory will need.
"""

from __future__ import annotations

import platform
import socket
from pathlib import Path

import psutil

from genie.wire.hostid import host_id
from genie.wire.messages import HostFacts

CGROUP_UNLIMITED = 1 << 60  # v1 reports "no limit" as a huge number


def host_facts() -> HostFacts:
    """Collect this host's facts with psutil (never raises: missing data is left empty)."""
    nics: list[dict[str, str | int | bool | list[str]]] = []
    try:
        stats = psutil.net_if_stats()
        addrs = psutil.net_if_addrs()
    except (OSError, RuntimeError):
        stats, addrs = {}, {}
    for name in sorted(stats):
        st = stats[name]
        ips = [
            a.address for a in addrs.get(name, []) if a.family in (socket.AF_INET, socket.AF_INET6)
        ]
        nics.append(
            {
                "name": name,
                "up": bool(st.isup),
                "speed_mbit": int(st.speed),
                "mtu": int(st.mtu),
                "addresses": ips,
            }
        )
    return HostFacts(
        hostname=socket.gethostname(),
        cpus_logical=psutil.cpu_count() or 0,
        cpus_physical=psutil.cpu_count(logical=False) or 0,
        memory_bytes=int(psutil.virtual_memory().total),
        nics=nics,
        python=platform.python_version(),
        platform=platform.platform(),
        memory_available=available_memory(),
        host_id=host_id(),
    )


def available_memory() -> int:
    """Bytes this process may still allocate: the host's available memory, or less where its
    memory cgroup's limit leaves less (0 if unknown)."""
    try:
        avail = int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):
        return 0
    room = _cgroup_room()
    return min(avail, room) if room is not None else avail


def _cgroup_room() -> int | None:
    """Limit less usage of this process's memory cgroup (None: no limit, or not readable)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.lstrip("/")
        if controllers == "":  # v2
            d, limit_f, usage_f = Path("/sys/fs/cgroup") / rel, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):  # v1
            d = Path("/sys/fs/cgroup/memory") / rel
            limit_f, usage_f = "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        try:
            limit = (d / limit_f).read_text().strip()
            usage = int((d / usage_f).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < CGROUP_UNLIMITED:
            return max(0, int(limit) - usage)
    return None
