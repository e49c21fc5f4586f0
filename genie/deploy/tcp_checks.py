"""``genie hosts check``'s TCP rows: can the agent run the testbed's ``[tcp]`` on a lab host?

The agent sets congestion control on every data socket itself (``TCP_CONGESTION``): an
unprivileged agent may use only ``net.ipv4.tcp_allowed_congestion_control``, root any loaded
algorithm. ECN, slow start after idle and the socket buffer limits are host-wide sysctls that
genie does not change on a lab host: they are compared with the testbed's and each difference
named with its fix (every run records what was in force either way). Pure: facts in, checks out.
"""

from __future__ import annotations

from typing import Any

from genie.deploy.check import Check
from genie.testbed import Testbed

ECN = {"0": "off", "1": "on", "2": "passive"}  # net.ipv4.tcp_ecn
ECN_VALUE = {v: k for k, v in ECN.items()}


def tcp_checks(testbed: Testbed, facts: dict[str, Any]) -> list[Check]:
    """The congestion control, ECN, slow start and buffer rows of one host."""
    tcp = facts.get("tcp")
    if not isinstance(tcp, dict) or not tcp.get("tcp_available_congestion_control"):
        return [Check("tcp", "skip", "no net.ipv4 sysctls readable (not Linux?)")]
    return [
        _congestion(testbed, tcp),
        *_sysctl_rows(testbed, tcp),
    ]


def _words(value: object) -> list[str]:
    return str(value or "").split()


def _congestion(testbed: Testbed, tcp: dict[str, Any]) -> Check:
    wanted = testbed.tcp.congestion_control.split(",")
    loaded = _words(tcp.get("tcp_available_congestion_control"))
    allowed = _words(tcp.get("tcp_allowed_congestion_control"))
    root = tcp.get("euid") == 0
    usable = loaded if root else [c for c in allowed if c in loaded]
    who = "root: any loaded algorithm" if root else f"allowed: {' '.join(allowed) or 'none'}"
    first = next((c for c in wanted if c in usable), None)
    if first is not None:
        return Check("tcp congestion", "ok", f"{first} per data socket ({who})")
    present = next((c for c in wanted if c in loaded), None)
    if present is not None:
        return Check(
            "tcp congestion",
            "fail",
            f"{present} is loaded but not allowed for the agent's user ({who})",
            f'sysctl -w net.ipv4.tcp_allowed_congestion_control="{" ".join([*allowed, present])}"'
            " (or run the agent as root)",
        )
    return Check(
        "tcp congestion",
        "fail",
        f"none of {','.join(wanted)} loaded (loaded: {' '.join(loaded)})",
        f"modprobe tcp_{wanted[0]}",
    )


def _sysctl_rows(testbed: Testbed, tcp: dict[str, Any]) -> list[Check]:
    want = testbed.tcp
    rows = []
    ecn = str(tcp.get("tcp_ecn"))
    rows.append(
        _compare("tcp ecn", ECN.get(ecn, ecn), want.ecn, f"net.ipv4.tcp_ecn={ECN_VALUE[want.ecn]}")
    )
    sst = str(tcp.get("tcp_slow_start_after_idle"))
    want_sst = "1" if want.slow_start_after_idle else "0"
    rows.append(
        _compare(
            "tcp slow start after idle",
            {"0": "off", "1": "on"}.get(sst, sst),
            "on" if want.slow_start_after_idle else "off",
            f"net.ipv4.tcp_slow_start_after_idle={want_sst}",
        )
    )
    if want.buffer_max is not None:
        for key in ("tcp_rmem", "tcp_wmem"):
            parts = _words(tcp.get(key))
            have = parts[-1] + " B" if len(parts) == 3 else "unreadable"
            fix = (
                f'net.ipv4.{key}="{parts[0]} {min(int(parts[1]), want.buffer_max)} '
                f'{want.buffer_max}"'
                if len(parts) == 3 and all(p.isdigit() for p in parts)
                else f"net.ipv4.{key}"
            )
            rows.append(_compare(f"tcp {key} max", have, f"{want.buffer_max} B", fix))
    return rows


def _compare(name: str, have: str, want: str, setting: str) -> Check:
    if have == want:
        return Check(name, "ok", have)
    return Check(
        name,
        "warn",
        f"{have}, testbed {want} (runs record what is in force)",
        f"sysctl -w {setting}",
    )
