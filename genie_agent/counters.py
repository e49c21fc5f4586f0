"""Reading the NIC and stack counters an agent reports beside every Go (``genie.wire.counters``).

Sources, all bounded (files, names, bytes, the time ``ethtool`` may take):

- ``rdma:DEV/PORT``: every file of ``SYSFS/class/infiniband/DEV/ports/PORT/counters`` and
  ``hw_counters`` (unknown names kept), for the devices behind the agent's data addresses (a
  RoCE v2 GID carrying one of them) and the devices the job names;
- ``ethtool:NETDEV``: the pause counters of those ports' netdevs (``ethtool -S``: names with
  "pause" or "pfc" in them, e.g. ``rx_prio3_pause``, ``tx_prio3_pause_duration``,
  ``rx_pause_ctrl_phy``), when an ``ethtool`` is there;
- ``tcp``: ``PROC/net/snmp`` and ``PROC/net/netstat`` of the agent's network namespace, the
  ``Tcp``, ``TcpExt`` and ``IpExt`` families with nstat's names (``TcpRetransSegs``,
  ``TcpExtTCPTimeouts``, ``IpExtInCEPkts``), on TCP runs.

``Roots`` says where to read: ``sysfs`` (default ``/sys``; ``$GENIE_COUNTERS_SYSFS`` or the
agent's ``--counters-sysfs``), ``proc`` (default ``/proc``) and the ``ethtool`` command
(``$GENIE_ETHTOOL``): a test points them at a tree whose files change during a run. A delta
is after - before; a counter that went down (reset, wrapped) counts from zero.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from genie.wire.counters import (
    HEADLINE,
    MAX_COUNTERS,
    MAX_NAME,
    MAX_SAMPLE_COUNTERS,
    MAX_SAMPLES,
    MAX_SOURCES,
    MAX_VALUE,
    CounterSample,
    CounterSet,
)
from genie.wire.gid import gid_ip

log = logging.getLogger(__name__)

MAX_DEVICES = 16  # verbs devices looked at
MAX_PORTS = 8  # ports of one device
MAX_FILES = 512  # counter files listed per directory
MAX_FILE_BYTES = 64  # a counter file holds one number
MAX_PROC_BYTES = 1 << 20  # /proc/net/snmp or netstat
ETHTOOL_TIMEOUT_S = 2.0
MAX_ETHTOOL_BYTES = 1 << 20
TCP_FAMILIES = ("Tcp", "TcpExt", "IpExt")
ENV_SYSFS = "GENIE_COUNTERS_SYSFS"
ENV_ETHTOOL = "GENIE_ETHTOOL"
_BAD = re.compile(r"[^A-Za-z0-9_.:/+@-]")

Snapshot = dict[str, dict[str, int]]  # source -> name -> value


@dataclass(frozen=True)
class Roots:
    """Where counters are read: the sysfs and procfs roots and the ethtool command."""

    sysfs: str = "/sys"
    proc: str = "/proc"
    ethtool: str = "ethtool"

    @classmethod
    def from_env(cls, sysfs: str | None = None) -> Roots:
        """``sysfs`` (an agent option), else ``$GENIE_COUNTERS_SYSFS``, else /sys; the ethtool
        command from ``$GENIE_ETHTOOL``."""
        return cls(
            sysfs=sysfs or os.environ.get(ENV_SYSFS) or "/sys",
            ethtool=os.environ.get(ENV_ETHTOOL) or "ethtool",
        )


def safe_name(name: str) -> str:
    """``name`` as the wire accepts it: unexpected characters as ``_``, at most MAX_NAME."""
    return _BAD.sub("_", name)[:MAX_NAME] or "_"


def _read_int(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(text) > MAX_FILE_BYTES:
        return None
    try:
        v = int(text.strip() or b"x")
    except ValueError:
        return None
    return v if 0 <= v <= MAX_VALUE else None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))[:MAX_FILES]
    except OSError:
        return []


def _read_text(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace").strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class RdmaPort:
    """One port of a verbs device whose counters are read, and the netdevs behind its GIDs."""

    device: str
    port: int
    netdevs: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        """The counter set's source name."""
        return safe_name(f"rdma:{self.device}/{self.port}")


