"""Validation of a workload: hard errors raise ValidationError, the rest become problems.

Errors (one line each): duplicate node ids, data_deps to missing ids, data_dep cycles (the nodes
named), a COMM_COLL node without ``comm_type``/``comm_size`` or with an unknown type, negative or
absurd sizes and durations, send/recv without a peer or without the matching recv/send on the
peer rank. A COMM node marked ``is_cpu_op`` without its network fields is host work
(``genie.workload.model``), not an error.

Dropped and counted, never scheduled on (``DROP_REASONS``, summed in ``Workload.dropped`` and
listed as problems): ctrl_deps to the node itself, to ids missing from the rank, and forward
ctrl_deps (to a node later in the file: a caller always precedes its callees in converted
traces); data_deps of a node on itself. ctrl_deps are never scheduled on anyway (PyTorch-derived
traces use them for the caller -> callee relation, already expressed in data_deps); the raw
lists are kept so a re-write is byte-identical. Other non-fatal problems: collective sequences
that differ across the ranks of a group, groups without known members.
"""

from __future__ import annotations

import operator
from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import repeat

from genie.errors import ValidationError
from genie.workload.graph import (
    _dep_scan,
    _positions,
    check_collective_sequences,
    find_cycle,
    sequence_keys,
    topological_indices,
)
from genie.workload.model import CollectiveType, Node, NodeType, RankGraph, Workload
from genie.workload.shapes import RankShapes, Shape

#: Why a dependency was dropped -> how a problem line says it (after "dropped N ctrl_deps").
DROP_REASONS = {
    "ctrl_deps_to_self": "to the node itself",
    "ctrl_deps_to_missing_ids": "to missing ids",
    "ctrl_deps_forward": "forward, to a later node",
    "data_deps_to_self": "to the node itself",
}

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


def filter_ctrl_deps(rank: RankGraph) -> Counter[str]:
    """Drop ctrl_deps to the node itself, to missing ids or forward (raw ones kept); count them."""
    pos = _positions(rank)
    counts: Counter[str] = Counter()
    for i, n in enumerate(rank.nodes):
        if n.raw_ctrl_deps:
            _keep_ctrl(n, i, pos, counts)
    return counts


def _keep_ctrl(n: Node, i: int, pos: dict[int, int], counts: Counter[str] | None = None) -> None:
    """Node ``n`` (at position ``i``) keeps the raw ctrl_deps to earlier nodes (the raw list
    itself where all are kept); those to itself, to missing ids or forward are counted."""
    raw = n.raw_ctrl_deps
    kept = []
    for d in raw:
        j = pos.get(d)
        if j is not None and j < i:
            kept.append(d)
        elif counts is not None:
            why = "to_missing_ids" if j is None else "to_self" if j == i else "forward"
            counts[f"ctrl_deps_{why}"] += 1
    n.ctrl_deps = kept if len(kept) != len(raw) else raw


def _drop_note(rank: RankGraph, counts: Counter[str]) -> str | None:
    """One problem line for the dependencies dropped on a rank, or None."""
    ctrl = [(k, counts[k]) for k in DROP_REASONS if k.startswith("ctrl") and counts.get(k)]
    parts = []
    if ctrl:
        what = ", ".join(f"{v} {DROP_REASONS[k]}" for k, v in ctrl)
        parts.append(f"dropped {sum(v for _, v in ctrl)} ctrl_deps ({what})")
    if counts.get("data_deps_to_self"):
        parts.append(f"dropped {counts['data_deps_to_self']} data_deps to the node itself")
    return f"{_where(rank)}: " + "; ".join(parts) if parts else None


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


