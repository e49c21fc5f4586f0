"""CUDA stream and ProcessGroupNCCL semantics: the edges a PyTorch-derived trace leaves out.

A Chakra trace converted from PyTorch makes each GPU kernel depend on the CPU ops that launched
it (and produced its inputs), rarely on other kernels. The CPU runs ahead of the GPU, so a replay
of those edges alone starts a kernel as soon as its launch is done, long before the kernels
launched ahead of it on its stream have run. PyTorch does not run it that way; ``stream_edges``
gives back what the semantics imply, as extra dependencies by node position:

=====================  ========================================================================
rule                   what it adds (the PyTorch behaviour it mirrors)
=====================  ========================================================================
``stream_order``       a kernel waits for the kernel launched before it on its stream (a CUDA
                       stream runs its kernels one at a time, in launch order). Collectives on
                       a stream genie infers (no stream in the trace) are left to the issue
                       order per process group (``genie.sim.streams``, ``--comm-concurrency``)
``comm_after_compute`` a collective or send/recv waits for the last compute kernel launched
                       before it (ProcessGroupNCCL makes its NCCL stream wait for the current
                       stream at every launch, ``syncStream``)
``wait``               after a CPU op named ``wait`` / ``wait_tensor`` the next compute kernel
                       waits for the last kernel of every communication stream launched before
                       it (``Work.wait()`` makes the current stream wait for the NCCL stream)
``synchronize``        a CPU ``cudaDeviceSynchronize`` / ``cudaStreamSynchronize`` waits for the
                       last kernel of every stream launched before it, and the next CPU op of
                       its thread waits for it (the host blocks)
=====================  ========================================================================

Launch order: a kernel is launched by the latest (in file order, the CPU thread's order) CPU op
among its data_deps; a kernel without one inherits the launch of its latest GPU dependency, else
its own file position. Streams: the node's ``stream`` attr, else a GPU node's ``tid`` (older
Chakra converters store Kineto's stream there), else inferred: one compute stream, one NCCL
stream per process group. A stream holding a collective is a communication stream.

The rules apply only to PyTorch-derived ranks (CPU ops, and some GPU node depending on one);
generated workloads and ASTRA-sim traces (no CPU ops) get nothing. An edge is added only where
it agrees with an order that keeps the trace's own dependencies (never a cycle); those it could
not add are counted as ``skipped``.

``genie.workload.stream_columns`` gives the same edges for a rank held as columns, without a
Python object per node (tested equal to ``stream_edges``: edges, their order, counts, skipped).
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from genie.workload.graph import index_order
from genie.workload.model import NodeType, RankGraph

RULES = ("stream_order", "comm_after_compute", "wait", "synchronize")
#: what ``genie workload inspect`` and ``genie simulate`` call each rule
RULE_TEXT = {
    "stream_order": "kernels of one CUDA stream in launch order",
    "comm_after_compute": "communication after the compute launched before it (ProcessGroupNCCL)",
    "wait": "compute after the communication a wait() waited on",
    "synchronize": "the CPU after the GPU work a synchronize waited on",
}
MODES = ("inferred", "explicit")

_GPU_TYPES = frozenset(
    (
        NodeType.COMP_NODE,
        NodeType.MEM_LOAD_NODE,
        NodeType.MEM_STORE_NODE,
        NodeType.COMM_COLL_NODE,
        NodeType.COMM_SEND_NODE,
        NodeType.COMM_RECV_NODE,
    )
)
_COMM_TYPES = frozenset((NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE))
_CPU_SKIP = frozenset((NodeType.METADATA_NODE, NodeType.INVALID_NODE))
_IS_CPU = attrgetter("is_cpu_op")
_WAIT = re.compile(r"(^|[:.])_?wait(_tensor)?(\(|$|\b)")
_SYNC = re.compile(r"cuda(Device|Stream)Synchronize|(^|[:.])synchronize(\(|$)")


@dataclass
class StreamEdges:
    """The extra dependencies of one rank: ``edges[pos]`` are positions node ``pos`` waits for."""

    applies: bool = False
    streams: str = ""  # where the streams came from: "stream attr", "tid", "inferred"
    edges: dict[int, list[int]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))
    skipped: int = 0

    @property
    def added(self) -> int:
        """Edges added over all rules."""
        return sum(self.counts.values())


def stream_edges(rank: RankGraph, has_cpu_ops: bool | None = None) -> StreamEdges:
    """The rules' edges for ``rank`` (cached on the rank while its node list is unchanged).

    ``has_cpu_ops=False`` (a caller that knows no node is marked ``is_cpu_op``) skips the
    nodes: such a rank is not PyTorch-derived and gets nothing.
    """
    cache = rank.__dict__.get("_stream_edges")
    if cache is not None and cache[0] == len(rank.nodes):
        return cache[1]
    out = StreamEdges() if has_cpu_ops is False else _infer(rank)
    rank.__dict__["_stream_edges"] = (len(rank.nodes), out)
    return out


def _infer(rank: RankGraph) -> StreamEdges:
    nodes = rank.nodes
    if not any(map(_IS_CPU, nodes)):  # no CPU op: not PyTorch-derived, nothing to infer
        return StreamEdges()
    n = len(nodes)
    pos: dict[int, int] = {}
    for i in range(n - 1, -1, -1):
        pos[nodes[i].id] = i
    cpu = [False] * n
    gpu = [False] * n
    for i, nd in enumerate(nodes):
        if nd.is_cpu_op:
            cpu[i] = nd.type not in _CPU_SKIP
        else:
            gpu[i] = nd.type in _GPU_TYPES
    deps: list[list[int]] = [[] for _ in range(n)]
    for i, nd in enumerate(nodes):
        for d in nd.data_deps:
            j = pos.get(d)
            if j is not None and j != i:
                deps[i].append(j)
    if not any(gpu[i] and any(cpu[j] for j in deps[i]) for i in range(n)):
        return StreamEdges()
    order = _explicit_order(deps)
    if order is None:
        return StreamEdges()  # a cycle: validation reports it; nothing to add to
    launch = [0] * n
    for i in order:
        if not gpu[i]:
            launch[i] = i
            continue
        cpu_deps = [j for j in deps[i] if cpu[j]]
        if cpu_deps:
            launch[i] = max(cpu_deps)
        else:
            gdeps = [launch[j] for j in deps[i] if gpu[j]]
            launch[i] = max(gdeps) if gdeps else i
    # the sequence key: a CPU op at its position, a kernel just after the op that launched it
    key = [(launch[i], 1, i) if gpu[i] else (i, 0, i) for i in range(n)]
    streams, source = _streams(rank, gpu)
    comm_streams = {streams[i] for i in range(n) if gpu[i] and nodes[i].type in _COMM_TYPES}
    out = StreamEdges(applies=True, streams=source)
    rank_in = _topo_rank(deps, key, order)
    existing = [set(d) for d in deps]

    def add(rule: str, before: int, after: int) -> None:
        if before == after or before in existing[after]:
            return
        if rank_in[before] >= rank_in[after]:
            out.skipped += 1
            return
        existing[after].add(before)
        out.edges.setdefault(after, []).append(before)
        out.counts[rule] += 1

    seq = sorted(
        (i for i in range(n) if gpu[i] or (cpu[i] and _is_sync_or_wait(nodes[i].name))),
        key=key.__getitem__,
    )
    last_on: dict[object, int] = {}
    last_compute = -1
    waiting: list[int] = []  # comm kernels a wait() made the next compute kernel wait for
    for i in seq:
        nd = nodes[i]
        if cpu[i]:
            if _SYNC.search(nd.name):
                for j in last_on.values():
                    add("synchronize", j, i)
                nxt = _next_cpu(nodes, cpu, i)
                if nxt is not None:
                    add("synchronize", i, nxt)
            else:
                waiting = [last_on[s] for s in comm_streams if s in last_on]
            continue
        s = streams[i]
        comm = nd.type in _COMM_TYPES
        inferred_comm = comm and isinstance(s, tuple) and s[0] == "nccl"
        prev = last_on.get(s)
        if prev is not None and not inferred_comm:
            add("stream_order", prev, i)
        if comm and last_compute >= 0 and streams[last_compute] != s:
            add("comm_after_compute", last_compute, i)
        if not comm and s not in comm_streams:
            for j in waiting:
                add("wait", j, i)
            waiting = []
            last_compute = i
        last_on[s] = i
    return out


def _is_sync_or_wait(name: str) -> bool:
    return bool(_SYNC.search(name) or _WAIT.search(name))


def _next_cpu(nodes: list, cpu: list[bool], i: int) -> int | None:
    """The next CPU op after position ``i`` on the same thread (``tid``), if any."""
    tid = nodes[i].attr("tid")
    for j in range(i + 1, len(nodes)):
        if cpu[j] and nodes[j].attr("tid") == tid:
            return j
    return None


def _streams(rank: RankGraph, gpu: list[bool]) -> tuple[list[object], str]:
    """Each node's stream key and where the keys came from."""
    nodes = rank.nodes
    out: list[object] = [None] * len(nodes)
    has_stream = any(gpu[i] and nodes[i].stream is not None for i in range(len(nodes)))
    has_tid = not has_stream and any(
        gpu[i] and nodes[i].attr("tid") is not None for i in range(len(nodes))
    )
    for i, nd in enumerate(nodes):
        if not gpu[i]:
            continue
        s = nd.stream if has_stream else nd.attr("tid") if has_tid else None
        if s is not None:
            out[i] = ("stream", int(s))
        elif nd.type in _COMM_TYPES:
            out[i] = ("nccl", nd.pg_name if nd.type == NodeType.COMM_COLL_NODE else "p2p")
        else:
            out[i] = ("compute",)
    return out, "stream attr" if has_stream else "tid" if has_tid else "inferred"


