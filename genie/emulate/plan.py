"""Planning the live path, purely: which collectives a workload runs and each rank's op list.

* ``distinct_transfers`` groups a compiled workload's communication instances by (collective,
  size, group) and ``plan_key`` plans one of them as a step program (isolated mode);
* ``compile_oplists`` plans every instance as a program of its own and gives each rank its op
  list: its ops in order, each with the earlier ops it depends on and the compute gap before it
  (overlapped mode; the agents' side is ``agents.oplist``).

Nothing here touches a socket, the controller or the store: plans are data, tested as data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from genie.sim.compiled import CompiledWorkload
from genie.sim.network import ZeroNetwork
from genie.vocabulary import P2P, planned_name

Key = tuple[int, int, tuple[int, ...]]  # (comm_type, size, global ranks)


def distinct_transfers(cw: CompiledWorkload) -> dict[Key, int]:
    """Each distinct (comm_type, size, ranks) of the workload with how often it occurs."""
    out: dict[Key, int] = {}
    ins = cw.instances
    for iid in range(len(ins)):
        key = (int(ins.comm_type[iid]), int(ins.size[iid]), tuple(cw.instance_ranks(iid)))
        out[key] = out.get(key, 0) + 1
    return out


def plan_key(key: Key, algorithms: dict[str, str] | None = None, chunks: int = 1) -> Any:
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


def dilate_plan(plan: OpListPlan, k: float) -> OpListPlan:
    """The same plan with every compute gap multiplied by ``k`` (time dilation; see
    ``genie.calibration.dilation``): run on the wire, then read every time divided by ``k``."""
    rank_ops = {
        r: [(iid, deps, round(gap * k)) for iid, deps, gap in ops]
        for r, ops in plan.rank_ops.items()
    }
    return OpListPlan(plan.iids, plan.programs, rank_ops, plan.op_iid)