def _check_fields(rank: RankGraph, n: Node, n_ranks: int) -> None:
    """The checks of one node that depend only on its type and derived fields (raise on error)."""
    coll, send, recv = NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE
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
    if dv[9] is not None and type(dv[9]) is not int:
        _int_attr(rank, n, "stream", dv[9])
    t = n.type
    if t == coll:
        ct, cs = dv[0], dv[1]
        if ct is None and dv[8]:
            return  # host-side launcher: CPU work (genie.workload.model)
        if ct is None:
            raise ValidationError(
                f"{_where(rank, n)}: COMM_COLL node without comm_type "
                "(it must not default to ALL_REDUCE; a host-side launcher carries "
                "is_cpu_op = true)"
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
        if peer is None and dv[8]:
            return  # host-side launcher: CPU work
        if peer is None:
            raise ValidationError(
                f"{_where(rank, n)}: {what} without {field} (no peer; PyTorch-derived "
                "ncclDevKernel_SendRecv nodes lack it: add comm_src/comm_dst to replay them)"
            )
        _int_attr(rank, n, field, peer)
        if not 0 <= peer < n_ranks or peer == rank.rank:
            raise ValidationError(
                f"{_where(rank, n)}: {what} peer {peer} is not another rank of 0..{n_ranks - 1}"
            )
        if n.comm_size is None:
            raise ValidationError(f"{_where(rank, n)}: {what} without comm_size")
        _check_size(rank, n, "comm_size", n.comm_size)


#: a workload's nodes whose ``_check_fields`` passed, by (type, id of the derived tuple): the
#: tuple itself (kept, so its id is not reused); send and recv are not kept (their check reads
#: the rank), and at most ``PASSED_MAX`` entries (readers share tuples between equal nodes)
Passed = dict[tuple[int, int], tuple]
PASSED_MAX = 65536
#: send and recv node types, hashed (a tuple of enums compares one by one)
_P2P_TYPES = frozenset((int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)))


def validate_rank(
    rank: RankGraph,
    n_ranks: int,
    dropped: Counter[str] | None = None,
    passed: Passed | None = None,
) -> list[str]:
    """Check one rank's graph; raise ValidationError on the first error, return problems.

    Dependencies dropped (see the module docstring) are added to ``dropped`` when given.
    ``passed``, shared by the ranks of one workload, skips the field checks of a node whose
    type and derived fields (the very tuple) passed them already.
    """
    problems: list[str] = []
    ids = rank.by_id
    if len(ids) != len(rank.nodes):
        seen: set[int] = set()
        for n in rank.nodes:
            if n.id in seen:
                raise ValidationError(f"{_where(rank)}: duplicate node id {n.id} ({n.name!r})")
            seen.add(n.id)
    # in file order with every dep earlier (the usual case) no dep dangles: one scan says so
    backward, self_data = _dep_scan(rank, _positions(rank))
    if not backward:
        self_data = 0  # counted below, dep by dep
    for n in rank.nodes:
        if not backward:
            for d in n.data_deps:
                if d not in ids:
                    raise ValidationError(
                        f"{_where(rank, n)}: data_dep {d} names no node of this rank (dangling)"
                    )
                if d == n.id:
                    self_data += 1
        if n.duration_micros > ABSURD_MICROS:
            raise ValidationError(
                f"{_where(rank, n)}: absurd duration {n.duration_micros} us (> 10^12 us)"
            )
        if passed is None or n.type in _P2P_TYPES:
            _check_fields(rank, n, n_ranks)
            continue
        dv = n._d
        key = (n.type, id(dv))
        if passed.get(key) is not dv:
            _check_fields(rank, n, n_ranks)
            if len(passed) < PASSED_MAX:
                passed[key] = dv
    cyc = find_cycle(rank)
    if cyc:
        names = " -> ".join(x.label() for x in cyc + cyc[:1])
        raise ValidationError(f"{_where(rank)}: data_deps form a cycle: {names}")
    counts = filter_ctrl_deps(rank)
    if self_data:
        counts["data_deps_to_self"] += self_data
    note = _drop_note(rank, counts)
    if note:
        problems.append(note)
    if dropped is not None:
        dropped.update(counts)
    return problems


_TYPE = operator.attrgetter("type")


def check_point_to_point(wl: Workload) -> None:
    """Every send must meet a recv on the peer (same src, dst, tag, in order, same size)."""
    match_point_to_point((rg.rank, _p2p_in_order(rg)) for rg in wl.ranks)


def _p2p_in_order(rg: RankGraph) -> list[Node]:
    """The rank's send and recv nodes in topological order (one scan of the types; the order
    asked for only where there are some)."""
    nodes = rg.nodes
    where = [i for i, t in enumerate(map(_TYPE, nodes)) if t in _P2P_TYPES]
    if not where:
        return []
    topo = topological_indices(rg)
    if topo != list(range(len(nodes))):  # file order is not the order: sort by position in it
        at = {i: k for k, i in enumerate(topo)}
        where.sort(key=at.__getitem__)
    return [nodes[i] for i in where]


