"""Hardware in the loop: a workload's communication run on the live testbed's agents.

Two modes behind ``genie emulate``:

* **overlapped** (default): ``compile_oplists`` plans every communication instance of the trace
  as a step program of its own and gives each rank its op list (``agents.oplist``): the ops in
  order, each with the earlier ops it depends on and the compute gap before it, taken from a
  replay on a network where communication costs nothing (gap = the op's arrival minus the
  zero-cost end of its latest communication ancestor, or its arrival when it has none). One Go
  per run ships every agent its ranks' lists and a common start; agents run them with no
  controller on the critical path, several collectives in flight at once, so collectives that
  overlap in the trace overlap on the wire. Per op start/end come back on the controller clock;
  an instance's time is from its last member's arrival to its last rank's end (the simulator
  starts an instance when every member has arrived), and ``InstanceBackend`` replays the
  workload with those measured times. What is approximate: compute gaps are fixed by the
  zero-cost replay, so a compute stream congested differently because communication took
  longer is not re-simulated (each op still waits for its real dependencies).
* **isolated**: ``distinct_transfers`` groups the instances by (collective, size, group), runs
  each alone (warm-up plus ``iterations``), and ``TestbedBackend`` replays with each instance
  taking the median of its own group; exact when nothing overlaps; when collectives overlap in
  the trace, the replay shares links between them as the analytical model does, scaled to the
  measured standalone times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genie.errors import StoreError
from genie.sim.compiled import P2P, CompiledWorkload, coll_name
from genie.sim.network import FixedTimeBackend, Pricer, Transfer

Key = tuple[int, int, tuple[int, ...]]  # (comm_type, size, global ranks)


@dataclass
class Measured:
    """One distinct collective measured on the testbed."""

    key: Key
    collective: str
    algorithm: str
    count: int  # instances of it in the workload
    times: list[float] = field(default_factory=list)  # measured (non-warm-up) seconds
    modeled_s: float | None = None

    @property
    def p50(self) -> float:
        """Median measured time (seconds)."""
        return float(np.median(self.times)) if self.times else math.nan


def distinct_transfers(cw: CompiledWorkload) -> dict[Key, int]:
    """Each distinct (comm_type, size, ranks) of the workload with how often it occurs."""
    out: dict[Key, int] = {}
    ins = cw.instances
    for iid in range(len(ins)):
        key = (int(ins.comm_type[iid]), int(ins.size[iid]), tuple(cw.instance_ranks(iid)))
        out[key] = out.get(key, 0) + 1
    return out


def plan(key: Key, algorithms: dict[str, str] | None = None, chunks: int = 1) -> Any:
    """The step program of one distinct transfer (group-local ranks 0..n-1)."""
    from genie.collectives import build_program

    ctype, size, ranks = key
    name = "send_recv" if ctype == P2P else coll_name(ctype)
    name = "reduce_scatter" if name == "reduce_scatter_block" else name
    algo = (algorithms or {}).get(name)
    return build_program(name, algo, len(ranks), size, chunks=chunks)


def measure_all(
    ctl: Any,
    keys: dict[Key, int],
    rank_agents: Sequence[str],
    *,
    iters: int,
    warmup: int,
    algorithms: dict[str, str] | None = None,
    chunks: int = 1,
    options: Any = None,
    topology: Any = None,
    on_done: Callable[[Measured, Any, list], None] | None = None,
) -> dict[Key, Measured]:
    """Run every distinct transfer on the agents in turn; ``on_done`` sees each as measured."""
    from genie.collectives.cost import estimate
    from genie.controller.bench import run_size
    from genie.controller.results import measured
    from genie.errors import GenieError

    out: dict[Key, Measured] = {}
    for key, count in keys.items():
        prog = plan(key, algorithms, chunks)
        placement = [rank_agents[r] for r in key[2]]
        instances = run_size(ctl, prog, placement, iters=iters, warmup=warmup, options=options)
        m = Measured(
            key=key,
            collective=prog.spec.collective,
            algorithm=prog.spec.algorithm,
            count=count,
            times=[float(t) for t in measured(instances)],
        )
        if topology is not None:
            try:
                m.modeled_s = float(estimate(prog, topology, placement).time_s)
            except GenieError:
                m.modeled_s = None
        out[key] = m
        if on_done:
            on_done(m, prog, instances)
    return out


class TestbedBackend(FixedTimeBackend):
    """Each instance takes the median time measured for its own (collective, size, group).

    With a ``pricer``, instances in flight together share links as the analytical model says,
    each scaled to its measured standalone time; without one, they do not slow each other.
    """

    __test__ = False

    def __init__(
        self, table: dict[Key, Measured], name: str = "testbed", pricer: Pricer | None = None
    ) -> None:
        self.table = table
        super().__init__(name, pricer)
        how = (
            "do not slow each other"
            if pricer is None
            else "share links as the analytical model says"
        )
        self.notes = [
            "testbed (isolated): each collective measured alone on the agents; collectives in "
            f"flight together {how}, they were not on the wire together"
        ]

    def alone(self, transfer: Transfer) -> float:
        """The measured median of this transfer's (collective, size, ranks)."""
        key = (transfer.comm_type, transfer.size, tuple(transfer.ranks))
        m = self.table.get(key)
        if m is None or not m.times:
            raise StoreError(f"no measured time for {coll_name(transfer.comm_type)} {key[1:]}")
        return m.p50

    duration = alone


