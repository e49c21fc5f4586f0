"""Generators: valid Chakra for ASTRA-sim, matching collective sequences across group ranks."""

from __future__ import annotations

import pytest

from genie.workload import CollectiveType, NodeType, load_workload, save_workload
from genie.workload.generators import data_parallel, llm, microbench, moe
from genie.workload.graph import check_collective_sequences, collective_sequences
from genie.workload.model import Attr
from genie.workload.validate import validate_workload

CASES = [
    ("microbench", lambda: microbench(4, [1024, 1 << 20], list(CollectiveType))),
    ("dp", lambda: data_parallel(4)),
    ("llm", lambda: llm(8, tp=2, pp=2)),
    ("llm-zero", lambda: llm(16, tp=2, pp=2, zero=True, layers=4)),
    ("llm-tp4", lambda: llm(8, tp=4, pp=1, layers=2)),
    ("moe", lambda: moe(4)),
]


@pytest.mark.parametrize("name,make", CASES, ids=[c[0] for c in CASES])
def test_generated_workloads_validate_and_sequences_match(name, make, tmp_path) -> None:
    wl = make()
    assert validate_workload(wl) == []
    assert check_collective_sequences(wl) == []
    seqs = collective_sequences(wl)
    for g, per_rank in seqs.items():
        assert set(per_rank) == set(wl.groups[g]), g  # every member takes part
    # and the same holds after a trip through files
    save_workload(wl, tmp_path / name)
    back = load_workload(tmp_path / name)
    assert back.problems == [] and back.groups == wl.groups


def test_sequence_check_catches_a_changed_size() -> None:
    wl = llm(8, tp=2, pp=2, layers=2)
    rank3 = wl.ranks[3]
    n = next(x for x in rank3.nodes if x.type == NodeType.COMM_COLL_NODE)
    n.set_attr("comm_size", "int64_val", n.comm_size + 1)
    problems = check_collective_sequences(wl)
    assert len(problems) == 1 and "rank 3" in problems[0] and "collective #0" in problems[0]


def test_attr_kinds_are_what_astra_sim_reads() -> None:
    wl = llm(8, tp=2, pp=2, layers=2)
    for rg in wl.ranks:
        assert rg.metadata.version == "0.0.4"
        for n in rg.nodes:
            kinds = {a.name: a.kind for a in n.attrs}
            assert kinds["is_cpu_op"] == "bool_val"
            if n.type == NodeType.COMM_COLL_NODE:
                assert kinds["comm_type"] == kinds["comm_size"] == "int64_val"
            if n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                assert kinds["comm_src"] == kinds["comm_dst"] == kinds["comm_tag"] == "int32_val"


def test_microbench_covers_each_type_and_size() -> None:
    wl = microbench(2, [1024, 4096], [CollectiveType.ALL_REDUCE, CollectiveType.ALL_TO_ALL], 2)
    got = [(n.comm_type, n.comm_size) for n in wl.ranks[1].nodes]
    assert got == [(0, 1024)] * 2 + [(0, 4096)] * 2 + [(6, 1024)] * 2 + [(6, 4096)] * 2
    assert all(n.data_deps == [n.id - 1] for n in wl.ranks[0].nodes[1:])


def _ancestors(rank, nid):
    seen, todo = set(), [nid]
    while todo:
        for d in rank.by_id[todo.pop()].data_deps:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_dp_all_reduce_buckets_overlap_backward() -> None:
    wl = data_parallel(2, layers=6, hidden=1024, bucket_bytes=50 * 2**20)
    r = wl.ranks[0]
    ars = [n for n in r.nodes if n.type == NodeType.COMM_COLL_NODE]
    # 24 MiB of gradients per layer in tensors of 8, 8, 2, 6 MiB (fc2, fc1, proj, qkv); DDP
    # closes a bucket once it holds 50 MiB or more: 56, 56, 32 (the rest)
    assert [n.comm_size >> 20 for n in ars] == [56, 56, 32]
    assert sum(n.comm_size for n in ars) == 6 * 12 * 1024 * 1024 * 2
    first = ars[0].id
    later_bwd = [n for n in r.nodes if n.name.startswith("bwd") and n.id > first]
    assert later_bwd and all(first not in _ancestors(r, n.id) for n in later_bwd)
    opt = r.nodes[-1]
    assert opt.name == "optimizer_step" and {a.id for a in ars} <= _ancestors(r, opt.id)
    # compute from FLOPs at peak x efficiency: forward of a layer = 2 * tokens * params
    fwd = r.nodes[0]
    flops = 2 * 8 * 1024 * 12 * 1024 * 1024
    assert fwd.num_ops == flops
    assert fwd.duration_s == pytest.approx(flops / (989e12 * 0.5), abs=1e-6)


