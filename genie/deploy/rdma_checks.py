"""The RDMA preflight's rules: facts from ``rdma_probe`` in, one ``Check`` per finding out (pure).

Per RDMA device and port a host's jobs will use: the device <-> netdev <-> IP mapping, port
state and link layer, the GID index that carries the host's IP as RoCE v2 (what
NCCL_IB_GID_INDEX must be; RoCE v1 only is a fault), active MTU against the netdev's MTU, PFC
and ECN (notification and reaction point) on the traffic priority where the driver shows them,
firmware and rate; once per host the locked-memory limit and the traffic priority NCCL uses.
Every non-ok finding carries its fix. Malformed facts give one failed row, never an exception.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from genie.deploy.check import Check, Status
from genie.testbed import Host, Testbed
from genie.wire.gid import gid_ip

log = logging.getLogger(__name__)

ROCE_PRIORITY = 3  # the usual lossless RoCE priority: DSCP 26 (NCCL_IB_TC=106) under trust dscp
MEMLOCK_MIN = 64 << 20  # bytes; below this even mid-size messages cannot be registered
IB_MTUS = (4096, 2048, 1024, 512, 256)
ROCE_HEADERS = 96  # GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 (kernel iboe_get_mtu)
RXE_HEADERS = 80  # soft-RoCE's RXE_MAX_HDR_LENGTH


@dataclass(frozen=True)
class NicWant:
    """What the testbed says about one data NIC: label, netdev, IP, RDMA device, rate (B/s)."""

    label: str = ""
    netdev: str | None = None
    ip: str | None = None
    device: str | None = None
    rate: float | None = None


def wants_of(testbed: Testbed, host: Host) -> list[NicWant]:
    """The data NICs of ``host`` as the preflight checks them (rate: its fastest link)."""

    def rate(endpoint: str) -> float | None:
        rates = [lk.rate for lk in testbed.links if endpoint in (lk.a, lk.b)]
        return max(rates) if rates else None

    if not host.nics:
        return [NicWant("", host.nic, host.data_addr, host.rdma_device, rate(host.name))]
    return [
        NicWant(f" {n.name}", n.device, n.data_addr, n.rdma_device, rate(host.endpoint(k)))
        for k, n in enumerate(host.nics)
    ]


def wants_rdma(testbed: Testbed, host: Host) -> bool:
    """Whether ``host`` runs RDMA jobs (an rdma testbed, or an rdma_device named)."""
    return (
        testbed.transport == "rdma"
        or bool(host.rdma_device)
        or any(n.rdma_device for n in host.nics)
    )


def roce_mtu(netdev_mtu: int, headers: int = ROCE_HEADERS) -> int:
    """The largest RDMA MTU a RoCE port carries over a netdev of MTU ``netdev_mtu``."""
    return next((m for m in IB_MTUS if m <= netdev_mtu - headers), 256)


def _bytes(n: int) -> str:
    if n < 0:
        return "unlimited"
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):g} {unit}"
    return f"{n} B"


def _rate_bytes(rate: str) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate)
    return float(m.group(1)) * 1e9 / 8 if m else None


def _is_soft(dev: dict[str, Any]) -> bool:
    """Soft-RoCE: an rxe device, or a virtual one (no bus device) of node type CA."""
    ca = str(dev.get("node_type", "")).startswith("1")
    return "rxe" in dev["name"] or (bool(dev.get("virtual")) and ca)


def _netdevs_of(dev: dict[str, Any]) -> list[str]:
    out = [n for n in dev.get("netdevs") or [] if n]
    if dev.get("parent"):
        out.append(dev["parent"])
    out += [g["ndev"] for p in dev["ports"] for g in p["gids"] if g.get("ndev")]
    return list(dict.fromkeys(out))


def _ips_of(dev: dict[str, Any]) -> list[str]:
    ips = [gid_ip(g["gid"]) for p in dev["ports"] for g in p["gids"] if _v2(g)]
    return list(dict.fromkeys(ip for ip in ips if ip))


def _v2(g: dict[str, Any]) -> bool:
    return str(g.get("type", "")).strip().lower() == "roce v2"


@dataclass
class _Ctx:
    facts: dict[str, Any]
    priority: int
    out: list[Check]

    def add(self, name: str, status: Status, value: str, fix: str = "") -> None:
        self.out.append(Check(name, status, value, fix))


def evaluate_rdma(
    facts: dict[str, Any],
    wants: Sequence[NicWant] = (),
    priority: int | None = None,
    memlock_min: int = MEMLOCK_MIN,
) -> list[Check]:
    """The preflight's checks of one host; ``wants``: its data NICs (none: every device)."""
    ctx = _Ctx(facts, ROCE_PRIORITY, [])
    try:
        ctx.priority = _priority(ctx, priority)
        _devices(ctx, wants)
        _memlock(ctx, memlock_min)
        errors = facts.get("errors") or []
        if errors:
            more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
            ctx.add("rdma probe", "warn", str(errors[0]) + more, "")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        log.debug("malformed RDMA facts", exc_info=True)
        ctx.add(
            "rdma preflight",
            "fail",
            f"malformed facts: {type(exc).__name__}: {exc}"[:300],
            "record the tree again (python -m genie.deploy.rdma_probe / --record DIR)",
        )
    return ctx.out


