"""validate_workload checks the ranks that share a shape (genie.workload.shapes) once for their
structure: its outcome, problems, dropped counts, kept ctrl_deps and every error message are
those of the rank-by-rank reference (validate_rank on each rank, then the cross-rank checks as
they were before shapes), on generated workloads and on each of them broken in a later rank."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from genie.errors import ValidationError
from genie.workload import Attr, NodeType
from genie.workload import validate as V
from genie.workload.generators import data_parallel, llm, moe
from genie.workload.graph import (
    collective_sequences,
    compare_collective_sequences,
    topological_indices,
)
from genie.workload.model import Node, Workload
from genie.workload.shapes import RankShapes

SEND, RECV, COLL = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE


def reference(wl: Workload) -> list[str]:
    """validate_workload as it was before shapes: every rank in full, p2p matched node by node,
    collective sequences made with their nodes and compared."""
    problems: list[str] = []
    dropped: Counter[str] = Counter()
    for rg in wl.ranks:
        problems += V.validate_rank(rg, wl.n_ranks, dropped)
    wl.dropped = {k: dropped.get(k, 0) for k in V.DROP_REASONS}
    for name, members in wl.groups.items():
        bad = [r for r in members if not 0 <= r < wl.n_ranks]
        if bad:
            raise ValidationError(f"process group {name!r} names ranks {bad} (reference)")
    V._name_mismatch([(rg.rank, V._p2p_in_order(rg)) for rg in wl.ranks])
    return problems + compare_collective_sequences(wl.groups, collective_sequences(wl))


def copy_workload(wl: Workload) -> Workload:
    ranks = [type(rg)(rank=rg.rank, nodes=[n.copy() for n in rg.nodes]) for rg in wl.ranks]
    return Workload(ranks=ranks, groups=dict(wl.groups), name=wl.name)


def outcome(run: Callable[[Workload], list[str]], wl: Workload) -> tuple:
    """What validating ``wl`` gives: the error, or the problems, dropped counts, each node's
    kept ctrl_deps and each rank's topological order."""
    try:
        problems = run(wl)
    except ValidationError as exc:
        return ("error", str(exc))
    kept = [[list(n.ctrl_deps) for n in rg.nodes] for rg in wl.ranks]
    topo = [list(topological_indices(rg)) for rg in wl.ranks]
    return ("ok", problems, wl.dropped, kept, topo)


def both(wl: Workload) -> tuple[tuple, tuple]:
    """(validate_workload's outcome, the reference's) on two copies of ``wl``."""
    return outcome(V.validate_workload, copy_workload(wl)), outcome(reference, copy_workload(wl))


WORKLOADS = {
    "llm": lambda: llm(16, tp=2, pp=2, layers=4, micro_batches=2),
    "dp": lambda: data_parallel(8),
    "moe": lambda: moe(8, layers=2, expert_skew=0.5),
}


def _first(wl: Workload, rank: int, t: int) -> Node:
    return next(n for n in wl.ranks[rank].nodes if n.type == t and n.pg_name is not None)


def _set(n: Node, name: str, kind: str, value) -> None:
    n.set_attr(name, kind, value)


def _p2p_rank(wl: Workload) -> int:
    """A rank past the first with a send, sharing its shape with an earlier rank."""
    return next(rg.rank for rg in wl.ranks[1:] if any(n.type == SEND for n in rg.nodes))


def _drop_attr(n: Node, name: str) -> None:
    n.attrs[:] = [a for a in n.attrs if a.name != name]
    n.refresh()


def _nan_then_absurd(wl: Workload) -> None:
    wl.ranks[-1].nodes[0].duration_micros = float("nan")  # type: ignore[assignment]
    wl.ranks[-1].nodes[2].duration_micros = 10**13


def _host_launcher(wl: Workload) -> None:
    n = _first(wl, -1, COLL)
    n.set_attr("is_cpu_op", "bool_val", True)
    _drop_attr(n, "comm_type")


def _ctrl_everywhere(wl: Workload) -> None:
    for rg in wl.ranks:
        ns = rg.nodes
        ns[2].raw_ctrl_deps.extend([ns[2].id, ns[0].id, 10**9, ns[5].id])


