"""Intra-host steps on the RDMA plane as a model, as the TCP plane has them (``intra``).

Ranks of one agent talk over NVLink/NVSwitch-class links, not the NIC; with
``DataOptions.intra == "model"`` a step between two of them never touches a queue pair. Each
rank's verbs are wrapped (``ModelledVerbs``) so that a link to a co-located peer behaves like an
RC queue pair whose wire is the cost model: a work request posted at ``now`` leaves the sending
rank's intra-host port at ``out = max(now, port free) + bytes / intra_bandwidth`` (the port then
busy until ``out``) and lands ``intra_latency`` later. Its bytes are placed on the peer's next
posted receive at once (as an RDMA WRITE places them; with no receive posted the request waits,
in order, as RC's receiver-not-ready retry does); the sender's completion comes at ``out``, the
receiver's (with the immediate) at the landing. Links to other hosts go to the real verbs untouched.

Completions of modelled links are kept per rank in a heap by due time (``IntraHub``) and come
out of ``poll`` with the device's; with ``events`` on, a rank that has modelled links sleeps in
slices of at most a millisecond (to its next due completion) instead of on the completion
channel, which no modelled completion would wake.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque

import numpy as np

from genie.errors import TransportError
from genie_agent.dataplane.intra import transfer_ns
from genie_agent.dataplane.rdma_exec import Completion, Link, RankVerbs, Region

MAX_IDLE_S = 1e-3  # longest sleep of a rank waiting only for modelled completions


class IntraHub:
    """What the agent's co-located ranks share: their regions, posted receives, completions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.regions: list[Region] = []
        self.recvs: dict[tuple[int, Link], deque] = {}  # (owner, (peer, lane)) -> (wr, view)
        self.pending: dict[tuple[int, Link], deque] = {}  # requests waiting for a receive
        self.due: dict[int, list] = {}  # rank -> heap of (due ns, tick, Completion)
        self._tick = itertools.count()

    def find(self, addr: int, n: int) -> np.ndarray:
        """The bytes at a co-located rank's registered address (a remote access error else)."""
        with self.lock:
            for r in self.regions:
                if r.addr <= addr and addr + n <= r.addr + len(r.view):
                    return r.view[addr - r.addr : addr - r.addr + n]
        raise TransportError(f"intra-host write to {addr:#x}+{n}: no co-located region there")

    def send(
        self, sender: int, link: Link, wr_id: int, data, dst, imm: int, out_ns: int, lat_ns: int
    ) -> None:
        """A modelled request from ``sender`` on ``link`` (peer, lane): placed on the peer's
        next posted receive, or, with none posted, kept until one is (RNR retried, in order)."""
        key = (link[0], (sender, link[1]))
        req = (sender, wr_id, data, dst, imm, out_ns, lat_ns)
        with self.lock:
            pend = self.pending.setdefault(key, deque())
            rq = self.recvs.get(key)
            if pend or not rq:
                pend.append(req)
                return
            rwr, view = rq.popleft()
        self._place(link[0], req, rwr, view)

    def post_recv(self, owner: int, link: Link, wr_id: int, view) -> None:
        """``owner`` posts a receive on ``link``; requests that waited for one are placed."""
        key = (owner, link)
        matched = []
        with self.lock:
            rq = self.recvs.setdefault(key, deque())
            rq.append((wr_id, view))
            pend = self.pending.get(key)
            while pend and rq:
                matched.append((pend.popleft(), *rq.popleft()))
        for req, rwr, v in matched:
            self._place(owner, req, rwr, v)

    def _place(self, owner: int, req: tuple, rwr: int, view) -> None:
        sender, wr_id, data, dst, imm, out_ns, lat_ns = req
        n = 0 if data is None else len(data)
        if n:
            target = dst if dst is not None else view
            if target is None or len(target) < n:
                raise TransportError(
                    f"rank {sender}: {n} bytes to intra-host rank {owner} do not fit its receive"
                )
            target[:n] = data
        out = max(out_ns, time.monotonic_ns())
        self.at(sender, out, Completion(wr_id, 0, False, 0, n))
        self.at(owner, out + lat_ns, Completion(rwr, 0, True, imm, n))

    def at(self, rank: int, due_ns: int, c: Completion) -> None:
        """Hand ``rank`` the completion ``c`` once ``due_ns`` has come."""
        with self.lock:
            heapq.heappush(self.due.setdefault(rank, []), (due_ns, next(self._tick), c))

    def due_for(self, rank: int, n: int, now: int) -> list[Completion]:
        """Up to ``n`` of ``rank``'s completions that are due at ``now``."""
        out: list[Completion] = []
        with self.lock:
            h = self.due.get(rank)
            while h and h[0][0] <= now and len(out) < n:
                out.append(heapq.heappop(h)[2])
        return out

    def next_due(self, rank: int) -> int:
        """When ``rank``'s next modelled completion is due (0: none pending)."""
        with self.lock:
            h = self.due.get(rank)
            return h[0][0] if h else 0


