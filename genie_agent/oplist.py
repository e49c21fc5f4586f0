"""Per-rank op lists: a rank's communication ops with their compute waits, checked on the agent.

An op list is how ``genie emulate`` runs a whole workload's communication on the agents without
the controller on the critical path. The controller ships, in one ``Go``, for each rank the ordered
list of its communication ops. Op ``j`` names a program of the job (the collective it runs: a
step's instances of one layer's all-reduce share one), its instance (one collective instance
of the trace: the same number on every rank taking part, at most once per list, carried by its
frames, so ops may be in flight together), the earlier ops of the list it depends on, and a
compute gap. The rank starts op ``j`` at::

    due(j) = max(end(d) for d in deps) + gap_ns     (deps non-empty)
    due(j) = start + gap_ns                          (no deps: the gap is the offset from the start)

and never before every op of its ``after`` list has ended (issue order: the collectives of one
process group run one at a time, or N at a time, as NCCL's per-communicator stream does; no gap
is added after them). Both lists name earlier ops only.

and runs every started op's steps concurrently over the rank's streams (the TCP executor's
``run_ops``, in ``genie_agent.dataplane.tcp_oplist``). Frames carry their instance, so a receive
of an op that has not started yet on this rank (its peer was earlier) lands in that op's own
scratch at once and completes when it starts.

Nothing here does I/O: ``check_ops`` validates a Go's op lists against this agent's plan before
anything is allocated or started.
"""

from __future__ import annotations

from collections.abc import Sequence

from genie.errors import GenieError, ProtocolError
from genie.wire.messages import Go, OpItem, RankOps
from genie_agent.plan import AgentPlan

MAX_OPS_PER_RANK = 1_000_000  # the Go frame limit bounds a list first (about 12 bytes an op)
MAX_INSTANCE = (1 << 32) - 1  # frames carry it in 32 bits
MAX_DEPS_PER_OP = 256
MAX_GAP_NS = 3600 * 10**9  # an hour of compute between two ops is surely a mistake


def go_oplists(go: Go, plan: AgentPlan | None) -> dict[int, list[OpItem]] | None:
    """A Go's op lists checked against ``plan`` (None: a Go of one program); a ProtocolError
    with the one line a data plane reports as the run's failure."""
    if not go.ops:
        return None
    if plan is None:
        raise ProtocolError("op list without a prepared job")
    try:
        return check_ops(go.ops, plan)
    except GenieError as exc:
        raise ProtocolError(f"op list refused: {exc}") from None


def check_ops(ranks_ops: Sequence[RankOps], plan: AgentPlan) -> dict[int, list[OpItem]]:
    """Validate op lists against ``plan``; return global rank -> its ops (ProtocolError if bad)."""
    out: dict[int, list[OpItem]] = {}
    mine = set(plan.ranks)
    n_prog = len(plan.programs)
    for ro in ranks_ops:
        if ro.rank not in mine:
            raise ProtocolError(f"op list for rank {ro.rank}, which is not on {plan.agent}")
        if ro.rank in out:
            raise ProtocolError(f"two op lists for rank {ro.rank}")
        if len(ro.ops) > MAX_OPS_PER_RANK:
            raise ProtocolError(
                f"rank {ro.rank}: {len(ro.ops)} ops; limit {MAX_OPS_PER_RANK} per rank"
            )
        used: set[int] = set()
        for j, op in enumerate(ro.ops):
            if not 0 <= op.program < n_prog:
                raise ProtocolError(f"rank {ro.rank} op {j}: no program {op.program}")
            if ro.rank not in plan.rank_plans[op.program]:
                raise ProtocolError(
                    f"rank {ro.rank} op {j}: rank takes no part in program {op.program}"
                )
            if not -1 <= op.instance <= MAX_INSTANCE:
                raise ProtocolError(f"rank {ro.rank} op {j}: instance {op.instance} out of range")
            if op.key in used:
                raise ProtocolError(f"rank {ro.rank} op {j}: instance {op.key} used twice")
            used.add(op.key)
            if len(op.deps) > MAX_DEPS_PER_OP or len(set(op.deps)) != len(op.deps):
                raise ProtocolError(f"rank {ro.rank} op {j}: too many or repeated deps")
            if any(not 0 <= d < j for d in op.deps):
                raise ProtocolError(f"rank {ro.rank} op {j}: deps must name earlier ops")
            if len(op.after) > MAX_DEPS_PER_OP or len(set(op.after)) != len(op.after):
                raise ProtocolError(f"rank {ro.rank} op {j}: too many or repeated order deps")
            if any(not 0 <= d < j for d in op.after):
                raise ProtocolError(f"rank {ro.rank} op {j}: order deps must name earlier ops")
            if not 0 <= op.gap_ns <= MAX_GAP_NS:
                raise ProtocolError(f"rank {ro.rank} op {j}: gap {op.gap_ns} ns out of bounds")
        out[ro.rank] = list(ro.ops)
    return out


def dependents(ops: Sequence[OpItem]) -> list[list[int]]:
    """For each op, the later ops that wait for it (as a data dep or in issue order)."""
    out: list[list[int]] = [[] for _ in ops]
    for j, op in enumerate(ops):
        for d in {*op.deps, *op.after}:
            out[d].append(j)
    return out


def waits(op: OpItem) -> int:
    """How many distinct earlier ops ``op`` waits for."""
    return len({*op.deps, *op.after})


def due_ns(op: OpItem, end: Sequence[int], start_ns: int) -> int:
    """When ``op`` may start, its deps and order deps having ended at ``end`` (ns)."""
    base = max(end[d] for d in op.deps) if op.deps else start_ns
    return max(base + op.gap_ns, max((end[d] for d in op.after), default=0))