# ---- overlapped mode: the whole trace's communication on the agents -------------------------


class ZeroNetwork(FixedTimeBackend):
    """A network on which every transfer completes the instant it starts (compute-only replay)."""

    def __init__(self) -> None:
        super().__init__("zero")
        self.notes: list[str] = []

    def duration(self, transfer: Transfer) -> float:
        """Zero: no network."""
        return 0.0


@dataclass
class OpListPlan:
    """The compiled communication of a workload: one program per instance, per-rank op lists."""

    iids: list[int]  # program index -> instance id
    programs: list[Any]
    rank_ops: dict[int, list[tuple[int, list[int], int]]]  # rank -> [(program, deps, gap_ns)]
    op_iid: dict[int, list[int]]  # rank -> instance id of each op

    def sent_bytes(self) -> int:
        """Bytes every SEND step of every program moves (what the agents must report sent)."""
        from genie.collectives.program import Op

        total = 0
        for p in self.programs:
            for _, steps in p.iter_ranks():
                total += sum(s.nbytes for s in steps if s.op == Op.SEND)
        return total


def _topo(n: int, ptr: np.ndarray, idx: np.ndarray) -> list[int]:
    """Kahn's order of one rank's nodes over its data deps."""
    pending = np.diff(ptr).tolist()
    succ: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for d in idx[ptr[v] : ptr[v + 1]].tolist():
            succ[d].append(v)
    order = [v for v in range(n) if pending[v] == 0]
    k = 0
    while k < len(order):
        for w in succ[order[k]]:
            pending[w] -= 1
            if pending[w] == 0:
                order.append(w)
        k += 1
    return order


