"""Validation of a workload: hard errors raise ValidationError, the rest become problems.

Errors (one line each): duplicate node ids, data_deps to missing ids, data_dep cycles (the nodes
named), a COMM_COLL node without ``comm_type``/``comm_size`` or with an unknown type, negative or
absurd sizes and durations, send/recv without a peer or without the matching recv/send on the
peer rank. Non-fatal problems: ctrl_deps dropped (to the node itself or to missing ids; counted),
collective sequences that differ across the ranks of a group, groups without known members.
"""

from __future__ import annotations

from collections import defaultdict

from genie.errors import ValidationError
from genie.workload.graph import check_collective_sequences, find_cycle, topological_order
from genie.workload.model import CollectiveType, Node, NodeType, RankGraph, Workload

#: Sizes above this many bytes (1 PiB) are taken as corrupt.
ABSURD_BYTES = 2**50
#: Durations above this many microseconds (about 11.6 days) are taken as corrupt.
ABSURD_MICROS = 10**12
#: Operation counts above this are taken as corrupt (a zettaFLOP per node).
ABSURD_OPS = 10**21

_COLL_TYPES = {int(c) for c in CollectiveType}


def _where(rank: RankGraph, node: Node | None = None) -> str:
    src = f" ({rank.source})" if rank.source else ""
    return f"rank {rank.rank}{src}" + (f" node {node.label()}" if node is not None else "")


def filter_ctrl_deps(rank: RankGraph) -> tuple[int, int]:
    """Drop ctrl_deps to the node itself or to missing ids (raw ones kept); return the counts."""
    ids = rank.by_id
    self_deps = missing = 0
    for n in rank.nodes:
        raw = n.raw_ctrl_deps
        if not raw:
            continue
        kept = [d for d in raw if d != n.id and d in ids]
        if len(kept) != len(raw):
            self_deps += sum(1 for d in raw if d == n.id)
            missing += sum(1 for d in raw if d != n.id and d not in ids)
            n.ctrl_deps = kept
        else:
            n.ctrl_deps = raw
    return self_deps, missing


def _int_attr(rank: RankGraph, n: Node, name: str, value) -> int:
    if type(value) is not int:
        raise ValidationError(f"{_where(rank, n)}: attr {name} must be an integer, got {value!r}")
    return value


def _check_size(rank: RankGraph, n: Node, name: str, value) -> None:
    v = _int_attr(rank, n, name, value)
    if v < 0:
        raise ValidationError(f"{_where(rank, n)}: negative {name} {v}")
    if v > ABSURD_BYTES:
        raise ValidationError(f"{_where(rank, n)}: absurd {name} {v} bytes (> 1 PiB)")


