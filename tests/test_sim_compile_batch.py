"""The compile stage's fast paths against their kept references, array for array.

``compile_workload`` runs ``genie.sim.batch_compile`` (all ranks at once); ``compile_reference``
is the node-by-node path it replaced. ``finish`` runs ``_finish_columns``; ``_finish_loop`` is
its reference. ``order_collectives`` works over the whole workload; ``order_reference`` is the
per-rank path. Each pair must give identical arrays (dtype and values), instances and member
lists, on generated dp/llm/moe workloads (all-to-all-v included), PyTorch-style traces (stream
rules, ids that are not positions, messy deps), the real ASTRA-sim samples, and hand-made
corner cases; where the fast path cannot, it must say so (None) and the error stay the same.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from test_stream_rules import pytorch_rank

from genie.errors import CollectiveError, GenieError
from genie.sim import compiled
from genie.sim.adapter import (
    A2A,
    ComputeModel,
    _fields,
    compile_reference,
    compile_workload,
    load_workload,
)
from genie.sim.batch_compile import _RANK_FIELDS, compile_batch
from genie.sim.compiled import GraphBuilder, MemberLists
from genie.sim.streams import order_collectives, order_reference
from genie.workload.generators.data_parallel import data_parallel
from genie.workload.generators.llm import llm
from genie.workload.generators.moe import moe
from genie.workload.generators.pytorch_style import pytorch_style
from genie.workload.model import Attr, Node, NodeType, RankGraph, Workload
from genie.workload.stream_rules import stream_edges

SAMPLES = Path(__file__).resolve().parents[1] / ".." / "shared" / "et-samples"
TRACE = ComputeModel()
ROOFLINE = ComputeModel("roofline", peak_flops=1e15, efficiency=0.5, memory_bandwidth=2e12)


def same(a, b, path: str = "cw") -> None:
    """Assert that two compiled structures are identical: arrays in dtype and values."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), path
        assert a.dtype == b.dtype, f"{path}: {a.dtype} != {b.dtype}"
        assert np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            same(a[k], b[k], f"{path}[{k}]")
    elif isinstance(a, MemberLists) or isinstance(b, MemberLists):
        # members held as columns: the lists a pass makes, and each read of one alike
        for m in (a, b):
            if isinstance(m, MemberLists):
                assert [m[i] for i in range(len(m))] == list(m), path
        same(list(a), list(b), path)
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]")
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), path
        for f in dataclasses.fields(a):
            if not f.compare:  # what a path noted on the side (host work counted)
                continue
            same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"


def _forget_edges(wl) -> None:
    for rg in wl.ranks:
        rg.__dict__.pop("_stream_edges", None)


def batch(wl, compute: ComputeModel, edges: str):
    """The batch path alone (None would mean it declined)."""
    roof = compute.mode == "roofline"
    return compile_batch(wl, edges, lambda nd, r, g: _fields(nd, r, compute, roof, g), A2A)


def check(wl, compute: ComputeModel = TRACE, edges: str = "inferred") -> None:
    """Batch compile, the columns finish and the vector ordering each equal their reference."""
    _forget_edges(wl)
    ref = compile_reference(wl, compute, edges)
    _forget_edges(wl)
    fast = batch(wl, compute, edges)
    assert fast is not None, "the batch path declined a workload it should compile"
    same(ref, fast)
    loop = compiled._finish_loop(ref.ranks, ref.group_names, ref.group_ranks, ref.name)
    loop_inst = [cr.instance for cr in loop.ranks]
    cols = compiled._finish_columns(ref.ranks, ref.group_names, ref.group_ranks, ref.name)
    assert cols is not None or any(cr.splits for cr in ref.ranks)
    if cols is not None:
        same(loop.instances, cols.instances, "instances")
        same(loop_inst, [cr.instance for cr in cols.ranks], "instance")
    for k in (1, 2, 3):
        same(order_reference(ref, k), order_collectives(fast, k), f"ordered k={k}")


@pytest.mark.parametrize("compute", [TRACE, ROOFLINE], ids=["trace", "roofline"])
@pytest.mark.parametrize("edges", ["inferred", "explicit"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: data_parallel(8, layers=4),
        lambda: llm(16, tp=2, pp=2, layers=4),
        lambda: llm(16, tp=2, pp=4, layers=4, zero=True),
        lambda: moe(8),
        lambda: moe(8, expert_skew=1.2),  # all-to-all-v: per-peer sizes
        lambda: pytorch_style(4, layers=4, steps=2),
    ],
    ids=["dp", "llm", "llm-zero-pp4", "moe", "moe-uneven", "pytorch-style"],
)
def test_generated_workloads_compile_alike(make, edges, compute):
    check(make(), compute, edges)


