"""Pure RDMA connection planning: devices from sysfs, the QP state machine, the facts exchange.

Nothing here imports pyverbs, so every rule is testable on a machine without RDMA. Read it in
the order a connection is made:

1. ``find_devices`` lists verbs devices from ``/sys/class/infiniband`` (ports, state, MTU, GIDs
   with their type and network device); ``choose_port`` picks the device/port/GID to use: the
   one named in the options, else the one whose RoCE v2 GID carries the agent's data address.
   No device at all is ``NoRdmaDevice`` with one line saying how to get one (soft-RoCE).
2. A queue pair is created in RESET and walks ``QP_PATH``: ``init_attrs`` (port, access flags),
   then, once the peer's ``QpFacts`` are known, ``rtr_attrs`` (peer qpn/psn, path MTU, the
   address vector: GID + GID index and the GRH's traffic class for RoCE, LID for InfiniBand),
   then ``rts_attrs`` (own psn, timeouts, retries). Each returns the attribute values as plain
   data; the verbs module only copies them into ``QPAttr`` and calls ``modify``.
3. The exchange: each side sends its ``QpFacts`` (qpn, psn, gid, lid, rkey, address, length,
   MTU and the landing slots of its RECV steps) as one length-prefixed msgpack frame on the
   job's authenticated TCP connection and reads the peer's (``exchange_facts``: all sends
   first, each in its own thread, then all reads, so no order of pairs can deadlock).
4. On the wire, every data work request carries a 32-bit immediate (``imm_data``): the
   receiver's step index and the iteration's low bits (an op list: the program's); ``imm_ready``
   is the credit a receiver gives for the next use of a program (its scratch may be overwritten
   again).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import msgspec

from genie.collectives.program import Op
from genie.errors import TransportError
from genie.wire.gid import gid_ip
from genie.wire.messages import QpFacts, RdmaOptions, WireConditions
from genie_agent.plan import RankPlan

SYS_IB = "/sys/class/infiniband"
SOFTROCE_HINT = "genie testbed softroce up --netdev IF"
MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}  # enum ibv_mtu
QP_PATH = ("RESET", "INIT", "RTR", "RTS")
MODES = ("write_imm", "send")
# enum ibv_wc_status, in ABI order (libibverbs ibv_wc_status_str says the same words)
WC_STATUS = (
    "success",
    "local length error",
    "local QP operation error",
    "local EE context operation error",
    "local protection error",
    "WR flushed",
    "memory window bind error",
    "bad response error",
    "local access error",
    "remote invalid request error",
    "remote access error",
    "remote operation error",
    "transport retry counter exceeded",
    "RNR retry counter exceeded",
    "local RDD violation error",
    "remote invalid RD request",
    "operation aborted",
    "invalid EE context number",
    "invalid EE context state",
    "fatal error",
    "response timeout error",
    "general error",
)
IMM_READY = 1 << 31  # immediate of a credit message: "ready for use N of program P"
IMM_STEP_BITS = 21  # receiver step index (< 2M; the agent limit is 1M steps)
IMM_ITER_MASK = (1 << (31 - IMM_STEP_BITS)) - 1
ACCESS_FLAGS = ("local_write", "remote_write")  # what a peer may do to our scratch
FRAME = struct.Struct("<I")
MAX_FACTS_BYTES = 64 << 20
MAX_QPS = 16  # queue pairs per connection (each one CQ share and receive ring per rank pair)
MAX_TRAFFIC_CLASS = 255  # the GRH's traffic class is one byte (DSCP in its upper six bits)


class NoRdmaDevice(TransportError):
    """No usable RDMA device on this host (the message says how to get one)."""


def wc_status_name(status: int) -> str:
    """The verbs words for a work-completion status number."""
    return WC_STATUS[status] if 0 <= status < len(WC_STATUS) else f"status {status}"


# ---- 1. devices ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Gid:
    """One GID table entry of a port."""

    index: int
    gid: str  # "fe80:0000:...": as sysfs prints it
    kind: str = ""  # "IB/RoCE v1" or "RoCE v2" (sysfs gid_attrs/types)
    netdev: str = ""  # network device behind a RoCE GID

    def ip(self) -> str:
        """The IP address a RoCE GID encodes ("" for link-local or non-IP GIDs)."""
        return gid_ip(self.gid)


@dataclass(frozen=True)
class Port:
    """One port of a verbs device."""

    num: int
    state: str  # "ACTIVE", "DOWN", ...
    link_layer: str  # "Ethernet" (RoCE) or "InfiniBand"
    lid: int = 0
    gids: tuple[Gid, ...] = ()


@dataclass(frozen=True)
class Device:
    """One verbs device as sysfs shows it."""

    name: str
    ports: tuple[Port, ...] = field(default_factory=tuple)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def find_devices(root: str = SYS_IB) -> list[Device]:
    """Every verbs device under ``root`` with its ports and non-zero GIDs."""
    if not os.path.isdir(root):
        return []
    out = []
    for name in sorted(os.listdir(root)):
        ports = []
        pdir = os.path.join(root, name, "ports")
        for pnum in sorted(os.listdir(pdir) if os.path.isdir(pdir) else [], key=_num):
            base = os.path.join(pdir, pnum)
            gids = []
            gdir = os.path.join(base, "gids")
            for gi in sorted(os.listdir(gdir) if os.path.isdir(gdir) else [], key=_num):
                val = _read(os.path.join(gdir, gi))
                if not val or not val.replace(":", "").strip("0"):
                    continue
                attrs = os.path.join(base, "gid_attrs")
                gids.append(
                    Gid(
                        int(gi),
                        val,
                        _read(os.path.join(attrs, "types", gi)),
                        _read(os.path.join(attrs, "ndevs", gi)),
                    )
                )
            lid = _read(os.path.join(base, "lid"))
            ports.append(
                Port(
                    num=int(pnum),
                    state=_read(os.path.join(base, "state")).split(":")[-1].strip(),
                    link_layer=_read(os.path.join(base, "link_layer")),
                    lid=int(lid, 16) if lid.startswith("0x") else int(lid or 0),
                    gids=tuple(gids),
                )
            )
        out.append(Device(name, tuple(ports)))
    return out


def _num(s: str) -> int:
    return int(s) if s.isdigit() else 1 << 30


def no_device_message(root: str = SYS_IB) -> str:
    """One line: why there is no RDMA device here and how to get one."""
    why = (
        f"{root} does not exist (the kernel has no RDMA support loaded)"
        if not os.path.isdir(root)
        else f"{root} is empty"
    )
    return (
        f"no RDMA device found: {why}; get one with `{SOFTROCE_HINT}` (soft-RoCE, needs the "
        f"rdma_rxe kernel module) or install an RDMA NIC, or run the job with transport tcp"
    )


@dataclass(frozen=True)
class Choice:
    """The device, port and GID index a job's queue pairs use."""

    device: str
    port: int
    gid_index: int
    link_layer: str


