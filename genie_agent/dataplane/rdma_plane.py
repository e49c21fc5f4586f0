"""The agent's data plane with the transport chosen per job: TCP, or RDMA over verbs.

``AgentDataPlane`` is the TCP data plane (its listener lives as long as the agent) that, for a
job whose ``DataOptions.transport`` is ``"rdma"``, runs the job over RC queue pairs instead.
Those jobs still use the TCP machinery for one thing, the out-of-band exchange: the job's
token-authenticated TCP connection of each rank pair carries the two ``QpFacts`` (perftest
and rdma-core's tests do the same over a plain socket), and stays open until release.

RDMA prepare, step by step (any failure is one ``prepare_failed`` line; the agent stays up):

1. check the options; per rank, find the device/port/GID (``choose_port``): the rank's own
   device (``RdmaOptions.rank_devices``), else the host's (``devices``), else the device whose
   RoCE v2 GID carries the rank's NIC address (``DataOptions.rank_addrs``: on a multi-NIC host
   rank i's queue pairs live on NIC i's device), else the agent's data address; no device
   means the line "no RDMA device found: ...; get one with `genie testbed softroce up ...`";
2. import pyverbs (``load_pyverbs``), open each device used and its PD (once per device);
3. connect the rank pairs' TCP side channels (as a TCP job does);
4. per rank: CQ, memory regions (buffers, scratch), its RC QPs in INIT: ``channels x qps``
   per peer (``rdma_exec.qp_layout``: a connection per process-group channel, ``qps`` queue
   pairs per connection);
5. per pair: send our ``QpFacts`` (every lane's qpn), read the peer's, move each QP to RTR then
   RTS, post the receives, and map each SEND step to the peer's landing slot;
6. post ``prepared`` with the conditions the queue pairs run with (``rdma_conditions``: per
   device, queue pairs per connection and the GRH traffic class), stored with the run.

Pairs of ranks both on this agent take the intra-host model when the job says so
(``DataOptions.intra == "model"``, as on TCP): no side channel, no queue pair; their steps go
through ``rdma_intra.ModelledVerbs`` (priced on the sending rank's intra-host port) and their
landing slots are read in memory (``local_facts``).

A Go runs one program's iterations, or an op list (``genie emulate``: several programs in
flight, each on its process group's channel; each program at most once per list).

pyverbs is imported only when a job asks for RDMA, so an agent without it runs TCP jobs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

import msgspec

from genie.errors import GenieError, TransportError
from genie.wire.messages import (
    DataOptions,
    Go,
    Prepare,
    Prepared,
    QpFacts,
    RdmaOptions,
    WireConditions,
)
from genie_agent.dataplane.rdma_conn import (
    Choice,
    Device,
    check_options,
    choose_port,
    exchange_facts,
    find_devices,
    rdma_conditions,
    recv_slots,
    send_targets,
)
from genie_agent.dataplane.rdma_exec import (
    Link,
    RankVerbs,
    RdmaRankExecutor,
    qp_layout,
    rank_links,
    rank_peers,
    recv_depth,
)
from genie_agent.dataplane.rdma_intra import IntraHub, ModelledVerbs
from genie_agent.dataplane.tcp import TcpDataPlane, local_pairs, rank_addr
from genie_agent.oplist import go_oplists
from genie_agent.plan import AgentPlan
from genie_agent.state import Event


class VerbsDevice(Protocol):
    """An opened device and port, as the plane uses it (``rdma.VerbsDevice`` in production)."""

    gid: str  # 32 hex digits
    lid: int
    mtu: int  # active MTU in bytes

    def rank_verbs(self, opts: RdmaOptions, links: list[Link], depth: int) -> PlaneRankVerbs:
        """One rank's CQ and queue pairs (in INIT), one per link, on this device."""
        ...

    def close(self) -> None:
        """Release the device."""
        ...


class PlaneRankVerbs(RankVerbs, Protocol):
    """A rank's verbs as the plane uses them beyond the executor (``rdma.VerbsRank``)."""

    def connect(self, mine: QpFacts, peer: QpFacts) -> None:
        """Move every queue pair to ``mine.dst`` to RTS with the peer's facts."""
        ...

    def to_error(self) -> None:
        """Move every queue pair to ERR (wakes a rank asleep on completions)."""
        ...

    def close(self) -> None:
        """Free the rank's verbs resources."""
        ...


