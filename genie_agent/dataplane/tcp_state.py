"""The TCP conditions of a job's data connections: set what the job asks, read back what is in
force, count retransmissions.

``set_congestion`` puts a socket on the job's congestion control (``TCP_CONGESTION``), the first
of a preference list the kernel accepts; none accepted is one line naming what this host allows
(``tcp_allowed_congestion_control``, or every available one with CAP_NET_ADMIN).
``conditions`` reads back, for the job's sockets and this host (its network namespace), every
setting a measurement depends on; ``retransmits`` sums the sockets' retransmitted segments
(``TCP_INFO``'s ``tcpi_total_retrans``).
"""

from __future__ import annotations

import errno
import json
import platform
import shutil
import socket
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

from genie.errors import TransportError
from genie.wire.messages import WireConditions

PROC = Path("/proc/sys/net/ipv4")
SYSCTLS = (
    "tcp_congestion_control",
    "tcp_allowed_congestion_control",
    "tcp_available_congestion_control",
    "tcp_ecn",
    "tcp_slow_start_after_idle",
    "tcp_rmem",
    "tcp_wmem",
    "tcp_no_metrics_save",
    "fib_multipath_hash_policy",
)
TCP_INFO_RETRANS = struct.Struct("I")  # tcpi_total_retrans: the 24th u32 after 8 bytes of u8
TCP_INFO_RETRANS_AT = 8 + 23 * 4
TC_TIMEOUT_S = 2.0


def sysctl(name: str) -> str:
    """An ipv4 sysctl of this network namespace ("" where unreadable)."""
    try:
        return " ".join((PROC / name).read_text().split())
    except OSError:
        return ""


def set_congestion(sock: socket.socket, wanted: str) -> str:
    """Put ``sock`` on the first congestion control of ``wanted`` ("cubic,reno": a preference
    list) the kernel accepts; return it. None accepted is one TransportError line."""
    names = [n for n in wanted.split(",") if n]
    last: OSError | None = None
    for name in names:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
            return name
        except OSError as exc:
            last = exc
    allowed = sysctl("tcp_allowed_congestion_control") or "?"
    available = sysctl("tcp_available_congestion_control") or "?"
    why = "not allowed here" if last is not None and last.errno == errno.EPERM else "unknown"
    raise TransportError(
        f"congestion control {wanted!r} refused ({why}): this host allows {allowed} "
        f"(net.ipv4.tcp_allowed_congestion_control; with CAP_NET_ADMIN any of {available})"
    )


def congestion(sock: socket.socket) -> str:
    """The congestion control ``sock`` runs."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def retransmits(socks: Sequence[socket.socket]) -> int:
    """Segments ``socks`` retransmitted so far (-1 when the kernel does not say)."""
    total = 0
    for s in socks:
        try:
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_RETRANS_AT + 4)
        except OSError:
            return -1
        if len(info) < TCP_INFO_RETRANS_AT + 4:
            return -1
        total += TCP_INFO_RETRANS.unpack_from(info, TCP_INFO_RETRANS_AT)[0]
    return total


def _json_rows(tool: str, *args: str) -> list:
    """What ``tool *args`` prints as JSON ([] without the tool, on failure or bad output)."""
    path = shutil.which(tool)
    if path is None:
        return []
    try:
        out = subprocess.run(
            [path, *args], capture_output=True, text=True, timeout=TC_TIMEOUT_S, check=False
        ).stdout
        rows = json.loads(out or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return rows if isinstance(rows, list) else []


def _qdisc(dev: str) -> str:
    """The root qdisc of ``dev`` as ``tc`` shows it ("" without tc)."""
    rows = _json_rows("tc", "-j", "qdisc", "show", "dev", dev, "root")
    if not rows:
        return ""
    q = rows[0]
    opts = q.get("options", {})
    units = {"rate": "B/s", "peakrate": "B/s", "burst": "B", "limit": "B"}  # tc -j: bytes
    extra = " ".join(f"{k} {opts[k]} {u}" for k, u in units.items() if k in opts)
    return f"{q.get('kind', '?')} {extra}".strip()


OFFLOADS = ("gso_max_size", "gso_max_segs", "tso_max_size", "gro_max_size")  # ip -d link, bytes


def _offloads(dev: str) -> dict[str, str]:
    """The segmentation offload limits of ``dev`` as ``ip -d -j link`` reports them ({} without
    ip or where the kernel does not say)."""
    rows = _json_rows("ip", "-d", "-j", "link", "show", "dev", dev)
    if not rows or not isinstance(rows[0], dict):
        return {}
    return {k: str(rows[0][k]) for k in OFFLOADS if isinstance(rows[0].get(k), int)}


def _nic_of(addr: str) -> str | None:
    """The interface holding ``addr`` (None where none does)."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == addr for a in addrs):
            return name
    return None


def conditions(socks: Sequence[socket.socket], addrs: Sequence[str]) -> WireConditions:
    """What the job's data sockets and this host run under, read back."""
    import psutil

    cc, snd, rcv, mss = set(), set(), set(), set()
    for s in socks:
        try:
            cc.add(congestion(s))
            snd.add(s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
            rcv.add(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
            mss.add(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))
        except OSError:
            continue
    nics: dict[str, dict[str, str]] = {}
    stats = psutil.net_if_stats()
    for a in addrs:
        dev = _nic_of(a)
        if dev is None or dev in nics:
            continue
        st = stats.get(dev)
        nics[dev] = {"mtu": str(st.mtu) if st else "", "qdisc": _qdisc(dev), **_offloads(dev)}
    return WireConditions(
        congestion=sorted(cc),
        sndbuf=sorted(snd),
        rcvbuf=sorted(rcv),
        mss=sorted(mss),
        kernel=platform.release(),
        sysctl={k: sysctl(k) for k in SYSCTLS},
        nics=nics,
    )