def rdma_ports(roots: Roots, addrs: Iterable[str], named: Iterable[str] = ()) -> list[RdmaPort]:
    """The ports whose counters an agent reads: those with a GID carrying one of ``addrs`` and
    every port of the devices ``named`` (bounded)."""
    want = {a.strip("[]") for a in addrs}
    names = set(named)
    base = os.path.join(roots.sysfs, "class", "infiniband")
    out: list[RdmaPort] = []
    for dev in _listdir(base)[:MAX_DEVICES]:
        pdir = os.path.join(base, dev, "ports")
        for p in _listdir(pdir)[:MAX_PORTS]:
            if not p.isdigit():
                continue
            gdir = os.path.join(pdir, p, "gids")
            ndir = os.path.join(pdir, p, "gid_attrs", "ndevs")
            hit, netdevs = dev in names, []
            for gi in _listdir(gdir)[:MAX_FILES]:
                if gid_ip(_read_text(os.path.join(gdir, gi), 64)) in want:
                    hit = True
                nd = _read_text(os.path.join(ndir, gi), 64)
                if nd and nd not in netdevs:
                    netdevs.append(nd)
            if hit:
                out.append(RdmaPort(dev, int(p), tuple(netdevs[:4])))
    return out


def read_port(roots: Roots, port: RdmaPort) -> dict[str, int]:
    """A port's ``counters/*`` and ``hw_counters/*`` (a name in both: the hw one as ``hw.NAME``)."""
    out: dict[str, int] = {}
    base = os.path.join(roots.sysfs, "class", "infiniband", port.device, "ports", str(port.port))
    for sub in ("counters", "hw_counters"):
        d = os.path.join(base, sub)
        for name in _listdir(d):
            v = _read_int(os.path.join(d, name))
            if v is None:
                continue
            key = safe_name(name)
            if key in out:
                key = safe_name(f"hw.{name}")
            if len(out) < MAX_COUNTERS:
                out[key] = v
    return out


class EthtoolUnusable(Exception):
    """``ethtool -S`` is not there or refuses this netdev: not worth asking again this job."""