def compile_oplists(
    cw: CompiledWorkload,
    algorithms: dict[str, str] | None = None,
    chunks: int = 1,
    max_instances: int = 256,
) -> OpListPlan:
    """Plan every communication instance and each rank's op list (see ``agents.oplist``).

    The compute gaps come from a replay on a network where communication takes no time: op j of
    a rank becomes due ``gap`` after the latest of its communication ancestors (in the rank's
    data-dep DAG) finished, or ``gap`` after the start when it has none; ``gap`` is what compute
    (serial on the rank's stream) put between them in that replay. On the wire, a slow
    collective thus delays what depends on it by exactly as much as it is slower.
    """
    from genie.collectives import build_program
    from genie.errors import UsageError
    from genie.sim.engine import simulate

    ins = cw.instances
    if len(ins) > max_instances:
        raise UsageError(
            f"the workload has {len(ins)} communication instances; overlapped emulation runs "
            f"at most {max_instances} (each gets buffers of its own): use --mode isolated"
        )
    raw = simulate(cw, ZeroNetwork())
    iids = list(range(len(ins)))
    programs = []
    for iid in iids:
        ctype, size, ranks = int(ins.comm_type[iid]), int(ins.size[iid]), cw.instance_ranks(iid)
        name = "send_recv" if ctype == P2P else coll_name(ctype)
        name = "reduce_scatter" if name == "reduce_scatter_block" else name
        algo = (algorithms or {}).get(name)
        programs.append(  # a trace's send/recv moves one way: src (group rank 0) to dst
            build_program(
                name, algo, len(ranks), size, chunks=chunks, ranks=ranks, oneway=ctype == P2P
            )
        )
    inst_end = raw.inst_end
    rank_ops: dict[int, list[tuple[int, list[int], int]]] = {}
    op_iid: dict[int, list[int]] = {}
    for k, r in enumerate(raw.sim_ranks):
        cr = cw.ranks[r]
        sl = raw.rank_slice(k)
        ready = raw.ready[sl]
        order = _topo(cr.n_nodes, cr.dep_ptr, cr.dep_idx)
        pos = {v: i for i, v in enumerate(order)}
        comm = [v for v in order if cr.instance[v] >= 0]
        comm.sort(key=lambda v: (float(ready[v]), pos[v]))
        op_of = {v: j for j, v in enumerate(comm)}
        anc: dict[int, int] = {}  # node -> bitset of comm ops among its ancestors
        for v in order:
            bits = 0
            for d in cr.dep_idx[cr.dep_ptr[v] : cr.dep_ptr[v + 1]].tolist():
                bits |= anc.get(d, 0)
                if d in op_of:
                    bits |= 1 << op_of[d]
            anc[v] = bits
        ops = []
        for j, v in enumerate(comm):
            bits = anc[v]
            implied = 0  # ancestors of ancestors: their end is before their dependents' end
            for i in range(j):
                if bits >> i & 1:
                    implied |= anc[comm[i]]
            deps = [i for i in range(j) if (bits & ~implied) >> i & 1]
            iid = int(cr.instance[v])
            base = max((float(inst_end[int(cr.instance[comm[d]])]) for d in deps), default=0.0)
            gap = max(0, round((float(ready[v]) - base) * 1e9))
            ops.append((iid, deps, gap))
        rank_ops[r] = [(iid, deps, gap) for iid, deps, gap in ops]  # program index == iid
        op_iid[r] = [iid for iid, _, _ in ops]
    return OpListPlan(iids=iids, programs=programs, rank_ops=rank_ops, op_iid=op_iid)


@dataclass
class Pass:
    """One run of the whole op list on the agents, controller clock ns.

    ``inst``: per instance (earliest rank start, latest rank start, last rank end); the latest
    start is when the last member arrived, from which the simulator's instance runs.
    """

    start_at_ns: int
    inst: dict[int, tuple[int, int, int]]
    rank_times: dict[int, list[tuple[int, int]]]  # rank -> per op (start, end)
    bytes_sent: int
    bytes_received: int
    verified: int

    @property
    def makespan_s(self) -> float:
        """From the common start to the last op's end."""
        return max((e for _, _, e in self.inst.values()), default=self.start_at_ns) / 1e9 - (
            self.start_at_ns / 1e9
        )