def validate_rank(rank: RankGraph, n_ranks: int) -> list[str]:
    """Check one rank's graph; raise ValidationError on the first error, return problems."""
    problems: list[str] = []
    ids = rank.by_id
    if len(ids) != len(rank.nodes):
        seen: set[int] = set()
        for n in rank.nodes:
            if n.id in seen:
                raise ValidationError(f"{_where(rank)}: duplicate node id {n.id} ({n.name!r})")
            seen.add(n.id)
    coll, send, recv = NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE
    for n in rank.nodes:
        for d in n.data_deps:
            if d not in ids:
                raise ValidationError(
                    f"{_where(rank, n)}: data_dep {d} names no node of this rank (dangling)"
                )
        if n.duration_micros > ABSURD_MICROS:
            raise ValidationError(
                f"{_where(rank, n)}: absurd duration {n.duration_micros} us (> 10^12 us)"
            )
        dv = n._d
        ts = dv[5]
        if ts is not None and (type(ts) is not int or not 0 <= ts <= ABSURD_BYTES):
            _check_size(rank, n, "tensor_size", ts)
        ops = dv[4]
        if ops is not None and (type(ops) is not int or not 0 <= ops <= ABSURD_OPS):
            if not isinstance(ops, int | float) or isinstance(ops, bool) or ops < 0:
                raise ValidationError(f"{_where(rank, n)}: bad num_ops {ops!r}")
            if ops > ABSURD_OPS:
                raise ValidationError(f"{_where(rank, n)}: absurd num_ops {ops}")
        t = n.type
        if t == coll:
            ct, cs = dv[0], dv[1]
            if ct is None:
                raise ValidationError(
                    f"{_where(rank, n)}: COMM_COLL node without comm_type "
                    "(it must not default to ALL_REDUCE)"
                )
            if ct not in _COLL_TYPES or type(ct) is not int:
                _int_attr(rank, n, "comm_type", ct)
                raise ValidationError(f"{_where(rank, n)}: unknown comm_type {ct}")
            if cs is None:
                raise ValidationError(f"{_where(rank, n)}: COMM_COLL node without comm_size")
            if type(cs) is not int or not 0 <= cs <= ABSURD_BYTES:
                _check_size(rank, n, "comm_size", cs)
        elif t in (send, recv):
            what = "send" if t == send else "recv"
            field = "comm_dst" if what == "send" else "comm_src"
            peer = n.peer
            if peer is None:
                raise ValidationError(f"{_where(rank, n)}: {what} without {field} (no peer)")
            _int_attr(rank, n, field, peer)
            if not 0 <= peer < n_ranks or peer == rank.rank:
                raise ValidationError(
                    f"{_where(rank, n)}: {what} peer {peer} is not another rank of 0..{n_ranks - 1}"
                )
            if n.comm_size is None:
                raise ValidationError(f"{_where(rank, n)}: {what} without comm_size")
            _check_size(rank, n, "comm_size", n.comm_size)
    cyc = find_cycle(rank)
    if cyc:
        names = " -> ".join(x.label() for x in cyc + cyc[:1])
        raise ValidationError(f"{_where(rank)}: data_deps form a cycle: {names}")
    self_deps, missing = filter_ctrl_deps(rank)
    if self_deps or missing:
        problems.append(
            f"{_where(rank)}: dropped {self_deps + missing} ctrl_deps "
            f"({self_deps} to the node itself, {missing} to missing ids)"
        )
    return problems


def check_point_to_point(wl: Workload) -> None:
    """Every send must meet a recv on the peer (same src, dst, tag, in order, same size)."""
    sends: dict[tuple[int, int, int], list[Node]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[Node]] = defaultdict(list)
    for rg in wl.ranks:
        if not any(n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE) for n in rg.nodes):
            continue
        for n in topological_order(rg):
            if n.type == NodeType.COMM_SEND_NODE:
                sends[(rg.rank, n.peer, n.tag or 0)].append(n)
            elif n.type == NodeType.COMM_RECV_NODE:
                recvs[(n.peer, rg.rank, n.tag or 0)].append(n)
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        s, r = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(s), len(r))):
            if k >= len(r):
                raise ValidationError(
                    f"rank {src} node {s[k].label()}: send to rank {dst} tag {tag} has no "
                    f"matching recv on rank {dst}"
                )
            if k >= len(s):
                raise ValidationError(
                    f"rank {dst} node {r[k].label()}: recv from rank {src} tag {tag} has no "
                    f"matching send on rank {src}"
                )
            if s[k].comm_size != r[k].comm_size:
                raise ValidationError(
                    f"rank {src} node {s[k].label()} sends {s[k].comm_size} B to rank {dst} "
                    f"tag {tag} but the matching recv {r[k].label()} expects {r[k].comm_size} B"
                )


def validate_workload(wl: Workload) -> list[str]:
    """Validate every rank and the cross-rank matching; return (and record) the problems."""
    problems: list[str] = []
    for rg in wl.ranks:
        problems += validate_rank(rg, wl.n_ranks)
    for name, members in wl.groups.items():
        bad = [r for r in members if not 0 <= r < wl.n_ranks]
        if bad:
            raise ValidationError(
                f"process group {name!r} names ranks {bad} but the workload has "
                f"{wl.n_ranks} ranks (rank files missing?)"
            )
    check_point_to_point(wl)
    problems += check_collective_sequences(wl)
    for p in problems:
        if p not in wl.problems:
            wl.problems.append(p)
    return problems