def test_pytorch_ranks_with_waits_syncs_and_streams_compile_alike():
    ranks = [
        pytorch_rank(0, wait=True),
        pytorch_rank(1, sync=True),
        pytorch_rank(2, streams=True),
        pytorch_rank(3),
    ]
    wl = Workload(ranks=ranks, name="pt")
    for edges in ("inferred", "explicit"):
        check(wl, edges=edges)
    assert all(stream_edges(rg).edges for rg in ranks)  # the rules added edges to compare


def test_messy_deps_and_ids_that_are_not_positions():
    wl = pytorch_style(4, layers=4, steps=2)
    assert any(nd.id != i for i, nd in enumerate(wl.ranks[0].nodes))  # ids are not positions
    for rg in wl.ranks:
        a, b = rg.nodes[3], rg.nodes[4]
        a.data_deps = [*a.data_deps, a.id, 10**9]  # self and missing: dropped alike
        b.data_deps = []
    check(wl)
    gen = data_parallel(4, layers=2)
    for rg in gen.ranks:  # ids are positions: self and out-of-range deps are dropped
        rg.nodes[2].data_deps = [2, -1, 999, 0]
        rg.nodes[3].data_deps = None  # type: ignore[assignment]
    check(gen)


def test_ranks_sharing_deps_and_derived_tuples_compile_alike():
    """Ranks with equal deps share their dep arrays and nodes with one derived tuple (as the
    readers share them) one probe found by identity; a rank whose deps differ in one node, a
    shared tuple on a node of another duration or type, and equal tuples that are distinct
    objects still compile as the reference compiles them."""
    wl = llm(16, tp=2, pp=2, layers=4)
    base = wl.ranks[0].nodes
    for rg in wl.ranks[1:]:
        for a, b in zip(base, rg.nodes, strict=False):
            if a._d == b._d and rg.rank % 3:
                b._d = a._d  # shared; every third rank keeps its own equal tuples
    n = len(wl.ranks[5].nodes)
    assert all(len(rg.nodes) == n for rg in wl.ranks[4:8])  # one node count: one dep cache
    wl.ranks[5].nodes[7].data_deps = [*wl.ranks[5].nodes[7].data_deps, 0]
    wl.ranks[6].nodes[3].duration_micros += 1
    comp = next(nd for nd in wl.ranks[7].nodes if nd.type == NodeType.COMP_NODE)
    comp._d = next(nd for nd in base if nd.type == NodeType.COMM_COLL_NODE)._d
    check(wl)
    check(wl, ROOFLINE, "explicit")


def test_ranks_cycling_through_more_deps_variants_than_kept_compile_alike():
    """Ranks of one node count whose deps take turns among more variants than the batch path
    keeps (each found again while kept, made again once dropped) compile as the reference."""
    from genie.sim import batch_compile

    wl = data_parallel(16, layers=4)
    n = len(wl.ranks[0].nodes)
    assert all(len(rg.nodes) == n for rg in wl.ranks)
    variants = batch_compile._DEPS_KEPT + 2
    for rg in wl.ranks:
        k = 1 + rg.rank % variants  # a dep of node k on node 0 marks the rank's variant
        rg.nodes[k].data_deps = [*rg.nodes[k].data_deps, rg.nodes[0].id]
    check(wl)
    check(wl, ROOFLINE, "explicit")


