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
from dataclasses import dataclass, field

import numpy as np

from genie.collectives.program import Program
from genie.sim.compiled import CompiledRank, CompiledWorkload
from genie.sim.network import ZeroNetwork
from genie.vocabulary import P2P, planned_name
from genie.wire.messages import DataOptions

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
    """The compiled communication of a workload: one program per instance, per-rank op lists."""

    iids: list[int]  # program index -> instance id
    programs: list[Program]
    rank_ops: dict[int, list[tuple[int, list[int], int]]]  # rank -> [(program, deps, gap_ns)]
    op_iid: dict[int, list[int]]  # rank -> instance id of each op
    # rank -> per op the earlier ops it waits for in issue order (same process group), no gap
    rank_after: dict[int, list[list[int]]] = field(default_factory=dict)
    comm_concurrency: int = 1  # collectives of one group in flight at once per rank (0: any)
    # per program, the set of connections its bytes take (``program_channels``)
    channels: list[int] = field(default_factory=list)

    @property
    def n_channels(self) -> int:
        """How many connection sets each rank pair opens."""
        return max(self.channels, default=0) + 1

    def data_options(self, flows: int) -> DataOptions:
        """Data-plane options: ``flows`` connections per rank pair for each channel."""
        n = self.n_channels
        return DataOptions(streams=flows * n, channels=n, program_channels=list(self.channels))

    def sent_bytes(self) -> int:
        """Bytes every SEND step of every program moves (what the agents must report sent)."""
        from genie.collectives.program import Op

        total = 0
        for p in self.programs:
            for _, steps in p.iter_ranks():
                total += sum(s.nbytes for s in steps if s.op == Op.SEND)
        return total

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
    max_instances: int = 256,
    comm_concurrency: int = 1,
) -> OpListPlan:
    """Plan every communication instance and each rank's op list (see ``genie_agent.oplist``).

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
    if len(ins) > max_instances:
        raise UsageError(
            f"the workload has {len(ins)} communication instances; overlapped emulation runs "
            f"at most {max_instances} (each gets buffers of its own): use --mode isolated"
        )
    if comm_concurrency < 0:
        raise UsageError(f"comm concurrency must be >= 0 (0: unlimited), got {comm_concurrency}")
    raw = simulate(cw, ZeroNetwork())
    iids = list(range(len(ins)))
    programs = []
    for iid in iids:
        ctype, size, ranks = int(ins.comm_type[iid]), int(ins.size[iid]), cw.instance_ranks(iid)
        name = planned_name(ctype)
        algo = (algorithms or {}).get(name)
        mat = ins.splits.get(iid)  # an uneven all-to-all: its per-peer bytes
        programs.append(  # a trace's send/recv moves one way: src (group rank 0) to dst
            build_program(
                name,
                algo,
                len(ranks),
                size,
                chunks=chunks,
                ranks=ranks,
                oneway=ctype == P2P,
                splits=() if mat is None else tuple(int(x) for x in mat.ravel()),
            )
        )
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
        comm_nodes = [v for v in order if cr.instance[v] >= 0]
        bit = {v: i for i, v in enumerate(comm_nodes)}
        anc: dict[int, int] = {}  # node -> bitset (by ``bit``) of comm nodes among its ancestors
        for v in order:
            bits = 0
            for d in cr.dep_idx[cr.dep_ptr[v] : cr.dep_ptr[v + 1]].tolist():
                bits |= anc.get(d, 0)
                if d in bit:
                    bits |= 1 << bit[d]
            anc[v] = bits
        prev = _issue_order(cr, comm_nodes, ins.group, ins.seq, comm_concurrency)
        keys = {v: (float(ready[v]), pos[v]) for v in comm_nodes}
        comm = _list_order(comm_nodes, anc, prev, keys)
        op_of = {v: j for j, v in enumerate(comm)}
        ops, after = [], []
        for v in comm:
            bits = anc[v]
            mine = [op_of[comm_nodes[b]] for b in range(len(comm_nodes)) if bits >> b & 1]
            implied: set[int] = set()  # ancestors of ancestors: they end before their dependents
            for i in mine:
                b = anc[comm[i]]
                implied.update(op_of[comm_nodes[x]] for x in range(len(comm_nodes)) if b >> x & 1)
            deps = sorted(i for i in mine if i not in implied)
            iid = int(cr.instance[v])
            base = max((float(inst_end[int(cr.instance[comm[d]])]) for d in deps), default=0.0)
            gap = max(0, round((float(ready[v]) - base) * 1e9))
            ops.append((iid, deps, gap))
            p = prev.get(v)
            after.append([op_of[p]] if p is not None and op_of[p] not in mine else [])
        rank_ops[r] = ops  # program index == iid
        rank_after[r] = after
        op_iid[r] = [iid for iid, _, _ in ops]
    return OpListPlan(
        iids=iids,
        programs=programs,
        rank_ops=rank_ops,
        op_iid=op_iid,
        rank_after=rank_after,
        comm_concurrency=comm_concurrency,
        channels=program_channels([int(ins.group[i]) for i in iids]),
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
    nodes: list[int], anc: dict[int, int], prev: dict[int, int], key: dict[int, tuple]
) -> list[int]:
    """The comm nodes in list order: by ``key`` (ready time, then DAG position), yet never
    before a data ancestor or the collective it waits for in issue order."""
    index = {v: i for i, v in enumerate(nodes)}
    succ: list[list[int]] = [[] for _ in nodes]
    pending = [0] * len(nodes)
    for i, v in enumerate(nodes):
        before = {b for b in range(len(nodes)) if anc[v] >> b & 1}
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
