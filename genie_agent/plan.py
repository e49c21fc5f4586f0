"""Pure planning of a job on one agent: which ranks it runs, which connections it needs, and per
rank and program the tables the executor walks (dependencies, scratch layout, message numbers).

No I/O here: the TCP transport and the tests both consume these plans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from genie.collectives.nccl_wire import channel_fn, style_of
from genie.collectives.program import Op, Program, Step
from genie.errors import CollectiveError, ProtocolError
from genie.wire.messages import Limits
from genie_agent.limits import check_programs


@dataclass(frozen=True)
class RankPlan:
    """Everything one rank needs to run one program (group rank ``group_rank``)."""

    rank: int  # global rank
    group_rank: int
    steps: tuple[Step, ...]
    peer_global: tuple[int, ...]  # per step: global rank of the peer, -1 for local steps
    buffer_bytes: int
    scratch_bytes: int
    scratch_offset: tuple[int, ...]  # per step: where a RECV lands in scratch (-1 otherwise)
    seq: tuple[int, ...]  # per SEND/RECV step: occurrence number of (peer, tag) in program order
    recv_index: dict[tuple[int, int, int], int]  # (peer global, tag, seq) -> RECV step
    dependents: tuple[tuple[int, ...], ...]
    n_deps: tuple[int, ...]
    # NCCL-style programs (``genie.collectives.nccl_wire``): how many channels the program's
    # connections to a peer are cut into, each SEND/RECV's channel, the protocol whose framing
    # its messages carry (0: Simple, none)
    channels: int = 1
    step_channel: tuple[int, ...] = ()
    proto: int = 0


@dataclass
class AgentPlan:
    """The job as this agent sees it."""

    agent: str
    ranks: list[int]  # global ranks on this agent
    programs: list[Program]
    rank_plans: list[dict[int, RankPlan]]  # per program: global rank -> plan (ranks here only)
    outgoing: list[tuple[int, int]] = field(default_factory=list)  # (my rank, peer) I connect
    incoming: list[tuple[int, int]] = field(default_factory=list)  # (peer, my rank) I accept

    def peers(self, rank: int) -> list[int]:
        """Global ranks ``rank`` talks to in any program of the job."""
        out = {q for (r, q) in self.outgoing if r == rank}
        out |= {q for (q, r) in self.incoming if r == rank}
        return sorted(out)


def _group_rank_of(program: Program, rank: int) -> int | None:
    spec = program.spec
    if spec.ranks:
        try:
            return spec.ranks.index(rank)
        except ValueError:
            return None
    return rank if 0 <= rank < spec.n_ranks else None


def plan_rank(program: Program, group_rank: int, limits: Limits) -> RankPlan:
    """Build the executor tables of one rank of one program; check them against ``limits``."""
    spec = program.spec
    steps = tuple(program.steps(group_rank))
    if len(steps) > limits.max_steps:
        raise ProtocolError(f"rank {group_rank} has {len(steps)} steps; limit {limits.max_steps}")
    n = len(steps)
    scratch_offset = [-1] * n
    seq = [-1] * n
    peer_global = [-1] * n
    counters: dict[tuple[int, int, int], int] = {}
    recv_index: dict[tuple[int, int, int], int] = {}
    dependents: list[list[int]] = [[] for _ in range(n)]
    scratch = 0
    me = spec.global_rank(group_rank)
    for i, st in enumerate(steps):
        if st.nbytes < 0:
            raise CollectiveError(f"step {i} of rank {group_rank} has negative size")
        for d in st.deps:
            if not 0 <= d < i:
                raise CollectiveError(f"step {i} of rank {group_rank} depends on step {d}")
            dependents[d].append(i)
        if st.op in (Op.SEND, Op.RECV):
            if not 0 <= st.peer < spec.n_ranks or st.peer == group_rank:
                raise CollectiveError(f"step {i} of rank {group_rank} has bad peer {st.peer}")
            q = spec.global_rank(st.peer)
            peer_global[i] = q
            key = (int(st.op), q, st.tag)
            seq[i] = counters.get(key, 0)
            counters[key] = seq[i] + 1
            if st.op == Op.RECV:
                scratch_offset[i] = scratch
                scratch += st.nbytes
                recv_index[(q, st.tag, seq[i])] = i
        else:
            if not 0 <= st.src < i or steps[st.src].op != Op.RECV:
                raise CollectiveError(f"step {i} of rank {group_rank} reduces a non-RECV step")
            if st.nbytes > steps[st.src].nbytes:
                raise CollectiveError(f"step {i} of rank {group_rank} uses more than it received")
    buffer_bytes, _ = program.footprint(group_rank)  # the one rule (genie.collectives.program)
    if buffer_bytes + scratch > limits.max_rank_bytes:
        raise ProtocolError(
            f"rank {me} needs {buffer_bytes + scratch} bytes; limit {limits.max_rank_bytes}"
        )
    style = style_of(spec)
    chan = channel_fn(spec)
    return RankPlan(
        rank=me,
        group_rank=group_rank,
        steps=steps,
        peer_global=tuple(peer_global),
        buffer_bytes=buffer_bytes,
        scratch_bytes=scratch,
        scratch_offset=tuple(scratch_offset),
        seq=tuple(seq),
        recv_index=recv_index,
        dependents=tuple(tuple(d) for d in dependents),
        n_deps=tuple(len(st.deps) for st in steps),
        channels=style.channels if style else 1,
        step_channel=tuple(chan(st) for st in steps) if chan else (),
        proto=style.proto_id if style else 0,
    )


def plan_agent(
    agent: str, programs: Sequence[Program], placement: Sequence[str], limits: Limits
) -> AgentPlan:
    """Plan the job for ``agent``: its ranks, their per-program tables, its connections."""
    check_programs(programs, placement, limits)
    mine = [r for r, a in enumerate(placement) if a == agent]
    rank_plans: list[dict[int, RankPlan]] = []
    pairs: set[tuple[int, int]] = set()
    for prog in programs:
        plans: dict[int, RankPlan] = {}
        for r in mine:
            g = _group_rank_of(prog, r)
            if g is None:
                continue
            rp = plan_rank(prog, g, limits)
            plans[r] = rp
            for q in rp.peer_global:
                if q >= 0:
                    pairs.add((min(r, q), max(r, q)))
        # buffers are taken per run (a Go runs one program on every local rank at once; an op
        # list runs what is in flight, bounded by the data plane's memory bound as it runs)
        total = sum(rp.buffer_bytes + rp.scratch_bytes for rp in plans.values())
        if total > limits.max_agent_bytes:
            raise ProtocolError(
                f"{prog!r} needs {total} bytes on {agent}; limit {limits.max_agent_bytes}"
            )
        rank_plans.append(plans)
    mine_set = set(mine)
    outgoing = sorted((a, b) for a, b in pairs if a in mine_set)
    incoming = sorted((a, b) for a, b in pairs if b in mine_set)
    return AgentPlan(agent, mine, list(programs), rank_plans, outgoing, incoming)