def _priority(ctx: _Ctx, explicit: int | None) -> int:
    """The traffic priority PFC and ECN must cover; one row says where it came from."""
    nccl = ctx.facts.get("nccl") or {}
    src = ctx.facts.get("nccl_source") or "environment"
    tc_text = nccl.get("NCCL_IB_TC")
    tc: int | None = None
    if tc_text is not None:
        try:
            tc = int(tc_text, 0)
        except ValueError:
            ctx.add("rdma priority", "fail", f"NCCL_IB_TC={tc_text!r} ({src})", "an integer")
    tc_prio = None if tc is None else (tc >> 2) >> 3  # DSCP = TC >> 2; dscp2prio: DSCP // 8
    prio = explicit if explicit is not None else (tc_prio if tc_prio is not None else 3)
    hard = any(  # a RoCE NIC: where PFC and ECN matter
        not _is_soft(d) and any(p.get("link_layer") == "Ethernet" for p in d["ports"])
        for d in ctx.facts.get("devices") or []
    )
    if tc_prio is not None and tc_prio != prio:
        ctx.add(
            "rdma priority",
            "warn",
            f"checked {prio}; NCCL_IB_TC={tc_text} ({src}) sends DSCP {(tc or 0) >> 2} "
            f"= priority {tc_prio}",
            f"NCCL_IB_TC={prio * 32 + 10} in /etc/nccl.conf (DSCP {prio * 8 + 2}), or "
            f"--priority {tc_prio}",
        )
    elif tc_prio is not None:
        ctx.add("rdma priority", "ok", f"{prio} (NCCL_IB_TC={tc_text}, {src})")
    elif hard and explicit is None:
        ctx.add(
            "rdma priority",
            "warn",
            f"checked {prio}; NCCL_IB_TC unset: NCCL sends traffic class 0 (priority 0)",
            f"NCCL_IB_TC={prio * 32 + 10} in /etc/nccl.conf (DSCP {prio * 8 + 2} -> priority "
            f"{prio}), or --priority 0 if priority 0 is your lossless class",
        )
    return prio


def _devices(ctx: _Ctx, wants: Sequence[NicWant]) -> None:
    devs: list[dict[str, Any]] = list(ctx.facts.get("devices") or [])
    if not devs:
        where = (
            "/sys/class/infiniband is empty"
            if ctx.facts.get("infiniband")
            else "no /sys/class/infiniband (no RDMA driver loaded)"
        )
        ctx.add(
            "rdma device",
            "fail",
            where,
            "load the NIC's RDMA driver (mlx5_ib) and apt install rdma-core; or soft-RoCE: "
            "modprobe rdma_rxe && rdma link add genie-rxe0 type rxe netdev IF",
        )
        return
    if not wants:
        for d in devs:
            nd = _netdevs_of(d)
            _device(ctx, d, NicWant("", nd[0] if nd else None))
        return
    names = ", ".join(d["name"] for d in devs)
    for w in wants:
        dev = _resolve(devs, w)
        if dev is None:
            what = (
                f"{w.device} not in /sys/class/infiniband"
                if w.device
                else f"no RDMA device on {w.netdev or w.ip}"
            )
            ctx.add(
                f"rdma device{w.label}",
                "fail",
                f"{what} (have {names})",
                "name the NIC's device with rdma_device in the testbed (rdma link show lists "
                f"device -> netdev), or soft-RoCE: rdma link add genie-rxe0 type rxe netdev "
                f"{w.netdev or 'IF'}",
            )
            continue
        _device(ctx, dev, w)