def choose_port(devices: list[Device], opts: RdmaOptions, data_addr: str) -> Choice:
    """Pick device/port/GID: by name from ``opts``, else the RoCE v2 GID of ``data_addr``."""
    if not devices:
        raise NoRdmaDevice(no_device_message())
    if opts.device:
        named = [d for d in devices if d.name == opts.device]
        if not named:
            raise NoRdmaDevice(
                f"RDMA device {opts.device!r} not found (have {', '.join(d.name for d in devices)})"
            )
        devices = named
    candidates = [(d, p) for d in devices for p in d.ports if not opts.device or p.num == opts.port]
    if not candidates:
        raise NoRdmaDevice(f"RDMA device {opts.device!r} has no port {opts.port}")
    want = data_addr.strip("[]")

    def pick(d: Device, p: Port) -> Choice | None:
        if opts.gid_index >= 0:
            return Choice(d.name, p.num, opts.gid_index, p.link_layer)
        if p.link_layer == "InfiniBand":
            return Choice(d.name, p.num, 0, p.link_layer)
        v2 = [g for g in p.gids if g.kind.lower() == "roce v2"]
        for g in v2:
            if g.ip() == want:
                return Choice(d.name, p.num, g.index, p.link_layer)
        if opts.device and v2:  # named device: its first RoCE v2 GID with an IP
            with_ip = [g for g in v2 if g.ip()] or v2
            return Choice(d.name, p.num, with_ip[0].index, p.link_layer)
        return None

    for d, p in candidates:
        c = pick(d, p)
        if c is not None:
            if p.state and p.state != "ACTIVE":
                raise TransportError(f"RDMA device {d.name} port {p.num} is {p.state}, not ACTIVE")
            return c
    have = "; ".join(
        f"{d.name}/{p.num}: " + (", ".join(g.ip() or g.gid for g in p.gids) or "no GIDs")
        for d, p in candidates
    )
    raise NoRdmaDevice(
        f"no RDMA device carries the data address {want} in a RoCE v2 GID ({have}); name one "
        f"with the testbed's rdma_device"
    )