# each breaks a later rank of a workload whose ranks share shapes
BREAKS: dict[str, Callable[[Workload], object]] = {
    "absurd duration": lambda wl: setattr(wl.ranks[-1].nodes[3], "duration_micros", 10**13),
    "NaN then absurd duration": _nan_then_absurd,
    "NaN duration alone": lambda wl: setattr(
        wl.ranks[-1].nodes[1], "duration_micros", float("nan")
    ),
    "float comm_size": lambda wl: _set(_first(wl, -1, COLL), "comm_size", "double_val", 1.5),
    "unknown comm_type": lambda wl: _set(_first(wl, -1, COLL), "comm_type", "int64_val", 99),
    "negative tensor_size": lambda wl: _set(wl.ranks[-1].nodes[0], "tensor_size", "int64_val", -1),
    "collective size differs": lambda wl: _set(
        _first(wl, -1, COLL), "comm_size", "int64_val", 12345
    ),
    "host launcher": _host_launcher,
    "dangling data_dep": lambda wl: wl.ranks[-1].nodes[4].data_deps.append(10**9),
    "data_dep on itself": lambda wl: (
        wl.ranks[-1].nodes[4].data_deps.append(wl.ranks[-1].nodes[4].id)
    ),
    "cycle": lambda wl: wl.ranks[-1].nodes[0].data_deps.append(wl.ranks[-1].nodes[-1].id),
    "ctrl_deps everywhere": _ctrl_everywhere,
    "ctrl_deps on one rank": lambda wl: wl.ranks[-1].nodes[3].raw_ctrl_deps.append(10**9),
    "duplicate id": lambda wl: setattr(wl.ranks[-1].nodes[5], "id", wl.ranks[-1].nodes[4].id),
}

