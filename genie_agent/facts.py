"""Host facts an agent reports in its hello: CPUs, memory and NICs (name, speed, MTU, addresses)."""

from __future__ import annotations

import platform
import socket

import psutil

from genie.wire.messages import HostFacts


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
    )
