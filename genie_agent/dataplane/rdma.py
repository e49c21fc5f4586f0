"""The verbs layer of the RDMA data plane: the only genie module that imports pyverbs.

Supported installs of pyverbs (its version must equal the host's rdma-core, since pyverbs N
needs the private symbols of libibverbs N):

* the distribution's package (Debian/Ubuntu ``python3-pyverbs``, Fedora ``python3-pyverbs``)
  seen by a venv made with ``--system-site-packages`` on the system Python, or, failing an
  import, found here in the distribution's dist-packages directory (``DISTRO_PATHS``) and
  loaded from there alone (only ``pyverbs``, no other package of that directory);
* the ``rdma`` extra (PyPI's pyverbs sdist) on hosts whose rdma-core has the same version as
  that pyverbs (it does not build against older rdma-core, e.g. Debian 12's 44).

Both import styles are accepted: ``pyverbs.libibverbs_enums`` (rdma-core >= 47 or so) and the
older ``pyverbs.enums`` (``load_pyverbs``).

Everything here is a small step a test or a provider quirk can override: ``VerbsDevice`` opens
the device, reads port and GID, allocates the PD; ``VerbsRank`` holds one rank's CQ (and
completion channel when events are on), its memory regions and its RC queue pairs, one per
link (peer, lane: ``channels x qps`` per peer), and turns the plain attribute dicts of
``rdma_conn`` into ``QPAttr`` for each transition. A wait on the completion channel is bounded:
a timer moves the rank's queue pairs to ERR at the bound, whose flushed work wakes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
from types import SimpleNamespace
from typing import Protocol

import msgspec
import numpy as np

from genie.errors import TransportError
from genie.wire.messages import QpFacts, RdmaOptions
from genie_agent.dataplane.rdma_conn import (
    MTU_ENUM,
    Choice,
    gid_hex,
    gid_text,
    init_attrs,
    rtr_attrs,
    rts_attrs,
)
from genie_agent.dataplane.rdma_exec import Completion, Link, Region

DISTRO_PATHS = ("/usr/lib/python3/dist-packages", "/usr/lib64/python3/site-packages")
INSTALL_HINT = (
    "install the distribution's pyverbs, which matches its rdma-core (Debian/Ubuntu: "
    "`sudo apt-get install python3-pyverbs`; genie loads it from the system even inside a "
    "venv); the 'rdma' extra (PyPI's pyverbs) only builds where rdma-core has the same version"
)
_MODULES = ("device", "pd", "cq", "mr", "qp", "wr", "addr")


def _load_from(path: str) -> None:
    """Import the ``pyverbs`` package found in ``path`` only (nothing else from there)."""
    spec = importlib.machinery.PathFinder.find_spec("pyverbs", [path])
    if spec is None or spec.loader is None:
        raise ImportError(f"no pyverbs in {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pyverbs"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules["pyverbs"]
        raise


def load_pyverbs(paths: tuple[str, ...] = DISTRO_PATHS) -> SimpleNamespace:
    """Import pyverbs (installed, else from the distro's directory); its modules and enums."""
    errors = []
    for where in ("", *paths):
        try:
            if where:
                if not os.path.isdir(os.path.join(where, "pyverbs")):
                    continue
                for name in [m for m in sys.modules if m == "pyverbs" or m.startswith("pyverbs.")]:
                    del sys.modules[name]
                _load_from(where)
            mods = {m: importlib.import_module(f"pyverbs.{m}") for m in _MODULES}
            try:
                enums = importlib.import_module("pyverbs.libibverbs_enums")
            except ImportError:
                enums = importlib.import_module("pyverbs.enums")
            err = importlib.import_module("pyverbs.pyverbs_error")
            return SimpleNamespace(
                enums=enums,
                errors=(err.PyverbsError,),
                where=os.path.dirname(os.path.dirname(sys.modules["pyverbs"].__file__ or "")),
                **mods,
            )
        except ImportError as exc:
            errors.append(f"{where or 'installed'}: {exc}")
    raise TransportError(f"pyverbs cannot be imported ({'; '.join(errors)}); {INSTALL_HINT}")


# ---- pyverbs structs from plain data (no device needed: tested on any host with pyverbs) -----
def init_qpattr(pv: SimpleNamespace, a: dict):
    """QPAttr of RESET -> INIT from ``rdma_conn.init_attrs``."""
    e = pv.enums
    attr = pv.qp.QPAttr(qp_state=e.IBV_QPS_INIT)
    attr.pkey_index = a["pkey_index"]
    attr.port_num = a["port_num"]
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    return attr


def rtr_qpattr(pv: SimpleNamespace, r: dict):
    """QPAttr of INIT -> RTR from ``rdma_conn.rtr_attrs`` (address vector with GRH for RoCE:
    the peer's GID, our GID index, hop limit and traffic class)."""
    attr = pv.qp.QPAttr(qp_state=pv.enums.IBV_QPS_RTR)
    attr.path_mtu = MTU_ENUM[r["path_mtu"]]
    attr.dest_qp_num = r["dest_qp_num"]
    attr.rq_psn = r["rq_psn"]
    attr.max_dest_rd_atomic = r["max_dest_rd_atomic"]
    attr.min_rnr_timer = r["min_rnr_timer"]
    gr = pv.addr.GlobalRoute(
        dgid=pv.addr.GID(gid_text(r["dgid"])),
        sgid_index=r["sgid_index"],
        hop_limit=r["hop_limit"],
        traffic_class=r["traffic_class"],
    )
    # pyverbs names the route argument ``gr`` (its docstring says ``grh``)
    attr.ah_attr = pv.addr.AHAttr(
        port_num=r["port_num"], is_global=r["is_global"], gr=gr, dlid=r["dlid"]
    )
    return attr


def rts_qpattr(pv: SimpleNamespace, s: dict):
    """QPAttr of RTR -> RTS from ``rdma_conn.rts_attrs``."""
    attr = pv.qp.QPAttr(qp_state=pv.enums.IBV_QPS_RTS)
    for k in ("sq_psn", "timeout", "retry_cnt", "rnr_retry", "max_rd_atomic"):
        setattr(attr, k, s[k])
    return attr


def send_wr(pv: SimpleNamespace, wr_id: int, opcode: int, sge, imm: int, rdma=None):
    """A signaled SendWR; ``sge`` None makes a zero-byte request, ``rdma`` = (rkey, address)."""
    e = pv.enums
    # pyverbs refuses a WR without an SGE at construction but lets num_sge be set to 0 after
    sg = [sge] if sge is not None else [pv.wr.SGE(0, 0, 0)]
    wr = pv.wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=sg, imm_data=imm,
                      send_flags=e.IBV_SEND_SIGNALED)  # fmt: skip
    if sge is None:
        wr.num_sge = 0
    if rdma is not None:
        wr.set_wr_rdma(*rdma)
    return wr