def test_ranks_like_an_earlier_one_take_its_probes_only_where_the_tuple_is_the_same(
    monkeypatch,
):
    """A rank with an earlier rank's node types and durations takes that rank's probe where its
    node holds the very same derived tuple; a tuple of another value (or an equal one that is
    another object, or the same object at a node of another duration) is worked out, and a
    rank whose tuples mostly differ is looked up as a whole: the arrays are the reference's,
    and the ranks sharing tuples were found."""
    from genie.sim import batch_compile

    wl = llm(16, tp=2, pp=2, layers=4)
    base = {len(rg.nodes): rg.nodes for rg in wl.ranks[:2]}
    for rg in wl.ranks:
        first = base[len(rg.nodes)]
        if first is rg.nodes:
            continue
        for a, b in zip(first, rg.nodes, strict=True):
            if not rg.rank % 4:
                b._d = tuple(list(b._d))  # every fourth rank: equal tuples, all its own
            elif a._d == b._d and a.type == b.type:
                b._d = a._d  # shared as readers share them
    comp = [nd for nd in wl.ranks[9].nodes if nd.type == NodeType.COMP_NODE]
    comp[0].set_attr("num_ops", "int64_val", 12345)  # another value at one place (roofline)
    wl.ranks[10].nodes[3].duration_micros += 1  # another duration: the rank is worked out
    seen = []
    real = batch_compile._LikeRanks.find

    def find(self, nodes):
        got = real(self, nodes)
        seen.append(got is not None)
        return got

    check(wl)
    monkeypatch.setattr(batch_compile._LikeRanks, "find", find)
    check(wl, ROOFLINE, "explicit")
    assert len(seen) == len(wl.ranks)  # (asked in rank order)
    assert not any(seen[r] for r in range(4, 16, 4))  # all tuples its own: looked up at once
    assert sum(seen) >= 6  # the second rank of a tp pair shares the first's tuples


def test_ranks_of_all_different_durations_stop_the_lookups():
    """Ranks whose durations all differ (traced ones) find no earlier rank like them: after
    ``GIVE_UP`` of them the lookups stop, and the workload compiles as the reference does."""
    from genie.sim import batch_compile

    wl = data_parallel(batch_compile._LikeRanks.GIVE_UP + 6, layers=2)
    for rg in wl.ranks:
        for nd in rg.nodes:
            nd.duration_micros += rg.rank + 1
    like = batch_compile._LikeRanks()
    for rg in wl.ranks:
        assert like.find(rg.nodes) is None
        like.add([0] * len(rg.nodes))
    assert like.misses == like.GIVE_UP and not like.hits and like._last == ()
    check(wl)