def match_point_to_point(per_rank: Iterable[tuple[int, list[Node]]]) -> None:
    """``check_point_to_point`` over each rank's send and recv nodes in topological order."""
    found = list(per_rank)
    send, recv = int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)
    sizes: tuple[dict[tuple, list], dict[tuple, list]] = ({}, {})  # (src, dst, tag) -> sizes
    for rank, nodes in found:
        for n in nodes:
            t = n.type
            d = n._d
            if t == send:
                peer = d[7]
                key = (rank, peer, d[3] or 0)
                side = sizes[0]
            elif t == recv:
                peer = d[6]
                key = (peer, rank, d[3] or 0)
                side = sizes[1]
            else:
                continue
            if peer is None:
                continue  # a host-side launcher (validated per rank)
            got = side.get(key)
            if got is None:
                side[key] = [d[1]]
            else:
                got.append(d[1])
    if sizes[0] != sizes[1]:  # same channels, same sizes in order: every send meets its recv
        _name_mismatch(found)


def _name_mismatch(per_rank: list[tuple[int, list[Node]]]) -> None:
    """Raise for the first send or recv (by channel) that does not meet its match."""
    sends: dict[tuple[int, int, int], list[Node]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[Node]] = defaultdict(list)
    for rank, nodes in per_rank:
        for n in nodes:
            peer = n.peer
            if peer is None:
                continue  # a host-side launcher (validated per rank)
            if n.type == NodeType.COMM_SEND_NODE:
                sends[(rank, peer, n.tag or 0)].append(n)
            else:
                recvs[(peer, rank, n.tag or 0)].append(n)
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


#: a rank's ``validate_rank`` outcome computed beforehand: (problems, dropped counts) or its error
RankOutcome = tuple[list[str], Counter[str]] | ValidationError


def validate_workload(wl: Workload, *, checked: dict[int, RankOutcome] | None = None) -> list[str]:
    """Validate every rank and the cross-rank matching; return (and record) the problems.

    ``checked`` holds ranks (by position) already put through ``validate_rank`` (the loader does
    so while reading, from the columns); their outcome is used in rank order as if computed here.
    The other ranks are validated once per shape (``genie.workload.shapes``): what a rank shares
    with an earlier one is not checked again.
    """
    problems: list[str] = []
    dropped: Counter[str] = Counter()
    passed: Passed = {}
    seen: Seen = {}
    shapes = RankShapes()
    at: list[Shape | None] = []
    p2p: list[list[Node] | None] = []  # per rank (with a shape): its sends and recvs in order
    keys: list[dict | None] = []  # per rank (with a shape): its collective sequence keys
    for k, rg in enumerate(wl.ranks):
        done = checked.get(k) if checked else None
        shape = None
        if done is None:
            found = shapes.of(rg)
            if found is None:
                problems += validate_rank(rg, wl.n_ranks, dropped, passed)
            else:
                shape, known = found
                problems += _validate_shaped(rg, shape, known, wl.n_ranks, dropped, passed, seen)
        elif isinstance(done, ValidationError):
            raise done
        else:
            problems += done[0]
            dropped.update(done[1])
        at.append(shape)
        if shape is None:
            p2p.append(None)
            keys.append(None)
        else:  # while the rank's nodes are at hand (in cache)
            nodes = rg.nodes
            p2p.append([nodes[i] for i in shape.p2p_order()])
            keys.append(sequence_keys([nodes[i] for i in shape.coll_order()]))
    wl.dropped = {k: dropped.get(k, 0) for k in DROP_REASONS}
    for name, members in wl.groups.items():
        bad = [r for r in members if not 0 <= r < wl.n_ranks]
        if bad:
            raise ValidationError(
                f"process group {name!r} names ranks {bad} but the workload has "
                f"{wl.n_ranks} ranks (rank files missing?)"
            )
    match_point_to_point(
        (rg.rank, _p2p_in_order(rg) if mine is None else mine)
        for rg, mine in zip(wl.ranks, p2p, strict=True)
    )
    coll_at = [s.coll_order() if s else None for s in at]
    problems += check_collective_sequences(wl, coll_at, keys)
    for p in problems:
        if p not in wl.problems:
            wl.problems.append(p)
    return problems


#: per node type, the derived tuples (by ``_addresses``; each kept, so its id is not reused)
#: whose ``_check_fields`` passed (for a send or recv: on a rank that is not its peer)
Seen = dict[int, dict[int, tuple]]


def _addresses(objs: tuple) -> Iterable[int]:
    """Each object's id less its low 4 bits: an id hashes to itself, and ids of objects made
    one after another differ by a multiple of 16, so a dict keyed by them uses one slot in 16
    (a lookup in a 65,536-entry dict of such ids 387 -> 145 ns; the field checks of 16,384
    llm ranks 1.3 -> 1.1 s). Still one key per object: two live objects, each at least 16
    bytes, start at least 16 bytes apart."""
    return map(operator.rshift, map(id, objs), repeat(4))