class AgentDataPlane(TcpDataPlane):
    """TCP data plane that runs ``transport = "rdma"`` jobs over verbs."""

    def __init__(
        self, data_addr: str | list[str], port: int = 0, log: Callable[[str], None] | None = None
    ):
        super().__init__(data_addr, port, log)
        self._rdma = False
        self._devs: dict[tuple[str, int, int], VerbsDevice] = {}
        self._ranks: dict[int, PlaneRankVerbs] = {}
        self._rexecs: dict[int, RdmaRankExecutor] = {}

    # ---- prepare ----------------------------------------------------------------------------
    def _prepare(self, plan: AgentPlan, prep: Prepare, post: Callable[[Event], None]) -> None:
        self._rdma = prep.options.transport == "rdma"
        if prep.options.transport not in ("tcp", "rdma"):
            post(
                Event(
                    "prepare_failed",
                    prep.job,
                    prep.epoch,
                    error=f"{plan.agent}: transport {prep.options.transport!r}; use tcp or rdma",
                )
            )
            return
        if not self._rdma:
            super()._prepare(plan, prep, post)
            return
        t0 = time.monotonic()
        try:
            conns, held = self._prepare_rdma(plan, prep)
            msg = Prepared(
                job=prep.job,
                epoch=prep.epoch,
                ranks=list(plan.ranks),
                connections=conns,
                setup_s=time.monotonic() - t0,
                conditions=held,
            )
            post(Event("prepared", prep.job, prep.epoch, msg))
        except Exception as exc:  # a bug must fail the prepare in one line, not leave it hanging
            self._close_rdma()
            self._close_job()
            known = isinstance(exc, TransportError | OSError | ValueError)
            why = str(exc) if known else f"{type(exc).__name__}: {exc}"
            post(Event("prepare_failed", prep.job, prep.epoch, error=f"{plan.agent}: {why}"))

    # the three steps that touch verbs, overridable (tests put an in-memory fabric here)
    def find_devices(self) -> list[Device]:
        """The host's verbs devices (sysfs)."""
        return find_devices()

    def open_device(self, choice: Choice) -> VerbsDevice:
        """Import pyverbs and open the chosen device and port (with its PD)."""
        from genie_agent.dataplane import rdma  # the one pyverbs module, only for RDMA jobs

        return rdma.VerbsDevice(rdma.load_pyverbs(), choice)

    def rank_verbs(
        self, dev: VerbsDevice, ro: RdmaOptions, rank: int, links: list[Link], depth: int
    ) -> PlaneRankVerbs:
        """Rank ``rank``'s CQ and queue pairs (in INIT), one per link, on ``dev``."""
        return dev.rank_verbs(ro, links, depth)

    def rank_device(
        self, devices: list[Device], ro: RdmaOptions, opts: DataOptions, agent: str, rank: int
    ) -> tuple[Choice, VerbsDevice]:
        """The device, port and GID rank ``rank`` uses, opened once per device."""
        named = ro.rank_devices[rank] if rank < len(ro.rank_devices) else ""
        named = named or ro.devices.get(agent, "")  # this host's device (testbed rdma_device)
        if named:
            ro = msgspec.structs.replace(ro, device=named)
        choice = choose_port(devices, ro, rank_addr(opts, rank) or self.addr)
        key = (choice.device, choice.port, choice.gid_index)
        dev = self._devs.get(key)
        if dev is None:
            dev = self._devs[key] = self.open_device(choice)
        return choice, dev

    def _prepare_rdma(self, plan: AgentPlan, prep: Prepare) -> tuple[int, WireConditions]:
        """Set up the job's queue pairs (steps 1-5); its connections and the conditions its
        queue pairs run with (per device: queue pairs per connection, traffic class)."""
        opts = prep.options
        refuse_nccl_style(plan)
        ro = opts.rdma
        check_options(ro)  # 1.
        devices = self.find_devices()
        rank_dev = {r: self.rank_device(devices, ro, opts, plan.agent, r) for r in plan.ranks}
        socks = self._side_channels(plan, prep)  # 3. (my rank, peer) -> socket
        lanes = qp_layout(opts.channels, ro.qps)
        here: dict[int, set[int]] = {r: set() for r in plan.ranks}  # modelled co-located peers
        for a, b in local_pairs(plan, opts):
            here[a].add(b)
            here[b].add(a)
        hub = IntraHub()
        for r in plan.ranks:  # 4.
            rplans = {p: plans[r] for p, plans in enumerate(plan.rank_plans) if r in plans}
            remote = [q for q in rank_peers(rplans) if q not in here[r]]
            links = rank_links(remote, lanes)
            vr = self.rank_verbs(rank_dev[r][1], ro, r, links, recv_depth(ro) + ro.window)
            if here[r]:  # steps to ranks of this agent: the intra-host model, no queue pair
                vr = ModelledVerbs(vr, hub, r, frozenset(here[r]), opts.intra_bandwidth,
                                   opts.intra_latency)  # fmt: skip
            self._ranks[r] = vr
            ex = RdmaRankExecutor(
                r, vr, rplans, ro, opts.verify, self._abort,
                channels=opts.channels, program_channels=opts.program_channels,
                min_part=opts.min_part,
            )  # fmt: skip
            self._rexecs[r] = ex
        need = sum(ex.needed_bytes() for ex in self._rexecs.values())
        if need > self.memory_bound:  # registered at once, for the whole job
            raise TransportError(
                f"RDMA buffers of this job need {need} bytes of registered memory on this agent, "
                f"beyond its memory bound of {self.memory_bound} bytes"
            )
        for ex in self._rexecs.values():
            ex.allocate()
        pairs = []
        for (r, q), sock in sorted(socks.items()):  # 5.
            ex, vr, dev = self._rexecs[r], self._ranks[r], rank_dev[r][1]
            psn = int.from_bytes(os.urandom(3), "little")
            scratch = ex.scratch_region()
            facts = QpFacts(
                src=r,
                dst=q,
                qpn=vr.qpn((q, 0)),
                psn=psn,
                gid=dev.gid,
                lid=dev.lid,
                rkey=scratch.rkey,
                address=scratch.addr,
                length=len(scratch.view),
                mtu=dev.mtu,
                slots=recv_slots(ex.plans, q),
                qpns=[vr.qpn((q, k)) for k in range(lanes)],
            )
            pairs.append((sock, facts))
        peers = exchange_facts(pairs, opts.connect_timeout_s)
        for sock_mine, peer in zip(pairs, peers, strict=True):
            mine = sock_mine[1]
            ex, vr = self._rexecs[mine.src], self._ranks[mine.src]
            vr.connect(mine, peer)
            ex.targets.update(send_targets(ex.plans, mine.dst, peer))
        for r in plan.ranks:  # co-located pairs: their landing slots, read in memory
            for q in sorted(here[r]):
                self._rexecs[r].targets.update(
                    send_targets(self._rexecs[r].plans, q, local_facts(self._rexecs[q], r))
                )
        for ex in self._rexecs.values():
            ex.post_receives()
        return len(socks), rdma_conditions(ro, [c for c, _ in rank_dev.values()])

    def _side_channels(
        self, plan: AgentPlan, prep: Prepare
    ) -> dict[tuple[int, int], socket.socket]:
        """The job's TCP connections, stream 0 of each rank pair: (my rank, peer) -> socket."""
        opts = prep.options
        deadline = time.monotonic() + opts.connect_timeout_s
        out = {}
        for (r, q, k), sock in self._connect_pairs(plan, prep, deadline).items():
            if k == 0:
                out[(r, q)] = sock
        for (a, b, k), sock in self._await_incoming(plan, opts, deadline, "side-channel").items():
            if k == 0:
                out[(b, a)] = sock
        return out

    # ---- go ---------------------------------------------------------------------------------
    def go(self, go: Go, start_local_ns: int, post: Callable[[Event], None]) -> None:
        """Run the job's program on every local rank (TCP or RDMA as prepared)."""
        if not self._rdma:
            super().go(go, start_local_ns, post)
            return
        t = threading.Thread(
            target=self._go_rdma, args=(go, start_local_ns, post), name="genie-go", daemon=True
        )
        self._threads = [t]
        t.start()

    def _go_rdma(self, go: Go, start_local_ns: int, post: Callable[[Event], None]) -> None:
        try:
            oplists = go_oplists(go, self._plan)
        except GenieError as exc:
            post(Event("run_failed", go.job, go.epoch, error=str(exc)))
            return
        if oplists is not None:
            execs = [ex for ex in self._rexecs.values() if oplists.get(ex.rank)]
        else:
            execs = [ex for ex in self._rexecs.values() if go.program in ex.plans]

        def run(ex: RdmaRankExecutor):
            try:
                if oplists is not None:
                    return ex.run_ops(go, oplists[ex.rank], start_local_ns)
                return ex.run(go, start_local_ns)
            except BaseException:
                if ex.opts.events:
                    # ranks asleep on a completion channel: flushed awake, they see the abort
                    # (the job's run is over either way)
                    self._abort.set()
                    for vr in list(self._ranks.values()):
                        vr.to_error()
                raise

        self._run_ranks(go, start_local_ns, execs, run, "genie-rdma", post)

    # ---- release ----------------------------------------------------------------------------
    def release(self) -> None:
        """Stop workers (QPs to ERR wakes sleeping ranks), free verbs resources, close sockets."""
        self._abort.set()
        for vr in self._ranks.values():
            vr.to_error()
        super().release()
        self._close_rdma()

    def _close_rdma(self) -> None:
        for vr in self._ranks.values():
            with contextlib.suppress(Exception):
                vr.close()
        self._ranks.clear()
        self._rexecs.clear()
        for dev in self._devs.values():
            with contextlib.suppress(Exception):
                dev.close()
        self._devs.clear()
        self._rdma = False


def local_facts(ex: RdmaRankExecutor, peer: int) -> QpFacts:
    """What co-located rank ``ex.rank`` would tell ``peer``: where its scratch is and the landing
    slots of its RECVs from ``peer`` (no queue pair: the link is modelled)."""
    sc = ex.scratch_region()
    return QpFacts(
        src=ex.rank, dst=peer, qpn=0, psn=0, gid="0" * 32, lid=0, rkey=sc.rkey, address=sc.addr,
        length=len(sc.view), mtu=0, slots=recv_slots(ex.plans, peer),
    )  # fmt: skip


def refuse_nccl_style(plan: AgentPlan) -> None:
    """The RDMA plane has no flag bytes and its channels are per process group
    (``DataOptions.channels``), not per program: a program run NCCL-style with several
    channels of its own or the LL / LL128 protocol is refused in one line."""
    for rplans in plan.rank_plans:
        for rp in rplans.values():
            if rp.channels > 1 or rp.proto:
                raise TransportError(
                    "NCCL-style programs with several channels or the LL / LL128 protocol run "
                    "on tcp only (the RDMA plane's queue pairs are per process group)"
                )