def test_like_ranks_keep_lists_for_a_bounded_number_of_node_counts(monkeypatch):
    """Ranks of more node counts than ``MAX_COUNTS``: the counts past it are not kept (each
    such rank looked up whole), and the workload compiles as the reference does."""
    from genie.sim import batch_compile

    monkeypatch.setattr(batch_compile._LikeRanks, "MAX_COUNTS", 2)
    wl = data_parallel(8, layers=2)
    for rg in wl.ranks[4:]:  # two more node counts: ranks 4-5 and 6-7 drop nodes at the end
        del rg.nodes[len(rg.nodes) - 1 - rg.rank // 6 :]
    like = batch_compile._LikeRanks()
    found = []
    for rg in wl.ranks:
        found.append(like.find(rg.nodes) is not None)
        like.add([0] * len(rg.nodes))
    assert len(like.by_count) == 2 and len({len(rg.nodes) for rg in wl.ranks}) == 3
    assert any(found[:4]) and not any(found[6:])
    check(wl)


def test_ranks_alike_but_sharing_no_tuples_stop_the_lookups():
    """Ranks of one structure and durations whose derived tuples are each their own (a reader
    that shares none) are looked up whole; after ``GIVE_UP_UNSHARED`` such ranks the lookups
    stop, and the workload compiles as the reference does."""
    from genie.sim import batch_compile

    wl = data_parallel(12, layers=2)
    for rg in wl.ranks:
        for nd in rg.nodes:
            nd._d = tuple(list(nd._d))  # equal to the other ranks' tuples, never the same
    like = batch_compile._LikeRanks()
    found = []
    for rg in wl.ranks:
        found.append(like.find(rg.nodes))
        like.add([0] * len(rg.nodes))
    assert found == [None] * len(wl.ranks) and not like.hits
    assert like.unshared == like.GIVE_UP_UNSHARED  # then no longer asked
    check(wl)


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter"])
def test_real_astra_samples_compile_alike(coll):
    prefix = SAMPLES / "astra-sim" / "microbenchmarks" / coll / "4npus_1MB"
    if not SAMPLES.is_dir():
        pytest.skip(f"the real samples are not at {SAMPLES}")
    wl = load_workload(prefix)
    check(wl)
    check(wl, ROOFLINE, "explicit")


def _node(nid: int, t: int, deps: list[int], **attrs) -> Node:
    kinds = {"comm_type": "int64_val", "comm_size": "int64_val", "comm_dst": "int32_val"}
    kinds |= {"comm_src": "int32_val", "pg_name": "string_val", "comm_tag": "int64_val"}
    return Node(
        nid,
        f"n{nid}",
        t,
        data_deps=deps,
        duration_micros=5,
        attrs=[Attr(k, kinds[k], v) for k, v in attrs.items()],
    )


def test_point_to_point_pairs_lone_sides_and_empty_ranks():
    ranks = [
        RankGraph(0, [_node(0, NodeType.COMP_NODE, [])]),
        RankGraph(1, []),
        RankGraph(2, [_node(0, NodeType.COMP_NODE, [])]),
    ]
    send, recv = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE
    for tag in (3, 1):
        ranks[0].nodes.append(
            _node(len(ranks[0].nodes), send, [0], comm_dst=2, comm_size=64, comm_tag=tag)
        )
        ranks[2].nodes.append(
            _node(len(ranks[2].nodes), recv, [0], comm_src=0, comm_size=64, comm_tag=tag)
        )
    ranks[2].nodes.append(_node(3, send, [], comm_dst=0, comm_size=8))  # never received
    check(Workload(ranks=ranks))


def test_bad_workloads_fail_as_the_reference_fails():
    wl = data_parallel(4, layers=2)
    coll = next(nd for nd in wl.ranks[2].nodes if nd.type == NodeType.COMM_COLL_NODE)
    coll.set_attr("pg_name", "string_val", "nobody")
    assert batch(wl, ComputeModel(), "inferred") is None
    with pytest.raises(GenieError) as ref:
        compile_reference(wl)
    with pytest.raises(GenieError) as new:
        compile_workload(wl)
    assert str(new.value) == str(ref.value) and type(new.value) is type(ref.value)
    # a send and its receive of different sizes: the loop names them
    b = GraphBuilder(2)
    b.send(0, 1, 100)
    b.recv(1, 0, 200)
    with pytest.raises(CollectiveError, match="differ in size"):
        b.build()


def test_ordering_ranks_whose_node_order_is_not_topological():
    b = GraphBuilder(2)
    b.group("world")
    for r in range(2):
        first = b.compute(r, 1e-3, deps=[3])  # waits on a later node
        b.collective(r, "all_reduce", 1 << 20, deps=[first])
        b.collective(r, "all_reduce", 1 << 20)
        b.compute(r, 1e-3)
        b.collective(r, "all_reduce", 1 << 20, deps=[first])
    cw = b.build()
    for k in (1, 2):
        same(order_reference(cw, k), order_collectives(cw, k), f"k={k}")
    assert order_collectives(cw, 1) is not cw


def test_the_batch_path_sets_every_field_of_a_compiled_rank():
    assert tuple(f.name for f in dataclasses.fields(compiled.CompiledRank)) == _RANK_FIELDS
    cw = batch(llm(8, tp=2, pp=2, layers=2), TRACE, "inferred")
    assert cw is not None and set(vars(cw.ranks[0])) == set(_RANK_FIELDS)


def _on(nid: int, stream: int | None, cpu: bool = False) -> Node:
    attrs = [Attr("is_cpu_op", "bool_val", cpu)]
    if stream is not None:
        attrs.append(Attr("stream", "int64_val", stream))
    return Node(nid, f"k{nid}", NodeType.COMP_NODE, duration_micros=3, attrs=attrs)


def test_lanes_are_numbered_per_rank_in_order_of_first_appearance():
    orders = [[5, 3, 5], [3, None, 5, 3], [], [7], [None, 5]]
    ranks = [
        RankGraph(r, [_on(i, s, cpu=(r == 1 and i == 1)) for i, s in enumerate(streams)])
        for r, streams in enumerate(orders)
    ]
    wl = Workload(ranks=ranks)
    check(wl, edges="explicit")
    got = compile_workload(wl, edges="explicit")
    assert got.ranks[0].lane_names == ["stream 5", "stream 3"]
    assert got.ranks[1].lane_names == ["stream 3", "cpu", "stream 5"]
    assert got.ranks[2].lane_names == [] and got.ranks[4].lane_names == ["gpu", "stream 5"]
    assert got.ranks[1].lane.tolist() == [0, 1, 2, 0]