def _explicit_order(deps: list[list[int]]) -> list[int] | None:
    """Positions in an order that keeps ``deps`` (file order where it does), None on a cycle."""
    n = len(deps)
    if all(j < i for i in range(n) for j in deps[i]):
        return list(range(n))
    return index_order(deps)


def _topo_rank(deps: list[list[int]], key: list[tuple], order: list[int]) -> list[int]:
    """Each node's place in a topological order of ``deps`` that follows ``key`` where it can."""
    n = len(deps)
    if all(key[j] < key[i] for i in range(n) for j in deps[i]):
        by_key = sorted(range(n), key=key.__getitem__)
    else:
        indeg = [len(set(d)) for d in deps]
        users: list[list[int]] = [[] for _ in range(n)]
        for i, d in enumerate(deps):
            for j in set(d):
                users[j].append(i)
        heap = [key[i] for i in range(n) if indeg[i] == 0]
        heapq.heapify(heap)
        by_key = []
        while heap:
            i = heapq.heappop(heap)[2]
            by_key.append(i)
            for u in users[i]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    heapq.heappush(heap, key[u])
        if len(by_key) != n:  # cannot happen after _explicit_order; keep the plain order
            by_key = order
    rank_in = [0] * n
    for r, i in enumerate(by_key):
        rank_in[i] = r
    return rank_in