# ---- 2. the queue-pair state machine -------------------------------------------------------
def mtu_enum(nbytes: int) -> int:
    """The ibv_mtu enum value of an MTU in bytes."""
    if nbytes not in MTU_ENUM:
        raise TransportError(f"RDMA MTU {nbytes} is not one of {sorted(MTU_ENUM)}")
    return MTU_ENUM[nbytes]


def path_mtu(local: int, remote: int, want: int = 0) -> int:
    """The path MTU in bytes: the smaller active MTU of both ends, or ``want`` if smaller."""
    mtu = min(local, remote)
    if want:
        mtu_enum(want)
        mtu = min(mtu, want)
    return max(m for m in MTU_ENUM if m <= mtu) if mtu >= 256 else 256


def init_attrs(port: int) -> dict[str, int | str]:
    """RESET -> INIT: the port, partition key 0, and remote write access to our memory."""
    return {"qp_state": "INIT", "pkey_index": 0, "port_num": port, "access": "remote_write"}


def rtr_attrs(
    mine: QpFacts, peer: QpFacts, choice: Choice, opts: RdmaOptions
) -> dict[str, int | str]:
    """INIT -> RTR: where the peer is (qpn, psn, address vector) and the path MTU."""
    roce = choice.link_layer != "InfiniBand"
    return {
        "qp_state": "RTR",
        "path_mtu": path_mtu(mine.mtu, peer.mtu, opts.mtu),
        "dest_qp_num": peer.qpn,
        "rq_psn": peer.psn,
        "max_dest_rd_atomic": 1,
        "min_rnr_timer": 1,  # 0.01 ms: a receiver short of posted receives is retried fast
        "is_global": int(roce),  # RoCE needs a GRH: the peer's GID and our GID index
        "dgid": peer.gid,
        "sgid_index": choice.gid_index,
        "hop_limit": 64,
        "traffic_class": opts.traffic_class,  # RoCE: DSCP = traffic_class >> 2 (NCCL_IB_TC)
        "dlid": 0 if roce else peer.lid,
        "port_num": choice.port,
    }


def rts_attrs(mine: QpFacts, opts: RdmaOptions) -> dict[str, int | str]:
    """RTR -> RTS: our send psn, ACK timeout and retry counts (RNR retried without limit)."""
    return {
        "qp_state": "RTS",
        "sq_psn": mine.psn,
        "timeout": opts.timeout,
        "retry_cnt": opts.retry,
        "rnr_retry": 7,
        "max_rd_atomic": 1,
    }


def gid_hex(raw: str) -> str:
    """A GID as 32 hex digits, from "fe80:0000:..." or "fe80::..." forms."""
    try:
        return ipaddress.IPv6Address(raw).packed.hex()
    except ValueError:
        h = raw.replace(":", "")
        if len(h) != 32:
            raise TransportError(f"bad GID {raw!r}") from None
        return h.lower()


def gid_text(hex32: str) -> str:
    """A GID as verbs prints it: eight groups of four hex digits."""
    return ":".join(hex32[i : i + 4] for i in range(0, 32, 4))