P2P_BREAKS: dict[str, Callable[[Workload], object]] = {
    "send to itself": lambda wl: _set(
        _first(wl, _p2p_rank(wl), SEND), "comm_dst", "int32_val", _p2p_rank(wl)
    ),
    "send size differs": lambda wl: _set(
        _first(wl, _p2p_rank(wl), SEND), "comm_size", "int64_val", 7
    ),
    "send tag differs": lambda wl: _set(
        _first(wl, _p2p_rank(wl), SEND), "comm_tag", "int32_val", 9
    ),
    "send peer out of range": lambda wl: _set(
        _first(wl, _p2p_rank(wl), SEND), "comm_dst", "int32_val", 999
    ),
    "send without peer": lambda wl: _drop_attr(_first(wl, _p2p_rank(wl), SEND), "comm_dst"),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_shared_shapes_validate_as_the_reference(name: str) -> None:
    wl = WORKLOADS[name]()
    shapes = RankShapes()
    known = [got[1] for rg in wl.ranks if (got := shapes.of(rg)) is not None]
    assert len(known) == len(wl.ranks) and sum(known) >= len(wl.ranks) // 2  # shared shapes
    new, ref = both(wl)
    assert new == ref and new[0] == "ok"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("brk", sorted(BREAKS))
def test_a_later_rank_broken_fails_as_the_reference(name: str, brk: str) -> None:
    wl = WORKLOADS[name]()
    BREAKS[brk](wl)
    new, ref = both(wl)
    assert new == ref
    if brk not in (
        "NaN duration alone",
        "data_dep on itself",
        "ctrl_deps everywhere",
        "ctrl_deps on one rank",
        "host launcher",
        "collective size differs",
    ):
        assert new[0] == "error"  # the break is one validation refuses


@pytest.mark.parametrize("brk", sorted(P2P_BREAKS))
def test_a_later_rank_broken_in_its_sends_fails_as_the_reference(brk: str) -> None:
    wl = WORKLOADS["llm"]()
    P2P_BREAKS[brk](wl)
    new, ref = both(wl)
    assert new == ref and new[0] == "error"


def test_two_breaks_report_the_first_rank_in_order() -> None:
    """A field error on a rank of a known shape comes before a structural one on a later rank
    of a new shape, as the rank-by-rank reference reports them."""
    wl = WORKLOADS["llm"]()
    _set(_first(wl, 3, COLL), "comm_type", "int64_val", 99)
    wl.ranks[-1].nodes[4].data_deps.append(10**9)
    new, ref = both(wl)
    assert new == ref and new[0] == "error" and "rank 3 " in new[1]


def test_ctrl_deps_kept_on_every_rank_of_a_shape() -> None:
    """The ctrl_deps a shape's first rank drops are dropped on every rank of the shape (each
    rank keeps its own lists) and counted once per rank."""
    wl = WORKLOADS["dp"]()
    BREAKS["ctrl_deps everywhere"](wl)
    V.validate_workload(wl)
    n = len(wl.ranks)
    assert wl.dropped["ctrl_deps_to_self"] == n and wl.dropped["ctrl_deps_to_missing_ids"] == n
    assert wl.dropped["ctrl_deps_forward"] == n
    kept = [rg.nodes[2].ctrl_deps for rg in wl.ranks]
    assert all(k == [rg.nodes[0].id] for k, rg in zip(kept, wl.ranks, strict=True))
    assert len({id(k) for k in kept}) == n


def test_field_checks_once_per_derived_tuple_across_ranks(monkeypatch) -> None:
    """Ranks of a shape whose nodes share derived tuples have each (type, tuple) pair checked
    once; a send's tuple shared with another rank is still refused on the rank it names."""
    calls: list[int] = []
    real = V._check_fields

    def counted(rank, n, n_ranks):
        calls.append(n.type)
        real(rank, n, n_ranks)

    wl = WORKLOADS["dp"]()
    base = wl.ranks[0].nodes
    for rg in wl.ranks[1:]:
        for x, y in zip(base, rg.nodes, strict=True):
            y._d = x._d  # as the readers share them
    monkeypatch.setattr(V, "_check_fields", counted)
    V.validate_workload(wl)
    kinds = len({(n.type, id(n._d)) for n in base})
    assert len(calls) == kinds
    wl = WORKLOADS["llm"]()
    _a, b, d = max(  # b: the last rank sent to by an earlier one (not the first of its shape)
        (
            (rg.rank, int(n.comm_dst), n._d)
            for rg in wl.ranks
            for n in rg.nodes
            if n.type == SEND and n.comm_dst is not None and n.comm_dst > rg.rank
        ),
        key=lambda x: x[1],
    )
    assert RankShapes().of(wl.ranks[b]) is not None
    _first(wl, b, SEND)._d = d  # a tuple that passed on rank a, on the rank it sends to
    new, ref = both(wl)
    assert new == ref and new[0] == "error" and f"peer {b} is not another rank" in new[1]


def test_ranks_that_all_differ_stop_the_shape_lookups() -> None:
    """A registry that meets no rank like an earlier one gives up (the lists cost time)."""
    from genie.workload import shapes as S

    wl = WORKLOADS["dp"]()
    reg = RankShapes()
    for k in range(S.GIVE_UP):
        rg = wl.ranks[0]
        rg.nodes[0].id = 10**6 + k  # a new shape each time
        assert reg.of(rg) is not None
    assert reg.of(wl.ranks[1]) is None


def test_attr_helper_sets_a_new_tuple() -> None:
    """The breaks above give one node a new derived tuple (set_attr refreshes it)."""
    wl = WORKLOADS["dp"]()
    n = _first(wl, 1, COLL)
    before = n._d
    n.set_attr("comm_size", "int64_val", 5)
    assert n._d is not before and n.comm_size == 5
    assert Attr("comm_size", "int64_val", 5) in n.attrs


def test_address_keys_are_one_per_live_object() -> None:
    """The seen field checks key each tuple by its id less the low 4 bits: distinct for
    every live object (each is at least 16 bytes), here for tuples of every small size."""
    objs = [(*range(k % 12), k) for k in range(20000)]
    keys = list(V._addresses(tuple(objs)))
    assert len(set(keys)) == len(objs)


def test_a_group_in_use_with_no_members_is_named_not_a_crash() -> None:
    """A process group the collectives use whose member list is empty (an empty pg_ranks and
    no comm-group file): validation names it, on the shaped path and the reference alike."""
    wl = WORKLOADS["llm"]()
    g = _first(wl, 0, COLL).pg_name
    wl.groups = {**wl.groups, g: ()}
    got, ref = both(wl)
    assert got == ref
    text = got[1] if got[0] == "error" else " ".join(got[1])
    assert repr(g) in text and "no members" in text


@pytest.mark.parametrize("bad", [False, True])
@pytest.mark.parametrize("fresh", [2, V._FEW_NEW + 5])
def test_new_derived_tuples_few_or_many_checked_as_the_reference(fresh: int, bad: bool) -> None:
    """A later rank of a known shape with ``fresh`` compute nodes of new derived tuples (each
    found by a scan when few, through a dict of positions when more than ``_FEW_NEW``): checked
    as the reference checks them, the last one refused where it is bad."""
    wl = WORKLOADS["llm"]()
    comp = [n for n in wl.ranks[-1].nodes if n.type == NodeType.COMP_NODE]
    assert len(comp) >= fresh
    for k, n in enumerate(comp[:fresh]):
        _set(n, "tensor_size", "int64_val", -1 if bad and k == fresh - 1 else 1000 + k)
    new, ref = both(wl)
    assert new == ref
    assert new[0] == ("error" if bad else "ok")
    if bad:
        assert "negative tensor_size -1" in new[1]