#: where a rank held as columns keeps what the rules added (``columnar.columns_stream_edges``)
SUMMARY_KEY = "_stream_summary"


def _summary_of(rank: Any) -> StreamEdges:
    """``stream_edges`` of a RankGraph, or what the rules added to a rank held as columns."""
    if not hasattr(rank, "derived_table"):
        return stream_edges(rank)
    got = rank.__dict__.get(SUMMARY_KEY)
    if got is None:
        from genie.workload.columnar import columns_stream_edges

        columns_stream_edges(rank)
        got = rank.__dict__[SUMMARY_KEY]
    return got


def summarize_edges(ranks: list[Any]) -> dict[str, object]:
    """Edges each rule added over ``ranks`` (for ``inspect`` and ``simulate --json``): Rank
    graphs, or ranks held as columns (``genie.workload.et_columns.NodeColumns``)."""
    counts = dict.fromkeys(RULES, 0)
    skipped = 0
    applied = 0
    sources: set[str] = set()
    for rg in ranks:
        se = _summary_of(rg)
        if not se.applies:
            continue
        applied += 1
        sources.add(se.streams)
        skipped += se.skipped
        for k, v in se.counts.items():
            counts[k] += v
    return {
        "ranks": applied,
        "streams": sorted(sources),
        "added": counts,
        "skipped": skipped,
    }


def edge_lines(doc: dict[str, object]) -> list[str]:
    """Lines saying what ``summarize_edges`` found (empty when no rank is PyTorch-derived)."""
    added = doc.get("added")
    if not doc.get("ranks") or not isinstance(added, dict):
        return []
    src = ", ".join(str(s) for s in doc["streams"])  # type: ignore[attr-defined]
    parts = [f"{v} {RULE_TEXT[k]}" for k, v in added.items() if v]
    line = (
        f"stream semantics (PyTorch-derived trace, streams from {src}): added "
        f"{sum(added.values())} dependencies over {doc['ranks']} ranks"
    )
    line += ": " + "; ".join(parts) if parts else ""
    if doc.get("skipped"):
        line += f" ({doc['skipped']} not added: they would contradict the trace's own deps)"
    return [line]