def _resolve(devs: list[dict[str, Any]], w: NicWant) -> dict[str, Any] | None:
    if w.device:
        return next((d for d in devs if d["name"] == w.device), None)
    if w.netdev:
        hit = next((d for d in devs if w.netdev in _netdevs_of(d)), None)
        if hit is not None:
            return hit
    if w.ip:
        return next((d for d in devs if w.ip in _ips_of(d)), None)
    return devs[0] if len(devs) == 1 else None


def _device(ctx: _Ctx, dev: dict[str, Any], w: NicWant) -> None:
    name = dev["name"]
    soft = _is_soft(dev)
    netdevs = _netdevs_of(dev)
    netdev = w.netdev if w.netdev in netdevs else (netdevs[0] if netdevs else w.netdev)
    ips = _ips_of(dev)
    kind = "soft-RoCE" if soft else (dev.get("driver") or "driver unknown")
    mapping = f"{name} ({kind}) -> {netdev or 'no netdev'} -> {', '.join(ips) or 'no IP'}"
    if w.netdev and netdevs and w.netdev not in netdevs:
        ctx.add(
            f"rdma device{w.label}",
            "fail",
            f"{mapping}; the testbed's nic is {w.netdev}",
            f"set nic = {netdevs[0]!r} or the rdma_device of {w.netdev} in the testbed",
        )
    else:
        ctx.add(f"rdma device{w.label}", "ok", mapping)
    fw = dev.get("fw_ver") or ""
    extra = ", ".join(x for x in (dev.get("hca_type"), dev.get("board_id")) if x)
    if soft:
        ctx.add(f"rdma firmware {name}", "skip", "soft-RoCE: no firmware")
    elif fw:
        ctx.add(f"rdma firmware {name}", "ok", fw + (f" ({extra})" if extra else ""))
    else:
        ctx.add(f"rdma firmware {name}", "skip", "fw_ver not readable")
    ports = dev["ports"]
    if not ports:
        ctx.add(f"rdma port {name}", "fail", "no ports under ports/", "reload the RDMA driver")
        return
    if netdev:
        mine = [p for p in ports if any(g.get("ndev") == netdev for g in p["gids"])]
        ports = mine or ports
    for p in ports:
        _port(ctx, dev, p, netdev, w, soft)


def _port(
    ctx: _Ctx, dev: dict[str, Any], p: dict[str, Any], netdev: str | None, w: NicWant, soft: bool
) -> None:
    where = f"{dev['name']}/{p['port']}"
    ll = p.get("link_layer") or "?"
    state, phys = p.get("state") or "?", p.get("phys_state") or ""
    desc = ", ".join(x for x in (state, phys, ll, p.get("rate")) if x)
    if state == "ACTIVE" and phys in ("", "LinkUp"):
        ctx.add(f"rdma port {where}", "ok", desc)
    elif ll == "InfiniBand" and phys == "LinkUp":
        ctx.add(
            f"rdma port {where}",
            "fail",
            desc,
            "the link is up but no subnet manager configured the port: run opensm on one "
            "node of the fabric (systemctl start opensm) or enable the switch's SM",
        )
    else:
        up = f"ip link set dev {netdev} up; " if ll == "Ethernet" and netdev else ""
        ctx.add(
            f"rdma port {where}",
            "fail",
            desc,
            f"{up}then check the cable, transceiver and switch port (phys_state "
            f"{phys or 'unknown'}; ibstat {dev['name']})",
        )
    have = _rate_bytes(p.get("rate") or "")
    if have and w.rate and have < w.rate * 0.999:
        ctx.add(
            f"rdma rate {where}",
            "warn",
            f"{p.get('rate')} < testbed {w.rate * 8 / 1e9:g} Gbit/s",
            "fix the testbed rate or the cabling/port speed (ethtool IF)",
        )
    if ll == "Ethernet":
        _gid(ctx, dev, p, netdev, w)
        _mtu(ctx, dev, p, netdev, soft)
        if soft:
            ctx.add(
                f"rdma pfc {netdev}", "skip", "soft-RoCE: no PFC or ECN offload (lossy, kernel)"
            )
        else:
            _pfc(ctx, netdev)
            _ecn(ctx, netdev)
    elif ll == "InfiniBand":
        ctx.add(f"rdma gid {where}", "ok", "InfiniBand: LID-routed, GID index 0")
        _ib_mtu(ctx, dev, p)


