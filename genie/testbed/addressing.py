"""Addresses and names genie gives emulated hosts: all inside 198.18.0.0/15 (RFC 2544).

Data plane: 198.18.0.0/16, one flat L2 segment per testbed, host i at 198.18.0.0 + k + i + 1.
Control plane: 198.19.0.0/16, one /30 per host between the root namespace (``.1``, where the
controller runs) and the host namespace (``.2``, where the agent listens).

Every testbed gets blocks of its own, derived from its namespace prefix: the default prefix
``genie-`` has slot 0 (data 198.18.0.1..., control 198.19.0.0/30...), a tagged prefix
``genie-TAG-`` the slot 1 + crc32(TAG) mod 255; slot s starts at 198.18.s.0 (data) and
198.19.s.0 (control, 64 hosts a /24). Two testbeds up at once thus never share a control
subnet in the root namespace unless their slots collide or one outgrows its /24, and ``testbed
up`` refuses to build one whose root-side addresses overlap a testbed already up.
"""

from __future__ import annotations

import ipaddress
import zlib

EMULATION_NET = ipaddress.ip_network("198.18.0.0/15")
DATA_NET = ipaddress.ip_network("198.18.0.0/16")
CONTROL_NET = ipaddress.ip_network("198.19.0.0/16")
DATA_PREFIXLEN = DATA_NET.prefixlen
CONTROL_PREFIXLEN = 30
MAX_HOSTS = 16000  # keeps both plans inside their /16
IFNAMSIZ = 15  # Linux interface names are at most 15 characters
SLOTS = 256
CONTROL_SLOT_HOSTS = 64  # /30s in a control /24
_CONTROL_PAIRS = CONTROL_NET.num_addresses // 4  # host indices before the block wraps
_DATA_ADDRS = DATA_NET.num_addresses - 2  # usable data addresses (no .0.0, no broadcast)


def address_slot(prefix: str) -> int:
    """The address slot of namespace prefix ``prefix`` (0 for the default ``genie-``)."""
    tag = prefix_tag(prefix)
    return 0 if not tag else 1 + zlib.crc32(tag.encode()) % (SLOTS - 1)


def data_ip(index: int, prefix: str = "genie-") -> str:
    """Data-plane address of emulated host ``index`` of a testbed with namespace ``prefix``."""
    k = (address_slot(prefix) * 256 + index) % _DATA_ADDRS
    return str(DATA_NET.network_address + k + 1)


def control_pair(index: int, prefix: str = "genie-") -> tuple[str, str]:
    """(root-side, host-side) control addresses of emulated host ``index`` (a /30)."""
    k = (address_slot(prefix) * CONTROL_SLOT_HOSTS + index) % _CONTROL_PAIRS
    base = CONTROL_NET.network_address + 4 * k
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