# ---- 3. the exchange ------------------------------------------------------------------------
def recv_slots(plans: dict[int, RankPlan], peer: int) -> list[tuple[int, int, int, int, int, int]]:
    """Landing slots of every RECV step from ``peer``: (program, tag, seq, step, offset, bytes).

    Offsets are into the rank's one scratch region, which holds every program's scratch back
    to back in program order (``scratch_bases``).
    """
    bases = scratch_bases(plans)
    out = []
    for p in sorted(plans):
        plan = plans[p]
        for i, st in enumerate(plan.steps):
            if st.op == Op.RECV and plan.peer_global[i] == peer:
                off = bases[p] + plan.scratch_offset[i]
                out.append((p, st.tag, plan.seq[i], i, off, st.nbytes))
    return out


def scratch_bases(plans: dict[int, RankPlan]) -> dict[int, int]:
    """Where each program's scratch starts in the rank's scratch region."""
    bases, off = {}, 0
    for p in sorted(plans):
        bases[p] = off
        off += plans[p].scratch_bytes
    return bases


def send_targets(
    plans: dict[int, RankPlan], peer: int, facts: QpFacts
) -> dict[tuple[int, int], tuple[int, int]]:
    """Per (program, my SEND step to ``peer``): (peer's step index, remote address).

    The k-th SEND with tag t meets the peer's k-th RECV from me with tag t; a SEND without a
    matching slot (or of another size) means the programs differ and is refused.
    """
    slots = {(p, tag, seq): (step, off, n) for p, tag, seq, step, off, n in facts.slots}
    out = {}
    for p in sorted(plans):
        plan = plans[p]
        for i, st in enumerate(plan.steps):
            if st.op != Op.SEND or plan.peer_global[i] != peer:
                continue
            hit = slots.pop((p, st.tag, plan.seq[i]), None)
            if hit is None or hit[2] != st.nbytes:
                raise TransportError(
                    f"rank {plan.rank}: send {i} to rank {peer} (program {p}, tag {st.tag}) "
                    f"matches no receive of that rank"
                )
            out[(p, i)] = (hit[0], facts.address + hit[1])
    if slots:
        p, tag, seq = next(iter(slots))
        raise TransportError(
            f"rank {peer} expects a message from rank {facts.dst} (program {p}, tag {tag}, "
            f"seq {seq}) that this rank never sends"
        )
    return out


_facts_enc = msgspec.msgpack.Encoder()
_facts_dec = msgspec.msgpack.Decoder(QpFacts)


def send_facts(sock: socket.socket, mine: QpFacts) -> None:
    """Send our facts as one length-prefixed msgpack frame."""
    body = _facts_enc.encode(mine)
    try:
        sock.sendall(FRAME.pack(len(body)) + body)
    except OSError as exc:
        raise TransportError(f"queue-pair exchange with rank {mine.dst} failed: {exc}") from None


def recv_facts(sock: socket.socket, mine: QpFacts, timeout_s: float) -> QpFacts:
    """Read the peer's facts and check they are for this pair."""
    sock.settimeout(timeout_s)
    try:
        (n,) = FRAME.unpack(_read_exact(sock, FRAME.size))
        if n > MAX_FACTS_BYTES:
            raise TransportError(f"queue-pair facts of {n} bytes from rank {mine.dst}")
        peer = _facts_dec.decode(_read_exact(sock, n))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TransportError(f"queue-pair exchange with rank {mine.dst} failed: {exc}") from None
    finally:
        sock.settimeout(None)
    if (peer.src, peer.dst) != (mine.dst, mine.src):
        raise TransportError(
            f"queue-pair exchange: expected facts of rank {mine.dst} for {mine.src}, "
            f"got {peer.src} for {peer.dst}"
        )
    return peer


def exchange_facts(pairs: list[tuple[socket.socket, QpFacts]], timeout_s: float) -> list[QpFacts]:
    """Send every pair's facts (one thread each, so no order of pairs can deadlock), read all."""
    errors: list[TransportError] = []

    def send(sock: socket.socket, mine: QpFacts) -> None:
        try:
            send_facts(sock, mine)
        except TransportError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send, args=p, daemon=True) for p in pairs]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    try:
        got = [recv_facts(s, m, max(0.05, deadline - time.monotonic())) for s, m in pairs]
    finally:
        for t in threads:
            t.join(timeout=max(0.05, deadline - time.monotonic()))
    if errors:
        raise errors[0]
    return got


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("peer closed the connection")
        buf += chunk
    return bytes(buf)


