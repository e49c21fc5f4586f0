"""Planning the live path, purely: which collectives a workload runs and each rank's op list.

* ``distinct_transfers`` groups a compiled workload's communication instances by (collective,
  size, group) and ``plan_key`` plans one of them as a step program (isolated mode);
* ``compile_oplists`` plans every instance as a program of its own and gives each rank its op
  list: its ops in order, each with the earlier ops it depends on and the compute gap before it
  (overlapped mode; the agents' side is ``genie_agent.oplist``).

Nothing here touches a socket, the controller or the store: plans are data, tested as data.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from genie.collectives.program import Op, Program
from genie.sim.compiled import CompiledRank, CompiledWorkload
from genie.sim.network import ZeroNetwork
from genie.vocabulary import P2P, planned_name
from genie.wire.messages import LEAN_REGION, DataOptions

Key = tuple[int, int, tuple[int, ...]]  # (comm_type, size, global ranks)
MAX_CHANNELS = 4  # connection sets per rank pair (process groups beyond share them)


def distinct_transfers(cw: CompiledWorkload) -> dict[Key, int]:
    """Each distinct (comm_type, size, ranks) of the workload with how often it occurs."""
    out: dict[Key, int] = {}
    ins = cw.instances
    for iid in range(len(ins)):
        key = (int(ins.comm_type[iid]), int(ins.size[iid]), tuple(cw.instance_ranks(iid)))
        out[key] = out.get(key, 0) + 1
    return out


def plan_key(key: Key, algorithms: dict[str, str] | None = None, chunks: int = 1) -> Program:
    """The step program of one distinct transfer (group-local ranks 0..n-1)."""
    from genie.collectives import build_program

    ctype, size, ranks = key
    name = planned_name(ctype)
    algo = (algorithms or {}).get(name)
    return build_program(name, algo, len(ranks), size, chunks=chunks)


@dataclass
class OpListPlan:
    """The compiled communication of a workload: its programs (each a collective with its ranks,
    size and connection set; the step's instances of one repeat share one), which program each
    communication instance runs, and per rank the op list over the instances."""

    iids: list[int]  # every communication instance id, in order
    programs: list[Program]  # distinct programs (templates)
    instance_program: list[int]  # instance id -> index of the program it runs
    rank_ops: dict[int, list[tuple[int, list[int], int]]]  # rank -> [(instance, deps, gap_ns)]
    op_iid: dict[int, list[int]]  # rank -> instance id of each op
    # rank -> per op the earlier ops it waits for in issue order (same process group), no gap
    rank_after: dict[int, list[list[int]]] = field(default_factory=dict)
    comm_concurrency: int = 1  # collectives of one group in flight at once per rank (0: any)
    # per program, the set of connections its bytes take (``program_channels``)
    channels: list[int] = field(default_factory=list)
    group_of: list[int] = field(default_factory=list)  # instance id -> process group (-1: p2p)

    def program_of(self, iid: int) -> Program:
        """The program instance ``iid`` runs."""
        return self.programs[self.instance_program[iid]]

    def op_index(self) -> dict[tuple[int, int], int]:
        """(rank, instance id) -> the op's position in that rank's list."""
        return {(r, iid): j for r, iids in self.op_iid.items() for j, iid in enumerate(iids)}

    def channel_of(self, iid: int) -> int:
        """The connection set instance ``iid`` sends on."""
        return self.channels[self.instance_program[iid]]

    @property
    def n_channels(self) -> int:
        """How many connection sets each rank pair opens."""
        return max(self.channels, default=0) + 1

    def data_options(self, flows: int, payload: str = "lean", congestion: str = "") -> DataOptions:
        """Data-plane options: ``flows`` connections per rank pair for each channel; the
        payload mode (``DataOptions.payload``: lean unless the results are to be checked); the
        TCP congestion control (``DataOptions.congestion``)."""
        n = self.n_channels
        return DataOptions(
            streams=flows * n,
            channels=n,
            program_channels=list(self.channels),
            payload=payload,
            congestion=congestion,
        )

    def sent_bytes(self) -> int:
        """Bytes every SEND step of every instance moves (what the agents must report sent)."""

        per_program = [
            sum(st.nbytes for _, steps in p.iter_ranks() for st in steps if st.op == Op.SEND)
            for p in self.programs
        ]
        return sum(per_program[k] for k in self.instance_program)

    def peak_bytes(self, placement: Sequence[str], payload: str = "lean") -> dict[str, int]:
        """Bytes of buffers each agent may hold at once (``placement``: rank -> agent).

        Lean payloads: each rank one send region and one sink, as big as its largest message
        up to ``LEAN_REGION``. Real payloads: an agent holds the buffers of its ranks' ops in
        flight (``genie_agent.dataplane.pool``). With issue order (``comm_concurrency`` N >= 1)
        a rank has at most N collectives of a process group in flight, and peers at most N more
        it has not started (their frames land early): per group, 2N times its largest op, never
        more than all its ops. Without issue order, and for send/recv (no group), every op
        counts.
        """
        foot: dict[tuple[int, int], int] = {}  # (program, rank) -> bytes it needs

        def bytes_of(k: int, rank: int) -> int:
            got = foot.get((k, rank))
            if got is None:
                prog = self.programs[k]
                ranks = prog.spec.ranks or tuple(range(prog.n_ranks))
                g = ranks.index(rank)
                if payload == "lean":
                    got = max((st.nbytes for st in prog.steps(g) if st.op <= Op.RECV), default=0)
                else:
                    got = sum(prog.footprint(g))
                foot[(k, rank)] = got
            return got

        n = self.comm_concurrency
        out: dict[str, int] = {}
        for rank, iids in self.op_iid.items():
            if payload == "lean":
                biggest = max((bytes_of(self.instance_program[i], rank) for i in iids), default=0)
                agent = placement[rank]
                out[agent] = out.get(agent, 0) + 2 * max(1, min(LEAN_REGION, biggest))
                continue
            per_group: dict[int, list[int]] = {}
            for iid in iids:
                k = self.instance_program[iid]
                per_group.setdefault(self.group_of[iid], []).append(bytes_of(k, rank))
            need = 0
            for g, sizes in per_group.items():
                bound = sum(sizes)
                if n >= 1 and g >= 0:
                    bound = min(bound, 2 * n * max(sizes))
                need += bound
            agent = placement[rank]
            out[agent] = out.get(agent, 0) + need
        return out

    def describe_order(self) -> str:
        """One phrase for reports: how collectives of one process group are ordered."""
        n = self.comm_concurrency
        if n == 0:
            return "collectives of one process group may all be in flight together"
        if n == 1:
            return "collectives of one process group run in issue order, one at a time"
        return f"collectives of one process group run in issue order, at most {n} at a time"


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


def _issue_order(
    cr: CompiledRank, comm: list[int], group: np.ndarray, seq: np.ndarray, window: int
) -> dict[int, int]:
    """node -> the node of the same process group ``window`` collectives earlier on this rank.

    NCCL runs the collectives of one communicator in issue order on its stream; with ``window``
    N, collective k of a group may start once collective k - N of that group has finished
    (N = 1: one at a time). Point-to-point instances (no group) are not chained.
    """
    if window <= 0:
        return {}
    by_group: dict[int, list[tuple[int, int]]] = {}
    for v in comm:
        iid = int(cr.instance[v])
        g = int(group[iid])
        if g >= 0:
            by_group.setdefault(g, []).append((int(seq[iid]), v))
    out: dict[int, int] = {}
    for members in by_group.values():
        members.sort()
        for k in range(window, len(members)):
            out[members[k][1]] = members[k - window][1]
    return out


def compile_oplists(
    cw: CompiledWorkload,
    algorithms: dict[str, str] | None = None,
    chunks: int = 1,
    max_instances: int = 0,
    comm_concurrency: int = 1,
) -> OpListPlan:
    """Plan every communication instance and each rank's op list (see ``genie_agent.oplist``).

    Instances that run the same collective (type, algorithm, size, chunks, ranks, connection
    set) share one program: a step's thousands of instances are a few programs, and an agent
    takes each instance's buffers only while it runs. ``max_instances`` > 0 refuses longer
    workloads (0: no cap).

    The compute gaps come from a replay on a network where communication takes no time: op j of
    a rank becomes due ``gap`` after the latest of its communication ancestors (in the rank's
    data-dep DAG) finished, or ``gap`` after the start when it has none; ``gap`` is what compute
    (serial on the rank's stream) put between them in that replay. On the wire, a slow
    collective thus delays what depends on it by exactly as much as it is slower.

    Issue order: with ``comm_concurrency`` N >= 1 (default 1), a collective also waits, with no
    gap, for the collective N earlier of the same process group on its rank (its ``after``
    list), as NCCL runs one communicator's collectives in order on its stream; 0 lets every
    collective start as soon as its data dependencies allow.
    """
    from genie.collectives import build_program
    from genie.errors import UsageError
    from genie.sim.engine import simulate

    ins = cw.instances
    if 0 < max_instances < len(ins):
        raise UsageError(
            f"the workload has {len(ins)} communication instances, more than --max-instances "
            f"{max_instances}"
        )
    if comm_concurrency < 0:
        raise UsageError(f"comm concurrency must be >= 0 (0: unlimited), got {comm_concurrency}")
    raw = simulate(cw, ZeroNetwork())
    iids = list(range(len(ins)))
    groups = [int(g) for g in ins.group.tolist()]
    inst_channel = program_channels(groups)
    programs: list[Program] = []
    channels: list[int] = []
    instance_program: list[int] = []
    known: dict[tuple, int] = {}
    for iid in iids:
        ctype, size, ranks = int(ins.comm_type[iid]), int(ins.size[iid]), cw.instance_ranks(iid)
        name = planned_name(ctype)
        algo = (algorithms or {}).get(name)
        mat = ins.splits.get(iid)  # an uneven all-to-all: its per-peer bytes
        splits = () if mat is None else tuple(int(x) for x in mat.ravel())
        key = (ctype, algo, size, tuple(ranks), splits, inst_channel[iid])
        k = known.get(key)
        if k is None:
            k = known[key] = len(programs)
            programs.append(  # a trace's send/recv moves one way: src (group rank 0) to dst
                build_program(
                    name,
                    algo,
                    len(ranks),
                    size,
                    chunks=chunks,
                    ranks=ranks,
                    oneway=ctype == P2P,
                    splits=splits,
                )
            )
            channels.append(inst_channel[iid])
        instance_program.append(k)
    inst_end = raw.inst_end
    rank_ops: dict[int, list[tuple[int, list[int], int]]] = {}
    rank_after: dict[int, list[list[int]]] = {}
    op_iid: dict[int, list[int]] = {}
    for k, r in enumerate(raw.sim_ranks):
        cr = cw.ranks[r]
        sl = raw.rank_slice(k)
        ready = raw.ready[sl]
        order = _topo(cr.n_nodes, cr.dep_ptr, cr.dep_idx)
        pos = {v: i for i, v in enumerate(order)}
        reach = _CommReach(cr, order, pos)
        comm_nodes = reach.comm
        prev = _issue_order(cr, comm_nodes, ins.group, ins.seq, comm_concurrency)
        keys = {v: (float(ready[v]), pos[v]) for v in comm_nodes}
        comm = _list_order(comm_nodes, reach.deps, prev, keys)
        op_of = {v: j for j, v in enumerate(comm)}
        ops, after = [], []
        for v in comm:
            deps = sorted(op_of[d] for d in reach.deps[v])
            iid = int(cr.instance[v])
            base = max((float(inst_end[int(cr.instance[comm[d]])]) for d in deps), default=0.0)
            gap = max(0, round((float(ready[v]) - base) * 1e9))
            ops.append((iid, deps, gap))
            p = prev.get(v)
            after.append([op_of[p]] if p is not None and not reach.is_ancestor(p, v) else [])
        rank_ops[r] = ops
        rank_after[r] = after
        op_iid[r] = [iid for iid, _, _ in ops]
    return OpListPlan(
        iids=iids,
        programs=programs,
        instance_program=instance_program,
        rank_ops=rank_ops,
        op_iid=op_iid,
        rank_after=rank_after,
        comm_concurrency=comm_concurrency,
        channels=channels,
        group_of=groups,
    )


class _CommReach:
    """Which communication nodes of one rank come before which, in its data-dep DAG.

    ``deps[v]``: the nearest communication ancestors of comm node ``v`` that are no ancestor
    of one another (the transitive reduction of the DAG restricted to comm nodes); ancestry is
    answered by a walk up those, pruned by topological position. Linear in the nodes for the
    DAGs traces have (frontiers of a few nodes); no bitset of all ancestors per node, which grew
    as nodes x instances.
    """

    def __init__(self, cr: CompiledRank, order: list[int], pos: dict[int, int]) -> None:
        self.pos = pos
        inst = cr.instance
        ptr, idx = cr.dep_ptr, cr.dep_idx
        self.comm = [v for v in order if inst[v] >= 0]
        self.deps: dict[int, list[int]] = {}
        frontier: dict[int, list[int]] = {}  # non-comm node -> its nearest comm ancestors
        for v in order:
            cands: set[int] = set()
            for d in idx[ptr[v] : ptr[v + 1]].tolist():
                if inst[d] >= 0:
                    cands.add(d)
                else:
                    cands.update(frontier[d])
            front = self._maximal(cands)
            if inst[v] >= 0:
                self.deps[v] = front
            else:
                frontier[v] = front

    def _maximal(self, cands: set[int]) -> list[int]:
        """``cands`` without those that are ancestors of another of them."""
        if len(cands) < 2:
            return list(cands)
        return [x for x in cands if not any(y != x and self.is_ancestor(x, y) for y in cands)]

    def is_ancestor(self, x: int, y: int) -> bool:
        """True when comm node ``x`` comes before comm node ``y`` in the DAG."""
        px = self.pos[x]
        if px >= self.pos[y]:
            return False
        stack, seen = [y], {y}
        while stack:
            for d in self.deps.get(stack.pop(), ()):
                if d == x:
                    return True
                if d not in seen and self.pos[d] > px:
                    seen.add(d)
                    stack.append(d)
        return False


def describe_payload(payload: str) -> str:
    """One phrase for reports: what the bytes on the wire are."""
    if payload == "lean":
        return (
            "payloads are pattern bytes from one fixed region per rank (8 MiB at most), "
            "reductions are not computed, and the first 4 KiB of each message part is "
            "checksummed: the same bytes on the wire, memory that does not grow with the "
            "message sizes (--payload real computes every collective in buffers of its own)"
        )
    return (
        "every instance computes its collective in buffers of its own while it runs, each "
        "message checksummed whole"
    )


def describe_connections(flows: int, sets: int = 1) -> str:
    """One phrase for reports: the connections each rank pair opens, and why."""
    if sets == 1:
        return f"{flows} TCP connection(s) per rank pair (the flows the model prices)"
    return (
        f"{flows} TCP connection(s) per rank pair for each of {sets} sets of process groups "
        f"({flows * sets} in all): as NCCL gives each communicator its own, a collective never "
        "queues behind another group's bytes in one connection"
    )


def program_channels(groups: list[int], max_channels: int = MAX_CHANNELS) -> list[int]:
    """Per program (its process group; -1: send/recv), the set of connections it sends on:
    one set per group in order of first appearance, send/recv a set of their own, groups beyond
    ``max_channels`` sharing sets round-robin. NCCL gives each communicator its own connections;
    on one shared connection a small collective waited behind a big one of another group (a
    128 KiB all-reduce issued under an 8 MiB one took 229 ms on a 200 Mbit/s link, not ~10)."""
    order = {g: k for k, g in enumerate(dict.fromkeys(groups))}
    return [order[g] % max_channels for g in groups]


def _list_order(
    nodes: list[int],
    deps: dict[int, list[int]],
    prev: dict[int, int],
    key: dict[int, tuple[float, int]],
) -> list[int]:
    """The comm nodes in list order: by ``key`` (ready time, then DAG position), yet never
    before a data ancestor (``deps``: the nearest ones) or the collective it waits for in issue
    order."""
    index = {v: i for i, v in enumerate(nodes)}
    succ: list[list[int]] = [[] for _ in nodes]
    pending = [0] * len(nodes)
    for i, v in enumerate(nodes):
        before = {index[d] for d in deps[v]}
        if v in prev:
            before.add(index[prev[v]])
        pending[i] = len(before)
        for b in before:
            succ[b].append(i)
    heap = [(key[v], i) for i, v in enumerate(nodes) if pending[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(nodes[i])
        for w in succ[i]:
            pending[w] -= 1
            if pending[w] == 0:
                heapq.heappush(heap, (key[nodes[w]], w))
    if len(out) < len(nodes):
        from genie.errors import UsageError

        raise UsageError(
            "a collective depends on data from a later collective of its own process group: "
            "issue order cannot hold; use --comm-concurrency 0"
        )
    return out


def dilate_plan(plan: OpListPlan, k: float) -> OpListPlan:
    """The same plan with every compute gap multiplied by ``k`` (time dilation; see
    ``genie.calibration.dilation``): run on the wire, then read every time divided by ``k``."""
    import dataclasses

    rank_ops = {
        r: [(iid, deps, round(gap * k)) for iid, deps, gap in ops]
        for r, ops in plan.rank_ops.items()
    }
    return dataclasses.replace(plan, rank_ops=rank_ops)