def _validate_shaped(
    rank: RankGraph,
    shape: Shape,
    known: bool,
    n_ranks: int,
    dropped: Counter[str],
    passed: Passed,
    seen: Seen,
) -> list[str]:
    """``validate_rank(rank, n_ranks, dropped, passed)`` for a rank of ``shape``: in full for
    the first rank of its shape; for a further one only what differs between the ranks of a
    shape (durations and derived fields), the rest as the first one found it. A check that
    fails sends the rank to ``validate_rank``, which names the error."""
    if not known or shape.counts is None:
        counts: Counter[str] = Counter()
        problems = validate_rank(rank, n_ranks, counts, passed)
        shape.learn(counts)
        dropped.update(counts)
        ds = [n._d for n in rank.nodes]
        for t, get, _pos in shape.type_groups():  # every pair passed (on this rank)
            ok = seen.get(t)
            if ok is None:
                ok = seen[t] = {}
            if len(ok) < PASSED_MAX:
                sub = get(ds)
                ok.update(zip(_addresses(sub), sub, strict=True))
        return problems
    if not _fields_pass(rank, shape, n_ranks, seen):
        return validate_rank(rank, n_ranks, dropped, passed)
    shape.adopt(rank)
    ctrl_at = shape.ctrl_at()
    if ctrl_at:  # as filter_ctrl_deps sets them (the shape counted the drops)
        pos = _positions(rank)
        nodes = rank.nodes
        for i in ctrl_at:
            _keep_ctrl(nodes[i], i, pos)
    counts = shape.counts
    if not counts:
        return []
    dropped.update(counts)
    note = _drop_note(rank, counts)
    return [note] if note else []


def _fields_pass(rank: RankGraph, shape: Shape, n_ranks: int, seen: Seen) -> bool:
    """Whether every node of ``rank`` passes the duration and field checks of ``validate_rank``
    (each (type, derived tuple) pair checked once per workload: a send or recv that passed on
    another rank passes here unless its peer is this rank)."""
    nodes = rank.nodes
    try:
        m = max([n.duration_micros for n in nodes], default=0)
    except TypeError:
        return False
    # exact: a NaN hides no larger value unless it comes first, and then it is the max
    if m > ABSURD_MICROS or m != m:
        return False
    ds = [n._d for n in nodes]
    try:
        for t, get, pos in shape.type_groups():
            sub = get(ds)
            if t in _P2P_TYPES and rank.rank in map(_PEER_AT[t], sub):
                return False
            ok = seen.get(t)
            if ok is None:
                ok = seen[t] = {}
            new = set(_addresses(sub)).difference(ok)  # (a dict: looked up in C)
            if not new:
                continue
            if len(new) <= _FEW_NEW:  # each found by a scan in C: no dict of every position
                addrs = list(_addresses(sub))
                at = [pos[addrs.index(k)] for k in new]
            else:
                where = dict(zip(_addresses(sub), pos, strict=True))
                at = [where[k] for k in new]
            for k, i in zip(new, at, strict=True):
                n = nodes[i]
                if not _plainly_valid(t, n._d, rank.rank, n_ranks):
                    _check_fields(rank, n, n_ranks)
                if len(ok) < PASSED_MAX:
                    ok[k] = n._d
    except ValidationError:
        return False
    return True


#: new derived tuples of a type group up to which ``_fields_pass`` finds each one's position by
#: a scan of the group's addresses (more: one dict of them all)
_FEW_NEW = 8

#: where a send's and a recv's derived tuple holds the peer (comm_dst, comm_src)
_PEER_AT = {
    int(NodeType.COMM_SEND_NODE): operator.itemgetter(7),
    int(NodeType.COMM_RECV_NODE): operator.itemgetter(6),
}


def _plainly_valid(t: int, dv: tuple, me: int, n_ranks: int) -> bool:
    """True where ``_check_fields`` passes a node of type ``t``, derived fields ``dv`` on rank
    ``me`` with every value a plain int in range (False: let it decide)."""
    for v, top in ((dv[5], ABSURD_BYTES), (dv[4], ABSURD_OPS)):
        if v is not None and (type(v) is not int or not 0 <= v <= top):
            return False
    if dv[9] is not None and type(dv[9]) is not int:
        return False
    if t == NodeType.COMM_SEND_NODE or t == NodeType.COMM_RECV_NODE:
        peer = dv[7] if t == NodeType.COMM_SEND_NODE else dv[6]
        cs = dv[1]
        return (
            type(peer) is int
            and 0 <= peer < n_ranks
            and peer != me
            and type(cs) is int
            and 0 <= cs <= ABSURD_BYTES
        )
    return False