# ---- 4. on the wire ---------------------------------------------------------------------------
def segments(nbytes: int, seg: int) -> list[tuple[int, int]]:
    """Cut a step into (offset, length) work requests of at most ``seg`` bytes (one if empty)."""
    if nbytes <= 0:
        return [(0, 0)]
    return [(off, min(seg, nbytes - off)) for off in range(0, nbytes, seg)]


def imm_data(step: int, iteration: int) -> int:
    """Immediate of a data work request: the receiver's step index and the iteration's low bits."""
    if not 0 <= step < 1 << IMM_STEP_BITS:
        raise TransportError(f"step index {step} does not fit an immediate")
    return ((iteration & IMM_ITER_MASK) << IMM_STEP_BITS) | step


def imm_ready(use: int, program: int = 0) -> int:
    """Immediate of a credit: the sender may write use ``use`` (an iteration, or the n-th op of
    an op list) of ``program`` into our scratch (program 0: the encoding of genie before op
    lists ran over RDMA)."""
    if not 0 <= use < 1 << IMM_STEP_BITS:
        raise TransportError(f"credit for use {use} does not fit an immediate")
    return IMM_READY | ((program & IMM_ITER_MASK) << IMM_STEP_BITS) | use


def decode_imm(imm: int) -> tuple[str, int, int]:
    """("ready", program low bits, use) or ("data", iteration or program low bits, step)."""
    kind = "ready" if imm & IMM_READY else "data"
    return kind, (imm >> IMM_STEP_BITS) & IMM_ITER_MASK, imm & ((1 << IMM_STEP_BITS) - 1)


def check_options(opts: RdmaOptions) -> None:
    """Refuse RDMA options out of range with one line."""
    if opts.mode not in MODES:
        raise TransportError(f"RDMA mode {opts.mode!r}; use one of {', '.join(MODES)}")
    if not 1 <= opts.window <= 4096:
        raise TransportError(f"RDMA window {opts.window} outside 1..4096")
    if not 4096 <= opts.segment <= 1 << 30:
        raise TransportError(f"RDMA segment {opts.segment} outside 4 KiB..1 GiB")
    if not 1 <= opts.qps <= MAX_QPS:
        raise TransportError(f"RDMA queue pairs per connection {opts.qps} outside 1..{MAX_QPS}")
    if not 0 <= opts.stall_s <= 86400:
        raise TransportError(f"RDMA stall bound {opts.stall_s} s outside 0..86400")
    if not 0 <= opts.traffic_class <= MAX_TRAFFIC_CLASS:
        raise TransportError(
            f"RDMA traffic class {opts.traffic_class} outside 0..{MAX_TRAFFIC_CLASS}"
        )
    if not 0 <= opts.timeout <= 31:  # the QP attribute's 5 bits
        raise TransportError(f"RDMA local ACK timeout exponent {opts.timeout} outside 0..31")
    if not 0 <= opts.retry <= 7:  # its 3 bits
        raise TransportError(f"RDMA retry count {opts.retry} outside 0..7")
    if opts.mtu:
        mtu_enum(opts.mtu)


def rdma_conditions(opts: RdmaOptions, choices: list[Choice]) -> WireConditions:
    """What an RDMA job's queue pairs run with, per device used (``WireConditions.nics``, as a
    TCP job reports its NICs): queue pairs per connection and, on RoCE, the GRH traffic class."""
    nics: dict[str, dict[str, str]] = {}
    for c in choices:
        got = nics.setdefault(c.device, {"rdma_qps": str(opts.qps)})
        if c.link_layer != "InfiniBand":  # the GRH (and its traffic class) is RoCE's
            got["rdma_traffic_class"] = str(opts.traffic_class)
    return WireConditions(nics=nics)