def run_pass(
    ctl: Any, plan: OpListPlan, rank_agents: Sequence[str], *, lead_s: float | None = None
) -> Pass:
    """Send each agent its ranks' op lists in one Go, all starting together; gather the times.

    Uses the controller's own bounded wait (heartbeats, lost agents, error naming); the bound
    is the iteration timeout of every program plus every rank's compute gaps, plus a base.
    """
    from agents.protocol import Go, OpItem, RankOps, Result
    from genie.errors import GenieError, RuntimeFault

    if not ctl.job:
        raise RuntimeFault("run before prepare")
    involved = sorted(set(rank_agents))
    synced = getattr(ctl, "_synced_at", None)
    if synced is not None and ctl.clock.now() - synced > ctl.resync_s * 1e9:
        ctl.sync_clocks(ctl._sync_rounds)  # clocks of different hosts drift, as in ctl.run
    gaps = max((sum(g for _, _, g in ops) for ops in plan.rank_ops.values()), default=0)
    timeout = sum(ctl.iteration_timeout(p) for p in plan.programs) + gaps / 1e9 + ctl.to.base_s
    lead = lead_s if lead_s is not None else 0.01 + 0.002 * len(involved)
    start_at = ctl.clock.now() + int(lead * 1e9)
    for a in involved:
        est = ctl.offsets.get(a)
        ops = [
            RankOps(
                rank=r,
                ops=[OpItem(program=p, deps=d, gap_ns=g) for p, d, g in plan.rank_ops[r]],
            )
            for r, ag in enumerate(rank_agents)
            if ag == a and plan.rank_ops.get(r)
        ]
        go = Go(
            job=ctl.job,
            epoch=ctl.epoch,
            start_at=start_at,
            offset=est.offset_ns if est else 0,
            timeout_s=timeout,
            spin_ns=ctl.default_spin_ns(),
            rt_start=True,
            ops=ops,
        )
        ctl._send(a, go)
    try:
        got = ctl._wait(Result, involved, lead + timeout + ctl.to.base_s, "the workload's op lists")
    except GenieError:
        ctl.abort("op-list run failed")
        raise
    inst: dict[int, tuple[int, int, int]] = {}
    rank_times: dict[int, list[tuple[int, int]]] = {}
    sent = received = verified = 0
    for a, res in got.items():
        assert isinstance(res, Result)
        off = ctl.offsets[a].offset_ns if a in ctl.offsets else 0
        for rr in res.ranks:
            sent += rr.bytes_sent
            received += rr.bytes_received
            verified += rr.messages_verified
            times = [(s - off, e - off) for s, e in zip(rr.start, rr.end, strict=True)]
            rank_times[rr.rank] = times
            for iid, (s, e) in zip(plan.op_iid[rr.rank], times, strict=True):
                lo, late, hi = inst.get(iid, (s, s, e))
                inst[iid] = (min(lo, s), max(late, s), max(hi, e))
    want = plan.sent_bytes()
    if sent != want or received != want:
        raise RuntimeFault(
            f"op-list run moved {sent} bytes sent / {received} received; the plan has {want}"
        )
    return Pass(start_at, inst, rank_times, sent, received, verified)


def emulate_overlapped(
    ctl: Any,
    plan: OpListPlan,
    rank_agents: Sequence[str],
    *,
    iters: int,
    warmup: int,
    options: Any = None,
    on_pass: Callable[[int, Pass], None] | None = None,
) -> list[Pass]:
    """Prepare every instance's program once, run the op lists warmup+iters times, release."""
    from genie.errors import UsageError

    if options is not None and getattr(options, "transport", "tcp") != "tcp":
        raise UsageError("overlapped emulation runs op lists on the TCP data plane only")
    ctl.prepare(plan.programs, list(rank_agents), options)
    passes = []
    try:
        for k in range(warmup + iters):
            p = run_pass(ctl, plan, rank_agents)
            passes.append(p)
            if on_pass:
                on_pass(k, p)
    except BaseException:
        ctl.abort("interrupted")
        raise
    ctl.release()
    return passes


class InstanceBackend(FixedTimeBackend):
    """Each instance takes the time measured for that very instance on the wire (median)."""

    def __init__(self, times: dict[int, float], name: str = "testbed") -> None:
        self.times = times
        super().__init__(name)
        self.notes = [
            "testbed (overlapped): the whole trace's communication ran on the agents with the "
            "compute gaps honoured; each instance takes its own measured time (median over "
            "iterations), so interference between collectives in flight together is measured"
        ]

    def duration(self, transfer: Transfer) -> float:
        """The measured time of this instance."""
        t = self.times.get(transfer.iid)
        if t is None:
            raise StoreError(f"no measured time for instance {transfer.iid}")
        return t


def instance_medians(passes: Sequence[Pass], warmup: int) -> dict[int, float]:
    """Per instance, the median time (s) from its last member's arrival to its last rank's end
    over the non-warm-up passes (the simulator starts an instance when all members arrived)."""
    keep = list(passes[warmup:]) or list(passes)
    out: dict[int, float] = {}
    for iid in keep[0].inst if keep else ():
        out[iid] = float(np.median([(p.inst[iid][2] - p.inst[iid][1]) / 1e9 for p in keep]))
    return out