@pytest.mark.parametrize("cap_mib", [1, 25, 100, 1024])
def test_dp_bucket_cap_is_honoured(cap_mib: int) -> None:
    wl = data_parallel(2, layers=12, hidden=2048, bucket_bytes=cap_mib << 20)
    sizes = [n.comm_size for n in wl.ranks[0].nodes if n.type == NodeType.COMM_COLL_NODE]
    assert sum(sizes) == 12 * 12 * 2048 * 2048 * 2  # every gradient once, none split
    biggest_tensor = 4 * 2048 * 2048 * 2
    assert all(s >= cap_mib << 20 for s in sizes[:-1])  # closed once the cap is reached
    assert all(s < (cap_mib << 20) + biggest_tensor for s in sizes)


def test_llm_layout_groups_and_pipeline() -> None:
    wl = llm(8, tp=2, pp=2, layers=4, micro_batches=3)
    assert wl.groups["tp_d0_p1"] == (2, 3) and wl.groups["dp_p1_t0"] == (2, 6)
    r0, r2 = wl.ranks[0], wl.ranks[2]
    sends = [n for n in r0.nodes if n.type == NodeType.COMM_SEND_NODE]
    recvs = [n for n in r2.nodes if n.type == NodeType.COMM_RECV_NODE]
    assert len(sends) == 3 and all(n.peer == 2 for n in sends)  # activations to the next stage
    assert len(recvs) == 3 and all(n.peer == 0 for n in recvs)
    tp_ar = [n for n in r0.nodes if n.pg_name == "tp_d0_p0"]
    assert len(tp_ar) == 2 * 2 * 3 * 2  # 2 blocks/stage x (attn, mlp) x 3 mb x (fwd, bwd)
    assert all(n.comm_size == 2048 * 4096 * 2 for n in tp_ar)
    dp_ar = [n for n in r0.nodes if n.pg_name == "dp_p0_t0"]
    assert [n.comm_type for n in dp_ar] == [0, 0]  # one gradient all-reduce per block


def test_moe_all_to_all() -> None:
    wl = moe(4, layers=2)
    a2a = [n for n in wl.ranks[0].nodes if n.comm_type == CollectiveType.ALL_TO_ALL]
    assert len(a2a) == 8 and len({n.comm_size for n in a2a}) == 1


def test_generator_metadata_records_groups() -> None:
    wl = llm(8, tp=2, pp=2, layers=2)
    attrs = {a.name: a for a in wl.ranks[5].metadata.attrs}
    assert attrs["pg_ranks:tp_d1_p0"] == Attr("pg_ranks:tp_d1_p0", "int64_list", [4, 5])
    assert "tp=2" in attrs["generator"].value


PROTO_CASES = [*CASES, ("moe-skew", lambda: moe(8, expert_skew=0.5)), ("llm-64", lambda: llm(64))]


@pytest.mark.parametrize("name,make", PROTO_CASES, ids=[c[0] for c in PROTO_CASES])
def test_nodes_copied_from_prototypes_equal_nodes_built_each_time(name, make, monkeypatch):
    """Ranks repeat nodes: the builders copy them from the first one made (``protos``); the
    workload is node for node and byte for byte the one built node by node, and no two ranks
    share a list."""
    from genie.workload.et_codec import encode_trace
    from genie.workload.generators import builder

    shared = make()
    made = builder.RankBuilder.__init__
    seen: list = []

    def each_time(self, rank, protos=None):
        seen.append(protos is not None)
        made(self, rank, None)

    monkeypatch.setattr(builder.RankBuilder, "__init__", each_time)
    alone = make()
    assert seen and all(seen)  # the generator did hand its builders a shared dict
    assert [rg.nodes for rg in shared.ranks] == [rg.nodes for rg in alone.ranks]
    for a, b in zip(shared.ranks, alone.ranks, strict=True):
        assert encode_trace(a.metadata, a.nodes) == encode_trace(b.metadata, b.nodes)
    lists = [
        id(x)
        for rg in shared.ranks
        for n in rg.nodes
        for x in (n.attrs, n.data_deps, n.raw_ctrl_deps)
    ]
    assert len(lists) == len(set(lists))


def test_a_copied_node_changes_alone():
    """Changing one rank's node (as ``to_integer_groups`` renames a group) leaves the rank
    it was copied from, or to, as it was."""
    wl = llm(16, tp=2, pp=2, layers=2)
    a, b = wl.ranks[0].nodes, wl.ranks[4].nodes  # same stage and tensor index: equal computes
    assert a[0] == b[0] and a[0] is not b[0]
    before = b[0].copy()
    a[0].set_attr("num_ops", "int64_val", 7)
    a[0].data_deps.append(99)
    assert b[0] == before and b[0].num_ops != 7


def test_node_copy_sets_every_slot():
    """``Node.copy`` names each slot (for speed): a slot added later must be copied too."""
    from genie.workload.model import Node

    n = Node(
        3,
        "x",
        NodeType.COMP_NODE,
        data_deps=[1],
        ctrl_deps=[2],
        duration_micros=5,
        attrs=[Attr("num_ops", "int64_val", 9)],
    )
    c = n.copy()
    for slot in Node.__slots__:
        assert getattr(c, slot) == getattr(n, slot), slot
    assert c == n and c.data_deps is not n.data_deps and c.ctrl_deps is c.raw_ctrl_deps