def _ib_mtu(ctx: _Ctx, dev: dict[str, Any], p: dict[str, Any]) -> None:
    """An InfiniBand port's active MTU is the subnet manager's: below the port's max, say so."""
    where = f"{dev['name']}/{p['port']}"
    info = ((ctx.facts.get("devinfo") or {}).get(dev["name"]) or {}).get(str(p["port"])) or {}
    active, top = info.get("active_mtu"), info.get("max_mtu")
    if active is None:
        ctx.add(f"rdma mtu {where}", "skip", "active MTU unknown (no ibv_devinfo -v)")
    elif top and active < top:
        ctx.add(
            f"rdma mtu {where}",
            "warn",
            f"active MTU {active} < the port's {top}",
            "the subnet manager sets it: mtu=5 (4096) on the partition in opensm's "
            "partitions.conf (or the switch SM's), then restart the SM",
        )
    else:
        ctx.add(f"rdma mtu {where}", "ok", f"active {active}")


def _gid(ctx: _Ctx, dev: dict[str, Any], p: dict[str, Any], netdev: str | None, w: NicWant) -> None:
    where = f"{dev['name']}/{p['port']}"
    gids = p["gids"]
    v2 = [g for g in gids if _v2(g)]
    ipfix = f"ip addr add IP/PREFIX dev {netdev or 'IF'} (RoCE GIDs follow the netdev's addresses)"
    v1fix = (
        f"{dev['name']} offers RoCE v1 only, which is not routable and which NCCL and genie do "
        "not use: update the NIC firmware and driver (ConnectX-4 or later carry RoCE v2), or "
        "on MLNX_OFED set the default RoCE mode: cma_roce_mode -d DEV -p PORT -m 2"
    )
    right: int | None = None
    if not gids:
        ctx.add(f"rdma gid {where}", "fail", "no GIDs", ipfix)
    elif w.ip:
        hit = next((g for g in v2 if gid_ip(g["gid"]) == w.ip), None)
        only_v1 = next((g for g in gids if gid_ip(g["gid"]) == w.ip), None)
        if hit is not None:
            right = hit["index"]
            ctx.add(
                f"rdma gid {where}",
                "ok",
                f"{w.ip} is GID {right} (RoCE v2): NCCL_IB_GID_INDEX={right}",
            )
        elif only_v1 is not None or not v2:
            what = f"GID {only_v1['index']}" if only_v1 is not None else "no GID"
            ctx.add(f"rdma gid {where}", "fail", f"{w.ip}: {what}, RoCE v1 only", v1fix)
        else:
            have = ", ".join(f"{gid_ip(g['gid'])} at {g['index']}" for g in v2 if gid_ip(g["gid"]))
            have = have or "link-local only"
            ctx.add(
                f"rdma gid {where}",
                "fail",
                f"{w.ip} is on no RoCE v2 GID (RoCE v2: {have})",
                f"give {netdev or 'the NIC'} the testbed's data_addr ({ipfix}), or correct "
                "data_addr / rdma_device in the testbed",
            )
    else:
        routable = [g for g in v2 if gid_ip(g["gid"])]
        if routable:
            right = routable[0]["index"]
            desc = ", ".join(f"{gid_ip(g['gid'])} at {g['index']}" for g in routable)
            ctx.add(
                f"rdma gid {where}",
                "ok",
                f"RoCE v2: {desc}: NCCL_IB_GID_INDEX={right}",
            )
        elif v2:
            ctx.add(f"rdma gid {where}", "warn", "RoCE v2 on link-local addresses only", ipfix)
        else:
            ctx.add(f"rdma gid {where}", "fail", "RoCE v1 only (no RoCE v2 GID)", v1fix)
    _nccl_gid(ctx, where, gids, right)


