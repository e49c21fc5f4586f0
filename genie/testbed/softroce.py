"""Soft-RoCE (the ``rdma_rxe`` kernel driver): check the kernel, bring ``genie-`` rxe links up/down.

Describe first, act second: ``kernel_support`` reads what the kernel offers (sysfs, the module
tree, modprobe, the ``rdma`` tool) without changing anything; ``up_commands``/``down_commands``
build the command lists as data (tested as strings); ``apply`` runs them and turns a failed
command into one ``TestbedError`` line. Every link genie adds is named ``genie-rxe<N>``, and
``down`` removes exactly the rxe links with that prefix.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from genie.errors import TestbedError

PREFIX = "genie-rxe"
MODULE = "rdma_rxe"


@dataclass(frozen=True)
class KernelSupport:
    """What this kernel and host offer for soft-RoCE."""

    release: str
    rxe_loaded: bool  # /sys/module/rdma_rxe exists
    rxe_module: str  # path of rdma_rxe.ko* under /lib/modules/<release>, "" if none found
    modules_dir: bool  # /lib/modules/<release> exists
    modprobe: str  # path of modprobe, "" if absent
    rdma_tool: str  # path of iproute2's ``rdma``, "" if absent
    infiniband: bool  # /sys/class/infiniband exists (the RDMA core is in the kernel)

    @property
    def needs_modprobe(self) -> bool:
        """True when rdma_rxe is a module file not loaded yet."""
        return not self.rxe_loaded and bool(self.rxe_module)

    def problem(self) -> str:
        """ "" if ``up`` can work, else one line saying plainly why not."""
        if not self.rdma_tool:
            return "the `rdma` tool (iproute2) is not installed: apt-get install iproute2"
        if self.rxe_loaded or (self.rxe_module and self.modprobe):
            return ""
        if self.infiniband and not self.rxe_module:  # rxe may be built in: let `rdma` try
            return ""
        why = []
        if not self.infiniband:
            why.append("no /sys/class/infiniband (no RDMA core)")
        if not self.modules_dir:
            why.append(f"no /lib/modules/{self.release} (no loadable modules)")
        elif not self.rxe_module:
            why.append(f"no {MODULE} module under /lib/modules/{self.release}")
        if not self.modprobe:
            why.append("no modprobe")
        return (
            f"this kernel ({self.release}) has no soft-RoCE support: {', '.join(why)}; use a "
            f"kernel built with CONFIG_RDMA_RXE (most distribution kernels are) or an RDMA NIC"
        )


def kernel_support(root: str = "/") -> KernelSupport:
    """Read the kernel's soft-RoCE support (nothing is changed)."""
    release = platform.release()
    mods = os.path.join(root, "lib/modules", release)
    found = ""
    if os.path.isdir(mods):
        for dirpath, _dirs, files in os.walk(mods):
            hit = next((f for f in files if f.startswith(MODULE + ".ko")), None)
            if hit:
                found = os.path.join(dirpath, hit)
                break
    return KernelSupport(
        release=release,
        rxe_loaded=os.path.isdir(os.path.join(root, "sys/module", MODULE)),
        rxe_module=found,
        modules_dir=os.path.isdir(mods),
        modprobe=shutil.which("modprobe") or "",
        rdma_tool=shutil.which("rdma") or "",
        infiniband=os.path.isdir(os.path.join(root, "sys/class/infiniband")),
    )


def link_name(index: int = 0) -> str:
    """The name of genie's ``index``-th rxe link."""
    return f"{PREFIX}{index}"


def up_commands(
    netdev: str, existing: Sequence[dict], loaded: bool, index: int | None = None
) -> list:
    """Commands that load rdma_rxe (unless loaded) and add ``genie-rxe<index>`` on ``netdev``
    (``index`` None: the lowest one no existing link has, so a second netdev gets its own).

    Nothing is added when an rxe link on ``netdev`` exists already (``up`` is idempotent).
    """
    if not netdev or "/" in netdev or netdev.startswith("-"):
        raise TestbedError(f"bad network device name {netdev!r}")
    if any(link.get("netdev") == netdev for link in existing):
        return []
    if index is None:
        taken = {link.get("name") for link in existing}
        index = next(i for i in range(len(taken) + 1) if link_name(i) not in taken)
    cmds = [] if loaded else [["modprobe", MODULE]]
    cmds.append(["rdma", "link", "add", link_name(index), "type", "rxe", "netdev", netdev])
    return cmds


def down_commands(existing: Sequence[dict]) -> list:
    """Commands that delete every rxe link genie added (name starts with ``genie-rxe``)."""
    names = sorted({link["name"] for link in existing if link["name"].startswith(PREFIX)})
    return [["rdma", "link", "delete", n] for n in names]


def parse_links(text: str) -> list[dict]:
    """``rdma -j link show`` output -> [{name, port, state, netdev}]."""
    text = text.strip()
    if not text:
        return []
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TestbedError(f"cannot read `rdma -j link show` output: {exc}") from None
    return [
        {
            "name": str(r.get("ifname", "")),
            "port": int(r.get("port", 0)),
            "state": str(r.get("state", "")),
            "netdev": str(r.get("netdev", "")),
        }
        for r in rows
        if isinstance(r, dict)
    ]


Runner = Callable[[list[str]], subprocess.CompletedProcess]


def run_command(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run one command (bounded in time), capturing its output."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TestbedError(f"`{' '.join(cmd)}` failed: {exc}") from None


def list_links(run: Runner = run_command) -> list[dict]:
    """The host's RDMA links (empty when the RDMA core is absent)."""
    if not shutil.which("rdma"):
        return []
    out = run(["rdma", "-j", "link", "show"])
    if out.returncode != 0:
        return []  # no RDMA netlink family: the kernel has no RDMA core, so no links
    return parse_links(out.stdout)


def apply(cmds: Sequence[list[str]], run: Runner = run_command) -> None:
    """Run commands in order; the first failure is one line naming the command and its error."""
    for cmd in cmds:
        out = run(cmd)
        if out.returncode != 0:
            err = (out.stderr or out.stdout).strip().splitlines()
            raise TestbedError(
                f"`{' '.join(cmd)}` failed (exit {out.returncode}): {err[-1] if err else ''}"
            )


def netdev_exists(netdev: str, root: str = "/") -> bool:
    """True if ``netdev`` is a network device of this host."""
    return os.path.isdir(os.path.join(root, "sys/class/net", netdev))
