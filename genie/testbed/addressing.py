"""Addresses and names genie gives emulated hosts: all inside 198.18.0.0/15 (RFC 2544).

Data plane: 198.18.0.0/16, one flat L2 segment, host i at 198.18.0.0 + i + 1.
Control plane: 198.19.0.0/16, one /30 per host between the root namespace (``.1``, where the
controller runs) and the host namespace (``.2``, where the agent listens).
"""

from __future__ import annotations

import ipaddress

EMULATION_NET = ipaddress.ip_network("198.18.0.0/15")
DATA_NET = ipaddress.ip_network("198.18.0.0/16")
CONTROL_NET = ipaddress.ip_network("198.19.0.0/16")
DATA_PREFIXLEN = DATA_NET.prefixlen
CONTROL_PREFIXLEN = 30
MAX_HOSTS = 16000  # keeps both plans inside their /16
IFNAMSIZ = 15  # Linux interface names are at most 15 characters


def data_ip(index: int) -> str:
    """Data-plane address of emulated host ``index``."""
    return str(DATA_NET.network_address + index + 1)


def control_pair(index: int) -> tuple[str, str]:
    """(root-side, host-side) control addresses of emulated host ``index`` (a /30)."""
    base = CONTROL_NET.network_address + 4 * index
    return str(base + 1), str(base + 2)


def in_emulation_net(ip: str) -> bool:
    """Whether ``ip`` lies in 198.18.0.0/15, the only range genie's namespaces use."""
    try:
        return ipaddress.ip_address(ip) in EMULATION_NET
    except ValueError:
        return False


def prefix_tag(prefix: str) -> str:
    """The short tag of a namespace prefix: ``genie-`` -> ``''``, ``genie-t1-`` -> ``t1``."""
    return prefix[len("genie-") :].strip("-")


def root_control_ifname(prefix: str, index: int) -> str:
    """Name of the root-namespace end of host ``index``'s control veth (genie-prefixed)."""
    return f"genie-{prefix_tag(prefix)}c{index}"