def _nccl_gid(ctx: _Ctx, where: str, gids: list[dict[str, Any]], right: int | None) -> None:
    nccl = ctx.facts.get("nccl") or {}
    text = nccl.get("NCCL_IB_GID_INDEX")
    if text is None or right is None:
        return
    src = ctx.facts.get("nccl_source") or "environment"
    try:
        have = int(text)
    except ValueError:
        have = None
    if have == right:
        ctx.add(f"rdma nccl gid {where}", "ok", f"NCCL_IB_GID_INDEX={have} ({src})")
        return
    g = next((g for g in gids if g["index"] == have), None)
    is_what = f"{g['gid']} ({g.get('type') or 'type unknown'})" if g else "an empty slot"
    ctx.add(
        f"rdma nccl gid {where}",
        "fail",
        f"NCCL_IB_GID_INDEX={text} ({src}) is {is_what}; the host's RoCE v2 GID is {right}",
        f"NCCL_IB_GID_INDEX={right} in {src if src.startswith('/') else '/etc/nccl.conf'}",
    )


def _mtu(ctx: _Ctx, dev: dict[str, Any], p: dict[str, Any], netdev: str | None, soft: bool) -> None:
    where = f"{dev['name']}/{p['port']}"
    nd = (ctx.facts.get("netdevs") or {}).get(netdev or "", {})
    mtu = nd.get("mtu")
    if not mtu:
        ctx.add(f"rdma mtu {where}", "skip", f"no MTU for netdev {netdev}")
        return
    headers = RXE_HEADERS if soft else ROCE_HEADERS
    info = ((ctx.facts.get("devinfo") or {}).get(dev["name"]) or {}).get(str(p["port"])) or {}
    fits = roce_mtu(mtu, headers)
    want = min(fits, info.get("max_mtu") or fits)
    active = info.get("active_mtu")
    big = f"ip link set dev {netdev} mtu {4096 + headers} (or more) here and on the switch ports"
    if active is None:
        ctx.add(
            f"rdma mtu {where}",
            "skip",
            f"active MTU unknown (no ibv_devinfo -v); {netdev} MTU {mtu} carries {fits}",
            "apt install ibverbs-utils (ibv_devinfo), or record genie-tools/ibv_devinfo.txt",
        )
    elif active > fits:
        ctx.add(
            f"rdma mtu {where}",
            "fail",
            f"active MTU {active} > {fits}, what {netdev} MTU {mtu} carries: large RoCE "
            "packets are dropped",
            big,
        )
    elif active < want:
        ctx.add(
            f"rdma mtu {where}",
            "fail",
            f"active MTU {active}, but {netdev} MTU {mtu} carries {want}",
            f"the port did not follow the netdev: set it again (ip link set dev {netdev} mtu "
            f"{mtu}) or reload the driver; ibv_devinfo -v shows max_mtu",
        )
    elif active < 4096:
        ctx.add(
            f"rdma mtu {where}",
            "warn",
            f"active MTU {active} ({netdev} MTU {mtu}; 4096 needs >= {4096 + headers})",
            big,
        )
    else:
        ctx.add(f"rdma mtu {where}", "ok", f"active {active}, {netdev} MTU {mtu}")


