"""RoCE GIDs as both sides read them: the IP address a GID table entry carries."""

from __future__ import annotations

import ipaddress


def gid_ip(gid: str) -> str:
    """The IP address a RoCE GID encodes ("" for link-local or non-IP GIDs)."""
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        return ""
    if addr.ipv4_mapped:
        return str(addr.ipv4_mapped)
    return "" if addr.is_link_local else str(addr)