def recv_wr(pv: SimpleNamespace, wr_id: int, sge):
    """A RecvWR; ``sge`` None takes zero-byte messages (write-with-imm, credits)."""
    wr = pv.wr.RecvWR(wr_id=wr_id, num_sge=1, sg=[sge if sge is not None else pv.wr.SGE(0, 0, 0)])
    if sge is None:
        wr.num_sge = 0
    return wr


class QueuePair(Protocol):
    """What genie calls on a pyverbs RC queue pair."""

    qp_num: int

    def to_rtr(self, attr: object) -> None:
        """INIT -> RTR."""
        ...

    def to_rts(self, attr: object) -> None:
        """RTR -> RTS."""
        ...

    def post_send(self, wr: object) -> None:
        """Post one send work request."""
        ...

    def post_recv(self, wr: object) -> None:
        """Post one receive work request."""
        ...

    def modify(self, attr: object, mask: int) -> None:
        """Change the attributes ``mask`` names."""
        ...

    def close(self) -> None:
        """Destroy the queue pair."""
        ...


class VerbsDevice:
    """An opened verbs device and port with its protection domain (shared by the agent's ranks)."""

    def __init__(self, pv: SimpleNamespace, choice: Choice) -> None:
        self.pv = pv
        self.choice = choice
        e = pv.enums
        try:
            self.ctx = self.open_context()
            self.port_attr = self.ctx.query_port(choice.port)
            self.gid = gid_hex(str(self.ctx.query_gid(choice.port, choice.gid_index)))
            self.pd = pv.pd.PD(self.ctx)
        except pv.errors as exc:
            raise TransportError(f"RDMA device {choice.device}: {exc}") from None
        if self.port_attr.state != e.IBV_PORT_ACTIVE:
            raise TransportError(f"RDMA device {choice.device} port {choice.port} is not active")
        by_enum = {v: k for k, v in MTU_ENUM.items()}
        self.mtu = by_enum.get(int(self.port_attr.active_mtu), 1024)
        self.lid = int(self.port_attr.lid)

    def open_context(self):
        """Open the device by name."""
        return self.pv.device.Context(name=self.choice.device)

    def rank_verbs(self, opts: RdmaOptions, links: list[Link], depth: int) -> VerbsRank:
        """One rank's CQ and queue pairs (in INIT), one per link, on this device."""
        return VerbsRank(self, opts, links, depth)

    def close(self) -> None:
        """Release the PD and the device context."""
        for obj in (self.pd, self.ctx):
            with contextlib.suppress(Exception):
                obj.close()