def read_ethtool(roots: Roots, netdev: str) -> dict[str, int] | None:
    """The pause counters ``ethtool -S NETDEV`` prints (None: it took too long this time);
    EthtoolUnusable when there is no ethtool or it fails for this netdev."""
    if not re.fullmatch(r"[A-Za-z0-9_.:@-]{1,15}", netdev):
        raise EthtoolUnusable(f"odd netdev name {netdev!r}")
    try:
        done = subprocess.run(
            [roots.ethtool, "-S", netdev],
            capture_output=True,
            timeout=ETHTOOL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        raise EthtoolUnusable(str(exc)) from None
    if done.returncode != 0:
        raise EthtoolUnusable(f"ethtool -S {netdev}: exit status {done.returncode}")
    out: dict[str, int] = {}
    for line in done.stdout[:MAX_ETHTOOL_BYTES].decode(errors="replace").splitlines():
        name, sep, value = line.strip().partition(":")
        low = name.lower()
        if not sep or not ("pause" in low or "pfc" in low):
            continue
        try:
            v = int(value.strip())
        except ValueError:
            continue
        if 0 <= v <= MAX_VALUE and len(out) < MAX_COUNTERS:
            out[safe_name(name.strip())] = v
    return out


def read_tcp(roots: Roots) -> dict[str, int]:
    """The stack's Tcp, TcpExt and IpExt counters of this network namespace, nstat's names."""
    out: dict[str, int] = {}
    for f in ("snmp", "netstat"):
        lines = _read_text(os.path.join(roots.proc, "net", f), MAX_PROC_BYTES).splitlines()
        for head, vals in zip(lines[::2], lines[1::2], strict=False):
            fam, _, names = head.partition(":")
            fam2, _, values = vals.partition(":")
            if fam != fam2 or fam not in TCP_FAMILIES:
                continue
            for n, v in zip(names.split(), values.split(), strict=False):
                try:
                    x = int(v)
                except ValueError:
                    continue
                if 0 <= x <= MAX_VALUE and len(out) < MAX_COUNTERS:
                    out[safe_name(fam + n)] = x
    return out


@dataclass
class CounterReader:
    """Snapshots of one agent's counters (what a job reads is set by ``configure``)."""

    roots: Roots = field(default_factory=Roots)
    addrs: tuple[str, ...] = ()
    ports: list[RdmaPort] = field(default_factory=list)
    tcp: bool = False
    ethtool_ok: bool = True  # false once ethtool proved unusable: not tried again this job

    def configure(self, transport: str, named: Iterable[str] = ()) -> None:
        """Choose the sources of a job: its RDMA ports; the stack on TCP runs."""
        self.ports = rdma_ports(self.roots, self.addrs, named)
        self.tcp = transport == "tcp"
        self.ethtool_ok = True

    def snapshot(self) -> Snapshot:
        """Every source's counters now (a source that cannot be read is left out)."""
        snap: Snapshot = {}
        for p in self.ports:
            snap[p.source] = read_port(self.roots, p)
            for nd in p.netdevs:
                src = safe_name(f"ethtool:{nd}")
                if src in snap or not self.ethtool_ok:
                    continue
                try:
                    got = read_ethtool(self.roots, nd)
                except EthtoolUnusable as exc:
                    log.debug("counters: no ethtool counters: %s", exc)
                    self.ethtool_ok = False
                    continue
                if got is not None:
                    snap[src] = got
        if self.tcp:
            got = read_tcp(self.roots)
            if got:
                snap["tcp"] = got
        return dict(list(snap.items())[:MAX_SOURCES])


def deltas(before: Snapshot, after: Snapshot) -> list[CounterSet]:
    """Per source, after - before: the headline counters always, any other that moved (a counter
    that went down, or is new, counts from zero)."""
    keep = {n for _, names in HEADLINE for n in names}
    out = []
    for src, now in after.items():
        was = before.get(src)
        if was is None:
            continue
        d = {}
        for k, v in now.items():
            x = v - was[k] if k in was and v >= was[k] else v
            if x or k in keep:
                d[k] = x
        out.append(CounterSet(source=src, deltas=d))
    return out


def _delta(was: int | None, now: int) -> int:
    return now - was if was is not None and now >= was else now


def with_samples(
    sets: list[CounterSet], before: Snapshot, samples: list[tuple[int, Snapshot]]
) -> list[CounterSet]:
    """``sets`` with the samples of a long Go: per source and sample (``t_ms``, snapshot), what
    moved since ``before`` (headline names first, at most MAX_SAMPLE_COUNTERS names)."""
    keep = [n for _, names in HEADLINE for n in names]
    out = []
    for cs in sets:
        was = before.get(cs.source, {})
        got = []
        for t_ms, snap in samples[-MAX_SAMPLES:]:
            now = snap.get(cs.source)
            if now is None:
                continue
            moved = {k: _delta(was.get(k), v) for k, v in now.items()}
            moved = {k: v for k, v in moved.items() if v}
            names = [k for k in keep if k in moved] + sorted(k for k in moved if k not in keep)
            d = {k: moved[k] for k in names[:MAX_SAMPLE_COUNTERS]}
            got.append(CounterSample(t_ms=max(0, t_ms), deltas=d))
        out.append(msgspec.structs.replace(cs, samples=got) if got else cs)
    return out