def _pfc(ctx: _Ctx, netdev: str | None) -> None:
    prio = ctx.priority
    q = (ctx.facts.get("qos") or {}).get(netdev or "")
    vec = ",".join("1" if i == prio else "0" for i in range(8))
    if not q or q.get("pfc") is None:
        ctx.add(
            f"rdma pfc {netdev}",
            "skip",
            "not readable here (no mlnx_qos or dcb output)",
            f"check by hand: mlnx_qos -i {netdev} or dcb pfc show dev {netdev} (record it as "
            f"genie-tools/mlnx_qos-{netdev}.txt)",
        )
        return
    on = [i for i, v in enumerate(q["pfc"]) if v]
    enabled = ",".join(map(str, on)) or "none"
    trust = q.get("trust")
    desc = f"priority {prio} {'on' if prio in on else 'off'} (enabled: {enabled}"
    desc += f"; trust {trust})" if trust else ")"
    if prio not in on:
        ctx.add(
            f"rdma pfc {netdev}",
            "fail",
            desc + f", from {q.get('source')}",
            f"mlnx_qos -i {netdev} --pfc {vec} --trust dscp (or dcb pfc set dev {netdev} "
            f"prio-pfc {prio}:on), and priority {prio} lossless on the switch ports",
        )
    elif trust == "pcp" and prio != 0:
        ctx.add(
            f"rdma pfc {netdev}",
            "warn",
            desc + ": untagged RoCE traffic is classified by DSCP only under trust dscp",
            f"mlnx_qos -i {netdev} --trust dscp",
        )
    else:
        ctx.add(f"rdma pfc {netdev}", "ok", desc)


def _ecn(ctx: _Ctx, netdev: str | None) -> None:
    prio = ctx.priority
    ecn = ((ctx.facts.get("netdevs") or {}).get(netdev or "") or {}).get("ecn")
    if ecn is None:
        ctx.add(
            f"rdma ecn {netdev}",
            "skip",
            f"not exposed by this driver (no /sys/class/net/{netdev}/ecn)",
            "",
        )
        return
    np_on = (ecn.get("roce_np") or {}).get(str(prio))
    rp_on = (ecn.get("roce_rp") or {}).get(str(prio))
    desc = f"priority {prio}: roce_np {np_on if np_on is not None else '?'}, "
    desc += f"roce_rp {rp_on if rp_on is not None else '?'}"
    if np_on == 1 and rp_on == 1:
        ctx.add(f"rdma ecn {netdev}", "ok", desc)
        return
    why = []
    if np_on != 1:
        why.append("no CNPs sent for marked packets (notification point off)")
    if rp_on != 1:
        why.append("no rate cut on CNPs, DCQCN off (reaction point off)")
    base = f"/sys/class/net/{netdev}/ecn"
    fix = "; ".join(
        f"echo 1 > {base}/{pt}/enable/{prio}"
        for pt, on in (("roce_np", np_on), ("roce_rp", rp_on))
        if on != 1
    )
    ctx.add(
        f"rdma ecn {netdev}",
        "fail",
        desc + ": " + "; ".join(why),
        fix + " (and ECN marking for this priority on the switches)",
    )


def _memlock(ctx: _Ctx, minimum: int) -> None:
    ml = ctx.facts.get("memlock")
    fix = (
        "'* - memlock unlimited' in /etc/security/limits.d/genie.conf and log in again; for "
        "systemd units LimitMEMLOCK=infinity"
    )
    if ml is None:
        ctx.add("memlock", "skip", "no readable /proc/self/limits")
        return
    soft, hard = int(ml["soft"]), int(ml["hard"])
    desc = f"{_bytes(soft)} (hard {_bytes(hard)})"
    if soft < 0:
        ctx.add("memlock", "ok", desc)
    elif ctx.facts.get("euid") == 0:
        ctx.add("memlock", "ok", f"{desc}; root (CAP_IPC_LOCK) is not held to it")
    elif soft < minimum:
        ctx.add(
            "memlock",
            "fail",
            f"{desc} < {_bytes(minimum)}: genie registers each rank's buffers and scratch "
            "(about 3x the largest message)",
            fix,
        )
    else:
        ctx.add("memlock", "ok", f"{desc}: messages up to about {_bytes(soft // 3)}")