class VerbsRank:
    """One rank's CQ, memory regions and RC queue pairs (implements ``RankVerbs``)."""

    def __init__(self, dev: VerbsDevice, opts: RdmaOptions, links: list[Link], depth: int) -> None:
        self.dev = dev
        self.pv = dev.pv
        self.opts = opts
        self.e = dev.pv.enums
        self.regions: list[Region] = []
        self.qps: dict[Link, QueuePair] = {}
        self.rkeys: dict[int, int] = {}
        self._early: list[Completion] = []
        cqe = max(16, len(links) * (2 * depth + 8))
        try:
            self.channel = self.pv.cq.CompChannel(dev.ctx) if opts.events else None
            self.cq = self.pv.cq.CQ(dev.ctx, cqe, None, self.channel, 0)
            for link in links:
                self.qps[link] = self.create_qp(depth)
        except self.pv.errors as exc:
            raise TransportError(f"RDMA device {dev.choice.device}: {exc}") from None

    # ---- resources ------------------------------------------------------------------------
    def create_qp(self, depth: int) -> QueuePair:
        """An RC queue pair on this rank's CQ, in RESET, then moved to INIT."""
        pv, e = self.pv, self.e
        cap = pv.qp.QPCap(max_send_wr=depth + 8, max_recv_wr=depth + 8, max_send_sge=1,
                          max_recv_sge=1)  # fmt: skip
        init = pv.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap,
                                sq_sig_all=1)  # fmt: skip
        qp = pv.qp.QP(self.dev.pd, init)
        attr = init_qpattr(pv, init_attrs(self.dev.choice.port))
        qp.to_init(attr)
        return qp

    def region(self, nbytes: int) -> Region:
        """Allocate and register ``nbytes``; numpy views the MR's own memory."""
        e = self.e
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        try:
            mr = self.pv.mr.MR(self.dev.pd, nbytes, access)
        except self.pv.errors as exc:
            raise TransportError(f"cannot register {nbytes} bytes: {exc}") from None
        view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(mr.buf))
        r = Region(view=view, addr=mr.buf, lkey=mr.lkey, rkey=mr.rkey, handle=mr)
        self.regions.append(r)
        return r

    def qpn(self, link: Link) -> int:
        """Number of the queue pair of ``link`` (peer, lane)."""
        return self.qps[link].qp_num

    def connect(self, mine: QpFacts, peer: QpFacts) -> None:
        """INIT -> RTR -> RTS of every lane to ``mine.dst`` with the peer's facts."""
        pv = self.pv
        theirs = peer.qpns or [peer.qpn]
        lanes = sorted(k for q, k in self.qps if q == mine.dst)
        if len(theirs) != len(lanes):
            raise TransportError(
                f"rank {mine.dst} has {len(theirs)} queue pairs to rank {mine.src}, this rank "
                f"{len(lanes)}: both ends must use the same channels and qps"
            )
        for k, qpn in zip(lanes, theirs, strict=True):
            qp = self.qps[(mine.dst, k)]
            far = msgspec.structs.replace(peer, qpn=qpn)
            r = rtr_attrs(mine, far, self.dev.choice, self.opts)
            try:
                qp.to_rtr(rtr_qpattr(pv, r))
                qp.to_rts(rts_qpattr(pv, rts_attrs(mine, self.opts)))
            except self.pv.errors as exc:
                raise TransportError(
                    f"queue pair {qp.qp_num:#x} to rank {mine.dst} (lane {k}): {exc}"
                ) from None
        self.rkeys[mine.dst] = peer.rkey

    # ---- posting and polling ----------------------------------------------------------------
    def _sge(self, r: Region | None, off: int, n: int):
        return None if r is None or n == 0 else self.pv.wr.SGE(r.addr + off, n, r.lkey)

    def post_write_imm(self, link, wr_id, src, off, n, raddr, imm) -> None:
        """RDMA WRITE WITH IMMEDIATE."""
        op = self.e.IBV_WR_RDMA_WRITE_WITH_IMM
        rdma = (self.rkeys[link[0]], raddr)
        self._post(link, send_wr(self.pv, wr_id, op, self._sge(src, off, n), imm, rdma))

    def post_send_imm(self, link, wr_id, src, off, n, imm) -> None:
        """SEND WITH IMMEDIATE."""
        op = self.e.IBV_WR_SEND_WITH_IMM
        self._post(link, send_wr(self.pv, wr_id, op, self._sge(src, off, n), imm))

    def _post(self, link: Link, wr) -> None:
        try:
            self.qps[link].post_send(wr)
        except self.pv.errors as exc:
            raise TransportError(
                f"posting to rank {link[0]} (lane {link[1]}) failed: {exc}"
            ) from None

    def post_recv(self, link, wr_id, dst, off, n) -> None:
        """Post one receive."""
        try:
            self.qps[link].post_recv(recv_wr(self.pv, wr_id, self._sge(dst, off, n)))
        except self.pv.errors as exc:
            raise TransportError(
                f"posting a receive for rank {link[0]} (lane {link[1]}) failed: {exc}"
            ) from None

    def poll(self, n: int) -> list[Completion]:
        """Poll the CQ once (completions ``wait`` found first come out first)."""
        if self._early:
            out, self._early = self._early, []
            return out
        got, wcs = self.cq.poll(n)
        return [
            Completion(
                wr_id=wc.wr_id,
                status=wc.status,
                recv=bool(wc.wr_id >> 63),  # our receive ids carry bit 63 (an error's opcode
                # is undefined, the id is not)
                imm=wc.imm_data,
                byte_len=wc.byte_len,
                vendor_err=wc.vendor_err,
            )
            for wc in wcs[:got]
        ]

    def wait(self, timeout_s: float) -> None:
        """Events mode: arm the CQ and sleep on the completion channel, at most ``timeout_s``
        (pyverbs' channel has no timeout: a timer moves the QPs to ERR then, which wakes it;
        the executor's watchdog reports the stall). Release wakes it the same way."""
        if self.channel is None:
            return
        self.cq.req_notify()
        self._early = self.poll(32)  # arrived before the arming: no event would come for it
        if self._early:
            return
        timer = threading.Timer(max(0.0, timeout_s), self.to_error)
        timer.daemon = True
        timer.start()
        try:
            self.channel.get_cq_event(self.cq)
            self.cq.ack_events(1)
        finally:
            timer.cancel()

    def to_error(self) -> None:
        """Move every QP to ERR: posted work is flushed, which wakes a rank asleep in ``wait``."""
        for qp in self.qps.values():
            with contextlib.suppress(Exception):
                qp.modify(self.pv.qp.QPAttr(qp_state=self.e.IBV_QPS_ERR), self.e.IBV_QP_STATE)

    def close(self) -> None:
        """Destroy QPs, MRs, the CQ and the channel (in that order)."""
        objs = [*self.qps.values(), *(r.handle for r in self.regions), self.cq, self.channel]
        for obj in objs:
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        self.qps.clear()
        self.regions.clear()