class ModelledVerbs:
    """A rank's verbs whose links to co-located ranks are the intra-host model."""

    def __init__(
        self,
        inner: RankVerbs,
        hub: IntraHub,
        rank: int,
        local: frozenset[int],
        bandwidth: float,
        latency: float,
    ) -> None:
        self.inner = inner
        self.hub = hub
        self.rank = rank
        self.local = local
        self.bandwidth = bandwidth
        self.latency_ns = round(latency * 1e9)
        self.port_free = 0  # when this rank's intra-host port is next free (monotonic ns)

    def connect(self, mine, peer) -> None:
        """Connect a queue pair to a rank on another host (the real verbs')."""
        self.inner.connect(mine, peer)  # type: ignore[attr-defined]

    def to_error(self) -> None:
        """Move the real queue pairs to ERR."""
        self.inner.to_error()  # type: ignore[attr-defined]

    def close(self) -> None:
        """Free the real verbs resources."""
        self.inner.close()  # type: ignore[attr-defined]

    def region(self, nbytes: int) -> Region:
        """Register with the device and make the region reachable by co-located ranks."""
        r = self.inner.region(nbytes)
        with self.hub.lock:
            self.hub.regions.append(r)
        return r

    def qpn(self, link: Link) -> int:
        """The queue pair's number; -1 for a modelled intra-host link (it has none)."""
        return -1 if link[0] in self.local else self.inner.qpn(link)

    def _send(self, link: Link, wr_id: int, data: np.ndarray | None, dst, imm: int) -> None:
        n = 0 if data is None else len(data)
        out = max(time.monotonic_ns(), self.port_free) + transfer_ns(n, self.bandwidth)
        self.port_free = out
        self.hub.send(self.rank, link, wr_id, data, dst, imm, out, self.latency_ns)

    def post_write_imm(
        self, link: Link, wr_id: int, src: Region, off: int, n: int, raddr: int, imm: int
    ) -> None:
        """RDMA WRITE WITH IMMEDIATE (modelled for a co-located peer)."""
        if link[0] not in self.local:
            self.inner.post_write_imm(link, wr_id, src, off, n, raddr, imm)
            return
        data = src.view[off : off + n] if n else None
        self._send(link, wr_id, data, self.hub.find(raddr, n) if n else None, imm)

    def post_send_imm(
        self, link: Link, wr_id: int, src: Region | None, off: int, n: int, imm: int
    ) -> None:
        """SEND WITH IMMEDIATE (modelled for a co-located peer: into its posted receive)."""
        if link[0] not in self.local:
            self.inner.post_send_imm(link, wr_id, src, off, n, imm)
            return
        data = src.view[off : off + n] if src is not None and n else None
        self._send(link, wr_id, data, None, imm)

    def post_recv(self, link: Link, wr_id: int, dst: Region | None, off: int, n: int) -> None:
        """Post a receive (kept by the hub for a co-located peer)."""
        if link[0] not in self.local:
            self.inner.post_recv(link, wr_id, dst, off, n)
            return
        view = dst.view[off : off + n] if dst is not None else None
        self.hub.post_recv(self.rank, link, wr_id, view)

    def poll(self, n: int) -> list[Completion]:
        """The device's completions, then the modelled ones that are due."""
        out = self.inner.poll(n)
        if len(out) < n:
            out += self.hub.due_for(self.rank, n - len(out), time.monotonic_ns())
        return out

    def wait(self, timeout_s: float) -> None:
        """Sleep until a modelled completion is due (short slices while remote links exist)."""
        due = self.hub.next_due(self.rank)
        left = (due - time.monotonic_ns()) / 1e9 if due else timeout_s
        time.sleep(max(0.0, min(timeout_s, left, MAX_IDLE_S)))
